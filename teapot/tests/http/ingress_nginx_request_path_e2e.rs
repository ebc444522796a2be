//! What migrating operators measured against ingress-nginx on the request
//! path, through the real binary (docs/migrate-from-ingress-nginx.md):
//! route timeouts on gRPC (h2c) backends, the CORS fields on the answers
//! teapot makes itself (the external authentication's 401, rate limits,
//! allow-lists), and cleartext HTTP/2 with prior knowledge on the plain
//! port without any flag (`--no-h2c` turns it off), its first bytes
//! bounded by the header timeout.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::auth_service::AuthService;
use common::*;
use http_body_util::Full;
use hyper_util::rt::TokioExecutor;
use serde_json::{Value, json};
use teapot_testkit::client::{Proto, Request, Response, Transport};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "ops";

/// A request over HTTP/1.1 (plain), HTTP/2 over TLS, or cleartext HTTP/2
/// with prior knowledge on the plain port.
#[derive(Clone, Copy, Debug)]
enum Via {
    Http1,
    Http2Tls,
    H2c,
}

async fn via(h: &Harness, via: Via, req: Request) -> Response {
    match via {
        Via::Http1 => over(h, Proto::Http1, req).await,
        Via::Http2Tls => over(h, Proto::Http2, req).await,
        Via::H2c => {
            let resp = send(h.proxy.http, &Transport::Plain, &req.proto(Proto::Http2)).await;
            assert_eq!(resp.version, http::Version::HTTP_2, "h2c on the plain port");
            resp
        }
    }
}

/// An h2c backend that takes every call and never answers it.
async fn silent_h2c_backend() -> SocketAddr {
    h2c_backend(
        hyper::server::conn::http2::Builder::new(TokioExecutor::new()),
        |_req: http::Request<hyper::body::Incoming>| async {
            std::future::pending::<Result<http::Response<Full<Bytes>>, Infallible>>().await
        },
    )
    .await
}

/// A listener whose accept queue is full (backlog 0, one connection never
/// accepted): the kernel drops further SYNs, so a connect to it neither
/// succeeds nor fails until the connecting side gives up.
async fn unanswered_connects() -> (SocketAddr, Vec<TcpStream>, TcpListener) {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = socket.listen(0).unwrap();
    let addr = listener.local_addr().unwrap();
    let mut fillers = Vec::new();
    for _ in 0..2 {
        if let Ok(Ok(s)) =
            tokio::time::timeout(Duration::from_millis(300), TcpStream::connect(addr)).await
        {
            fillers.push(s);
        }
    }
    assert!(!fillers.is_empty(), "the backlog took a connection");
    (addr, fillers, listener)
}

fn grpc_ingress(host: &str, service: &str, timeouts: &[(&str, &str)]) -> Value {
    let mut annotations = vec![("backend-protocol", "GRPC")];
    annotations.extend_from_slice(timeouts);
    annotated(NS, host, service, &annotations)
}

/// `proxy-read-timeout` and `proxy-connect-timeout` on an Ingress whose
/// backend speaks gRPC (h2c) bound the call, as ingress-nginx's
/// `grpc_read_timeout` / `grpc_connect_timeout` do, under the operator's
/// (a minute here: the call would outlast the client's patience).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn route_timeouts_bound_calls_to_grpc_backends() {
    let silent = silent_h2c_backend().await;
    let mut objects = loopback_service(NS, "silent", silent.port());
    objects.push(grpc_ingress(
        "read.test",
        "silent",
        &[("proxy-read-timeout", "1")],
    ));
    // One unanswering backend per client protocol: a connect that timed
    // out ejects its endpoint for a while.
    let mut held = Vec::new();
    for (host, service) in [
        ("connect-tls.test", "blackhole-tls"),
        ("connect-h2c.test", "blackhole-h2c"),
    ] {
        let (addr, fillers, listener) = unanswered_connects().await;
        objects.extend(loopback_service(NS, service, addr.port()));
        objects.push(grpc_ingress(
            host,
            service,
            &[("proxy-connect-timeout", "1")],
        ));
        held.push((fillers, listener));
    }
    let h = Harness::start_with_args(
        &[("m.yaml", docs(&objects))],
        &["--upstream-timeout", "60", "--connect-timeout-ms", "60000"],
    )
    .await;
    let call = |host: &str| {
        Request {
            method: "POST".into(),
            body: b"\0\0\0\0\0".to_vec(),
            ..Request::get(host, "/pkg.Svc/Call")
        }
        .header("content-type", "application/grpc")
        .header("te", "trailers")
    };
    for v in [Via::Http2Tls, Via::H2c] {
        let resp = via(&h, v, call("read.test")).await;
        assert_eq!(resp.status, 504, "{v:?} read: {}", resp.text());
    }
    for (v, host) in [
        (Via::Http2Tls, "connect-tls.test"),
        (Via::H2c, "connect-h2c.test"),
    ] {
        let resp = via(&h, v, call(host)).await;
        assert_eq!(resp.status, 504, "{v:?} connect: {}", resp.text());
    }
    drop(held);
}

const ANSWERS: &[common::auth_service::Answer] = &[(
    "/unauthorized",
    401,
    &[("www-authenticate", "Bearer realm=\"shop\"")],
)];

/// The answers teapot makes itself on a route with `enable-cors` carry the
/// route's CORS fields for an allowed origin, as ingress-nginx's
/// `more_set_headers` do for every status of the location: the external
/// authentication's 401, the rate limit's 429, the allow-list's 403; a
/// browser then reads the refusal instead of reporting a CORS error. An
/// origin the route does not allow gets none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn teapots_answers_on_a_cors_route_carry_its_fields() {
    let auth = AuthService::start("127.0.0.1".parse().unwrap(), ANSWERS, "/hold").await;
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.extend(loopback_service(NS, "auth", auth.addr.port()));
    let cors = [
        ("enable-cors", "true"),
        ("cors-allow-origin", "https://app.example"),
        ("cors-allow-credentials", "true"),
    ];
    let with_cors = |host: &str, more: &[(&'static str, &'static str)]| {
        let mut annotations = cors.to_vec();
        annotations.extend_from_slice(more);
        annotated(NS, host, "web", &annotations)
    };
    let auth_url = format!("http://auth.{NS}.svc.cluster.local/unauthorized");
    let auth_url: &'static str = Box::leak(auth_url.into_boxed_str());
    objects.extend([
        with_cors("auth.test", &[("auth-url", auth_url)]),
        with_cors(
            "rate.test",
            &[("limit-rpm", "1"), ("limit-burst-multiplier", "1")],
        ),
        with_cors("deny.test", &[("whitelist-source-range", "192.0.2.0/24")]),
    ]);
    // A backend that refuses connections, one per protocol (a refused
    // connect ejects the endpoint for a while).
    for name in ["down-http1", "down-http2"] {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        objects.extend(loopback_service(NS, name, port));
        let mut ingress = with_cors(&format!("{name}.test"), &[]);
        ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] = json!(name);
        objects.push(ingress);
    }
    let h = Harness::start(&[("m.yaml", docs(&objects))]).await;
    let from = |host: &str, origin: &str| Request::get(host, "/api").header("origin", origin);
    let allowed = "https://app.example";
    let cors_of = |resp: &Response| {
        (
            resp.headers
                .get("access-control-allow-origin")
                .map(|v| v.to_str().unwrap().to_string()),
            resp.headers
                .get("access-control-allow-credentials")
                .map(|v| v.to_str().unwrap().to_string()),
        )
    };
    let granted = (Some(allowed.to_string()), Some("true".to_string()));
    for proto in [Proto::Http1, Proto::Http2] {
        let resp = over(&h, proto, from("auth.test", allowed)).await;
        assert_eq!(resp.status, 401, "{proto:?}: {}", resp.text());
        assert_eq!(header(&resp, "www-authenticate"), "Bearer realm=\"shop\"");
        assert_eq!(cors_of(&resp), granted, "{proto:?} 401");
        let resp = over(&h, proto, from("auth.test", "https://evil.example")).await;
        assert_eq!(resp.status, 401, "{proto:?}");
        assert_eq!(
            cors_of(&resp),
            (None, None),
            "{proto:?}: not for another origin"
        );

        let resp = over(&h, proto, from("deny.test", allowed)).await;
        assert_eq!(resp.status, 403, "{proto:?}: {}", resp.text());
        assert_eq!(cors_of(&resp), granted, "{proto:?} 403");

        let down = format!("down-{}.test", format!("{proto:?}").to_lowercase());
        let resp = over(&h, proto, from(&down, allowed)).await;
        assert_eq!(resp.status, 502, "{proto:?}: {}", resp.text());
        assert_eq!(cors_of(&resp), granted, "{proto:?} 502");
    }
    // One request a minute, burst of one more: the third is refused.
    let mut statuses = Vec::new();
    for proto in [Proto::Http1, Proto::Http2, Proto::Http1, Proto::Http2] {
        let resp = over(&h, proto, from("rate.test", allowed)).await;
        statuses.push(resp.status);
        if resp.status == 429 {
            assert_eq!(cors_of(&resp), granted, "{proto:?} 429");
            assert!(resp.headers.contains_key("retry-after"));
        } else {
            assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
            assert_eq!(cors_of(&resp), granted, "{proto:?} forwarded");
        }
    }
    assert_eq!(statuses, [200, 200, 429, 429]);
}

const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Cleartext HTTP/2 with prior knowledge on the plain port is served with
/// no flag (ingress-nginx's plain listener has `http2 on`), beside
/// HTTP/1.1, a short HTTP/1.0 request and a preface sent a few bytes at a
/// time included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleartext_http2_is_served_on_the_plain_port_by_default() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.push(simple_ingress(NS, "web", "web.test", "web"));
    let h = Harness::start(&[("m.yaml", docs(&objects))]).await;
    let resp = via(&h, Via::H2c, Request::get("web.test", "/grpc")).await;
    assert_eq!(resp.status, 200, "{}", resp.text());
    assert_eq!(resp.json().unwrap()["path"], json!("/grpc"));
    let resp = via(&h, Via::Http1, Request::get("web.test", "/h1")).await;
    assert_eq!((resp.status, resp.version), (200, http::Version::HTTP_11));

    // Shorter than the preface: HTTP/1 all the same, answered at once.
    let answer = raw(h.proxy.http, &[b"GET / HTTP/1.0\r\n\r\n"]).await;
    assert!(
        answer.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );

    // The preface in pieces, then SETTINGS: the server's SETTINGS answer.
    let settings = teapot_testkit::h2frames::frame(4, 0, 0, &[]);
    let answer = raw(
        h.proxy.http,
        &[&PREFACE[..3], &PREFACE[3..16], &PREFACE[16..], &settings],
    )
    .await;
    assert!(answer.len() >= 9, "{answer:?}");
    assert_eq!(
        answer[3], 4,
        "the first frame is the server's SETTINGS: {answer:?}"
    );
}

/// Writes `pieces` one at a time (each its own segment), then reads what
/// the server sends until it closes or goes quiet.
async fn raw(addr: SocketAddr, pieces: &[&[u8]]) -> Vec<u8> {
    let mut tcp = TcpStream::connect(addr).await.unwrap();
    tcp.set_nodelay(true).unwrap();
    for piece in pieces {
        tcp.write_all(piece).await.unwrap();
        tcp.flush().await.unwrap();
        // Gives each piece its own read on the server's side.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    while let Ok(Ok(n)) = tokio::time::timeout(Duration::from_millis(500), tcp.read(&mut buf)).await
    {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    answer
}

/// The first bytes are bounded like an HTTP/1 head: a client that sends
/// part of the preface and stops is closed at the header timeout.
/// `--no-h2c` serves HTTP/1.1 only: the preface is refused as HTTP/1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_preface_is_bounded_and_no_h2c_turns_it_off() {
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = echo_service(NS, "web", &[&backend]);
    objects.push(simple_ingress(NS, "web", "web.test", "web"));
    let files = [("m.yaml", docs(&objects))];
    let h = Harness::start_with_args(&files, &["--header-read-timeout", "1"]).await;
    let mut tcp = TcpStream::connect(h.proxy.http).await.unwrap();
    tcp.write_all(&PREFACE[..16]).await.unwrap();
    let mut buf = [0u8; 64];
    let closed = tokio::time::timeout(REQUEST_TIMEOUT, tcp.read(&mut buf))
        .await
        .expect("closed at the header timeout");
    assert!(matches!(closed, Ok(0) | Err(_)), "{closed:?}");
    let metrics = h.metrics().await;
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("header_timeout") && !l.starts_with('#') && !l.ends_with(" 0")),
        "{metrics}"
    );
    drop(h);

    let h = Harness::start_with_args(&files, &["--no-h2c"]).await;
    let resp = via(&h, Via::Http1, Request::get("web.test", "/")).await;
    assert_eq!(resp.status, 200);
    let refused = tokio::time::timeout(
        REQUEST_TIMEOUT,
        teapot_testkit::client::send(
            h.proxy.http,
            &Transport::Plain,
            &Request::get("web.test", "/").proto(Proto::Http2),
        ),
    )
    .await
    .expect("refused at once");
    assert!(refused.is_err(), "{refused:?}");
}

/// The Gateway API's place for the same bound: an HTTPRoute rule's
/// `timeouts.backendRequest` bounds a call to its h2c backend (a Service
/// port with `appProtocol: kubernetes.io/h2c`) under the operator's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_route_timeouts_bound_calls_to_h2c_backends() {
    let silent = silent_h2c_backend().await;
    let mut objects = h2c_route("gw-ns", "calls.test", silent.port());
    objects[1]["spec"]["rules"][0]["timeouts"] = json!({ "backendRequest": "1s" });
    let h = Harness::start_with_args(&[("m.yaml", docs(&objects))], &["--upstream-timeout", "60"])
        .await;
    let call = Request {
        method: "POST".into(),
        body: b"\0\0\0\0\0".to_vec(),
        ..Request::get("calls.test", "/pkg.Svc/Call")
    }
    .header("content-type", "application/grpc");
    let resp = via(&h, Via::H2c, call).await;
    assert_eq!(resp.status, 504, "{}", resp.text());
}
