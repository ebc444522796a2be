//! The agent's Gateway API half end to end (issue #18): tenant API
//! (double) -> `teapot agent` (in-process, `teapot_controller::run`) -> LB
//! API (double, with the real webhook rules as its admission hook, for the
//! kinds the chart registers) -> status written on the LB copies (as the
//! fleet will) -> status back on the tenant Gateway and HTTPRoute.
//!
//! The proxy does not serve Gateways yet (the next step of issue #18), so
//! the LB side's status is written here by hand; everything else is the
//! real agent and the real admission rules.
//!
//! Run: `cargo test -p teapot --test agent_gateway_e2e`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{RELOAD_TIMEOUT, eventually};
use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::ingress::CONDITIONS_ANNOTATION;
use teapot_controller::{AgentConfig, Metrics};
use teapot_source::kube::{KubeConfig, KubeSource};
use teapot_testkit::apiserver::ApiServer;
use teapot_webhook::source::StateHandle;
use teapot_webhook::{PolicyConfig, Validator};

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const DOMAIN: &str = "example.net";
const GW: &str = "gateway.networking.k8s.io/v1";
const NODE_IP: &str = "10.1.0.5";
const NODE_PORT: i64 = 30080;

async fn lb_cluster() -> (ApiServer, tokio::sync::watch::Sender<bool>) {
    let lb = ApiServer::start().await;
    lb.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"cluster": "acme", "nodeCIDRs": ["10.1.0.0/24"]},
    }));
    let state: StateHandle = Default::default();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    tokio::spawn(teapot_webhook::source::watch_kube(
        KubeSource::start(&KubeConfig::new(lb.client())),
        state.clone(),
        teapot_webhook::metrics::Metrics::new().unwrap(),
        stopped,
    ));
    let policy = PolicyConfig::new(DOMAIN, Vec::new()).unwrap();
    lb.set_admission(common::webhook_admission(
        state,
        Validator::new(policy),
        common::GATEWAY_API_KINDS,
    ));
    (lb, stop)
}

async fn tenant_cluster() -> ApiServer {
    let tenant = ApiServer::start().await;
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"addresses": [{"type": "InternalIP", "address": NODE_IP}]},
    }));
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": NODE_PORT, "protocol": "TCP"}]},
    }));
    tenant.apply(json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": "web-x7k2p", "namespace": NS,
                     "labels": {"kubernetes.io/service-name": "web"}},
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"], "nodeName": "node-1",
                       "conditions": {"ready": true}}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }));
    tenant
}

fn gateway(hostname: &str) -> Value {
    json!({
        "apiVersion": GW, "kind": "Gateway",
        "metadata": {"name": "public", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80, "hostname": hostname}]},
    })
}

fn http_route() -> Value {
    json!({
        "apiVersion": GW, "kind": "HTTPRoute",
        "metadata": {"name": "store", "namespace": NS},
        "spec": {
            "parentRefs": [{"name": "public"}],
            "hostnames": ["store.acme.lb.example.net"],
            "rules": [{"matches": [{"path": {"type": "PathPrefix", "value": "/"}}],
                       "backendRefs": [{"name": "web", "port": 80}]}]},
    })
}

fn conditions(tenant: &ApiServer, kind: &str, name: &str) -> Option<Value> {
    let o = tenant.get(GW, kind, NS, name)?;
    serde_json::from_str(o["metadata"]["annotations"][CONDITIONS_ANNOTATION].as_str()?).ok()
}

/// Writes `status` on the LB copy, as the fleet's status writer will.
fn set_lb_status(lb: &ApiServer, kind: &str, name: &str, status: impl Fn(&Value) -> Value) {
    let mut copy = lb.get(GW, kind, LB_NS, name).expect("the LB copy");
    copy["status"] = status(&copy);
    lb.apply(copy);
}

fn condition(type_: &str, generation: &Value) -> Value {
    json!({"type": type_, "status": "True", "reason": type_, "message": "",
           "lastTransitionTime": "2026-11-24T00:00:00Z", "observedGeneration": generation})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_gateway_and_route_mirrored_and_status_back() {
    let (lb, webhook_stop) = lb_cluster().await;
    let tenant = tenant_cluster().await;
    let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
    config.min_write_interval = Duration::from_millis(50);
    let (agent_stop, stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(teapot_controller::run(
        config,
        Metrics::new().unwrap(),
        Arc::new(teapot_controller::Health::default()),
        stopped,
    ));

    tenant.apply(gateway("*.acme.lb.example.net"));
    tenant.apply(http_route());

    // Mirrored, renamed as Ingresses are, with the Service and its slice.
    let service = mirrored_service_name(NS, "web");
    let (copy_gateway, copy_route) = eventually("the LB copies", RELOAD_TIMEOUT, || async {
        match (
            lb.get(GW, "Gateway", LB_NS, "public.shop"),
            lb.get(GW, "HTTPRoute", LB_NS, "store.shop"),
        ) {
            (Some(g), Some(r)) => Ok((g, r)),
            other => Err(format!(
                "{other:?}; gateway conditions {:?}, route conditions {:?}",
                conditions(&tenant, "Gateway", "public"),
                conditions(&tenant, "HTTPRoute", "store")
            )),
        }
    })
    .await;
    assert_eq!(copy_gateway["spec"]["gatewayClassName"], "teapot");
    assert_eq!(
        copy_gateway["metadata"]["labels"]["teapot.dev/source-name"],
        "public"
    );
    assert_eq!(
        copy_route["spec"]["parentRefs"],
        json!([{"name": "public.shop"}])
    );
    assert_eq!(
        copy_route["spec"]["rules"][0]["backendRefs"],
        json!([{"name": service, "port": 80}])
    );
    let slice = eventually("the mirrored EndpointSlice", RELOAD_TIMEOUT, || async {
        let slices = lb
            .requests()
            .iter()
            .filter(|r| r.path.contains("/endpointslices/"))
            .count();
        lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &service)
            .ok_or(format!("{slices} slice requests"))
    })
    .await;
    assert_eq!(slice["endpoints"][0]["addresses"], json!([NODE_IP]));
    assert_eq!(slice["ports"][0]["port"], NODE_PORT);
    assert!(lb.get("v1", "Service", LB_NS, &service).is_some());
    for (kind, name) in [("Gateway", "public"), ("HTTPRoute", "store")] {
        let c = conditions(&tenant, kind, name).expect("conditions");
        assert_eq!(c[0]["type"], "Accepted");
        assert_eq!(c[0]["status"], "True", "{kind}: {c}");
    }
    assert_eq!(
        tenant
            .get(GW, "GatewayClass", "", "teapot")
            .expect("GatewayClass teapot")["spec"]["controllerName"],
        "teapot.dev/gateway-controller"
    );

    // The fleet's status on the copies comes back onto both tenant objects.
    set_lb_status(&lb, "Gateway", "public.shop", |g| {
        json!({
            "addresses": [{"type": "Hostname", "value": "public-shop.acme.lb.example.net"}],
            "conditions": [condition("Accepted", &g["metadata"]["generation"]),
                           condition("Programmed", &g["metadata"]["generation"])],
            "listeners": [{"name": "http", "attachedRoutes": 1,
                           "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                           "conditions": [condition("Programmed", &g["metadata"]["generation"])]}],
        })
    });
    set_lb_status(&lb, "HTTPRoute", "store.shop", |r| {
        json!({"parents": [{
            "controllerName": "teapot.dev/gateway-controller",
            "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public.shop"},
            "conditions": [condition("Accepted", &r["metadata"]["generation"]),
                           condition("ResolvedRefs", &r["metadata"]["generation"])]}]})
    });
    let gateway_status = eventually("the tenant Gateway status", RELOAD_TIMEOUT, || async {
        let g = tenant.get(GW, "Gateway", NS, "public").unwrap();
        (g["status"]["addresses"][0]["value"] == "public-shop.acme.lb.example.net")
            .then(|| g.clone())
            .ok_or(g["status"].clone())
    })
    .await;
    let generation = &gateway_status["metadata"]["generation"];
    assert_eq!(
        gateway_status["status"]["conditions"][1]["type"],
        "Programmed"
    );
    assert_eq!(
        gateway_status["status"]["conditions"][1]["observedGeneration"],
        *generation
    );
    assert_eq!(
        gateway_status["status"]["listeners"][0]["attachedRoutes"],
        1
    );
    let route_status = eventually("the tenant HTTPRoute status", RELOAD_TIMEOUT, || async {
        let r = tenant.get(GW, "HTTPRoute", NS, "store").unwrap();
        r["status"]["parents"][0]
            .is_object()
            .then(|| r["status"].clone())
            .ok_or(r["status"].clone())
    })
    .await;
    assert_eq!(
        route_status["parents"][0]["parentRef"],
        json!({"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "public"})
    );
    assert_eq!(
        route_status["parents"][0]["conditions"][0]["type"],
        "Accepted"
    );

    // A listener hostname in another tenant's subtree: the webhook refuses
    // the copy, and the tenant's Gateway says why.
    tenant.apply(gateway("*.globex.lb.example.net"));
    let refused = eventually(
        "the refusal on the tenant Gateway",
        RELOAD_TIMEOUT,
        || async {
            match conditions(&tenant, "Gateway", "public") {
                Some(c) if c[0]["status"] == "False" => Ok(c[0].clone()),
                other => Err(other),
            }
        },
    )
    .await;
    let message = refused["message"].as_str().unwrap();
    assert!(message.contains("spec.listeners[0].hostname"), "{message}");

    // Deleting the route removes its copy, then the Service and slice only
    // it needed; the finalizer goes last.
    assert!(tenant.delete(GW, "HTTPRoute", NS, "store"));
    eventually(
        "the route, its copy and its backends gone",
        RELOAD_TIMEOUT,
        || async {
            let left = (
                tenant.get(GW, "HTTPRoute", NS, "store").is_some(),
                lb.get(GW, "HTTPRoute", LB_NS, "store.shop").is_some(),
                lb.get("v1", "Service", LB_NS, &service).is_some(),
                lb.get("discovery.k8s.io/v1", "EndpointSlice", LB_NS, &service)
                    .is_some(),
            );
            (left == (false, false, false, false))
                .then_some(())
                .ok_or(left)
        },
    )
    .await;

    agent_stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(20), agent)
        .await
        .expect("the agent stops")
        .unwrap()
        .unwrap();
    let _ = webhook_stop.send(true);
}
