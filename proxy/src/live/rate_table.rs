//! The state of per-client rate limits (`limit-rps`, `limit-rpm`): one
//! fixed-size table of counters per tenant and replica, kept across
//! snapshots like the tenant gates (crate::live::fairness); the request
//! path counts in it through crate::plane::traffic::rate.
//!
//! Each tenant's [`RateTable`] is shared by all of its rate-limited routes
//! and allocated when the first of them appears; its size follows the
//! tenant's `maxConnections` ([`RateTable::slots_for`]). No number of
//! client addresses makes the fleet keep more counters for a tenant than
//! that: a new client takes the slot of the client nearest to being
//! forgotten in its set (as nginx's `limit_req` zone drops its least
//! recently used states), which at worst gives that client a fresh burst.
//! Operator namespaces share one table.
//!
//! A counter is GCRA's theoretical arrival time, keyed by a keyed hash of
//! (route, limit, client address).
//!
//! The same table holds, allocated on first use and of the same size, the
//! requests each client has in flight on a route (`limit-connections`):
//! an [`InFlightPass`] is one of them, given back when dropped with its
//! request, whatever ended it. A held count is never evicted; a client
//! whose set is full of other clients' requests is let through uncounted
//! rather than refused, so no number of other addresses can refuse it,
//! and the state stays the table's fixed size.
//!
//! The same owners' [`AuthGate`]s live here too: how many external
//! authentication sub-requests (`auth-url`) each has in flight, kept
//! across snapshots so a reload neither forgets nor doubles them.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};
use std::time::Instant;

use parking_lot::Mutex;

/// Counters per set: a lookup locks and scans one set.
const WAYS: usize = 8;
/// Smallest and largest table per tenant (counters; 16 bytes each).
pub const MIN_SLOTS: usize = 1024;
pub const MAX_SLOTS: usize = 65_536;
/// The operator namespaces' one table.
pub const OPERATOR_SLOTS: usize = MAX_SLOTS;

/// One GCRA limit: a request every `interval_ns`, `burst` more at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rate {
    pub interval_ns: u64,
    pub burst: u64,
}

impl Rate {
    /// `count` requests per `period_s` seconds, with `multiplier` times
    /// `count` as the burst (ingress-nginx's `limit-burst-multiplier`).
    pub fn new(count: u32, period_s: u64, multiplier: u32) -> Rate {
        Rate {
            interval_ns: (period_s * 1_000_000_000) / u64::from(count.max(1)),
            burst: u64::from(count) * u64::from(multiplier),
        }
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Counter {
    /// 0: free.
    key: u64,
    /// GCRA's theoretical arrival time, in [`now_ns`] time.
    tat_ns: u64,
}

/// A fixed-size table of rate counters.
#[derive(Debug)]
pub struct RateTable {
    hasher: std::hash::RandomState,
    sets: Box<[Mutex<[Counter; WAYS]>]>,
    /// `limit-connections`' counts, as many sets as `sets`.
    in_flight: OnceLock<Box<[Mutex<[Held; WAYS]>]>>,
}

/// One client's requests in flight on one route.
#[derive(Clone, Copy, Debug, Default)]
struct Held {
    /// 0: free.
    key: u64,
    count: u32,
}

/// One request's place in its client's in-flight count
/// ([`RateTable::hold`]), given back when dropped.
#[derive(Debug)]
pub struct InFlightPass {
    table: Arc<RateTable>,
    /// 0: the request was let through uncounted (its set was full).
    key: u64,
}

impl Drop for InFlightPass {
    fn drop(&mut self) {
        if self.key == 0 {
            return;
        }
        let Some(sets) = self.table.in_flight.get() else {
            return;
        };
        let mut set = sets[RateTable::set_of(self.key, sets.len())].lock();
        // A held count is never taken by another key: it is there.
        if let Some(held) = set.iter_mut().find(|h| h.key == self.key) {
            held.count -= 1;
            if held.count == 0 {
                held.key = 0;
            }
        }
    }
}

/// Nanoseconds since the first call: the clock of every rate counter,
/// these and the tenant gates' (crate::live::fairness).
pub fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// One step of GCRA, the rate arithmetic of these counters and of the
/// tenant gates: with `tat` the theoretical arrival time so far, a request
/// at `now` moves it to `max(tat, now) + interval`, and passes when that
/// is at most `ahead` past `now`. `Ok`: the new `tat`; `Err`: how many
/// nanoseconds too early the request is.
pub(crate) fn gcra(tat: u64, now: u64, interval: u64, ahead: u64) -> Result<u64, u64> {
    let next = tat.max(now) + interval;
    match next.checked_sub(now.saturating_add(ahead)) {
        Some(early) if early > 0 => Err(early),
        _ => Ok(next),
    }
}

impl RateTable {
    /// A table of at least `slots` counters (whole sets).
    pub fn new(slots: usize) -> RateTable {
        let sets = RateTable::new_capacity(slots) / WAYS;
        RateTable {
            hasher: std::hash::RandomState::new(),
            sets: (0..sets)
                .map(|_| Mutex::new([Counter::default(); WAYS]))
                .collect(),
            in_flight: OnceLock::new(),
        }
    }

    fn set_of(key: u64, sets: usize) -> usize {
        (key >> 1) as usize % sets
    }

    /// Counts one more request of `client` in flight on the route of
    /// `route_key`, unless `limit` are already (`None`: refused).
    pub(crate) fn hold(
        self: &Arc<Self>,
        route_key: u64,
        client: IpAddr,
        limit: u32,
    ) -> Option<InFlightPass> {
        // Apart from the rate counters' keys (`which` is an index there).
        let key = self.hasher.hash_one((route_key, usize::MAX, client)) | 1;
        let sets = self.in_flight.get_or_init(|| {
            (0..self.sets.len())
                .map(|_| Mutex::new([Held::default(); WAYS]))
                .collect()
        });
        let mut set = sets[RateTable::set_of(key, sets.len())].lock();
        let key = match set.iter().position(|h| h.key == key) {
            Some(i) if set[i].count >= limit => return None,
            Some(i) => {
                set[i].count += 1;
                key
            }
            None => match set.iter().position(|h| h.key == 0) {
                Some(i) => {
                    set[i] = Held { key, count: 1 };
                    key
                }
                None => 0,
            },
        };
        Some(InFlightPass {
            table: self.clone(),
            key,
        })
    }

    /// Clients with requests in flight counted (tests, `/status`).
    pub fn in_flight_used(&self) -> usize {
        self.in_flight.get().map_or(0, |sets| {
            sets.iter()
                .map(|s| s.lock().iter().filter(|h| h.key != 0).count())
                .sum()
        })
    }

    /// The counters a tenant's table holds: its `maxConnections` (the
    /// clients it may serve at once on a replica) rounded up to a power of
    /// two, from [`MIN_SLOTS`] to [`MAX_SLOTS`].
    pub fn slots_for(max_connections: u32) -> usize {
        (max_connections as usize)
            .next_power_of_two()
            .clamp(MIN_SLOTS, MAX_SLOTS)
    }

    /// Counters this table holds.
    pub fn capacity(&self) -> usize {
        self.sets.len() * WAYS
    }

    /// Counters in use (tests, `/status`).
    pub fn used(&self) -> usize {
        self.sets
            .iter()
            .map(|s| s.lock().iter().filter(|c| c.key != 0).count())
            .sum()
    }

    /// A route's part of its counters' keys, from its stable name.
    pub fn route_key(route: &str) -> u64 {
        let mut h = std::hash::DefaultHasher::new();
        route.hash(&mut h);
        h.finish()
    }

    /// Takes one request of `client` under `rate`; `Err` carries the
    /// seconds until one more would pass (at least 1).
    pub(crate) fn take(
        &self,
        route_key: u64,
        which: usize,
        client: IpAddr,
        rate: Rate,
        now: u64,
    ) -> Result<(), u64> {
        // 0 marks a free counter.
        let key = self.hasher.hash_one((route_key, which, client)) | 1;
        let set = &self.sets[RateTable::set_of(key, self.sets.len())];
        let mut set = set.lock();
        let slot = match set.iter().position(|c| c.key == key) {
            Some(i) => i,
            None => {
                // A free counter, else the one whose client is nearest
                // to being forgotten (a counter at or before now is in
                // the state a new one starts in).
                let i = set
                    .iter()
                    .enumerate()
                    .min_by_key(|(_, c)| if c.key == 0 { 0 } else { c.tat_ns.max(1) })
                    .map_or(0, |(i, _)| i);
                set[i] = Counter { key, tat_ns: now };
                i
            }
        };
        let counter = &mut set[slot];
        // `burst` requests may run ahead of the rate, and the one at hand.
        let ahead = rate
            .burst
            .saturating_mul(rate.interval_ns)
            .saturating_add(rate.interval_ns);
        let tat = gcra(counter.tat_ns, now, rate.interval_ns, ahead)
            .map_err(|early| early.div_ceil(1_000_000_000).max(1))?;
        counter.tat_ns = tat;
        Ok(())
    }
}

/// The live tables, by owner (a tenant cluster, or "" for the operator
/// namespaces), shared by compiles like the tenant gates.
#[derive(Debug, Default)]
pub struct RateTables {
    known: Mutex<HashMap<Box<str>, Weak<RateTable>>>,
    auth: Mutex<HashMap<Box<str>, Weak<AuthGate>>>,
}

/// The external authentication sub-requests one owner (a tenant cluster,
/// or "" for the operator namespaces) has in flight on this replica.
#[derive(Debug, Default)]
pub struct AuthGate {
    in_flight: AtomicU32,
}

/// One sub-request's place in its owner's [`AuthGate`], given back when
/// dropped.
#[derive(Debug)]
pub struct AuthPass(Arc<AuthGate>);

impl AuthGate {
    /// A place for one more sub-request, unless `bound` are in flight.
    pub fn enter(self: &Arc<Self>, bound: u32) -> Option<AuthPass> {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < bound).then_some(n + 1)
            })
            .ok()
            .map(|_| AuthPass(self.clone()))
    }

    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }
}

impl Drop for AuthPass {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl RateTables {
    /// The table of `owner` (a new one of `slots` counters on first sight,
    /// or when the size its limits give has changed).
    pub fn table(&self, owner: &str, slots: usize) -> Arc<RateTable> {
        let mut known = self.known.lock();
        if let Some(table) = known.get(owner).and_then(Weak::upgrade)
            && table.capacity() == RateTable::new_capacity(slots)
        {
            return table;
        }
        known.retain(|_, t| t.strong_count() > 0);
        let table = Arc::new(RateTable::new(slots));
        known.insert(owner.into(), Arc::downgrade(&table));
        table
    }

    /// The authentication gate of `owner`, the same one while any route
    /// holds it.
    pub fn auth_gate(&self, owner: &str) -> Arc<AuthGate> {
        let mut known = self.auth.lock();
        if let Some(gate) = known.get(owner).and_then(Weak::upgrade) {
            return gate;
        }
        known.retain(|_, g| g.strong_count() > 0);
        let gate = Arc::new(AuthGate::default());
        known.insert(owner.into(), Arc::downgrade(&gate));
        gate
    }
}

impl RateTable {
    /// The counters a table of at least `slots` holds: whole sets.
    fn new_capacity(slots: usize) -> usize {
        slots.div_ceil(WAYS).max(1) * WAYS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gcra_passes_up_to_ahead_and_says_how_early() {
        // One a second, two seconds ahead allowed: two pass at once.
        let (s, now) = (1_000_000_000, 10_000_000_000);
        let tat = gcra(0, now, s, 2 * s).unwrap();
        assert_eq!(tat, now + s);
        let tat = gcra(tat, now, s, 2 * s).unwrap();
        assert_eq!(gcra(tat, now, s, 2 * s), Err(s));
        assert_eq!(gcra(tat, now + s, s, 2 * s), Ok(now + 3 * s));
        // A limit too large to add never refuses.
        assert!(gcra(tat, now, s, u64::MAX).is_ok());
    }

    #[test]
    fn auth_gates_bound_each_owner_alone() {
        let tables = RateTables::default();
        let a = tables.auth_gate("a");
        assert!(Arc::ptr_eq(&a, &tables.auth_gate("a")));
        let first = a.enter(2).unwrap();
        let second = a.enter(2).unwrap();
        assert!(a.enter(2).is_none());
        // Another owner is not held up by a full gate.
        assert!(tables.auth_gate("b").enter(2).is_some());
        drop(first);
        assert_eq!(a.in_flight(), 1);
        assert!(a.enter(2).is_some());
        drop(second);
    }

    /// A client's requests in flight are counted up to the limit and
    /// given back as each ends; a flood of other addresses fills the
    /// table's fixed size and no more, and lets the rest through.
    #[test]
    fn in_flight_counts_are_held_and_given_back() {
        let table = Arc::new(RateTable::new(64));
        let route = RateTable::route_key("ns/web");
        let client = IpAddr::from([192, 0, 2, 1]);
        let first = table.hold(route, client, 2).unwrap();
        let second = table.hold(route, client, 2).unwrap();
        assert!(table.hold(route, client, 2).is_none());
        // Another route's count of the same client is its own.
        assert!(
            table
                .hold(RateTable::route_key("ns/other"), client, 2)
                .is_some()
        );
        drop(first);
        let third = table.hold(route, client, 2).unwrap();
        drop((second, third));
        assert_eq!(table.in_flight_used(), 0);
        let held: Vec<_> = (0..10_000u32)
            .map(|i| table.hold(route, IpAddr::from(i.to_be_bytes()), 1).unwrap())
            .collect();
        assert_eq!(table.in_flight_used(), table.capacity());
        drop(held);
        assert_eq!(table.in_flight_used(), 0);
    }

    #[test]
    fn tables_outlive_snapshots_and_follow_limits() {
        let tables = RateTables::default();
        let a = tables.table("t1", RateTable::slots_for(10_000));
        assert_eq!(a.capacity(), 16_384);
        assert!(Arc::ptr_eq(
            &a,
            &tables.table("t1", RateTable::slots_for(10_000))
        ));
        assert_eq!(
            tables.table("t1", RateTable::slots_for(10)).capacity(),
            MIN_SLOTS
        );
        assert_eq!(RateTable::slots_for(u32::MAX), MAX_SLOTS);
        drop(a);
        assert_eq!(tables.table("t2", 8).capacity(), 8);
    }
}
