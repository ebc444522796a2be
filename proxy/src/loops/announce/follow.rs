//! The follow loop: readiness, the snapshot, the Leases and BFD in; the
//! addresses of each announcer and the report for `/status` out.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use teapot_announce::Announcer;
use tokio::sync::watch;

use super::config::{AnnounceConfig, FOLLOW_EVERY, wanted};
use super::membership::View;
use super::pools::classify;
use super::view::{AddressReport, Report};
use crate::compile::snapshot::Snapshot;

async fn sleep_until_or_never(at: Option<std::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

async fn changed_or_never<T>(
    rx: Option<&mut watch::Receiver<T>>,
) -> Result<(), watch::error::RecvError> {
    match rx {
        Some(rx) => rx.changed().await,
        None => std::future::pending().await,
    }
}

/// One running announcer and what it announces.
#[derive(Debug)]
pub(super) struct Running {
    /// The pools it announces (indices into the configured pools): the
    /// one pool of an announcer with an interface, every pool of its mode
    /// this replica may announce otherwise.
    pub(super) pools: Vec<usize>,
    /// The pool's interface (L2), for `/status` and BFD.
    pub(super) interface: Option<String>,
    pub(super) announcer: Box<dyn Announcer>,
}

pub(super) struct Follow {
    pub(super) config: AnnounceConfig,
    /// Manifests mode: this replica is the only one.
    pub(super) alone: bool,
    pub(super) allowed: Vec<bool>,
    /// Each announcer with the pools it announces.
    pub(super) announcers: Vec<Arc<Running>>,
    pub(super) membership: Option<(watch::Receiver<View>, watch::Receiver<bool>)>,
    pub(super) report: Arc<Mutex<Report>>,
    pub(super) unpooled_seen: Arc<std::sync::atomic::AtomicU64>,
    /// Counts the loop's passes (`/metrics`).
    pub(super) wakes: Arc<std::sync::atomic::AtomicU64>,
    pub(super) generations: watch::Receiver<u64>,
}

pub(super) async fn follow(
    mut f: Follow,
    snapshots: Arc<ArcSwap<Snapshot>>,
    ready: Arc<AtomicBool>,
) {
    let mut logged: BTreeSet<IpAddr> = BTreeSet::new();
    let mut rejoined = 0;
    // The first pass looks at once; each pass ends by waiting for what
    // it follows, until `next` at the latest.
    let mut next: Option<std::time::Instant> = None;
    let mut first = true;
    loop {
        if !first {
            let (view_rx, healthy_rx) = match f.membership.as_mut() {
                Some((view, healthy)) => (Some(view), Some(healthy)),
                None => (None, None),
            };
            // A closed channel disables its branch until the next pass,
            // which finds it closed again.
            tokio::select! {
                _ = sleep_until_or_never(next) => {}
                Ok(()) = f.generations.changed() => {}
                Ok(()) = changed_or_never(view_rx) => {}
                Ok(()) = changed_or_never(healthy_rx) => {}
            }
        }
        first = false;
        f.wakes.fetch_add(1, Ordering::Relaxed);
        f.generations.borrow_and_update();
        let now_ready = ready.load(Ordering::Acquire);
        let all = wanted(&f.config, &snapshots.load(), now_ready);
        let (by_pool, outside) = classify(&f.config.pools, &all);
        for addr in outside.difference(&logged) {
            f.unpooled_seen.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%addr, "address in no --announce-pool: not announced");
        }
        logged.extend(outside.iter().copied());
        // Own renewals failing for the lease duration: the others stop
        // counting this replica, so it lets go too (never two owners on
        // purpose).
        let (view, eligible) = match &f.membership {
            Some((view, healthy)) => (Some(view.borrow().clone()), *healthy.borrow()),
            None => (None, true),
        };
        let now = std::time::Instant::now();
        let mut live_any = BTreeSet::new();
        let again = view.as_ref().is_some_and(|v| v.rejoined != rejoined);
        if let Some(v) = &view {
            rejoined = v.rejoined;
        }
        for running in &f.announcers {
            let announcer = &running.announcer;
            let owner = announcer.mode().has_owner();
            if again {
                announcer.announce_again();
            }
            // An owner whose own Lease is not healthy holds nothing: the
            // others count it gone and take over.
            let addrs: BTreeSet<IpAddr> = if owner && !eligible {
                BTreeSet::new()
            } else {
                running
                    .pools
                    .iter()
                    .filter_map(|i| by_pool.get(i))
                    .flatten()
                    .copied()
                    .collect()
            };
            let count = addrs.len();
            if announcer.set_addresses(addrs) {
                tracing::info!(
                    mode = announcer.mode().as_str(),
                    announced = count,
                    "announcement set changed"
                );
            }
            if !owner {
                continue;
            }
            for i in &running.pools {
                let pool = &f.config.pools[*i].name;
                if let Some(view) = &view {
                    let replicas = view.replicas(pool, now);
                    live_any.extend(replicas.live.iter().cloned());
                    announcer.set_replicas(replicas);
                } else {
                    live_any.insert(f.config.l2.replica.clone());
                }
            }
        }
        let mut addresses = Vec::new();
        for (i, addrs) in &by_pool {
            let pool = &f.config.pools[*i];
            let live = match &view {
                Some(v) => v.live(&pool.name, now),
                None if f.alone && f.allowed[*i] => [f.config.l2.replica.clone()].into(),
                // Kube mode without a Lease of its own: this replica is no
                // owner and does not watch who is.
                None => BTreeSet::new(),
            };
            for addr in addrs {
                addresses.push(AddressReport {
                    address: *addr,
                    pool: pool.name.clone(),
                    mode: pool.mode.as_str(),
                    owner: pool
                        .mode
                        .has_owner()
                        .then(|| teapot_announce::l2::owner(addr, &live).map(String::from))
                        .flatten(),
                });
            }
        }
        *f.report.lock() = Report {
            addresses,
            outside,
            live: live_any,
        };
        next = if now_ready {
            view.as_ref().and_then(|v| v.next_expiry(now))
        } else {
            Some(now + FOLLOW_EVERY)
        };
    }
}
