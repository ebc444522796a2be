//! End-to-end tests of ingress-nginx's basic authentication (`auth-type:
//! basic`, `auth-secret`, `auth-secret-type`, `auth-realm`) through the
//! real `teapot proxy` binary and an echo backend, over HTTP/1.1 and
//! HTTP/2:
//!
//! - no credentials and a wrong password get 401 with
//!   `WWW-Authenticate: Basic realm="..."` (empty by default), and nothing
//!   reaches the backend;
//! - each served hash form (bcrypt, apr1, `{SHA}`, an `auth-map`) lets its
//!   user in, and the backend gets the client's `Authorization`;
//! - past a client's failures its guesses get 429 without a check, while
//!   a credential verified before still passes (the cache);
//! - a users' Secret past the bounds (bcrypt cost 31) is refused where it
//!   is read, and its Ingress answers 503 (ingress-nginx's denied
//!   location); `auth-secret` without `auth-type` (served open by
//!   ingress-nginx) keeps the Ingress unrouted: teapot's 404, never the
//!   backend;
//! - a RouteTrafficPolicy's `basicAuth` asks the same of an HTTPRoute rule,
//!   and one whose Secret is missing answers 503 and says why.
//!
//! Run with `cargo test -p teapot --test auth basic_auth_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request};
use teapot_testkit::echo::EchoServer;

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];
const NS: &str = "ops";

/// `Authorization: Basic` for `user:password`.
fn basic(user: &str, password: &str) -> String {
    use std::fmt::Write;
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let raw = format!("{user}:{password}").into_bytes();
    let mut out = String::from("Basic ");
    for chunk in raw.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                let _ = out.write_char(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn secret(name: &str, data: Value) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": name, "namespace": NS},
        "stringData": data,
    })
}

async fn setup() -> (Harness, EchoServer) {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    let bcrypt = bcrypt::hash("s3cret", 5).unwrap().replace("$2b$", "$2y$");
    let lines = format!(
        "# staff\nalice:{bcrypt}\n\
         bob:$apr1$abcdefgh$ckT15POyCRlen.h6XtGAZ1\n\
         carol:{{SHA}}GpHWL3ymc5liWkNopqtdSjuqYHM=\n"
    );
    objects.push(secret("users", json!({ "auth": lines })));
    objects.push(annotated(
        NS,
        "basic.test",
        "web",
        &[
            ("auth-type", "basic"),
            ("auth-secret", "users"),
            ("auth-realm", "Staff only"),
        ],
    ));
    // An auth-map: one key per user (operator namespaces keep it as the
    // lines it stands for); the realm left to its default.
    objects.push(json!({
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {"name": "usermap", "namespace": NS},
        "data": {"dave": "JGFwcjEkYWJjZGVmZ2gkY2tUMTVQT3lDUmxlbi5oNlh0R0FaMQ=="},
    }));
    objects.push(annotated(
        NS,
        "map.test",
        "web",
        &[
            ("auth-type", "basic"),
            ("auth-secret", &format!("{NS}/usermap")),
            ("auth-secret-type", "auth-map"),
        ],
    ));
    // cost 31: hours of a core per check; refused where it is read.
    let costly = bcrypt.replace("$05$", "$31$");
    objects.push(secret(
        "costly",
        json!({ "auth": format!("eve:{costly}\n") }),
    ));
    objects.push(annotated(
        NS,
        "costly.test",
        "web",
        &[("auth-type", "basic"), ("auth-secret", "costly")],
    ));
    objects.push(annotated(
        NS,
        "lone.test",
        "web",
        &[("auth-secret", "users")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    h.wait_status("the Ingresses reported", |s| {
        ["basic.test", "map.test", "costly.test", "lone.test"]
            .iter()
            .all(|n| ingress_report(s, NS, n).is_some())
    })
    .await;
    (h, backend)
}

fn get(host: &str, auth: Option<&str>) -> Request {
    let req = Request::get(host, "/admin");
    match auth {
        Some(value) => req.header("authorization", value),
        None => req,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_answers_as_ingress_nginx() {
    let (h, backend) = setup().await;
    for proto in BOTH {
        let what = |case: &str| format!("{proto:?} {case}");
        let forwarded = backend.requests();
        // No credentials, a wrong password, an unknown user: 401 with the
        // realm, nothing forwarded.
        for (case, auth) in [
            ("none", None),
            ("wrong", Some(basic("alice", "wrong"))),
            ("unknown", Some(basic("mallory", "s3cret"))),
            ("not basic", Some("Bearer abc".to_string())),
        ] {
            let resp = over(&h, proto, get("basic.test", auth.as_deref())).await;
            assert_proxy_answer(&resp, 401, &what(case));
            assert_eq!(
                header(&resp, "www-authenticate"),
                "Basic realm=\"Staff only\"",
                "{}",
                what(case)
            );
        }
        assert_eq!(backend.requests(), forwarded, "{}", what("refused"));
        // Each form lets its user in; the backend gets Authorization.
        for (user, password) in [("alice", "s3cret"), ("bob", "hunter2"), ("carol", "pw")] {
            let value = basic(user, password);
            let resp = over(&h, proto, get("basic.test", Some(&value))).await;
            assert_eq!(resp.status, 200, "{}: {}", what(user), resp.text());
            let seen = resp.json().unwrap();
            assert_eq!(
                seen["headers"]["Authorization"],
                json!([value]),
                "{}",
                what(user)
            );
        }
        // The auth-map, with ingress-nginx's empty default realm.
        let resp = over(&h, proto, get("map.test", None)).await;
        assert_proxy_answer(&resp, 401, &what("map none"));
        assert_eq!(header(&resp, "www-authenticate"), "Basic realm=\"\"");
        let resp = over(&h, proto, get("map.test", Some(&basic("dave", "hunter2")))).await;
        assert_eq!(resp.status, 200, "{}: {}", what("map"), resp.text());
        // Past the bounds: 503 (ingress-nginx's denied location), its
        // status naming the Secret.
        let resp = over(&h, proto, get("costly.test", Some(&basic("eve", "s3cret")))).await;
        assert_proxy_answer(&resp, 503, &what("costly"));
        // Served open by ingress-nginx (no auth-type): not routed.
        let resp = over(&h, proto, get("lone.test", None)).await;
        assert_proxy_answer(&resp, 404, &what("lone"));
    }
    let status = h.status().await;
    let report = ingress_report(&status, NS, "costly.test").unwrap();
    let annotations = condition(report, "AnnotationsAccepted").expect("AnnotationsAccepted");
    assert_eq!(annotations["status"], "False");
    let message = annotations["message"].as_str().unwrap();
    assert!(message.contains("Secret ops/costly"), "{message}");
    let lone = ingress_report(&status, NS, "lone.test").unwrap();
    let accepted = condition(lone, "Accepted").expect("Accepted");
    assert_eq!(accepted["reason"], "UnservedRestriction");
    // The Secret itself is refused where it is read, naming its line.
    let said = status.to_string();
    assert!(said.contains("line 1: bcrypt cost 31"), "{said}");
}

/// A guessing client: past its failures (10) its guesses get 429 with
/// Retry-After and no check, over either protocol, while the credential
/// it (or a user behind the same address) had verified before still
/// passes from the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guesses_are_limited_and_verified_credentials_cached() {
    let (h, backend) = setup().await;
    let right = basic("alice", "s3cret");
    let resp = over(&h, Proto::Http1, get("basic.test", Some(&right))).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let mut statuses = Vec::new();
    for i in 0..12 {
        let proto = BOTH[i % 2];
        let guess = basic("alice", &format!("guess{i}"));
        let resp = over(&h, proto, get("basic.test", Some(&guess))).await;
        statuses.push(resp.status);
        if resp.status == 429 {
            let retry: u64 = header(&resp, "retry-after").parse().unwrap();
            assert!(retry >= 1, "{retry}");
        }
    }
    assert_eq!(&statuses[..10], [401; 10]);
    assert_eq!(&statuses[10..], [429, 429]);
    for proto in BOTH {
        let resp = over(&h, proto, get("basic.test", Some(&right))).await;
        assert_eq!(resp.status, 200, "{proto:?} cached: {}", resp.text());
        // Another user, not verified before, waits like the guesser.
        let bob = basic("bob", "hunter2");
        let resp = over(&h, proto, get("basic.test", Some(&bob))).await;
        assert_eq!(resp.status, 429, "{proto:?} uncached");
    }
    assert_eq!(backend.requests(), 3);
}

/// The Gateway API's place for it: a RouteTrafficPolicy's `basicAuth` on
/// one rule of an HTTPRoute (the same check and bounds as the Ingress's),
/// over HTTP/1.1 and cleartext HTTP/2; a policy whose Secret is missing
/// answers 503, never serving its rule unauthenticated, and its status
/// says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_traffic_policy_asks_for_users() {
    const GW: &str = "gw-basic";
    const HOST: &str = "app.example.com";
    let backend = echo(GW, "web", "web-0").await;
    let rule = |name: &str, prefix: &str| {
        json!({
            "name": name,
            "matches": [{ "path": { "type": "PathPrefix", "value": prefix } }],
            "backendRefs": [{ "name": "web", "port": 80 }],
        })
    };
    let policy = |name: &str, section: &str, secret: &str| {
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": name, "namespace": GW },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": "app", "sectionName": section }],
                "basicAuth": { "secretRef": { "name": secret }, "realm": "Gateway" },
            },
        })
    };
    let mut objects = vec![
        gateway_gw(
            GW,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            GW,
            "app",
            json!({ "name": "gw" }),
            &[HOST],
            json!([
                rule("admin", "/admin"),
                rule("gone", "/gone"),
                rule("open", "/open")
            ]),
        ),
        json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "users", "namespace": GW},
            "stringData": {"auth": "carol:{SHA}GpHWL3ymc5liWkNopqtdSjuqYHM=\n"},
        }),
        policy("admin", "admin", "users"),
        policy("gone", "gone", "missing"),
    ];
    objects.extend(echo_service(GW, "web", &[&backend]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h.wait_route_traffic_policies(2).await;
    let gone = status["routeTrafficPolicies"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "gone")
        .unwrap();
    let conditions = gone["status"]["targets"][0]["conditions"].to_string();
    assert!(
        conditions.contains("InvalidSecret") && conditions.contains("gw-basic/missing"),
        "{conditions}"
    );
    for proto in BOTH {
        let send = |path: &'static str, auth: Option<String>| {
            let h = &h;
            async move {
                let mut req = Request::get(HOST, path).proto(proto);
                if let Some(a) = auth {
                    req = req.header("authorization", &a);
                }
                h.send(&req).await
            }
        };
        let none = send("/admin", None).await;
        assert_proxy_answer(&none, 401, &format!("{proto:?} none"));
        assert_eq!(header(&none, "www-authenticate"), "Basic realm=\"Gateway\"");
        let ok = send("/admin", Some(basic("carol", "pw"))).await;
        assert_eq!(ok.status, 200, "{proto:?}: {}", ok.text());
        let gone = send("/gone", Some(basic("carol", "pw"))).await;
        assert_proxy_answer(&gone, 503, &format!("{proto:?} gone"));
        let open = send("/open", None).await;
        assert_eq!(open.status, 200, "{proto:?} open");
    }
    assert_eq!(backend.requests(), 4);
}
