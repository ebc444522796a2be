//! `Alt-Svc: h3=":PORT"; ma=AGE` on HTTPS answers (RFC 7838, RFC 9114
//! §3.1.1), only while this replica's UDP path answers: browsers try
//! HTTP/3 once a response says so, and an alternative advertised where
//! UDP is dead (a host firewall, a load balancer that passes only TCP)
//! makes them stall before they fall back.
//!
//! The path is checked by a self-probe: a real QUIC handshake, ALPN `h3`,
//! to the address clients are told (crate::server picks it), with a
//! certificate verifier that accepts whatever that server presents. The
//! probe asks whether an HTTP/3 server answers there, which behind a load
//! balancer may be another replica; it sends nothing over the connection,
//! so there is nothing the certificate would protect. A QUIC packet
//! answered by Version Negotiation would be cheaper, but it would prove
//! only that something speaks QUIC, not that TLS and `h3` complete.
//!
//! No timer runs at rest. A request that would carry the field reads one
//! atomic ([`Advertiser::advertise`]); when the last result is older than
//! the interval that read starts the next probe (one compare-and-swap and
//! a wake-up, by one request per interval: the states that start a probe
//! are entered only an interval after the last probe began, so no client
//! can make this replica probe more often). The prober ([`run`]) sleeps
//! on that wake-up; after a success it waits out the interval and, if no
//! request asks, the second interval that ends the advertisement.
//!
//! - fresh (advertised) for an interval from the probe's start,
//! - then stale (still advertised; the next request starts a probe),
//! - withdrawn two intervals after the last successful probe began,
//!   whatever happens meanwhile, and at once when a probe fails; a
//!   failed probe is retried no sooner than an interval after it began.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::pin::pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use bytes::Bytes;
use teapot_h1::ConnInfo;
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use crate::compile::routes::Route;
use crate::live::upstream_tls::Unverified;

/// `Alt-Svc` and its probe (`teapot proxy --http3-advertise*`,
/// `--http3-probe*`; docs/reference.md, "HTTP/3").
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AltSvcConfig {
    /// Advertise at all; `false`: never, fleet-wide.
    pub advertise: bool,
    /// The UDP port clients reach HTTP/3 on (the field's); `None`: the
    /// HTTPS listener's.
    pub port: Option<u16>,
    /// The field's `ma`: how long a client may remember the alternative.
    pub max_age: Duration,
    /// Where the probe goes; `None`: the first status address (the one
    /// clients are told) at `port`.
    pub probe: Option<ProbeTarget>,
    /// How old the last probe may grow before a request starts the next
    /// (and twice this, before the advertisement ends without one).
    pub interval: Duration,
}

impl Default for AltSvcConfig {
    fn default() -> Self {
        AltSvcConfig {
            advertise: true,
            port: None,
            max_age: DEFAULT_MAX_AGE,
            probe: None,
            interval: DEFAULT_PROBE_INTERVAL,
        }
    }
}

/// `ma` by default: an hour. Every answer renews it while HTTP/3 works,
/// and it bounds how long a client that saw it keeps trying a path that
/// died since.
pub const DEFAULT_MAX_AGE: Duration = Duration::from_secs(3600);

/// How often, at most, a replica with traffic probes its HTTP/3 path.
pub const DEFAULT_PROBE_INTERVAL: Duration = Duration::from_secs(30);

/// Longest a probe may take: a handshake on a working path is a few
/// round trips; past this the path counts as dead.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(3);

/// The HTTP/3 close code the probe leaves with (RFC 9114 §8.1).
const H3_NO_ERROR: u32 = 0x100;

// The advertisement's states, one byte read by every request that may
// carry the field.
/// Not advertised; the next request starts a probe.
const DOWN: u8 = 0;
/// Not advertised; a probe runs (or a failed one's interval runs out).
const PROBING_DOWN: u8 = 1;
/// Advertised.
const FRESH: u8 = 2;
/// Advertised; the next request starts a probe.
const STALE: u8 = 3;
/// Advertised; a probe runs.
const PROBING_STALE: u8 = 4;

/// What a replica advertises and the state of its probe, shared by every
/// serving thread's router.
#[derive(Debug)]
pub struct Advertiser {
    state: AtomicU8,
    kick: Notify,
    /// The field, made once: a static value is cloned into each answer
    /// without touching a shared count.
    field: &'static [(Bytes, Bytes); 1],
    header: http::HeaderValue,
    value: &'static str,
}

impl Advertiser {
    /// `Alt-Svc: h3=":port"; ma=max_age`. Nothing is advertised until the
    /// first probe (which [`run`] starts at once) succeeds.
    pub fn new(port: u16, max_age: Duration) -> Arc<Advertiser> {
        // Leaked once per process (one per proxy started): about 30 bytes.
        let value: &'static str =
            Box::leak(format!("h3=\":{port}\"; ma={}", max_age.as_secs()).into_boxed_str());
        let field = Box::leak(Box::new([(
            Bytes::from_static(b"alt-svc"),
            Bytes::from_static(value.as_bytes()),
        )]));
        Arc::new(Advertiser {
            state: AtomicU8::new(PROBING_DOWN),
            kick: Notify::new(),
            field,
            header: http::HeaderValue::from_static(value),
            value,
        })
    }

    /// Whether an answer carries the field now; starts a probe when the
    /// last result is older than the interval (at most one in flight).
    #[inline]
    pub fn advertise(&self) -> bool {
        match self.state.load(Ordering::Relaxed) {
            FRESH | PROBING_STALE => true,
            PROBING_DOWN => false,
            seen => self.kick(seen),
        }
    }

    #[cold]
    fn kick(&self, seen: u8) -> bool {
        let (probing, advertised) = match seen {
            STALE => (PROBING_STALE, true),
            _ => (PROBING_DOWN, false),
        };
        // One request per interval wins; the others only read.
        if self
            .state
            .compare_exchange(seen, probing, Ordering::AcqRel, Ordering::Relaxed)
            .is_ok()
        {
            self.kick.notify_one();
        }
        advertised
    }

    /// The field's value, `h3=":443"; ma=3600`.
    pub fn value(&self) -> &'static str {
        self.value
    }

    /// The field as the HTTP/1 engine's answers take it.
    pub fn field(&self) -> &'static [(Bytes, Bytes)] {
        self.field
    }

    /// The field's value as HTTP/2's answers take it (a static value:
    /// cloned without a shared count).
    pub fn header_value(&self) -> http::HeaderValue {
        self.header.clone()
    }

    fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
    }

    fn advertised(&self) -> bool {
        matches!(
            self.state.load(Ordering::Acquire),
            FRESH | STALE | PROBING_STALE
        )
    }
}

/// Whether answers about `route` may carry the field: the route's
/// Ingress did not turn it off (`teapot.dev/alt-svc: "false"`). Most
/// routes have no traffic policy: one `Option` test.
#[inline]
pub fn route_advertises(route: &Route) -> bool {
    route.traffic().is_none_or(|t| !t.withhold_alt_svc)
}

/// Whether answers on `conn` may carry the field: HTTPS over TCP (an
/// `http://` origin's Alt-Svc is not used by browsers, and an HTTP/3
/// answer needs none), on a connection not checked under a client
/// certificate setting (those hosts answer 421 over QUIC: their clients
/// must stay on TCP).
#[inline]
pub fn conn_advertises(conn: &ConnInfo) -> bool {
    conn.tls
        && conn.alpn.as_deref() != Some("h3")
        && crate::plane::client_cert::facts(conn).is_none_or(|f| f.client.is_none())
}

/// The probe's counters: `teapot_http3_probes_total{result}` and
/// `teapot_http3_alt_svc_advertised`.
#[derive(Clone, Debug)]
pub struct ProbeMetrics {
    pub probes: prometheus::IntCounterVec,
    pub advertised: prometheus::IntGauge,
}

impl ProbeMetrics {
    pub fn new() -> Result<ProbeMetrics, prometheus::Error> {
        Ok(ProbeMetrics {
            probes: prometheus::IntCounterVec::new(
                prometheus::Opts::new(
                    "http3_probes_total",
                    "Self-probes of this replica's HTTP/3 path (QUIC handshakes), by result",
                ),
                &["result"],
            )?,
            advertised: prometheus::IntGauge::new(
                "http3_alt_svc_advertised",
                "1 while HTTPS answers carry Alt-Svc (the last HTTP/3 self-probe succeeded recently)",
            )?,
        })
    }

    pub fn register(&self, registry: &prometheus::Registry) -> Result<(), prometheus::Error> {
        registry.register(Box::new(self.probes.clone()))?;
        registry.register(Box::new(self.advertised.clone()))
    }
}

/// The prober: probes at once, then whenever a request asks
/// ([`Advertiser::advertise`]), keeping `advertiser`'s state; ends on
/// `stop`. `probe` is one handshake (bounded by [`PROBE_TIMEOUT`] here).
pub async fn run<P, F>(
    advertiser: Arc<Advertiser>,
    probe: P,
    interval: Duration,
    metrics: Option<ProbeMetrics>,
    stop: watch::Receiver<bool>,
) where
    P: FnMut() -> F,
    F: Future<Output = bool>,
{
    prober(&advertiser, probe, interval, metrics.as_ref(), stop).await;
    // A replica that drains sends its clients elsewhere: no request can
    // start a probe again.
    advertiser.set(PROBING_DOWN);
    if let Some(m) = &metrics {
        m.advertised.set(0);
    }
}

async fn prober<P, F>(
    advertiser: &Advertiser,
    mut probe: P,
    interval: Duration,
    metrics: Option<&ProbeMetrics>,
    mut stop: watch::Receiver<bool>,
) where
    P: FnMut() -> F,
    F: Future<Output = bool>,
{
    let show = |a: &Advertiser| {
        if let Some(m) = metrics {
            m.advertised.set(i64::from(a.advertised()));
        }
    };
    // When the last success stops being advertised, while it is.
    let mut expires: Option<Instant> = None;
    let mut first = true;
    loop {
        if !first {
            // At rest: no timer once nothing is advertised.
            tokio::select! {
                biased;
                _ = stop.changed() => return,
                () = advertiser.kick.notified() => {}
                () = sleep_until(expires) => {
                    // No request asked within the second interval.
                    if advertiser
                        .state
                        .compare_exchange(STALE, DOWN, Ordering::AcqRel, Ordering::Relaxed)
                        .is_err()
                    {
                        // A request asked just now: its probe runs next,
                        // past the advertisement's end.
                        advertiser.set(PROBING_DOWN);
                    }
                    expires = None;
                    show(advertiser);
                    continue;
                }
            }
        }
        first = false;
        let started = Instant::now();
        let ok = {
            let mut attempt = pin!(tokio::time::timeout(PROBE_TIMEOUT, probe()));
            loop {
                tokio::select! {
                    done = &mut attempt => break done.unwrap_or(false),
                    () = sleep_until(expires) => {
                        advertiser.set(PROBING_DOWN);
                        expires = None;
                        show(advertiser);
                    }
                    _ = stop.changed() => return,
                }
            }
        };
        if let Some(m) = metrics {
            m.probes
                .with_label_values(&[if ok { "ok" } else { "failed" }])
                .inc();
        }
        if ok {
            advertiser.set(FRESH);
            expires = Some(started + 2 * interval);
        } else {
            if advertiser.advertised() {
                tracing::warn!(
                    "the HTTP/3 self-probe failed: Alt-Svc is withdrawn until one succeeds"
                );
            }
            advertiser.set(PROBING_DOWN);
            expires = None;
        }
        show(advertiser);
        // No probe starts within an interval of the last one.
        tokio::select! {
            () = tokio::time::sleep_until(started + interval) => {}
            _ = stop.changed() => return,
        }
        advertiser.set(if ok { STALE } else { DOWN });
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Where the probe goes: `host:port` (a name is resolved at each probe).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProbeTarget {
    pub host: String,
    pub port: u16,
}

impl ProbeTarget {
    /// `HOST:PORT`, `IP:PORT` or `[IPv6]:PORT`.
    pub fn parse(text: &str) -> Option<ProbeTarget> {
        if let Ok(addr) = text.parse::<SocketAddr>() {
            return Some(ProbeTarget {
                host: addr.ip().to_string(),
                port: addr.port(),
            });
        }
        let (host, port) = text.rsplit_once(':')?;
        let port = port.parse().ok()?;
        (!host.is_empty() && !host.contains(':')).then(|| ProbeTarget {
            host: host.to_string(),
            port,
        })
    }

    async fn resolve(&self) -> std::io::Result<SocketAddr> {
        if let Ok(ip) = self.host.parse::<IpAddr>() {
            return Ok(SocketAddr::new(ip, self.port));
        }
        tokio::net::lookup_host((self.host.as_str(), self.port))
            .await?
            .next()
            .ok_or_else(|| std::io::Error::other("the name has no address"))
    }
}

impl std::fmt::Display for ProbeTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// The QUIC client of the probe: TLS 1.3, ALPN `h3`, any certificate.
pub fn probe_client() -> Result<quinn::ClientConfig, crate::plane::ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| crate::plane::ServeError::Tls(e.to_string()))?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Unverified::new(&provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h3".to_vec()];
    let quic = quinn::crypto::rustls::QuicClientConfig::try_from(tls)
        .map_err(|e| crate::plane::ServeError::Tls(e.to_string()))?;
    Ok(quinn::ClientConfig::new(Arc::new(quic)))
}

/// One probe: a QUIC handshake with `target` that agrees on `h3`, then
/// closed at once. `false` on any failure (logged at debug).
pub async fn handshake(target: &ProbeTarget, client: &quinn::ClientConfig) -> bool {
    match try_handshake(target, client).await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(%target, error = %e, "HTTP/3 self-probe failed");
            false
        }
    }
}

async fn try_handshake(
    target: &ProbeTarget,
    client: &quinn::ClientConfig,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let addr = target.resolve().await?;
    let any: IpAddr = match addr {
        SocketAddr::V4(_) => Ipv4Addr::UNSPECIFIED.into(),
        SocketAddr::V6(_) => Ipv6Addr::UNSPECIFIED.into(),
    };
    let endpoint = quinn::Endpoint::client(SocketAddr::new(any, 0))?;
    let conn = endpoint
        .connect_with(client.clone(), addr, &target.host)?
        .await?;
    let alpn = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.protocol);
    conn.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
    // The close goes out before the endpoint goes; bounded, it is only
    // a courtesy to the server.
    let _ = tokio::time::timeout(Duration::from_millis(100), endpoint.wait_idle()).await;
    match alpn.as_deref() {
        Some(b"h3") => Ok(()),
        _ => Err("the server did not agree on h3".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;
    use std::sync::Mutex;

    const INTERVAL: Duration = Duration::from_secs(10);

    /// A prober whose probes answer from `results` (then succeed) after
    /// `takes`, counting them.
    struct Fake {
        advertiser: Arc<Advertiser>,
        probes: Arc<Mutex<u32>>,
        results: Arc<Mutex<VecDeque<bool>>>,
        _stop: watch::Sender<bool>,
    }

    fn start(results: &[bool], takes: Duration) -> Fake {
        let advertiser = Advertiser::new(443, Duration::from_secs(3600));
        let probes = Arc::new(Mutex::new(0));
        let results = Arc::new(Mutex::new(results.iter().copied().collect::<VecDeque<_>>()));
        let (stop_tx, stop) = watch::channel(false);
        let (count, queue) = (probes.clone(), results.clone());
        tokio::spawn(run(
            advertiser.clone(),
            move || {
                *count.lock().unwrap() += 1;
                let result = queue.lock().unwrap().pop_front().unwrap_or(true);
                async move {
                    tokio::time::sleep(takes).await;
                    result
                }
            },
            INTERVAL,
            None,
            stop,
        ));
        Fake {
            advertiser,
            probes,
            results,
            _stop: stop_tx,
        }
    }

    impl Fake {
        fn probes(&self) -> u32 {
            *self.probes.lock().unwrap()
        }
    }

    /// Lets the prober run, `d` later.
    async fn after(d: Duration) {
        tokio::time::sleep(d).await;
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[test]
    fn the_field_names_the_port_and_the_age() {
        let a = Advertiser::new(443, Duration::from_secs(3600));
        assert_eq!(a.value(), "h3=\":443\"; ma=3600");
        assert_eq!(&a.field()[0].0[..], b"alt-svc");
        assert_eq!(&a.field()[0].1[..], a.value().as_bytes());
        assert!(!a.advertise(), "nothing before the first probe");
    }

    #[tokio::test(start_paused = true)]
    async fn fresh_then_stale_then_withdrawn_without_requests() {
        let f = start(&[], Duration::from_millis(5));
        after(Duration::from_millis(10)).await;
        assert_eq!(f.probes(), 1, "the first probe runs at start");
        assert!(f.advertiser.advertise(), "fresh");
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), FRESH);
        after(INTERVAL).await;
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), STALE);
        // Nobody asks during the second interval: withdrawn at its end,
        // and nothing probed.
        after(INTERVAL).await;
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), DOWN);
        assert_eq!(f.probes(), 1);
        // At rest: no timer fires, nothing changes.
        after(100 * INTERVAL).await;
        assert_eq!(f.probes(), 1);
        // A request now gets no field, and starts a probe.
        assert!(!f.advertiser.advertise());
        after(Duration::from_millis(10)).await;
        assert_eq!(f.probes(), 2);
        assert!(f.advertiser.advertise());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_advertisement_is_kept_while_a_request_refreshes_it() {
        let f = start(&[true, true], Duration::from_secs(1));
        after(Duration::from_secs(2)).await;
        after(INTERVAL).await;
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), STALE);
        assert!(f.advertiser.advertise(), "stale is still advertised");
        assert_eq!(
            f.advertiser.state.load(Ordering::Relaxed),
            PROBING_STALE,
            "the request started a probe"
        );
        assert!(f.advertiser.advertise(), "advertised while it runs");
        after(Duration::from_secs(2)).await;
        assert_eq!(f.probes(), 2);
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), FRESH);
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_withdraws_at_once_and_waits_an_interval() {
        let f = start(&[true, false, true], Duration::from_millis(5));
        after(INTERVAL + Duration::from_millis(10)).await;
        assert!(f.advertiser.advertise(), "stale: advertised, probing");
        after(Duration::from_millis(10)).await;
        assert_eq!(f.probes(), 2);
        assert!(!f.advertiser.advertise(), "the failure withdraws it");
        // Requests during the failed probe's interval start nothing.
        for _ in 0..1000 {
            assert!(!f.advertiser.advertise());
        }
        after(INTERVAL / 2).await;
        assert_eq!(f.probes(), 2);
        after(INTERVAL / 2).await;
        assert_eq!(f.advertiser.state.load(Ordering::Relaxed), DOWN);
        assert!(!f.advertiser.advertise(), "the next request probes again");
        after(Duration::from_millis(10)).await;
        assert_eq!(f.probes(), 3);
        assert!(f.advertiser.advertise());
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_hangs_is_cut_and_the_advertisement_ends_in_two_intervals() {
        // The path dies after the first probe: the next one never answers.
        let f = start(&[true], Duration::from_millis(5));
        after(Duration::from_millis(10)).await;
        *f.results.lock().unwrap() = VecDeque::from([false]);
        let died = Instant::now();
        // A request at the very end of the second interval starts a
        // probe that would run past it: the end still holds.
        after(2 * INTERVAL - Duration::from_millis(100)).await;
        assert!(f.advertiser.advertise());
        let mut withdrawn = None;
        for _ in 0..100 {
            after(Duration::from_millis(50)).await;
            if !f.advertiser.advertise() {
                withdrawn = Some(Instant::now());
                break;
            }
        }
        let withdrawn = withdrawn.expect("withdrawn");
        assert!(withdrawn - died <= 2 * INTERVAL, "{:?}", withdrawn - died);
        assert_eq!(f.probes(), 2, "one probe in flight at most");
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_that_never_ends_counts_as_failed() {
        let advertiser = Advertiser::new(443, Duration::from_secs(3600));
        let (_stop_tx, stop) = watch::channel(false);
        tokio::spawn(run(
            advertiser.clone(),
            std::future::pending::<bool>,
            INTERVAL,
            None,
            stop,
        ));
        after(PROBE_TIMEOUT + Duration::from_millis(10)).await;
        assert_eq!(advertiser.state.load(Ordering::Relaxed), PROBING_DOWN);
        assert!(!advertiser.advertise());
    }

    /// Hostile input: however many requests arrive, and whenever, the
    /// replica probes at most once per interval.
    #[tokio::test(start_paused = true)]
    async fn a_flood_of_requests_starts_one_probe_per_interval() {
        for results in [[true; 8], [false; 8]] {
            let f = start(&results, Duration::from_millis(200));
            let begin = Instant::now();
            for _ in 0..2000 {
                for _ in 0..50 {
                    f.advertiser.advertise();
                }
                after(Duration::from_millis(50)).await;
            }
            let intervals = (Instant::now() - begin).as_secs() / INTERVAL.as_secs();
            let probes = u64::from(f.probes());
            assert!(
                probes <= intervals + 1,
                "{probes} probes in {intervals} intervals"
            );
            assert!(
                probes >= intervals,
                "{probes} probes in {intervals} intervals"
            );
        }
    }

    #[test]
    fn probe_targets_parse_as_written() {
        let t = |s: &str| ProbeTarget::parse(s);
        assert_eq!(
            t("192.0.2.1:443"),
            Some(ProbeTarget {
                host: "192.0.2.1".into(),
                port: 443
            })
        );
        assert_eq!(t("[2001:db8::1]:443").unwrap().host, "2001:db8::1");
        assert_eq!(
            t("[2001:db8::1]:443").unwrap().to_string(),
            "[2001:db8::1]:443"
        );
        assert_eq!(t("lb.example.com:8443").unwrap().port, 8443);
        assert_eq!(t("lb.example.com"), None);
        assert_eq!(t("2001:db8::1:443"), None);
        assert_eq!(t(":443"), None);
    }

    /// The real probe against a quinn server: a handshake succeeds with
    /// a self-signed certificate, and a port where nothing listens fails
    /// within the timeout.
    #[tokio::test]
    async fn the_probe_completes_a_handshake_with_the_http3_endpoint() {
        let made = rcgen::generate_simple_self_signed(vec!["localhost".into()]).unwrap();
        let key =
            rustls::pki_types::PrivateKeyDer::try_from(made.signing_key.serialize_der()).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut tls = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![made.cert.der().clone()], key)
            .unwrap();
        tls.alpn_protocols = vec![b"h3".to_vec()];
        let config = quinn::ServerConfig::with_crypto(Arc::new(
            quinn::crypto::rustls::QuicServerConfig::try_from(tls).unwrap(),
        ));
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = socket.local_addr().unwrap();
        let endpoint = quinn::Endpoint::new(
            quinn::EndpointConfig::default(),
            Some(config),
            socket,
            Arc::new(quinn::TokioRuntime),
        )
        .unwrap();
        let server = endpoint.clone();
        tokio::spawn(async move {
            while let Some(incoming) = server.accept().await {
                tokio::spawn(async move {
                    if let Ok(conn) = incoming.await {
                        conn.closed().await;
                    }
                });
            }
        });
        let client = probe_client().unwrap();
        let target = ProbeTarget {
            host: "127.0.0.1".into(),
            port: addr.port(),
        };
        assert!(handshake(&target, &client).await);
        endpoint.close(quinn::VarInt::from_u32(0), b"");
        drop(endpoint);
        let closed = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let dead = ProbeTarget {
            host: "127.0.0.1".into(),
            port: closed.local_addr().unwrap().port(),
        };
        drop(closed);
        let failed = tokio::time::timeout(PROBE_TIMEOUT, handshake(&dead, &client)).await;
        assert!(!failed.unwrap_or(false));
    }
}
