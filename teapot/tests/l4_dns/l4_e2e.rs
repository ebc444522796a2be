//! End-to-end tests of L4 load balancing: the real `teapot
//! proxy` binary, LoadBalancer Services in a manifests directory, TCP and
//! UDP echo backends from `teapot_testkit::l4`, real sockets on loopback.
//!
//! A Service listens on its own port at its allocated address, so each test
//! first finds a port free for both TCP and UDP (docs/l4.md, "Ports").
//! Nothing here asserts on time: every wait polls the admin API with a
//! generous bound, and UDP retries a datagram the network may drop.
//!
//! Run with `cargo test -p teapot --test l4_dns l4_e2e::`.

use crate::common;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use common::l4::{start, tcp_exchange};
use common::*;
use serde_json::{Value, json};
use teapot_testkit::l4::{TcpEcho, TcpMode, UdpEcho, free_port, payload};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpStream, UdpSocket};

const LOCALHOST: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);
/// Upper bound for one exchange through the proxy on a loaded machine.
const IO_TIMEOUT: Duration = Duration::from_secs(30);
/// One UDP attempt; a datagram without an answer by then is sent again.
const UDP_ATTEMPT: Duration = Duration::from_secs(5);

/// A `type: LoadBalancer` Service with `(name, port, protocol)` ports.
fn lb_service(ns: &str, name: &str, ports: &[(&str, u16, &str)], annotations: Value) -> Value {
    let ports: Vec<Value> = ports
        .iter()
        .map(|(n, p, proto)| json!({ "name": n, "port": p, "protocol": proto }))
        .collect();
    json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": ns, "annotations": annotations },
        "spec": {
            "type": "LoadBalancer",
            "loadBalancerClass": "teapot.dev/lb",
            "ports": ports,
        },
    })
}

/// An EndpointSlice of `service` at 127.0.0.1 with `(name, port, protocol)`
/// (`common::slice` with protocols, which L4 ports need).
fn lb_slice(ns: &str, name: &str, service: &str, ports: &[(&str, u16, &str)]) -> Value {
    let mut out = slice(ns, name, service, &[], &[("127.0.0.1", true)]);
    out["ports"] = ports
        .iter()
        .map(|(n, p, proto)| json!({ "name": n, "port": p, "protocol": proto }))
        .collect();
    out
}

/// Two TCP and two UDP echo backends.
async fn echo_pairs() -> ([TcpEcho; 2], [UdpEcho; 2]) {
    (
        [
            TcpEcho::start(TcpMode::Echo).await.unwrap(),
            TcpEcho::start(TcpMode::Echo).await.unwrap(),
        ],
        [
            UdpEcho::start().await.unwrap(),
            UdpEcho::start().await.unwrap(),
        ],
    )
}

/// The `/status` `l4` report of one Service.
fn l4_service<'a>(status: &'a Value, ns: &str, name: &str) -> Option<&'a Value> {
    status["l4"]["services"]
        .as_array()?
        .iter()
        .find(|s| s["namespace"] == ns && s["name"] == name)
}

/// Waits until the listeners serve at least generation `after` and the
/// Service has `listeners` listeners, all listening; returns its report.
async fn wait_listening(h: &Harness, ns: &str, name: &str, listeners: usize, after: u64) -> Value {
    eventually(
        &format!("{ns}/{name}: {listeners} listeners listening"),
        RELOAD_TIMEOUT,
        || async {
            let status = h.status().await;
            let applied = status["l4"]["applied_generation"].as_u64().unwrap_or(0);
            let Some(s) = l4_service(&status, ns, name) else {
                return Err(status["l4"].clone());
            };
            let all = s["listeners"].as_array().cloned().unwrap_or_default();
            let ok = applied >= after
                && all.len() == listeners
                && all.iter().all(|l| l["state"] == "listening");
            if ok { Ok(s.clone()) } else { Err(s.clone()) }
        },
    )
    .await
}

/// Waits until the L4 listeners apply a table newer than `before`.
async fn wait_applied(h: &Harness, generation: u64) {
    eventually(
        &format!("L4 table {generation} applied"),
        RELOAD_TIMEOUT,
        || async {
            let a = h.status().await["l4"]["applied_generation"]
                .as_u64()
                .unwrap_or(0);
            if a >= generation { Ok(()) } else { Err(a) }
        },
    )
    .await
}

/// Sends one datagram and waits for the identical answer; resends when the
/// answer does not come. Returns how many resends it took.
async fn udp_exchange(socket: &UdpSocket, data: &[u8]) -> usize {
    let mut buf = vec![0u8; 65_536];
    for attempt in 0..6 {
        socket.send(data).await.expect("UDP send");
        if let Ok(Ok(n)) = tokio::time::timeout(UDP_ATTEMPT, socket.recv(&mut buf)).await {
            assert_eq!(&buf[..n], data, "UDP answer differs ({} bytes)", data.len());
            return attempt;
        }
    }
    panic!("no UDP answer for {} bytes after 6 attempts", data.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_and_udp_echo_with_many_clients_byte_exact() {
    const NS: &str = "l4-echo";
    let (tcp, udp) = echo_pairs().await;
    let port = free_port(LOCALHOST).unwrap();
    // One port number for both protocols, as DNS does.
    let mut docs_ = vec![lb_service(
        NS,
        "echo",
        &[("tcp", port, "TCP"), ("udp", port, "UDP")],
        json!({}),
    )];
    for i in 0..2 {
        docs_.push(lb_slice(
            NS,
            &format!("echo-{i}"),
            "echo",
            &[("tcp", tcp[i].port(), "TCP"), ("udp", udp[i].port(), "UDP")],
        ));
    }
    let (h, _state) = start(&[("echo.yaml", docs(&docs_))], &[]).await;
    let report = wait_listening(&h, NS, "echo", 2, 0).await;
    assert_eq!(report["address"], "127.0.0.1");
    let ingress = &report["status"]["ingress"][0];
    assert_eq!(ingress["ip"], "127.0.0.1");
    assert_eq!(ingress["ports"].as_array().unwrap().len(), 2);
    let addr = SocketAddr::new(LOCALHOST, port);

    const CLIENTS: u64 = 24;
    let sizes_tcp = [1usize, 1_500, 65_536, 1 << 20];
    let sizes_udp = [1usize, 512, 1_400, 8_192, 60_000];
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        tasks.push(tokio::spawn(async move {
            for (i, &len) in sizes_tcp.iter().enumerate() {
                let data = payload(c * 100 + i as u64, len);
                let back = tcp_exchange(addr, &data).await.expect("TCP exchange");
                assert!(
                    back == data,
                    "TCP client {c}: {len} bytes came back different"
                );
            }
            0usize
        }));
        tasks.push(tokio::spawn(async move {
            let socket = UdpSocket::bind((LOCALHOST, 0)).await.unwrap();
            socket.connect(addr).await.unwrap();
            let mut resends = 0;
            for (i, &len) in sizes_udp.iter().enumerate() {
                resends += udp_exchange(&socket, &payload(c * 1000 + i as u64, len)).await;
            }
            resends
        }));
    }
    for t in tasks {
        t.await.expect("client task");
    }
    // Round-robin spread both protocols over both endpoints.
    for i in 0..2 {
        assert!(tcp[i].served() > 0, "TCP endpoint {i} got no connection");
        assert!(udp[i].datagrams() > 0, "UDP endpoint {i} got no datagram");
    }
    let metrics = h.metrics().await;
    assert!(
        metric(&metrics, "teapot_l4_tcp_connections_total").unwrap_or(0.0)
            >= (CLIENTS * sizes_tcp.len() as u64) as f64
    );
    assert!(metric(&metrics, "teapot_l4_udp_flows_total").unwrap_or(0.0) >= CLIENTS as f64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_half_close_reaches_the_backend_and_the_answer_comes_back() {
    const NS: &str = "l4-half";
    let backend = TcpEcho::start(TcpMode::AfterEof).await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "half.yaml",
        docs(&[
            lb_service(NS, "half", &[("tcp", port, "TCP")], json!({})),
            lb_slice(NS, "half-0", "half", &[("tcp", backend.port(), "TCP")]),
        ]),
    )];
    let (h, _state) = start(&files, &[]).await;
    wait_listening(&h, NS, "half", 1, 0).await;
    // The backend answers only once it has seen the client's FIN, so the
    // answer proves the FIN went through while the other direction stayed
    // open.
    for len in [0usize, 10, 300_000] {
        let data = payload(len as u64, len);
        let back = tcp_exchange(SocketAddr::new(LOCALHOST, port), &data)
            .await
            .expect("exchange");
        assert!(back == data, "{len} bytes after half-close");
    }
}

/// Reads until the peer ends the connection: `Ok(())` for a FIN, the
/// error for a reset.
async fn read_until_end(s: &mut TcpStream) -> std::io::Result<()> {
    let mut buf = [0u8; 64];
    loop {
        match tokio::time::timeout(IO_TIMEOUT, s.read(&mut buf)).await {
            Err(_) => panic!("the connection did not end"),
            Ok(Ok(0)) => return Ok(()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reset_is_passed_on_as_a_reset_and_a_close_as_a_close() {
    const NS: &str = "l4-reset";
    let backend = tokio::net::TcpListener::bind((LOCALHOST, 0)).await.unwrap();
    let backend_port = backend.local_addr().unwrap().port();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "reset.yaml",
        docs(&[
            lb_service(NS, "reset", &[("tcp", port, "TCP")], json!({})),
            lb_slice(NS, "reset-0", "reset", &[("tcp", backend_port, "TCP")]),
        ]),
    )];
    let (h, _state) = start(&files, &[]).await;
    wait_listening(&h, NS, "reset", 1, 0).await;
    let proxied = SocketAddr::new(LOCALHOST, port);
    // One relayed connection: the client's end and the backend's end,
    // after a byte went through.
    let connect = || async {
        let mut client = TcpStream::connect(proxied).await.unwrap();
        client.write_all(b"x").await.unwrap();
        // The proxy's health checks connect and close without a byte.
        loop {
            let (mut server, _) = tokio::time::timeout(IO_TIMEOUT, backend.accept())
                .await
                .expect("the proxy connected to the backend")
                .unwrap();
            let mut byte = [0u8; 1];
            if server.read_exact(&mut byte).await.is_ok() {
                return (client, server);
            }
        }
    };

    // One end aborts (a reset on close); the other must see a reset, not
    // a clean end.
    let abort_reaches = |aborting: TcpStream, mut other: TcpStream, what: &'static str| async move {
        aborting.set_zero_linger().unwrap();
        drop(aborting);
        let end = read_until_end(&mut other).await;
        assert_eq!(
            end.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionReset),
            "{what}'s reset reaches the other end as a reset"
        );
    };
    let (client, server) = connect().await;
    abort_reaches(client, server, "a client").await;
    let (client, server) = connect().await;
    abort_reaches(server, client, "a backend").await;

    // A clean close stays a clean close both ways.
    let (client, mut server) = connect().await;
    drop(client);
    read_until_end(&mut server)
        .await
        .expect("a FIN, not a reset");
    drop(server);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_v2_header_carries_the_client_address() {
    const NS: &str = "l4-pp";
    let backend = TcpEcho::start(TcpMode::ProxyV2).await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "pp.yaml",
        docs(&[
            lb_service(
                NS,
                "pp",
                &[("tcp", port, "TCP")],
                json!({ "teapot.dev/proxy-protocol": "v2" }),
            ),
            lb_slice(NS, "pp-0", "pp", &[("tcp", backend.port(), "TCP")]),
        ]),
    )];
    let (h, _state) = start(&files, &[]).await;
    wait_listening(&h, NS, "pp", 1, 0).await;
    let stream = TcpStream::connect((LOCALHOST, port)).await.unwrap();
    let client = stream.local_addr().unwrap();
    let (mut r, mut w) = stream.into_split();
    w.write_all(b"ping").await.unwrap();
    w.shutdown().await.unwrap();
    let mut back = String::new();
    tokio::time::timeout(IO_TIMEOUT, r.read_to_string(&mut back))
        .await
        .expect("answer in time")
        .unwrap();
    assert_eq!(
        back,
        format!("PROXY {client} 127.0.0.1:{port}\nping"),
        "the backend parsed the header and saw the real client"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_an_endpoint_under_load_moves_new_traffic_without_errors() {
    const NS: &str = "l4-remove";
    let (tcp, udp) = echo_pairs().await;
    let port = free_port(LOCALHOST).unwrap();
    let service = lb_service(
        NS,
        "svc",
        &[("tcp", port, "TCP"), ("udp", port, "UDP")],
        json!({}),
    );
    let slice = |i: usize| {
        lb_slice(
            NS,
            &format!("svc-{i}"),
            "svc",
            &[("tcp", tcp[i].port(), "TCP"), ("udp", udp[i].port(), "UDP")],
        )
    };
    let (h, _state) = start(
        &[
            ("svc.yaml", docs(&[service])),
            ("slice-0.yaml", docs(&[slice(0)])),
            ("slice-1.yaml", docs(&[slice(1)])),
        ],
        &[],
    )
    .await;
    wait_listening(&h, NS, "svc", 2, 0).await;
    let addr = SocketAddr::new(LOCALHOST, port);

    // Clients loop until told to stop; each counts its finished rounds.
    const CLIENTS: usize = 6;
    let stop = Arc::new(AtomicBool::new(false));
    let rounds: Arc<Vec<AtomicUsize>> =
        Arc::new((0..2 * CLIENTS).map(|_| AtomicUsize::new(0)).collect());
    let mut tasks = Vec::new();
    for c in 0..CLIENTS {
        let (halt, done) = (stop.clone(), rounds.clone());
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !halt.load(Ordering::SeqCst) {
                let data = payload(c as u64 * 10_000 + n, 4096);
                let back = tcp_exchange(addr, &data)
                    .await
                    .expect("TCP exchange under load");
                assert!(back == data, "TCP client {c} round {n}");
                done[c].fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
            0usize
        }));
        let (halt, done) = (stop.clone(), rounds.clone());
        tasks.push(tokio::spawn(async move {
            let socket = UdpSocket::bind((LOCALHOST, 0)).await.unwrap();
            socket.connect(addr).await.unwrap();
            let mut resends = 0;
            let mut n = 0u64;
            while !halt.load(Ordering::SeqCst) {
                resends += udp_exchange(&socket, &payload(c as u64 * 20_000 + n, 700)).await;
                done[CLIENTS + c].fetch_add(1, Ordering::SeqCst);
                n += 1;
            }
            resends
        }));
    }
    let all_advance = |by: usize| {
        let base: Vec<usize> = rounds.iter().map(|r| r.load(Ordering::SeqCst)).collect();
        let rounds = rounds.clone();
        async move {
            eventually(
                &format!("every client completes {by} more rounds"),
                RELOAD_TIMEOUT,
                || {
                    let rounds = rounds.clone();
                    let base = base.clone();
                    async move {
                        let now: Vec<usize> =
                            rounds.iter().map(|r| r.load(Ordering::SeqCst)).collect();
                        if now.iter().zip(&base).all(|(n, b)| *n >= b + by) {
                            Ok(())
                        } else {
                            Err(now)
                        }
                    }
                },
            )
            .await
        }
    };
    all_advance(3).await;
    assert!(
        tcp[1].served() > 0 && udp[1].datagrams() > 0,
        "endpoint 1 carried traffic before"
    );

    let generation = h.delete("slice-1.yaml").await;
    wait_applied(&h, generation).await;
    // Whatever started before the change has finished once every client
    // completed two more rounds.
    all_advance(2).await;
    let (tcp_before, udp_before) = (tcp[1].served(), udp[1].datagrams());
    all_advance(5).await;
    assert_eq!(
        tcp[1].served(),
        tcp_before,
        "no new TCP connection to the removed endpoint"
    );
    assert_eq!(
        udp[1].datagrams(),
        udp_before,
        "no new UDP flow to the removed endpoint"
    );

    stop.store(true, Ordering::SeqCst);
    let mut resends = 0;
    for t in tasks {
        resends += t.await.expect("no client failed");
    }
    // Only a datagram in flight on a flow of the removed endpoint may need
    // a resend: at most one per UDP client.
    assert!(resends <= CLIENTS, "{resends} UDP resends");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn allocations_stay_put_across_restarts_and_a_full_pool_moves_nothing() {
    const NS: &str = "l4-alloc";
    let port = free_port(LOCALHOST).unwrap();
    // 127.0.0.2 is on the loopback interface too (127.0.0.0/8).
    let second = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    assert!(
        std::net::TcpListener::bind((second, port)).is_ok(),
        "127.0.0.2:{port} free"
    );
    let state = tempfile::tempdir().unwrap();
    let state_file = state.path().join("state.json");
    let args = [
        "--l4-pool",
        "default=127.0.0.1,127.0.0.2",
        "--l4-state",
        state_file.to_str().unwrap(),
    ];
    let svc = |name: &str| lb_service(NS, name, &[("tcp", port, "TCP")], json!({}));
    let address =
        |status: &Value, name: &str| l4_service(status, NS, name).map(|s| s["address"].clone());

    // "b" arrives first and takes the first address; "a" (older by name)
    // arrives later and takes the second.
    let h = Harness::start_with_args(&[("b.yaml", docs(&[svc("b")]))], &args).await;
    wait_listening(&h, NS, "b", 1, 0).await;
    let g = h.apply("a.yaml", &docs(&[svc("a")])).await;
    wait_listening(&h, NS, "a", 1, g).await;
    let status = h.status().await;
    assert_eq!(address(&status, "b"), Some(json!("127.0.0.1")));
    assert_eq!(address(&status, "a"), Some(json!("127.0.0.2")));
    let files = [("a.yaml", docs(&[svc("a")])), ("b.yaml", docs(&[svc("b")]))];
    drop(h);

    // A fresh allocation would give "a" the first address; the state file
    // keeps both where they were.
    let h = Harness::start_with_args(&files, &args).await;
    wait_listening(&h, NS, "a", 1, 0).await;
    wait_listening(&h, NS, "b", 1, 0).await;
    let status = h.status().await;
    assert_eq!(address(&status, "b"), Some(json!("127.0.0.1")));
    assert_eq!(address(&status, "a"), Some(json!("127.0.0.2")));

    // A third Service on the same port finds the pool full: it is refused
    // with a clear condition and the others keep their listeners.
    let g = h.apply("c.yaml", &docs(&[svc("c")])).await;
    wait_applied(&h, g).await;
    let status = h.status().await;
    let c = l4_service(&status, NS, "c").expect("c reported");
    assert_eq!(c["address"], Value::Null);
    let allocated = &c["conditions"][0];
    assert_eq!(allocated["type"], "Allocated");
    assert_eq!(allocated["status"], "False");
    assert_eq!(allocated["reason"], "PoolExhausted");
    assert!(
        allocated["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{port}/TCP")),
        "{allocated}"
    );
    for name in ["a", "b"] {
        let s = l4_service(&status, NS, name).unwrap();
        assert_eq!(s["listeners"][0]["state"], "listening", "{name}");
    }
    assert_eq!(address(&status, "b"), Some(json!("127.0.0.1")));
    assert_eq!(address(&status, "a"), Some(json!("127.0.0.2")));
    let metrics = h.metrics().await;
    assert_eq!(metric(&metrics, "teapot_l4_allocation_failures"), Some(1.0));
    assert_eq!(metric(&metrics, "teapot_l4_listeners"), Some(2.0));
    assert_eq!(
        metric(&metrics, "teapot_l4_listener_binds_total"),
        Some(2.0),
        "the re-compile rebound no listener"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_to_a_removed_endpoint_drain_and_a_removed_service_closes_its_listener() {
    const NS: &str = "l4-drain";
    let old = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let new = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let service = docs(&[lb_service(NS, "svc", &[("tcp", port, "TCP")], json!({}))]);
    let slice_of =
        |echo: &TcpEcho| docs(&[lb_slice(NS, "svc-0", "svc", &[("tcp", echo.port(), "TCP")])]);
    let (h, _state) = start(
        &[("svc.yaml", service), ("slice.yaml", slice_of(&old))],
        &["--l4-drain-timeout", "2"],
    )
    .await;
    wait_listening(&h, NS, "svc", 1, 0).await;
    let addr = SocketAddr::new(LOCALHOST, port);

    // A long-lived connection to the endpoint about to go.
    let mut long = TcpStream::connect(addr).await.unwrap();
    let mut buf = [0u8; 5];
    long.write_all(b"first").await.unwrap();
    tokio::time::timeout(IO_TIMEOUT, long.read_exact(&mut buf))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(old.served(), 1);

    let g = h.apply("slice.yaml", &slice_of(&new)).await;
    wait_applied(&h, g).await;
    // New connections go to the new endpoint; the old one still answers
    // on the connection it has.
    let back = tcp_exchange(addr, b"hello").await.unwrap();
    assert_eq!(back, b"hello");
    assert_eq!((old.served(), new.served()), (1, 1));
    assert_eq!(
        metric(&h.metrics().await, "teapot_l4_listener_binds_total"),
        Some(1.0),
        "an endpoint change does not rebind the listener"
    );
    let still = long.write_all(b"again").await.is_ok()
        && matches!(
            tokio::time::timeout(IO_TIMEOUT, long.read_exact(&mut buf)).await,
            Ok(Ok(_))
        );
    // The drain timeout is short; if it already ran out the connection
    // closed, which is the next assertion anyway.
    if still {
        assert_eq!(&buf, b"again");
    }
    // After the drain timeout the proxy closes it.
    let closed = tokio::time::timeout(RELOAD_TIMEOUT, async {
        let mut rest = Vec::new();
        let _ = long.read_to_end(&mut rest).await;
    })
    .await;
    assert!(closed.is_ok(), "the drained connection was closed");

    // Deleting the Service closes its listener.
    h.delete("svc.yaml").await;
    eventually("listener closed", RELOAD_TIMEOUT, || async {
        match TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    assert_eq!(metric(&h.metrics().await, "teapot_l4_listeners"), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_timeouts_end_tcp_connections_and_udp_flows() {
    const NS: &str = "l4-idle";
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let udp = UdpEcho::start().await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "idle.yaml",
        docs(&[
            lb_service(
                NS,
                "idle",
                &[("tcp", port, "TCP"), ("udp", port, "UDP")],
                json!({ "teapot.dev/tcp-idle-timeout": "1s", "teapot.dev/udp-idle-timeout": "1s" }),
            ),
            lb_slice(
                NS,
                "idle-0",
                "idle",
                &[("tcp", tcp.port(), "TCP"), ("udp", udp.port(), "UDP")],
            ),
        ]),
    )];
    let (h, _state) = start(&files, &[]).await;
    wait_listening(&h, NS, "idle", 2, 0).await;
    let addr = SocketAddr::new(LOCALHOST, port);

    let mut conn = TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"x").await.unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(IO_TIMEOUT, conn.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    let socket = UdpSocket::bind((LOCALHOST, 0)).await.unwrap();
    socket.connect(addr).await.unwrap();
    udp_exchange(&socket, b"y").await;

    // Nothing is sent any more: the proxy ends both.
    let mut rest = Vec::new();
    tokio::time::timeout(RELOAD_TIMEOUT, conn.read_to_end(&mut rest))
        .await
        .expect("idle TCP connection closed by the proxy")
        .expect("clean close");
    eventually("UDP flow forgotten", RELOAD_TIMEOUT, || async {
        let m = h.metrics().await;
        let active = metric(&m, "teapot_l4_udp_flows_active");
        if active == Some(0.0) {
            Ok(())
        } else {
            Err(active)
        }
    })
    .await;
    // A new datagram opens a new flow and is answered.
    udp_exchange(&socket, b"z").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds_further_clients_until_a_slot_frees() {
    const NS: &str = "l4-cap";
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "cap.yaml",
        docs(&[
            lb_service(NS, "cap", &[("tcp", port, "TCP")], json!({})),
            lb_slice(NS, "cap-0", "cap", &[("tcp", tcp.port(), "TCP")]),
        ]),
    )];
    // Two event loops, each with its own socket of the listener: the cap
    // is the listener's, whichever loop the kernel hands a client to.
    let (h, _state) = start(&files, &["--l4-max-connections", "1", "--threads", "2"]).await;
    wait_listening(&h, NS, "cap", 1, 0).await;
    let addr = SocketAddr::new(LOCALHOST, port);
    let mut first = TcpStream::connect(addr).await.unwrap();
    first.write_all(b"1").await.unwrap();
    let mut b = [0u8; 1];
    tokio::time::timeout(IO_TIMEOUT, first.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    // The second client gets through the kernel's backlog but is not
    // accepted (so not forwarded) while the first holds the only slot.
    let mut second = TcpStream::connect(addr).await.unwrap();
    second.write_all(b"2").await.unwrap();
    let held = tokio::time::timeout(Duration::from_millis(300), second.read_exact(&mut b)).await;
    assert!(held.is_err(), "answered past the cap: {held:?}");
    assert_eq!(tcp.served(), 1);
    drop(first);
    tokio::time::timeout(IO_TIMEOUT, second.read_exact(&mut b))
        .await
        .expect("served once the first left")
        .unwrap();
    assert_eq!(&b, b"2");
    assert_eq!(tcp.served(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_closes_listeners_and_lets_open_connections_finish() {
    const NS: &str = "l4-term";
    let tcp = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let port = free_port(LOCALHOST).unwrap();
    let files = [(
        "term.yaml",
        docs(&[
            lb_service(NS, "term", &[("tcp", port, "TCP")], json!({})),
            lb_slice(NS, "term-0", "term", &[("tcp", tcp.port(), "TCP")]),
        ]),
    )];
    let (mut h, _state) = start(&files, &[]).await;
    wait_listening(&h, NS, "term", 1, 0).await;
    let addr = SocketAddr::new(LOCALHOST, port);
    let mut open = TcpStream::connect(addr).await.unwrap();
    let mut b = [0u8; 3];
    open.write_all(b"one").await.unwrap();
    tokio::time::timeout(IO_TIMEOUT, open.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();

    h.proxy.terminate().unwrap();
    eventually("listener closed", RELOAD_TIMEOUT, || async {
        match TcpStream::connect(addr).await {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Ok(()),
            other => Err(format!("{other:?}")),
        }
    })
    .await;
    // The open connection still works during the grace period.
    open.write_all(b"two").await.unwrap();
    tokio::time::timeout(IO_TIMEOUT, open.read_exact(&mut b))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&b, b"two");
    drop(open);
    let status = h
        .proxy
        .wait(RELOAD_TIMEOUT)
        .await
        .expect("exits once the connection is gone");
    assert!(status.success(), "{status}");
}

/// An object's `status` in the API double (null while it has none).
fn status_in_api(
    api: &teapot_testkit::apiserver::ApiServer,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
) -> Value {
    api.get(api_version, kind, ns, name)
        .map(|o| o["status"].clone())
        .unwrap_or(Value::Null)
}

/// Waits for the address in a Service's `status.loadBalancer` in the API.
async fn service_ip(api: &teapot_testkit::apiserver::ApiServer, ns: &str, name: &str) -> String {
    eventually(
        &format!("{ns}/{name}'s address in its status"),
        RELOAD_TIMEOUT,
        || async {
            let status = status_in_api(api, "v1", "Service", ns, name);
            match status["loadBalancer"]["ingress"][0]["ip"].as_str() {
                Some(ip) => Ok(ip.to_string()),
                None => Err(status),
            }
        },
    )
    .await
}

/// Kube mode: the API double, the real binary with `--kube`. The Service
/// status is both the report (`kubectl get svc` shows the address) and the
/// allocation's state: a restarted proxy keeps every address where its
/// status says, even where a fresh allocation would pick another.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_mode_keeps_allocations_in_service_status_and_warns_when_refused() {
    use k8s_openapi::api::events::v1::Event;
    use teapot_testkit::apiserver::ApiServer;
    use teapot_testkit::process::ProxyProcess;

    const NS: &str = "l4-kube";
    let port = free_port(LOCALHOST).unwrap();
    let second = IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2));
    assert!(
        std::net::TcpListener::bind((second, port)).is_ok(),
        "127.0.0.2:{port} free"
    );
    let echo = TcpEcho::start(TcpMode::Echo).await.unwrap();
    let api = ApiServer::start().await;
    let svc = |name: &str| lb_service(NS, name, &[("tcp", port, "TCP")], json!({}));
    let args = ["--l4-pool", "default=127.0.0.1,127.0.0.2"];
    let start = || async {
        ProxyProcess::start_kube(&teapot_bin(), api.kubeconfig_path(), &args)
            .await
            .expect("teapot proxy --kube starts")
    };
    let status_of = |name: &str| status_in_api(&api, "v1", "Service", NS, name);
    api.apply(svc("b"));
    api.apply(lb_slice(NS, "b-0", "b", &[("tcp", echo.port(), "TCP")]));
    // Without loadBalancerClass: another load balancer's in kube mode.
    let mut classless = svc("other");
    classless["spec"]
        .as_object_mut()
        .unwrap()
        .remove("loadBalancerClass");
    api.apply(classless);

    let mut proxy = start().await;
    assert_eq!(service_ip(&api, NS, "b").await, "127.0.0.1");
    let status = status_of("b");
    assert_eq!(
        status["loadBalancer"]["ingress"][0]["ports"],
        json!([{"port": port, "protocol": "TCP"}])
    );
    let allocated = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Allocated")
        .expect("Allocated condition")
        .clone();
    assert_eq!(
        (&allocated["status"], &allocated["reason"]),
        (&json!("True"), &json!("Allocated"))
    );
    // Nothing announced: no Announced condition at all.
    assert!(
        status["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["type"] != "Announced"),
        "{status}"
    );
    let data = payload(7, 4096);
    let back = tcp_exchange(SocketAddr::new(LOCALHOST, port), &data).await;
    assert_eq!(back.expect("TCP through the kube-mode listener"), data);
    api.apply(svc("a"));
    assert_eq!(service_ip(&api, NS, "a").await, "127.0.0.2");
    assert_eq!(status_of("other"), Value::Null, "not teapot's Service");

    // Restart without b: a fresh allocation would give a the first
    // address; its status keeps it on the second.
    proxy.terminate().unwrap();
    proxy.wait(IO_TIMEOUT).await.unwrap();
    assert!(api.delete("v1", "Service", NS, "b"));
    let proxy = start().await;
    api.apply(svc("c"));
    assert_eq!(service_ip(&api, NS, "c").await, "127.0.0.1");
    assert_eq!(
        status_of("a")["loadBalancer"]["ingress"][0]["ip"],
        "127.0.0.2"
    );

    // The pool is full for d: a condition in its status, one Warning
    // Event, and nothing else moves.
    api.apply(svc("d"));
    let refused = eventually("d refused in its status", RELOAD_TIMEOUT, || async {
        let status = status_of("d");
        let allocated = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Allocated").cloned());
        match allocated {
            Some(c) if c["status"] == "False" => Ok(c),
            _ => Err(status),
        }
    })
    .await;
    assert_eq!(refused["reason"], "PoolExhausted");
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains(&format!("{port}/TCP"))
    );
    let events: kube::Api<Event> = kube::Api::namespaced(api.client(), NS);
    let warnings = eventually("a Warning Event on d", RELOAD_TIMEOUT, || async {
        let list = events
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let on_d: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("d"))
            .collect();
        if on_d.is_empty() {
            Err("none yet".to_string())
        } else {
            Ok(on_d)
        }
    })
    .await;
    assert_eq!(warnings.len(), 1, "one Event per refusal, not per compile");
    assert_eq!(warnings[0].type_.as_deref(), Some("Warning"));
    assert_eq!(warnings[0].reason.as_deref(), Some("PoolExhausted"));
    assert_eq!(
        status_of("a")["loadBalancer"]["ingress"][0]["ip"],
        "127.0.0.2"
    );
    assert_eq!(
        status_of("c")["loadBalancer"]["ingress"][0]["ip"],
        "127.0.0.1"
    );
    let writes: Vec<_> = api
        .requests()
        .into_iter()
        .filter(|r| r.method == http::Method::PATCH && r.path.contains("/services/"))
        .collect();
    assert!(
        writes.iter().all(|r| r.path.ends_with("/status")
            && r.param("fieldManager").as_deref() == Some("teapot-proxy")),
        "only status, by server-side apply"
    );
    drop(proxy);
}

/// Waits for the object's `Announced` condition with status `want`;
/// returns the object's status and the condition.
async fn announced(
    api: &teapot_testkit::apiserver::ApiServer,
    api_version: &str,
    kind: &str,
    ns: &str,
    name: &str,
    want: &str,
) -> (Value, Value) {
    eventually(
        &format!("{kind} {name}'s Announced condition {want}"),
        RELOAD_TIMEOUT,
        || async {
            let status = status_in_api(api, api_version, kind, ns, name);
            let condition = status["conditions"]
                .as_array()
                .and_then(|cs| cs.iter().find(|c| c["type"] == "Announced").cloned());
            match condition {
                Some(c) if c["status"] == want => Ok((status, c)),
                _ => Err(status),
            }
        },
    )
    .await
}

/// The `Announced` condition of each Service's status, with `--announce-l4`
/// on (docs/announce.md, "Events and conditions"): False with
/// `NoBGPSession` for an address in a BGP pool while no replica has an
/// established session (teapot/tests/announce_e2e.rs has one that is),
/// False with `NotInAnnouncePool` and one Warning Event for an
/// address in no `--announce-pool`, False with `NoAnnouncer` for an L2 pool
/// no replica may announce (its `subnet=` holds no address of this one, and
/// no other holds an announcer Lease); a Gateway's address likewise. The
/// addresses are documentation
/// ranges, never bound on this machine: listening fails, the status does not
/// depend on it, and the BGP peer is a closed port (the session only fails).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_mode_says_whether_each_address_is_announced() {
    use k8s_openapi::api::events::v1::Event;
    use teapot_testkit::apiserver::ApiServer;
    use teapot_testkit::process::ProxyProcess;

    const NS: &str = "l4-announce";
    let port = free_port(LOCALHOST).unwrap();
    let closed = free_port(LOCALHOST).unwrap();
    let api = ApiServer::start().await;
    let peer = format!("127.0.0.1,64500,port={closed}");
    let args = [
        "--l4-pool",
        "default=203.0.113.7,198.51.100.7,192.0.2.7,198.51.100.8",
        "--bgp-asn",
        "64501",
        "--bgp-peer",
        &peer,
        "--announce-pool",
        "wan=203.0.113.0/24,mode=bgp",
        "--announce-pool",
        "office=192.0.2.0/24,mode=l2,interface=teapot-none0,subnet=10.255.255.0/24",
    ];
    let _proxy = ProxyProcess::start_kube(&teapot_bin(), api.kubeconfig_path(), &args)
        .await
        .expect("teapot proxy --kube starts");
    for name in ["pooled", "unpooled", "unannounced"] {
        api.apply(lb_service(NS, name, &[("tcp", port, "TCP")], json!({})));
        service_ip(&api, NS, name).await;
    }
    // NoAnnouncer until the replica's first Lease is read, then
    // NoBGPSession.
    let pooled = eventually(
        "pooled's Announced NoBGPSession",
        RELOAD_TIMEOUT,
        || async {
            let (_, c) = announced(&api, "v1", "Service", NS, "pooled", "False").await;
            if c["reason"] == "NoBGPSession" {
                Ok(c)
            } else {
                Err(c)
            }
        },
    )
    .await;
    let message = pooled["message"].as_str().unwrap();
    assert!(
        message.contains("203.0.113.7: pool wan, mode bgp")
            && message.contains("has an established BGP session"),
        "{pooled}"
    );
    let (_, unpooled) = announced(&api, "v1", "Service", NS, "unpooled", "False").await;
    assert_eq!(unpooled["reason"], "NotInAnnouncePool");
    let message = unpooled["message"].as_str().unwrap();
    assert!(message.contains("198.51.100.7"), "{message}");
    assert!(message.contains("--announce-pool"), "{message}");
    let (_, l2) = announced(&api, "v1", "Service", NS, "unannounced", "False").await;
    assert_eq!(l2["reason"], "NoAnnouncer");
    assert!(
        l2["message"].as_str().unwrap().contains("pool office"),
        "{l2}"
    );

    // A Gateway on the same port gets the fourth address, in no pool.
    const GW: &str = "gateway.networking.k8s.io/v1";
    api.apply(gateway_class());
    api.apply(gateway_gw(
        NS,
        json!([{"name": "db", "port": port, "protocol": "TCP"}]),
    ));
    let (status, condition) = announced(&api, GW, "Gateway", NS, "gw", "False").await;
    // Next to the fleet's own address (the HTTP listeners').
    assert!(
        status["addresses"]
            .as_array()
            .unwrap()
            .contains(&json!({"type": "IPAddress", "value": "198.51.100.8"})),
        "{status}"
    );
    assert_eq!(condition["reason"], "NotInAnnouncePool");
    let message = condition["message"].as_str().unwrap();
    assert!(message.contains("198.51.100.8"), "{message}");

    let events: kube::Api<Event> = kube::Api::namespaced(api.client(), NS);
    let warnings = || async {
        let list = events
            .list(&Default::default())
            .await
            .map_err(|e| e.to_string())?;
        let mut warned: Vec<(String, String, String)> = list
            .items
            .into_iter()
            .filter(|e| e.type_.as_deref() == Some("Warning"))
            .map(|e| {
                let regarding = e.regarding.unwrap_or_default();
                let kind = regarding.kind.unwrap_or_default();
                let name = regarding.name.unwrap_or_default();
                (kind, name, e.reason.unwrap_or_default())
            })
            .collect();
        // The BGP address without a session has a Warning of its own
        // (after, at start, one for no Lease read yet).
        let pooled = warned
            .iter()
            .any(|(_, name, reason)| name == "pooled" && reason == "NoBGPSession");
        warned.retain(|(_, name, _)| name != "pooled");
        warned.sort();
        if warned.len() < 3 || !pooled {
            Err(format!("{warned:?}"))
        } else {
            Ok(warned)
        }
    };
    let want = [
        ("Gateway", "gw", "NotInAnnouncePool"),
        ("Service", "unannounced", "NoAnnouncer"),
        ("Service", "unpooled", "NotInAnnouncePool"),
    ]
    .map(|(k, n, r)| (k.to_string(), n.to_string(), r.to_string()));
    assert_eq!(
        eventually("Warning Events", RELOAD_TIMEOUT, warnings).await,
        want
    );
    // Each status pass lists the announcer Leases: two passes later, still
    // one Event per object and reason.
    let passes = || {
        api.requests()
            .into_iter()
            .filter(|r| {
                r.method == http::Method::GET
                    && r.param("labelSelector").as_deref() == Some("teapot.dev/announcer=true")
            })
            .count()
    };
    let before = passes();
    eventually("two more status passes", RELOAD_TIMEOUT, || async {
        let now = passes();
        if now >= before + 2 { Ok(()) } else { Err(now) }
    })
    .await;
    assert_eq!(
        eventually("Warning Events", RELOAD_TIMEOUT, warnings).await,
        want
    );
}

/// Tenants share a pool address; alpha's older Service
/// adds the port beta's younger Service holds. beta keeps its listener and
/// its clients keep reaching beta's backend; alpha is refused that port
/// alone, in words that do not name beta's objects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_service_adding_a_held_port_does_not_take_the_listener() {
    let [alpha_backend, beta_backend] = [
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
        TcpEcho::start(TcpMode::Echo).await.unwrap(),
    ];
    let held = free_port(LOCALHOST).unwrap();
    let own = free_port(LOCALHOST).unwrap();
    let aged = |mut svc: Value, created: &str| {
        svc["metadata"]["creationTimestamp"] = json!(created);
        svc
    };
    let game = |ports: &[(&str, u16, &str)]| {
        aged(
            lb_service("tenant-alpha", "game", ports, json!({})),
            "2024-01-01T00:00:00Z",
        )
    };
    let alpha_slice = lb_slice(
        "tenant-alpha",
        "game-1",
        "game",
        &[
            ("own", alpha_backend.port(), "TCP"),
            ("taken", alpha_backend.port(), "TCP"),
        ],
    );
    let beta = docs(&[
        aged(
            lb_service("tenant-beta", "dns", &[("dns", held, "TCP")], json!({})),
            "2024-01-02T00:00:00Z",
        ),
        lb_slice(
            "tenant-beta",
            "dns-1",
            "dns",
            &[("dns", beta_backend.port(), "TCP")],
        ),
    ]);
    let alpha = |ports: &[(&str, u16, &str)]| docs(&[game(ports), alpha_slice.clone()]);
    let (h, _state) = start(
        &[
            ("beta.yaml", beta),
            ("alpha.yaml", alpha(&[("own", own, "TCP")])),
        ],
        &[],
    )
    .await;
    wait_listening(&h, "tenant-beta", "dns", 1, 0).await;
    wait_listening(&h, "tenant-alpha", "game", 1, 0).await;

    let g = h
        .apply(
            "alpha.yaml",
            &alpha(&[("own", own, "TCP"), ("taken", held, "TCP")]),
        )
        .await;
    wait_applied(&h, g).await;
    let status = h.status().await;
    let dns = l4_service(&status, "tenant-beta", "dns").expect("dns reported");
    assert_eq!(dns["listeners"].as_array().unwrap().len(), 1, "{dns}");
    assert_eq!(dns["listeners"][0]["state"], "listening", "{dns}");
    let game_report = l4_service(&status, "tenant-alpha", "game").expect("game reported");
    let ports = condition(game_report, "PortsAllocated").expect("PortsAllocated");
    assert_eq!(ports["status"], "False", "{game_report}");
    let message = ports["message"].as_str().unwrap();
    assert!(message.contains("held by another Service"), "{message}");
    assert!(
        !message.contains("tenant-beta") && !message.contains("dns"),
        "a refusal names another tenant's objects: {message}"
    );
    assert_eq!(game_report["listeners"].as_array().unwrap().len(), 1);

    // beta's clients still reach beta's backend, alpha's its own.
    let before = (alpha_backend.served(), beta_backend.served());
    let back = tcp_exchange(SocketAddr::new(LOCALHOST, held), b"query")
        .await
        .expect("beta's listener");
    assert_eq!(back, b"query");
    tcp_exchange(SocketAddr::new(LOCALHOST, own), b"move")
        .await
        .expect("alpha's listener");
    eventually("both backends counted", IO_TIMEOUT, || async {
        let now = (alpha_backend.served(), beta_backend.served());
        if now == (before.0 + 1, before.1 + 1) {
            Ok(())
        } else {
            Err(now)
        }
    })
    .await;
}

/// A Service asking for the proxy's own port on a
/// pool address was shown `Allocated=True` for a listener that could never
/// bind. The proxy's HTTP, HTTPS and admin ports are reserved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxys_own_ports_are_never_a_services_listener() {
    const NS: &str = "l4-reserved";
    // Started first, so its ports are known; the Service comes after.
    let (h, _state) = start(&[], &[]).await;
    let admin = h.proxy.admin.port();
    let g = h
        .apply(
            "svc.yaml",
            &docs(&[lb_service(
                NS,
                "grab",
                &[("admin", admin, "TCP")],
                json!({}),
            )]),
        )
        .await;
    wait_applied(&h, g).await;
    let status = h.status().await;
    let grab = l4_service(&status, NS, "grab").expect("reported");
    assert_eq!(grab["address"], Value::Null, "{grab}");
    let allocated = condition(grab, "Allocated").expect("Allocated");
    assert_eq!(allocated["status"], "False", "{grab}");
    assert_eq!(allocated["reason"], "PoolExhausted", "{grab}");
    // The admin endpoint itself still answers.
    assert!(h.metrics().await.contains("teapot_l4_listeners"));
}
