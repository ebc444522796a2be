//! Request paths are normalised before any route matches them
//! (docs/decisions.md, "Paths are normalised before matching"): a
//! `/public` rule, Gateway API or Ingress, does not take
//! `/public/../admin` or `/public/%2e%2e/admin`, over HTTP/1 and HTTP/2;
//! the backend gets the path that was matched, the query as sent; and
//! Gateway rewrites and redirects work on the normalised path.

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request, Response, Transport};
use teapot_testkit::echo::EchoServer;

const NS: &str = "paths-e2e";
/// A Gateway route with one rule: `PathPrefix /public`.
const GATEWAY_HOST: &str = "gw.example.com";
/// The same, plus a rule for `/admin` to another backend, a rewrite and
/// a redirect.
const GATEWAY_BOTH: &str = "both.example.com";
/// An Ingress with one rule: `Prefix /public`.
const INGRESS_HOST: &str = "ing.example.com";

/// Climbs out of `/public` into `/admin`, dots plain and encoded.
const CLIMBS: [&str; 5] = [
    "/public/../admin",
    "/public/%2e%2e/admin",
    "/public/%2E%2E/admin",
    "/public/.%2e/admin",
    "/public/x/../../admin/y",
];

fn prefix(p: &str) -> Value {
    json!([{ "path": { "type": "PathPrefix", "value": p } }])
}

fn to(service: &str) -> Value {
    json!([{ "name": service, "port": 80 }])
}

fn manifests(public: &EchoServer, admin: &EchoServer) -> String {
    let route = |name: &str, host: &str, rules: Value| {
        http_route(NS, name, json!({ "name": "gw" }), &[host], rules)
    };
    let mut objects = vec![
        gateway_gw(
            NS,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        route(
            "public-only",
            GATEWAY_HOST,
            json!([{ "matches": prefix("/public"), "backendRefs": to("public") }]),
        ),
        route(
            "public-and-admin",
            GATEWAY_BOTH,
            json!([
                { "matches": prefix("/public"), "backendRefs": to("public") },
                { "matches": prefix("/admin"), "backendRefs": to("admin") },
                {
                    "matches": prefix("/rw"),
                    "filters": [{ "type": "URLRewrite", "urlRewrite": {
                        "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/inner" },
                    } }],
                    "backendRefs": to("public"),
                },
                {
                    "matches": prefix("/old"),
                    "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                        "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/new" },
                        "statusCode": 301,
                    } }],
                },
            ]),
        ),
        ingress(
            NS,
            "public-only",
            json!({ "rules": [rule(
                Some(INGRESS_HOST),
                vec![path("Prefix", "/public", backend("public", Port::Number(80)))],
            )] }),
        ),
    ];
    objects.extend(echo_service(NS, "public", &[public]));
    objects.extend(echo_service(NS, "admin", &[admin]));
    docs(&objects)
}

/// The echo's service and the path (with query) it received.
fn served(resp: &Response, what: &str) -> (String, String) {
    assert_eq!(resp.status, 200, "{what}: {}", resp.text());
    let json = resp
        .json()
        .unwrap_or_else(|e| panic!("{what}: {e}: {}", resp.text()));
    let text = |k: &str| json[k].as_str().unwrap_or_default().to_string();
    (text("service"), text("path"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_do_not_climb_out_of_a_prefix_route_over_http1() {
    dot_segments_do_not_climb_out_of_a_prefix_route(Proto::Http1).await;
}

/// HTTP/2 with prior knowledge (`--h2c`): the same server as on TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_do_not_climb_out_of_a_prefix_route_over_http2() {
    dot_segments_do_not_climb_out_of_a_prefix_route(Proto::Http2).await;
}

async fn dot_segments_do_not_climb_out_of_a_prefix_route(proto: Proto) {
    let public = echo(NS, "public", "public-0").await;
    let admin = echo(NS, "admin", "admin-0").await;
    let h = Harness::start_with_args(&[("m.yaml", manifests(&public, &admin))], &["--h2c"]).await;
    for host in [GATEWAY_HOST, GATEWAY_BOTH, INGRESS_HOST] {
        eventually(host, Duration::from_secs(10), || async {
            match h.get(host, "/public/ready").await.status {
                200 => Ok(()),
                status => Err(status),
            }
        })
        .await;
    }

    let go = |host: &str, target: &str| {
        let req = Request::get(host, target).proto(proto);
        async move { send(h.proxy.http, &Transport::Plain, &req).await }
    };
    for host in [GATEWAY_HOST, INGRESS_HOST] {
        for target in CLIMBS {
            let what = format!("{proto:?} {host}{target}");
            let resp = go(host, target).await;
            assert_proxy_answer(&resp, 404, &what);
        }
        // What was matched is what the backend gets; the query is
        // left as sent.
        let what = format!("{proto:?} {host}");
        let (service, path) = served(&go(host, "/public/./x").await, &what);
        assert_eq!((service.as_str(), path.as_str()), ("public", "/public/x"));
        let (_, path) = served(&go(host, "/public/%2e/x/%2E%2E/y").await, &what);
        assert_eq!(path, "/public/y", "{what}");
        let (_, path) = served(&go(host, "/public/./x?q=/../a&r=%2e%2e").await, &what);
        assert_eq!(path, "/public/x?q=/../a&r=%2e%2e", "{what}");
        // An encoded slash is no separator: its dots are no segment.
        assert_proxy_answer(&go(host, "/public%2F..%2Fadmin").await, 404, &what);
        let (_, path) = served(&go(host, "/public/a%2F..%2Fb").await, &what);
        assert_eq!(path, "/public/a%2F..%2Fb", "{what}");
    }

    // With an `/admin` rule, the climb reaches it, as `/admin`.
    for target in CLIMBS {
        let what = format!("{proto:?} {GATEWAY_BOTH}{target}");
        let (service, path) = served(&go(GATEWAY_BOTH, target).await, &what);
        assert_eq!(service, "admin", "{what}");
        assert!(path.starts_with("/admin"), "{what}: {path}");
    }
    // Rewrites and redirects act on the normalised path.
    let what = format!("{proto:?} rewrite");
    let (_, path) = served(&go(GATEWAY_BOTH, "/public/../rw/./a?k=v").await, &what);
    assert_eq!(path, "/inner/a?k=v", "{what}");
    let redirect = go(GATEWAY_BOTH, "/public/%2e%2e/old/./page?k=v").await;
    assert_eq!(redirect.status, 301, "{proto:?}: {}", redirect.text());
    assert_eq!(
        header(&redirect, "location"),
        format!("http://{GATEWAY_BOTH}/new/page?k=v"),
        "{proto:?}"
    );
}
