//! End-to-end test through the real `teapot proxy` binary, over HTTP/1.1
//! and HTTP/2: the 503 teapot answers for a CORS route whose Service has no
//! endpoint carries the route's CORS fields for an allowed origin (none
//! for another), as every other answer of such a route does, so a browser
//! shows the 503 instead of a CORS error.
//!
//! Run with `cargo test -p teapot --test http no_endpoint_cors_e2e::`.

use crate::common;

use common::*;
use teapot_testkit::client::{Proto, Request};

const NS: &str = "ops";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_no_endpoint_503_carries_the_cors_fields() {
    let objects = vec![
        service(NS, "empty", &[(Some("http"), 80)]),
        annotated(
            NS,
            "cors.test",
            "empty",
            &[
                ("enable-cors", "true"),
                ("cors-allow-origin", "https://app.example"),
            ],
        ),
    ];
    let h = Harness::start(&[("web.yaml", docs(&objects))]).await;
    h.wait_status("the Ingress reported", |s| {
        ingress_report(s, NS, "cors.test").is_some()
    })
    .await;
    for proto in [Proto::Http1, Proto::Http2] {
        let allowed = Request::get("cors.test", "/x").header("origin", "https://app.example");
        let resp = over(&h, proto, allowed).await;
        assert_proxy_answer(&resp, 503, &format!("{proto:?} allowed"));
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            "https://app.example",
            "{proto:?}"
        );
        let other = Request::get("cors.test", "/x").header("origin", "https://evil.example");
        let resp = over(&h, proto, other).await;
        assert_proxy_answer(&resp, 503, &format!("{proto:?} other"));
        assert!(
            resp.headers.get("access-control-allow-origin").is_none(),
            "{proto:?}"
        );
    }
}
