//! RouteTrafficPolicy end to end (docs/gateway-api.md, "RouteTrafficPolicy"):
//! `teapot proxy --manifests` with HTTPRoutes a RouteTrafficPolicy targets,
//! whole or one rule by `sectionName`, in front of an echo backend, over
//! HTTP/1.1 and cleartext HTTP/2 (the one request pipeline an Ingress's
//! ingress-nginx annotations are answered by).
//!
//! Run with `cargo test -p teapot --test gateway gateway_route_policy_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};

const NS: &str = "gw-route-policy";
const HOST: &str = "app.example.com";
const WIDE: &str = "wide.example.com";

fn policy(name: &str, route: &str, section: Option<&str>, spec: Value) -> Value {
    let mut target =
        json!({ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route });
    if let Some(s) = section {
        target["sectionName"] = json!(s);
    }
    let mut spec = spec;
    spec["targetRefs"] = json!([target]);
    json!({
        "apiVersion": "teapot.dev/v1alpha1",
        "kind": "RouteTrafficPolicy",
        "metadata": { "name": name, "namespace": NS },
        "spec": spec,
    })
}

fn rule(name: &str, prefix: &str) -> Value {
    json!({
        "name": name,
        "matches": [{ "path": { "type": "PathPrefix", "value": prefix } }],
        "backendRefs": [{ "name": "web", "port": 80 }],
    })
}

/// Gateway `gw` with an HTTP listener and HTTPRoute `app` for [`HOST`]
/// with `rules`.
fn gateway_and_route(rules: Value) -> Vec<Value> {
    vec![
        gateway_gw(
            NS,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(NS, "app", json!({ "name": "gw" }), &[HOST], rules),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_lists_and_rate_limits_apply_to_their_targets_only() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = gateway_and_route(json!([
        rule("admin", "/admin"),
        rule("limited", "/limited"),
        rule("open", "/open")
    ]));
    objects.push(http_route(
        NS,
        "wide",
        json!({ "name": "gw" }),
        &[WIDE],
        json!([rule("all", "/"), rule("exempt", "/exempt")]),
    ));
    // The test client is 127.0.0.1: an allow-list without it refuses it.
    objects.push(policy(
        "admin-only",
        "app",
        Some("admin"),
        json!({ "clientAddresses": { "allow": ["10.0.0.0/8"] } }),
    ));
    // One a minute, a burst of one more: two pass at once.
    objects.push(policy(
        "limited",
        "app",
        Some("limited"),
        json!({ "rateLimit": { "requestsPerMinute": 1, "burstMultiplier": 1 } }),
    ));
    // The whole route refuses the client; the rule with its own policy
    // has that one instead (the rule's own replaces the route-wide one).
    objects.push(policy(
        "wide-deny",
        "wide",
        None,
        json!({ "clientAddresses": { "deny": ["127.0.0.0/8"] } }),
    ));
    objects.push(policy(
        "wide-exempt",
        "wide",
        Some("exempt"),
        json!({ "inFlightPerClient": 100 }),
    ));
    objects.extend(echo_service(NS, "web", &[&backend]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h
        .wait_status("the policies accepted", |s| {
            s["routeTrafficPolicies"].as_array().is_some_and(|p| {
                p.len() == 4
                    && p.iter()
                        .all(|p| p["status"]["targets"][0]["conditions"][0]["status"] == "True")
            })
        })
        .await;
    let reasons: Vec<&Value> = status["routeTrafficPolicies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| &p["status"]["targets"][0]["conditions"][0]["reason"])
        .collect();
    assert!(reasons.iter().all(|r| *r == "Accepted"), "{reasons:?}");

    let mut forwarded = 0;
    for proto in [Proto::Http1, Proto::Http2] {
        let send = |host: &'static str, path: &'static str| {
            let h = &h;
            async move { h.send(&Request::get(host, path).proto(proto)).await }
        };
        // The allow-list covers its rule only.
        let denied = send(HOST, "/admin").await;
        assert_proxy_answer(&denied, 403, &format!("{proto:?} /admin"));
        for _ in 0..3 {
            let open = send(HOST, "/open").await;
            assert_eq!(open.status, 200, "{proto:?} /open: {}", open.text());
            forwarded += 1;
        }
        // The route-wide deny-list, and the rule whose own policy replaces it.
        let wide = send(WIDE, "/").await;
        assert_proxy_answer(&wide, 403, &format!("{proto:?} wide /"));
        let exempt = send(WIDE, "/exempt").await;
        assert_eq!(exempt.status, 200, "{proto:?} /exempt: {}", exempt.text());
        forwarded += 1;
        // The client's counter is one whatever the HTTP version.
        let first = send(HOST, "/limited").await;
        assert_eq!(first.status, 200, "{proto:?} /limited: {}", first.text());
        forwarded += 1;
    }
    for proto in [Proto::Http1, Proto::Http2] {
        let resp = h.send(&Request::get(HOST, "/limited").proto(proto)).await;
        assert_proxy_answer(&resp, 429, &format!("{proto:?} /limited"));
        let retry: u64 = header(&resp, "retry-after").parse().expect("seconds");
        assert!((1..=60).contains(&retry), "{proto:?}: Retry-After {retry}");
    }
    assert_eq!(
        backend.requests(),
        forwarded,
        "no refused request reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_missing_targets_are_reported() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = gateway_and_route(json!([rule("admin", "/admin")]));
    let mut older = policy(
        "a-older",
        "app",
        None,
        json!({ "clientAddresses": { "deny": ["127.0.0.0/8"] } }),
    );
    older["metadata"]["creationTimestamp"] = json!("2024-01-01T00:00:00Z");
    let mut newer = policy(
        "b-newer",
        "app",
        None,
        json!({ "clientAddresses": { "allow": ["127.0.0.0/8"] } }),
    );
    newer["metadata"]["creationTimestamp"] = json!("2024-02-01T00:00:00Z");
    objects.push(older);
    objects.push(newer);
    objects.push(policy(
        "c-no-rule",
        "app",
        Some("nope"),
        json!({ "inFlightPerClient": 1 }),
    ));
    objects.extend(echo_service(NS, "web", &[&backend]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &[]).await;
    let status = h.wait_route_traffic_policies(3).await;
    let reasons: Vec<(String, String)> = status["routeTrafficPolicies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let c = &p["status"]["targets"][0]["conditions"][0];
            (
                p["name"].as_str().unwrap().to_string(),
                format!(
                    "{} {}",
                    c["status"].as_str().unwrap(),
                    c["reason"].as_str().unwrap()
                ),
            )
        })
        .collect();
    assert_eq!(
        reasons,
        [
            ("a-older".to_string(), "True Accepted".to_string()),
            ("b-newer".to_string(), "False Conflicted".to_string()),
            ("c-no-rule".to_string(), "False TargetNotFound".to_string()),
        ]
    );
    // The older policy's deny-list is the one served.
    let resp = h.send(&Request::get(HOST, "/admin")).await;
    assert_proxy_answer(&resp, 403, "the older policy");
    assert_eq!(backend.requests(), 0);
}

/// `customErrors`: ingress-nginx's `custom-http-errors` with
/// `default-backend` on an HTTPRoute, over HTTP/1.1 and h2c. A listed
/// status from the backend is replaced by the error backend's page, asked
/// with `X-Code` and the route's name; a route without the policy passes
/// the backend's answer; a policy whose Service is missing says so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_errors_replace_listed_statuses_on_their_routes_only() {
    let web = echo(NS, "web", "web-0").await;
    let errors = echo(NS, "errors", "errors-0").await;
    let mut objects = gateway_and_route(json!([rule("all", "/")]));
    objects.push(http_route(
        NS,
        "wide",
        json!({ "name": "gw" }),
        &[WIDE],
        json!([rule("all", "/")]),
    ));
    objects.push(http_route(
        NS,
        "dead",
        json!({ "name": "gw" }),
        &["dead.example.com"],
        json!([rule("all", "/")]),
    ));
    let pages = |service: &str| json!({ "customErrors": { "codes": [503, 404], "backend": { "name": service, "port": 80 } } });
    objects.push(policy("pages", "app", None, pages("errors")));
    objects.push(policy("dead-pages", "dead", None, pages("nowhere")));
    objects.extend(echo_service(NS, "web", &[&web]));
    objects.extend(echo_service(NS, "errors", &[&errors]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h.wait_route_traffic_policies(2).await;
    let conditions = |name: &str| -> Vec<String> {
        let policies = status["routeTrafficPolicies"].as_array().unwrap();
        let p = policies.iter().find(|p| p["name"] == name).unwrap();
        p["status"]["targets"][0]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| format!("{} {} {}", c["type"], c["status"], c["reason"]))
            .collect()
    };
    assert_eq!(conditions("pages"), [r#""Accepted" "True" "Accepted""#]);
    assert_eq!(
        conditions("dead-pages"),
        [
            r#""Accepted" "True" "Accepted""#,
            r#""ResolvedRefs" "False" "BackendNotFound""#
        ]
    );

    for proto in [Proto::Http1, Proto::Http2] {
        let send = |host: &'static str, code: &'static str| {
            let h = &h;
            let req = Request::get(host, "/missing?x=1")
                .header("x-echo-status", code)
                .proto(proto);
            async move { h.send(&req).await }
        };
        for code in ["404", "503"] {
            let resp = send(HOST, code).await;
            assert_eq!(resp.status.to_string(), code, "{proto:?}: {}", resp.text());
            let seen = resp.json().expect("the error backend's echo");
            assert_eq!(seen["service"], "errors", "{proto:?}: {seen}");
            assert_eq!(seen["headers"]["X-Code"], json!([code]), "{proto:?}");
            assert_eq!(seen["headers"]["X-Original-Uri"], json!(["/missing?x=1"]));
            assert_eq!(seen["headers"]["X-Namespace"], json!([NS]));
            assert_eq!(seen["headers"]["X-Ingress-Name"], json!(["app"]));
        }
        // A status not listed passes untouched.
        let resp = send(HOST, "500").await;
        assert_eq!(resp.status, 500, "{proto:?}");
        assert_eq!(resp.json().expect("the backend's echo")["service"], "web");
        // The route without the policy: the backend's own 404.
        let resp = send(WIDE, "404").await;
        assert_eq!(resp.status, 404, "{proto:?}");
        assert_eq!(resp.json().expect("the backend's echo")["service"], "web");
        // The error backend is missing: the status, teapot's short page.
        let resp = send("dead.example.com", "404").await;
        assert_proxy_answer(&resp, 404, &format!("missing error backend, {proto:?}"));
    }
}
