//! End-to-end test of Gateways with their own address (docs/gateway-api.md,
//! "Gateways with their own address"): the real `teapot proxy` binary, a
//! pool of loopback addresses (all of 127.0.0.0/8 is local on Linux), a
//! Gateway with HTTP on 80 and 8080 and HTTPS on 8443, and one that asks for
//! an address by `spec.addresses`; each request reaches the routes of the
//! Gateway and port it came in on, and the shared listeners never reach
//! them.
//!
//! Run with `cargo test -p teapot --test gateway gateway_own_address_e2e::`.

use crate::common;

use std::net::{IpAddr, SocketAddr};

use common::*;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, tls_secret_yaml};
use teapot_testkit::client::{Request, Response, Transport};

const NS: &str = "own-e2e";
const GW: &str = "gateway.networking.k8s.io/v1";
const POOL: &str = "default=127.0.77.0/29";
/// What the Gateway `pinned` asks for in `spec.addresses`.
const PINNED: &str = "127.0.77.5";

fn gateway(name: &str, addresses: Option<&str>, listeners: Value) -> Value {
    let mut spec = json!({"gatewayClassName": "teapot", "listeners": listeners});
    if let Some(a) = addresses {
        spec["addresses"] = json!([{"type": "IPAddress", "value": a}]);
    }
    json!({"apiVersion": GW, "kind": "Gateway",
           "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// An HTTPRoute on `gateway`'s listener `section` for `host` to `service`.
fn route(name: &str, gateway: &str, section: &str, host: &str, service: &str) -> Value {
    http_route(
        NS,
        name,
        json!({"name": gateway, "sectionName": section}),
        &[host],
        json!([{"backendRefs": [{"name": service, "port": 80}]}]),
    )
}

async fn get(addr: SocketAddr, transport: &Transport, host: &str) -> Response {
    send(addr, transport, &Request::get(host, "/")).await
}

/// The echo Service that answered, or the status of a proxy answer.
fn served_by(resp: &Response) -> String {
    match resp.json() {
        Ok(echo) if resp.status == 200 => echo["service"].as_str().unwrap_or("?").to_string(),
        _ => resp.status.to_string(),
    }
}

fn gateway_status<'a>(status: &'a Value, name: &str) -> &'a Value {
    status["gatewayAPI"]["gateways"]
        .as_array()
        .and_then(|gs| {
            gs.iter()
                .find(|g| g["namespace"] == NS && g["name"] == name)
        })
        .map(|g| &g["status"])
        .unwrap_or_else(|| panic!("{name} in gatewayAPI: {}", status["gatewayAPI"]))
}

/// The Gateway's address when every listener of it is listening.
fn listening(status: &Value, name: &str, listeners: usize) -> Option<IpAddr> {
    let g = status["l4"]["gateways"]
        .as_array()?
        .iter()
        .find(|g| g["namespace"] == NS && g["name"] == name)?;
    let all = g["listeners"].as_array()?;
    (all.len() == listeners && all.iter().all(|l| l["state"] == "listening"))
        .then(|| g["address"].as_str()?.parse().ok())
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateways_with_their_own_address_serve_http_and_https_on_any_port_there() {
    let services = ["web", "alt", "secure", "pinned", "shared"];
    let mut echoes = Vec::new();
    for s in services {
        echoes.push(echo(NS, s, &format!("{s}-0")).await);
    }
    let ca = TestCa::new("own address e2e CA");
    let leaf = ca.issue(&["secure.example.com"]);
    let any_leaf = ca.issue(&["*.example.net"]);

    let mut objects = vec![
        gateway_class(),
        gateway(
            "edge",
            None,
            json!([
                {"name": "web", "protocol": "HTTP", "port": 80},
                {"name": "alt", "protocol": "HTTP", "port": 8080},
                {"name": "secure", "protocol": "HTTPS", "port": 8443,
                 "hostname": "secure.example.com",
                 "tls": {"certificateRefs": [{"name": "secure-cert"}]}},
            ]),
        ),
        // With a hostname-less HTTPS listener on 443: any name there gets
        // its certificate, as upstream's base Gateway
        // same-namespace-with-https-listener is served.
        gateway(
            "pinned",
            Some(PINNED),
            json!([
                {"name": "web", "protocol": "HTTP", "port": 80},
                {"name": "any", "protocol": "HTTPS", "port": 443,
                 "tls": {"certificateRefs": [{"name": "any-cert"}]}},
            ]),
        ),
        // HTTP on 80 only: the shared listeners, as before.
        gateway(
            "shared",
            None,
            json!([{"name": "web", "protocol": "HTTP", "port": 80}]),
        ),
        route("web", "edge", "web", "a.example.com", "web"),
        route("alt", "edge", "alt", "b.example.com", "alt"),
        route("secure", "edge", "secure", "secure.example.com", "secure"),
        route("pinned", "pinned", "web", "a.example.com", "pinned"),
        route("shared", "shared", "web", "a.example.com", "shared"),
    ];
    for (s, e) in services.iter().zip(&echoes) {
        objects.extend(echo_service(NS, s, &[e]));
    }
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("l4-state.json");
    let h = Harness::start_with_args(
        &[
            ("gateways.yaml", docs(&objects)),
            ("secret.yaml", tls_secret_yaml(NS, "secure-cert", &leaf)),
            ("any.yaml", tls_secret_yaml(NS, "any-cert", &any_leaf)),
        ],
        &[
            "--l4-pool",
            POOL,
            "--l4-state",
            state_file.to_str().unwrap(),
        ],
    )
    .await;

    let (edge, pinned) = eventually(
        "both Gateways listening on their addresses",
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            match (
                listening(&status, "edge", 3),
                listening(&status, "pinned", 2),
            ) {
                (Some(e), Some(p)) => Ok((e, p)),
                _ => Err(status["l4"]["gateways"].clone()),
            }
        },
    )
    .await;
    assert_eq!(pinned, PINNED.parse::<IpAddr>().unwrap());
    assert_ne!(edge, pinned);
    let plain = Transport::Plain;
    let at = |ip: IpAddr, port: u16| SocketAddr::new(ip, port);

    // Each port of the Gateway's address: that port's routes.
    assert_eq!(
        served_by(&get(at(edge, 80), &plain, "a.example.com").await),
        "web"
    );
    assert_eq!(
        served_by(&get(at(edge, 8080), &plain, "b.example.com").await),
        "alt"
    );
    // Another port's host there, whatever port the Host names: not found.
    assert_eq!(
        served_by(&get(at(edge, 8080), &plain, "a.example.com").await),
        "404"
    );
    assert_eq!(
        served_by(&get(at(edge, 80), &plain, "b.example.com:8080").await),
        "404"
    );
    // HTTPS on 8443 with the listener's certificate.
    let tls = Transport::Tls {
        sni: "secure.example.com".into(),
        roots: Some(vec![ca.cert_der().to_vec()]),
    };
    let resp = get(at(edge, 8443), &tls, "secure.example.com").await;
    assert_eq!(served_by(&resp), "secure");
    // Two Gateways with the same host, told apart by address.
    assert_eq!(
        served_by(&get(at(pinned, 80), &plain, "a.example.com").await),
        "pinned"
    );
    // Its hostname-less HTTPS listener answers a name no route and no
    // other listener names with its own certificate (not the self-signed
    // default), and no route there serves it.
    let unnamed = Transport::Tls {
        sni: "unnamed.example.net".into(),
        roots: Some(vec![ca.cert_der().to_vec()]),
    };
    let resp = get(at(pinned, 443), &unnamed, "unnamed.example.net").await;
    assert_eq!(served_by(&resp), "404");
    // The shared listeners: the Gateway without an address of its own,
    // never the others.
    assert_eq!(served_by(&h.get("a.example.com", "/").await), "shared");
    assert_eq!(served_by(&h.get("b.example.com", "/").await), "404");
    let shared_tls = Transport::Tls {
        sni: "secure.example.com".into(),
        roots: None,
    };
    let resp = get(h.proxy.https, &shared_tls, "secure.example.com").await;
    assert_eq!(served_by(&resp), "404");
    // Nor does the shared 443 present the Gateway's certificate for a name
    // it serves only on its own address: a client trusting that
    // certificate's CA does not complete the handshake there.
    let trusting = Transport::Tls {
        sni: "secure.example.com".into(),
        roots: Some(vec![ca.cert_der().to_vec()]),
    };
    let shared_handshake = teapot_testkit::client::send(
        h.proxy.https,
        &trusting,
        &Request::get("secure.example.com", "/"),
    )
    .await;
    assert!(
        shared_handshake.is_err(),
        "the shared socket presented the own address's certificate"
    );

    // Status: each Gateway's own address, its listeners programmed; the
    // shared one keeps the fleet's.
    let status = h.status().await;
    for (name, addr) in [("edge", edge), ("pinned", pinned)] {
        let g = gateway_status(&status, name);
        assert_eq!(
            g["addresses"],
            json!([{"type": "IPAddress", "value": addr.to_string()}]),
            "{g}"
        );
        for l in g["listeners"].as_array().unwrap() {
            for c in l["conditions"].as_array().unwrap() {
                if c["type"] == "Accepted" || c["type"] == "Programmed" {
                    assert_eq!(c["status"], "True", "{name}: {l}");
                }
            }
        }
    }
    let shared = gateway_status(&status, "shared");
    assert!(
        !shared.to_string().contains("127.0.77."),
        "the shared Gateway has no pool address: {shared}"
    );

    // The state file holds the HTTP and HTTPS ports with the address.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(&state_file).unwrap()).unwrap();
    let held = &saved["allocations"][format!("{NS}/Gateway:edge")];
    assert_eq!(held["address"], edge.to_string(), "{saved}");
    let ports: Vec<u64> = held["ports"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|p| p["port"].as_u64().or_else(|| p.as_u64()))
        .collect();
    for p in [80, 8080, 8443] {
        assert!(ports.contains(&p), "{p} in {saved}");
    }
}
