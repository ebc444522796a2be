//! End-to-end tests of a route's traffic policy (ingress-nginx's
//! annotations, docs/migrate-from-ingress-nginx.md) through the real
//! `teapot proxy` binary and echo backends: each feature over HTTP/1.1
//! (plain) and HTTP/2 (TLS, ALPN h2).
//!
//! Every client here is 127.0.0.1, which is what the allow and deny lists
//! are written against.
//!
//! Run with `cargo test -p teapot --test http traffic_policy_e2e::`.

use crate::common;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request, Response};
use teapot_testkit::echo::EchoServer;

/// A proxy serving `ingresses`, all to one echo backend `web` in `ns`.
async fn serve(ns: &str, ingresses: Vec<Value>) -> (EchoServer, Harness) {
    serve_web(ns, ingresses, &[]).await
}

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

fn options(host: &str, target: &str) -> Request {
    Request {
        method: "OPTIONS".into(),
        ..Request::get(host, target)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allow_and_deny_lists_by_client_address() {
    const NS: &str = "access";
    let (backend, h) = serve(
        NS,
        vec![
            annotated(
                NS,
                "inside.test",
                "web",
                &[("whitelist-source-range", "10.0.0.0/8, 127.0.0.1")],
            ),
            annotated(
                NS,
                "outside.test",
                "web",
                &[("allowlist-source-range", "10.0.0.0/8,192.0.2.0/24")],
            ),
            // The deny-list wins over an allow-list that covers the client.
            annotated(
                NS,
                "denied.test",
                "web",
                &[
                    ("allowlist-source-range", "127.0.0.0/8"),
                    ("denylist-source-range", "127.0.0.1/32"),
                ],
            ),
            annotated(
                NS,
                "open.test",
                "web",
                &[("denylist-source-range", "192.0.2.0/24")],
            ),
        ],
    )
    .await;
    let mut forwarded = 0;
    for proto in BOTH {
        for host in ["inside.test", "open.test"] {
            let resp = over(&h, proto, Request::get(host, "/")).await;
            assert_eq!(resp.status, 200, "{proto:?} {host}: {}", resp.text());
            forwarded += 1;
        }
        for host in ["outside.test", "denied.test"] {
            let resp = over(&h, proto, Request::get(host, "/admin")).await;
            assert_proxy_answer(&resp, 403, &format!("{proto:?} {host}"));
        }
    }
    assert_eq!(
        backend.requests(),
        forwarded,
        "no refused request reached the backend"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_per_client_answers_429_with_retry_after() {
    const NS: &str = "rate";
    let (backend, h) = serve(
        NS,
        vec![
            // One a minute, a burst of one more: two pass at once.
            annotated(
                NS,
                "limited.test",
                "web",
                &[("limit-rpm", "1"), ("limit-burst-multiplier", "1")],
            ),
            annotated(
                NS,
                "exempt.test",
                "web",
                &[
                    ("limit-rps", "1"),
                    ("limit-burst-multiplier", "1"),
                    ("limit-whitelist", "127.0.0.0/8"),
                ],
            ),
        ],
    )
    .await;
    // The client's counter is one whatever the HTTP version.
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("limited.test", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
    }
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("limited.test", "/")).await;
        assert_proxy_answer(&resp, 429, &format!("{proto:?}"));
        let retry: u64 = header(&resp, "retry-after").parse().expect("seconds");
        assert!((1..=60).contains(&retry), "{proto:?}: Retry-After {retry}");
    }
    assert_eq!(backend.requests(), 2);
    // A client in limit-whitelist is never limited.
    for n in 0..10 {
        let proto = BOTH[n % 2];
        let resp = over(&h, proto, Request::get("exempt.test", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?} request {n}: {}", resp.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_answered_and_fields_on_responses() {
    const NS: &str = "cors";
    let (backend, h) = serve(
        NS,
        vec![
            annotated(NS, "any.test", "web", &[("enable-cors", "true")]),
            annotated(
                NS,
                "listed.test",
                "web",
                &[
                    ("enable-cors", "true"),
                    (
                        "cors-allow-origin",
                        "https://app.example, https://*.corp.example",
                    ),
                    ("cors-allow-methods", "GET, POST"),
                    ("cors-allow-headers", "X-Api-Key"),
                    ("cors-expose-headers", "X-Total"),
                    ("cors-allow-credentials", "false"),
                    ("cors-max-age", "600"),
                ],
            ),
        ],
    )
    .await;
    let mut forwarded = 0;
    for proto in BOTH {
        // ingress-nginx's defaults: any origin, credentials, its lists.
        let pre = over(
            &h,
            proto,
            options("any.test", "/api").header("Origin", "https://x.example"),
        )
        .await;
        assert_eq!(pre.status, 204, "{proto:?}: {}", pre.text());
        assert_eq!(header(&pre, "access-control-allow-origin"), "*");
        assert_eq!(header(&pre, "access-control-allow-credentials"), "true");
        assert_eq!(
            header(&pre, "access-control-allow-methods"),
            "GET, PUT, POST, DELETE, PATCH, OPTIONS"
        );
        assert_eq!(header(&pre, "access-control-max-age"), "1728000");
        assert!(pre.body.is_empty());

        let listed = |target: &str, origin: &str| {
            Request::get("listed.test", target).header("Origin", origin)
        };
        let pre = over(
            &h,
            proto,
            options("listed.test", "/api").header("Origin", "https://a1.corp.example"),
        )
        .await;
        assert_eq!(pre.status, 204, "{proto:?}");
        assert_eq!(
            header(&pre, "access-control-allow-origin"),
            "https://a1.corp.example"
        );
        assert_eq!(header(&pre, "access-control-allow-methods"), "GET, POST");
        assert_eq!(header(&pre, "access-control-allow-headers"), "X-Api-Key");
        assert_eq!(header(&pre, "access-control-max-age"), "600");
        assert!(
            pre.headers
                .get("access-control-allow-credentials")
                .is_none()
        );

        // A simple request is forwarded and its response gets the fields.
        let resp = over(&h, proto, listed("/data", "https://app.example")).await;
        assert_eq!(resp.status, 200, "{proto:?}");
        forwarded += 1;
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            "https://app.example"
        );
        assert_eq!(header(&resp, "access-control-expose-headers"), "X-Total");
        assert_eq!(resp.json().unwrap()["path"], "/data", "{proto:?}");

        // Another origin: forwarded (a preflight too), no CORS fields.
        for req in [
            listed("/data", "https://evil.example"),
            options("listed.test", "/data").header("Origin", "https://evil.example"),
        ] {
            let resp = over(&h, proto, req).await;
            assert_eq!(resp.status, 200, "{proto:?}");
            forwarded += 1;
            assert!(
                resp.headers.get("access-control-allow-origin").is_none(),
                "{proto:?}"
            );
        }
    }
    assert_eq!(
        backend.requests(),
        forwarded,
        "preflights were answered by teapot"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redirects_and_app_root() {
    const NS: &str = "redirect";
    let (backend, h) = serve(
        NS,
        vec![
            annotated(
                NS,
                "moved.test",
                "web",
                &[("permanent-redirect", "https://www.example.com/new")],
            ),
            annotated(
                NS,
                "coded.test",
                "web",
                &[
                    ("permanent-redirect", "https://www.example.com/"),
                    ("permanent-redirect-code", "308"),
                ],
            ),
            annotated(
                NS,
                "away.test",
                "web",
                &[("temporal-redirect", "/maintenance")],
            ),
            annotated(NS, "app.test", "web", &[("app-root", "/app1")]),
        ],
    )
    .await;
    let mut forwarded = 0;
    for proto in BOTH {
        let scheme = scheme(proto);
        // A redirect to a path is made absolute with the scheme and host
        // the client used, as ingress-nginx's `absolute_redirect on`.
        let away = format!("{scheme}://away.test/maintenance");
        for (host, status, location) in [
            ("moved.test", 301, "https://www.example.com/new"),
            ("coded.test", 308, "https://www.example.com/"),
            ("away.test", 302, away.as_str()),
        ] {
            let resp = over(&h, proto, Request::get(host, "/")).await;
            assert_eq!(resp.status, status, "{proto:?} {host}");
            assert_eq!(header(&resp, "location"), location, "{proto:?} {host}");
        }
        // app-root names the scheme and host the client used.
        let resp = over(&h, proto, Request::get("app.test", "/")).await;
        assert_eq!(resp.status, 302, "{proto:?}");
        assert_eq!(
            header(&resp, "location"),
            format!("{scheme}://app.test/app1")
        );
        // app-root redirects `/` only.
        let resp = over(&h, proto, Request::get("app.test", "/app1/page")).await;
        assert_eq!(resp.status, 200, "{proto:?}");
        forwarded += 1;
    }
    assert_eq!(backend.requests(), forwarded);
}

/// An operator Ingress's unserved ingress-nginx annotations that restrict
/// nothing are reported in `/status`; what teapot serves of it applies.
/// (One that restricts access keeps the Ingress unrouted:
/// `teapot/tests/fail_closed_e2e.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unserved_annotations_are_reported_not_ignored() {
    const NS: &str = "report";
    let (_backend, h) = serve(
        NS,
        vec![annotated(
            NS,
            "admin.test",
            "web",
            &[
                ("whitelist-source-range", "10.0.0.0/8"),
                ("proxy-max-temp-file-size", "1024m"),
            ],
        )],
    )
    .await;
    let status = h
        .wait_status("the Ingress's report", |s| {
            ingress_report(s, NS, "admin.test").is_some()
        })
        .await;
    let report = ingress_report(&status, NS, "admin.test").unwrap();
    let accepted = condition(report, "AnnotationsAccepted").expect("reported");
    assert_eq!(accepted["status"], "False");
    let message = accepted["message"].as_str().unwrap();
    assert!(
        message
            .contains("not served by teapot: nginx.ingress.kubernetes.io/proxy-max-temp-file-size"),
        "{message}"
    );
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("admin.test", "/")).await;
        assert_proxy_answer(&resp, 403, &format!("{proto:?}"));
    }
}

/// `ssl-redirect` covers the Ingress's TLS hosts (and `teapot.dev/
/// ssl-redirect`, which was admitted but not served before), and
/// `force-ssl-redirect` every host; HTTPS requests are forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssl_redirect_for_plain_http() {
    const NS: &str = "ssl";
    let with_tls = |mut ingress: Value, host: &str| {
        ingress["spec"]["tls"] = json!([{ "hosts": [host], "secretName": "none" }]);
        ingress
    };
    let mut teapots = with_tls(
        simple_ingress(NS, "teapot.test", "teapot.test", "web"),
        "teapot.test",
    );
    teapots["metadata"]["annotations"] = json!({ "teapot.dev/ssl-redirect": "true" });
    let (backend, h) = serve(
        NS,
        vec![
            with_tls(
                annotated(NS, "tls.test", "web", &[("ssl-redirect", "true")]),
                "tls.test",
            ),
            // No TLS section: ssl-redirect has no host to cover.
            annotated(NS, "plain.test", "web", &[("ssl-redirect", "true")]),
            annotated(NS, "forced.test", "web", &[("force-ssl-redirect", "true")]),
            teapots,
        ],
    )
    .await;
    for (host, location) in [
        ("tls.test", Some("https://tls.test/a/b?c=d")),
        ("forced.test", Some("https://forced.test/a/b?c=d")),
        ("teapot.test", Some("https://teapot.test/a/b?c=d")),
        ("plain.test", None),
    ] {
        let resp = over(
            &h,
            Proto::Http1,
            Request::get(&format!("{host}:8080"), "/a/b?c=d"),
        )
        .await;
        match location {
            Some(location) => {
                assert_eq!(resp.status, 308, "{host}: {}", resp.text());
                assert_eq!(header(&resp, "location"), location, "{host}");
            }
            None => assert_eq!(resp.status, 200, "{host}"),
        }
        // Over HTTPS (HTTP/2) it is served.
        let resp = over(&h, Proto::Http2, Request::get(host, "/a/b?c=d")).await;
        assert_eq!(resp.status, 200, "{host} over HTTPS: {}", resp.text());
    }
    // As ingress-nginx, one trailing slash is dropped: `/` goes to the host.
    let resp = over(&h, Proto::Http1, Request::get("forced.test", "/")).await;
    assert_eq!(header(&resp, "location"), "https://forced.test");
    assert_eq!(backend.requests(), 5);
}

/// `affinity: cookie`: the first answer sets the cookie naming the
/// endpoint that served it; requests carrying it stay there on either HTTP
/// version; when that endpoint leaves the Service, another serves and the
/// cookie is set again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cookie_affinity_sticks_and_falls_back() {
    const NS: &str = "sticky";
    let a = echo(NS, "web", "web-a").await;
    let b = echo(NS, "web", "web-b").await;
    let ingress = annotated(
        NS,
        "sticky.test",
        "web",
        &[
            ("affinity", "cookie"),
            ("session-cookie-name", "route"),
            ("session-cookie-max-age", "3600"),
            ("session-cookie-samesite", "None"),
        ],
    );
    let both = |echoes: &[&EchoServer]| {
        let mut objects = echo_service(NS, "web", echoes);
        objects.push(ingress.clone());
        docs(&objects)
    };
    let h = Harness::start(&[("manifests.yaml", both(&[&a, &b]))]).await;
    let first = over(&h, Proto::Http1, Request::get("sticky.test", "/")).await;
    assert_eq!(first.status, 200);
    let set = header(&first, "set-cookie").to_string();
    assert!(
        set.starts_with("route=")
            && set.ends_with("; Path=/; Max-Age=3600; SameSite=None; Secure; HttpOnly"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_string();
    let pod = first.json().unwrap()["pod"].as_str().unwrap().to_string();
    for n in 0..8 {
        let proto = BOTH[n % 2];
        let resp = over(
            &h,
            proto,
            Request::get("sticky.test", "/").header("Cookie", &cookie),
        )
        .await;
        assert_eq!(
            resp.json().unwrap()["pod"],
            pod.as_str(),
            "{proto:?} request {n}"
        );
        assert!(
            resp.headers.get("set-cookie").is_none(),
            "{proto:?}: cookie kept"
        );
    }
    // Without the cookie, requests are balanced as before.
    let mut pods = std::collections::BTreeSet::new();
    for _ in 0..4 {
        let resp = over(&h, Proto::Http1, Request::get("sticky.test", "/")).await;
        pods.insert(resp.json().unwrap()["pod"].as_str().unwrap().to_string());
    }
    assert_eq!(pods.len(), 2, "{pods:?}");
    // The client's endpoint leaves the Service.
    let stays = if pod == "web-a" { &b } else { &a };
    h.apply("manifests.yaml", &both(&[stays])).await;
    for proto in BOTH {
        let resp = over(
            &h,
            proto,
            Request::get("sticky.test", "/").header("Cookie", &cookie),
        )
        .await;
        assert_eq!(resp.status, 200, "{proto:?}");
        assert_ne!(resp.json().unwrap()["pod"], pod.as_str(), "{proto:?}");
        let again = header(&resp, "set-cookie");
        assert!(
            again.starts_with("route=") && !again.starts_with(&cookie),
            "{again}"
        );
    }
}

/// `x-forwarded-prefix` replaces what the client sent, on both versions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forwarded_prefix_is_set_on_backend_requests() {
    const NS: &str = "prefix";
    let (_backend, h) = serve(
        NS,
        vec![annotated(
            NS,
            "prefix.test",
            "web",
            &[("x-forwarded-prefix", "/shop")],
        )],
    )
    .await;
    for proto in BOTH {
        let req = Request::get("prefix.test", "/cart").header("X-Forwarded-Prefix", "/evil");
        let resp = over(&h, proto, req).await;
        assert_eq!(resp.status, 200, "{proto:?}");
        let json = resp.json().unwrap();
        assert_eq!(
            json["headers"]["X-Forwarded-Prefix"],
            json!(["/shop"]),
            "{proto:?}: {json:#}"
        );
    }
}

/// `proxy-body-size` is the route's body limit, as `teapot.dev/
/// max-body-size` is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_body_size_limits_request_bodies() {
    const NS: &str = "body";
    let (_backend, h) = serve(
        NS,
        vec![annotated(
            NS,
            "body.test",
            "web",
            &[("proxy-body-size", "1k")],
        )],
    )
    .await;
    let post = |len: usize| Request {
        method: "POST".into(),
        body: vec![b'x'; len],
        ..Request::get("body.test", "/upload")
    };
    for proto in BOTH {
        let resp = over(&h, proto, post(1024)).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        let resp = over(&h, proto, post(1025)).await;
        assert_proxy_answer(&resp, 413, &format!("{proto:?}"));
    }
}

/// An Ingress for `host` with the given paths (pathType
/// ImplementationSpecific, as ingress-nginx's regex examples write them)
/// to `web:80`, and ingress-nginx annotations.
fn paths_ingress(
    ns: &str,
    name: &str,
    host: &str,
    paths: &[&str],
    annotations: &[(&str, &str)],
) -> Value {
    let mut ingress = annotated(ns, name, "web", annotations);
    let paths: Vec<Value> = paths
        .iter()
        .map(|p| {
            path(
                "ImplementationSpecific",
                p,
                backend("web", Port::Number(80)),
            )
        })
        .collect();
    ingress["spec"] = json!({ "ingressClassName": "teapot", "rules": [rule(Some(host), paths)] });
    ingress
}

/// `rewrite-target` with capture groups and `use-regex` (ingress-nginx's
/// rewrite.go): the backend gets the rewritten path with the query as
/// sent; a longer regex path wins over a shorter Prefix path of the host
/// and loses to a longer one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rewrite_target_with_capture_groups() {
    const NS: &str = "rewrite";
    let (backend, h) = serve(
        NS,
        vec![
            paths_ingress(
                NS,
                "capture",
                "rewrite.test",
                &["/something(/|$)(.*)"],
                &[("rewrite-target", "/$2")],
            ),
            paths_ingress(
                NS,
                "custom",
                "rewrite.test",
                &["/foo/bar/(.+)"],
                &[("use-regex", "true"), ("rewrite-target", "/new/backend/$1")],
            ),
            paths_ingress(
                NS,
                "plain",
                "rewrite.test",
                &["/foo", "/.well-known/acme/challenge"],
                &[],
            ),
            paths_ingress(
                NS,
                "index",
                "rewrite.test",
                &["/"],
                &[("rewrite-target", "/new/backend")],
            ),
            paths_ingress(
                NS,
                "regex",
                "regex.test",
                &["/v[0-9]+/api"],
                &[("use-regex", "true")],
            ),
        ],
    )
    .await;
    let cases = [
        ("rewrite.test", "/something", "/"),
        ("rewrite.test", "/something/", "/"),
        ("rewrite.test", "/something/new?q=1", "/new?q=1"),
        ("rewrite.test", "/SOMETHING/new/deeper", "/new/deeper"),
        ("rewrite.test", "/foo/bar/bar", "/new/backend/bar"),
        ("rewrite.test", "/foo", "/foo"),
        (
            "rewrite.test",
            "/.well-known/acme/challenge",
            "/.well-known/acme/challenge",
        ),
        ("rewrite.test", "/anything/else?x=y", "/new/backend?x=y"),
        ("regex.test", "/V2/api/users", "/V2/api/users"),
    ];
    for proto in BOTH {
        for (host, target, want) in cases {
            let resp = over(&h, proto, Request::get(host, target)).await;
            assert_eq!(resp.status, 200, "{proto:?} {target}: {}", resp.text());
            assert_eq!(
                resp.json().unwrap()["path"],
                json!(want),
                "{proto:?} {target}"
            );
        }
        let resp = over(&h, proto, Request::get("regex.test", "/vx/api")).await;
        assert_proxy_answer(&resp, 404, &format!("{proto:?} no regex matches"));
    }
    assert_eq!(backend.requests(), 2 * cases.len() as u64);
}

/// `from-to-www-redirect` (ingress-nginx's fromtowwwredirect.go): the
/// twin of a rule host is answered 308 to it on the client's scheme, the
/// target kept; the rule host itself is served, and a twin another Ingress
/// serves keeps its rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_to_www_redirect_answers_the_twin() {
    const NS: &str = "www";
    let (backend, h) = serve(
        NS,
        vec![
            annotated(NS, "shop.test", "web", &[("from-to-www-redirect", "true")]),
            annotated(
                NS,
                "www.blog.test",
                "web",
                &[("from-to-www-redirect", "true")],
            ),
            annotated(NS, "held.test", "web", &[("from-to-www-redirect", "true")]),
            annotated(NS, "www.held.test", "web", &[]),
        ],
    )
    .await;
    let mut forwarded = 0;
    for proto in BOTH {
        let scheme = scheme(proto);
        for (host, target, location) in [
            ("www.shop.test", "/foo?q=1", "shop.test/foo?q=1"),
            ("www.shop.test", "/", "shop.test"),
            ("blog.test", "/a/b/", "www.blog.test/a/b"),
        ] {
            let resp = over(&h, proto, Request::get(host, target)).await;
            assert_eq!(resp.status, 308, "{proto:?} {host}{target}");
            assert_eq!(
                header(&resp, "location"),
                format!("{scheme}://{location}"),
                "{proto:?} {host}{target}"
            );
        }
        for host in ["shop.test", "www.blog.test", "www.held.test"] {
            let resp = over(&h, proto, Request::get(host, "/foo")).await;
            assert_eq!(resp.status, 200, "{proto:?} {host}: {}", resp.text());
            forwarded += 1;
        }
    }
    assert_eq!(backend.requests(), forwarded);
}

/// `proxy-read-timeout`: a backend slower than the route's timeout gets
/// the client a 504; the same backend behind a route without it answers
/// (the operator's timeout, 60 s, applies).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_read_timeout_bounds_the_backends_answer() {
    const NS: &str = "timeouts";
    let (_backend, h) = serve(
        NS,
        vec![
            annotated(
                NS,
                "short.test",
                "web",
                &[("proxy-read-timeout", "1"), ("proxy-connect-timeout", "2")],
            ),
            annotated(NS, "default.test", "web", &[]),
        ],
    )
    .await;
    for proto in BOTH {
        // The backend waits 2.5 times the route's timeout before answering.
        let slow = |host: &str| Request::get(host, "/slow").header("X-Echo-Delay-Ms", "2500");
        let resp = over(&h, proto, slow("short.test")).await;
        assert_proxy_answer(&resp, 504, &format!("{proto:?} short"));
        let resp = over(&h, proto, slow("default.test")).await;
        assert_eq!(resp.status, 200, "{proto:?} default: {}", resp.text());
        let resp = over(&h, proto, Request::get("short.test", "/fast")).await;
        assert_eq!(resp.status, 200, "{proto:?} fast: {}", resp.text());
    }
}

/// Canaries (ingress-nginx's canary.go): a canary Ingress for the same
/// host and path adds its backend to the main Ingress's route; the
/// header, then the cookie, then the weight choose it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_ingresses_share_the_main_route() {
    const NS: &str = "canary";
    let main = echo(NS, "web", "web-0").await;
    let canary = echo(NS, "canary", "canary-0").await;
    let mut objects = echo_service(NS, "web", &[&main]);
    objects.extend(echo_service(NS, "canary", &[&canary]));
    objects.push(annotated(NS, "canary.test", "web", &[]));
    let mut by_header = annotated(
        NS,
        "canary.test",
        "canary",
        &[
            ("canary", "true"),
            ("canary-by-header", "X-Canary"),
            ("canary-by-cookie", "use-canary"),
        ],
    );
    by_header["metadata"]["name"] = json!("canary-by-header");
    objects.push(by_header);
    objects.push(annotated(NS, "weighted.test", "web", &[]));
    let mut weighted = annotated(
        NS,
        "weighted.test",
        "canary",
        &[("canary", "true"), ("canary-weight", "100")],
    );
    weighted["metadata"]["name"] = json!("canary-weighted");
    objects.push(weighted);
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    for proto in BOTH {
        for (host, fields, pod) in [
            ("canary.test", &[][..], "web-0"),
            ("canary.test", &[("X-Canary", "always")][..], "canary-0"),
            (
                "canary.test",
                &[("X-Canary", "never"), ("Cookie", "use-canary=always")][..],
                "web-0",
            ),
            (
                "canary.test",
                &[("X-Canary", "maybe"), ("Cookie", "use-canary=always")][..],
                "canary-0",
            ),
            (
                "canary.test",
                &[("Cookie", "use-canary=never")][..],
                "web-0",
            ),
            ("weighted.test", &[][..], "canary-0"),
        ] {
            let mut req = Request::get(host, "/x");
            for (name, value) in fields {
                req = req.header(name, value);
            }
            let resp = over(&h, proto, req).await;
            assert_eq!(
                resp.status,
                200,
                "{proto:?} {host} {fields:?}: {}",
                resp.text()
            );
            assert_eq!(
                resp.json().unwrap()["pod"],
                json!(pod),
                "{proto:?} {host} {fields:?}"
            );
        }
    }
}

/// Sends requests for `host` until one reaches `backend` (an ended
/// request's count is given back as its exchange finishes, which may be
/// just after its client has the answer): that request, held.
async fn until_held(
    h: &Harness,
    proto: Proto,
    host: &str,
    backend: &HeldBackend,
) -> (tokio::task::JoinHandle<Response>, HeldRequest) {
    for _ in 0..400 {
        let mut resp = spawn_over(h, proto, Request::get(host, "/"));
        tokio::select! {
            held = backend.next() => return (resp, held),
            refused = &mut resp => {
                assert_proxy_answer(&refused.unwrap(), 503, &format!("{proto:?} {host}"));
                tokio::time::sleep(POLL).await;
            }
        }
    }
    panic!("{proto:?} {host}: the client's count never fell");
}

/// [`until_held`], answered: the client's count had fallen.
async fn admitted(h: &Harness, proto: Proto, host: &str, backend: &HeldBackend) {
    let (resp, held) = until_held(h, proto, host, backend).await;
    held.answer(true);
    let resp = resp.await.unwrap();
    assert_eq!(resp.status, 200, "{proto:?} {host}: {}", resp.text());
}

/// `limit-connections` (ingress-nginx's connection.go): with one request
/// of the client in flight, the next gets 503 and never reaches the
/// backend; the count falls however the request ends (answered, the
/// backend failing, the client gone, the read timeout); a client in
/// `limit-allowlist` is not counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_connections_counts_requests_in_flight_per_client() {
    const NS: &str = "inflight";
    let held = HeldBackend::start().await;
    let mut objects = held.service(NS, "held");
    objects.push(annotated(
        NS,
        "one.test",
        "held",
        &[("limit-connections", "1")],
    ));
    objects.push(annotated(
        NS,
        "slow.test",
        "held",
        &[("limit-connections", "1"), ("proxy-read-timeout", "1")],
    ));
    objects.push(annotated(
        NS,
        "exempt.test",
        "held",
        &[
            ("limit-connections", "1"),
            ("limit-allowlist", "127.0.0.0/8"),
        ],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let get = |host: &str| Request::get(host, "/");
    for proto in BOTH {
        let (first, first_held) = until_held(&h, proto, "one.test", &held).await;
        let refused = over(&h, proto, get("one.test")).await;
        assert_proxy_answer(&refused, 503, &format!("{proto:?} second in flight"));
        assert!(held.idle(), "{proto:?}: the refused request stayed here");
        // An exempt client is not counted: two at once.
        let exempt = [
            spawn_over(&h, proto, get("exempt.test")),
            spawn_over(&h, proto, get("exempt.test")),
        ];
        let (a, b) = (held.next().await, held.next().await);
        a.answer(true);
        b.answer(true);
        for resp in exempt {
            assert_eq!(resp.await.unwrap().status, 200, "{proto:?} exempt");
        }
        // Answered.
        first_held.answer(true);
        assert_eq!(first.await.unwrap().status, 200, "{proto:?}");
        admitted(&h, proto, "one.test", &held).await;
        // The backend closes without an answer.
        let (failed, failed_held) = until_held(&h, proto, "one.test", &held).await;
        failed_held.answer(false);
        let failed = failed.await.unwrap();
        assert_proxy_answer(&failed, 502, &format!("{proto:?} backend failed"));
        admitted(&h, proto, "one.test", &held).await;
        // The client goes away while its request is held.
        let (gone, gone_held) = until_held(&h, proto, "one.test", &held).await;
        gone.abort();
        let _ = gone.await;
        gone_held.answer(true);
        admitted(&h, proto, "one.test", &held).await;
        // The route's read timeout ends it.
        let (slow, _unanswered) = until_held(&h, proto, "slow.test", &held).await;
        assert_proxy_answer(&slow.await.unwrap(), 504, &format!("{proto:?} timeout"));
        admitted(&h, proto, "slow.test", &held).await;
    }
}

/// `upstream-hash-by`: every request with the same key (here a header)
/// goes to one endpoint, on either HTTP version; different keys spread
/// over the endpoints.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_hash_by_keeps_a_key_on_one_endpoint() {
    const NS: &str = "hashed";
    let echoes = [
        echo(NS, "web", "web-a").await,
        echo(NS, "web", "web-b").await,
        echo(NS, "web", "web-c").await,
    ];
    let mut objects = echo_service(NS, "web", &echoes.iter().collect::<Vec<_>>());
    objects.push(annotated(
        NS,
        "hashed.test",
        "web",
        &[("upstream-hash-by", "user-$http_x_user")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let mut all = std::collections::BTreeSet::new();
    for user in 0..16 {
        let mut pods = std::collections::BTreeSet::new();
        for n in 0..4 {
            let proto = BOTH[n % 2];
            let req =
                Request::get("hashed.test", &format!("/{n}")).header("X-User", &user.to_string());
            let resp = over(&h, proto, req).await;
            assert_eq!(resp.status, 200, "{proto:?}");
            pods.insert(resp.json().unwrap()["pod"].as_str().unwrap().to_string());
        }
        assert_eq!(pods.len(), 1, "user {user}: {pods:?}");
        all.extend(pods);
    }
    assert!(all.len() > 1, "{all:?}");
}

/// Canaries and affinity (ingress-nginx's canary.go "canary affinity
/// behavior"): a request whose affinity cookie names the main backend's
/// endpoint stays there, even with the canary's header; with the canary
/// Ingress's `affinity-canary-behavior: sticky` (the default) a request
/// sent to the canary gets the cookie and then stays on the canary; with
/// `legacy` it gets none. `session-cookie-domain` (affinity.go) is the
/// cookie's Domain; one the Ingress does not serve is reported, not sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canary_respects_affinity_and_cookie_domain() {
    const NS: &str = "canarysticky";
    let main = echo(NS, "web", "web-0").await;
    let canary = echo(NS, "canary", "canary-0").await;
    let mut objects = echo_service(NS, "web", &[&main]);
    objects.extend(echo_service(NS, "canary", &[&canary]));
    for (host, behavior) in [("sticky.test", None), ("legacy.test", Some("legacy"))] {
        objects.push(annotated(
            NS,
            host,
            "web",
            &[
                ("affinity", "cookie"),
                ("session-cookie-name", "route"),
                ("session-cookie-domain", host),
            ],
        ));
        let mut pairs = vec![("canary", "true"), ("canary-by-header", "X-Canary")];
        pairs.extend(behavior.map(|b| ("affinity-canary-behavior", b)));
        let mut by_header = annotated(NS, host, "canary", &pairs);
        by_header["metadata"]["name"] = json!(format!("canary-{host}"));
        objects.push(by_header);
    }
    objects.push(annotated(
        NS,
        "elsewhere.test",
        "web",
        &[("affinity", "cookie"), ("session-cookie-domain", "test")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let pod = |resp: &Response| resp.json().unwrap()["pod"].clone();
    let cookie = |resp: &Response, host: &str| {
        let set = header(resp, "set-cookie");
        assert!(set.contains(&format!("; Path=/; Domain={host};")), "{set}");
        set.split(';').next().unwrap().to_string()
    };
    for proto in BOTH {
        for (host, sticky) in [("sticky.test", true), ("legacy.test", false)] {
            let what = format!("{proto:?} {host}");
            let first = over(&h, proto, Request::get(host, "/")).await;
            assert_eq!(pod(&first), json!("web-0"), "{what}");
            let on_main = cookie(&first, host);
            // Tied to the main backend: the canary's header does not move it.
            let tied = Request::get(host, "/")
                .header("Cookie", &on_main)
                .header("X-Canary", "always");
            assert_eq!(pod(&over(&h, proto, tied).await), json!("web-0"), "{what}");
            let forced = over(
                &h,
                proto,
                Request::get(host, "/").header("X-Canary", "always"),
            )
            .await;
            assert_eq!(pod(&forced), json!("canary-0"), "{what}");
            if sticky {
                let on_canary = cookie(&forced, host);
                let back = Request::get(host, "/").header("Cookie", &on_canary);
                assert_eq!(
                    pod(&over(&h, proto, back).await),
                    json!("canary-0"),
                    "{what}"
                );
            } else {
                assert!(forced.headers.get("set-cookie").is_none(), "{what}");
            }
        }
        // A domain the Ingress does not serve is not sent.
        let resp = over(&h, proto, Request::get("elsewhere.test", "/")).await;
        let set = header(&resp, "set-cookie");
        assert!(!set.contains("Domain"), "{set}");
    }
    let status = h
        .wait_status("the Ingress's report", |s| {
            ingress_report(s, NS, "elsewhere.test").is_some()
        })
        .await;
    let report = ingress_report(&status, NS, "elsewhere.test").unwrap();
    let accepted = condition(report, "AnnotationsAccepted").expect("a condition");
    assert_eq!(accepted["status"], "False", "{accepted}");
    assert!(
        accepted["message"]
            .as_str()
            .unwrap()
            .contains("session-cookie-domain"),
        "{accepted}"
    );
}

/// Fail closed: a RouteTrafficPolicy the manifests reader refuses (a value
/// out of bounds) stands on its route as that refusal: 503
/// `policy_refused` and `Invalid` naming the field, never the route
/// served without the allow-list it asked for. A refused update of a
/// policy served before keeps the last good version (its route keeps its
/// restriction), reported. Over HTTP/1.1 and h2c.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_traffic_policy_refused_when_read_refuses_its_route() {
    const NS: &str = "refused-policy";
    let policy = |name: &str, route: &str, spec: Value| {
        let mut spec = spec;
        spec["targetRefs"] =
            json!([{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route }]);
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": name, "namespace": NS },
            "spec": spec,
        })
    };
    // The client (127.0.0.1) is outside the allow-list either way; the
    // rate is past its bound (at most 100000 a second).
    let out_of_bounds = json!({
        "clientAddresses": { "allow": ["10.0.0.0/8"] },
        "rateLimit": { "requestsPerSecond": 200_000 },
    });
    let good = json!({ "clientAddresses": { "allow": ["10.0.0.0/8"] } });
    let backend = echo(NS, "web", "web-0").await;
    let rules = json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]);
    let mut objects = vec![
        gateway_gw(
            NS,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            NS,
            "new",
            json!({"name": "gw"}),
            &["new.test"],
            rules.clone(),
        ),
        http_route(NS, "kept", json!({"name": "gw"}), &["kept.test"], rules),
    ];
    objects.extend(echo_service(NS, "web", &[&backend]));
    let policies = |kept: &Value| {
        docs(&[
            policy("new", "new", out_of_bounds.clone()),
            policy("kept", "kept", kept.clone()),
        ])
    };
    let h = Harness::start_with_args(
        &[("gw.yaml", docs(&objects)), ("p.yaml", policies(&good))],
        &["--h2c"],
    )
    .await;
    let conditions = |status: &Value| -> Vec<(String, String, String)> {
        let all = status["routeTrafficPolicies"].as_array().unwrap();
        all.iter()
            .map(|p| {
                let c = &p["status"]["targets"][0]["conditions"][0];
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (text(&p["name"]), text(&c["reason"]), text(&c["message"]))
            })
            .collect()
    };
    let status = h.wait_route_traffic_policies(2).await;
    let reported = conditions(&status);
    assert_eq!(reported[0].1, "Accepted", "{reported:?}");
    assert_eq!((&*reported[1].0, &*reported[1].1), ("new", "Invalid"));
    assert!(
        reported[1]
            .2
            .starts_with("spec.rateLimit.requestsPerSecond: ")
            && reported[1].2.ends_with("its routes answer 503"),
        "{reported:?}"
    );
    refused_and_kept(&h).await;

    // The served policy's refused update keeps its allow-list.
    h.apply("p.yaml", &policies(&out_of_bounds)).await;
    let status = h.status().await;
    let problem = status["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["object"] == format!("RouteTrafficPolicy {NS}/kept"))
        .unwrap_or_else(|| panic!("the update is reported: {status:#}"));
    assert_eq!(problem["kept_previous"], json!(true), "{problem}");
    assert_eq!(problem["field"], "spec.rateLimit.requestsPerSecond");
    assert_eq!(conditions(&status)[0].1, "Accepted");
    refused_and_kept(&h).await;
    assert_eq!(backend.requests(), 0, "no request reached the backend");
}

/// `new.test`'s route answers 503 `policy_refused`, `kept.test`'s its
/// allow-list's 403, over HTTP/1.1 and h2c.
async fn refused_and_kept(h: &Harness) {
    for proto in [Proto::Http1, Proto::Http2] {
        let resp = h.send(&Request::get("new.test", "/").proto(proto)).await;
        assert_proxy_answer(&resp, 503, &format!("{proto:?} new"));
        assert_eq!(
            resp.text(),
            "503 this route's traffic policy cannot be served\n"
        );
        let resp = h.send(&Request::get("kept.test", "/").proto(proto)).await;
        assert_proxy_answer(&resp, 403, &format!("{proto:?} kept"));
    }
}

/// `cors-allow-origin` with entries that are no origin (an operator's
/// Ingress: no webhook): as ingress-nginx, the others are served and each
/// dropped one is reported on `AnnotationsAccepted`; with none an origin,
/// no origin is allowed, never every one (ingress-nginx's `*`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_origins_that_are_no_origin_are_dropped_never_widened() {
    const NS: &str = "cors-dropped";
    let (_backend, h) = serve(
        NS,
        vec![
            annotated(
                NS,
                "some.test",
                "web",
                &[
                    ("enable-cors", "true"),
                    (
                        "cors-allow-origin",
                        "origin.cors.com:8080, https://origin2.cors.com",
                    ),
                ],
            ),
            annotated(
                NS,
                "none.test",
                "web",
                &[
                    ("enable-cors", "true"),
                    ("cors-allow-origin", "origin.cors.com:8080, https://$host"),
                ],
            ),
        ],
    )
    .await;
    let status = h
        .wait_status("the Ingresses' reports", |s| {
            ingress_report(s, NS, "some.test").is_some()
                && ingress_report(s, NS, "none.test").is_some()
        })
        .await;
    for (name, said) in [
        ("some.test", "\"origin.cors.com:8080\""),
        ("none.test", "no origin is allowed"),
    ] {
        let report = ingress_report(&status, NS, name).unwrap();
        let accepted = condition(report, "AnnotationsAccepted").expect("reported");
        assert_eq!(accepted["status"], "False", "{name}");
        let message = accepted["message"].as_str().unwrap();
        assert!(message.contains(said), "{name}: {message}");
    }
    let origin = |host: &str, origin: &str| Request::get(host, "/").header("Origin", origin);
    for proto in BOTH {
        let resp = over(&h, proto, origin("some.test", "https://origin2.cors.com")).await;
        assert_eq!(resp.status, 200, "{proto:?}");
        assert_eq!(
            header(&resp, "access-control-allow-origin"),
            "https://origin2.cors.com"
        );
        for (host, from) in [
            ("some.test", "origin.cors.com:8080"),
            ("some.test", "https://elsewhere.example"),
            ("none.test", "https://origin2.cors.com"),
            ("none.test", "origin.cors.com:8080"),
        ] {
            let resp = over(&h, proto, origin(host, from)).await;
            assert_eq!(resp.status, 200, "{proto:?} {host} {from}");
            assert!(
                resp.headers.get("access-control-allow-origin").is_none(),
                "{proto:?} {host} {from}: {:?}",
                resp.headers
            );
        }
    }
}
