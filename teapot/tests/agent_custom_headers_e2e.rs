//! `custom-headers` across the whole chain: tenant API (double) ->
//! `teapot agent` (in-process) mirroring the named ConfigMap -> LB API
//! (double, the real webhook rules as its admission, ConfigMaps included)
//! -> `teapot proxy --kube` (the real binary) -> an echo backend:
//!
//! - the ConfigMap's fields are on the responses;
//! - an edit of the tenant's ConfigMap reaches the responses, no restart;
//! - a hostile edit (a `Set-Cookie` entry) is not copied: the tenant's
//!   Ingress names the ConfigMap and the entry, and the LB copy keeps the
//!   last good fields.
//!
//! Addresses as in agent_e2e.rs: the echo listens on this machine's
//! non-loopback address, the tenant node's InternalIP.
//!
//! Run: `cargo test -p teapot --test agent_custom_headers_e2e`.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_controller::ingress::CONDITIONS_ANNOTATION;
use teapot_controller::{AgentConfig, Metrics};
use teapot_source::kube::{KubeConfig, KubeSource};
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::echo::EchoIdentity;
use teapot_testkit::process::ProxyProcess;
use teapot_webhook::source::StateHandle;
use teapot_webhook::{PolicyConfig, Validator};

const NS: &str = "shop";
const LB_NS: &str = "tenant-acme";
const DOMAIN: &str = "example.net";
const HOST: &str = "shop.acme.lb.example.net";
const ADMITTED: &[&str] = &[
    "ingresses",
    "services",
    "endpointslices",
    "secrets",
    "configmaps",
];

fn headers(data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "headers", "namespace": NS},
        "data": data,
    })
}

fn conditions(tenant: &ApiServer) -> Option<Value> {
    let o = tenant.get("networking.k8s.io/v1", "Ingress", NS, "web")?;
    serde_json::from_str(o["metadata"]["annotations"][CONDITIONS_ANNOTATION].as_str()?).ok()
}

/// Waits until a response of the route carries `X-Frame-Options: value`.
async fn wait_frame_options(proxy: &ProxyProcess, value: &str) {
    eventually(
        &format!("X-Frame-Options: {value}"),
        RELOAD_TIMEOUT,
        || async {
            let r = send(proxy.http, &Transport::Plain, &Request::get(HOST, "/")).await;
            let got = r
                .headers
                .get("x-frame-options")
                .map(|v| v.to_str().unwrap().to_string());
            if r.status == 200 && got.as_deref() == Some(value) {
                Ok(())
            } else {
                Err(format!("{} {got:?} {}", r.status, r.text()))
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_mirrors_the_custom_headers_config_map() {
    let ip = node_address(false);
    let listener = tokio::net::TcpListener::bind((ip, 0)).await.unwrap();
    let echo = listener.local_addr().unwrap();
    let (_echo_stop, echo_stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(teapot_testkit::echo::run(
        listener,
        EchoIdentity::new(NS, "web", "web", "web-0"),
        async move {
            let _ = echo_stopped.await;
        },
    ));

    // The LB cluster, with the webhook's rules as admission.
    let lb = ApiServer::start().await;
    lb.apply(json!({
        "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
        "metadata": {"name": "acme"},
        "spec": {"cluster": "acme", "nodeCIDRs": [format!("{ip}/32")]},
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
    lb.set_admission(webhook_admission(state, Validator::new(policy), ADMITTED));

    // The tenant cluster: a node, a NodePort Service, a ready pod, the
    // ConfigMap and the Ingress naming it.
    let tenant = ApiServer::start().await;
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-1"},
        "status": {"addresses": [{"type": "InternalIP", "address": ip.to_string()}]},
    }));
    tenant.apply(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "web", "namespace": NS},
        "spec": {"type": "NodePort", "selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": 8080,
                            "nodePort": echo.port(), "protocol": "TCP"}]},
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
    tenant.apply(headers(json!({"X-Frame-Options": "DENY"})));
    tenant.apply(json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": "web", "namespace": NS,
                     "annotations": {"nginx.ingress.kubernetes.io/custom-headers": "headers"}},
        "spec": {"ingressClassName": "teapot", "rules": [{"host": HOST, "http": {"paths": [
            {"path": "/", "pathType": "Prefix",
             "backend": {"service": {"name": "web", "port": {"name": "http"}}}}]}}]},
    }));

    let proxy =
        ProxyProcess::start_kube(&teapot_bin(), lb.kubeconfig_path(), &["--domain", DOMAIN])
            .await
            .expect("teapot proxy --kube starts");
    let mut config = AgentConfig::new(tenant.client(), lb.client(), LB_NS);
    config.min_write_interval = Duration::from_millis(50);
    let (agent_stop, agent_stopped) = tokio::sync::watch::channel(false);
    let agent = tokio::spawn(teapot_controller::run(
        config,
        Metrics::new().unwrap(),
        Arc::new(teapot_controller::Health::default()),
        agent_stopped,
    ));

    wait_frame_options(&proxy, "DENY").await;
    let copy = teapot_controller::headers_mirror::mirrored_name(NS, "headers");
    let lb_copy = lb
        .get("v1", "ConfigMap", LB_NS, &copy)
        .expect("the LB copy");
    assert_eq!(lb_copy["data"], json!({"X-Frame-Options": "DENY"}));

    // An edit of the tenant's ConfigMap: served without a restart.
    tenant.apply(headers(json!({"X-Frame-Options": "SAMEORIGIN"})));
    wait_frame_options(&proxy, "SAMEORIGIN").await;

    // A hostile edit: not copied, named on the tenant's Ingress; the route
    // keeps the last good copy.
    tenant.apply(headers(
        json!({"X-Frame-Options": "DENY", "Set-Cookie": "session=fixed"}),
    ));
    let said = eventually(
        "the refusal on the tenant Ingress",
        RELOAD_TIMEOUT,
        || async {
            let c = conditions(&tenant);
            let message = c
                .iter()
                .flat_map(|c| c.as_array().into_iter().flatten())
                .filter(|c| c["status"] == "False")
                .filter_map(|c| c["message"].as_str())
                .find(|m| m.contains("ConfigMap shop/headers"))
                .map(str::to_string);
            message.ok_or(c)
        },
    )
    .await;
    assert!(said.contains("data[\"Set-Cookie\"]"), "{said}");
    wait_frame_options(&proxy, "SAMEORIGIN").await;

    let _ = agent_stop.send(true);
    tokio::time::timeout(RELOAD_TIMEOUT, agent)
        .await
        .expect("the agent stops")
        .unwrap()
        .unwrap();
    let _ = webhook_stop.send(true);
}
