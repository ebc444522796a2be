//! The listeners on 127.0.0.1 port 0, spoken to over real UDP and TCP
//! sockets: answers, truncation then TCP, the rate limiter's slip, a zone
//! swapped while serving, shutdown.

use std::net::SocketAddr;
use std::sync::Arc;

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
    let sockets = Sockets::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sockets.local_addr().unwrap();
    let handle = Arc::new(ArcSwap::from_pointee(zone));
    let metrics = Metrics::new().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let config = ServerConfig {
        rate_limit,
        ..ServerConfig::default()
    };
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
async fn a_large_answer_is_truncated_over_udp_and_whole_over_tcp() {
    let server = start(zone(60), RateLimit::default());
    let q = query("web.acme.lb.example.com.", RecordType::A);
    let m = udp(server.addr, &q).await;
    assert!(m.truncation && m.answers.is_empty());
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
    loop {
        let (n, _) = socket.recv_from(&mut buf).await.unwrap();
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
