//! End-to-end checks of the isolation review's findings that show on the
//! wire (docs/edge.md, "Forwarding headers"): the real `teapot proxy`
//! binary, an echo backend, requests over HTTP/1.1 and HTTP/2, plain and
//! TLS.
//!
//! The other findings are tested where their logic lives: L4 listener
//! ownership in `l4_e2e.rs` and `loops::allocations`, ACME per tenant in
//! `loops::acme::issuer`, DNS proofs in `loops::proof`, memory quotas in
//! `teapot_model::tenancy`, custom-domain claims in `compile`.
//!
//! Run with `cargo test -p teapot --test isolation_e2e`.

mod common;

use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request, Transport};

/// Finding 6: a client's own `Forwarded` and `X-Real-IP` reached tenant
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
