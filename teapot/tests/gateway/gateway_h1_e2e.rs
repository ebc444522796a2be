//! Gateway API over HTTP/1.1, through teapot's own engine (`plane::h1`,
//! docs/gateway-api.md "The HTTP/1 engine"), plain and on TLS: header,
//! method and query matches, a redirect's `Location`, request and response
//! header modifiers, path prefix and host rewrites, a request mirror seen
//! by the mirror backend, a request timeout answered 504, and a route of
//! the HTTPS listener only, served on TLS and not on plain HTTP.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::certs::{self, TestCa};
use teapot_testkit::client::{Request, Response, Transport};

const NS: &str = "gw-h1-e2e";

fn gateway() -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": "gw", "namespace": NS },
        "spec": {
            "gatewayClassName": "teapot",
            "listeners": [
                { "name": "http", "protocol": "HTTP", "port": 80, "hostname": "*.example.com" },
                {
                    "name": "https", "protocol": "HTTPS", "port": 443, "hostname": "*.example.com",
                    "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "wildcard" }] },
                },
            ],
        },
    })
}

fn route(name: &str, parent: Value, hostnames: &[&str], rules: Value) -> Value {
    http_route(NS, name, parent, hostnames, rules)
}

fn to(service: &str) -> Value {
    json!([{ "name": service, "port": 80 }])
}

fn prefix(p: &str) -> Value {
    json!([{ "path": { "type": "PathPrefix", "value": p } }])
}

/// Every rule the test reads, on both listeners.
fn shop_route() -> Value {
    route(
        "shop",
        json!({ "name": "gw" }),
        &["shop.example.com"],
        json!([
            { "backendRefs": to("v1") },
            { "matches": [{ "headers": [{ "name": "version", "value": "two" }] }], "backendRefs": to("v2") },
            { "matches": [{ "path": { "type": "Exact", "value": "/post" }, "method": "POST" }], "backendRefs": to("v2") },
            { "matches": [{ "queryParams": [{ "name": "pick", "value": "two" }] }], "backendRefs": to("v2") },
            {
                "matches": prefix("/old"),
                "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                    "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/new" },
                    "statusCode": 301,
                } }],
            },
            {
                "matches": prefix("/hdr"),
                "filters": [
                    { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                        "set": [{ "name": "X-Set", "value": "yes" }],
                        "add": [{ "name": "X-Add", "value": "added" }],
                        "remove": ["X-Drop"],
                    } },
                    { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                        "add": [{ "name": "X-Resp", "value": "added" }],
                        "set": [{ "name": "X-Resp-Set", "value": "set" }],
                    } },
                    { "type": "URLRewrite", "urlRewrite": {
                        "hostname": "rewritten.example.com",
                        "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/rewritten" },
                    } },
                ],
                "backendRefs": to("v1"),
            },
            {
                "matches": prefix("/mirror"),
                "filters": [{ "type": "RequestMirror", "requestMirror": {
                    "backendRef": { "name": "mirror", "port": 80 },
                } }],
                "backendRefs": to("v1"),
            },
            { "matches": prefix("/grpc"), "backendRefs": to("grpc") },
            {
                "matches": prefix("/slow"),
                "timeouts": { "request": "500ms" },
                "backendRefs": to("v1"),
            },
        ]),
    )
}

/// The echo's service name (a 200 from an echo).
fn service(resp: &Response) -> String {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json().expect("echo JSON")["service"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_matches_and_filters_over_http1_plain_and_tls() {
    let v1 = echo(NS, "v1", "v1-pod").await;
    let v2 = echo(NS, "v2", "v2-pod").await;
    let mirror = echo(NS, "mirror", "mirror-pod").await;
    let ca = TestCa::new("gateway h1 e2e");
    let cert = ca.issue(&["*.example.com"]);
    let mut objects = vec![
        gateway(),
        shop_route(),
        // Attached to the HTTPS listener only.
        route(
            "secure",
            json!({ "name": "gw", "sectionName": "https" }),
            &["secure.example.com"],
            json!([{ "backendRefs": to("v2") }]),
        ),
    ];
    for (name, e) in [("v1", &v1), ("v2", &v2), ("mirror", &mirror)] {
        objects.extend(echo_service(NS, name, &[e]));
    }
    // A backend that speaks HTTP/2 only (h2c): no HTTP/1 request for it.
    let mut grpc = echo_service(NS, "grpc", &[&v1]);
    grpc[0]["spec"]["ports"][0]["appProtocol"] = json!("kubernetes.io/h2c");
    objects.extend(grpc);
    let h = Harness::start(&[
        ("gw.yaml", docs(&objects)),
        ("secret.yaml", certs::tls_secret_yaml(NS, "wildcard", &cert)),
    ])
    .await;
    let plain = (h.proxy.http, Transport::Plain, "http");
    let tls = (
        h.proxy.https,
        Transport::tls_verified("shop.example.com", &[ca.cert_der()]),
        "https",
    );
    let host = "shop.example.com";
    // The route is served once the snapshot has it.
    eventually("the Gateway route", Duration::from_secs(10), || async {
        let resp = send(plain.0, &plain.1, &Request::get(host, "/?pick=two")).await;
        match resp.status {
            200 if resp.json().is_ok_and(|j| j["service"] == "v2") => Ok(()),
            _ => Err(resp.text()),
        }
    })
    .await;

    for (addr, transport, scheme) in [&plain, &tls] {
        let go = |req: Request| async move { send(*addr, transport, &req).await };
        let get = |target: &str| Request::get(host, target);
        let what = format!("over {scheme}");

        // Matches the head alone does not decide.
        assert_eq!(service(&go(get("/")).await), "v1", "{what}");
        assert_eq!(
            service(&go(get("/").header("version", "two")).await),
            "v2",
            "header match {what}"
        );
        assert_eq!(service(&go(get("/").header("version", "one")).await), "v1");
        let mut post = get("/post");
        post.method = "POST".into();
        assert_eq!(service(&go(post).await), "v2", "method match {what}");
        assert_eq!(service(&go(get("/post")).await), "v1", "GET /post {what}");
        assert_eq!(
            service(&go(get("/x?a=1&pick=two")).await),
            "v2",
            "query match {what}"
        );
        assert_eq!(service(&go(get("/x?pick=one")).await), "v1");

        // A redirect answers with its Location.
        let redirect = go(get("/old/page?q=1")).await;
        assert_eq!(redirect.status, 301, "{what}");
        assert_eq!(
            header(&redirect, "location"),
            format!("{scheme}://shop.example.com/new/page?q=1")
        );

        // Header modifiers both ways, path prefix and host rewrites.
        let filtered = go(get("/hdr/x?k=v")
            .header("X-Drop", "1")
            .header("X-Set", "client")
            .header("X-Add", "client"))
        .await;
        assert_eq!(filtered.status, 200, "{what}: {}", filtered.text());
        assert_eq!(format!("{:?}", filtered.version), "HTTP/1.1", "{what}");
        assert_eq!(header(&filtered, "x-resp"), "added", "{what}");
        assert_eq!(header(&filtered, "x-resp-set"), "set", "{what}");
        let echoed = filtered.json().expect("echo JSON");
        assert_eq!(echoed["path"], "/rewritten/x?k=v", "{what}: {echoed}");
        assert_eq!(echoed["host"], "rewritten.example.com", "{what}: {echoed}");
        assert_eq!(echoed["headers"]["X-Set"], json!(["yes"]), "{echoed}");
        assert_eq!(
            echoed["headers"]["X-Add"],
            json!(["client", "added"]),
            "{echoed}"
        );
        assert!(echoed["headers"].get("X-Drop").is_none(), "{echoed}");
        // X-Forwarded-Host keeps the client's authority.
        assert_eq!(
            echoed["headers"]["X-Forwarded-Host"],
            json!([host]),
            "{echoed}"
        );

        // A mirror: the mirror backend sees the request, the client gets
        // the main backend's answer.
        let mirrored_before = mirror.requests();
        assert_eq!(service(&go(get("/mirror/a")).await), "v1", "{what}");
        eventually("the mirrored request", Duration::from_secs(5), || async {
            match mirror.requests() {
                n if n > mirrored_before => Ok(()),
                n => Err(n),
            }
        })
        .await;

        // A request timeout: 504 when the backend is slower.
        let asked = std::time::Instant::now();
        let slow = go(get("/slow").header("X-Echo-Delay-Ms", "3000")).await;
        assert_eq!(slow.status, 504, "{what}: {}", slow.text());
        assert!(asked.elapsed() < Duration::from_millis(2500), "{what}");
        assert_eq!(
            service(&go(get("/slow").header("X-Echo-Delay-Ms", "10")).await),
            "v1"
        );

        // An h2c backend over HTTP/1: 502, saying why.
        let h2c = go(get("/grpc/x")).await;
        assert_eq!(h2c.status, 502, "{what}");
        assert!(h2c.text().contains("HTTP/2"), "{what}: {}", h2c.text());
    }

    // A route of the HTTPS listener only: served on TLS, not on plain.
    let secure = Transport::tls_verified("secure.example.com", &[ca.cert_der()]);
    let resp = send(
        h.proxy.https,
        &secure,
        &Request::get("secure.example.com", "/"),
    )
    .await;
    assert_eq!(service(&resp), "v2");
    let resp = h.get("secure.example.com", "/").await;
    assert_eq!(resp.status, 404, "{}", resp.text());
}
