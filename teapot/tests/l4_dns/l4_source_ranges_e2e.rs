//! End-to-end: `spec.loadBalancerSourceRanges` on L4 Services, with the
//! real `teapot proxy` binary, real sockets on loopback and counting echo
//! backends. A Service whose ranges leave out the client refuses its TCP
//! connection before any upstream connect and drops its UDP datagram
//! before any flow; a Service whose ranges hold the client serves it; the
//! report says the ranges are enforced and the refusals are counted.
//!
//! Run with `cargo test -p teapot --test l4_dns l4_source_ranges_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use teapot_testkit::l4::{TcpEcho, TcpMode, UdpEcho, free_port, payload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

const V4: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const V6: IpAddr = IpAddr::V6(Ipv6Addr::LOCALHOST);
const IO_TIMEOUT: Duration = Duration::from_secs(30);
const NS: &str = "l4-ranges";

/// A teapot L4 Service with one TCP and one UDP port numbered `port`,
/// restricted to `ranges`.
fn service(name: &str, port: u16, ranges: &[&str]) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": NS },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "teapot.dev/lb",
            "loadBalancerSourceRanges": ranges,
            "ports": [
                { "name": "tcp", "port": port, "protocol": "TCP" },
                { "name": "udp", "port": port, "protocol": "UDP" },
            ],
        },
    })
}

/// Its EndpointSlice: the two echo backends at 127.0.0.1.
fn endpoints(name: &str, tcp: &TcpEcho, udp: &UdpEcho) -> Value {
    let mut out = slice(NS, &format!("{name}-0"), name, &[], &[("127.0.0.1", true)]);
    out["ports"] = json!([
        { "name": "tcp", "port": tcp.port(), "protocol": "TCP" },
        { "name": "udp", "port": udp.port(), "protocol": "UDP" },
    ]);
    out
}

/// Waits until `name` has both listeners listening; returns its report.
async fn wait_listening(h: &Harness, name: &str) -> Value {
    eventually(
        &format!("{NS}/{name}: 2 listeners listening"),
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            let Some(s) = status["l4"]["services"]
                .as_array()
                .and_then(|a| a.iter().find(|s| s["namespace"] == NS && s["name"] == name))
            else {
                return Err(status["l4"].clone());
            };
            let all = s["listeners"].as_array().cloned().unwrap_or_default();
            let ok = all.len() == 2 && all.iter().all(|l| l["state"] == "listening");
            if ok { Ok(s.clone()) } else { Err(s.clone()) }
        },
    )
    .await
}

fn condition<'a>(report: &'a Value, type_: &str) -> &'a Value {
    report["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .unwrap_or_else(|| panic!("no {type_} condition in {report}"))
}

/// What a TCP client gets: the echo of `data`, or `None` when the
/// connection ends (reset or closed) before any byte comes back.
async fn tcp_answer(addr: SocketAddr, data: &[u8]) -> Option<Vec<u8>> {
    tokio::time::timeout(IO_TIMEOUT, async {
        let mut s = TcpStream::connect(addr).await.ok()?;
        // A refused client may see its write fail already.
        s.write_all(data).await.ok()?;
        s.shutdown().await.ok()?;
        let mut back = Vec::new();
        s.read_to_end(&mut back).await.ok()?;
        (!back.is_empty()).then_some(back)
    })
    .await
    .expect("the connection ends in time")
}

/// What a UDP client gets for `data` within three tries of a second.
async fn udp_answer(from: IpAddr, addr: SocketAddr, data: &[u8]) -> Option<Vec<u8>> {
    let socket = UdpSocket::bind((from, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    let mut buf = vec![0u8; 2048];
    for _ in 0..3 {
        socket.send(data).await.unwrap();
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(1), socket.recv(&mut buf)).await
        {
            return Some(buf[..n].to_vec());
        }
    }
    None
}

/// `teapot_l4_source_range_refusals_total` of `service` and `protocol`.
fn refusals(metrics: &str, service: &str, protocol: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with("teapot_l4_source_range_refusals_total{"))
        .filter(|l| {
            l.contains(&format!("service=\"{NS}/{service}\""))
                && l.contains(&format!("protocol=\"{protocol}\""))
        })
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

async fn start(pool: &str, files: &[(&str, String)]) -> (Harness, tempfile::TempDir) {
    let state = tempfile::tempdir().expect("state dir");
    let state_file = state.path().join("l4-state.json");
    let pool = format!("default={pool}");
    let args = [
        "--l4-pool",
        pool.as_str(),
        "--l4-state",
        state_file.to_str().expect("utf-8 path"),
    ];
    (Harness::start_with_args(files, &args).await, state)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_outside_the_source_ranges_reaches_no_backend_and_one_inside_is_served() {
    let (closed_tcp, closed_udp) = (
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
        UdpEcho::start().await.unwrap(),
    );
    let (open_tcp, open_udp) = (
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
        UdpEcho::start().await.unwrap(),
    );
    let closed_port = free_port(V4).unwrap();
    let open_port = free_port(V4).unwrap();
    assert_ne!(closed_port, open_port);
    let files = [(
        "ranges.yaml",
        docs(&[
            // An office network and an IPv6 prefix: not 127.0.0.1.
            service("closed", closed_port, &["192.0.2.0/24", "2001:db8::/32"]),
            endpoints("closed", &closed_tcp, &closed_udp),
            service("open", open_port, &["127.0.0.0/8"]),
            endpoints("open", &open_tcp, &open_udp),
        ]),
    )];
    let (h, _state) = start("127.0.0.1", &files).await;
    let closed = wait_listening(&h, "closed").await;
    let open = wait_listening(&h, "open").await;
    let enforced = condition(&closed, "SourceRangesEnforced");
    assert_eq!(
        (&enforced["status"], &enforced["reason"]),
        (&json!("True"), &json!("Enforced")),
        "{closed}"
    );
    assert!(
        enforced["message"]
            .as_str()
            .unwrap()
            .contains("192.0.2.0/24, 2001:db8::/32"),
        "{enforced}"
    );
    assert_eq!(condition(&open, "SourceRangesEnforced")["status"], "True");

    let data = payload(7, 64);
    for _ in 0..3 {
        assert_eq!(
            tcp_answer(SocketAddr::new(V4, closed_port), &data).await,
            None,
            "127.0.0.1 is outside the closed Service's ranges"
        );
    }
    assert_eq!(
        udp_answer(V4, SocketAddr::new(V4, closed_port), b"query").await,
        None
    );
    assert_eq!(closed_tcp.served(), 0, "no connection reached the backend");
    assert_eq!(closed_udp.datagrams(), 0, "no datagram reached the backend");

    assert_eq!(
        tcp_answer(SocketAddr::new(V4, open_port), &data).await,
        Some(data.clone())
    );
    assert_eq!(
        udp_answer(V4, SocketAddr::new(V4, open_port), b"query").await,
        Some(b"query".to_vec())
    );
    assert_eq!(open_tcp.served(), 1);

    let metrics = h.metrics().await;
    assert_eq!(refusals(&metrics, "closed", "TCP"), 3.0, "{metrics}");
    assert_eq!(refusals(&metrics, "closed", "UDP"), 3.0, "{metrics}");
    assert_eq!(refusals(&metrics, "open", "TCP"), 0.0);
    assert_eq!(
        metric(&metrics, "teapot_l4_udp_flows_total"),
        Some(1.0),
        "the refused client got no flow"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ipv6_client_is_held_to_its_own_family() {
    let (v4_tcp, v4_udp) = (
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
        UdpEcho::start().await.unwrap(),
    );
    let (v6_tcp, v6_udp) = (
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
        UdpEcho::start().await.unwrap(),
    );
    let v4_only = free_port(V6).unwrap();
    let v6_own = free_port(V6).unwrap();
    assert_ne!(v4_only, v6_own);
    let files = [(
        "ranges6.yaml",
        docs(&[
            // Every IPv4 client and none of IPv6: [::1] is refused.
            service("v4-only", v4_only, &["0.0.0.0/0"]),
            endpoints("v4-only", &v4_tcp, &v4_udp),
            service("v6-own", v6_own, &["::1/128"]),
            endpoints("v6-own", &v6_tcp, &v6_udp),
        ]),
    )];
    let (h, _state) = start("::1", &files).await;
    assert_eq!(wait_listening(&h, "v4-only").await["address"], "::1");
    wait_listening(&h, "v6-own").await;

    let data = payload(6, 64);
    assert_eq!(tcp_answer(SocketAddr::new(V6, v4_only), &data).await, None);
    assert_eq!(
        udp_answer(V6, SocketAddr::new(V6, v4_only), b"q6").await,
        None
    );
    assert_eq!((v4_tcp.served(), v4_udp.datagrams()), (0, 0));
    assert_eq!(
        tcp_answer(SocketAddr::new(V6, v6_own), &data).await,
        Some(data.clone())
    );
    assert_eq!(
        udp_answer(V6, SocketAddr::new(V6, v6_own), b"q6").await,
        Some(b"q6".to_vec())
    );
    let metrics = h.metrics().await;
    assert_eq!(refusals(&metrics, "v4-only", "TCP"), 1.0, "{metrics}");
    assert_eq!(refusals(&metrics, "v4-only", "UDP"), 3.0, "{metrics}");
}
