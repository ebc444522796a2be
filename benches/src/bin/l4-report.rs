//! L4 TCP: teapot against HAProxy (and nginx `stream` where the installed
//! nginx has the module), one run, same backend, same thread count.
//!
//! Starts an in-process backend (a sink that counts bytes and an echo
//! server), `teapot proxy` serving a LoadBalancer Service in front of
//! both ports, `haproxy` (mode tcp) and nginx (`stream`) in front of the
//! same ports. Then, in interleaved rounds (the order rotates, so drift in
//! the machine's load hits every proxy alike), measures
//!
//! - throughput: `--connections` parallel connections stream to the sink
//!   for `--seconds`; bytes the sink received per second;
//! - connection rate: `--concurrency` loops each connect, send one byte,
//!   read one byte and close; completed connections per second, and the
//!   proxy's CPU (its process tree) per connection over the same window;
//!
//! and once per proxy after the rounds, the memory of idle connections:
//! `--idle-connections` connections each send a few bytes and read their
//! echo (both directions have carried data), then stay open and quiet; the
//! growth of the proxy's RSS is charged to them
//! (`teapot_benches::idle`).
//!
//! `--ipv6` adds a second teapot whose Service's address is IPv6 (`::1`),
//! forwarding to the same IPv4 backend: the IPv6 front against the IPv4
//! one in the same rounds (its `teapot_over_this` is IPv4 over IPv6).
//!
//! `--teapot-base BIN` adds an earlier teapot build to the same rounds,
//! for a before/after pair measured under the same conditions. `--floor
//! BIN` adds the two bare relays of `benches/examples/floor_l4.rs` (one on
//! tokio, one on its own epoll loop): what a connection costs with nothing
//! but accepting, connecting, relaying and closing, in the same rounds.
//!
//! Prints medians, teapot/peer ratios and each target's per-round ratios to
//! HAProxy (on this noisy a machine the paired figure moves less than the
//! medians do), and writes JSON under
//! `benches/results/`. Build both in release first:
//! `cargo run --release -p teapot-benches --bin l4-report`.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use teapot_benches::idle::idle_memory;
use teapot_benches::peers::{self, Peer, PeerKind, free_port, wait_port};
use teapot_benches::stats::median;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

#[derive(Parser, Debug)]
#[command(
    about = "L4 TCP throughput, connection rate and idle memory: teapot vs HAProxy and nginx"
)]
struct Args {
    /// Interleaved rounds of throughput and connection rate (0: idle only).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Seconds per measurement.
    #[arg(long, default_value_t = 3.0)]
    seconds: f64,
    /// Parallel connections of the throughput test.
    #[arg(long, default_value_t = 16)]
    connections: usize,
    /// Concurrent loops of the connection-rate test.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Idle connections per proxy after the rounds (0: none). Each proxied
    /// connection is two descriptors in the proxy and two here.
    #[arg(long, default_value_t = 4000)]
    idle_connections: usize,
    /// Worker threads of each proxy (teapot --threads, haproxy nbthread,
    /// nginx worker_processes).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// A second teapot binary (an earlier build) measured in the same
    /// interleaved rounds: a before/after pair under the same conditions.
    #[arg(long)]
    teapot_base: Option<PathBuf>,
    /// benches/examples/floor_l4 (`cargo build --release -p teapot-benches
    /// --example floor_l4`): its tokio and epoll relays join the rounds.
    #[arg(long)]
    floor: Option<PathBuf>,
    #[arg(long, default_value = "haproxy")]
    haproxy: PathBuf,
    /// nginx, run with its `stream` module when it has one (Debian:
    /// libnginx-mod-stream); left out otherwise.
    #[arg(long, default_value = "nginx")]
    nginx: PathBuf,
    /// Also measure teapot with the Service's address on IPv6 (`::1`),
    /// to the same IPv4 backend.
    #[arg(long)]
    ipv6: bool,
    /// Where the JSON goes (default: benches/results/l4-<unix time>.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
enum Target {
    Teapot,
    /// `--teapot-base`.
    TeapotBase,
    /// `--ipv6`: teapot, the Service's address IPv6.
    #[serde(rename = "teapot_ipv6")]
    TeapotIpv6,
    Haproxy,
    Nginx,
    /// `--floor`, on tokio.
    #[serde(rename = "floor_tokio")]
    FloorTokio,
    /// `--floor`, on its own epoll loop.
    #[serde(rename = "floor_epoll")]
    FloorEpoll,
}

/// The backend's counters.
#[derive(Default)]
struct Sink {
    bytes: AtomicU64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // An L4 proxy holds two descriptors per idle connection.
    let want = 4 * args.idle_connections as u64 + 4096;
    let limit = teapot_benches::idle::raise_descriptor_limit(want);
    if limit < want {
        eprintln!("descriptor limit {limit}, below the {want} the idle run may need");
    }
    // The backend runs on its own runtime so the load generator does not
    // starve it (and vice versa) more than the machine itself does.
    let backend_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .thread_name("backend")
        .build()?;
    let sink = Arc::new(Sink::default());
    let (sink_addr, ping_addr) = backend_rt.block_on(start_backend(sink.clone()))?;
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("client")
        .build()?;
    let result = client_rt.block_on(run(&args, sink, sink_addr, ping_addr));
    backend_rt.shutdown_timeout(Duration::from_secs(1));
    result
}

async fn start_backend(sink: Arc<Sink>) -> anyhow::Result<(SocketAddr, SocketAddr)> {
    let sink_listener = TcpListener::bind("127.0.0.1:0").await?;
    let ping_listener = TcpListener::bind("127.0.0.1:0").await?;
    let addrs = (sink_listener.local_addr()?, ping_listener.local_addr()?);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = sink_listener.accept().await {
            let sink = sink.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 256 * 1024];
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    sink.bytes.fetch_add(n as u64, Ordering::Relaxed);
                }
            });
        }
    });
    tokio::spawn(async move {
        while let Ok((mut s, _)) = ping_listener.accept().await {
            tokio::spawn(async move {
                let mut b = [0u8; 64];
                while let Ok(n) = s.read(&mut b).await {
                    if n == 0 || s.write_all(&b[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    Ok(addrs)
}

/// One proxy in front of the backend: its sink and echo ports.
struct Front {
    target: Target,
    /// Where its ports listen: 127.0.0.1, or ::1 for `--ipv6`.
    ip: IpAddr,
    sink: u16,
    ping: u16,
    /// The process whose tree's CPU and RSS are charged.
    pid: u32,
}

struct Proxies {
    fronts: Vec<Front>,
    teapot: Child,
    teapot_base: Option<Child>,
    teapot_ipv6: Option<Child>,
    floors: Vec<Child>,
    haproxy: Peer,
    nginx: Option<Peer>,
    /// Why nginx is not measured, when it is not.
    nginx_missing: Option<String>,
    _dir: tempfile::TempDir,
}

async fn start_proxies(args: &Args, sink: SocketAddr, ping: SocketAddr) -> anyhow::Result<Proxies> {
    let dir = tempfile::tempdir()?;
    let bin = peers::teapot_bin(args.teapot.as_deref());
    let start = |target, bin: &Path, ip| {
        start_teapot(target, dir.path(), bin, sink, ping, args.threads, ip)
    };
    let v4 = IpAddr::from(Ipv4Addr::LOCALHOST);
    let (teapot, teapot_front) = start(Target::Teapot, &bin, v4)?;
    let base = args
        .teapot_base
        .as_deref()
        .map(|base| start(Target::TeapotBase, base, v4))
        .transpose()?;
    let ipv6 = args
        .ipv6
        .then(|| start(Target::TeapotIpv6, &bin, Ipv6Addr::LOCALHOST.into()))
        .transpose()?;

    let (h_sink, h_ping) = (free_port()?, free_port()?);
    // maxconn above the idle run's connections (two descriptors per
    // proxied connection, within the limit main could raise).
    let config = format!(
        "global
  nbthread {threads}
  maxconn {maxconn}
defaults
  mode tcp
  timeout connect 3s
  timeout client 1h
  timeout server 1h
frontend sink
  bind 127.0.0.1:{h_sink}
  default_backend sink
backend sink
  server s1 {sink}
frontend ping
  bind 127.0.0.1:{h_ping}
  default_backend ping
backend ping
  server p1 {ping}
",
        threads = args.threads,
        maxconn = args.idle_connections.max(4000) + 500,
    );
    let haproxy_dir = dir.path().join("haproxy");
    std::fs::create_dir(&haproxy_dir)?;
    let haproxy = Peer::start(PeerKind::Haproxy, &args.haproxy, &haproxy_dir, &config)
        .with_context(|| {
            format!(
                "starting {} (apt-get install haproxy)",
                args.haproxy.display()
            )
        })?;
    let haproxy_pid = haproxy.pid().context("haproxy exited at start")?;
    let mut fronts = vec![
        teapot_front,
        Front {
            target: Target::Haproxy,
            ip: v4,
            sink: h_sink,
            ping: h_ping,
            pid: haproxy_pid,
        },
    ];
    let teapot_base = base.map(|(child, front)| {
        fronts.push(front);
        child
    });

    let (nginx, nginx_missing) = match nginx_stream(&args.nginx) {
        Ok(load_module) => {
            let (n_sink, n_ping) = (free_port()?, free_port()?);
            let nginx_dir = dir.path().join("nginx");
            std::fs::create_dir(&nginx_dir)?;
            let config = format!(
                "{load_module}user root;
worker_processes {threads};
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections {workers}; multi_accept on; }}
stream {{
  proxy_connect_timeout 3s;
  proxy_timeout 1h;
  server {{ listen 127.0.0.1:{n_sink}; proxy_pass {sink}; }}
  server {{ listen 127.0.0.1:{n_ping}; proxy_pass {ping}; }}
}}
",
                threads = args.threads,
                d = nginx_dir.display(),
                workers = 2 * args.idle_connections.max(4000) + 1000,
            );
            let nginx = Peer::start(PeerKind::Nginx, &args.nginx, &nginx_dir, &config)
                .with_context(|| format!("starting {}", args.nginx.display()))?;
            fronts.push(Front {
                target: Target::Nginx,
                ip: v4,
                sink: n_sink,
                ping: n_ping,
                pid: nginx.pid().context("nginx exited at start")?,
            });
            (Some(nginx), None)
        }
        Err(why) => {
            println!("nginx left out: {why}");
            (None, Some(why))
        }
    };
    let mut floors = Vec::new();
    if let Some(bin) = &args.floor {
        for (target, mode) in [(Target::FloorTokio, "tokio"), (Target::FloorEpoll, "epoll")] {
            let (f_sink, f_ping) = (free_port()?, free_port()?);
            let child = Command::new(bin)
                .arg(mode)
                .arg(format!("127.0.0.1:{f_sink}={sink}"))
                .arg(format!("127.0.0.1:{f_ping}={ping}"))
                .kill_on_drop(true)
                .spawn()
                .with_context(|| format!("starting {} (see --floor)", bin.display()))?;
            fronts.push(Front {
                target,
                ip: v4,
                sink: f_sink,
                ping: f_ping,
                pid: child.id().context("the floor exited at start")?,
            });
            floors.push(child);
        }
    }
    let teapot_ipv6 = ipv6.map(|(child, front)| {
        fronts.push(front);
        child
    });
    for f in &fronts {
        if f.ip.is_ipv6() {
            wait_port_on(f.ip, f.sink).await?;
            wait_port_on(f.ip, f.ping).await?;
        } else {
            wait_port(f.sink).await?;
            wait_port(f.ping).await?;
        }
    }
    Ok(Proxies {
        fronts,
        teapot,
        teapot_base,
        teapot_ipv6,
        floors,
        haproxy,
        nginx,
        nginx_missing,
        _dir: dir,
    })
}

/// Starts `bin` as `teapot proxy` serving a LoadBalancer Service with a
/// sink and an echo port in front of the backend's (its manifests in a
/// directory of its own under `dir`): the child and its front.
fn start_teapot(
    target: Target,
    dir: &Path,
    bin: &Path,
    sink: SocketAddr,
    ping: SocketAddr,
    threads: usize,
    ip: IpAddr,
) -> anyhow::Result<(Child, Front)> {
    let manifests = dir.join(format!("manifests-{target:?}"));
    std::fs::create_dir(&manifests)?;
    let (t_sink, t_ping) = (free_port()?, free_port()?);
    let manifest = format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: bench, namespace: bench}}
spec:
  type: LoadBalancer
  loadBalancerClass: teapot.dev/lb
  ports: [{{name: sink, port: {t_sink}, protocol: TCP}}, {{name: ping, port: {t_ping}, protocol: TCP}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: bench-1, namespace: bench, labels: {{kubernetes.io/service-name: bench}}}}
addressType: IPv4
ports: [{{name: sink, port: {}, protocol: TCP}}, {{name: ping, port: {}, protocol: TCP}}]
endpoints: [{{addresses: ["127.0.0.1"]}}]
"#,
        sink.port(),
        ping.port()
    );
    std::fs::write(manifests.join("bench.yaml"), manifest)?;
    let teapot = Command::new(bin)
        .env("RUST_LOG", "warn")
        .args(["--threads", &threads.to_string(), "proxy", "--manifests"])
        .arg(&manifests)
        .args(teapot_testkit::process::LOOPBACK_LISTENERS)
        .args(["--l4-pool", &format!("default={ip}"), "--l4-state", "off"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    let pid = teapot
        .id()
        .with_context(|| format!("{} exited at start", bin.display()))?;
    let front = Front {
        target,
        ip,
        sink: t_sink,
        ping: t_ping,
        pid,
    };
    Ok((teapot, front))
}

/// Waits until something accepts on `ip`:`port` (at most 60 s).
async fn wait_port_on(ip: IpAddr, port: u16) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if TcpStream::connect((ip, port)).await.is_ok() {
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    anyhow::bail!("nothing listens on {ip}:{port} after 60 s")
}

/// The `load_module` line nginx needs for `stream` (empty when the module
/// is built in), or why it has none.
fn nginx_stream(nginx: &Path) -> Result<String, String> {
    let out = std::process::Command::new(nginx)
        .arg("-V")
        .output()
        .map_err(|e| format!("{}: {e}", nginx.display()))?;
    // nginx prints its configure arguments on stderr.
    let configure = String::from_utf8_lossy(&out.stderr).into_owned();
    let args: Vec<&str> = configure.split_whitespace().collect();
    if args.contains(&"--with-stream") {
        return Ok(String::new());
    }
    if !args.contains(&"--with-stream=dynamic") {
        return Err("built without the stream module".into());
    }
    let modules = args
        .iter()
        .find_map(|a| a.strip_prefix("--modules-path="))
        .unwrap_or("/usr/lib/nginx/modules");
    let module = Path::new(modules).join("ngx_stream_module.so");
    if module.is_file() {
        Ok(format!("load_module {};\n", module.display()))
    } else {
        Err(format!(
            "{} is missing (Debian: apt-get install libnginx-mod-stream)",
            module.display()
        ))
    }
}

/// Bytes per second the sink received through `port`.
async fn throughput(ip: IpAddr, port: u16, args: &Args, sink: &Sink) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect((ip, port)).await?;
            let chunk = vec![0x5Au8; 64 * 1024];
            while !stop.load(Ordering::Relaxed) {
                s.write_all(&chunk).await?;
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    // Let the connections ramp up before measuring.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = (Instant::now(), sink.bytes.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let bytes = sink.bytes.load(Ordering::Relaxed) - start.1;
    let rate = bytes as f64 / start.0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(rate)
}

/// The connection-rate run through one proxy.
struct Rate {
    connections_per_s: f64,
    /// The proxy's CPU (its process tree) per completed connection over
    /// the same window.
    cpu_us_per_connection: f64,
}

/// Completed connect + 1-byte exchange + close per second through `port`,
/// and the CPU the proxy `pid` spent per connection meanwhile.
async fn connection_rate(ip: IpAddr, port: u16, pid: u32, args: &Args) -> anyhow::Result<Rate> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (stop, done) = (stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut b = [0u8; 1];
            while !stop.load(Ordering::Relaxed) {
                let mut s = TcpStream::connect((ip, port)).await?;
                s.set_nodelay(true)?;
                s.write_all(b"x").await?;
                s.read_exact(&mut b).await?;
                // Reset instead of FIN: tens of thousands of client
                // TIME_WAITs would exhaust the ephemeral ports.
                s.set_zero_linger()?;
                drop(s);
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<_, std::io::Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = (
        Instant::now(),
        done.load(Ordering::Relaxed),
        peers::cpu_seconds(pid)?,
    );
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let n = done.load(Ordering::Relaxed) - start.1;
    let cpu = peers::cpu_seconds(pid)? - start.2;
    let secs = start.0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(Rate {
        connections_per_s: n as f64 / secs,
        cpu_us_per_connection: cpu * 1e6 / n.max(1) as f64,
    })
}

/// Opens `n` connections through `port` to the echo backend, each sending
/// a few bytes and reading them back, and charges the growth of the
/// proxy's RSS to them while they stay open and idle.
async fn idle(pid: u32, ip: IpAddr, port: u16, n: usize) -> anyhow::Result<Idle> {
    let memory = idle_memory(pid, n, || async move {
        let mut s = TcpStream::connect((ip, port)).await?;
        s.set_nodelay(true)?;
        let mut echo = [0u8; 5];
        s.write_all(b"hello").await?;
        s.read_exact(&mut echo).await?;
        anyhow::ensure!(&echo == b"hello", "the echo came back changed");
        anyhow::Ok(s)
    })
    .await?;
    Ok(Idle {
        connections: memory.connections,
        failed: memory.failed,
        rss_before_mib: memory.rss_before_kib as f64 / 1024.0,
        rss_after_mib: memory.rss_after_kib as f64 / 1024.0,
        kib_per_conn: memory.kib_per_connection(),
        rss_closed_1s_mib: memory.rss_closed_1s_kib as f64 / 1024.0,
        rss_closed_mib: memory.rss_closed_kib as f64 / 1024.0,
    })
}

#[derive(Serialize)]
struct Sample {
    round: usize,
    target: Target,
    throughput_bytes_per_s: f64,
    connections_per_s: f64,
    cpu_us_per_connection: f64,
}

#[derive(Serialize)]
struct Idle {
    connections: usize,
    failed: usize,
    rss_before_mib: f64,
    rss_after_mib: f64,
    /// 1 s and 12 s after the idle connections closed.
    rss_closed_1s_mib: f64,
    rss_closed_mib: f64,
    kib_per_conn: f64,
}

/// Medians of one proxy, and teapot's figure over it (above 1: teapot
/// moved more bytes or connections, or spent more CPU or memory).
#[derive(Serialize)]
struct Medians {
    bytes_per_s: f64,
    connections_per_s: f64,
    cpu_us_per_connection: f64,
    idle: Option<Idle>,
    teapot_over_this: BTreeMap<&'static str, f64>,
    /// The median over rounds of this target's figure over HAProxy's in
    /// the same round (below 1 for CPU: cheaper than HAProxy).
    per_round_over_haproxy: BTreeMap<&'static str, f64>,
}

#[derive(Serialize)]
struct Report {
    command: String,
    commit: String,
    threads: usize,
    connections: usize,
    concurrency: usize,
    idle_connections: usize,
    seconds: f64,
    load_average_before: String,
    load_average_after: String,
    versions: BTreeMap<&'static str, String>,
    nginx_missing: Option<String>,
    medians: BTreeMap<Target, Medians>,
    samples: Vec<Sample>,
    note: &'static str,
}

/// Per round, `target`'s connection rate and CPU per connection over
/// HAProxy's in the same round; the medians of those ratios.
fn per_round_over_haproxy(samples: &[Sample], target: Target) -> BTreeMap<&'static str, f64> {
    let haproxy: BTreeMap<usize, &Sample> = samples
        .iter()
        .filter(|s| s.target == Target::Haproxy)
        .map(|s| (s.round, s))
        .collect();
    let pairs: Vec<(&Sample, &Sample)> = samples
        .iter()
        .filter(|s| s.target == target)
        .filter_map(|s| Some((s, *haproxy.get(&s.round)?)))
        .collect();
    if pairs.is_empty() {
        return BTreeMap::new();
    }
    let ratio = |f: fn(&Sample) -> f64| median(pairs.iter().map(|(t, h)| f(t) / f(h)));
    BTreeMap::from([
        ("connections_per_s", ratio(|s| s.connections_per_s)),
        ("cpu_us_per_connection", ratio(|s| s.cpu_us_per_connection)),
    ])
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

async fn run(
    args: &Args,
    sink: Arc<Sink>,
    sink_addr: SocketAddr,
    ping_addr: SocketAddr,
) -> anyhow::Result<()> {
    let load_average_before = load_average();
    let mut proxies = start_proxies(args, sink_addr, ping_addr).await?;
    let mut versions = BTreeMap::from([
        ("haproxy", peers::version(&args.haproxy, &["-v"])),
        (
            "teapot",
            peers::version(&peers::teapot_bin(args.teapot.as_deref()), &["--version"]),
        ),
        ("kernel", peers::version(Path::new("uname"), &["-sr"])),
    ]);
    if let Some(base) = &args.teapot_base {
        versions.insert("teapot_base", peers::version(base, &["--version"]));
    }
    if proxies.nginx.is_some() {
        versions.insert("nginx", peers::version(&args.nginx, &["-v"]));
    }
    let fronts = &proxies.fronts;
    let mut samples = Vec::new();
    for round in 0..args.rounds {
        for i in 0..fronts.len() {
            let f = &fronts[(i + round) % fronts.len()];
            let t = throughput(f.ip, f.sink, args, &sink).await?;
            let c = connection_rate(f.ip, f.ping, f.pid, args).await?;
            println!(
                "round {round} {:?}: {:.0} MB/s, {:.0} connections/s, {:.1} µs CPU per connection",
                f.target,
                t / 1e6,
                c.connections_per_s,
                c.cpu_us_per_connection,
            );
            samples.push(Sample {
                round,
                target: f.target,
                throughput_bytes_per_s: t,
                connections_per_s: c.connections_per_s,
                cpu_us_per_connection: c.cpu_us_per_connection,
            });
        }
    }
    let mut idles = BTreeMap::new();
    if args.idle_connections > 0 {
        for f in fronts {
            let m = idle(f.pid, f.ip, f.ping, args.idle_connections).await?;
            println!(
                "idle {:?}: {} connections ({} failed), {:.2} KiB each",
                f.target, m.connections, m.failed, m.kib_per_conn
            );
            idles.insert(f.target, m);
        }
    }
    let pick = |target: Target, f: fn(&Sample) -> f64| {
        median(samples.iter().filter(|s| s.target == target).map(f))
    };
    let mut medians: BTreeMap<Target, Medians> = fronts
        .iter()
        .map(|f| {
            (
                f.target,
                Medians {
                    bytes_per_s: pick(f.target, |s| s.throughput_bytes_per_s),
                    connections_per_s: pick(f.target, |s| s.connections_per_s),
                    cpu_us_per_connection: pick(f.target, |s| s.cpu_us_per_connection),
                    idle: idles.remove(&f.target),
                    teapot_over_this: BTreeMap::new(),
                    per_round_over_haproxy: per_round_over_haproxy(&samples, f.target),
                },
            )
        })
        .collect();
    let figures = |m: &Medians| {
        [
            ("bytes_per_s", m.bytes_per_s),
            ("connections_per_s", m.connections_per_s),
            ("cpu_us_per_connection", m.cpu_us_per_connection),
            (
                "idle_kib_per_conn",
                m.idle.as_ref().map_or(f64::NAN, |i| i.kib_per_conn),
            ),
        ]
    };
    let teapot = figures(&medians[&Target::Teapot]);
    for m in medians.values_mut() {
        m.teapot_over_this = teapot
            .iter()
            .zip(figures(m))
            .filter(|((_, t), (_, p))| t.is_finite() && p.is_finite() && *p != 0.0)
            .map(|((name, t), (_, p))| (*name, t / p))
            .collect();
    }
    println!();
    println!(
        "{:<11} {:>10} {:>14} {:>14} {:>14} {:>22}",
        "", "MB/s", "connections/s", "µs CPU/conn", "KiB/idle conn", "per round /HAProxy"
    );
    for (target, m) in &medians {
        let paired = |k| m.per_round_over_haproxy.get(k).copied().unwrap_or(f64::NAN);
        println!(
            "{:<11} {:>10.0} {:>14.0} {:>14.1} {:>14.2} {:>9.2}x rate {:.2}x CPU",
            format!("{target:?}"),
            m.bytes_per_s / 1e6,
            m.connections_per_s,
            m.cpu_us_per_connection,
            m.idle.as_ref().map_or(f64::NAN, |i| i.kib_per_conn),
            paired("connections_per_s"),
            paired("cpu_us_per_connection"),
        );
    }
    let report = Report {
        command: std::env::args().collect::<Vec<_>>().join(" "),
        commit: teapot_benches::results::commit(Path::new(env!("CARGO_MANIFEST_DIR"))),
        threads: args.threads,
        connections: args.connections,
        concurrency: args.concurrency,
        idle_connections: args.idle_connections,
        seconds: args.seconds,
        load_average_before,
        load_average_after: load_average(),
        versions,
        nginx_missing: proxies.nginx_missing.take(),
        medians,
        samples,
        note: "load generator, backend and the proxies share one machine; numbers compare, they do not measure capacity",
    };
    let path = match &args.json {
        Some(p) => p.clone(),
        None => {
            let secs = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or_default();
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("results")
                .join(format!("l4-{secs}.json"))
        }
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    println!("wrote {}", path.display());
    let _ = proxies.teapot.kill().await;
    if let Some(base) = proxies.teapot_base.as_mut() {
        let _ = base.kill().await;
    }
    if let Some(v6) = proxies.teapot_ipv6.as_mut() {
        let _ = v6.kill().await;
    }
    for floor in &mut proxies.floors {
        let _ = floor.kill().await;
    }
    proxies.haproxy.stop().await;
    if let Some(nginx) = proxies.nginx.take() {
        nginx.stop().await;
    }
    Ok(())
}
