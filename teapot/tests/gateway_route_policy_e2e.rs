//! RouteTrafficPolicy end to end (docs/gateway-api.md, "RouteTrafficPolicy"):
//! `teapot proxy --manifests` with HTTPRoutes a RouteTrafficPolicy targets,
//! whole or one rule by `sectionName`, in front of an echo backend, over
//! HTTP/1.1 and cleartext HTTP/2 (the one request pipeline an Ingress's
//! ingress-nginx annotations are answered by).
//!
//! Run with `cargo test -p teapot --test gateway_route_policy_e2e`.

mod common;

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
    let status = h
        .wait_status("the policies reported", |s| {
            s["routeTrafficPolicies"]
                .as_array()
                .is_some_and(|p| p.len() == 3)
        })
        .await;
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
