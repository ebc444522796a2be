//! Noisy and hostile neighbours: what one tenant's churn and
//! hostile setup costs another tenant, on the real `teapot proxy`.
//!
//! `run`: two tenants in manifests mode. The *quiet* tenant's Ingress
//! change propagation (p99), its first certificate (ACME, Debian's
//! `pebble`) and its custom-domain proof (a TXT record) are timed twice:
//! with the *noisy* tenant idle (its 1,000 EndpointSlices loaded, nothing
//! else), then active: the slices rewritten continuously, ACME hosts that
//! a CA double answers `rateLimited` for, and custom domains in a zone
//! whose DNS server never answers. The ratios active/idle are the result
//! (goal: within 2x).
//!
//! `memory`: RSS of the proxy per 100k endpoints and per 10k Ingresses, and
//! the time a reload triggered by one tenant's change takes with N other
//! tenants present.
//!
//! Doubles, all on 127.0.0.1: `pebble` + `pebble-challtestsrv` (testkit);
//! in front of pebble a CA double that forwards everything except a new
//! order for the noisy tenant's hosts, which gets `rateLimited` and
//! `Retry-After`; in front of challtestsrv a DNS forwarder that drops every
//! query for the noisy zone.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use clap::{Parser, Subcommand};
use serde_json::{Value, json};
use teapot_benches::manifests_proxy::{self, Manifests, ManifestsProxy as Proxy, metric, tenant};
use teapot_testkit::certs::TestCa;
use teapot_testkit::client::{Request, Transport, send};
use teapot_testkit::pebble::{ChallTestSrv, Pebble, PebbleOptions, free_port};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream, UdpSocket};

#[derive(Parser)]
#[command(about = "noisy-neighbour benchmark: one tenant's churn against the others")]
struct Cli {
    /// The release `teapot` binary.
    #[arg(long, default_value = "target/release/teapot", global = true)]
    teapot: PathBuf,
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// The two-tenant run: quiet tenant's times with the noisy one idle, then active.
    Run {
        /// Runs of each scenario.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Ingress changes of the quiet tenant timed per run.
        #[arg(long, default_value_t = 20)]
        changes: usize,
        /// The noisy tenant's EndpointSlices.
        #[arg(long, default_value_t = 1000)]
        slices: usize,
        /// Endpoints in each noisy slice (50: the 1,000 slices are about 3 MB of
        /// JSON, within the default 4 MiB quota).
        #[arg(long, default_value_t = 50)]
        endpoints_per_slice: usize,
        /// Milliseconds between two rewrites of a tenth of the noisy slices.
        #[arg(long, default_value_t = 250)]
        churn_ms: u64,
        /// The noisy tenant's hosts (ACME, rate-limited) and custom domains (silent DNS).
        #[arg(long, default_value_t = 20)]
        hostile_hosts: usize,
    },
    /// RSS per endpoint and per Ingress, and one tenant's reload with N others.
    Memory {
        #[arg(long, default_value_t = 100_000)]
        endpoints: usize,
        #[arg(long, default_value_t = 10_000)]
        ingresses: usize,
        /// Tenants beside the one that changes, for the reload timing.
        #[arg(long, default_value_t = 100)]
        tenants: usize,
        #[arg(long, default_value_t = 3)]
        reloads: usize,
    },
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let teapot = std::fs::canonicalize(&cli.teapot).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p teapot)",
            cli.teapot.display()
        )
    })?;
    match cli.command {
        Cmd::Run {
            rounds,
            changes,
            slices,
            endpoints_per_slice,
            churn_ms,
            hostile_hosts,
        } => {
            let setup = Setup {
                teapot,
                changes,
                slices,
                endpoints_per_slice: endpoints_per_slice.clamp(1, 250),
                churn: Duration::from_millis(churn_ms),
                hostile_hosts,
            };
            run(&setup, rounds).await
        }
        Cmd::Memory {
            endpoints,
            ingresses,
            tenants,
            reloads,
        } => memory(&teapot, endpoints, ingresses, tenants, reloads).await,
    }
}

// ---------------------------------------------------------------------------
// The proxy process

const DOMAIN: &str = "example.net";

/// NOISY_LOG=1 shows the proxy's log.
async fn start_proxy(
    teapot: &Path,
    manifests: &Path,
    args: &[String],
    env: &[(&str, &str)],
) -> Result<Proxy> {
    let echo_log = std::env::var_os("NOISY_LOG").is_some();
    Proxy::start(teapot, manifests, DOMAIN, args, env, echo_log).await
}

fn new_manifests() -> Result<Manifests> {
    Manifests::new("teapot-noisy-")
}

// ---------------------------------------------------------------------------
// Objects

fn service(namespace: &str, name: &str) -> Value {
    manifests_proxy::service(namespace, name, None)
}

fn slice(namespace: &str, service: &str, name: &str, addresses: &[String]) -> Value {
    manifests_proxy::endpoint_slice(namespace, service, name, 30080, addresses, true)
}

fn backend(service: &str) -> Value {
    json!({"service": {"name": service, "port": {"name": "http"}}})
}

fn ingress(namespace: &str, name: &str, rules: Vec<Value>, tls: Vec<&str>) -> Value {
    let mut spec = json!({"ingressClassName": "teapot", "rules": rules});
    let mut metadata = json!({"name": name, "namespace": namespace});
    if !tls.is_empty() {
        spec["tls"] = json!([{"hosts": tls}]);
        // Plain HTTP is measured forwarding, not redirecting to HTTPS.
        metadata["annotations"] = json!({"nginx.ingress.kubernetes.io/ssl-redirect": "false"});
    }
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": metadata,
        "spec": spec,
    })
}

fn rule(host: Option<&str>, paths: &[String], service: &str) -> Value {
    let paths: Vec<Value> = paths
        .iter()
        .map(|p| json!({"path": p, "pathType": "Prefix", "backend": backend(service)}))
        .collect();
    let mut rule = json!({"http": {"paths": paths}});
    if let Some(h) = host {
        rule["host"] = json!(h);
    }
    rule
}

// ---------------------------------------------------------------------------
// The two-tenant run

const QUIET_NS: &str = "tenant-quiet";
const NOISY_NS: &str = "tenant-noisy";
/// The quiet tenant's assigned hostname for Ingress `web.shop`.
const QUIET_HOST: &str = "web-shop.quiet.lb.example.net";
const QUIET_CUSTOM: &str = "www.quiet-custom.test";
/// The zone whose DNS never answers.
const SILENT_ZONE: &str = "noisy-custom.test";
/// The noisy tenant's hosts the CA double refuses.
const LIMITED_SUFFIX: &str = ".noisy.lb.example.net";

struct Setup {
    teapot: PathBuf,
    changes: usize,
    slices: usize,
    endpoints_per_slice: usize,
    churn: Duration,
    hostile_hosts: usize,
}

#[derive(Clone, Debug, Default)]
struct Times {
    first_certificate: Duration,
    custom_domain_proof: Duration,
    propagation: Vec<Duration>,
}

async fn run(setup: &Setup, rounds: usize) -> Result<()> {
    let dns = ChallTestSrv::start("127.0.0.1")
        .await
        .map_err(|e| anyhow!("pebble-challtestsrv: {e}"))?;
    dns.set_txt(&format!("_teapot.{QUIET_CUSTOM}"), "teapot-tenant=quiet")
        .await
        .map_err(|e| anyhow!("TXT: {e}"))?;
    let silent = SilentDns::start(dns.dns, SILENT_ZONE).await?;
    let http_port = free_port();
    let pebble = Pebble::start(PebbleOptions {
        http_port,
        dns: dns.dns,
        validity: Duration::from_secs(3600),
    })
    .await
    .map_err(|e| anyhow!("pebble: {e}"))?;
    let issued_root = pebble
        .issued_root()
        .await
        .map_err(|e| anyhow!("pebble root: {e}"))?;
    let front = CaDouble::start(pebble.listen, pebble.api_root_pem(), LIMITED_SUFFIX).await?;

    let mut results: BTreeMap<&str, Vec<Times>> = BTreeMap::new();
    for round in 0..rounds {
        for active in [false, true] {
            let name = if active { "active" } else { "idle" };
            let times =
                scenario(setup, active, http_port, silent.addr, &front, &issued_root).await?;
            println!(
                "{}",
                json!({
                    "round": round, "noisy": name,
                    "first_certificate_s": times.first_certificate.as_secs_f64(),
                    "custom_domain_proof_s": times.custom_domain_proof.as_secs_f64(),
                    "propagation_p50_ms": percentile(&times.propagation, 0.50).as_secs_f64() * 1e3,
                    "propagation_p99_ms": percentile(&times.propagation, 0.99).as_secs_f64() * 1e3,
                    "rate_limited_orders": front.limited.load(Ordering::Relaxed),
                    "silent_queries": silent.dropped.load(Ordering::Relaxed),
                })
            );
            results.entry(name).or_default().push(times);
        }
    }
    let summary = |name: &str| {
        let runs = &results[name];
        let all: Vec<Duration> = runs.iter().flat_map(|t| t.propagation.clone()).collect();
        let median = |f: &dyn Fn(&Times) -> Duration| {
            let mut v: Vec<Duration> = runs.iter().map(f).collect();
            v.sort();
            v[v.len() / 2]
        };
        (
            percentile(&all, 0.99),
            median(&|t| t.first_certificate),
            median(&|t| t.custom_domain_proof),
        )
    };
    let (idle, active) = (summary("idle"), summary("active"));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(1e-9);
    println!("\n| quiet tenant | noisy idle | noisy active | ratio |\n|---|---|---|---|");
    for (what, i, a) in [
        ("Ingress propagation p99", idle.0, active.0),
        ("first certificate (median)", idle.1, active.1),
        ("custom-domain proof (median)", idle.2, active.2),
    ] {
        println!(
            "| {what} | {:.3} s | {:.3} s | {:.2}x |",
            i.as_secs_f64(),
            a.as_secs_f64(),
            ratio(a, i)
        );
    }
    println!(
        "\nnoisy: {} EndpointSlices of {} endpoints, a tenth rewritten every {:?} when active; {} rate-limited orders, {} DNS queries never answered",
        setup.slices,
        setup.endpoints_per_slice,
        setup.churn,
        front.limited.load(Ordering::Relaxed),
        silent.dropped.load(Ordering::Relaxed)
    );
    Ok(())
}

/// How long one wait may take (`NOISY_TIMEOUT_S`, default 300).
fn timeout() -> Duration {
    let s = std::env::var("NOISY_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse().ok());
    Duration::from_secs(s.unwrap_or(300))
}

fn percentile(v: &[Duration], p: f64) -> Duration {
    if v.is_empty() {
        return Duration::ZERO;
    }
    let mut v = v.to_vec();
    v.sort();
    v[((v.len() as f64 * p).ceil() as usize).clamp(1, v.len()) - 1]
}

/// The noisy tenant's slices in ten files, `version` moving every address.
fn noisy_files(slices: usize, per_slice: usize, version: usize) -> Vec<(String, Vec<Value>)> {
    let per_file = slices.div_ceil(10);
    (0..10)
        .map(|f| {
            let docs = (f * per_file..((f + 1) * per_file).min(slices))
                .map(|s| {
                    let addresses: Vec<String> = (0..per_slice)
                        .map(|e| format!("10.200.{}.{}", s % 250, (version + e) % 250 + 1))
                        .collect();
                    slice(
                        NOISY_NS,
                        &format!("svc-{}", s / 10),
                        &format!("svc-{s}"),
                        &addresses,
                    )
                })
                .collect();
            (format!("noisy-slices-{f}.yaml"), docs)
        })
        .collect()
}

fn noisy_base(slices: usize, hostile: bool, hosts: usize) -> Vec<Value> {
    let mut docs = vec![tenant("noisy", "10.200.0.0/16")];
    for s in 0..slices.div_ceil(10) {
        docs.push(service(NOISY_NS, &format!("svc-{s}")));
    }
    if hostile {
        let mut rules = Vec::new();
        let mut tls = Vec::new();
        let names: Vec<String> = (0..hosts)
            .flat_map(|i| {
                [
                    format!("h{i}{LIMITED_SUFFIX}"),
                    format!("h{i}.{SILENT_ZONE}"),
                ]
            })
            .collect();
        for name in &names {
            rules.push(rule(Some(name), &["/".to_string()], "svc-0"));
            if name.ends_with(LIMITED_SUFFIX) {
                tls.push(name.as_str());
            }
        }
        docs.push(ingress(NOISY_NS, "hostile", rules, tls));
    }
    docs
}

fn quiet_docs(paths: &[String]) -> Vec<Value> {
    // Its one endpoint is not ready: a routed path answers 503 at once
    // (no backend to wait for), an unknown one 404.
    let mut endpoints = slice(QUIET_NS, "web", "web-1", &["10.9.0.1".to_string()]);
    endpoints["endpoints"][0]["conditions"]["ready"] = json!(false);
    vec![
        tenant("quiet", "10.9.0.0/16"),
        service(QUIET_NS, "web"),
        endpoints,
        ingress(
            QUIET_NS,
            "web.shop",
            vec![
                rule(None, paths, "web"),
                rule(Some(QUIET_CUSTOM), &["/".to_string()], "web"),
            ],
            vec![QUIET_HOST],
        ),
    ]
}

async fn scenario(
    setup: &Setup,
    active: bool,
    http_port: u16,
    dns: SocketAddr,
    front: &CaDouble,
    issued_root: &str,
) -> Result<Times> {
    let manifests = new_manifests()?;
    manifests.write(
        "noisy.yaml",
        &noisy_base(setup.slices, active, setup.hostile_hosts),
    )?;
    for (name, docs) in noisy_files(setup.slices, setup.endpoints_per_slice, 0) {
        manifests.write(&name, &docs)?;
    }
    let state = tempfile::tempdir()?;
    let args: Vec<String> = [
        "--http",
        &format!("127.0.0.1:{http_port}"),
        "--dns-server",
        &dns.to_string(),
        "--proof-recheck-pending",
        "1",
        "--acme-default-tenants",
        "--acme-directory",
        &front.directory(),
        "--acme-root",
        front.root_file.to_str().context("root path")?,
        "--acme-email",
        "ops@example.com",
        "--acme-retry-min",
        "0.5",
        "--acme-retry-max",
        "2",
        "--acme-order-timeout",
        "30",
        "--acme-state-dir",
        state.path().to_str().context("state path")?,
    ]
    .map(String::from)
    .to_vec();
    let proxy = start_proxy(&setup.teapot, &manifests.dir, &args, &[]).await?;
    proxy.wait_generation(0).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let churn = active.then(|| {
        let (stop, slices, every) = (stop.clone(), setup.slices, setup.churn);
        let per_slice = setup.endpoints_per_slice;
        let stage = manifests.stage.clone();
        let dir = manifests.dir.clone();
        tokio::spawn(async move {
            let mut version = 1;
            while !stop.load(Ordering::Relaxed) {
                let files = noisy_files(slices, per_slice, version);
                let (name, docs) = &files[version % files.len()];
                let text: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
                let _ = std::fs::write(stage.join(name), text.join("\n---\n"));
                let _ = std::fs::rename(stage.join(name), dir.join(name));
                version += 1;
                tokio::time::sleep(every).await;
            }
        })
    });
    // The same head start in both runs: the hostile setup gets going (and
    // the issuer has taken its role) before the quiet tenant arrives.
    tokio::time::sleep(Duration::from_secs(3)).await;

    // The quiet tenant arrives: its certificate and its proof start now.
    // Not `/`: its prefix would cover every change's path before it exists.
    let mut paths = vec!["/base".to_string()];
    let arrived = Instant::now();
    manifests.write("quiet.yaml", &quiet_docs(&paths))?;
    let (cert, proof) = tokio::join!(
        first_certificate(&proxy, issued_root, arrived),
        custom_proof(&proxy, arrived)
    );
    let (first_certificate, custom_domain_proof) = (cert?, proof?);

    let mut propagation = Vec::with_capacity(setup.changes);
    for i in 0..setup.changes {
        let path = format!("/change-{i}");
        paths.push(path.clone());
        let written = Instant::now();
        manifests.write("quiet.yaml", &quiet_docs(&paths))?;
        loop {
            let req = Request::get(QUIET_HOST, &path);
            if let Ok(resp) = send(proxy.http, &Transport::Plain, &req).await
                && resp.status != 404
            {
                break;
            }
            if written.elapsed() > Duration::from_secs(120) {
                bail!("change {i} not served in 120 s");
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        propagation.push(written.elapsed());
        // Changes arrive apart, as a user's would.
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    stop.store(true, Ordering::Relaxed);
    if let Some(c) = churn {
        let _ = c.await;
    }
    // The next run binds the same HTTP port (pebble dials it).
    let mut proxy = proxy;
    proxy.stop().await;
    Ok(Times {
        first_certificate,
        custom_domain_proof,
        propagation,
    })
}

/// Until the HTTPS listener shows the quiet host a certificate pebble issued.
async fn first_certificate(proxy: &Proxy, issued_root: &str, since: Instant) -> Result<Duration> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let roots: Vec<Vec<u8>> = CertificateDer::pem_slice_iter(issued_root.as_bytes())
        .filter_map(|c| c.ok())
        .map(|c| c.to_vec())
        .collect();
    let root_refs: Vec<&[u8]> = roots.iter().map(|r| r.as_slice()).collect();
    let transport = Transport::tls_verified(QUIET_HOST, &root_refs);
    loop {
        if send(proxy.https, &transport, &Request::get(QUIET_HOST, "/"))
            .await
            .is_ok()
        {
            return Ok(since.elapsed());
        }
        if since.elapsed() > timeout() {
            bail!("no certificate for {QUIET_HOST} in time");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Until `/status` shows the quiet tenant's custom domain routed.
async fn custom_proof(proxy: &Proxy, since: Instant) -> Result<Duration> {
    loop {
        if let Ok(text) = proxy.admin("/status").await
            && let Ok(status) = serde_json::from_str::<Value>(&text)
        {
            let routed = status["domains"].as_array().is_some_and(|d| {
                d.iter()
                    .any(|d| d["host"] == QUIET_CUSTOM && d["routed"] == true)
            });
            if routed {
                return Ok(since.elapsed());
            }
        }
        if since.elapsed() > timeout() {
            let domains = match proxy.admin("/status").await {
                Ok(text) => serde_json::from_str::<Value>(&text).map(|s| s["domains"].to_string()),
                Err(e) => Ok(e.to_string()),
            };
            bail!("{QUIET_CUSTOM} not proven in time: {domains:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ---------------------------------------------------------------------------
// DNS that never answers for one zone

struct SilentDns {
    addr: SocketAddr,
    dropped: Arc<AtomicU64>,
}

impl SilentDns {
    async fn start(upstream: SocketAddr, zone: &'static str) -> Result<SilentDns> {
        let socket = Arc::new(UdpSocket::bind("127.0.0.1:0").await?);
        let addr = socket.local_addr()?;
        let dropped = Arc::new(AtomicU64::default());
        let counter = dropped.clone();
        tokio::spawn(async move {
            let mut buf = vec![0u8; 4096];
            loop {
                let Ok((n, from)) = socket.recv_from(&mut buf).await else {
                    return;
                };
                let query = buf[..n].to_vec();
                if qname(&query).is_some_and(|q| q == zone || q.ends_with(&format!(".{zone}"))) {
                    counter.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let socket = socket.clone();
                tokio::spawn(async move {
                    let Ok(up) = UdpSocket::bind("127.0.0.1:0").await else {
                        return;
                    };
                    if up.send_to(&query, upstream).await.is_err() {
                        return;
                    }
                    let mut answer = vec![0u8; 4096];
                    if let Ok(Ok(n)) =
                        tokio::time::timeout(Duration::from_secs(5), up.recv(&mut answer)).await
                    {
                        let _ = socket.send_to(&answer[..n], from).await;
                    }
                });
            }
        });
        Ok(SilentDns { addr, dropped })
    }
}

/// The question's name, lowercase, without the trailing dot.
fn qname(message: &[u8]) -> Option<String> {
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = *message.get(at)? as usize;
        if len == 0 {
            break;
        }
        if len & 0xc0 != 0 {
            return None;
        }
        let label = message.get(at + 1..at + 1 + len)?;
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += 1 + len;
    }
    Some(labels.join("."))
}

// ---------------------------------------------------------------------------
// A CA that rate-limits one tenant's names

/// HTTPS in front of pebble: every request is forwarded (pebble's own
/// origin, should it appear, rewritten to this one), except a new order
/// naming a host under `limited`, which gets `rateLimited`.
struct CaDouble {
    addr: SocketAddr,
    root_file: PathBuf,
    limited: Arc<AtomicU64>,
    _dir: tempfile::TempDir,
}

impl CaDouble {
    async fn start(
        pebble: SocketAddr,
        pebble_root_pem: &str,
        limited: &'static str,
    ) -> Result<CaDouble> {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
        let ca = TestCa::new("teapot bench: CA double");
        let leaf = ca.issue(&["127.0.0.1", "localhost"]);
        let dir = tempfile::tempdir()?;
        let root_file = dir.path().join("ca-double-root.pem");
        std::fs::write(&root_file, ca.cert_pem())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let server = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(leaf.cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf.key_der.clone())),
            )?;
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(pebble_root_pem.as_bytes()) {
            roots.add(c?)?;
        }
        let client = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server));
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let count = Arc::new(AtomicU64::default());
        let limited_count = count.clone();
        tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    return;
                };
                let (acceptor, connector, count) =
                    (acceptor.clone(), connector.clone(), limited_count.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let _ = serve_front(tls, pebble, addr, connector, limited, count).await;
                });
            }
        });
        Ok(CaDouble {
            addr,
            root_file,
            limited: count,
            _dir: dir,
        })
    }

    fn directory(&self) -> String {
        format!("https://{}/dir", self.addr)
    }
}

/// One HTTP/1.1 message: head lines and body.
struct Message {
    start: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Message {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn to_bytes(&self) -> Vec<u8> {
        let mut out = format!("{}\r\n", self.start);
        for (n, v) in &self.headers {
            if n.eq_ignore_ascii_case("content-length")
                || n.eq_ignore_ascii_case("transfer-encoding")
            {
                continue;
            }
            out.push_str(&format!("{n}: {v}\r\n"));
        }
        out.push_str(&format!("content-length: {}\r\n\r\n", self.body.len()));
        let mut bytes = out.into_bytes();
        bytes.extend_from_slice(&self.body);
        bytes
    }
}

/// Reads one message (Content-Length or chunked body); `None` at a clean end.
async fn read_message<R: tokio::io::AsyncBufRead + Unpin>(r: &mut R) -> Result<Option<Message>> {
    let mut start = String::new();
    if r.read_line(&mut start).await? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        r.read_line(&mut line).await?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((n, v)) = line.split_once(':') {
            headers.push((n.trim().to_string(), v.trim().to_string()));
        }
    }
    let mut m = Message {
        start: start.trim_end().to_string(),
        headers,
        body: Vec::new(),
    };
    if m.header("transfer-encoding")
        .is_some_and(|t| t.contains("chunked"))
    {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).await?;
            let n = usize::from_str_radix(size.trim().split(';').next().unwrap_or("0"), 16)?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).await?;
            if n == 0 {
                break;
            }
            m.body.extend_from_slice(&chunk[..n]);
        }
    } else if let Some(len) = m
        .header("content-length")
        .and_then(|l| l.parse::<usize>().ok())
    {
        m.body = vec![0; len];
        r.read_exact(&mut m.body).await?;
    }
    Ok(Some(m))
}

async fn serve_front(
    tls: tokio_rustls::server::TlsStream<TcpStream>,
    pebble: SocketAddr,
    me: SocketAddr,
    connector: tokio_rustls::TlsConnector,
    limited: &str,
    count: Arc<AtomicU64>,
) -> Result<()> {
    let (read, mut write) = tokio::io::split(tls);
    let mut read = BufReader::new(read);
    let (pebble_origin, my_origin) = (format!("https://{pebble}"), format!("https://{me}"));
    while let Some(mut request) = read_message(&mut read).await? {
        if let Some(host) = ordered_host(&request.body)
            && host.ends_with(limited)
        {
            count.fetch_add(1, Ordering::Relaxed);
            let nonce = fresh_nonce(pebble, &connector).await.unwrap_or_default();
            let body = json!({
                "type": "urn:ietf:params:acme:error:rateLimited",
                "detail": format!("too many certificates already issued for {host}"),
                "status": 429,
            })
            .to_string();
            let reply = Message {
                start: "HTTP/1.1 429 Too Many Requests".into(),
                headers: vec![
                    ("content-type".into(), "application/problem+json".into()),
                    ("retry-after".into(), "60".into()),
                    ("replay-nonce".into(), nonce),
                ],
                body: body.into_bytes(),
            };
            write.write_all(&reply.to_bytes()).await?;
            continue;
        }
        // `Host` stays this front's: pebble builds its URLs, and checks
        // each JWS's `url`, from it.
        request
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("connection"));
        request.headers.push(("connection".into(), "close".into()));
        let mut reply = forward(pebble, &connector, &request).await?;
        for (_, v) in reply.headers.iter_mut() {
            *v = v.replace(&pebble_origin, &my_origin);
        }
        reply
            .headers
            .retain(|(n, _)| !n.eq_ignore_ascii_case("connection"));
        if let Ok(text) = String::from_utf8(reply.body.clone()) {
            reply.body = text.replace(&pebble_origin, &my_origin).into_bytes();
        }
        write.write_all(&reply.to_bytes()).await?;
    }
    Ok(())
}

async fn forward(
    pebble: SocketAddr,
    connector: &tokio_rustls::TlsConnector,
    request: &Message,
) -> Result<Message> {
    let tcp = TcpStream::connect(pebble).await?;
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1")?;
    let mut tls = connector.connect(name.to_owned(), tcp).await?;
    tls.write_all(&request.to_bytes()).await?;
    let mut read = BufReader::new(tls);
    read_message(&mut read)
        .await?
        .ok_or_else(|| anyhow!("pebble closed without an answer"))
}

async fn fresh_nonce(pebble: SocketAddr, connector: &tokio_rustls::TlsConnector) -> Result<String> {
    let request = Message {
        start: "HEAD /nonce-plz HTTP/1.1".into(),
        headers: vec![
            ("host".into(), pebble.to_string()),
            ("connection".into(), "close".into()),
        ],
        body: Vec::new(),
    };
    let reply = forward(pebble, connector, &request).await?;
    reply
        .header("replay-nonce")
        .map(String::from)
        .ok_or_else(|| anyhow!("no nonce"))
}

/// The first identifier of a new-order request (a JWS whose payload has
/// `identifiers`), if this is one.
fn ordered_host(body: &[u8]) -> Option<String> {
    use base64::Engine;
    let jws: Value = serde_json::from_slice(body).ok()?;
    let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(jws["payload"].as_str()?)
        .ok()?;
    let payload: Value = serde_json::from_slice(&payload).ok()?;
    payload["identifiers"][0]["value"]
        .as_str()
        .map(String::from)
}

// ---------------------------------------------------------------------------
// Memory and one tenant's reload

async fn memory(
    teapot: &Path,
    endpoints: usize,
    ingresses: usize,
    tenants: usize,
    reloads: usize,
) -> Result<()> {
    // As shipped (freed memory kept 10 s) and with freed memory returned at
    // once, which shows what the proxy keeps.
    for purge in ["10000", "0"] {
        let env = [("MIMALLOC_PURGE_DELAY", purge)];
        let m = new_manifests()?;
        m.write("empty.yaml", &[service("default", "none")])?;
        let proxy = start_proxy(teapot, &m.dir, &[], &env).await?;
        let (mut g, _) = proxy.wait_generation(0).await?;
        let settle = Duration::from_millis(if purge == "0" { 1500 } else { 12_000 });
        tokio::time::sleep(settle).await;
        let empty = proxy.rss();

        // Endpoints: one operator Service, slices of 1,000 with nodeName and
        // targetRef, as the agent's pod mode writes them.
        let mut docs = vec![service("bulk", "big")];
        for s in 0..endpoints.div_ceil(1000) {
            let eps: Vec<Value> = (0..1000.min(endpoints - s * 1000))
                .map(|e| json!({
                    "addresses": [format!("10.{}.{}.{}", 100 + s / 64, (s % 64) * 4 + e / 250, e % 250 + 1)],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": format!("ip-10-{s}-{e}.eu-west-1.compute.internal"),
                    "zone": "eu-west-1a",
                    "targetRef": {"kind": "Pod", "namespace": "bulk", "name": format!("big-{s}-{e}")},
                }))
                .collect();
            let mut sl = slice("bulk", "big", &format!("big-{s}"), &[]);
            sl["endpoints"] = json!(eps);
            sl["metadata"]["labels"] = json!({"kubernetes.io/service-name": "big"});
            docs.push(sl);
        }
        m.write("endpoints.yaml", &docs)?;
        let endpoints_json = std::fs::metadata(m.dir.join("endpoints.yaml"))?.len();
        (g, _) = proxy.wait_generation(g).await?;
        tokio::time::sleep(settle).await;
        let with_endpoints = proxy.rss();

        // Ingresses: one host and path each, in the operator's namespace.
        let docs: Vec<Value> = (0..ingresses)
            .map(|i| {
                ingress(
                    "bulk",
                    &format!("app-{i}"),
                    vec![rule(
                        Some(&format!("app-{i}.example.com")),
                        &["/".to_string()],
                        "big",
                    )],
                    vec![],
                )
            })
            .collect();
        m.write("ingresses.yaml", &docs)?;
        let ingresses_json = std::fs::metadata(m.dir.join("ingresses.yaml"))?.len();
        (g, _) = proxy.wait_generation(g).await?;
        tokio::time::sleep(settle).await;
        let with_ingresses = proxy.rss();

        for i in 0..reloads {
            m.write("empty.yaml", &[service("default", &format!("none-{i}"))])?;
            (g, _) = proxy.wait_generation(g).await?;
        }
        tokio::time::sleep(settle).await;
        let reloaded = proxy.rss();
        let mb = |b: u64| b as f64 / 1e6;
        println!(
            "{}",
            json!({
                "mimalloc_purge_delay_ms": purge,
                "rss_empty_mb": mb(empty),
                "endpoints_json_mb": mb(endpoints_json),
                "ingresses_json_mb": mb(ingresses_json),
                "rss_with_endpoints_mb": mb(with_endpoints),
                "rss_per_100k_endpoints_mb": mb(with_endpoints.saturating_sub(empty)) * 100_000.0 / endpoints.max(1) as f64,
                "rss_with_ingresses_mb": mb(with_ingresses),
                "rss_per_10k_ingresses_mb": mb(with_ingresses.saturating_sub(with_endpoints)) * 10_000.0 / ingresses.max(1) as f64,
                "rss_after_reloads_mb": mb(reloaded),
                "reloads": reloads,
            })
        );
    }

    // One tenant's change with `tenants` others present, each with 100
    // endpoints and 10 Ingresses: time from the write to the new generation.
    let m = new_manifests()?;
    for t in 0..=tenants {
        m.write(&format!("t{t}.yaml"), &reload_tenant(t, 0))?;
    }
    let proxy = start_proxy(teapot, &m.dir, &[], &[]).await?;
    let (mut g, _) = proxy.wait_generation(0).await?;
    let mut times = Vec::new();
    for v in 1..=10 {
        tokio::time::sleep(Duration::from_millis(300)).await;
        m.write("t0.yaml", &reload_tenant(0, v))?;
        let (next, took) = proxy.wait_generation(g).await?;
        g = next;
        times.push(took);
    }
    let text = proxy.admin("/metrics").await?;
    let compiles = metric(&text, "teapot_snapshot_compile_seconds_count");
    let compile_sum = metric(&text, "teapot_snapshot_compile_seconds_sum");
    println!(
        "{}",
        json!({
            "other_tenants": tenants,
            "one_tenant_change_to_swap_ms_p50": percentile(&times, 0.5).as_secs_f64() * 1e3,
            "one_tenant_change_to_swap_ms_max": percentile(&times, 1.0).as_secs_f64() * 1e3,
            "mean_compile_ms": compile_sum / compiles.max(1.0) * 1e3,
            "note": "change-to-swap includes the watcher's 100 ms quiet period",
        })
    );
    Ok(())
}

fn reload_tenant(t: usize, version: usize) -> Vec<Value> {
    let ns = format!("tenant-t{t}");
    let mut docs = vec![tenant(
        &format!("t{t}"),
        &format!("10.{}.{}.0/24", t / 250, t % 250),
    )];
    for s in 0..10 {
        docs.push(service(&ns, &format!("svc-{s}")));
        let addresses: Vec<String> = (0..10)
            .map(|e| {
                format!(
                    "10.{}.{}.{}",
                    t / 250,
                    t % 250,
                    (s * 10 + e + version) % 250 + 1
                )
            })
            .collect();
        docs.push(slice(
            &ns,
            &format!("svc-{s}"),
            &format!("svc-{s}-1"),
            &addresses,
        ));
        docs.push(ingress(
            &ns,
            &format!("app-{s}"),
            vec![rule(None, &["/".to_string()], &format!("svc-{s}"))],
            vec![],
        ));
    }
    docs
}
