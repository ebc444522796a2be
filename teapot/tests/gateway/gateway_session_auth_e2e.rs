//! HTTPRoute `sessionPersistence` and the ExternalAuth filter end to end
//! (docs/gateway-api.md): `teapot proxy --manifests --h2c` with an
//! HTTPRoute whose rule pins clients by cookie across two weighted
//! backendRefs, and one whose rule asks an authentication service (a
//! small HTTP server here) before forwarding, over HTTP/1.1 and cleartext
//! HTTP/2.
//!
//! Run with `cargo test -p teapot --test gateway gateway_session_auth_e2e::`.

use crate::common;

use std::collections::BTreeSet;
use std::sync::atomic::Ordering;

use common::auth_service::{self, AuthService};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};

const NS: &str = "gw-session-auth";
const SHOP: &str = "shop.example.com";
const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

fn listeners() -> Value {
    json!([{ "name": "http", "protocol": "HTTP", "port": 80 }])
}

/// HTTPRoute `shop` for [`SHOP`] on Gateway `gw`.
fn shop_route(rules: Value) -> Value {
    http_route(NS, "shop", json!({ "name": "gw" }), &[SHOP], rules)
}

/// Waits until the HTTPRoute is accepted.
async fn route_accepted(h: &Harness) {
    h.wait_status("the route accepted", |s| {
        s["gatewayAPI"]["httpRoutes"].as_array().is_some_and(|r| {
            r.iter()
                .any(|r| r["status"]["parents"][0]["conditions"][0]["status"] == "True")
        })
    })
    .await;
}

/// The `pod` of the echo that answered.
fn pod(resp: &teapot_testkit::client::Response) -> String {
    let json = resp
        .json()
        .unwrap_or_else(|e| panic!("not echo JSON: {e}: {}", resp.text()));
    json["pod"].as_str().expect("pod").to_string()
}

/// The `name=value` the answer's Set-Cookie sets.
fn cookie_set(resp: &teapot_testkit::client::Response) -> String {
    let set = header(resp, "set-cookie");
    set.split(';').next().unwrap().to_string()
}

/// A client without the cookie meets both backendRefs (by weight) and is
/// given a cookie; with it, every request goes to the backend (and
/// endpoint) the cookie names, on both HTTP versions. When that backend's
/// endpoint leaves, the client moves to the other one with a new cookie.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cookie_keeps_a_client_on_one_backend_across_weighted_backend_refs() {
    let blue = echo(NS, "blue", "blue-0").await;
    let green = echo(NS, "green", "green-0").await;
    let route = shop_route(json!([{
        "matches": [{ "path": { "type": "PathPrefix", "value": "/" } }],
        "sessionPersistence": {
            "type": "Cookie",
            "absoluteTimeout": "1h",
            "cookie": { "name": "shop-pin", "lifetimeType": "Permanent" },
        },
        "backendRefs": [
            { "name": "blue", "port": 80, "weight": 1 },
            { "name": "green", "port": 80, "weight": 1 },
        ],
    }]));
    let mut objects = vec![gateway_gw(NS, listeners()), route];
    objects.extend(echo_service(NS, "blue", &[&blue]));
    objects.extend(echo_service(NS, "green", &[&green]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    route_accepted(&h).await;

    let mut pinned = None;
    for proto in BOTH {
        // No cookie: both backends, each answer naming its endpoint.
        let mut seen = BTreeSet::new();
        for _ in 0..4 {
            let resp = h.send(&Request::get(SHOP, "/").proto(proto)).await;
            assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
            let set = header(&resp, "set-cookie");
            assert!(set.starts_with("shop-pin="), "{proto:?}: {set}");
            assert!(set.contains("; Path=/; Max-Age=3600"), "{proto:?}: {set}");
            let who = pod(&resp);
            if who == "blue-0" {
                pinned = Some(cookie_set(&resp));
            }
            seen.insert(who);
        }
        assert_eq!(seen.len(), 2, "{proto:?}: without the cookie, {seen:?}");
        // With blue's cookie: blue every time, no new cookie.
        let cookie = pinned.clone().expect("a cookie naming blue");
        for _ in 0..10 {
            let req = Request::get(SHOP, "/")
                .header("cookie", &format!("other=1; {cookie}"))
                .proto(proto);
            let resp = h.send(&req).await;
            assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
            assert_eq!(pod(&resp), "blue-0", "{proto:?}: pinned");
            assert!(resp.headers.get("set-cookie").is_none(), "{proto:?}");
        }
    }
    // HTTP/2 clients (browsers) send one cookie per field: the pin is
    // found in whichever field holds it.
    let cookie = pinned.clone().unwrap();
    for _ in 0..4 {
        let req = Request::get(SHOP, "/")
            .header("cookie", "other=1")
            .header("cookie", &cookie)
            .proto(Proto::Http2);
        let resp = h.send(&req).await;
        assert_eq!(pod(&resp), "blue-0", "cookie fields: {}", resp.text());
        assert!(resp.headers.get("set-cookie").is_none(), "cookie fields");
    }
    let blue_before = blue.requests();

    // Blue's endpoint leaves: the client is moved to green, and told.
    let without_blue: Vec<Value> = objects
        .iter()
        .filter(|o| o["metadata"]["name"] != "blue-0")
        .cloned()
        .collect();
    h.apply("gw.yaml", &docs(&without_blue)).await;
    let cookie = pinned.unwrap();
    let mut moved = None;
    for proto in BOTH {
        for _ in 0..4 {
            let req = Request::get(SHOP, "/")
                .header("cookie", &cookie)
                .proto(proto);
            let resp = h.send(&req).await;
            assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
            assert_eq!(pod(&resp), "green-0", "{proto:?}: moved");
            let set = cookie_set(&resp);
            assert_ne!(set, cookie, "{proto:?}: a cookie naming green");
            moved = Some(set);
        }
    }
    // The new cookie keeps the client on green.
    for proto in BOTH {
        let req = Request::get(SHOP, "/")
            .header("cookie", moved.as_deref().unwrap())
            .proto(proto);
        let resp = h.send(&req).await;
        assert_eq!(pod(&resp), "green-0", "{proto:?}");
        assert!(resp.headers.get("set-cookie").is_none(), "{proto:?}");
    }
    assert_eq!(blue.requests(), blue_before, "nothing went to blue");
}

/// What the authentication service answers, by the path teapot asks for
/// (the filter's `/check` before the client's path); `/check/slow` waits.
const ANSWERS: &[auth_service::Answer] = &[
    ("/check/allow", 200, &[("x-user", "ann"), ("x-extra", "no")]),
    (
        "/check/deny",
        401,
        &[("www-authenticate", "Bearer realm=\"shop\"")],
    ),
];

/// The ExternalAuth filter (protocol HTTP): a 200 lets the request through
/// with the listed field of the answer (replacing the client's own), the
/// sub-request carrying the client's method, its path under `http.path`,
/// `Authorization` and the listed request fields only; a 401 reaches the
/// client with the service's `WWW-Authenticate` and nothing is forwarded;
/// a service that does not answer within the operator's bound fails
/// closed (500).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_auth_allows_denies_and_fails_closed_within_the_bound() {
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ANSWERS, "/check/slow").await;
    let web = echo(NS, "web", "web-0").await;
    let route = shop_route(json!([{
        "filters": [{
            "type": "ExternalAuth",
            "externalAuth": {
                "protocol": "HTTP",
                "backendRef": { "name": "auth", "port": 80 },
                "http": {
                    "path": "/check",
                    "allowedHeaders": ["X-Tenant"],
                    "allowedResponseHeaders": ["X-User"],
                },
            },
        }],
        "backendRefs": [{ "name": "web", "port": 80 }],
    }]));
    let mut objects = vec![gateway_gw(NS, listeners()), route];
    objects.extend(echo_service(NS, "web", &[&web]));
    objects.extend(loopback_service(NS, "auth", auth.addr.port()));
    // The bound: a sub-request without an answer's head in 300 ms fails.
    let h = Harness::start_with_args(
        &[("gw.yaml", docs(&objects))],
        &["--h2c", "--auth-timeout-ms", "300"],
    )
    .await;
    route_accepted(&h).await;

    let mut forwarded = 0;
    for proto in BOTH {
        let req = Request::get(SHOP, "/allow?q=1")
            .header("authorization", "Bearer t")
            .header("x-tenant", "acme")
            .header("x-secret", "s3cret")
            .header("x-user", "mallory")
            .proto(proto);
        let resp = h.send(&req).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        forwarded += 1;
        let json = resp.json().unwrap();
        assert_eq!(json["headers"]["X-User"], json!(["ann"]), "{proto:?}");
        assert_eq!(json["headers"]["X-Extra"], json!(null), "{proto:?}");
        let sub = auth.last();
        assert_eq!(sub.method, "GET", "{proto:?}");
        assert_eq!(sub.uri.to_string(), "/check/allow?q=1", "{proto:?}");
        assert_eq!(sub.headers["host"], SHOP, "{proto:?}");
        assert_eq!(sub.headers["authorization"], "Bearer t", "{proto:?}");
        assert_eq!(sub.headers["x-tenant"], "acme", "{proto:?}");
        assert!(sub.headers.get("x-secret").is_none(), "{proto:?}");
        assert!(sub.headers.get("x-user").is_none(), "{proto:?}");

        let resp = h.send(&Request::get(SHOP, "/deny").proto(proto)).await;
        assert_proxy_answer(&resp, 401, &format!("{proto:?} /deny"));
        assert_eq!(header(&resp, "www-authenticate"), "Bearer realm=\"shop\"");

        let resp = h.send(&Request::get(SHOP, "/slow").proto(proto)).await;
        assert_proxy_answer(&resp, 500, &format!("{proto:?} /slow"));
    }
    assert_eq!(auth.held.load(Ordering::SeqCst), 2, "both slow ones asked");
    auth.release.send_replace(true);
    assert_eq!(web.requests(), forwarded, "no refused request reached web");
    let metrics = h.metrics().await;
    let count = |outcome: &str| {
        let name =
            format!("teapot_auth_requests_total{{outcome=\"{outcome}\",tenant=\"_operator\"}}");
        metric(&metrics, &name)
    };
    assert_eq!(count("allowed"), Some(2.0), "{metrics}");
    assert_eq!(count("unauthorized"), Some(2.0), "{metrics}");
    assert_eq!(count("timeout"), Some(2.0), "{metrics}");
}
