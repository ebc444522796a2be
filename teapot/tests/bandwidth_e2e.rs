//! End-to-end tests of ingress-nginx's bandwidth limit (`limit-rate`,
//! `limit-rate-after`) and a RouteTrafficPolicy's `bandwidth`, through the
//! real `teapot proxy` binary and a backend answering bodies of any size,
//! over HTTP/1.1 and cleartext HTTP/2:
//!
//! - a 256 KiB body at `limit-rate: 64` takes at least (256 - 16) / 64 s
//!   (a quantum of 8 KiB goes at once, another of credit at most), on both
//!   protocols;
//! - with `limit-rate-after: 64` and `limit-rate: 4`, the first 64 KiB
//!   arrive at once (at 4 KiB/s they would take sixty seconds) and the
//!   rest at the pace;
//! - an unlimited route on the same fleet, on HTTP/2 on the very
//!   connection a limited stream is on, is not slowed meanwhile: it
//!   delivers a megabyte while the limited response still has most of its
//!   bytes to come (bytes compared, not timings);
//! - a value past the bounds keeps the Ingress unrouted, its status naming
//!   the annotation; `limit-rate: "0"` is no limit, as in ingress-nginx;
//! - a RouteTrafficPolicy's `bandwidth` paces an HTTPRoute rule the same.
//!
//! Run with `cargo test -p teapot --test bandwidth_e2e`.

mod common;

use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use http_body_util::{BodyExt, Empty};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const NS: &str = "ops";
const KIB: usize = 1024;

/// An HTTP/1.1 backend answering `GET /.../N` with `N` bytes, keep-alive.
async fn sized_backend() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
                        let mut chunk = [0u8; 4096];
                        match conn.read(&mut chunk).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                        continue;
                    };
                    let head = String::from_utf8_lossy(&buf[..end]).to_string();
                    buf.drain(..end + 4);
                    let size: usize = head
                        .split(' ')
                        .nth(1)
                        .and_then(|t| t.rsplit('/').next()?.parse().ok())
                        .unwrap_or(0);
                    let head = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\ncontent-length: {size}\r\n\r\n"
                    );
                    if conn.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let block = vec![b'x'; 16 * KIB];
                    let mut left = size;
                    while left > 0 {
                        let n = left.min(block.len());
                        if conn.write_all(&block[..n]).await.is_err() {
                            return;
                        }
                        left -= n;
                    }
                }
            });
        }
    });
    addr
}

/// How a response's body arrived: body bytes so far at each read, from
/// when the request was sent.
struct Arrival {
    status: u16,
    /// When the request was sent.
    start: Instant,
    reads: Vec<(Duration, usize)>,
}

impl Arrival {
    fn total(&self) -> usize {
        self.reads.last().map_or(0, |r| r.1)
    }

    fn took(&self) -> Duration {
        self.reads.last().map_or(Duration::ZERO, |r| r.0)
    }

    /// When the first `n` body bytes had arrived.
    fn time_to(&self, n: usize) -> Duration {
        self.reads
            .iter()
            .find(|r| r.1 >= n)
            .unwrap_or_else(|| panic!("{n} bytes never arrived: {}", self.total()))
            .0
    }

    /// Body bytes that had arrived by `at`.
    fn by(&self, at: Instant) -> usize {
        let at = at.saturating_duration_since(self.start);
        self.reads
            .iter()
            .take_while(|r| r.0 <= at)
            .last()
            .map_or(0, |r| r.1)
    }
}

/// `GET host/prefix/size` over HTTP/1.1 on a fresh connection, the
/// body's arrival recorded.
async fn h1_download(addr: SocketAddr, host: &str, prefix: &str, size: usize) -> Arrival {
    let mut conn = TcpStream::connect(addr).await.unwrap();
    let start = Instant::now();
    let request =
        format!("GET {prefix}/{size} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n");
    conn.write_all(request.as_bytes()).await.unwrap();
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 64 * KIB];
    let (mut head_len, mut status) = (None, 0);
    let mut reads = Vec::new();
    loop {
        let n = tokio::time::timeout(REQUEST_TIMEOUT, conn.read(&mut chunk))
            .await
            .expect("a read within the request timeout")
            .unwrap();
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
        if head_len.is_none()
            && let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n")
        {
            head_len = Some(end + 4);
            status = String::from_utf8_lossy(&buf[9..12]).parse().unwrap();
        }
        if let Some(h) = head_len {
            reads.push((start.elapsed(), buf.len() - h));
        }
    }
    Arrival {
        status,
        start,
        reads,
    }
}

/// `GET host/prefix/size` as one stream on `sender`, the body's arrival
/// recorded.
async fn h2_download(mut sender: H2cSender, host: &str, prefix: &str, size: usize) -> Arrival {
    let request = http::Request::builder()
        .uri(format!("http://{host}{prefix}/{size}"))
        .body(Empty::<Bytes>::new().map_err(|e| match e {}).boxed())
        .unwrap();
    let start = Instant::now();
    sender.ready().await.unwrap();
    let response = tokio::time::timeout(REQUEST_TIMEOUT, sender.send_request(request))
        .await
        .expect("a head within the request timeout")
        .unwrap();
    let status = response.status().as_u16();
    let mut body = response.into_body();
    let (mut got, mut reads) = (0, Vec::new());
    while let Some(frame) = tokio::time::timeout(REQUEST_TIMEOUT, body.frame())
        .await
        .expect("a frame within the request timeout")
    {
        if let Ok(data) = frame.unwrap().into_data() {
            got += data.len();
            reads.push((start.elapsed(), got));
        }
    }
    Arrival {
        status,
        start,
        reads,
    }
}

#[derive(Clone, Copy, Debug)]
enum Proto {
    Http1,
    Http2,
}

async fn download(h: &Harness, proto: Proto, host: &str, prefix: &str, size: usize) -> Arrival {
    match proto {
        Proto::Http1 => h1_download(h.proxy.http, host, prefix, size).await,
        Proto::Http2 => h2_download(h2c(h.proxy.http).await, host, prefix, size).await,
    }
}

async fn setup() -> Harness {
    let backend = sized_backend().await;
    let mut objects = loopback_service(NS, "files", backend.port());
    objects.push(annotated(
        NS,
        "paced.test",
        "files",
        &[("limit-rate", "64")],
    ));
    objects.push(annotated(
        NS,
        "after.test",
        "files",
        &[("limit-rate", "4"), ("limit-rate-after", "64")],
    ));
    objects.push(annotated(NS, "open.test", "files", &[]));
    objects.push(annotated(NS, "zero.test", "files", &[("limit-rate", "0")]));
    objects.push(annotated(
        NS,
        "hostile.test",
        "files",
        &[("limit-rate", "1048577")],
    ));
    let h = Harness::start_with_args(&[("manifests.yaml", docs(&objects))], &["--h2c"]).await;
    h.wait_status("the Ingresses reported", |s| {
        [
            "paced.test",
            "after.test",
            "open.test",
            "zero.test",
            "hostile.test",
        ]
        .iter()
        .all(|n| ingress_report(s, NS, n).is_some())
    })
    .await;
    h
}

/// 256 KiB at 64 KiB/s: at least (256 - 16) / 64 s, less a little for
/// the clock, on both protocols at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_rate_paces_each_response() {
    let h = setup().await;
    let (h1, h2) = tokio::join!(
        download(&h, Proto::Http1, "paced.test", "", 256 * KIB),
        download(&h, Proto::Http2, "paced.test", "", 256 * KIB),
    );
    let least = Duration::from_secs_f64((256.0 - 16.0) / 64.0 - 0.25);
    for (proto, got) in [(Proto::Http1, h1), (Proto::Http2, h2)] {
        assert_eq!((got.status, got.total()), (200, 256 * KIB), "{proto:?}");
        assert!(got.took() >= least, "{proto:?} took {:?}", got.took());
        // Paced, not one burst then a wait: half the body is not there
        // before a third of the time.
        assert!(
            got.time_to(128 * KIB) >= Duration::from_secs(1),
            "{proto:?}: 128 KiB after {:?}",
            got.time_to(128 * KIB)
        );
    }
}

/// `limit-rate-after: 64` at 4 KiB/s: the first 64 KiB at once (paced,
/// they would take sixteen seconds), then the rest at the pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_rate_after_goes_at_full_speed_first() {
    let h = setup().await;
    let size = 72 * KIB;
    let (h1, h2) = tokio::join!(
        download(&h, Proto::Http1, "after.test", "", size),
        download(&h, Proto::Http2, "after.test", "", size),
    );
    for (proto, got) in [(Proto::Http1, h1), (Proto::Http2, h2)] {
        assert_eq!((got.status, got.total()), (200, size), "{proto:?}");
        let free = got.time_to(64 * KIB);
        assert!(
            free < Duration::from_secs(8),
            "{proto:?}: 64 KiB after {free:?}"
        );
        // 8 KiB at 4 KiB/s: a quantum of 1 KiB at once, then one per
        // 250 ms.
        let paced = got.took() - free;
        assert!(
            paced >= Duration::from_millis(1500),
            "{proto:?}: the last 8 KiB took {paced:?}"
        );
    }
}

/// While a limited response is under way, an unlimited route of the same
/// fleet (on HTTP/2, on the limited stream's own connection) delivers a
/// megabyte; `limit-rate: "0"` is no limit either. Bytes are compared:
/// the limited response has not got half its body when the others end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_routes_and_streams_go_at_full_speed() {
    let h = setup().await;
    for proto in [Proto::Http1, Proto::Http2] {
        let sender = h2c(h.proxy.http).await;
        let limited = {
            let (http, sender) = (h.proxy.http, sender.clone());
            tokio::spawn(async move {
                match proto {
                    Proto::Http1 => h1_download(http, "paced.test", "", 512 * KIB).await,
                    Proto::Http2 => h2_download(sender, "paced.test", "", 512 * KIB).await,
                }
            })
        };
        let mut fast = 0;
        for host in ["open.test", "zero.test", "open.test", "zero.test"] {
            let got = match proto {
                Proto::Http1 => h1_download(h.proxy.http, host, "", 256 * KIB).await,
                Proto::Http2 => h2_download(sender.clone(), host, "", 256 * KIB).await,
            };
            assert_eq!(
                (got.status, got.total()),
                (200, 256 * KIB),
                "{proto:?} {host}"
            );
            fast += got.total();
        }
        let fast_end = Instant::now();
        let limited = limited.await.unwrap();
        assert_eq!(
            (limited.status, limited.total()),
            (200, 512 * KIB),
            "{proto:?}"
        );
        assert_eq!(fast, 1024 * KIB, "{proto:?}");
        // 256 KiB of it take at least (256 - 16) / 64 s.
        let by_then = limited.by(fast_end);
        assert!(
            by_then < 256 * KIB,
            "{proto:?}: the limited response had {by_then} bytes when 1 MiB of others had gone"
        );
    }
}

/// A rate past the bound keeps its Ingress unrouted (teapot's 404), the
/// status naming the annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_past_the_bound_is_refused() {
    let h = setup().await;
    let got = h1_download(h.proxy.http, "hostile.test", "", 16).await;
    assert_eq!(got.status, 404);
    let status = h.status().await;
    let report = ingress_report(&status, NS, "hostile.test").unwrap();
    let accepted = condition(report, "Accepted").expect("Accepted");
    assert_eq!(accepted["status"], "False");
    let message = accepted["message"].as_str().unwrap();
    assert!(
        message.contains("nginx.ingress.kubernetes.io/limit-rate") && message.contains("1048576"),
        "{message}"
    );
}

/// A RouteTrafficPolicy's `bandwidth` on one rule of an HTTPRoute: 128
/// KiB at 64 KiB/s after 32 KiB at full speed, on both protocols; the
/// route's other rule is not paced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_traffic_policy_paces_a_rule() {
    const GW: &str = "gw-bandwidth";
    const HOST: &str = "files.example.com";
    let backend = sized_backend().await;
    let rule = |name: &str, prefix: &str| {
        json!({
            "name": name,
            "matches": [{ "path": { "type": "PathPrefix", "value": prefix } }],
            "backendRefs": [{ "name": "files", "port": 80 }],
        })
    };
    let mut objects = vec![
        gateway_gw(
            GW,
            json!([{ "name": "http", "protocol": "HTTP", "port": 80 }]),
        ),
        http_route(
            GW,
            "files",
            json!({ "name": "gw" }),
            &[HOST],
            json!([rule("slow", "/slow"), rule("fast", "/fast")]),
        ),
        json!({
            "apiVersion": "teapot.dev/v1alpha1",
            "kind": "RouteTrafficPolicy",
            "metadata": { "name": "slow", "namespace": GW },
            "spec": {
                "targetRefs": [{ "group": "gateway.networking.k8s.io", "kind": "HTTPRoute",
                                 "name": "files", "sectionName": "slow" }],
                "bandwidth": { "limitKiBPerSecond": 64, "unlimitedKiB": 32 },
            },
        }),
    ];
    objects.extend(loopback_service(GW, "files", backend.port()));
    let h = Harness::start_with_args(&[("gw.yaml", docs(&objects))], &["--h2c"]).await;
    let status = h.wait_route_traffic_policies(1).await;
    let conditions = status["routeTrafficPolicies"][0]["status"].to_string();
    assert!(conditions.contains("\"True\""), "{conditions}");
    let size = 128 * KIB;
    let get = |proto: Proto, prefix: &'static str| download(&h, proto, HOST, prefix, size);
    let (slow1, slow2, fast1, fast2) = tokio::join!(
        get(Proto::Http1, "/slow"),
        get(Proto::Http2, "/slow"),
        get(Proto::Http1, "/fast"),
        get(Proto::Http2, "/fast"),
    );
    // 96 KiB paced: a quantum at once, another of credit at most.
    let least = Duration::from_secs_f64((128.0 - 32.0 - 16.0) / 64.0 - 0.25);
    for (what, got) in [("h1", &slow1), ("h2", &slow2)] {
        assert_eq!((got.status, got.total()), (200, size), "{what}");
        assert!(got.took() >= least, "{what} took {:?}", got.took());
    }
    for (what, got) in [("h1", &fast1), ("h2", &fast2)] {
        assert_eq!((got.status, got.total()), (200, size), "{what} fast");
        // The other rule is not paced: all of it before the paced ones
        // had half of theirs.
        let half = slow1.time_to(size / 2).min(slow2.time_to(size / 2));
        assert!(got.took() < half, "{what} fast took {:?}", got.took());
    }
}

/// The fleet's timeouts hold on a paced route, and the pace does not trip
/// them: with `--upstream-timeout 2` (each backend read and each client
/// write), a response paced over four seconds completes on both protocols,
/// as no wait of the pace is longer than a piece (125 ms here) and every
/// read of the backend and write to the client is prompt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pace_longer_than_the_timeouts_completes() {
    let backend = sized_backend().await;
    let mut objects = loopback_service(NS, "files", backend.port());
    objects.push(annotated(
        NS,
        "paced.test",
        "files",
        &[("limit-rate", "64")],
    ));
    let h = Harness::start_with_args(
        &[("manifests.yaml", docs(&objects))],
        &["--h2c", "--upstream-timeout", "2"],
    )
    .await;
    h.wait_status("the Ingress reported", |s| {
        ingress_report(s, NS, "paced.test").is_some()
    })
    .await;
    let (h1, h2) = tokio::join!(
        download(&h, Proto::Http1, "paced.test", "", 256 * KIB),
        download(&h, Proto::Http2, "paced.test", "", 256 * KIB),
    );
    for (proto, got) in [(Proto::Http1, h1), (Proto::Http2, h2)] {
        assert_eq!((got.status, got.total()), (200, 256 * KIB), "{proto:?}");
        assert!(
            got.took() >= Duration::from_secs(3),
            "{proto:?} took {:?}",
            got.took()
        );
    }
}
