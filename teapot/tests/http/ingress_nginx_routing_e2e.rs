//! End-to-end tests of the routing rules where teapot decides as
//! ingress-nginx does rather than as a plain reading of the Ingress API
//! would (docs/migrate-from-ingress-nginx.md): `ssl-redirect` on by
//! default for TLS hosts, a Prefix path and its trailing-slash twin as two
//! rules, `use-regex` for the whole host, `temporal-redirect` before
//! `permanent-redirect`; through the real `teapot proxy` binary and echo
//! backends, over HTTP/1.1 and HTTP/2 (cleartext with `--h2c`, and TLS).
//!
//! Run with `cargo test -p teapot --test http ingress_nginx_routing_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request, Response, Transport};
use teapot_testkit::echo::EchoServer;

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

/// A proxy serving `ingresses`, all to one echo backend `web` in `ns`,
/// with `args`; the plain listener speaks h2c too.
async fn serve(ns: &str, ingresses: Vec<Value>, args: &[&str]) -> (EchoServer, Harness) {
    let mut args = args.to_vec();
    args.push("--h2c");
    serve_web(ns, ingresses, &args).await
}

/// `req` over plain HTTP, HTTP/1.1 or h2c.
async fn plain(h: &Harness, proto: Proto, req: Request) -> Response {
    send(h.proxy.http, &Transport::Plain, &req.proto(proto)).await
}

fn with_tls(mut ingress: Value, host: &str) -> Value {
    ingress["spec"]["tls"] = json!([{ "hosts": [host], "secretName": "none" }]);
    ingress
}

/// An Ingress with `spec.tls` and no annotation redirects plain HTTP to
/// HTTPS (308), as ingress-nginx's `ssl-redirect` defaults to true;
/// `ssl-redirect: "false"` serves it; an HTTP-01 challenge path stays on
/// plain HTTP (ingress-nginx's `no-tls-redirect-locations`); HTTPS is
/// served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_hosts_redirect_plain_http_by_default() {
    const NS: &str = "sslredirect";
    let (backend, h) = serve(
        NS,
        vec![
            with_tls(
                simple_ingress(NS, "tls.test", "tls.test", "web"),
                "tls.test",
            ),
            with_tls(
                annotated(NS, "off.test", "web", &[("ssl-redirect", "false")]),
                "off.test",
            ),
            simple_ingress(NS, "plain.test", "plain.test", "web"),
        ],
        &[],
    )
    .await;
    for proto in BOTH {
        let what = format!("{proto:?}");
        let resp = plain(&h, proto, Request::get("tls.test", "/a/b?c=d")).await;
        assert_eq!(resp.status, 308, "{what}: {}", resp.text());
        assert_eq!(header(&resp, "location"), "https://tls.test/a/b?c=d");
        let challenge = "/.well-known/acme-challenge/token-1";
        let resp = plain(&h, proto, Request::get("tls.test", challenge)).await;
        assert_eq!(resp.status, 200, "{what}: the challenge path is served");
        for host in ["off.test", "plain.test"] {
            let resp = plain(&h, proto, Request::get(host, "/")).await;
            assert_eq!(resp.status, 200, "{what} {host}: {}", resp.text());
        }
        let resp = over(&h, Proto::Http2, Request::get("tls.test", "/a")).await;
        assert_eq!(resp.status, 200, "{what}: HTTPS is served");
    }
    assert_eq!(backend.requests(), 2 * 4);
}

/// `--ssl-redirect-default=false` keeps an Ingress's TLS hosts on plain
/// HTTP unless it asks for the redirect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_redirect_default_false_serves_plain_http() {
    const NS: &str = "sslredirectoff";
    let (_backend, h) = serve(
        NS,
        vec![
            with_tls(
                simple_ingress(NS, "tls.test", "tls.test", "web"),
                "tls.test",
            ),
            with_tls(
                annotated(NS, "asks.test", "web", &[("ssl-redirect", "true")]),
                "asks.test",
            ),
        ],
        &["--ssl-redirect-default=false"],
    )
    .await;
    for proto in BOTH {
        let resp = plain(&h, proto, Request::get("tls.test", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        let resp = plain(&h, proto, Request::get("asks.test", "/x")).await;
        assert_eq!(resp.status, 308, "{proto:?}: {}", resp.text());
        assert_eq!(header(&resp, "location"), "https://asks.test/x");
    }
}

/// An Ingress of `ns` on `host` with one path per (type, path, service).
fn paths_ingress(ns: &str, name: &str, host: &str, paths: &[(&str, &str, &str)]) -> Value {
    let paths = paths
        .iter()
        .map(|(kind, p, service)| path(kind, p, backend(service, Port::Number(80))))
        .collect();
    ingress(ns, name, json!({ "rules": [rule(Some(host), paths)] }))
}

/// Which echo Service answered.
fn service_of(resp: &Response) -> String {
    let body: Value = serde_json::from_slice(&resp.body).unwrap_or_default();
    body["service"].as_str().unwrap_or("").to_string()
}

/// ingress-nginx's documented path-priority example, on two Ingresses of
/// one host: `Prefix /foo/bar` and `Prefix /foo/bar/` are two rules,
/// neither in conflict; `/foo/bar` goes to the first, `/foo/bar/` and
/// below to the second.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trailing_slash_prefix_is_a_rule_of_its_own() {
    const NS: &str = "priority";
    let one = echo(NS, "service1", "one-0").await;
    let two = echo(NS, "service2", "two-0").await;
    let mut objects = echo_service(NS, "service1", &[&one]);
    objects.extend(echo_service(NS, "service2", &[&two]));
    objects.push(paths_ingress(
        NS,
        "test-ingress-1",
        "test.com",
        &[("Prefix", "/foo/bar", "service1")],
    ));
    objects.push(paths_ingress(
        NS,
        "test-ingress-2",
        "test.com",
        &[("Prefix", "/foo/bar/", "service2")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let status = h
        .wait_status("both Ingresses reported", |s| {
            ["test-ingress-1", "test-ingress-2"]
                .iter()
                .all(|n| ingress_report(s, NS, n).is_some())
        })
        .await;
    for name in ["test-ingress-1", "test-ingress-2"] {
        let report = ingress_report(&status, NS, name).unwrap();
        assert_eq!(
            condition(report, "Conflicted").unwrap()["status"],
            "False",
            "{name}"
        );
    }
    for proto in BOTH {
        for (target, service) in [
            ("/foo/bar", "service1"),
            ("/foo/bar/", "service2"),
            ("/foo/bar/1", "service2"),
        ] {
            let resp = over(&h, proto, Request::get("test.com", target)).await;
            assert_eq!(resp.status, 200, "{proto:?} {target}: {}", resp.text());
            assert_eq!(service_of(&resp), service, "{proto:?} {target}");
        }
    }
}

/// `use-regex` on one Ingress of a host makes the paths of the host's
/// other Ingresses case-insensitive regexes too, as ingress-nginx writes
/// every location of the server with `~*`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn use_regex_on_one_ingress_covers_the_whole_host() {
    const NS: &str = "hostregex";
    let web = echo(NS, "web", "web-0").await;
    let api = echo(NS, "api", "api-0").await;
    let mut objects = echo_service(NS, "web", &[&web]);
    objects.extend(echo_service(NS, "api", &[&api]));
    let mut regex = paths_ingress(
        NS,
        "regex",
        "regex.test",
        &[("ImplementationSpecific", "/api/v[0-9]+", "api")],
    );
    regex["metadata"]["annotations"] = json!({ "nginx.ingress.kubernetes.io/use-regex": "true" });
    objects.push(regex);
    objects.push(paths_ingress(
        NS,
        "plain",
        "regex.test",
        &[("Prefix", "/Static", "web")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("regex.test", "/API/v2/x")).await;
        assert_eq!(service_of(&resp), "api", "{proto:?}: {}", resp.text());
        for target in ["/static/a", "/STATIC", "/Staticfile"] {
            let resp = over(&h, proto, Request::get("regex.test", target)).await;
            assert_eq!(resp.status, 200, "{proto:?} {target}: {}", resp.text());
            assert_eq!(service_of(&resp), "web", "{proto:?} {target}");
        }
    }
}

/// `temporal-redirect` wins over `permanent-redirect`, as ingress-nginx
/// reads it first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporal_redirect_wins_over_permanent() {
    const NS: &str = "redirects";
    let (_backend, h) = serve(
        NS,
        vec![annotated(
            NS,
            "both.test",
            "web",
            &[
                ("permanent-redirect", "https://permanent.example/"),
                ("temporal-redirect", "https://temporal.example/"),
            ],
        )],
        &[],
    )
    .await;
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("both.test", "/x")).await;
        assert_eq!(resp.status, 302, "{proto:?}: {}", resp.text());
        assert_eq!(header(&resp, "location"), "https://temporal.example/");
    }
}

/// `teapot validate --from ingress-nginx --ssl-redirect-default=false`
/// says, per Ingress, that the fleet serves its TLS hosts over plain HTTP
/// where ingress-nginx redirected them; with the proxy's default it moves
/// as it is.
#[test]
fn validate_names_the_fleets_ssl_redirect_setting() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("web.yaml");
    let mut ingress = simple_ingress("shop", "web", "shop.example", "web");
    ingress["spec"]["tls"] = json!([{ "hosts": ["shop.example"], "secretName": "web-tls" }]);
    std::fs::write(&file, docs(&[ingress])).unwrap();
    let validate = |extra: &[&str]| {
        let out = std::process::Command::new(teapot_bin())
            .args(["validate", "--from", "ingress-nginx", "-f"])
            .arg(&file)
            .args(extra)
            .env_remove("TEAPOT_MANIFESTS")
            .env_remove("TEAPOT_DOMAIN")
            .output()
            .expect("teapot runs");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let default = validate(&[]);
    assert!(
        default.contains("shop/web") && default.contains("moves as it is"),
        "{default}"
    );
    let off = validate(&["--ssl-redirect-default=false"]);
    assert!(off.contains("moves, with changes"), "{off}");
    assert!(
        off.contains("  changed: spec.tls: plain HTTP for its TLS hosts is served, not redirected"),
        "{off}"
    );
}
