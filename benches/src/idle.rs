//! What an idle connection costs a proxy: open many, let them carry one
//! exchange, leave them idle, and charge the growth of the proxy's RSS to
//! them. One method for every proxy and protocol (`http-report`'s idle
//! tests, `l4-report`'s idle run).

use std::future::Future;
use std::time::Duration;

use crate::peers;

/// Longer than teapot's allocator purge delay (`MIMALLOC_PURGE_DELAY`,
/// 10 s): freed memory it still keeps is not charged to the connections.
pub const SETTLE: Duration = Duration::from_secs(12);

/// Raises this process's descriptor limit (soft and hard) to `want`
/// when it is lower and the process may (`CAP_SYS_RESOURCE` for the hard
/// limit; else up to the hard limit): the proxies it starts inherit it. 10,000 idle connections take 10,000 descriptors in the
/// client and as many in each proxy, two per connection in an L4 proxy,
/// past the 20,000 a shell often allows. Returns the limit in force.
pub fn raise_descriptor_limit(want: u64) -> u64 {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE) else {
        return 0;
    };
    if soft >= want {
        return soft;
    }
    if setrlimit(Resource::RLIMIT_NOFILE, want, want.max(hard)).is_ok() {
        return want;
    }
    let _ = setrlimit(Resource::RLIMIT_NOFILE, hard, hard);
    hard.max(soft)
}

/// Connections opened at a time, as a crowd of clients arrives.
const BATCH: usize = 200;

/// The proxy's RSS before and after the idle connections opened.
#[derive(Clone, Copy, Debug)]
pub struct IdleMemory {
    pub connections: usize,
    pub failed: usize,
    pub rss_before_kib: u64,
    pub rss_after_kib: u64,
    /// 1 s after the connections closed: what the allocator still keeps.
    pub rss_closed_1s_kib: u64,
    /// [`SETTLE`] after they closed, past teapot's purge delay: what it
    /// gave back.
    pub rss_closed_kib: u64,
}

impl IdleMemory {
    /// KiB of RSS per open connection.
    pub fn kib_per_connection(&self) -> f64 {
        self.rss_after_kib.saturating_sub(self.rss_before_kib) as f64
            / self.connections.max(1) as f64
    }
}

/// Waits [`SETTLE`], reads the RSS of `pid`'s process tree (nginx's and
/// HAProxy's workers included), opens `n` connections with `open` (each
/// future does its exchange and returns what keeps the connection open),
/// waits [`SETTLE`] again and reads the RSS once more. Then it closes
/// them and reads the RSS 1 s and [`SETTLE`] later: whether the memory
/// goes back, and how soon.
pub async fn idle_memory<F, Fut, H>(pid: u32, n: usize, open: F) -> anyhow::Result<IdleMemory>
where
    F: Fn() -> Fut,
    Fut: Future<Output = anyhow::Result<H>> + Send + 'static,
    H: Send + 'static,
{
    tokio::time::sleep(SETTLE).await;
    let rss_before_kib = peers::tree_rss_kib(pid)?;
    let mut held = Vec::with_capacity(n);
    let mut failed = 0usize;
    let mut first_error = None;
    let mut left = n;
    while left > 0 {
        let batch = left.min(BATCH);
        left -= batch;
        let mut opening = tokio::task::JoinSet::new();
        for _ in 0..batch {
            opening.spawn(open());
        }
        for opened in opening.join_all().await {
            match opened {
                Ok(h) => held.push(h),
                Err(e) => {
                    failed += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
    }
    tokio::time::sleep(SETTLE).await;
    let rss_after_kib = peers::tree_rss_kib(pid)?;
    let connections = held.len();
    drop(held);
    if connections == 0 {
        let why = first_error.map(|e| format!(": {e:#}")).unwrap_or_default();
        anyhow::bail!("no idle connection could be opened ({failed} failed){why}");
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let rss_closed_1s_kib = peers::tree_rss_kib(pid)?;
    tokio::time::sleep(SETTLE - Duration::from_secs(1)).await;
    let rss_closed_kib = peers::tree_rss_kib(pid)?;
    Ok(IdleMemory {
        connections,
        failed,
        rss_before_kib,
        rss_after_kib,
        rss_closed_1s_kib,
        rss_closed_kib,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_is_shared_by_the_open_connections() {
        let m = IdleMemory {
            connections: 4,
            failed: 1,
            rss_before_kib: 100,
            rss_after_kib: 110,
            rss_closed_1s_kib: 108,
            rss_closed_kib: 101,
        };
        assert_eq!(m.kib_per_connection(), 2.5);
        // RSS that fell (memory returned meanwhile) charges nothing.
        let fell = IdleMemory {
            rss_after_kib: 90,
            ..m
        };
        assert_eq!(fell.kib_per_connection(), 0.0);
    }
}
