//! Which replicas are live (docs/announce.md, "L2 mode"): one
//! `coordination.k8s.io/v1` Lease per replica, renewed every
//! `renew_every`, so the API cost grows with replicas, not with
//! addresses. The Lease's annotations carry the pools the replica may
//! announce and the addresses it owns now. Every replica watches the
//! announcer Leases and counts one live while it saw its Lease change
//! within the Lease's duration, on its own clock (client-go's rule: no
//! trust in the writer's clock, so clock skew cannot make two owners).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::runtime::{WatchStreamExt, reflector, watcher};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use super::live_replicas::{
    ANNOUNCER_LABEL, BFD_ANNOTATION, LEASE_MS_ANNOTATION, LEASE_PREFIX, LIVE_ANNOTATION,
    OWNED_ANNOTATION, Observed, POOLS_ANNOTATION, RENEWAL_IN_FLIGHT, View,
};

/// Renewal period and Lease duration by default with BFD: BFD counts a
/// dead replica gone in well under a second, the Lease is the slow path.
pub const RENEW_WITH_BFD: Duration = Duration::from_secs(1);
pub const LEASE_WITH_BFD: Duration = Duration::from_secs(2);
/// Without BFD (`--l2-bfd off`) the Lease alone tells a dead replica: it
/// is counted gone up to the Lease duration after its last renewal, plus
/// up to 0.1 s until the next owner looks and the time to take the
/// address, so 1.5 s keeps the failover under 2 s with a margin (a 2 s
/// Lease measured 2.003 s at worst). Renewing every 0.5 s leaves one
/// renewal that may be lost or late by up to 1 s before a live replica is
/// counted gone, at two API writes a second per replica.
pub const RENEW_WITHOUT_BFD: Duration = Duration::from_millis(500);
pub const LEASE_WITHOUT_BFD: Duration = Duration::from_millis(1500);

/// `--l2-renew` and `--l2-lease` (seconds, fractions allowed; `None`: the
/// default for the BFD setting), checked.
pub fn lease_timing(
    bfd: bool,
    renew: Option<f64>,
    lease: Option<f64>,
) -> Result<(Duration, Duration), String> {
    let (default_renew, default_lease) = if bfd {
        (RENEW_WITH_BFD, LEASE_WITH_BFD)
    } else {
        (RENEW_WITHOUT_BFD, LEASE_WITHOUT_BFD)
    };
    let seconds = |flag: &str, value: Option<f64>, default: Duration| match value {
        None => Ok(default),
        Some(s) => Duration::try_from_secs_f64(s)
            .ok()
            .filter(|d| *d >= Duration::from_millis(100))
            .ok_or_else(|| format!("{flag} {s}: seconds, at least 0.1")),
    };
    let renew = seconds("--l2-renew", renew, default_renew)?;
    let lease = seconds("--l2-lease", lease, default_lease)?;
    if renew >= lease {
        return Err(format!(
            "--l2-renew {} must be below --l2-lease {}: a replica renewing no faster than its Lease expires flaps",
            renew.as_secs_f64(),
            lease.as_secs_f64()
        ));
    }
    Ok((renew, lease))
}

/// A Lease name may only hold lower-case letters, digits, `-` and `.`.
pub fn replica_name(identity: &str) -> String {
    let name: String = identity
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let name = name.trim_matches(|c| c == '-' || c == '.').to_string();
    let name = if name.is_empty() {
        "teapot".into()
    } else {
        name
    };
    name.chars().take(253 - LEASE_PREFIX.len()).collect()
}

fn join<T: ToString>(items: impl IntoIterator<Item = T>) -> String {
    items
        .into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// The addresses of `mine` (address -> its pool) whose next owner, the
/// hash's choice among the other live replicas of the pool, does not list
/// it as owned yet. An address no other replica may take is not waited
/// for.
pub fn not_handed_over(
    view: &View,
    me: &str,
    mine: &BTreeMap<IpAddr, String>,
    now: Instant,
) -> Vec<IpAddr> {
    mine.iter()
        .filter(|(addr, pool)| {
            let mut live = view.live(pool, now);
            live.remove(me);
            match teapot_announce::l2::owner(addr, &live) {
                None => false,
                Some(next) => !view
                    .leases
                    .get(next)
                    .is_some_and(|o| o.owned.contains(addr)),
            }
        })
        .map(|(addr, _)| *addr)
        .collect()
}

/// Waits until each of `mine` is listed as owned by its next owner, or
/// `bound` passed; returns what was still not handed over.
pub async fn wait_handed_over(
    mut view: watch::Receiver<View>,
    me: &str,
    mine: &BTreeMap<IpAddr, String>,
    bound: Duration,
) -> Vec<IpAddr> {
    let deadline = tokio::time::Instant::now() + bound;
    loop {
        let left = not_handed_over(&view.borrow_and_update(), me, mine, Instant::now());
        if left.is_empty() {
            return left;
        }
        tokio::select! {
            r = view.changed() => if r.is_err() { return left },
            // Liveness also changes with time alone.
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = tokio::time::sleep_until(deadline) => return left,
        }
    }
}

#[derive(Clone, Debug)]
pub struct MembershipConfig {
    pub namespace: String,
    pub replica: String,
    /// The pools this replica may announce (written on its Lease).
    pub pools: BTreeSet<String>,
    pub renew_every: Duration,
    pub duration: Duration,
    /// A Lease seen unchanged this long belongs to a replica that died
    /// without deleting it (SIGKILL, a lost node): deleted, so dead
    /// replicas do not pile up.
    pub forget_after: Duration,
    /// BFD with the other replicas of its pools; `None`: liveness by the
    /// Lease alone.
    pub bfd: Option<crate::loops::announce::peer_liveness::LivenessConfig>,
}

impl MembershipConfig {
    /// Ten lease durations, at least 30 s: far beyond any renewal hiccup.
    pub fn forget_after(duration: Duration) -> Duration {
        (duration * 10).max(Duration::from_secs(30))
    }
}

/// This replica's side: its own Lease, and the watch of all of them.
#[derive(Debug)]
pub struct Membership {
    view: watch::Receiver<View>,
    healthy: watch::Receiver<bool>,
    leave: watch::Sender<bool>,
    renewer: JoinHandle<()>,
    watcher: JoinHandle<()>,
    liveness: Option<JoinHandle<()>>,
    pub errors: Arc<AtomicU64>,
    /// How often the BFD liveness loop looked (`/metrics`): at rest only
    /// when a Lease changes.
    pub liveness_wakes: Arc<AtomicU64>,
}

impl Membership {
    /// Starts renewing (while `ready`) and watching. `owned`: the
    /// addresses this replica holds, written on its Lease at once when
    /// they change.
    pub fn start(
        client: kube::Client,
        config: MembershipConfig,
        ready: Arc<AtomicBool>,
        owned: watch::Receiver<BTreeSet<IpAddr>>,
    ) -> Membership {
        let (_none, annotations) = watch::channel(BTreeMap::new());
        Membership::start_with(client, config, ready, owned, annotations)
    }

    /// [`Membership::start`] with more annotations on the Lease (the BGP
    /// sessions): written with each renewal as they are then, never on
    /// their own, so what changes often costs no API write.
    pub fn start_with(
        client: kube::Client,
        config: MembershipConfig,
        ready: Arc<AtomicBool>,
        owned: watch::Receiver<BTreeSet<IpAddr>>,
        annotations: watch::Receiver<BTreeMap<String, String>>,
    ) -> Membership {
        let api: Api<Lease> = Api::namespaced(client, &config.namespace);
        let (view_tx, view) = watch::channel(View {
            me: config.replica.clone(),
            ..View::default()
        });
        let (healthy_tx, healthy) = watch::channel(false);
        let (leave, leave_rx) = watch::channel(false);
        let errors = Arc::new(AtomicU64::new(0));
        let liveness_wakes = Arc::new(AtomicU64::new(0));
        let liveness = config.bfd.clone().map(|bfd| {
            tokio::spawn(crate::loops::announce::peer_liveness::run(
                config.replica.clone(),
                bfd,
                view_tx.clone(),
                liveness_wakes.clone(),
            ))
        });
        let watcher = tokio::spawn(watch_leases(api.clone(), config.duration, view_tx));
        let renewer = tokio::spawn(
            Renewer {
                api,
                config,
                view: view.clone(),
                ready,
                owned,
                annotations,
                leave: leave_rx,
                healthy: healthy_tx,
                errors: errors.clone(),
            }
            .run(),
        );
        Membership {
            view,
            healthy,
            leave,
            renewer,
            watcher,
            liveness,
            errors,
            liveness_wakes,
        }
    }

    pub fn view(&self) -> watch::Receiver<View> {
        self.view.clone()
    }

    /// True while this replica's own renewals succeed (within the lease
    /// duration of the last success) and it is ready.
    pub fn healthy(&self) -> watch::Receiver<bool> {
        self.healthy.clone()
    }

    /// Deletes this replica's Lease (bounded: an API that does not answer
    /// lets it expire) and stops renewing; the watch goes on for the
    /// hand-over.
    pub async fn leave(&self) {
        let _ = self.leave.send(true);
        let renewer = &self.renewer;
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while !renewer.is_finished() {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        self.renewer.abort();
        self.watcher.abort();
        if let Some(liveness) = &self.liveness {
            liveness.abort();
        }
    }
}

async fn watch_leases(api: Api<Lease>, default_duration: Duration, view: watch::Sender<View>) {
    let (reader, writer) = reflector::store();
    let config = watcher::Config::default().labels(&format!("{ANNOUNCER_LABEL}=true"));
    let stream = watcher(api, config).default_backoff().reflect(writer);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        if let Err(e) = event {
            tracing::warn!(error = %e, "announcer Lease watch failed; retrying with backoff");
            continue;
        }
        let leases = reader.state();
        view.send_if_modified(|v| {
            let before = v.clone();
            v.observe(
                leases.iter().map(|l| l.as_ref()),
                Instant::now(),
                default_duration,
            );
            *v != before
        });
    }
}

/// The Lease this replica writes. `counts`: the replicas it counts live
/// now, itself among them only while its own watch shows its renewals.
fn own_lease(
    config: &MembershipConfig,
    owned: &BTreeSet<IpAddr>,
    counts: &BTreeSet<String>,
) -> Lease {
    let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
    let mut annotations: BTreeMap<String, String> = [
        (POOLS_ANNOTATION.to_string(), join(&config.pools)),
        (OWNED_ANNOTATION.to_string(), join(owned)),
        (LIVE_ANNOTATION.to_string(), join(counts)),
        (
            LEASE_MS_ANNOTATION.to_string(),
            config.duration.as_millis().max(1).to_string(),
        ),
    ]
    .into();
    if let Some(bfd) = &config.bfd {
        annotations.insert(BFD_ANNOTATION.to_string(), bfd.endpoint().to_string());
    }
    Lease {
        metadata: ObjectMeta {
            name: Some(format!("{LEASE_PREFIX}{}", config.replica)),
            namespace: Some(config.namespace.clone()),
            labels: Some([(ANNOUNCER_LABEL.to_string(), "true".to_string())].into()),
            annotations: Some(annotations),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(config.replica.clone()),
            // Whole seconds, rounded up, for readers other than teapot;
            // the replicas read the annotation.
            lease_duration_seconds: Some(
                i32::try_from(config.duration.as_secs_f64().ceil().max(1.0) as u64)
                    .unwrap_or(i32::MAX),
            ),
            renew_time: Some(now.clone()),
            acquire_time: Some(now),
            ..LeaseSpec::default()
        }),
    }
}

/// Writes the Lease: a replace on the last stored version (one write per
/// renewal); after a conflict or when it is gone, a read and a create or
/// replace.
async fn write(
    api: &Api<Lease>,
    stored: &mut Option<Lease>,
    config: &MembershipConfig,
    owned: &BTreeSet<IpAddr>,
    counts: &BTreeSet<String>,
    annotations: BTreeMap<String, String>,
) -> Result<(), kube::Error> {
    let name = format!("{LEASE_PREFIX}{}", config.replica);
    let mut lease = own_lease(config, owned, counts);
    lease
        .metadata
        .annotations
        .get_or_insert_default()
        .extend(annotations);
    let version = match stored.take() {
        Some(s) => s.metadata.resource_version,
        None => api
            .get_opt(&name)
            .await?
            .and_then(|l| l.metadata.resource_version),
    };
    let result = match version {
        Some(v) => {
            lease.metadata.resource_version = Some(v);
            api.replace(&name, &PostParams::default(), &lease).await
        }
        None => api.create(&PostParams::default(), &lease).await,
    };
    *stored = Some(result?);
    Ok(())
}

async fn delete(api: &Api<Lease>, replica: &str) -> Result<(), kube::Error> {
    match api
        .delete(
            &format!("{LEASE_PREFIX}{replica}"),
            &DeleteParams::default(),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes the Leases of replicas gone long ago. Several replicas may do
/// it at once; a Lease already gone is fine, and one renewed meanwhile
/// is only recreated by its owner's next renewal.
async fn forget_dead(api: &Api<Lease>, config: &MembershipConfig, view: &watch::Receiver<View>) {
    let dead: Vec<String> = view
        .borrow()
        .leases
        .values()
        .filter(|o| o.replica != config.replica && o.seen.elapsed() > config.forget_after)
        .map(|o| o.replica.clone())
        .collect();
    for replica in dead {
        match delete(api, &replica).await {
            Ok(()) => {
                tracing::info!(%replica, "announcer Lease of a replica gone long ago deleted")
            }
            Err(e) => {
                tracing::warn!(%replica, error = %e, "announcer Lease of a gone replica not deleted")
            }
        }
    }
}

/// The renewal loop's inputs and outputs.
struct Renewer {
    api: Api<Lease>,
    config: MembershipConfig,
    view: watch::Receiver<View>,
    ready: Arc<AtomicBool>,
    owned: watch::Receiver<BTreeSet<IpAddr>>,
    annotations: watch::Receiver<BTreeMap<String, String>>,
    leave: watch::Receiver<bool>,
    healthy: watch::Sender<bool>,
    errors: Arc<AtomicU64>,
}

impl Renewer {
    async fn run(self) {
        let Renewer {
            api,
            config,
            view,
            ready,
            mut owned,
            annotations,
            mut leave,
            healthy,
            errors,
        } = self;
        let mut stored: Option<Lease> = None;
        let mut held = false;
        let mut last_ok: Option<Instant> = None;
        let mut tick = tokio::time::interval(config.renew_every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // A write that hangs must not outlive the lease it renews.
        let bound = config.renew_every.max(Duration::from_millis(500));
        loop {
            tokio::select! {
                _ = tick.tick() => {}
                // Nothing owned any more (the announcers stopped): the
                // renewals go on.
                Ok(()) = owned.changed() => {}
                _ = leave.wait_for(|l| *l) => break,
            }
            if ready.load(Ordering::Acquire) {
                let now_owned = owned.borrow_and_update().clone();
                let counts = view.borrow().live_any(Instant::now());
                let extra = annotations.borrow().clone();
                match tokio::time::timeout(
                    bound,
                    write(&api, &mut stored, &config, &now_owned, &counts, extra),
                )
                .await
                {
                    Ok(Ok(())) => {
                        held = true;
                        last_ok = Some(Instant::now());
                    }
                    Ok(Err(e)) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(replica = %config.replica, error = %e, "announcer Lease renewal failed");
                    }
                    Err(_) => {
                        errors.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(replica = %config.replica, "announcer Lease renewal timed out");
                    }
                }
            } else {
                last_ok = None;
                if held {
                    match delete(&api, &config.replica).await {
                        Ok(()) => {
                            held = false;
                            stored = None;
                            tracing::info!(replica = %config.replica, "not ready: announcer Lease deleted");
                        }
                        Err(e) => {
                            errors.fetch_add(1, Ordering::Relaxed);
                            tracing::warn!(replica = %config.replica, error = %e, "announcer Lease not deleted");
                        }
                    }
                }
            }
            let ok = last_ok.is_some_and(|t| t.elapsed() < config.duration);
            healthy.send_if_modified(|h| std::mem::replace(h, ok) != ok);
            if ok {
                forget_dead(&api, &config, &view).await;
            }
        }
        let _ = healthy.send(false);
        if let Err(e) = delete(&api, &config.replica).await {
            errors.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(replica = %config.replica, error = %e, "announcer Lease not deleted; it expires on its own");
        } else {
            tracing::info!(replica = %config.replica, "announcer Lease deleted: handing addresses over");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(replica: &str, version: &str, pools: &str, owned: &str) -> Lease {
        let config = MembershipConfig {
            namespace: "teapot-system".into(),
            replica: replica.into(),
            pools: pools
                .split(',')
                .filter(|p| !p.is_empty())
                .map(String::from)
                .collect(),
            renew_every: Duration::from_secs(1),
            duration: Duration::from_secs(2),
            forget_after: Duration::from_secs(30),
            bfd: None,
        };
        let owned = owned.split(',').filter_map(|a| a.parse().ok()).collect();
        let mut l = own_lease(&config, &owned, &[replica.to_string()].into());
        l.metadata.resource_version = Some(version.into());
        l
    }

    /// Replicas `a` and `b` of pool `lan`, first seen at `t0`, with 2 s
    /// Leases.
    fn a_and_b_seen_at(t0: Instant) -> View {
        let mut view = View::default();
        view.observe(
            [&lease("a", "1", "lan", ""), &lease("b", "1", "lan", "")],
            t0,
            Duration::from_secs(2),
        );
        view
    }

    #[test]
    fn a_replica_is_live_while_its_lease_changes_on_the_observers_clock() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut view = a_and_b_seen_at(t0);
        assert_eq!(
            view.live("lan", t0 + s),
            ["a", "b"].map(String::from).into()
        );
        // a renews (a new version, whatever its renewTime says); b does
        // not: b expires two seconds after it was last seen changing.
        view.observe(
            [&lease("a", "2", "lan", ""), &lease("b", "1", "lan", "")],
            t0 + s + s / 2,
            2 * s,
        );
        assert_eq!(
            view.live("lan", t0 + 2 * s + s / 2),
            ["a"].map(String::from).into()
        );
        // The same version seen again is no renewal.
        view.observe(
            [&lease("a", "2", "lan", ""), &lease("b", "1", "lan", "")],
            t0 + 3 * s,
            2 * s,
        );
        assert!(view.live("lan", t0 + 4 * s).is_empty());
        // A deleted Lease is gone at once; another pool is not this one.
        view.observe([&lease("c", "7", "dmz", "")], t0 + 4 * s, 2 * s);
        assert!(view.live("lan", t0 + 4 * s).is_empty());
        assert_eq!(view.live("dmz", t0 + 4 * s), ["c"].map(String::from).into());
    }

    #[test]
    fn a_replica_counts_for_the_others_once_its_lease_says_it_counts_itself() {
        let t0 = Instant::now();
        // b is back from a cut link: its renewals reach the API but its
        // own watch is stale, so it counted nobody when it wrote.
        let mut b = lease("b", "1", "lan", "");
        let annotations = b.metadata.annotations.as_mut().unwrap();
        annotations.insert(LIVE_ANNOTATION.into(), String::new());
        let mut view = View {
            me: "a".into(),
            ..View::default()
        };
        view.observe(
            [&lease("a", "1", "lan", ""), &b],
            t0,
            Duration::from_secs(2),
        );
        assert_eq!(view.live("lan", t0), ["a"].map(String::from).into());
        // b's own view, with its own Lease: it needs no word from itself.
        let mut own = View {
            me: "b".into(),
            ..View::default()
        };
        own.observe([&b], t0, Duration::from_secs(2));
        assert_eq!(own.live("lan", t0), ["b"].map(String::from).into());
        // Its watch caught up: it counts itself (and a) when it writes.
        b.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(LIVE_ANNOTATION.into(), "a,b".into());
        b.metadata.resource_version = Some("2".into());
        view.observe(
            [&lease("a", "1", "lan", ""), &b],
            t0,
            Duration::from_secs(2),
        );
        assert_eq!(view.live("lan", t0), ["a", "b"].map(String::from).into());
        // A Lease of a build that does not say counts as before.
        b.metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(LIVE_ANNOTATION);
        view.observe(
            [&lease("a", "1", "lan", ""), &b],
            t0,
            Duration::from_secs(2),
        );
        assert_eq!(view.live("lan", t0), ["a", "b"].map(String::from).into());
    }

    #[test]
    fn a_replica_silent_on_bfd_is_gone_until_its_lease_is_renewed_after() {
        let t0 = Instant::now();
        let s = Duration::from_secs(1);
        let mut view = a_and_b_seen_at(t0);
        view.silenced.insert("b".into(), t0 + s / 10);
        assert_eq!(
            view.live("lan", t0 + s / 5),
            ["a"].map(String::from).into(),
            "long before its Lease runs out"
        );
        // A renewal already on its way when BFD failed proves nothing.
        view.observe(
            [&lease("a", "1", "lan", ""), &lease("b", "2", "lan", "")],
            t0 + s / 5,
            2 * s,
        );
        assert_eq!(view.live_any(t0 + s / 4), ["a"].map(String::from).into());
        // One well after: b is alive, only its BFD path is broken.
        view.observe(
            [&lease("a", "1", "lan", ""), &lease("b", "3", "lan", "")],
            t0 + s,
            2 * s,
        );
        assert_eq!(
            view.live("lan", t0 + s),
            ["a", "b"].map(String::from).into()
        );
        // The Lease watch keeps what BFD said.
        assert!(view.silenced.contains_key("b"));
    }

    #[test]
    fn a_replica_cut_off_counts_itself_gone_and_says_so() {
        let t0 = Instant::now();
        let mut view = a_and_b_seen_at(t0);
        view.me = "a".into();
        assert_eq!(view.live("lan", t0), ["a", "b"].map(String::from).into());
        // Every BFD session of a's failed at once: a holds and takes
        // nothing, and its Lease (what live_any writes) leaves it out.
        view.cut_off = true;
        assert_eq!(view.live("lan", t0), ["b"].map(String::from).into());
        assert_eq!(view.live_any(t0), ["b"].map(String::from).into());
        // Nothing changes by itself before the first Lease runs out.
        assert_eq!(view.next_expiry(t0), Some(t0 + Duration::from_secs(2)));
        assert_eq!(view.next_expiry(t0 + Duration::from_secs(2)), None);
    }

    #[test]
    fn without_bfd_the_lease_leaves_a_margin_under_two_seconds() {
        assert_eq!(
            lease_timing(true, None, None),
            Ok((Duration::from_secs(1), Duration::from_secs(2)))
        );
        let (renew, lease) = lease_timing(false, None, None).unwrap();
        assert!(lease + Duration::from_millis(100) < Duration::from_secs(2));
        assert!(lease >= renew * 3, "one late renewal is no departure");
        assert_eq!(
            lease_timing(false, Some(0.25), Some(1.2)),
            Ok((Duration::from_millis(250), Duration::from_millis(1200)))
        );
        for (renew, lease) in [
            (Some(2.0), Some(2.0)),
            (Some(0.0), None),
            (None, Some(f64::NAN)),
        ] {
            assert!(lease_timing(true, renew, lease).is_err());
        }
        // The duration in milliseconds is what the others read.
        let mut config = quick("lb-0", Duration::from_secs(30));
        config.duration = Duration::from_millis(1500);
        let written = own_lease(&config, &BTreeSet::new(), &BTreeSet::new());
        assert_eq!(
            written.spec.as_ref().unwrap().lease_duration_seconds,
            Some(2)
        );
        let mut view = View::default();
        let t0 = Instant::now();
        view.observe([&written], t0, Duration::from_secs(60));
        assert_eq!(view.leases["lb-0"].duration, Duration::from_millis(1500));
    }

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(replica_name("LB-0_4711"), "lb-0-4711");
        assert_eq!(replica_name("__"), "teapot");
    }

    #[tokio::test]
    async fn the_hand_over_waits_until_the_next_owner_lists_the_address() {
        let t0 = Instant::now();
        let addr: IpAddr = "192.0.2.100".parse().unwrap();
        let mine: BTreeMap<IpAddr, String> = [(addr, "lan".to_string())].into();
        let mut view = View::default();
        view.observe(
            [
                &lease("a", "1", "lan", "192.0.2.100"),
                &lease("b", "1", "lan", ""),
            ],
            t0,
            Duration::from_secs(60),
        );
        // a leaves; b is the only other live replica and owns nothing yet.
        assert_eq!(not_handed_over(&view, "a", &mine, t0), vec![addr]);
        let (tx, rx) = watch::channel(view.clone());
        let waiting = tokio::spawn(async move {
            wait_handed_over(rx, "a", &mine, Duration::from_secs(3600)).await
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        // b's Lease now lists the address: the hand-over is complete.
        view.observe(
            [&lease("b", "2", "lan", "192.0.2.100")],
            Instant::now(),
            Duration::from_secs(60),
        );
        tx.send(view).unwrap();
        assert!(waiting.await.unwrap().is_empty());
    }

    #[tokio::test]
    async fn nobody_to_hand_over_to_means_no_wait() {
        let addr: IpAddr = "192.0.2.100".parse().unwrap();
        let mine: BTreeMap<IpAddr, String> = [(addr, "lan".to_string())].into();
        let mut view = View::default();
        view.observe(
            [&lease("a", "1", "lan", "192.0.2.100")],
            Instant::now(),
            Duration::from_secs(60),
        );
        let (_tx, rx) = watch::channel(view);
        let left = wait_handed_over(rx, "a", &mine, Duration::from_secs(3600)).await;
        assert!(left.is_empty());
    }

    /// Renewals every 50 ms, a lease that never expires in a test.
    fn quick(replica: &str, forget_after: Duration) -> MembershipConfig {
        MembershipConfig {
            namespace: "teapot-system".into(),
            replica: replica.into(),
            pools: ["lan".to_string()].into(),
            renew_every: Duration::from_millis(50),
            duration: Duration::from_secs(60),
            forget_after,
            bfd: None,
        }
    }

    #[tokio::test]
    async fn the_lease_is_renewed_while_ready_and_deleted_when_not() {
        use teapot_testkit::apiserver::ApiServer;
        let api = ApiServer::start().await;
        let ready = Arc::new(AtomicBool::new(true));
        let (owned_tx, owned) = watch::channel(BTreeSet::new());
        let config = quick("lb-0", Duration::from_secs(3600));
        let m = Membership::start(api.client(), config, ready.clone(), owned);
        let mut view = m.view();
        let seen = |v: &View| v.leases.get("lb-0").cloned();
        let first = view.wait_for(|v| seen(v).is_some()).await.unwrap().clone();
        assert_eq!(seen(&first).unwrap().pools, ["lan".to_string()].into());
        // An ownership change is written at once.
        owned_tx.send_replace(["192.0.2.100".parse().unwrap()].into());
        view.wait_for(|v| seen(v).is_some_and(|o| !o.owned.is_empty()))
            .await
            .unwrap();
        let mut healthy = m.healthy();
        healthy.wait_for(|h| *h).await.unwrap();
        // Not ready: the Lease goes and this replica is unhealthy.
        ready.store(false, Ordering::Release);
        view.wait_for(|v| v.leases.is_empty()).await.unwrap();
        healthy.wait_for(|h| !*h).await.unwrap();
        // Ready again, then leaving: deleted once more.
        ready.store(true, Ordering::Release);
        view.wait_for(|v| !v.leases.is_empty()).await.unwrap();
        m.leave().await;
        view.wait_for(|v| v.leases.is_empty()).await.unwrap();
        assert!(
            api.get(
                "coordination.k8s.io/v1",
                "Lease",
                "teapot-system",
                "teapot-announcer-lb-0"
            )
            .is_none()
        );
    }

    #[tokio::test]
    async fn the_lease_of_a_replica_gone_long_ago_is_deleted() {
        use teapot_testkit::apiserver::ApiServer;
        let api = ApiServer::start().await;
        // A replica killed without deleting its Lease.
        let mut dead = serde_json::to_value(lease("lb-dead", "1", "lan", "")).unwrap();
        dead["apiVersion"] = "coordination.k8s.io/v1".into();
        dead["kind"] = "Lease".into();
        dead["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        api.apply(dead);
        let (_owned_tx, owned) = watch::channel(BTreeSet::new());
        let config = quick("lb-0", Duration::from_millis(300));
        let m = Membership::start(api.client(), config, Arc::new(AtomicBool::new(true)), owned);
        let mut view = m.view();
        view.wait_for(|v| v.leases.contains_key("lb-dead"))
            .await
            .unwrap();
        // lb-0's own Lease changes with every renewal; lb-dead's never does.
        view.wait_for(|v| !v.leases.contains_key("lb-dead") && v.leases.contains_key("lb-0"))
            .await
            .unwrap();
    }
}
