//! HTTP side by side: direct, teapot, nginx and HAProxy in one run.
//!
//! Starts two backends (nginx serving a small static file, teapot's echo
//! backend), then teapot, nginx and HAProxy as reverse proxies in front of
//! both (same worker/thread count, access logs off, upstream keep-alive
//! on, TLS 1.3 with one ECDSA P-256 certificate), and measures in
//! interleaved rounds (the target order rotates every round):
//!
//! - `h1-static`, `h1-echo`: HTTP/1.1 keep-alive req/s and latency
//!   percentiles (wrk) to each backend;
//! - `fixed-rate`: latency percentiles at a fixed request rate, from an
//!   open-loop generator here (latency counts from the scheduled send
//!   time, so a stall is not hidden by the generator waiting: wrk2's
//!   correction; wrk2 is not packaged in Debian);
//! - `h2`: HTTP/2 over TLS req/s (h2load);
//! - `tls-handshakes`: new TLS 1.3 connections per second, one request
//!   each with `Connection: close` (h2load; no session resumption);
//! - `churn`: the fixed-rate run while the routing config changes
//!   `--churn` times per second (teapot: an Ingress file rewritten in its
//!   manifests directory; nginx, HAProxy: config rewritten and reloaded).
//! - `idle-h1`, `idle-tls`, `idle-h2`: KiB of the proxy's RSS per idle
//!   connection (`--idle-connections` of them, one request each: HTTP/1.1,
//!   HTTP/1.1 over TLS, HTTP/2 over TLS with no stream left open).
//!
//! Then the proxy's RSS with 10k and 100k synthetic Ingresses. Prints a
//! table of medians and ratios and writes JSON and an SVG chart under
//! `benches/results/`. See benches/http.md.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde::Serialize;
use teapot_benches::idle::idle_memory;
use teapot_benches::peers::{self, Peer, PeerKind};
use teapot_benches::stats::{median, percentile};
use teapot_testkit::certs;
use teapot_testkit::process::ProxyProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug, Clone)]
#[command(about = "HTTP/1.1, HTTP/2, TLS and config churn: direct, teapot, nginx, HAProxy")]
struct Args {
    /// Short run while developing: 1 round of 2 s, RSS at 10k only.
    #[arg(long)]
    quick: bool,
    /// Interleaved rounds (default 3, --quick 1).
    #[arg(long)]
    rounds: Option<usize>,
    /// Seconds per measurement (default 5, --quick 2).
    #[arg(long)]
    seconds: Option<f64>,
    /// Worker processes/threads of every proxy and of the nginx backend.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Keep-alive connections of the wrk runs.
    #[arg(long, default_value_t = 50)]
    connections: usize,
    /// Requests per second of the fixed-rate and churn runs.
    #[arg(long, default_value_t = 4000)]
    rate: u64,
    /// Connections of the fixed-rate and churn runs.
    #[arg(long, default_value_t = 16)]
    rate_connections: usize,
    /// HTTP/2 clients (connections) and streams per client.
    #[arg(long, default_value_t = 10)]
    h2_clients: usize,
    #[arg(long, default_value_t = 10)]
    h2_streams: usize,
    /// Concurrent clients of the TLS handshake run.
    #[arg(long, default_value_t = 16)]
    tls_clients: usize,
    /// Connections of the idle-connection runs (idle-h1, idle-tls, idle-h2), per target.
    #[arg(long, default_value_t = 4000)]
    idle_connections: usize,
    /// Configuration changes per second during the churn run.
    #[arg(long, default_value_t = 20.0)]
    churn: f64,
    /// Ingress counts for the RSS measurement (default 10000,100000; --quick 10000; 0: none).
    #[arg(long, value_delimiter = ',')]
    rss_sizes: Option<Vec<usize>>,
    /// Only these tests (comma-separated names).
    #[arg(long, value_delimiter = ',')]
    only: Option<Vec<String>>,
    /// nginx and HAProxy accept a connection only once its first bytes are
    /// there (nginx `listen ... deferred`, HAProxy `bind ... defer-accept`),
    /// as teapot's HTTP listeners always do; off, the peers run with their
    /// defaults.
    #[arg(long)]
    peers_defer_accept: bool,
    /// Extra argument for `teapot proxy` (repeatable), e.g. `--teapot-arg=--work-stealing`.
    #[arg(long, allow_hyphen_values = true)]
    teapot_arg: Vec<String>,
    /// teapot's access log during the run (off, all, errors), written to a
    /// file in the run's temporary directory: compare a run with `all` to
    /// one with `off` for the access log's CPU per request.
    #[arg(long, default_value = "off", value_parser = ["off", "all", "errors"])]
    access_log: String,
    /// Only these targets (comma-separated: direct, teapot, nginx, haproxy).
    #[arg(long, value_delimiter = ',')]
    targets: Option<Vec<String>>,
    /// Fail instead of running apt-get when a tool is missing.
    #[arg(long)]
    no_install: bool,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// Output files (default: benches/results/http-<unix time>.{json,svg}).
    #[arg(long)]
    json: Option<PathBuf>,
    #[arg(long)]
    svg: Option<PathBuf>,
}

impl Args {
    fn rounds(&self) -> usize {
        self.rounds.unwrap_or(if self.quick { 1 } else { 3 })
    }
    fn seconds(&self) -> f64 {
        self.seconds.unwrap_or(if self.quick { 2.0 } else { 5.0 })
    }
    fn rss_sizes(&self) -> Vec<usize> {
        let sizes = self.rss_sizes.clone().unwrap_or(if self.quick {
            vec![10_000]
        } else {
            vec![10_000, 100_000]
        });
        sizes.into_iter().filter(|&n| n > 0).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Target {
    Direct,
    Teapot,
    Nginx,
    Haproxy,
}

const TARGETS: [Target; 4] = [
    Target::Direct,
    Target::Teapot,
    Target::Nginx,
    Target::Haproxy,
];

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Direct => "direct",
            Target::Teapot => "teapot",
            Target::Nginx => "nginx",
            Target::Haproxy => "haproxy",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Test {
    H1Static,
    H1Echo,
    FixedRate,
    H2,
    TlsHandshakes,
    Churn,
    IdleH1,
    IdleTls,
    IdleH2,
    H1Close,
    H1Policy,
}

const TESTS: [Test; 11] = [
    Test::H1Static,
    Test::H1Policy,
    Test::H1Close,
    Test::H1Echo,
    Test::FixedRate,
    Test::H2,
    Test::TlsHandshakes,
    Test::Churn,
    Test::IdleH1,
    Test::IdleTls,
    Test::IdleH2,
];

impl Test {
    fn name(self) -> &'static str {
        match self {
            Test::H1Static => "h1-static",
            Test::H1Echo => "h1-echo",
            Test::FixedRate => "fixed-rate",
            Test::H2 => "h2",
            Test::TlsHandshakes => "tls-handshakes",
            Test::Churn => "churn",
            Test::IdleH1 => "idle-h1",
            Test::IdleTls => "idle-tls",
            Test::IdleH2 => "idle-h2",
            Test::H1Close => "h1-close",
            Test::H1Policy => "h1-policy",
        }
    }

    /// The number the ratios are taken on, and whether higher is better.
    fn headline(self) -> (&'static str, bool) {
        match self {
            Test::H1Static | Test::H1Echo | Test::H1Close | Test::H1Policy | Test::H2 => {
                ("req_per_s", true)
            }
            Test::TlsHandshakes => ("handshakes_per_s", true),
            Test::FixedRate | Test::Churn => ("p99_ms", false),
            Test::IdleH1 | Test::IdleTls | Test::IdleH2 => (KIB_PER_CONNECTION, false),
        }
    }

    /// The metric the rate of this test's work is in (requests or
    /// handshakes per second), for the CPU cost of one; `None` for the
    /// churn, whose run also waits for the last change.
    fn rate_metric(self) -> Option<&'static str> {
        match self {
            Test::H1Static | Test::H1Echo | Test::H1Close | Test::H1Policy | Test::H2 => {
                Some("req_per_s")
            }
            Test::TlsHandshakes => Some("handshakes_per_s"),
            Test::FixedRate => Some("achieved_per_s"),
            Test::Churn | Test::IdleH1 | Test::IdleTls | Test::IdleH2 => None,
        }
    }

    /// The rows of the ratio table: the headline, and the proxy's CPU per
    /// request where there is one (the steadier number on a shared machine).
    fn reported(self) -> Vec<(&'static str, bool)> {
        let mut rows = vec![self.headline()];
        if self.rate_metric().is_some() {
            rows.push((CPU_PER_REQUEST, false));
        }
        rows
    }

    /// Config churn and a proxy's memory have no meaning without a proxy;
    /// the traffic policy is compared with HAProxy's (nginx has no cookie
    /// affinity outside its commercial edition).
    fn applies_to(self, target: Target) -> bool {
        match self {
            Test::H1Policy => matches!(target, Target::Teapot | Target::Haproxy),
            Test::Churn | Test::IdleH1 | Test::IdleTls | Test::IdleH2 => target != Target::Direct,
            _ => true,
        }
    }
}

/// Hosts the proxies route: `bench.example` to the static backend,
/// `echo.example` to the echo backend, `churn.example` is what changes.
const STATIC_HOST: &str = "bench.example";
const ECHO_HOST: &str = "echo.example";
const CHURN_HOST: &str = "churn.example";
/// Routed to the static backend through an allow-list, a per-client rate
/// limit that is never reached and cookie affinity (h1-policy).
const POLICY_HOST: &str = "policy.example";
/// The allow-list: the client (loopback) and the private ranges an
/// operator would list beside it.
const POLICY_ALLOW: &str = "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, 127.0.0.0/8";
/// Requests per second per client address; above what one wrk reaches.
const POLICY_RATE: u32 = 100_000;
const STATIC_PATH: &str = "/hello.txt";
/// A small static body (about the size of a health check or API answer).
const STATIC_BODY: &str = "Hello from the static backend. This body is a few dozen bytes, like a small API answer or a health check.\n";

/// Where each target listens.
#[derive(Clone, Copy, Debug)]
struct Ports {
    /// Plain HTTP for the static host.
    http: u16,
    /// Plain HTTP reaching the echo backend (same as `http` for proxies).
    echo: u16,
    /// TLS (h2 and http/1.1 by ALPN).
    https: u16,
}

struct Fleet {
    dir: tempfile::TempDir,
    ports: BTreeMap<Target, Ports>,
    backend: Peer,
    echo: tokio::process::Child,
    teapot: ProxyProcess,
    nginx: Peer,
    haproxy: Peer,
    backend_ports: (u16, u16),
    cert_der: Vec<u8>,
    tools: Tools,
    threads: usize,
    maxconn: usize,
    /// `--peers-defer-accept`.
    defer_accept: bool,
}

#[derive(Clone, Debug)]
struct Tools {
    nginx: PathBuf,
    haproxy: PathBuf,
    wrk: PathBuf,
    h2load: PathBuf,
    teapot: PathBuf,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // The client, nginx and HAProxy each hold a descriptor per idle
    // connection, teapot one too and one per upstream connection.
    let want = 4 * args.idle_connections as u64 + 4096;
    let limit = teapot_benches::idle::raise_descriptor_limit(want);
    if limit < want {
        eprintln!("descriptor limit {limit}, below the {want} the idle run may need");
    }
    let found = peers::ensure(
        &[peers::NGINX, peers::HAPROXY, peers::WRK, peers::H2LOAD],
        !args.no_install,
    )?;
    let tools = Tools {
        nginx: found[0].clone(),
        haproxy: found[1].clone(),
        wrk: found[2].clone(),
        h2load: found[3].clone(),
        teapot: peers::teapot_bin(args.teapot.as_deref()),
    };
    if !tools.teapot.is_file() {
        bail!(
            "{} not found: cargo build --release -p teapot (or --teapot PATH)",
            tools.teapot.display()
        );
    }
    // Two client threads: the fixed-rate generator must never be the
    // bottleneck of the latency it measures.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("client")
        .build()?;
    rt.block_on(run(args, tools))
}

async fn run(args: Args, tools: Tools) -> anyhow::Result<()> {
    let started = Instant::now();
    let fleet = start_fleet(&args, tools).await?;
    let versions = versions(&fleet.tools);
    for (k, v) in &versions {
        println!("{k}: {v}");
    }
    let tests = chosen(TESTS, &args.only, Test::name);
    let targets = chosen(TARGETS, &args.targets, Target::name);
    let mut samples = Vec::new();
    let mut churn_k = 0u64;
    // Warm every path once (connection pools, page cache, JIT of nothing).
    for &target in &targets {
        let p = fleet.ports[&target];
        fixed_rate(p.http, STATIC_HOST, STATIC_PATH, 500, 4, 0.5, None).await?;
    }
    for round in 0..args.rounds() {
        for &test in &tests {
            // Rotating the order spreads drift in the machine's load over
            // every target alike.
            for i in 0..targets.len() {
                let target = targets[(i + round) % targets.len()];
                if !test.applies_to(target) {
                    continue;
                }
                let cpu_before = proxy_cpu_seconds(&fleet, target);
                let began = Instant::now();
                let mut values = measure(&args, &fleet, test, target, &mut churn_k).await?;
                // The work done over the whole call: its rate times its
                // wall time (fixed-rate's warm-up runs at the same rate;
                // wrk and h2load start in a few ms).
                if let (Some(rate), Some(before), Some(after)) = (
                    test.rate_metric().and_then(|m| values.get(m)),
                    cpu_before,
                    proxy_cpu_seconds(&fleet, target),
                ) {
                    let secs = began.elapsed().as_secs_f64();
                    values.insert(CPU_PER_REQUEST, (after - before) * 1e6 / (rate * secs));
                    values.insert("cpu_cores", (after - before) / secs);
                }
                println!(
                    "round {round} {:<14} {:<8} {}",
                    test.name(),
                    target.name(),
                    values
                        .iter()
                        .map(|(k, v)| format!("{k}={}", fmt_num(*v)))
                        .collect::<Vec<_>>()
                        .join(" ")
                );
                samples.push(Sample {
                    round,
                    test: test.name(),
                    target,
                    values,
                });
            }
        }
    }
    let rss = measure_rss(&args, &fleet).await?;
    let report = Report::new(&args, versions, samples, rss, started.elapsed());
    report.print();
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let json = args
        .json
        .clone()
        .unwrap_or_else(|| results.join(format!("http-{secs}.json")));
    let svg = args
        .svg
        .clone()
        .unwrap_or_else(|| results.join(format!("http-{secs}.svg")));
    for p in [&json, &svg] {
        if let Some(dir) = p.parent() {
            std::fs::create_dir_all(dir)?;
        }
    }
    std::fs::write(&json, serde_json::to_string_pretty(&report)? + "\n")?;
    std::fs::write(&svg, report.svg())?;
    println!("wrote {} and {}", json.display(), svg.display());
    fleet.stop().await;
    Ok(())
}

// ---------------------------------------------------------------- setup

async fn start_fleet(args: &Args, tools: Tools) -> anyhow::Result<Fleet> {
    let dir = tempfile::tempdir()?;
    let cert = certs::self_signed(&[STATIC_HOST, ECHO_HOST, CHURN_HOST]);
    std::fs::write(dir.path().join("cert.pem"), &cert.cert_pem)?;
    std::fs::write(dir.path().join("key.pem"), &cert.key_pem)?;
    // HAProxy wants certificate and key in one file.
    std::fs::write(
        dir.path().join("bundle.pem"),
        format!("{}{}", cert.cert_pem, cert.key_pem),
    )?;
    std::fs::write(dir.path().join("hello.txt"), STATIC_BODY)?;

    // The static backend: nginx, plain and TLS (the TLS listener is the
    // "direct" baseline for h2 and handshakes).
    let backend_dir = subdir(dir.path(), "backend")?;
    let (b_http, b_https) = (peers::free_port()?, peers::free_port()?);
    let backend = Peer::start(
        PeerKind::Nginx,
        &tools.nginx,
        &backend_dir,
        &nginx_backend_conf(dir.path(), &backend_dir, args.threads, b_http, b_https),
    )
    .context("starting the nginx backend")?;

    let e_port = peers::free_port()?;
    let echo = tokio::process::Command::new(&tools.teapot)
        .args(["--threads", &args.threads.to_string(), "echo", "--listen"])
        .arg(format!("127.0.0.1:{e_port}"))
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .context("starting teapot echo")?;

    let manifests = subdir(dir.path(), "manifests")?;
    std::fs::write(
        manifests.join("bench.yaml"),
        teapot_manifests(b_http, e_port, &cert),
    )?;
    std::fs::write(manifests.join("churn.yaml"), churn_ingress(0))?;
    let threads = args.threads.to_string();
    // Every client of the bench is 127.0.0.1: the per-client cap would
    // refuse the idle-connection runs' thousands of connections.
    let mut teapot_args = vec![
        "--threads",
        threads.as_str(),
        "--max-connections-per-client",
        "0",
    ];
    teapot_args.extend(args.teapot_arg.iter().map(String::as_str));
    let access_log = [
        format!("--access-log={}", args.access_log),
        format!(
            "--access-log-file={}",
            dir.path().join("access.log").display()
        ),
    ];
    if args.access_log != "off" {
        teapot_args.extend(access_log.iter().map(String::as_str));
    }
    let teapot = ProxyProcess::start(&tools.teapot, &manifests, &teapot_args)
        .await
        .context("starting teapot proxy")?;

    let (n_http, n_https) = (peers::free_port()?, peers::free_port()?);
    let nginx_dir = subdir(dir.path(), "nginx")?;
    let nginx_conf = PeerConf {
        cert_dir: dir.path().to_path_buf(),
        dir: nginx_dir.clone(),
        threads: args.threads,
        maxconn: haproxy_maxconn(args.idle_connections),
        http: n_http,
        https: n_https,
        static_port: b_http,
        echo_port: e_port,
        defer_accept: args.peers_defer_accept,
    };
    let nginx = Peer::start(
        PeerKind::Nginx,
        &tools.nginx,
        &nginx_dir,
        &nginx_conf.nginx(0),
    )
    .context("starting nginx")?;

    let (h_http, h_https) = (peers::free_port()?, peers::free_port()?);
    let haproxy_dir = subdir(dir.path(), "haproxy")?;
    let haproxy_conf = PeerConf {
        cert_dir: dir.path().to_path_buf(),
        dir: haproxy_dir.clone(),
        threads: args.threads,
        maxconn: haproxy_maxconn(args.idle_connections),
        http: h_http,
        https: h_https,
        static_port: b_http,
        echo_port: e_port,
        defer_accept: args.peers_defer_accept,
    };
    let haproxy = Peer::start(
        PeerKind::Haproxy,
        &tools.haproxy,
        &haproxy_dir,
        &haproxy_conf.haproxy(0),
    )
    .context("starting haproxy")?;

    for port in [b_http, b_https, e_port, n_http, n_https, h_http, h_https] {
        peers::wait_port(port).await?;
    }
    let ports = BTreeMap::from([
        (
            Target::Direct,
            Ports {
                http: b_http,
                echo: e_port,
                https: b_https,
            },
        ),
        (
            Target::Teapot,
            Ports {
                http: teapot.http.port(),
                echo: teapot.http.port(),
                https: teapot.https.port(),
            },
        ),
        (
            Target::Nginx,
            Ports {
                http: n_http,
                echo: n_http,
                https: n_https,
            },
        ),
        (
            Target::Haproxy,
            Ports {
                http: h_http,
                echo: h_http,
                https: h_https,
            },
        ),
    ]);
    // Every target must answer the static and echo hosts before anything
    // is measured: a misrouted 404 measures nothing.
    for (target, p) in &ports {
        for (port, host, path) in [
            (p.http, STATIC_HOST, STATIC_PATH),
            (p.echo, ECHO_HOST, "/"),
            (p.http, CHURN_HOST, "/v0/hello.txt"),
        ] {
            if *target == Target::Direct && host == CHURN_HOST {
                continue;
            }
            let status = get_status(port, host, path).await?;
            if status != 200 {
                bail!(
                    "{} answered {status} for http://{host}{path} on port {port}",
                    target.name()
                );
            }
        }
    }
    Ok(Fleet {
        dir,
        ports,
        backend,
        echo,
        teapot,
        nginx,
        haproxy,
        backend_ports: (b_http, e_port),
        cert_der: cert.cert_der.clone(),
        tools,
        threads: args.threads,
        maxconn: haproxy_maxconn(args.idle_connections),
        defer_accept: args.peers_defer_accept,
    })
}

impl Fleet {
    /// The configuration of peer `target`, kept in `sub` of the fleet's
    /// directory.
    fn peer_conf(&self, target: Target, sub: &str) -> PeerConf {
        PeerConf {
            cert_dir: self.dir.path().to_path_buf(),
            dir: self.dir.path().join(sub),
            threads: self.threads,
            maxconn: self.maxconn,
            http: self.ports[&target].http,
            https: self.ports[&target].https,
            static_port: self.backend_ports.0,
            echo_port: self.backend_ports.1,
            defer_accept: self.defer_accept,
        }
    }

    fn nginx_conf(&self, k: u64) -> String {
        self.peer_conf(Target::Nginx, "nginx").nginx(k)
    }

    fn haproxy_conf(&self, k: u64) -> String {
        self.peer_conf(Target::Haproxy, "haproxy").haproxy(k)
    }

    /// Applies configuration change `k` to `target`, the way its operator
    /// would: teapot reads its manifests directory, nginx and HAProxy are
    /// rewritten and reloaded.
    fn change(&self, target: Target, k: u64) -> std::io::Result<()> {
        match target {
            Target::Direct => Ok(()),
            Target::Teapot => peers::write_atomically(
                &self.dir.path().join("manifests").join("churn.yaml"),
                churn_ingress(k).as_bytes(),
            ),
            Target::Nginx => self.nginx.reload(&self.nginx_conf(k)),
            Target::Haproxy => self.haproxy.reload(&self.haproxy_conf(k)),
        }
    }

    async fn stop(mut self) {
        self.nginx.stop().await;
        self.haproxy.stop().await;
        self.backend.stop().await;
        let _ = self.echo.kill().await;
        let _ = self.teapot.terminate();
        let _ = self.teapot.wait(Duration::from_secs(30)).await;
    }
}

fn subdir(dir: &Path, name: &str) -> std::io::Result<PathBuf> {
    let d = dir.join(name);
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn versions(tools: &Tools) -> BTreeMap<&'static str, String> {
    BTreeMap::from([
        ("nginx", peers::version(&tools.nginx, &["-v"])),
        ("haproxy", peers::version(&tools.haproxy, &["-v"])),
        ("wrk", peers::version(&tools.wrk, &["-v"])),
        ("h2load", peers::version(&tools.h2load, &["--version"])),
        ("teapot", peers::version(&tools.teapot, &["--version"])),
        ("kernel", peers::version(Path::new("uname"), &["-sr"])),
        (
            "cpu",
            std::fs::read_to_string("/proc/cpuinfo")
                .ok()
                .and_then(|s| {
                    s.lines()
                        .find_map(|l| l.strip_prefix("model name"))
                        .map(|m| m.trim_start_matches([' ', '\t', ':']).to_string())
                })
                .unwrap_or_default(),
        ),
        (
            "cpus",
            std::thread::available_parallelism()
                .map(|n| n.to_string())
                .unwrap_or_default(),
        ),
    ])
}

/// TLS settings every peer shares: TLS 1.3 only, no session resumption
/// (every handshake in the handshake test is a full one).
fn nginx_tls(cert_dir: &Path) -> String {
    format!(
        "ssl_certificate {c}/cert.pem; ssl_certificate_key {c}/key.pem;
    ssl_protocols TLSv1.3; ssl_session_cache off; ssl_session_tickets off;",
        c = cert_dir.display()
    )
}

fn nginx_common(dir: &Path, threads: usize) -> String {
    format!(
        "user root;
worker_processes {threads};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
worker_shutdown_timeout 5s;
events {{ worker_connections 20000; multi_accept on; }}
http {{
  access_log off;
  keepalive_requests 1000000;
  keepalive_timeout 60s;
  client_body_temp_path {d}/body;
  proxy_temp_path {d}/proxy;
  fastcgi_temp_path {d}/fastcgi;
  uwsgi_temp_path {d}/uwsgi;
  scgi_temp_path {d}/scgi;
",
        d = dir.display()
    )
}

fn nginx_backend_conf(
    cert_dir: &Path,
    dir: &Path,
    threads: usize,
    http: u16,
    https: u16,
) -> String {
    format!(
        "{common}
  open_file_cache max=16 inactive=60s;
  server {{
    listen 127.0.0.1:{http};
    listen 127.0.0.1:{https} ssl http2;
    {tls}
    root {root};
    default_type text/plain;
    location / {{ try_files {STATIC_PATH} =404; }}
  }}
}}
",
        common = nginx_common(dir, threads),
        tls = nginx_tls(cert_dir),
        root = cert_dir.display()
    )
}

/// What a peer proxy's configuration is made of; `nginx` and `haproxy`
/// render it with the same routes, forwarding headers, TLS settings and
/// upstream keep-alive as teapot's Ingresses.
struct PeerConf {
    cert_dir: PathBuf,
    dir: PathBuf,
    threads: usize,
    /// HAProxy's `maxconn`: above the idle runs' connections.
    maxconn: usize,
    http: u16,
    https: u16,
    static_port: u16,
    echo_port: u16,
    /// `--peers-defer-accept`.
    defer_accept: bool,
}

/// HAProxy's `maxconn` for a run with `idle` idle connections: 8,000 as
/// before, or above the idle connections. HAProxy asks for two descriptors
/// per `maxconn` and, by default (`strict-limits`), refuses to start when
/// the hard limit is lower (20,000 on machines where the harness cannot
/// raise it); the HAProxy configuration turns that into a warning, since
/// its backend connections are shared and the idle run needs about one
/// descriptor a connection.
fn haproxy_maxconn(idle: usize) -> usize {
    idle.max(7_500) + 500
}

impl PeerConf {
    /// nginx as a reverse proxy.
    fn nginx(&self, k: u64) -> String {
        // A socket's options are given once, in the first server block
        // that listens on it (nginx refuses them twice).
        let listen_with = |options: &str| {
            format!(
                "listen 127.0.0.1:{}{options}; listen 127.0.0.1:{} ssl http2{options};\n    {}",
                self.http,
                self.https,
                nginx_tls(&self.cert_dir)
            )
        };
        let first = listen_with(if self.defer_accept { " deferred" } else { "" });
        let listen = listen_with("");
        let proxy = "proxy_http_version 1.1; proxy_set_header Connection \"\";
      proxy_set_header Host $host; proxy_set_header X-Forwarded-For $remote_addr;
      proxy_set_header X-Forwarded-Proto $scheme; proxy_set_header X-Forwarded-Host $host;
      proxy_set_header X-Forwarded-Port $server_port; proxy_buffering on;";
        format!(
            "{common}
  upstream static_backend {{ server 127.0.0.1:{s}; keepalive 256; keepalive_requests 1000000; }}
  upstream echo_backend {{ server 127.0.0.1:{e}; keepalive 256; keepalive_requests 1000000; }}
  server {{
    {first}
    server_name {STATIC_HOST};
    location / {{ proxy_pass http://static_backend; {proxy} }}
  }}
  server {{
    {listen}
    server_name {ECHO_HOST};
    location / {{ proxy_pass http://echo_backend; {proxy} }}
  }}
  server {{
    {listen}
    server_name {CHURN_HOST};
    location /v{k}/ {{ proxy_pass http://static_backend; {proxy} }}
  }}
}}
",
            common = nginx_common(&self.dir, self.threads),
            s = self.static_port,
            e = self.echo_port,
        )
    }

    /// HAProxy.
    fn haproxy(&self, k: u64) -> String {
        format!(
            "global
  nbthread {threads}
  maxconn {maxconn}
  no strict-limits
  hard-stop-after 5s
  stats socket {d}/admin.sock mode 600 level admin expose-fd listeners
  ssl-default-bind-options ssl-min-ver TLSv1.3 no-tls-tickets
defaults
  mode http
  timeout connect 3s
  timeout client 60s
  timeout server 60s
  timeout http-keep-alive 60s
  option http-keep-alive
  http-reuse always
frontend fe
  bind 127.0.0.1:{http}{defer}
  bind 127.0.0.1:{https} ssl crt {c}/bundle.pem alpn h2,http/1.1{defer}
  option forwardfor
  http-request set-header X-Forwarded-Proto https if {{ ssl_fc }}
  http-request set-header X-Forwarded-Proto http if !{{ ssl_fc }}
  http-request set-header X-Forwarded-Host %[req.hdr(host)]
  http-request set-header X-Forwarded-Port %[dst_port]
  acl echo hdr(host),field(1,:) -i {ECHO_HOST}
  acl churn hdr(host),field(1,:) -i {CHURN_HOST}
  acl churn_path path_beg /v{k}/
  acl policy hdr(host),field(1,:) -i {POLICY_HOST}
  http-request return status 404 if churn !churn_path
  http-request deny deny_status 403 if policy !{{ src {allow} }}
  http-request track-sc0 src table per_client if policy
  http-request deny deny_status 429 if policy {{ sc_http_req_rate(0) gt {rate} }}
  use_backend echo if echo
  use_backend policy if policy
  default_backend static
backend static
  server s1 127.0.0.1:{s}
backend echo
  server e1 127.0.0.1:{e}
backend policy
  cookie INGRESSCOOKIE insert indirect nocache httponly
  server p1 127.0.0.1:{s} cookie p1
backend per_client
  stick-table type ip size 100k expire 60s store http_req_rate(1s)
",
            defer = if self.defer_accept {
                " defer-accept"
            } else {
                ""
            },
            allow = POLICY_ALLOW.replace(',', ""),
            rate = POLICY_RATE,
            threads = self.threads,
            maxconn = self.maxconn,
            d = self.dir.display(),
            c = self.cert_dir.display(),
            http = self.http,
            https = self.https,
            s = self.static_port,
            e = self.echo_port,
        )
    }
}

fn teapot_manifests(static_port: u16, echo_port: u16, cert: &certs::CertifiedPem) -> String {
    let mut out = String::from(
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
",
    );
    for (name, port) in [("static", static_port), ("echo", echo_port)] {
        write!(
            out,
            "---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: bench}}
spec:
  ports: [{{name: http, port: 80, targetPort: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {name}-1, namespace: bench, labels: {{kubernetes.io/service-name: {name}}}}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]
"
        )
        .expect("write to String");
    }
    out.push_str("---\n");
    out.push_str(&certs::tls_secret_yaml("bench", "bench-tls", cert));
    write!(
        out,
        "---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: bench
  namespace: bench
  # Plain HTTP is measured forwarding, not redirecting to HTTPS.
  annotations: {{nginx.ingress.kubernetes.io/ssl-redirect: \"false\"}}
spec:
  ingressClassName: teapot
  tls: [{{hosts: [{STATIC_HOST}, {ECHO_HOST}, {CHURN_HOST}], secretName: bench-tls}}]
  rules:
    - host: {STATIC_HOST}
      http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: static, port: {{name: http}}}}}}}}]}}
    - host: {ECHO_HOST}
      http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{name: http}}}}}}}}]}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata:
  name: policy
  namespace: bench
  annotations:
    nginx.ingress.kubernetes.io/whitelist-source-range: \"{POLICY_ALLOW}\"
    nginx.ingress.kubernetes.io/limit-rps: \"{POLICY_RATE}\"
    nginx.ingress.kubernetes.io/affinity: cookie
spec:
  ingressClassName: teapot
  rules:
    - host: {POLICY_HOST}
      http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: static, port: {{name: http}}}}}}}}]}}
"
    )
    .expect("write to String");
    out
}

/// Change `k` of the churn: the `churn.example` Ingress routes `/v<k>`.
fn churn_ingress(k: u64) -> String {
    format!(
        "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: churn, namespace: bench}}
spec:
  ingressClassName: teapot
  rules:
    - host: {CHURN_HOST}
      http: {{paths: [{{path: /v{k}, pathType: Prefix, backend: {{service: {{name: static, port: {{name: http}}}}}}}}]}}
"
    )
}

// ---------------------------------------------------------- measurement

type Values = BTreeMap<&'static str, f64>;

async fn measure(
    args: &Args,
    fleet: &Fleet,
    test: Test,
    target: Target,
    churn_k: &mut u64,
) -> anyhow::Result<Values> {
    let p = fleet.ports[&target];
    let secs = args.seconds();
    match test {
        // h1-close: a new connection per request, the accept path's cost.
        Test::H1Static | Test::H1Close => {
            let close = test == Test::H1Close;
            let headers: &[String] = if close {
                &["Connection: close".to_string()]
            } else {
                &[]
            };
            wrk(
                &fleet.tools.wrk,
                args,
                p.http,
                STATIC_HOST,
                STATIC_PATH,
                headers,
            )
            .await
        }
        // h1-policy: the client holds its affinity cookie, as a browser
        // does after its first answer; every request passes the allow-list
        // and the rate limit and is pinned by the cookie.
        Test::H1Policy => {
            let cookie = affinity_cookie(p.http).await?;
            let v = wrk(
                &fleet.tools.wrk,
                args,
                p.http,
                POLICY_HOST,
                STATIC_PATH,
                &[format!("Cookie: {cookie}")],
            )
            .await?;
            if v["non_2xx"] > 0.0 {
                bail!("{} answers of {POLICY_HOST} were not 2xx", v["non_2xx"]);
            }
            Ok(v)
        }
        Test::H1Echo => wrk(&fleet.tools.wrk, args, p.echo, ECHO_HOST, "/", &[]).await,
        Test::FixedRate => {
            let r = fixed_rate(
                p.http,
                STATIC_HOST,
                STATIC_PATH,
                args.rate,
                args.rate_connections,
                secs,
                None,
            )
            .await?;
            Ok(r.values())
        }
        Test::H2 => {
            h2load(
                &fleet.tools.h2load,
                p.https,
                &[
                    "-c",
                    &args.h2_clients.to_string(),
                    "-m",
                    &args.h2_streams.to_string(),
                ],
                secs,
            )
            .await
        }
        Test::TlsHandshakes => {
            tls_handshakes(p.https, &fleet.cert_der, args.tls_clients, secs).await
        }
        Test::IdleH1 | Test::IdleTls | Test::IdleH2 => {
            let pid = match target {
                Target::Teapot => Some(fleet.teapot.pid()),
                Target::Nginx => fleet.nginx.pid(),
                Target::Haproxy => fleet.haproxy.pid(),
                Target::Direct => None,
            }
            .context("the proxy's pid")?;
            let (kind, port) = match test {
                Test::IdleH1 => (Idle::Http1, p.http),
                Test::IdleTls => (Idle::Https1, p.https),
                _ => (Idle::Http2, p.https),
            };
            idle_connections(pid, port, kind, &fleet.cert_der, args.idle_connections).await
        }
        Test::Churn => {
            let reloads_before = teapot_reloads(fleet).await;
            let changes = Arc::new(AtomicU64::new(0));
            let first = *churn_k + 1;
            let churn = Churn {
                per_second: args.churn,
                first,
                target,
                done: changes.clone(),
            };
            let r = fixed_rate(
                p.http,
                STATIC_HOST,
                STATIC_PATH,
                args.rate,
                args.rate_connections,
                secs,
                Some((churn, fleet)),
            )
            .await?;
            let n = changes.load(Ordering::Relaxed);
            *churn_k = first + n;
            let mut v = r.values();
            v.insert("changes", n as f64);
            v.insert("changes_per_s", n as f64 / secs);
            if target == Target::Teapot {
                let reloads = teapot_reloads(fleet).await - reloads_before;
                v.insert("reloads", reloads as f64);
            }
            // Is the last change served? (A proxy that coalesces changes
            // must still end on the newest config.)
            let last = first + n.saturating_sub(1);
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut settle = None;
            let since = Instant::now();
            while Instant::now() < deadline {
                if get_status(p.http, CHURN_HOST, &format!("/v{last}/hello.txt")).await? == 200 {
                    settle = Some(since.elapsed().as_secs_f64() * 1e3);
                    break;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            v.insert("last_change_served", f64::from(u8::from(settle.is_some())));
            v.insert("last_change_after_ms", settle.unwrap_or(f64::NAN));
            // Old nginx/HAProxy workers finish draining before the next run.
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(v)
        }
    }
}

/// KiB of the proxy's RSS (its whole process tree) per idle connection.
const KIB_PER_CONNECTION: &str = "kib_per_conn";

/// What the idle connections of a test carried before going quiet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Idle {
    /// One HTTP/1.1 keep-alive request over plain TCP.
    Http1,
    /// The same over TLS 1.3 (ALPN http/1.1).
    Https1,
    /// TLS 1.3 with ALPN h2 (offered with http/1.1, as browsers do), one
    /// GET on one stream to its end, then no stream open.
    Http2,
}

/// Opens `n` connections to `port`, each with one request answered and
/// then left idle, and charges the growth of the proxy's RSS (its process
/// tree: nginx's and HAProxy's workers included) to them
/// ([`teapot_benches::idle::idle_memory`]: the same method and settling
/// time for every target).
async fn idle_connections(
    pid: u32,
    port: u16,
    kind: Idle,
    cert_der: &[u8],
    n: usize,
) -> anyhow::Result<Values> {
    let name = rustls::pki_types::ServerName::try_from(STATIC_HOST)?;
    let request = format!("GET {STATIC_PATH} HTTP/1.1\r\nHost: {STATIC_HOST}\r\n\r\n");
    let alpn: &[&[u8]] = if kind == Idle::Http2 {
        &[b"h2", b"http/1.1"]
    } else {
        &[b"http/1.1"]
    };
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls13_client(cert_der, alpn)?));
    let memory = match kind {
        Idle::Http1 => {
            idle_memory(pid, n, || {
                let request = request.clone();
                async move {
                    let mut tcp = TcpStream::connect(("127.0.0.1", port)).await?;
                    tcp.set_nodelay(true)?;
                    one_keepalive_exchange(&mut tcp, &request).await?;
                    anyhow::Ok(tcp)
                }
            })
            .await?
        }
        Idle::Https1 => {
            idle_memory(pid, n, || {
                let (connector, name, request) = (connector.clone(), name.clone(), request.clone());
                async move {
                    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
                    tcp.set_nodelay(true)?;
                    let mut tls = connector.connect(name, tcp).await?;
                    one_keepalive_exchange(&mut tls, &request).await?;
                    anyhow::Ok(tls)
                }
            })
            .await?
        }
        Idle::Http2 => {
            idle_memory(pid, n, || {
                one_h2_exchange(connector.clone(), name.clone(), port)
            })
            .await?
        }
    };
    let mut v = Values::new();
    v.insert("connections", memory.connections as f64);
    v.insert("failed", memory.failed as f64);
    v.insert("rss_before_mib", memory.rss_before_kib as f64 / 1024.0);
    v.insert("rss_after_mib", memory.rss_after_kib as f64 / 1024.0);
    v.insert(KIB_PER_CONNECTION, memory.kib_per_connection());
    v.insert(
        "rss_closed_1s_mib",
        memory.rss_closed_1s_kib as f64 / 1024.0,
    );
    v.insert("rss_closed_mib", memory.rss_closed_kib as f64 / 1024.0);
    Ok(v)
}

/// An HTTP/2 connection with no stream open, its connection task kept
/// running (it answers the server's PINGs and SETTINGS); dropping it
/// closes the connection.
struct IdleH2 {
    _send: h2::client::SendRequest<bytes::Bytes>,
    connection: tokio::task::JoinHandle<()>,
}

impl Drop for IdleH2 {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

/// TLS with ALPN h2, one GET on one stream read to its end.
async fn one_h2_exchange(
    connector: tokio_rustls::TlsConnector,
    name: rustls::pki_types::ServerName<'static>,
    port: u16,
) -> anyhow::Result<IdleH2> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let tls = connector.connect(name, tcp).await?;
    if tls.get_ref().1.alpn_protocol() != Some(b"h2") {
        bail!("the server on port {port} did not choose h2 by ALPN");
    }
    let (send, connection) = h2::client::handshake(tls).await?;
    let connection = tokio::spawn(async move {
        let _ = connection.await;
    });
    let mut send = send.ready().await?;
    let request = http::Request::get(format!("https://{STATIC_HOST}{STATIC_PATH}")).body(())?;
    let (response, _) = send.send_request(request, true)?;
    let response = response.await?;
    if response.status() != http::StatusCode::OK {
        bail!("HTTP/2 GET answered {}", response.status());
    }
    let mut body = response.into_body();
    while let Some(chunk) = body.data().await {
        let chunk = chunk?;
        let _ = body.flow_control().release_capacity(chunk.len());
    }
    Ok(IdleH2 {
        _send: send,
        connection,
    })
}

/// One request and its whole response (`Content-Length` framed), leaving
/// the connection open and idle.
async fn one_keepalive_exchange<S>(s: &mut S, request: &str) -> anyhow::Result<()>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    s.write_all(request.as_bytes()).await?;
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut chunk = [0u8; 1024];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            bail!("closed before the response ended");
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .context("a response without Content-Length")?;
            if buf.len() >= end + 4 + len {
                return Ok(());
            }
        }
    }
}

/// The members of `all` whose names `only` lists (all when it is unset).
fn chosen<T: Copy, const N: usize>(
    all: [T; N],
    only: &Option<Vec<String>>,
    name: fn(T) -> &'static str,
) -> Vec<T> {
    all.into_iter()
        .filter(|&t| only.as_ref().is_none_or(|o| o.iter().any(|o| o == name(t))))
        .collect()
}

/// Microseconds of the proxy's CPU (user + system, all its threads and
/// workers) per request or handshake.
const CPU_PER_REQUEST: &str = "cpu_us_per_req";

/// CPU seconds the proxy of `target` has used so far, the workers of
/// nginx and HAProxy included; `None` for the direct connection.
fn proxy_cpu_seconds(fleet: &Fleet, target: Target) -> Option<f64> {
    let pid = match target {
        Target::Direct => return None,
        Target::Teapot => Some(fleet.teapot.pid()),
        Target::Nginx => fleet.nginx.pid(),
        Target::Haproxy => fleet.haproxy.pid(),
    }?;
    peers::cpu_seconds(pid).ok()
}

async fn teapot_reloads(fleet: &Fleet) -> u64 {
    let Ok((200, text)) = fleet.teapot.admin_get("/metrics").await else {
        return 0;
    };
    text.lines()
        .find_map(|l| l.strip_prefix("teapot_reloads_total "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or_default() as u64
}

async fn wrk(
    bin: &Path,
    args: &Args,
    port: u16,
    host: &str,
    path: &str,
    headers: &[String],
) -> anyhow::Result<Values> {
    let mut cmd = tokio::process::Command::new(bin);
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .args([
            "-t",
            "1",
            "-c",
            &args.connections.to_string(),
            "-d",
            &format!("{}s", args.seconds().ceil() as u64),
            "--latency",
            "-H",
            &format!("Host: {host}"),
        ])
        .arg(format!("http://127.0.0.1:{port}{path}"))
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_wrk(&text).with_context(|| format!("wrk output: {text}"))
}

fn parse_wrk(text: &str) -> anyhow::Result<Values> {
    let mut v = Values::new();
    let mut in_dist = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("Latency Distribution") {
            in_dist = true;
            continue;
        }
        if in_dist {
            let mut it = line.split_whitespace();
            match (it.next(), it.next().and_then(parse_duration_ms)) {
                (Some("50%"), Some(ms)) => drop(v.insert("p50_ms", ms)),
                (Some("90%"), Some(ms)) => drop(v.insert("p90_ms", ms)),
                (Some("99%"), Some(ms)) => drop(v.insert("p99_ms", ms)),
                (Some("75%"), _) => {}
                _ => in_dist = false,
            }
        }
        if let Some(r) = line.strip_prefix("Requests/sec:") {
            v.insert("req_per_s", r.trim().parse()?);
        }
        if let Some(r) = line.strip_prefix("Non-2xx or 3xx responses:") {
            v.insert("non_2xx", r.trim().parse()?);
        }
        if let Some(r) = line.strip_prefix("Socket errors:") {
            let errors: f64 = r
                .split(',')
                .filter_map(|f| f.split_whitespace().nth(1)?.parse::<f64>().ok())
                .sum();
            v.insert("errors", errors);
        }
    }
    if !v.contains_key("req_per_s") {
        bail!("no Requests/sec line");
    }
    v.entry("non_2xx").or_insert(0.0);
    v.entry("errors").or_insert(0.0);
    Ok(v)
}

/// The `name=value` of the affinity cookie the proxy at `port` sets on a
/// first request for the policy host.
async fn affinity_cookie(port: u16) -> anyhow::Result<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut conn = tokio::net::TcpStream::connect(("127.0.0.1", port)).await?;
    let request =
        format!("GET {STATIC_PATH} HTTP/1.1\r\nHost: {POLICY_HOST}\r\nConnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    conn.read_to_end(&mut answer).await?;
    let answer = String::from_utf8_lossy(&answer);
    if !answer.starts_with("HTTP/1.1 200") {
        bail!("{POLICY_HOST} answered {:?}", answer.lines().next());
    }
    answer
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("set-cookie")
                .then(|| value.trim().split(';').next().unwrap_or("").to_string())
        })
        .context("no Set-Cookie on the first answer of the policy host")
}

/// `1.23ms`, `456.78us`, `1.2s` in milliseconds.
fn parse_duration_ms(s: &str) -> Option<f64> {
    let split = s.find(|c: char| c.is_ascii_alphabetic())?;
    let (n, unit) = s.split_at(split);
    let n: f64 = n.parse().ok()?;
    Some(match unit {
        "us" => n / 1e3,
        "ms" => n,
        "s" => n * 1e3,
        "m" => n * 60e3,
        _ => return None,
    })
}

async fn h2load(bin: &Path, port: u16, extra: &[&str], seconds: f64) -> anyhow::Result<Values> {
    let out = tokio::process::Command::new(bin)
        .args(["-t", "1", "-D", &format!("{}", seconds.ceil() as u64)])
        .args(["--warm-up-time", "1"])
        .args(extra)
        .arg(format!("--connect-to=127.0.0.1:{port}"))
        .arg(format!("https://{STATIC_HOST}{STATIC_PATH}"))
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_h2load(&text).with_context(|| format!("h2load output: {text}"))
}

fn parse_h2load(text: &str) -> anyhow::Result<Values> {
    let mut v = Values::new();
    for line in text.lines().map(str::trim) {
        if let Some(rest) = line.strip_prefix("finished in") {
            // "finished in 2.00s, 12345.00 req/s, 1.23MB/s"
            let rate = rest
                .split(',')
                .nth(1)
                .and_then(|f| f.trim().strip_suffix(" req/s"))
                .context("req/s field")?;
            v.insert("req_per_s", rate.trim().parse()?);
        }
        if let Some(rest) = line.strip_prefix("requests:") {
            for field in rest.split(',') {
                let mut it = field.split_whitespace();
                if let (Some(n), Some(what)) = (it.next(), it.next())
                    && matches!(what, "succeeded" | "failed" | "errored" | "timeout")
                {
                    v.insert(
                        match what {
                            "succeeded" => "succeeded",
                            "failed" => "failed",
                            "errored" => "errored",
                            _ => "timeouts",
                        },
                        n.parse()?,
                    );
                }
            }
        }
        if let Some(rest) = line.strip_prefix("status codes:") {
            let non_2xx: f64 = rest
                .split(',')
                .filter_map(|f| {
                    let mut it = f.split_whitespace();
                    let n: f64 = it.next()?.parse().ok()?;
                    (it.next()? != "2xx").then_some(n)
                })
                .sum();
            v.insert("non_2xx", non_2xx);
        }
        if line.starts_with("TLS Protocol:") && !line.contains("TLSv1.3") {
            bail!("not TLS 1.3: {line}");
        }
    }
    if !v.contains_key("req_per_s") {
        bail!("no 'finished in' line");
    }
    Ok(v)
}

/// New TLS 1.3 connections per second: `clients` loops of connect, full
/// handshake (resumption off, so never a PSK), one `Connection: close`
/// request, read to the end. h2load cannot do this: in duration mode it
/// stalls once servers close its connections.
/// A TLS 1.3 client that trusts the bench's certificate and offers the
/// protocols `alpn`.
fn tls13_client(cert_der: &[u8], alpn: &[&[u8]]) -> anyhow::Result<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(rustls::pki_types::CertificateDer::from(cert_der.to_vec()))?;
    let mut config =
        rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
            .with_root_certificates(roots)
            .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}

async fn tls_handshakes(
    port: u16,
    cert_der: &[u8],
    clients: usize,
    seconds: f64,
) -> anyhow::Result<Values> {
    let mut config = tls13_client(cert_der, &[b"http/1.1"])?;
    config.resumption = rustls::client::Resumption::disabled();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from(STATIC_HOST)?;
    let request =
        format!("GET {STATIC_PATH} HTTP/1.1\r\nHost: {STATIC_HOST}\r\nConnection: close\r\n\r\n");
    let warmup = Duration::from_millis(500);
    let start = Instant::now();
    let (measure_from, end) = (
        start + warmup,
        start + warmup + Duration::from_secs_f64(seconds),
    );
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (connector, name, request) = (connector.clone(), name.clone(), request.clone());
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut buf = Vec::with_capacity(1024);
            while Instant::now() < end {
                let one = async {
                    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
                    tcp.set_nodelay(true)?;
                    let mut tls = connector.connect(name.clone(), tcp).await?;
                    tls.write_all(request.as_bytes()).await?;
                    buf.clear();
                    // A server may end with a TLS close_notify or just FIN.
                    let _ = tls.read_to_end(&mut buf).await;
                    let ok = buf.starts_with(b"HTTP/1.1 200");
                    // Reset rather than FIN: TIME_WAITs would use up the
                    // client's ports over a long run.
                    let _ = tls.get_ref().0.set_zero_linger();
                    std::io::Result::Ok(ok)
                };
                let counted = Instant::now() >= measure_from;
                match tokio::time::timeout(Duration::from_secs(5), one).await {
                    Ok(Ok(true)) if counted => ok += 1,
                    Ok(Ok(true)) => {}
                    _ if counted => failed += 1,
                    _ => {}
                }
            }
            (ok, failed)
        }));
    }
    let (mut ok, mut failed) = (0, 0);
    for t in tasks {
        let (o, f) = t.await?;
        ok += o;
        failed += f;
    }
    Ok(Values::from([
        ("handshakes_per_s", ok as f64 / seconds),
        ("ok", ok as f64),
        ("failed", failed as f64),
    ]))
}

/// Changes a target's config at a fixed rate while the load runs.
struct Churn {
    per_second: f64,
    first: u64,
    target: Target,
    done: Arc<AtomicU64>,
}

#[derive(Debug, Default)]
struct LoadResult {
    latencies_us: Vec<u32>,
    ok: u64,
    non_2xx: u64,
    errors: u64,
    seconds: f64,
}

impl LoadResult {
    fn percentile_ms(&self, q: f64) -> f64 {
        percentile(&self.latencies_us, q).map_or(f64::NAN, |us| f64::from(us) / 1e3)
    }

    fn values(&self) -> Values {
        Values::from([
            ("p50_ms", self.percentile_ms(0.50)),
            ("p90_ms", self.percentile_ms(0.90)),
            ("p99_ms", self.percentile_ms(0.99)),
            ("p999_ms", self.percentile_ms(0.999)),
            ("max_ms", self.percentile_ms(1.0)),
            ("ok", self.ok as f64),
            ("non_2xx", self.non_2xx as f64),
            ("errors", self.errors as f64),
            (
                "achieved_per_s",
                (self.ok + self.non_2xx) as f64 / self.seconds,
            ),
        ])
    }
}

/// Open-loop load: `rate` requests per second spread over `connections`
/// keep-alive connections, each sending on a fixed schedule. A request's
/// latency runs from its scheduled time, so time spent behind a slow
/// answer counts (no coordinated omission). Errors reconnect and go on.
async fn fixed_rate(
    port: u16,
    host: &str,
    path: &str,
    rate: u64,
    connections: usize,
    seconds: f64,
    churn: Option<(Churn, &Fleet)>,
) -> anyhow::Result<LoadResult> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let request: Arc<[u8]> =
        format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: teapot-bench\r\n\r\n")
            .into_bytes()
            .into();
    let interval = Duration::from_secs_f64(connections as f64 / rate as f64);
    let warmup = Duration::from_millis(500);
    let start = tokio::time::Instant::now() + Duration::from_millis(50);
    let measure_from = start + warmup;
    let end = measure_from + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for c in 0..connections {
        let request = request.clone();
        let offset = interval.mul_f64(c as f64 / connections as f64);
        tasks.push(tokio::spawn(async move {
            let mut r = LoadResult::default();
            let mut conn: Option<TcpStream> = None;
            let mut buf = Vec::with_capacity(4096);
            let mut k = 0u32;
            loop {
                let scheduled = start + offset + interval * k;
                k += 1;
                if scheduled >= end {
                    break;
                }
                tokio::time::sleep_until(scheduled).await;
                let outcome = tokio::time::timeout(
                    Duration::from_secs(5),
                    exchange(&mut conn, addr, &request, &mut buf),
                )
                .await;
                let counted = scheduled >= measure_from;
                match outcome {
                    Ok(Ok(status)) => {
                        if counted {
                            let us = scheduled.elapsed().as_micros().min(u32::MAX as u128);
                            r.latencies_us.push(us as u32);
                            if (200..300).contains(&status) {
                                r.ok += 1;
                            } else {
                                r.non_2xx += 1;
                            }
                        }
                    }
                    _ => {
                        conn = None;
                        if counted {
                            r.errors += 1;
                        }
                    }
                }
            }
            r
        }));
    }
    // The churn runs on the thread that drives `run` (block_on), not on
    // a client worker, so a reload's fork and signal never delay a send.
    let churn_fut = async {
        if let Some((churn, fleet)) = churn {
            let every = Duration::from_secs_f64(1.0 / churn.per_second);
            let mut k = churn.first;
            let mut next = measure_from;
            while next < end {
                tokio::time::sleep_until(next).await;
                let t = churn.target;
                if let Err(e) = fleet.change(t, k) {
                    eprintln!("change {k} for {}: {e}", t.name());
                }
                churn.done.fetch_add(1, Ordering::Relaxed);
                k += 1;
                next += every;
            }
        }
    };
    churn_fut.await;
    let mut total = LoadResult {
        seconds,
        ..LoadResult::default()
    };
    for t in tasks {
        let r = t.await?;
        total.latencies_us.extend(r.latencies_us);
        total.ok += r.ok;
        total.non_2xx += r.non_2xx;
        total.errors += r.errors;
    }
    total.latencies_us.sort_unstable();
    Ok(total)
}

/// One request on the kept connection (connecting first if needed);
/// returns the status. Closes the connection when the server says so.
async fn exchange(
    conn: &mut Option<TcpStream>,
    addr: SocketAddr,
    request: &[u8],
    buf: &mut Vec<u8>,
) -> std::io::Result<u16> {
    if conn.is_none() {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        *conn = Some(s);
    }
    let s = conn.as_mut().expect("connected above");
    s.write_all(request).await?;
    buf.clear();
    let eof = || std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed mid-response");
    let head_end = loop {
        if let Some(i) = find(buf, b"\r\n\r\n") {
            break i + 4;
        }
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(eof());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end]).map_err(std::io::Error::other)?;
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| std::io::Error::other("bad status line"))?;
    let mut length = None;
    let mut chunked = false;
    let mut close = false;
    for line in head.lines().skip(1) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("content-length") {
            length = value.parse::<usize>().ok();
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("connection") {
            close = value.eq_ignore_ascii_case("close");
        }
    }
    let done = |buf: &[u8]| {
        if chunked {
            buf[head_end..].ends_with(b"0\r\n\r\n")
        } else {
            buf.len() >= head_end + length.unwrap_or(0)
        }
    };
    while !done(buf) {
        let mut chunk = [0u8; 4096];
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(eof());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    if close {
        *conn = None;
    }
    Ok(status)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

async fn get_status(port: u16, host: &str, path: &str) -> anyhow::Result<u16> {
    let mut conn = None;
    let mut buf = Vec::new();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    Ok(tokio::time::timeout(
        Duration::from_secs(5),
        exchange(&mut conn, addr, request.as_bytes(), &mut buf),
    )
    .await
    .context("no answer in 5 s")??)
}

// ------------------------------------------------------------------ RSS

#[derive(Serialize)]
struct Rss {
    ingresses: usize,
    hosts: usize,
    routes: usize,
    manifest_mib: f64,
    load_seconds: f64,
    rss_mib: f64,
    peak_rss_mib: f64,
}

/// Starts `teapot proxy` on the synthetic store written as manifests and
/// reads its RSS once it is ready (the first route table is swapped in).
async fn measure_rss(args: &Args, fleet: &Fleet) -> anyhow::Result<Vec<Rss>> {
    let mut out = Vec::new();
    for n in args.rss_sizes() {
        let dir = tempfile::tempdir()?;
        let manifest_bytes = tokio::task::spawn_blocking({
            let path = dir.path().to_path_buf();
            move || write_synthetic_manifests(&path, n)
        })
        .await??;
        let admin = peers::free_port()?;
        let started = Instant::now();
        let mut child = tokio::process::Command::new(&fleet.tools.teapot)
            .args([
                "--threads",
                &args.threads.to_string(),
                "proxy",
                "--manifests",
            ])
            .arg(dir.path())
            .args(["--http", "127.0.0.1:0", "--https", "127.0.0.1:0", "--admin"])
            .arg(format!("127.0.0.1:{admin}"))
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .kill_on_drop(true)
            .spawn()?;
        let pid = child.id().context("teapot exited at once")?;
        let deadline = Instant::now() + Duration::from_secs(600);
        loop {
            if let Some(status) = child.try_wait()? {
                bail!("teapot with {n} Ingresses exited: {status}");
            }
            if get_status(admin, "localhost", "/readyz").await.ok() == Some(200) {
                break;
            }
            if Instant::now() > deadline {
                bail!("teapot with {n} Ingresses not ready after 600 s");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        let load_seconds = started.elapsed().as_secs_f64();
        // Let the allocator settle after the compile's temporaries.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let rss = Rss {
            ingresses: n,
            hosts: teapot_benches::expected_hosts(n),
            routes: teapot_benches::expected_routes(n),
            manifest_mib: manifest_bytes as f64 / MIB,
            load_seconds,
            rss_mib: peers::rss_kib(pid)? as f64 / 1024.0,
            peak_rss_mib: peers::peak_rss_kib(pid)? as f64 / 1024.0,
        };
        println!(
            "rss: {n} Ingresses ({} hosts, {} routes): {:.0} MiB (peak {:.0} MiB), ready after {:.1} s",
            rss.hosts, rss.routes, rss.rss_mib, rss.peak_rss_mib, rss.load_seconds
        );
        out.push(rss);
        let _ = child.kill().await;
    }
    Ok(out)
}

const MIB: f64 = 1024.0 * 1024.0;

/// The synthetic store as manifests, one file per namespace, each object a
/// JSON document (JSON is YAML, and writes and parses much faster).
fn write_synthetic_manifests(dir: &Path, ingresses: usize) -> anyhow::Result<u64> {
    let store = teapot_benches::synthetic_store(ingresses);
    let mut files: BTreeMap<String, String> = BTreeMap::new();
    let mut put = |namespace: &str, json: String| {
        let f = files.entry(namespace.to_string()).or_default();
        if !f.is_empty() {
            f.push_str("\n---\n");
        }
        f.push_str(&json);
    };
    for s in store.ingress_classes.values() {
        put("", serde_json::to_string(&*s.object)?);
    }
    for (k, s) in &store.services {
        put(&k.namespace, serde_json::to_string(&*s.object)?);
    }
    for (k, s) in &store.endpoint_slices {
        put(&k.namespace, serde_json::to_string(&*s.object)?);
    }
    for (k, s) in &store.ingresses {
        put(&k.namespace, serde_json::to_string(&*s.object)?);
    }
    let mut bytes = 0;
    for (namespace, text) in files {
        let name = if namespace.is_empty() {
            "class".to_string()
        } else {
            namespace
        };
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("{name}.yaml")), text)?;
    }
    Ok(bytes)
}

// --------------------------------------------------------------- report

#[derive(Serialize)]
struct Sample {
    round: usize,
    test: &'static str,
    target: Target,
    values: Values,
}

#[derive(Serialize)]
struct Ratio {
    test: &'static str,
    metric: &'static str,
    higher_is_better: bool,
    /// Median of the rounds, per target.
    medians: BTreeMap<Target, f64>,
    /// teapot's advantage over each other target: > 1 means teapot is
    /// better (for latencies: the other's value over teapot's).
    teapot_vs: BTreeMap<Target, f64>,
    /// Each target's headline over direct (latency: direct's over it).
    vs_direct: BTreeMap<Target, f64>,
}

#[derive(Serialize)]
struct Goal {
    goal: &'static str,
    value: String,
    met: bool,
}

#[derive(Serialize)]
struct Report {
    command: String,
    /// The checkout this harness ran from (`--teapot` may name another
    /// build).
    commit: String,
    versions: BTreeMap<&'static str, String>,
    threads: usize,
    rounds: usize,
    seconds: f64,
    wrk_connections: usize,
    fixed_rate_per_s: u64,
    fixed_rate_connections: usize,
    h2_clients: usize,
    h2_streams: usize,
    tls_clients: usize,
    churn_per_s: f64,
    load_average: String,
    elapsed_s: f64,
    /// Median of the rounds for every recorded number.
    medians: BTreeMap<&'static str, BTreeMap<Target, Values>>,
    ratios: Vec<Ratio>,
    goals: Vec<Goal>,
    rss: Vec<Rss>,
    samples: Vec<Sample>,
    note: &'static str,
}

impl Report {
    fn new(
        args: &Args,
        versions: BTreeMap<&'static str, String>,
        samples: Vec<Sample>,
        rss: Vec<Rss>,
        elapsed: Duration,
    ) -> Report {
        let mut medians: BTreeMap<&'static str, BTreeMap<Target, Values>> = BTreeMap::new();
        for test in TESTS {
            for target in TARGETS {
                let of: Vec<&Sample> = samples
                    .iter()
                    .filter(|s| s.test == test.name() && s.target == target)
                    .collect();
                let Some(first) = of.first() else { continue };
                let values = first
                    .values
                    .keys()
                    .map(|&k| {
                        (
                            k,
                            median(of.iter().filter_map(|s| s.values.get(k).copied())),
                        )
                    })
                    .collect();
                medians
                    .entry(test.name())
                    .or_default()
                    .insert(target, values);
            }
        }
        let mut ratios = Vec::new();
        for test in TESTS {
            let Some(by_target) = medians.get(test.name()) else {
                continue;
            };
            for (metric, higher) in test.reported() {
                let m: BTreeMap<Target, f64> = by_target
                    .iter()
                    .filter_map(|(t, v)| Some((*t, *v.get(metric)?)))
                    .collect();
                // Oriented so that > 1 always means "better than".
                let better = |a: f64, b: f64| if higher { a / b } else { b / a };
                let teapot = m.get(&Target::Teapot).copied();
                let teapot_vs = m
                    .iter()
                    .filter(|(t, _)| **t != Target::Teapot)
                    .filter_map(|(t, v)| Some((*t, better(teapot?, *v))))
                    .collect();
                let vs_direct = m
                    .iter()
                    .filter(|(t, _)| **t != Target::Direct)
                    .filter_map(|(t, v)| Some((*t, better(*v, *m.get(&Target::Direct)?))))
                    .collect();
                ratios.push(Ratio {
                    test: test.name(),
                    metric,
                    higher_is_better: higher,
                    medians: m,
                    teapot_vs,
                    vs_direct,
                });
            }
        }
        let goals = goals(&medians);
        Report {
            command: std::env::args().collect::<Vec<_>>().join(" "),
            commit: teapot_benches::results::commit(Path::new(env!("CARGO_MANIFEST_DIR"))),
            versions,
            threads: args.threads,
            rounds: args.rounds(),
            seconds: args.seconds(),
            wrk_connections: args.connections,
            fixed_rate_per_s: args.rate,
            fixed_rate_connections: args.rate_connections,
            h2_clients: args.h2_clients,
            h2_streams: args.h2_streams,
            tls_clients: args.tls_clients,
            churn_per_s: args.churn,
            load_average: std::fs::read_to_string("/proc/loadavg")
                .unwrap_or_default()
                .trim()
                .to_string(),
            elapsed_s: elapsed.as_secs_f64(),
            medians,
            ratios,
            goals,
            rss,
            samples,
            note: "load generators, backends and proxies share one 2-core machine; the numbers compare the proxies under the same conditions, they are not the capacity of any",
        }
    }

    fn print(&self) {
        println!();
        println!(
            "{:<15} {:<17} {:>10} {:>10} {:>10} {:>10}   {:>8} {:>8} {:>8}",
            "test",
            "metric",
            "direct",
            "teapot",
            "nginx",
            "haproxy",
            "t/direct",
            "t/nginx",
            "t/haprxy"
        );
        for r in &self.ratios {
            let cell = |t: Target| r.medians.get(&t).map_or("-".into(), |v| fmt_num(*v));
            let ratio = |m: &BTreeMap<Target, f64>, t: Target| {
                m.get(&t).map_or("-".into(), |v| format!("{v:.2}"))
            };
            println!(
                "{:<15} {:<17} {:>10} {:>10} {:>10} {:>10}   {:>8} {:>8} {:>8}",
                r.test,
                r.metric,
                cell(Target::Direct),
                cell(Target::Teapot),
                cell(Target::Nginx),
                cell(Target::Haproxy),
                ratio(&r.vs_direct, Target::Teapot),
                ratio(&r.teapot_vs, Target::Nginx),
                ratio(&r.teapot_vs, Target::Haproxy),
            );
        }
        if let Some(churn) = self.medians.get("churn") {
            for (t, v) in churn {
                println!(
                    "churn {:<8} errors {} non-2xx {} p99 {} ms, changes {}, last change served {}",
                    t.name(),
                    fmt_num(v.get("errors").copied().unwrap_or(f64::NAN)),
                    fmt_num(v.get("non_2xx").copied().unwrap_or(f64::NAN)),
                    fmt_num(v.get("p99_ms").copied().unwrap_or(f64::NAN)),
                    fmt_num(v.get("changes").copied().unwrap_or(f64::NAN)),
                    v.get("last_change_served").copied().unwrap_or(0.0) == 1.0,
                );
            }
        }
        println!("(ratios: > 1 means teapot is better; latencies are inverted)");
        for g in &self.goals {
            println!(
                "{} {}: {}",
                if g.met { "MET " } else { "MISS" },
                g.goal,
                g.value
            );
        }
    }

    /// Bars of each test's headline, scaled to the best target of that
    /// test (higher is better after inverting latencies).
    fn svg(&self) -> String {
        let colors = [
            (Target::Direct, "#9e9e9e"),
            (Target::Teapot, "#d2691e"),
            (Target::Nginx, "#2e8b57"),
            (Target::Haproxy, "#4169e1"),
        ];
        let (bar_h, gap, label_w, chart_w) = (14.0, 12.0, 190.0, 420.0);
        let group_h = bar_h * 4.0 + gap;
        let height = 60.0 + group_h * self.ratios.len() as f64 + 30.0;
        let width = label_w + chart_w + 140.0;
        let mut s = format!(
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" font-family=\"sans-serif\" font-size=\"11\">\n\
             <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
             <text x=\"10\" y=\"20\" font-size=\"14\">teapot vs nginx vs HAProxy ({} thread(s) each, median of {} rounds; bar = share of the best, latency inverted)</text>\n",
            self.threads, self.rounds
        );
        for (i, (t, c)) in colors.iter().enumerate() {
            let x = 10.0 + i as f64 * 110.0;
            let _ = writeln!(
                s,
                "<rect x=\"{x}\" y=\"32\" width=\"12\" height=\"12\" fill=\"{c}\"/><text x=\"{}\" y=\"42\">{}</text>",
                x + 16.0,
                t.name()
            );
        }
        for (g, r) in self.ratios.iter().enumerate() {
            let y0 = 60.0 + g as f64 * group_h;
            let score = |v: f64| if r.higher_is_better { v } else { 1.0 / v };
            let best = r
                .medians
                .values()
                .map(|v| score(*v))
                .filter(|v| v.is_finite())
                .fold(0.0, f64::max);
            let _ = writeln!(
                s,
                "<text x=\"10\" y=\"{}\">{} ({})</text>",
                y0 + 2.0 * bar_h,
                r.test,
                r.metric
            );
            for (i, (t, c)) in colors.iter().enumerate() {
                let Some(v) = r.medians.get(t) else { continue };
                let w = if best > 0.0 && score(*v).is_finite() {
                    chart_w * score(*v) / best
                } else {
                    0.0
                };
                let y = y0 + i as f64 * bar_h;
                let _ = writeln!(
                    s,
                    "<rect x=\"{label_w}\" y=\"{y}\" width=\"{w:.1}\" height=\"{}\" fill=\"{c}\"/><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                    bar_h - 2.0,
                    label_w + w + 4.0,
                    y + bar_h - 4.0,
                    fmt_num(*v)
                );
            }
        }
        s.push_str("</svg>\n");
        s
    }
}

fn goals(medians: &BTreeMap<&'static str, BTreeMap<Target, Values>>) -> Vec<Goal> {
    let get = |test: &str, t: Target, k: &str| {
        medians
            .get(test)
            .and_then(|m| m.get(&t))
            .and_then(|v| v.get(k))
            .copied()
            .unwrap_or(f64::NAN)
    };
    let mut out = Vec::new();
    let (t, h, n) = (
        get("h1-static", Target::Teapot, "req_per_s"),
        get("h1-static", Target::Haproxy, "req_per_s"),
        get("h1-static", Target::Nginx, "req_per_s"),
    );
    out.push(Goal {
        goal: "HTTP/1.1 keep-alive >= 1.1x HAProxy",
        value: format!("{:.2}x", t / h),
        met: t >= 1.1 * h,
    });
    out.push(Goal {
        goal: "HTTP/1.1 keep-alive >= nginx",
        value: format!("{:.2}x", t / n),
        met: t >= n,
    });
    let (t, h) = (
        get("fixed-rate", Target::Teapot, "p99_ms"),
        get("fixed-rate", Target::Haproxy, "p99_ms"),
    );
    out.push(Goal {
        goal: "p99 at fixed rate <= HAProxy",
        value: format!("{t:.2} ms vs {h:.2} ms"),
        met: t <= h,
    });
    let (t, n) = (
        get("tls-handshakes", Target::Teapot, "handshakes_per_s"),
        get("tls-handshakes", Target::Nginx, "handshakes_per_s"),
    );
    out.push(Goal {
        goal: "TLS 1.3 full handshakes/s >= nginx",
        value: format!("{:.2}x", t / n),
        met: t >= n,
    });
    let (errors, non_2xx, p99, steady) = (
        get("churn", Target::Teapot, "errors"),
        get("churn", Target::Teapot, "non_2xx"),
        get("churn", Target::Teapot, "p99_ms"),
        get("fixed-rate", Target::Teapot, "p99_ms"),
    );
    out.push(Goal {
        goal: "churn: 0 failures and p99 <= 2x steady state",
        value: format!(
            "{errors} errors, {non_2xx} non-2xx, p99 {p99:.2} ms vs {steady:.2} ms steady"
        ),
        met: errors == 0.0 && non_2xx == 0.0 && p99 <= 2.0 * steady,
    });
    out
}

fn fmt_num(v: f64) -> String {
    if v.is_nan() {
        "-".into()
    } else if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_wrk() {
        let text = "Running 2s test @ http://127.0.0.1:1/hello.txt
  1 threads and 50 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency     2.10ms  350.00us   9.00ms   90.00%
    Req/Sec    23.00k     1.00k   25.00k    70.00%
  Latency Distribution
     50%    2.00ms
     75%    2.20ms
     90%  500.00us
     99%    1.10s
  46000 requests in 2.00s, 10.00MB read
  Non-2xx or 3xx responses: 7
  Socket errors: connect 0, read 2, write 1, timeout 0
Requests/sec:  23000.50
Transfer/sec:      5.00MB
";
        let v = parse_wrk(text).unwrap();
        assert_eq!(v["req_per_s"], 23000.5);
        assert_eq!(v["p50_ms"], 2.0);
        assert_eq!(v["p90_ms"], 0.5);
        assert_eq!(v["p99_ms"], 1100.0);
        assert_eq!(v["non_2xx"], 7.0);
        assert_eq!(v["errors"], 3.0);
        assert!(parse_wrk("garbage").is_err());
    }

    #[test]
    fn parses_h2load() {
        let text = "finished in 2.00s, 12345.50 req/s, 1.50MB/s
requests: 24691 total, 24691 started, 24691 done, 24680 succeeded, 11 failed, 11 errored, 0 timeout
status codes: 24680 2xx, 0 3xx, 3 4xx, 2 5xx
TLS Protocol: TLSv1.3
";
        let v = parse_h2load(text).unwrap();
        assert_eq!(v["req_per_s"], 12345.5);
        assert_eq!(v["succeeded"], 24680.0);
        assert_eq!(v["failed"], 11.0);
        assert_eq!(v["non_2xx"], 5.0);
        assert!(parse_h2load("TLS Protocol: TLSv1.2\nfinished in 1s, 1.0 req/s, 1B/s").is_err());
    }

    #[test]
    fn medians_and_ratios_orient_latency() {
        let sample = |round, test: Test, target, k: &'static str, v| Sample {
            round,
            test: test.name(),
            target,
            values: Values::from([(k, v)]),
        };
        let samples = vec![
            sample(0, Test::FixedRate, Target::Teapot, "p99_ms", 1.0),
            sample(1, Test::FixedRate, Target::Teapot, "p99_ms", 3.0),
            sample(2, Test::FixedRate, Target::Teapot, "p99_ms", 2.0),
            sample(0, Test::FixedRate, Target::Haproxy, "p99_ms", 4.0),
            sample(0, Test::H1Static, Target::Teapot, "req_per_s", 300.0),
            sample(0, Test::H1Static, Target::Nginx, "req_per_s", 200.0),
        ];
        let args = Args::parse_from(["http-report"]);
        let r = Report::new(&args, BTreeMap::new(), samples, Vec::new(), Duration::ZERO);
        let fixed = r.ratios.iter().find(|r| r.test == "fixed-rate").unwrap();
        assert_eq!(fixed.medians[&Target::Teapot], 2.0);
        assert_eq!(fixed.teapot_vs[&Target::Haproxy], 2.0);
        let h1 = r.ratios.iter().find(|r| r.test == "h1-static").unwrap();
        assert_eq!(h1.teapot_vs[&Target::Nginx], 1.5);
        assert!(r.svg().starts_with("<svg"));
    }

    /// CPU per request is a row of its own, where less is better.
    #[test]
    fn cpu_per_request_is_a_ratio_row_oriented_like_latency() {
        let sample = |target, v| Sample {
            round: 0,
            test: Test::H1Static.name(),
            target,
            values: Values::from([("req_per_s", 100.0), (CPU_PER_REQUEST, v)]),
        };
        let samples = vec![sample(Target::Teapot, 90.0), sample(Target::Haproxy, 30.0)];
        let args = Args::parse_from(["http-report"]);
        let r = Report::new(&args, BTreeMap::new(), samples, Vec::new(), Duration::ZERO);
        let cpu = r
            .ratios
            .iter()
            .find(|r| r.test == "h1-static" && r.metric == CPU_PER_REQUEST)
            .unwrap();
        assert!((cpu.teapot_vs[&Target::Haproxy] - 1.0 / 3.0).abs() < 1e-9);
        assert!(!cpu.higher_is_better);
        // The churn has no rate to divide by.
        assert_eq!(Test::Churn.reported(), vec![Test::Churn.headline()]);
    }

    #[test]
    fn open_loop_percentiles() {
        let r = LoadResult {
            latencies_us: (1..=1000).collect(),
            ok: 1000,
            seconds: 1.0,
            ..LoadResult::default()
        };
        assert_eq!(r.percentile_ms(0.5), 0.501);
        assert_eq!(r.percentile_ms(0.99), 0.99);
        assert_eq!(r.values()["achieved_per_s"], 1000.0);
    }
}
