//! HTTP/2 requests to HTTP/1 backends through teapot's own exchange
//! (proxy/src/plane/h2_upstream.rs): request bodies with and without a
//! declared length, close-delimited and chunked responses, a backend that
//! breaks its response (the stream is reset, its connection never pooled
//! again), and a pooled connection the backend closed as the request
//! arrived (retried once for GET, never for POST); and h2c backends
//! (proxy/src/plane/h2c_upstream.rs): a streaming call whose answer starts
//! before its request ends, trailers both ways, CONNECT refused, and a
//! connection the backend closed replaced without failing a call.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Frame;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const HOST: &str = "h2up.test";

/// What the backend received, one line per request:
/// `c<connection> #<request on it> METHOD PATH cl=.. te=.. body=..`.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<String>>>);

impl Seen {
    fn lines(&self) -> Vec<String> {
        self.0.lock().unwrap().clone()
    }
}

/// A scripted HTTP/1.1 backend: the path picks the answer.
async fn backend() -> (SocketAddr, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = seen.clone();
    tokio::spawn(async move {
        let mut conn = 0;
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            conn += 1;
            tokio::spawn(serve(stream, conn, record.clone()));
        }
    });
    (addr, seen)
}

async fn serve(mut s: TcpStream, conn: usize, seen: Seen) {
    let mut buf = Vec::new();
    for index in 0.. {
        let Some(end) = read_until(&mut s, &mut buf, b"\r\n\r\n").await else {
            return;
        };
        let head = String::from_utf8_lossy(&buf[..end]).to_string();
        buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let mut first = lines.next().unwrap().split(' ');
        let (method, path) = (
            first.next().unwrap().to_string(),
            first.next().unwrap().to_string(),
        );
        let field = |name: &str| {
            head.split("\r\n").skip(1).find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
            })
        };
        let (cl, te) = (field("content-length"), field("transfer-encoding"));
        if field("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue"))
            && s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.is_err()
        {
            return;
        }
        let mut body = Vec::new();
        if let Some(n) = cl.as_deref().and_then(|v| v.parse::<usize>().ok()) {
            while buf.len() < n {
                if read_more(&mut s, &mut buf).await == 0 {
                    return;
                }
            }
            body.extend(buf.drain(..n));
        } else if te.as_deref() == Some("chunked") {
            loop {
                let Some(eol) = read_until(&mut s, &mut buf, b"\r\n").await else {
                    return;
                };
                let size =
                    usize::from_str_radix(&String::from_utf8_lossy(&buf[..eol]), 16).unwrap();
                buf.drain(..eol + 2);
                while buf.len() < size + 2 {
                    if read_more(&mut s, &mut buf).await == 0 {
                        return;
                    }
                }
                body.extend(buf.drain(..size));
                buf.drain(..2);
                if size == 0 {
                    break;
                }
            }
        }
        let line = format!(
            "c{conn} #{index} {method} {path} cl={cl:?} te={te:?} host={:?} xff={:?} xfp={:?} xfh={:?} id={} tp={} body={}",
            field("host"),
            field("x-forwarded-for"),
            field("x-forwarded-proto"),
            field("x-forwarded-host"),
            field("x-request-id").is_some_and(|v| v.len() >= 16),
            field("traceparent").is_some_and(|v| v.starts_with("00-")),
            String::from_utf8_lossy(&body)
        );
        seen.0.lock().unwrap().push(line.clone());
        let answer: Vec<u8> = match path.as_str() {
            "/stale" if index > 0 => return, // closed as the request arrived
            "/close" => {
                let _ = s.write_all(b"HTTP/1.1 200 OK\r\n\r\nclose-delimited body").await;
                return;
            }
            "/chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n6\r\n world\r\n0\r\nx-trailer: 1\r\n\r\n".to_vec(),
            "/midbody" => {
                let _ = s
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten b")
                    .await;
                return;
            }
            // A broken chunk, and the connection kept open: the proxy
            // must not send another request on it.
            "/badchunk" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhelloXX".to_vec(),
            _ => format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n{line}", line.len()).into_bytes(),
        };
        if s.write_all(&answer).await.is_err() {
            return;
        }
    }
}

async fn read_more(s: &mut TcpStream, buf: &mut Vec<u8>) -> usize {
    let mut chunk = [0u8; 4096];
    let n = s.read(&mut chunk).await.unwrap_or(0);
    buf.extend_from_slice(&chunk[..n]);
    n
}

async fn read_until(s: &mut TcpStream, buf: &mut Vec<u8>, needle: &[u8]) -> Option<usize> {
    loop {
        if let Some(i) = buf.windows(needle.len()).position(|w| w == needle) {
            return Some(i);
        }
        if read_more(s, buf).await == 0 {
            return None;
        }
    }
}

/// Sends a request; `Err` when the response broke off (status 0 when
/// it did before its head).
async fn send(
    sender: &mut H2cSender,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: BoxBody<Bytes, Infallible>,
) -> (u16, Result<String, String>) {
    let mut req = http::Request::builder()
        .method(method)
        .uri(format!("http://{HOST}{path}"))
        .version(http::Version::HTTP_2);
    for (n, v) in headers {
        req = req.header(*n, *v);
    }
    let exchange = async {
        sender.ready().await.expect("h2 sender ready");
        // A stream reset before the head was flushed reaches the client
        // as an error instead of a head.
        let resp = match sender.send_request(req.body(body).unwrap()).await {
            Ok(resp) => resp,
            Err(e) => return (0, Err(e.to_string())),
        };
        let status = resp.status().as_u16();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| String::from_utf8_lossy(&b.to_bytes()).to_string())
            .map_err(|e| e.to_string());
        (status, body)
    };
    tokio::time::timeout(REQUEST_TIMEOUT, exchange)
        .await
        .expect("h2 request timed out")
}

fn empty() -> BoxBody<Bytes, Infallible> {
    Full::new(Bytes::new()).boxed()
}

fn full(body: &'static str) -> BoxBody<Bytes, Infallible> {
    Full::new(Bytes::from_static(body.as_bytes())).boxed()
}

/// A body of two DATA frames and no declared length.
fn streamed(parts: &[&'static str]) -> BoxBody<Bytes, Infallible> {
    let frames: Vec<Result<Frame<Bytes>, Infallible>> = parts
        .iter()
        .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
        .collect();
    StreamBody::new(futures::stream::iter(frames)).boxed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2_requests_to_http1_backends() {
    let (addr, seen) = backend().await;
    let manifests = vec![
        service("h2up", "svc-h2up", &[(Some("http"), 80)]),
        slice(
            "h2up",
            "svc-h2up-0",
            "svc-h2up",
            &[(Some("http"), addr.port())],
            &[("127.0.0.1", true)],
        ),
        simple_ingress("h2up", "h2up", HOST, "svc-h2up"),
    ];
    // One serving thread: one upstream pool, so reuse is predictable.
    let h = Harness::start_with_args(
        &[("m.yaml", docs(&manifests))],
        &["--h2c", "--threads", "1"],
    )
    .await;
    let mut c = h2c(h.proxy.http).await;

    // A body with a declared length goes with it; one without, chunked.
    let (status, body) = send(
        &mut c,
        "POST",
        "/echo",
        &[("content-length", "5")],
        full("hello"),
    )
    .await;
    assert_eq!(status, 200);
    let body = body.unwrap();
    assert!(
        body.contains(r#"POST /echo cl=Some("5") te=None host="#),
        "{body}"
    );
    assert!(body.ends_with("body=hello"), "{body}");
    let (status, body) = send(&mut c, "POST", "/echo", &[], streamed(&["abc", "def"])).await;
    assert_eq!(status, 200);
    let body = body.unwrap();
    assert!(
        body.contains(r#"POST /echo cl=None te=Some("chunked") host="#),
        "{body}"
    );
    assert!(body.ends_with("body=abcdef"), "{body}");
    // A backend that waits for the body until it said `100 Continue`.
    let (status, body) = send(
        &mut c,
        "POST",
        "/echo",
        &[("expect", "100-continue")],
        streamed(&["after ", "continue"]),
    )
    .await;
    assert_eq!(status, 200);
    assert!(body.unwrap().contains("body=after continue"));
    // The forwarding fields are there, and the Host is the authority.
    let (_, body) = send(
        &mut c,
        "GET",
        "/echo",
        &[
            ("x-forwarded-for", "6.6.6.6"),
            ("x-forwarded-host", "evil.example"),
        ],
        empty(),
    )
    .await;
    let body = body.unwrap();
    assert!(
        body.contains(r#"GET /echo cl=None te=None host=Some("h2up.test") xff=Some("127.0.0.1") xfp=Some("http") xfh=Some("h2up.test") id=true tp=true body="#),
        "{body}"
    );

    // Close-delimited and chunked responses.
    let (status, body) = send(&mut c, "GET", "/close", &[], empty()).await;
    assert_eq!(
        (status, body.unwrap().as_str()),
        (200, "close-delimited body")
    );
    let (status, body) = send(&mut c, "GET", "/chunked", &[], empty()).await;
    assert_eq!((status, body.unwrap().as_str()), (200, "hello world"));

    // The backend closes mid-body: the stream is reset, the client's
    // connection goes on.
    let (status, body) = send(&mut c, "GET", "/midbody", &[], empty()).await;
    assert!(status == 200 || status == 0, "{status}");
    assert!(
        body.is_err(),
        "an incomplete body must not look complete: {body:?}"
    );
    let (status, _) = send(&mut c, "GET", "/echo", &[], empty()).await;
    assert_eq!(status, 200, "the HTTP/2 connection survives a reset stream");

    // A broken chunked body on a connection the backend keeps open: reset,
    // and that connection never carries another request.
    let (_, body) = send(&mut c, "GET", "/badchunk", &[], empty()).await;
    assert!(body.is_err(), "{body:?}");
    let bad_conn = seen
        .lines()
        .iter()
        .rev()
        .find(|l| l.contains("/badchunk"))
        .map(|l| l.split(' ').next().unwrap().to_string())
        .unwrap();
    for _ in 0..3 {
        let (status, body) = send(&mut c, "GET", "/after", &[], empty()).await;
        assert_eq!(status, 200);
        let body = body.unwrap();
        assert!(
            !body.starts_with(&format!("{bad_conn} ")),
            "{body} on the broken connection {bad_conn}"
        );
    }

    // A pooled connection the backend closes as the request arrives: a
    // GET is sent once more, on a new connection.
    let (status, _) = send(&mut c, "GET", "/warm", &[], empty()).await;
    assert_eq!(status, 200);
    let (status, body) = send(&mut c, "GET", "/stale", &[], empty()).await;
    assert_eq!(status, 200, "{body:?}");
    let body = body.unwrap();
    assert!(
        body.contains("#0 GET /stale"),
        "answered on a fresh connection: {body}"
    );
    let tries = seen
        .lines()
        .iter()
        .filter(|l| l.contains("GET /stale"))
        .count();
    assert_eq!(tries, 2, "one retry: {:?}", seen.lines());

    // A POST is never sent twice: the client gets the 502.
    let (status, _) = send(&mut c, "GET", "/warm", &[], empty()).await;
    assert_eq!(status, 200);
    let (status, body) = send(
        &mut c,
        "POST",
        "/stale",
        &[("content-length", "1")],
        full("x"),
    )
    .await;
    assert_eq!(status, 502, "{body:?}");
    assert_eq!(body.unwrap(), "502 the backend could not be reached\n");
    let posts = seen
        .lines()
        .iter()
        .filter(|l| l.contains("POST /stale"))
        .count();
    assert_eq!(posts, 1, "{:?}", seen.lines());
}

/// An h2c backend that answers at once and then echoes each request
/// DATA frame as a response DATA frame, ending with trailers
/// (`grpc-status: 0` and the number of non-empty frames): a streaming gRPC call's
/// shape. `x-te` reports the request's `te`. Returns its address, the
/// connections it accepted, and a switch that closes every connection.
async fn h2c_echo_backend() -> (
    SocketAddr,
    Arc<std::sync::atomic::AtomicUsize>,
    tokio::sync::watch::Sender<u32>,
) {
    use hyper::server::conn::http2;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (close, closing) = tokio::sync::watch::channel(0u32);
    let counter = accepted.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let mut closing = closing.clone();
            closing.mark_unchanged();
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    |req: http::Request<hyper::body::Incoming>| async move {
                        let te = req
                            .headers()
                            .get("te")
                            .map(|v| v.to_str().unwrap_or("").to_string())
                            .unwrap_or_default();
                        let (tx, rx) =
                            tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
                        let mut body = req.into_body();
                        tokio::spawn(async move {
                            let mut frames = 0;
                            while let Some(Ok(frame)) = body.frame().await {
                                // An empty DATA frame only carries END_STREAM.
                                if let Ok(data) = frame.into_data()
                                    && !data.is_empty()
                                {
                                    frames += 1;
                                    let _ = tx.send(Ok(Frame::data(data))).await;
                                }
                            }
                            let mut trailers = http::HeaderMap::new();
                            trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
                            trailers.insert("x-frames", http::HeaderValue::from(frames));
                            let _ = tx.send(Ok(Frame::trailers(trailers))).await;
                        });
                        let stream = futures::stream::unfold(rx, |mut rx| async move {
                            rx.recv().await.map(|f| (f, rx))
                        });
                        let resp = http::Response::builder()
                            .header("x-te", te)
                            .body(StreamBody::new(stream))
                            .unwrap();
                        Ok::<_, Infallible>(resp)
                    },
                );
                let serve = http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tcp), service);
                // Dropping the connection closes its socket.
                tokio::select! {
                    _ = serve => {}
                    _ = closing.changed() => {}
                }
            });
        }
    });
    (addr, accepted, close)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_backends_stream_both_ways_with_trailers() {
    const NS: &str = "h2c-up";
    let (backend, accepted, close) = h2c_echo_backend().await;
    let manifests = h2c_route(NS, HOST, backend.port());
    let h = Harness::start_with_args(&[("m.yaml", docs(&manifests))], &["--h2c"]).await;
    let mut c = h2c(h.proxy.http).await;
    // Served once the snapshot has the route.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (status, _) = send(&mut c, "POST", "/ready", &[], full("x")).await;
        if status == 200 {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "route not served: {status}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // The answer starts before the request ends: both ways at once.
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
    let body = StreamBody::new(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|f| (f, rx))
    }))
    .boxed();
    let req = http::Request::builder()
        .method("POST")
        .uri(format!("http://{HOST}/pkg.Echo/Stream"))
        .header("te", "trailers")
        .header("content-type", "application/grpc")
        .body(body)
        .unwrap();
    c.ready().await.unwrap();
    tx.send(Ok(Frame::data(Bytes::from_static(b"one"))))
        .await
        .unwrap();
    let call = async {
        let resp = c.send_request(req).await.expect("response head");
        assert_eq!(resp.status(), 200);
        assert_eq!(
            header_value(resp.headers(), "x-te"),
            "trailers",
            "te: trailers kept"
        );
        let mut body = resp.into_body();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&first[..], b"one", "echoed while the request is still open");
        tx.send(Ok(Frame::data(Bytes::from_static(b"two"))))
            .await
            .unwrap();
        let second = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(&second[..], b"two");
        drop(tx);
        let trailers = loop {
            match body.frame().await {
                Some(Ok(frame)) if frame.is_trailers() => break frame.into_trailers().unwrap(),
                Some(Ok(_)) => continue,
                other => panic!("no trailers: {other:?}"),
            }
        };
        assert_eq!(header_value(&trailers, "grpc-status"), "0");
        assert_eq!(header_value(&trailers, "x-frames"), "2");
    };
    tokio::time::timeout(REQUEST_TIMEOUT, call)
        .await
        .expect("streaming call timed out");

    // HTTP/2 CONNECT asks for a tunnel no route offers.
    let connect = http::Request::builder()
        .method("CONNECT")
        .uri(format!("{HOST}:443"))
        .body(empty())
        .unwrap();
    c.ready().await.unwrap();
    let resp = tokio::time::timeout(REQUEST_TIMEOUT, c.send_request(connect))
        .await
        .expect("CONNECT answered")
        .expect("CONNECT response");
    assert_eq!(resp.status(), 405);

    // Every stream so far shared one connection to the backend; once the
    // backend closes it, the next call gets a new one.
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 1);
    close.send(1).unwrap();
    // The proxy's side of the connection sees the close and leaves the
    // thread's map: the next call connects anew, and is not failed.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, body) = send(&mut c, "POST", "/again", &[], full("x")).await;
    assert_eq!((status, body.as_deref()), (200, Ok("x")));
    assert_eq!(accepted.load(std::sync::atomic::Ordering::SeqCst), 2);
}

fn header_value<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}
