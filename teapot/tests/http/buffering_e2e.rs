//! End-to-end tests of ingress-nginx's body buffering
//! (`proxy-request-buffering`, `proxy-buffering`) through the real
//! `teapot proxy` binary, over HTTP/1.1 and cleartext HTTP/2, against a
//! backend that records when it accepts each connection and when it has
//! written each answer:
//!
//! - request buffering on: a client that sends half its body and stops
//!   opens no backend connection; the backend accepts only after the last
//!   byte was sent, and gets the body with a `Content-Length` (a chunked
//!   one de-chunked);
//! - request buffering off (teapot's default): the backend accepts while
//!   the body is still incomplete;
//! - response buffering on: a 512 KiB answer is written whole by the
//!   backend while the client has read none of it (the client's receive
//!   window kept small), then arrives complete; its backend connection
//!   goes back to the pool (or is closed, when the answer says so) as soon
//!   as teapot has read it, before the client has it (HTTP/1.1: paced by
//!   `limit-rate`, since the kernel's buffers on loopback take in about
//!   3 MiB for a client that reads nothing).
//!
//! Run with `cargo test -p teapot --test http buffering_e2e::`.

use crate::common;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty, StreamBody};
use hyper::body::Frame;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const NS: &str = "ops";
const KIB: usize = 1024;
const ANSWER: usize = 512 * KIB;

/// What the backend saw, in order.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    /// The client sent (is about to send) its body's last byte.
    BodyComplete,
    Accepted,
    /// A request's head and body as the backend read them, and the
    /// connection it came on (numbered from 1 as accepted).
    Request {
        head: String,
        body: Vec<u8>,
        conn: usize,
    },
    /// The backend finished writing an answer of `ANSWER` bytes.
    Answered,
    /// The proxy closed the backend connection numbered so.
    Closed(usize),
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<Event>>>);

impl Log {
    fn push(&self, e: Event) {
        self.0.lock().unwrap().push(e);
    }
    fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap().clone()
    }
    /// The bodies of the requests whose first line is `line`.
    fn requests(&self, line: &str) -> Vec<Vec<u8>> {
        let events = self.0.lock().unwrap();
        let of = |e: &Event| match e {
            Event::Request { head, body, .. } if head.lines().next() == Some(line) => {
                Some(body.clone())
            }
            _ => None,
        };
        events.iter().filter_map(of).collect()
    }
    fn has(&self, want: impl Fn(&Event) -> bool) -> bool {
        self.0.lock().unwrap().iter().any(want)
    }
    async fn wait_for(&self, what: &str, want: impl Fn(&Event) -> bool) {
        let until = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        while !self.has(&want) {
            assert!(
                tokio::time::Instant::now() < until,
                "{what}: {:?}",
                self.events()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// An HTTP/1.1 backend: `POST` is answered `ok` once its body (with a
/// `Content-Length`, or chunked) is read; `GET /big` with `ANSWER` bytes,
/// written through a small send buffer so that the proxy's reading is
/// what lets it finish.
async fn backend(log: Log) -> SocketAddr {
    // Accepted connections inherit the listener's small send buffer.
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_send_buffer_size(8 * KIB as u32).unwrap();
    socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener: TcpListener = socket.listen(64).unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        for id in 1.. {
            let Ok((conn, _)) = listener.accept().await else {
                return;
            };
            log.push(Event::Accepted);
            tokio::spawn(serve(conn, id, log.clone()));
        }
    });
    addr
}

async fn serve(mut conn: TcpStream, id: usize, log: Log) {
    let mut buf = Vec::new();
    loop {
        let Some(head) = common::read_head(&mut conn, &mut buf).await else {
            log.push(Event::Closed(id));
            return;
        };
        let head = head.to_lowercase();
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .map(|n| n.trim().parse::<usize>().unwrap());
        let body = match length {
            Some(n) => {
                while buf.len() < n {
                    if !read_more(&mut conn, &mut buf).await {
                        return;
                    }
                }
                buf.drain(..n).collect()
            }
            None if head.contains("transfer-encoding: chunked") => {
                // Enough for the test's bodies: the terminal chunk ends it.
                while !buf.windows(5).any(|w| w == b"0\r\n\r\n") {
                    if !read_more(&mut conn, &mut buf).await {
                        return;
                    }
                }
                std::mem::take(&mut buf)
            }
            None => Vec::new(),
        };
        let big = head.starts_with("get /big");
        // `/big?close`: the answer ends the connection; `/big?chunked`:
        // it is chunked.
        let close = head.starts_with("get /big?close");
        let chunked = head.starts_with("get /big?chunked");
        let line = head.lines().next().unwrap_or_default().to_string();
        log.push(Event::Request {
            head,
            body,
            conn: id,
        });
        // `POST /again/...`: the first try fails.
        if line.starts_with("post /again/") && log.requests(&line).len() == 1 {
            let _ = conn
                .write_all(b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\r\n")
                .await;
            continue;
        }
        if big {
            let close = if close { "connection: close\r\n" } else { "" };
            let (framing, body) = if chunked {
                let mut body = Vec::new();
                for _ in 0..ANSWER / (16 * KIB) {
                    body.extend_from_slice(b"4000\r\n");
                    body.extend_from_slice(&[b'x'; 16 * KIB]);
                    body.extend_from_slice(b"\r\n");
                }
                body.extend_from_slice(b"0\r\n\r\n");
                ("transfer-encoding: chunked".to_string(), body)
            } else {
                (format!("content-length: {ANSWER}"), vec![b'x'; ANSWER])
            };
            let head = format!("HTTP/1.1 200 OK\r\n{close}{framing}\r\n\r\n");
            if conn.write_all(head.as_bytes()).await.is_err()
                || conn.write_all(&body).await.is_err()
            {
                return;
            }
            log.push(Event::Answered);
        } else {
            // Closed after each upload, so that the next one's connection
            // is a new one, its accept recorded.
            let ok = b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 2\r\n\r\nok";
            let _ = conn.write_all(ok).await;
            return;
        }
    }
}

async fn read_more(conn: &mut TcpStream, buf: &mut Vec<u8>) -> bool {
    let mut chunk = [0u8; 16 * 1024];
    match conn.read(&mut chunk).await {
        Ok(0) | Err(_) => false,
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            true
        }
    }
}

async fn setup() -> (Harness, Log) {
    setup_with(&["--h2c"]).await
}

async fn setup_with(args: &[&str]) -> (Harness, Log) {
    let log = Log::default();
    let addr = backend(log.clone()).await;
    let mut objects = loopback_service(NS, "files", addr.port());
    objects.push(annotated(
        NS,
        "held.test",
        "files",
        &[
            ("proxy-request-buffering", "on"),
            ("client-body-buffer-size", "64k"),
        ],
    ));
    objects.push(annotated(NS, "streamed.test", "files", &[]));
    objects.push(annotated(
        NS,
        "ahead.test",
        "files",
        &[
            ("proxy-buffering", "on"),
            ("proxy-buffer-size", "256k"),
            ("proxy-buffers-number", "4"),
        ],
    ));
    objects.push(annotated(
        NS,
        "paced.test",
        "files",
        &[
            ("proxy-buffering", "on"),
            ("proxy-buffer-size", "256k"),
            ("proxy-buffers-number", "4"),
            ("limit-rate", "8"),
        ],
    ));
    objects.push(annotated(
        NS,
        "old.test",
        "files",
        &[
            ("proxy-http-version", "1.0"),
            ("proxy-request-buffering", "on"),
            ("client-body-buffer-size", "64k"),
        ],
    ));
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&objects))], args).await;
    h.wait_status("the Ingresses reported", |s| {
        [
            "held.test",
            "streamed.test",
            "ahead.test",
            "paced.test",
            "old.test",
        ]
        .iter()
        .all(|n| ingress_report(s, NS, n).is_some())
    })
    .await;
    (h, log)
}

/// How a test client sends its body: the first part, then (when told)
/// the rest, and reads the answer.
#[derive(Clone, Copy, Debug)]
enum Proto {
    Http1,
    Http2,
}

/// Sends `POST` to `host` with a body in two halves (`chunked`: without a
/// length), the second only once `between` has returned; the status.
async fn post_in_two(
    h: &Harness,
    proto: Proto,
    (host, path): (&str, &str),
    chunked: bool,
    log: &Log,
    between: impl std::future::Future<Output = ()>,
) -> u16 {
    let (first, second) = (&b"hello "[..], &b"world"[..]);
    match proto {
        Proto::Http1 => {
            let mut conn = TcpStream::connect(h.proxy.http).await.unwrap();
            let framing = match chunked {
                true => "transfer-encoding: chunked".to_string(),
                false => format!("content-length: {}", first.len() + second.len()),
            };
            let head = format!("POST {path} HTTP/1.1\r\nhost: {host}\r\n{framing}\r\n\r\n");
            conn.write_all(head.as_bytes()).await.unwrap();
            let piece = |b: &[u8]| match chunked {
                true => [format!("{:x}\r\n", b.len()).as_bytes(), b, b"\r\n"].concat(),
                false => b.to_vec(),
            };
            conn.write_all(&piece(first)).await.unwrap();
            between.await;
            log.push(Event::BodyComplete);
            let mut last = piece(second);
            if chunked {
                last.extend_from_slice(b"0\r\n\r\n");
            }
            conn.write_all(&last).await.unwrap();
            let mut answer = Vec::new();
            let read = async {
                while !answer.windows(2).any(|w| w == b"ok") {
                    let mut chunk = [0u8; 4096];
                    match conn.read(&mut chunk).await.unwrap() {
                        0 => break,
                        n => answer.extend_from_slice(&chunk[..n]),
                    }
                }
            };
            tokio::time::timeout(REQUEST_TIMEOUT, read).await.unwrap();
            String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
        }
        Proto::Http2 => {
            let mut sender = h2c(h.proxy.http).await;
            let (tx, mut rx) = tokio::sync::mpsc::channel::<Result<Frame<Bytes>, Infallible>>(4);
            let body = StreamBody::new(futures::stream::poll_fn(move |cx| rx.poll_recv(cx)));
            let mut req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{host}{path}"));
            if !chunked {
                req = req.header("content-length", first.len() + second.len());
            }
            let req = req.body(body.boxed()).unwrap();
            sender.ready().await.unwrap();
            let answer = tokio::spawn(sender.send_request(req));
            tx.send(Ok(Frame::data(Bytes::from_static(first))))
                .await
                .unwrap();
            between.await;
            log.push(Event::BodyComplete);
            tx.send(Ok(Frame::data(Bytes::from_static(second))))
                .await
                .unwrap();
            drop(tx);
            let resp = tokio::time::timeout(REQUEST_TIMEOUT, answer)
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            resp.status().as_u16()
        }
    }
}

/// With `proxy-request-buffering: on`, the backend's connection comes
/// after the body's last byte (the first half sat in teapot while the
/// client waited), and the body arrives whole with its length; a chunked
/// one de-chunked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_request_body_reaches_the_backend_only_when_complete() {
    let (h, log) = setup().await;
    for proto in [Proto::Http1, Proto::Http2] {
        for chunked in [false, true] {
            log.0.lock().unwrap().clear();
            // Long enough for a streaming proxy to have connected (the
            // off case below sees it do so).
            let pause = tokio::time::sleep(Duration::from_millis(500));
            let status = post_in_two(&h, proto, ("held.test", "/up"), chunked, &log, pause).await;
            assert_eq!(status, 200, "{proto:?} chunked={chunked}");
            let events = log.events();
            let complete = events.iter().position(|e| *e == Event::BodyComplete);
            let accepted = events.iter().position(|e| *e == Event::Accepted);
            assert!(
                complete.is_some() && accepted.is_some() && complete < accepted,
                "{proto:?} chunked={chunked}: {events:?}"
            );
            let Some(Event::Request { head, body, .. }) =
                events.iter().find(|e| matches!(e, Event::Request { .. }))
            else {
                panic!("no request: {events:?}");
            };
            assert_eq!(body, b"hello world", "{proto:?} chunked={chunked}");
            assert!(
                head.contains("content-length: 11") && !head.contains("transfer-encoding"),
                "{proto:?} chunked={chunked}: {head}"
            );
        }
    }
}

/// `POST` to `host` with a body of `len` bytes of unknown length
/// (chunked; over HTTP/2 without a `content-length`); the status.
async fn post_unknown_length(h: &Harness, proto: Proto, host: &str, len: usize) -> u16 {
    let body = vec![b'b'; len];
    match proto {
        Proto::Http1 => {
            let mut conn = TcpStream::connect(h.proxy.http).await.unwrap();
            let head =
                format!("POST /up HTTP/1.1\r\nhost: {host}\r\ntransfer-encoding: chunked\r\n\r\n");
            let mut req = head.into_bytes();
            req.extend_from_slice(format!("{len:x}\r\n").as_bytes());
            req.extend_from_slice(&body);
            req.extend_from_slice(b"\r\n0\r\n\r\n");
            // A refusal may come (and the connection close) before all of
            // it is written.
            let _ = conn.write_all(&req).await;
            let mut answer = Vec::new();
            let mut chunk = [0u8; 4096];
            let read = async {
                while answer.len() < 12 {
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => answer.extend_from_slice(&chunk[..n]),
                    }
                }
            };
            tokio::time::timeout(REQUEST_TIMEOUT, read).await.unwrap();
            String::from_utf8_lossy(&answer[9..12]).parse().unwrap()
        }
        Proto::Http2 => {
            let mut sender = h2c(h.proxy.http).await;
            let frames = body
                .chunks(16 * KIB)
                .map(|c| Ok::<_, Infallible>(Frame::data(Bytes::copy_from_slice(c))))
                .collect::<Vec<_>>();
            let body = StreamBody::new(futures::stream::iter(frames));
            let req = http::Request::builder()
                .method("POST")
                .uri(format!("http://{host}/up"))
                .body(body.boxed())
                .unwrap();
            sender.ready().await.unwrap();
            let resp = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(req))
                .await
                .unwrap()
                .unwrap();
            resp.status().as_u16()
        }
    }
}

/// `proxy-http-version: "1.0"` with `proxy-request-buffering: on`: a body
/// of unknown length held whole goes to the HTTP/1.0 backend with its
/// `Content-Length`, as nginx sends it; one longer than the bytes held
/// (64 KiB) is still answered 411, no backend contacted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http10_backend_gets_a_held_body_of_unknown_length_with_its_length() {
    let (h, log) = setup().await;
    for proto in [Proto::Http1, Proto::Http2] {
        log.0.lock().unwrap().clear();
        let status = post_unknown_length(&h, proto, "old.test", 40 * KIB).await;
        assert_eq!(status, 200, "{proto:?}");
        let events = log.events();
        let Some(Event::Request { head, body, .. }) =
            events.iter().find(|e| matches!(e, Event::Request { .. }))
        else {
            panic!("{proto:?}: no request: {events:?}");
        };
        assert!(
            head.starts_with("post /up http/1.0\r\n"),
            "{proto:?}: {head}"
        );
        assert!(
            head.contains(&format!("content-length: {}", 40 * KIB))
                && !head.contains("transfer-encoding"),
            "{proto:?}: {head}"
        );
        assert_eq!(body.len(), 40 * KIB, "{proto:?}");
        log.0.lock().unwrap().clear();
        let status = post_unknown_length(&h, proto, "old.test", 100 * KIB).await;
        assert_eq!(status, 411, "{proto:?}");
        assert!(
            !log.has(|e| *e == Event::Accepted),
            "{proto:?}: {:?}",
            log.events()
        );
    }
}

/// Without the annotation the body streams: the backend accepts the
/// connection while the client still holds the body's second half.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_request_body_reaches_the_backend_at_once() {
    let (h, log) = setup().await;
    for proto in [Proto::Http1, Proto::Http2] {
        log.0.lock().unwrap().clear();
        let accepted = log.wait_for("the backend accepts before the body ends", |e| {
            *e == Event::Accepted
        });
        let status = post_in_two(&h, proto, ("streamed.test", "/up"), false, &log, accepted).await;
        assert_eq!(status, 200, "{proto:?}");
        let events = log.events();
        assert_eq!(events[..2], [Event::Accepted, Event::BodyComplete]);
    }
}

/// A client connection whose receive buffer is small, so that what it
/// does not read stays in teapot (or the backend).
async fn narrow_tcp(addr: SocketAddr) -> TcpStream {
    let socket = TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4 * KIB as u32).unwrap();
    socket.connect(addr).await.unwrap()
}

/// With `proxy-buffering: on` (1 MiB of read-ahead), the backend writes
/// its whole 512 KiB answer while the client reads nothing; the client
/// then gets all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_answer_frees_the_backend_before_the_client_reads() {
    let (h, log) = setup().await;
    // HTTP/1.1.
    let mut conn = narrow_tcp(h.proxy.http).await;
    conn.write_all(b"GET /big HTTP/1.1\r\nhost: ahead.test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    log.wait_for("the backend finished its answer (HTTP/1.1)", |e| {
        *e == Event::Answered
    })
    .await;
    let mut got = Vec::new();
    tokio::time::timeout(REQUEST_TIMEOUT, conn.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    let head = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert_eq!(got.len() - head, ANSWER);
    // HTTP/2, the client's stream window 1 KiB.
    log.0.lock().unwrap().clear();
    let tcp = narrow_tcp(h.proxy.http).await;
    let (mut sender, connection) =
        hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
            .initial_stream_window_size(1024)
            .adaptive_window(false)
            .handshake(hyper_util::rt::TokioIo::new(tcp))
            .await
            .unwrap();
    tokio::spawn(connection);
    let req = http::Request::builder()
        .uri("http://ahead.test/big")
        .body(Empty::<Bytes>::new().map_err(|e| match e {}).boxed())
        .unwrap();
    sender.ready().await.unwrap();
    let resp = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(req))
        .await
        .unwrap()
        .unwrap();
    log.wait_for("the backend finished its answer (HTTP/2)", |e| {
        *e == Event::Answered
    })
    .await;
    let body = tokio::time::timeout(REQUEST_TIMEOUT, resp.into_body().collect())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(body.to_bytes().len(), ANSWER);
}

/// A client that asked for `/big` (`?close`: an answer that ends its
/// connection) and reads nothing until told; its answer's length.
struct Slow {
    read: tokio::sync::oneshot::Sender<()>,
    got: tokio::task::JoinHandle<usize>,
}

impl Slow {
    async fn start(h: &Harness, proto: Proto, host: &str, target: &str) -> Slow {
        let (read, go) = tokio::sync::oneshot::channel::<()>();
        let tcp = narrow_tcp(h.proxy.http).await;
        let got = match proto {
            Proto::Http1 => {
                let mut conn = tcp;
                let head = format!("GET {target} HTTP/1.1\r\nhost: {host}\r\n\r\n");
                conn.write_all(head.as_bytes()).await.unwrap();
                tokio::spawn(async move {
                    if go.await.is_err() {
                        return 0;
                    }
                    let mut got = Vec::new();
                    let mut chunk = vec![0u8; 64 * KIB];
                    loop {
                        if let Some(p) = got.windows(4).position(|w| w == b"\r\n\r\n")
                            && got.len() - (p + 4) >= ANSWER
                        {
                            return got.len() - (p + 4);
                        }
                        match conn.read(&mut chunk).await.unwrap() {
                            0 => return 0,
                            n => got.extend_from_slice(&chunk[..n]),
                        }
                    }
                })
            }
            Proto::Http2 => {
                let (mut sender, connection) =
                    hyper::client::conn::http2::Builder::new(hyper_util::rt::TokioExecutor::new())
                        .initial_stream_window_size(1024)
                        .adaptive_window(false)
                        .handshake(hyper_util::rt::TokioIo::new(tcp))
                        .await
                        .unwrap();
                tokio::spawn(connection);
                let req = http::Request::builder()
                    .uri(format!("http://{host}{target}"))
                    .body(Empty::<Bytes>::new().map_err(|e| match e {}).boxed())
                    .unwrap();
                sender.ready().await.unwrap();
                let resp = tokio::spawn(sender.send_request(req));
                tokio::spawn(async move {
                    if go.await.is_err() {
                        return 0;
                    }
                    let resp = resp.await.unwrap().unwrap();
                    let body = resp.into_body().collect().await.unwrap();
                    body.to_bytes().len()
                })
            }
        };
        Slow { read, got }
    }

    /// Reads the whole answer; its body's length.
    async fn finish(self) -> usize {
        self.read.send(()).unwrap();
        tokio::time::timeout(REQUEST_TIMEOUT, self.got)
            .await
            .unwrap()
            .unwrap()
    }
}

/// `GET /next` on a new connection of `proto`, answered `ok` by the
/// backend (which then closes that connection).
async fn get_next(h: &Harness, proto: Proto, host: &str) {
    match proto {
        Proto::Http1 => {
            let mut conn = TcpStream::connect(h.proxy.http).await.unwrap();
            let head = format!("GET /next HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
            conn.write_all(head.as_bytes()).await.unwrap();
            let mut got = Vec::new();
            tokio::time::timeout(REQUEST_TIMEOUT, conn.read_to_end(&mut got))
                .await
                .unwrap()
                .unwrap();
            assert!(
                got.starts_with(b"HTTP/1.1 200"),
                "{}",
                String::from_utf8_lossy(&got)
            );
        }
        Proto::Http2 => {
            let mut sender = h2c(h.proxy.http).await;
            let req = http::Request::builder()
                .uri(format!("http://{host}/next"))
                .body(Empty::<Bytes>::new().map_err(|e| match e {}).boxed())
                .unwrap();
            sender.ready().await.unwrap();
            let resp = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(req))
                .await
                .unwrap()
                .unwrap();
            assert_eq!(resp.status(), 200);
        }
    }
}

/// The connection the backend got its request starting `target` on.
fn conn_of(log: &Log, target: &str) -> Option<usize> {
    log.events().iter().rev().find_map(|e| match e {
        Event::Request { head, conn, .. } if head.starts_with(target) => Some(*conn),
        _ => None,
    })
}

/// nginx's point of `proxy-buffering`: a slow client does not hold a
/// backend connection. An answer that fits the read-ahead gives its
/// backend connection back as soon as its last byte is read, while its
/// client has not read it: kept alive, the connection is in the pool and
/// the next request goes on it; ending with the answer, it is closed.
/// Over HTTP/2 the client's 1 KiB stream window keeps the answer in
/// teapot, which then writes it whole; over HTTP/1.1 `limit-rate: 8`
/// does (the kernel's buffers would take in a 512 KiB answer for a client
/// that reads nothing; at 8 KiB/s teapot holds it for a minute). One
/// serving thread, so that both requests share one pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_buffered_answer_gives_its_backend_connection_back_before_the_client_reads() {
    let (h, log) = setup_with(&["--h2c", "--threads", "1"]).await;
    let cases = [
        (Proto::Http1, "paced.test", "/big"),
        (Proto::Http2, "ahead.test", "/big"),
        (Proto::Http1, "paced.test", "/big?chunked"),
        (Proto::Http2, "ahead.test", "/big?chunked"),
    ];
    for (proto, host, target) in cases {
        // Kept alive: back in the pool.
        log.0.lock().unwrap().clear();
        let slow = Slow::start(&h, proto, host, target).await;
        log.wait_for("the backend wrote its answer", |e| *e == Event::Answered)
            .await;
        let big = conn_of(&log, &format!("get {target}")).unwrap();
        // Each `/next` that found no pooled connection opened one that
        // its answer closes: the first found in the pool is `/big`'s.
        let until = tokio::time::Instant::now() + REQUEST_TIMEOUT;
        loop {
            get_next(&h, proto, host).await;
            if conn_of(&log, "get /next") == Some(big) {
                break;
            }
            assert!(
                tokio::time::Instant::now() < until,
                "{proto:?} {target}: the backend connection was not pooled while its client waited"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if let Proto::Http2 = proto {
            assert_eq!(slow.finish().await, ANSWER, "{target}");
        }
        if target != "/big" {
            continue;
        }
        // Ending with the answer: closed.
        let slow = Slow::start(&h, proto, host, "/big?close").await;
        let big = loop {
            if let Some(conn) = conn_of(&log, "get /big?close") {
                break conn;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        log.wait_for(
            "the backend connection closed before the client read",
            |e| *e == Event::Closed(big),
        )
        .await;
        if let Proto::Http2 = proto {
            assert_eq!(slow.finish().await, ANSWER);
        }
    }
}

/// A RouteTrafficPolicy's `buffering` holds an HTTPRoute's request
/// bodies the same, on both protocols; a body held whole is sent again
/// by the rule's retry after a 503 (HTTP/2 as HTTP/1.1), each try with
/// all of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_traffic_policy_holds_request_bodies() {
    const GW: &str = "gw-buffering";
    const HOST: &str = "uploads.example.com";
    let log = Log::default();
    let addr = backend(log.clone()).await;
    let mut objects = vec![
        gateway_gw(
            GW,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            GW,
            "uploads",
            json!({ "name": "gw" }),
            &[HOST],
            json!([
                { "backendRefs": [{ "name": "files", "port": 80 }] },
                {
                    "matches": [{ "path": { "type": "PathPrefix", "value": "/again" } }],
                    "backendRefs": [{ "name": "files", "port": 80 }],
                    "retry": { "codes": [503], "attempts": 1 },
                },
            ]),
        ),
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": "held", "namespace": GW },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": "uploads" }],
                "buffering": { "request": "on", "requestBodySize": "64k" },
            },
        }),
    ];
    objects.extend(loopback_service(GW, "files", addr.port()));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h
        .wait_status("the policy reported", |s| {
            s["routeTrafficPolicies"]
                .as_array()
                .is_some_and(|p| p.len() == 1)
        })
        .await;
    let conditions = status["routeTrafficPolicies"][0]["status"].to_string();
    assert!(conditions.contains("\"True\""), "{conditions}");
    for proto in [Proto::Http1, Proto::Http2] {
        log.0.lock().unwrap().clear();
        let pause = tokio::time::sleep(Duration::from_millis(500));
        let status = post_in_two(&h, proto, (HOST, "/up"), true, &log, pause).await;
        assert_eq!(status, 200, "{proto:?}");
        let events = log.events();
        let complete = events.iter().position(|e| *e == Event::BodyComplete);
        let accepted = events.iter().position(|e| *e == Event::Accepted);
        assert!(
            complete.is_some() && accepted.is_some() && complete < accepted,
            "{proto:?}: {events:?}"
        );
        for chunked in [false, true] {
            let path = format!("/again/{}-{chunked}", proto as u8);
            let status = post_in_two(&h, proto, (HOST, &path), chunked, &log, async {}).await;
            assert_eq!(status, 200, "{proto:?} chunked={chunked}");
            let tries = log.requests(&format!("post {path} http/1.1"));
            assert_eq!(tries, [b"hello world"; 2], "{proto:?} chunked={chunked}");
        }
    }
}
