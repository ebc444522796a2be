//! Edge hardening against the real binary: a request-smuggling
//! corpus over raw TCP (and raw HTTP/2 frames) in front of two tenants'
//! backends, Host confusion, size limits, and a slowloris run.
//!
//! The smuggling invariant: tenant B's backend only ever receives requests
//! the test addressed to it. Every payload is sent with `Host: a.example`
//! and hides a request for `b.example` where some parser would see one; the
//! proxy must refuse (400 or close) or read the hidden bytes as what RFC
//! 9112 says they are (A's body). Run with `--nocapture` for the table.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use teapot_testkit::client;
use teapot_testkit::echo::EchoServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: b.example\r\n\r\n";
const RAW_TIMEOUT: Duration = Duration::from_secs(4);

/// What the proxy may do with a payload.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Expect {
    /// 400 (or another 4xx limit answer) and close, or close without answer.
    Refused,
    /// Served as this many requests to A, with the hidden bytes as body.
    Served(usize),
    /// Lenient but consistent: Pingora reads the hidden bytes as part of
    /// A's request (a trailer section, or chunk-size whitespace), answers A
    /// once, and nothing reaches B.
    Absorbed,
}

struct Payload {
    name: String,
    bytes: Vec<u8>,
    expect: Expect,
}

fn payload(name: impl Into<String>, bytes: impl Into<Vec<u8>>, expect: Expect) -> Payload {
    Payload {
        name: name.into(),
        bytes: bytes.into(),
        expect,
    }
}

/// A POST to A with `headers` and `body` (both raw).
fn post(headers: &str, body: &str) -> Vec<u8> {
    format!("POST / HTTP/1.1\r\nHost: a.example\r\n{headers}\r\n{body}").into_bytes()
}

fn corpus() -> Vec<Payload> {
    use Expect::*;
    let mut out = Vec::new();
    let chunked_body = format!("0\r\n\r\n{SMUGGLED}");
    let cl = chunked_body.len();
    // Transfer-Encoding spellings: the first three are valid on their own,
    // the rest are obfuscations some parser somewhere reads as chunked.
    let valid_te = [
        "Transfer-Encoding: chunked\r\n",
        "transfer-encoding: CHUNKED\r\n",
        "Transfer-Encoding:chunked\r\n",
    ];
    let obfuscated_te = [
        "Transfer-Encoding: chunked, identity\r\n",
        "Transfer-Encoding: identity, chunked\r\n",
        "Transfer-Encoding: identity\r\n",
        "Transfer-Encoding: xchunked\r\n",
        "Transfer-Encoding: chunkedx\r\n",
        "Transfer-Encoding: \"chunked\"\r\n",
        "Transfer-Encoding: gzip, chunked\r\n",
        "Transfer-Encoding: chunked, chunked\r\n",
        "Transfer-Encoding : chunked\r\n",
        "Transfer-Encoding\t: chunked\r\n",
        "Transfer-Encoding:\x0bchunked\r\n",
        "Transfer-Encoding: chunked\x0b\r\n",
        "Transfer-Encoding: \x0cchunked\r\n",
        "Transfer-Encoding: ch\0unked\r\n",
        "X-Pad: 1\r\n Transfer-Encoding: chunked\r\n",
        "X-Pad: 1\r\n\tTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding:\r\n chunked\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
        "Transfer-Encoding: chunked\n",
        "Transfer-Encoding: chunked\rX-Pad: 1\r\n",
        "Transfer-Encoding: chunked;q=1\r\n",
    ];
    // CL.TE and TE.CL: a length and an encoding together, in both orders.
    for (i, te) in valid_te.iter().chain(&obfuscated_te).enumerate() {
        out.push(payload(
            format!("CL.TE #{i} {te:?}"),
            post(&format!("Content-Length: {cl}\r\n{te}"), &chunked_body),
            Refused,
        ));
    }
    for (i, te) in valid_te.iter().enumerate() {
        let body = format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len());
        out.push(payload(
            format!("TE.CL #{i} {te:?}"),
            post(&format!("{te}Content-Length: 4\r\n"), &body),
            Refused,
        ));
    }
    // TE.TE: an obfuscated encoding alone; refusing is the only safe answer.
    for (i, te) in obfuscated_te.iter().enumerate() {
        out.push(payload(
            format!("TE.TE #{i} {te:?}"),
            post(te, &chunked_body),
            Refused,
        ));
    }
    // Content-Length tricks; the body is the hidden request.
    let n = SMUGGLED.len();
    for (i, h) in [
        format!("Content-Length: {n}\r\nContent-Length: 0\r\n"),
        format!("Content-Length: 0\r\nContent-Length: {n}\r\n"),
        format!("Content-Length: {n}\r\nContent-Length: {n}\r\n"),
        format!("Content-Length: {n}, {n}\r\n"),
        format!("Content-Length: {n},0\r\n"),
        format!("Content-Length: +{n}\r\n"),
        "Content-Length: -1\r\n".to_string(),
        format!("Content-Length: 0x{n:x}\r\n"),
        format!("Content-Length: {n}\x0b\r\n"),
        format!("Content-Length: {n} 0\r\n"),
        format!("Content-Length : {n}\r\n"),
        format!("Content-Length:\r\n {n}\r\n"),
        "Content-Length: 99999999999999999999999\r\n".to_string(),
        format!("Content-Length: {n}\n"),
    ]
    .iter()
    .enumerate()
    {
        out.push(payload(
            format!("CL #{i} {h:?}"),
            post(h, SMUGGLED),
            Refused,
        ));
    }
    // Valid framings that carry the hidden request as body: served, to A.
    out.push(payload(
        "body: CL",
        post(
            &format!("Content-Length: {n}\r\nConnection: close\r\n"),
            SMUGGLED,
        ),
        Served(1),
    ));
    out.push(payload(
        "body: CL with OWS",
        post(
            &format!("Content-Length:  {n} \r\nConnection: close\r\n"),
            SMUGGLED,
        ),
        Served(1),
    ));
    out.push(payload(
        "body: chunked",
        post(
            "Transfer-Encoding: chunked\r\nConnection: close\r\n",
            &format!("{n:x}\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        ),
        Served(1),
    ));
    out.push(payload(
        "body: chunked, extension",
        post(
            "Transfer-Encoding: chunked\r\nConnection: close\r\n",
            &format!("{n:X};ext=1\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        ),
        Served(1),
    ));
    // Chunk-size tricks: each makes a lax parser end the body early.
    let chunk_tricks = [
        format!("0x{n:x}\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("+{n:x}\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("-1\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("{n:x}\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("ffffffffffffffffff\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("1\r\nAB\r\n{SMUGGLED}"),
        format!("{n:x};a=\"\r\n\"\r\n{SMUGGLED}\r\n0\r\n\r\n"),
        format!("0\r\nTransfer-Encoding: identity\r\n{SMUGGLED}"),
        format!("0\n\n{SMUGGLED}"),
        format!("0\r\n\n{SMUGGLED}"),
        format!("{n:x} \r\n{SMUGGLED}\r\n0\r\n\r\n"),
    ];
    for (i, body) in chunk_tricks.iter().enumerate() {
        let expect = if body.starts_with("0\r\nTransfer") || body.contains(" \r\n") {
            Absorbed
        } else {
            Refused
        };
        out.push(payload(
            format!("chunk #{i} {body:.24?}"),
            post("Transfer-Encoding: chunked\r\n", body),
            expect,
        ));
    }
    // Framing outside the length headers.
    let misc: [(&str, String); 13] = [
        ("HTTP/1.0 body without length", format!("POST / HTTP/1.0\r\nHost: a.example\r\nConnection: keep-alive\r\n\r\n{SMUGGLED}")),
        ("HTTP/1.0 chunked", format!("POST / HTTP/1.0\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n{chunked_body}")),
        ("bare LF request line", format!("GET / HTTP/1.1\nHost: a.example\r\nContent-Length: {n}\r\n\r\n{SMUGGLED}")),
        ("bare LF header end", format!("GET / HTTP/1.1\r\nHost: a.example\r\nContent-Length: {n}\n\n{SMUGGLED}")),
        ("bare CR in value", format!("GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\rContent-Length: {n}\r\n\r\n{SMUGGLED}")),
        ("NUL in value", format!("GET / HTTP/1.1\r\nHost: a.example\r\nX-A: 1\0\r\nContent-Length: {n}\r\n\r\n{SMUGGLED}")),
        ("invalid header name", format!("GET / HTTP/1.1\r\nHost: a.example\r\nX[A]: 1\r\nContent-Length: {n}\r\n\r\n{SMUGGLED}")),
        ("duplicate Host", "GET / HTTP/1.1\r\nHost: a.example\r\nHost: b.example\r\n\r\n".to_string()),
        ("comma-joined Host", "GET / HTTP/1.1\r\nHost: a.example, b.example\r\n\r\n".to_string()),
        ("Host with userinfo", "GET / HTTP/1.1\r\nHost: b.example@a.example\r\n\r\n".to_string()),
        ("absolute-form against Host", "GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n".to_string()),
        ("Upgrade: h2c", "GET / HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n".to_string()),
        ("pipelined: valid then CL.TE", format!("GET / HTTP/1.1\r\nHost: a.example\r\n\r\nPOST / HTTP/1.1\r\nHost: a.example\r\nContent-Length: {cl}\r\nTransfer-Encoding: chunked\r\n\r\n{chunked_body}")),
    ];
    for (name, bytes) in misc {
        // The valid first request is served; the second is refused.
        let expect = if name.starts_with("pipelined") {
            Served(1)
        } else {
            Refused
        };
        out.push(payload(name, bytes, expect));
    }
    out
}

/// Statuses of the responses in a raw answer, in order.
fn statuses(answer: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(answer);
    text.match_indices("HTTP/1.1 ")
        .filter_map(|(i, _)| text.get(i + 9..i + 12)?.parse().ok())
        .collect()
}

async fn two_tenants(args: &[&str]) -> (Harness, EchoServer, EchoServer) {
    let a = echo("tenant-a", "web", "a-0").await;
    let b = echo("tenant-b", "web", "b-0").await;
    let mut documents = echo_service("tenant-a", "web", &[&a]);
    documents.extend(echo_service("tenant-b", "web", &[&b]));
    documents.push(simple_ingress("tenant-a", "web", "a.example", "web"));
    documents.push(simple_ingress("tenant-b", "web", "b.example", "web"));
    let h = Harness::start_with_args(&[("tenants.yaml", docs(&documents))], args).await;
    assert_eq!(h.echo_json("a.example", "/").await["namespace"], "tenant-a");
    assert_eq!(h.echo_json("b.example", "/").await["namespace"], "tenant-b");
    (h, a, b)
}

/// Both backends' request counts once neither has changed for 150 ms
/// (at most 3 s).
async fn settled(a: &EchoServer, b: &EchoServer) -> (u64, u64) {
    let start = std::time::Instant::now();
    let mut last = (a.requests(), b.requests());
    loop {
        tokio::time::sleep(Duration::from_millis(150)).await;
        let now = (a.requests(), b.requests());
        if now == last || start.elapsed() > Duration::from_secs(3) {
            return now;
        }
        last = now;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn smuggling_corpus_never_reaches_the_other_tenant() {
    let (h, a, b) = two_tenants(&[]).await;
    let corpus = corpus();
    assert!(corpus.len() >= 50, "corpus has {} payloads", corpus.len());
    let mut failures = Vec::new();
    let (mut refused, mut served) = (0, 0);
    for p in &corpus {
        let (a_before, b_before) = (a.requests(), b.requests());
        let answer = client::raw_exchange(h.proxy.http, &p.bytes, RAW_TIMEOUT)
            .await
            .unwrap_or_else(|e| panic!("{}: {e}", p.name));
        let got = statuses(&answer);
        // The client's answer can come before the backend's count: a head
        // forwarded while the body was still being read reaches A after
        // the 400 was written. Count once both have been still a while, so
        // a late arrival is charged to its own payload, not the next one.
        let (a_after, b_after) = settled(&a, &b).await;
        let b_got = b_after - b_before;
        let a_got = a_after - a_before;
        let ok = b_got == 0
            && match p.expect {
                Expect::Refused => {
                    got.is_empty() || (got.len() == 1 && (400..500).contains(&got[0]))
                }
                Expect::Absorbed => got.len() <= 1 && a_got <= 1,
                Expect::Served(n) => {
                    got.len() >= n && got[..n].iter().all(|s| *s == 200) && a_got == n as u64
                }
            };
        println!(
            "{:<8} {:<60} -> {:?} (A +{a_got}, B +{b_got})",
            if ok { "ok" } else { "FAIL" },
            p.name,
            got
        );
        if got.first().is_some_and(|s| (400..500).contains(s)) || got.is_empty() {
            refused += 1;
        } else {
            served += 1;
        }
        if !ok {
            failures.push(format!(
                "{}: expected {:?}, got {got:?}, A +{a_got}, B +{b_got}: {}",
                p.name,
                p.expect,
                String::from_utf8_lossy(&answer)
            ));
        }
    }
    println!(
        "{} payloads: {refused} refused or closed, {served} served to A, B untouched",
        corpus.len()
    );
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The detector is live: a request B is actually sent does reach B.
    let before = b.requests();
    let answer = client::raw_exchange(
        h.proxy.http,
        b"GET /asked HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n",
        RAW_TIMEOUT,
    )
    .await
    .unwrap();
    assert_eq!(statuses(&answer), vec![200]);
    assert_eq!(b.requests(), before + 1);
    let metrics = h.metrics().await;
    assert!(
        metric(
            &metrics,
            "teapot_edge_refusals_total{reason=\"both_lengths\"}"
        )
        .unwrap_or(0.0)
            >= 1.0,
        "{metrics}"
    );
}

/// A backend that records every byte it receives and answers 200 (not
/// 101) to the first request, after a pause in which a proxy that forwards
/// early would have sent the bytes following the header.
async fn recording_backend() -> (SocketAddr, Arc<Log>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log = Arc::new(Log::default());
    let l = log.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let l = l.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !got.windows(4).any(|w| w == b"\r\n\r\n") {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => got.extend_from_slice(&buf[..n]),
                    }
                }
                let end = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
                l.extra.fetch_add(got.len() - end, Ordering::SeqCst);
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_millis(500), s.read(&mut buf)).await
                {
                    l.extra.fetch_add(n, Ordering::SeqCst);
                }
                l.requests.fetch_add(1, Ordering::SeqCst);
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
            });
        }
    });
    (addr, log)
}

#[derive(Default)]
struct Log {
    requests: AtomicUsize,
    /// Bytes received after the first request header.
    extra: AtomicUsize,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_after_an_upgrade_request_wait_for_101() {
    let (addr, log) = recording_backend().await;
    let b = echo("tenant-b", "web", "b-0").await;
    let mut documents = tenant_a_routes_to(addr);
    documents.push(simple_ingress("tenant-b", "web", "b.example", "web"));
    documents.extend(echo_service("tenant-b", "web", &[&b]));
    let h = Harness::start(&[("t.yaml", docs(&documents))]).await;
    for upgrade in ["websocket", "foo"] {
        let req = format!(
            "GET /ws HTTP/1.1\r\nHost: a.example\r\nConnection: Upgrade\r\nUpgrade: {upgrade}\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n{SMUGGLED}"
        );
        let answer = client::raw_exchange(h.proxy.http, req.as_bytes(), RAW_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(statuses(&answer).first(), Some(&200), "{upgrade}");
    }
    assert_eq!(log.requests.load(Ordering::SeqCst), 2);
    assert_eq!(
        log.extra.load(Ordering::SeqCst),
        0,
        "bytes after the upgrade request reached the backend before any 101"
    );
    assert_eq!(b.requests(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_authority_decides_routing() {
    let (h, a, b) = two_tenants(&[]).await;
    // Absolute form with the same Host: routed on it; the backend sees it.
    let answer = client::raw_exchange(
        h.proxy.http,
        b"GET http://a.example/x HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        RAW_TIMEOUT,
    )
    .await
    .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert_eq!(statuses(&answer), vec![200], "{text}");
    assert!(text.contains("tenant-a"), "{text}");
    assert!(text.to_ascii_lowercase().contains("a.example"), "{text}");
    for (what, raw) in [
        (
            "absolute form differs from Host",
            &b"GET http://b.example/ HTTP/1.1\r\nHost: a.example\r\n\r\n"[..],
        ),
        (
            "absolute form differs from Host (reverse)",
            b"GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
        ),
        (
            "two Host headers",
            b"GET / HTTP/1.1\r\nHost: b.example\r\nHost: a.example\r\n\r\n",
        ),
        (
            "comma-joined",
            b"GET / HTTP/1.1\r\nHost: b.example,a.example\r\n\r\n",
        ),
        (
            "Host with path",
            b"GET / HTTP/1.1\r\nHost: b.example/x\r\n\r\n",
        ),
    ] {
        let before = (a.requests(), b.requests());
        let answer = client::raw_exchange(h.proxy.http, raw, RAW_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            statuses(&answer),
            vec![400],
            "{what}: {}",
            String::from_utf8_lossy(&answer)
        );
        assert_eq!((a.requests(), b.requests()), before, "{what}");
    }
}

/// Sends each raw request on its own connection; the first answer's
/// status must be the expected one.
async fn expect_first_status(proxy: SocketAddr, cases: Vec<(&str, Vec<u8>, u16)>) {
    for (what, raw, status) in cases {
        let answer = client::raw_exchange(proxy, &raw, RAW_TIMEOUT)
            .await
            .unwrap();
        assert_eq!(
            statuses(&answer).first(),
            Some(&status),
            "{what}: {}",
            String::from_utf8_lossy(&answer)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn size_limits_answer_431_414_413() {
    let (h, _a, _b) = two_tenants(&[
        "--max-headers",
        "20",
        "--max-header-size",
        "4k",
        "--max-request-line",
        "1k",
        "--max-body-size",
        "1k",
    ])
    .await;
    let many: String = (0..21).map(|i| format!("X-{i}: v\r\n")).collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "too many headers",
            format!("GET / HTTP/1.1\r\nHost: a.example\r\n{many}\r\n").into_bytes(),
            431,
        ),
        (
            "header block too large",
            format!(
                "GET / HTTP/1.1\r\nHost: a.example\r\nX: {}\r\n\r\n",
                "v".repeat(5000)
            )
            .into_bytes(),
            431,
        ),
        (
            "request line too long",
            format!(
                "GET /{} HTTP/1.1\r\nHost: a.example\r\n\r\n",
                "p".repeat(2000)
            )
            .into_bytes(),
            414,
        ),
        (
            "declared body too large",
            post("Content-Length: 2000\r\n", &"b".repeat(2000)),
            413,
        ),
        (
            "chunked body too large",
            post(
                "Transfer-Encoding: chunked\r\n",
                &format!("7d0\r\n{}\r\n0\r\n\r\n", "b".repeat(2000)),
            ),
            413,
        ),
    ];
    expect_first_status(h.proxy.http, cases).await;
    // Under the limits all is well.
    let ok = post(
        "Content-Length: 1000\r\nConnection: close\r\n",
        &"b".repeat(1000),
    );
    let answer = client::raw_exchange(h.proxy.http, &ok, RAW_TIMEOUT)
        .await
        .unwrap();
    assert_eq!(statuses(&answer), vec![200]);

    // Per route: `teapot.dev/max-body-size` lowers the operator maximum
    // for its Ingress only, and cannot raise it.
    let annotated = |name: &str, host: &str, size: &str| {
        let mut i = simple_ingress("tenant-a", name, host, "web");
        i["metadata"]["annotations"] = serde_json::json!({ "teapot.dev/max-body-size": size });
        i
    };
    h.apply(
        "per-route.yaml",
        &docs(&[
            annotated("small", "small.example", "100"),
            annotated("large", "large.example", "1m"),
        ]),
    )
    .await;
    let to = |host: &str, headers: &str, body: &str| {
        format!("POST / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n{headers}\r\n{body}")
            .into_bytes()
    };
    let chunked = |n: usize| format!("{n:x}\r\n{}\r\n0\r\n\r\n", "b".repeat(n));
    let route_cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "declared over the route's limit",
            to("small.example", "Content-Length: 200\r\n", &"b".repeat(200)),
            413,
        ),
        (
            "chunked over the route's limit",
            to(
                "small.example",
                "Transfer-Encoding: chunked\r\n",
                &chunked(200),
            ),
            413,
        ),
        (
            "under the route's limit",
            to("small.example", "Content-Length: 100\r\n", &"b".repeat(100)),
            200,
        ),
        (
            "the same body on another route of the tenant",
            to("a.example", "Content-Length: 200\r\n", &"b".repeat(200)),
            200,
        ),
        (
            "a route annotation above the operator maximum",
            to(
                "large.example",
                "Content-Length: 2000\r\n",
                &"b".repeat(2000),
            ),
            413,
        ),
        (
            "under the operator maximum on the large route",
            to(
                "large.example",
                "Content-Length: 1000\r\n",
                &"b".repeat(1000),
            ),
            200,
        ),
    ];
    expect_first_status(h.proxy.http, route_cases).await;
}

/// One GET from a given local address; the status.
async fn get_from(local: &str, proxy: SocketAddr, host: &str) -> std::io::Result<u16> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{local}:0").parse().unwrap())?;
    let mut s = socket.connect(proxy).await?;
    s.write_all(format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes())
        .await?;
    let mut answer = Vec::new();
    s.read_to_end(&mut answer).await?;
    statuses(&answer)
        .first()
        .copied()
        .ok_or_else(|| std::io::Error::other("no answer"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowloris_does_not_starve_other_clients() {
    const SLOW: usize = 120;
    let (h, _a, _b) = two_tenants(&[
        "--header-read-timeout",
        "3",
        "--max-connections-per-client",
        "60",
    ])
    .await;
    let proxy = h.proxy.http;
    let closed = Arc::new(AtomicUsize::new(0));
    let mut slow = Vec::new();
    for _ in 0..SLOW {
        let closed = closed.clone();
        slow.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(proxy).await else {
                closed.fetch_add(1, Ordering::SeqCst);
                return;
            };
            let _ = s.write_all(b"GET / HTTP/1.1\r\nHost: a.example\r\n").await;
            // A byte a second until the proxy gives up on us.
            let mut buf = [0u8; 64];
            loop {
                tokio::select! {
                    r = s.read(&mut buf) => {
                        if matches!(r, Ok(0) | Err(_)) {
                            closed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                    () = tokio::time::sleep(Duration::from_secs(1)) => {
                        if s.write_all(b"X").await.is_err() {
                            closed.fetch_add(1, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
        }));
    }
    // Meanwhile a client from another address keeps getting answers.
    for round in 0..10 {
        let status =
            tokio::time::timeout(REQUEST_TIMEOUT, get_from("127.0.0.2", proxy, "a.example"))
                .await
                .unwrap_or_else(|_| panic!("round {round}: no answer in time"))
                .unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(status, 200, "round {round}");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Every slow connection is eventually closed by the proxy: the ones
    // over the per-client cap at once, the rest at the header deadline.
    eventually(
        "every slowloris connection closed",
        Duration::from_secs(60),
        || async {
            let n = closed.load(Ordering::SeqCst);
            if n == SLOW { Ok(()) } else { Err(n) }
        },
    )
    .await;
    for t in slow {
        t.await.unwrap();
    }
    let metrics = h.metrics().await;
    let timeouts = metric(
        &metrics,
        "teapot_edge_refusals_total{reason=\"header_timeout\"}",
    )
    .unwrap_or(0.0);
    let capped = metric(
        &metrics,
        "teapot_edge_refusals_total{reason=\"client_connection_cap\"}",
    )
    .unwrap_or(0.0);
    println!(
        "slowloris: {SLOW} connections, {timeouts} closed at the header deadline, {capped} over the per-client cap"
    );
    assert!(timeouts >= 1.0 && capped >= 1.0, "{metrics}");
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    let i = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[i]
}

/// Sequential requests of the calm tenant on one kept-alive connection;
/// their latencies.
async fn calm_window(
    conn: &mut client::Connection,
    req: &client::Request,
    n: usize,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let started = std::time::Instant::now();
        let resp = tokio::time::timeout(REQUEST_TIMEOUT, conn.send(req))
            .await
            .unwrap_or_else(|_| panic!("calm request {i}: no answer in time"))
            .unwrap_or_else(|e| panic!("calm request {i}: {e}"));
        out.push(started.elapsed());
        assert_eq!(resp.status, 200, "calm request {i}: {}", resp.text());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_tenants_flood_degrades_only_that_tenant() {
    // Rounds of (unloaded, loaded) windows, interleaved so that other load
    // on the machine drifts into both sides alike.
    const ROUNDS: usize = 4;
    const WINDOW: usize = 750;
    const FLOODERS: usize = 64;
    let (flood_echo, mut documents) = limited_tenant_route(
        "flood",
        common::node_address(false),
        serde_json::json!({ "requestsPerSecond": 200, "maxConnections": 8 }),
        "app.flood.lb.localhost",
    )
    .await;
    let (calm_echo, calm_docs) = limited_tenant_route(
        "calm",
        common::node_address(true),
        serde_json::json!({}),
        "app.calm.lb.localhost",
    )
    .await;
    documents.extend(calm_docs);
    let delay = std::env::var("TEAPOT_TEST_REFUSAL_DELAY_MS").unwrap_or_else(|_| "500".into());
    let h = Harness::start_with_args(
        &[("tenants.yaml", docs(&documents))],
        &["--tenant-refusal-delay-ms", &delay],
    )
    .await;
    let proxy = h.proxy.http;
    assert_eq!(
        h.echo_json("app.flood.lb.localhost", "/").await["namespace"],
        "tenant-flood"
    );
    assert_eq!(
        h.echo_json("app.calm.lb.localhost", "/").await["namespace"],
        "tenant-calm"
    );

    let calm_req = client::Request::get("app.calm.lb.localhost", "/");
    let mut calm = client::Connection::open(proxy, &client::Transport::Plain, client::Proto::Http1)
        .await
        .expect("calm connection");
    calm_window(&mut calm, &calm_req, 200).await; // warm-up

    let statuses = Arc::new(std::sync::Mutex::new(
        std::collections::BTreeMap::<u16, u64>::new(),
    ));
    let (mut unloaded, mut loaded) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        unloaded.extend(calm_window(&mut calm, &calm_req, WINDOW).await);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flooders: Vec<_> = (0..FLOODERS)
            .map(|i| {
                let (stop, statuses) = (stop.clone(), statuses.clone());
                tokio::spawn(async move {
                    // Half of the flood holds its requests open at the
                    // backend, which is what fills the connection cap.
                    let mut req = client::Request::get("app.flood.lb.localhost", "/");
                    if i % 2 == 0 {
                        req = req.header(teapot_testkit::echo::DELAY_HEADER, "200");
                    }
                    while !stop.load(Ordering::Relaxed) {
                        let Ok(mut conn) = client::Connection::open(
                            proxy,
                            &client::Transport::Plain,
                            client::Proto::Http1,
                        )
                        .await
                        else {
                            continue;
                        };
                        while !stop.load(Ordering::Relaxed) {
                            match conn.send(&req).await {
                                Ok(resp) => {
                                    *statuses.lock().unwrap().entry(resp.status).or_default() += 1
                                }
                                Err(_) => break,
                            }
                        }
                    }
                })
            })
            .collect();
        // Let the flood use up its burst and reach its steady state.
        tokio::time::sleep(Duration::from_millis(1500)).await;
        loaded.extend(calm_window(&mut calm, &calm_req, WINDOW).await);
        stop.store(true, Ordering::Relaxed);
        for f in flooders {
            f.await.unwrap();
        }
    }
    let (p50_u, p99_u) = (
        percentile(&mut unloaded, 0.5),
        percentile(&mut unloaded, 0.99),
    );
    let (p50_l, p99_l) = (percentile(&mut loaded, 0.5), percentile(&mut loaded, 0.99));
    let statuses = statuses.lock().unwrap().clone();
    let metrics = h.metrics().await;
    let refused = |reason: &str| {
        metric(
            &metrics,
            &format!("teapot_edge_refusals_total{{reason=\"{reason}\"}}"),
        )
        .unwrap_or(0.0)
    };
    // Below a couple of milliseconds a p99 on this shared 2-core machine is
    // the OS scheduler's (the test's client, both backends and the proxy
    // share the cores), not the proxy's fairness: a calm tenant whose
    // requests are starved shows tens of milliseconds. So the unloaded p99
    // counts as at least SCHEDULER_NOISE; with thread-per-core serving the
    // unloaded p99 is often well under a millisecond, where a doubling is
    // one preemption.
    const SCHEDULER_NOISE: Duration = Duration::from_millis(2);
    let ratio = p99_l.as_secs_f64() / p99_u.max(SCHEDULER_NOISE).as_secs_f64();
    println!(
        "fairness: calm tenant p50/p99 unloaded {p50_u:?}/{p99_u:?}, during the flood {p50_l:?}/{p99_l:?} (p99 ratio {ratio:.2}, {} samples each); flood answers {statuses:?}; refusals tenant_rate {} tenant_connections {}; flood backend served {}, calm backend {}",
        unloaded.len(),
        refused("tenant_rate"),
        refused("tenant_connections"),
        flood_echo.requests(),
        calm_echo.requests(),
    );
    assert!(
        statuses.get(&429).is_some_and(|n| *n > 0) && statuses.get(&503).is_some_and(|n| *n > 0),
        "the flood meets both of its tenant's limits: {statuses:?}"
    );
    assert!(
        statuses.keys().all(|s| [200, 429, 503].contains(s)),
        "{statuses:?}"
    );
    // Starvation shows as tens of milliseconds, ten times the floor and
    // more; a compile running beside the test has pushed an unstarved p99
    // to twice the floor (4.3 ms) on its own.
    assert!(
        ratio <= 4.0,
        "the calm tenant's p99 went from {p99_u:?} to {p99_l:?} during the other tenant's flood"
    );
}

/// Hand-built HTTP/2 frames (RFC 9113) and HPACK literals (RFC 7541 §6.2.2,
/// never indexed, no Huffman), so a test can send what no well-behaved
/// client library would: control bytes in fields, lengths that lie,
/// resets in bulk.
mod h2raw {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub use crate::common::h2raw::{Frame, request};
    pub use teapot_testkit::h2frames::{
        DATA, END_STREAM, GOAWAY, HEADERS, RST_STREAM, SETTINGS, WINDOW_UPDATE, frame,
    };

    pub const ENHANCE_YOUR_CALM: u32 = 0xb;
    pub const REFUSED_STREAM: u32 = 0x7;

    pub fn rst(stream: u32, code: u32) -> Vec<u8> {
        frame(RST_STREAM, 0, stream, &code.to_be_bytes())
    }

    /// Connection preface and an empty SETTINGS frame.
    pub async fn connect(addr: std::net::SocketAddr) -> TcpStream {
        let mut s = TcpStream::connect(addr).await.expect("connect");
        let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
        hello.extend(frame(SETTINGS, 0, 0, &[]));
        s.write_all(&hello).await.expect("preface");
        s
    }

    /// `kind:error_code` of each frame, for the test's table.
    pub fn summary(frames: &[Frame]) -> String {
        frames
            .iter()
            .map(|f| format!("{}:{:?}", f.kind, f.error_code()))
            .collect::<Vec<_>>()
            .join(" ")
    }

    /// Frames until the peer closes, a GOAWAY, `stop` says enough, or
    /// `quiet` passes without a byte.
    pub async fn read_frames(
        s: &mut TcpStream,
        quiet: Duration,
        stop: impl Fn(&Frame) -> bool,
    ) -> (Vec<Frame>, bool) {
        let mut buf = Vec::new();
        let mut frames = Vec::new();
        let mut chunk = [0u8; 16384];
        loop {
            while let Some(f) = Frame::take(&mut buf) {
                let done = f.kind == GOAWAY || stop(&f);
                frames.push(f);
                if done {
                    return (frames, false);
                }
            }
            match tokio::time::timeout(quiet, s.read(&mut chunk)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (frames, true),
                Ok(Ok(n)) => buf.extend_from_slice(&chunk[..n]),
                Err(_) => return (frames, false),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_limits_and_malformed_frames() {
    use h2raw::*;
    let (h, a, b) = two_tenants(&[
        "--h2c",
        "--h2-max-concurrent-streams",
        "8",
        "--h2-max-header-list-size",
        "4k",
        "--max-connection-rate-per-client",
        "30",
    ])
    .await;
    let proxy = h.proxy.http;
    let quiet = Duration::from_secs(3);
    let counts = || (a.requests(), b.requests());

    // Advertised limits.
    let mut s = connect(proxy).await;
    let (frames, _) = read_frames(&mut s, quiet, |f| f.kind == SETTINGS).await;
    let settings = frames
        .iter()
        .find(|f| f.kind == SETTINGS)
        .expect("SETTINGS");
    assert_eq!(settings.setting(0x3), Some(8), "MAX_CONCURRENT_STREAMS");
    assert_eq!(settings.setting(0x6), Some(4096), "MAX_HEADER_LIST_SIZE");

    // More streams than allowed at once: the extra ones are refused.
    let mut burst = Vec::new();
    for i in 0..12u32 {
        burst.extend(request(
            2 * i + 1,
            "GET",
            "a.example",
            &[(b"x-echo-delay-ms", b"1000")],
            true,
        ));
    }
    s.write_all(&burst).await.unwrap();
    let (frames, _) = read_frames(&mut s, quiet, |f| {
        f.kind == RST_STREAM && f.error_code() == Some(REFUSED_STREAM)
    })
    .await;
    assert!(
        frames
            .iter()
            .any(|f| f.error_code() == Some(REFUSED_STREAM)),
        "streams over MAX_CONCURRENT_STREAMS refused: {frames:?}"
    );
    drop(s);
    // The accepted streams' requests are still on their way to A.
    tokio::time::sleep(Duration::from_millis(1500)).await;

    // Malformed requests never reach a backend, and never B.
    let before = counts();
    let big = "v".repeat(6000);
    let malformed: [(&str, &[u8], &[u8]); 7] = [
        ("CR LF in a value", b"x-a", b"a\r\nhost: b.example"),
        ("LF in a value", b"x-a", b"a\nb"),
        ("NUL in a value", b"x-a", b"a\0b"),
        ("CR LF in a name", b"x-a\r\nhost", b"b.example"),
        ("upper case name", b"X-A", b"a"),
        ("transfer-encoding", b"transfer-encoding", b"chunked"),
        ("header list over the limit", b"x-big", big.as_bytes()),
    ];
    for (what, name, value) in malformed {
        let mut s = connect(proxy).await;
        s.write_all(&request(1, "GET", "a.example", &[(name, value)], true))
            .await
            .unwrap();
        let (frames, closed) = read_frames(&mut s, quiet, |f| {
            f.kind == RST_STREAM || (f.kind == HEADERS && f.stream == 1)
        })
        .await;
        let refused = closed
            || frames.iter().any(|f| {
                matches!(f.kind, RST_STREAM | GOAWAY)
                    || (f.kind == HEADERS && f.stream == 1 && f.payload.first() != Some(&0x88))
            });
        println!("h2 {what}: {}", h2raw::summary(&frames));
        assert!(refused, "{what}: {frames:?}");
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(counts(), before, "no malformed request reached a backend");

    // Content-Length that disagrees with the DATA frames, downgraded to
    // HTTP/1.1 upstream: the hidden request must never reach B.
    for (what, length, body) in [
        ("DATA longer than Content-Length", "5", SMUGGLED.to_string()),
        (
            "DATA shorter than Content-Length",
            "500",
            SMUGGLED.to_string(),
        ),
    ] {
        let b_before = b.requests();
        let mut s = connect(proxy).await;
        let mut bytes = request(
            1,
            "POST",
            "a.example",
            &[(b"content-length", length.as_bytes())],
            false,
        );
        bytes.extend(frame(DATA, END_STREAM, 1, body.as_bytes()));
        s.write_all(&bytes).await.unwrap();
        let (frames, closed) = read_frames(&mut s, quiet, |f| f.kind == RST_STREAM).await;
        println!("h2 {what}: {}", h2raw::summary(&frames));
        assert!(
            closed || frames.iter().any(|f| matches!(f.kind, RST_STREAM | GOAWAY)),
            "{what}: stream reset: {frames:?}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(b.requests(), b_before, "{what}: B received nothing");
    }

    // Rapid reset: streams opened and cancelled at once, in bulk.
    let a_before = a.requests();
    let mut s = connect(proxy).await;
    let mut bytes = Vec::new();
    for i in 0..500u32 {
        bytes.extend(request(2 * i + 1, "GET", "a.example", &[], false));
        bytes.extend(rst(2 * i + 1, 0x8));
    }
    let _ = s.write_all(&bytes).await;
    let (frames, closed) = read_frames(&mut s, quiet, |_| false).await;
    let goaway = frames.iter().find(|f| f.kind == GOAWAY);
    println!(
        "h2 rapid reset: GOAWAY {:?}, closed {closed}, A received {}",
        goaway.and_then(Frame::error_code),
        a.requests() - a_before
    );
    assert_eq!(
        goaway.and_then(Frame::error_code),
        Some(ENHANCE_YOUR_CALM),
        "{frames:?}"
    );
    assert!(
        a.requests() - a_before < 100,
        "most reset streams never reached A"
    );

    // MadeYouReset: valid frames that make the server reset streams
    // (a WINDOW_UPDATE that overflows an open stream's window is a stream
    // error; an increment of 0 would be a connection error, already fatal).
    let mut s = connect(proxy).await;
    let mut bytes = Vec::new();
    for i in 0..300u32 {
        let id = 2 * i + 1;
        bytes.extend(request(id, "POST", "a.example", &[], false));
        bytes.extend(frame(WINDOW_UPDATE, 0, id, &0x7fff_ffffu32.to_be_bytes()));
    }
    let _ = s.write_all(&bytes).await;
    let (frames, closed) = read_frames(&mut s, quiet, |_| false).await;
    let goaway = frames.iter().find(|f| f.kind == GOAWAY);
    let resets = frames.iter().filter(|f| f.kind == RST_STREAM).count();
    println!(
        "h2 MadeYouReset: {resets} stream resets, then GOAWAY {:?}, closed {closed}",
        goaway.and_then(Frame::error_code)
    );
    assert_eq!(
        goaway.and_then(Frame::error_code),
        Some(ENHANCE_YOUR_CALM),
        "{frames:?}"
    );

    // Per client: reconnecting in a loop is paced (the reopen path after a
    // GOAWAY), from its own address so the cases above are not affected.
    let mut refused = 0;
    for _ in 0..100 {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.3:0".parse().unwrap()).unwrap();
        let mut s = socket.connect(proxy).await.unwrap();
        s.write_all(&request(1, "GET", "a.example", &[], true))
            .await
            .ok();
        let mut one = [0u8; 1];
        if matches!(
            tokio::time::timeout(quiet, s.read(&mut one)).await,
            Ok(Ok(0) | Err(_))
        ) {
            refused += 1;
        }
    }
    let metrics = h.metrics().await;
    let paced = metric(
        &metrics,
        "teapot_edge_refusals_total{reason=\"client_connection_rate\"}",
    )
    .unwrap_or(0.0);
    println!("h2 reconnect loop: {refused} of 100 connections refused, counter {paced}");
    assert!(
        refused >= 50 && paced >= 50.0,
        "{refused} refused, counter {paced}"
    );
    // And the proxy still serves HTTP/2.
    let mut s = connect(proxy).await;
    s.write_all(&request(1, "GET", "b.example", &[], true))
        .await
        .unwrap();
    let (frames, _) = read_frames(&mut s, quiet, |f| f.kind == HEADERS && f.stream == 1).await;
    assert!(
        frames
            .iter()
            .any(|f| f.kind == HEADERS && f.payload.first() == Some(&0x88)),
        "200 for b.example: {frames:?}"
    );
}
