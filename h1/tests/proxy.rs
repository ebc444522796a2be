//! The engine end to end on real sockets: a raw client, the engine, a
//! tiny recording backend.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use teapot_h1::{
    Decision, EngineConfig, Forward, Outcome, Refusal, RequestTarget, Respond, UpstreamError,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

fn echo_path() -> Handler {
    Arc::new(|got, _| Reply::Bytes(ok(&got.path)))
}

#[tokio::test]
async fn keep_alive_many_requests_on_one_connection_and_one_upstream() {
    let (up, rec) = backend(echo_path()).await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    for i in 0..100 {
        c.send(format!("GET /r{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), format!("/r{i}"));
        assert!(!r.closes());
    }
    assert_eq!(rec.requests().len(), 100);
    assert_eq!(rec.conns(), 1, "one pooled upstream connection reused");
    let stats = p.engine.pool().stats();
    assert_eq!(stats.reused, 99);
    assert!(rec.requests()[5].header("x-forwarded-for") == Some("127.0.0.1"));
}

#[tokio::test]
async fn content_length_bodies_both_ways_are_byte_exact() {
    let (up, rec) = backend(Arc::new(|got, _| {
        let mut r = format!(
            "HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n",
            got.body.len()
        )
        .into_bytes();
        r.extend(got.body.iter().rev());
        Reply::Bytes(r)
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    for (i, n) in [0usize, 1, 1000, 1 << 20].into_iter().enumerate() {
        let body = pattern(n, i as u8);
        c.send(format!(
            "POST /u HTTP/1.1\r\nHost: a\r\nContent-Length: {n}\r\n\r\n"
        ))
        .await;
        c.send(&body).await;
        let r = c.response(false).await;
        assert_eq!(r.status, 200);
        let mut want = body.clone();
        want.reverse();
        assert!(r.body == want, "response body of {n} bytes differs");
        assert!(
            rec.requests()[i].body == body,
            "request body of {n} bytes differs"
        );
    }
}

#[tokio::test]
async fn chunked_bodies_both_ways_are_byte_exact() {
    let (up, rec) = backend(Arc::new(|got, _| {
        // Answer chunked, in uneven chunks, with a trailer.
        let mut r = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for piece in got.body.chunks(7777) {
            r.extend(format!("{:X};x=y\r\n", piece.len()).bytes());
            r.extend(piece);
            r.extend(b"\r\n");
        }
        r.extend(b"0\r\nx-sum: 1\r\n\r\n");
        Reply::Bytes(r)
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    let body = pattern(1 << 20, 3);
    let mut wire = b"PUT /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    let mut sizes = [1usize, 10, 4095, 65536, 100_000].iter().cycle();
    let mut rest = &body[..];
    while !rest.is_empty() {
        let n = (*sizes.next().unwrap()).min(rest.len());
        wire.extend(format!("{n:x}\r\n").bytes());
        wire.extend(&rest[..n]);
        wire.extend(b"\r\n");
        rest = &rest[n..];
    }
    wire.extend(b"0\r\nx-trailer: t\r\n\r\n");
    c.send(&wire).await;
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("transfer-encoding"), Some("chunked"));
    assert!(r.body == body, "chunked response differs");
    let got = &rec.requests()[0];
    assert!(got.body == body, "chunked request differs");
    assert_eq!(got.header("transfer-encoding"), Some("chunked"));
    // The connection is still good.
    c.send("GET /after HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.status, 200);
}

#[tokio::test]
async fn head_204_and_304_have_no_body() {
    let (up, _) = backend(Arc::new(|got, _| {
        Reply::Bytes(match got.path.as_str() {
            "/head" => b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\n".to_vec(),
            "/204" => b"HTTP/1.1 204 No Content\r\n\r\n".to_vec(),
            "/304" => {
                b"HTTP/1.1 304 Not Modified\r\ncontent-length: 50\r\netag: x\r\n\r\n".to_vec()
            }
            _ => ok("next"),
        })
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("HEAD /head HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(true).await;
    assert_eq!((r.status, r.header("content-length")), (200, Some("1000")));
    for (path, status) in [("/204", 204), ("/304", 304)] {
        c.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        let r = c.response(false).await;
        assert_eq!(r.status, status);
        assert!(r.header("transfer-encoding").is_none());
    }
    // Had the engine waited for a body, this would hang or mis-frame.
    c.send("GET /next HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!(r.text(), "next");
    assert!(c.buf.is_empty());
}

#[tokio::test]
async fn expect_100_continue_is_relayed() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut tmp).await.unwrap();
            buf.extend_from_slice(&tmp[..n]);
        }
        assert!(String::from_utf8_lossy(&buf).contains("100-continue"));
        s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n").await.unwrap();
        let mut body = [0u8; 5];
        s.read_exact(&mut body).await.unwrap();
        assert_eq!(&body, b"hello");
        s.write_all(&ok("got it")).await.unwrap();
    });
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("POST /e HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n")
        .await;
    let interim = c.response(false).await;
    assert_eq!(interim.status, 100);
    c.send("hello").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "got it"));
}

#[tokio::test]
async fn close_delimited_response_closes_the_client() {
    let body = pattern(200_000, 9);
    let b2 = body.clone();
    let (up, _) = backend(Arc::new(move |_, _| {
        let mut r = b"HTTP/1.1 200 OK\r\nx-a: b\r\n\r\n".to_vec();
        r.extend(&b2);
        Reply::Close(r)
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert!(r.closes());
    assert!(r.body == body);
    assert_eq!(p.engine.pool().stats().returned, 0);
}

#[tokio::test]
async fn http10_client_gets_a_chunked_response_unchunked_and_closed() {
    let (up, _) = backend(Arc::new(|_, _| {
        Reply::Bytes(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n".to_vec())
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await;
    let r = c.response(false).await;
    assert!(r.closes());
    assert!(r.header("transfer-encoding").is_none());
    assert_eq!(r.text(), "abcde");
}

#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    let (up, rec) = backend(Arc::new(|got, _| {
        Reply::Bytes(ok(&format!(
            "{} {} {}",
            got.method,
            got.path,
            got.body.len()
        )))
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send(
        "GET /1 HTTP/1.1\r\nHost: a\r\n\r\n\
         POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc\
         POST /3 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nxy\r\n0\r\n\r\n\
         HEAD /4 HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /5 HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(c.response(false).await.text(), "GET /1 0");
    assert_eq!(c.response(false).await.text(), "POST /2 3");
    assert_eq!(c.response(false).await.text(), "POST /3 2");
    let head = c.response(true).await;
    assert_eq!(head.header("content-length"), Some("9"));
    let last = c.response(false).await;
    assert_eq!(last.text(), "GET /5 0");
    assert!(last.closes());
    assert!(c.closed().await);
    assert!(c.buf.is_empty(), "nothing after the last response");
    let paths: Vec<_> = rec.requests().iter().map(|g| g.path.clone()).collect();
    assert_eq!(paths, ["/1", "/2", "/3", "/4", "/5"]);
}

#[tokio::test]
async fn websocket_upgrade_becomes_a_bidirectional_tunnel() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut buf = Vec::new();
        let mut tmp = [0u8; 4096];
        while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut tmp).await.unwrap();
            buf.extend_from_slice(&tmp[..n]);
        }
        let head = String::from_utf8_lossy(&buf).to_ascii_lowercase();
        assert!(head.contains("upgrade: websocket"), "{head}");
        assert!(head.contains("connection: upgrade"), "{head}");
        s.write_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\nserver-first")
            .await
            .unwrap();
        // Echo everything after the head, uppercased.
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        let mut pending = buf[end..].to_vec();
        loop {
            if !pending.is_empty() {
                s.write_all(&pending.to_ascii_uppercase()).await.unwrap();
                pending.clear();
            }
            let n = s.read(&mut tmp).await.unwrap();
            if n == 0 {
                return;
            }
            pending.extend_from_slice(&tmp[..n]);
        }
    });
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n\r\nearly")
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status, 101);
    assert_eq!(r.header("upgrade"), Some("websocket"));
    let mut got = std::mem::take(&mut c.buf);
    while got.len() < "server-firstEARLY".len() {
        let mut tmp = [0u8; 100];
        let n = guard(c.s.read(&mut tmp)).await.unwrap();
        got.extend_from_slice(&tmp[..n]);
    }
    assert_eq!(got, b"server-firstEARLY");
    for msg in ["hello", "world"] {
        c.send(msg).await;
        let mut back = vec![0u8; msg.len()];
        guard(c.s.read_exact(&mut back)).await.unwrap();
        assert_eq!(back, msg.to_uppercase().as_bytes());
    }
    drop(c);
    let seen = p.next_seen().await;
    assert_eq!((seen.status, seen.outcome), (101, Outcome::Upgraded));
}

#[tokio::test]
async fn a_response_without_date_gets_one_and_a_dated_one_keeps_its_own() {
    let (up, _rec) = backend(Arc::new(|got, _| {
        Reply::Bytes(if got.path == "/dated" {
            b"HTTP/1.1 200 OK\r\nDate: Sun, 06 Nov 1994 08:49:37 GMT\r\ncontent-length: 0\r\n\r\n"
                .to_vec()
        } else {
            ok("")
        })
    }))
    .await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /plain HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    let dates = |r: &Resp| {
        r.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case("date"))
            .map(|(_, v)| v.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(dates(&r).len(), 1, "{:?}", r.headers);
    c.send("GET /dated HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!(dates(&r), ["Sun, 06 Nov 1994 08:49:37 GMT"]);
}

#[tokio::test]
async fn local_answers() {
    let mut p = proxy(
        Box::new(|head, _| match head.path() {
            "/missing" => local(404, "nothing here\n"),
            "/old" => Decision::Respond(
                Respond::new(308, "redirect", "")
                    .header(Bytes::from_static(b"location"), Bytes::from_static(b"/new")),
            ),
            "/limited" => {
                let mut r = Respond::new(429, "rate", "slow down\n");
                r.close = true;
                Decision::Respond(r)
            }
            _ => local(503, "no backend\n"),
        }),
        EngineConfig::default(),
    )
    .await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /missing HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (404, "nothing here\n"));
    assert!(
        r.header("date").is_some_and(|d| d.ends_with(" GMT")),
        "{:?}",
        r.headers
    );
    c.send("HEAD /missing HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(true).await;
    assert_eq!((r.status, r.header("content-length")), (404, Some("13")));
    c.send("GET /old HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.header("location")), (308, Some("/new")));
    c.send("GET /x HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.status, 503);
    // A local answer to a request whose body was not read closes.
    c.send("POST /missing HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc")
        .await;
    assert!(c.response(false).await.closes());
    assert!(c.closed().await);
    let mut c = Client::connect(p.addr).await;
    c.send("GET /limited HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!(r.status, 429);
    assert!(r.closes() && c.closed().await);
    let seen = p.next_seen().await;
    assert_eq!((seen.status, seen.outcome), (404, Outcome::Local("test")));
    // CONNECT is not proxied.
    let mut c = Client::connect(p.addr).await;
    c.send("CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n")
        .await;
    assert_eq!(c.response(false).await.status, 405);
}

/// Every payload must be refused at the proxy and never reach the backend.
#[tokio::test]
async fn smuggling_payloads_are_refused_and_never_reach_the_backend() {
    let (up, rec) = backend(echo_path()).await;
    let config = EngineConfig {
        max_body_size: 1000,
        ..EngineConfig::default()
    };
    let mut p = proxy(to(up), config).await;
    let long_line = format!("GET /{} HTTP/1.1\r\nHost: a\r\n\r\n", "a".repeat(9000));
    let big_head = format!(
        "GET / HTTP/1.1\r\nHost: a\r\nX: {}\r\n\r\n",
        "b".repeat(33000)
    );
    let cases: Vec<(String, u16, Refusal)> = vec![
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, Refusal::BothLengths),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n0\r\n\r\n", 400, Refusal::BothLengths),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nContent-Length: 5\r\n\r\nabcde", 400, Refusal::DuplicateLength),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nabcde", 400, Refusal::DuplicateLength),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n", 400, Refusal::TransferEncoding),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 400, Refusal::TransferEncoding),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 400, Refusal::TransferEncoding),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400, Refusal::TransferEncoding),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: \x0bchunked\r\n\r\n", 400, Refusal::ControlByte),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400, Refusal::SpaceBeforeColon),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\nabcde", 400, Refusal::BadLength),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\nabcde", 400, Refusal::BadLength),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\r\n b\r\n\r\n", 400, Refusal::ObsFold),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\n\r\n", 400, Refusal::BareCrLf),
        ("GET / HTTP/1.1\nHost: a\n\n", 400, Refusal::BareCrLf),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\rb\r\n\r\n", 400, Refusal::BareCrLf),
        ("GET / HTTP/1.1\r\nHost: a\r\nX-A: a\0b\r\n\r\n", 400, Refusal::ControlByte),
        ("GET / HTTP/1.1\r\nHost: a\r\nX(A): a\r\n\r\n", 400, Refusal::BadHeaderName),
        ("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400, Refusal::DuplicateHost),
        ("GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400, Refusal::BadHost),
        ("GET http://b.example/ HTTP/1.1\r\nHost: a\r\n\r\n", 400, Refusal::BadHost),
        ("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n", 400, Refusal::H2cUpgrade),
        ("POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400, Refusal::TransferEncoding),
        ("POST / HTTP/1.0\r\n\r\n", 400, Refusal::Http10BodyNoLength),
        ("GET /a b HTTP/1.1\r\nHost: a\r\n\r\n", 400, Refusal::BadRequestLine),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nab\r\n0\r\n\r\n", 400, Refusal::BadChunkedBody),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\nab\r\n0\r\n\r\n", 400, Refusal::BadChunkedBody),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabc\r\n0\r\n\r\n", 400, Refusal::BadChunkedBody),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n2 \r\nab\r\n0\r\n\r\n", 400, Refusal::BadChunkedBody),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1\r\na\r\n0\r\nX : y\r\n\r\n", 400, Refusal::BadChunkedBody),
        ("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 1001\r\n\r\n", 413, Refusal::BodyTooLarge),
        ("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3e9\r\n", 413, Refusal::BodyTooLarge),
        (long_line.as_str(), 414, Refusal::RequestLineTooLong),
        (big_head.as_str(), 431, Refusal::HeaderTooLarge),
    ]
    .into_iter()
    .map(|(a, b, c)| (a.to_string(), b, c))
    .collect();
    for (payload, status, refusal) in &cases {
        let mut c = Client::connect(p.addr).await;
        c.send(payload).await;
        let r = c.response(false).await;
        assert_eq!(r.status, *status, "{payload:?}");
        assert_eq!(r.text(), refusal.body(), "{payload:?}");
        assert!(r.closes(), "{payload:?}");
        assert!(c.closed().await, "{payload:?}");
        let seen = p.next_seen().await;
        assert_eq!(seen.outcome, Outcome::Refused(*refusal), "{payload:?}");
    }
    assert_eq!(rec.conns(), 0, "no payload reached the backend");
    assert!(rec.requests().is_empty());
}

/// Bytes after a request's framed end are the next request, parsed by the
/// proxy's rules: the classic CL-prefix smuggle arrives as two requests.
#[tokio::test]
async fn bytes_after_the_framed_end_are_a_separate_request() {
    let (up, rec) = backend(echo_path()).await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n")
        .await;
    assert_eq!(c.response(false).await.text(), "/a");
    assert_eq!(c.response(false).await.text(), "/smuggled");
    let got = rec.requests();
    assert_eq!(got[0].body, b"hello");
    assert_eq!(got[1].path, "/smuggled");
}

#[tokio::test]
async fn hop_by_hop_fields_are_dropped_and_edits_applied() {
    let (up, rec) = backend(Arc::new(|_, _| {
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nconnection: x-hop\r\nx-hop: 1\r\nkeep-alive: timeout=5\r\nx-internal: secret\r\nx-keep: k\r\ncontent-length: 0\r\n\r\n"
                .to_vec(),
        )
    }))
    .await;
    let p = proxy(
        Box::new(move |head, conn| {
            let mut f = Forward::to(vec![up]);
            f.request_edits = f
                .request_edits
                .set(
                    Bytes::from_static(b"x-forwarded-for"),
                    conn.client.unwrap().ip().to_string(),
                )
                .set(
                    Bytes::from_static(b"x-forwarded-host"),
                    head.host().unwrap(),
                )
                .remove(Bytes::from_static(b"x-remove-me"));
            f.response_edits = f
                .response_edits
                .remove(Bytes::from_static(b"x-internal"))
                .append(
                    Bytes::from_static(b"x-served-by"),
                    Bytes::from_static(b"teapot"),
                );
            Decision::forward(f)
        }),
        EngineConfig::default(),
    )
    .await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET http://h.example/p?q HTTP/1.1\r\nConnection: X-Secret, keep-alive\r\nX-Secret: s\r\nKeep-Alive: 300\r\nTE: trailers\r\nProxy-Connection: x\r\nX-Forwarded-For: 6.6.6.6\r\nX-Remove-Me: 1\r\nX-Keep: k\r\n\r\n")
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status, 200);
    for gone in ["x-hop", "keep-alive", "x-internal"] {
        assert!(r.header(gone).is_none(), "{gone} reached the client");
    }
    assert_eq!(r.header("x-keep"), Some("k"));
    assert_eq!(r.header("x-served-by"), Some("teapot"));
    let got = &rec.requests()[0];
    assert_eq!(got.path, "/p?q", "absolute form sent in origin form");
    assert_eq!(got.header("host"), Some("h.example"));
    for gone in [
        "x-secret",
        "keep-alive",
        "te",
        "proxy-connection",
        "x-remove-me",
        "connection",
    ] {
        assert!(got.header(gone).is_none(), "{gone} reached the backend");
    }
    assert_eq!(got.headers_named("x-forwarded-for"), ["127.0.0.1"]);
    assert_eq!(got.header("x-forwarded-host"), Some("h.example"));
    assert_eq!(got.header("x-keep"), Some("k"));
}

/// The hooks a URL rewrite and header filters use (Gateway API,
/// docs/edge.md): the target and Host replaced in the forwarded head,
/// edits applied to the response head, a per-request read timeout; and
/// nothing a router hands over can split either head.
#[tokio::test]
async fn rewritten_target_and_host_response_edits_and_a_shorter_read_timeout() {
    let (up, rec) = backend(Arc::new(|got, _| {
        if got.path.ends_with("/slow") {
            return Reply::Bytes(Vec::new());
        }
        Reply::Bytes(
            b"HTTP/1.1 200 OK\r\nx-drop: 1\r\nx-set: old\r\nx-add: a\r\ncontent-length: 2\r\n\r\nok"
                .to_vec(),
        )
    }))
    .await;
    let mut p = proxy(
        Box::new(move |head, _| {
            let mut f = Forward::to(vec![up]);
            f.target = RequestTarget::new(format!("/new{}", head.path()));
            f.request_edits = f
                .request_edits
                .set("host", "rewritten.example")
                .set("x-req", "v\r\nx-smuggled: 1");
            f.response_edits = f
                .response_edits
                .set("x-set", "new")
                .append("x-add", "b")
                .remove("x-drop")
                .append("x-evil", "1\r\nset-cookie: stolen=1")
                .set("content-length", "0");
            if head.path().starts_with("/slow") {
                f.timeouts.read = Some(Duration::from_millis(150));
            }
            Decision::forward(f)
        }),
        EngineConfig::default(),
    )
    .await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /p?q=1 HTTP/1.1\r\nHost: a.example\r\nX-Req: client\r\n\r\n")
        .await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "ok"));
    assert_eq!(r.header("x-set"), Some("new"));
    let added: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("x-add"))
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(added, ["a", "b"], "an addition keeps the upstream's value");
    for gone in ["x-drop", "x-evil", "set-cookie"] {
        assert!(r.header(gone).is_none(), "{gone} reached the client");
    }
    let lengths: Vec<_> = r
        .headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("content-length"))
        .collect();
    assert_eq!(lengths.len(), 1, "the engine frames the response alone");
    let got = &rec.requests()[0];
    assert_eq!(got.path, "/new/p?q=1");
    assert_eq!(got.headers_named("host"), ["rewritten.example"]);
    assert!(got.header("x-req").is_none() && got.header("x-smuggled").is_none());
    assert_eq!(
        p.next_seen().await.path,
        "/p?q=1",
        "the log keeps the client's"
    );
    // The shorter read timeout of this request: a 504, well before the
    // engine's own 60 s.
    let asked = std::time::Instant::now();
    c.send("GET /slow HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .await;
    assert_eq!(c.response(false).await.status, 504);
    assert!(asked.elapsed() < Duration::from_secs(5));
    assert_eq!(
        p.next_seen().await.outcome,
        Outcome::Upstream(UpstreamError::ReadTimeout)
    );
}

#[tokio::test]
async fn a_pooled_connection_the_backend_closed_while_idle_is_not_used() {
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let (up, rec) = backend(Arc::new(move |got, _| {
        // Answer keep-alive, then close at once: the proxy pools a
        // connection that is dead by the time it is reused.
        let _ = closed_tx.send(());
        Reply::Close(ok(&got.path))
    }))
    .await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.text(), "/1");
    assert!(!p.next_seen().await.reused);
    guard(closed_rx.recv()).await.unwrap();
    // The FIN is on its way; give the runtime a turn to see it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.send("GET /2 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "/2"));
    let seen = p.next_seen().await;
    // Either the lazy check caught it, or the retry did: never a 502.
    let stats = p.engine.pool().stats();
    assert!(stats.stale == 1 || seen.retried, "{stats:?} {seen:?}");
    assert_eq!(rec.conns(), 2);
}

#[tokio::test]
async fn an_idempotent_request_on_a_reused_connection_that_fails_is_retried_once() {
    // First connection: answer one request, then hang up on the next one
    // without a byte of response. Later connections: answer normally.
    let (up, rec) = backend(Arc::new(|got, index| {
        if got.conn == 0 && index == 1 {
            Reply::Hangup
        } else {
            Reply::Bytes(ok(&got.path))
        }
    }))
    .await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.text(), "/1");
    p.next_seen().await;
    c.send("GET /2 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "/2"));
    let seen = p.next_seen().await;
    assert!(seen.reused && seen.retried, "{seen:?}");
    assert_eq!(rec.conns(), 2);
    let paths: Vec<_> = rec
        .requests()
        .iter()
        .map(|g| (g.conn, g.path.clone()))
        .collect();
    assert_eq!(
        paths,
        [(0, "/1".into()), (0, "/2".into()), (1, "/2".into())]
    );
}

#[tokio::test]
async fn a_non_idempotent_request_is_not_retried() {
    let (up, rec) = backend(Arc::new(|got, index| {
        if got.conn == 0 && index == 1 {
            Reply::Hangup
        } else {
            Reply::Bytes(ok(&got.path))
        }
    }))
    .await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /1 HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.text(), "/1");
    p.next_seen().await;
    c.send("POST /2 HTTP/1.1\r\nHost: a\r\nContent-Length: 1\r\n\r\nx")
        .await;
    let r = c.response(false).await;
    assert_eq!(r.status, 502);
    let seen = p.next_seen().await;
    assert_eq!(seen.outcome, Outcome::Upstream(UpstreamError::Closed));
    assert!(!seen.retried);
    assert_eq!(rec.requests().len(), 2);
}

#[tokio::test]
async fn upstream_connect_failure_is_a_502_and_the_connection_lives_on() {
    // A port nothing listens on.
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (up, _) = backend(echo_path()).await;
    let mut p = proxy(
        Box::new(move |head, _| {
            if head.path() == "/dead" {
                Decision::forward(Forward::to(vec![dead]))
            } else {
                // The dead address first: the live one is tried next.
                Decision::forward(Forward::to(vec![dead, up]))
            }
        }),
        EngineConfig::default(),
    )
    .await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /dead HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!(r.status, 502);
    assert!(!r.closes());
    assert_eq!(
        p.next_seen().await.outcome,
        Outcome::Upstream(UpstreamError::Connect)
    );
    c.send("GET /fallback HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.text(), "/fallback");
}

#[tokio::test]
async fn header_read_timeout_closes_without_an_answer() {
    let config = EngineConfig {
        header_read_timeout: Duration::from_millis(200),
        ..EngineConfig::default()
    };
    let (up, rec) = backend(echo_path()).await;
    let mut p = proxy(to(up), config).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET / HTTP/1.1\r\nHost: a\r\n").await;
    assert!(c.closed().await);
    assert!(c.buf.is_empty(), "no answer to a slow head");
    let seen = p.next_seen().await;
    assert_eq!(seen.outcome, Outcome::Refused(Refusal::HeaderTimeout));
    assert!(rec.requests().is_empty());
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed() {
    let config = EngineConfig {
        keepalive_timeout: Duration::from_millis(100),
        ..EngineConfig::default()
    };
    let (up, _) = backend(echo_path()).await;
    let p = proxy(to(up), config).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET / HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.status, 200);
    assert!(c.closed().await);
}

#[tokio::test]
async fn keep_alive_timeout_counts_from_the_last_request() {
    // Requests 60 ms apart over four timeout periods keep the connection
    // (the connection's timer, armed for an earlier wait, fires and is
    // moved on, never cutting a wait short); then silence closes it.
    let config = EngineConfig {
        keepalive_timeout: Duration::from_millis(150),
        header_read_timeout: Duration::from_millis(150),
        ..EngineConfig::default()
    };
    let (up, _) = backend(echo_path()).await;
    let p = proxy(to(up), config).await;
    let mut c = Client::connect(p.addr).await;
    for i in 0..10 {
        c.send(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        assert_eq!(c.response(false).await.text(), format!("/{i}"));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let idle = std::time::Instant::now();
    assert!(c.closed().await);
    let waited = idle.elapsed();
    assert!(
        waited >= Duration::from_millis(80) && waited < Duration::from_secs(2),
        "closed after {waited:?} of silence"
    );
}

#[tokio::test]
async fn a_silent_upstream_gets_a_504_after_the_read_timeout() {
    let config = EngineConfig {
        upstream_read_timeout: Duration::from_millis(200),
        ..EngineConfig::default()
    };
    let handler: Handler = Arc::new(|got, _| match got.path.as_str() {
        "/silent" => Reply::Bytes(Vec::new()),
        path => Reply::Bytes(ok(path)),
    });
    let (up, _) = backend(handler).await;
    let mut p = proxy(to(up), config).await;
    let mut c = Client::connect(p.addr).await;
    // Quick answers first, over more than one timeout period: the timer
    // they armed must neither fire early nor be forgotten.
    for i in 0..4 {
        c.send(format!("GET /{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        assert_eq!(c.response(false).await.text(), format!("/{i}"));
        assert_eq!(p.next_seen().await.outcome, Outcome::Proxied);
        tokio::time::sleep(Duration::from_millis(80)).await;
    }
    let asked = std::time::Instant::now();
    c.send("GET /silent HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(c.response(false).await.status, 504);
    let waited = asked.elapsed();
    assert!(
        waited >= Duration::from_millis(180) && waited < Duration::from_secs(2),
        "504 after {waited:?}"
    );
    assert_eq!(
        p.next_seen().await.outcome,
        Outcome::Upstream(UpstreamError::ReadTimeout)
    );
}

/// A client that hangs up while its answer is slow is noticed before the
/// answer comes: its socket is watched once the answer takes longer than
/// a quick one would (it was not, before, to stay out of the event loop).
#[tokio::test]
async fn a_client_hanging_up_on_a_slow_answer_is_noticed() {
    let handler: Handler = Arc::new(|got, _| match got.path.as_str() {
        "/silent" => Reply::Bytes(Vec::new()),
        path => Reply::Bytes(ok(path)),
    });
    let (up, _) = backend(handler).await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("GET /silent HTTP/1.1\r\nHost: a\r\n\r\n").await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    let hung_up = std::time::Instant::now();
    drop(c);
    let seen = tokio::time::timeout(Duration::from_secs(5), p.next_seen())
        .await
        .expect("noticed long before the upstream's 60 s read timeout");
    assert_eq!(seen.outcome, Outcome::ClientAbort);
    assert!(hung_up.elapsed() < Duration::from_secs(2));
}

#[tokio::test]
async fn client_abort_mid_body_is_observed() {
    let (up, rec) = backend(echo_path()).await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("POST /big HTTP/1.1\r\nHost: a\r\nContent-Length: 100000\r\n\r\n")
        .await;
    c.send(pattern(1000, 1)).await;
    drop(c);
    let seen = p.next_seen().await;
    assert_eq!(seen.outcome, Outcome::ClientAbort);
    assert!(seen.client_abort);
    assert_eq!(seen.path, "/big");
    assert!(seen.bytes_in >= 1000);
    assert!(
        rec.requests().is_empty(),
        "an incomplete request is never complete upstream"
    );
    assert_eq!(p.engine.pool().stats().returned, 0);
}

#[tokio::test]
async fn shutdown_drains_at_the_request_boundary() {
    // A backend that holds `/slow` until told to answer.
    let release = Arc::new(tokio::sync::Notify::new());
    let held = Arc::new(tokio::sync::Notify::new());
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    let (r2, h2) = (release.clone(), held.clone());
    tokio::spawn(async move {
        loop {
            let (mut s, _) = l.accept().await.unwrap();
            let (release, held) = (r2.clone(), h2.clone());
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut tmp = [0u8; 4096];
                loop {
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        let head: Vec<u8> = buf.drain(..end + 4).collect();
                        let slow = head.starts_with(b"GET /slow");
                        if slow {
                            held.notify_one();
                            release.notified().await;
                        }
                        let body = if slow { "/slow" } else { "/a" };
                        s.write_all(&ok(body)).await.unwrap();
                    }
                    match s.read(&mut tmp).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&tmp[..n]),
                    }
                }
            });
        }
    });
    let mut p = proxy(to(up), EngineConfig::default()).await;
    // An idle keep-alive connection is closed when shutdown starts.
    let mut idle = Client::connect(p.addr).await;
    idle.send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n").await;
    assert_eq!(idle.response(false).await.status, 200);
    p.next_seen().await;
    // A request in flight finishes, with Connection: close.
    let mut busy = Client::connect(p.addr).await;
    busy.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n").await;
    // Wait until the backend holds it (the proxy has forwarded it).
    guard(held.notified()).await;
    p.shutdown.send(true).unwrap();
    assert!(idle.closed().await);
    assert!(idle.buf.is_empty());
    release.notify_one();
    let r = busy.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (200, "/slow"));
    assert!(r.closes());
    assert!(busy.closed().await);
}

/// A connection that waited between several requests, its buffers given
/// back at each wait as it began, is still reached by shutdown and closed.
#[tokio::test]
async fn shutdown_reaches_a_connection_after_several_idle_waits() {
    let (up, _rec) = backend(echo_path()).await;
    let mut p = proxy(to(up), EngineConfig::default()).await;
    let mut idle = Client::connect(p.addr).await;
    for path in ["/a", "/b", "/c"] {
        idle.send(&format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        let r = idle.response(false).await;
        assert_eq!((r.status, r.text().as_str()), (200, path));
        p.next_seen().await;
        // Idle long enough to give its buffers back and wait.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Past the grace a just-answered connection gets.
    tokio::time::sleep(Duration::from_millis(300)).await;
    p.shutdown.send(true).unwrap();
    assert!(idle.closed().await);
    assert!(idle.buf.is_empty());
}

#[tokio::test]
async fn early_upstream_response_abandons_the_request_body() {
    // The backend answers 413 after the head, without reading the body.
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let up = l.local_addr().unwrap();
    tokio::spawn(async move {
        let (mut s, _) = l.accept().await.unwrap();
        let mut tmp = [0u8; 1024];
        let _ = s.read(&mut tmp).await.unwrap();
        s.write_all(
            b"HTTP/1.1 413 Content Too Large\r\ncontent-length: 4\r\nconnection: close\r\n\r\nbig!",
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(5)).await;
    });
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    c.send("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 10000000\r\n\r\nxx")
        .await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text().as_str()), (413, "big!"));
    assert!(r.closes());
    assert!(c.closed().await);
}

/// A request head larger than the first read after an idle wait, sent in
/// pieces with pauses.
fn big_head(i: usize) -> (String, String) {
    let head = format!(
        "GET /b{i} HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "x".repeat(5000)
    );
    let (first, rest) = head.split_at(100);
    (first.to_string(), rest.to_string())
}

/// An idle keep-alive connection gives its buffers back and takes new ones
/// at its next request (on a socket the engine waits on readiness): heads
/// larger than the first read, arriving in pieces after a pause, are read
/// whole, and the pooled upstream connection is still reused.
#[tokio::test]
async fn requests_after_an_idle_wait_are_read_whole_on_a_socket() {
    let (up, rec) = backend(echo_path()).await;
    let p = proxy(to(up), EngineConfig::default()).await;
    let mut c = Client::connect(p.addr).await;
    for i in 0..3 {
        c.send(format!("GET /a{i} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await;
        assert_eq!(c.response(false).await.text(), format!("/a{i}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (first, rest) = big_head(i);
        c.send(first).await;
        tokio::time::sleep(Duration::from_millis(20)).await;
        c.send(rest).await;
        assert_eq!(c.response(false).await.text(), format!("/b{i}"));
    }
    let got = rec.requests();
    assert_eq!(got.len(), 6);
    assert_eq!(got[1].header("x-big").map(str::len), Some(5000));
    assert_eq!(rec.conns(), 1, "one pooled upstream connection reused");
}

/// The same over a stream that cannot tell readiness (a pipe, like TLS):
/// the buffers go back and the wait reads into a small one.
#[tokio::test]
async fn requests_after_an_idle_wait_are_read_whole_on_a_pipe() {
    let (up, rec) = backend(echo_path()).await;
    let engine = Arc::new(teapot_h1::Engine::new(to(up), (), EngineConfig::default()));
    let (mut client, server) = tokio::io::duplex(64 * 1024);
    let (_tx, shutdown) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let info = teapot_h1::ConnInfo::default();
        engine.serve(server, info, shutdown).await
    });
    let mut read = Vec::new();
    let mut response = async |client: &mut tokio::io::DuplexStream| -> String {
        loop {
            if let Some(end) = read.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&read[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap();
                if read.len() >= end + 4 + len {
                    let body = String::from_utf8_lossy(&read[end + 4..end + 4 + len]).into_owned();
                    read.drain(..end + 4 + len);
                    return body;
                }
            }
            let mut chunk = [0u8; 4096];
            let n = client.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed");
            read.extend_from_slice(&chunk[..n]);
        }
    };
    for i in 0..3 {
        client
            .write_all(format!("GET /a{i} HTTP/1.1\r\nHost: a\r\n\r\n").as_bytes())
            .await
            .unwrap();
        assert_eq!(response(&mut client).await, format!("/a{i}"));
        tokio::time::sleep(Duration::from_millis(20)).await;
        let (first, rest) = big_head(i);
        client.write_all(first.as_bytes()).await.unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        client.write_all(rest.as_bytes()).await.unwrap();
        assert_eq!(response(&mut client).await, format!("/b{i}"));
    }
    assert_eq!(rec.requests()[5].header("x-big").map(str::len), Some(5000));
}

/// Upstreams whose 404 and 502 the product answers itself (error pages).
struct Replacing(std::net::SocketAddr);

impl teapot_h1::Upstreams for Replacing {
    fn next(&mut self, attempt: u32) -> Option<std::net::SocketAddr> {
        (attempt == 0).then_some(self.0)
    }

    fn replaces(&self, status: u16) -> bool {
        matches!(status, 404 | 502)
    }

    async fn replacement(&mut self, status: u16) -> Respond {
        Respond::new(200, "page", format!("page for {status}"))
    }
}

struct ReplacingRouter {
    up: std::net::SocketAddr,
    dead: std::net::SocketAddr,
}

impl teapot_h1::Router for ReplacingRouter {
    type Upstreams = Replacing;

    fn decide(
        &self,
        head: &teapot_h1::RequestHead<'_>,
        _: &teapot_h1::ConnInfo,
    ) -> impl std::future::Future<Output = Decision<Replacing>> + Send {
        let to = if head.path() == "/dead" {
            self.dead
        } else {
            self.up
        };
        std::future::ready(Decision::forward(Forward::via(Replacing(to))))
    }
}

/// A status the router replaces is answered by its replacement, the
/// upstream's body unread and its connection not pooled; another status
/// passes through; the engine's own 502 is replaced too; the client's
/// connection lives on.
#[tokio::test]
async fn a_replaced_status_gets_the_routers_answer() {
    let (up, rec) = backend(Arc::new(|got, _| {
        if got.path == "/missing" {
            Reply::Bytes(b"HTTP/1.1 404 Not Found\r\ncontent-length: 7\r\n\r\nmissing".to_vec())
        } else {
            Reply::Bytes(ok(&got.path))
        }
    }))
    .await;
    let dead = {
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        l.local_addr().unwrap()
    };
    let (tx, mut seen) = tokio::sync::mpsc::unbounded_channel();
    let engine = Arc::new(teapot_h1::Engine::new(
        ReplacingRouter { up, dead },
        Obs(tx),
        EngineConfig::default(),
    ));
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let (_shutdown, watch_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        while let Ok((s, peer)) = l.accept().await {
            let (e, w) = (engine.clone(), watch_rx.clone());
            tokio::spawn(async move {
                let info = teapot_h1::ConnInfo {
                    client: Some(peer),
                    ..Default::default()
                };
                e.serve(s, info, w).await;
            });
        }
    });
    let mut c = Client::connect(addr).await;
    c.send("GET /missing HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text()), (200, "page for 404".to_string()));
    assert!(!r.closes());
    assert_eq!(
        guard(seen.recv()).await.unwrap().outcome,
        Outcome::Local("page")
    );
    c.send("GET /fine HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text()), (200, "/fine".to_string()));
    c.send("GET /dead HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let r = c.response(false).await;
    assert_eq!((r.status, r.text()), (200, "page for 502".to_string()));
    // The replaced response's connection was closed, not pooled.
    assert_eq!(rec.conns(), 2);
}
