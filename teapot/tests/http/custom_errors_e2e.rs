//! End-to-end tests of custom error pages (ingress-nginx's
//! `custom-http-errors` with `default-backend`, docs/operations.md)
//! through the real `teapot proxy` binary, with echo backends as the
//! route's backend and as the error backend (which answers with what it
//! was asked), over HTTP/1.1 (plain) and HTTP/2 (TLS, ALPN h2).
//!
//! Run with `cargo test -p teapot --test http custom_errors_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};
use teapot_testkit::echo::{EchoIdentity, EchoServer};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

/// The request's field `name` as the echo backend saw it.
fn seen_field(seen: &Value, name: &str) -> Value {
    seen["headers"][name].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listed_statuses_get_the_default_backends_page() {
    const NS: &str = "ops";
    let web = echo(NS, "web", "web-0").await;
    let errors = echo(NS, "errors", "errors-0").await;
    let mut objects = echo_service(NS, "web", &[&web]);
    objects.extend(echo_service(NS, "errors", &[&errors]));
    let gone = teapot_testkit::l4::ClosedPort::new();
    objects.extend(loopback_service(NS, "gone", gone.port()));
    // A Service without endpoints.
    objects.push(service(NS, "empty", &[(Some("http"), 80)]));
    let pages = [
        ("custom-http-errors", "404,503"),
        ("default-backend", "errors"),
    ];
    objects.extend([
        annotated(NS, "pages.test", "web", &pages),
        annotated(
            NS,
            "dead-pages.test",
            "web",
            &[("custom-http-errors", "404"), ("default-backend", "gone")],
        ),
        annotated(
            NS,
            "unreachable.test",
            "gone",
            &[("custom-http-errors", "502"), ("default-backend", "errors")],
        ),
        annotated(NS, "empty.test", "empty", &[("default-backend", "errors")]),
        annotated(
            NS,
            "h2c.test",
            "web",
            &[
                ("backend-protocol", "H2C"),
                ("custom-http-errors", "404"),
                ("default-backend", "errors"),
            ],
        ),
    ]);
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;

    for proto in BOTH {
        for code in ["404", "503"] {
            // The backend answers a listed status: the client gets the
            // error backend's answer, and the error backend was told of
            // the request. It got every client field, as from
            // ingress-nginx: the client's status hook too, so it answers
            // `code` as well (its 200 passing on is shown below).
            let req = Request::get("pages.test", "/missing?x=1")
                .header("x-echo-status", code)
                .header("accept", "application/json")
                .header("cookie", "cart=c1")
                .header("x-tenant-key", "k-7")
                .header("x-code", "200")
                .header("x-forwarded-for", "6.6.6.6");
            let resp = over(&h, proto, req).await;
            assert_eq!(
                resp.status.to_string(),
                code,
                "{proto:?} {code}: {}",
                resp.text()
            );
            let seen = resp.json().expect("the error backend's echo");
            assert_eq!(seen["service"], "errors", "{proto:?}: {seen}");
            assert_eq!(seen["method"], "GET");
            assert_eq!(seen["path"], "/");
            assert_eq!(seen["host"], "pages.test");
            assert_eq!(seen_field(&seen, "X-Code"), json!([code]), "{proto:?}");
            assert_eq!(seen_field(&seen, "X-Format"), json!(["application/json"]));
            assert_eq!(seen_field(&seen, "X-Original-Uri"), json!(["/missing?x=1"]));
            assert_eq!(seen_field(&seen, "X-Namespace"), json!([NS]));
            assert_eq!(seen_field(&seen, "X-Ingress-Name"), json!(["pages.test"]));
            assert_eq!(seen_field(&seen, "X-Service-Name"), json!(["web"]));
            assert_eq!(seen_field(&seen, "X-Service-Port"), json!(["80"]));
            assert_eq!(seen_field(&seen, "X-Forwarded-For"), json!(["127.0.0.1"]));
            assert_eq!(seen_field(&seen, "Cookie"), json!(["cart=c1"]));
            let id = seen_field(&seen, "X-Request-Id");
            assert_eq!(id[0].as_str().map(str::len), Some(32), "{proto:?}: {id}");
            assert_eq!(seen_field(&seen, "X-Tenant-Key"), json!(["k-7"]));
            assert_eq!(seen_field(&seen, "X-Echo-Status"), json!([code]));
        }
        // A HEAD's page is asked with HEAD: the error backend's answer,
        // no body.
        let head = Request {
            method: "HEAD".into(),
            ..Request::get("pages.test", "/gone")
        }
        .header("x-echo-status", "404");
        let asked = errors.targets().len();
        let resp = over(&h, proto, head).await;
        assert_eq!(resp.status, 404, "HEAD, {proto:?}");
        assert!(resp.body.is_empty(), "HEAD, {proto:?}: {}", resp.text());
        assert_eq!(errors.targets().len(), asked + 1, "HEAD, {proto:?}");
        // A status not listed passes untouched.
        let req = Request::get("pages.test", "/broken").header("x-echo-status", "500");
        let resp = over(&h, proto, req).await;
        assert_eq!(resp.status, 500, "{proto:?}");
        let seen = resp.json().expect("the backend's echo");
        assert_eq!(
            (&seen["service"], &seen["path"]),
            (&json!("web"), &json!("/broken"))
        );
        let resp = over(&h, proto, Request::get("pages.test", "/fine")).await;
        assert_eq!(resp.status, 200, "{proto:?}");
        assert_eq!(resp.json().unwrap()["service"], "web");

        // The error backend does not answer: the backend's status, with
        // teapot's short body.
        let req = Request::get("dead-pages.test", "/x").header("x-echo-status", "404");
        let resp = over(&h, proto, req).await;
        assert_proxy_answer(&resp, 404, &format!("dead error backend, {proto:?}"));
        assert_eq!(resp.text(), "404 Not Found\n");

        // teapot's own 502 (no endpoint answers) when listed.
        let resp = over(&h, proto, Request::get("unreachable.test", "/y")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        let seen = resp.json().expect("the error backend's echo");
        assert_eq!(seen_field(&seen, "X-Code"), json!(["502"]), "{proto:?}");
        assert_eq!(seen_field(&seen, "X-Service-Name"), json!(["gone"]));

        // No endpoint at all: default-backend answers for 503, as
        // ingress-nginx sends such requests there.
        let resp = over(&h, proto, Request::get("empty.test", "/alma/armud")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        let seen = resp.json().expect("the error backend's echo");
        assert_eq!(seen_field(&seen, "X-Code"), json!(["503"]), "{proto:?}");
        assert_eq!(seen_field(&seen, "X-Original-Uri"), json!(["/alma/armud"]));
        assert_eq!(seen_field(&seen, "X-Service-Name"), json!(["empty"]));
        assert_eq!(seen_field(&seen, "X-Ingress-Name"), json!(["empty.test"]));
    }

    // An HTTP/2 backend (h2c) answers a listed status: the page too.
    let req = Request::get("h2c.test", "/missing").header("x-echo-status", "404");
    let resp = over(&h, Proto::Http2, req).await;
    assert_eq!(resp.status, 404, "h2c: {}", resp.text());
    let seen = resp.json().expect("the error backend's echo");
    assert_eq!(seen["service"], "errors");
    assert_eq!(seen_field(&seen, "X-Code"), json!(["404"]));
    let req = Request::get("h2c.test", "/fine").header("x-echo-status", "500");
    let resp = over(&h, Proto::Http2, req).await;
    assert_eq!(resp.status, 500, "h2c: {}", resp.text());
    assert_eq!(resp.json().unwrap()["proto"], "HTTP/2.0");
}

/// A tenant's `default-backend` is a Service of its own namespace: the
/// name of another tenant's Service finds nothing (the client gets
/// teapot's answer), an Ingress naming `NAMESPACE/NAME` is refused; its
/// own Service serves its pages.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_reaches_only_its_own_error_backend() {
    let ip = node_address(false);
    let errors = EchoServer::start_on(ip, EchoIdentity::new("tenant-alpha", "", "errors", "0"))
        .await
        .expect("echo on the node address");
    let objects = vec![
        node_tenant("alpha", ip),
        tenant("beta"),
        service("tenant-alpha", "errors", &[(Some("http"), 80)]),
        synced_slice("tenant-alpha", "errors", errors.addr()),
        // Each tenant's backend has no endpoint: every request is a 503
        // the default backend may answer.
        service("tenant-alpha", "web", &[(Some("http"), 80)]),
        service("tenant-beta", "web", &[(Some("http"), 80)]),
        annotated(
            "tenant-alpha",
            "app.alpha.lb.localhost",
            "web",
            &[("default-backend", "errors")],
        ),
        annotated(
            "tenant-beta",
            "same-name.beta.lb.localhost",
            "web",
            &[("default-backend", "errors"), ("custom-http-errors", "503")],
        ),
        annotated(
            "tenant-beta",
            "cross.beta.lb.localhost",
            "web",
            &[
                ("default-backend", "tenant-alpha/errors"),
                ("custom-http-errors", "503"),
            ],
        ),
    ];
    let h = Harness::start(&[("tenants.yaml", docs(&objects))]).await;
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("app.alpha.lb.localhost", "/")).await;
        assert_eq!(resp.status, 200, "alpha's own, {proto:?}: {}", resp.text());
        let seen = resp.json().expect("alpha's error backend");
        assert_eq!(seen_field(&seen, "X-Code"), json!(["503"]));
        assert_eq!(seen["namespace"], "tenant-alpha");
        // Beta names alpha's Service: looked up in beta's namespace only,
        // where there is none. teapot's own short page.
        let resp = over(&h, proto, Request::get("same-name.beta.lb.localhost", "/")).await;
        assert_proxy_answer(&resp, 503, &format!("beta, alpha's name, {proto:?}"));
        assert_eq!(resp.text(), "503 Service Unavailable\n");
        // Beta names alpha's namespace: the Ingress is refused whole (as
        // the webhook refuses it), nothing of it served.
        let resp = over(&h, proto, Request::get("cross.beta.lb.localhost", "/")).await;
        assert_proxy_answer(&resp, 404, &format!("beta, another namespace, {proto:?}"));
    }
}
