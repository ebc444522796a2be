//! What the listener manager and every connection and flow task share:
//! the settings, metrics, the count of what is alive and the kill switch.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::watch;

use super::L4Metrics;
use super::health::NodeHealth;
use crate::compile::l4::L4Config;

/// What listener and connection tasks share.
#[derive(Debug)]
pub(super) struct Context {
    pub config: L4Config,
    pub metrics: L4Metrics,
    /// Connections and flows alive, for the shutdown wait.
    pub active: AtomicUsize,
    /// Turns true when the shutdown grace period is over: everything ends.
    pub kill: watch::Receiver<bool>,
    /// Node addresses the TCP checks find dead (UDP flows avoid them).
    pub nodes: Arc<NodeHealth>,
}

/// Counts one connection (or flow) as active while it lives.
pub(super) struct ActiveGuard(Arc<Context>);

impl ActiveGuard {
    pub fn new(ctx: &Arc<Context>) -> ActiveGuard {
        ctx.active.fetch_add(1, Ordering::Relaxed);
        ActiveGuard(ctx.clone())
    }
}

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::Relaxed);
    }
}
