//! Two agent replicas against the same API doubles: one holds the Lease
//! and reconciles, the other stands by and takes over when the leader
//! stops.
//!
//! Run: `cargo test -p teapot-controller --test leader`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use teapot_api::lease::LeaseOptions;
use teapot_controller::{AgentConfig, Health, Metrics};
use teapot_testkit::apiserver::ApiServer;
use tokio::sync::watch;

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
/// Far longer than any step takes; only a hang waits this long.
const PATIENCE: Duration = Duration::from_secs(30);

struct Replica {
    health: Arc<Health>,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<Result<(), teapot_controller::Error>>,
}

fn replica(tenant: &ApiServer, lb: &ApiServer, identity: &str) -> Replica {
    let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
    config.instance = Some(identity.into());
    config.lease = Some(LeaseOptions {
        identity: identity.into(),
        duration: Duration::from_secs(2),
        renew_every: Duration::from_millis(200),
        ..LeaseOptions::new("teapot-system", "teapot-agent")
    });
    let health = Arc::new(Health::default());
    let (stop, stopped) = watch::channel(false);
    let task = tokio::spawn(teapot_controller::run(
        config,
        Metrics::new().unwrap(),
        health.clone(),
        stopped,
    ));
    Replica { health, stop, task }
}

fn ingress(name: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"ingressClassName": "teapot", "rules": [{"http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}})
}

async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < PATIENCE, "{what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Events' reporting instances: which replica wrote.
fn reporters(tenant: &ApiServer) -> Vec<String> {
    tenant
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/events"))
        .filter_map(|r| {
            r.body
                .as_ref()?
                .get("reportingInstance")?
                .as_str()
                .map(str::to_string)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replica_reconciles_and_the_other_takes_over() {
    let tenant = ApiServer::start().await;
    let lb = ApiServer::start().await;
    tenant.apply(json!({"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}]}}));
    tenant.apply(ingress("first"));

    let a = replica(&tenant, &lb, "a");
    eventually("replica a never led", || {
        a.health.leading.load(Ordering::Acquire)
    })
    .await;
    let b = replica(&tenant, &lb, "b");
    eventually("the first Ingress was never mirrored", || {
        lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "first.shop")
            .is_some()
    })
    .await;
    eventually("the leader never reported ready", || a.health.ready()).await;
    // b has tried the lease several times meanwhile and stands by, ready
    // (a rollout must not wait for a standby), writing nothing.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(!b.health.leading.load(Ordering::Acquire));
    assert!(b.health.ready());
    assert_eq!(b.health.role(), "standby");
    assert_eq!(a.health.role(), "leader");
    let writers = reporters(&tenant);
    assert!(
        !writers.is_empty() && writers.iter().all(|w| w == "a"),
        "{writers:?}"
    );

    // The leader stops and gives its lease up on the way out; the standby
    // takes over at its next try, not after the lease runs out.
    a.stop.send(true).unwrap();
    a.task.await.unwrap().unwrap();
    let lease = tenant
        .get(
            "coordination.k8s.io/v1",
            "Lease",
            "teapot-system",
            "teapot-agent",
        )
        .expect("the agent lease");
    assert!(
        lease["spec"]["holderIdentity"].is_null() || lease["spec"]["holderIdentity"] == "b",
        "released at shutdown: {lease}"
    );
    tenant.apply(ingress("second"));
    eventually("replica b never took over", || {
        b.health.leading.load(Ordering::Acquire)
    })
    .await;
    eventually("the second Ingress was never mirrored", || {
        lb.get("networking.k8s.io/v1", "Ingress", LB_NS, "second.shop")
            .is_some()
    })
    .await;
    // The Event follows the mirror write.
    eventually("replica b never reported", || {
        reporters(&tenant).iter().any(|w| w == "b")
    })
    .await;

    b.stop.send(true).unwrap();
    b.task.await.unwrap().unwrap();
    assert!(!b.health.leading.load(Ordering::Acquire));
}
