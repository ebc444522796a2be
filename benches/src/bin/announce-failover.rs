//! BGP announcement end to end: failover, ECMP spread, planned restarts
//! and scale, through the release `teapot proxy` (docs/announce.md).
//!
//! Builds the fleet of `teapot_benches::bgp_lab` in network namespaces
//! (an FRR router with `maximum-paths`, `multipath-relax` and
//! `fib_multipath_hash_policy=1`, a client behind it, three replicas each
//! running an echo backend and `teapot proxy`) and measures, with the
//! client opening new connections to the fleet's address continuously:
//!
//! - **failover**: one replica SIGKILLed, its link cut, or silenced
//!   (nftables drops everything in and out: only the hold timer tells);
//!   the time from the failure to the last new connection that failed,
//!   and how many failed. The same failures with FRR bgpd announcing the
//!   address from each replica's namespace instead of teapot: the
//!   baseline, from the same run.
//! - **spread**: the share of new connections per replica; how many
//!   long-lived keep-alive connections to the replicas that stay break
//!   when one replica stops gracefully, under the router's plain ECMP
//!   route and under a resilient next-hop group.
//! - **planned**: every replica restarted in turn (SIGTERM, exit, start,
//!   back in the router's table) under keep-alive requests, new
//!   connections and L4 streams: failed requests, broken streams.
//! - **scale**: 2,046 more addresses (`--announce 198.19.0.0/21`) on each
//!   replica: time from the start until the router holds every route over
//!   all three replicas, and the replicas' RSS.
//!
//! With `--bfd 100x3` every BGP session has BFD beside it, the same
//! timers on both ends: the router runs bfdd with `neighbor REPLICA bfd`,
//! teapot's peers get `bfd=100x3`, and the FRR announcer runs bfdd in the
//! replica's namespace with `neighbor ROUTER bfd`. Each failure then
//! strikes only once the router's BFD session with the victim is Up.
//! `--only failover --kinds silent --bfd 100x3` measures the failure only
//! BFD (or the hold timer) can tell.
//!
//! Run as root after `cargo build --release -p teapot -p teapot-benches`:
//! `target/release/announce-failover`. Writes (merging what an earlier
//! run with `--only` measured) benches/results/announce-failover-DATE.json,
//! with `--bfd` announce-failover-bfd-DATE.json.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_benches::bgp_lab::{
    self, Announcer, Bfd, HOST, HTTP_PORT, L4_PORT, L4_VIP, Lab, REPLICAS, VIP, replica_name,
};
use teapot_benches::results::utc_date;
use teapot_benches::stats::median;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Runtime;
use tokio::task::JoinSet;

#[derive(Parser, Debug)]
#[command(about = "BGP announcement: failover, ECMP spread, planned restarts, scale")]
struct Args {
    /// Runs per failure kind and announcer.
    #[arg(long, default_value_t = 10)]
    runs: usize,
    /// What to measure, comma-separated: failover, spread, planned, scale.
    #[arg(
        long,
        default_value = "failover,spread,planned,scale",
        value_delimiter = ','
    )]
    only: Vec<String>,
    /// Failures, comma-separated: kill, link, silent.
    #[arg(long, default_value = "kill,link,silent", value_delimiter = ',')]
    kinds: Vec<String>,
    /// Announcers of the failover runs: teapot, frr.
    #[arg(long, default_value = "teapot,frr", value_delimiter = ',')]
    announcers: Vec<String>,
    /// Milliseconds between new probe connections.
    #[arg(long, default_value_t = 5)]
    probe_interval_ms: u64,
    /// A probe (connect, request, response) that takes longer failed.
    #[arg(long, default_value_t = 1000)]
    probe_timeout_ms: u64,
    /// New connections of the spread count.
    #[arg(long, default_value_t = 900)]
    spread_connections: usize,
    /// Long-lived keep-alive connections of the withdrawal.
    #[arg(long, default_value_t = 300)]
    long_lived: usize,
    /// BFD beside every BGP session, INTERVALxMULTIPLIER in ms (e.g.
    /// 100x3): bfdd on the router and, for the FRR announcer, in each
    /// replica; `bfd=` on teapot's peers. Without it, BGP's hold timer
    /// alone.
    #[arg(long)]
    bfd: Option<Bfd>,
    /// The teapot binary (default: next to this one).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// Where the JSON goes (default: benches/results/announce-failover-DATE.json,
    /// with --bfd announce-failover-bfd-DATE.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(why) = bgp_lab::missing(args.bfd.is_some()) {
        bail!("cannot build the lab: {why}");
    }
    let teapot = teapot_benches::peers::teapot_bin(args.teapot.as_deref());
    let path = args.json.clone().unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("results")
            .join(match args.bfd {
                Some(_) => format!("announce-failover-bfd-{}.json", utc_date()),
                None => format!("announce-failover-{}.json", utc_date()),
            })
    });
    let mut report: Value = std::fs::read_to_string(&path)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    report["commit"] = json!(commit());
    report["date"] = json!(utc_date());
    report["machine"] = json!(
        "2 cores shared with other work; client, router and replicas in network namespaces of one kernel"
    );
    report["router"] = json!(match args.bfd {
        None => "FRR 8.4 zebra+bgpd, keepalive 1 s / hold 3 s, maximum-paths 16, bgp bestpath as-path multipath-relax, fib_multipath_hash_policy=1".to_string(),
        Some(bfd) => format!(
            "FRR 8.4 zebra+bfdd+bgpd, keepalive 1 s / hold 3 s, BFD {bfd} (transmit-interval = receive-interval = {} ms, detect-multiplier {}) on every neighbour, maximum-paths 16, bgp bestpath as-path multipath-relax, fib_multipath_hash_policy=1",
            bfd.interval_ms, bfd.multiplier
        ),
    });
    report["command"] = json!(std::env::args().collect::<Vec<_>>().join(" "));

    let mut lab = Lab::new(&teapot, args.bfd)?;
    let rt = client_runtime(&lab.client)?;
    let wanted = |s: &str| args.only.iter().any(|o| o == s);
    let save = |report: &Value| -> Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        std::fs::write(&path, serde_json::to_string_pretty(report)? + "\n")?;
        println!("wrote {}", path.display());
        Ok(())
    };

    if wanted("failover") {
        let announcers = args
            .announcers
            .iter()
            .map(|a| match a.as_str() {
                "teapot" => Ok(Announcer::Teapot),
                "frr" => Ok(Announcer::Frr),
                other => bail!("--announcers: `{other}` is neither teapot nor frr"),
            })
            .collect::<Result<Vec<_>>>()?;
        // Results of kinds and announcers not measured now stay.
        let mut sections: Vec<Value> = report["failover"]["results"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        start_all(&mut lab, announcers[0])?;
        let bfd = args.bfd.map(|b| b.to_string());
        for kind in &args.kinds {
            let kind = Failure::parse(kind)?;
            let load_before = load_average();
            let runs = failover_runs(&args, &mut lab, &rt, &announcers, kind)?;
            let load_after = load_average();
            for &announcer in &announcers {
                sections.retain(|s| {
                    !(s["failure"] == json!(kind)
                        && s["announcer"] == json!(announcer)
                        && s["bfd"] == json!(bfd))
                });
                let mine = runs.iter().filter(|(a, _)| *a == announcer).map(|(_, r)| r);
                let mut section = summarise_failover(announcer, kind, mine.collect());
                section["bfd"] = json!(bfd);
                section["commit"] = json!(commit());
                section["date"] = json!(utc_date());
                section["command"] = report["command"].clone();
                section["load_average_before"] = json!(load_before);
                section["load_average_after"] = json!(load_after);
                sections.push(section);
            }
            report["failover"] = json!({
                "probe_interval_ms": args.probe_interval_ms,
                "probe_timeout_ms": args.probe_timeout_ms,
                "order": "interleaved: each run fails the same replica once announced by each announcer in turn (the victim restarted with the other announcer in between); the two other replicas stay as they are",
                "strike": "1 s of probes, then a uniformly random 0-1 s more (sections with strike_jitter: true), so the failure falls anywhere in the 1 s keepalive interval",
                "measures": "time from the failure until the last new connection to the VIP that failed (its start); failed = new connections that failed after the failure; router = until the router's kernel route lost the replica",
                "results": sections.clone(),
            });
            save(&report)?;
        }
        stop_all(&mut lab)?;
        print_failover(&sections);
    }
    if wanted("spread") || wanted("planned") || wanted("scale") {
        start_all(&mut lab, Announcer::Teapot)?;
    }
    if wanted("spread") {
        report["spread"] = spread(&args, &mut lab, &rt)?;
        save(&report)?;
    }
    if wanted("planned") {
        report["planned"] = planned(&mut lab, &rt)?;
        save(&report)?;
    }
    if wanted("scale") {
        report["scale"] = scale(&mut lab)?;
        save(&report)?;
    }
    Ok(())
}

// ------------------------------------------------------------ the lab

/// Every replica started with `announcer`, the router using all three.
fn start_all(lab: &mut Lab, announcer: Announcer) -> Result<()> {
    for i in 0..REPLICAS {
        lab.start_replica(i, announcer)?;
    }
    lab.wait_next_hops(&[0, 1, 2], Duration::from_secs(60))?;
    // Past the sessions' first keepalives.
    std::thread::sleep(Duration::from_secs(2));
    Ok(())
}

/// Every replica's node software killed, the router's route gone.
fn stop_all(lab: &mut Lab) -> Result<()> {
    for i in 0..REPLICAS {
        lab.kill_replica(i)?;
    }
    lab.wait_next_hops(&[], Duration::from_secs(30))?;
    Ok(())
}

/// A runtime whose threads (workers and blocking pool alike) live in
/// network namespace `ns`: every socket its tasks open is the client's.
/// Futures given to `block_on` run on the caller's thread, so the
/// measurements always `spawn` first.
fn client_runtime(ns: &str) -> Result<Runtime> {
    let path = format!("/var/run/netns/{ns}");
    // Opened once: a thread that cannot enter the namespace must not
    // quietly send from the host's.
    let file = Arc::new(std::fs::File::open(&path).with_context(|| path.clone())?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("client")
        .on_thread_start(move || {
            nix::sched::setns(&*file, nix::sched::CloneFlags::CLONE_NEWNET)
                .expect("entering the client's network namespace");
        })
        .build()?;
    Ok(rt)
}

fn run_on<T: Send + 'static>(
    rt: &Runtime,
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    rt.block_on(rt.spawn(fut)).expect("client task panicked")
}

// --------------------------------------------------------- the client

fn vip_http() -> SocketAddr {
    SocketAddr::new(VIP.parse().expect("VIP"), HTTP_PORT)
}

fn vip_l4() -> SocketAddr {
    SocketAddr::new(L4_VIP.parse().expect("L4 VIP"), L4_PORT)
}

/// One response: which replica answered, and whether it closes.
struct Reply {
    replica: usize,
    close: bool,
}

/// Why an exchange failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
enum Fault {
    /// Closed or reset before any byte of the response: a client may
    /// safely retry an idempotent request (browsers and Go's net/http
    /// do on a reused connection).
    NoResponse,
    /// Failed with part of the response read, or a bad response.
    Broken,
    Timeout,
}

/// One GET for the echo on `stream`; `buf` keeps what was read past it.
async fn exchange(stream: &mut TcpStream, buf: &mut Vec<u8>, close: bool) -> Result<Reply, Fault> {
    let request = if close {
        format!("GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n")
    } else {
        format!("GET / HTTP/1.1\r\nHost: {HOST}\r\n\r\n")
    };
    stream
        .write_all(request.as_bytes())
        .await
        .map_err(|_| Fault::NoResponse)?;
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = find(buf, b"\r\n\r\n") {
            break at + 4;
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) if buf.is_empty() => return Err(Fault::NoResponse),
            Ok(0) | Err(_) => return Err(Fault::Broken),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_ascii_lowercase();
    if !head.starts_with("http/1.1 200") {
        return Err(Fault::Broken);
    }
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or(Fault::Broken)?;
    let closes = head
        .lines()
        .any(|l| l.starts_with("connection:") && l.contains("close"));
    while buf.len() < head_end + length {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return Err(Fault::Broken),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let body = String::from_utf8_lossy(&buf[head_end..head_end + length]).into_owned();
    buf.drain(..head_end + length);
    let replica = (0..REPLICAS)
        .find(|&i| body.contains(&format!("\"pod\":\"{}\"", replica_name(i))))
        .ok_or(Fault::Broken)?;
    Ok(Reply {
        replica,
        close: close || closes,
    })
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// A new connection, one request, close: the replica that answered.
async fn probe(addr: SocketAddr, timeout: Duration) -> Result<usize, Fault> {
    let attempt = async {
        let mut s = TcpStream::connect(addr)
            .await
            .map_err(|_| Fault::NoResponse)?;
        let _ = s.set_nodelay(true);
        let mut buf = Vec::new();
        exchange(&mut s, &mut buf, true).await.map(|r| r.replica)
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or(Err(Fault::Timeout))
}

#[derive(Clone, Copy)]
struct Probe {
    started: Instant,
    result: Result<usize, Fault>,
}

/// New connections to `addr` every `every` until stopped.
struct Probes {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<Vec<Probe>>,
}

impl Probes {
    fn start(rt: &Runtime, addr: SocketAddr, every: Duration, timeout: Duration) -> Probes {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let task = rt.spawn(async move {
            let log = Arc::new(Mutex::new(Vec::new()));
            let mut tasks = JoinSet::new();
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
            while !flag.load(Ordering::Relaxed) {
                tick.tick().await;
                let log = log.clone();
                tasks.spawn(async move {
                    let started = Instant::now();
                    let result = probe(addr, timeout).await;
                    log.lock()
                        .expect("probe log")
                        .push(Probe { started, result });
                });
                while tasks.try_join_next().is_some() {}
            }
            while tasks.join_next().await.is_some() {}
            let mut v = log.lock().expect("probe log").clone();
            v.sort_by_key(|p| p.started);
            v
        });
        Probes { stop, task }
    }

    fn finish(self, rt: &Runtime) -> Vec<Probe> {
        self.stop.store(true, Ordering::Relaxed);
        rt.block_on(self.task).expect("probe task")
    }
}

// ----------------------------------------------------------- failover

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
enum Failure {
    /// SIGKILL of the replica's node software.
    Kill,
    /// `ip link set DEV down` on the replica's end of its link.
    Link,
    /// nftables drops every packet in and out of the replica.
    Silent,
}

impl Failure {
    fn parse(s: &str) -> Result<Failure> {
        Ok(match s {
            "kill" => Failure::Kill,
            "link" => Failure::Link,
            "silent" => Failure::Silent,
            other => bail!("--kinds: `{other}` is not kill, link or silent"),
        })
    }

    fn describe(self) -> &'static str {
        match self {
            Failure::Kill => "replica killed (SIGKILL)",
            Failure::Link => "link cut (ip link set down)",
            Failure::Silent => "silent (nftables drops all)",
        }
    }
}

#[derive(serde::Serialize)]
struct FailoverRun {
    replica: usize,
    /// Failure to the last failed new connection (its start), seconds.
    failover_s: f64,
    /// Failure to the router's kernel route without the replica.
    router_s: f64,
    /// New connections that failed after the failure.
    failed: usize,
    /// New connections started from the failure until the last failure.
    attempts_in_window: usize,
    /// Failures of connections started before the failure (in flight
    /// when it struck, or noise).
    failed_before: usize,
    /// New connections started after the failure, in all.
    attempts_after: usize,
    /// The failed ones: seconds after the failure, and why.
    failures: Vec<(f64, Fault)>,
}

fn failover_runs(
    args: &Args,
    lab: &mut Lab,
    rt: &Runtime,
    announcers: &[Announcer],
    kind: Failure,
) -> Result<Vec<(Announcer, FailoverRun)>> {
    let mut runs = Vec::new();
    let mut jitter = Jitter::seeded();
    for run in 0..args.runs {
        for &announcer in announcers {
            let victim = run % REPLICAS;
            if lab.announcer(victim) != Some(announcer) {
                lab.kill_replica(victim)?;
                lab.start_replica(victim, announcer)?;
                lab.wait_next_hops(&[0, 1, 2], Duration::from_secs(90))?;
                std::thread::sleep(Duration::from_secs(2));
            }
            lab.wait_bfd_up(victim, Duration::from_secs(30))?;
            let others: Vec<usize> = (0..REPLICAS).filter(|&i| i != victim).collect();
            let probes = Probes::start(
                rt,
                vip_http(),
                Duration::from_millis(args.probe_interval_ms),
                Duration::from_millis(args.probe_timeout_ms),
            );
            // Anywhere in the keepalive interval: a silent failure's detection
            // depends on how long ago the last keepalive left.
            std::thread::sleep(Duration::from_secs(1) + jitter.next_within(Duration::from_secs(1)));
            let struck = Instant::now();
            match kind {
                Failure::Kill => lab.kill_replica(victim)?,
                Failure::Link => lab.link_down(victim)?,
                Failure::Silent => lab.silence(victim)?,
            }
            let router = lab.wait_next_hops(&others, Duration::from_secs(30));
            let router_s = struck.elapsed().as_secs_f64();
            // Probes in flight at the switch end within their timeout; the
            // rest shows no failure lingers.
            std::thread::sleep(
                Duration::from_millis(args.probe_timeout_ms) + Duration::from_secs(2),
            );
            let log = probes.finish(rt);
            router?;
            let after: Vec<&Probe> = log.iter().filter(|p| p.started >= struck).collect();
            let last_failure = after
                .iter()
                .filter(|p| p.result.is_err())
                .map(|p| p.started)
                .max();
            let failover_s = last_failure.map_or(0.0, |t| (t - struck).as_secs_f64());
            let r = FailoverRun {
                replica: victim,
                failover_s,
                router_s,
                failed: after.iter().filter(|p| p.result.is_err()).count(),
                attempts_in_window: last_failure
                    .map_or(0, |t| after.iter().filter(|p| p.started <= t).count()),
                failed_before: log
                    .iter()
                    .filter(|p| p.started < struck && p.result.is_err())
                    .count(),
                attempts_after: after.len(),
                failures: after
                    .iter()
                    .filter_map(|p| Some(((p.started - struck).as_secs_f64(), p.result.err()?)))
                    .collect(),
            };
            println!(
                "{announcer:?} {kind:?} run {run} (replica {victim}): failover {:.2} s, router {:.2} s, {} of {} new connections failed ({} of {} after the failure; {} before)",
                r.failover_s,
                r.router_s,
                r.failed,
                r.attempts_in_window,
                r.failed,
                r.attempts_after,
                r.failed_before
            );
            if let (Some(first), Some(last)) = (r.failures.first(), r.failures.last()) {
                println!(
                    "  failures from {:.3} s ({:?}) to {:.3} s ({:?})",
                    first.0, first.1, last.0, last.1
                );
            }
            runs.push((announcer, r));
            match kind {
                Failure::Kill => lab.start_replica(victim, announcer)?,
                Failure::Link => lab.link_up(victim)?,
                Failure::Silent => lab.unsilence(victim)?,
            }
            lab.wait_next_hops(&[0, 1, 2], Duration::from_secs(90))?;
            std::thread::sleep(Duration::from_secs(2));
        }
    }
    Ok(runs)
}

/// A small xorshift generator: uniform delays, no crate for it.
struct Jitter(u64);

impl Jitter {
    fn seeded() -> Jitter {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos() as u64)
            .unwrap_or(1);
        Jitter(nanos | 1)
    }

    /// Uniform in [0, bound).
    fn next_within(&mut self, bound: Duration) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        bound.mul_f64((self.0 >> 11) as f64 / (1u64 << 53) as f64)
    }
}

fn summarise_failover(announcer: Announcer, kind: Failure, runs: Vec<&FailoverRun>) -> Value {
    let worst = |f: fn(&FailoverRun) -> f64| runs.iter().map(|r| f(r)).fold(f64::NAN, f64::max);
    json!({
        "announcer": announcer,
        "failure": kind,
        "strike_jitter": true,
        "runs": runs.len(),
        "median_s": median(runs.iter().map(|r| r.failover_s)),
        "worst_s": worst(|r| r.failover_s),
        "router_median_s": median(runs.iter().map(|r| r.router_s)),
        "router_worst_s": worst(|r| r.router_s),
        "failed_median": median(runs.iter().map(|r| r.failed as f64)),
        "failed_worst": worst(|r| r.failed as f64),
        "attempts_in_window_median": median(runs.iter().map(|r| r.attempts_in_window as f64)),
        "all": runs,
    })
}

fn print_failover(sections: &[Value]) {
    println!(
        "\n{:<32} {:>6} {:>8} {:>9} {:>8} {:>10} {:>10} {:>14}",
        "failure",
        "bfd",
        "announcer",
        "median s",
        "worst s",
        "router med",
        "failed med",
        "failed worst"
    );
    for s in sections {
        let kind: Failure = serde_json::from_value(s["failure"].clone())
            .ok()
            .unwrap_or(Failure::Kill);
        println!(
            "{:<32} {:>6} {:>8} {:>9.2} {:>8.2} {:>10.2} {:>10} {:>14}",
            kind.describe(),
            s["bfd"].as_str().unwrap_or("-"),
            s["announcer"].as_str().unwrap_or("?"),
            s["median_s"].as_f64().unwrap_or(f64::NAN),
            s["worst_s"].as_f64().unwrap_or(f64::NAN),
            s["router_median_s"].as_f64().unwrap_or(f64::NAN),
            s["failed_median"],
            s["failed_worst"],
        );
    }
}

// ------------------------------------------------------------- spread

/// The router's forwarding for the VIP: BGP's ECMP route, or a resilient
/// group that follows BGP's choice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
enum Forwarding {
    Ecmp,
    Resilient,
}

/// Keeps the resilient group's members equal to the replicas BGP uses,
/// as a router with resilient hashing does with its own ECMP set.
struct Mirror {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Mirror {
    fn start(lab: &Lab) -> Result<Mirror> {
        let router = lab.net();
        router.resilient_group(&router.bgp_next_hops())?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut current = router.resilient_members();
            while !flag.load(Ordering::Relaxed) {
                let used = router.bgp_next_hops();
                if !used.is_empty() && used != current {
                    if let Err(e) = router.resilient_group(&used) {
                        eprintln!("resilient group: {e:#}");
                    }
                    current = used;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        });
        Ok(Mirror {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Mirror {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Waits until the router forwards the VIP over exactly `replicas`.
fn wait_forwarding(lab: &Lab, forwarding: Forwarding, replicas: &[usize]) -> Result<()> {
    match forwarding {
        Forwarding::Ecmp => lab
            .wait_next_hops(replicas, Duration::from_secs(60))
            .map(|_| ()),
        Forwarding::Resilient => {
            let want: BTreeSet<usize> = replicas.iter().copied().collect();
            bgp_lab::poll(
                &format!("the resilient group over {want:?}"),
                Duration::from_secs(60),
                Duration::from_millis(20),
                || (lab.net().resilient_members() == want).then_some(()),
            )
            .with_context(|| lab.dump())
        }
    }
}

fn spread(args: &Args, lab: &mut Lab, rt: &Runtime) -> Result<Value> {
    // New connections, one after another.
    let n = args.spread_connections;
    let counts = run_on(rt, async move {
        let mut counts = [0usize; REPLICAS];
        let mut failed = 0;
        for _ in 0..n {
            match probe(vip_http(), Duration::from_secs(2)).await {
                Ok(i) => counts[i] += 1,
                Err(_) => failed += 1,
            }
        }
        (counts, failed)
    });
    let shares: Vec<f64> = counts.0.iter().map(|&c| c as f64 / n as f64).collect();
    println!(
        "\nspread of {n} new connections: {:?} (shares {:.3?}), {} failed",
        counts.0, shares, counts.1
    );
    let mut rounds = Vec::new();
    for forwarding in [Forwarding::Ecmp, Forwarding::Resilient] {
        for leaving in 0..REPLICAS {
            let mirror = match forwarding {
                Forwarding::Ecmp => None,
                Forwarding::Resilient => Some(Mirror::start(lab)?),
            };
            wait_forwarding(lab, forwarding, &[0, 1, 2])?;
            let count = args.long_lived;
            let conns = run_on(rt, async move {
                let mut conns = Vec::new();
                for _ in 0..count {
                    let Ok(mut s) = TcpStream::connect(vip_http()).await else {
                        continue;
                    };
                    let mut buf = Vec::new();
                    if let Ok(r) = exchange(&mut s, &mut buf, false).await {
                        conns.push((s, r.replica));
                    }
                }
                conns
            });
            let mut per_replica = [0usize; REPLICAS];
            for (_, r) in &conns {
                per_replica[*r] += 1;
            }
            lab.terminate_replica(leaving)?;
            let others: Vec<usize> = (0..REPLICAS).filter(|&i| i != leaving).collect();
            wait_forwarding(lab, forwarding, &others)?;
            std::thread::sleep(Duration::from_millis(500));
            let (surviving, broken) = run_on(rt, async move {
                let mut surviving = 0;
                let mut broken = 0;
                for (mut s, r) in conns {
                    if r == leaving {
                        continue;
                    }
                    surviving += 1;
                    let mut buf = Vec::new();
                    let ok = tokio::time::timeout(
                        Duration::from_secs(2),
                        exchange(&mut s, &mut buf, false),
                    )
                    .await;
                    if !matches!(ok, Ok(Ok(ref reply)) if reply.replica == r) {
                        broken += 1;
                    }
                }
                (surviving, broken)
            });
            println!(
                "{forwarding:?}, replica {leaving} stops: {broken} of {surviving} long-lived connections to the others broke (per replica before: {per_replica:?})"
            );
            rounds.push(json!({
                "forwarding": forwarding,
                "leaving": leaving,
                "per_replica_before": per_replica,
                "to_surviving": surviving,
                "broken": broken,
            }));
            lab.reap(leaving, Duration::from_secs(30))?;
            lab.start_replica(leaving, Announcer::Teapot)?;
            wait_forwarding(lab, forwarding, &[0, 1, 2])?;
            drop(mirror);
            if forwarding == Forwarding::Resilient {
                // A fresh, balanced group for the next round.
                lab.net().drop_resilient_group();
            }
            lab.wait_next_hops(&[0, 1, 2], Duration::from_secs(60))?;
        }
    }
    let broken_sum = |f: Forwarding| -> (u64, u64) {
        rounds
            .iter()
            .filter(|r| r["forwarding"] == json!(f))
            .fold((0, 0), |(b, s), r| {
                (
                    b + r["broken"].as_u64().unwrap_or(0),
                    s + r["to_surviving"].as_u64().unwrap_or(0),
                )
            })
    };
    let (eb, es) = broken_sum(Forwarding::Ecmp);
    let (rb, rs) = broken_sum(Forwarding::Resilient);
    println!(
        "long-lived connections to surviving replicas broken: ECMP {eb} of {es}, resilient group {rb} of {rs}"
    );
    Ok(json!({
        "new_connections": n,
        "per_replica": counts.0,
        "shares": shares,
        "failed": counts.1,
        "long_lived": args.long_lived,
        "withdrawal": "graceful stop (SIGTERM) of one replica; then one request on every connection that went to another replica",
        "resilient_group": format!("ip nexthop group type resilient buckets {} idle_timer 1, installed by hand in the router's kernel below BGP's route and kept equal to BGP's multipath set (a stand-in for a router with resilient hashing)", bgp_lab::RESILIENT_BUCKETS),
        "rounds": rounds,
        "ecmp_broken": eb, "ecmp_to_surviving": es,
        "resilient_broken": rb, "resilient_to_surviving": rs,
    }))
}

// ------------------------------------------------------------ planned

#[derive(Default, Clone, serde::Serialize)]
struct KeepAliveTally {
    requests_ok: u64,
    /// Failed with no response byte on a reused connection (a retrying
    /// client resends these).
    failed_no_response: u64,
    failed_broken: u64,
    failed_timeout: u64,
    /// New connections of the keep-alive clients that could not connect.
    connect_failed: u64,
    /// Responses with `Connection: close` (the replica draining).
    closed_by_server: u64,
    /// Failures by the replica the connection had answered from.
    failed_by_replica: [u64; REPLICAS],
    failures_at_s: Vec<f64>,
}

/// Keep-alive clients: each sends a request, waits 20 ms, again; a new
/// connection when the server closes or a request fails.
fn keepalive_load(
    rt: &Runtime,
    clients: usize,
    stop: Arc<AtomicBool>,
    t0: Instant,
) -> tokio::task::JoinHandle<KeepAliveTally> {
    rt.spawn(async move {
        let tally = Arc::new(Mutex::new(KeepAliveTally::default()));
        let mut tasks = JoinSet::new();
        for _ in 0..clients {
            let (stop, tally) = (stop.clone(), tally.clone());
            tasks.spawn(async move {
                let mut conn: Option<(TcpStream, Vec<u8>, Option<usize>)> = None;
                while !stop.load(Ordering::Relaxed) {
                    if conn.is_none() {
                        match tokio::time::timeout(
                            Duration::from_secs(1),
                            TcpStream::connect(vip_http()),
                        )
                        .await
                        {
                            Ok(Ok(s)) => conn = Some((s, Vec::new(), None)),
                            _ => {
                                tally.lock().expect("tally").connect_failed += 1;
                                tokio::time::sleep(Duration::from_millis(20)).await;
                                continue;
                            }
                        }
                    }
                    let (s, buf, seen) = conn.as_mut().expect("connection");
                    let result =
                        tokio::time::timeout(Duration::from_secs(1), exchange(s, buf, false))
                            .await
                            .unwrap_or(Err(Fault::Timeout));
                    {
                        let mut t = tally.lock().expect("tally");
                        match result {
                            Ok(reply) => {
                                t.requests_ok += 1;
                                *seen = Some(reply.replica);
                                if reply.close {
                                    t.closed_by_server += 1;
                                    conn = None;
                                }
                            }
                            Err(fault) => {
                                match fault {
                                    Fault::NoResponse => t.failed_no_response += 1,
                                    Fault::Broken => t.failed_broken += 1,
                                    Fault::Timeout => t.failed_timeout += 1,
                                }
                                if let Some(r) = *seen {
                                    t.failed_by_replica[r] += 1;
                                }
                                t.failures_at_s.push(t0.elapsed().as_secs_f64());
                                conn = None;
                            }
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            });
        }
        while tasks.join_next().await.is_some() {}
        tally.lock().expect("tally").clone()
    })
}

/// One L4 stream: the replica behind it and whether (and when) it broke.
#[derive(Clone, Copy, serde::Serialize)]
struct Stream {
    replica: usize,
    broke_at_s: Option<f64>,
}

/// `n` L4 connections, each a request every 100 ms until stopped.
fn l4_streams(
    rt: &Runtime,
    n: usize,
    stop: Arc<AtomicBool>,
    t0: Instant,
) -> Result<tokio::task::JoinHandle<Vec<Stream>>> {
    let opened = run_on(rt, async move {
        let mut v = Vec::new();
        for _ in 0..n {
            let mut s = TcpStream::connect(vip_l4()).await?;
            let mut buf = Vec::new();
            let r = exchange(&mut s, &mut buf, false)
                .await
                .map_err(|f| anyhow::anyhow!("first request on an L4 stream: {f:?}"))?;
            v.push((s, buf, r.replica));
        }
        Ok::<_, anyhow::Error>(v)
    })?;
    Ok(rt.spawn(async move {
        let mut tasks = JoinSet::new();
        for (mut s, mut buf, replica) in opened {
            let stop = stop.clone();
            tasks.spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let r = tokio::time::timeout(
                        Duration::from_secs(1),
                        exchange(&mut s, &mut buf, false),
                    )
                    .await;
                    if !matches!(r, Ok(Ok(ref reply)) if reply.replica == replica) {
                        return Stream {
                            replica,
                            broke_at_s: Some(t0.elapsed().as_secs_f64()),
                        };
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Stream {
                    replica,
                    broke_at_s: None,
                }
            });
        }
        let mut out = Vec::new();
        while let Some(s) = tasks.join_next().await {
            if let Ok(s) = s {
                out.push(s);
            }
        }
        out
    }))
}

fn planned(lab: &mut Lab, rt: &Runtime) -> Result<Value> {
    let mut sections = Vec::new();
    for forwarding in [Forwarding::Ecmp, Forwarding::Resilient] {
        let mirror = match forwarding {
            Forwarding::Ecmp => None,
            Forwarding::Resilient => Some(Mirror::start(lab)?),
        };
        wait_forwarding(lab, forwarding, &[0, 1, 2])?;
        let t0 = Instant::now();
        let stop = Arc::new(AtomicBool::new(false));
        let keepalive = keepalive_load(rt, 24, stop.clone(), t0);
        let probes = Probes::start(
            rt,
            vip_http(),
            Duration::from_millis(10),
            Duration::from_secs(1),
        );
        std::thread::sleep(Duration::from_secs(2));
        let mut restarts = Vec::new();
        for k in 0..REPLICAS {
            let stream_stop = Arc::new(AtomicBool::new(false));
            let streams = l4_streams(rt, 24, stream_stop.clone(), t0)?;
            std::thread::sleep(Duration::from_millis(500));
            let from = t0.elapsed().as_secs_f64();
            lab.terminate_replica(k)?;
            let started = Instant::now();
            lab.reap(k, Duration::from_secs(60))?;
            let exited_s = started.elapsed().as_secs_f64();
            lab.start_replica(k, Announcer::Teapot)?;
            wait_forwarding(lab, forwarding, &[0, 1, 2])?;
            let back_s = started.elapsed().as_secs_f64();
            std::thread::sleep(Duration::from_secs(2));
            stream_stop.store(true, Ordering::Relaxed);
            let streams = rt.block_on(streams)?;
            let to_others: Vec<&Stream> = streams.iter().filter(|s| s.replica != k).collect();
            let broken_others = to_others.iter().filter(|s| s.broke_at_s.is_some()).count();
            let to_k: Vec<&Stream> = streams.iter().filter(|s| s.replica == k).collect();
            let broken_k = to_k.iter().filter(|s| s.broke_at_s.is_some()).count();
            println!(
                "{forwarding:?}: replica {k} restarted (exit after {exited_s:.1} s, back in the route after {back_s:.1} s); L4 streams broken: {broken_others} of {} to the others, {broken_k} of {} to it",
                to_others.len(),
                to_k.len()
            );
            restarts.push(json!({
                "replica": k,
                "sigterm_at_s": from,
                "exited_after_s": exited_s,
                "back_after_s": back_s,
                "l4_streams_to_others": to_others.len(),
                "l4_broken_to_others": broken_others,
                "l4_streams_to_restarted": to_k.len(),
                "l4_broken_to_restarted": broken_k,
            }));
        }
        std::thread::sleep(Duration::from_secs(1));
        stop.store(true, Ordering::Relaxed);
        let tally = rt.block_on(keepalive)?;
        let log = probes.finish(rt);
        let new_failed: Vec<&Probe> = log.iter().filter(|p| p.result.is_err()).collect();
        let failed_requests = tally.failed_no_response + tally.failed_broken + tally.failed_timeout;
        println!(
            "{forwarding:?}: keep-alive requests {} ok, {failed_requests} failed ({} with no response byte, {} broken, {} timed out; by replica {:?}); new connections {} of {} failed",
            tally.requests_ok,
            tally.failed_no_response,
            tally.failed_broken,
            tally.failed_timeout,
            tally.failed_by_replica,
            new_failed.len(),
            log.len()
        );
        sections.push(json!({
            "forwarding": forwarding,
            "keepalive_clients": 24,
            "keepalive": tally,
            "keepalive_failed": failed_requests,
            "new_connections": log.len(),
            "new_connections_failed": new_failed.len(),
            "new_connection_failures_at_s": new_failed.iter().map(|p| (p.started - t0).as_secs_f64()).collect::<Vec<_>>(),
            "restarts": restarts,
        }));
        drop(mirror);
        if forwarding == Forwarding::Resilient {
            lab.net().drop_resilient_group();
        }
        lab.wait_next_hops(&[0, 1, 2], Duration::from_secs(60))?;
    }
    Ok(json!({
        "load": "24 keep-alive clients (a request every 20 ms each), a new connection every 10 ms (1 s timeout), 24 L4 streams opened before each restart (a request every 100 ms each)",
        "restart": "SIGTERM (GRACEFUL_SHUTDOWN, 5 s wait, withdrawal, drain with --grace-period 5), exit, start, until the router forwards to it again",
        "results": sections,
    }))
}

// -------------------------------------------------------------- scale

/// One start of all three replicas announcing `extra` besides the
/// usual two addresses: routes per replica, seconds from the start until
/// the router had every route from every replica (BGP) and in its kernel
/// over three next hops, and each replica's RSS 3 s later.
fn announce_all(lab: &mut Lab, extra: &[&str], last: &str) -> Result<Value> {
    stop_all(lab)?;
    lab.extra_announce = extra.iter().map(|s| s.to_string()).collect();
    let expected = 2 + if extra.is_empty() { 0 } else { 2046 };
    let started = Instant::now();
    for i in 0..REPLICAS {
        lab.start_replica(i, Announcer::Teapot)?;
    }
    let bgp_s = bgp_lab::poll(
        "every route from every replica",
        Duration::from_secs(120),
        Duration::from_millis(20),
        || {
            lab.net()
                .prefixes_received()
                .iter()
                .all(|&n| n >= expected)
                .then(|| started.elapsed())
        },
    )?;
    let kernel_s = bgp_lab::poll(
        "every route in the router's kernel over three next hops",
        Duration::from_secs(120),
        Duration::from_millis(20),
        || {
            (lab.net().kernel_bgp_routes() as u64 >= expected
                && lab.net().kernel_next_hops(last).len() == REPLICAS)
                .then(|| started.elapsed())
        },
    )?;
    std::thread::sleep(Duration::from_secs(3));
    let rss: Vec<u64> = (0..REPLICAS).map(|i| lab.rss(i)).collect();
    println!(
        "{expected} routes per replica: the router had all from all three {:.2} s after the start, in its kernel over three next hops after {:.2} s; RSS {:.1} MiB (median)",
        bgp_s.as_secs_f64(),
        kernel_s.as_secs_f64(),
        median(rss.iter().map(|&b| b as f64 / 1048576.0)),
    );
    Ok(json!({
        "routes_per_replica": expected,
        "start_to_router_bgp_all_s": bgp_s.as_secs_f64(),
        "start_to_router_kernel_all_s": kernel_s.as_secs_f64(),
        "rss_bytes": rss,
    }))
}

fn scale(lab: &mut Lab) -> Result<Value> {
    println!();
    let small = announce_all(lab, &[], &format!("{VIP}/32"))?;
    let large = announce_all(lab, &["--announce", bgp_lab::SCALE_CIDR], "198.19.7.254/32")?;
    // Back to the usual set, so a later measurement starts as the others do.
    stop_all(lab)?;
    lab.extra_announce.clear();
    start_all(lab, Announcer::Teapot)?;
    Ok(json!({
        "small": small,
        "large": large,
        "measures": "the three replicas start together (process start, manifests read, first snapshot, BGP session, UPDATEs) until the router holds every route from each (pfxRcd) and has them in its kernel over three next hops; RSS of each teapot 3 s later",
    }))
}

// ---------------------------------------------------------------- misc

/// The 1, 5 and 15 minute load averages (/proc/loadavg) now: how busy
/// the shared machine was around a measurement.
fn load_average() -> Vec<f64> {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .filter_map(|v| v.parse().ok())
        .collect()
}

fn commit() -> String {
    teapot_benches::results::commit(Path::new(env!("CARGO_MANIFEST_DIR")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_stays_below_its_bound_and_spreads() {
        let mut j = Jitter(0x9e37_79b9_7f4a_7c15);
        let bound = Duration::from_secs(1);
        let draws: Vec<Duration> = (0..1000).map(|_| j.next_within(bound)).collect();
        assert!(draws.iter().all(|d| *d < bound));
        let low = draws.iter().filter(|d| **d < bound / 2).count();
        assert!((400..600).contains(&low), "{low} of 1000 in the lower half");
    }

    #[test]
    fn find_locates_the_end_of_a_head() {
        assert_eq!(find(b"HTTP/1.1 200 OK\r\n\r\nbody", b"\r\n\r\n"), Some(15));
        assert_eq!(find(b"HTTP/1.1 200 OK\r\n", b"\r\n\r\n"), None);
    }
}
