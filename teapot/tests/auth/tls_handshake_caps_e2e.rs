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
//! - HTTPS is served as before once the slots are free;
//! - a Gateway's own-address HTTPS socket admits and bounds handshakes
//!   the same way: silent connections and a ClientHello sent a byte at a
//!   time hold the client's slots from accept and are cut at the deadline,
//!   while another client is served on the same socket.

use crate::common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use rustls::pki_types::ServerName;
use serde_json::json;
use teapot_testkit::certs::{TestCa, tls_secret_yaml};
use teapot_testkit::client::{Request, Transport, send};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const HOST: &str = "web.test";

/// The first half of a ClientHello naming [`HOST`], as rustls sends it.
fn half_a_client_hello() -> Vec<u8> {
    let mut out = client_hello();
    out.truncate(out.len() / 2);
    out
}

/// A whole ClientHello naming [`HOST`], as rustls sends it.
fn client_hello() -> Vec<u8> {
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
async fn closed_within<R: AsyncRead + Unpin>(tcp: &mut R, within: Duration) -> Option<Duration> {
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

/// The pool of the Gateway with its own address (no other test binds in
/// it), the address it asks for, and a port the shared listeners never
/// serve.
const OWN_POOL: &str = "default=127.0.81.0/29";
const OWN: &str = "127.0.81.2";
const OWN_PORT: u16 = 8443;
/// Where the hostile client connects from: its caps are its own, and the
/// legitimate client (127.0.0.1) keeps its.
const HOSTILE: &str = "127.0.81.200";

/// A connection from [`HOSTILE`].
async fn hostile(to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket
        .bind(SocketAddr::new(HOSTILE.parse().unwrap(), 0))
        .unwrap();
    socket.connect(to).await.unwrap()
}

/// Sends `bytes` over `tcp` one at a time, `every` apart, then keeps the
/// connection open; the read half shows when the proxy closes it. The
/// writer is the task's (abort it to let go).
fn trickle(
    tcp: TcpStream,
    bytes: Vec<u8>,
    every: Duration,
) -> (tokio::net::tcp::OwnedReadHalf, tokio::task::JoinHandle<()>) {
    let (read, mut write) = tcp.into_split();
    let writer = tokio::spawn(async move {
        for b in bytes {
            if write.write_all(&[b]).await.is_err() {
                return;
            }
            tokio::time::sleep(every).await;
        }
        std::future::pending::<()>().await;
    });
    (read, writer)
}

/// A GET for [`HOST`] answered 200 on a fresh connection to `addr`.
async fn served_at(addr: SocketAddr, transport: &Transport) {
    eventually("HTTPS served", REQUEST_TIMEOUT, || async move {
        match send(addr, transport, &Request::get(HOST, "/")).await {
            Ok(resp) if resp.status == 200 => Ok(()),
            Ok(resp) => Err(format!("{}: {}", resp.status, resp.text())),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
}

/// A Gateway's own-address HTTPS socket (an HTTPS listener on 8443 there)
/// admits a handshake at accept as the shared 443 does: with a per-client
/// cap of 3, two connections that never send a byte and one that sends
/// its ClientHello a byte at a time hold the client's three slots, so a
/// fourth is closed at once and counted; another client is served on the
/// same socket meanwhile; the three are cut at the header-read deadline
/// (6 s; Pingora's own bound was 60 s) from accept, however the bytes
/// trickle, and counted as header timeouts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn own_address_handshakes_are_admitted_at_accept_and_cut_at_the_deadline() {
    const NS: &str = "own";
    const DEADLINE: Duration = Duration::from_secs(6);
    let ca = TestCa::new("own address handshakes CA");
    let site = ca.issue(&[HOST]);
    let backend = echo(NS, "web", "web-0").await;
    let mut objects = vec![
        gateway_class(),
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": { "name": "own", "namespace": NS },
            "spec": {
                "gatewayClassName": "teapot",
                "addresses": [{ "type": "IPAddress", "value": OWN }],
                "listeners": [{
                    "name": "https", "protocol": "HTTPS", "port": OWN_PORT, "hostname": HOST,
                    "tls": { "certificateRefs": [{ "name": "site" }] },
                }],
            },
        }),
        http_route(
            NS,
            "web",
            json!({ "name": "own" }),
            &[HOST],
            json!([{ "backendRefs": [{ "name": "web", "port": 80 }] }]),
        ),
    ];
    objects.extend(echo_service(NS, "web", &[&backend]));
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("l4-state.json");
    let h = Harness::start_with_args(
        &[
            ("gateway.yaml", docs(&objects)),
            ("secret.yaml", tls_secret_yaml(NS, "site", &site)),
        ],
        &[
            "--l4-pool",
            OWN_POOL,
            "--l4-state",
            state_file.to_str().unwrap(),
            "--header-read-timeout",
            "6",
            "--max-connections-per-client",
            "3",
        ],
    )
    .await;
    let own = SocketAddr::new(OWN.parse().unwrap(), OWN_PORT);
    let legitimate = Transport::tls_verified(HOST, &[ca.cert_der()]);
    served_at(own, &legitimate).await;
    let metrics = h.metrics().await;
    let caps_before = refusals(&metrics, "client_connection_cap");
    let timeouts_before = refusals(&metrics, "header_timeout");

    let opened = Instant::now();
    let mut held: Vec<Box<dyn AsyncRead + Unpin + Send>> = Vec::new();
    for _ in 0..2 {
        held.push(Box::new(hostile(own).await));
    }
    let (trickling, writer) = trickle(
        hostile(own).await,
        client_hello(),
        Duration::from_millis(200),
    );
    held.push(Box::new(trickling));
    // The silent ones are accepted about a second after they connect
    // (the listener defers accept until a byte came or a second passed).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let mut over = hostile(own).await;
    over.write_all(&client_hello()[..1]).await.unwrap();
    assert!(
        closed_within(&mut over, Duration::from_secs(2))
            .await
            .is_some(),
        "a connection over the per-client cap waited in its handshake"
    );
    for (i, tcp) in held.iter_mut().enumerate() {
        assert_eq!(
            closed_within(tcp, Duration::from_millis(100)).await,
            None,
            "held connection {i} closed before the deadline"
        );
    }
    served_at(own, &legitimate).await;

    for (i, tcp) in held.iter_mut().enumerate() {
        let left = Duration::from_secs(20).saturating_sub(opened.elapsed());
        assert!(
            closed_within(tcp, left).await.is_some(),
            "held connection {i} still open 20 s after it connected"
        );
        let at = opened.elapsed();
        // Cut by the deadline, not at once.
        assert!(at >= DEADLINE - Duration::from_secs(1), "{i}: {at:?}");
    }
    writer.abort();
    let metrics = h.metrics().await;
    let caps_after = refusals(&metrics, "client_connection_cap");
    let timeouts_after = refusals(&metrics, "header_timeout");
    assert!(
        caps_after >= caps_before + 1.0,
        "{caps_before} -> {caps_after}"
    );
    assert!(
        timeouts_after >= timeouts_before + 3.0,
        "{timeouts_before} -> {timeouts_after}"
    );
    served_at(own, &legitimate).await;
}
