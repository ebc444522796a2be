//! Log-flood protection: Pingora and h2 log a WARN or ERROR
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
//! are never held back by it.
//!
//! teapot's own per-request lines are written by state instead:
//! [`EndpointLog`] is the one place that decides when a failing backend
//! endpoint is worth a line.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
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

/// teapot's own lines about a backend endpoint that refuses connects (or
/// lets them time out), written when its state changes: one when it starts
/// failing ("ejected"), one when a connect succeeds again ("recovered"),
/// and while it stays down, one per [`ENDPOINT_LINE_EVERY`] with how many
/// failures it had meanwhile. Each endpoint's lines are also paced (a burst
/// of [`ENDPOINT_BURST`], then one per [`ENDPOINT_LINE_INTERVAL`]), so one
/// that fails and recovers at every other request writes no more. A tenant
/// whose Service points at a closed port would otherwise write a line per
/// request into every replica's log; every failure is counted in
/// `teapot_upstream_connect_failures_total` and
/// `teapot_tenant_upstream_connect_failures_total{tenant}` instead.
#[derive(Debug, Default)]
pub struct EndpointLog {
    endpoints: parking_lot::Mutex<std::collections::HashMap<SocketAddr, EndpointState>>,
    /// Entries in `endpoints`: a connect that succeeds looks at this alone
    /// while no endpoint is tracked, the usual case.
    tracked: AtomicUsize,
}

/// A "still failing" line per endpoint at most this often.
pub const ENDPOINT_LINE_EVERY: Duration = Duration::from_secs(30);
/// Any endpoint's lines: this many at once, then one per interval.
pub const ENDPOINT_BURST: u32 = 3;
pub const ENDPOINT_LINE_INTERVAL: Duration = Duration::from_secs(20);
/// Endpoints tracked at once; past it, those without a failure for
/// [`FORGET_AFTER`] are forgotten (endpoints that went away with their
/// Service), and if none is, all are (a repeated first line at worst).
const MAX_TRACKED: usize = 10_000;
const FORGET_AFTER: Duration = Duration::from_secs(600);

#[derive(Debug)]
struct EndpointState {
    down: bool,
    /// GCRA theoretical arrival time of the endpoint's next line.
    tat: Instant,
    last_line: Instant,
    last_failure: Instant,
    /// Failures not yet in a line.
    unlogged: u64,
    /// Failures since it last went down (1: this one is the first).
    failures: u64,
}

impl EndpointState {
    fn new(now: Instant) -> Self {
        EndpointState {
            down: false,
            tat: now,
            last_line: now,
            last_failure: now,
            unlogged: 0,
            failures: 0,
        }
    }

    /// Whether a line may be written now (and it is counted if so).
    fn admit(&mut self, now: Instant) -> bool {
        let next = self.tat.max(now) + ENDPOINT_LINE_INTERVAL;
        if next > now + ENDPOINT_LINE_INTERVAL * ENDPOINT_BURST {
            return false;
        }
        self.tat = next;
        self.last_line = now;
        true
    }
}

/// A line [`EndpointLog`] decided to write. Each has the endpoint's
/// failures since its previous line, so together they count every one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum EndpointLine {
    Ejected { failures: u64 },
    StillFailing { failures: u64, seconds: u64 },
    Recovered { failures: u64 },
}

impl EndpointLog {
    /// The process-wide log every upstream path shares.
    pub fn global() -> &'static EndpointLog {
        static LOG: OnceLock<EndpointLog> = OnceLock::new();
        LOG.get_or_init(EndpointLog::default)
    }

    /// A connect to `addr` (an endpoint of `upstream`) failed with `error`;
    /// the endpoint was ejected.
    pub fn connect_failed(&self, addr: SocketAddr, upstream: &str, error: &dyn std::fmt::Display) {
        match self.failed_at(addr, Instant::now()) {
            Some(EndpointLine::Ejected { failures }) => tracing::warn!(
                peer = %addr,
                upstream,
                error = %error,
                failures,
                "upstream connect failed; endpoint ejected"
            ),
            Some(EndpointLine::StillFailing { failures, seconds }) => tracing::warn!(
                peer = %addr,
                upstream,
                error = %error,
                failures,
                seconds,
                "upstream endpoint still failing; ejected at each failure"
            ),
            _ => {}
        }
    }

    /// A connect to `addr` succeeded.
    pub fn connected(&self, addr: SocketAddr) {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(EndpointLine::Recovered { failures }) = self.connected_at(addr, Instant::now())
        {
            tracing::info!(peer = %addr, failures, "upstream endpoint recovered");
        }
    }

    fn failed_at(&self, addr: SocketAddr, now: Instant) -> Option<EndpointLine> {
        let mut endpoints = self.endpoints.lock();
        if !endpoints.contains_key(&addr) {
            if endpoints.len() >= MAX_TRACKED {
                endpoints.retain(|_, e| now.duration_since(e.last_failure) < FORGET_AFTER);
                if endpoints.len() >= MAX_TRACKED {
                    endpoints.clear();
                }
            }
            endpoints.insert(addr, EndpointState::new(now));
            self.tracked.store(endpoints.len(), Ordering::Relaxed);
        }
        let e = endpoints.get_mut(&addr)?;
        e.last_failure = now;
        e.unlogged += 1;
        if !e.down {
            e.down = true;
            e.failures = 0;
        }
        e.failures += 1;
        let due = e.failures == 1 || now.duration_since(e.last_line) >= ENDPOINT_LINE_EVERY;
        if !due {
            return None;
        }
        let since = now.duration_since(e.last_line).as_secs();
        if !e.admit(now) {
            return None;
        }
        let failures = std::mem::take(&mut e.unlogged);
        Some(if e.failures == 1 {
            EndpointLine::Ejected { failures }
        } else {
            EndpointLine::StillFailing {
                failures,
                seconds: since,
            }
        })
    }

    fn connected_at(&self, addr: SocketAddr, now: Instant) -> Option<EndpointLine> {
        let mut endpoints = self.endpoints.lock();
        let e = endpoints.get_mut(&addr)?;
        if !e.down {
            // Up and its pacing spent: nothing left to remember.
            if e.tat <= now {
                endpoints.remove(&addr);
                self.tracked.store(endpoints.len(), Ordering::Relaxed);
            }
            return None;
        }
        e.down = false;
        e.admit(now).then(|| EndpointLine::Recovered {
            failures: std::mem::take(&mut e.unlogged),
        })
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

    fn failures_in(line: &EndpointLine) -> u64 {
        match *line {
            EndpointLine::Ejected { failures }
            | EndpointLine::StillFailing { failures, .. }
            | EndpointLine::Recovered { failures } => failures,
        }
    }

    /// Every line [`EndpointLog`] decides on for `events` (`true`: a
    /// failure, `false`: a success) at `per_second` of one endpoint.
    fn endpoint_lines(events: impl Iterator<Item = bool>, per_second: u64) -> Vec<EndpointLine> {
        let log = EndpointLog::default();
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let start = Instant::now();
        let step = Duration::from_micros(1_000_000 / per_second);
        let mut lines = Vec::new();
        for (i, failed) in events.enumerate() {
            let now = start + step * i as u32;
            let line = if failed {
                log.failed_at(addr, now)
            } else {
                log.connected_at(addr, now)
            };
            lines.extend(line);
        }
        lines
    }

    #[test]
    fn a_failing_endpoint_writes_a_few_lines_a_minute_whatever_the_rate() {
        // 1,000 failures a second for ten minutes.
        let lines = endpoint_lines(std::iter::repeat_n(true, 600_000), 1000);
        assert_eq!(lines[0], EndpointLine::Ejected { failures: 1 });
        // The first line, then one per 30 s (none at the very end).
        assert_eq!(lines.len(), 600 / 30, "{lines:?}");
        let reported: u64 = lines.iter().map(failures_in).sum();
        for line in &lines[1..] {
            assert!(
                matches!(line, EndpointLine::StillFailing { seconds: 30, .. }),
                "{line:?}"
            );
        }
        // Every failure is in a line, but those after the last one.
        assert!(600_000 - reported <= 30_000, "{reported}");
    }

    #[test]
    fn state_changes_are_written_once_each() {
        // Down for 100 failures, up for 100 connects, down again.
        let events = (0..100)
            .map(|_| true)
            .chain((0..100).map(|_| false))
            .chain((0..100).map(|_| true));
        let lines = endpoint_lines(events, 10);
        assert_eq!(
            lines,
            [
                EndpointLine::Ejected { failures: 1 },
                EndpointLine::Recovered { failures: 99 },
                EndpointLine::Ejected { failures: 1 },
            ]
        );
    }

    #[test]
    fn an_endpoint_that_flaps_at_every_request_is_paced_too() {
        // Fails and recovers at every other request, 100 a second, for ten
        // minutes: the burst, then one line per interval.
        let events = (0..60_000).map(|i| i % 2 == 0);
        let lines = endpoint_lines(events, 100);
        let most = u64::from(ENDPOINT_BURST) + 600 / ENDPOINT_LINE_INTERVAL.as_secs();
        assert!(lines.len() as u64 <= most, "{} lines", lines.len());
        assert!(lines.len() >= 10, "{lines:?}");
        // A silenced line hands its failures to the next one.
        let reported: u64 = lines.iter().map(failures_in).sum();
        assert!(30_000 - reported <= 1_000, "{reported}");
    }

    #[test]
    fn a_connect_while_nothing_failed_takes_no_lock() {
        let log = EndpointLog::default();
        let addr: SocketAddr = "127.0.0.1:9".parse().unwrap();
        let guard = log.endpoints.lock();
        // Would deadlock if it looked at the map.
        log.connected(addr);
        drop(guard);
        assert_eq!(
            log.failed_at(addr, Instant::now()),
            Some(EndpointLine::Ejected { failures: 1 })
        );
        assert_eq!(log.tracked.load(Ordering::Relaxed), 1);
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
