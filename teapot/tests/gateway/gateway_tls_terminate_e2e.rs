//! End-to-end test of TLS listeners in mode Terminate on the L4 plane
//! (docs/gateway-api-l4.md, "TLS Terminate"): the real `teapot proxy`
//! binary, a Gateway with a Terminate and a Passthrough listener on one
//! port (told apart by SNI) and a Terminate listener whose backend is
//! under a BackendTLSPolicy, TLSRoutes to backends on loopback.
//!
//! Run with `cargo test -p teapot --test gateway gateway_tls_terminate_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::l4::{self, gateway_report, listener_entry};
use common::tls_backend::{connector, named_backend, server_config};
use common::*;
use rustls::pki_types::ServerName;
use serde_json::{Value, json};
use teapot_testkit::certs::{TestCa, cert_matches_hostname, tls_secret_yaml};
use teapot_testkit::l4::{TcpEcho, TcpMode, free_port, payload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const NS: &str = "gw-tls";
const GW: &str = "gateway.networking.k8s.io/v1";
const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
const IO_TIMEOUT: Duration = Duration::from_secs(30);

fn route(name: &str, section: &str, host: &str, service: &str, port: u16) -> Value {
    json!({"apiVersion": GW, "kind": "TLSRoute", "metadata": {"name": name, "namespace": NS},
           "spec": {"parentRefs": [{"name": "edge", "sectionName": section}],
                    "hostnames": [host],
                    "rules": [{"backendRefs": [{"name": service, "port": port}]}]}})
}

/// A TLS echo for `host`: echoes what it reads inside TLS until the
/// client's end, and records each handshake's SNI.
async fn tls_echo_backend(ca: &TestCa, host: &str) -> (SocketAddr, Arc<Mutex<Vec<String>>>) {
    let acceptor = tokio_rustls::TlsAcceptor::from(server_config(&ca.issue(&[host]), None, &[]));
    let listener = TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let record = seen.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            let record = record.clone();
            tokio::spawn(async move {
                if let Ok(mut tls) = acceptor.accept(tcp).await {
                    let sni = tls.get_ref().1.server_name().unwrap_or("").to_string();
                    record.lock().unwrap().push(sni);
                    let mut buf = vec![0u8; 16 * 1024];
                    loop {
                        match tls.read(&mut buf).await {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                if tls.write_all(&buf[..n]).await.is_err() {
                                    break;
                                }
                            }
                        }
                    }
                    let _ = tls.shutdown().await;
                }
            });
        }
    });
    (addr, seen)
}

/// Connects with `sni` trusting `ca`, writes `data`, ends its side: the
/// server's certificate and everything read back.
async fn tls_exchange(
    addr: SocketAddr,
    sni: &str,
    ca: &TestCa,
    data: &[u8],
) -> std::io::Result<(Vec<u8>, Vec<u8>)> {
    let connector = connector(ca);
    tokio::time::timeout(IO_TIMEOUT, async {
        let tcp = TcpStream::connect(addr).await?;
        let name = ServerName::try_from(sni.to_string()).map_err(std::io::Error::other)?;
        let tls = connector.connect(name, tcp).await?;
        let cert = tls.get_ref().1.peer_certificates().unwrap()[0].to_vec();
        Ok((cert, l4::exchange(tls, data).await?))
    })
    .await
    .map_err(|_| std::io::Error::other("TLS exchange timed out"))?
}

fn metric(text: &str, name: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .map_or(0, |v| v as u64)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminate_and_passthrough_by_sni_and_tls_to_a_policy_s_backend() {
    let echo = TcpEcho::start(TcpMode::Echo).await.unwrap();
    // The Gateway's certificates and the passthrough backend's, from one
    // CA the client trusts; the re-encrypted backend's from another, which
    // only the BackendTLSPolicy names.
    let ca = TestCa::new("gateway tls terminate e2e CA");
    let backend_ca = TestCa::new("backend CA");
    let passthrough = named_backend(&ca, "abc.example.com").await;
    let (secure, sni_seen) = tls_echo_backend(&backend_ca, "backend.example").await;
    let mixed_port = free_port(LOCALHOST).unwrap();
    let reencrypt_port = loop {
        let p = free_port(LOCALHOST).unwrap();
        if p != mixed_port {
            break p;
        }
    };
    let gateway_cert = ca.issue(&["tls.example.com", "secure.example.com"]);

    let mut objects = vec![
        json!({"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "teapot"},
               "spec": {"controllerName": "teapot.dev/gateway-controller"}}),
        json!({"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "edge", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "term", "port": mixed_port, "protocol": "TLS", "hostname": "tls.example.com",
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "gw-cert"}]}},
            {"name": "pass", "port": mixed_port, "protocol": "TLS", "hostname": "abc.example.com",
             "tls": {"mode": "Passthrough"}},
            {"name": "reencrypt", "port": reencrypt_port, "protocol": "TLS",
             "hostname": "secure.example.com",
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "gw-cert"}]}},
        ]}}),
        route("term", "term", "tls.example.com", "echo", 3000),
        route("pass", "pass", "abc.example.com", "tls-backend", 8443),
        route(
            "reencrypt",
            "reencrypt",
            "secure.example.com",
            "secure",
            8443,
        ),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "backend-ca", "namespace": NS},
               "data": {"ca.crt": backend_ca.cert_pem()}}),
        json!({"apiVersion": GW, "kind": "BackendTLSPolicy",
               "metadata": {"name": "secure", "namespace": NS},
               "spec": {"targetRefs": [{"group": "", "kind": "Service", "name": "secure"}],
                        "validation": {"hostname": "backend.example",
                                       "caCertificateRefs": [{"group": "", "kind": "ConfigMap",
                                                              "name": "backend-ca"}]}}}),
    ];
    objects.extend(l4::backend(NS, "echo", 3000, "TCP", echo.port()));
    objects.extend(l4::backend(
        NS,
        "tls-backend",
        8443,
        "TCP",
        passthrough.port(),
    ));
    objects.extend(l4::backend(NS, "secure", 8443, "TCP", secure.port()));

    let (h, _state) = l4::start(
        &[
            ("gateway.yaml", docs(&objects)),
            ("cert.yaml", tls_secret_yaml(NS, "gw-cert", &gateway_cert)),
        ],
        &[],
    )
    .await;

    let gateway = eventually(
        "the Gateway's listeners listening",
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            let Some(g) = gateway_report(&status, NS, "edge").cloned() else {
                return Err(status["l4"].clone());
            };
            let listening = g["listeners"]
                .as_array()
                .is_some_and(|l| l.len() == 3 && l.iter().all(|l| l["state"] == "listening"));
            if listening { Ok(g) } else { Err(g) }
        },
    )
    .await;
    for name in ["term", "pass", "reencrypt"] {
        let l = listener_entry(&gateway, name);
        assert_eq!(l["attached_routes"], 1, "{l}");
        for c in l["conditions"].as_array().unwrap() {
            let expected = if c["type"] == "Conflicted" {
                "False"
            } else {
                "True"
            };
            assert_eq!(c["status"], expected, "{l}");
        }
    }

    // Terminate: the client gets the listener's certificate, its bytes
    // reach the plain TCP echo in clear, byte-exact.
    let mixed = SocketAddr::new(LOCALHOST, mixed_port);
    for len in [1usize, 70_000] {
        let data = payload(len as u64, len);
        let (cert, back) = tls_exchange(mixed, "tls.example.com", &ca, &data)
            .await
            .expect("TLS terminated at the Gateway");
        assert!(cert_matches_hostname(&cert, "tls.example.com"));
        assert!(back == data, "{len} bytes echoed");
    }
    assert!(echo.served() > 0, "the echo saw cleartext connections");

    // Passthrough on the same port: the backend's own certificate and
    // handshake.
    let (cert, back) = tls_exchange(mixed, "abc.example.com", &ca, b"")
        .await
        .expect("TLS passed through");
    assert!(cert_matches_hostname(&cert, "abc.example.com"));
    assert!(!cert_matches_hostname(&cert, "tls.example.com"));
    assert_eq!(back, b"abc.example.com");

    // No listener for the name: closed.
    assert!(
        tls_exchange(mixed, "other.example.com", &ca, b"x")
            .await
            .is_err()
    );

    // A client that does not trust the Gateway's certificate aborts the
    // handshake: one closed connection, counted.
    let before = metric(&h.metrics().await, "teapot_l4_tls_handshake_failures_total");
    let stranger = TestCa::new("a CA nobody uses");
    assert!(
        tls_exchange(mixed, "tls.example.com", &stranger, b"x")
            .await
            .is_err()
    );
    eventually("the failed handshake counted", RELOAD_TIMEOUT, || async {
        let now = metric(&h.metrics().await, "teapot_l4_tls_handshake_failures_total");
        if now > before { Ok(()) } else { Err(now) }
    })
    .await;

    // BackendTLSPolicy: the proxy originates TLS to the backend, verified
    // by the policy's CA for its hostname (sent as SNI); the client's
    // bytes come back through both TLS hops.
    let reencrypt = SocketAddr::new(LOCALHOST, reencrypt_port);
    let data = payload(7, 20_000);
    let (cert, back) = tls_exchange(reencrypt, "secure.example.com", &ca, &data)
        .await
        .expect("TLS terminated, then TLS to the backend");
    assert!(cert_matches_hostname(&cert, "secure.example.com"));
    assert!(back == data, "echoed through the backend's TLS");
    assert_eq!(
        sni_seen.lock().unwrap().as_slice(),
        ["backend.example"],
        "the backend received TLS with the policy's hostname"
    );
}

/// `--l4-max-connections` bounds a Terminate socket too: while one client
/// holds the only slot, the next waits in the kernel's backlog, with no
/// handshake and no backend connection, and is served once the slot frees.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_further_clients_before_their_handshake() {
    let echo = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let ca = TestCa::new("gateway tls terminate cap CA");
    let port = free_port(LOCALHOST).unwrap();
    let gateway_cert = ca.issue(&["tls.example.com"]);
    let mut objects = vec![
        json!({"apiVersion": GW, "kind": "GatewayClass", "metadata": {"name": "teapot"},
               "spec": {"controllerName": "teapot.dev/gateway-controller"}}),
        json!({"apiVersion": GW, "kind": "Gateway", "metadata": {"name": "edge", "namespace": NS},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "term", "port": port, "protocol": "TLS", "hostname": "tls.example.com",
             "tls": {"mode": "Terminate", "certificateRefs": [{"name": "gw-cert"}]}},
        ]}}),
        route("term", "term", "tls.example.com", "echo", 3000),
    ];
    objects.extend(l4::backend(NS, "echo", 3000, "TCP", echo.port()));
    let (h, _state) = l4::start(
        &[
            ("gateway.yaml", docs(&objects)),
            ("cert.yaml", tls_secret_yaml(NS, "gw-cert", &gateway_cert)),
        ],
        &["--l4-max-connections", "1"],
    )
    .await;
    eventually(
        "the Terminate listener listening",
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            let listening = status["l4"]["gateways"].as_array().is_some_and(|gs| {
                gs.iter().any(|g| {
                    g["name"] == "edge"
                        && g["listeners"]
                            .as_array()
                            .is_some_and(|l| l.iter().all(|l| l["state"] == "listening"))
                })
            });
            if listening {
                Ok(())
            } else {
                Err(status["l4"].clone())
            }
        },
    )
    .await;

    let addr = SocketAddr::new(LOCALHOST, port);
    let connector = connector(&ca);
    let name = ServerName::try_from("tls.example.com").unwrap();
    let mut first = tokio::time::timeout(IO_TIMEOUT, async {
        let tcp = TcpStream::connect(addr).await.unwrap();
        connector.connect(name.clone(), tcp).await.unwrap()
    })
    .await
    .expect("the first client's handshake");
    first.write_all(b"1").await.unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(IO_TIMEOUT, first.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&b, b"1");

    let second = tokio::spawn(async move {
        let tcp = TcpStream::connect(addr).await?;
        let mut tls = connector.connect(name, tcp).await?;
        tls.write_all(b"2").await?;
        let mut b = [0u8; 1];
        tls.read_exact(&mut b).await?;
        Ok::<_, std::io::Error>(b)
    });
    // Long enough for a handshake and an echo on loopback many times over.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !second.is_finished(),
        "the second client was served while the first held the only slot"
    );
    assert_eq!(echo.served(), 1);
    drop(first);
    let b = tokio::time::timeout(IO_TIMEOUT, second)
        .await
        .expect("served once the first left")
        .unwrap()
        .unwrap();
    assert_eq!(&b, b"2");
    assert_eq!(echo.served(), 2);
}
