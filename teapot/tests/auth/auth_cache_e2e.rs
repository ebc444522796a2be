//! `auth-cache-key` / `auth-cache-duration` through the real `teapot
//! proxy` binary, over HTTP/1.1 and HTTP/2: the `auth-url` service is
//! asked once per key within the duration, its answer (a yes with its
//! fields, or a 401) standing for the next requests of that key; a
//! request whose key is empty is always asked about; a key teapot cannot
//! read leaves every request asked about.
//!
//! Run with `cargo test -p teapot --test auth auth_cache_e2e::`.

use crate::common;

use common::auth_service::AuthService;
use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request};

const NS: &str = "authcache";

const ANSWERS: &[common::auth_service::Answer] = &[
    ("/allow", 200, &[("x-user", "ann")]),
    (
        "/unauthorized",
        401,
        &[("www-authenticate", "Basic realm=\"sso\"")],
    ),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_service_is_asked_once_per_key_within_the_duration() {
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ANSWERS, "/hold").await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.extend(auth.service(NS));
    let url = |path: &str| format!("http://auth.{NS}.svc.cluster.local/{path}");
    let (allow, unauthorized) = (url("allow"), url("unauthorized"));
    for (host, auth_url, key) in [
        ("cached.test", &allow, "$http_x_token"),
        ("refused.test", &unauthorized, "$remote_user$http_x_token"),
        ("unread.test", &allow, "$upstream_addr"),
    ] {
        objects.push(annotated(
            NS,
            host,
            "web",
            &[
                ("auth-url", auth_url),
                ("auth-response-headers", "X-User"),
                ("auth-cache-key", key),
                ("auth-cache-duration", "200 202 401 5m"),
            ],
        ));
    }
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    let asked = || auth.seen.lock().unwrap().len();
    let get = |host: &'static str, token: Option<&'static str>, proto: Proto| {
        let h = &h;
        async move {
            let mut req = Request::get(host, "/");
            if let Some(t) = token {
                req = req.header("X-Token", t);
            }
            over(h, proto, req).await
        }
    };
    const N: usize = 6;
    // One key: asked once for N requests over both protocols, each
    // forwarded with the kept answer's field.
    for n in 0..N {
        let resp = get(
            "cached.test",
            Some("a"),
            [Proto::Http1, Proto::Http2][n % 2],
        )
        .await;
        assert_eq!(resp.status, 200, "{}", resp.text());
        assert_eq!(resp.json().unwrap()["headers"]["X-User"], json!(["ann"]));
    }
    assert_eq!(asked(), 1);
    // Another key: asked once more.
    for _ in 0..N {
        assert_eq!(
            get("cached.test", Some("b"), Proto::Http2).await.status,
            200
        );
    }
    assert_eq!(asked(), 2);
    // No key: asked each time.
    for _ in 0..3 {
        assert_eq!(get("cached.test", None, Proto::Http1).await.status, 200);
    }
    assert_eq!(asked(), 5);
    // A refusal is kept too (401 is listed).
    for _ in 0..N {
        let resp = get("refused.test", Some("a"), Proto::Http1).await;
        assert_eq!(resp.status, 401);
    }
    assert_eq!(asked(), 6);
    // A key teapot cannot read: served, every request asked about.
    for _ in 0..3 {
        assert_eq!(
            get("unread.test", Some("a"), Proto::Http1).await.status,
            200
        );
    }
    assert_eq!(asked(), 9);
}
