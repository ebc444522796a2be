//! Ingress status in kube mode: the proxy writes what the compile decided
//! (`status.loadBalancer.ingress`: a tenant Ingress's assigned hostname
//! `INGRESS.CLUSTER.lb.DOMAIN`, an operator Ingress's `--status-address`es)
//! back to the API, so `kubectl get ingress` shows it and the agent can
//! copy it to the tenant cluster.
//!
//! - Server-side apply of `/status` under field manager `teapot-proxy`,
//!   so other writers' fields are left alone.
//! - Only when it changed: the desired status is compared with the status
//!   of the object as the watch last delivered it, and a write is not
//!   repeated for the same object version.
//! - Only from one replica: a `coordination.k8s.io/v1` Lease (kube's
//!   runtime has no leader election; this is the client-go protocol,
//!   simplified: holder, renew time and duration, optimistic concurrency on
//!   `resourceVersion`). The others stand by and take over when the lease
//!   runs out.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::networking::v1::{Ingress, IngressStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use tokio::sync::watch;

use crate::kube_source::{KubeConfig, KubeSource};
use crate::reload::Source;
use crate::snapshot::SnapshotHandle;
use crate::store::NsName;

/// Field manager of every status write.
pub const FIELD_MANAGER: &str = "teapot-proxy";

/// Where the lease lives and how it is timed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusOptions {
    pub lease_namespace: String,
    pub lease_name: String,
    /// This replica's name in the lease (pod name and pid by default).
    pub identity: String,
    /// How long a lease holds without renewal.
    pub lease_duration: Duration,
    /// How often the lease is renewed (or tried for) and statuses checked.
    pub renew_every: Duration,
}

impl StatusOptions {
    pub fn new(lease_namespace: impl Into<String>) -> StatusOptions {
        let host = std::env::var("HOSTNAME")
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| {
                std::fs::read_to_string("/etc/hostname")
                    .ok()
                    .map(|h| h.trim().to_string())
            })
            .unwrap_or_else(|| "teapot".into());
        StatusOptions {
            lease_namespace: lease_namespace.into(),
            lease_name: "teapot-proxy-status".into(),
            identity: format!("{host}_{}", std::process::id()),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
        }
    }
}

/// Starts [`run`] when the proxy runs in kube mode with status writes on.
pub fn spawn(
    config: Option<&KubeConfig>,
    source: &Source,
    snapshots: &SnapshotHandle,
    generations: watch::Receiver<u64>,
    shutdown: watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    let (Some(config), Source::Kube(source)) = (config, source) else {
        return None;
    };
    let options = config.status.clone()?;
    Some(tokio::spawn(run(
        config.client.clone(),
        options,
        source.clone(),
        snapshots.clone(),
        generations,
        shutdown,
    )))
}

/// Holds (or waits for) the lease and writes statuses while it holds it,
/// until `shutdown` turns true.
pub async fn run(
    client: kube::Client,
    options: StatusOptions,
    source: KubeSource,
    snapshots: SnapshotHandle,
    mut generations: watch::Receiver<u64>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut lease = LeaderLease::new(client.clone(), options.clone());
    let mut writer = StatusWriter::new(client);
    let mut tick = tokio::time::interval(options.renew_every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut leading = false;
    loop {
        tokio::select! {
            _ = tick.tick() => {
                let now = lease.try_lead().await;
                if now != leading {
                    tracing::info!(identity = %options.identity, leading = now, "Ingress status lease");
                    writer.forget();
                }
                leading = now;
            }
            changed = generations.changed() => if changed.is_err() { return },
            _ = stopped(&mut shutdown) => return,
        }
        let compiled = *generations.borrow() > 0;
        if leading && compiled {
            writer.sync(&source, &snapshots).await;
        }
    }
}

/// Resolves when `shutdown` turns true (the guard `wait_for` returns is
/// not `Send`, so it must not be held in a spawned task's `select!`).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|s| *s).await;
}

/// Writes the statuses that differ from what the API has.
struct StatusWriter {
    client: kube::Client,
    /// What was written last, for which object version: no repeats while
    /// the watch has not delivered the write yet.
    written: HashMap<NsName, (String, Arc<IngressStatus>)>,
}

impl StatusWriter {
    fn new(client: kube::Client) -> StatusWriter {
        StatusWriter {
            client,
            written: HashMap::new(),
        }
    }

    fn forget(&mut self) {
        self.written.clear();
    }

    async fn sync(&mut self, source: &KubeSource, snapshots: &SnapshotHandle) {
        let snapshot = snapshots.load_full();
        let store = source.snapshot().store;
        for report in snapshot.report.ingresses.iter().filter(|r| r.served) {
            let id = NsName::new(report.namespace.clone(), report.name.clone());
            let Some(stored) = store.ingresses.get(&id) else {
                continue;
            };
            let current = stored.object.status.as_ref();
            let desired = &report.status;
            if current.and_then(|s| s.load_balancer.as_ref()) == desired.load_balancer.as_ref() {
                continue;
            }
            let version = stored
                .object
                .metadata
                .resource_version
                .clone()
                .unwrap_or_default();
            if self
                .written
                .get(&id)
                .is_some_and(|(v, s)| *v == version && s == desired)
            {
                continue;
            }
            match self.write(&id, desired).await {
                Ok(()) => {
                    tracing::info!(ingress = %id, status = ?desired.load_balancer, "Ingress status written");
                    self.written.insert(id, (version, desired.clone()));
                }
                Err(e) => {
                    tracing::warn!(ingress = %id, error = %e, "cannot write Ingress status; retrying later")
                }
            }
        }
        self.written
            .retain(|id, _| store.ingresses.contains_key(id));
    }

    async fn write(&self, id: &NsName, status: &IngressStatus) -> Result<(), kube::Error> {
        let api: Api<Ingress> = Api::namespaced(self.client.clone(), &id.namespace);
        let body = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": id.name, "namespace": id.namespace},
            "status": status,
        });
        api.patch_status(
            &id.name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(body),
        )
        .await
        .map(drop)
    }
}

/// One replica's side of the lease.
struct LeaderLease {
    api: Api<Lease>,
    options: StatusOptions,
}

impl LeaderLease {
    fn new(client: kube::Client, options: StatusOptions) -> LeaderLease {
        LeaderLease {
            api: Api::namespaced(client, &options.lease_namespace),
            options,
        }
    }

    /// Takes or renews the lease; returns whether this replica holds it.
    /// Any API error means "not leading": two writers are worse than a
    /// status that is late.
    async fn try_lead(&mut self) -> bool {
        match self.try_lead_inner().await {
            Ok(leading) => leading,
            Err(e) => {
                tracing::warn!(lease = %self.options.lease_name, error = %e, "lease check failed; not writing statuses");
                false
            }
        }
    }

    async fn try_lead_inner(&mut self) -> Result<bool, kube::Error> {
        let me = &self.options.identity;
        let now = Timestamp::now();
        let duration = i32::try_from(self.options.lease_duration.as_secs()).unwrap_or(i32::MAX);
        let Some(mut lease) = self.api.get_opt(&self.options.lease_name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.options.lease_name.clone()),
                    namespace: Some(self.options.lease_namespace.clone()),
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
        // The resourceVersion from the read makes this a compare-and-swap:
        // of two replicas racing for an expired lease, one gets 409.
        match self
            .api
            .replace(&self.options.lease_name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_testkit::apiserver::ApiServer;

    fn options(identity: &str) -> StatusOptions {
        StatusOptions {
            identity: identity.into(),
            lease_duration: Duration::from_secs(3600),
            ..StatusOptions::new("teapot-system")
        }
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
        let mut stale = api
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "teapot-system",
                "teapot-proxy-status",
            )
            .unwrap();
        stale["spec"]["renewTime"] = serde_json::json!("2000-01-01T00:00:00.000000Z");
        api.apply(stale);
        assert!(b.try_lead().await);
        assert!(!a.try_lead().await);
        let lease = api
            .get(
                "coordination.k8s.io/v1",
                "Lease",
                "teapot-system",
                "teapot-proxy-status",
            )
            .unwrap();
        assert_eq!(lease["spec"]["holderIdentity"], "b");
        assert_eq!(lease["spec"]["leaseTransitions"], 1);
    }
}
