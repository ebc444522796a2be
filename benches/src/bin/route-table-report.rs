//! Route table report: compile time, size, memory and lookup cost of the
//! compiled route table for synthetic stores of 1k, 10k and 100k Ingresses,
//! checked against the data plane's goals.
//!
//! Each size is measured in a fresh child process (this binary re-run with
//! `--child N`), so that the RSS growth of one size is not hidden by memory
//! the allocator kept from the previous one.
//!
//! This is a report, not a test: it prints PASS/MISS, it never fails on a
//! timing. It does fail if a sample request routes wrongly, since then the
//! numbers would be meaningless.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail, ensure};
use clap::Parser;
use serde::{Deserialize, Serialize};
use teapot_benches::stats::median;
use teapot_benches::{
    PackedRequests, RequestClass, compile_options, compile_store, expected_hosts, expected_routes,
    gateway_expectation, samples, synthetic_gateway_store, synthetic_store, tenant_compile_options,
    tenant_store,
};
use teapot_model::store::{Kind, NsName, Object, ObjectKey, SliceChange, Store, Stored};
use teapot_model::tenancy::{Tenancy, TenantVerdicts, admit_cached, admit_slice_changes};
use teapot_proxy::compile::endpoint_sets::{Refreshed, refresh};
use teapot_proxy::compile::parts::CompiledParts;
use teapot_proxy::compile::{ALLOCATOR_ENV, compile_incremental};
use teapot_proxy::live::endpoints::EndpointRegistry;

// The allocator `teapot` ships with, so the numbers are those of the binary.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Sample requests per class, spread over the whole table ("cold"); a
/// power of two so the loop can mask.
const SAMPLES_PER_CLASS: usize = 4096;
/// The first few of them, looked up over and over ("hot": in cache).
const HOT_SAMPLES: usize = 16;
/// Timed rounds per class; the median round is reported.
const LOOKUP_ROUNDS: usize = 15;
/// Lookups per round (15 x 200k = 3M lookups per class).
const LOOKUPS_PER_ROUND: usize = 200_000;

const GOAL_COMPILE_10K_MS: f64 = 100.0;
const GOAL_COMPILE_100K_MS: f64 = 1500.0;
const GOAL_LOOKUP_NS: f64 = 1000.0;
const GOAL_LOOKUP_HOSTS: usize = 100_000;

#[derive(Parser, Debug)]
#[command(
    name = "route-table-report",
    about = "Compile time, memory and lookup cost of teapot's route table"
)]
struct Args {
    /// Numbers of Ingresses to measure.
    #[arg(long, value_delimiter = ',', default_value = "1000,10000,100000")]
    sizes: Vec<usize>,
    /// Timed compiles per size (after one warm-up); the median is reported.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Also write the numbers as JSON to this file.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Measure every size in this process (RSS growth is then less reliable).
    #[arg(long)]
    in_process: bool,
    /// Only compile the store of this many Ingresses `--runs` times, for a
    /// profiler (`perf record -g -- route-table-report --profile-compile 10000`).
    #[arg(long, value_name = "INGRESSES", conflicts_with = "child")]
    profile_compile: Option<usize>,
    /// Only change one Ingress's path in the store, in place as the reload
    /// does, and recompile incrementally (the last compile's parts handed
    /// on), `--runs` times, timing the change and the compile apart: what
    /// a route change costs a replica, for a profiler (`perf record -g --
    /// route-table-report --profile-route-change 100000`).
    #[arg(long, value_name = "INGRESSES", conflicts_with_all = ["child", "profile_compile"])]
    profile_route_change: Option<usize>,
    /// With `--profile-route-change`: every namespace owned by a Tenant
    /// (`teapot_benches::tenant_store`), as in a shared fleet, and the
    /// tenant check run before each compile as the reload runs it, timed
    /// apart.
    #[arg(long, requires = "profile_route_change")]
    tenants: bool,
    /// Internal: measure one size and print it as JSON on stdout.
    #[arg(long, hide = true, value_name = "INGRESSES")]
    child: Option<usize>,
    /// What the store routes with: Ingresses, or the same routes as
    /// HTTPRoutes under one Gateway per namespace (looked up through the
    /// routing decision, `plane::decide`).
    #[arg(long, value_enum, default_value_t = RouteKind::Ingress)]
    kind: RouteKind,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum RouteKind {
    Ingress,
    Httproute,
}

/// The numbers for one store size.
#[derive(Debug, Serialize, Deserialize)]
struct SizeReport {
    kind: RouteKind,
    /// Ingresses, or HTTPRoutes with `--kind httproute`.
    ingresses: usize,
    services: usize,
    endpoint_slices: usize,
    routes: usize,
    hosts: usize,
    /// Building the synthetic store (not part of the goals).
    store_build_ms: f64,
    /// The first compile, with an empty endpoint registry (cold start).
    first_compile_ms: f64,
    /// Median of the timed recompiles: warm registry, previous snapshot
    /// still live, as on a reload. Dropping the result is not timed.
    compile_ms_median: f64,
    compile_ms_runs: Vec<f64>,
    /// Median time to drop a snapshot (what the last holder of the old
    /// snapshot pays after a swap).
    drop_ms_median: f64,
    /// RSS growth while building the store, MiB.
    store_mib: Option<f64>,
    /// RSS growth while compiling the first snapshot (route table, status
    /// report and the endpoints it registers), MiB.
    snapshot_mib: Option<f64>,
    /// Median ns per lookup, per request class, cycling through
    /// `SAMPLES_PER_CLASS` requests spread over the whole table.
    lookup_ns: BTreeMap<String, f64>,
    /// The same for the first `HOT_SAMPLES` requests only: the lookup's
    /// own work, without cache and TLB misses on the table.
    lookup_hot_ns: BTreeMap<String, f64>,
}

#[derive(Debug, Serialize)]
struct Goal {
    name: String,
    target: String,
    measured: Option<String>,
    /// `None`: not measured at this run's sizes.
    pass: Option<bool>,
}

#[derive(Debug, Serialize)]
struct Report {
    kind: RouteKind,
    release_build: bool,
    runs: usize,
    sizes: Vec<SizeReport>,
    goals: Vec<Goal>,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if let Some(n) = args.child {
        let report = measure(n, args.runs, args.kind)?;
        println!("{}", serde_json::to_string(&report)?);
        return Ok(());
    }
    ensure!(args.runs > 0, "--runs must be at least 1");
    if let Some(n) = args.profile_compile {
        return profile_compile(n, args.runs, args.kind);
    }
    if let Some(n) = args.profile_route_change {
        return profile_route_change(n, args.runs, args.tenants);
    }
    let release = !cfg!(debug_assertions);
    if !release {
        eprintln!("warning: debug build; run with `cargo run --release` for meaningful numbers");
    }
    let mut sizes = Vec::new();
    for &n in &args.sizes {
        eprintln!("measuring {n} {:?}s...", args.kind);
        sizes.push(if args.in_process {
            measure(n, args.runs, args.kind)?
        } else {
            measure_in_child(n, args.runs, args.kind)?
        });
    }
    let goals = goals(&sizes);
    let report = Report {
        kind: args.kind,
        release_build: release,
        runs: args.runs,
        sizes,
        goals,
    };
    print_report(&report);
    if let Some(path) = &args.json {
        let json = serde_json::to_string_pretty(&report)?;
        std::fs::write(path, json + "\n").with_context(|| format!("writing {}", path.display()))?;
        println!("\nwrote {}", path.display());
    }
    Ok(())
}

fn build_store(n: usize, kind: RouteKind) -> teapot_model::store::Store {
    match kind {
        RouteKind::Ingress => synthetic_store(n),
        RouteKind::Httproute => synthetic_gateway_store(n),
    }
}

fn profile_compile(n: usize, runs: usize, kind: RouteKind) -> anyhow::Result<()> {
    let store = build_store(n, kind);
    let registry = EndpointRegistry::default();
    let live = compile_store(&store, &registry, 1);
    let mut times = Vec::with_capacity(runs);
    for generation in 0..runs {
        let started = Instant::now();
        let next = black_box(compile_store(&store, &registry, 2 + generation as u64));
        times.push(ms(started.elapsed()));
        drop(next);
    }
    drop(live);
    println!(
        "compiled {n} Ingresses {runs} times: median {}",
        fmt_ms(median(times.iter().copied()))
    );
    Ok(())
}

fn profile_route_change(n: usize, runs: usize, tenants: bool) -> anyhow::Result<()> {
    let (mut store, options) = match tenants {
        true => (tenant_store(n), tenant_compile_options()),
        false => (synthetic_store(n), compile_options()),
    };
    let registry = EndpointRegistry::default();
    let mut verdicts = TenantVerdicts::default();
    // The tenant check as the reload runs it: what it refuses leaves the
    // store, so the world must pass it whole for the compile to be the
    // same one.
    let mut admit = |store: &mut Store,
                     previous: &Store,
                     changed: Option<&[ObjectKey]>|
     -> anyhow::Result<f64> {
        let started = Instant::now();
        let mut problems = Vec::new();
        let refused = admit_cached(
            store,
            &mut problems,
            previous,
            &options.domain,
            &options.lb_networks,
            &mut verdicts,
            changed,
        );
        let took = ms(started.elapsed());
        ensure!(
            refused.is_empty() && problems.is_empty(),
            "the tenant check refused {} objects: {:?}",
            refused.len(),
            problems.first().map(|p| &p.message)
        );
        Ok(took)
    };
    let rss_before = rss_mib();
    let first_admit = admit(&mut store, &Store::default(), None)?;
    // What the tenant check keeps (its verdicts) and what the allocator
    // kept of its work: an upper bound on the verdicts' memory.
    let admit_mib = rss_mib()
        .zip(rss_before)
        .map(|(after, before)| after - before);
    let mut parts = CompiledParts::default();
    let mut live = compile_incremental(&store, Vec::new(), 1, &options, &registry, &mut parts);
    let ids: Vec<NsName> = store.ingresses.keys().cloned().collect();
    ensure!(!ids.is_empty(), "no Ingress to change");
    let (mut changes, mut admits, mut compiles) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..runs {
        // One path of one Ingress, in a namespace spread over the store,
        // changed in the store in place as the reload changes it.
        let started = Instant::now();
        let id = &ids[(run * 7919) % ids.len()];
        let stored = store.ingresses.get_mut(id).context("the Ingress")?;
        let mut ingress = (*stored.object).clone();
        let path = ingress
            .spec
            .as_mut()
            .and_then(|s| s.rules.as_mut())
            .and_then(|r| r.first_mut())
            .and_then(|r| r.http.as_mut())
            .and_then(|h| h.paths.first_mut())
            .context("the Ingress's first path")?;
        path.path = Some(format!("/changed-{run}"));
        let mut previous = Store::default();
        let key = ObjectKey {
            kind: Kind::Ingress,
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        };
        let before = std::mem::replace(&mut stored.object, Arc::new(ingress));
        previous.insert(
            key.clone(),
            Object::Ingress((*before).clone()),
            stored.origin.clone(),
        );
        changes.push(ms(started.elapsed()));
        if tenants {
            // The key the load names, as a load by name or the kube
            // source's changes name it.
            admits.push(admit(&mut store, &previous, Some(&[key]))?);
        }
        let started = Instant::now();
        let snapshot = compile_incremental(
            &store,
            Vec::new(),
            2 + run as u64,
            &options,
            &registry,
            &mut parts,
        );
        compiles.push(ms(started.elapsed()));
        drop(std::mem::replace(&mut live, snapshot));
    }
    drop(live);
    if tenants {
        println!(
            "the tenant check: {} on the first load (RSS +{:.0} MiB), median {} after a change",
            fmt_ms(first_admit),
            admit_mib.unwrap_or(f64::NAN),
            fmt_ms(median(admits.iter().copied())),
        );
        // An EndpointSlice changed alone, as the reload admits it before
        // storing it in place (no compile): judged by itself.
        let slices: Vec<NsName> = store.endpoint_slices.keys().cloned().collect();
        ensure!(!slices.is_empty(), "no EndpointSlice to change");
        let (mut slice_checks, mut refreshes, mut every_tenant) =
            (Vec::new(), Vec::new(), Vec::new());
        for run in 0..runs {
            let id = &slices[(run * 7919) % slices.len()];
            let stored = &store.endpoint_slices[id];
            let change = SliceChange {
                id: id.clone(),
                slice: Some(Stored {
                    object: Arc::new((*stored.object).clone()),
                    origin: stored.origin.clone(),
                }),
            };
            let started = Instant::now();
            admit_slice_changes(
                &store,
                &[change],
                &options.domain,
                &options.lb_networks,
                &mut verdicts,
            )
            .map_err(|why| anyhow::anyhow!("the slice change needs a whole admission: {why}"))?;
            slice_checks.push(ms(started.elapsed()));
            // Its Service's endpoints resolved again into the cells the
            // compile made, as the reload does next.
            let service = stored
                .object
                .service_name()
                .context("the slice's Service")?;
            let services = [(id.namespace.clone(), service.to_string())];
            let started = Instant::now();
            let refreshed = refresh(&store, &services, &options, &registry, &parts);
            refreshes.push(ms(started.elapsed()));
            ensure!(
                refreshed == Refreshed::Stored(0),
                "the slice change was not stored in place: {refreshed:?}"
            );
            // What that step did per change before: every Tenant read
            // again, and a view of each.
            let started = Instant::now();
            let tenant_list: Vec<&teapot_api::Tenant> =
                store.tenants.values().map(|t| &*t.object).collect();
            let holdings = Tenancy::holdings(&tenant_list);
            let (domain, lb) = (&options.domain, &options.lb_networks);
            let viewed = Tenancy::new(&tenant_list, domain, lb, &holdings)
                .get(&id.namespace)
                .is_some();
            black_box(viewed);
            drop(holdings);
            every_tenant.push(ms(started.elapsed()));
        }
        println!(
            "the tenant check of one EndpointSlice changed alone: median {}; its Service's endpoints resolved again in place: median {}; every Tenant read again (what that step did per change before): median {}",
            fmt_ms(median(slice_checks.iter().copied())),
            fmt_ms(median(refreshes.iter().copied())),
            fmt_ms(median(every_tenant.iter().copied())),
        );
    }
    println!(
        "changed one of {n} Ingresses {runs} times: the change in the store median {}, compile median {}; \
         the last compile handed on {} of {} namespaces' parts whole",
        fmt_ms(median(changes.iter().copied())),
        fmt_ms(median(compiles.iter().copied())),
        parts.carried_namespaces(),
        parts.namespaces(),
    );
    Ok(())
}

fn measure_in_child(n: usize, runs: usize, kind: RouteKind) -> anyhow::Result<SizeReport> {
    let exe = std::env::current_exe().context("locating this binary")?;
    // The allocator settings `teapot` runs with, unless the caller chose.
    let tuning = ALLOCATOR_ENV
        .iter()
        .filter(|(name, _)| std::env::var_os(name).is_none());
    let out = Command::new(exe)
        .args(["--child", &n.to_string(), "--runs", &runs.to_string()])
        .args([
            "--kind",
            if kind == RouteKind::Ingress {
                "ingress"
            } else {
                "httproute"
            },
        ])
        .envs(tuning.copied())
        .stderr(Stdio::inherit())
        .output()
        .context("running the measuring child")?;
    if !out.status.success() {
        bail!("measuring {n} Ingresses failed: {}", out.status);
    }
    serde_json::from_slice(&out.stdout).context("reading the child's report")
}

/// Measures one size; see [`SizeReport`] for what each number means.
fn measure(n: usize, runs: usize, kind: RouteKind) -> anyhow::Result<SizeReport> {
    let rss_before = rss_mib();
    let started = Instant::now();
    let store = build_store(n, kind);
    let store_build = started.elapsed();
    let rss_store = rss_mib();

    let registry = EndpointRegistry::default();
    let started = Instant::now();
    let snapshot = compile_store(&store, &registry, 1);
    let first_compile = started.elapsed();
    let rss_snapshot = rss_mib();

    if kind == RouteKind::Ingress {
        ensure!(
            snapshot.routes.len() == expected_routes(n),
            "{n} Ingresses compiled to {} routes, expected {}",
            snapshot.routes.len(),
            expected_routes(n)
        );
        ensure!(snapshot.routes.hosts() == expected_hosts(n));
    } else {
        ensure!(
            snapshot.routes.is_empty(),
            "no Ingress routes in the HTTPRoute store"
        );
        ensure!(
            !snapshot.report.gateway.http_routes.is_empty(),
            "the HTTPRoutes compiled to no status"
        );
    }

    // Warm-up, then the timed recompiles. The live `snapshot` keeps the
    // registry's endpoints alive, as the serving snapshot does on a reload.
    drop(black_box(compile_store(&store, &registry, 2)));
    let mut compile_ms_runs = Vec::with_capacity(runs);
    let mut drop_ms_runs = Vec::with_capacity(runs);
    for generation in 0..runs {
        let started = Instant::now();
        let next = black_box(compile_store(&store, &registry, 3 + generation as u64));
        compile_ms_runs.push(ms(started.elapsed()));
        let started = Instant::now();
        drop(next);
        drop_ms_runs.push(ms(started.elapsed()));
    }

    let mut lookup_ns = BTreeMap::new();
    let mut lookup_hot_ns = BTreeMap::new();
    for class in RequestClass::ALL {
        let requests = samples(n, class, SAMPLES_PER_CLASS);
        // Check before timing: a wrong route would make the numbers lie.
        for r in &requests {
            let (got, expected) = match kind {
                RouteKind::Ingress => (
                    snapshot
                        .routes
                        .lookup(&r.host, &r.path)
                        .map(|u| u.name.clone()),
                    r.expected.clone(),
                ),
                RouteKind::Httproute => {
                    (decided(&snapshot, &r.host, &r.path), gateway_expectation(r))
                }
            };
            ensure!(
                got == expected,
                "{r:?} routed to {got:?}, not {expected:?}, in the {n}-{kind:?} table"
            );
        }
        let packed = PackedRequests::new(&requests);
        let pairs = packed.pairs();
        let name = class.name().to_string();
        lookup_ns.insert(name.clone(), time_lookups(&snapshot, &pairs, kind));
        lookup_hot_ns.insert(name, time_lookups(&snapshot, &pairs[..HOT_SAMPLES], kind));
    }

    let delta = |a: Option<f64>, b: Option<f64>| Some(b? - a?);
    Ok(SizeReport {
        kind,
        ingresses: n,
        services: store.services.len(),
        endpoint_slices: store.endpoint_slices.len(),
        routes: match kind {
            RouteKind::Ingress => snapshot.routes.len(),
            RouteKind::Httproute => snapshot.gateway.len(),
        },
        hosts: match kind {
            RouteKind::Ingress => snapshot.routes.hosts(),
            RouteKind::Httproute => snapshot.gateway.hosts(),
        },
        store_build_ms: ms(store_build),
        first_compile_ms: ms(first_compile),
        compile_ms_median: median(compile_ms_runs.iter().copied()),
        compile_ms_runs,
        drop_ms_median: median(drop_ms_runs.iter().copied()),
        store_mib: delta(rss_before, rss_store),
        snapshot_mib: delta(rss_store, rss_snapshot),
        lookup_ns,
        lookup_hot_ns,
    })
}

/// Where the routing decision sends a request (the Gateway API table
/// is only reached through it): the upstream's name, `None` for a 404.
fn decided(
    snapshot: &teapot_proxy::compile::snapshot::Snapshot,
    host: &str,
    path: &str,
) -> Option<String> {
    use teapot_proxy::plane::decide::{Decision, Head, decide};
    let head = Head {
        host_headers: 1,
        authority: host,
        path,
        requires_host: true,
        declared_length: None,
    };
    match decide(
        snapshot,
        &teapot_proxy::plane::edge::EdgeConfig::default(),
        &head,
    ) {
        Decision::Forward(f) => Some(f.upstream.name.clone()),
        Decision::Answer(..) => None,
    }
}

/// Median ns per lookup over [`LOOKUP_ROUNDS`] rounds, after one warm-up
/// round. HTTPRoutes are looked up through the routing decision (the
/// Gateway API table has no lookup of its own outside it); Ingresses
/// through the route table, as before.
fn time_lookups(
    snapshot: &teapot_proxy::compile::snapshot::Snapshot,
    pairs: &[(&str, &str)],
    kind: RouteKind,
) -> f64 {
    if kind == RouteKind::Httproute {
        let edge = teapot_proxy::plane::edge::EdgeConfig::default();
        return time_rounds(pairs, |host, path| {
            use teapot_proxy::plane::decide::{Decision, Head, decide};
            let head = Head {
                host_headers: 1,
                authority: host,
                path,
                requires_host: true,
                declared_length: None,
            };
            matches!(decide(snapshot, &edge, &head), Decision::Forward(_))
        });
    }
    time_rounds(pairs, |host, path| {
        snapshot.routes.lookup(host, path).is_some()
    })
}

fn time_rounds(pairs: &[(&str, &str)], lookup: impl Fn(&str, &str) -> bool) -> f64 {
    assert!(pairs.len().is_power_of_two());
    let mask = pairs.len() - 1;
    let round = || {
        let started = Instant::now();
        let mut found = 0usize;
        for q in 0..LOOKUPS_PER_ROUND {
            let (host, path) = pairs[q & mask];
            if black_box(lookup(black_box(host), black_box(path))) {
                found += 1;
            }
        }
        black_box(found);
        started.elapsed().as_nanos() as f64 / LOOKUPS_PER_ROUND as f64
    };
    round();
    let rounds: Vec<f64> = (0..LOOKUP_ROUNDS).map(|_| round()).collect();
    median(rounds.iter().copied())
}

fn kind_name(sizes: &[SizeReport]) -> &'static str {
    match sizes.first().map(|s| s.kind) {
        Some(RouteKind::Httproute) => "HTTPRoutes",
        _ => "Ingresses",
    }
}

fn goals(sizes: &[SizeReport]) -> Vec<Goal> {
    let at = |n: usize| sizes.iter().find(|s| s.ingresses == n);
    let compile_goal = |n: usize, label: &str, target_ms: f64| {
        let measured = at(n).map(|s| s.compile_ms_median);
        Goal {
            name: format!("compile {label} {}", kind_name(sizes)),
            target: format!("< {}", fmt_ms(target_ms)),
            measured: measured.map(fmt_ms),
            pass: measured.map(|m| m < target_ms),
        }
    };
    // Lookup: the slowest request class on the smallest table that has at
    // least 100k hosts.
    let lookup = sizes
        .iter()
        .filter(|s| s.hosts >= GOAL_LOOKUP_HOSTS)
        .min_by_key(|s| s.hosts)
        .map(|s| {
            let (class, ns) = s
                .lookup_ns
                .iter()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .map(|(c, ns)| (c.clone(), *ns))
                .unwrap_or_default();
            (s.hosts, class, ns)
        });
    vec![
        compile_goal(10_000, "10k", GOAL_COMPILE_10K_MS),
        compile_goal(100_000, "100k", GOAL_COMPILE_100K_MS),
        Goal {
            name: "lookup at 100k hosts (slowest class, cold)".into(),
            target: format!("< {GOAL_LOOKUP_NS:.0} ns"),
            measured: lookup
                .as_ref()
                .map(|(hosts, class, ns)| format!("{ns:.0} ns ({class}, {hosts} hosts)")),
            pass: lookup.map(|(_, _, ns)| ns < GOAL_LOOKUP_NS),
        },
    ]
}

fn print_report(report: &Report) {
    println!(
        "teapot route table report: {:?}s ({} build, {} CPUs, median of {} compiles after a warm-up)",
        report.kind,
        if report.release_build {
            "release"
        } else {
            "DEBUG"
        },
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        report.runs,
    );
    println!();
    println!(
        "{:>9} {:>8} {:>8} {:>9} {:>11} {:>13} {:>13} {:>10} {:>13}",
        "ingresses",
        "services",
        "hosts",
        "routes",
        "store build",
        "first compile",
        "compile (med)",
        "store MiB",
        "snapshot MiB"
    );
    for s in &report.sizes {
        println!(
            "{:>9} {:>8} {:>8} {:>9} {:>11} {:>13} {:>13} {:>10} {:>13}",
            s.ingresses,
            s.services,
            s.hosts,
            s.routes,
            fmt_ms(s.store_build_ms),
            fmt_ms(s.first_compile_ms),
            fmt_ms(s.compile_ms_median),
            fmt_mib(s.store_mib),
            fmt_mib(s.snapshot_mib),
        );
    }
    println!();
    println!(
        "lookup ns/op, median of {LOOKUP_ROUNDS} rounds of {LOOKUPS_PER_ROUND} lookups; \
         cold: cycling {SAMPLES_PER_CLASS} requests spread over the table, \
         hot: the first {HOT_SAMPLES} of them"
    );
    print!("{:>9} {:>8}", "ingresses", "hosts");
    for class in RequestClass::ALL {
        print!(" {:>24}", format!("{} cold/hot", class.name()));
    }
    println!();
    for s in &report.sizes {
        print!("{:>9} {:>8}", s.ingresses, s.hosts);
        for class in RequestClass::ALL {
            let get = |m: &BTreeMap<String, f64>| m.get(class.name()).copied().unwrap_or(f64::NAN);
            let cell = format!("{:.0} / {:.0}", get(&s.lookup_ns), get(&s.lookup_hot_ns));
            print!(" {cell:>24}");
        }
        println!();
    }
    println!();
    println!("compile runs (ms), and the median time to drop a snapshot:");
    for s in &report.sizes {
        let runs: Vec<String> = s
            .compile_ms_runs
            .iter()
            .map(|r| format!("{r:.1}"))
            .collect();
        println!(
            "{:>9}: {}   (drop {})",
            s.ingresses,
            runs.join(" "),
            fmt_ms(s.drop_ms_median)
        );
    }
    println!();
    println!("goals:");
    for g in &report.goals {
        let verdict = match g.pass {
            Some(true) => "PASS",
            Some(false) => "MISS",
            None => "SKIP",
        };
        let measured = g
            .measured
            .as_deref()
            .unwrap_or("not measured at these sizes");
        println!("{verdict} {}: {measured} (goal {})", g.name, g.target);
    }
}

/// Resident set size of this process, MiB (Linux only).
fn rss_mib() -> Option<f64> {
    let kib = teapot_benches::peers::rss_kib(std::process::id()).ok()?;
    Some(kib as f64 / 1024.0)
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn fmt_ms(ms: f64) -> String {
    if ms >= 1000.0 {
        format!("{:.2} s", ms / 1000.0)
    } else if ms >= 1.0 {
        format!("{ms:.1} ms")
    } else {
        // The steps that cost what they change take microseconds.
        format!("{ms:.3} ms")
    }
}

fn fmt_mib(mib: Option<f64>) -> String {
    mib.map_or_else(|| "n/a".into(), |m| format!("{m:.1}"))
}
