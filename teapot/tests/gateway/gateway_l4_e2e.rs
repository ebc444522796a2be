//! End-to-end tests of Gateway API routes on the L4 plane
//! (docs/gateway-api-l4.md): the real `teapot proxy` binary, a Gateway with
//! TCP, UDP and TLS (Passthrough) listeners in a manifests directory,
//! TCPRoute, UDPRoute and TLSRoutes to echo and TLS backends on loopback.
//!
//! A Gateway listener listens on its own port at the Gateway's allocated
//! address, so the test finds free ports first (as `l4_e2e` does for
//! Services; docs/l4.md, "Tests and the port decision").
//!
//! Run with `cargo test -p teapot --test gateway gateway_l4_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

use common::l4::{self, gateway_report, listener_entry, tcp_exchange};
use common::tls_backend::{self, named_backend};
use common::*;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, cert_matches_hostname};
use teapot_testkit::l4::{TcpEcho, TcpMode, UdpEcho, free_port, payload};
use tokio::io::AsyncReadExt;
use tokio::net::{TcpStream, UdpSocket};

const NS: &str = "gw-l4";
const GW: &str = "gateway.networking.k8s.io/v1";
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn route(
    kind: &str,
    name: &str,
    section: &str,
    hostnames: &[&str],
    service: &str,
    port: u16,
) -> Value {
    let mut spec = json!({
        "parentRefs": [{"name": "edge", "sectionName": section}],
        "rules": [{"backendRefs": [{"name": service, "port": port}]}],
    });
    if !hostnames.is_empty() {
        spec["hostnames"] = json!(hostnames);
    }
    json!({"apiVersion": GW, "kind": kind, "metadata": {"name": name, "namespace": NS}, "spec": spec})
}

/// Connects through the proxy with `sni`, trusting `ca`: the backend's
/// certificate and what it wrote.
async fn tls_through(
    addr: SocketAddr,
    sni: &str,
    ca: &TestCa,
) -> std::io::Result<(Vec<u8>, String)> {
    let connector = tls_backend::connector(ca);
    tokio::time::timeout(IO_TIMEOUT, async {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(sni.to_string()).map_err(std::io::Error::other)?;
        let mut tls = connector.connect(name, tcp).await?;
        let cert = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        let mut text = String::new();
        tls.read_to_string(&mut text).await?;
        Ok((cert, text))
    })
    .await
    .map_err(|_| std::io::Error::other("TLS exchange timed out"))?
}

/// One datagram and its echo, resent when the network drops one.
async fn udp_exchange(addr: SocketAddr, data: &[u8]) {
    let socket = UdpSocket::bind((LOCALHOST, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    let mut buf = vec![0u8; 65_536];
    for _ in 0..6 {
        socket.send(data).await.unwrap();
        if let Ok(Ok(n)) = tokio::time::timeout(Duration::from_secs(5), socket.recv(&mut buf)).await
        {
            assert_eq!(&buf[..n], data);
            return;
        }
    }
    panic!("no UDP answer through the Gateway");
}

fn listener_condition<'a>(gateway: &'a Value, listener: &str, type_: &str) -> &'a Value {
    let l = listener_entry(gateway, listener);
    l["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} on {listener}: {l}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_udp_and_tls_passthrough_routes_through_a_gateway() {
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let udp = UdpEcho::start().await.unwrap();
    let ca = TestCa::new("gateway l4 e2e CA");
    let a = named_backend(&ca, "a.example.com").await;
    let b = named_backend(&ca, "b.example.com").await;
    let port = free_port(LOCALHOST).unwrap();
    let mut ports = vec![port];
    while ports.len() < 3 {
        let p = free_port(LOCALHOST).unwrap();
        if !ports.contains(&p) {
            ports.push(p);
        }
    }
    let (tls_port, half_port) = (ports[1], ports[2]);

    let mut objects = vec![
        json!({"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "teapot"},
               "spec": {"controllerName": "teapot.dev/gateway-controller"}}),
        json!({"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "edge", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "db", "port": port, "protocol": "TCP"},
            {"name": "dns", "port": port, "protocol": "UDP"},
            {"name": "tls", "port": tls_port, "protocol": "TLS", "hostname": "*.example.com",
             "tls": {"mode": "Passthrough"}},
            {"name": "half", "port": half_port, "protocol": "TCP"},
        ]}}),
        route("TCPRoute", "db", "db", &[], "echo-tcp", 7000),
        route("UDPRoute", "dns", "dns", &[], "echo-udp", 5300),
        route("TLSRoute", "a", "tls", &["a.example.com"], "tls-a", 443),
        route("TLSRoute", "b", "tls", &["b.example.com"], "tls-b", 443),
        // Half the weight on a Service that does not exist: half the
        // connections are refused (the specification's weighted rejection).
        json!({"apiVersion": GW, "kind": "TCPRoute", "metadata": {"name": "half", "namespace": NS},
               "spec": {"parentRefs": [{"name": "edge", "sectionName": "half"}],
                        "rules": [{"backendRefs": [{"name": "echo-tcp", "port": 7000},
                                                   {"name": "missing", "port": 7000}]}]}}),
    ];
    objects.extend(l4::backend(NS, "echo-tcp", 7000, "TCP", tcp.port()));
    objects.extend(l4::backend(NS, "echo-udp", 5300, "UDP", udp.port()));
    objects.extend(l4::backend(NS, "tls-a", 443, "TCP", a.port()));
    objects.extend(l4::backend(NS, "tls-b", 443, "TCP", b.port()));

    let (h, state) = l4::start(&[("gateway.yaml", docs(&objects))], &[]).await;

    let gateway = eventually(
        "the Gateway's three listeners listening",
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            let Some(g) = gateway_report(&status, NS, "edge") else {
                return Err(status["l4"].clone());
            };
            let listening = g["listeners"]
                .as_array()
                .is_some_and(|l| l.len() == 4 && l.iter().all(|l| l["state"] == "listening"));
            if listening {
                Ok(g.clone())
            } else {
                Err(g.clone())
            }
        },
    )
    .await;
    assert_eq!(gateway["address"], "127.0.0.1");
    for (listener, routes) in [("db", 1), ("dns", 1), ("tls", 2)] {
        assert_eq!(
            listener_condition(&gateway, listener, "Programmed")["status"],
            "True"
        );
        let l = listener_entry(&gateway, listener);
        assert_eq!(l["attached_routes"], routes, "{l}");
    }
    let status = h.status().await;
    // The Gateway's own status, as the status subresource would carry it
    // (manifests mode: nothing writes it, `/status` shows it): the L4
    // listeners joined in, with their address, not "not served".
    let whole = status["gatewayAPI"]["gateways"]
        .as_array()
        .and_then(|gs| {
            gs.iter()
                .find(|g| g["namespace"] == NS && g["name"] == "edge")
        })
        .unwrap_or_else(|| panic!("edge in gatewayAPI: {}", status["gatewayAPI"]))["status"]
        .clone();
    for (listener, routes) in [("db", 1), ("dns", 1), ("tls", 2)] {
        assert_eq!(
            listener_condition(&whole, listener, "Accepted")["status"],
            "True",
            "{whole}"
        );
        let l = listener_entry(&whole, listener);
        assert_eq!(l["attachedRoutes"], routes, "{l}");
    }
    assert!(
        whole["addresses"]
            .as_array()
            .is_some_and(|a| a.iter().any(|a| a["value"] == "127.0.0.1")),
        "{whole}"
    );
    assert!(!whole.to_string().contains("not served"), "{whole}");
    let routes = status["l4"]["routes"].as_array().unwrap();
    assert_eq!(routes.len(), 5, "{routes:?}");
    for r in routes {
        for c in r["parents"][0]["conditions"].as_array().unwrap() {
            let invalid = r["name"] == "half" && c["type"] == "ResolvedRefs";
            assert_eq!(c["status"], if invalid { "False" } else { "True" }, "{r}");
        }
    }

    // TCP: byte-exact through the TCPRoute.
    let addr = SocketAddr::new(LOCALHOST, port);
    for len in [1usize, 70_000] {
        let data = payload(len as u64, len);
        assert!(
            tcp_exchange(addr, &data).await.unwrap() == data,
            "{len} bytes"
        );
    }
    assert!(tcp.served() > 0);
    // UDP on the same port number.
    udp_exchange(addr, b"dns query").await;
    assert!(udp.datagrams() > 0);

    // TLS passthrough: the backend chosen by SNI terminates, so the client
    // sees that backend's certificate.
    let tls_addr = SocketAddr::new(LOCALHOST, tls_port);
    for host in ["a.example.com", "b.example.com", "A.Example.COM"] {
        let (cert, text) = tls_through(tls_addr, host, &ca)
            .await
            .expect("TLS through the Gateway");
        let lower = host.to_ascii_lowercase();
        assert!(
            cert_matches_hostname(&cert, &lower),
            "{host}: another backend's certificate"
        );
        assert_eq!(text, lower);
    }
    // No TLSRoute for the name: the connection is closed, nothing answers.
    let refused = tls_through(tls_addr, "c.example.com", &ca).await;
    assert!(refused.is_err(), "{refused:?}");
    // Not TLS at all: closed without a byte.
    let back = tcp_exchange(tls_addr, b"GET / HTTP/1.1\r\nHost: a.example.com\r\n\r\n").await;
    assert!(back.is_ok_and(|b| b.is_empty()));

    // Weighted rejection: of 10 connections, exactly 5 echo and 5 are
    // closed without a byte.
    let half = SocketAddr::new(LOCALHOST, half_port);
    let mut echoed = 0;
    for i in 0..10u64 {
        let data = payload(i, 100);
        let back = tcp_exchange(half, &data).await.unwrap_or_default();
        if back == data {
            echoed += 1;
        } else {
            assert!(back.is_empty(), "a refused connection gets nothing");
        }
    }
    assert_eq!(echoed, 5);

    // The state file holds the Gateway's listeners, under a key no
    // Service can have.
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(state.path().join("l4-state.json")).unwrap())
            .unwrap();
    let held = &saved["allocations"][format!("{NS}/Gateway:edge")];
    assert_eq!(held["address"], "127.0.0.1", "{saved}");
    assert_eq!(held["ports"].as_array().unwrap().len(), 4, "{saved}");
}
