//! The counts of ingress-nginx's `global-rate-limit`: requests per (route,
//! key, window), shared by the fleet's replicas without a store of their
//! own. Each replica counts its own requests here; the exchange loop
//! (crate::loops::fleet_exchange) sends the counts that changed to the
//! other replicas over UDP and writes theirs back with [`GlobalCounts::merge`].
//! A replica's estimate of a key's count is its own plus the latest count
//! each peer reported for the same window.
//!
//! Windows are fixed and numbered from the Unix epoch (`unix_ms /
//! window`), so replicas whose clocks agree (NTP) number them alike; the
//! estimate slides over the previous window and the current one as
//! lua-resty-global-throttle's does (ingress-nginx's implementation): the
//! previous window's count weighs what is left of the current window. A
//! peer's counts are those of windows it reported, so a peer that stops
//! reporting is forgotten after two windows with no bookkeeping of its
//! own, and a replica alone counts only itself: it enforces the whole
//! limit by itself.
//!
//! Bounds, whatever clients or tenants send:
//! - keys per route ([`MAX_KEYS_PER_ROUTE`]) and per tenant
//!   ([`MAX_KEYS_PER_TENANT`]): a key that finds no room is counted under
//!   the route's one overflow key ([`OVERFLOW`]), so a client spraying new
//!   key values ends in one counter with the route's limit, never in
//!   memory; expired keys are swept at most once per window, so a full
//!   route costs no scan per request;
//! - a peer's claimed count is capped at the route's limit, peers are at
//!   most [`MAX_PEERS`], and a record for a route this replica does not
//!   serve is dropped (its keys are never made);
//! - datagrams (crate::loops::fleet_exchange) are [`MAX_DATAGRAM`] bytes,
//!   authenticated with HMAC-SHA256 under the fleet's key, checked before
//!   a record is read ([`open`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU32, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use prometheus::{IntCounter, IntGauge};

/// Distinct keys one route counts in a window pair.
pub const MAX_KEYS_PER_ROUTE: usize = 4096;
/// Distinct keys one tenant's routes count together (the operator
/// namespaces share one budget).
pub const MAX_KEYS_PER_TENANT: u32 = 16_384;
/// The key of the requests whose own key found no room.
pub const OVERFLOW: u64 = 0;
/// Peers a replica exchanges counts with.
pub const MAX_PEERS: usize = 64;
/// Peers whose counts one window holds: the current ones and as many that
/// left the set while the window lasted (a rolling update replaces every
/// replica once; their counts stay until the window ages out).
const MAX_WINDOW_PEERS: usize = 2 * MAX_PEERS;
/// A peer heard from within this long counts as alive (the metric).
pub const ALIVE: Duration = Duration::from_secs(60);
/// The status of a refused request unless the operator says otherwise
/// (`--global-rate-limit-status-code`), as ingress-nginx's
/// `global-rate-limit-status-code` defaults to.
pub const DEFAULT_STATUS: u16 = 429;
/// A datagram's largest size: within an Ethernet MTU with IP and UDP
/// headers, so nothing is fragmented.
pub const MAX_DATAGRAM: usize = 1400;

const MAGIC: &[u8; 4] = b"TPGR";
const VERSION: u8 = 1;
/// magic, version, sequence, record count.
const HEADER: usize = 4 + 1 + 8 + 2;
/// route, window length, key, window number, count.
const RECORD: usize = 8 + 4 + 8 + 8 + 4;
const MAC: usize = 32;
/// Records one datagram carries.
pub const RECORDS_PER_DATAGRAM: usize = (MAX_DATAGRAM - HEADER - MAC) / RECORD;

/// The counts of every route with a global limit on this replica, kept
/// across snapshots (a route's counts live while a snapshot holds it).
#[derive(Debug)]
pub struct GlobalCounts {
    routes: Mutex<HashMap<u64, Weak<RouteCounts>>>,
    budgets: Mutex<HashMap<Box<str>, Weak<Budget>>>,
    /// Whether counts are exchanged (the fleet's key and peers are set).
    fleet: AtomicBool,
    /// The status of a refused request ([`DEFAULT_STATUS`]).
    status: AtomicU16,
    signal: Arc<Signal>,
    pub metrics: GlobalMetrics,
}

/// Some count changed since the exchange loop last looked.
#[derive(Debug, Default)]
struct Signal {
    pending: AtomicBool,
    wake: tokio::sync::Notify,
}

impl Signal {
    fn raise(&self) {
        if !self.pending.swap(true, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }
}

/// What an operator sees of the exchange (registered by crate::server).
#[derive(Clone, Debug)]
pub struct GlobalMetrics {
    /// Records sent to peers (one per key and peer).
    pub sent: IntCounter,
    /// Records from peers merged.
    pub received: IntCounter,
    /// Datagrams dropped: from an address not a peer, a bad MAC, a replay,
    /// a malformed body.
    pub refused: IntCounter,
    /// Requests counted under a route's overflow key.
    pub overflowed: IntCounter,
    /// Peers heard from within the last minute, counted when scraped.
    pub peers: PeersAlive,
    /// Peers the fleet's Service lists beyond [`MAX_PEERS`], left out of
    /// the exchange (crate::loops::fleet_peers).
    pub peers_left_out: IntGauge,
    /// 1 when counts are exchanged with a fleet, 0 when each replica
    /// counts alone.
    pub fleet: IntGauge,
}

impl GlobalMetrics {
    fn new() -> GlobalMetrics {
        let counter = |name: &str, help: &str| {
            IntCounter::new(name, help).expect("a constant, valid metric name")
        };
        let gauge = |name: &str, help: &str| {
            IntGauge::new(name, help).expect("a constant, valid metric name")
        };
        GlobalMetrics {
            sent: counter(
                "global_rate_records_sent_total",
                "global-rate-limit counts sent to peers (one per key and peer)",
            ),
            received: counter(
                "global_rate_records_received_total",
                "global-rate-limit counts from peers merged",
            ),
            refused: counter(
                "global_rate_datagrams_refused_total",
                "global-rate-limit datagrams dropped: not from a peer, bad MAC, replayed or malformed",
            ),
            overflowed: counter(
                "global_rate_overflowed_total",
                "requests counted under a route's overflow key (its key found no room)",
            ),
            peers: PeersAlive {
                gauge: gauge(
                    "global_rate_peers_alive",
                    "peers heard from within the last minute",
                ),
                heard: Arc::default(),
            },
            peers_left_out: gauge(
                "global_rate_peers_left_out",
                "replicas the fleet's Service lists beyond the 64 peers kept, sent no counts",
            ),
            fleet: gauge(
                "global_rate_fleet",
                "1: global-rate-limit counts are shared with peers; 0: each replica counts alone",
            ),
        }
    }

    /// Every collector, for a registry.
    pub fn collectors(&self) -> Vec<Box<dyn prometheus::core::Collector>> {
        vec![
            Box::new(self.sent.clone()),
            Box::new(self.received.clone()),
            Box::new(self.refused.clone()),
            Box::new(self.overflowed.clone()),
            Box::new(self.peers.clone()),
            Box::new(self.peers_left_out.clone()),
            Box::new(self.fleet.clone()),
        ]
    }
}

/// The peers heard from within [`ALIVE`], counted from each one's last
/// datagram when the metrics are read: a peer that falls silent drops out
/// of the count without the exchange waking up to say so.
#[derive(Clone, Debug)]
pub struct PeersAlive {
    gauge: IntGauge,
    /// Peer (the exchange's number for it) -> when its last datagram was
    /// accepted; at most the current peers.
    heard: Arc<Mutex<HashMap<u16, Instant>>>,
}

impl PeersAlive {
    /// A datagram of `peer` was accepted at `at`.
    pub fn heard(&self, peer: u16, at: Instant) {
        self.heard.lock().insert(peer, at);
    }

    /// `peer` left the set of peers.
    pub fn forget(&self, peer: u16) {
        self.heard.lock().remove(&peer);
    }

    /// Peers heard from within [`ALIVE`] of now.
    pub fn get(&self) -> i64 {
        self.alive_at(Instant::now())
    }

    fn alive_at(&self, now: Instant) -> i64 {
        let heard = self.heard.lock();
        heard
            .values()
            .filter(|at| now.saturating_duration_since(**at) < ALIVE)
            .count() as i64
    }
}

impl prometheus::core::Collector for PeersAlive {
    fn desc(&self) -> Vec<&prometheus::core::Desc> {
        prometheus::core::Collector::desc(&self.gauge)
    }

    fn collect(&self) -> Vec<prometheus::proto::MetricFamily> {
        self.gauge.set(self.get());
        prometheus::core::Collector::collect(&self.gauge)
    }
}

impl Default for GlobalCounts {
    fn default() -> Self {
        GlobalCounts {
            routes: Mutex::default(),
            budgets: Mutex::default(),
            fleet: AtomicBool::new(false),
            status: AtomicU16::new(DEFAULT_STATUS),
            signal: Arc::default(),
            metrics: GlobalMetrics::new(),
        }
    }
}

/// How many keys one owner's routes hold.
#[derive(Debug, Default)]
pub struct Budget {
    used: AtomicU32,
}

impl Budget {
    fn take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < MAX_KEYS_PER_TENANT).then_some(n + 1)
            })
            .is_ok()
    }

    fn give(&self, n: usize) {
        self.used.fetch_sub(n as u32, Ordering::AcqRel);
    }

    pub fn used(&self) -> u32 {
        self.used.load(Ordering::Acquire)
    }
}

/// One route's counts: its limit, its window and its keys.
#[derive(Debug)]
pub struct RouteCounts {
    /// The same on every replica serving the same route with the same
    /// limit and window ([`route_id`]).
    pub id: u64,
    pub limit: u32,
    pub window_ms: u64,
    /// The status of a request refused ([`GlobalCounts::set_status`]).
    status: u16,
    budget: Arc<Budget>,
    keys: Mutex<Keys>,
    /// A count changed since the exchange loop last took this route's.
    dirty: AtomicBool,
    /// The exchange loop's wake-up, when counts are exchanged.
    signal: Option<Arc<Signal>>,
    overflowed: IntCounter,
}

#[derive(Debug, Default)]
struct Keys {
    map: HashMap<u64, Entry>,
    /// The window expired keys were last swept in.
    swept: u64,
}

#[derive(Debug, Default)]
struct Entry {
    cur: Window,
    prev: Window,
    /// This replica's count changed since it was last sent.
    changed: bool,
}

#[derive(Debug, Default, Clone)]
struct Window {
    number: u64,
    local: u32,
    /// (peer, its latest count for this window).
    peers: Vec<(u16, u32)>,
}

impl Window {
    fn at(number: u64) -> Window {
        Window {
            number,
            ..Window::default()
        }
    }

    fn total(&self) -> u64 {
        u64::from(self.local) + self.peers.iter().map(|(_, n)| u64::from(*n)).sum::<u64>()
    }
}

impl Entry {
    /// Moves the entry to window `number` (forward only).
    fn roll(&mut self, number: u64) {
        if self.cur.number >= number {
            return;
        }
        self.prev = if self.cur.number + 1 == number {
            std::mem::take(&mut self.cur)
        } else {
            Window::at(number - 1)
        };
        self.cur = Window::at(number);
    }

    fn expired(&self, number: u64) -> bool {
        self.cur.number + 1 < number
    }
}

/// The id of a route's counts: FNV-1a (fixed, so every replica computes
/// the same) of its name, limit and window.
pub fn route_id(name: &str, limit: u32, window_ms: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let (limit, window) = (limit.to_be_bytes(), window_ms.to_be_bytes());
    let bytes = name
        .as_bytes()
        .iter()
        .chain(&[0xff])
        .chain(&limit)
        .chain(&window);
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

/// Milliseconds since the Unix epoch: windows are numbered alike on
/// every replica whose clock agrees.
pub fn unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl GlobalCounts {
    /// The counts of a route named `name` (a stable name: an Ingress's
    /// `namespace/name`) of `owner` (a tenant cluster, "" for the operator
    /// namespaces), the same ones while any snapshot holds them.
    pub fn route(&self, name: &str, owner: &str, limit: u32, window_ms: u64) -> Arc<RouteCounts> {
        let id = route_id(name, limit, window_ms);
        let mut routes = self.routes.lock();
        if let Some(route) = routes.get(&id).and_then(Weak::upgrade) {
            return route;
        }
        routes.retain(|_, r| r.strong_count() > 0);
        let route = Arc::new(RouteCounts {
            id,
            limit,
            window_ms: window_ms.max(1),
            status: self.status.load(Ordering::Acquire),
            budget: self.budget(owner),
            keys: Mutex::default(),
            dirty: AtomicBool::new(false),
            signal: self
                .fleet
                .load(Ordering::Acquire)
                .then(|| self.signal.clone()),
            overflowed: self.metrics.overflowed.clone(),
        });
        routes.insert(id, Arc::downgrade(&route));
        route
    }

    fn budget(&self, owner: &str) -> Arc<Budget> {
        let mut budgets = self.budgets.lock();
        if let Some(b) = budgets.get(owner).and_then(Weak::upgrade) {
            return b;
        }
        budgets.retain(|_, b| b.strong_count() > 0);
        let b = Arc::new(Budget::default());
        budgets.insert(owner.into(), Arc::downgrade(&b));
        b
    }

    /// Counts are exchanged from now on (set before the first compile).
    pub fn set_fleet(&self, on: bool) {
        self.fleet.store(on, Ordering::Release);
        self.metrics.fleet.set(i64::from(on));
    }

    pub fn is_fleet(&self) -> bool {
        self.fleet.load(Ordering::Acquire)
    }

    /// The status refused requests are answered with from now on (set
    /// before the first compile; a 4xx or 5xx, checked by the flag).
    pub fn set_status(&self, status: u16) {
        self.status.store(status, Ordering::Release);
    }

    /// Waits until a count changed since the last [`Self::take_changes`].
    pub async fn wait_changed(&self) {
        loop {
            let notified = self.signal.wake.notified();
            if self.signal.pending.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    /// Every record this replica's counts changed since the last call:
    /// (route, window, key, window number, this replica's count).
    pub fn take_changes(&self, now_ms: u64) -> Vec<Record> {
        self.signal.pending.store(false, Ordering::Release);
        let routes: Vec<Arc<RouteCounts>> = self
            .routes
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut out = Vec::new();
        for route in routes {
            if !route.dirty.swap(false, Ordering::AcqRel) {
                continue;
            }
            let number = now_ms / route.window_ms;
            let mut keys = route.keys.lock();
            for (key, entry) in keys.map.iter_mut() {
                if !std::mem::take(&mut entry.changed) {
                    continue;
                }
                // The window it changed in, whether or not it has ended.
                if entry.cur.number + 1 < number {
                    continue;
                }
                out.push(Record {
                    route: route.id,
                    window_ms: route.window_ms as u32,
                    key: *key,
                    number: entry.cur.number,
                    count: entry.cur.local,
                });
            }
        }
        out
    }

    /// Marks every count of this replica in a current window as changed,
    /// so the next exchange sends them all: a peer that just joined the
    /// set (a replaced replica) learns the fleet's counts without waiting
    /// for each key's next request. Once per change of the peers.
    pub fn resend_all(&self) {
        let routes: Vec<Arc<RouteCounts>> = self
            .routes
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut any = false;
        for route in routes {
            let mut keys = route.keys.lock();
            let mut dirty = false;
            for entry in keys.map.values_mut().filter(|e| e.cur.local > 0) {
                entry.changed = true;
                dirty = true;
            }
            drop(keys);
            if dirty {
                route.dirty.store(true, Ordering::Release);
                any = true;
            }
        }
        if any {
            self.signal.raise();
        }
    }

    /// Writes `peer`'s records (already authenticated) into the counts;
    /// returns how many were merged.
    pub fn merge(&self, peer: u16, records: &[Record], now_ms: u64) -> usize {
        let mut merged = 0;
        let mut route: Option<Arc<RouteCounts>> = None;
        for r in records {
            if route.as_ref().is_none_or(|c| c.id != r.route) {
                route = self.routes.lock().get(&r.route).and_then(Weak::upgrade);
            }
            let Some(counts) = &route else { continue };
            if u64::from(r.window_ms) != counts.window_ms {
                continue;
            }
            if counts.merge(peer, r, now_ms) {
                merged += 1;
            }
        }
        self.metrics.received.inc_by(merged as u64);
        merged
    }

    /// Keys counted by every route (tests, `/status`).
    pub fn keys(&self) -> usize {
        self.routes
            .lock()
            .values()
            .filter_map(Weak::upgrade)
            .map(|r| r.keys.lock().map.len())
            .sum()
    }
}

/// One count as exchanged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Record {
    pub route: u64,
    pub window_ms: u32,
    pub key: u64,
    pub number: u64,
    pub count: u32,
}

/// A request over the limit: the status to answer and how long until one
/// more would pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OverLimit {
    pub status: u16,
    pub retry_after_ms: u64,
}

impl RouteCounts {
    /// Counts one request of `key` at `now_ms` unless the fleet's
    /// estimate for the key is at the limit already (a refused request is
    /// not counted).
    pub fn admit(&self, key: u64, now_ms: u64) -> Result<(), OverLimit> {
        let number = now_ms / self.window_ms;
        let elapsed = now_ms % self.window_ms;
        let mut keys = self.keys.lock();
        let key = self.slot(&mut keys, key, number);
        let entry = keys.map.entry(key).or_default();
        entry.roll(number);
        let (prev, cur) = (entry.prev.total(), entry.cur.total());
        // In whole numbers, times the window: prev * (w - elapsed) / w +
        // cur + 1 <= limit.
        let w = u128::from(self.window_ms);
        let estimate = u128::from(prev) * (w - u128::from(elapsed)) + (u128::from(cur) + 1) * w;
        if estimate > u128::from(self.limit) * w {
            return Err(OverLimit {
                status: self.status,
                retry_after_ms: self.wait(prev, cur, elapsed),
            });
        }
        entry.cur.local = entry.cur.local.saturating_add(1);
        if let Some(signal) = &self.signal {
            entry.changed = true;
            drop(keys);
            if !self.dirty.swap(true, Ordering::AcqRel) {
                signal.raise();
            }
        }
        Ok(())
    }

    /// How long until the estimate leaves room for one more: the previous
    /// window's weight shrinks as the current one goes on, and the
    /// current one's count is gone when it ends.
    fn wait(&self, prev: u64, cur: u64, elapsed: u64) -> u64 {
        let w = u128::from(self.window_ms);
        let to_end = self.window_ms - elapsed;
        let Some(room) = u64::from(self.limit).checked_sub(cur + 1) else {
            return to_end;
        };
        if prev == 0 {
            return to_end;
        }
        // prev * (w - t) <= room * w  <=>  t >= w - room * w / prev
        let t = w.saturating_sub((u128::from(room) * w) / u128::from(prev));
        (t as u64).saturating_sub(elapsed).clamp(1, to_end)
    }

    /// The key a request of `key` counts under: its own, unless no room
    /// is left for a new one on the route or the tenant.
    fn slot(&self, keys: &mut Keys, key: u64, number: u64) -> u64 {
        if keys.map.contains_key(&key) {
            return key;
        }
        if keys.map.len() >= MAX_KEYS_PER_ROUTE && keys.swept != number {
            keys.swept = number;
            let before = keys.map.len();
            keys.map.retain(|k, e| *k == OVERFLOW || !e.expired(number));
            self.budget.give(before - keys.map.len());
        }
        if keys.map.len() < MAX_KEYS_PER_ROUTE && self.budget.take() {
            return key;
        }
        self.overflowed.inc();
        // The overflow key is the route's own: it needs no budget.
        keys.map.entry(OVERFLOW).or_default();
        OVERFLOW
    }

    fn merge(&self, peer: u16, r: &Record, now_ms: u64) -> bool {
        let number = now_ms / self.window_ms;
        if r.number + 1 < number || r.number > number {
            return false;
        }
        let count = r.count.min(self.limit);
        let mut keys = self.keys.lock();
        // A peer's key takes room as a request's does, but never
        // overflows: its own overflow key carries what it could not keep.
        if !keys.map.contains_key(&r.key) {
            if r.key != OVERFLOW && (keys.map.len() >= MAX_KEYS_PER_ROUTE || !self.budget.take()) {
                return false;
            }
            keys.map.insert(r.key, Entry::default());
        }
        let Some(entry) = keys.map.get_mut(&r.key) else {
            return false;
        };
        entry.roll(number);
        let window = if r.number == entry.cur.number {
            &mut entry.cur
        } else {
            &mut entry.prev
        };
        if let Some((_, n)) = window.peers.iter_mut().find(|(p, _)| *p == peer) {
            *n = count;
        } else if window.peers.len() < MAX_WINDOW_PEERS {
            window.peers.push((peer, count));
        } else {
            return false;
        }
        true
    }

    /// Keys counted (tests).
    pub fn keys(&self) -> usize {
        self.keys.lock().map.len()
    }
}

impl Drop for RouteCounts {
    fn drop(&mut self) {
        let own = self
            .keys
            .get_mut()
            .map
            .keys()
            .filter(|k| **k != OVERFLOW)
            .count();
        self.budget.give(own);
    }
}

/// The HMAC-SHA256 key of the fleet's datagrams.
pub fn mac_key(key: &[u8]) -> ring::hmac::Key {
    ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key)
}

/// A datagram of `records` (at most [`RECORDS_PER_DATAGRAM`]) numbered
/// `sequence`, authenticated under `key`.
pub fn seal(key: &ring::hmac::Key, sequence: u64, records: &[Record]) -> Vec<u8> {
    let records = &records[..records.len().min(RECORDS_PER_DATAGRAM)];
    let mut out = Vec::with_capacity(HEADER + records.len() * RECORD + MAC);
    out.extend_from_slice(MAGIC);
    out.push(VERSION);
    out.extend_from_slice(&sequence.to_be_bytes());
    out.extend_from_slice(&(records.len() as u16).to_be_bytes());
    for r in records {
        out.extend_from_slice(&r.route.to_be_bytes());
        out.extend_from_slice(&r.window_ms.to_be_bytes());
        out.extend_from_slice(&r.key.to_be_bytes());
        out.extend_from_slice(&r.number.to_be_bytes());
        out.extend_from_slice(&r.count.to_be_bytes());
    }
    let tag = ring::hmac::sign(key, &out);
    out.extend_from_slice(tag.as_ref());
    out
}

/// The sequence and records of a datagram, or `None`: too short or long,
/// a MAC that does not verify under `key` (checked first, before any
/// field is read), or a body that does not match its count.
pub fn open(key: &ring::hmac::Key, datagram: &[u8]) -> Option<(u64, Vec<Record>)> {
    if datagram.len() < HEADER + MAC || datagram.len() > MAX_DATAGRAM {
        return None;
    }
    let (body, tag) = datagram.split_at(datagram.len() - MAC);
    ring::hmac::verify(key, body, tag).ok()?;
    if &body[..4] != MAGIC || body[4] != VERSION {
        return None;
    }
    let u64_at =
        |b: &[u8], at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap_or_default());
    let u32_at =
        |b: &[u8], at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap_or_default());
    let sequence = u64_at(body, 5);
    let count = usize::from(u16::from_be_bytes([body[13], body[14]]));
    let rest = &body[HEADER..];
    if rest.len() != count * RECORD {
        return None;
    }
    let records = rest
        .chunks_exact(RECORD)
        .map(|b| Record {
            route: u64_at(b, 0),
            window_ms: u32_at(b, 8),
            key: u64_at(b, 12),
            number: u64_at(b, 20),
            count: u32_at(b, 28),
        })
        .collect();
    Some((sequence, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    const W: u64 = 10_000;

    fn fleet() -> GlobalCounts {
        let counts = GlobalCounts::default();
        counts.set_fleet(true);
        counts
    }

    #[test]
    fn fixed_window_then_the_previous_one_weighs_what_is_left() {
        let counts = GlobalCounts::default();
        let route = counts.route("ns/web", "t", 10, W);
        let t0 = 1_000 * W;
        for n in 0..10 {
            assert_eq!(route.admit(7, t0 + n), Ok(()), "request {n}");
        }
        let over = route.admit(7, t0 + 10).unwrap_err();
        assert!(over.retry_after_ms > 0 && over.retry_after_ms <= W);
        // Another key has its own count.
        assert_eq!(route.admit(8, t0 + 10), Ok(()));
        // Half into the next window the previous one weighs 5: five more.
        let half = t0 + W + W / 2;
        let passed = (0..20).filter(|_| route.admit(7, half).is_ok()).count();
        assert_eq!(passed, 5);
        // Two windows on, nothing is left of it.
        let later = t0 + 3 * W;
        assert_eq!(
            (0..20).filter(|_| route.admit(7, later).is_ok()).count(),
            10
        );
    }

    #[test]
    fn retry_after_is_when_the_estimate_leaves_room() {
        let counts = GlobalCounts::default();
        let route = counts.route("ns/web", "t", 10, W);
        let t0 = 1_000 * W;
        for _ in 0..10 {
            route.admit(1, t0).unwrap();
        }
        // Full in its own window: until it ends.
        assert_eq!(
            route.admit(1, t0 + 2_000).unwrap_err().retry_after_ms,
            8_000
        );
        // Next window: 10 * (1 - t/W) + 0 <= 9 once t >= W/10.
        let err = route.admit(1, t0 + W).unwrap_err();
        assert_eq!(err.retry_after_ms, 1_000);
        assert_eq!(route.admit(1, t0 + W + 1_000), Ok(()));
    }

    /// A replica's estimate adds what each peer reported for the same
    /// window; a peer's claim is capped at the limit; a record of a route
    /// this replica does not serve makes nothing.
    #[test]
    fn peers_counts_add_up_capped_and_age_out() {
        let (a, b) = (fleet(), fleet());
        let ra = a.route("ns/web", "t", 10, W);
        let rb = b.route("ns/web", "t", 10, W);
        let t0 = 1_000 * W;
        for _ in 0..6 {
            ra.admit(42, t0).unwrap();
        }
        let sent = a.take_changes(t0);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].count, 6);
        // Nothing changed since: nothing to send.
        assert!(a.take_changes(t0).is_empty());
        assert_eq!(b.merge(1, &sent, t0), 1);
        assert_eq!((0..10).filter(|_| rb.admit(42, t0).is_ok()).count(), 4);
        // A claim beyond the limit counts as the limit, no more.
        let mut huge = sent[0];
        huge.count = u32::MAX;
        let c = fleet();
        let rc = c.route("ns/web", "t", 10, W);
        c.merge(2, &[huge], t0);
        c.merge(3, &[huge], t0);
        assert!(rc.admit(42, t0).is_err());
        // Unknown routes and windows of another length are dropped.
        let mut other = sent[0];
        other.route ^= 1;
        let mut wrong_window = sent[0];
        wrong_window.window_ms = 1;
        assert_eq!(b.merge(1, &[other, wrong_window], t0), 0);
        // Two windows later the peer's count no longer weighs.
        assert_eq!(
            (0..20).filter(|_| rb.admit(42, t0 + 2 * W).is_ok()).count(),
            10
        );
        // A record of a window long gone is dropped.
        assert_eq!(b.merge(1, &sent, t0 + 5 * W), 0);
    }

    /// After a change of peers every count this replica holds is sent
    /// again, nothing it does not hold.
    #[test]
    fn a_new_peer_gets_every_count_again() {
        let counts = fleet();
        let t0 = 1_000 * W;
        let route = counts.route("ns/web", "t", 10, W);
        let idle = counts.route("ns/idle", "t", 10, W);
        for key in [1, 2, 2] {
            route.admit(key, t0).unwrap();
        }
        assert_eq!(counts.take_changes(t0).len(), 2);
        assert!(counts.take_changes(t0).is_empty());
        counts.resend_all();
        let mut again = counts.take_changes(t0);
        again.sort_by_key(|r| r.key);
        let sent: Vec<(u64, u32)> = again.iter().map(|r| (r.key, r.count)).collect();
        assert_eq!(sent, [(1, 1), (2, 2)]);
        assert!(
            again
                .iter()
                .all(|r| r.route == route.id && r.route != idle.id)
        );
    }

    /// A client sending a new key value with every request fills the
    /// route's keys and then counts in one overflow key with the route's
    /// limit; the memory stays at the bound.
    #[test]
    fn key_spraying_ends_in_the_overflow_key() {
        let counts = GlobalCounts::default();
        let route = counts.route("ns/web", "t", 5, W);
        let t0 = 1_000 * W;
        let mut refused = 0;
        for key in 1..=(MAX_KEYS_PER_ROUTE as u64 + 1_000) {
            if route.admit(key, t0).is_err() {
                refused += 1;
            }
        }
        assert_eq!(route.keys(), MAX_KEYS_PER_ROUTE + 1);
        assert_eq!(refused, 1_000 - 5, "the overflow key admits its limit");
        assert_eq!(counts.metrics.overflowed.get(), 1_000);
        // Once the keys expire they are swept and new keys have room.
        assert_eq!(route.admit(u64::MAX, t0 + 3 * W), Ok(()));
        assert_eq!(route.keys(), 2);
    }

    /// One tenant's routes share its budget; another tenant has its own.
    #[test]
    fn tenant_budget_caps_keys_over_its_routes() {
        let counts = GlobalCounts::default();
        let t0 = 1_000 * W;
        let routes: Vec<_> = (0..5)
            .map(|i| counts.route(&format!("ns/r{i}"), "t", 100, W))
            .collect();
        for (i, r) in routes.iter().enumerate() {
            for k in 1..=MAX_KEYS_PER_ROUTE as u64 {
                let _ = r.admit(k | ((i as u64) << 32), t0);
            }
        }
        let own: usize = routes.iter().map(|r| r.keys()).sum();
        assert!(own <= MAX_KEYS_PER_TENANT as usize + routes.len(), "{own}");
        let other = counts.route("ns/x", "u", 100, W);
        other.admit(1, t0).unwrap();
        assert_eq!(other.keys(), 1);
        drop(routes);
        assert_eq!(counts.budget("t").used(), 0);
    }

    #[test]
    fn datagrams_verify_before_reading() {
        let key =
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"0123456789abcdef0123456789abcdef");
        let records: Vec<Record> = (0..100)
            .map(|i| Record {
                route: i,
                window_ms: 60_000,
                key: i * 7,
                number: 5,
                count: i as u32,
            })
            .collect();
        let d = seal(&key, 9, &records);
        assert!(d.len() <= MAX_DATAGRAM);
        let (seq, got) = open(&key, &d).unwrap();
        assert_eq!(seq, 9);
        assert_eq!(got, records[..RECORDS_PER_DATAGRAM]);
        // Another key, a flipped bit, a cut or a padded datagram: nothing.
        let other =
            ring::hmac::Key::new(ring::hmac::HMAC_SHA256, b"another key, just as long as it");
        assert!(open(&other, &d).is_none());
        let mut flipped = d.clone();
        flipped[20] ^= 1;
        assert!(open(&key, &flipped).is_none());
        assert!(open(&key, &d[..d.len() - 1]).is_none());
        assert!(open(&key, &[0; 10]).is_none());
        assert!(open(&key, &vec![0; MAX_DATAGRAM + 1]).is_none());
        // A well-signed body whose count lies is refused.
        let mut body = d[..d.len() - MAC].to_vec();
        body[14] = body[14].wrapping_add(1);
        let tag = ring::hmac::sign(&key, &body);
        body.extend_from_slice(tag.as_ref());
        assert!(open(&key, &body).is_none());
    }

    /// The gauge is counted when scraped: a peer last heard more than a
    /// minute ago is not alive, though nothing was exchanged since; one
    /// that left the set is not counted at all.
    #[test]
    fn peers_alive_is_counted_when_scraped() {
        let metrics = GlobalMetrics::new();
        let registry = prometheus::Registry::new();
        registry.register(Box::new(metrics.peers.clone())).unwrap();
        let scraped = || registry.gather()[0].get_metric()[0].get_gauge().get_value();
        let now = Instant::now();
        metrics.peers.heard(1, now);
        metrics.peers.heard(2, now);
        assert_eq!(scraped(), 2.0);
        // Peer 2's last datagram is now older than a minute: no exchange
        // happens, the next scrape counts it gone.
        let Some(long_ago) = now.checked_sub(ALIVE + Duration::from_secs(1)) else {
            return; // a clock too young to hold a minute ago
        };
        metrics.peers.heard(2, long_ago);
        assert_eq!(scraped(), 1.0);
        assert_eq!(metrics.peers.get(), 1);
        assert_eq!(metrics.peers.alive_at(now + ALIVE), 0);
        metrics.peers.forget(1);
        assert_eq!(scraped(), 0.0);
    }

    /// A refusal carries the status the operator set, 429 by default.
    #[test]
    fn refusals_carry_the_status_set() {
        let t0 = 1_000 * W;
        let counts = GlobalCounts::default();
        let route = counts.route("ns/a", "t", 1, W);
        route.admit(1, t0).unwrap();
        assert_eq!(route.admit(1, t0).unwrap_err().status, 429);
        let counts = GlobalCounts::default();
        counts.set_status(503);
        let route = counts.route("ns/a", "t", 1, W);
        route.admit(1, t0).unwrap();
        assert_eq!(route.admit(1, t0).unwrap_err().status, 503);
    }

    #[test]
    fn route_ids_agree_across_replicas_and_follow_limit_and_window() {
        assert_eq!(route_id("ns/a", 5, W), route_id("ns/a", 5, W));
        assert_ne!(route_id("ns/a", 5, W), route_id("ns/a", 6, W));
        assert_ne!(route_id("ns/a", 5, W), route_id("ns/a", 5, 2 * W));
        assert_ne!(route_id("ns/a", 5, W), route_id("ns/b", 5, W));
    }
}
