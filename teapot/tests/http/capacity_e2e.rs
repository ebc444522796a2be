//! Tenant isolation in memory, on the real binary: what one tenant's
//! endpoints cost every replica in memory, and what reloads add to it.
//!
//! The proxy runs with `MIMALLOC_PURGE_DELAY=0`, so memory it frees goes
//! back to the OS at once and its resident set is what it keeps (the
//! shipped 10 s delay would hold the parse's garbage for a while, which is
//! a time trade-off, not a cost per endpoint). RSS is read from
//! `/proc/PID/status`; nothing here depends on timing.

use crate::common;

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use common::{eventually, metric};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

/// Endpoints of the large operator Service: 50 slices of 1,000, each with
/// `nodeName`, `zone` and `targetRef` as the agent's pod mode writes them.
const SLICES: usize = 50;
const PER_SLICE: usize = 1000;

struct Proxy {
    child: tokio::process::Child,
    admin: std::net::SocketAddr,
}

impl Proxy {
    async fn start(manifests: &Path) -> Proxy {
        let mut child = tokio::process::Command::new(common::teapot_bin())
            .args(["proxy", "--manifests"])
            .arg(manifests)
            .args(teapot_testkit::process::LOOPBACK_LISTENERS)
            .args(["--domain", "example.net"])
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("teapot starts");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let addrs = tokio::time::timeout(Duration::from_secs(60), async {
            loop {
                let line = lines.next_line().await.unwrap().expect("a listening line");
                if let Some(a) = teapot_testkit::process::parse_listening_line(&line) {
                    return a;
                }
            }
        })
        .await
        .expect("listening in time");
        tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
        Proxy {
            child,
            admin: addrs.admin,
        }
    }

    async fn generation(&self) -> f64 {
        let client = teapot_testkit::client::Transport::Plain;
        let req = teapot_testkit::client::Request::get("admin", "/metrics");
        match teapot_testkit::client::send(self.admin, &client, &req).await {
            Ok(resp) => metric(&resp.text(), "teapot_snapshot_generation").unwrap_or(0.0),
            Err(_) => 0.0,
        }
    }

    async fn wait_generation(&self, above: f64) -> f64 {
        eventually(
            &format!("generation > {above}"),
            Duration::from_secs(300),
            || async {
                let g = self.generation().await;
                if g > above { Ok(g) } else { Err(g) }
            },
        )
        .await
    }

    /// Resident set in bytes, after the retired snapshot's drop had time.
    async fn rss(&self) -> u64 {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let pid = self.child.id().expect("running");
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: u64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .expect("VmRSS");
        kb * 1024
    }
}

fn quiet_tenant(version: usize) -> String {
    common::docs(&[
        json!({
            "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "quiet"},
            "spec": {"cluster": "quiet", "nodeCIDRs": ["10.9.0.0/16"]},
        }),
        common::service("tenant-quiet", "web", &[(Some("http"), 80)]),
        json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": "web-1", "namespace": "tenant-quiet", "labels": {
                "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "sync.teapot.dev"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 30080}],
            "endpoints": [{"addresses": [format!("10.9.0.{}", version % 250 + 1)]}],
        }),
        common::ingress(
            "tenant-quiet",
            "web",
            json!({"ingressClassName": "teapot", "rules": [{"http": {"paths": [
                common::path("Prefix", "/", common::backend("web", common::Port::Name("http")))]}}]}),
        ),
    ])
}

fn bulk() -> String {
    let mut docs: Vec<Value> = vec![common::service("bulk", "big", &[(Some("http"), 80)])];
    for s in 0..SLICES {
        let endpoints: Vec<Value> = (0..PER_SLICE)
            .map(|e| {
                json!({
                    "addresses": [format!("10.{}.{}.{}", 100 + s / 50, s % 50 * 4 + e / 250, e % 250 + 1)],
                    "conditions": {"ready": true, "serving": true, "terminating": false},
                    "nodeName": format!("ip-10-{s}-{e}.eu-west-1.compute.internal"),
                    "zone": "eu-west-1a",
                    "targetRef": {"kind": "Pod", "namespace": "bulk", "name": format!("big-{s}-{e}"),
                        "uid": format!("8d3c1a64-0b7f-4b0e-9a59-{:06}{:06}", s, e)},
                })
            })
            .collect();
        docs.push(json!({
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": format!("big-{s}"), "namespace": "bulk",
                "labels": {"kubernetes.io/service-name": "big"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080}],
            "endpoints": endpoints,
        }));
    }
    common::docs(&docs)
}

/// Before the compact form the store kept about 950 bytes per endpoint
/// (6x the JSON), and every reload held the previous snapshot until the
/// next one: 50k endpoints were about 48 MB loaded and about 90 MB after
/// a few reloads of an unrelated tenant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_cost_tens_of_bytes_and_reloads_add_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let manifests = dir.path().join("manifests");
    let stage = dir.path().join("stage");
    std::fs::create_dir_all(&manifests).unwrap();
    std::fs::create_dir_all(&stage).unwrap();
    let write = |name: &str, text: &str| {
        std::fs::write(stage.join(name), text).unwrap();
        std::fs::rename(stage.join(name), manifests.join(name)).unwrap();
    };
    write("quiet.yaml", &quiet_tenant(0));
    let proxy = Proxy::start(&manifests).await;
    let mut generation = proxy.wait_generation(0.0).await;
    let empty = proxy.rss().await;

    write("bulk.yaml", &bulk());
    generation = proxy.wait_generation(generation).await;
    let loaded = proxy.rss().await;
    let endpoints = (SLICES * PER_SLICE) as u64;
    let per_endpoint = loaded.saturating_sub(empty) / endpoints;
    eprintln!(
        "RSS empty {} kB, with {endpoints} endpoints {} kB: {per_endpoint} bytes an endpoint",
        empty / 1024,
        loaded / 1024
    );
    assert!(
        per_endpoint < 250,
        "{per_endpoint} bytes of RSS an endpoint (was about 950)"
    );

    // Another tenant's changes: each one a reload.
    for version in 1..=3 {
        write("quiet.yaml", &quiet_tenant(version));
        generation = proxy.wait_generation(generation).await;
    }
    let reloaded = proxy.rss().await;
    eprintln!("RSS after 3 reloads {} kB", reloaded / 1024);
    assert!(
        reloaded.saturating_sub(loaded) < 8 * 1024 * 1024,
        "3 reloads added {} kB",
        reloaded.saturating_sub(loaded) / 1024
    );
}
