//! The agent's Gateway API half end to end: tenant API
//! (double) -> `teapot agent` (in-process, `teapot_controller::run`) -> LB
//! API (double, with the real webhook rules as its admission hook, for the
//! kinds the chart registers) -> status written on the LB copies (as the
//! fleet will) -> status back on the tenant Gateway and HTTPRoute.
//!
//! `tenant_gateway_and_route_mirrored_and_status_back` writes the LB
//! side's status by hand, to check the agent's half alone;
//! `tenant_gateway_and_route_to_live_route_and_back` runs the whole chain
//! with `teapot proxy --kube` (the real binary) serving the copies to an
//! echo backend on this machine's non-loopback address (tenant endpoints
//! may not be loopback) and writing their status.
//!
//! Run: `cargo test -p teapot --test agent_kube agent_gateway_e2e::`.

use crate::common;

use common::agent::{
    Agent, DOMAIN, LB_NS, NS, echo_on, lb_cluster, tenant_cluster, web_service, web_slice,
};
use common::{GATEWAY_API_KINDS, RELOAD_TIMEOUT, eventually, send, teapot_bin};
use serde_json::{Value, json};
use teapot_api::hostname::mirrored_service_name;
use teapot_controller::ingress::CONDITIONS_ANNOTATION;
use teapot_testkit::apiserver::ApiServer;
use teapot_testkit::client::{Request, Transport};
use teapot_testkit::process::ProxyProcess;

const GW: &str = "gateway.networking.k8s.io/v1";
const NODE_IP: &str = "10.1.0.5";
const NODE_PORT: u16 = 30080;

/// A tenant cluster whose one node is `node_ip`, with a NodePort Service
/// `web` on `node_port` and one ready pod.
async fn tenant_cluster_on(node_ip: &str, node_port: u16) -> ApiServer {
    let tenant = tenant_cluster(node_ip).await;
    tenant.apply(web_service(node_port));
    tenant.apply(web_slice(true));
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

/// The whole chain: a tenant's `kubectl apply` of a Gateway and an
/// HTTPRoute becomes a routed hostname on the real proxy, and the status
/// the proxy writes on the LB copies comes back onto both tenant objects
/// (`kubectl get gateway` shows the assigned hostname, `kubectl describe
/// httproute` the conditions).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_gateway_and_route_to_live_route_and_back() {
    let ip = common::node_address(false);
    // The echo listens on the node address: tenant endpoints may not be
    // loopback (docs/architecture.md).
    let (echo, _echo_stop) = echo_on(ip, "web-0").await;

    let (lb, webhook_stop) = lb_cluster(&[&format!("{ip}/32")], GATEWAY_API_KINDS).await;
    let tenant = tenant_cluster_on(&ip.to_string(), echo.port()).await;
    let proxy =
        ProxyProcess::start_kube(&teapot_bin(), lb.kubeconfig_path(), &["--domain", DOMAIN])
            .await
            .expect("teapot proxy --kube starts");
    let agent = Agent::start(&tenant, &lb);

    tenant.apply(gateway("*.acme.lb.example.net"));
    tenant.apply(http_route());

    let host = "store.acme.lb.example.net";
    let body = eventually(&format!("GET {host}/ -> 200"), RELOAD_TIMEOUT, || async {
        let r = send(proxy.http, &Transport::Plain, &Request::get(host, "/")).await;
        if r.status == 200 {
            Ok(r.json().unwrap_or(Value::Null))
        } else {
            Err(format!("{} {}", r.status, r.text()))
        }
    })
    .await;
    assert_eq!(body["pod"], "web-0");
    // A host of the tenant's subtree no route names: not served.
    let other = send(
        proxy.http,
        &Transport::Plain,
        &Request::get("other.acme.lb.example.net", "/"),
    )
    .await;
    assert_eq!(other.status, 404);

    // `kubectl get gateway`: the assigned hostname and the conditions the
    // proxy wrote on the copy, with the tenant's generation. The Gateway
    // and its route may be compiled apart (a burst settles in 5 ms): the
    // status of the compile that had the route is the one to wait for.
    let gateway = eventually("the tenant Gateway status", RELOAD_TIMEOUT, || async {
        let g = tenant.get(GW, "Gateway", NS, "public").unwrap();
        let programmed = g["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Programmed" && c["status"] == "True")
        });
        let attached = g["status"]["listeners"][0]["attachedRoutes"] == 1;
        (programmed && attached && g["status"]["addresses"][0]["value"].is_string())
            .then(|| g.clone())
            .ok_or(g["status"].clone())
    })
    .await;
    assert_eq!(
        gateway["status"]["addresses"][0],
        json!({"type": "Hostname", "value": "public-shop.acme.lb.example.net"}),
        "{:#}",
        gateway["status"]
    );
    let listener = &gateway["status"]["listeners"][0];
    assert_eq!(listener["name"], "http");
    assert_eq!(listener["attachedRoutes"], 1, "{listener:#}");
    for c in gateway["status"]["conditions"].as_array().unwrap() {
        assert_eq!(
            c["observedGeneration"], gateway["metadata"]["generation"],
            "{c:#}"
        );
    }

    // `kubectl describe httproute`: Accepted and ResolvedRefs from the
    // proxy, under the tenant's own Gateway name.
    let route = eventually("the tenant HTTPRoute status", RELOAD_TIMEOUT, || async {
        let r = tenant.get(GW, "HTTPRoute", NS, "store").unwrap();
        let parent = &r["status"]["parents"][0];
        let accepted = parent["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Accepted" && c["status"] == "True")
        });
        accepted
            .then(|| r["status"].clone())
            .ok_or(r["status"].clone())
    })
    .await;
    let parent = &route["parents"][0];
    assert_eq!(parent["parentRef"]["name"], "public", "{route:#}");
    assert_eq!(parent["controllerName"], "teapot.dev/gateway-controller");
    let resolved = parent["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ResolvedRefs")
        .expect("ResolvedRefs");
    assert_eq!(resolved["status"], "True", "{route:#}");

    // The route deleted: its copy goes and the host is no longer served.
    assert!(tenant.delete(GW, "HTTPRoute", NS, "store"));
    eventually("the route no longer served", RELOAD_TIMEOUT, || async {
        let r = send(proxy.http, &Transport::Plain, &Request::get(host, "/")).await;
        (r.status == 404).then_some(()).ok_or(r.status)
    })
    .await;

    agent.stop().await;
    let _ = webhook_stop.send(true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_gateway_and_route_mirrored_and_status_back() {
    let (lb, webhook_stop) = lb_cluster(&["10.1.0.0/24"], GATEWAY_API_KINDS).await;
    let tenant = tenant_cluster_on(NODE_IP, NODE_PORT).await;
    let agent = Agent::start(&tenant, &lb);

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
        // The agent writes the conditions after the copies: on a loaded
        // machine the slice can land first.
        let c = eventually("the conditions annotation", RELOAD_TIMEOUT, || async {
            conditions(&tenant, kind, name).ok_or("no conditions yet")
        })
        .await;
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

    agent.stop().await;
    let _ = webhook_stop.send(true);
}
