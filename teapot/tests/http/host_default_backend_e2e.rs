//! End-to-end test of ingress-nginx's default location of a host through
//! the real `teapot proxy` binary, over HTTP/1.1 and HTTP/2: a request for
//! an Ingress's rule host that matches none of its paths goes to that
//! Ingress's `spec.defaultBackend` (ingress-nginx's e2e
//! `defaultbackend/with_hosts.go`), even where an older Ingress holds the
//! fleet's default backend, which still answers every other host.
//!
//! Run with `cargo test -p teapot --test http host_default_backend_e2e::`.

use crate::common;

use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request};

const NS: &str = "ops";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hosts_unmatched_paths_go_to_its_ingress_default_backend() {
    let web = echo(NS, "web", "web-0").await;
    let api = echo(NS, "api", "api-0").await;
    let global = echo(NS, "global", "global-0").await;
    let mut objects = echo_service(NS, "web", &[&web]);
    objects.extend(echo_service(NS, "api", &[&api]));
    objects.extend(echo_service(NS, "global", &[&global]));
    let default = |service: &str| json!({"service": {"name": service, "port": {"number": 80}}});
    // The older Ingress holds the fleet's default backend.
    let mut fleet = ingress(NS, "a-fleet", json!({"defaultBackend": default("global")}));
    fleet["metadata"]["creationTimestamp"] = json!("2026-01-01T00:00:00Z");
    let mut host = ingress(
        NS,
        "b-host",
        json!({
            "defaultBackend": default("web"),
            "rules": [
                rule(Some("c.test"), vec![path("Prefix", "/api", backend("api", Port::Number(80)))]),
                // A rule host without paths (with_hosts.go's Ingress).
                json!({"host": "e.test"}),
            ],
        }),
    );
    host["metadata"]["creationTimestamp"] = json!("2026-01-01T00:01:00Z");
    objects.push(fleet);
    objects.push(host);
    let h = Harness::start(&[("web.yaml", docs(&objects))]).await;
    h.wait_status("the Ingresses reported", |s| {
        ingress_report(s, NS, "b-host").is_some()
    })
    .await;
    for proto in [Proto::Http1, Proto::Http2] {
        for (host, target, service) in [
            ("c.test", "/api/x", "api"),
            ("c.test", "/other", "web"),
            ("C.test", "/", "web"),
            ("e.test", "/", "web"),
            ("d.test", "/x", "global"),
        ] {
            let resp = over(&h, proto, Request::get(host, target)).await;
            assert_eq!(
                resp.status,
                200,
                "{proto:?} {host}{target}: {}",
                resp.text()
            );
            let seen = resp.json().unwrap();
            assert_eq!(seen["service"], service, "{proto:?} {host}{target}");
            assert_eq!(seen["path"], target, "{proto:?} {host}{target}");
        }
    }
}
