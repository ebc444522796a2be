//! L4 TCP: teapot against HAProxy, one run, same backend, same thread
//! count.
//!
//! Starts an in-process backend (a sink that counts bytes and a 1-byte
//! ping server), `teapot proxy` serving a LoadBalancer Service in front of
//! both ports, and `haproxy` (mode tcp) in front of the same ports. Then,
//! in interleaved rounds (ABBA order, so drift in the machine's load hits
//! both alike), measures
//!
//! - throughput: `--connections` parallel connections stream to the sink
//!   for `--seconds`; bytes the sink received per second;
//! - connection rate: `--concurrency` loops each connect, send one byte,
//!   read one byte and close; completed connections per second.
//!
//! Prints medians and teapot/HAProxy ratios and writes JSON under
//! `benches/results/`. Build both in release first:
//! `cargo run --release -p teapot-benches --bin l4-report`.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use clap::Parser;
use serde::Serialize;
use teapot_benches::peers::{self, Peer, PeerKind, free_port, wait_port};
use teapot_benches::stats::median;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};

#[derive(Parser, Debug)]
#[command(about = "L4 TCP throughput and connection rate: teapot vs HAProxy")]
struct Args {
    /// Interleaved rounds per measurement.
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
    /// Worker threads of each proxy (teapot --threads, haproxy nbthread).
    #[arg(long, default_value_t = 1)]
    threads: usize,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    #[arg(long, default_value = "haproxy")]
    haproxy: PathBuf,
    /// Where the JSON goes (default: benches/results/l4-<unix time>.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
enum Target {
    #[serde(rename = "teapot")]
    Teapot,
    #[serde(rename = "haproxy")]
    Haproxy,
}

/// The backend's counters.
#[derive(Default)]
struct Sink {
    bytes: AtomicU64,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
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

struct Proxies {
    teapot: (Child, u16, u16),
    haproxy: (Peer, u16, u16),
    _dir: tempfile::TempDir,
}

async fn start_proxies(args: &Args, sink: SocketAddr, ping: SocketAddr) -> anyhow::Result<Proxies> {
    let dir = tempfile::tempdir()?;
    let manifests = dir.path().join("manifests");
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
    let bin = peers::teapot_bin(args.teapot.as_deref());
    let teapot = Command::new(&bin)
        .env("RUST_LOG", "warn")
        .args([
            "--threads",
            &args.threads.to_string(),
            "proxy",
            "--manifests",
        ])
        .arg(&manifests)
        .args(teapot_testkit::process::LOOPBACK_LISTENERS)
        .args(["--l4-pool", "default=127.0.0.1", "--l4-state", "off"])
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;

    let (h_sink, h_ping) = (free_port()?, free_port()?);
    let config = format!(
        "global
  nbthread {threads}
  maxconn 4000
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
        threads = args.threads
    );
    let haproxy =
        Peer::start(PeerKind::Haproxy, &args.haproxy, dir.path(), &config).with_context(|| {
            format!(
                "starting {} (apt-get install haproxy)",
                args.haproxy.display()
            )
        })?;
    for port in [t_sink, t_ping, h_sink, h_ping] {
        wait_port(port).await?;
    }
    Ok(Proxies {
        teapot: (teapot, t_sink, t_ping),
        haproxy: (haproxy, h_sink, h_ping),
        _dir: dir,
    })
}

/// Bytes per second the sink received through `port`.
async fn throughput(port: u16, args: &Args, sink: &Sink) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..args.connections {
        let stop = stop.clone();
        tasks.push(tokio::spawn(async move {
            let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
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

/// Completed connect + 1-byte exchange + close per second through `port`.
async fn connection_rate(port: u16, args: &Args) -> anyhow::Result<f64> {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..args.concurrency {
        let (stop, done) = (stop.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            let mut b = [0u8; 1];
            while !stop.load(Ordering::Relaxed) {
                let mut s = TcpStream::connect(("127.0.0.1", port)).await?;
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
    let start = (Instant::now(), done.load(Ordering::Relaxed));
    tokio::time::sleep(Duration::from_secs_f64(args.seconds)).await;
    let n = done.load(Ordering::Relaxed) - start.1;
    let rate = n as f64 / start.0.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await??;
    }
    Ok(rate)
}

#[derive(Serialize)]
struct Sample {
    round: usize,
    target: Target,
    throughput_bytes_per_s: f64,
    connections_per_s: f64,
}

#[derive(Serialize)]
struct Report {
    threads: usize,
    connections: usize,
    concurrency: usize,
    seconds: f64,
    samples: Vec<Sample>,
    teapot_median_bytes_per_s: f64,
    haproxy_median_bytes_per_s: f64,
    throughput_ratio: f64,
    teapot_median_connections_per_s: f64,
    haproxy_median_connections_per_s: f64,
    connection_rate_ratio: f64,
    haproxy_version: String,
    note: &'static str,
}

async fn run(
    args: &Args,
    sink: Arc<Sink>,
    sink_addr: SocketAddr,
    ping_addr: SocketAddr,
) -> anyhow::Result<()> {
    let mut proxies = start_proxies(args, sink_addr, ping_addr).await?;
    let version = peers::version(&args.haproxy, &["-v"]);
    let mut samples = Vec::new();
    for round in 0..args.rounds {
        let order = if round % 2 == 0 {
            [Target::Teapot, Target::Haproxy]
        } else {
            [Target::Haproxy, Target::Teapot]
        };
        for target in order {
            let (sink_port, ping_port) = match target {
                Target::Teapot => (proxies.teapot.1, proxies.teapot.2),
                Target::Haproxy => (proxies.haproxy.1, proxies.haproxy.2),
            };
            let t = throughput(sink_port, args, &sink).await?;
            let c = connection_rate(ping_port, args).await?;
            println!(
                "round {round} {target:?}: {:.0} MB/s, {:.0} connections/s",
                t / 1e6,
                c
            );
            samples.push(Sample {
                round,
                target,
                throughput_bytes_per_s: t,
                connections_per_s: c,
            });
        }
    }
    let pick = |target: Target, f: fn(&Sample) -> f64| {
        median(samples.iter().filter(|s| s.target == target).map(f))
    };
    let tt = pick(Target::Teapot, |s| s.throughput_bytes_per_s);
    let ht = pick(Target::Haproxy, |s| s.throughput_bytes_per_s);
    let tc = pick(Target::Teapot, |s| s.connections_per_s);
    let hc = pick(Target::Haproxy, |s| s.connections_per_s);
    let report = Report {
        threads: args.threads,
        connections: args.connections,
        concurrency: args.concurrency,
        seconds: args.seconds,
        samples,
        teapot_median_bytes_per_s: tt,
        haproxy_median_bytes_per_s: ht,
        throughput_ratio: tt / ht,
        teapot_median_connections_per_s: tc,
        haproxy_median_connections_per_s: hc,
        connection_rate_ratio: tc / hc,
        haproxy_version: version,
        note: "load generator, backend and both proxies share one machine; numbers compare, they do not measure capacity",
    };
    println!(
        "throughput: teapot {:.0} MB/s, HAProxy {:.0} MB/s, ratio {:.2}",
        tt / 1e6,
        ht / 1e6,
        report.throughput_ratio
    );
    println!(
        "connection rate: teapot {tc:.0}/s, HAProxy {hc:.0}/s, ratio {:.2}",
        report.connection_rate_ratio
    );
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
    let _ = proxies.teapot.0.kill().await;
    proxies.haproxy.0.stop().await;
    Ok(())
}
