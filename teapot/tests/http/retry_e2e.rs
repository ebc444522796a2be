//! End-to-end tests of retries through the real `teapot proxy` binary,
//! over HTTP/1.1 and HTTP/2: an HTTPRoute rule's `retry` (GEP-1731) and
//! ingress-nginx's `proxy-next-upstream*`, one policy in the engines
//! (`teapot_h1::retry`):
//!
//! - a backend answering 503 twice then 200: the client gets the 200,
//!   and the backend saw three tries; failing three times with two
//!   retries allowed, the client gets the last 503;
//! - a backend closing the connection without an answer is retried (502
//!   without `retry`; 503 once the retries are spent);
//! - a try slower than `timeouts.backendRequest` is abandoned and retried;
//!   `timeouts.request` bounds all tries together (504);
//! - a closed port beside a live endpoint: every request answered 200;
//! - `proxy-next-upstream: http_503` moves a request from an endpoint
//!   answering 503 to the next one, never back to the same;
//! - a rule asking more than teapot's bounds (attempts, backoff, codes)
//!   is not served and its route says which field;
//! - a retried answer read whole leaves its connection to the next try
//!   (one backend connection for three tries, both client versions);
//! - h2c/gRPC backends (an HTTPRoute to an `appProtocol:
//!   kubernetes.io/h2c` Service, an Ingress with `backend-protocol: GRPC`
//!   and `proxy-next-upstream`): the same cases, each try getting the
//!   whole body; a gRPC error (200 + `grpc-status`) is relayed; a body
//!   past the 64 KiB teapot keeps is not retried.
//!
//! Run with `cargo test -p teapot --test http retry_e2e::`.

use crate::common;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{Value, json};
use teapot_testkit::certs::{self, TestCa};
use teapot_testkit::client::{Proto, Request};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

const BOTH: [Proto; 2] = [Proto::Http1, Proto::Http2];
const NS: &str = "retry-e2e";
const HOST: &str = "retry.example.com";

/// A backend that fails the first tries of each request id as its query
/// says (as echo-basic's `/retry/` simulation): `id=ID&fail=N`, each
/// failing try with status `code` (or, without one, by closing the
/// connection), after `delay` milliseconds when given; later tries get
/// 200 with `tries=N` in the body. Every try of every id is counted.
/// With `always`, every request is answered with that status instead.
#[derive(Clone, Default)]
struct Scripted {
    tries: Arc<Mutex<HashMap<String, u32>>>,
    always: Option<u16>,
    /// Connections accepted.
    connections: Arc<AtomicU32>,
}

impl Scripted {
    async fn start(self) -> SocketAddr {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                self.connections.fetch_add(1, Ordering::Relaxed);
                tokio::spawn(self.clone().serve(stream));
            }
        });
        addr
    }

    fn tries(&self, id: &str) -> u32 {
        self.tries.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    async fn serve(self, mut stream: TcpStream) {
        let mut buf = Vec::new();
        loop {
            let Some(head) = common::read_head(&mut stream, &mut buf).await else {
                return;
            };
            let target = head.split(' ').nth(1).unwrap_or("/").to_string();
            let query = target.split_once('?').map_or("", |(_, q)| q);
            let arg = |name: &str| {
                query
                    .split('&')
                    .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                    .map(str::to_string)
            };
            let id = arg("id").unwrap_or_default();
            let fail: u32 = arg("fail").and_then(|f| f.parse().ok()).unwrap_or(0);
            let seen = {
                let mut tries = self.tries.lock().unwrap();
                let n = tries.entry(id).or_default();
                *n += 1;
                *n
            };
            let (status, body) = if let Some(code) = self.always {
                (code, format!("always {code}"))
            } else if seen <= fail {
                if let Some(ms) = arg("delay").and_then(|d| d.parse().ok()) {
                    tokio::time::sleep(Duration::from_millis(ms)).await;
                }
                match arg("code").and_then(|c| c.parse::<u16>().ok()) {
                    Some(code) => (code, format!("failed try {seen}")),
                    None => return,
                }
            } else {
                (200, format!("tries={seen}"))
            };
            let answer = format!(
                "HTTP/1.1 {status} X\r\ncontent-length: {}\r\ncontent-type: text/plain\r\n\r\n{body}",
                body.len()
            );
            if stream.write_all(answer.as_bytes()).await.is_err() {
                return;
            }
        }
    }
}

/// Service `name` (port 80) with one endpoint per port, all on loopback.
fn service_on(name: &str, ports: &[u16]) -> Vec<Value> {
    let mut out = vec![service(NS, name, &[(Some("http"), 80)])];
    for (i, port) in ports.iter().enumerate() {
        out.push(slice(
            NS,
            &format!("{name}-{i}"),
            name,
            &[(Some("http"), *port)],
            &[("127.0.0.1", true)],
        ));
    }
    out
}

fn rule(prefix: &str, service: &str, extra: Value) -> Value {
    let mut rule = json!({
        "matches": [{ "path": { "type": "PathPrefix", "value": prefix } }],
        "backendRefs": [{ "name": service, "port": 80 }],
    });
    for (k, v) in extra.as_object().unwrap() {
        rule[k] = v.clone();
    }
    rule
}

fn gateway() -> Value {
    gateway_gw(
        NS,
        json!([
            { "name": "http", "protocol": "HTTP", "port": 80 },
            {
                "name": "https", "protocol": "HTTPS", "port": 443,
                "tls": { "mode": "Terminate", "certificateRefs": [{ "name": "cert" }] },
            },
        ]),
    )
}

static NEXT_ID: AtomicU32 = AtomicU32::new(0);

/// A request id no other request of the test uses.
fn id() -> String {
    let n = NEXT_ID.fetch_add(1, Ordering::Relaxed);
    format!("r{n}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_route_retries_over_http1_and_http2() {
    let backend = Scripted::default();
    let port = backend.clone().start().await.port();
    let dead = teapot_testkit::l4::ClosedPort::new();
    let ca = TestCa::new("retry e2e");
    let cert = ca.issue(&[HOST]);
    let rules = json!([
        rule(
            "/code",
            "web",
            json!({ "retry": { "codes": [503], "attempts": 2 } })
        ),
        rule("/error", "web", json!({ "retry": { "attempts": 2 } })),
        rule("/plain", "web", json!({})),
        rule(
            "/slow",
            "web",
            json!({ "retry": { "attempts": 2 }, "timeouts": { "backendRequest": "300ms" } }),
        ),
        rule(
            "/budget",
            "web",
            json!({
                "retry": { "codes": [500], "attempts": 5 },
                "timeouts": { "backendRequest": "300ms", "request": "500ms" },
            }),
        ),
        rule(
            "/backoff",
            "web",
            json!({ "retry": { "codes": [503], "attempts": 1, "backoff": "200ms" } }),
        ),
        rule("/dead", "half", json!({ "retry": { "attempts": 1 } })),
        // One backend per client version, used by one request each.
        rule(
            "/reuse1",
            "again1",
            json!({ "retry": { "codes": [503], "attempts": 2 } }),
        ),
        rule(
            "/reuse2",
            "again2",
            json!({ "retry": { "codes": [503], "attempts": 2 } }),
        ),
    ]);
    let mut objects = vec![
        gateway_class(),
        gateway(),
        http_route(NS, "retries", json!({ "name": "gw" }), &[HOST], rules),
        // Bounds: a rule asking more than teapot serves is refused.
        http_route(
            NS,
            "greedy",
            json!({ "name": "gw" }),
            &["greedy.example.com"],
            json!([rule("/", "web", json!({ "retry": { "attempts": 1000 } }))]),
        ),
    ];
    objects.extend(service_on("web", &[port]));
    objects.extend(service_on("half", &[dead.port(), port]));
    let again = [Scripted::default(), Scripted::default()];
    for (i, backend) in again.iter().enumerate() {
        let port = backend.clone().start().await.port();
        objects.extend(service_on(&format!("again{}", i + 1), &[port]));
    }
    let h = Harness::start(&[
        ("gw.yaml", docs(&objects)),
        ("cert.yaml", certs::tls_secret_yaml(NS, "cert", &cert)),
    ])
    .await;
    eventually("the route", Duration::from_secs(10), || async {
        let r = h.get(HOST, "/plain").await;
        if r.status == 200 {
            return Ok(());
        }
        Err((r.status, h.status().await["gatewayAPI"].to_string()))
    })
    .await;

    for proto in BOTH {
        let get = |target: String| over(&h, proto, Request::get(HOST, &target));

        // 503 twice, then 200: the client sees the 200 of the third try.
        let i = id();
        let r = get(format!("/code?id={i}&fail=2&code=503")).await;
        assert_eq!(r.status, 200, "{proto:?}: {}", r.text());
        assert_eq!(r.text(), "tries=3", "{proto:?}");
        // Three failures with two retries: the last answer, as it is.
        let i = id();
        let r = get(format!("/code?id={i}&fail=3&code=503")).await;
        assert_eq!(
            (r.status, r.text()),
            (503, "failed try 3".into()),
            "{proto:?}"
        );
        assert_eq!(backend.tries(&i), 3, "{proto:?}: attempts + 1 tries");
        // A code not listed is answered at once.
        let i = id();
        let r = get(format!("/code?id={i}&fail=1&code=500")).await;
        assert_eq!(r.status, 500, "{proto:?}");
        assert_eq!(backend.tries(&i), 1, "{proto:?}");

        // Closed without an answer: a connection error, retried...
        let i = id();
        let r = get(format!("/error?id={i}&fail=2")).await;
        assert_eq!((r.status, r.text()), (200, "tries=3".into()), "{proto:?}");
        // ...and not without `retry` (beyond the one retry of a pooled
        // connection found closed, which any route gets).
        let i = id();
        let r = get(format!("/plain?id={i}&fail=2")).await;
        assert_eq!(r.status, 502, "{proto:?}");
        // Spent: 503 (the Gateway API's answer to a connection error).
        let i = id();
        let r = get(format!("/error?id={i}&fail=5")).await;
        assert_eq!(r.status, 503, "{proto:?}");
        assert_eq!(backend.tries(&i), 3, "{proto:?}");

        // Slower than backendRequest: abandoned and retried.
        let i = id();
        let r = get(format!("/slow?id={i}&fail=1&delay=1000&code=500")).await;
        assert_eq!((r.status, r.text()), (200, "tries=2".into()), "{proto:?}");
        let i = id();
        let r = get(format!("/slow?id={i}&fail=3&delay=1000&code=500")).await;
        assert_eq!(r.status, 504, "{proto:?}");

        // `request` bounds every try together: 504 once spent, though
        // retries were left.
        let i = id();
        let started = std::time::Instant::now();
        let r = get(format!("/budget?id={i}&fail=5&delay=200&code=500")).await;
        assert_eq!(r.status, 504, "{proto:?}: {}", r.text());
        assert!(backend.tries(&i) < 5, "{proto:?}: {}", backend.tries(&i));
        assert!(started.elapsed() < Duration::from_secs(3), "{proto:?}");

        // The backoff is waited between tries.
        let i = id();
        let started = std::time::Instant::now();
        let r = get(format!("/backoff?id={i}&fail=1&code=503")).await;
        assert_eq!(r.status, 200, "{proto:?}");
        assert!(started.elapsed() >= Duration::from_millis(200), "{proto:?}");

        // A closed port beside a live endpoint: every request answered.
        for _ in 0..4 {
            let r = get(format!("/dead?id={}", id())).await;
            assert_eq!(r.status, 200, "{proto:?}: {}", r.text());
        }

        // A retried answer read whole leaves its connection to the next
        // try: three tries, one connection.
        let (n, backend) = match proto {
            Proto::Http1 => (1, &again[0]),
            Proto::Http2 => (2, &again[1]),
        };
        let i = id();
        let r = get(format!("/reuse{n}?id={i}&fail=2&code=503")).await;
        assert_eq!((r.status, r.text()), (200, "tries=3".into()), "{proto:?}");
        assert_eq!(
            backend.connections.load(Ordering::Relaxed),
            1,
            "{proto:?}: the retries reused the connection"
        );
    }

    // The greedy rule is not served, and its route names the field.
    let status = h
        .wait_status("the greedy route's refusal", |s| {
            s.to_string().contains("retry.attempts 1000")
        })
        .await;
    assert!(
        status.to_string().contains("PartiallyInvalid")
            || status.to_string().contains("UnsupportedValue")
    );
    assert_eq!(h.get("greedy.example.com", "/").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_next_upstream_moves_to_the_next_endpoint_over_http1_and_http2() {
    // One endpoint answers every request 503, the other 200.
    let failing = Scripted {
        always: Some(503),
        ..Scripted::default()
    };
    let bad = failing.clone().start().await.port();
    let good = Scripted::default();
    let ok = good.clone().start().await.port();
    let mut objects = service_on("web", &[bad, ok]);
    objects.push(annotated(
        NS,
        "next.test",
        "web",
        &[
            ("proxy-next-upstream", "error timeout http_503"),
            ("proxy-next-upstream-tries", "3"),
        ],
    ));
    objects.push(annotated(NS, "plain.test", "web", &[]));
    let h = Harness::start(&[("ingress.yaml", docs(&objects))]).await;
    eventually("the Ingress", Duration::from_secs(10), || async {
        let r = h.get("plain.test", "/").await;
        (r.status == 200 || r.status == 503)
            .then_some(())
            .ok_or(r.status)
    })
    .await;
    for proto in BOTH {
        // Round-robin sends half of them to the failing endpoint first;
        // each goes on to the other.
        for _ in 0..6 {
            let target = "/?id=next";
            let r = over(&h, proto, Request::get("next.test", target)).await;
            assert_eq!(r.status, 200, "{proto:?}: {}", r.text());
        }
        // Without the annotation, the failing endpoint's 503 is answered.
        let mut statuses = Vec::new();
        for _ in 0..4 {
            let target = "/?id=plain";
            statuses.push(
                over(&h, proto, Request::get("plain.test", target))
                    .await
                    .status,
            );
        }
        assert!(statuses.contains(&503), "{proto:?}: {statuses:?}");
    }
    // Some went to the failing endpoint first, none of them twice (a
    // retry goes to the next endpoint, and there are two).
    let (failed, served) = (failing.tries("next"), good.tries("next"));
    assert!((1..=12).contains(&failed), "{failed}");
    assert_eq!(served, 12);
}

/// An h2c backend (gRPC's transport) scripted as [`Scripted`] is: the
/// query's `id`, `fail`, `code` and `delay`, each failing try answered
/// with `code`, or, without one, with its stream reset (no answer head);
/// with `grpc=N` a failing try is gRPC's error answer instead, HTTP 200
/// with `grpc-status: N`. Each try's request body is kept. With
/// `always`, every call is answered with that status.
#[derive(Clone, Default)]
struct H2cScripted {
    tries: Arc<Mutex<HashMap<String, Vec<Bytes>>>>,
    always: Option<u16>,
}

impl H2cScripted {
    async fn start(self) -> u16 {
        let builder = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (builder, this) = (builder.clone(), self.clone());
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |req| this.clone().answer(req));
                    let _ = builder.serve_connection(TokioIo::new(tcp), service).await;
                });
            }
        });
        port
    }

    fn tries(&self, id: &str) -> u32 {
        self.bodies(id).len() as u32
    }

    /// The request body of each try of `id`.
    fn bodies(&self, id: &str) -> Vec<Bytes> {
        self.tries
            .lock()
            .unwrap()
            .get(id)
            .cloned()
            .unwrap_or_default()
    }

    /// An `Err` resets the stream (hyper answers a service's error so).
    async fn answer(
        self,
        req: http::Request<hyper::body::Incoming>,
    ) -> Result<http::Response<Full<Bytes>>, std::io::Error> {
        let query = req.uri().query().unwrap_or("").to_string();
        let arg = |name: &str| {
            query
                .split('&')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
                .map(str::to_string)
        };
        let body = req
            .into_body()
            .collect()
            .await
            .map_err(std::io::Error::other)?;
        let id = arg("id").unwrap_or_default();
        let fail: usize = arg("fail").and_then(|f| f.parse().ok()).unwrap_or(0);
        let seen = {
            let mut tries = self.tries.lock().unwrap();
            let bodies = tries.entry(id).or_default();
            bodies.push(body.to_bytes());
            bodies.len()
        };
        let answer = |status: u16, grpc: &str, text: String| {
            Ok(http::Response::builder()
                .status(status)
                .header("content-type", "application/grpc")
                .header("grpc-status", grpc)
                .body(Full::new(Bytes::from(text)))
                .unwrap())
        };
        if let Some(code) = self.always {
            return answer(code, "14", format!("always {code}"));
        }
        if seen > fail {
            return answer(200, "0", format!("tries={seen}"));
        }
        if let Some(ms) = arg("delay").and_then(|d| d.parse().ok()) {
            tokio::time::sleep(Duration::from_millis(ms)).await;
        }
        if let Some(grpc) = arg("grpc") {
            return answer(200, &grpc, format!("failed try {seen}"));
        }
        match arg("code").and_then(|c| c.parse::<u16>().ok()) {
            Some(code) => answer(code, "14", format!("failed try {seen}")),
            None => Err(std::io::Error::other("reset")),
        }
    }
}

/// Service `name` (port 80, `appProtocol: kubernetes.io/h2c`) with one
/// endpoint per port on loopback.
fn h2c_service_on(name: &str, ports: &[u16]) -> Vec<Value> {
    let mut out = service_on(name, ports);
    out[0]["spec"]["ports"][0]["appProtocol"] = json!("kubernetes.io/h2c");
    out
}

/// A unary gRPC-shaped call: POST with `body`, over HTTP/2.
fn call(host: &str, target: &str, body: &[u8]) -> Request {
    let mut r = Request::get(host, target)
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .proto(Proto::Http2);
    r.method = "POST".into();
    r.body = body.to_vec();
    r
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_and_grpc_backends_are_retried() {
    let backend = H2cScripted::default();
    let port = backend.clone().start().await;
    let dead = teapot_testkit::l4::ClosedPort::new();
    let failing = H2cScripted {
        always: Some(503),
        ..H2cScripted::default()
    };
    let bad = failing.clone().start().await;
    let good = H2cScripted::default();
    let ok = good.clone().start().await;
    let ca = TestCa::new("retry e2e");
    let cert = ca.issue(&[HOST]);
    let rules = json!([
        rule(
            "/code",
            "calls",
            json!({ "retry": { "codes": [503], "attempts": 2 } })
        ),
        rule("/error", "calls", json!({ "retry": { "attempts": 2 } })),
        rule("/plain", "calls", json!({})),
        rule(
            "/slow",
            "calls",
            json!({ "retry": { "attempts": 2 }, "timeouts": { "backendRequest": "300ms" } }),
        ),
        rule(
            "/budget",
            "calls",
            json!({
                "retry": { "codes": [500], "attempts": 5 },
                "timeouts": { "backendRequest": "300ms", "request": "500ms" },
            }),
        ),
        rule("/dead", "half", json!({ "retry": { "attempts": 1 } })),
    ]);
    let mut objects = vec![
        gateway_class(),
        gateway(),
        http_route(NS, "calls", json!({ "name": "gw" }), &[HOST], rules),
    ];
    objects.extend(h2c_service_on("calls", &[port]));
    objects.extend(h2c_service_on("half", &[dead.port(), port]));
    // ingress-nginx's gRPC backends, one endpoint answering every call
    // 503, the other serving.
    objects.extend(service_on("mixed", &[bad, ok]));
    objects.push(annotated(
        NS,
        "grpc-next.test",
        "mixed",
        &[
            ("backend-protocol", "GRPC"),
            (
                "proxy-next-upstream",
                "error timeout http_503 non_idempotent",
            ),
            ("proxy-next-upstream-tries", "3"),
        ],
    ));
    objects.push(annotated(
        NS,
        "grpc-plain.test",
        "mixed",
        &[("backend-protocol", "GRPC")],
    ));
    let h = Harness::start(&[
        ("gw.yaml", docs(&objects)),
        ("cert.yaml", certs::tls_secret_yaml(NS, "cert", &cert)),
    ])
    .await;
    let send = |host: &'static str, target: String, body: Vec<u8>| {
        let h = &h;
        async move { over(h, Proto::Http2, call(host, &target, &body)).await }
    };
    eventually("the routes", Duration::from_secs(10), || async {
        let r = send(HOST, "/plain?id=ready".into(), Vec::new()).await;
        let i = send("grpc-plain.test", "/?id=ready".into(), Vec::new()).await;
        if r.status == 200 && (i.status == 200 || i.status == 503) {
            return Ok(());
        }
        Err((
            r.status,
            i.status,
            h.status().await["gatewayAPI"].to_string(),
        ))
    })
    .await;
    let body = b"\0\0\0\0\x05hello".to_vec();

    // 503 twice, then 200: the client sees the 200 of the third try, and
    // every try got the whole body.
    let i = id();
    let r = send(HOST, format!("/code?id={i}&fail=2&code=503"), body.clone()).await;
    assert_eq!((r.status, r.text()), (200, "tries=3".into()));
    assert_eq!(backend.bodies(&i), vec![Bytes::from(body.clone()); 3]);
    // Tries spent: the last status, as the backend sent it.
    let i = id();
    let r = send(HOST, format!("/code?id={i}&fail=3&code=503"), body.clone()).await;
    assert_eq!((r.status, r.text()), (503, "failed try 3".into()));
    assert_eq!(backend.tries(&i), 3, "attempts + 1 tries");
    // A code not listed is answered at once.
    let i = id();
    let r = send(HOST, format!("/code?id={i}&fail=1&code=500"), body.clone()).await;
    assert_eq!(r.status, 500);
    assert_eq!(backend.tries(&i), 1);
    // gRPC's own error (HTTP 200, grpc-status 14 UNAVAILABLE) is an
    // answer: GEP-1731's codes are HTTP statuses.
    let i = id();
    let r = send(HOST, format!("/code?id={i}&fail=1&grpc=14"), body.clone()).await;
    assert_eq!((r.status, header(&r, "grpc-status")), (200, "14"));
    assert_eq!(backend.tries(&i), 1);
    // A body past what teapot keeps to send again: streamed, not retried.
    let big = vec![7u8; 100 * 1024];
    let i = id();
    let r = send(HOST, format!("/code?id={i}&fail=1&code=503"), big.clone()).await;
    assert_eq!(r.status, 503);
    assert_eq!(backend.bodies(&i), vec![Bytes::from(big)]);

    // A stream reset without an answer: a connection error, retried...
    let i = id();
    let r = send(HOST, format!("/error?id={i}&fail=2"), body.clone()).await;
    assert_eq!((r.status, r.text()), (200, "tries=3".into()));
    // ...not without `retry`...
    let i = id();
    let r = send(HOST, format!("/plain?id={i}&fail=1"), body.clone()).await;
    assert_eq!(r.status, 502);
    assert_eq!(backend.tries(&i), 1);
    // ...and once spent, the Gateway API's 503.
    let i = id();
    let r = send(HOST, format!("/error?id={i}&fail=5"), body.clone()).await;
    assert_eq!(r.status, 503);
    assert_eq!(backend.tries(&i), 3);

    // Slower than backendRequest: abandoned and retried.
    let i = id();
    let target = format!("/slow?id={i}&fail=1&delay=1000&code=500");
    let r = send(HOST, target, body.clone()).await;
    assert_eq!((r.status, r.text()), (200, "tries=2".into()));
    // `request` bounds every try together: 504 though retries were left.
    let i = id();
    let target = format!("/budget?id={i}&fail=5&delay=200&code=500");
    let r = send(HOST, target, body.clone()).await;
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(backend.tries(&i) < 5, "{}", backend.tries(&i));

    // A closed port beside a live endpoint: every call answered.
    for _ in 0..4 {
        let r = send(HOST, format!("/dead?id={}", id()), body.clone()).await;
        assert_eq!(r.status, 200, "{}", r.text());
    }

    // proxy-next-upstream on a GRPC backend: each call that met the
    // failing endpoint goes on to the other, never back.
    for _ in 0..6 {
        let r = send(
            "grpc-next.test",
            "/pkg.Svc/Call?id=next".into(),
            body.clone(),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    let (failed, served) = (failing.tries("next"), good.tries("next"));
    assert!((1..=6).contains(&failed), "{failed}");
    assert_eq!(served, 6);
    // Without it, the failing endpoint's 503 is answered.
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let target = "/pkg.Svc/Call?id=plain".to_string();
        statuses.push(send("grpc-plain.test", target, body.clone()).await.status);
    }
    assert!(statuses.contains(&503), "{statuses:?}");
}
