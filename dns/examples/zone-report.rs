//! The DNS zone at scale (docs/dns.md, benches/dns.md "Authoritative
//! DNS"): memory and build time of a zone of N assigned hostnames (built
//! whole at start and when the answered addresses change; a change of
//! names is `dns-zone-change`'s), and the query path alone
//! (`teapot_dns::respond`, no sockets) on one core, hits and NXDOMAINs.
//!
//!   cargo run --release -p teapot-dns --example zone-report -- [NAMES...]
//!
//! (benches/dns-side-by-side.sh runs it; benches/dns.md has the figures.)

use std::time::{Duration, Instant};

use teapot_dns::{Transport, ZoneBuilder, ZoneSettings, respond};

// The allocator `teapot` ships with, so the numbers are those of the binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Tenant clusters the names are spread over (100 Ingresses each).
const PER_CLUSTER: usize = 100;

fn main() {
    let sizes: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let sizes = if sizes.is_empty() {
        vec![1_000, 10_000, 100_000]
    } else {
        sizes
    };
    for n in sizes {
        report(n);
    }
}

fn name(i: usize) -> String {
    format!("web-{i}.c{}.lb.example.com", i / PER_CLUSTER)
}

/// A query in wire format: id, RD, one question of type A.
fn query(name: &str) -> Vec<u8> {
    let mut q = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
    for label in name.split('.') {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

fn report(n: usize) {
    let before = rss_kib();
    let started = Instant::now();
    let mut builder = ZoneBuilder::new(ZoneSettings::new("lb.example.com")).expect("settings");
    for i in 0..n {
        let name = name(i);
        builder
            .address(&name, "192.0.2.1".parse().expect("address"))
            .expect("in zone");
        builder
            .address(&name, "2001:db8::1".parse().expect("address"))
            .expect("in zone");
    }
    let zone = builder.build();
    let build = started.elapsed();
    let after = rss_kib();
    let zone_kib = after.saturating_sub(before);

    // Every 97th name, so the lookups walk the whole table, and one
    // miss in ten.
    let queries: Vec<Vec<u8>> = (0..4096)
        .map(|k| {
            if k % 10 == 0 {
                query(&format!("miss-{k}.c1.lb.example.com"))
            } else {
                query(&name((k * 97) % n))
            }
        })
        .collect();
    let mut answered = 0u64;
    let mut bytes = 0usize;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(2) {
        for q in &queries {
            if let Some(r) = respond(&zone, q, Transport::Udp) {
                answered += 1;
                bytes += r.bytes.len();
            }
        }
    }
    let elapsed = started.elapsed().as_secs_f64();
    println!(
        "{{\"names\":{n},\"build_ms\":{:.1},\"zone_kib\":{zone_kib},\"bytes_per_name\":{:.0},\"respond_per_s\":{:.0},\"ns_per_query\":{:.0},\"mean_response_bytes\":{:.1}}}",
        build.as_secs_f64() * 1000.0,
        zone_kib as f64 * 1024.0 / n as f64,
        answered as f64 / elapsed,
        elapsed * 1e9 / answered as f64,
        bytes as f64 / answered as f64,
    );
    drop(zone);
}

/// Resident set size of this process, KiB (Linux only; 0 elsewhere).
fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}
