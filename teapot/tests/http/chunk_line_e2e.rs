//! The chunk-size line against the real binary: a chunk extension whose
//! quoted-string is left open at the end of the line (`0;a="` CRLF) must
//! be refused (400, connection closed), not taken as the end of the body.
//! A reader that follows the quoted-string on (RFC 9112 §7.1.1 allows no
//! CR or LF in it, so any answer but a refusal is one of two readings)
//! would see one request where a proxy ending the line at the CRLF sees
//! two, the second for another tenant's host.

use crate::common;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use teapot_testkit::client;
use teapot_testkit::echo::EchoServer;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: b.example\r\n\r\n";
const RAW_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether `got` holds a whole request: a head, and for a chunked one the
/// last chunk and the end of its trailer section.
fn whole_request(got: &[u8]) -> bool {
    let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
        return false;
    };
    let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
    let body = &got[end + 4..];
    !head.contains("transfer-encoding: chunked")
        || (body.starts_with(b"0") || body.windows(3).any(|w| w == b"\n0;" || w == b"\n0\r"))
            && body.ends_with(b"\r\n\r\n")
}

/// A backend that keeps every byte it receives and answers 200 (with
/// `Connection: close`) once it has a whole request.
async fn recording_backend() -> (SocketAddr, Arc<Mutex<Vec<u8>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let all = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let all = all.clone();
            tokio::spawn(async move {
                let mut got = Vec::new();
                let mut buf = [0u8; 4096];
                while !whole_request(&got) {
                    match s.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => {
                            got.extend_from_slice(&buf[..n]);
                            all.lock().unwrap().extend_from_slice(&buf[..n]);
                        }
                    }
                }
                let _ = s
                    .write_all(
                        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                    )
                    .await;
                // Whatever else the proxy sends on this connection.
                while let Ok(n) = s.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    all.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    (addr, seen)
}

/// Writes `bytes` on a new connection and reads until the proxy closes it
/// (`None` if it did not within [`RAW_TIMEOUT`]).
async fn exchange_until_close(proxy: SocketAddr, bytes: &[u8]) -> Option<Vec<u8>> {
    let mut s = TcpStream::connect(proxy).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let read = async {
        let mut buf = [0u8; 4096];
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => got.extend_from_slice(&buf[..n]),
            }
        }
    };
    tokio::time::timeout(RAW_TIMEOUT, read).await.ok()?;
    Some(got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_quote_in_a_chunk_extension_is_refused_and_smuggles_nothing() {
    let (a_addr, a_seen) = recording_backend().await;
    let b: EchoServer = echo("tenant-b", "web", "b-0").await;
    let mut documents = tenant_a_routes_to(a_addr);
    documents.extend(echo_service("tenant-b", "web", &[&b]));
    documents.push(simple_ingress("tenant-b", "web", "b.example", "web"));
    let h = Harness::start(&[("t.yaml", docs(&documents))]).await;
    assert_eq!(h.echo_json("b.example", "/").await["namespace"], "tenant-b");
    let b_before = b.requests();

    // The attack as a client sends it, in one write, and byte by byte.
    let attack = format!(
        "POST / HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n0;a=\"\r\n\r\n{SMUGGLED}"
    );
    let answer = exchange_until_close(h.proxy.http, attack.as_bytes())
        .await
        .expect("the proxy closes the connection after its answer");
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");
    assert!(text.contains("malformed chunked body"), "{text}");

    let mut slow = TcpStream::connect(h.proxy.http).await.unwrap();
    for byte in attack.as_bytes() {
        if slow.write_all(&[*byte]).await.is_err() {
            break;
        }
    }
    let mut rest = Vec::new();
    tokio::time::timeout(RAW_TIMEOUT, slow.read_to_end(&mut rest))
        .await
        .expect("the proxy closes the connection after its answer")
        .ok();
    let text = String::from_utf8_lossy(&rest);
    assert!(text.starts_with("HTTP/1.1 400 "), "{text}");
    assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{text}");

    // The detector is live: a request B is actually sent reaches B. B's
    // count before and after it differs by exactly that one request.
    let answer = client::raw_exchange(
        h.proxy.http,
        b"GET /asked HTTP/1.1\r\nHost: b.example\r\nConnection: close\r\n\r\n",
        RAW_TIMEOUT,
    )
    .await
    .unwrap();
    assert!(answer.starts_with(b"HTTP/1.1 200 "));
    assert_eq!(b.requests(), b_before + 1, "the hidden request reached B");
    let a_bytes = String::from_utf8_lossy(&a_seen.lock().unwrap()).into_owned();
    assert!(!a_bytes.contains("/smuggled"), "{a_bytes}");

    let metrics = h.metrics().await;
    assert!(
        metric(
            &metrics,
            "teapot_edge_refusals_total{reason=\"bad_chunked_body\"}"
        )
        .unwrap_or(0.0)
            >= 2.0,
        "{metrics}"
    );
}

/// Valid extensions (BWS, tokens, quoted-strings with quoted-pairs) are
/// still served, and their body is A's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_chunk_extensions_are_still_served() {
    let (a_addr, a_seen) = recording_backend().await;
    let documents = tenant_a_routes_to(a_addr);
    let h = Harness::start(&[("t.yaml", docs(&documents))]).await;
    let request = "POST /ext HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n\
        5 ; a = b ;c=\"say \\\"hi\\\"; \\\\\"\r\nhello\r\n0;d\r\nX-Trailer: 1\r\n\r\n";
    let answer = client::raw_exchange(h.proxy.http, request.as_bytes(), RAW_TIMEOUT)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    let seen = String::from_utf8_lossy(&a_seen.lock().unwrap()).into_owned();
    assert!(seen.starts_with("POST /ext HTTP/1.1\r\n"), "{seen}");
    // Re-chunked canonically: the extensions are not forwarded.
    assert!(
        seen.ends_with("\r\n\r\n5\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n"),
        "{seen}"
    );
}
