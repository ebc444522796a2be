//! Idle upstream connections, without a task or timer per connection.
//!
//! One [`Pool`] per engine: a mutex-guarded map from upstream address to a
//! LIFO list of idle connections (the most recently used first, so the
//! warmest connection is reused and the coldest ones age out). Nothing
//! watches an idle connection: whether its peer closed it is checked when
//! it is taken (a non-blocking read that must find nothing), and its age
//! against the idle timeout at the same moment. Addresses that are no
//! longer picked (an endpoint gone from the snapshot) are swept when
//! connections are put back, at most once per idle timeout, so their idle
//! connections do not hold file descriptors until the backend closes them.
//!
//! A secured connection (TLS to the backend) is kept under its
//! transport's class beside the address: it is only ever reused by a
//! request whose route secures its connections the same way.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::upstream::UpstreamConn;

/// Plain TCP's pool class ([`crate::Transport::class`] for the others).
pub const PLAIN: u64 = 0;

#[derive(Debug)]
struct Idle {
    stream: UpstreamConn,
    since: Instant,
}

/// Counters of what the pool did, for tests and metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PoolStats {
    /// Connections handed out from the pool.
    pub reused: u64,
    /// Idle connections found closed by their peer when taken.
    pub stale: u64,
    /// Idle connections dropped for age.
    pub expired: u64,
    /// Connections put back.
    pub returned: u64,
    /// Connections not put back because the list was full.
    pub overflow: u64,
}

/// Keys are upstream addresses from the snapshot, never request input: a
/// fixed-seed fast hash is safe, and SipHash was a visible part of each
/// request's cost (a lookup on take, another on put).
type AddrHasher = foldhash::fast::FixedState;

#[derive(Debug, Default)]
struct Inner {
    idle: HashMap<(SocketAddr, u64), Vec<Idle>, AddrHasher>,
    stats: PoolStats,
    last_sweep: Option<Instant>,
}

impl Inner {
    /// Drops every idle connection older than `timeout`, and the lists
    /// left empty.
    fn sweep(&mut self, now: Instant, timeout: Duration) {
        let mut expired = 0u64;
        self.idle.retain(|_, list| {
            // Oldest first: the list is pushed in the order of return.
            let keep_from = list
                .iter()
                .position(|i| now.duration_since(i.since) < timeout)
                .unwrap_or(list.len());
            expired += keep_from as u64;
            list.drain(..keep_from);
            !list.is_empty()
        });
        self.stats.expired += expired;
        self.last_sweep = Some(now);
    }
}

/// Whether `timeout` has passed from `since` to `now` (`now` before
/// `since` counts as no time): `now.duration_since(since) >= timeout` as
/// one comparison of instants, since a request's take and put each ask it
/// and a duration between instants is several times the instructions.
fn expired(since: Instant, now: Instant, timeout: Duration) -> bool {
    timeout.is_zero() || since.checked_add(timeout).is_some_and(|at| now >= at)
}

/// Idle keep-alive connections per upstream address. `Sync`: one per
/// engine, shared by its connections; the lock is held only to push or pop.
#[derive(Debug)]
pub struct Pool {
    inner: Mutex<Inner>,
    max_idle_per_upstream: usize,
    idle_timeout: Duration,
}

impl Pool {
    pub fn new(max_idle_per_upstream: usize, idle_timeout: Duration) -> Self {
        Pool {
            inner: Mutex::new(Inner::default()),
            max_idle_per_upstream,
            idle_timeout,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A live idle connection to `addr`, if there is one. Closed and
    /// expired ones met on the way are dropped.
    pub fn take(&self, addr: SocketAddr) -> Option<UpstreamConn> {
        self.take_at(addr, PLAIN, Instant::now())
    }

    /// [`Pool::take`] of a connection of `class`, with the time the
    /// caller already read.
    pub fn take_at(&self, addr: SocketAddr, class: u64, now: Instant) -> Option<UpstreamConn> {
        let addr = (addr, class);
        loop {
            let idle = {
                let mut inner = self.lock();
                let idle = inner.idle.get_mut(&addr)?.pop()?;
                if expired(idle.since, now, self.idle_timeout) {
                    // Everything under it is older still.
                    let older = inner.idle.remove(&addr).map_or(0, |l| l.len());
                    inner.stats.expired += 1 + older as u64;
                    return None;
                }
                // Counted as reused under this lock, the usual outcome:
                // a stale one takes the lock again to say otherwise.
                inner.stats.reused += 1;
                idle
            };
            if idle.stream.is_open() {
                return Some(idle.stream);
            }
            let mut inner = self.lock();
            inner.stats.reused -= 1;
            inner.stats.stale += 1;
        }
    }

    /// Keeps `stream` for reuse; the caller guarantees the last response
    /// was read to its end and both sides allow keep-alive.
    pub fn put(&self, addr: SocketAddr, stream: impl Into<UpstreamConn>) {
        self.put_at(addr, PLAIN, stream.into(), Instant::now());
    }

    /// [`Pool::put`] of a connection of `class`, with the time the caller
    /// already read.
    pub fn put_at(&self, addr: SocketAddr, class: u64, stream: UpstreamConn, now: Instant) {
        let addr = (addr, class);
        let mut inner = self.lock();
        if inner
            .last_sweep
            .is_none_or(|t| expired(t, now, self.idle_timeout))
        {
            inner.sweep(now, self.idle_timeout);
        }
        let cap = self.max_idle_per_upstream;
        let list = inner.idle.entry(addr).or_default();
        if list.len() >= cap {
            inner.stats.overflow += 1;
            return;
        }
        list.push(Idle { stream, since: now });
        inner.stats.returned += 1;
    }

    /// Addresses (and classes) with idle connections.
    pub fn addresses(&self) -> usize {
        self.lock().idle.len()
    }

    /// Idle plain connections held for `addr`.
    pub fn idle(&self, addr: SocketAddr) -> usize {
        self.idle_of(addr, PLAIN)
    }

    /// Idle connections of `class` held for `addr`.
    pub fn idle_of(&self, addr: SocketAddr, class: u64) -> usize {
        self.lock().idle.get(&(addr, class)).map_or(0, Vec::len)
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;
    use tokio::net::{TcpListener, TcpStream};

    async fn pair(l: &TcpListener) -> (TcpStream, TcpStream) {
        let c = TcpStream::connect(l.local_addr().unwrap()).await.unwrap();
        let (s, _) = l.accept().await.unwrap();
        (c, s)
    }

    #[test]
    fn expiry_is_the_duration_between_instants() {
        let t = Instant::now();
        let later = t + Duration::from_secs(5);
        for timeout in [0, 1, 4, 5, 6, 3600].map(Duration::from_secs) {
            for (since, now) in [(t, later), (later, t), (t, t)] {
                assert_eq!(
                    expired(since, now, timeout),
                    now.duration_since(since) >= timeout,
                    "{timeout:?}"
                );
            }
        }
        assert!(!expired(t, later, Duration::MAX));
    }

    #[tokio::test]
    async fn live_connections_are_reused_lifo_and_capped() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let pool = Pool::new(2, Duration::from_secs(60));
        let (a, _sa) = pair(&l).await;
        let (b, _sb) = pair(&l).await;
        let (c, _sc) = pair(&l).await;
        let b_port = b.local_addr().unwrap().port();
        pool.put(addr, a);
        pool.put(addr, b);
        pool.put(addr, c);
        assert_eq!(pool.idle(addr), 2);
        let got = pool.take(addr).unwrap();
        assert_eq!(
            got.tcp().local_addr().unwrap().port(),
            b_port,
            "most recent first"
        );
        let s = pool.stats();
        assert_eq!((s.returned, s.overflow, s.reused), (2, 1, 1));
    }

    /// A connection kept under a transport's class (TLS to the backend)
    /// is only ever handed to a request of that class, never as plain.
    #[tokio::test]
    async fn classes_keep_their_connections_apart() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let pool = Pool::new(8, Duration::from_secs(60));
        let (a, _sa) = pair(&l).await;
        pool.put_at(addr, 7, a.into(), Instant::now());
        assert!(pool.take(addr).is_none());
        assert!(pool.take_at(addr, 8, Instant::now()).is_none());
        assert_eq!(pool.idle_of(addr, 7), 1);
        assert!(pool.take_at(addr, 7, Instant::now()).is_some());
    }

    #[tokio::test]
    async fn closed_or_chatty_idle_connections_are_dropped_on_take() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let pool = Pool::new(8, Duration::from_secs(60));
        let (a, sa) = pair(&l).await;
        let (b, mut sb) = pair(&l).await;
        pool.put(addr, a);
        pool.put(addr, b);
        drop(sa);
        sb.write_all(b"unsolicited").await.unwrap();
        // Let the reactor see the FIN and the bytes.
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(pool.take(addr).is_none());
        assert_eq!(pool.stats().stale, 2);
    }

    #[tokio::test(start_paused = true)]
    async fn addresses_no_longer_used_are_swept_when_others_return() {
        let old = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let new = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let pool = Pool::new(8, Duration::from_secs(60));
        let (a, _sa) = pair(&old).await;
        pool.put(old.local_addr().unwrap(), a);
        tokio::time::advance(Duration::from_secs(30)).await;
        let (b, _sb) = pair(&new).await;
        pool.put(new.local_addr().unwrap(), b);
        assert_eq!(pool.addresses(), 2, "not yet idle for the timeout");
        tokio::time::advance(Duration::from_secs(61)).await;
        let (c, _sc) = pair(&new).await;
        pool.put(new.local_addr().unwrap(), c);
        assert_eq!(pool.addresses(), 1, "the unused address is gone");
        assert_eq!(pool.idle(old.local_addr().unwrap()), 0);
        assert_eq!(pool.idle(new.local_addr().unwrap()), 1);
        assert_eq!(pool.stats().expired, 2);
    }

    #[tokio::test]
    async fn expired_connections_are_dropped_lazily() {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let pool = Pool::new(8, Duration::ZERO);
        let (a, _sa) = pair(&l).await;
        let (b, _sb) = pair(&l).await;
        pool.put(addr, a);
        pool.put(addr, b);
        assert!(pool.take(addr).is_none());
        assert_eq!(pool.stats().expired, 2);
        assert_eq!(pool.idle(addr), 0);
    }
}
