//! End-to-end tests of external authentication (ingress-nginx's
//! `auth-url` family, docs/migrate-from-ingress-nginx.md) through the real
//! `teapot proxy` binary, a real authentication service (a small HTTP
//! server here) and echo backends, over HTTP/1.1 (plain) and HTTP/2 (TLS,
//! ALPN h2).
//!
//! Run with `cargo test -p teapot --test auth external_auth_e2e::`.

use crate::common;

use std::net::IpAddr;
use std::sync::atomic::Ordering;

use common::auth_service::AuthService;
use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request, Transport};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];

/// What the authentication service answers: by the path teapot asks
/// for (`/allow`: 200 with `X-User: ann`; `/unauthorized`: 401 with
/// `WWW-Authenticate`; `/forbidden`: 403; `/hold`: no answer until
/// released).
const ANSWERS: &[common::auth_service::Answer] = &[
    ("/allow", 200, &[("x-user", "ann")]),
    (
        "/unauthorized",
        401,
        &[("www-authenticate", "Basic realm=\"shop\"")],
    ),
    ("/forbidden", 403, &[]),
];

async fn auth_service(ip: IpAddr) -> AuthService {
    AuthService::start(ip, ANSWERS, "/hold").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_auth_service_decides_each_request() {
    const NS: &str = "ops";
    let auth = auth_service("127.0.0.1".parse().unwrap()).await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.extend(auth.service(NS));
    // An authentication Service whose endpoint does not answer.
    let gone = teapot_testkit::l4::ClosedPort::new();
    objects.push(service(NS, "gone", &[(Some("http"), 80)]));
    objects.push(slice(
        NS,
        "gone-0",
        "gone",
        &[(Some("http"), gone.port())],
        &[("127.0.0.1", true)],
    ));
    let url = |path: &str| format!("http://auth.{NS}.svc.cluster.local/{path}");
    let (allow, unauthorized, forbidden) = (url("allow"), url("unauthorized"), url("forbidden"));
    objects.extend([
        annotated(
            NS,
            "pass.test",
            "web",
            &[("auth-url", &allow), ("auth-response-headers", "X-User")],
        ),
        annotated(
            NS,
            "login.test",
            "web",
            &[
                ("auth-url", &unauthorized),
                ("auth-signin", "http://login.test/auth/start"),
            ],
        ),
        annotated(
            NS,
            "param.test",
            "web",
            &[
                ("auth-url", &unauthorized),
                ("auth-signin", "https://sso.example/start?app=shop"),
                ("auth-signin-redirect-param", "return_to"),
            ],
        ),
        annotated(NS, "basic.test", "web", &[("auth-url", &unauthorized)]),
        annotated(NS, "forbid.test", "web", &[("auth-url", &forbidden)]),
        annotated(
            NS,
            "down.test",
            "web",
            &[("auth-url", "http://gone.ops.svc/check")],
        ),
        annotated(
            NS,
            "invalid.test",
            "web",
            &[("auth-url", "https://invalid..auth.url")],
        ),
        annotated(
            NS,
            "cors.test",
            "web",
            &[("auth-url", &unauthorized), ("enable-cors", "true")],
        ),
    ]);
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;

    for proto in BOTH {
        // 2xx: forwarded, the listed field taken from the answer in place
        // of the client's.
        // Any field of the client's goes to the service (an auth service
        // may read a custom key); teapot's own fields are teapot's only,
        // and the client's connection fields stay with its connection.
        let mut req = Request::get("pass.test", "/cart?id=7")
            .header("x-user", "mallory")
            .header("cookie", "session=s1")
            .header("x-tenant-key", "k-7")
            .header("x-original-url", "http://admin.test/")
            .header("x-forwarded-for", "6.6.6.6")
            .header("x-real-ip", "6.6.6.6");
        req = match proto {
            Proto::Http1 => req
                .header("connection", "keep-alive, x-hop")
                .header("x-hop", "1")
                .header("keep-alive", "timeout=5"),
            // HTTP/2 has no connection fields but `te: trailers`.
            Proto::Http2 => req.header("te", "trailers"),
        };
        let resp = over(&h, proto, req).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        let seen = resp.json().unwrap();
        assert_eq!(seen["headers"]["X-User"], json!(["ann"]), "{proto:?}");
        // What the authentication service was told.
        let sub = auth.last();
        assert_eq!(sub.method, "GET");
        assert_eq!(sub.uri, "/allow");
        let field = |n: &str| sub.headers.get(n).map(|v| v.to_str().unwrap().to_string());
        let scheme = scheme(proto);
        assert_eq!(
            field("x-original-url").as_deref(),
            Some(&*format!("{scheme}://pass.test/cart?id=7")),
            "{proto:?}"
        );
        assert_eq!(field("x-original-method").as_deref(), Some("GET"));
        assert_eq!(field("x-forwarded-host").as_deref(), Some("pass.test"));
        assert_eq!(field("x-forwarded-proto").as_deref(), Some(scheme));
        assert_eq!(field("x-forwarded-for").as_deref(), Some("127.0.0.1"));
        assert_eq!(field("x-real-ip").as_deref(), Some("127.0.0.1"));
        assert_eq!(
            field("x-auth-request-redirect").as_deref(),
            Some("/cart?id=7")
        );
        assert_eq!(field("cookie").as_deref(), Some("session=s1"));
        assert_eq!(field("host").as_deref(), Some("auth.ops.svc.cluster.local"));
        assert_eq!(field("x-request-id").map(|i| i.len()), Some(32));
        assert_eq!(field("x-tenant-key").as_deref(), Some("k-7"), "{proto:?}");
        for own in ["x-original-url", "x-forwarded-for", "x-real-ip", "host"] {
            assert_eq!(
                sub.headers.get_all(own).iter().count(),
                1,
                "{own}, {proto:?}"
            );
        }
        for hop in ["connection", "x-hop", "keep-alive", "te"] {
            assert_eq!(field(hop), None, "{hop}, {proto:?}");
        }

        // 401 with auth-signin: to the sign-in page with the original URL.
        let resp = over(&h, proto, Request::get("login.test", "/?a=b&c=d")).await;
        assert_eq!(resp.status, 302, "{proto:?}: {}", resp.text());
        assert_eq!(
            header(&resp, "location"),
            format!("http://login.test/auth/start?rd={scheme}://login.test%2F%3Fa%3Db%26c%3Dd"),
        );
        let resp = over(&h, proto, Request::get("param.test", "/x")).await;
        assert_eq!(resp.status, 302, "{proto:?}");
        assert_eq!(
            header(&resp, "location"),
            format!("https://sso.example/start?app=shop&return_to={scheme}://param.test%2Fx"),
        );
        // 401 without: the service's challenge.
        let resp = over(&h, proto, Request::get("basic.test", "/")).await;
        assert_eq!(resp.status, 401, "{proto:?}");
        assert_eq!(header(&resp, "www-authenticate"), "Basic realm=\"shop\"");
        // 403.
        let resp = over(&h, proto, Request::get("forbid.test", "/")).await;
        assert_eq!(resp.status, 403, "{proto:?}");
        // The service down: 500, as ingress-nginx.
        let resp = over(&h, proto, Request::get("down.test", "/")).await;
        assert_eq!(resp.status, 500, "{proto:?}: {}", resp.text());
        // An auth-url teapot cannot use closes the route (ingress-nginx
        // denies the location: 503).
        let resp = over(&h, proto, Request::get("invalid.test", "/")).await;
        assert_proxy_answer(&resp, 503, &format!("invalid auth-url, {proto:?}"));
        // A preflight CORS answers is not asked about (ingress-nginx
        // answers it before auth_request); a plain request is.
        let before = auth.count();
        let preflight = Request {
            method: "OPTIONS".into(),
            ..Request::get("cors.test", "/api")
        }
        .header("origin", "https://app.example");
        let resp = over(&h, proto, preflight).await;
        assert_eq!(resp.status, 204, "{proto:?}");
        assert_eq!(auth.count(), before);
        let resp = over(&h, proto, Request::get("cors.test", "/api")).await;
        assert_eq!(resp.status, 401, "{proto:?}");
        assert_eq!(auth.count(), before + 1);
    }
    let metrics = h.metrics().await;
    for (outcome, n) in [
        ("allowed", 2.0),
        ("unauthorized", 8.0),
        ("forbidden", 2.0),
        ("unreachable", 2.0),
    ] {
        let name =
            format!("teapot_auth_requests_total{{outcome=\"{outcome}\",tenant=\"_operator\"}}");
        assert_eq!(metric(&metrics, &name), Some(n), "{name}\n{metrics}");
    }
}

/// Tenant alpha's authentication service holds every sub-request; its
/// bound (2 here) fills and its next request gets 503 at once, while
/// tenant beta's requests, with and without its own authentication, are
/// all served. Released, alpha's held requests are forwarded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_stuck_auth_service_leaves_the_others_alone() {
    let (alpha_ip, beta_ip) = (node_address(false), node_address(true));
    let (_alpha_web, mut objects) = tenant_backend("alpha", alpha_ip).await;
    let (_beta_web, beta) = tenant_backend("beta", beta_ip).await;
    objects.extend(beta);
    let alpha_auth = auth_service(alpha_ip).await;
    let beta_auth = auth_service(beta_ip).await;
    objects.extend(alpha_auth.service("tenant-alpha"));
    objects.extend(beta_auth.service("tenant-beta"));
    objects.extend([
        annotated(
            "tenant-alpha",
            "app.alpha.lb.localhost",
            "web",
            &[("auth-url", "http://auth.tenant-alpha.svc/hold")],
        ),
        annotated(
            "tenant-beta",
            "app.beta.lb.localhost",
            "web",
            &[
                ("auth-url", "http://auth.tenant-beta.svc/allow"),
                ("auth-response-headers", "X-User"),
            ],
        ),
        simple_ingress("tenant-beta", "open", "open.beta.lb.localhost", "web"),
    ]);
    // No timeout within the test's reach: alpha's sub-requests wait until
    // released, whatever the machine's speed.
    let h = Harness::start_with_args(
        &[("tenants.yaml", docs(&objects))],
        &["--auth-concurrency", "2", "--auth-timeout-ms", "600000"],
    )
    .await;

    let held: Vec<_> = (0..2)
        .map(|i| {
            let http = h.proxy.http;
            let https = h.proxy.https;
            tokio::spawn(async move {
                let req = Request::get("app.alpha.lb.localhost", &format!("/held/{i}"));
                match i {
                    0 => send(http, &Transport::Plain, &req.proto(Proto::Http1)).await,
                    _ => {
                        let transport = Transport::tls_insecure("app.alpha.lb.localhost");
                        send(https, &transport, &req.proto(Proto::Http2)).await
                    }
                }
            })
        })
        .collect();
    eventually("alpha's two sub-requests held", REQUEST_TIMEOUT, || async {
        match alpha_auth.held.load(Ordering::SeqCst) {
            2 => Ok(()),
            n => Err(n),
        }
    })
    .await;

    // Alpha's bound is full: 503 at once, on both versions, nothing sent
    // to its authentication service.
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("app.alpha.lb.localhost", "/more")).await;
        assert_proxy_answer(&resp, 503, &format!("alpha over its bound, {proto:?}"));
    }
    assert_eq!(alpha_auth.count(), 2);
    // Beta is served, with and without its own authentication.
    for proto in BOTH {
        for _ in 0..5 {
            let resp = over(&h, proto, Request::get("app.beta.lb.localhost", "/")).await;
            assert_eq!(
                resp.status,
                200,
                "beta with auth, {proto:?}: {}",
                resp.text()
            );
            assert_eq!(resp.json().unwrap()["headers"]["X-User"], json!(["ann"]));
            let resp = over(&h, proto, Request::get("open.beta.lb.localhost", "/")).await;
            assert_eq!(resp.status, 200, "beta without auth, {proto:?}");
        }
    }
    assert_eq!(beta_auth.count(), 10);

    alpha_auth.release.send_replace(true);
    for task in held {
        let resp = task.await.unwrap();
        assert_eq!(
            resp.status,
            200,
            "a held request, released: {}",
            resp.text()
        );
        assert_eq!(resp.json().unwrap()["headers"]["X-User"], json!(null));
    }
    // The bound is free again.
    let resp = over(
        &h,
        Proto::Http1,
        Request::get("app.alpha.lb.localhost", "/"),
    )
    .await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    let metrics = h.metrics().await;
    let count = |tenant: &str, outcome: &str| {
        let name =
            format!("teapot_auth_requests_total{{outcome=\"{outcome}\",tenant=\"{tenant}\"}}");
        metric(&metrics, &name)
    };
    assert_eq!(count("alpha", "busy"), Some(2.0), "{metrics}");
    assert_eq!(count("alpha", "allowed"), Some(3.0), "{metrics}");
    assert_eq!(count("beta", "allowed"), Some(10.0), "{metrics}");
}

/// A tenant's `auth-url` outside its own Services and nodes is refused
/// (at admission, naming the Ingress and the annotation) and never
/// called; its own Service is asked, and its other routes are served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenants_auth_url_stays_inside_the_tenant() {
    let ip = node_address(false);
    let (_web, mut objects) = tenant_backend("gamma", ip).await;
    let own = auth_service(ip).await;
    objects.extend(own.service("tenant-gamma"));
    // A service on this machine that is not the tenant's: loopback.
    let outsider = auth_service("127.0.0.1".parse().unwrap()).await;
    let url = format!("http://127.0.0.1:{}/allow", outsider.addr.port());
    objects.extend([
        annotated(
            "tenant-gamma",
            "app.gamma.lb.localhost",
            "web",
            &[
                ("auth-url", "http://auth.tenant-gamma.svc/allow"),
                ("auth-response-headers", "X-User"),
            ],
        ),
        annotated(
            "tenant-gamma",
            "stolen.gamma.lb.localhost",
            "web",
            &[("auth-url", &url)],
        ),
    ]);
    let h = Harness::start(&[("tenants.yaml", docs(&objects))]).await;
    for proto in BOTH {
        let resp = over(&h, proto, Request::get("app.gamma.lb.localhost", "/")).await;
        assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        assert_eq!(resp.json().unwrap()["headers"]["X-User"], json!(["ann"]));
        let resp = over(&h, proto, Request::get("stolen.gamma.lb.localhost", "/")).await;
        assert_ne!(resp.status, 200, "{proto:?}: {}", resp.text());
    }
    assert_eq!(own.count(), 2);
    assert_eq!(outsider.count(), 0);
    let status = h.status().await;
    let problem = status["problems"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["object"] == "Ingress tenant-gamma/stolen.gamma.lb.localhost")
        .unwrap_or_else(|| panic!("the Ingress is reported: {status:#}"));
    assert_eq!(
        problem["field"],
        format!("metadata.annotations[\"{NGINX}auth-url\"]"),
        "{problem}"
    );
    let message = problem["message"].as_str().unwrap();
    assert!(message.contains("nodeCIDRs"), "{message}");
}
