//! The agent at scale: `teapot agent` binaries, one after the other, each
//! between two fresh API doubles (tenant cluster, LB cluster) holding
//! `--namespaces` tenant namespaces with `--services` L4 Services in all
//! (`type: LoadBalancer`, class `teapot.dev/lb`), one EndpointSlice of
//! three pods each, in `pod` mode.
//!
//! Per binary: the time from start until every Service has its LB
//! EndpointSlice, then rounds of endpoint changes (one endpoint of one
//! Service each, spread over the namespaces): `--bursts` bursts of
//! `--burst` changes written at once, then `--steady` changes at
//! `--rate` per second. Each change is timed from its tenant write to the
//! LB slice event that carries it (a watch on the LB double); the agent's
//! CPU seconds (from `/proc`) per phase, its RSS after start-up and at
//! the end, and its CPU over `--rest` seconds with nothing changing.
//!
//! The doubles and the LB watch run in this process; the agent is a child
//! process, so its CPU and RSS are its own.
//!
//! Run: `cargo run --release -p teapot-benches --bin agent-scale --
//! --agent base=/work/target-rel-agentbase/release/teapot
//! --agent new=/work/target-rel/release/teapot --out FILE`.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use futures::StreamExt;
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_benches::stats::percentile;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::procfs;

const LB_NS: &str = "tenant-acme";
const NODES: usize = 10;

#[derive(Parser, Debug)]
struct Args {
    /// `label=path` of a teapot binary; give one per binary to compare.
    #[arg(long = "agent", required = true)]
    agents: Vec<String>,
    #[arg(long, default_value_t = 1000)]
    namespaces: usize,
    #[arg(long, default_value_t = 10_000)]
    services: usize,
    /// Changes per burst.
    #[arg(long, default_value_t = 1000)]
    burst: usize,
    #[arg(long, default_value_t = 3)]
    bursts: usize,
    /// Changes written at `--rate` per second after the bursts.
    #[arg(long, default_value_t = 1000)]
    steady: usize,
    #[arg(long, default_value_t = 100)]
    rate: usize,
    /// Seconds of rest over which CPU is measured.
    #[arg(long, default_value_t = 10)]
    rest: u64,
    /// Give up waiting for a phase after this many seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
    /// Where the JSON result goes.
    #[arg(long)]
    out: Option<PathBuf>,
}

fn namespace(g: usize, namespaces: usize) -> String {
    format!("ns-{:04}", g % namespaces)
}

fn service_name(g: usize) -> String {
    format!("svc-{g}")
}

fn service(g: usize, namespaces: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": service_name(g), "namespace": namespace(g, namespaces),
                     "finalizers": [teapot_controller::ingress::FINALIZER]},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                 "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": 30000 + (g % 2000), "protocol": "TCP"}]}})
}

/// The address of endpoint `e` of Service `g` after `version` changes.
fn address(g: usize, e: usize, version: usize) -> String {
    let last = if e == 2 { 10 + version } else { e + 1 };
    format!("10.{}.{}.{}", g / 256, g % 256, last)
}

fn slice(g: usize, namespaces: usize, version: usize) -> Value {
    let endpoints: Vec<Value> = (0..3)
        .map(|e| {
            json!({"addresses": [address(g, e, version)],
                   "nodeName": format!("node-{}", (g + e) % NODES),
                   "conditions": {"ready": true}})
        })
        .collect();
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
           "metadata": {"name": format!("{}-abcde", service_name(g)),
                        "namespace": namespace(g, namespaces),
                        "labels": {"kubernetes.io/service-name": service_name(g)}},
           "addressType": "IPv4", "endpoints": endpoints,
           "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
}

/// What the LB watch saw: for each Service, the addresses of its slice
/// and when they last changed.
#[derive(Default)]
struct Seen {
    slices: HashMap<usize, (Vec<String>, Instant)>,
}

struct Run {
    label: String,
    startup_s: f64,
    startup_cpu_s: f64,
    rss_after_start_mib: f64,
    rest_cpu_s: f64,
    phases: Vec<Value>,
    rss_end_mib: f64,
    peak_rss_mib: f64,
}

fn cpu(pid: u32) -> f64 {
    procfs::own_cpu_seconds(pid).unwrap_or(0.0)
}

fn mib(kib: std::io::Result<u64>) -> f64 {
    kib.unwrap_or(0) as f64 / 1024.0
}

fn spawn(
    path: &str,
    tenant: &ApiServer,
    lb: &ApiServer,
    log: &std::path::Path,
) -> anyhow::Result<Child> {
    let log = std::fs::File::create(log)?;
    Command::new(path)
        .arg("agent")
        .arg("--lb-kubeconfig")
        .arg(lb.kubeconfig_path())
        .args(["--lb-namespace", LB_NS])
        .arg("--tenant-kubeconfig")
        .arg(tenant.kubeconfig_path())
        .args([
            "--mode",
            "pod",
            "--no-install-class",
            "--no-leader-election",
        ])
        .args(["--admin", "127.0.0.1:0"])
        // No full resync in the middle of a phase.
        .args(["--resync-seconds", "3600"])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .with_context(|| format!("starting {path}"))
}

async fn measure(label: &str, path: &str, args: &Args) -> anyhow::Result<Run> {
    let n = args.services;
    let tenant = ApiServer::start().await;
    let lb = ApiServer::start().await;
    for i in 0..NODES {
        tenant.apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")},
            "status": {"addresses": [{"type": "InternalIP", "address": format!("192.168.0.{}", i + 1)}]}}));
    }
    for g in 0..n {
        tenant.apply(service(g, args.namespaces));
        tenant.apply(slice(g, args.namespaces, 0));
    }
    let by_name: Arc<HashMap<String, usize>> = Arc::new(
        (0..n)
            .map(|g| {
                (
                    mirrored_service_name(&namespace(g, args.namespaces), &service_name(g)),
                    g,
                )
            })
            .collect(),
    );
    // The LB watch, before the agent: it sees every slice the agent writes.
    let seen = Arc::new(Mutex::new(Seen::default()));
    let watch = {
        let (seen, by_name) = (seen.clone(), by_name.clone());
        let api: Api<EndpointSlice> = Api::namespaced(lb.client(), LB_NS);
        tokio::spawn(async move {
            let mut events =
                std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
            while let Some(event) = events.next().await {
                let Ok(slice) = event else { continue };
                let Some(g) = slice.metadata.name.as_ref().and_then(|s| by_name.get(s)) else {
                    continue;
                };
                let addresses: Vec<String> = slice
                    .endpoints
                    .iter()
                    .flatten()
                    .flat_map(|e| e.addresses.clone())
                    .collect();
                seen.lock()
                    .unwrap()
                    .slices
                    .insert(*g, (addresses, Instant::now()));
            }
        })
    };
    let dir = tempfile::tempdir()?;
    let started = Instant::now();
    let mut child = spawn(path, &tenant, &lb, &dir.path().join("agent.log"))?;
    let pid = child.id();
    let timeout = Duration::from_secs(args.timeout);
    loop {
        let done = seen.lock().unwrap().slices.len();
        if done == n {
            break;
        }
        if started.elapsed() > timeout {
            let log = std::fs::read_to_string(dir.path().join("agent.log")).unwrap_or_default();
            let tail: String = log.lines().rev().take(20).collect::<Vec<_>>().join("\n");
            let _ = child.kill();
            bail!("{label}: only {done} of {n} LB slices after {timeout:?}; log tail:\n{tail}");
        }
        if let Ok(Some(status)) = child.try_wait() {
            bail!("{label}: the agent exited: {status}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let startup_s = started.elapsed().as_secs_f64();
    // Settle: the controller half's status and finalizer writes trail the
    // slices.
    let mut last = cpu(pid);
    loop {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = cpu(pid);
        if now - last < 0.05 || started.elapsed() > timeout {
            break;
        }
        last = now;
    }
    let startup_cpu_s = cpu(pid);
    let rss_after_start_mib = mib(procfs::rss_kib(pid));
    let c0 = cpu(pid);
    tokio::time::sleep(Duration::from_secs(args.rest)).await;
    let rest_cpu_s = cpu(pid) - c0;
    eprintln!(
        "{label}: {n} Services mirrored in {startup_s:.1} s, {startup_cpu_s:.1} CPU s, RSS {rss_after_start_mib:.0} MiB, {rest_cpu_s:.2} CPU s over {} s at rest",
        args.rest
    );

    let mut version = vec![0usize; n];
    let mut phases = Vec::new();
    let mut offset = 0usize;
    let plan: Vec<(String, usize, usize)> = (0..args.bursts)
        .map(|b| (format!("burst-{b}"), args.burst, 0))
        .chain((args.steady > 0).then(|| ("steady".to_string(), args.steady, args.rate)))
        .collect();
    for (name, count, rate) in plan {
        // Spread over the namespaces: consecutive indices sit in
        // consecutive namespaces.
        let targets: Vec<usize> = (0..count.min(n)).map(|i| (offset + i) % n).collect();
        offset += count;
        let c0 = cpu(pid);
        let t0 = Instant::now();
        let mut written: Vec<(usize, Instant, String)> = Vec::with_capacity(targets.len());
        for (i, g) in targets.iter().enumerate() {
            if rate > 0 {
                let due = t0 + Duration::from_secs_f64(i as f64 / rate as f64);
                tokio::time::sleep_until(due.into()).await;
            }
            version[*g] += 1;
            let at = Instant::now();
            tenant.apply(slice(*g, args.namespaces, version[*g]));
            written.push((*g, at, address(*g, 2, version[*g])));
        }
        let mut latencies: Vec<f64> = Vec::new();
        let mut missing = written.len();
        while missing > 0 && t0.elapsed() < timeout {
            tokio::time::sleep(Duration::from_millis(50)).await;
            let seen = seen.lock().unwrap();
            latencies.clear();
            missing = 0;
            for (g, at, want) in &written {
                match seen.slices.get(g) {
                    Some((addresses, when)) if addresses.contains(want) => {
                        latencies.push(when.saturating_duration_since(*at).as_secs_f64() * 1000.0)
                    }
                    _ => missing += 1,
                }
            }
        }
        let wall = t0.elapsed().as_secs_f64();
        // The last changes' reconciles and the spacing's requeues.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let cpu_s = cpu(pid) - c0;
        latencies.sort_by(f64::total_cmp);
        let p = |q| percentile(&latencies, q).unwrap_or(f64::NAN);
        eprintln!(
            "{label} {name}: {} changes, p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms, {missing} missing, {cpu_s:.2} CPU s",
            written.len(),
            p(0.5),
            p(0.99),
            p(1.0)
        );
        phases.push(
            json!({"phase": name, "changes": written.len(), "rate_per_s": rate,
            "p50_ms": p(0.5), "p90_ms": p(0.9), "p99_ms": p(0.99), "max_ms": p(1.0),
            "missing": missing, "wall_s": wall, "cpu_s": cpu_s,
            "cpu_ms_per_change": cpu_s * 1000.0 / written.len().max(1) as f64}),
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let rss_end_mib = mib(procfs::rss_kib(pid));
    let peak_rss_mib = mib(procfs::peak_rss_kib(pid));
    let _ = child.kill();
    let _ = child.wait();
    watch.abort();
    Ok(Run {
        label: label.to_string(),
        startup_s,
        startup_cpu_s,
        rss_after_start_mib,
        rest_cpu_s,
        phases,
        rss_end_mib,
        peak_rss_mib,
    })
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .trim()
        .to_string()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    let load_before = load();
    let mut runs = Vec::new();
    for spec in &args.agents {
        let (label, path) = spec
            .split_once('=')
            .with_context(|| format!("--agent {spec}: want label=path"))?;
        runs.push(measure(label, path, &args).await?);
    }
    let out: Vec<Value> = runs
        .iter()
        .map(|r| {
            json!({"agent": r.label, "startup_s": r.startup_s, "startup_cpu_s": r.startup_cpu_s,
                   "rss_after_start_mib": r.rss_after_start_mib, "rest_cpu_s": r.rest_cpu_s,
                   "rest_s": args.rest, "phases": r.phases, "rss_end_mib": r.rss_end_mib,
                   "peak_rss_mib": r.peak_rss_mib})
        })
        .collect();
    let result = json!({
        "bench": "agent-scale",
        "date": teapot_benches::results::utc_date(),
        "commit": teapot_benches::results::commit(std::path::Path::new(".")),
        "namespaces": args.namespaces, "services": args.services,
        "burst": args.burst, "bursts": args.bursts, "steady": args.steady, "rate": args.rate,
        "load_before": load_before, "load_after": load(),
        "cpus": std::thread::available_parallelism().map_or(0, usize::from),
        "runs": out,
    });
    let text = serde_json::to_string_pretty(&result)?;
    println!("{text}");
    if let Some(path) = &args.out {
        std::fs::write(path, text + "\n")?;
    }
    Ok(())
}
