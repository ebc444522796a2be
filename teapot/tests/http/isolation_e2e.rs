//! End-to-end checks of tenant isolation as it shows on the wire (docs/edge.md, "Forwarding headers"): the real `teapot proxy`
//! binary, an echo backend, requests over HTTP/1.1 and HTTP/2, plain and
//! TLS.
//!
//! The other findings are tested where their logic lives: L4 listener
//! ownership in `l4_e2e.rs` and `loops::allocations`, ACME per tenant in
//! `loops::acme::issuer`, DNS proofs in `loops::proof`, memory quotas in
//! `teapot_model::tenancy`, custom-domain claims in `compile`.
//!
//! Run with `cargo test -p teapot --test http isolation_e2e::`.

use crate::common;

use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request, Transport};

/// A client's own `Forwarded` and `X-Real-IP` reached tenant
/// backends unchanged, as if teapot had vouched for them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_forwarded_and_real_ip_headers_never_reach_backends() {
    let (_backend, h) = one_route("fwd6", "fwd6", &[]).await;
    let request = |proto: Proto| {
        Request::get("fwd6.test", "/headers")
            .header("Forwarded", "for=6.6.6.6;proto=https;host=bank.test")
            .header("X-Real-IP", "6.6.6.6")
            .proto(proto)
    };
    let cases = [
        ("h1", "http", h.proxy.http, Transport::Plain, Proto::Http1),
        (
            "h1",
            "https",
            h.proxy.https,
            Transport::tls_insecure("fwd6.test"),
            Proto::Http1,
        ),
        (
            "h2",
            "https",
            h.proxy.https,
            Transport::tls_insecure("fwd6.test"),
            Proto::Http2,
        ),
    ];
    for (version, scheme, addr, transport, proto) in cases {
        let resp = send(addr, &transport, &request(proto)).await;
        assert_eq!(resp.status, 200, "{version} {scheme}: {}", resp.text());
        let json = resp.json().unwrap();
        let headers = &json["headers"];
        assert_eq!(
            headers["Forwarded"],
            json!([format!("for=127.0.0.1;proto={scheme};host=\"fwd6.test\"")]),
            "{version} {scheme}: {json:#}"
        );
        assert_eq!(
            headers["X-Real-Ip"],
            json!(["127.0.0.1"]),
            "{version} {scheme}: {json:#}"
        );
    }
}

/// A TLS connection made for tenant A's host (its SNI, its
/// certificate) carried requests for another Ingress's host. Now that is
/// 421 Misdirected Request, over HTTP/1.1 and HTTP/2 alike; the matching
/// host is served on the same connection kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_the_connections_certificate_does_not_serve_gets_421() {
    const NS: &str = "sni";
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    for host in ["a.test", "b.test"] {
        let mut ingress = simple_ingress(NS, host, host, "web");
        ingress["spec"]["tls"] = json!([{ "hosts": [host], "secretName": host }]);
        objects.push(ingress);
    }
    let secrets: Vec<String> = ["a.test", "b.test"]
        .iter()
        .map(|h| teapot_echo::certs::tls_secret_yaml(NS, h, &teapot_echo::certs::self_signed(&[h])))
        .collect();
    let manifests = format!("{}\n---\n{}", docs(&objects), secrets.join("\n---\n"));
    let h = Harness::start(&[("manifests.yaml", manifests)]).await;
    h.wait_status("both certificates loaded", |s| {
        s["ingresses"]
            .as_array()
            .is_some_and(|i| i.len() == 2 && i.iter().all(|r| r["served"] == true))
    })
    .await;

    let a = Transport::tls_insecure("a.test");
    for (n, proto) in [Proto::Http1, Proto::Http2].into_iter().enumerate() {
        let ok = send(h.proxy.https, &a, &Request::get("a.test", "/").proto(proto)).await;
        assert_eq!(ok.status, 200, "{proto:?}: {}", ok.text());
        let fronted = send(h.proxy.https, &a, &Request::get("b.test", "/").proto(proto)).await;
        assert_eq!(fronted.status, 421, "{proto:?}: {}", fronted.text());
        assert_eq!(
            backend.requests(),
            n as u64 + 1,
            "{proto:?}: the fronted request reached no backend"
        );
    }
    // Plain HTTP has no certificate to disagree with: not 421, but the
    // TLS host's redirect to HTTPS (ssl-redirect's default).
    let plain = send(
        h.proxy.http,
        &Transport::Plain,
        &Request::get("b.test", "/"),
    )
    .await;
    assert_eq!(plain.status, 308);
    assert_eq!(header(&plain, "location"), "https://b.test");
}
