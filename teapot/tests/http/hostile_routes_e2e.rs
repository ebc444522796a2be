//! Hostile routes end to end (docs/capacity.md, "Hostile routes"): what a
//! tenant's Gateway API routes can cost every replica is bounded. Each test
//! applies an attack as a security review found it and checks the proxy
//! refuses or bounds it while another route keeps serving:
//!
//! - a pattern whose automaton does not fit is refused on its field, and a
//!   long path against hundreds of patterns that do fit is answered 400 at
//!   once, instead of holding the serving thread;
//! - a tenant's patterns are counted against `maxRegexes` and
//!   `maxRegexBytes`: the older route keeps serving, the younger is
//!   refused with the limit named;
//! - exact hosts under wildcard routes do not copy the wildcards' rules:
//!   the table's size (`/status` `tables`) is what the routes wrote.

use crate::common;

use common::*;
use serde_json::{Value, json};

fn gateway(ns: &str, hostname: Option<&str>) -> Value {
    let mut listener = json!({ "name": "http", "protocol": "HTTP", "port": 80 });
    if let Some(h) = hostname {
        listener["hostname"] = json!(h);
    }
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "Gateway",
        "metadata": { "name": "gw", "namespace": ns },
        "spec": { "gatewayClassName": "teapot", "listeners": [listener] },
    })
}

fn route(ns: &str, name: &str, created: &str, hostnames: &[&str], rules: Value) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1",
        "kind": "HTTPRoute",
        "metadata": { "name": name, "namespace": ns, "creationTimestamp": created },
        "spec": {
            "parentRefs": [{ "name": "gw" }],
            "hostnames": hostnames,
            "rules": rules,
        },
    })
}

/// `rules` rules of `per_rule` RegularExpression path matches each, the
/// patterns made by `pattern(i)`.
fn regex_rules(rules: usize, per_rule: usize, pattern: impl Fn(usize) -> String) -> Value {
    Value::Array(
        (0..rules)
            .map(|r| {
                let matches: Vec<Value> = (0..per_rule)
                    .map(|m| json!({ "path": { "type": "RegularExpression", "value": pattern(r * per_rule + m) } }))
                    .collect();
                json!({ "matches": matches, "backendRefs": [{ "name": "web", "port": 80 }] })
            })
            .collect(),
    )
}

fn route_conditions(status: &Value, name: &str) -> String {
    status["gatewayAPI"]["httpRoutes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["name"] == name)
        .map(|r| r["status"]["parents"].to_string())
        .collect()
}

/// `/(?:[\s\S]*a[\s\S]{60})` defeats a lazy DFA; 480 of them
/// (8 rules of 60) and one 7 KiB path held a serving thread for seconds.
/// Such a pattern is refused on its field now; 480 patterns that compile
/// meet a per-request budget, so the long path is answered 400 at once and
/// the quiet route on the same proxy is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_patterns_cannot_stall_a_serving_thread() {
    let ns = "hostile-regex";
    let web = echo(ns, "web", "web-0").await;
    let stall = regex_rules(8, 60, |_| r"/(?:[\s\S]*a[\s\S]{60})".to_string());
    let many = regex_rules(8, 60, |i| format!("/x{i}[a-z]*b"));
    let mut objects = vec![
        gateway(ns, None),
        route(
            ns,
            "stall",
            "2026-01-01T00:00:00Z",
            &["stall.example"],
            stall,
        ),
        route(ns, "many", "2026-01-01T00:00:00Z", &["many.example"], many),
        route(
            ns,
            "quiet",
            "2026-01-01T00:00:00Z",
            &["quiet.example"],
            json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
        ),
    ];
    objects.extend(echo_service(ns, "web", &[&web]));
    let h = Harness::start(&[("all.yaml", docs(&objects))]).await;

    let status = h
        .wait_status("the stall route's status", |s| {
            route_conditions(s, "stall").contains("automaton")
        })
        .await;
    let conditions = route_conditions(&status, "stall");
    assert!(
        conditions.contains("needs a matching automaton larger than 256 KiB"),
        "{conditions}"
    );

    let long = format!("/{}", "a".repeat(7 * 1024));
    // The refused pattern serves nothing: the host has no rule left.
    assert_proxy_answer(&h.get("stall.example", &long).await, 404, "stall route");
    // 480 patterns x 7 KiB would be 3.4 MB of automaton steps: over the
    // request's budget, refused before the walk ends.
    let resp = h.get("many.example", &long).await;
    assert_proxy_answer(&resp, 400, "long path against 480 patterns");
    assert!(resp.text().contains("too costly"), "{}", resp.text());
    // A path that matches the last pattern is served.
    assert_eq!(
        h.echo_json("many.example", "/x479zzb").await["service"],
        "web"
    );
    assert_eq!(h.echo_json("quiet.example", "/").await["service"], "web");
}

const TENANT: &str = r#"
apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  allowedDomains: [acme.example.com]
  nodeCIDRs: [192.0.2.0/24]
"#;

/// A proxy serving Tenant `acme` (nodes outside this machine: its routes
/// have no endpoint), its Gateway for `*.acme.example.com`, Service `web`
/// and the routes of `routes`.
async fn tenant_acme(routes: (&str, String)) -> Harness {
    let ns = "tenant-acme";
    let base = vec![
        gateway(ns, Some("*.acme.example.com")),
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": { "name": "web", "namespace": ns },
            "spec": { "ports": [{ "port": 80 }] },
        }),
    ];
    Harness::start_with_args(
        &[
            ("tenant.yaml", TENANT.to_string()),
            ("base.yaml", docs(&base)),
            routes,
        ],
        &["--domain", "example.net"],
    )
    .await
}

/// The message of the problem that refuses tenant acme's route `name`.
fn refusal(status: &Value, name: &str) -> String {
    status["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["object"] == format!("HttpRoute tenant-acme/{name}"))
        .and_then(|p| p["message"].as_str())
        .unwrap_or_else(|| panic!("the {name} route is refused: {status}"))
        .to_string()
}

/// Nothing counted a tenant's patterns, so two routes of 500
/// took a replica from 33 to 361 MB. Now the tenant's routes together stay
/// within `maxRegexes` (256 by default): the older route is served, the
/// younger refused with the limit named, and what was served stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_patterns_are_held_to_its_budget() {
    let ns = "tenant-acme";
    let older = route(
        ns,
        "older",
        "2026-01-01T00:00:00Z",
        &["a.acme.example.com"],
        regex_rules(4, 50, |i| format!("/older{i}/[0-9]+")),
    );
    let younger = route(
        ns,
        "younger",
        "2026-02-01T00:00:00Z",
        &["b.acme.example.com"],
        regex_rules(4, 50, |i| format!("/younger{i}/[0-9]+")),
    );
    let h = tenant_acme(("older.yaml", docs(&[older]))).await;
    // The older route alone fits: 200 patterns, routed (503: the tenant
    // has no endpoint, and a host without a route would be 404).
    assert_proxy_answer(
        &h.get("a.acme.example.com", "/older7/42").await,
        503,
        "older route",
    );

    h.apply("younger.yaml", &docs(&[younger])).await;
    let status = h.status().await;
    let message = refusal(&status, "younger");
    assert!(message.contains("maxRegexes"), "{message}");
    assert_proxy_answer(
        &h.get("b.acme.example.com", "/younger7/42").await,
        404,
        "younger route",
    );
    assert_proxy_answer(
        &h.get("a.acme.example.com", "/older7/42").await,
        503,
        "older route still served",
    );
}

/// The reload's share of the admission stall: one route of 3,072 patterns
/// whose automata explode (`/\w{4}...`, inside the CRD maxima) cost a
/// manifests reload 4-5 s, every pattern compiled before the count was
/// checked (here 1,024: 16 rules of 64 path matches). Now the count refuses it before any is compiled, a route under
/// the count stops after two such patterns, and the tenant's other route
/// is served throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_route_costs_the_reload_no_compile() {
    let ns = "tenant-acme";
    let explode = |tag: &'static str| move |i: usize| format!(r"/\w{{4}}{tag}N{i}");
    let over = route(
        ns,
        "over",
        "2026-02-01T00:00:00Z",
        &["over.acme.example.com"],
        regex_rules(16, 64, explode("o")),
    );
    let under = route(
        ns,
        "under",
        "2026-02-01T00:00:00Z",
        &["under.acme.example.com"],
        regex_rules(4, 50, explode("u")),
    );
    let quiet = route(
        ns,
        "quiet",
        "2026-01-01T00:00:00Z",
        &["quiet.acme.example.com"],
        json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
    );
    let h = tenant_acme(("routes.yaml", docs(&[quiet, over, under]))).await;
    let status = h.status().await;
    let over = refusal(&status, "over");
    assert!(
        over.contains("none of this object's 1024 was compiled"),
        "{over}"
    );
    let under = refusal(&status, "under");
    assert!(under.contains("were not checked"), "{under}");
    assert_proxy_answer(
        &h.get("quiet.acme.example.com", "/").await,
        503,
        "the tenant's other route",
    );
    assert_proxy_answer(
        &h.get("over.acme.example.com", "/x").await,
        404,
        "the refused route",
    );
}

/// Each exact host below a wildcard route got its own copy of
/// the wildcard's rules: 10 wildcard routes of 500 matches and 1,000 exact
/// hosts below them made 5 million entries. The table holds each route's
/// rules once, and each exact host points at the wildcards covering it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exact_hosts_under_wildcards_cost_what_was_written() {
    let ns = "hostile-wildcards";
    let web = echo(ns, "web", "web-0").await;
    let mut objects = vec![gateway(ns, None)];
    let mut suffix = String::from("example");
    for w in 0..10 {
        suffix = format!("l{w}.{suffix}");
        let rules: Vec<Value> = (0..5)
            .map(|r| {
                let matches: Vec<Value> = (0..100)
                    .map(|m| json!({ "path": { "type": "Exact", "value": format!("/w{w}/{}", r * 100 + m) } }))
                    .collect();
                json!({ "matches": matches, "backendRefs": [{ "name": "web", "port": 80 }] })
            })
            .collect();
        objects.push(route(
            ns,
            &format!("wild{w}"),
            "2026-01-01T00:00:00Z",
            &[&format!("*.{suffix}")],
            Value::Array(rules),
        ));
    }
    for chunk in 0..10 {
        let hosts: Vec<String> = (0..100)
            .map(|h| format!("h{}.{suffix}", chunk * 100 + h))
            .collect();
        let hosts: Vec<&str> = hosts.iter().map(String::as_str).collect();
        objects.push(route(
            ns,
            &format!("exact{chunk}"),
            "2026-01-01T00:00:00Z",
            &hosts,
            json!([{ "matches": [{ "path": { "type": "Exact", "value": "/own" } }], "backendRefs": [{ "name": "web", "port": 80 }] }]),
        ));
    }
    objects.extend(echo_service(ns, "web", &[&web]));
    let h = Harness::start(&[("all.yaml", docs(&objects))]).await;
    let status = h
        .wait_status("the table", |s| {
            s["tables"]["gatewayHosts"].as_u64() == Some(1010)
        })
        .await;
    let tables = &status["tables"];
    // 10 x 500 wildcard rules and 1,000 exact hosts of one rule each.
    assert_eq!(tables["gatewayEntries"], 10 * 500 + 1000, "{tables}");
    assert!(
        tables["gatewayLinks"].as_u64().unwrap() <= 1000 * 11 + 10 * 10,
        "{tables}"
    );
    // An exact host sees its own rule and every covering wildcard's.
    let host = format!("h999.{suffix}");
    assert_eq!(h.echo_json(&host, "/own").await["service"], "web");
    assert_eq!(h.echo_json(&host, "/w0/499").await["service"], "web");
    assert_eq!(h.echo_json(&host, "/w9/0").await["service"], "web");
    assert_proxy_answer(&h.get(&host, "/w10/0").await, 404, "no such rule");
}
