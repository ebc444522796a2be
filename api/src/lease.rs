//! Leader election on a `coordination.k8s.io/v1` Lease, for the jobs that
//! exactly one replica may do: the proxy's status writes, the fleet's ACME
//! issuer, the agent's reconcilers.
//!
//! kube's runtime has no leader election; this is the client-go protocol,
//! simplified: holder, renew time and duration, optimistic concurrency on
//! `resourceVersion`. A replica that is not sure it holds the lease acts as
//! if it did not: a late write is better than two writers.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, PostParams};

/// Which lease, who is asking, and how it is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseOptions {
    pub namespace: String,
    pub name: String,
    /// This replica's name in the lease (pod name and pid by default).
    pub identity: String,
    /// How long a lease holds without renewal.
    pub duration: Duration,
    /// How often the holder renews (and the others try).
    pub renew_every: Duration,
}

impl LeaseOptions {
    /// A 15 s lease renewed every 5 s, held by `HOSTNAME` (the pod name)
    /// and this process's pid.
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> LeaseOptions {
        LeaseOptions {
            namespace: namespace.into(),
            name: name.into(),
            identity: default_identity(),
            duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }
}

/// `HOSTNAME` (a pod's name), else `/etc/hostname`, plus the pid so that two
/// processes on one host are two candidates.
pub fn default_identity() -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/etc/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "teapot".into());
    format!("{host}_{}", std::process::id())
}

/// One replica's side of the lease.
pub struct LeaderLease {
    api: Api<Lease>,
    options: LeaseOptions,
}

impl LeaderLease {
    pub fn new(client: kube::Client, options: LeaseOptions) -> LeaderLease {
        LeaderLease {
            api: Api::namespaced(client, &options.namespace),
            options,
        }
    }

    /// Takes or renews the lease; returns whether this replica holds it.
    /// Any API error means "not leading": two writers are worse than a
    /// status that is late.
    pub async fn try_lead(&mut self) -> bool {
        match self.try_lead_inner().await {
            Ok(leading) => leading,
            Err(e) => {
                tracing::warn!(lease = %self.options.name, error = %e, "lease check failed; standing by");
                false
            }
        }
    }

    /// Gives the lease up at shutdown, so a standby takes over at its next
    /// try instead of after the lease duration (client-go's
    /// `ReleaseOnCancel`). Only a lease this replica holds is touched; a
    /// failure is logged and left to expire.
    pub async fn release(&mut self) {
        match self.release_inner().await {
            Ok(true) => tracing::info!(lease = %self.options.name, "lease released"),
            Ok(false) => {}
            Err(e) => {
                tracing::warn!(lease = %self.options.name, error = %e, "lease not released; it expires on its own")
            }
        }
    }

    async fn release_inner(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.options.name).await? else {
            return Ok(false);
        };
        let Some(spec) = lease.spec.as_mut() else {
            return Ok(false);
        };
        if spec.holder_identity.as_deref() != Some(self.options.identity.as_str()) {
            return Ok(false);
        }
        spec.holder_identity = None;
        spec.renew_time = Some(MicroTime(Timestamp::now()));
        // If someone else took it since the read, it is theirs and stays so.
        self.swap(&lease).await
    }

    async fn try_lead_inner(&mut self) -> Result<bool, kube::Error> {
        let me = &self.options.identity;
        let now = Timestamp::now();
        let duration = i32::try_from(self.options.duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.options.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.options.name.clone()),
                    namespace: Some(self.options.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(LeaseSpec {
                    holder_identity: Some(me.clone()),
                    lease_duration_seconds: Some(duration),
                    acquire_time: Some(MicroTime(now)),
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(0),
                    ..LeaseSpec::default()
                }),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        let held_by_me = spec.holder_identity.as_deref() == Some(me.as_str());
        let expired = match (&spec.renew_time, spec.lease_duration_seconds) {
            (Some(renewed), Some(secs)) => {
                renewed.0 + SignedDuration::from_secs(i64::from(secs)) < now
            }
            _ => true,
        };
        if !held_by_me && !expired && spec.holder_identity.is_some() {
            return Ok(false);
        }
        if !held_by_me {
            spec.holder_identity = Some(me.clone());
            spec.acquire_time = Some(MicroTime(now));
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
        }
        spec.renew_time = Some(MicroTime(now));
        spec.lease_duration_seconds = Some(duration);
        // Of two replicas racing for an expired lease, one gets 409.
        self.swap(&lease).await
    }

    /// Writes `lease` back; the resourceVersion from the read makes this a
    /// compare-and-swap, and losing it (409) is `Ok(false)`.
    async fn swap(&self, lease: &Lease) -> Result<bool, kube::Error> {
        match self
            .api
            .replace(&self.options.name, &PostParams::default(), lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// Runs `work` while this replica holds the Lease, and stands by while
/// another does. `work` gets a receiver that turns true when it must stop
/// (the Lease was lost, or `shutdown` turned true); `on_leading` hears when
/// leading starts and ends (health, metrics). Returns `work`'s result when
/// it ended on its own or after `shutdown` (releasing the Lease, so a
/// standby takes over at its next try), `None` when shutdown came while
/// standing by. The agent and `teapot capi` both lead this way.
pub async fn while_leading<T, Fut>(
    client: kube::Client,
    options: LeaseOptions,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
    mut on_leading: impl FnMut(bool),
    mut work: impl FnMut(tokio::sync::watch::Receiver<bool>) -> Fut,
) -> Option<Result<T, tokio::task::JoinError>>
where
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let stopped = |s: &mut tokio::sync::watch::Receiver<bool>| {
        let mut s = s.clone();
        async move {
            let _ = s.wait_for(|stop| *stop).await;
        }
    };
    let mut lease = LeaderLease::new(client, options.clone());
    let mut tick = tokio::time::interval(options.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        loop {
            tokio::select! {
                _ = tick.tick() => if lease.try_lead().await { break },
                _ = stopped(&mut shutdown) => return None,
            }
        }
        tracing::info!(identity = %options.identity, lease = %options.name, "holding the lease: working");
        on_leading(true);
        let (lost, lost_rx) = tokio::sync::watch::channel(false);
        let mut task = tokio::spawn(work(lost_rx));
        let ended = loop {
            tokio::select! {
                result = &mut task => break Some(result),
                _ = tick.tick() => if !lease.try_lead().await {
                    tracing::warn!(identity = %options.identity, lease = %options.name, "lost the lease: standing by");
                    break None;
                },
                _ = stopped(&mut shutdown) => {
                    let _ = lost.send(true);
                    break Some((&mut task).await);
                }
            }
        };
        if let Some(result) = ended {
            on_leading(false);
            lease.release().await;
            return Some(result);
        }
        let _ = lost.send(true);
        let _ = task.await;
        on_leading(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::apiserver::ApiServer;

    fn options(identity: &str) -> LeaseOptions {
        LeaseOptions {
            identity: identity.into(),
            duration: Duration::from_secs(3600),
            ..LeaseOptions::new("teapot-system", "teapot-proxy-status")
        }
    }

    fn stored(api: &ApiServer) -> serde_json::Value {
        api.get(
            "coordination.k8s.io/v1",
            "Lease",
            "teapot-system",
            "teapot-proxy-status",
        )
        .unwrap()
    }

    #[tokio::test]
    async fn one_replica_holds_the_lease_until_it_expires() {
        let api = ApiServer::start().await;
        let mut a = LeaderLease::new(api.client(), options("a"));
        let mut b = LeaderLease::new(api.client(), options("b"));
        assert!(a.try_lead().await);
        assert!(!b.try_lead().await);
        assert!(a.try_lead().await, "renewal");
        // A lease renewed long ago has expired: b takes over.
        let mut stale = stored(&api);
        stale["spec"]["renewTime"] = serde_json::json!("2000-01-01T00:00:00.000000Z");
        api.apply(stale);
        assert!(b.try_lead().await);
        assert!(!a.try_lead().await);
        let lease = stored(&api);
        assert_eq!(lease["spec"]["holderIdentity"], "b");
        assert_eq!(lease["spec"]["leaseTransitions"], 1);
    }

    #[tokio::test]
    async fn a_released_lease_is_taken_at_once_and_only_the_holder_releases() {
        let api = ApiServer::start().await;
        let mut a = LeaderLease::new(api.client(), options("a"));
        let mut b = LeaderLease::new(api.client(), options("b"));
        assert!(a.try_lead().await);
        // Not b's to give up: nothing changes.
        b.release().await;
        assert!(!b.try_lead().await);
        // a gives it up long before its hour is over; b takes it at once.
        a.release().await;
        assert!(b.try_lead().await);
        assert!(!a.try_lead().await);
        let lease = stored(&api);
        assert_eq!(lease["spec"]["holderIdentity"], "b");
    }
}
