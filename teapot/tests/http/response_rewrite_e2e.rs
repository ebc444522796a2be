//! End-to-end tests of ingress-nginx's response rewriting through the
//! real `teapot proxy` binary: `proxy-redirect-from` / `-to` (nginx's
//! `proxy_redirect`) on a backend's `Location` and `Refresh`, and
//! `proxy-cookie-domain` / `proxy-cookie-path` on its `Set-Cookie`, over
//! HTTP/1.1 and HTTP/2 (to an HTTP/1 backend, and to an h2c one):
//!
//! - a backend that answers `Location: http://internal:8080/x?y=1` gets
//!   it rewritten to the request's own scheme and host (`/` made
//!   absolute, as nginx's `absolute_redirect`), or kept a path with
//!   `relative-redirects`; its `Set-Cookie` with `Domain=internal` and
//!   `Path=/one/two` gets `Domain=example.org` and `Path=/two`;
//! - `off`, and a route without the annotations, send the fields as the
//!   backend wrote them;
//! - a hostile value (two words, a `$` variable) is reported on the
//!   Ingress's AnnotationsAccepted and rewrites nothing.
//!
//! Run with `cargo test -p teapot --test http response_rewrite_e2e::`.

use crate::common;

use common::*;
use serde_json::Value;
use teapot_testkit::client::{Proto, Request};
use teapot_testkit::echo::{EchoIdentity, EchoServer};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];
const NS: &str = "ops";

const REWRITE: [(&str, &str); 4] = [
    ("proxy-redirect-from", "http://internal:8080/"),
    ("proxy-redirect-to", "/"),
    ("proxy-cookie-domain", "internal example.org"),
    ("proxy-cookie-path", "/one/ /"),
];

/// What the backend answers with (echo-basic's hook).
const SET: &str = "Location:http://internal:8080/x?y=1,Set-Cookie:id=1; Domain=internal; Path=/one/two,Refresh:5; url=http://internal:8080/next";

fn message<'a>(status: &'a Value, name: &str) -> Option<&'a str> {
    let report = ingress_report(status, NS, name)?;
    let accepted = condition(report, "AnnotationsAccepted")?;
    (accepted["status"] == "False").then(|| accepted["message"].as_str().unwrap_or(""))
}

fn with(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    REWRITE.iter().chain(extra).copied().collect()
}

async fn ask(h: &Harness, proto: Proto, host: &str) -> teapot_testkit::client::Response {
    let req = Request::get(host, "/").header("x-echo-set-header", SET);
    let resp = over(h, proto, req).await;
    assert_eq!(resp.status, 200, "{proto:?} {host}: {}", resp.text());
    resp
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_location_and_cookies_are_rewritten() {
    let backend = EchoServer::start_echo_basic(EchoIdentity::new(NS, "", "web", "web-0"))
        .await
        .expect("echo server starts");
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.push(annotated(NS, "rewrite.test", "web", &REWRITE));
    objects.push(annotated(
        NS,
        "relative.test",
        "web",
        &with(&[("relative-redirects", "true")]),
    ));
    objects.push(annotated(
        NS,
        "h2c.test",
        "web",
        &with(&[("backend-protocol", "H2C")]),
    ));
    objects.push(annotated(
        NS,
        "off.test",
        "web",
        &[
            ("proxy-redirect-from", "off"),
            ("proxy-redirect-to", "/"),
            ("proxy-cookie-domain", "off"),
            ("proxy-cookie-path", "off"),
        ],
    ));
    objects.push(annotated(
        NS,
        "hostile.test",
        "web",
        &[
            ("proxy-redirect-from", "http://internal:8080/ x"),
            ("proxy-redirect-to", "/"),
            ("proxy-cookie-domain", "$host example.org"),
        ],
    ));
    objects.push(simple_ingress(NS, "plain.test", "plain.test", "web"));
    let h = Harness::start(&[("web.yaml", docs(&objects))]).await;
    let status = h
        .wait_status("the Ingresses reported", |s| {
            ingress_report(s, NS, "hostile.test").is_some()
        })
        .await;
    assert_eq!(message(&status, "rewrite.test"), None, "{status}");
    let hostile = message(&status, "hostile.test").unwrap_or_else(|| panic!("{status}"));
    assert!(hostile.contains("proxy-redirect-from"), "{hostile}");
    assert!(hostile.contains("proxy-cookie-domain"), "{hostile}");

    for proto in BOTH {
        let scheme = match proto {
            Proto::Http1 => "http",
            Proto::Http2 => "https",
        };
        let resp = ask(&h, proto, "rewrite.test").await;
        assert_eq!(
            header(&resp, "location"),
            format!("{scheme}://rewrite.test/x?y=1"),
            "{proto:?}"
        );
        assert_eq!(
            header(&resp, "set-cookie"),
            "id=1; Domain=example.org; Path=/two",
            "{proto:?}"
        );
        assert_eq!(header(&resp, "refresh"), "5; url=/next", "{proto:?}");
        assert_eq!(resp.json().unwrap()["host"], "rewrite.test");

        let resp = ask(&h, proto, "relative.test").await;
        assert_eq!(header(&resp, "location"), "/x?y=1", "{proto:?}");

        for host in ["off.test", "plain.test", "hostile.test"] {
            let resp = ask(&h, proto, host).await;
            assert_eq!(
                header(&resp, "location"),
                "http://internal:8080/x?y=1",
                "{proto:?} {host}"
            );
            assert_eq!(
                header(&resp, "set-cookie"),
                "id=1; Domain=internal; Path=/one/two",
                "{proto:?} {host}"
            );
        }
    }
    // An h2c backend (HTTP/2 to the backend too): the same rewriting.
    let resp = ask(&h, Proto::Http2, "h2c.test").await;
    assert_eq!(header(&resp, "location"), "https://h2c.test/x?y=1");
    assert_eq!(
        header(&resp, "set-cookie"),
        "id=1; Domain=example.org; Path=/two"
    );
    assert_eq!(resp.json().unwrap()["proto"], "HTTP/2.0");
}
