//! Client certificates per socket through the real binary
//! (docs/gateway-api.md, "Client certificates (frontend validation)"):
//! three Gateways serve the same hostname, one on its own address with
//! HTTPS on 443 (validation against CA A) and on 8443 (`perPort`: CA B),
//! one on another own address without validation, one on the shared 443
//! without validation. Each socket asks and verifies what its own
//! Gateway's listener at that port says, on HTTP/1.1 and HTTP/2, never
//! what another socket's Gateway says for the same name.
//!
//! Run with `cargo test -p teapot --test auth client_cert_own_address_e2e::`.

use crate::common;

use std::net::{IpAddr, SocketAddr};

use common::client_cert::{ClientIdentity, Version, get};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, tls_secret_yaml};

const NS: &str = "infra";
const HOST: &str = "same.test";
const POOL: &str = "default=127.0.79.0/29";
const STRICT: &str = "127.0.79.2";
const OPEN: &str = "127.0.79.3";

/// Gateway `name` (on `address` when given) with an HTTPS listener for
/// [`HOST`] on each of `ports`, `frontend` as its `spec.tls.frontend`.
fn gateway(name: &str, address: Option<&str>, ports: &[u16], frontend: Value) -> Value {
    let listeners: Vec<Value> = ports
        .iter()
        .map(|port| {
            json!({
                "name": format!("https-{port}"), "protocol": "HTTPS", "port": port,
                "hostname": HOST, "tls": { "certificateRefs": [{ "name": "site" }] },
            })
        })
        .collect();
    let mut spec = json!({ "gatewayClassName": "teapot", "listeners": listeners });
    if let Some(a) = address {
        spec["addresses"] = json!([{ "type": "IPAddress", "value": a }]);
    }
    if !frontend.is_null() {
        spec["tls"] = json!({ "frontend": frontend });
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": name, "namespace": NS },
        "spec": spec,
    })
}

fn ca_ref(name: &str) -> Value {
    json!({ "caCertificateRefs": [{ "group": "", "kind": "ConfigMap", "name": name }] })
}

/// The Gateway's address once its `listeners` listeners listen there.
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

/// The status of one GET for [`HOST`] on a fresh connection to `addr`,
/// `Err` when the handshake or the exchange failed.
async fn answer(
    server_ca: &TestCa,
    addr: SocketAddr,
    client: Option<&ClientIdentity>,
    version: Version,
) -> Result<u16, String> {
    get(addr, server_ca, (HOST, HOST), client, version, &[])
        .await
        .map(|a| a.status)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_socket_asks_its_own_gateways_client_certificate() {
    let server_ca = TestCa::new("site CA");
    let site = server_ca.issue(&[HOST]);
    let (ca_a, ca_b) = (TestCa::new("client CA A"), TestCa::new("client CA B"));
    let of_a = ClientIdentity::from(&ca_a.issue_client("alice"));
    let of_b = ClientIdentity::from(&ca_b.issue_client("bob"));

    let backend = echo(NS, "web", "web-0").await;
    let mut objects = vec![gateway_class()];
    objects.extend(echo_service(NS, "web", &[&backend]));
    for (name, ca) in [("ca-a", &ca_a), ("ca-b", &ca_b)] {
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": { "name": name, "namespace": NS },
            "data": { "ca.crt": ca.cert_pem() },
        }));
    }
    objects.push(gateway(
        "strict",
        Some(STRICT),
        &[443, 8443],
        json!({
            "default": { "validation": ca_ref("ca-a") },
            "perPort": [{ "port": 8443, "tls": { "validation": ca_ref("ca-b") } }],
        }),
    ));
    objects.push(gateway("open", Some(OPEN), &[443], Value::Null));
    objects.push(gateway("shared", None, &[443], Value::Null));
    let mut route = http_route(
        NS,
        "web",
        json!({ "name": "strict" }),
        &[HOST],
        json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
    );
    route["spec"]["parentRefs"] =
        json!([{ "name": "strict" }, { "name": "open" }, { "name": "shared" }]);
    objects.push(route);
    let manifests = format!(
        "{}\n---\n{}",
        docs(&objects),
        tls_secret_yaml(NS, "site", &site)
    );
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("l4-state.json");
    let h = Harness::start_with_args(
        &[("manifests.yaml", manifests)],
        &[
            "--l4-pool",
            POOL,
            "--l4-state",
            state_file.to_str().unwrap(),
        ],
    )
    .await;
    eventually(
        "both Gateways listening on their addresses",
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            match (
                listening(&status, "strict", 2),
                listening(&status, "open", 1),
            ) {
                (Some(_), Some(_)) => Ok(()),
                _ => Err(status["l4"]["gateways"].clone()),
            }
        },
    )
    .await;
    let at = |ip: &str, port: u16| SocketAddr::new(ip.parse().unwrap(), port);
    let (strict, strict_8443, open) = (at(STRICT, 443), at(STRICT, 8443), at(OPEN, 443));
    let shared = h.proxy.https;
    let status = |addr, client, version| answer(&server_ca, addr, client, version);
    eventually(
        "the own 443 serves a certificate of CA A",
        RELOAD_TIMEOUT,
        || async {
            match status(strict, Some(&of_a), Version::Http1).await {
                Ok(200) => Ok(()),
                other => Err(other),
            }
        },
    )
    .await;

    for version in [Version::Http1, Version::Http2] {
        // The own address's 443: CA A, the default validation.
        assert_eq!(
            status(strict, Some(&of_a), version).await,
            Ok(200),
            "{version:?}"
        );
        for (what, client) in [("no certificate", None), ("CA B's", Some(&of_b))] {
            let refused = status(strict, client, version).await;
            assert!(
                refused.is_err(),
                "{version:?}: {STRICT}:443 with {what}: refused in the handshake, got {refused:?}"
            );
        }
        // Its 8443: CA B, the perPort validation of that port.
        assert_eq!(
            status(strict_8443, Some(&of_b), version).await,
            Ok(200),
            "{version:?}: perPort 8443 verifies against CA B"
        );
        for (what, client) in [("no certificate", None), ("CA A's", Some(&of_a))] {
            let refused = status(strict_8443, client, version).await;
            assert!(
                refused.is_err(),
                "{version:?}: {STRICT}:8443 with {what}: refused in the handshake, got {refused:?}"
            );
        }
        // Another Gateway's own address and the shared 443: the same host
        // without validation asks no certificate.
        for (name, addr) in [("open", open), ("shared", shared)] {
            assert_eq!(
                status(addr, None, version).await,
                Ok(200),
                "{version:?}: {name} {addr} asks no client certificate"
            );
        }
    }
}
