//! The DNS zone after one name changed (benches/dns.md, "A zone change"):
//! from the snapshot swapped in to the zone swapped in, at N routed hosts,
//! the whole build every change took before (`dns_zone::build`, kept as
//! the reference) against the zone made by difference
//! (`dns_zone::ZoneState`), side by side in one run, with the memory each
//! keeps.
//!
//!   cargo build --release -p teapot-benches --bin dns-zone-change
//!   target/release/dns-zone-change [--sizes 10000,100000] [--rounds 2] [--out FILE]
//!       [--before OLD-BUILD-OF-THIS-BINARY]
//!
//! Each (path, size) runs in a process of its own, so its RSS is its own:
//! the snapshots (N exact hosts `web-I.cJ.lb.example.com`, 100 a cluster,
//! and the same plus one host) are made first, then the zone of the first
//! is made (the state a replica keeps between changes: RSS before and
//! after), then the host is added and removed again, timed each. Rounds
//! alternate the two paths so that a change of the machine's load strikes
//! both.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_api::host::HostPattern;
use teapot_benches::results::{commit, utc_date};
use teapot_dns::{ZoneBuilder, ZoneHandle, ZoneSettings};
use teapot_proxy::compile::routes::{Route, RouteTable};
use teapot_proxy::compile::snapshot::Snapshot;
use teapot_proxy::compile::upstream::Upstream;
use teapot_proxy::loops::dns_zone::{self, Hosts, ZoneState};
use teapot_proxy::loops::reload::thread_cpu_ns;

// The allocator `teapot` ships with, so the numbers are those of the binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser, Debug)]
#[command(about = "The DNS zone after one name changed: whole build against the difference")]
struct Args {
    /// Routed hosts, comma-separated.
    #[arg(long, default_value = "10000,100000", value_delimiter = ',')]
    sizes: Vec<usize>,
    /// Rounds of (whole, difference) per size.
    #[arg(long, default_value_t = 2)]
    rounds: usize,
    /// Changes timed per process and direction (added, removed): the whole
    /// build gets fewer at 100k, each takes about a second.
    #[arg(long, default_value_t = 40)]
    changes: usize,
    /// An earlier build of this binary (e.g. one built at the commit
    /// before the zone was made by difference, its difference path cut
    /// out): its whole build runs beside this one's, as "whole-before".
    #[arg(long)]
    before: Option<String>,
    /// The JSON result file (default benches/results/dns-zone-change-DATE.json).
    #[arg(long)]
    out: Option<String>,
    /// Internal: run one (path, size) and print its JSON line.
    #[arg(long, hide = true)]
    child: Option<String>,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if let Some(path) = &args.child {
        let n = *args.sizes.first().context("one size")?;
        println!("{}", child(path, n, args.changes)?);
        return Ok(());
    }
    let exe = std::env::current_exe()?;
    let mut runs = Vec::new();
    for &n in &args.sizes {
        for round in 1..=args.rounds {
            let before = args.before.iter().map(|b| ("whole-before", b.as_str()));
            let exe = exe.to_str().context("executable path")?;
            let paths = before.chain([("whole", exe), ("difference", exe)]);
            for (path, exe) in paths {
                // The whole build at 100k takes about a second a change.
                let changes = if path != "difference" {
                    (args.changes * 10_000 / n.max(1)).clamp(3, args.changes)
                } else {
                    args.changes
                };
                let child = path.trim_end_matches("-before");
                let out = Command::new(exe)
                    .args(["--child", child, "--sizes", &n.to_string()])
                    .args(["--changes", &changes.to_string()])
                    .output()?;
                if !out.status.success() {
                    bail!("{path} at {n}: {}", String::from_utf8_lossy(&out.stderr));
                }
                let mut run: Value = serde_json::from_slice(&out.stdout)?;
                run["round"] = json!(round);
                run["path"] = json!(path);
                eprintln!("{run}");
                runs.push(run);
            }
        }
    }
    println!(
        "| names | path | round | added: p50 / max | removed: p50 / max | CPU p50 added / removed | state RSS | RSS after |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    for r in &runs {
        let f = |a: &str, b: &str| r[a][b].as_f64().unwrap_or_default();
        println!(
            "| {} | {} | {} | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.2} / {:.2} ms | {:.1} MiB | {:.1} MiB |",
            r["names"],
            r["path"].as_str().unwrap_or_default(),
            r["round"],
            f("added_ms", "p50"),
            f("added_ms", "max"),
            f("removed_ms", "p50"),
            f("removed_ms", "max"),
            f("added_cpu_ms", "p50"),
            f("removed_cpu_ms", "p50"),
            r["state_rss_mib"].as_f64().unwrap_or_default(),
            r["rss_after_mib"].as_f64().unwrap_or_default(),
        );
    }
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = args
        .out
        .unwrap_or_else(|| format!("benches/results/dns-zone-change-{}.json", utc_date()));
    let result = json!({
        "date": utc_date(),
        "commit": commit(&repo),
        "runs": runs,
    });
    std::fs::write(&out, serde_json::to_string_pretty(&result)? + "\n")?;
    eprintln!("wrote {out}");
    Ok(())
}

fn snapshot(n: usize, extra: bool) -> Snapshot {
    let mut routes = RouteTable::default();
    let upstream = Arc::new(Upstream::new("default/web:80".into(), Vec::new(), None));
    let hosts = (0..n)
        .map(|i| format!("web-{i}.c{}.lb.example.com", i / 100))
        .chain(extra.then(|| "added.c0.lb.example.com".to_string()));
    for h in hosts {
        routes
            .host_mut(Some(&HostPattern::Exact(h)))
            .set_fallback(Route::from(upstream.clone()));
    }
    Snapshot {
        routes,
        ..Snapshot::default()
    }
}

/// Resident set size of this process, MiB (0 where it cannot be read).
fn rss_mib() -> f64 {
    teapot_benches::peers::rss_kib(std::process::id()).map_or(0.0, |kib| kib as f64 / 1024.0)
}

fn summary(mut ms: Vec<f64>) -> Value {
    ms.sort_by(f64::total_cmp);
    let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
    json!({"runs": ms.len(), "p50": at(0.5), "p90": at(0.9), "max": at(1.0),
           "mean": ms.iter().sum::<f64>() / ms.len() as f64})
}

/// One path at one size: the zone of `base` made, then the host added and
/// removed `changes` times, each from the snapshot to the zone swapped in.
fn child(path: &str, n: usize, changes: usize) -> Result<Value> {
    let settings = ZoneSettings::new("lb.example.com");
    let addresses: BTreeSet<IpAddr> = ["192.0.2.1".parse()?, "2001:db8::1".parse()?].into();
    let base = snapshot(n, false);
    let plus = snapshot(n, true);
    let handle: ZoneHandle = Arc::new(arc_swap::ArcSwap::from_pointee(
        ZoneBuilder::new(settings.clone())?.placeholder(),
    ));
    let rss_before = rss_mib();
    let started = Instant::now();
    let mut state = ZoneState::default();
    let mut change = |s: &Snapshot| -> Result<()> {
        let zone = match path {
            "whole" => Arc::new(dns_zone::build(&settings, s, &addresses, &[])?),
            _ => state.next(&settings, &Hosts::of(s), &addresses, &[])?,
        };
        handle.store(zone);
        Ok(())
    };
    change(&base)?;
    let first_ms = started.elapsed().as_secs_f64() * 1e3;
    let rss_state = rss_mib();
    let (mut added, mut removed) = (Vec::new(), Vec::new());
    let (mut added_cpu, mut removed_cpu) = (Vec::new(), Vec::new());
    for _ in 0..changes {
        for (s, times, cpu) in [
            (&plus, &mut added, &mut added_cpu),
            (&base, &mut removed, &mut removed_cpu),
        ] {
            let (at, cpu_at) = (Instant::now(), thread_cpu_ns());
            change(s)?;
            times.push(at.elapsed().as_secs_f64() * 1e3);
            cpu.push((thread_cpu_ns() - cpu_at) as f64 / 1e6);
        }
    }
    // The share of a change that only lists the snapshot's hosts.
    let mut listing = Vec::new();
    for _ in 0..changes {
        let at = Instant::now();
        let hosts = Hosts::of(&plus);
        std::hint::black_box(&hosts);
        listing.push(at.elapsed().as_secs_f64() * 1e3);
    }
    let zone = handle.load();
    Ok(json!({
        "hosts_of_ms": summary(listing),
        "path": path,
        "names": zone.names(),
        "hosts": n,
        "serial": zone.serial(),
        "first_ms": first_ms,
        "added_ms": summary(added),
        "removed_ms": summary(removed),
        "added_cpu_ms": summary(added_cpu),
        "removed_cpu_ms": summary(removed_cpu),
        "rss_before_mib": rss_before,
        "state_rss_mib": rss_state - rss_before,
        "rss_after_mib": rss_mib(),
    }))
}
