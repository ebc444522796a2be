//! TLS connections to the shared HTTPS listener count against the edge's
//! connection caps from accept, not from the end of their handshake
//! (proxy/src/plane/passthrough.rs, the listener's pre-TLS hook), through
//! `teapot proxy`:
//!
//! - with a per-client cap of N, N connections that send half a
//!   ClientHello and stop hold the client's N slots: the next one is
//!   closed at once, and counted;
//! - a stalled handshake is closed at the header-read deadline (Pingora's
//!   own bound was 60 s), and counted;
//! - new connections are paced before their handshake;
//! - HTTPS is served as before once the slots are free.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rustls::pki_types::ServerName;
use teapot_testkit::client::{Request, Transport, send};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOST: &str = "web.test";

/// The first half of a ClientHello naming [`HOST`], as rustls sends it.
fn half_a_client_hello() -> Vec<u8> {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(rustls::RootCertStore::empty())
    .with_no_client_auth();
    let mut conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::try_from(HOST).unwrap())
            .unwrap();
    let mut out = Vec::new();
    conn.write_tls(&mut out).unwrap();
    out.truncate(out.len() / 2);
    out
}

/// A connection that sent half a ClientHello and stops there.
async fn stalled(https: SocketAddr) -> TcpStream {
    let mut tcp = TcpStream::connect(https).await.unwrap();
    tcp.write_all(&half_a_client_hello()).await.unwrap();
    tcp
}

/// How long until the proxy closes `tcp` (an end of stream or a reset),
/// at most `within`; `None` if it is still open then.
async fn closed_within(tcp: &mut TcpStream, within: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buf = [0u8; 64];
    match tokio::time::timeout(within, tcp.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => Some(started.elapsed()),
        Ok(Ok(n)) => panic!("{n} bytes answered to half a ClientHello"),
        Err(_) => None,
    }
}

async fn https_works(h: &Harness) {
    let https = h.proxy.https;
    eventually("HTTPS served", REQUEST_TIMEOUT, || async move {
        match send(
            https,
            &Transport::tls_insecure(HOST),
            &Request::get(HOST, "/"),
        )
        .await
        {
            Ok(resp) if resp.status == 200 => Ok(()),
            Ok(resp) => Err(format!("{}: {}", resp.status, resp.text())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

fn refusals(metrics: &str, reason: &str) -> f64 {
    metric(
        metrics,
        &format!("teapot_edge_refusals_total{{reason=\"{reason}\"}}"),
    )
    .unwrap_or(0.0)
}

/// Three half-done handshakes hold the client's three slots (the deadline
/// is far off): a fourth connection is closed at once, as a fourth plain
/// HTTP one would be, and counted; the three are still open. Once they
/// close, the client is served over HTTPS again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_done_handshakes_hold_the_client_s_connection_slots() {
    const CAP: usize = 3;
    let (_web, h) = one_route(
        "default",
        "web",
        &[
            "--header-read-timeout",
            "60",
            "--max-connections-per-client",
            "3",
        ],
    )
    .await;
    https_works(&h).await;
    let https = h.proxy.https;
    let before = refusals(&h.metrics().await, "client_connection_cap");
    let mut held = Vec::new();
    for _ in 0..CAP {
        held.push(stalled(https).await);
    }
    // Let the listener take them (it defers accept until a byte came).
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut over = stalled(https).await;
    assert!(
        closed_within(&mut over, Duration::from_secs(10))
            .await
            .is_some(),
        "a connection over the per-client cap waited in its handshake"
    );
    for (i, tcp) in held.iter_mut().enumerate() {
        assert_eq!(
            closed_within(tcp, Duration::from_millis(100)).await,
            None,
            "held connection {i} closed"
        );
    }
    let after = refusals(&h.metrics().await, "client_connection_cap");
    assert!(after >= before + 1.0, "{before} -> {after}");
    drop(held);
    https_works(&h).await;
}

/// A handshake that stalls after half a ClientHello is closed at the
/// header-read deadline (1 s here), not after Pingora's 60 s, and counted
/// as a header timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_handshake_is_closed_at_the_header_read_deadline() {
    let (_web, h) = one_route("default", "web", &["--header-read-timeout", "1"]).await;
    https_works(&h).await;
    let before = refusals(&h.metrics().await, "header_timeout");
    let mut tcp = stalled(h.proxy.https).await;
    let closed = closed_within(&mut tcp, Duration::from_secs(15))
        .await
        .expect("a stalled handshake still open after 15 s");
    // Closed by the deadline, not at once (a correctness bound).
    assert!(closed >= Duration::from_millis(800), "{closed:?}");
    let after = refusals(&h.metrics().await, "header_timeout");
    assert!(after >= before + 1.0, "{before} -> {after}");
    https_works(&h).await;
}

/// New connections are paced at accept: with one a second, a burst of
/// stalled handshakes gets its first through and the rest closed at once,
/// counted as over the client's pace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_tls_connections_are_paced_before_their_handshake() {
    let (_web, h) = one_route(
        "default",
        "web",
        &[
            "--header-read-timeout",
            "60",
            "--max-connection-rate-per-client",
            "1",
        ],
    )
    .await;
    let https = h.proxy.https;
    // The pace's second has run out since the harness's own connections.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = refusals(&h.metrics().await, "client_connection_rate");
    let mut burst = Vec::new();
    for _ in 0..3 {
        burst.push(stalled(https).await);
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut closed = 0;
    for tcp in &mut burst {
        if closed_within(tcp, Duration::from_secs(2)).await.is_some() {
            closed += 1;
        }
    }
    assert!(closed >= 2, "{closed} of 3 closed");
    let after = refusals(&h.metrics().await, "client_connection_rate");
    assert!(after >= before + 2.0, "{before} -> {after}");
}
