//! Idle upstream connections, without a task or timer per connection.
//!
//! One [`Pool`] per engine: a mutex-guarded map from upstream address to a
//! LIFO list of idle connections (the most recently used first, so the
//! warmest connection is reused and the coldest ones age out). Nothing
//! watches an idle connection: whether its peer closed it is checked when
//! it is taken (a non-blocking read that must find nothing), and its age
//! against the idle timeout at the same moment.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::Mutex;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::time::Instant;

#[derive(Debug)]
struct Idle {
    stream: TcpStream,
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

#[derive(Debug, Default)]
struct Inner {
    idle: HashMap<SocketAddr, Vec<Idle>>,
    stats: PoolStats,
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
    pub fn take(&self, addr: SocketAddr) -> Option<TcpStream> {
        let now = Instant::now();
        loop {
            let idle = {
                let mut inner = self.lock();
                let idle = inner.idle.get_mut(&addr)?.pop()?;
                if now.duration_since(idle.since) >= self.idle_timeout {
                    // Everything under it is older still.
                    let older = inner.idle.remove(&addr).map_or(0, |l| l.len());
                    inner.stats.expired += 1 + older as u64;
                    return None;
                }
                idle
            };
            if is_open(&idle.stream) {
                self.lock().stats.reused += 1;
                return Some(idle.stream);
            }
            self.lock().stats.stale += 1;
        }
    }

    /// Keeps `stream` for reuse; the caller guarantees the last response
    /// was read to its end and both sides allow keep-alive.
    pub fn put(&self, addr: SocketAddr, stream: TcpStream) {
        let mut inner = self.lock();
        let cap = self.max_idle_per_upstream;
        let list = inner.idle.entry(addr).or_default();
        if list.len() >= cap {
            inner.stats.overflow += 1;
            return;
        }
        list.push(Idle {
            stream,
            since: Instant::now(),
        });
        inner.stats.returned += 1;
    }

    /// Idle connections held for `addr`.
    pub fn idle(&self, addr: SocketAddr) -> usize {
        self.lock().idle.get(&addr).map_or(0, Vec::len)
    }

    pub fn stats(&self) -> PoolStats {
        self.lock().stats
    }
}

/// An idle connection must have nothing to read: end of stream means the
/// peer closed it, and bytes mean it sent something unsolicited (then it
/// is no longer in a known state). Non-blocking: `WouldBlock` is the only
/// healthy answer.
fn is_open(stream: &TcpStream) -> bool {
    let mut probe = [0u8; 1];
    matches!(stream.try_read(&mut probe), Err(e) if e.kind() == ErrorKind::WouldBlock)
}
