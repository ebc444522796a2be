//! End-to-end tests of what a custom error page (`default-backend` with
//! `custom-http-errors`) may cost the proxy, through the real `teapot
//! proxy` binary: HTTP/2 streams that never open their flow-control
//! window against a route whose error backend serves a large page, and a
//! tenant over its rate or in-flight bound on a route without endpoints.
//!
//! Run with `cargo test -p teapot --test http error_page_bounds_e2e::`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::*;
use serde_json::json;
use teapot_testkit::client::{Proto, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// An error backend that answers every request with a page of the size
/// its `x-page-bytes` field asks for (the page request carries the
/// client's fields), after `x-page-delay-ms`; it counts the requests.
struct PageBackend {
    addr: std::net::SocketAddr,
    asked: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl PageBackend {
    async fn start(ip: std::net::IpAddr) -> PageBackend {
        let listener = TcpListener::bind((ip, 0)).await.expect("bind");
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(AtomicUsize::new(0));
        let count = asked.clone();
        let task = tokio::spawn(async move {
            while let Ok((s, _)) = listener.accept().await {
                let count = count.clone();
                tokio::spawn(async move {
                    let _ = serve_page(s, &count).await;
                });
            }
        });
        PageBackend { addr, asked, task }
    }

    fn asked(&self) -> usize {
        self.asked.load(Ordering::SeqCst)
    }
}

impl Drop for PageBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve_page(mut s: TcpStream, count: &AtomicUsize) -> std::io::Result<()> {
    let mut head = Vec::new();
    let mut buf = [0u8; 4096];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        let n = s.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
    }
    count.fetch_add(1, Ordering::SeqCst);
    let head = String::from_utf8_lossy(&head).to_ascii_lowercase();
    let field = |name: &str| {
        head.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
            .and_then(|v| v.trim().parse::<u64>().ok())
    };
    let size = field("x-page-bytes").unwrap_or(64) as usize;
    if let Some(ms) = field("x-page-delay-ms") {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
    let mut answer =
        format!("HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: {size}\r\n\r\n")
            .into_bytes();
    answer.resize(answer.len() + size, b'p');
    s.write_all(&answer).await?;
    // Until teapot hangs up: one answer per connection.
    while s.read(&mut buf).await? > 0 {}
    Ok(())
}

/// `VmRSS` of `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    teapot_testkit::procfs::rss_kib(pid).expect("VmRSS") * 1024
}

/// Hand-built HTTP/2 (prior knowledge, RFC 9113 §3.3): a client that
/// grants its streams no window at all.
mod h2raw {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub use crate::common::h2raw::{Frame, request};
    pub use teapot_testkit::h2frames::{ACK, GOAWAY, HEADERS, RST_STREAM, SETTINGS, frame};

    /// RST_STREAM's CANCEL.
    pub const CANCEL: u32 = 0x8;
    /// SETTINGS_INITIAL_WINDOW_SIZE.
    const INITIAL_WINDOW_SIZE: u16 = 0x4;

    /// The preface and SETTINGS with an initial stream window of 0: the
    /// server may send no DATA on any stream until a WINDOW_UPDATE, which
    /// never comes. The server's SETTINGS are acknowledged.
    pub async fn connect_shut(addr: std::net::SocketAddr) -> Conn {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        let mut settings = INITIAL_WINDOW_SIZE.to_be_bytes().to_vec();
        settings.extend_from_slice(&0u32.to_be_bytes());
        hello.extend(frame(SETTINGS, 0, 0, &settings));
        s.write_all(&hello).await.expect("preface");
        let mut conn = Conn { s, buf: Vec::new() };
        let wait = Duration::from_secs(20);
        let first = conn.next(wait).await.expect("the server's SETTINGS");
        assert_eq!(first.kind, SETTINGS, "{first:?}");
        conn.s
            .write_all(&frame(SETTINGS, ACK, 0, &[]))
            .await
            .unwrap();
        conn
    }

    pub struct Conn {
        pub s: TcpStream,
        buf: Vec<u8>,
    }

    impl Conn {
        /// The next frame, or `None` when the connection closed or
        /// `quiet` passed without one.
        pub async fn next(&mut self, quiet: Duration) -> Option<Frame> {
            let mut chunk = [0u8; 16384];
            loop {
                if let Some(f) = Frame::take(&mut self.buf) {
                    return Some(f);
                }
                match tokio::time::timeout(quiet, self.s.read(&mut chunk)).await {
                    Ok(Ok(n)) if n > 0 => self.buf.extend_from_slice(&chunk[..n]),
                    _ => return None,
                }
            }
        }
    }
}

/// The finding this guards against: a stream that never opens its window
/// kept its whole error page (up to 1 MiB) and never ended, so 300 of
/// them took 312 MiB of a replica. Now a page longer than 16 KiB is not
/// held at all (the client gets teapot's short body), and a stream whose
/// window stays shut is reset after the send timeout (here 5 s), which
/// frees what it held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_http2_streams_hold_no_page_and_are_reset() {
    const NS: &str = "ops";
    const CONNECTIONS: u32 = 3;
    const STREAMS: u32 = 100;
    const PAGE: &str = "1000000";
    let errors = PageBackend::start("127.0.0.1".parse().unwrap()).await;
    let mut objects = loopback_service(NS, "errors", errors.addr.port());
    objects.push(service(NS, "empty", &[(Some("http"), 80)]));
    objects.push(annotated(
        NS,
        "empty.test",
        "empty",
        &[("default-backend", "errors")],
    ));
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &[
            "--h2c",
            "--upstream-timeout",
            "5",
            // Every page is asked for: the bound on sub-requests in
            // flight is not what this test is about.
            "--auth-concurrency",
            "1000",
        ],
    )
    .await;
    let proxy = h.proxy.http;
    // One whole exchange first, so that what the process grows by after
    // is the stalled streams'.
    let warm = Request::get("empty.test", "/").header("x-page-bytes", "100");
    assert_eq!(over(&h, Proto::Http1, warm).await.status, 200);
    let before = rss(h.proxy.pid());

    let started = Instant::now();
    let mut conns = Vec::new();
    for _ in 0..CONNECTIONS {
        let mut conn = h2raw::connect_shut(proxy).await;
        let mut burst = Vec::new();
        for i in 0..STREAMS {
            burst.extend(h2raw::request(
                2 * i + 1,
                "GET",
                "empty.test",
                &[(b"x-page-bytes", PAGE.as_bytes())],
                true,
            ));
        }
        conn.s.write_all(&burst).await.unwrap();
        // Every stream's answer head: its page was fetched (or refused),
        // and whatever the stream holds, it holds now.
        let mut heads = 0;
        while heads < STREAMS {
            let f = conn
                .next(REQUEST_TIMEOUT)
                .await
                .unwrap_or_else(|| panic!("{heads} of {STREAMS} answer heads"));
            assert!(
                f.kind != h2raw::RST_STREAM && f.kind != h2raw::GOAWAY,
                "no stream ends before its head: {f:?}"
            );
            heads += u32::from(f.kind == h2raw::HEADERS);
        }
        conns.push(conn);
    }
    let grown = rss(h.proxy.pid()).saturating_sub(before);
    let streams = CONNECTIONS * STREAMS;
    eprintln!(
        "{streams} stalled streams, {PAGE}-byte pages: RSS {before} -> +{grown} bytes ({} per stream); error backend asked {} times",
        grown / u64::from(streams),
        errors.asked()
    );
    assert!(
        errors.asked() >= streams as usize,
        "every stream asked for its page: {}",
        errors.asked()
    );
    assert!(
        grown < 24 * 1024 * 1024,
        "{streams} stalled streams grew the proxy by {grown} bytes"
    );

    // Each stream is reset (CANCEL) once its window stayed shut for the
    // send timeout; nothing else ends them.
    for (c, conn) in conns.iter_mut().enumerate() {
        let mut reset = std::collections::HashSet::new();
        while reset.len() < STREAMS as usize {
            let f = conn.next(Duration::from_secs(20)).await.unwrap_or_else(|| {
                panic!(
                    "connection {c}: {} of {STREAMS} streams reset after {:?}",
                    reset.len(),
                    started.elapsed()
                )
            });
            assert_ne!(f.kind, h2raw::GOAWAY, "{f:?}");
            if f.kind == h2raw::RST_STREAM {
                assert_eq!(f.error_code(), Some(h2raw::CANCEL), "{f:?}");
                reset.insert(f.stream);
            }
        }
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed >= Duration::from_secs(5),
        "reset only after the send timeout: {elapsed:?}"
    );
    let metrics = h.metrics().await;
    let aborts = metric(&metrics, "teapot_client_aborts_total").unwrap_or(0.0);
    assert!(aborts >= f64::from(streams), "client aborts: {aborts}");
}

/// A route without endpoints whose page the error backend serves: the
/// request enters its tenant's gate before the page is asked for, as a
/// forwarded request does. Over the tenant's in-flight bound (1) it gets
/// 503, over its rate (2 a second) 429, and the error backend is not
/// asked; before, every such request cost a page fetch, whatever the
/// tenant's bounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_without_endpoints_is_refused_by_its_tenant_before_its_page() {
    let ip = node_address(false);
    let errors = PageBackend::start(ip).await;
    let mut alpha = node_tenant("alpha", ip);
    alpha["spec"]["limits"] = json!({ "requestsPerSecond": 2, "maxConnections": 1 });
    let objects = vec![
        alpha,
        service("tenant-alpha", "errors", &[(Some("http"), 80)]),
        synced_slice("tenant-alpha", "errors", errors.addr),
        // No endpoint: every request is the 503 the default backend
        // answers.
        service("tenant-alpha", "web", &[(Some("http"), 80)]),
        annotated(
            "tenant-alpha",
            "app.alpha.lb.localhost",
            "web",
            &[("default-backend", "errors")],
        ),
    ];
    let h = Harness::start_with_args(
        &[("tenants.yaml", docs(&objects))],
        &["--tenant-refusal-delay-ms", "0"],
    )
    .await;
    let host = "app.alpha.lb.localhost";
    for proto in [Proto::Http1, Proto::Http2] {
        // The rate's burst back (two a second).
        tokio::time::sleep(Duration::from_millis(1100)).await;
        // In flight: one page request the error backend holds.
        let asked = errors.asked();
        let held = Request::get(host, "/held").header("x-page-delay-ms", "1500");
        let held = spawn_over(&h, proto, held);
        eventually("the page request is in flight", REQUEST_TIMEOUT, || async {
            if errors.asked() > asked {
                Ok(())
            } else {
                Err(errors.asked())
            }
        })
        .await;
        let resp = over(&h, proto, Request::get(host, "/second")).await;
        assert_proxy_answer(&resp, 503, &format!("over the in-flight bound, {proto:?}"));
        assert_eq!(
            errors.asked(),
            asked + 1,
            "{proto:?}: no page for the refused"
        );
        let held = held.await.unwrap();
        assert_eq!(held.status, 200, "{proto:?}: the page: {}", held.text());

        // Over the rate: 429, no page. Sequential requests, so the
        // in-flight bound is never what refuses them.
        tokio::time::sleep(Duration::from_millis(1100)).await;
        let asked = errors.asked();
        let started = Instant::now();
        let mut statuses = Vec::new();
        for _ in 0..8 {
            let resp = over(&h, proto, Request::get(host, "/rate")).await;
            if resp.status == 429 {
                assert_eq!(header(&resp, "retry-after"), "1", "{proto:?}");
            }
            statuses.push(resp.status);
        }
        let fetched = errors.asked() - asked;
        let allowed = 2 + (started.elapsed().as_secs_f64() * 2.0).ceil() as usize;
        assert!(
            statuses.iter().all(|s| [200, 429].contains(s)),
            "{proto:?}: {statuses:?}"
        );
        assert!(
            statuses.contains(&429) && fetched <= allowed,
            "{proto:?}: {statuses:?}, {fetched} pages fetched, at most {allowed} allowed"
        );
        assert_eq!(
            fetched,
            statuses.iter().filter(|s| **s == 200).count(),
            "{proto:?}: a page per request admitted, none for the refused: {statuses:?}"
        );
    }
}
