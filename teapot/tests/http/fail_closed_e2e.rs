//! End-to-end tests of what teapot refuses to pass on or to serve half
//! through the real `teapot proxy` binary and echo backends:
//!
//! - a client's `_` spellings of teapot's own fields (`X_Forwarded_For`,
//!   `X_Real_IP`, ...), which backends that fold `_` into `-` read as
//!   teapot's, never reach a backend or an authentication service, over
//!   HTTP/1.1 and HTTP/2;
//! - an Ingress asking for an access restriction teapot does not apply
//!   (basic auth, client certificates, snippets, an allow-list it cannot
//!   read) is not routed at all: teapot's 404, never the backend; its
//!   status names the annotation; a tenant's is refused at admission.
//!
//! Run with `cargo test -p teapot --test http fail_closed_e2e::`.

use crate::common;

use common::auth_service::{Answer, AuthService};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

/// The echo backend's fields (Go's canonical names: `X_real_ip` for
/// `x_real_ip`) whose name holds `_`.
fn underscored(seen: &Value) -> Vec<String> {
    let headers = seen["headers"].as_object().expect("headers");
    headers
        .keys()
        .filter(|k| k.contains('_'))
        .cloned()
        .collect()
}

const ALLOW: &[Answer] = &[("/allow", 200, &[("x-user", "ann")])];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn underscore_lookalikes_of_teapots_fields_never_reach_a_backend() {
    const NS: &str = "ops";
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ALLOW, "/hold").await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.extend(loopback_service(NS, "auth", auth.addr.port()));
    objects.push(simple_ingress(NS, "plain.test", "plain.test", "web"));
    objects.push(annotated(
        NS,
        "authed.test",
        "web",
        &[
            ("auth-url", "http://auth.ops.svc.cluster.local/allow"),
            ("auth-response-headers", "X-User"),
        ],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;

    let forged = |host: &str| {
        Request::get(host, "/")
            .header("X_Forwarded_For", "6.6.6.6")
            .header("x-forwarded_proto", "https")
            .header("X_Real_IP", "6.6.6.6")
            .header("X_Forwarded_User", "admin")
            .header("X_Request_Id", "forged")
            .header("X_Original_URL", "http://admin.test/")
            .header("X_User", "admin")
            .header("X_App_Token", "t-1")
    };
    for proto in BOTH {
        for host in ["plain.test", "authed.test"] {
            let resp = over(&h, proto, forged(host)).await;
            assert_eq!(resp.status, 200, "{proto:?} {host}: {}", resp.text());
            let seen = resp.json().unwrap();
            let headers = &seen["headers"];
            assert_eq!(
                headers["X-Forwarded-For"],
                json!(["127.0.0.1"]),
                "{proto:?} {host}"
            );
            assert_eq!(
                headers["X-Real-Ip"],
                json!(["127.0.0.1"]),
                "{proto:?} {host}"
            );
            // Only the name that shadows nothing of teapot's goes through
            // (X_User shadows the authentication service's X-User).
            let expected: &[&str] = if host == "authed.test" {
                &["X_app_token"]
            } else {
                &["X_app_token", "X_user"]
            };
            assert_eq!(underscored(&seen), expected, "{proto:?} {host}: {seen:#}");
            if host == "authed.test" {
                assert_eq!(headers["X-User"], json!(["ann"]), "{proto:?}");
                // The authentication service gets no look-alike either.
                let sub = auth.last();
                let names: Vec<&str> = sub
                    .headers
                    .keys()
                    .map(|n| n.as_str())
                    .filter(|n| n.contains('_'))
                    .collect();
                assert_eq!(names, ["x_user", "x_app_token"], "{proto:?}");
            }
        }
    }
}

/// One restricting annotation per Ingress (names after the prefix).
const RESTRICTIONS: &[(&str, &[(&str, &str)])] = &[
    (
        "basic.test",
        // Basic authentication's Secret without auth-type: ingress-nginx
        // serves it open.
        &[("auth-secret", "users")],
    ),
    // Client certificates teapot cannot apply as asked: asked for without
    // their CA Secret, a CA Secret that is not there, a value it cannot
    // read, and an auth-tls-* name it does not know.
    ("mtls.test", &[("auth-tls-verify-client", "on")]),
    ("tls-secret.test", &[("auth-tls-secret", "ops/ca")]),
    (
        "tls-verify.test",
        &[
            ("auth-tls-verify-client", "maybe"),
            ("auth-tls-secret", "ca"),
        ],
    ),
    ("tls-unknown.test", &[("auth-tls-ocsp-responder", "on")]),
    ("snippet.test", &[("configuration-snippet", "deny all;")]),
    (
        "server-snippet.test",
        &[("server-snippet", "allow 10.0.0.0/8;")],
    ),
    // Served annotations with a value teapot cannot read.
    ("allow.test", &[("whitelist-source-range", "10.0.0.0/33")]),
    ("deny.test", &[("denylist-source-range", "everyone")]),
    ("rate.test", &[("limit-rps", "0")]),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_with_an_unserved_restriction_is_not_routed() {
    const NS: &str = "admin";
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    for (host, annotations) in RESTRICTIONS {
        objects.push(annotated(NS, host, "web", annotations));
    }
    // Unserved, restricting nothing: served (and reported).
    objects.push(annotated(
        NS,
        "tuned.test",
        "web",
        &[("proxy-buffering", "on")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let status = h
        .wait_status("every report", |s| {
            RESTRICTIONS
                .iter()
                .all(|(host, _)| ingress_report(s, NS, host).is_some())
        })
        .await;
    for (host, annotations) in RESTRICTIONS {
        let report = ingress_report(&status, NS, host).unwrap();
        let accepted = condition(report, "Accepted").expect("Accepted");
        assert_eq!(accepted["status"], "False", "{host}: {report:#}");
        assert_eq!(accepted["reason"], "UnservedRestriction", "{host}");
        let message = accepted["message"].as_str().unwrap();
        let key = annotations[0].0;
        assert!(
            message.contains(&format!(
                "metadata.annotations[\"nginx.ingress.kubernetes.io/{key}\"]"
            )),
            "{host}: {message}"
        );
        for proto in BOTH {
            let resp = over(&h, proto, Request::get(host, "/admin")).await;
            assert_proxy_answer(&resp, 404, &format!("{proto:?} {host}"));
        }
    }
    assert_eq!(backend.requests(), 0, "nothing reached the backend");
    let resp = over(&h, Proto::Http1, Request::get("tuned.test", "/")).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
}

/// A tenant's Ingress with any of them is refused at admission (`teapot
/// validate`, the webhook's rules offline), naming the annotation.
#[test]
fn a_tenants_unserved_restriction_is_refused_at_admission() {
    let state = tempfile::tempdir().unwrap();
    std::fs::write(state.path().join("tenant.yaml"), docs(&[tenant("acme")])).unwrap();
    let input = tempfile::tempdir().unwrap();
    for (host, annotations) in RESTRICTIONS {
        let name = host.replace('.', "-");
        let mut ingress = annotated("tenant-acme", &name, "web", annotations);
        ingress["spec"]["rules"][0]["host"] = json!(format!("{name}.acme.lb.example.net"));
        let file = input.path().join(format!("{name}.yaml"));
        std::fs::write(&file, docs(&[ingress])).unwrap();
        let out = std::process::Command::new(teapot_bin())
            .args(["validate", "-f"])
            .arg(&file)
            .args(["--tenant", "acme", "--manifests"])
            .arg(state.path())
            .args(["--domain", "example.net"])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "{host} admitted: {stdout}");
        let key = annotations[0].0;
        assert!(
            stdout.contains(&format!(
                "metadata.annotations[\"nginx.ingress.kubernetes.io/{key}\"]"
            )),
            "{host}: {stdout} {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
