//! The sync controller against two API doubles, with the periodic resync
//! pushed out of reach: every change must arrive through watch events alone.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_sync::{Mode, SyncConfig, SyncMetrics};
use teapot_testkit::apiserver::ApiServer;

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const SERVICES: usize = 6;
const NODES: usize = 4;
/// Far longer than any propagation; only a lost trigger waits this long.
const PATIENCE: Duration = Duration::from_secs(30);

fn node(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": format!("node-{i}")},
           "status": {"addresses": [{"type": "InternalIP", "address": format!("10.0.0.{}", i + 1)}]}})
}

fn service(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": format!("svc-{i}"), "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": format!("svc-{i}")},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": 30000 + i, "protocol": "TCP"}]}})
}

/// Two tenant slices of `svc-i`, endpoints on nodes `0..on_nodes`.
fn slices(i: usize, on_nodes: usize) -> Vec<Value> {
    (0..2)
        .map(|s| {
            let endpoints: Vec<Value> = (0..on_nodes)
                .map(|n| {
                    json!({"addresses": [format!("10.244.{n}.{}", 10 * s + i + 1)],
                           "nodeName": format!("node-{n}"), "conditions": {"ready": true}})
                })
                .collect();
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                   "metadata": {"name": format!("svc-{i}-{s}"), "namespace": NS,
                                "labels": {"kubernetes.io/service-name": format!("svc-{i}")}},
                   "addressType": "IPv4", "endpoints": endpoints,
                   "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}]})
        })
        .collect()
}

/// The LB Service the controller half writes for `svc-i`.
fn lb_service(i: usize) -> Value {
    json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": mirrored_service_name(NS, &format!("svc-{i}")), "namespace": LB_NS,
                     "labels": {"app.kubernetes.io/managed-by": "teapot-agent",
                                "teapot.dev/source-namespace": NS,
                                "teapot.dev/source-name": format!("svc-{i}")}},
        "spec": {"ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}})
}

fn lb_addresses(lb: &ApiServer, i: usize) -> Option<usize> {
    let name = mirrored_service_name(NS, &format!("svc-{i}"));
    let slice = lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &name)?;
    Some(slice["endpoints"].as_array().map_or(0, Vec::len))
}

/// Waits until every Service's LB slice lists `want` node addresses;
/// names the ones that never got there.
async fn all_reach(lb: &ApiServer, want: usize) {
    let start = Instant::now();
    loop {
        let missing: Vec<(usize, Option<usize>)> = (0..SERVICES)
            .map(|i| (i, lb_addresses(lb, i)))
            .filter(|(_, n)| *n != Some(want))
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            start.elapsed() < PATIENCE,
            "with the resync out of reach, these Services (index, LB addresses) never reached {want} addresses: {missing:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_services_propagate_without_resync() {
    let tenant = ApiServer::start().await;
    let lb = ApiServer::start().await;
    for n in 0..NODES {
        tenant.apply(node(n));
    }
    for i in 0..SERVICES {
        tenant.apply(service(i));
        for s in slices(i, 1) {
            tenant.apply(s);
        }
    }
    for i in 0..SERVICES {
        lb.apply(lb_service(i));
    }
    // The tenant's EndpointSlices list slowly (many, large): every
    // Service's first reconcile starts before that store is filled and
    // waits for it, all at once.
    let slow_slices = tenant.hold_lists("discovery.k8s.io/v1", "endpointslices");
    let mut config = SyncConfig::new(tenant.client(), lb.client(), LB_NS);
    config.mode = Mode::NodePort;
    config.resync = Duration::from_secs(3600);
    config.min_write_interval = Duration::from_millis(100);
    let metrics = SyncMetrics::new(&prometheus::Registry::new()).unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let sync = tokio::spawn(teapot_sync::run(config, metrics, async move {
        let _ = stopped.await;
    }));
    let start = Instant::now();
    while !tenant
        .requests()
        .iter()
        .any(|r| r.path == "/api/v1/services" && r.param("watch").is_some_and(|w| w == "true"))
    {
        assert!(
            start.elapsed() < PATIENCE,
            "the sync never watched Services"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // The Service store is listed; give its reconciles a moment to start
    // waiting (were they late, the test would pass without proving much,
    // never fail wrongly).
    tokio::time::sleep(Duration::from_millis(300)).await;
    drop(slow_slices);
    all_reach(&lb, 1).await;

    // Every Service's slices change at once (a node-wide rollout).
    for i in 0..SERVICES {
        for s in slices(i, NODES) {
            tenant.apply(s);
        }
    }
    all_reach(&lb, NODES).await;

    // A watch ends (API server restart): changes made meanwhile still land.
    tenant.drop_watches();
    lb.drop_watches();
    for i in 0..SERVICES {
        for s in slices(i, 2) {
            tenant.apply(s);
        }
    }
    all_reach(&lb, 2).await;

    // Slices vanish while nobody watches, and the history is compacted:
    // only a fresh listing shows it, and it must still reach every Service.
    for i in 0..SERVICES {
        for s in 0..2 {
            let name = format!("svc-{i}-{s}");
            assert!(tenant.delete_unannounced("discovery.k8s.io/v1", "EndpointSlice", NS, &name));
        }
    }
    tenant.compact();
    tenant.drop_watches();
    all_reach(&lb, 0).await;

    let _ = stop.send(());
    sync.await.unwrap();
}
