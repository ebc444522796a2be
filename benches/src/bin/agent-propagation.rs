//! Agent propagation report: how long a tenant-side change takes to become
//! a live route in the proxy, through the API doubles (tenant API -> agent
//! -> LB API -> proxy kube source -> route table), and how many
//! EndpointSlice writes a 500-pod rollout costs.
//!
//! Everything runs in this process: two API doubles, the agent
//! (`teapot_controller::run`), the proxy (`teapot_proxy::run` in kube mode)
//! and a loopback echo backend. No Tenant object exists on the LB double,
//! so `tenant-acme` is an operator namespace there and loopback endpoints
//! are allowed (a benchmark measures propagation, not the address policy;
//! the e2e test keeps that rule on).
//!
//! A report, not a test: it prints PASS/MISS against the goals (p99 under
//! 1 s; a handful of writes per rollout) and never fails on a timing.
//!
//! Run: `cargo run --release -p teapot-benches --bin agent-propagation`
//! (`-- --rounds 50`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_benches::stats::percentile;
use teapot_controller::{AgentConfig, Metrics};
use teapot_proxy::{Listeners, ProxyConfig};
use teapot_source::kube::KubeConfig;
use teapot_sync::Mode;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport, send};
use teapot_testkit::echo::{EchoIdentity, EchoServer};

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const NODES: usize = 10;
const PODS: usize = 500;
const PER_SLICE: usize = 100;

#[derive(Parser, Debug)]
struct Args {
    /// Propagation samples per kind of change.
    #[arg(long, default_value_t = 40)]
    rounds: usize,
    /// Give up on one sample after this many seconds.
    #[arg(long, default_value_t = 30)]
    timeout: u64,
}

struct Bench {
    tenant: ApiServer,
    lb: ApiServer,
    http: std::net::SocketAddr,
    timeout: Duration,
}

fn node(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")},
           "status": {"addresses": [{"type": "InternalIP", "address": "127.0.0.1"}]}})
}

/// The tenant's EndpointSlices for `pods` (pod `p` on node `p % NODES`),
/// `PER_SLICE` endpoints per slice, as the EndpointSlice controller cuts
/// them.
fn slices(service: &str, pods: &[usize], ready: bool) -> Vec<Value> {
    pods.chunks(PER_SLICE)
        .enumerate()
        .map(|(i, chunk)| {
            let endpoints: Vec<Value> = chunk
                .iter()
                .map(|p| {
                    json!({"addresses": [format!("10.244.{}.{}", p / 250, p % 250 + 1)],
                                "nodeName": format!("node-{}", p % NODES),
                                "conditions": {"ready": ready}})
                })
                .collect();
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("{service}-{i}"), "namespace": NS,
                                "labels": {"kubernetes.io/service-name": service}},
                   "addressType": "IPv4", "endpoints": endpoints,
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
        })
        .collect()
}

fn service(name: &str, node_port: u16, mode: Option<&str>) -> Value {
    let mut s = json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": name},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": node_port, "protocol": "TCP"}]}});
    if let Some(m) = mode {
        s["metadata"]["annotations"] = json!({"teapot.dev/endpoints": m});
    }
    s
}

fn ingress(name: &str, host: &str, service: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"ingressClassName": "teapot", "rules": [{"host": host, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": service, "port": {"name": "http"}}}}]}}]}})
}

impl Bench {
    async fn status(&self, host: &str) -> u16 {
        send(self.http, &Transport::Plain, &Request::get(host, "/"))
            .await
            .map(|r| r.status)
            .unwrap_or(0)
    }

    /// Time from `change` until `host` answers `want`.
    async fn propagation(
        &self,
        host: &str,
        want: u16,
        change: impl FnOnce(),
    ) -> anyhow::Result<Duration> {
        let start = Instant::now();
        change();
        loop {
            let status = self.status(host).await;
            if status == want {
                return Ok(start.elapsed());
            }
            if start.elapsed() > self.timeout {
                let lb: Vec<String> = self
                    .lb
                    .requests()
                    .iter()
                    .filter(|r| r.method != "GET")
                    .map(|r| format!("{} {}", r.method, r.path))
                    .collect();
                let probe = tokio::time::timeout(
                    Duration::from_secs(2),
                    kube::Api::<k8s_openapi::api::core::v1::Node>::all(self.tenant.client())
                        .list(&Default::default()),
                )
                .await
                .map(|r| r.map(|l| l.items.len()).map_err(|e| e.to_string()));
                eprintln!("tenant probe: {probe:?}");
                let tenant: Vec<String> = self
                    .tenant
                    .requests()
                    .iter()
                    .map(|r| format!("{} {}?{}", r.method, r.path, r.query))
                    .collect();
                bail!(
                    "{host} did not answer {want} within {:?} (last: {status}); LB writes: {lb:#?}; tenant: {tenant:#?}",
                    self.timeout
                );
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }

    fn slice_writes(&self) -> usize {
        self.lb
            .requests()
            .iter()
            .filter(|r| r.method == "PATCH" && r.path.contains("/endpointslices/"))
            .count()
    }

    fn lb_slice_addresses(&self, service: &str) -> Option<usize> {
        let name = teapot_api::hostname::mirrored_service_name(NS, service);
        let s = self
            .lb
            .get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &name)?;
        Some(s["endpoints"].as_array().map_or(0, Vec::len))
    }

    /// Rolls `PODS` pods to new ones, one at a time (a new pod ready, an
    /// old one gone), `pace` apart; returns the LB slice writes it cost
    /// once the LB side shows the final state.
    async fn rollout(
        &self,
        service: &str,
        pace: Duration,
        final_addresses: usize,
    ) -> anyhow::Result<usize> {
        let before = self.slice_writes();
        let mut pods: Vec<usize> = (0..PODS).collect();
        for step in 0..PODS {
            pods[step] = PODS + step;
            for s in slices(service, &pods, true) {
                self.tenant.apply(s);
            }
            if !pace.is_zero() {
                tokio::time::sleep(pace).await;
            }
        }
        // Settled: the final slice is on the LB side and nothing is
        // pending (one more min-write-interval with no write).
        let start = Instant::now();
        loop {
            let writes = self.slice_writes();
            tokio::time::sleep(Duration::from_millis(600)).await;
            if self.lb_slice_addresses(service) == Some(final_addresses)
                && self.slice_writes() == writes
            {
                break;
            }
            if start.elapsed() > self.timeout {
                bail!("the rollout of {service} did not settle");
            }
        }
        Ok(self.slice_writes() - before)
    }
}

fn report(what: &str, mut samples: Vec<Duration>) -> bool {
    samples.sort();
    let p99 = percentile(&samples, 0.99).unwrap_or_default();
    let pass = p99 < Duration::from_secs(1);
    println!(
        "{what:<44} n={:<3} p50={:>7.1?} p90={:>7.1?} p99={:>7.1?} max={:>7.1?}  {}",
        samples.len(),
        percentile(&samples, 0.5).unwrap_or_default(),
        percentile(&samples, 0.9).unwrap_or_default(),
        p99,
        samples[samples.len() - 1],
        if pass { "PASS (<1 s)" } else { "MISS (<1 s)" }
    );
    pass
}

#[tokio::main(flavor = "multi_thread", worker_threads = 4)]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    // Quiet unless RUST_LOG asks (e.g. RUST_LOG=teapot_sync=debug).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off")),
        )
        .with_writer(std::io::stderr)
        .init();
    let echo = EchoServer::start(EchoIdentity::new(NS, "web", "web", "web-0")).await?;
    let port = echo.addr().port();
    let tenant = ApiServer::start().await;
    let lb = ApiServer::start().await;
    for i in 0..NODES {
        tenant.apply(node(i));
    }
    tenant.apply(service("web", port, None));
    tenant.apply(service("rollout-np", port, None));
    tenant.apply(service("rollout-pod", port, Some("pod")));
    for s in ["web", "rollout-np", "rollout-pod"] {
        for slice in slices(s, &(0..PODS).collect::<Vec<_>>(), true) {
            tenant.apply(slice);
        }
    }

    let agent_config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
    let min_write = agent_config.min_write_interval;
    let (agent_stop, agent_stopped) = tokio::sync::watch::channel(false);
    let ready = Arc::new(teapot_controller::Health::default());
    let agent = tokio::spawn(async move {
        let result =
            teapot_controller::run(agent_config, Metrics::new()?, ready, agent_stopped).await;
        if let Err(e) = &result {
            eprintln!("the agent stopped: {e}");
        }
        result
    });
    let listeners = Listeners::bind(Some("127.0.0.1:0"), None, "127.0.0.1:0")?;
    let http = listeners.addrs()?.http.context("the HTTP listener")?;
    let mut config = ProxyConfig::new(Default::default());
    config.kube = Some(KubeConfig::new(lb.client()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    // The proxy gets a runtime of its own, as in the `teapot` binary, so
    // its work never competes with the agent's for this one's workers.
    let proxy = std::thread::spawn(move || {
        tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .map(|rt| {
                rt.block_on(teapot_proxy::run(config, listeners, async move {
                    let _ = stopped.await;
                }))
            })
    });
    let bench = Bench {
        tenant,
        lb,
        http,
        timeout: Duration::from_secs(args.timeout),
    };
    bench
        .tenant
        .apply(ingress("rollouts", "rollout.bench.test", "rollout-np"));
    bench.tenant.apply(ingress(
        "rollouts-pod",
        "rollout-pod.bench.test",
        "rollout-pod",
    ));

    println!(
        "agent propagation through the API doubles ({} rounds)",
        args.rounds
    );
    let mut ok = true;
    let mut created = Vec::new();
    for i in 0..args.rounds {
        let host = format!("r{i}.bench.test");
        let t = &bench.tenant;
        created.push(
            bench
                .propagation(&host, 200, || {
                    t.apply(ingress(&format!("r{i}"), &host, "web"));
                })
                .await?,
        );
    }
    ok &= report("new Ingress -> route serves (200)", created);
    let mut endpoints = Vec::new();
    let all: Vec<usize> = (0..PODS).collect();
    for i in 0..args.rounds {
        // Isolated changes: a burst is what the rollout below measures.
        tokio::time::sleep(min_write).await;
        let (ready, want) = if i % 2 == 0 {
            (false, 503)
        } else {
            (true, 200)
        };
        let t = &bench.tenant;
        endpoints.push(
            bench
                .propagation("r0.bench.test", want, || {
                    for s in slices("web", &all, ready) {
                        t.apply(s);
                    }
                })
                .await?,
        );
    }
    ok &= report("EndpointSlice readiness flip -> 503/200", endpoints);
    let mut deleted = Vec::new();
    for i in 0..args.rounds {
        let host = format!("r{i}.bench.test");
        let t = &bench.tenant;
        deleted.push(
            bench
                .propagation(&host, 404, || {
                    t.delete("networking.k8s.io/v1", "Ingress", NS, &format!("r{i}"));
                })
                .await?,
        );
    }
    ok &= report("Ingress deleted -> route gone (404)", deleted);

    // Wait for both rollout services to be mirrored before counting.
    // (Pod mode's 10.244/16 addresses answer nothing here, so the LB slice
    // is watched instead of the route.)
    let start = Instant::now();
    while bench.lb_slice_addresses("rollout-np") != Some(1)
        || bench.lb_slice_addresses("rollout-pod") != Some(PODS)
    {
        if start.elapsed() > bench.timeout {
            bail!("the rollout Services were not mirrored");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!("EndpointSlice writes for a {PODS}-pod rollout (min write interval {min_write:?}):");
    for (svc, mode, final_addresses) in [
        ("rollout-np", Mode::NodePort, 1),
        ("rollout-pod", Mode::Pod, PODS),
    ] {
        for pace in [Duration::ZERO, Duration::from_millis(10)] {
            let writes = bench.rollout(svc, pace, final_addresses).await?;
            let handful = writes <= 25;
            ok &= handful;
            println!(
                "  mode {mode:<8} {:<32} {writes:>4} writes  {}",
                if pace.is_zero() {
                    "burst (all 500 steps at once)".to_string()
                } else {
                    format!("paced ({pace:?} per pod, ~{:.0?})", pace * PODS as u32)
                },
                if handful {
                    "PASS (<= 25)"
                } else {
                    "MISS (<= 25)"
                }
            );
        }
    }
    println!("overall: {}", if ok { "PASS" } else { "MISS" });
    let _ = agent_stop.send(true);
    let _ = agent.await;
    let _ = stop.send(());
    let _ = proxy.join();
    echo.stop().await;
    Ok(())
}
