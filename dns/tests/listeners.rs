//! The listeners on 127.0.0.1 port 0, spoken to over real UDP and TCP
//! sockets: answers, truncation then TCP, the rate limiter's slip and byte
//! budget, the TCP slots' per-prefix share, eviction and timeouts, a zone
//! swapped while serving, shutdown. Clients in other prefixes bind other
//! loopback addresses (127.0.X.1: one /24 each).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use hickory_proto::op::{Message, Query, ResponseCode};
use hickory_proto::rr::{Name, RecordType};
use teapot_dns::{Metrics, RateLimit, ServerConfig, Sockets, ZoneBuilder, ZoneSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn zone(addresses: usize) -> teapot_dns::Zone {
    let mut b = ZoneBuilder::new(ZoneSettings::new("lb.example.com")).unwrap();
    for i in 0..addresses {
        b.address(
            "web.acme.lb.example.com",
            format!("10.0.0.{}", i + 1).parse().unwrap(),
        )
        .unwrap();
    }
    b.build()
}

fn query(name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::query();
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

struct Running {
    addr: SocketAddr,
    zone: teapot_dns::ZoneHandle,
    metrics: Metrics,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), teapot_dns::Error>>,
}

fn start(zone: teapot_dns::Zone, rate_limit: RateLimit) -> Running {
    start_with(
        zone,
        ServerConfig {
            rate_limit,
            ..ServerConfig::default()
        },
    )
}

fn start_with(zone: teapot_dns::Zone, config: ServerConfig) -> Running {
    let sockets = Sockets::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sockets.local_addr().unwrap();
    let handle = Arc::new(ArcSwap::from_pointee(zone));
    let metrics = Metrics::new().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(teapot_dns::run(
        sockets,
        handle.clone(),
        config,
        metrics.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    Running {
        addr,
        zone: handle,
        metrics,
        stop: Some(tx),
        task,
    }
}

async fn udp(addr: SocketAddr, q: &[u8]) -> Message {
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    socket.send_to(q, addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (n, _) = socket.recv_from(&mut buf).await.unwrap();
    Message::from_vec(&buf[..n]).unwrap()
}

async fn tcp(addr: SocketAddr, q: &[u8]) -> Message {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&(q.len() as u16).to_be_bytes()).await.unwrap();
    s.write_all(q).await.unwrap();
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await.unwrap();
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).await.unwrap();
    Message::from_vec(&buf).unwrap()
}

#[tokio::test]
async fn a_large_address_set_is_answered_in_part_over_udp_and_whole_over_tcp() {
    let server = start(zone(60), RateLimit::default());
    let q = query("web.acme.lb.example.com.", RecordType::A);
    let m = udp(server.addr, &q).await;
    // The addresses that fit 512 bytes, without TC: a whole answer.
    assert!(!m.truncation && m.answers.len() == 29, "{m:?}");
    let m = tcp(server.addr, &q).await;
    assert!(!m.truncation);
    assert_eq!(m.answers.len(), 60);
}

#[tokio::test]
async fn a_swapped_zone_answers_the_next_query() {
    let server = start(zone(1), RateLimit::default());
    let q = query("web.acme.lb.example.com.", RecordType::A);
    assert_eq!(udp(server.addr, &q).await.answers.len(), 1);
    server.zone.store(Arc::new(zone(0)));
    let m = udp(server.addr, &q).await;
    assert_eq!(m.response_code, ResponseCode::NXDomain);
    let m = udp(server.addr, &query("example.org.", RecordType::A)).await;
    assert_eq!(m.response_code, ResponseCode::Refused);
}

#[tokio::test]
async fn over_the_rate_a_flood_gets_less_than_it_sends() {
    let server = start(
        zone(1),
        RateLimit {
            responses_per_second: 5,
            slip: 2,
            ..RateLimit::default()
        },
    );
    let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let q = query("web.acme.lb.example.com.", RecordType::ANY);
    // Sent and then one more query of another name, whose answer marks
    // the end: the server answers a socket's datagrams in order.
    let flood = 400;
    for _ in 0..flood {
        socket.send_to(&q, server.addr).await.unwrap();
    }
    let end = query("end.lb.example.com.", RecordType::A);
    socket.send_to(&end, server.addr).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let (mut received, mut answers, mut slips) = (0usize, 0usize, 0usize);
    let mut asked_again = false;
    loop {
        // A datagram of the flood, or the end marker itself, may be lost to
        // the server's receive buffer (UDP, 401 datagrams at once): after a
        // pause the marker is asked again, once, and must be answered, so
        // a server that stopped answering after a flood still fails here.
        let got = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            socket.recv_from(&mut buf),
        )
        .await;
        let Ok(got) = got else {
            assert!(!asked_again, "no answer to the end marker, asked twice");
            asked_again = true;
            socket.send_to(&end, server.addr).await.unwrap();
            continue;
        };
        let (n, _) = got.unwrap();
        let m = Message::from_vec(&buf[..n]).unwrap();
        if m.queries[0].name().to_ascii() == "end.lb.example.com." {
            break;
        }
        received += n;
        if m.truncation {
            slips += 1;
        } else {
            answers += 1;
        }
    }
    assert!(answers >= 5, "the first answers of each second go out");
    assert!(slips > 0, "every second limited response slips");
    let sent = flood * q.len();
    let ratio = received as f64 / sent as f64;
    assert!(ratio < 1.0, "bytes out / bytes in = {ratio}");
    let limited = server
        .metrics
        .rate_limited
        .with_label_values(&["drop"])
        .get();
    assert!(limited > 0);
}

#[tokio::test]
async fn shutdown_stops_both_listeners() {
    let mut server = start(zone(1), RateLimit::default());
    server.stop.take().unwrap().send(()).unwrap();
    server.task.await.unwrap().unwrap();
    assert!(tokio::net::TcpStream::connect(server.addr).await.is_err());
}

/// A TCP connection from a client address of our choosing.
async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<tokio::net::TcpStream> {
    let socket = tokio::net::TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(to).await
}

/// One query and its answer on an open connection.
async fn ask(s: &mut tokio::net::TcpStream, q: &[u8]) -> std::io::Result<Message> {
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(q);
    s.write_all(&framed).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).await?;
    Message::from_vec(&buf).map_err(std::io::Error::other)
}

/// Whether the server has closed `s`: EOF or a reset within `within`,
/// whatever is left to read before it.
async fn closed_by_server(s: &mut tokio::net::TcpStream, within: Duration) -> bool {
    let mut buf = vec![0u8; 64 * 1024];
    tokio::time::timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await
    .is_ok()
}

#[tokio::test]
async fn one_prefix_holding_all_the_tcp_connections_it_can_leaves_others_answered() {
    let server = start(zone(1), RateLimit::default());
    let q = query("web.acme.lb.example.com.", RecordType::A);
    // One client opens more connections than the listener has slots and
    // keeps each alive with a query every half second.
    let mut held = tokio::task::JoinSet::new();
    for _ in 0..300 {
        let mut s = connect_from("127.0.5.1", server.addr).await.unwrap();
        let q = q.clone();
        held.spawn(async move {
            while ask(&mut s, &q).await.is_ok() {
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Another client's queries are answered at once, on new connections.
    for _ in 0..5 {
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(3), async {
            let mut s = connect_from("127.0.6.1", server.addr).await?;
            ask(&mut s, &q).await
        })
        .await;
        let took = started.elapsed();
        let m = answer
            .expect("another client's TCP query is answered")
            .unwrap();
        assert_eq!(m.answers.len(), 1);
        assert!(took < Duration::from_secs(1), "answered after {took:?}");
    }
    let refused = server
        .metrics
        .tcp_closed
        .with_label_values(&["prefix_share"]);
    assert!(refused.get() >= 284, "refused: {}", refused.get());
    assert!(!held.is_empty(), "the holder keeps its share");
    held.abort_all();
}

#[tokio::test]
async fn a_newcomer_takes_the_slot_of_the_connection_idle_the_longest() {
    let server = start_with(
        zone(1),
        ServerConfig {
            max_tcp_connections: 4,
            tcp_per_prefix: 2,
            ..ServerConfig::default()
        },
    );
    let q = query("web.acme.lb.example.com.", RecordType::A);
    let mut conns = Vec::new();
    for from in ["127.0.7.1", "127.0.7.1", "127.0.8.1", "127.0.8.1"] {
        let mut s = connect_from(from, server.addr).await.unwrap();
        ask(&mut s, &q).await.unwrap();
        conns.push(s);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The first asks again: the second is now the one idle the longest.
    ask(&mut conns[0], &q).await.unwrap();
    // A third prefix's share is free, the slots are not: it is admitted
    // all the same, and the second connection goes.
    let mut third = connect_from("127.0.9.1", server.addr).await.unwrap();
    let m = tokio::time::timeout(Duration::from_secs(3), ask(&mut third, &q))
        .await
        .expect("the newcomer is answered")
        .unwrap();
    assert_eq!(m.answers.len(), 1);
    assert!(closed_by_server(&mut conns[1], Duration::from_secs(3)).await);
    for i in [0, 2, 3] {
        ask(&mut conns[i], &q).await.unwrap();
    }
    let closed = |reason| server.metrics.tcp_closed.with_label_values(&[reason]).get();
    assert_eq!(closed("evicted"), 1);
    // A prefix over its share is refused, whatever the slots.
    let mut over = connect_from("127.0.8.1", server.addr).await.unwrap();
    assert!(closed_by_server(&mut over, Duration::from_secs(3)).await);
    assert_eq!(closed("prefix_share"), 1);
}

#[tokio::test]
async fn a_client_that_never_reads_its_answers_loses_the_connection() {
    let write_timeout = Duration::from_millis(300);
    let server = start_with(
        zone(60),
        ServerConfig {
            tcp_write_timeout: write_timeout,
            ..ServerConfig::default()
        },
    );
    // A small receive buffer, so the server's writes block soon.
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let s = socket.connect(server.addr).await.unwrap();
    let (mut reader, mut writer) = s.into_split();
    // Answers of about a kilobyte each, asked for and never read, until
    // the kernel's buffers are full and the server's write waits.
    let q = query("web.acme.lb.example.com.", RecordType::A);
    let mut framed = Vec::new();
    for _ in 0..1000 {
        framed.extend_from_slice(&(q.len() as u16).to_be_bytes());
        framed.extend_from_slice(&q);
    }
    let asking = tokio::spawn(async move { while writer.write_all(&framed).await.is_ok() {} });
    let started = Instant::now();
    let timed_out = server
        .metrics
        .tcp_closed
        .with_label_values(&["write_timeout"]);
    while timed_out.get() == 0 && started.elapsed() < Duration::from_secs(10) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(timed_out.get(), 1, "closed for not reading");
    let mut buf = vec![0u8; 64 * 1024];
    let eof = tokio::time::timeout(Duration::from_secs(10), async {
        while let Ok(1..) = reader.read(&mut buf).await {}
    });
    assert!(eof.await.is_ok(), "the server closed the connection");
    asking.abort();
    assert_eq!(server.metrics.tcp_connections.get(), 0);
}

/// A zone of many tenant hostnames, each with one address.
fn many_names(n: usize) -> teapot_dns::Zone {
    let mut b = ZoneBuilder::new(ZoneSettings::new("lb.example.com")).unwrap();
    for i in 0..n {
        b.address(
            &format!("w{i}.acme.lb.example.com"),
            "192.0.2.1".parse().unwrap(),
        )
        .unwrap();
    }
    b.build()
}

/// Bytes sent and received by one address sending `queries` over UDP
/// as fast as the server takes them.
async fn flood(from: &str, to: SocketAddr, queries: &[Vec<u8>]) -> (usize, usize) {
    let socket = Arc::new(
        tokio::net::UdpSocket::bind(format!("{from}:0"))
            .await
            .unwrap(),
    );
    let receiver = tokio::spawn({
        let socket = socket.clone();
        async move {
            let mut buf = vec![0u8; 4096];
            let mut received = 0;
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(700), socket.recv(&mut buf)).await
            {
                received += n;
            }
            received
        }
    });
    let mut sent = 0;
    for (i, q) in queries.iter().enumerate() {
        sent += socket.send_to(q, to).await.unwrap();
        // Paced in bursts the server's socket buffer holds.
        if i % 25 == 24 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    (sent, receiver.await.unwrap())
}

#[tokio::test]
async fn rotated_types_and_names_from_one_prefix_get_fewer_bytes_than_they_send() {
    let server = start(
        many_names(1000),
        RateLimit {
            // Small, so the test's few thousand queries are well over it
            // however slowly they go.
            bytes_per_second: 8 * 1024,
            ..RateLimit::default()
        },
    );
    let n = 5000;
    // Every type a name with an address answers NODATA to.
    let types: Vec<u16> = (2..=249).filter(|t| ![16, 28, 41].contains(t)).collect();
    let nodata: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            query(
                "w1.acme.lb.example.com.",
                RecordType::from(types[i % types.len()]),
            )
        })
        .collect();
    let nxdomain: Vec<Vec<u8>> = (0..n)
        .map(|i| query(&format!("x{i}.acme.lb.example.com."), RecordType::A))
        .collect();
    let answers: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            query(
                &format!("w{}.acme.lb.example.com.", i % 1000),
                RecordType::A,
            )
        })
        .collect();
    for (what, from, queries) in [
        ("NODATA, rotated types", "127.0.10.1", &nodata),
        ("NXDOMAIN, rotated names", "127.0.11.1", &nxdomain),
        ("A answers, rotated names", "127.0.12.1", &answers),
    ] {
        let (sent, received) = flood(from, server.addr, queries).await;
        let ratio = received as f64 / sent as f64;
        assert!(
            ratio < 1.0,
            "{what}: {received} bytes out / {sent} in = {ratio:.2}"
        );
        assert!(received > 0, "{what}: the first answers go out");
    }
}
