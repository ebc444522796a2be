//! Where reviews are judged: a bounded pool of blocking threads, in which
//! each tenant has a share.
//!
//! A review's rules are CPU work (compiling a route's regular
//! expressions is the costly part, bounded per object by
//! `teapot_api::admission`), and the API server waits for every tenant's
//! writes behind the same webhook. So reviews never run on the threads
//! that accept and read requests, at most `workers` run at once, and one
//! tenant's reviews (its "lane": the namespace's Tenant, or the operator
//! for every other object) hold at most `share` of them: another tenant's
//! review always finds a worker, however many one tenant sends. A review
//! that cannot start within `wait` is refused with 429 and the API
//! server's caller retries; no review is admitted without its rules.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Semaphore;
use tokio::time::Instant;

/// Lanes remembered before the idle ones are swept.
const LANES_SWEPT_AT: usize = 1024;

/// How many reviews run at once, and how long one may wait to start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PoolConfig {
    /// Reviews judged at once, across tenants.
    pub workers: usize,
    /// Reviews of one tenant judged at once (at most `workers - 1` when
    /// there are two workers or more, so one tenant never holds them all).
    pub share: usize,
    /// Longest wait for a worker before the review is refused (below the
    /// API server's webhook timeout, 10 s in the chart).
    pub wait: Duration,
}

impl Default for PoolConfig {
    fn default() -> Self {
        let workers = std::thread::available_parallelism()
            .map_or(2, usize::from)
            .max(2);
        PoolConfig {
            workers,
            share: workers / 2,
            wait: Duration::from_secs(5),
        }
    }
}

/// Why a review did not start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Busy {
    /// The tenant's share stayed full for the whole wait.
    Tenant,
    /// Every worker stayed busy (with other tenants' reviews).
    Pool,
}

impl Busy {
    /// The metrics label.
    pub fn label(self) -> &'static str {
        match self {
            Busy::Tenant => "tenant_share",
            Busy::Pool => "pool",
        }
    }
}

/// The pool. Cheap to share; lanes are made on first use.
#[derive(Debug)]
pub struct ReviewPool {
    config: PoolConfig,
    workers: Arc<Semaphore>,
    lanes: Mutex<HashMap<String, Arc<Semaphore>>>,
}

impl ReviewPool {
    pub fn new(config: PoolConfig) -> ReviewPool {
        let workers = config.workers.max(1);
        let share = config.share.clamp(1, workers.saturating_sub(1).max(1));
        ReviewPool {
            config: PoolConfig {
                workers,
                share,
                ..config
            },
            workers: Arc::new(Semaphore::new(workers)),
            lanes: Mutex::new(HashMap::new()),
        }
    }

    pub fn config(&self) -> PoolConfig {
        self.config
    }

    /// Runs `work` on a blocking thread once `lane` has room in its share
    /// and a worker is free (first come, first served within a lane), or
    /// says why it could not start within the wait. The slots are held
    /// until `work` returns, even when the caller stops waiting for it.
    pub async fn run<R: Send + 'static>(
        &self,
        lane: &str,
        work: impl FnOnce() -> R + Send + 'static,
    ) -> Result<R, Busy> {
        let deadline = Instant::now() + self.config.wait;
        let lane = self.lane(lane);
        // The lane first: a tenant's queued reviews wait in its own line,
        // never ahead of another tenant's in the workers' line.
        let share = match tokio::time::timeout_at(deadline, lane.acquire_owned()).await {
            Ok(Ok(p)) => p,
            _ => return Err(Busy::Tenant),
        };
        let worker =
            match tokio::time::timeout_at(deadline, self.workers.clone().acquire_owned()).await {
                Ok(Ok(p)) => p,
                _ => return Err(Busy::Pool),
            };
        let judged = tokio::task::spawn_blocking(move || {
            let r = work();
            drop((share, worker));
            r
        });
        match judged.await {
            Ok(r) => Ok(r),
            // A panic in the rules: resumed here, as it would have been
            // inline (the connection's task ends, the API server retries).
            Err(e) => std::panic::resume_unwind(e.into_panic()),
        }
    }

    fn lane(&self, lane: &str) -> Arc<Semaphore> {
        let mut lanes = self.lanes.lock();
        if let Some(s) = lanes.get(lane) {
            return s.clone();
        }
        if lanes.len() >= LANES_SWEPT_AT {
            // A lane with no review in it holds nothing worth keeping.
            lanes.retain(|_, s| Arc::strong_count(s) > 1);
        }
        let s = Arc::new(Semaphore::new(self.config.share));
        lanes.insert(lane.to_string(), s.clone());
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn pool(workers: usize, share: usize, wait_ms: u64) -> Arc<ReviewPool> {
        Arc::new(ReviewPool::new(PoolConfig {
            workers,
            share,
            wait: Duration::from_millis(wait_ms),
        }))
    }

    /// One tenant sending many slow reviews holds its share only: another
    /// tenant's review starts at once.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_tenant_never_holds_every_worker() {
        let pool = pool(2, 8, 5_000);
        assert_eq!(pool.config().share, 1, "a share is at most workers - 1");
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let gate = Arc::new(std::sync::Mutex::new(gate));
        let running = Arc::new(AtomicUsize::new(0));
        let mut hostile = Vec::new();
        for _ in 0..6 {
            let (pool, gate, running) = (pool.clone(), gate.clone(), running.clone());
            hostile.push(tokio::spawn(async move {
                pool.run("evil", move || {
                    running.fetch_add(1, Ordering::SeqCst);
                    let _ = gate.lock().unwrap().recv();
                })
                .await
            }));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            running.load(Ordering::SeqCst),
            1,
            "the hostile lane runs one"
        );
        let started = Instant::now();
        let other = pool.run("good", || 42).await;
        assert_eq!(other, Ok(42));
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        for _ in 0..6 {
            let _ = release.send(());
        }
        for h in hostile {
            assert_eq!(h.await.unwrap(), Ok(()));
        }
    }

    /// A review that cannot start within the wait is refused, and its
    /// slot is not taken.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_review_that_cannot_start_in_time_is_refused() {
        let pool = pool(2, 1, 200);
        let (release, gate) = std::sync::mpsc::channel::<()>();
        let busy = {
            let pool = pool.clone();
            tokio::spawn(async move {
                pool.run("evil", move || {
                    let _ = gate.recv();
                })
                .await
            })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(pool.run("evil", || ()).await, Err(Busy::Tenant));
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap(), Ok(()));
        assert_eq!(pool.run("evil", || 7).await, Ok(7));
    }
}
