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
//! Run: `cargo test -p teapot --test agent_kube agent_custom_headers_e2e::`.

use crate::common;

use common::agent::{
    Agent, DOMAIN, LB_NS, NS, echo_on, lb_cluster, tenant_cluster, tenant_ingress, web_service,
    web_slice,
};
use common::*;
use serde_json::{Value, json};
use teapot_controller::ingress::CONDITIONS_ANNOTATION;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::process::ProxyProcess;

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
    let (echo, _echo_stop) = echo_on(ip, "web-0").await;

    // The LB cluster, with the webhook's rules as admission.
    let (lb, webhook_stop) = lb_cluster(&[&format!("{ip}/32")], ADMITTED).await;

    // The tenant cluster: a node, a NodePort Service, a ready pod, the
    // ConfigMap and the Ingress naming it.
    let tenant = tenant_cluster(&ip.to_string()).await;
    tenant.apply(web_service(echo.port()));
    tenant.apply(web_slice(true));
    tenant.apply(headers(json!({"X-Frame-Options": "DENY"})));
    let mut ingress = tenant_ingress("web", HOST);
    ingress["metadata"]["annotations"] =
        json!({"nginx.ingress.kubernetes.io/custom-headers": "headers"});
    tenant.apply(ingress);

    let proxy =
        ProxyProcess::start_kube(&teapot_bin(), lb.kubeconfig_path(), &["--domain", DOMAIN])
            .await
            .expect("teapot proxy --kube starts");
    let agent = Agent::start(&tenant, &lb);

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

    agent.stop().await;
    let _ = webhook_stop.send(true);
}
