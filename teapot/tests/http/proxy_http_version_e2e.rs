//! `proxy-http-version` and `connection-proxy-header` (ingress-nginx's
//! proxy.go and connection.go), and a RouteTrafficPolicy's `backendHTTP`
//! standing for them, through the real `teapot proxy` binary, from
//! HTTP/1.1 and HTTP/2 clients, to a backend that records each raw
//! request head it gets and the connection it came on:
//!
//! - `1.0`: the request line says `HTTP/1.0`, a body of known length goes
//!   with its `content-length`, a chunked upload (HTTP/1.1) or a stream
//!   without `content-length` (HTTP/2) is answered 411 and never reaches
//!   the backend, an `HTTP/1.0` answer whose body ends with the
//!   connection is relayed whole, and no connection is used twice;
//! - `connection-proxy-header`: the backend's `Connection` field, the
//!   client's own never passing; `close` keeps the connection out of the
//!   pool, as a route without either reuses it;
//! - a Gateway API route with a RouteTrafficPolicy `backendHTTP`: the same.
//!
//! Run with `cargo test -p teapot --test http proxy_http_version_e2e::`.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use serde_json::{Value, json};
use teapot_testkit::client::{Connection, Proto, Request, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "http-version";

/// The heads a [`RawBackend`] got: (connection number, head as text).
type Heads = Arc<Mutex<Vec<(usize, String)>>>;

/// A backend that answers every request with `x-conn` (the number of the
/// connection it came on) and the request's raw head as its body, and
/// keeps the connection open for more; `/close10` is answered
/// `HTTP/1.0 200` with no length, the body ending with the connection.
struct RawBackend {
    addr: SocketAddr,
    heads: Heads,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl RawBackend {
    async fn start() -> RawBackend {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let heads = Heads::default();
        let kept = heads.clone();
        let task = tokio::spawn(async move {
            let mut n = 0;
            while let Ok((stream, _)) = listener.accept().await {
                n += 1;
                tokio::spawn(serve(stream, n, kept.clone()));
            }
        });
        RawBackend { addr, heads, task }
    }

    /// The heads whose request line names `target`.
    fn heads_for(&self, target: &str) -> Vec<(usize, String)> {
        let line = format!(" {target} HTTP/");
        let heads = self.heads.lock().unwrap();
        heads
            .iter()
            .filter(|(_, h)| h.lines().next().is_some_and(|l| l.contains(&line)))
            .cloned()
            .collect()
    }
}

async fn serve(mut stream: TcpStream, conn: usize, heads: Heads) {
    let mut buf = Vec::new();
    loop {
        let Some(head) = common::read_head(&mut stream, &mut buf).await else {
            return;
        };
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (name, value) = l.split_once(':')?;
                name.eq_ignore_ascii_case("content-length")
                    .then(|| value.trim().parse().ok())?
            })
            .unwrap_or(0);
        // A chunked body (small here) ends with its last chunk.
        let chunked = head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked");
        let body_end = |buf: &[u8]| match chunked {
            true => buf
                .windows(5)
                .position(|w| w == b"0\r\n\r\n")
                .map(|i| i + 5),
            false => (buf.len() >= length).then_some(length),
        };
        let end = loop {
            if let Some(end) = body_end(&buf) {
                break end;
            }
            let mut chunk = [0u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        buf.drain(..end);
        heads.lock().unwrap().push((conn, head.clone()));
        if head.starts_with("GET /close10 ") {
            let _ = stream
                .write_all(
                    b"HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nclose-delimited body",
                )
                .await;
            return;
        }
        let answer = format!(
            "HTTP/1.1 200 OK\r\nx-conn: {conn}\r\ncontent-length: {}\r\n\r\n{head}",
            head.len()
        );
        if stream.write_all(answer.as_bytes()).await.is_err() {
            return;
        }
    }
}

/// `method target` on `host` over `proto` with `body` (HTTP/2: with
/// `content-length` when `known`, else a stream without one), on a new
/// connection; (status, `x-conn`, body).
async fn send_to(
    h: &Harness,
    proto: Proto,
    host: &str,
    (method, target): (&str, &str),
    body: Option<(&'static [u8], bool)>,
) -> (u16, String, String) {
    match proto {
        Proto::Http1 => {
            let mut req = Request::get(host, target);
            req.method = method.to_string();
            if let Some((bytes, _)) = body {
                req.body = bytes.to_vec();
            }
            // The client's Connection, and the field it names, stop here.
            let req = req
                .header("Connection", "keep-alive, x-hop")
                .header("x-hop", "1");
            let resp = over(h, Proto::Http1, req).await;
            let conn = resp
                .headers
                .get("x-conn")
                .map_or(String::new(), |v| v.to_str().unwrap().to_string());
            (resp.status, conn, resp.text())
        }
        Proto::Http2 => {
            let mut sender = h2c(h.proxy.http).await;
            let body = match body {
                Some((bytes, true)) => Full::new(Bytes::from_static(bytes)).boxed(),
                Some((bytes, false)) => {
                    let frames = vec![Ok::<_, Infallible>(Frame::data(Bytes::from_static(bytes)))];
                    StreamBody::new(futures::stream::iter(frames)).boxed()
                }
                None => Full::new(Bytes::new()).boxed(),
            };
            let request = http::Request::builder()
                .method(method)
                .uri(format!("http://{host}{target}"))
                .version(http::Version::HTTP_2)
                .body(body)
                .unwrap();
            sender.ready().await.unwrap();
            let resp = sender.send_request(request).await.expect("h2 response");
            let status = resp.status().as_u16();
            let conn = resp
                .headers()
                .get("x-conn")
                .map_or(String::new(), |v| v.to_str().unwrap().to_string());
            let body = resp.into_body().collect().await.unwrap().to_bytes();
            (status, conn, String::from_utf8_lossy(&body).into_owned())
        }
    }
}

/// A chunked upload over HTTP/1.1, written by hand; the whole answer.
async fn chunked_upload(h: &Harness, host: &str, target: &str) -> String {
    let mut tcp = TcpStream::connect(h.proxy.http).await.unwrap();
    let request = format!(
        "POST {target} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let read = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut answer),
    );
    read.await.expect("the answer and the close").unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

fn gateway_objects() -> Vec<Value> {
    vec![
        gateway_gw(
            NS,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            NS,
            "app",
            json!({ "name": "gw" }),
            &["gw.test"],
            json!([{ "backendRefs": [{ "name": "raw", "port": 80 }] }]),
        ),
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": "http10", "namespace": NS },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "app" }],
                "backendHTTP": { "version": "1.0", "connection": "keep-alive" },
            },
        }),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backends_head_is_the_routes_version_and_connection() {
    let backend = RawBackend::start().await;
    let mut objects = loopback_service(NS, "raw", backend.addr.port());
    for (host, pairs) in [
        ("v10.test", &[("proxy-http-version", "1.0")][..]),
        (
            "keep.test",
            &[("connection-proxy-header", "keep-alive")][..],
        ),
        (
            "both.test",
            &[
                ("proxy-http-version", "1.0"),
                ("connection-proxy-header", "keep-alive"),
            ][..],
        ),
        ("close.test", &[("connection-proxy-header", "close")][..]),
        ("plain.test", &[][..]),
    ] {
        objects.push(annotated(NS, host, "raw", pairs));
    }
    objects.extend(gateway_objects());
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--h2c", "--threads", "1"],
    )
    .await;
    for proto in [Proto::Http1, Proto::Http2] {
        let p = format!("{proto:?}").to_lowercase();
        let target = |name: &str| format!("/{p}/{name}");
        // HTTP/1.0, no Connection field; the client's never passes.
        let (status, _, head) = send_to(&h, proto, "v10.test", ("GET", &target("get")), None).await;
        assert_eq!(status, 200, "{proto:?}: {head}");
        assert!(
            head.starts_with(&format!("GET {} HTTP/1.0\r\n", target("get"))),
            "{proto:?}: {head}"
        );
        let lower = head.to_ascii_lowercase();
        assert!(
            !lower.contains("\r\nconnection:") && !lower.contains("\r\nx-hop:"),
            "{proto:?}: {head}"
        );
        // A body of known length keeps it.
        let (status, _, head) = send_to(
            &h,
            proto,
            "v10.test",
            ("POST", &target("post")),
            Some((b"hello", true)),
        )
        .await;
        assert_eq!(status, 200, "{proto:?}: {head}");
        assert!(head.starts_with("POST "), "{head}");
        assert!(head.contains(" HTTP/1.0\r\n"), "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("\r\ncontent-length: 5\r\n"),
            "{head}"
        );
        assert!(
            !head.to_ascii_lowercase().contains("transfer-encoding"),
            "{head}"
        );
        // One of unknown length: 411, and the backend never sees it.
        let upload = target("upload");
        let status = match proto {
            Proto::Http1 => {
                let answer = chunked_upload(&h, "v10.test", &upload).await;
                assert!(answer.starts_with("HTTP/1.1 411 "), "{answer}");
                411
            }
            Proto::Http2 => {
                let body = Some((&b"hello"[..], false));
                send_to(&h, proto, "v10.test", ("POST", &upload), body)
                    .await
                    .0
            }
        };
        assert_eq!(status, 411, "{proto:?}");
        assert_eq!(backend.heads_for(&upload), [], "{proto:?}");
        // The same upload to an HTTP/1.1 route goes, chunked.
        let upload = target("upload11");
        match proto {
            Proto::Http1 => {
                let answer = chunked_upload(&h, "plain.test", &upload).await;
                assert!(answer.starts_with("HTTP/1.1 200 "), "{answer}");
            }
            Proto::Http2 => {
                let body = Some((&b"hello"[..], false));
                let (status, _, head) =
                    send_to(&h, proto, "plain.test", ("POST", &upload), body).await;
                assert_eq!(status, 200, "{head}");
            }
        }
        let heads = backend.heads_for(&upload);
        assert!(
            heads[0]
                .1
                .to_ascii_lowercase()
                .contains("transfer-encoding: chunked"),
            "{heads:?}"
        );
        // An HTTP/1.0 answer without a length: its body ends with the
        // connection, and all of it reaches the client.
        let (status, _, body) = send_to(&h, proto, "v10.test", ("GET", "/close10"), None).await;
        assert_eq!((status, body.as_str()), (200, "close-delimited body"));
        // connection-proxy-header, alone and with 1.0.
        let (_, _, head) = send_to(&h, proto, "keep.test", ("GET", &target("keep")), None).await;
        assert!(head.contains(" HTTP/1.1\r\n"), "{head}");
        assert_eq!(
            head.to_ascii_lowercase().matches("\r\nconnection:").count(),
            1,
            "{head}"
        );
        assert!(head.contains("\r\nconnection: keep-alive\r\n"), "{head}");
        let (_, _, head) = send_to(&h, proto, "both.test", ("GET", &target("both")), None).await;
        assert!(head.contains(" HTTP/1.0\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: keep-alive\r\n"), "{head}");
        // The Gateway API route, through its RouteTrafficPolicy.
        let (status, _, head) = send_to(&h, proto, "gw.test", ("GET", &target("gw")), None).await;
        assert_eq!(status, 200, "{head}");
        assert!(head.contains(" HTTP/1.0\r\n"), "{head}");
        assert!(head.contains("\r\nconnection: keep-alive\r\n"), "{head}");
    }
    // Reuse, on one client connection per protocol (one serving thread):
    // a route without either reuses the backend's connection; HTTP/1.0 and
    // `Connection: close` never do, though the backend keeps it open.
    for proto in [Proto::Http1, Proto::Http2] {
        for (host, reused) in [
            ("plain.test", true),
            ("v10.test", false),
            ("close.test", false),
            ("gw.test", false),
        ] {
            // HTTP/2 with prior knowledge (`--h2c`).
            let mut conn = Connection::open(h.proxy.http, &Transport::Plain, proto)
                .await
                .unwrap();
            let mut conns = Vec::new();
            for i in 0..3 {
                let req = Request::get(host, &format!("/reuse/{proto:?}/{i}")).proto(proto);
                let resp = conn.send(&req).await.unwrap();
                assert_eq!(resp.status, 200, "{proto:?} {host}");
                conns.push(header(&resp, "x-conn").to_string());
            }
            let first = &conns[0];
            let same = conns.iter().all(|c| c == first);
            let distinct = conns
                .iter()
                .collect::<std::collections::BTreeSet<_>>()
                .len()
                == 3;
            if reused {
                assert!(same, "{proto:?} {host}: {conns:?}");
            } else {
                assert!(distinct, "{proto:?} {host}: {conns:?}");
            }
        }
    }
}

/// RouteTrafficPolicy's `satisfy`, `authCache` and `loadBalance` on
/// HTTPRoute rules with an ExternalAuth filter, as their annotations
/// on an Ingress: `satisfy: any` lets an allow-listed client in though
/// the service refuses (no sub-request made), `all` does not; `authCache`
/// asks the service once per key; `loadBalance: ewma` is accepted and
/// serves.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_traffic_policy_satisfy_auth_cache_and_ewma_serve_as_their_annotations() {
    use common::auth_service::AuthService;
    const ANSWERS: &[common::auth_service::Answer] = &[
        ("/check/cached", 200, &[]),
        ("/check/uncached", 200, &[]),
        ("/check/any", 401, &[]),
        ("/check/all", 401, &[]),
    ];
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ANSWERS, "/check/hold").await;
    let web = echo(NS, "web", "web-0").await;
    let filter = json!([{
        "type": "ExternalAuth",
        "externalAuth": {
            "protocol": "HTTP",
            "backendRef": { "name": "auth", "port": 80 },
            "http": { "path": "/check" },
        },
    }]);
    let rule = |name: &str, filters: &Value| {
        json!({
            "name": name,
            "matches": [{ "path": { "type": "PathPrefix", "value": format!("/{name}") } }],
            "filters": filters,
            "backendRefs": [{ "name": "web", "port": 80 }],
        })
    };
    let none = json!([]);
    let policy = |name: &str, spec: Value| {
        let mut spec = spec;
        spec["targetRefs"] = json!([{
            "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
            "name": "policies", "sectionName": name,
        }]);
        json!({
            "apiVersion": "teapot.dev/v1alpha1", "kind": "RouteTrafficPolicy",
            "metadata": { "name": name, "namespace": NS }, "spec": spec,
        })
    };
    let mut objects = vec![
        gateway_gw(
            NS,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            NS,
            "policies",
            json!({ "name": "gw" }),
            &["policies.test"],
            json!([
                rule("cached", &filter),
                rule("uncached", &filter),
                rule("any", &filter),
                rule("all", &filter),
                rule("ewma", &none),
            ]),
        ),
        policy(
            "cached",
            json!({ "authCache": { "key": "$http_x_key", "duration": "200 10m" } }),
        ),
        policy(
            "any",
            json!({ "satisfy": "any", "clientAddresses": { "allow": ["127.0.0.1/32"] } }),
        ),
        policy(
            "all",
            json!({ "satisfy": "all", "clientAddresses": { "allow": ["127.0.0.1/32"] } }),
        ),
        policy("ewma", json!({ "loadBalance": "ewma" })),
    ];
    objects.extend(echo_service(NS, "web", &[&web]));
    objects.extend(loopback_service(NS, "auth", auth.addr.port()));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    h.wait_status("the policies accepted", |s| {
        s["routeTrafficPolicies"].as_array().is_some_and(|p| {
            p.len() == 4
                && p.iter()
                    .all(|p| p["status"]["targets"][0]["conditions"][0]["status"] == json!("True"))
        })
    })
    .await;
    for proto in [Proto::Http1, Proto::Http2] {
        let send = |path: &str, key: Option<&str>| {
            let mut req = Request::get("policies.test", path).proto(proto);
            if let Some(k) = key {
                req = req.header("x-key", k);
            }
            let h = &h;
            async move { h.send(&req).await.status }
        };
        // One sub-request per key while its answer is kept.
        let before = auth.count();
        for _ in 0..3 {
            assert_eq!(send("/cached", Some(&format!("{proto:?}"))).await, 200);
        }
        assert_eq!(auth.count() - before, 1, "{proto:?}: one per key");
        let before = auth.count();
        for _ in 0..3 {
            assert_eq!(send("/uncached", Some("k")).await, 200);
        }
        assert_eq!(auth.count() - before, 3, "{proto:?}: no cache");
        // The allow-list alone lets the client in; no sub-request.
        let before = auth.count();
        assert_eq!(send("/any", None).await, 200, "{proto:?}");
        assert_eq!(auth.count(), before, "{proto:?}: nothing asked");
        assert_eq!(send("/all", None).await, 401, "{proto:?}");
        assert_eq!(send("/ewma", None).await, 200, "{proto:?}");
    }
}
