//! Dual-stack tenants end to end: `teapot agent` (in-process) between a
//! tenant API double and an LB API double whose admission is the real
//! webhook's rules.
//!
//! The agent mirrors a dual-stack Service's IPv4 and IPv6 EndpointSlices
//! as one LB slice per family, with the nodes' InternalIPs of that family
//! (nodeport mode), which the webhook admits because the Tenant's
//! `nodeCIDRs` hold an IPv6 range beside the IPv4 one; when the Service
//! goes back to IPv4 only, the IPv6 slice is deleted rather than left
//! routing to old endpoints.
//!
//! Run: `cargo test -p teapot --test dual_stack_e2e`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_controller::{AgentConfig, Metrics};
use teapot_source::kube::{KubeConfig, KubeSource};
use teapot_testkit::apiserver::ApiServer;
use teapot_webhook::source::StateHandle;
use teapot_webhook::{PolicyConfig, Validator};

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const DOMAIN: &str = "example.net";
/// The tenant's nodes: documentation and unique-local ranges, which the
/// LB side never dials in this test (only the slices are checked).
const NODE_V4: &str = "192.0.2.10";
const NODE_V6: &str = "fd00:7e:1::10";

/// The LB cluster: Tenant `acme` whose nodes are in one IPv4 and one IPv6
/// range, the webhook's rules as admission. The webhook's watch stops with
/// the sender.
async fn lb_cluster() -> (ApiServer, tokio::sync::watch::Sender<bool>) {
    let lb = ApiServer::start().await;
    lb.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"cluster": "acme", "nodeCIDRs": ["192.0.2.0/24", "fd00:7e:1::/64"]},
    }));
    let state: StateHandle = Default::default();
    let (webhook_stop, webhook_stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(teapot_webhook::source::watch_kube(
        KubeSource::start(&KubeConfig::new(lb.client())),
        state.clone(),
        teapot_webhook::metrics::Metrics::new().unwrap(),
        webhook_stopped,
    ));
    let policy = PolicyConfig::new(DOMAIN, Vec::new()).unwrap();
    lb.set_admission(common::webhook_admission(
        state,
        Validator::new(policy),
        common::INGRESS_KINDS,
    ));
    (lb, webhook_stop)
}

fn tenant_slice(family: &str, name: &str, pod: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": name, "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "db"}},
        "addressType": family,
        "endpoints": [{"addresses": [pod], "nodeName": "node-1",
                       "conditions": {"ready": true}}],
        "ports": [{"name": "pg", "port": 5432, "protocol": "TCP"}],
    })
}

fn tenant_service(families: &[&str]) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "db", "namespace": NS},
        "spec": {"type": "LoadBalancer", "loadBalancerClass": "teapot.dev/lb",
                 "selector": {"app": "db"},
                 "ipFamilyPolicy": if families.len() > 1 { "PreferDualStack" } else { "SingleStack" },
                 "ipFamilies": families,
                 "ports": [{"name": "pg", "port": 5432, "targetPort": 5432,
                            "nodePort": 31432, "protocol": "TCP"}]},
    })
}

fn addresses(slice: &Value) -> Vec<String> {
    slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|e| e["addresses"].as_array().cloned().unwrap_or_default())
        .filter_map(|a| a.as_str().map(str::to_string))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_mirrors_both_families_and_drops_one_the_service_loses() {
    let (lb, webhook_stop) = lb_cluster().await;
    let tenant = ApiServer::start().await;
    // A dual-stack node: the IPv6 InternalIP is listed first, as some
    // installers do; the agent still finds one of each family.
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"addresses": [
            {"type": "InternalIP", "address": NODE_V6},
            {"type": "Hostname", "address": "node-1"},
            {"type": "InternalIP", "address": NODE_V4},
        ]},
    }));
    tenant.apply(tenant_service(&["IPv4", "IPv6"]));
    tenant.apply(tenant_slice("IPv4", "db-v4", "10.244.0.9"));
    tenant.apply(tenant_slice("IPv6", "db-v6", "fd10::9"));

    let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
    config.min_write_interval = Duration::from_millis(50);
    let (agent_stop, stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(teapot_controller::run(
        config,
        Metrics::new().unwrap(),
        Arc::new(teapot_controller::Health::default()),
        stopped,
    ));

    let mirrored = teapot_api::hostname::mirrored_service_name(NS, "db");
    let v6_name = format!("{mirrored}-ipv6");
    let slice_of = |name: String| {
        let lb = &lb;
        async move {
            lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &name)
                .ok_or(format!("no LB EndpointSlice {name} yet"))
        }
    };
    let v4 = eventually("the IPv4 LB slice", RELOAD_TIMEOUT, || {
        slice_of(mirrored.clone())
    })
    .await;
    let v6 = eventually("the IPv6 LB slice (admitted)", RELOAD_TIMEOUT, || {
        slice_of(v6_name.clone())
    })
    .await;
    assert_eq!(v4["addressType"], "IPv4");
    assert_eq!(addresses(&v4), [NODE_V4]);
    assert_eq!(v6["addressType"], "IPv6");
    assert_eq!(addresses(&v6), [NODE_V6]);
    assert_eq!(v6["ports"][0]["port"], 31432);
    assert_eq!(
        v6["metadata"]["labels"]["kubernetes.io/service-name"],
        mirrored
    );

    // Back to IPv4 only: Kubernetes drops the IPv6 slice; so does the LB side.
    tenant.apply(tenant_service(&["IPv4"]));
    assert!(tenant.delete("discovery.k8s.io/v1", "EndpointSlice", NS, "db-v6"));
    eventually("the IPv6 LB slice deleted", RELOAD_TIMEOUT, || async {
        match lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &v6_name) {
            None => Ok(()),
            Some(s) => Err(s),
        }
    })
    .await;
    let v4 = lb
        .get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &mirrored)
        .expect("the IPv4 slice stays");
    assert_eq!(addresses(&v4), [NODE_V4]);

    let _ = agent_stop.send(true);
    agent.await.unwrap().unwrap();
    let _ = webhook_stop.send(true);
}
