//! End-to-end tests of ingress-nginx's `custom-headers` (the fields of a
//! ConfigMap set on every response of an Ingress's routes) through the
//! real `teapot proxy` binary and an echo backend, over HTTP/1.1 and
//! HTTP/2:
//!
//! - the ConfigMap's fields are on the response, replacing the backend's
//!   field of the same name (`Content-Type`), a `$` left as written; an
//!   Ingress without the annotation gets none of them;
//! - a changed ConfigMap is served without a restart, and a ConfigMap that
//!   appears serves the Ingress that named it while it was missing;
//! - a missing ConfigMap, one with too many entries and one naming
//!   `Set-Cookie` make their routes answer 503 (ingress-nginx's denied
//!   location), nothing forwarded, and the Ingress's AnnotationsAccepted
//!   names the ConfigMap and the entry at fault.
//!
//! Run with `cargo test -p teapot --test http custom_headers_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];
const NS: &str = "ops";

fn config_map(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": NS},
        "data": data,
    })
}

fn headers(frame_options: &str) -> Value {
    config_map(
        "headers",
        json!({
            "X-Frame-Options": frame_options,
            "Content-Security-Policy": "default-src 'self'",
            "My-Custom-Header-Dollar": "$remote_addr",
            "Content-Type": "application/teapot+json",
        }),
    )
}

fn too_many() -> Value {
    let data: serde_json::Map<String, Value> = (0..40)
        .map(|i| (format!("X-Field-{i}"), json!("1")))
        .collect();
    config_map("too-many", Value::Object(data))
}

fn annotated_headers(host: &str, config_map: &str) -> Value {
    annotated(NS, host, "web", &[("custom-headers", config_map)])
}

const HOSTS: [&str; 4] = ["headers.test", "missing.test", "many.test", "cookie.test"];

fn message<'a>(status: &'a Value, name: &str) -> Option<&'a str> {
    let report = ingress_report(status, NS, name)?;
    let accepted = condition(report, "AnnotationsAccepted")?;
    (accepted["status"] == "False").then(|| accepted["message"].as_str().unwrap_or(""))
}

fn all_values<'a>(resp: &'a teapot_testkit::client::Response, name: &str) -> Vec<&'a str> {
    resp.headers
        .get_all(name)
        .iter()
        .map(|v| v.to_str().unwrap())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_headers_are_set_and_follow_their_config_map() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.push(too_many());
    objects.push(config_map(
        "cookie",
        json!({"Set-Cookie": "session=fixed", "X-A": "1"}),
    ));
    objects.push(annotated_headers("headers.test", "headers"));
    objects.push(annotated_headers("missing.test", &format!("{NS}/later")));
    objects.push(annotated_headers("many.test", "too-many"));
    objects.push(annotated_headers("cookie.test", "cookie"));
    objects.push(simple_ingress(NS, "plain.test", "plain.test", "web"));
    let h = Harness::start(&[
        ("web.yaml", docs(&objects)),
        ("headers.yaml", docs(&[headers("DENY")])),
    ])
    .await;
    let status = h
        .wait_status("the Ingresses reported", |s| {
            HOSTS.iter().all(|n| ingress_report(s, NS, n).is_some())
        })
        .await;
    // Each refusal names the ConfigMap and, where one is at fault, its entry.
    let said = |name: &str| message(&status, name).unwrap_or_else(|| panic!("{name}: {status}"));
    assert_eq!(message(&status, "headers.test"), None, "{status}");
    let missing = said("missing.test");
    assert!(
        missing.contains("ConfigMap ops/later not found"),
        "{missing}"
    );
    let many = said("many.test");
    assert!(
        many.contains("ConfigMap ops/too-many data: 40 response fields: at most 32"),
        "{many}"
    );
    let cookie = said("cookie.test");
    assert!(
        cookie.contains("ConfigMap ops/cookie data[\"Set-Cookie\"]: Set-Cookie may not be set"),
        "{cookie}"
    );

    for proto in BOTH {
        let what = |case: &str| format!("{proto:?} {case}");
        let resp = over(&h, proto, Request::get("headers.test", "/")).await;
        assert_eq!(resp.status, 200, "{}: {}", what("headers"), resp.text());
        assert_eq!(header(&resp, "x-frame-options"), "DENY", "{}", what("set"));
        assert_eq!(
            header(&resp, "content-security-policy"),
            "default-src 'self'"
        );
        assert_eq!(header(&resp, "my-custom-header-dollar"), "$remote_addr");
        // The backend's own Content-Type is replaced, not joined.
        assert_eq!(
            all_values(&resp, "content-type"),
            ["application/teapot+json"],
            "{}",
            what("replaced")
        );
        assert_eq!(resp.json().unwrap()["host"], "headers.test");
        let plain = over(&h, proto, Request::get("plain.test", "/")).await;
        assert_eq!(plain.status, 200, "{}", what("plain"));
        assert!(plain.headers.get("x-frame-options").is_none());
        assert_eq!(all_values(&plain, "content-type"), ["application/json"]);
        let forwarded = backend.requests();
        for host in ["missing.test", "many.test", "cookie.test"] {
            let resp = over(&h, proto, Request::get(host, "/")).await;
            assert_proxy_answer(&resp, 503, &what(host));
            assert!(resp.headers.get("set-cookie").is_none(), "{}", what(host));
        }
        assert_eq!(backend.requests(), forwarded, "{}", what("refused"));
    }

    // A changed ConfigMap, and the missing one appearing: served without
    // a restart.
    let later = config_map("later", json!({"X-Later": "now"}));
    h.apply("headers.yaml", &docs(&[headers("SAMEORIGIN"), later]))
        .await;
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("headers.test", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        assert_eq!(all_values(&resp, "x-frame-options"), ["SAMEORIGIN"]);
        let resp = over(&h, proto, Request::get("missing.test", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        assert_eq!(header(&resp, "x-later"), "now");
    }
    let status = h.status().await;
    assert_eq!(message(&status, "missing.test"), None, "{status}");
}
