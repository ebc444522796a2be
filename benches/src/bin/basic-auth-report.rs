//! Basic authentication: teapot against nginx, in one run, in front of the
//! same backend.
//!
//! Both proxies serve three hosts over cleartext HTTP/1.1: `open.bench`
//! (no authentication: the reference), `a.bench` and `b.bench`, each a
//! tenant of its own (teapot: an Ingress with `auth-type: basic` and
//! `auth-secret` in namespaces `tenant-a` and `tenant-b`; nginx:
//! `auth_basic` + `auth_basic_user_file`), all with the same htpasswd
//! line, a bcrypt hash of cost 5 (`htpasswd -B`'s default).
//!
//! Two measurements, their rounds interleaving the proxies:
//!
//! - **cost**: wrk (`--connections`, one thread) sends the same valid
//!   `Authorization` to `open.bench` and to `b.bench`; requests/s and the
//!   proxy's process tree's CPU (`/proc`) per request, with and without
//!   authentication. teapot checks a credential once and then finds it in
//!   its cache; nginx runs `crypt(3)` (bcrypt) on every request, as it has
//!   no cache.
//! - **flood**: a steady wrk load on `b.bench` with the valid password
//!   (`--b-connections`), alone and then while a second wrk floods
//!   `a.bench` with a wrong password from `--flood-connections`
//!   connections; `b.bench`'s p50/p99 and requests/s both ways, and their
//!   ratio.
//!
//! The proxies (every thread, nginx's master and worker) are pinned to
//! `--proxy-cpu`, the load generators and the echo backend (this process)
//! to `--client-cpu`. Results go to `benches/results/basic-auth-DATE.json`
//! (benches/http.md, "Basic authentication").
//!
//! Run after `cargo build --release -p teapot --bin teapot -p
//! teapot-benches --bin basic-auth-report`:
//! `target/release/basic-auth-report [--rounds 3 --seconds 5]`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_benches::peers::{self, Peer, PeerKind};
use teapot_benches::results::{commit, utc_date};
use teapot_benches::stats::median;
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::process::ProxyProcess;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const OPEN_HOST: &str = "open.bench";
const A_HOST: &str = "a.bench";
const B_HOST: &str = "b.bench";
const USER: &str = "bench";
const PASSWORD: &str = "s3cret";
/// `bench:s3cret`, bcrypt cost 5 (what `htpasswd -B` writes by default);
/// fixed, so that the bench needs no hashing code of its own.
const HASH: &str = "$2y$05$benchbasicauthsaltsale0D8w2t3zUbfuy/Tp9v.Bu2kHAbHvaQ6";
const REALM: &str = "bench";

#[derive(Parser, Debug)]
#[command(
    about = "Basic authentication: CPU per request and a brute-force flood, teapot and nginx"
)]
struct Args {
    /// Interleaved rounds.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 5)]
    seconds: u64,
    /// wrk connections of the cost measurement.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// wrk connections of tenant B's steady load.
    #[arg(long, default_value_t = 4)]
    b_connections: usize,
    /// wrk connections of the wrong-password flood on tenant A.
    #[arg(long, default_value_t = 64)]
    flood_connections: usize,
    /// Worker processes/threads of every proxy.
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The CPU the proxies are pinned to.
    #[arg(long, default_value_t = 1)]
    proxy_cpu: usize,
    /// The CPU the load generators and the backend are pinned to.
    #[arg(long, default_value_t = 0)]
    client_cpu: usize,
    /// Fail instead of running apt-get when nginx or wrk is missing.
    #[arg(long)]
    no_install: bool,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// Output file (default: benches/results/basic-auth-DATE.json).
    #[arg(long)]
    out: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Teapot,
    Nginx,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Teapot => "teapot",
            Target::Nginx => "nginx",
        }
    }
}

/// What one wrk run reported.
#[derive(Clone, Debug, Default)]
struct Wrk {
    requests: f64,
    req_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
    non_2xx: f64,
    errors: f64,
}

impl Wrk {
    fn json(&self) -> Value {
        json!({
            "requests": self.requests,
            "req_per_s": self.req_per_s,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "non_2xx": self.non_2xx,
            "errors": self.errors,
        })
    }
}

/// `Authorization: Basic` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}").into_bytes();
    let mut out = String::from("Basic ");
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// Pins `pid`'s threads and its children's (nginx's worker) to `cpu`.
fn pin(pid: u32, cpu: usize) -> Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-cp", &cpu.to_string(), &pid.to_string()])
        .stdout(std::process::Stdio::null())
        .status()
        .context("taskset")?;
    if !status.success() {
        bail!("taskset -a -cp {cpu} {pid}: {status}");
    }
    let children =
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    for child in children.split_whitespace().filter_map(|c| c.parse().ok()) {
        pin(child, cpu)?;
    }
    Ok(())
}

/// wrk on `host` at `port` for `seconds`, pinned to `cpu`, every request
/// with `authorization`.
async fn wrk(
    bin: &Path,
    cpu: usize,
    port: u16,
    host: &str,
    authorization: &str,
    connections: usize,
    seconds: u64,
) -> Result<Wrk> {
    let out = tokio::process::Command::new("taskset")
        .args(["-c", &cpu.to_string()])
        .arg(bin)
        .args([
            "-t",
            "1",
            "-c",
            &connections.to_string(),
            "-d",
            &format!("{seconds}s"),
            "--latency",
            "-H",
            &format!("Host: {host}"),
            "-H",
            &format!("Authorization: {authorization}"),
        ])
        .arg(format!("http://127.0.0.1:{port}/"))
        .kill_on_drop(true)
        .output()
        .await?;
    let text = String::from_utf8_lossy(&out.stdout);
    parse_wrk(&text).with_context(|| format!("wrk output: {text}"))
}

fn parse_duration_ms(s: &str) -> Option<f64> {
    let (number, scale) = if let Some(v) = s.strip_suffix("us") {
        (v, 1e-3)
    } else if let Some(v) = s.strip_suffix("ms") {
        (v, 1.0)
    } else if let Some(v) = s.strip_suffix('s') {
        (v, 1e3)
    } else {
        return None;
    };
    number.parse::<f64>().ok().map(|v| v * scale)
}

fn parse_wrk(text: &str) -> Result<Wrk> {
    let mut w = Wrk::default();
    let mut seen = false;
    let mut in_dist = false;
    for line in text.lines().map(str::trim) {
        if line.starts_with("Latency Distribution") {
            in_dist = true;
            continue;
        }
        if in_dist {
            let mut it = line.split_whitespace();
            match (it.next(), it.next().and_then(parse_duration_ms)) {
                (Some("50%"), Some(ms)) => w.p50_ms = ms,
                (Some("99%"), Some(ms)) => w.p99_ms = ms,
                (Some("75%" | "90%"), _) => {}
                _ => in_dist = false,
            }
        }
        if let Some((n, _)) = line.split_once(" requests in ") {
            w.requests = n.trim().parse()?;
        }
        if let Some(r) = line.strip_prefix("Requests/sec:") {
            w.req_per_s = r.trim().parse()?;
            seen = true;
        }
        if let Some(r) = line.strip_prefix("Non-2xx or 3xx responses:") {
            w.non_2xx = r.trim().parse()?;
        }
        if let Some(r) = line.strip_prefix("Socket errors:") {
            w.errors = r
                .split(',')
                .filter_map(|f| f.split_whitespace().nth(1)?.parse::<f64>().ok())
                .sum();
        }
    }
    if !seen {
        bail!("no Requests/sec line");
    }
    Ok(w)
}

fn teapot_manifests(echo: u16) -> String {
    let mut docs = vec![
        "apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
"
        .to_string(),
    ];
    for (ns, host, auth) in [
        ("open", OPEN_HOST, false),
        ("tenant-a", A_HOST, true),
        ("tenant-b", B_HOST, true),
    ] {
        docs.push(format!(
            "apiVersion: v1
kind: Service
metadata: {{name: echo, namespace: {ns}}}
spec:
  ports: [{{name: http, port: 80, targetPort: {echo}}}]
"
        ));
        docs.push(format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: echo-1, namespace: {ns}, labels: {{kubernetes.io/service-name: echo}}}}
addressType: IPv4
ports: [{{name: http, port: {echo}, protocol: TCP}}]
endpoints: [{{addresses: [\"127.0.0.1\"], conditions: {{ready: true}}}}]
"
        ));
        let annotations = if auth {
            docs.push(format!(
                "apiVersion: v1
kind: Secret
type: Opaque
metadata: {{name: users, namespace: {ns}}}
stringData:
  auth: '{USER}:{HASH}'
"
            ));
            format!(
                "nginx.ingress.kubernetes.io/auth-type: basic, \
                 nginx.ingress.kubernetes.io/auth-secret: users, \
                 nginx.ingress.kubernetes.io/auth-realm: {REALM}"
            )
        } else {
            String::new()
        };
        docs.push(format!(
            "apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: site, namespace: {ns}, annotations: {{{annotations}}}}}
spec:
  ingressClassName: teapot
  rules:
  - host: {host}
    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: echo, port: {{number: 80}}}}}}}}]}}
"
        ));
    }
    docs.join("---\n")
}

fn nginx_conf(dir: &Path, threads: usize, port: u16, echo: u16) -> String {
    let d = dir.display();
    let proxy =
        "proxy_http_version 1.1; proxy_set_header Connection \"\"; proxy_set_header Host $host;";
    let preamble = teapot_benches::peers::nginx_preamble(dir, threads, "crit");
    let auth = format!("auth_basic \"{REALM}\"; auth_basic_user_file {d}/htpasswd;");
    format!(
        "{preamble}  upstream echo {{ server 127.0.0.1:{echo}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    server_name {OPEN_HOST};
    location / {{ proxy_pass http://echo; {proxy} }}
  }}
  server {{
    listen 127.0.0.1:{port};
    server_name {A_HOST};
    location / {{ {auth} proxy_pass http://echo; {proxy} }}
  }}
  server {{
    listen 127.0.0.1:{port};
    server_name {B_HOST};
    location / {{ {auth} proxy_pass http://echo; {proxy} }}
  }}
}}
"
    )
}

/// The status of one `GET /` to `host` with `authorization`.
async fn status(port: u16, host: &str, authorization: Option<&str>) -> Result<u16> {
    let mut conn = TcpStream::connect(("127.0.0.1", port)).await?;
    let auth = authorization
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    let request = format!("GET / HTTP/1.1\r\nHost: {host}\r\n{auth}Connection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await?;
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), conn.read_to_end(&mut answer)).await??;
    let line = String::from_utf8_lossy(&answer);
    line.get(9..12)
        .and_then(|s| s.parse().ok())
        .with_context(|| format!("no status line: {line:?}"))
}

/// Waits until the proxy at `port` serves `host` with the password, and
/// checks that the authenticated hosts refuse a missing or wrong one: the
/// bench measures a check, not a host that skips it.
async fn wait_serving(target: Target, port: u16, good: &str, bad: &str) -> Result<()> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    for host in [OPEN_HOST, A_HOST, B_HOST] {
        loop {
            match status(port, host, Some(good)).await {
                Ok(200) => break,
                answer if std::time::Instant::now() > deadline => {
                    bail!("{} {host}: {answer:?}", target.name())
                }
                _ => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
    for host in [A_HOST, B_HOST] {
        for auth in [None, Some(bad)] {
            let got = status(port, host, auth).await?;
            if got != 401 {
                bail!(
                    "{} {host} answers {got} to {auth:?}, not 401",
                    target.name()
                );
            }
        }
    }
    Ok(())
}

fn main() -> Result<()> {
    let args = Args::parse();
    // Before the runtime: every thread this process starts (the echo
    // backend's, wrk) inherits the client CPU; the proxies are moved off it.
    pin(std::process::id(), args.client_cpu)?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()?
        .block_on(run(args))
}

async fn run(args: Args) -> Result<()> {
    let tools = peers::ensure(&[peers::NGINX, peers::WRK], !args.no_install)?;
    let (nginx_bin, wrk_bin) = (&tools[0], &tools[1]);
    let teapot_bin = peers::teapot_bin(args.teapot.as_deref());
    let dir = tempfile::Builder::new()
        .prefix("basic-auth-bench-")
        .tempdir()?;
    std::fs::write(dir.path().join("htpasswd"), format!("{USER}:{HASH}\n"))?;
    for sub in ["body", "proxy", "fastcgi", "uwsgi", "scgi"] {
        std::fs::create_dir_all(dir.path().join(sub))?;
    }
    let echo = EchoServer::start(EchoIdentity::new("bench", "", "echo", "echo-0")).await?;
    let echo_port = echo.addr().port();
    let manifests = dir.path().join("manifests");
    std::fs::create_dir(&manifests)?;
    std::fs::write(manifests.join("bench.yaml"), teapot_manifests(echo_port))?;
    let threads = args.threads.to_string();
    let teapot = ProxyProcess::start(
        &teapot_bin,
        &manifests,
        &["--threads", &threads, "--max-connections-per-client", "0"],
    )
    .await
    .context("starting teapot proxy")?;
    pin(teapot.pid(), args.proxy_cpu)?;
    let nginx_port = peers::free_port()?;
    let nginx = Peer::start(
        PeerKind::Nginx,
        nginx_bin,
        dir.path(),
        &nginx_conf(dir.path(), args.threads, nginx_port, echo_port),
    )?;
    peers::wait_port(nginx_port).await?;
    pin(nginx.pid().context("nginx exited")?, args.proxy_cpu)?;

    let good = basic(USER, PASSWORD);
    let bad = basic(USER, "not-the-password");
    let endpoint = |target: Target| -> Result<(u16, u32)> {
        Ok(match target {
            Target::Teapot => (teapot.http.port(), teapot.pid()),
            Target::Nginx => (nginx_port, nginx.pid().context("nginx exited")?),
        })
    };
    let targets = [Target::Teapot, Target::Nginx];
    for target in targets {
        let (port, _) = endpoint(target)?;
        wait_serving(target, port, &good, &bad).await?;
    }
    let cpu_us_per_request = |cpu: f64, w: &Wrk| {
        if w.requests > 0.0 {
            cpu * 1e6 / w.requests
        } else {
            0.0
        }
    };
    // (measurement, target) -> per round
    let mut cost: BTreeMap<(&str, Target), Vec<(Wrk, f64)>> = BTreeMap::new();
    let mut flood: BTreeMap<(&str, Target), Vec<Wrk>> = BTreeMap::new();
    let mut flood_load: BTreeMap<Target, Vec<(Wrk, f64)>> = BTreeMap::new();
    let s = args.seconds;
    for round in 0..args.rounds {
        for i in 0..targets.len() {
            let target = targets[(i + round) % targets.len()];
            let (port, pid) = endpoint(target)?;
            for (name, host) in [("no_auth", OPEN_HOST), ("basic_auth", B_HOST)] {
                let before = peers::cpu_seconds(pid)?;
                let w = wrk(
                    wrk_bin,
                    args.client_cpu,
                    port,
                    host,
                    &good,
                    args.connections,
                    s,
                )
                .await?;
                let cpu = cpu_us_per_request(peers::cpu_seconds(pid)? - before, &w);
                eprintln!(
                    "round {round} {:<6} {name:<10} {:>8.0} req/s {:>6.1} µs CPU each, {} non-2xx, {} errors",
                    target.name(),
                    w.req_per_s,
                    cpu,
                    w.non_2xx,
                    w.errors
                );
                cost.entry((name, target)).or_default().push((w, cpu));
            }
            let quiet = wrk(
                wrk_bin,
                args.client_cpu,
                port,
                B_HOST,
                &good,
                args.b_connections,
                s,
            )
            .await?;
            // The flood starts a second before B's load and ends a second
            // after it.
            let before = peers::cpu_seconds(pid)?;
            let flooding = tokio::spawn({
                let (wrk_bin, bad) = (wrk_bin.clone(), bad.clone());
                let (cpu, connections) = (args.client_cpu, args.flood_connections);
                async move { wrk(&wrk_bin, cpu, port, A_HOST, &bad, connections, s + 2).await }
            });
            tokio::time::sleep(Duration::from_secs(1)).await;
            let loud = wrk(
                wrk_bin,
                args.client_cpu,
                port,
                B_HOST,
                &good,
                args.b_connections,
                s,
            )
            .await?;
            let flood_run = flooding.await??;
            let cpu = cpu_us_per_request(peers::cpu_seconds(pid)? - before, &flood_run);
            eprintln!(
                "round {round} {:<6} b.bench p50 {:.2} ms p99 {:.2} ms {:.0} req/s alone; p50 {:.2} ms p99 {:.2} ms {:.0} req/s ({} errors) beside a flood of {:.0} req/s ({} non-2xx)",
                target.name(),
                quiet.p50_ms,
                quiet.p99_ms,
                quiet.req_per_s,
                loud.p50_ms,
                loud.p99_ms,
                loud.req_per_s,
                loud.errors,
                flood_run.req_per_s,
                flood_run.non_2xx,
            );
            flood.entry(("alone", target)).or_default().push(quiet);
            flood.entry(("flooded", target)).or_default().push(loud);
            flood_load.entry(target).or_default().push((flood_run, cpu));
            // Let the flood's connections close before the next target.
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    let mut cost_json = serde_json::Map::new();
    println!(
        "{:<6} {:>14} {:>14} {:>16} {:>16} {:>12}",
        "target", "req/s no auth", "req/s auth", "µs CPU no auth", "µs CPU auth", "auth / none"
    );
    let mut cpu_auth = BTreeMap::new();
    let mut rps_auth = BTreeMap::new();
    for target in targets {
        let m = |name: &str, f: fn(&(Wrk, f64)) -> f64| median(cost[&(name, target)].iter().map(f));
        let (rps_open, rps_b) = (
            m("no_auth", |r| r.0.req_per_s),
            m("basic_auth", |r| r.0.req_per_s),
        );
        let (cpu_open, cpu_b) = (m("no_auth", |r| r.1), m("basic_auth", |r| r.1));
        cpu_auth.insert(target, cpu_b);
        rps_auth.insert(target, rps_b);
        println!(
            "{:<6} {rps_open:>14.0} {rps_b:>14.0} {cpu_open:>16.1} {cpu_b:>16.1} {:>12.2}",
            target.name(),
            cpu_b / cpu_open
        );
        let rounds = |name: &str| {
            cost[&(name, target)]
                .iter()
                .map(|(w, cpu)| {
                    let mut v = w.json();
                    v["cpu_us_per_request"] = json!(cpu);
                    v
                })
                .collect::<Vec<_>>()
        };
        cost_json.insert(
            target.name().into(),
            json!({
                "no_auth": {"req_per_s": rps_open, "cpu_us_per_request": cpu_open, "rounds": rounds("no_auth")},
                "basic_auth": {"req_per_s": rps_b, "cpu_us_per_request": cpu_b, "rounds": rounds("basic_auth")},
                "auth_cpu_over_no_auth": cpu_b / cpu_open,
            }),
        );
    }
    let nginx_cpu_over_teapot = cpu_auth[&Target::Nginx] / cpu_auth[&Target::Teapot];
    let teapot_rps_over_nginx = rps_auth[&Target::Teapot] / rps_auth[&Target::Nginx];
    println!(
        "basic auth: nginx's CPU per request / teapot's {nginx_cpu_over_teapot:.2}, teapot's req/s / nginx's {teapot_rps_over_nginx:.2}"
    );

    let mut flood_json = serde_json::Map::new();
    println!(
        "{:<6} {:>12} {:>12} {:>14} {:>14} {:>10} {:>10}",
        "target",
        "B p50 alone",
        "B p99 alone",
        "B p50 flooded",
        "B p99 flooded",
        "p99 ratio",
        "B req/s %"
    );
    for target in targets {
        let m = |name: &str, f: fn(&Wrk) -> f64| median(flood[&(name, target)].iter().map(f));
        let (p50a, p99a, rpsa) = (
            m("alone", |w| w.p50_ms),
            m("alone", |w| w.p99_ms),
            m("alone", |w| w.req_per_s),
        );
        let (p50f, p99f, rpsf) = (
            m("flooded", |w| w.p50_ms),
            m("flooded", |w| w.p99_ms),
            m("flooded", |w| w.req_per_s),
        );
        let load = &flood_load[&target];
        let flood_rps = median(load.iter().map(|(w, _)| w.req_per_s));
        let flood_cpu = median(load.iter().map(|(_, c)| *c));
        println!(
            "{:<6} {p50a:>12.2} {p99a:>12.2} {p50f:>14.2} {p99f:>14.2} {:>10.2} {:>10.0}",
            target.name(),
            p99f / p99a,
            100.0 * rpsf / rpsa
        );
        flood_json.insert(
            target.name().into(),
            json!({
                "b_alone": {"p50_ms": p50a, "p99_ms": p99a, "req_per_s": rpsa,
                    "rounds": flood[&("alone", target)].iter().map(Wrk::json).collect::<Vec<_>>()},
                "b_flooded": {"p50_ms": p50f, "p99_ms": p99f, "req_per_s": rpsf,
                    "rounds": flood[&("flooded", target)].iter().map(Wrk::json).collect::<Vec<_>>()},
                "b_p50_flooded_over_alone": p50f / p50a,
                "b_p99_flooded_over_alone": p99f / p99a,
                "b_req_per_s_flooded_over_alone": rpsf / rpsa,
                "flood_on_a": {"req_per_s": flood_rps,
                    "proxy_cpu_us_per_flood_request": flood_cpu,
                    "rounds": load.iter().map(|(w, _)| w.json()).collect::<Vec<_>>()},
            }),
        );
    }

    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let report = json!({
        "date": utc_date(),
        "commit": commit(&repo),
        "command": std::env::args().collect::<Vec<_>>().join(" "),
        "rounds": args.rounds,
        "seconds": args.seconds,
        "connections": args.connections,
        "b_connections": args.b_connections,
        "flood_connections": args.flood_connections,
        "threads": args.threads,
        "proxy_cpu": args.proxy_cpu,
        "client_cpu": args.client_cpu,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0),
        "nginx": peers::version(nginx_bin, &["-v"]),
        "wrk": peers::version(wrk_bin, &["-v"]),
        "htpasswd": "one user, bcrypt cost 5 ($2y$, htpasswd -B's default); nginx checks it with crypt(3) on every request, teapot once and then from its cache",
        "cost": cost_json,
        "basic_auth_nginx_cpu_over_teapot": nginx_cpu_over_teapot,
        "basic_auth_teapot_req_per_s_over_nginx": teapot_rps_over_nginx,
        "flood": flood_json,
    });
    let out = args.out.unwrap_or_else(|| {
        repo.join("benches/results")
            .join(format!("basic-auth-{}.json", utc_date()))
    });
    std::fs::write(&out, serde_json::to_string_pretty(&report)? + "\n")?;
    eprintln!("wrote {}", out.display());
    nginx.stop().await;
    echo.stop().await;
    drop(teapot);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_basic_credentials() {
        assert_eq!(basic("bench", "s3cret"), "Basic YmVuY2g6czNjcmV0");
        assert_eq!(basic("a", "b"), "Basic YTpi");
    }

    #[test]
    fn parses_wrk() {
        let text = "Running 5s test @ http://127.0.0.1:8080/
  1 threads and 4 connections
  Latency Distribution
     50%  210.00us
     75%  300.00us
     90%    1.10ms
     99%    2.50ms
  12345 requests in 5.00s, 1.00MB read
  Non-2xx or 3xx responses: 7
Requests/sec:   2469.00
";
        let w = parse_wrk(text).unwrap();
        assert_eq!(w.requests, 12345.0);
        assert_eq!(w.req_per_s, 2469.0);
        assert_eq!(w.non_2xx, 7.0);
        assert!((w.p50_ms - 0.21).abs() < 1e-9);
        assert!((w.p99_ms - 2.5).abs() < 1e-9);
        assert!(parse_wrk("nothing").is_err());
    }
}
