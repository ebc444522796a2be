//! Gateway API end to end (docs/gateway-api.md): `teapot proxy
//! --manifests` with a Gateway of class `teapot` and HTTPRoutes in front
//! of echo backends. Path matches, weights, redirects and unresolved
//! backends over HTTP/1 (decided in `plane::decide`); header and method
//! matches, the redirect's `Location` and header filters over cleartext
//! HTTP/2 (teapot's HTTP/2 server, over the same request pipeline as
//! HTTP/1, crate::plane::pipeline); a hot reload; `/status` conditions.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};

const NS: &str = "gw-e2e";

fn gateway() -> Value {
    gateway_gw(
        NS,
        json!([{ "name": "http", "protocol": "HTTP", "port": 80, "hostname": "*.example.com" }]),
    )
}

fn route(name: &str, hostnames: &[&str], rules: Value) -> Value {
    http_route(NS, name, json!({ "name": "gw" }), hostnames, rules)
}

fn to(service: &str) -> Value {
    json!([{ "name": service, "port": 80 }])
}

/// The main route: default to v1; `/v2` to v2; header `version: two` to
/// v2; `POST /post` to v2; `/split` half and half; `/old` redirected;
/// `/hdr` with header filters.
fn shop_route(v2_prefix: &str) -> Value {
    route(
        "shop",
        &["shop.example.com"],
        json!([
            { "backendRefs": to("v1") },
            { "matches": [{ "path": { "type": "PathPrefix", "value": v2_prefix } }], "backendRefs": to("v2") },
            { "matches": [{ "headers": [{ "name": "version", "value": "two" }] }], "backendRefs": to("v2") },
            { "matches": [{ "path": { "type": "Exact", "value": "/post" }, "method": "POST" }], "backendRefs": to("v2") },
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/split" } }],
                "backendRefs": [{ "name": "v1", "port": 80, "weight": 1 }, { "name": "v2", "port": 80, "weight": 1 }],
            },
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/old" } }],
                "filters": [{ "type": "RequestRedirect", "requestRedirect": {
                    "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/new" },
                    "statusCode": 301,
                } }],
            },
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/hdr" } }],
                "filters": [
                    { "type": "RequestHeaderModifier", "requestHeaderModifier": {
                        "set": [{ "name": "X-Set", "value": "yes" }],
                        "remove": ["X-Drop"],
                    } },
                    { "type": "ResponseHeaderModifier", "responseHeaderModifier": {
                        "add": [{ "name": "X-Resp", "value": "added" }],
                    } },
                    { "type": "URLRewrite", "urlRewrite": {
                        "path": { "type": "ReplacePrefixMatch", "replacePrefixMatch": "/rewritten" },
                    } },
                ],
                "backendRefs": to("v1"),
            },
        ]),
    )
}

/// The echo's service name.
fn service(resp: &teapot_testkit::client::Response) -> String {
    assert_eq!(resp.status, 200, "{}", resp.text());
    resp.json().expect("echo JSON")["service"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

fn route_conditions(status: &Value, name: &str) -> Vec<(String, String, String)> {
    let routes = status["gatewayAPI"]["httpRoutes"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let Some(r) = routes.iter().find(|r| r["name"] == name) else {
        return Vec::new();
    };
    r["status"]["parents"][0]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (f("type"), f("status"), f("reason"))
        })
        .collect()
}

fn has(conditions: &[(String, String, String)], t: &str, s: &str, reason: &str) -> bool {
    conditions
        .iter()
        .any(|(a, b, c)| a == t && b == s && c == reason)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_routes_match_split_redirect_and_reload() {
    let v1 = echo(NS, "v1", "v1-pod").await;
    let v2 = echo(NS, "v2", "v2-pod").await;
    let mut objects = vec![gateway(), shop_route("/v2")];
    objects.extend(echo_service(NS, "v1", &[&v1]));
    objects.extend(echo_service(NS, "v2", &[&v2]));
    // A route whose only backend does not exist: 500 and BackendNotFound.
    objects.push(route(
        "broken",
        &["broken.example.com"],
        json!([{ "backendRefs": to("nothing") }]),
    ));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;

    // /status: the Gateway and routes, as the status subresources read.
    let status = h
        .wait_status("Gateway API status", |s| {
            has(&route_conditions(s, "shop"), "Accepted", "True", "Accepted")
        })
        .await;
    let shop = route_conditions(&status, "shop");
    assert!(
        has(&shop, "ResolvedRefs", "True", "ResolvedRefs"),
        "{shop:?}"
    );
    let broken = route_conditions(&status, "broken");
    assert!(has(&broken, "Accepted", "True", "Accepted"), "{broken:?}");
    assert!(
        has(&broken, "ResolvedRefs", "False", "BackendNotFound"),
        "{broken:?}"
    );
    let gw = &status["gatewayAPI"]["gateways"][0]["status"];
    assert_eq!(gw["conditions"][0]["type"], "Accepted", "{gw}");
    assert_eq!(gw["conditions"][0]["status"], "True", "{gw}");
    assert_eq!(gw["listeners"][0]["attachedRoutes"], 2, "{gw}");

    // HTTP/1: what the head decides.
    let host = "shop.example.com";
    assert_eq!(service(&h.get(host, "/").await), "v1");
    assert_eq!(service(&h.get(host, "/v2/x").await), "v2");
    assert_eq!(service(&h.get(host, "/v2").await), "v2");
    assert_eq!(
        service(&h.get(host, "/v2x").await),
        "v1",
        "prefixes match whole segments"
    );
    let mut split = std::collections::BTreeMap::new();
    for _ in 0..10 {
        *split
            .entry(service(&h.get(host, "/split").await))
            .or_insert(0) += 1;
    }
    assert_eq!(split.get("v1"), Some(&5), "{split:?}");
    assert_eq!(split.get("v2"), Some(&5), "{split:?}");
    assert_eq!(h.get(host, "/old/page").await.status, 301);
    assert_eq!(h.get("broken.example.com", "/").await.status, 500);
    assert_eq!(h.get("elsewhere.example.org", "/").await.status, 404);

    // HTTP/2 (cleartext): method, headers, query and filters.
    let h2 = |target: &str| Request::get(host, target).proto(Proto::Http2);
    assert_eq!(
        service(&h.send(&h2("/").header("version", "two")).await),
        "v2"
    );
    assert_eq!(
        service(&h.send(&h2("/").header("version", "one")).await),
        "v1"
    );
    let mut post = h2("/post");
    post.method = "POST".into();
    assert_eq!(service(&h.send(&post).await), "v2");
    assert_eq!(service(&h.send(&h2("/post")).await), "v1", "GET /post");
    let redirect = h.send(&h2("/old/page?q=1")).await;
    assert_eq!(redirect.status, 301);
    assert_eq!(
        header(&redirect, "location"),
        "http://shop.example.com/new/page?q=1"
    );
    let filtered = h.send(&h2("/hdr/x").header("X-Drop", "1")).await;
    assert_eq!(header(&filtered, "x-resp"), "added");
    let echoed = filtered.json().expect("echo JSON");
    assert_eq!(echoed["path"], "/rewritten/x", "{echoed}");
    assert_eq!(echoed["headers"]["X-Set"], json!(["yes"]), "{echoed}");
    assert!(echoed["headers"].get("X-Drop").is_none(), "{echoed}");

    // Hot reload: /v2 moves to /beta; the old path falls to v1.
    let mut objects = vec![gateway(), shop_route("/beta")];
    objects.extend(echo_service(NS, "v1", &[&v1]));
    objects.extend(echo_service(NS, "v2", &[&v2]));
    h.apply("gw.yaml", &docs(&objects)).await;
    assert_eq!(service(&h.get(host, "/beta/x").await), "v2");
    assert_eq!(service(&h.get(host, "/v2/x").await), "v1");
    let status = h.status().await;
    assert!(
        route_conditions(&status, "broken").is_empty(),
        "the deleted route left /status"
    );
}
