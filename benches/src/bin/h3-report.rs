//! HTTP/3 side by side: teapot `--http3`, Caddy and the bare quinn + h3
//! floor (benches/examples/floor_h3.rs) in one run, one worker each, in
//! front of one nginx backend, loaded by the HTTP/3 load generator of
//! `teapot_benches::h3load` in rounds whose target order rotates:
//!
//! - `keep-alive`: `--connections` QUIC connections with `--streams`
//!   request loops each; requests/s, latency percentiles and the
//!   server's CPU per request (its process CPU time over the counted
//!   window, from /proc);
//! - `handshakes`: `--handshake-clients` loops of a new connection (full
//!   TLS 1.3 handshake, no resumption) per request; handshakes/s and CPU
//!   per handshake;
//! - `idle`: `--idle-connections` connections, one request each, then
//!   held open (the client PINGs every 5 s); the growth of the server's
//!   RSS per connection.
//!
//! With pinning (the default on 2+ CPUs) this process, its load and the
//! backend run on CPU 0 and every server under test on CPU 1. Writes the
//! raw rounds, medians and ratios as JSON. See benches/http.md, "HTTP/3".

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_benches::h3load::{self, H3Conn, LoadResult, Window};
use teapot_benches::idle::{idle_memory, raise_descriptor_limit};
use teapot_benches::peers::{self, Peer, PeerKind};
use teapot_benches::results;
use teapot_benches::stats::median;
use teapot_testkit::certs;
use teapot_testkit::process::ProxyProcess;
use tokio::process::Command;

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const HOST: &str = "bench.example";
const PATH: &str = "/hello.txt";

#[derive(Parser, Debug)]
#[command(about = "HTTP/3 side by side: teapot --http3, Caddy and the quinn + h3 floor")]
struct Args {
    /// Rounds of each rotated test.
    #[arg(long, default_value_t = 5)]
    rounds: usize,
    /// Seconds counted per run (after the warm-up).
    #[arg(long, default_value_t = 8.0)]
    seconds: f64,
    /// Seconds of load before counting starts.
    #[arg(long, default_value_t = 2.0)]
    warm_up: f64,
    /// `keep-alive` connections.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Request loops per `keep-alive` connection (requests in flight).
    #[arg(long, default_value_t = 8)]
    streams: usize,
    /// Loops of a new connection per request in `handshakes`.
    #[arg(long, default_value_t = 16)]
    handshake_clients: usize,
    /// Connections held open in `idle`.
    #[arg(long, default_value_t = 2000)]
    idle_connections: usize,
    /// Tests to run: keep-alive, handshakes, idle.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "keep-alive,handshakes,idle"
    )]
    only: Vec<String>,
    /// Targets: teapot, teapot-base (with --base), caddy, floor, floor-proxy.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "teapot,caddy,floor,floor-proxy"
    )]
    targets: Vec<String>,
    /// Body bytes the backend (and the floor) answers.
    #[arg(long, default_value_t = 128)]
    body: usize,
    /// The teapot binary (default: the one beside this binary).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// A second teapot binary, target `teapot-base` (an earlier commit,
    /// measured in the same run with the same flags).
    #[arg(long)]
    base: Option<PathBuf>,
    /// The floor_h3 example (default: examples/floor_h3 beside this binary).
    #[arg(long)]
    floor: Option<PathBuf>,
    /// teapot's serving threads (each with its HTTP/3 endpoint; pinned,
    /// all on the servers' CPU).
    #[arg(long, default_value_t = 1)]
    teapot_threads: usize,
    /// More flags for `teapot proxy`.
    #[arg(long = "teapot-arg", allow_hyphen_values = true)]
    teapot_arg: Vec<String>,
    /// Pin: load and backend on CPU 0, servers on CPU 1 (default: on with
    /// 2+ CPUs).
    #[arg(long)]
    pin: Option<bool>,
    /// Where the JSON goes (default: benches/results/h3-<commit>-<date>.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Target {
    Teapot,
    TeapotBase,
    Caddy,
    Floor,
    FloorProxy,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Teapot => "teapot",
            Target::TeapotBase => "teapot-base",
            Target::Caddy => "caddy",
            Target::Floor => "floor",
            Target::FloorProxy => "floor-proxy",
        }
    }

    fn parse(name: &str) -> anyhow::Result<Target> {
        Ok(match name {
            "teapot" => Target::Teapot,
            "teapot-base" => Target::TeapotBase,
            "caddy" => Target::Caddy,
            "floor" => Target::Floor,
            "floor-proxy" => Target::FloorProxy,
            other => bail!("unknown target {other}"),
        })
    }
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let pin = args
        .pin
        .unwrap_or_else(|| std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2));
    if pin {
        // Before the runtime starts: its threads and every child (the
        // backend) inherit CPU 0; the servers are moved to CPU 1.
        let mut cpus = nix::sched::CpuSet::new();
        cpus.set(0)?;
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &cpus)?;
    }
    raise_descriptor_limit(4 * args.idle_connections as u64 + 4096);
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args, pin))
}

struct Server {
    target: Target,
    addr: SocketAddr,
    pid: u32,
    /// The process's handle: dropping it kills the process.
    _process: Box<dyn std::any::Any>,
}

struct Fleet {
    dir: tempfile::TempDir,
    cert_der: Vec<u8>,
    servers: Vec<Server>,
    _backend: Peer,
    versions: BTreeMap<&'static str, String>,
}

async fn run(args: Args, pin: bool) -> anyhow::Result<()> {
    let targets: Vec<Target> = args
        .targets
        .iter()
        .map(|t| Target::parse(t))
        .collect::<anyhow::Result<_>>()?;
    let load_before = std::fs::read_to_string("/proc/loadavg")?;
    let fleet = start_fleet(&args, &targets, pin).await?;
    eprintln!(
        "servers up ({}), pinned: {pin}; load average {}",
        fleet
            .servers
            .iter()
            .map(|s| format!("{} {}", s.target.name(), s.addr))
            .collect::<Vec<_>>()
            .join(", "),
        load_before.trim()
    );
    // Idle first, on servers that have served nothing yet: a garbage-
    // collected heap (Caddy's) or an allocator's spares (teapot's) left
    // by the load runs would be reused by the idle connections and hide
    // their cost (http-report's `idle-h2` is run alone for that reason).
    let mut idle = serde_json::Map::new();
    if args.only.iter().any(|t| t == "idle") {
        for server in &fleet.servers {
            if server.target == Target::FloorProxy {
                continue;
            }
            let lost = Arc::new(AtomicU64::new(0));
            let endpoint = h3load::endpoint(h3load::client_config(
                &fleet.cert_der,
                Some(Duration::from_secs(5)),
            )?)?;
            let target = load_target(server);
            let m = idle_memory(server.pid, args.idle_connections, || {
                h3load::open_idle(endpoint.clone(), target.clone(), lost.clone())
            })
            .await
            .with_context(|| format!("idle connections to {}", server.target.name()))?;
            // The dropped connections' CONNECTION_CLOSEs go out.
            tokio::time::sleep(Duration::from_millis(200)).await;
            let lost = lost.load(Ordering::Relaxed);
            println!(
                "idle       {:<12} {:>6} connections ({} failed, {lost} closed while held): {:.2} KiB each (RSS {} -> {} KiB; 1 s after closing {}, 12 s after {})",
                server.target.name(),
                m.connections,
                m.failed,
                m.kib_per_connection(),
                m.rss_before_kib,
                m.rss_after_kib,
                m.rss_closed_1s_kib,
                m.rss_closed_kib
            );
            idle.insert(
                server.target.name().into(),
                json!({
                    "connections": m.connections, "failed": m.failed, "closed_while_held": lost,
                    "kib_per_connection": m.kib_per_connection(),
                    "rss_before_kib": m.rss_before_kib, "rss_after_kib": m.rss_after_kib,
                    "rss_closed_1s_kib": m.rss_closed_1s_kib, "rss_closed_kib": m.rss_closed_kib,
                }),
            );
        }
        if let (Some(t), Some(c)) = (idle.get("teapot"), idle.get("caddy")) {
            let (t, c) = (
                t["kib_per_connection"].as_f64().unwrap_or(f64::NAN),
                c["kib_per_connection"].as_f64().unwrap_or(f64::NAN),
            );
            println!(
                "idle       KiB per connection, teapot / caddy: {:.2}",
                t / c
            );
            idle.insert("teapot_over_caddy".into(), json!(t / c));
        }
    }
    let mut rounds: Vec<Value> = Vec::new();
    let mut medians = serde_json::Map::new();
    for test in ["keep-alive", "handshakes"] {
        if !args.only.iter().any(|t| t == test) {
            continue;
        }
        let mut by: BTreeMap<Target, Vec<(f64, f64, f64, f64)>> = BTreeMap::new();
        for round in 0..args.rounds {
            let n = fleet.servers.len();
            for i in 0..n {
                let server = &fleet.servers[(i + round) % n];
                let (result, cpu) = measure(&args, &fleet, server, test).await?;
                let rate = result.per_second();
                let cpu_us = cpu * 1e6 / result.ok.max(1) as f64;
                let (p50, p99) = (result.percentile_ms(0.5), result.percentile_ms(0.99));
                println!(
                    "{test:<10} round {} {:<12} {rate:>9.0}/s {cpu_us:>8.1} us CPU each  p50 {p50:.2} ms  p99 {p99:.2} ms  errors {} non-2xx {} reconnects {}{}",
                    round + 1,
                    server.target.name(),
                    result.errors,
                    result.non_2xx,
                    result.reconnects,
                    result
                        .first_error
                        .as_ref()
                        .map(|e| format!(" ({e})"))
                        .unwrap_or_default()
                );
                by.entry(server.target)
                    .or_default()
                    .push((rate, cpu_us, p50, p99));
                rounds.push(json!({
                    "test": test, "round": round + 1, "target": server.target.name(),
                    "per_s": rate, "cpu_us_each": cpu_us, "cpu_s": cpu,
                    "ok": result.ok, "non_2xx": result.non_2xx, "errors": result.errors,
                    "reconnects": result.reconnects, "seconds": result.seconds,
                    "p50_ms": p50, "p90_ms": result.percentile_ms(0.9), "p99_ms": p99,
                    "first_error": result.first_error,
                }));
            }
        }
        let med: BTreeMap<Target, (f64, f64, f64, f64)> = by
            .iter()
            .map(|(t, v)| {
                (
                    *t,
                    (
                        median(v.iter().map(|x| x.0)),
                        median(v.iter().map(|x| x.1)),
                        median(v.iter().map(|x| x.2)),
                        median(v.iter().map(|x| x.3)),
                    ),
                )
            })
            .collect();
        print_medians(test, &med);
        let mut m = serde_json::Map::new();
        for (t, (rate, cpu, p50, p99)) in &med {
            m.insert(
                t.name().into(),
                json!({"per_s": rate, "cpu_us_each": cpu, "p50_ms": p50, "p99_ms": p99}),
            );
        }
        m.insert("ratios".into(), ratios(&med));
        medians.insert(test.into(), Value::Object(m));
    }
    let load_after = std::fs::read_to_string("/proc/loadavg")?;
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let commit = results::commit(&repo);
    let date = results::utc_date();
    let out = json!({
        "date": date, "commit": commit, "pinned": pin,
        "load_average_before": load_before.trim(), "load_average_after": load_after.trim(),
        "versions": fleet.versions,
        "settings": {
            "rounds": args.rounds, "seconds": args.seconds, "warm_up": args.warm_up,
            "connections": args.connections, "streams": args.streams,
            "handshake_clients": args.handshake_clients, "idle_connections": args.idle_connections,
            "body_bytes": args.body, "teapot_args": args.teapot_arg,
        },
        "rounds": rounds, "medians": medians, "idle": idle,
    });
    let path = args.json.clone().unwrap_or_else(|| {
        repo.join("benches/results")
            .join(format!("h3-{commit}-{date}.json"))
    });
    std::fs::write(&path, serde_json::to_string_pretty(&out)? + "\n")
        .with_context(|| format!("writing {}", path.display()))?;
    println!(
        "load average before {} / after {}",
        load_before.trim(),
        load_after.trim()
    );
    println!("wrote {}", path.display());
    drop(fleet.dir);
    Ok(())
}

/// Oriented so that above 1 teapot is better: requests/s teapot over the
/// other, CPU per request the other's over teapot's (requests per core).
fn ratios(med: &BTreeMap<Target, (f64, f64, f64, f64)>) -> Value {
    let mut out = serde_json::Map::new();
    let Some(&(t_rate, t_cpu, _, _)) = med.get(&Target::Teapot) else {
        return Value::Object(out);
    };
    for (other, &(rate, cpu, _, _)) in med {
        if *other == Target::Teapot {
            continue;
        }
        out.insert(
            other.name().into(),
            json!({"per_s_teapot_over": t_rate / rate, "per_core_teapot_over": cpu / t_cpu,
                   "cpu_each_teapot_over": t_cpu / cpu}),
        );
    }
    Value::Object(out)
}

fn print_medians(test: &str, med: &BTreeMap<Target, (f64, f64, f64, f64)>) {
    println!(
        "\n{test} medians   {:>10} {:>12} {:>8} {:>8} {:>14} {:>16} {:>16}",
        "per s",
        "us CPU each",
        "p50 ms",
        "p99 ms",
        "teapot per s /",
        "teapot per core /",
        "teapot CPU each /"
    );
    let teapot = med.get(&Target::Teapot).copied();
    for (t, &(rate, cpu, p50, p99)) in med {
        let (r1, r2, r3) = teapot.map_or((f64::NAN, f64::NAN, f64::NAN), |(tr, tc, _, _)| {
            (tr / rate, cpu / tc, tc / cpu)
        });
        println!(
            "{:<20} {rate:>10.0} {cpu:>12.1} {p50:>8.2} {p99:>8.2} {r1:>14.2} {r2:>16.2} {r3:>16.2}",
            t.name()
        );
    }
    println!();
}

fn load_target(server: &Server) -> h3load::Target {
    h3load::Target {
        addr: server.addr,
        host: HOST.into(),
        path: PATH.into(),
    }
}

/// One run of `test` against `server`: what the load counted and the
/// server's CPU seconds over the counted window.
async fn measure(
    args: &Args,
    fleet: &Fleet,
    server: &Server,
    test: &str,
) -> anyhow::Result<(LoadResult, f64)> {
    let endpoint = h3load::endpoint(h3load::client_config(&fleet.cert_der, None)?)?;
    let target = load_target(server);
    let window = Window::after(
        Duration::from_secs_f64(args.warm_up),
        Duration::from_secs_f64(args.seconds),
    );
    let load = {
        let (endpoint, target) = (endpoint.clone(), target.clone());
        let (connections, streams, clients) =
            (args.connections, args.streams, args.handshake_clients);
        let test = test.to_string();
        tokio::spawn(async move {
            if test == "keep-alive" {
                h3load::keep_alive(&endpoint, &target, connections, streams, window).await
            } else {
                h3load::handshakes(&endpoint, &target, clients, window).await
            }
        })
    };
    tokio::time::sleep_until(window.from).await;
    let before = peers::cpu_seconds(server.pid)?;
    tokio::time::sleep_until(window.until).await;
    let after = peers::cpu_seconds(server.pid)?;
    let result = load.await??;
    endpoint.close(quinn::VarInt::from_u32(0x100), b"");
    endpoint.wait_idle().await;
    Ok((result, after - before))
}

async fn start_fleet(args: &Args, targets: &[Target], pin: bool) -> anyhow::Result<Fleet> {
    let dir = tempfile::tempdir()?;
    let cert = certs::self_signed(&[HOST]);
    let (cert_pem, key_pem) = (dir.path().join("cert.pem"), dir.path().join("key.pem"));
    std::fs::write(&cert_pem, &cert.cert_pem)?;
    std::fs::write(&key_pem, &cert.key_pem)?;
    let body = "x".repeat(args.body);
    let body_file = dir.path().join("body.txt");
    std::fs::write(&body_file, &body)?;
    let tools = peers::ensure(&[peers::NGINX], false)?;
    let caddy = peers::locate("caddy").context("caddy is not installed (apt-get install caddy)")?;
    let mut versions = BTreeMap::new();
    versions.insert("nginx", peers::version(&tools[0], &["-v"]));
    versions.insert("caddy", peers::version(&caddy, &["version"]));

    // The backend answers from memory, so the load's core is spent on
    // the load.
    let backend_dir = dir.path().join("backend");
    std::fs::create_dir(&backend_dir)?;
    let backend_port = peers::free_port()?;
    let backend_conf = format!(
        "{preamble}  keepalive_requests 1000000;
  server {{
    listen 127.0.0.1:{backend_port};
    location / {{ default_type text/plain; return 200 \"{body}\"; }}
  }}
}}
",
        preamble = peers::nginx_preamble(&backend_dir, 1, "warn"),
        body = body
    );
    let backend = Peer::start(PeerKind::Nginx, &tools[0], &backend_dir, &backend_conf)
        .context("starting the nginx backend")?;
    peers::wait_port(backend_port).await?;

    let mut servers = Vec::new();
    for &target in targets {
        let (addr, pid, process): (SocketAddr, u32, Box<dyn std::any::Any>) = match target {
            Target::Teapot | Target::TeapotBase => {
                let bin = match target {
                    Target::TeapotBase => args
                        .base
                        .clone()
                        .context("target teapot-base needs --base")?,
                    _ => peers::teapot_bin(args.teapot.as_deref()),
                };
                versions.insert(target.name(), peers::version(&bin, &["--version"]));
                let manifests = dir.path().join(format!("manifests-{}", target.name()));
                std::fs::create_dir(&manifests)?;
                std::fs::write(
                    manifests.join("bench.yaml"),
                    h3load::teapot_manifests(backend_port, HOST, &cert),
                )?;
                // Every client of the bench is 127.0.0.1: the per-client
                // cap would refuse the idle run's connections.
                let threads = args.teapot_threads.to_string();
                let mut flags = vec![
                    "--threads",
                    &threads,
                    "--max-connections-per-client",
                    "0",
                    "--http3",
                ];
                flags.extend(args.teapot_arg.iter().map(String::as_str));
                let teapot = ProxyProcess::start(&bin, &manifests, &flags)
                    .await
                    .context("starting teapot proxy --http3")?;
                (teapot.https, teapot.pid(), Box::new(teapot))
            }
            Target::Caddy => {
                let port = peers::free_port()?;
                let caddy_dir = dir.path().join("caddy");
                std::fs::create_dir(&caddy_dir)?;
                let file = caddy_dir.join("Caddyfile");
                std::fs::write(&file, caddyfile(port, backend_port, &cert_pem, &key_pem))?;
                let child = Command::new(&caddy)
                    .args(["run", "--adapter", "caddyfile", "--config"])
                    .arg(&file)
                    .env("GOMAXPROCS", "1")
                    .env("HOME", &caddy_dir)
                    .env("XDG_CONFIG_HOME", &caddy_dir)
                    .env("XDG_DATA_HOME", &caddy_dir)
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(std::fs::File::create(caddy_dir.join("caddy.log"))?)
                    .kill_on_drop(true)
                    .spawn()
                    .context("starting caddy")?;
                let pid = child.id().context("caddy exited")?;
                peers::wait_port(port).await?;
                (
                    SocketAddr::from(([127, 0, 0, 1], port)),
                    pid,
                    Box::new(child),
                )
            }
            Target::Floor | Target::FloorProxy => {
                let bin = args.floor.clone().unwrap_or_else(|| {
                    peers::teapot_bin(None)
                        .with_file_name("examples")
                        .join("floor_h3")
                });
                let port = peers::free_port()?;
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let mut cmd = Command::new(&bin);
                cmd.arg(addr.to_string()).arg(&cert_pem).arg(&key_pem);
                if target == Target::Floor {
                    cmd.arg("--body").arg(&body_file);
                } else {
                    cmd.arg("--upstream")
                        .arg(format!("127.0.0.1:{backend_port}"));
                }
                let child = cmd
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .kill_on_drop(true)
                    .spawn()
                    .with_context(|| format!("starting {}", bin.display()))?;
                let pid = child.id().context("floor_h3 exited")?;
                (addr, pid, Box::new(child))
            }
        };
        if pin {
            pin_to(pid, 1)?;
        }
        servers.push(Server {
            target,
            addr,
            pid,
            _process: process,
        });
    }
    let cert_der = cert.cert_der.clone();
    // Every server must answer the backend's body over HTTP/3 before
    // anything is measured.
    for server in &servers {
        probe(server, &cert_der, body.len()).await?;
    }
    Ok(Fleet {
        dir,
        cert_der,
        servers,
        _backend: backend,
        versions,
    })
}

/// Moves every thread of `pid` to `cpu` (threads it starts later inherit
/// it).
fn pin_to(pid: u32, cpu: usize) -> anyhow::Result<()> {
    let status = std::process::Command::new("taskset")
        .args(["-a", "-cp", &cpu.to_string(), &pid.to_string()])
        .stdout(Stdio::null())
        .status()
        .context("taskset")?;
    if !status.success() {
        bail!("taskset -a -cp {cpu} {pid}: {status}");
    }
    Ok(())
}

async fn probe(server: &Server, cert_der: &[u8], body: usize) -> anyhow::Result<()> {
    let endpoint = h3load::endpoint(h3load::client_config(cert_der, None)?)?;
    let target = load_target(server);
    let uri: http::Uri = format!("https://{HOST}{PATH}").parse()?;
    let mut last = String::new();
    for _ in 0..40 {
        let one = async {
            let mut conn = H3Conn::connect(&endpoint, &target).await?;
            let answer = h3load::get(&mut conn.requests, &uri).await;
            conn.close();
            answer
        };
        match tokio::time::timeout(Duration::from_secs(2), one).await {
            Ok(Ok((200, length))) if length == body => return Ok(()),
            Ok(Ok((status, length))) => last = format!("{status} with {length} bytes"),
            Ok(Err(e)) => last = format!("{e:#}"),
            Err(_) => last = "timed out".into(),
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    bail!(
        "{} at {} does not answer 200 with the {body}-byte body over HTTP/3: {last}",
        server.target.name(),
        server.addr
    )
}

/// Caddy as a reverse proxy to the backend: HTTP/3 on (2.6 serves
/// h1, h2 and h3 by default; said anyway), the bench's certificate, no
/// admin endpoint, no automatic HTTPS (no ACME, no port 80), no access
/// log (Caddy's default). Its upstream pool keeps as many idle
/// connections as the load has requests in flight: with Caddy's default
/// (32 per host) a fifth of the requests opened a new backend connection.
fn caddyfile(port: u16, backend: u16, cert: &Path, key: &Path) -> String {
    format!(
        "{{
	admin off
	auto_https off
	servers {{
		protocols h1 h2 h3
	}}
}}
https://{HOST}:{port} {{
	bind 127.0.0.1
	tls {cert} {key}
	reverse_proxy 127.0.0.1:{backend} {{
		transport http {{
			keepalive 60s
			keepalive_idle_conns 1024
			keepalive_idle_conns_per_host 1024
		}}
	}}
}}
",
        cert = cert.display(),
        key = key.display()
    )
}
