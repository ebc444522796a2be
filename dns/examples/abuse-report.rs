//! The DNS listener under abuse from one client prefix (docs/dns.md "Safe
//! on the open internet", benches/dns.md "Abuse"):
//!
//! - **TCP share**: one client (127.0.5.1) opens 300 connections, more
//!   than the listener's 256 slots, and keeps every one it gets alive
//!   with a query a second; meanwhile another client (127.0.6.1) asks 200
//!   queries, each on a new connection: its answer times (connect, query,
//!   answer), against the same without the holder.
//! - **Amplification** under rotation, each mix from its own /24 at up to
//!   about 50,000 queries/s: NODATA with the query type rotated over 245
//!   types, NXDOMAIN with random names, A answers rotated over 1,000
//!   hostnames. Bytes received over bytes sent.
//!
//!   cargo run --release -p teapot-dns --example abuse-report [-- ADDR]
//!
//! Without ADDR the server runs in this process (`ServerConfig::default()`,
//! one runtime thread of its own) with a zone of 10,000 names
//! `wN.acme.lb.example.com`; with ADDR (benches/dns-side-by-side.sh passes
//! a `teapot proxy --dns-listen` with its defaults and the same names) the
//! clients ask that server. One JSON line on stdout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, Query};
use hickory_proto::rr::{Name, RecordType};
use teapot_dns::{Metrics, ServerConfig, Sockets, ZoneBuilder, ZoneSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream, UdpSocket};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const NAMES: usize = 10_000;

fn main() {
    let addr = match std::env::args().nth(1) {
        Some(a) => a.parse().expect("ADDR: an address and port"),
        None => serve_here(),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (tcp, amplification) = rt.block_on(async {
        let tcp = tcp_share(addr).await;
        let mut amplification = Vec::new();
        for (mix, from) in [
            ("nodata_rotated_types", "127.0.10.1"),
            ("nxdomain_rotated_names", "127.0.11.1"),
            ("answers_rotated_names", "127.0.12.1"),
        ] {
            let r = flood(addr, from, &queries(mix, 50_000)).await;
            eprintln!("amplification {mix}: {r}");
            amplification.push(format!("\"{mix}\":{r}"));
        }
        (tcp, amplification)
    });
    println!(
        "{{\"server\":\"{}\",\"tcp_share\":{tcp},\"amplification\":{{{}}}}}",
        if std::env::args().nth(1).is_some() {
            "external"
        } else {
            "in-process"
        },
        amplification.join(",")
    );
}

/// The server with its defaults on a thread and runtime of its own.
fn serve_here() -> SocketAddr {
    let mut b = ZoneBuilder::new(ZoneSettings::new("lb.example.com")).unwrap();
    for i in 0..NAMES {
        b.address(
            &format!("w{i}.acme.lb.example.com"),
            "192.0.2.1".parse().unwrap(),
        )
        .unwrap();
    }
    let zone = Arc::new(arc_swap::ArcSwap::from_pointee(b.build()));
    let sockets = Sockets::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let addr = sockets.local_addr().unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let metrics = Metrics::new().unwrap();
        let config = ServerConfig::default();
        rt.block_on(teapot_dns::run(
            sockets,
            zone,
            config,
            metrics,
            std::future::pending(),
        ))
        .unwrap();
    });
    addr
}

fn query(id: u16, name: &str, qtype: RecordType) -> Vec<u8> {
    let mut m = Message::query();
    m.metadata.id = id;
    m.add_query(Query::query(Name::from_ascii(name).unwrap(), qtype));
    m.to_vec().unwrap()
}

async fn connect_from(from: &str, to: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(format!("{from}:0").parse().unwrap())?;
    socket.connect(to).await
}

async fn ask(s: &mut TcpStream, q: &[u8]) -> std::io::Result<()> {
    let framed = [&(q.len() as u16).to_be_bytes()[..], q].concat();
    s.write_all(&framed).await?;
    let mut len = [0u8; 2];
    s.read_exact(&mut len).await?;
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).await?;
    Ok(())
}

/// Answer times in ms of `n` queries from `from`, each on a new
/// connection; a query not answered in 5 s counts as 5000 ms.
async fn other_client(addr: SocketAddr, from: &str, n: usize) -> (Vec<f64>, usize) {
    let q = query(1, "w1.acme.lb.example.com.", RecordType::A);
    let (mut times, mut unanswered) = (Vec::with_capacity(n), 0);
    for _ in 0..n {
        let started = Instant::now();
        let r = tokio::time::timeout(Duration::from_secs(5), async {
            let mut s = connect_from(from, addr).await?;
            ask(&mut s, &q).await
        })
        .await;
        if !matches!(r, Ok(Ok(()))) {
            unanswered += 1;
        }
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    (times, unanswered)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    (sorted[i] * 1000.0).round() / 1000.0
}

async fn tcp_share(addr: SocketAddr) -> String {
    let (alone, alone_lost) = other_client(addr, "127.0.6.1", 200).await;
    let held = Arc::new(AtomicUsize::new(0));
    let mut holder = tokio::task::JoinSet::new();
    let q = query(2, "w2.acme.lb.example.com.", RecordType::A);
    for _ in 0..300 {
        let Ok(mut s) = connect_from("127.0.5.1", addr).await else {
            continue;
        };
        let (q, held) = (q.clone(), held.clone());
        holder.spawn(async move {
            if ask(&mut s, &q).await.is_err() {
                return;
            }
            held.fetch_add(1, Ordering::Relaxed);
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                if ask(&mut s, &q).await.is_err() {
                    break;
                }
            }
            held.fetch_sub(1, Ordering::Relaxed);
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (busy, busy_lost) = other_client(addr, "127.0.6.1", 200).await;
    let kept = held.load(Ordering::Relaxed);
    holder.abort_all();
    let line = format!(
        "{{\"holder_connections_tried\":300,\"holder_connections_kept\":{kept},\
         \"alone_ms\":{{\"p50\":{},\"p99\":{},\"max\":{},\"unanswered\":{alone_lost}}},\
         \"beside_holder_ms\":{{\"p50\":{},\"p99\":{},\"max\":{},\"unanswered\":{busy_lost}}}}}",
        percentile(&alone, 0.5),
        percentile(&alone, 0.99),
        percentile(&alone, 1.0),
        percentile(&busy, 0.5),
        percentile(&busy, 0.99),
        percentile(&busy, 1.0),
    );
    eprintln!("TCP share: {line}");
    line
}

/// `n` queries of one mix.
fn queries(mix: &str, n: usize) -> Vec<Vec<u8>> {
    // Every type a name with only an address answers NODATA to.
    let types: Vec<u16> = (2..=249).filter(|t| ![16, 28, 41].contains(t)).collect();
    (0..n)
        .map(|i| {
            let id = i as u16;
            match mix {
                "nodata_rotated_types" => query(
                    id,
                    "w1.acme.lb.example.com.",
                    RecordType::from(types[i % types.len()]),
                ),
                "nxdomain_rotated_names" => {
                    query(id, &format!("x{i}.acme.lb.example.com."), RecordType::A)
                }
                _ => query(
                    id,
                    &format!("w{}.acme.lb.example.com.", i % 1000),
                    RecordType::A,
                ),
            }
        })
        .collect()
}

/// Sends `queries` from `from` in bursts of 50 a millisecond at most,
/// receiving all along; the bytes both ways.
async fn flood(addr: SocketAddr, from: &str, queries: &[Vec<u8>]) -> String {
    let socket = Arc::new(UdpSocket::bind(format!("{from}:0")).await.unwrap());
    let receiver = tokio::spawn({
        let socket = socket.clone();
        async move {
            let mut buf = vec![0u8; 4096];
            let (mut bytes, mut responses) = (0usize, 0usize);
            while let Ok(Ok(n)) =
                tokio::time::timeout(Duration::from_millis(1000), socket.recv(&mut buf)).await
            {
                bytes += n;
                responses += 1;
            }
            (bytes, responses)
        }
    });
    let started = Instant::now();
    let mut sent = 0;
    for (i, q) in queries.iter().enumerate() {
        sent += socket.send_to(q, addr).await.unwrap();
        if i % 50 == 49 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    let (received, responses) = receiver.await.unwrap();
    format!(
        "{{\"queries\":{},\"bytes_in\":{sent},\"responses\":{responses},\"bytes_out\":{received},\
         \"ratio\":{:.3},\"seconds\":{:.2}}}",
        queries.len(),
        received as f64 / sent as f64,
        seconds
    )
}
