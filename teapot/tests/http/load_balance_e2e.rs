//! `load-balance: ewma` through the real `teapot proxy` binary: two
//! backends, one answering 200 ms late; nearly every request goes to the
//! fast one, over HTTP/1.1 and HTTP/2. Round-robin (the default) would
//! send half to each.
//!
//! Run with `cargo test -p teapot --test http load_balance_e2e::`.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use teapot_testkit::client::{Proto, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// An HTTP/1.1 backend answering every request with `name` after
/// `delay`, counting them.
async fn backend(name: &'static str, delay: Duration) -> (u16, Arc<AtomicU32>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let count = Arc::new(AtomicU32::new(0));
    let counted = count.clone();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let count = counted.clone();
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    let Ok(n) = conn.read(&mut chunk).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    // Bodiless requests only: each head is one request.
                    while let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                        buf.drain(..end + 4);
                        count.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(delay).await;
                        let answer = format!(
                            "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n{name}",
                            name.len()
                        );
                        if conn.write_all(answer.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    (port, count)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ewma_sends_most_requests_to_the_faster_endpoint() {
    const NS: &str = "ewma";
    let (slow_port, slow) = backend("slow", Duration::from_millis(200)).await;
    let (fast_port, fast) = backend("fast", Duration::ZERO).await;
    let mut objects = vec![service(NS, "web", &[(Some("http"), 80)])];
    for (i, port) in [slow_port, fast_port].into_iter().enumerate() {
        objects.push(slice(
            NS,
            &format!("web-{i}"),
            "web",
            &[(Some("http"), port)],
            &[("127.0.0.1", true)],
        ));
    }
    objects.push(annotated(
        NS,
        "ewma.test",
        "web",
        &[("load-balance", "ewma")],
    ));
    objects.push(annotated(
        NS,
        "rr.test",
        "web",
        &[("load-balance", "round_robin")],
    ));
    let h = Harness::start(&[("manifests.yaml", docs(&objects))]).await;
    const EACH: u32 = 20;
    for proto in [Proto::Http1, Proto::Http2] {
        for n in 0..EACH {
            let resp = over(&h, proto, Request::get("ewma.test", &format!("/{n}"))).await;
            assert_eq!(resp.status, 200, "{proto:?}: {}", resp.text());
        }
    }
    let (to_slow, to_fast) = (slow.load(Ordering::Relaxed), fast.load(Ordering::Relaxed));
    assert_eq!(to_slow + to_fast, 2 * EACH);
    // The slow endpoint is tried while it is unmeasured (at most once
    // or twice) and then only when its average, decaying by e every
    // 10 s, falls below the fast one's: not within this test.
    assert!(to_slow <= 3, "slow {to_slow}, fast {to_fast}");

    // round_robin (the default) alternates, slow or not.
    for n in 0..10 {
        let resp = over(&h, Proto::Http1, Request::get("rr.test", &format!("/{n}"))).await;
        assert_eq!(resp.status, 200);
    }
    assert_eq!(slow.load(Ordering::Relaxed) - to_slow, 5);
    assert_eq!(fast.load(Ordering::Relaxed) - to_fast, 5);
}
