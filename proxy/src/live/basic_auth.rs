//! What basic authentication keeps across snapshots, per owner (a tenant
//! cluster, or "" for the operator namespaces) and replica: the
//! credentials it has verified, the failures each client address and the
//! owner as a whole have made, and the owner's places on the hashing pool.
//! Password hashing is CPU a client can make the fleet spend (bcrypt at
//! cost 12 is a quarter of a second of a core); these keep what one owner's
//! clients can spend to that owner:
//!
//! - a verified `(setting, user, password)` is remembered for
//!   [`CACHE_TTL`] by a keyed hash of the three (two SipHash keys drawn at
//!   random per process: never the password, and no key a client could
//!   aim a collision at), at most [`CACHE_ENTRIES`] per owner, so a
//!   returning user costs two hashes and a lookup;
//! - a failure counts against its client address ([`CLIENT_FAILURES`]) and
//!   its owner ([`OWNER_FAILURES`]); past either, requests that need a
//!   verification are answered 429 without hashing (a cached credential
//!   still passes);
//! - the hashing runs on [`Pool`]: a few threads taking the owners with
//!   waiting work in turn, each owner holding at most [`QUEUE_SLOTS`]
//!   checks waiting or running. A full owner is answered 503 without
//!   hashing; another owner's check waits behind at most one check of each
//!   owner with work, however many one owner sends.
//!
//! Idle, nothing runs: the pool's threads wait on a condition variable.

use std::collections::{HashMap, VecDeque};
use std::hash::BuildHasher;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock, Weak};

use parking_lot::{Condvar, Mutex};

use crate::live::rate_table::now_ns;

/// How long a verified credential is remembered.
pub const CACHE_TTL_NS: u64 = 300 * 1_000_000_000;
pub const CACHE_TTL: std::time::Duration = std::time::Duration::from_nanos(CACHE_TTL_NS);
/// Verified credentials remembered per owner; the oldest goes first.
pub const CACHE_ENTRIES: usize = 1024;
/// Failures a client address may make on an owner's routes: a burst of
/// `burst`, then one every `interval`.
pub const CLIENT_FAILURES: Limit = Limit {
    burst: 10,
    interval_ns: 6_000_000_000,
};
/// Failures an owner's routes take from all clients together per replica.
pub const OWNER_FAILURES: Limit = Limit {
    burst: 100,
    interval_ns: 20_000_000,
};
/// Client addresses whose failures an owner remembers (sets of 8; a new
/// address takes the place of the one nearest to being forgotten).
pub const CLIENT_SLOTS: usize = 2048;
/// Checks one owner may have waiting or running on the pool.
pub const QUEUE_SLOTS: u32 = 8;

const WAYS: usize = 8;

/// One set of client addresses' failures: (keyed hash of the address,
/// GCRA's theoretical arrival time of its failures); key 0 is free.
type ClientSet = [(u64, u64); WAYS];

/// A failure allowance: GCRA over failures.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub burst: u64,
    pub interval_ns: u64,
}

impl Limit {
    /// Nanoseconds until one more failure is allowed after `tat` (the
    /// theoretical arrival time of the failures so far), 0 when it is.
    fn wait(&self, tat: u64, now: u64) -> u64 {
        tat.saturating_sub(now)
            .saturating_sub(self.burst.saturating_sub(1) * self.interval_ns)
    }

    fn add(&self, tat: u64, now: u64) -> u64 {
        tat.max(now) + self.interval_ns
    }
}

/// The process's keys of verified credentials.
fn keys() -> &'static (std::hash::RandomState, std::hash::RandomState) {
    static KEYS: OnceLock<(std::hash::RandomState, std::hash::RandomState)> = OnceLock::new();
    KEYS.get_or_init(|| (std::hash::RandomState::new(), std::hash::RandomState::new()))
}

/// The key a verified credential is remembered by.
pub fn credential_key(setting: u64, user: &[u8], password: &[u8]) -> u128 {
    let (a, b) = keys();
    let one = a.hash_one((setting, user, password));
    let two = b.hash_one((setting, user, password));
    (u128::from(one) << 64) | u128::from(two)
}

/// One owner's state.
#[derive(Debug)]
pub struct TenantAuth {
    pub owner: Box<str>,
    cache: Mutex<Cache>,
    clients: Box<[Mutex<ClientSet>]>,
    owner_tat: Mutex<u64>,
    /// Checks waiting or running on the pool.
    queued: AtomicU32,
}

#[derive(Debug, Default)]
struct Cache {
    /// Key -> when it expires.
    entries: HashMap<u128, u64>,
    /// Keys in insertion order, for eviction.
    order: VecDeque<u128>,
}

/// Why a check was not done.
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    /// Over a failure allowance: the seconds until one more is allowed.
    TooManyFailures(u64),
    /// The owner's places on the pool are all taken.
    QueueFull,
}

impl TenantAuth {
    fn new(owner: &str) -> TenantAuth {
        TenantAuth {
            owner: owner.into(),
            cache: Mutex::new(Cache::default()),
            clients: (0..CLIENT_SLOTS / WAYS)
                .map(|_| Mutex::new([(0, 0); WAYS]))
                .collect(),
            owner_tat: Mutex::new(0),
            queued: AtomicU32::new(0),
        }
    }

    /// Whether `key` was verified within [`CACHE_TTL`].
    pub fn cached(&self, key: u128) -> bool {
        let now = now_ns();
        self.cache
            .lock()
            .entries
            .get(&key)
            .is_some_and(|expires| *expires > now)
    }

    /// Remembers a verified credential (the oldest goes past
    /// [`CACHE_ENTRIES`]).
    pub fn remember(&self, key: u128) {
        let expires = now_ns() + CACHE_TTL_NS;
        let mut cache = self.cache.lock();
        if cache.entries.insert(key, expires).is_none() {
            cache.order.push_back(key);
        }
        while cache.order.len() > CACHE_ENTRIES {
            if let Some(old) = cache.order.pop_front() {
                cache.entries.remove(&old);
            }
        }
    }

    /// Verified credentials remembered (tests, `/status`).
    pub fn cache_len(&self) -> usize {
        self.cache.lock().entries.len()
    }

    fn client_key(client: Option<IpAddr>) -> u64 {
        keys().0.hash_one(client) | 1
    }

    /// Whether `client` (and the owner) may have one more credential
    /// checked; `Err` with the seconds until it may.
    pub fn admits(&self, client: Option<IpAddr>) -> Result<(), Refused> {
        let now = now_ns();
        let key = Self::client_key(client);
        let set = self.clients[(key >> 1) as usize % self.clients.len()].lock();
        let tat = set.iter().find(|(k, _)| *k == key).map_or(0, |(_, t)| *t);
        drop(set);
        let wait = CLIENT_FAILURES
            .wait(tat, now)
            .max(OWNER_FAILURES.wait(*self.owner_tat.lock(), now));
        if wait > 0 {
            return Err(Refused::TooManyFailures(
                wait.div_ceil(1_000_000_000).max(1),
            ));
        }
        Ok(())
    }

    /// Counts a failed check of `client`'s.
    pub fn failed(&self, client: Option<IpAddr>) {
        let now = now_ns();
        let key = Self::client_key(client);
        {
            let mut set = self.clients[(key >> 1) as usize % self.clients.len()].lock();
            let i = match set.iter().position(|(k, _)| *k == key) {
                Some(i) => i,
                // A free place, else the address nearest to being
                // forgotten (at worst, it gets its allowance again).
                None => {
                    let i = set
                        .iter()
                        .enumerate()
                        .min_by_key(|(_, (k, t))| if *k == 0 { 0 } else { (*t).max(1) })
                        .map_or(0, |(i, _)| i);
                    set[i] = (key, 0);
                    i
                }
            };
            set[i].1 = CLIENT_FAILURES.add(set[i].1, now);
        }
        let mut owner = self.owner_tat.lock();
        *owner = OWNER_FAILURES.add(*owner, now);
    }

    /// Checks waiting or running on the pool (tests, `/status`).
    pub fn queued(&self) -> u32 {
        self.queued.load(Ordering::Acquire)
    }

    /// Runs `check` on the pool in this owner's turn: its answer, or
    /// [`Refused::QueueFull`] at once when the owner's places are taken.
    pub async fn run(
        self: &Arc<Self>,
        check: impl FnOnce() -> bool + Send + 'static,
    ) -> Result<bool, Refused> {
        let place = self.place().ok_or(Refused::QueueFull)?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        pool().submit(
            self,
            Box::new(move || {
                let answer = check();
                // The place is given back before the answer is seen.
                drop(place);
                let _ = tx.send(answer);
            }),
        );
        // A dropped job (never: the pool runs what it took) refuses.
        Ok(rx.await.unwrap_or(false))
    }

    fn place(self: &Arc<Self>) -> Option<Place> {
        self.queued
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < QUEUE_SLOTS).then_some(n + 1)
            })
            .ok()
            .map(|_| Place(self.clone()))
    }
}

/// One check's place among its owner's [`QUEUE_SLOTS`].
struct Place(Arc<TenantAuth>);

impl Drop for Place {
    fn drop(&mut self) {
        self.0.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The state of `owner`, the same `Arc` for as long as a snapshot holds it.
pub fn tenant(owner: &str) -> Arc<TenantAuth> {
    static KNOWN: OnceLock<Mutex<HashMap<Box<str>, Weak<TenantAuth>>>> = OnceLock::new();
    let mut known = KNOWN.get_or_init(Default::default).lock();
    if let Some(state) = known.get(owner).and_then(Weak::upgrade) {
        return state;
    }
    known.retain(|_, s| s.strong_count() > 0);
    let state = Arc::new(TenantAuth::new(owner));
    known.insert(owner.into(), Arc::downgrade(&state));
    state
}

type Job = Box<dyn FnOnce() + Send>;

/// The hashing threads and the owners' queues, taken in turn.
pub struct Pool {
    state: Mutex<PoolState>,
    ready: Condvar,
}

#[derive(Default)]
struct PoolState {
    /// Owners with waiting checks, in the order they get their turn.
    turns: VecDeque<(usize, VecDeque<Job>)>,
    threads: usize,
}

/// The process's pool: a quarter of the cores, at least one thread.
pub fn pool() -> &'static Pool {
    static POOL: OnceLock<Pool> = OnceLock::new();
    POOL.get_or_init(|| {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        Pool::new((cores / 4).max(1))
    })
}

impl Pool {
    /// A pool of `threads`, started on first use.
    pub fn new(threads: usize) -> Pool {
        Pool {
            state: Mutex::new(PoolState {
                turns: VecDeque::new(),
                threads,
            }),
            ready: Condvar::new(),
        }
    }

    /// Queues `job` in `owner`'s turn.
    fn submit(&'static self, owner: &Arc<TenantAuth>, job: Job) {
        let id = Arc::as_ptr(owner) as usize;
        let mut state = self.state.lock();
        if state.threads > 0 {
            for n in 0..std::mem::take(&mut state.threads) {
                let _ = std::thread::Builder::new()
                    .name(format!("basic-auth-{n}"))
                    .spawn(move || self.work());
            }
        }
        match state.turns.iter_mut().find(|(o, _)| *o == id) {
            Some((_, jobs)) => jobs.push_back(job),
            None => state.turns.push_back((id, VecDeque::from([job]))),
        }
        drop(state);
        self.ready.notify_one();
    }

    /// The next job: the first owner's oldest, that owner then going to
    /// the back of the turns if it has more.
    fn next(&self) -> Job {
        let mut state = self.state.lock();
        loop {
            if let Some((owner, mut jobs)) = state.turns.pop_front() {
                let job = jobs.pop_front().expect("an owner in turn has a job");
                if !jobs.is_empty() {
                    state.turns.push_back((owner, jobs));
                }
                return job;
            }
            self.ready.wait(&mut state);
        }
    }

    fn work(&self) {
        loop {
            (self.next())();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> Option<IpAddr> {
        Some(s.parse().unwrap())
    }

    /// A client past its failures is refused without a check, another
    /// client is not; the owner as a whole is bounded too.
    #[test]
    fn failures_are_bounded_per_client_and_per_owner() {
        let t = TenantAuth::new("acme");
        let (a, b) = (ip("192.0.2.1"), ip("192.0.2.2"));
        for _ in 0..CLIENT_FAILURES.burst {
            assert_eq!(t.admits(a), Ok(()));
            t.failed(a);
        }
        assert!(matches!(t.admits(a), Err(Refused::TooManyFailures(s)) if s >= 1));
        assert_eq!(t.admits(b), Ok(()));
        // Many addresses together reach the owner's allowance.
        for i in 0..OWNER_FAILURES.burst {
            t.failed(ip(&format!("198.51.100.{}", i % 250)));
        }
        assert!(matches!(
            t.admits(ip("203.0.113.9")),
            Err(Refused::TooManyFailures(_))
        ));
        // Another owner is not touched.
        assert_eq!(TenantAuth::new("other").admits(a), Ok(()));
    }

    /// Entries are bounded: the oldest is forgotten first; the key is a
    /// keyed hash (the same inputs give the same key in one process).
    #[test]
    fn the_cache_is_bounded_and_keyed() {
        let t = TenantAuth::new("acme");
        let first = credential_key(1, b"alice", b"pw");
        assert_eq!(first, credential_key(1, b"alice", b"pw"));
        assert_ne!(first, credential_key(2, b"alice", b"pw"));
        assert_ne!(first, credential_key(1, b"alice", b"pw2"));
        t.remember(first);
        assert!(t.cached(first));
        for i in 0..CACHE_ENTRIES as u128 {
            t.remember(i + 10);
        }
        assert_eq!(t.cache_len(), CACHE_ENTRIES);
        assert!(!t.cached(first));
        assert!(t.cached(10 + CACHE_ENTRIES as u128 - 1));
    }

    /// One owner's flood takes its own places only: past them it is
    /// refused at once, and another owner's check runs before the
    /// flooder's waiting ones (turns, not timing, show it).
    #[tokio::test]
    async fn a_flooding_owner_holds_its_own_places_only() {
        let pool: &'static Pool = Box::leak(Box::new(Pool::new(1)));
        let (flood, other) = (tenant("flood-test"), tenant("other-test"));
        let order = Arc::new(Mutex::new(Vec::new()));
        // The one thread is held by a check of the flooder's until let go.
        let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
        let (started_tx, started_rx) = std::sync::mpsc::channel::<()>();
        let place = flood.place().unwrap();
        pool.submit(
            &flood,
            Box::new(move || {
                let _ = started_tx.send(());
                let _ = hold_rx.recv();
                drop(place);
            }),
        );
        started_rx.recv().unwrap();
        let mut waiting = Vec::new();
        for i in 0..QUEUE_SLOTS - 1 {
            let place = flood.place().unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            let order = order.clone();
            pool.submit(
                &flood,
                Box::new(move || {
                    order.lock().push(format!("flood{i}"));
                    drop(place);
                    let _ = tx.send(());
                }),
            );
            waiting.push(rx);
        }
        assert_eq!(flood.queued(), QUEUE_SLOTS);
        assert!(flood.place().is_none(), "a full owner is refused");
        assert!(flood.run(|| true).await == Err(Refused::QueueFull));
        let place = other.place().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let seen = order.clone();
        pool.submit(
            &other,
            Box::new(move || {
                seen.lock().push("other".into());
                drop(place);
                let _ = tx.send(());
            }),
        );
        hold_tx.send(()).unwrap();
        rx.await.unwrap();
        for rx in waiting {
            rx.await.unwrap();
        }
        let order = order.lock();
        assert_eq!(order[0], "flood0");
        assert_eq!(order[1], "other", "{order:?}");
        assert_eq!(flood.queued(), 0);
    }
}
