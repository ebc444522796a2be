//! Per-tenant fairness: each Tenant's requests pass its own
//! gate, so that one tenant's flood is refused at that tenant's limits
//! while every other tenant keeps its share of the replica.
//!
//! A gate has two limits from the Tenant's `spec.limits`, per replica:
//!
//! - `requestsPerSecond`: a GCRA rate limit (one atomic, no lock) with a
//!   burst of one second's worth; over it, 429.
//! - `maxConnections`: client connections busy with the tenant at once
//!   (requests in flight, an upgraded WebSocket for its whole life; idle
//!   keep-alive connections are bounded by the per-client and total
//!   caps instead); over it, 503.
//!
//! Refusals are answered after `EdgeConfig::tenant_refusal_delay`
//! (crate::plane::edge): a client that loops on its refusals then costs the
//! replica one cheap answer per delay per connection instead of all the
//! CPU it can get, which is what keeps the other tenants' latency flat
//! during a flood (measured in `teapot/tests/edge_e2e.rs`).
//!
//! Gates outlive snapshots like endpoint health does: a reload keeps the
//! counters of every tenant that still exists.
//!

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use teapot_api::tenant::EffectiveLimits;

use crate::live::rate_table::{gcra, now_ns};

/// Which of a tenant's limits a request is over; the plane answers it
/// (`crate::plane::edge::OverLimit::Rate` / `TenantConnections`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OverLimit {
    /// `requestsPerSecond`: 429.
    Rate,
    /// `maxConnections`: 503.
    Connections,
}

/// The rate burst: one second of requests may arrive at once.
const BURST: Duration = Duration::from_secs(1);

/// One tenant's limits and counters on this replica.
#[derive(Debug)]
pub struct TenantGate {
    pub cluster: Box<str>,
    /// Nanoseconds between requests at the limit; 0: no rate limit.
    interval_ns: AtomicU64,
    max_active: AtomicU32,
    active: AtomicU32,
    /// GCRA's theoretical arrival time, in [`now_ns`] time.
    tat_ns: AtomicU64,
    /// Bytes of request and response bodies its requests hold now
    /// (crate::live::buffers).
    pub buffered: AtomicU64,
}

impl TenantGate {
    fn new(cluster: &str) -> TenantGate {
        TenantGate {
            cluster: cluster.into(),
            interval_ns: AtomicU64::new(0),
            max_active: AtomicU32::new(0),
            active: AtomicU32::new(0),
            tat_ns: AtomicU64::new(0),
            buffered: AtomicU64::new(0),
        }
    }

    fn set_limits(&self, requests_per_second: u32, max_connections: u32) {
        let interval = match requests_per_second {
            0 => 0,
            r => 1_000_000_000 / u64::from(r),
        };
        self.interval_ns.store(interval, Ordering::Relaxed);
        self.max_active.store(max_connections, Ordering::Relaxed);
    }

    /// Admits one request, or says which limit it is over. The permit
    /// holds the connection slot until it is dropped.
    pub fn enter(self: &Arc<Self>) -> Result<TenantPermit, OverLimit> {
        self.take_rate(now_ns())?;
        let max = self.max_active.load(Ordering::Relaxed);
        let before = self.active.fetch_add(1, Ordering::AcqRel);
        let permit = TenantPermit(self.clone());
        if max > 0 && before >= max {
            return Err(OverLimit::Connections);
        }
        Ok(permit)
    }

    /// GCRA: each request moves the theoretical arrival time on by one
    /// interval; a request that would move it more than the burst ahead
    /// of now is over the rate (and moves nothing).
    fn take_rate(&self, now: u64) -> Result<(), OverLimit> {
        let interval = self.interval_ns.load(Ordering::Relaxed);
        if interval == 0 {
            return Ok(());
        }
        let burst = BURST.as_nanos() as u64;
        let mut tat = self.tat_ns.load(Ordering::Relaxed);
        loop {
            let next = gcra(tat, now, interval, burst).map_err(|_| OverLimit::Rate)?;
            match self
                .tat_ns
                .compare_exchange_weak(tat, next, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return Ok(()),
                Err(current) => tat = current,
            }
        }
    }

    /// Requests of this tenant in flight on this replica.
    pub fn active(&self) -> u32 {
        self.active.load(Ordering::Acquire)
    }
}

/// A tenant's connection slot; released on drop.
#[derive(Debug)]
pub struct TenantPermit(Arc<TenantGate>);

impl TenantPermit {
    /// The gate the slot is held at.
    pub fn gate(&self) -> &Arc<TenantGate> {
        &self.0
    }
}

impl Drop for TenantPermit {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The gates of every tenant, shared by compiles, and the tables of
/// their routes' rate limits (crate::live::rate_table), which outlive
/// snapshots the same way.
#[derive(Debug, Default)]
pub struct TenantGates {
    known: parking_lot::Mutex<HashMap<Box<str>, Weak<TenantGate>>>,
    pub rate_tables: crate::live::rate_table::RateTables,
    /// `global-rate-limit`'s counts, exchanged with the fleet's other
    /// replicas (crate::live::global_counts).
    pub global_counts: Arc<crate::live::global_counts::GlobalCounts>,
}

impl TenantGates {
    /// The live gate of `cluster` (a new one on first sight), with its
    /// limits set to `limits`.
    pub fn gate(&self, cluster: &str, limits: &EffectiveLimits) -> Arc<TenantGate> {
        let mut known = self.known.lock();
        let gate = match known.get(cluster).and_then(Weak::upgrade) {
            Some(g) => g,
            None => {
                let g = Arc::new(TenantGate::new(cluster));
                known.insert(cluster.into(), Arc::downgrade(&g));
                g
            }
        };
        gate.set_limits(limits.requests_per_second, limits.max_connections);
        gate
    }

    /// Forgets tenants no snapshot and no request holds any more.
    pub fn prune(&self) {
        self.known.lock().retain(|_, g| g.strong_count() > 0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_api::tenant::TenantLimits;

    fn limits(rps: u32, connections: u32) -> EffectiveLimits {
        TenantLimits::effective(Some(&TenantLimits {
            requests_per_second: Some(rps),
            max_connections: Some(connections),
            ..TenantLimits::default()
        }))
    }

    #[test]
    fn rate_allows_one_second_of_burst_then_the_rate() {
        let gates = TenantGates::default();
        let gate = gates.gate("acme", &limits(10, 0));
        let t0 = 5_000_000_000;
        let admitted = (0..30).filter(|_| gate.take_rate(t0).is_ok()).count();
        assert_eq!(admitted, 10, "burst of one second at 10/s");
        assert_eq!(gate.take_rate(t0 + 50_000_000), Err(OverLimit::Rate));
        // One interval later, one more.
        assert_eq!(gate.take_rate(t0 + 100_000_000), Ok(()));
        assert_eq!(gate.take_rate(t0 + 100_000_000), Err(OverLimit::Rate));
        // After a quiet second the burst is back.
        let later = t0 + 2_100_000_000;
        assert_eq!(
            (0..30).filter(|_| gate.take_rate(later).is_ok()).count(),
            10
        );
    }

    #[test]
    fn connections_are_capped_and_released() {
        let gates = TenantGates::default();
        let gate = gates.gate("acme", &limits(0, 2));
        let a = gate.enter().unwrap();
        let _b = gate.enter().unwrap();
        assert_eq!(gate.enter().unwrap_err(), OverLimit::Connections);
        assert_eq!(gate.active(), 2, "a refused entry holds no slot");
        drop(a);
        assert!(gate.enter().is_ok());
    }

    #[test]
    fn gates_survive_recompiles_and_take_new_limits() {
        let gates = TenantGates::default();
        let first = gates.gate("acme", &limits(0, 1));
        let _held = first.enter().unwrap();
        let second = gates.gate("acme", &limits(0, 5));
        assert!(Arc::ptr_eq(&first, &second));
        assert_eq!(second.active(), 1);
        assert!(second.enter().is_ok(), "the new cap applies");
        let other = gates.gate("globex", &limits(0, 1));
        assert!(!Arc::ptr_eq(&first, &other));
        drop((first, second, other, _held));
        gates.prune();
        assert!(gates.known.lock().is_empty());
    }
}
