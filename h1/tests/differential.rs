//! Differential test: for a generated set of requests, what the backend
//! receives must frame exactly as the proxy framed it. The backend's raw
//! byte stream is parsed independently (httparse + a strict chunked
//! decoder) and must hold exactly the requests sent, in order, with the
//! same method, path and body, and not one byte more.
//!
//! The client side is an in-memory duplex stream, so this also runs the
//! engine over a stream that is not a socket.

mod common;

use std::sync::Arc;

use common::*;
use teapot_h1::{ConnInfo, EngineConfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// A small deterministic generator (no dependency, same cases every run).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        self.0 >> 33
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

#[derive(Debug, Clone)]
struct Case {
    method: &'static str,
    path: String,
    body: Vec<u8>,
    wire: Vec<u8>,
}

fn generate(rng: &mut Lcg, i: usize) -> Case {
    const METHODS: [&str; 6] = ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"];
    let method = METHODS[rng.below(METHODS.len() as u64) as usize];
    let path = format!("/case/{i}?q={}", rng.below(1000));
    let has_body = !matches!(method, "GET" | "DELETE" | "OPTIONS") || rng.below(4) == 0;
    let len = if has_body {
        match rng.below(4) {
            0 => 0,
            1 => rng.below(16) as usize,
            2 => rng.below(5000) as usize,
            _ => rng.below(200_000) as usize,
        }
    } else {
        0
    };
    let body = pattern(len, i as u8);
    let chunked = has_body && rng.below(2) == 0;
    let mut wire =
        format!("{method} {path} HTTP/1.1\r\nHost: diff.example\r\nX-Case: {i}\r\n").into_bytes();
    if chunked {
        wire.extend(b"Transfer-Encoding: chunked\r\n\r\n");
        let mut rest = &body[..];
        while !rest.is_empty() {
            let n = (1 + rng.below(40_000) as usize).min(rest.len());
            // Extensions in every form the grammar allows (RFC 9112
            // §7.1.1): tokens, quoted-strings with quoted-pairs, BWS.
            let ext = match rng.below(6) {
                0 => format!(";ext={i}"),
                1 => format!(" ; a = \"q\\\"{i}\\\\\" ;b"),
                2 => format!(";a=\"x;y=z\\r\"\t;c={i}"),
                _ => String::new(),
            };
            if ext.is_empty() {
                wire.extend(format!("{n:x}\r\n").bytes());
            } else {
                wire.extend(format!("{n:X}{ext}\r\n").bytes());
            }
            wire.extend(&rest[..n]);
            wire.extend(b"\r\n");
            rest = &rest[n..];
        }
        wire.extend(b"0\r\n");
        if rng.below(2) == 0 {
            wire.extend(format!("X-Trailer: {i}\r\n").bytes());
        }
        wire.extend(b"\r\n");
    } else {
        if has_body {
            wire.extend(format!("Content-Length: {len}\r\n").bytes());
        }
        wire.extend(b"\r\n");
        wire.extend(&body);
    }
    Case {
        method,
        path,
        body,
        wire,
    }
}

#[tokio::test]
async fn backend_frames_exactly_what_the_proxy_framed() {
    let (up, rec) = backend(Arc::new(|got, _| {
        Reply::Bytes(ok(&format!(
            "{} {} {}",
            got.method,
            got.path,
            got.body.len()
        )))
    }))
    .await;
    let config = EngineConfig::default();
    let engine = Arc::new(teapot_h1::Engine::new(to(up), (), config));
    let mut rng = Lcg(0x7ea907);
    let cases: Vec<Case> = (0..60).map(|i| generate(&mut rng, i)).collect();

    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let (_tx, shutdown) = tokio::sync::watch::channel(false);
    let e2 = engine.clone();
    let serving = tokio::spawn(async move {
        let info = ConnInfo::default();
        e2.serve(server, info, shutdown).await
    });

    // All requests pipelined, written in uneven pieces that split heads,
    // chunk-size lines and CRLFs anywhere; responses read concurrently.
    let mut wire: Vec<u8> = cases.iter().flat_map(|c| c.wire.iter().copied()).collect();
    wire.extend(b"GET /last HTTP/1.1\r\nHost: diff.example\r\nConnection: close\r\n\r\n");
    let (mut rd, mut wr) = tokio::io::split(client);
    let writer = tokio::spawn(async move {
        let mut rng = Lcg(42);
        let mut rest = &wire[..];
        while !rest.is_empty() {
            let n = (1 + rng.below(3000) as usize).min(rest.len());
            wr.write_all(&rest[..n]).await.unwrap();
            rest = &rest[n..];
        }
        wr
    });
    let responses = guard(async {
        let mut all = Vec::new();
        rd.read_to_end(&mut all).await.unwrap();
        all
    })
    .await;
    let wr = guard(writer).await.unwrap();
    client = rd.unsplit(wr);
    drop(client);
    guard(serving).await.unwrap();

    // The client saw one response per request, in order.
    let mut pos = 0;
    for (i, c) in cases.iter().enumerate() {
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut r = httparse::Response::new(&mut slots);
        let httparse::Status::Complete(n) = r.parse(&responses[pos..]).unwrap() else {
            panic!("response {i} incomplete");
        };
        assert_eq!(r.code, Some(200));
        let want = format!("{} {} {}", c.method, c.path, c.body.len());
        assert_eq!(
            &responses[pos + n..pos + n + want.len()],
            want.as_bytes(),
            "response {i}"
        );
        pos += n + want.len();
    }

    // The backend's raw bytes parse into exactly the same requests.
    let raw = rec.raw.lock().unwrap().clone();
    let mut expected = cases
        .iter()
        .map(|c| (c.method, c.path.as_str(), &c.body[..]));
    let mut seen = 0;
    for stream in &raw {
        let mut rest = &stream[..];
        while !rest.is_empty() {
            let (got, used) =
                parse_request(rest, 0).expect("a partial request reached the backend");
            rest = &rest[used..];
            if got.path == "/last" {
                continue;
            }
            let (method, path, body) = expected.next().expect("more requests upstream than sent");
            assert_eq!((got.method.as_str(), got.path.as_str()), (method, path));
            assert!(got.body == body, "body of {path} differs");
            // One framing, never both; no hop-by-hop field.
            let cl = got.header("content-length");
            let te = got.header("transfer-encoding");
            assert!(cl.is_none() || te.is_none());
            assert!(got.header("connection").is_none() || got.path == "/last");
            seen += 1;
        }
    }
    assert_eq!(seen, cases.len(), "every request reached the backend once");
}
