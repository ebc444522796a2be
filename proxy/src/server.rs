//! [`run`]: the proxy as one async function over listeners the caller bound,
//! ending when `shutdown` resolves (mini-redis style, so tests bind port 0).
//!
//! Pingora's own `Server` owns signals, runtimes and `process::exit`; here
//! the Pingora service is started directly on the caller's runtime instead,
//! with pre-bound sockets handed over through Pingora's listen-fd table, so
//! the caller knows every bound address before the first request and
//! decides when to stop.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use pingora_core::listeners::tls::TlsSettings;
use tokio::sync::watch;

use teapot_model::certificate::TlsCertificate;
use teapot_source::kube::{KubeConfig, KubeSource};

use crate::Error;
use crate::compile::CompileOptions;
use crate::compile::snapshot::Snapshot;
use crate::loops::allocations::Allocator;
use crate::loops::kube_status::StatusOptions;
use crate::loops::proof::{DomainProver, ProofBook, ProofLimits, ProofTiming};
use crate::loops::reload::{LiveInputs, Reloader, Source};
use crate::plane::admin::{self, AdminState};
use crate::plane::metrics::Metrics;
use crate::plane::proxy::{Router, UpstreamOptions};
use crate::plane::tls::SniResolver;
use crate::plane::{AcmeResponder, ServeError};

/// Between telling connections to finish and telling the routers: long
/// enough for a busy keep-alive connection's next request to be answered
/// with `Connection: close` and for idle ones to be closed.
const DRAIN_LEAD: Duration = Duration::from_millis(500);

/// Everything `teapot proxy` is configured with, apart from sockets.
#[derive(Clone, Debug)]
pub struct ProxyConfig {
    pub manifests: PathBuf,
    pub compile: CompileOptions,
    pub upstream: UpstreamOptions,
    /// How long in-flight requests may take to finish after shutdown starts.
    pub grace_period: Duration,
    /// Serve HTTP/2 with prior knowledge on the plain listener beside
    /// HTTP/1 (told apart by the connection's first bytes).
    pub h2c: bool,
    /// The HTTP/3 endpoint's Retry threshold and the fleet's QUIC keys
    /// (HTTP/3 is served where [`Listeners::quic`] holds a socket).
    pub quic: crate::plane::h3::QuicOptions,
    /// Idle upstream connections kept for reuse, per upstream address and
    /// serving thread.
    pub upstream_pool_size: usize,
    /// Threads serving HTTP and HTTPS, each with its own single-threaded
    /// runtime and listening sockets (crate::plane::serving); 0: one per
    /// core.
    pub serving_threads: usize,
    /// DNS servers for custom-domain proofs (empty: the system's).
    pub dns_servers: Vec<SocketAddr>,
    pub proof_timing: ProofTiming,
    /// How many custom-domain checks run at once, and for how long.
    pub proof_limits: ProofLimits,
    /// Certificates from ACME; `None`: off.
    pub acme: Option<crate::loops::acme::AcmeConfig>,
    /// Read objects from the Kubernetes API instead of `manifests`.
    pub kube: Option<KubeConfig>,
    /// In kube mode, write Ingress and Service status (one replica, by
    /// Lease); `None`: read only.
    pub kube_status: Option<StatusOptions>,
    /// Front-door limits (docs/edge.md).
    pub edge: crate::plane::edge::EdgeConfig,
    /// TCP/UDP load balancing of LoadBalancer Services.
    pub l4: crate::compile::l4::L4Config,
    /// Access log, request IDs, per-route series (docs/operations.md).
    pub observe: ObserveConfig,
    /// BGP and L2 announcement of this replica's addresses
    /// (docs/announce.md); `None`: off.
    pub announce: Option<crate::loops::announce::config::AnnounceConfig>,
    /// The authoritative DNS server for lb.DOMAIN (docs/dns.md); `None`:
    /// off. Its sockets are [`Listeners::dns`].
    pub dns: Option<crate::loops::dns_zone::DnsConfig>,
    /// The exchange of `global-rate-limit`'s counts with the other
    /// replicas (crate::loops::fleet_exchange); `None`: each replica
    /// counts alone.
    pub fleet: Option<crate::loops::fleet_exchange::FleetConfig>,
    /// `Alt-Svc` on HTTPS answers while HTTP/3 answers its self-probe
    /// (where HTTP/3 is served; crate::plane::alt_svc).
    pub alt_svc: crate::plane::alt_svc::AltSvcConfig,
}

/// What `teapot proxy` tells an operator about each request.
#[derive(Clone, Debug, Default)]
pub struct ObserveConfig {
    pub access_log: crate::plane::access_log::AccessLogConfig,
    /// Operator namespaces whose routes keep a client's `X-Request-Id`.
    pub trust_request_id: Vec<String>,
    /// Request series per route as well as per tenant.
    pub metrics_per_route: bool,
}

impl ProxyConfig {
    pub fn new(manifests: PathBuf) -> ProxyConfig {
        ProxyConfig {
            manifests,
            compile: CompileOptions::default(),
            upstream: UpstreamOptions::default(),
            grace_period: Duration::from_secs(25),
            h2c: true,
            quic: crate::plane::h3::QuicOptions::default(),
            upstream_pool_size: 1024,
            serving_threads: 0,
            dns_servers: Vec::new(),
            proof_timing: ProofTiming::default(),
            proof_limits: ProofLimits::default(),
            acme: None,
            kube: None,
            kube_status: None,
            edge: crate::plane::edge::EdgeConfig::default(),
            l4: crate::compile::l4::L4Config::default(),
            observe: ObserveConfig::default(),
            announce: None,
            dns: None,
            fleet: None,
            alt_svc: crate::plane::alt_svc::AltSvcConfig::default(),
        }
    }
}

/// Bound sockets: plain HTTP, HTTPS, admin.
#[derive(Debug)]
pub struct Listeners {
    pub http: Option<std::net::TcpListener>,
    pub https: Option<std::net::TcpListener>,
    pub admin: std::net::TcpListener,
    /// UDP and TCP of the DNS server, when [`ProxyConfig::dns`] is set.
    pub dns: Option<teapot_dns::Sockets>,
    /// HTTP/3's UDP socket, at the HTTPS listener's address and port
    /// ([`Listeners::bind_quic`]); `None`: HTTP/3 is not served.
    pub quic: Option<std::net::UdpSocket>,
}

/// Whether HTTP/3 is served beside HTTPS (crate::plane::h3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Http3 {
    /// No UDP socket, no `Alt-Svc`.
    Off,
    /// Served where the HTTPS listener's UDP port can be bound; where it
    /// cannot (another process holds it), HTTPS serves over TCP alone,
    /// nothing advertises HTTP/3, and the log says why: a replica that
    /// was not asked for HTTP/3 does not stop serving TCP for it.
    WhereFree,
    /// Served, or the start fails: an operator asked for it by name.
    Required,
}

/// Addresses the listeners actually got (port 0 resolved).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BoundAddrs {
    pub http: Option<SocketAddr>,
    pub https: Option<SocketAddr>,
    pub admin: SocketAddr,
    pub dns: Option<SocketAddr>,
    /// HTTP/3's UDP socket (the HTTPS address) while it is served.
    pub http3: Option<SocketAddr>,
}

impl Listeners {
    /// Binds each address; `None` leaves that listener off.
    /// HTTP and HTTPS are the first sockets of their serving threads'
    /// groups (crate::plane::serving::bind_first): listening from here on.
    pub fn bind(http: Option<&str>, https: Option<&str>, admin: &str) -> Result<Listeners, Error> {
        let err = |what: &'static str, addr: &str| {
            let addr = addr.to_string();
            move |source| Error::Bind { what, addr, source }
        };
        let serving = |what: &'static str, addr: &str| {
            crate::plane::serving::bind_first(addr).map_err(err(what, addr))
        };
        Ok(Listeners {
            http: http.map(|a| serving("http", a)).transpose()?,
            https: https.map(|a| serving("https", a)).transpose()?,
            admin: std::net::TcpListener::bind(admin).map_err(err("admin", admin))?,
            dns: None,
            quic: None,
        })
    }

    /// Binds HTTP/3's UDP socket at the address and port the HTTPS
    /// listener got; `https` is the address that listener was asked for.
    /// Asked for any port (`:0`), it may have got one whose UDP side
    /// another process holds: then both are bound again, on a port the
    /// kernel picks anew, a few times over.
    pub fn bind_quic(&mut self, https: Option<&str>, mode: Http3) -> Result<(), Error> {
        const ATTEMPTS: usize = 8;
        if mode == Http3::Off {
            return Ok(());
        }
        let (Some(asked), Some(_)) = (https, self.https.as_ref()) else {
            return match mode {
                Http3::Required => {
                    Err(ServeError::Tls("--http3 needs the HTTPS listener".into()).into())
                }
                _ => Ok(()),
            };
        };
        let any_port = asked.parse::<SocketAddr>().is_ok_and(|a| a.port() == 0);
        let mut attempt = 1;
        loop {
            let addr = match &self.https {
                Some(tcp) => tcp.local_addr()?,
                None => return Ok(()),
            };
            let source = match crate::plane::quic_threads::bind_first(addr) {
                Ok(socket) => {
                    self.quic = Some(socket);
                    return Ok(());
                }
                Err(source) => source,
            };
            if any_port && attempt < ATTEMPTS && source.kind() == std::io::ErrorKind::AddrInUse {
                attempt += 1;
                // Bound while the old one still holds its port: another.
                let again =
                    crate::plane::serving::bind_first(asked).map_err(|source| Error::Bind {
                        what: "https",
                        addr: asked.to_string(),
                        source,
                    })?;
                self.https = Some(again);
                continue;
            }
            if mode == Http3::Required {
                return Err(Error::Bind {
                    what: "http3 (UDP)",
                    addr: addr.to_string(),
                    source,
                });
            }
            tracing::warn!(
                %addr,
                error = %source,
                "HTTP/3 is not served: its UDP port cannot be bound; HTTPS serves over TCP alone \
                 and nothing advertises HTTP/3 (--http3 makes this stop the start, --no-http3 \
                 turns HTTP/3 off)"
            );
            return Ok(());
        }
    }

    pub fn addrs(&self) -> Result<BoundAddrs, Error> {
        Ok(BoundAddrs {
            http: self.http.as_ref().map(|l| l.local_addr()).transpose()?,
            https: self.https.as_ref().map(|l| l.local_addr()).transpose()?,
            admin: self.admin.local_addr()?,
            dns: self.dns.as_ref().map(|d| d.local_addr()).transpose()?,
            http3: self.quic.as_ref().map(|q| q.local_addr()).transpose()?,
        })
    }
}

/// The DNS server and the loop that keeps its zone current, both ending
/// on `stop`.
#[allow(clippy::too_many_arguments)]
fn start_dns(
    dns: crate::loops::dns_zone::DnsConfig,
    sockets: teapot_dns::Sockets,
    config: &ProxyConfig,
    snapshots: &crate::compile::snapshot::SnapshotHandle,
    metrics: &Metrics,
    ready: Arc<AtomicBool>,
    acme: Option<Arc<crate::loops::acme::AcmeShared>>,
    generations: watch::Receiver<u64>,
    stop: watch::Receiver<bool>,
) -> Result<(tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>), Error> {
    use crate::loops::dns_zone::{self, Addresses};
    let dns_metrics = teapot_dns::Metrics::new()?;
    dns_metrics.register(metrics.registry())?;
    // SERVFAIL until the first build: this replica knows no routes yet.
    let zone = Arc::new(ArcSwap::from_pointee(
        teapot_dns::ZoneBuilder::new(dns.zone.clone())?.placeholder(),
    ));
    let addresses = match (&config.announce, &config.kube) {
        // The announced addresses move between replicas (L2) or are
        // withdrawn by the replica that stops (BGP): DNS keeps them.
        (Some(announce), _) => Addresses::Fixed(announce.addresses.iter().copied().collect()),
        (None, Some(kube)) => Addresses::replicas(
            kube.client.clone(),
            kube.lease_namespace.clone(),
            &dns,
            ready.clone(),
        ),
        (None, None) => Addresses::Fixed(dns.addresses.clone()),
    };
    let challenges = acme.map(|a| a as Arc<dyn dns_zone::Challenges>);
    let counters = dns_zone::ZoneCounters {
        passes: Some(dns_metrics.zone_passes.clone()),
        builds: Some(dns_metrics.zone_builds.clone()),
    };
    let zone_task = tokio::spawn(dns_zone::run(
        dns.zone.clone(),
        zone.clone(),
        snapshots.clone(),
        generations,
        addresses,
        challenges,
        ready,
        counters,
        stop.clone(),
    ));
    // The listeners run on a thread and a runtime of their own: a
    // compile holds the proxy's runtime workers for up to seconds (all of
    // them on a one-CPU replica), and a DNS answer must not wait for it.
    // The kernel shares the CPU between this thread and the compile's.
    let mut stopped = stop;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    std::thread::Builder::new()
        .name("teapot-dns".into())
        .spawn(move || {
            runtime.block_on(async move {
                let shutdown = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                if let Err(e) =
                    teapot_dns::run(sockets, zone, dns.server, dns_metrics, shutdown).await
                {
                    tracing::error!(error = %e, "DNS listener failed");
                }
            });
            let _ = done_tx.send(());
        })?;
    let server_task = tokio::spawn(async move {
        let _ = done_rx.await;
    });
    Ok((zone_task, server_task))
}

/// The HTTP/3 self-probe behind `Alt-Svc` (crate::plane::alt_svc), until
/// the replica drains. It goes where clients are sent: the configured
/// target, else the first status address at the advertised port, so a
/// firewall or a TCP-only hop on that path withdraws the field.
fn start_alt_svc(
    config: &ProxyConfig,
    advertiser: Arc<crate::plane::alt_svc::Advertiser>,
    https: SocketAddr,
    metrics: &Metrics,
    drain: watch::Receiver<bool>,
) -> Result<(), Error> {
    use crate::plane::alt_svc::{self, ProbeMetrics, ProbeTarget};
    let alt = &config.alt_svc;
    let port = alt.port.unwrap_or(https.port());
    let target = alt.probe.clone().unwrap_or_else(|| {
        let host = match config.compile.status_addresses.first() {
            Some(address) => address.clone(),
            None if https.ip().is_unspecified() => "127.0.0.1".to_string(),
            None => https.ip().to_string(),
        };
        ProbeTarget { host, port }
    });
    let probe_metrics = ProbeMetrics::new()?;
    probe_metrics.register(metrics.registry())?;
    let client = alt_svc::probe_client()?;
    tracing::info!(%target, alt_svc = advertiser.value(), "advertising HTTP/3 while it answers its probe");
    let probe = move || {
        let (target, client) = (target.clone(), client.clone());
        async move { alt_svc::handshake(&target, &client).await }
    };
    tokio::spawn(alt_svc::run(
        advertiser,
        probe,
        alt.interval,
        Some(probe_metrics),
        drain,
    ));
    Ok(())
}

/// Serves until `shutdown` resolves, then stops accepting, lets in-flight
/// requests finish for at most the grace period, and returns.
pub async fn run(
    config: ProxyConfig,
    mut listeners: Listeners,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    if config.kube.is_none() && !config.manifests.is_dir() {
        return Err(Error::Manifests {
            path: config.manifests.clone(),
            source: std::io::Error::new(std::io::ErrorKind::NotFound, "not a directory"),
        });
    }
    let mut metrics = Metrics::new()?.with_route_series(config.observe.metrics_per_route);
    let access_log = crate::plane::access_log::AccessLog::start(
        &config.observe.access_log,
        metrics.access_log_dropped.clone(),
    )
    .map_err(|e| {
        let what = match &config.observe.access_log.destination {
            crate::plane::access_log::Destination::File(path) => {
                format!("--access-log-file {}", path.display())
            }
            crate::plane::access_log::Destination::Stderr => "--access-log".to_string(),
        };
        Error::Io(std::io::Error::new(e.kind(), format!("{what}: {e}")))
    })?;
    metrics.l4.access_log = access_log.clone();
    let snapshots = Arc::new(ArcSwap::from_pointee(Snapshot::default()));
    let proofs = Arc::new(ProofBook::default());
    let prover = DomainProver::new(
        &config.dns_servers,
        proofs.clone(),
        config.proof_timing.clone(),
    )
    .map_err(|e| Error::Io(std::io::Error::other(e)))?
    .with_limits(config.proof_limits);
    let acme = match (config.acme.clone(), &config.kube) {
        (Some(c), None) => Some(crate::loops::acme::Acme::start(c).await?),
        (Some(c), Some(kube)) => {
            let options = crate::loops::acme::kube_store::KubeStoreOptions::new(
                kube.lease_namespace.clone(),
                kube.namespaces.clone(),
            );
            let store =
                crate::loops::acme::kube_store::KubeStore::start(kube.client.clone(), options);
            Some(crate::loops::acme::Acme::with_store(c, Arc::new(store)).await?)
        }
        (None, _) => None,
    };
    let acme_shared = acme.as_ref().map(|a| a.shared());
    // The proxy's own ports are never a Service's listener (docs/l4.md,
    // "Reserved listeners").
    let mut l4_config = config.l4.clone();
    let bound = listeners.addrs()?;
    l4_config.reserved.extend(
        [bound.http, bound.https, Some(bound.admin), bound.dns]
            .into_iter()
            .flatten()
            .map(crate::compile::l4::allocation::Reserved::listener),
    );
    // HTTP/3 holds the HTTPS port's UDP side: no UDP Service gets it.
    l4_config.reserved.extend(
        bound
            .http3
            .map(|addr| crate::compile::l4::allocation::Reserved {
                protocol: crate::compile::l4::Protocol::Udp,
                ..crate::compile::l4::allocation::Reserved::listener(addr)
            }),
    );
    let l4 = crate::plane::l4::L4::new(l4_config, metrics.l4.clone());
    let allocations = Allocator::new(config.l4.pools.clone(), config.l4.state_file.clone())?;
    // Bound before the first compile: every global-rate-limit route
    // counts for the fleet from the first request.
    let global_counts = config.compile.tenant_gates.global_counts.clone();
    for collector in global_counts.metrics.collectors() {
        metrics.registry().register(collector)?;
    }
    let fleet = config
        .fleet
        .as_ref()
        .map(|f| {
            let client = config.kube.as_ref().map(|k| &k.client);
            crate::loops::fleet_exchange::Exchange::bind_in(f, global_counts, client)
        })
        .transpose()?;
    let source = match &config.kube {
        Some(kube) => Source::Kube(KubeSource::start(kube)),
        None => Source::Dir(config.manifests.clone()),
    };
    let reloader = Arc::new(
        Reloader::with_source(
            source,
            config.compile.clone(),
            snapshots.clone(),
            metrics.clone(),
        )
        .with_live(LiveInputs {
            proofs: Some(proofs),
            acme: acme_shared.clone(),
            l4: Some((l4.clone(), allocations)),
        }),
    );
    let acme_responder = acme_shared.clone().map(|a| a as Arc<dyn AcmeResponder>);
    {
        let r = reloader.clone();
        tokio::task::spawn_blocking(move || r.reload())
            .await
            .map_err(|e| Error::Io(std::io::Error::other(e)))?;
    }

    let (stop_tx, stop_rx) = watch::channel(false);
    // Connections finish on their own signal, sent before the routers
    // are told: a replica whose routes are moving away closes its
    // keep-alive connections at response boundaries (and sends HTTP/2
    // GOAWAY) while it still accepts, so no client's next request rides
    // a connection the routers now send elsewhere.
    let (drain_tx, drain_rx) = watch::channel(false);
    let ready = Arc::new(AtomicBool::new(false));
    // Announces nothing until ready; a bad setting fails here, before
    // anything serves.
    let announcer = match config.announce.clone() {
        Some(c) => {
            // In kube mode the replicas find each other by Leases; in
            // manifests mode this one owns every L2 address.
            let membership =
                config
                    .kube
                    .as_ref()
                    .map(|k| crate::loops::announce::config::KubeMembership {
                        client: k.client.clone(),
                        namespace: k.lease_namespace.clone(),
                    });
            Some(
                crate::loops::announce::driver::Announcement::start(
                    c,
                    snapshots.clone(),
                    reloader.generations(),
                    ready.clone(),
                    membership,
                )
                .await
                .map_err(|e| Error::Io(std::io::Error::other(e.to_string())))?,
            )
        }
        None => None,
    };

    let sni = match &listeners.https {
        Some(_) => Some(Arc::new(
            SniResolver::new(
                snapshots.clone(),
                TlsCertificate::self_signed_default()?.key,
            )
            .with_acme(acme_responder.clone()),
        )),
        None => None,
    };
    // Advertised from the first probe's success on, which starts once the
    // HTTP/3 endpoint serves (below).
    let advertiser = match (bound.http3, bound.https) {
        (Some(_), Some(https)) if config.alt_svc.advertise => Some((
            crate::plane::alt_svc::Advertiser::new(
                config.alt_svc.port.unwrap_or(https.port()),
                config.alt_svc.max_age,
            ),
            https,
            drain_rx.clone(),
        )),
        _ => None,
    };
    let router = Router::new(snapshots.clone(), metrics.clone(), config.upstream.clone())
        .with_alt_svc(advertiser.as_ref().map(|(a, _, _)| a.clone()))
        .with_acme(acme_responder.clone())
        .with_edge(config.edge.clone())
        .with_tls(sni.clone())
        .with_observe(crate::plane::proxy::Observe {
            access_log,
            trust_request_id: config
                .observe
                .trust_request_id
                .iter()
                .map(|ns| Box::from(ns.as_str()))
                .collect(),
        });
    let threads = match config.serving_threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    };
    // Each serving thread gets its own HTTP/1 engine (and upstream pool)
    // and HTTP/2 application; the edge wrapper's connection table is
    // shared (crate::plane::serving).
    let h2_app = crate::plane::h2::H2Server::new;
    let first = crate::plane::accept::EdgeApp::new(
        h2_app(router.clone()),
        crate::plane::h1::engine(router.clone(), config.upstream_pool_size),
        config.edge.clone(),
        metrics.clone(),
        config.h2c,
    )
    .with_drain(drain_rx);
    let tls_sni = sni.clone();
    // One cache of client-certificate configurations for every listener.
    let tls_snapshots = snapshots.clone();
    let tls_prepares = Arc::new(crate::plane::client_cert::Prepares::default());
    let tls_handshakes = metrics.client_cert_handshakes.clone();
    let tls: Arc<crate::plane::serving::TlsBuilder> = Arc::new(move |local| {
        let sni = tls_sni
            .clone()
            .ok_or_else(|| ServeError::Tls("an HTTPS listener needs the SNI resolver".into()))?;
        // The callback keeps each connection's SNI (for the 421 check) and
        // its client certificate's outcome; the chooser asks for a client
        // certificate only where the host has a setting on that socket.
        let mut tls = TlsSettings::with_callbacks(Box::new(
            crate::plane::client_cert::TlsFactsCallback::new(
                tls_snapshots.clone(),
                tls_prepares.clone(),
                tls_handshakes.clone(),
            )
            .at(local),
        ))
        .map_err(|e| ServeError::Tls(e.to_string()))?;
        tls.set_config_chooser(Arc::new(
            crate::plane::client_cert::ClientAuthChooser::new(
                tls_snapshots.clone(),
                tls_prepares.clone(),
                tls_handshakes.clone(),
            )
            .at(local),
        ));
        tls.set_cert_resolver(sni);
        tls.enable_h2();
        // The server picks the TLS 1.2 suite from its own order (AES-GCM
        // before ChaCha20, ECDSA before RSA) rather than whatever a client
        // lists first; testssl rates a client-chosen order HIGH.
        tls.set_ignore_client_order(true);
        Ok(tls)
    });
    if let Some(addr) = bound.http {
        tracing::info!(%addr, threads, "http listener");
    }
    if let Some(addr) = bound.https {
        tracing::info!(%addr, threads, "https listener");
    }
    let mut apps = Vec::with_capacity(threads);
    for _ in 1..threads {
        apps.push(first.sibling(
            h2_app(router.clone()),
            crate::plane::h1::engine(router.clone(), config.upstream_pool_size),
        ));
    }
    // TLS passthrough by SNI on the shared HTTPS listener only (a
    // Gateway's own address serves no Ingress host); it relays through
    // the L4 plane's loops once they run (below). Its admission at accept
    // holds on every HTTPS socket.
    let adopter = Arc::new(std::sync::OnceLock::new());
    let shared_hook = crate::plane::passthrough::Passthrough::new(
        snapshots.clone(),
        first.slots(),
        adopter.clone(),
    );
    // The HTTP and HTTPS listeners of Gateways with their own address:
    // bound by the L4 plane, served by an application of their own that
    // shares the connection table (the caps hold for the replica) and
    // admits a TLS connection at accept, before its handshake, with the
    // same deadline.
    // HTTP/3 serves the shared HTTPS listener's address only: a Gateway's
    // own address advertises nothing.
    let own_router = router.clone().with_alt_svc(None);
    let edge_serving: crate::plane::l4::manager::EdgeServing =
        Arc::new(crate::plane::serving::OwnListeners {
            app: Arc::new(
                first
                    .sibling(
                        h2_app(own_router.clone()),
                        crate::plane::h1::engine(own_router, config.upstream_pool_size),
                    )
                    .with_pre_tls(Arc::new(shared_hook.admission_only())),
            ),
            tls: tls.clone(),
            sni: sni.clone(),
        });
    let passthrough: pingora_core::listeners::PreTlsCallback = Arc::new(shared_hook);
    // HTTP/3: an endpoint on each serving thread, each its own socket of
    // one group, the kernel steering packets by connection ID.
    let (http3, quic_threads) = match (listeners.quic.take(), &sni) {
        (None, _) => (None, Vec::new()),
        (Some(socket), Some(sni)) => {
            let addr = socket.local_addr()?;
            let sockets = crate::plane::quic_threads::per_thread(socket, threads)?;
            let quic = crate::plane::h3::server_config(sni.clone(), &config.edge, &config.quic)?;
            tracing::info!(%addr, threads = sockets.len(), "http3 listener (udp)");
            let handshakes = crate::plane::h3::handshake_counter()?;
            metrics.registry().register(Box::new(handshakes.clone()))?;
            let options = crate::plane::h3::QuicOptions {
                handshakes: Some(handshakes),
                ..config.quic.clone()
            };
            let (starting, parts) = crate::plane::h3::Http3::per_thread(
                sockets,
                quic,
                router.clone(),
                first.slots(),
                &options,
            )?;
            (Some(starting), parts)
        }
        (Some(_), None) => {
            return Err(ServeError::Tls("--http3 needs the HTTPS listener".into()).into());
        }
    };
    apps.push(first);
    let apps: Vec<_> = apps
        .into_iter()
        .map(|app| app.with_pre_tls(passthrough.clone()))
        .collect();
    let mut quic_threads = quic_threads.into_iter();
    let services = crate::plane::serving::per_thread(listeners.http, listeners.https, threads)?
        .into_iter()
        .zip(apps)
        .map(|(sockets, app)| {
            crate::plane::serving::service(app, sockets, &|| tls(None))
                .map(|serving| serving.with_quic(quic_threads.next()))
        })
        .collect::<Result<Vec<_>, ServeError>>()?;
    let mut serving = crate::plane::serving::ServingThreads::start(services, stop_rx.clone())?;
    let http3 = http3.map(|starting| starting.started()).transpose()?;
    if let Some((advertiser, https, drain)) = advertiser.filter(|_| http3.is_some()) {
        start_alt_svc(&config, advertiser, https, &metrics, drain)?;
    }

    // In kube mode each replica tells of its own BGP sessions on its Pod.
    if let (Some(statuses), Some(kube)) = (
        announcer.as_ref().and_then(|a| a.statuses()),
        config.kube.as_ref(),
    ) {
        match crate::loops::announce::bgp_events::this_pod(&kube.lease_namespace) {
            Some(pod) => drop(tokio::spawn(crate::loops::announce::bgp_events::run(
                statuses,
                kube.client.clone(),
                pod,
                stop_rx.clone(),
            ))),
            None => tracing::warn!(
                "neither POD_NAME nor HOSTNAME is set: BGP session changes are not published as Events"
            ),
        }
    }

    let admin_listener = {
        listeners.admin.set_nonblocking(true)?;
        tokio::net::TcpListener::from_std(listeners.admin)?
    };
    let admin_task = tokio::spawn(admin::run(
        admin_listener,
        AdminState {
            snapshots: snapshots.clone(),
            metrics: metrics.clone(),
            ready: ready.clone(),
            announce: announcer
                .as_ref()
                .map(|a| Arc::new(a.view()) as Arc<dyn admin::StatusSection>),
        },
        stop_rx.clone(),
    ));
    let dns_task = match (config.dns.clone(), listeners.dns.take()) {
        (Some(dns), Some(sockets)) => Some(start_dns(
            dns,
            sockets,
            &config,
            &snapshots,
            &metrics,
            ready.clone(),
            acme_shared.clone(),
            reloader.generations(),
            stop_rx.clone(),
        )?),
        _ => None,
    };
    let watch_task = tokio::spawn(reloader.clone().watch(stop_rx.clone()));
    if let Some(fleet) = fleet {
        drop(tokio::spawn(fleet.run(stop_rx.clone())));
    }
    let noise_task = tokio::spawn(crate::plane::logflood::report(
        crate::plane::logflood::NoiseState::global().clone(),
        metrics.log_lines_suppressed.clone(),
        Duration::from_secs(10),
    ));
    let prover_task = {
        let snapshots = snapshots.clone();
        let recompile = reloader.recompile();
        tokio::spawn(prover.run(
            move || snapshots.load().claims.clone(),
            move || recompile.request(),
            stop_rx.clone(),
        ))
    };

    // After the first reload, so the first table is there to bind.
    let l4_service = l4.spawn(threads, Some(edge_serving))?;
    let _ = adopter.set(l4_service.adopter());

    let mut acme_task = acme.map(|acme| {
        let recompile = reloader.recompile();
        tokio::spawn(acme.run(
            snapshots.clone(),
            metrics.clone(),
            move || recompile.request(),
            stop_rx.clone(),
        ))
    });

    // The status writer says whether each L4 address is announced while
    // L4 addresses are (docs/announce.md, "Events and conditions").
    let kube_status = config.kube_status.clone().map(|mut options| {
        options.announce = config.announce.as_ref().filter(|a| a.l4).map(|a| {
            crate::loops::announce::announced::AnnounceStatusConfig {
                pools: a.pools.clone(),
                lease_duration: a.l2.lease_duration,
            }
        });
        options
    });
    let status_task = crate::loops::kube_status::spawn(
        config.kube.as_ref(),
        kube_status,
        reloader.source(),
        &snapshots,
        reloader.generations(),
        stop_rx.clone(),
    );
    // In kube mode the first snapshot waits for every watch to list;
    // until then /readyz says 503.
    let ready_task = match reloader.source() {
        Source::Dir(_) => {
            ready.store(true, Ordering::Release);
            None
        }
        Source::Kube(_) => {
            let (reloader, ready) = (reloader.clone(), ready.clone());
            Some(tokio::spawn(async move {
                reloader.wait_loaded().await;
                ready.store(true, Ordering::Release);
            }))
        }
    };
    match &config.kube {
        Some(kube) => {
            tracing::info!(namespaces = ?kube.namespaces, "teapot proxy serving from the Kubernetes API")
        }
        None => tracing::info!(manifests = %config.manifests.display(), "teapot proxy serving"),
    }

    shutdown.await;
    let started = Instant::now();
    // Routers and the segment first: GRACEFUL_SHUTDOWN moves new
    // connections to the other replicas while this one still serves, then
    // the routes go; L2 addresses pass to their next owners before they
    // leave this replica.
    let _ = drain_tx.send(true);
    if let Some(announcer) = announcer {
        // Connections in use answer their next request with
        // `Connection: close` (HTTP/1 grants a quarter of a second for it,
        // teapot_h1's IDLE_CLOSE_GRACE) before the routes move.
        tokio::time::sleep(DRAIN_LEAD).await;
        announcer.stop().await;
    }
    if let Some(t) = ready_task {
        t.abort();
    }
    ready.store(false, Ordering::Release);
    tracing::info!(
        grace_period_s = config.grace_period.as_secs_f64(),
        "shutting down: no new connections, draining"
    );
    let _ = stop_tx.send(true);
    // The status writer and the ACME issuer give their Leases up on the
    // stop signal, so a standby replica takes over at once instead of
    // after the lease duration; an API that does not answer is not waited
    // for.
    let leases_released = async {
        if let Some(t) = status_task {
            let _ = t.await;
        }
        if let Some(t) = acme_task.as_mut() {
            let _ = t.await;
        }
    };
    if let Some((zone, server)) = dns_task {
        // The zone loop deletes this replica's DNS Lease: the others stop
        // answering its address at once. The listener stops last among
        // the fleet-facing parts, so resolvers keep getting answers while
        // connections drain.
        let _ = zone.await;
        let _ = server.await;
    }
    if tokio::time::timeout(Duration::from_secs(2), leases_released)
        .await
        .is_err()
    {
        tracing::warn!("leases not released within 2 s; they expire on their own");
    }
    serving.stop_accepting().await;
    let deadline = started + config.grace_period;
    let l4_drain = tokio::spawn(l4_service.shutdown(deadline.into()));
    while metrics.in_flight.get() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let left = metrics.in_flight.get();
    if left > 0 {
        tracing::warn!(
            requests = left,
            "grace period over; abandoning in-flight requests"
        );
    }
    let _ = l4_drain.await;
    // HTTP/3 first: its endpoints run on the serving threads' runtimes.
    if let Some(http3) = http3 {
        http3.finish(Duration::from_secs(2)).await;
    }
    serving.finish(Duration::from_secs(2)).await;
    admin_task.abort();
    watch_task.abort();
    noise_task.abort();
    prover_task.abort();
    if let Some(t) = acme_task {
        t.abort();
    }
    // The access log's writer is a detached thread: returning (and
    // exiting) would cut off the lines still queued, those of the last
    // requests and of the L4 connections and flows closed above. Bounded:
    // a stuck destination does not hold the exit.
    let log = metrics.l4.access_log.clone();
    let drained = tokio::task::spawn_blocking(move || log.drain(Duration::from_secs(1))).await;
    if !matches!(drained, Ok(true)) {
        tracing::warn!("access log lines still queued after 1 s are lost");
    }
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        "shutdown complete"
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn https_only(https: &str) -> Listeners {
        Listeners::bind(None, Some(https), "127.0.0.1:0").unwrap()
    }

    fn https_port(l: &Listeners) -> u16 {
        l.https.as_ref().unwrap().local_addr().unwrap().port()
    }

    #[test]
    fn http3_binds_udp_on_the_https_port_unless_off() {
        let mut on = https_only("127.0.0.1:0");
        on.bind_quic(Some("127.0.0.1:0"), Http3::WhereFree).unwrap();
        let addrs = on.addrs().unwrap();
        assert_eq!(addrs.http3, addrs.https);
        // The socket is held: nobody else gets the port's UDP side.
        assert!(std::net::UdpSocket::bind(addrs.https.unwrap()).is_err());

        let mut off = https_only("127.0.0.1:0");
        off.bind_quic(Some("127.0.0.1:0"), Http3::Off).unwrap();
        assert!(off.quic.is_none());
        assert!(std::net::UdpSocket::bind(off.addrs().unwrap().https.unwrap()).is_ok());
    }

    /// Any port asked for: a UDP side held elsewhere moves both to a port
    /// whose TCP and UDP sides are free.
    #[test]
    fn any_port_asked_moves_https_off_a_udp_port_held_elsewhere() {
        let mut l = https_only("127.0.0.1:0");
        let first = https_port(&l);
        let _held = std::net::UdpSocket::bind(("127.0.0.1", first)).unwrap();
        l.bind_quic(Some("127.0.0.1:0"), Http3::Required).unwrap();
        let addrs = l.addrs().unwrap();
        assert_ne!(addrs.https.unwrap().port(), first);
        assert_eq!(addrs.http3, addrs.https);
    }

    /// A port asked for by number whose UDP side another process holds:
    /// HTTPS keeps it and serves alone by default; `--http3` refuses.
    #[test]
    fn a_fixed_port_whose_udp_side_is_held_serves_tcp_alone_or_refuses() {
        let held = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let asked = held.local_addr().unwrap().to_string();
        let mut l = https_only(&asked);
        l.bind_quic(Some(&asked), Http3::WhereFree).unwrap();
        assert!(l.quic.is_none());
        assert_eq!(l.addrs().unwrap().https.unwrap().to_string(), asked);
        drop(l);

        let mut l = https_only(&asked);
        let err = l.bind_quic(Some(&asked), Http3::Required).unwrap_err();
        assert!(
            matches!(&err, Error::Bind { what, .. } if what.contains("http3")),
            "{err}"
        );
    }

    #[test]
    fn required_http3_needs_the_https_listener() {
        let mut l = Listeners::bind(Some("127.0.0.1:0"), None, "127.0.0.1:0").unwrap();
        assert!(l.bind_quic(None, Http3::Required).is_err());
        l.bind_quic(None, Http3::WhereFree).unwrap();
        assert!(l.quic.is_none());
    }
}
