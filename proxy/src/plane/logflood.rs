//! Log-flood protection (issue #9): Pingora and h2 log a WARN or ERROR
//! line for every downstream request they cannot parse or that breaks
//! off, so one bad client could otherwise write the replica's log as fast
//! as it can send garbage (and fill the node's disk on the way).
//!
//! [`ClientNoise`] is a per-layer tracing filter: WARN and ERROR events of
//! those libraries pass at a bounded rate (a burst of [`BURST`], then one a
//! second); the rest are counted, not written. [`report`] writes one
//! summary line per interval with the count and moves
//! `teapot_log_lines_suppressed_total`. teapot's own events and every
//! library's INFO and below (only ever on when an operator asks for them)
//! are never held back.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::layer::{Context, Filter};

/// Lines written at once before the rate applies.
pub const BURST: u64 = 20;
/// Then one line per this long.
const INTERVAL_MS: u64 = 1000;

/// Target prefixes of the libraries whose per-request warnings a client
/// can trigger (every `pingora_*` crate, h2, rustls).
const NOISY: [&str; 5] = ["pingora", "h2::", "rustls::", "tokio_rustls", "hyper::"];

/// Shared state: the pace and what was held back.
#[derive(Debug)]
pub struct NoiseState {
    origin: Instant,
    /// GCRA theoretical arrival time, ms after `origin`.
    tat_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Default for NoiseState {
    fn default() -> Self {
        NoiseState {
            origin: Instant::now(),
            tat_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }
}

impl NoiseState {
    /// The process-wide state the binary's filter and [`report`] share.
    pub fn global() -> &'static Arc<NoiseState> {
        static STATE: OnceLock<Arc<NoiseState>> = OnceLock::new();
        STATE.get_or_init(Arc::default)
    }

    fn admit(&self) -> bool {
        let now = self.origin.elapsed().as_millis() as u64;
        let mut tat = self.tat_ms.load(Ordering::Relaxed);
        loop {
            let next = tat.max(now) + INTERVAL_MS;
            if next > now + BURST * INTERVAL_MS {
                self.suppressed.fetch_add(1, Ordering::Relaxed);
                return false;
            }
            match self
                .tat_ms
                .compare_exchange_weak(tat, next, Ordering::Relaxed, Ordering::Relaxed)
            {
                Ok(_) => return true,
                Err(current) => tat = current,
            }
        }
    }

    /// Lines held back so far.
    pub fn suppressed(&self) -> u64 {
        self.suppressed.load(Ordering::Relaxed)
    }
}

/// The filter; see the module documentation.
#[derive(Clone, Debug)]
pub struct ClientNoise(pub Arc<NoiseState>);

fn is_noisy(meta: &Metadata<'_>) -> bool {
    *meta.level() <= Level::WARN
        && (meta.target() == "h2" || NOISY.iter().any(|n| meta.target().starts_with(n)))
}

impl<S: Subscriber> Filter<S> for ClientNoise {
    fn enabled(&self, meta: &Metadata<'_>, _cx: &Context<'_, S>) -> bool {
        !meta.is_event() || !is_noisy(meta) || self.0.admit()
    }

    fn callsite_enabled(&self, meta: &'static Metadata<'static>) -> tracing::subscriber::Interest {
        // Noisy callsites are asked per event; the rest never again.
        if is_noisy(meta) {
            tracing::subscriber::Interest::sometimes()
        } else {
            tracing::subscriber::Interest::always()
        }
    }
}

/// Writes a summary of held-back lines every `every` and counts them in
/// `counter`, until the task is dropped.
pub async fn report(state: Arc<NoiseState>, counter: prometheus::IntCounter, every: Duration) {
    let mut seen = state.suppressed();
    let mut tick = tokio::time::interval(every);
    tick.tick().await;
    loop {
        tick.tick().await;
        let now = state.suppressed();
        if now > seen {
            counter.inc_by(now - seen);
            tracing::warn!(
                lines = now - seen,
                seconds = every.as_secs(),
                "held back Pingora/h2 log lines about client errors (log-flood protection; see teapot_edge_refusals_total for what was refused)"
            );
            seen = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::sync::Mutex;
    use tracing_subscriber::Layer;
    use tracing_subscriber::layer::SubscriberExt;

    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn library_errors_are_paced_and_ours_are_not() {
        let out = Lines::default();
        let state = Arc::new(NoiseState::default());
        let writer = out.clone();
        let subscriber = tracing_subscriber::registry().with(
            tracing_subscriber::fmt::layer()
                .with_writer(move || writer.clone())
                .with_filter(ClientNoise(state.clone())),
        );
        tracing::subscriber::with_default(subscriber, || {
            for i in 0..1000 {
                tracing::error!(target: "pingora_proxy", i, "Fail to proxy: bad chunk");
            }
            for i in 0..50 {
                tracing::warn!(target: "h2::proto::streams::recv", i, "recv_reset");
                tracing::error!(target: "teapot_proxy::server", i, "our own");
                tracing::info!(target: "pingora_core::listeners", i, "info passes");
            }
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        let count = |needle: &str| text.lines().filter(|l| l.contains(needle)).count();
        let library = count("bad chunk") + count("recv_reset");
        assert!(
            library as u64 <= BURST + 1,
            "{library} library lines written"
        );
        assert_eq!(count("our own"), 50);
        assert_eq!(count("info passes"), 50);
        assert_eq!(state.suppressed(), 1050 - library as u64);
    }
}
