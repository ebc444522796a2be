//! The Gateway API's traffic policy filters end to end (docs/gateway-api.md,
//! "Traffic policy"): `teapot proxy --manifests` with HTTPRoutes carrying
//! the CORS filter, in front of an echo backend, over HTTP/1.1 and
//! cleartext HTTP/2 (the one request pipeline), and with `curl` as the
//! browser-side CORS client.
//!
//! Run with `cargo test -p teapot --test gateway gateway_policy_e2e::`.

use crate::common;

use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request, Response};

const NS: &str = "gw-policy";
const HOST: &str = "app.example.com";

fn options(target: &str, origin: &str, method: &str, headers: Option<&str>) -> Request {
    let mut req = Request {
        method: "OPTIONS".into(),
        ..Request::get(HOST, target)
    }
    .header("Origin", origin)
    .header("Access-Control-Request-Method", method);
    if let Some(h) = headers {
        req = req.header("Access-Control-Request-Headers", h);
    }
    req
}

fn absent(resp: &Response, name: &str) -> bool {
    resp.headers.get(name).is_none()
}

/// `curl` as a browser's preflight: the status line and the CORS fields,
/// lowercased, one per line.
fn curl_preflight(port: u16, h2: bool, target: &str, origin: &str) -> (u16, Vec<String>) {
    let url = format!("http://{HOST}:{port}{target}");
    let resolve = format!("{HOST}:{port}:127.0.0.1");
    let mut args = vec![
        "-s",
        "-o",
        "/dev/null",
        "-D",
        "-",
        "-X",
        "OPTIONS",
        "--resolve",
        &resolve,
        "-H",
    ];
    let origin = format!("Origin: {origin}");
    args.push(&origin);
    args.extend(["-H", "Access-Control-Request-Method: PUT"]);
    if h2 {
        args.push("--http2-prior-knowledge");
    }
    args.push(&url);
    let out = std::process::Command::new("curl")
        .args(&args)
        .output()
        .expect("curl runs");
    let text = String::from_utf8_lossy(&out.stdout).to_lowercase();
    let mut lines = text.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line from curl: {text:?}"));
    let cors = lines
        .filter(|l| l.starts_with("access-control-"))
        .map(|l| l.trim().to_string())
        .collect();
    (status, cors)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cors_filter_answers_preflights_and_marks_responses() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = vec![gateway_gw(
        NS,
        json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
    )];
    objects.push(http_route(
        NS,
        "app",
        json!({ "name": "gw" }),
        &[HOST],
        json!([
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/api" } }],
                "filters": [{ "type": "CORS", "cors": {
                    "allowOrigins": ["https://www.app.example", "https://*.corp.example"],
                    "allowMethods": ["GET", "PUT"],
                    "allowHeaders": ["X-Api-Key"],
                    "exposeHeaders": ["X-Total"],
                    "allowCredentials": true,
                    "maxAge": 600,
                } }],
                "backendRefs": [{ "name": "web", "port": 80 }],
            },
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/open" } }],
                "filters": [{ "type": "CORS", "cors": {
                    "allowOrigins": ["*"],
                    "allowMethods": ["*"],
                    "allowHeaders": ["*"],
                    "allowCredentials": true,
                } }],
                "backendRefs": [{ "name": "web", "port": 80 }],
            },
            {
                "matches": [{ "path": { "type": "PathPrefix", "value": "/plain" } }],
                "backendRefs": [{ "name": "web", "port": 80 }],
            },
        ]),
    ));
    objects.extend(echo_service(NS, "web", &[&backend]));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    h.wait_status("the route accepted", |s| {
        s["gatewayAPI"]["httpRoutes"][0]["status"]["parents"][0]["conditions"]
            .as_array()
            .is_some_and(|c| {
                c.iter()
                    .any(|c| c["type"] == "Accepted" && c["status"] == "True")
            })
    })
    .await;

    let mut forwarded = 0;
    for proto in [Proto::Http1, Proto::Http2] {
        let harness = &h;
        let send = |req: Request| async move { harness.send(&req.proto(proto)).await };
        // A preflight from a listed origin, under a multi-label wildcard.
        let pre = send(options(
            "/api/items",
            "https://a.b.corp.example",
            "PUT",
            Some("X-Api-Key"),
        ))
        .await;
        assert_eq!(pre.status, 204, "{proto:?}: {}", pre.text());
        assert_eq!(
            header(&pre, "access-control-allow-origin"),
            "https://a.b.corp.example"
        );
        assert_eq!(header(&pre, "access-control-allow-methods"), "GET, PUT");
        assert_eq!(header(&pre, "access-control-allow-headers"), "X-Api-Key");
        assert_eq!(header(&pre, "access-control-allow-credentials"), "true");
        assert_eq!(header(&pre, "access-control-expose-headers"), "X-Total");
        assert_eq!(header(&pre, "access-control-max-age"), "600");

        // A preflight from another origin: answered, with nothing.
        let refused = send(options("/api/items", "https://evil.example", "PUT", None)).await;
        assert_eq!(refused.status, 204, "{proto:?}");
        assert!(absent(&refused, "access-control-allow-origin"), "{proto:?}");

        // The actual request: forwarded, origin and credentials on the
        // response, never the preflight's fields.
        let actual =
            send(Request::get(HOST, "/api/items").header("Origin", "https://www.app.example"))
                .await;
        assert_eq!(actual.status, 200, "{proto:?}");
        forwarded += 1;
        assert_eq!(actual.json().unwrap()["path"], "/api/items");
        assert_eq!(
            header(&actual, "access-control-allow-origin"),
            "https://www.app.example"
        );
        assert_eq!(header(&actual, "access-control-allow-credentials"), "true");
        assert_eq!(header(&actual, "access-control-expose-headers"), "X-Total");
        assert!(absent(&actual, "access-control-allow-methods"), "{proto:?}");
        assert!(absent(&actual, "access-control-max-age"), "{proto:?}");

        // Another origin's actual request is forwarded without fields.
        let other =
            send(Request::get(HOST, "/api/items").header("Origin", "https://evil.example")).await;
        assert_eq!(other.status, 200, "{proto:?}");
        forwarded += 1;
        assert!(absent(&other, "access-control-allow-origin"), "{proto:?}");

        // `*` with credentials: what the request asked, never `*`.
        let open = send(options(
            "/open",
            "https://x.example",
            "DELETE",
            Some("x-a, x-b"),
        ))
        .await;
        assert_eq!(open.status, 204, "{proto:?}");
        assert_eq!(
            header(&open, "access-control-allow-origin"),
            "https://x.example"
        );
        assert_eq!(header(&open, "access-control-allow-methods"), "DELETE");
        assert_eq!(header(&open, "access-control-allow-headers"), "x-a, x-b");
        assert_eq!(header(&open, "access-control-max-age"), "5", "the default");

        // A rule without the filter: its preflight is the backend's.
        let plain = send(options("/plain", "https://www.app.example", "PUT", None)).await;
        assert_eq!(plain.status, 200, "{proto:?}");
        forwarded += 1;
        assert!(absent(&plain, "access-control-allow-origin"), "{proto:?}");
    }

    // A real client process, over both HTTP versions.
    for h2 in [false, true] {
        let (status, fields) =
            curl_preflight(h.proxy.http.port(), h2, "/api/x", "https://www.app.example");
        assert_eq!(status, 204, "curl (h2: {h2})");
        for want in [
            "access-control-allow-origin: https://www.app.example",
            "access-control-allow-methods: get, put",
            "access-control-allow-credentials: true",
        ] {
            assert!(
                fields.iter().any(|f| f == want),
                "curl (h2: {h2}): {want} not in {fields:?}"
            );
        }
    }
    assert_eq!(
        backend.requests(),
        forwarded,
        "preflights were answered by teapot"
    );
    // What the policy answered, counted by reason.
    let metrics = h.metrics().await;
    let answered = |reason: &str| {
        metric(
            &metrics,
            &format!("teapot_policy_answers_total{{reason=\"{reason}\",tenant=\"_operator\"}}"),
        )
    };
    assert_eq!(answered("cors_preflight"), Some(6.0), "{metrics}");
    assert_eq!(answered("cors_preflight_refused"), Some(2.0), "{metrics}");
}
