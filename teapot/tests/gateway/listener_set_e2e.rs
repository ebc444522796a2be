//! ListenerSet end to end (docs/gateway-api.md, "ListenerSet"): `teapot
//! proxy --manifests` with the operator's shared Gateway, which allows
//! ListenerSets from every namespace, and a tenant's ListenerSet adding
//! its own HTTPS listener with its own hostname and certificate; the
//! tenant's HTTPRoute attached to that listener is served over TLS with
//! the tenant's certificate. A ListenerSet naming a Gateway that allows
//! none is not served, and its status says why.
//!
//! Tenant endpoints may never be loopback: the tenant's backend listens on
//! this machine's interface address, which its Tenant's nodeCIDRs hold.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_echo::{EchoIdentity, EchoServer};
use teapot_testkit::certs::{self, TestCa};
use teapot_testkit::client::{Request, Transport};

const TENANT_NS: &str = "tenant-acme";
const SHOP: &str = "shop.acme.lb.localhost";
const BLOCKED: &str = "blocked.acme.lb.localhost";

/// An operator Gateway in `edge` with one HTTP listener of its own.
fn operator_gateway(name: &str, allowed: Option<&str>) -> Value {
    let mut g = json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": name, "namespace": "edge" },
        "spec": {
            "gatewayClassName": "teapot",
            "listeners": [{
                "name": "http", "protocol": "HTTP", "port": 80,
                "hostname": format!("{name}.ops.example"),
            }],
        },
    });
    if let Some(from) = allowed {
        g["spec"]["allowedListeners"] = json!({ "namespaces": { "from": from } });
    }
    g
}

/// The tenant's ListenerSet `name` on Gateway `edge/parent`: one HTTPS
/// listener for `host` with the tenant's certificate.
fn listener_set(name: &str, parent: &str, host: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "ListenerSet",
        "metadata": { "name": name, "namespace": TENANT_NS },
        "spec": {
            "parentRef": { "name": parent, "namespace": "edge" },
            "listeners": [{
                "name": "https", "protocol": "HTTPS", "port": 443, "hostname": host,
                "tls": { "certificateRefs": [{ "name": "shop-tls" }] },
            }],
        },
    })
}

/// The tenant's HTTPRoute on the HTTPS listener of its ListenerSet `set`.
fn route(name: &str, set: &str) -> Value {
    http_route(
        TENANT_NS,
        name,
        json!({ "kind": "ListenerSet", "name": set, "sectionName": "https" }),
        &[],
        json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
    )
}

fn set_status<'a>(status: &'a Value, name: &str) -> Option<&'a Value> {
    status["gatewayAPI"]["listenerSets"]
        .as_array()?
        .iter()
        .find(|l| l["namespace"] == TENANT_NS && l["name"] == name)
        .map(|l| &l["status"])
}

fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_listener_set_on_the_shared_gateway_serves_its_own_https_host() {
    let ip = node_address(false);
    let web = EchoServer::start_on(ip, EchoIdentity::new(TENANT_NS, "", "web", "web-0"))
        .await
        .expect("echo on the node address");
    let ca = TestCa::new("tenant CA");
    let cert = ca.issue(&[SHOP, BLOCKED]);
    let objects = vec![
        node_tenant("acme", ip),
        gateway_class(),
        operator_gateway("shared", Some("All")),
        operator_gateway("closed", None),
        service(TENANT_NS, "web", &[(Some("http"), 80)]),
        synced_slice(TENANT_NS, "web", web.addr()),
        listener_set("shop", "shared", SHOP),
        route("shop", "shop"),
        listener_set("blocked", "closed", BLOCKED),
        route("blocked", "blocked"),
    ];
    let h = Harness::start(&[
        ("ls.yaml", docs(&objects)),
        (
            "tls.yaml",
            certs::tls_secret_yaml(TENANT_NS, "shop-tls", &cert),
        ),
    ])
    .await;

    let status = h
        .wait_status("the ListenerSets' status", |s| {
            set_status(s, "shop").is_some_and(|l| condition(l, "Programmed")["status"] == "True")
        })
        .await;

    // Served over TLS with the tenant's certificate, verified against the
    // tenant's CA for the set's hostname, by the tenant's backend.
    let tls = Transport::Tls {
        sni: SHOP.into(),
        roots: Some(vec![ca.cert_der().to_vec()]),
    };
    let resp = eventually("the tenant's HTTPS host", Duration::from_secs(10), || {
        let tls = tls.clone();
        let h = &h;
        async move {
            let resp = send(h.proxy.https, &tls, &Request::get(SHOP, "/")).await;
            if resp.status == 200 {
                Ok(resp)
            } else {
                Err(format!("{}: {}", resp.status, resp.text()))
            }
        }
    })
    .await;
    assert_eq!(resp.json().expect("echo JSON")["service"], "web");
    assert!(
        certs::cert_matches_hostname(&resp.peer_certificates[0], SHOP),
        "the listener's certificate"
    );
    // The set's listener takes the routes attached to it, not the
    // Gateway's: the tenant's route is not on the Gateway's own host.
    assert_eq!(h.get("shared.ops.example", "/").await.status, 404);

    // Status on both objects: the set accepted with its listener, the
    // Gateway counting it.
    let shop = set_status(&status, "shop").unwrap();
    assert_eq!(condition(shop, "Accepted")["status"], "True", "{shop}");
    assert_eq!(shop["listeners"][0]["name"], "https", "{shop}");
    assert_eq!(shop["listeners"][0]["attachedRoutes"], 1, "{shop}");
    let gateways = status["gatewayAPI"]["gateways"].as_array().unwrap();
    let shared = gateways
        .iter()
        .find(|g| g["name"] == "shared")
        .map(|g| &g["status"])
        .unwrap();
    assert_eq!(shared["attachedListenerSets"], 1, "{shared}");
    assert_eq!(
        condition(shared, "AttachedListenerSets")["reason"],
        "ListenerSetsAttached"
    );

    // The Gateway that allows no ListenerSets: the set's host is not
    // served, neither over TLS nor in the clear, and its status says why.
    let blocked = set_status(&status, "blocked").unwrap();
    let accepted = condition(blocked, "Accepted");
    assert_eq!(accepted["status"], "False", "{blocked}");
    assert_eq!(accepted["reason"], "NotAllowed", "{blocked}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("allowedListeners"),
        "{blocked}"
    );
    assert_eq!(condition(blocked, "Programmed")["reason"], "NotAllowed");
    let closed = gateways
        .iter()
        .find(|g| g["name"] == "closed")
        .map(|g| &g["status"])
        .unwrap();
    assert_eq!(closed["attachedListenerSets"], 0, "{closed}");
    assert_eq!(
        condition(closed, "AttachedListenerSets")["reason"],
        "ListenerSetsNotAllowed"
    );
    assert_eq!(h.get(BLOCKED, "/").await.status, 404);
    let blocked_tls = Transport::Tls {
        sni: BLOCKED.into(),
        roots: Some(vec![ca.cert_der().to_vec()]),
    };
    let answer =
        teapot_testkit::client::send(h.proxy.https, &blocked_tls, &Request::get(BLOCKED, "/"))
            .await;
    match answer {
        // No certificate is served for the host: the handshake fails.
        Err(_) => {}
        Ok(resp) => assert_eq!(resp.status, 404, "{}", resp.text()),
    }
    let route_parent = status["gatewayAPI"]["httpRoutes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "blocked")
        .map(|r| r["status"]["parents"][0].clone())
        .unwrap();
    assert_eq!(
        route_parent["conditions"][0]["status"], "False",
        "{route_parent}"
    );
}
