//! TLS handshakes per second with client-certificate verification:
//! teapot, nginx and HAProxy in one run, each against the same backend.
//!
//! Every proxy terminates TLS 1.3 (one ECDSA P-256 server certificate, no
//! session resumption) for two hosts: `plain.bench`, which asks for no
//! client certificate (the baseline), and `mtls.bench`, which requires one
//! issued by the bench's client CA (teapot: an Ingress with
//! `auth-tls-secret`; nginx: `ssl_verify_client on; ssl_client_certificate`;
//! HAProxy: a `bind` with `verify required ca-file`). `--clients` client
//! loops each connect, do a full handshake (presenting the client
//! certificate for `mtls.bench`), send one `Connection: close` request and
//! read the answer to its end; handshakes per second are the answers 200
//! over the measured seconds, and CPU per handshake is the proxy's process
//! tree's CPU time (`/proc`) over the same window divided by them. Rounds
//! interleave the targets; the medians and ratios (teapot's over each
//! peer's) are printed and written to
//! `benches/results/client-cert-DATE.json` (benches/http.md, "TLS
//! handshakes with client certificates").
//!
//! Run after `cargo build --release -p teapot --bin teapot -p
//! teapot-benches --bin client-cert-report`:
//! `target/release/client-cert-report [--rounds 3 --seconds 5]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use serde_json::json;
use teapot_benches::peers::{self, Peer, PeerKind};
use teapot_benches::results::{commit, utc_date};
use teapot_benches::stats::median;
use teapot_testkit::certs::{CertifiedPem, TestCa, ca_secret_yaml, tls_secret_yaml};
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::process::ProxyProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const PLAIN_HOST: &str = "plain.bench";
const MTLS_HOST: &str = "mtls.bench";

#[derive(Parser, Debug)]
#[command(about = "TLS handshakes/s with client-certificate verification: teapot, nginx, HAProxy")]
struct Args {
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5.0)]
    seconds: f64,
    /// Concurrent client loops.
    #[arg(long, default_value_t = 16)]
    clients: usize,
    /// Worker processes/threads of every proxy.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// Fail instead of running apt-get when nginx or HAProxy is missing.
    #[arg(long)]
    no_install: bool,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// Output file (default: benches/results/client-cert-DATE.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Teapot,
    Nginx,
    Haproxy,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Teapot => "teapot",
            Target::Nginx => "nginx",
            Target::Haproxy => "haproxy",
        }
    }
}

/// What one measurement found.
struct Run {
    handshakes_per_s: f64,
    cpu_us_per_handshake: f64,
    failed: u64,
}

/// The client side of the bench: the server's CA, and the client
/// certificate presented to `mtls.bench`.
struct Clients {
    plain: tokio_rustls::TlsConnector,
    mtls: tokio_rustls::TlsConnector,
}

impl Clients {
    fn new(server_ca: &TestCa, client: &CertifiedPem) -> Result<Clients> {
        let config = |client: Option<&CertifiedPem>| -> Result<tokio_rustls::TlsConnector> {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(CertificateDer::from(server_ca.cert_der().to_vec()))?;
            let builder =
                rustls::ClientConfig::builder_with_protocol_versions(&[&rustls::version::TLS13])
                    .with_root_certificates(roots);
            let mut config = match client {
                Some(pem) => builder.with_client_auth_cert(
                    vec![CertificateDer::from(pem.cert_der.clone())],
                    PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pem.key_der.clone())),
                )?,
                None => builder.with_no_client_auth(),
            };
            // Every handshake a full one: nothing to resume from.
            config.resumption = rustls::client::Resumption::disabled();
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
        };
        Ok(Clients {
            plain: config(None)?,
            mtls: config(Some(client))?,
        })
    }

    fn connector(&self, host: &str) -> &tokio_rustls::TlsConnector {
        if host == MTLS_HOST {
            &self.mtls
        } else {
            &self.plain
        }
    }
}

/// One connection: connect, handshake, one request, the answer read to
/// its end. Whether it was a 200.
async fn one(
    connector: &tokio_rustls::TlsConnector,
    port: u16,
    host: &'static str,
    buf: &mut Vec<u8>,
) -> std::io::Result<bool> {
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let name = ServerName::try_from(host).map_err(std::io::Error::other)?;
    let mut tls = connector.connect(name, tcp).await?;
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    tls.write_all(request.as_bytes()).await?;
    buf.clear();
    // A server may end with close_notify or a bare FIN.
    let _ = tls.read_to_end(buf).await;
    // Reset rather than FIN: TIME_WAITs would use up the client's ports.
    let _ = tls.get_ref().0.set_zero_linger();
    Ok(buf.starts_with(b"HTTP/1.1 200"))
}

/// Handshakes per second to `host` on `port` over `seconds` (after half a
/// second of warm-up), and the CPU of `pid`'s process tree per handshake.
async fn measure(
    clients: &Arc<Clients>,
    port: u16,
    host: &'static str,
    pid: u32,
    loops: usize,
    seconds: f64,
) -> Result<Run> {
    let start = Instant::now();
    let measure_from = start + Duration::from_millis(500);
    let end = measure_from + Duration::from_secs_f64(seconds);
    let mut tasks = Vec::new();
    for _ in 0..loops {
        let clients = clients.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed) = (0u64, 0u64);
            let mut buf = Vec::with_capacity(1024);
            let connector = clients.connector(host);
            while Instant::now() < end {
                let answer = tokio::time::timeout(
                    Duration::from_secs(5),
                    one(connector, port, host, &mut buf),
                )
                .await;
                if Instant::now() < measure_from {
                    continue;
                }
                match answer {
                    Ok(Ok(true)) => ok += 1,
                    _ => failed += 1,
                }
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_before = teapot_testkit::procfs::cpu_seconds(pid)?;
    let (mut ok, mut failed) = (0, 0);
    for task in tasks {
        let (o, f) = task.await?;
        ok += o;
        failed += f;
    }
    let cpu = teapot_testkit::procfs::cpu_seconds(pid)? - cpu_before;
    Ok(Run {
        handshakes_per_s: ok as f64 / seconds,
        cpu_us_per_handshake: if ok == 0 { 0.0 } else { cpu * 1e6 / ok as f64 },
        failed,
    })
}

fn teapot_manifests(echo: u16, site: &CertifiedPem, client_ca: &TestCa) -> String {
    let ingress = |name: &str, host: &str, annotations: &str| {
        format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: {name}, namespace: bench, annotations: {{{annotations}}}}}
spec:
  ingressClassName: teapot
  tls: [{{hosts: [{host}], secretName: site}}]
  rules:
  - host: {host}
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{number: 80}}}}}}}}]}}
"
        )
    };
    [
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
"
        .to_string(),
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: bench}}
spec:
  ports: [{{name: http, port: 80, targetPort: {echo}}}]
"
        ),
        format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: bench, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: http, port: {echo}, protocol: TCP}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]
"
        ),
        tls_secret_yaml("bench", "site", site),
        ca_secret_yaml("bench", "client-ca", client_ca.cert_pem()),
        ingress("plain", PLAIN_HOST, ""),
        ingress(
            "mtls",
            MTLS_HOST,
            "nginx.ingress.kubernetes.io/auth-tls-secret: bench/client-ca",
        ),
    ]
    .join("---\n")
}

fn nginx_conf(dir: &Path, threads: usize, port: u16, echo: u16) -> String {
    let d = dir.display();
    let preamble = teapot_benches::peers::nginx_preamble(dir, threads, "warn");
    let tls = format!(
        "ssl_certificate {d}/site.pem; ssl_certificate_key {d}/site.key;
    ssl_protocols TLSv1.3; ssl_session_cache off; ssl_session_tickets off;"
    );
    let proxy =
        "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_set_header Host $host;";
    format!(
        "{preamble}  upstream echo {{ server 127.0.0.1:{echo}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port} ssl;
    server_name {PLAIN_HOST};
    {tls}
    location / {{ proxy_pass http://echo; {proxy} }}
  }}
  server {{
    listen 127.0.0.1:{port} ssl;
    server_name {MTLS_HOST};
    {tls}
    ssl_verify_client on;
    ssl_client_certificate {d}/client-ca.pem;
    location / {{ proxy_pass http://echo; {proxy} }}
  }}
}}
"
    )
}

/// HAProxy verifies client certificates per `bind`: one port per host.
fn haproxy_conf(dir: &Path, threads: usize, plain: u16, mtls: u16, echo: u16) -> String {
    let d = dir.display();
    format!(
        "global
  nbthread {threads}
  maxconn 20000
  no strict-limits
  ssl-default-bind-options ssl-min-ver TLSv1.3 no-tls-tickets
  tune.ssl.cachesize 0
defaults
  mode http
  timeout connect 3s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
  http-reuse always
frontend plain
  bind 127.0.0.1:{plain} ssl crt {d}/site.bundle.pem alpn http/1.1
  default_backend echo
frontend mtls
  bind 127.0.0.1:{mtls} ssl crt {d}/site.bundle.pem alpn http/1.1 verify required ca-file {d}/client-ca.pem
  default_backend echo
backend echo
  server e1 127.0.0.1:{echo}
"
    )
}

/// Waits until `host` on `port` answers 200 through the proxy.
async fn wait_serving(clients: &Clients, port: u16, host: &'static str) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut buf = Vec::new();
    loop {
        if let Ok(Ok(true)) = tokio::time::timeout(
            Duration::from_secs(5),
            one(clients.connector(host), port, host, &mut buf),
        )
        .await
        {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!(
                "{host} on port {port} does not answer 200: {}",
                String::from_utf8_lossy(&buf)
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let tools = peers::ensure(&[peers::NGINX, peers::HAPROXY], !args.no_install)?;
    let teapot_bin = peers::teapot_bin(args.teapot.as_deref());
    let dir = tempfile::Builder::new()
        .prefix("client-cert-bench-")
        .tempdir()?;
    let server_ca = TestCa::new("bench server CA");
    let client_ca = TestCa::new("bench client CA");
    let site = server_ca.issue(&[PLAIN_HOST, MTLS_HOST]);
    let client = client_ca.issue_client("bench-client");
    let write = |name: &str, text: &str| std::fs::write(dir.path().join(name), text);
    write("site.pem", &site.cert_pem)?;
    write("site.key", &site.key_pem)?;
    write(
        "site.bundle.pem",
        &format!("{}{}", site.cert_pem, site.key_pem),
    )?;
    write("client-ca.pem", client_ca.cert_pem())?;
    for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.path().join(sub))?;
    }

    let echo = EchoServer::start(EchoIdentity::new("bench", "", "echo", "echo-0")).await?;
    let echo_port = echo.addr().port();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests)?;
    std::fs::write(
        manifests.join("bench.yaml"),
        teapot_manifests(echo_port, &site, &client_ca),
    )?;
    let threads = args.threads.to_string();
    let teapot = ProxyProcess::start(
        &teapot_bin,
        &manifests,
        &["--threads", &threads, "--max-connections-per-client", "0"],
    )
    .await
    .context("starting teapot proxy")?;
    let nginx_port = peers::free_port()?;
    let nginx = Peer::start(
        PeerKind::Nginx,
        &tools[0],
        dir.path(),
        &nginx_conf(dir.path(), args.threads, nginx_port, echo_port),
    )?;
    let (h_plain, h_mtls) = (peers::free_port()?, peers::free_port()?);
    let haproxy = Peer::start(
        PeerKind::Haproxy,
        &tools[1],
        dir.path(),
        &haproxy_conf(dir.path(), args.threads, h_plain, h_mtls, echo_port),
    )?;
    let clients = Arc::new(Clients::new(&server_ca, &client)?);
    // (target, host) -> (port, pid)
    let endpoint = |target: Target, host: &str| -> Result<(u16, u32)> {
        Ok(match target {
            Target::Teapot => (teapot.https.port(), teapot.pid()),
            Target::Nginx => (nginx_port, nginx.pid().context("nginx exited")?),
            Target::Haproxy => (
                if host == MTLS_HOST { h_mtls } else { h_plain },
                haproxy.pid().context("haproxy exited")?,
            ),
        })
    };
    let targets = [Target::Teapot, Target::Nginx, Target::Haproxy];
    for target in targets {
        for host in [PLAIN_HOST, MTLS_HOST] {
            let (port, _) = endpoint(target, host)?;
            wait_serving(&clients, port, host)
                .await
                .with_context(|| format!("{} {host}", target.name()))?;
        }
        // Without the certificate, mtls.bench must refuse: the bench
        // measures verification, not a host that skips it.
        let (port, _) = endpoint(target, MTLS_HOST)?;
        let mut buf = Vec::new();
        let refused = one(&clients.plain, port, MTLS_HOST, &mut buf).await;
        if matches!(refused, Ok(true)) {
            bail!(
                "{} serves {MTLS_HOST} without a client certificate",
                target.name()
            );
        }
    }

    let mut runs: BTreeMap<(&str, Target), Vec<Run>> = BTreeMap::new();
    for round in 0..args.rounds {
        for i in 0..targets.len() {
            let target = targets[(i + round) % targets.len()];
            for host in [PLAIN_HOST, MTLS_HOST] {
                let (port, pid) = endpoint(target, host)?;
                let run = measure(&clients, port, host, pid, args.clients, args.seconds).await?;
                eprintln!(
                    "round {round} {:<7} {host:<11} {:>8.0} handshakes/s {:>6.0} µs CPU each, {} failed",
                    target.name(),
                    run.handshakes_per_s,
                    run.cpu_us_per_handshake,
                    run.failed
                );
                runs.entry((host, target)).or_default().push(run);
            }
        }
    }

    let med = |host: &str, target: Target, f: fn(&Run) -> f64| {
        median(runs[&(host, target)].iter().map(f))
    };
    let mut results = serde_json::Map::new();
    println!(
        "{:<11} {:<7} {:>12} {:>10} {:>14} {:>14}",
        "host", "target", "handshakes/s", "µs CPU", "teapot/peer hs", "peer/teapot CPU"
    );
    for host in [PLAIN_HOST, MTLS_HOST] {
        let mut per_target = serde_json::Map::new();
        let teapot_hs = med(host, Target::Teapot, |r| r.handshakes_per_s);
        let teapot_cpu = med(host, Target::Teapot, |r| r.cpu_us_per_handshake);
        for target in targets {
            let hs = med(host, target, |r| r.handshakes_per_s);
            let cpu = med(host, target, |r| r.cpu_us_per_handshake);
            let failed: u64 = runs[&(host, target)].iter().map(|r| r.failed).sum();
            let (ratio_hs, ratio_cpu) = (teapot_hs / hs, cpu / teapot_cpu);
            println!(
                "{host:<11} {:<7} {hs:>12.0} {cpu:>10.0} {ratio_hs:>14.2} {ratio_cpu:>14.2}",
                target.name()
            );
            per_target.insert(
                target.name().into(),
                json!({
                    "handshakes_per_s": hs,
                    "cpu_us_per_handshake": cpu,
                    "failed": failed,
                    "teapot_handshakes_over_this": ratio_hs,
                    "this_cpu_over_teapot": ratio_cpu,
                    "rounds": runs[&(host, target)].iter().map(|r| json!({
                        "handshakes_per_s": r.handshakes_per_s,
                        "cpu_us_per_handshake": r.cpu_us_per_handshake,
                        "failed": r.failed,
                    })).collect::<Vec<_>>(),
                }),
            );
        }
        let key = if host == MTLS_HOST {
            "client_certificate"
        } else {
            "no_client_certificate"
        };
        results.insert(key.into(), serde_json::Value::Object(per_target));
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let report = json!({
        "date": utc_date(),
        "commit": commit(&repo),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "clients": args.clients,
        "threads": args.threads,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "nginx": peers::version(&tools[0], &["-v"]),
        "haproxy": peers::version(&tools[1], &["-v"]),
        "tls": "TLS 1.3, ECDSA P-256 server and client certificates, no resumption; one Connection: close request per handshake",
        "results": results,
    });
    let out = args.out.unwrap_or_else(|| {
        repo.join("benches/results")
            .join(format!("client-cert-{}.json", utc_date()))
    });
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")?;
    eprintln!("wrote {}", out.display());
    nginx.stop().await;
    haproxy.stop().await;
    echo.stop().await;
    drop(teapot);
    Ok(())
}
