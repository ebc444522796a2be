//! What a hostile tenant's objects and requests cost a quiet tenant and a
//! replica of the shared fleet, on the real `teapot proxy`.
//!
//! Every attack in [`ATTACKS`] runs on a fresh proxy (manifests mode, every
//! listener on 127.0.0.1) that serves three tenants: *quiet*, an HTTPRoute
//! in front of an echo backend whose latency is measured; *bystander*, a
//! Tenant with one Ingress whose one-line change is timed as a reload; and
//! *hostile*, a Tenant that applies the attack's objects and sends its
//! requests. Per attack:
//!
//! 1. the quiet tenant's latency (paced loop, fixed concurrency, bounded in
//!    requests and time) and the bystander's recompile, without the attack;
//! 2. the attack's objects are written; the time to the new snapshot, its
//!    compile time and the RSS they add once the reload has settled;
//! 3. the bystander's recompile with them loaded;
//! 4. the quiet tenant's latency again while the hostile requests run in
//!    parallel (their own bounded loop), and the proxy's log lines per
//!    hostile request.
//!
//! The goals: the quiet tenant's p99 within 2x, less than 64 MiB RSS added
//! and a recompile under 100 ms. [`CHECKS`] are correctness probes (the
//! status a request gets), sent once each. A tenant's endpoints may never
//! be loopback, so the attacks that need a live hostile backend (an h2c
//! server, a closed port) route from an operator namespace, `hostile-ops`,
//! which stands for the tenant's own nodes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use serde_json::{Value, json};
use teapot_benches::manifests_proxy::{
    Manifests, ManifestsProxy, endpoint_slice as slice, service, tenant,
};
use teapot_benches::peers::teapot_bin;
use teapot_benches::results::utc_date;
use teapot_benches::stats::percentile;
use teapot_testkit::client::{Connection, Proto, Request, Transport};
use teapot_testkit::echo::{EchoIdentity, EchoServer};
use teapot_testkit::h2frames::{frame, hpack_length};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Parser)]
#[command(
    about = "cost of a hostile tenant's objects and requests to a quiet tenant and a replica"
)]
struct Cli {
    /// The release `teapot` binary (default: beside this benchmark).
    #[arg(long)]
    teapot: Option<PathBuf>,
    /// A smoke run: fewer quiet requests, one bystander change, short phases.
    #[arg(long)]
    quick: bool,
    /// Only these attacks and checks (comma-separated names; default all).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// The proxy's serving threads.
    #[arg(long, default_value_t = 2)]
    threads: usize,
    /// The quiet tenant's requests per phase.
    #[arg(long)]
    requests: Option<usize>,
    /// The quiet tenant's connections (each sends one request at a time).
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// The quiet tenant's request rate, per second, over all connections.
    #[arg(long, default_value_t = 500)]
    rate: u64,
    /// Bystander changes timed per state (median reported).
    #[arg(long)]
    changes: Option<usize>,
    /// Multiplies every attack's object counts (1: the review's sizes).
    #[arg(long, default_value_t = 1)]
    scale: usize,
    /// Where the JSON goes (default:
    /// benches/results/hostile-tenant-cost-YYYYMMDD.json).
    #[arg(long)]
    json: Option<PathBuf>,
}

/// The knobs one run uses, after `--quick`.
struct Plan {
    teapot: PathBuf,
    threads: usize,
    requests: usize,
    concurrency: usize,
    rate: u64,
    changes: usize,
    scale: usize,
    /// Slack after the quiet loop's schedule ends before in-flight
    /// requests are cut off (and counted at the time they had waited).
    slack: Duration,
    /// The bound of one wait for a reload.
    reload_bound: Duration,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    let teapot = teapot_bin(cli.teapot.as_deref());
    let teapot = std::fs::canonicalize(&teapot).with_context(|| {
        format!(
            "{} (build it: cargo build --release -p teapot)",
            teapot.display()
        )
    })?;
    let plan = Plan {
        teapot,
        threads: cli.threads.max(1),
        requests: cli.requests.unwrap_or(if cli.quick { 600 } else { 3000 }),
        concurrency: cli.concurrency.max(1),
        rate: cli.rate.max(1),
        changes: cli.changes.unwrap_or(if cli.quick { 1 } else { 3 }).max(1),
        scale: cli.scale.max(1),
        slack: Duration::from_secs(if cli.quick { 4 } else { 8 }),
        reload_bound: Duration::from_secs(120),
    };
    let wanted = |name: &str| cli.only.is_empty() || cli.only.iter().any(|o| o == name);
    let started = Instant::now();

    let mut attacks = Vec::new();
    for attack in ATTACKS.iter().filter(|a| wanted(a.name)) {
        eprintln!("attack {}: {}", attack.name, attack.finding);
        match run_attack(&plan, attack).await {
            Ok(r) => attacks.push(r),
            Err(e) => {
                eprintln!("attack {} failed: {e:#}", attack.name);
                attacks.push(json!({"name": attack.name, "finding": attack.finding, "error": format!("{e:#}")}));
            }
        }
    }
    let mut checks = Vec::new();
    if CHECKS.iter().any(|c| wanted(c.name)) {
        match run_checks(&plan, &wanted).await {
            Ok(c) => checks = c,
            Err(e) => eprintln!("checks failed: {e:#}"),
        }
    }

    print_table(&attacks, &checks);
    let report = json!({
        "bench": "hostile-tenant",
        "teapot": plan.teapot.display().to_string(),
        "quick": cli.quick,
        "threads": plan.threads,
        "quiet": {"requests": plan.requests, "concurrency": plan.concurrency, "rate_per_s": plan.rate},
        "scale": plan.scale,
        "goals": {"quiet_p99_ratio_max": GOAL_P99_RATIO, "rss_added_mib_max": GOAL_RSS_MIB, "recompile_ms_max": GOAL_RECOMPILE_MS},
        "load_average": std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim(),
        "seconds": started.elapsed().as_secs_f64(),
        "attacks": attacks,
        "checks": checks,
    });
    let path = cli.json.unwrap_or_else(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(format!("results/hostile-tenant-cost-{}.json", utc_date()))
    });
    std::fs::write(&path, serde_json::to_string_pretty(&report)? + "\n")?;
    eprintln!(
        "\n{} ({:.0} s)",
        path.display(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

const GOAL_P99_RATIO: f64 = 2.0;
const GOAL_RSS_MIB: f64 = 64.0;
const GOAL_RECOMPILE_MS: f64 = 100.0;

// ---------------------------------------------------------------------------
// The attacks: data, so a new one is one more entry

/// A file of the manifests directory: its name and documents.
type ManifestFile = (String, Vec<Value>);

/// One attack: the objects the hostile tenant applies and the requests it
/// sends while the quiet tenant is measured.
struct Attack {
    name: &'static str,
    /// The review's finding it reproduces.
    finding: &'static str,
    /// The hostile objects, as files of the manifests directory.
    objects: fn(&World, usize) -> Vec<ManifestFile>,
    /// The request the hostile loop sends over and over.
    request: fn(&World, u64) -> HostileRequest,
    /// Hostile connections, each one request at a time.
    concurrency: usize,
    /// Hostile requests per second over all connections (0: as fast as
    /// they come back).
    rate: u64,
}

/// A hostile request: HTTP/1.1 or HTTP/2 (cleartext, prior knowledge).
struct HostileRequest {
    proto: Proto,
    host: String,
    target: String,
}

static ATTACKS: &[Attack] = &[
    Attack {
        name: "regex-stall",
        finding: "RegularExpression path matches that defeat the lazy DFA: 480 on one host, a 7 KiB path",
        objects: |_, scale| {
            vec![(
                "hostile-stall.yaml".into(),
                hostile_routes(
                    "stall",
                    &[format!("stall.{HOSTILE_ZONE}")],
                    480 * scale,
                    |i| PathMatch::Regex(format!(r"/(?:[\s\S]*a[\s\S]{{{}}})", 50 + i % 11)),
                ),
            )]
        },
        request: stall_request,
        concurrency: 2,
        rate: 0,
    },
    Attack {
        name: "regex-bloat",
        finding: r"Unicode \w regexes of about 256 KiB each: 1,000 `/\w{4}N` path matches",
        objects: |_, scale| {
            vec![(
                "hostile-bloat.yaml".into(),
                hostile_routes(
                    "bloat",
                    &[format!("bloat.{HOSTILE_ZONE}")],
                    1000 * scale,
                    |i| PathMatch::Regex(format!(r"/\w{{4}}{i}")),
                ),
            )]
        },
        request: |_, n| HostileRequest {
            proto: Proto::Http1,
            host: format!("bloat.{HOSTILE_ZONE}"),
            target: format!("/abcd-{n}"),
        },
        concurrency: 2,
        rate: 200,
    },
    Attack {
        name: "wildcard-exact",
        finding: "wildcard-host routes with 5,000 matches over 1,000 exact hosts below them: 5 million table entries",
        objects: |_, scale| {
            let mut docs = hostile_routes(
                "wild",
                &[format!("*.w.{HOSTILE_ZONE}")],
                5000 * scale,
                |i| PathMatch::Prefix(format!("/w{i}")),
            );
            let hosts: Vec<String> = (0..1000 * scale)
                .map(|h| format!("h{h}.w.{HOSTILE_ZONE}"))
                .collect();
            for (r, chunk) in hosts.chunks(MAX_ROUTE_HOSTNAMES).enumerate() {
                docs.push(http_route(
                    HOSTILE_NS,
                    &format!("exact-{r}"),
                    HOSTILE_GATEWAY,
                    chunk,
                    vec![route_rule(
                        vec![path_match(&PathMatch::Prefix(format!("/e{r}")))],
                        HOSTILE_SINK,
                    )],
                ));
            }
            vec![("hostile-wildcard.yaml".into(), docs)]
        },
        request: |_, n| HostileRequest {
            proto: Proto::Http1,
            host: format!("h{}.w.{HOSTILE_ZONE}", n % 1000),
            target: "/nothing-here".into(),
        },
        concurrency: 2,
        rate: 200,
    },
    Attack {
        name: "h2c-huge-head",
        finding: "an h2c backend that answers with a 1 MiB response head",
        objects: |w, _| {
            vec![(
                "hostile-h2c.yaml".into(),
                ops_backend("h2big", Some("kubernetes.io/h2c"), w.h2c_backend.port()),
            )]
        },
        request: |_, _| HostileRequest {
            proto: Proto::Http2,
            host: format!("h2big.{OPS_ZONE}"),
            target: "/".into(),
        },
        concurrency: 2,
        rate: 50,
    },
    Attack {
        name: "closed-port",
        finding: "a route to a closed port: a WARN line per request",
        objects: |w, _| {
            vec![(
                "hostile-closed.yaml".into(),
                ops_backend("closed", None, w.closed_port),
            )]
        },
        request: |_, _| HostileRequest {
            proto: Proto::Http1,
            host: format!("closed.{OPS_ZONE}"),
            target: "/".into(),
        },
        concurrency: 2,
        rate: 500,
    },
    Attack {
        name: "quota-mix",
        finding: "the costliest mix measured at the Tenant's default limits: the three route attacks, 20,000 endpoints and header filters",
        objects: |w, scale| {
            let mut files = Vec::new();
            for a in ["regex-stall", "regex-bloat", "wildcard-exact"] {
                let attack = ATTACKS.iter().find(|x| x.name == a).expect("listed");
                files.extend((attack.objects)(w, scale));
            }
            files.push(("hostile-endpoints.yaml".into(), bulk_endpoints(20 * scale)));
            files.push(("hostile-filters.yaml".into(), filter_routes(20 * scale)));
            files
        },
        request: stall_request,
        concurrency: 2,
        rate: 0,
    },
];

/// A correctness probe: raw bytes to the plain listener and what the
/// answer must be.
struct Check {
    name: &'static str,
    finding: &'static str,
    /// The bytes sent, on one connection.
    request: fn() -> Vec<u8>,
    /// Pass or fail, from the statuses answered and the targets the quiet
    /// backend saw because of it.
    verdict: fn(&[u16], &[String]) -> bool,
    /// What passing means.
    expect: &'static str,
}

const CHECKS: &[Check] = &[
    Check {
        name: "dot-segments",
        finding: "an unnormalised path: /public/../admin",
        request: || raw_get("/public/../admin"),
        verdict: not_forwarded_with_dot_segments,
        expect: "400 or 404, or forwarded with the dot segments resolved",
    },
    Check {
        name: "encoded-dot-segments",
        finding: "an unnormalised path: /public/%2e%2e/admin",
        request: || raw_get("/public/%2e%2e/admin"),
        verdict: not_forwarded_with_dot_segments,
        expect: "400 or 404, or forwarded with the dot segments resolved",
    },
    Check {
        name: "deep-dot-segments",
        finding: "an unnormalised path: /public/x/../../admin",
        request: || raw_get("/public/x/../../admin"),
        verdict: not_forwarded_with_dot_segments,
        expect: "400 or 404, or forwarded with the dot segments resolved",
    },
    Check {
        name: "chunk-ext-smuggling",
        finding: "a quoted chunk extension across a line end hides a second request",
        request: || {
            format!(
                "POST /public/upload HTTP/1.1\r\nHost: {QUIET_HOST}\r\nTransfer-Encoding: chunked\r\n\r\n\
                 0;a=\"\r\n\r\nGET /public/smuggled HTTP/1.1\r\nHost: {QUIET_HOST}\r\n\r\n\"\r\n\r\n"
            )
            .into_bytes()
        },
        verdict: |statuses, seen| {
            statuses.first() == Some(&400) && !seen.iter().any(|t| t.contains("smuggled"))
        },
        expect: "400, and the hidden request never reaches the backend",
    },
];

fn raw_get(target: &str) -> Vec<u8> {
    format!("GET {target} HTTP/1.1\r\nHost: {QUIET_HOST}\r\nConnection: close\r\n\r\n").into_bytes()
}

/// The quiet route serves `/public` only: `/admin` behind dot segments must
/// not reach its backend as written.
fn not_forwarded_with_dot_segments(statuses: &[u16], seen: &[String]) -> bool {
    let forwarded_raw = seen.iter().any(|t| {
        let t = t.to_ascii_lowercase();
        t.contains("/..") || t.contains("%2e%2e")
    });
    !statuses.is_empty() && !forwarded_raw
}

// ---------------------------------------------------------------------------
// The tenants' objects

const DOMAIN: &str = "example.net";
const QUIET_NS: &str = "quiet";
const QUIET_HOST: &str = "quiet.example.com";
const QUIET_PATH: &str = "/public/ping";
const BYSTANDER: &str = "bystander";
const HOSTILE: &str = "hostile";
const HOSTILE_NS: &str = "tenant-hostile";
const HOSTILE_ZONE: &str = "hostile.lb.example.net";
const HOSTILE_GATEWAY: &str = "gw";
/// The hostile tenant's Service: its endpoints are never ready, so no
/// hostile request leaves the proxy.
const HOSTILE_SINK: &str = "sink";
const OPS_NS: &str = "hostile-ops";
const OPS_ZONE: &str = "ops.example.com";
/// The Gateway API CRDs' bounds on one HTTPRoute: 16 hostnames, and at
/// most 128 matches over all rules (16 rules, 64 per rule).
const MAX_ROUTE_HOSTNAMES: usize = 16;
const RULES_PER_ROUTE: usize = 8;
const MATCHES_PER_RULE: usize = 15;

/// What the attacks' objects point at.
struct World {
    h2c_backend: SocketAddr,
    closed_port: u16,
}

enum PathMatch {
    Regex(String),
    Prefix(String),
}

fn path_match(m: &PathMatch) -> Value {
    let (ty, value) = match m {
        PathMatch::Regex(v) => ("RegularExpression", v),
        PathMatch::Prefix(v) => ("PathPrefix", v),
    };
    json!({"path": {"type": ty, "value": value}})
}

fn gateway(namespace: &str, name: &str, hostname: &str) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"gatewayClassName": "teapot", "listeners": [
            {"name": "http", "protocol": "HTTP", "port": 80, "hostname": hostname},
        ]},
    })
}

fn http_route(
    namespace: &str,
    name: &str,
    gateway: &str,
    hostnames: &[String],
    rules: Vec<Value>,
) -> Value {
    json!({
        "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"parentRefs": [{"name": gateway}], "hostnames": hostnames, "rules": rules},
    })
}

fn route_rule(matches: Vec<Value>, service: &str) -> Value {
    json!({"matches": matches, "backendRefs": [{"name": service, "port": 80}]})
}

/// `total` path matches on `hostnames`, in as many HTTPRoutes of the
/// hostile tenant as the CRDs' bound on matches per route needs, plus the
/// tenant's Gateway and its Service.
fn hostile_routes(
    prefix: &str,
    hostnames: &[String],
    total: usize,
    each: impl Fn(usize) -> PathMatch,
) -> Vec<Value> {
    let per_route = RULES_PER_ROUTE * MATCHES_PER_RULE;
    let matches: Vec<Value> = (0..total).map(|i| path_match(&each(i))).collect();
    matches
        .chunks(per_route)
        .enumerate()
        .map(|(r, route)| {
            let rules = route
                .chunks(MATCHES_PER_RULE)
                .map(|m| route_rule(m.to_vec(), HOSTILE_SINK))
                .collect();
            http_route(
                HOSTILE_NS,
                &format!("{prefix}-{r}"),
                HOSTILE_GATEWAY,
                hostnames,
                rules,
            )
        })
        .collect()
}

/// The hostile tenant before any attack: its Tenant, Gateway and a Service
/// whose one endpoint is not ready.
fn hostile_base() -> Vec<Value> {
    vec![
        tenant(HOSTILE, "10.66.0.0/16"),
        gateway(HOSTILE_NS, HOSTILE_GATEWAY, &format!("*.{HOSTILE_ZONE}")),
        service(HOSTILE_NS, HOSTILE_SINK, None),
        slice(
            HOSTILE_NS,
            HOSTILE_SINK,
            "sink-1",
            8080,
            &["10.66.0.1".to_string()],
            false,
        ),
    ]
}

/// `slices` EndpointSlices of 1,000 ready endpoints (the default
/// `maxEndpointsPerSlice`), one Service each, which no route names.
fn bulk_endpoints(slices: usize) -> Vec<Value> {
    let mut docs = Vec::new();
    for s in 0..slices {
        let name = format!("bulk-{s}");
        docs.push(service(HOSTILE_NS, &name, None));
        let addresses: Vec<String> = (0..1000)
            .map(|e| format!("10.66.{}.{}", (s * 4 + e / 250) % 256, e % 250 + 1))
            .collect();
        docs.push(slice(HOSTILE_NS, &name, &name, 8080, &addresses, true));
    }
    docs
}

/// `routes` HTTPRoutes of 16 rules, each with request and response header
/// modifiers at the CRDs' bounds (16 set, 16 add, 16 remove).
fn filter_routes(routes: usize) -> Vec<Value> {
    let modifier = |kind: &str| {
        let entries = |verb: &str| -> Vec<Value> {
            (0..16)
                .map(|h| json!({"name": format!("x-{verb}-{h}"), "value": format!("{kind}-{h}")}))
                .collect()
        };
        let remove: Vec<String> = (0..16).map(|h| format!("x-remove-{h}")).collect();
        json!({"set": entries("set"), "add": entries("add"), "remove": remove})
    };
    (0..routes)
        .map(|r| {
            let rules = (0..16)
                .map(|i| {
                    json!({
                        "matches": [path_match(&PathMatch::Prefix(format!("/f{i}")))],
                        "filters": [
                            {"type": "RequestHeaderModifier", "requestHeaderModifier": modifier("req")},
                            {"type": "ResponseHeaderModifier", "responseHeaderModifier": modifier("resp")},
                        ],
                        "backendRefs": [{"name": HOSTILE_SINK, "port": 80}],
                    })
                })
                .collect();
            let hosts: Vec<String> = (0..MAX_ROUTE_HOSTNAMES)
                .map(|h| format!("f{r}-{h}.{HOSTILE_ZONE}"))
                .collect();
            http_route(
                HOSTILE_NS,
                &format!("filters-{r}"),
                HOSTILE_GATEWAY,
                &hosts,
                rules,
            )
        })
        .collect()
}

/// An operator namespace standing for the hostile tenant's nodes: a
/// Service on 127.0.0.1:`port` (a tenant may not name loopback) and the
/// HTTPRoute to it.
fn ops_backend(name: &str, app_protocol: Option<&str>, port: u16) -> Vec<Value> {
    vec![
        gateway(OPS_NS, "ops", &format!("*.{OPS_ZONE}")),
        service(OPS_NS, name, app_protocol),
        slice(
            OPS_NS,
            name,
            &format!("{name}-1"),
            port,
            &["127.0.0.1".to_string()],
            true,
        ),
        http_route(
            OPS_NS,
            name,
            "ops",
            &[format!("{name}.{OPS_ZONE}")],
            vec![route_rule(
                vec![path_match(&PathMatch::Prefix("/".into()))],
                name,
            )],
        ),
    ]
}

fn quiet_docs(echo: SocketAddr) -> Vec<Value> {
    vec![
        gateway(QUIET_NS, "quiet", QUIET_HOST),
        service(QUIET_NS, "web", None),
        slice(
            QUIET_NS,
            "web",
            "web-1",
            echo.port(),
            &["127.0.0.1".to_string()],
            true,
        ),
        http_route(
            QUIET_NS,
            "web",
            "quiet",
            &[QUIET_HOST.to_string()],
            vec![route_rule(
                vec![path_match(&PathMatch::Prefix("/public".into()))],
                "web",
            )],
        ),
    ]
}

/// The bystander tenant: one Ingress whose path is `version`'s (a
/// one-line change between versions).
fn bystander_docs(version: usize) -> Vec<Value> {
    let ns = format!("tenant-{BYSTANDER}");
    vec![
        tenant(BYSTANDER, "10.77.0.0/24"),
        service(&ns, "app", None),
        slice(&ns, "app", "app-1", 8080, &["10.77.0.1".to_string()], false),
        json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "app", "namespace": ns},
            "spec": {"ingressClassName": "teapot", "rules": [{"http": {"paths": [
                {"path": format!("/v{version}"), "pathType": "Prefix",
                 "backend": {"service": {"name": "app", "port": {"name": "http"}}}},
            ]}}]},
        }),
    ]
}

/// A 7 KiB path to the host of the stalling matches.
fn stall_request(_: &World, _: u64) -> HostileRequest {
    HostileRequest {
        proto: Proto::Http1,
        host: format!("stall.{HOSTILE_ZONE}"),
        target: stall_path(7 * 1024),
    }
}

/// A path of `len` bytes of `a` and `b` (a fixed pseudo-random mix), every
/// `a` a place where `[\s\S]*a[\s\S]{K}` may start; its last 61 bytes are
/// `b`, so no match with K up to 60 succeeds.
fn stall_path(len: usize) -> String {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut path = String::with_capacity(len);
    path.push('/');
    while path.len() < len - 61 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        path.push(if x & 1 == 0 { 'a' } else { 'b' });
    }
    while path.len() < len {
        path.push('b');
    }
    path
}

// ---------------------------------------------------------------------------
// One attack

/// The quiet tenant's latencies of one phase.
#[derive(Default)]
struct Latencies {
    /// From each request's scheduled start (not its actual send, so a
    /// stalled connection's waiting requests count) to its answer.
    samples: Vec<Duration>,
    /// Requests still waiting when the phase was cut off, counted at the
    /// time they had waited.
    cut_off: usize,
    errors: usize,
}

impl Latencies {
    fn summary(&self) -> Value {
        let mut v = self.samples.clone();
        v.sort();
        let ms = |q: f64| percentile(&v, q).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3);
        json!({
            "requests": v.len(), "cut_off": self.cut_off, "errors": self.errors,
            "p50_ms": ms(0.5), "p99_ms": ms(0.99), "max_ms": ms(1.0),
        })
    }

    fn p99_ms(&self) -> f64 {
        let mut v = self.samples.clone();
        v.sort();
        percentile(&v, 0.99).map_or(f64::NAN, |d| d.as_secs_f64() * 1e3)
    }
}

async fn run_attack(plan: &Plan, attack: &Attack) -> Result<Value> {
    let echo = EchoServer::start(EchoIdentity::new(QUIET_NS, "", "web", "web-1")).await?;
    let h2c_backend = start_h2c_huge_head(1 << 20).await?;
    let closed_port = closed_port().await?;
    let world = World {
        h2c_backend,
        closed_port,
    };
    let manifests = Manifests::new("teapot-hostile-")?;
    manifests.write("quiet.yaml", &quiet_docs(echo.addr()))?;
    manifests.write("bystander.yaml", &bystander_docs(0))?;
    manifests.write("hostile.yaml", &hostile_base())?;
    let args: Vec<String> = ["--threads", &plan.threads.to_string(), "--h2c"]
        .map(String::from)
        .to_vec();
    // Freed memory goes back at once, so RSS shows what the proxy keeps.
    let env = [("MIMALLOC_PURGE_DELAY", "0")];
    let echo_log = std::env::var_os("HOSTILE_LOG").is_some();
    let mut proxy =
        ManifestsProxy::start(&plan.teapot, &manifests.dir, DOMAIN, &args, &env, echo_log).await?;
    let (mut generation, _) = proxy.wait_generation_within(0, plan.reload_bound).await?;
    wait_quiet_served(&proxy).await?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_before = proxy.rss();
    let routes_before = proxy.metric("teapot_routes").await;

    let mut version = 1;
    let recompile_before =
        bystander_changes(plan, &proxy, &manifests, &mut generation, &mut version).await?;
    let quiet_before = quiet_loop(plan, proxy.http).await;

    // The attack's objects: write, wait for the snapshot, let it settle.
    let files = (attack.objects)(&world, plan.scale);
    let compiles = proxy.metric("teapot_snapshot_compile_seconds_sum").await;
    let written = Instant::now();
    let mut bytes = 0;
    let mut objects = 0;
    for (name, docs) in &files {
        bytes += manifests.write(name, docs)?;
        objects += docs.len();
    }
    let load = wait_settled(&proxy, generation, plan.reload_bound, written).await;
    let (load_ms, load_compile_ms) = match load {
        Ok((g, took)) => {
            generation = g;
            let compile = proxy.metric("teapot_snapshot_compile_seconds_sum").await - compiles;
            (took.as_secs_f64() * 1e3, compile * 1e3)
        }
        Err(e) => {
            eprintln!("  the attack's objects did not load: {e:#}");
            (f64::NAN, f64::NAN)
        }
    };
    let peak_after_load = proxy.peak_rss();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let rss_after = proxy.rss();
    let routes_after = proxy.metric("teapot_routes").await;
    let problems = proxy.metric("teapot_manifest_problems").await;
    let recompile_after =
        bystander_changes(plan, &proxy, &manifests, &mut generation, &mut version).await?;

    // The quiet tenant again, the hostile requests running beside it.
    let log_before = proxy.log.counts();
    let hostile = HostileLoop::start(attack, &world, proxy.http);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let quiet_during = quiet_loop(plan, proxy.http).await;
    let hostile = hostile.stop().await;
    let log_after = proxy.log.counts();
    let peak_end = proxy.peak_rss();
    proxy.stop().await;
    echo.stop().await;

    let mib = |b: u64| b as f64 / (1 << 20) as f64;
    let rss_added = mib(rss_after.saturating_sub(rss_before));
    let ratio = quiet_during.p99_ms() / quiet_before.p99_ms();
    let median = |v: &[f64]| teapot_benches::stats::median(v.iter().copied());
    let recompile_ms = median(&recompile_after.iter().map(|r| r.0).collect::<Vec<_>>());
    let hostile_requests = hostile.sent.max(1) as f64;
    let result = json!({
        "name": attack.name,
        "finding": attack.finding,
        "objects": objects,
        "json_bytes": bytes,
        "routes_before": routes_before,
        "routes_after": routes_after,
        "manifest_problems": problems,
        "load_ms": load_ms,
        "load_compile_ms": load_compile_ms,
        "rss_before_mib": mib(rss_before),
        "rss_after_mib": mib(rss_after),
        "rss_added_mib": rss_added,
        "peak_rss_after_load_mib": mib(peak_after_load),
        "peak_rss_end_mib": mib(peak_end),
        "bystander_recompile_before": changes_json(&recompile_before),
        "bystander_recompile_after": changes_json(&recompile_after),
        "quiet_before": quiet_before.summary(),
        "quiet_during": quiet_during.summary(),
        "quiet_p99_ratio": ratio,
        "hostile": hostile.summary(),
        "log_lines_per_hostile_request": (log_after.0 - log_before.0) as f64 / hostile_requests,
        "log_warnings_per_hostile_request": (log_after.1 - log_before.1) as f64 / hostile_requests,
        "log_bytes_per_hostile_request": (log_after.2 - log_before.2) as f64 / hostile_requests,
        "goals": {
            "quiet_p99_within_2x": ratio <= GOAL_P99_RATIO,
            "rss_added_under_64_mib": rss_added < GOAL_RSS_MIB,
            "recompile_under_100_ms": recompile_ms < GOAL_RECOMPILE_MS,
        },
    });
    eprintln!("  {result}");
    Ok(result)
}

fn changes_json(changes: &[(f64, f64)]) -> Value {
    let compile: Vec<f64> = changes.iter().map(|c| c.0).collect();
    let swap: Vec<f64> = changes.iter().map(|c| c.1).collect();
    json!({
        "compile_ms": compile,
        "change_to_swap_ms": swap,
        "compile_ms_median": teapot_benches::stats::median(compile.iter().copied()),
        "change_to_swap_ms_median": teapot_benches::stats::median(swap.iter().copied()),
    })
}

/// Waits for a generation above `above`, then until no reload has
/// followed for 500 ms (several files make several reloads): the last
/// generation and when it was first seen, from `since`.
async fn wait_settled(
    proxy: &ManifestsProxy,
    above: u64,
    bound: Duration,
    since: Instant,
) -> Result<(u64, Duration)> {
    let (mut g, _) = proxy.wait_generation_within(above, bound).await?;
    let mut seen = since.elapsed();
    let mut quiet_since = Instant::now();
    while quiet_since.elapsed() < Duration::from_millis(500) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let now = proxy.generation().await;
        if now != g {
            g = now;
            seen = since.elapsed();
            quiet_since = Instant::now();
        }
    }
    Ok((g, seen))
}

/// The bystander's one-line change, `plan.changes` times: (compile ms as
/// the proxy measured it, ms from the file's rename to the new snapshot,
/// the watcher's quiet period included).
async fn bystander_changes(
    plan: &Plan,
    proxy: &ManifestsProxy,
    manifests: &Manifests,
    generation: &mut u64,
    version: &mut usize,
) -> Result<Vec<(f64, f64)>> {
    let mut out = Vec::new();
    for _ in 0..plan.changes {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let sum = proxy.metric("teapot_snapshot_compile_seconds_sum").await;
        let count = proxy.metric("teapot_snapshot_compile_seconds_count").await;
        manifests.write("bystander.yaml", &bystander_docs(*version))?;
        *version += 1;
        let (g, took) = match proxy
            .wait_generation_within(*generation, plan.reload_bound)
            .await
        {
            Ok(r) => r,
            Err(e) => {
                eprintln!("  bystander change not served: {e:#}");
                out.push((f64::NAN, f64::NAN));
                continue;
            }
        };
        *generation = g;
        let compiles = proxy.metric("teapot_snapshot_compile_seconds_count").await - count;
        let compile = (proxy.metric("teapot_snapshot_compile_seconds_sum").await - sum) * 1e3;
        // More than one compile: only their mean is known.
        out.push((compile / compiles.max(1.0), took.as_secs_f64() * 1e3));
    }
    Ok(out)
}

async fn wait_quiet_served(proxy: &ManifestsProxy) -> Result<()> {
    let started = Instant::now();
    loop {
        let req = Request::get(QUIET_HOST, QUIET_PATH);
        if let Ok(resp) = teapot_testkit::client::send(proxy.http, &Transport::Plain, &req).await
            && resp.status == 200
        {
            return Ok(());
        }
        if started.elapsed() > Duration::from_secs(60) {
            bail!("the quiet route is not served after 60 s");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// `plan.requests` quiet requests over `plan.concurrency` keep-alive
/// connections at `plan.rate` per second; cut off `plan.slack` after the
/// schedule's end.
async fn quiet_loop(plan: &Plan, addr: SocketAddr) -> Latencies {
    let per_worker = plan.requests.div_ceil(plan.concurrency);
    let interval = Duration::from_secs_f64(plan.concurrency as f64 / plan.rate as f64);
    let start = Instant::now() + Duration::from_millis(50);
    let deadline = start + interval * per_worker as u32 + plan.slack;
    let mut tasks = Vec::new();
    for w in 0..plan.concurrency {
        // Workers spread over one interval, not in lock step.
        let offset = interval.mul_f64(w as f64 / plan.concurrency as f64);
        tasks.push(tokio::spawn(async move {
            let mut out = Latencies::default();
            let mut conn: Option<Connection> = None;
            let req = Request::get(QUIET_HOST, QUIET_PATH);
            for i in 0..per_worker {
                let scheduled = start + offset + interval * i as u32;
                if scheduled >= deadline {
                    break;
                }
                tokio::time::sleep_until(scheduled.into()).await;
                let attempt = async {
                    if conn.is_none() {
                        conn = Some(Connection::open(addr, &Transport::Plain, Proto::Http1).await?);
                    }
                    let c = conn.as_mut().expect("opened");
                    c.send(&req).await
                };
                match tokio::time::timeout_at(deadline.into(), attempt).await {
                    Ok(Ok(resp)) if resp.status == 200 => out.samples.push(scheduled.elapsed()),
                    Ok(Ok(_)) => {
                        out.errors += 1;
                        out.samples.push(scheduled.elapsed());
                    }
                    Ok(Err(_)) => {
                        out.errors += 1;
                        conn = None;
                        out.samples.push(scheduled.elapsed());
                    }
                    Err(_) => {
                        // Cut off: this request and every later one
                        // scheduled before the deadline waited until now.
                        for j in i..per_worker {
                            let s = start + offset + interval * j as u32;
                            if s >= deadline {
                                break;
                            }
                            out.cut_off += 1;
                            out.samples.push(deadline.saturating_duration_since(s));
                        }
                        break;
                    }
                }
            }
            out
        }));
    }
    let mut all = Latencies::default();
    for t in tasks {
        if let Ok(l) = t.await {
            all.samples.extend(l.samples);
            all.cut_off += l.cut_off;
            all.errors += l.errors;
        }
    }
    all
}

/// The hostile requests, sent until stopped.
struct HostileLoop {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    stats: Arc<HostileStats>,
    started: Instant,
}

#[derive(Default)]
struct HostileStats {
    sent: AtomicU64,
    answered: AtomicU64,
    errors: AtomicU64,
    statuses: StatusCounts,
    slowest_us: AtomicU64,
    total_us: AtomicU64,
    /// The first failure, as the client saw it.
    first_error: std::sync::OnceLock<String>,
}

/// Answers by status class.
#[derive(Default)]
struct StatusCounts([AtomicU64; 6]);

impl StatusCounts {
    fn add(&self, status: u16) {
        let class = usize::from(status / 100).min(5);
        self.0[class].fetch_add(1, Ordering::Relaxed);
    }

    fn json(&self) -> Value {
        let names = ["other", "1xx", "2xx", "3xx", "4xx", "5xx"];
        let mut m = serde_json::Map::new();
        for (n, c) in names.iter().zip(&self.0) {
            let c = c.load(Ordering::Relaxed);
            if c > 0 {
                m.insert((*n).into(), c.into());
            }
        }
        m.into()
    }
}

struct HostileResult {
    sent: u64,
    summary: Value,
}

impl HostileResult {
    fn summary(&self) -> Value {
        self.summary.clone()
    }
}

impl HostileLoop {
    fn start(attack: &Attack, world: &World, addr: SocketAddr) -> HostileLoop {
        let stats = Arc::new(HostileStats::default());
        let counter = Arc::new(AtomicUsize::new(0));
        let interval = (attack.rate > 0)
            .then(|| Duration::from_secs_f64(attack.concurrency as f64 / attack.rate as f64));
        let mut tasks = Vec::new();
        for _ in 0..attack.concurrency {
            let requests: Vec<HostileRequest> =
                (0..256).map(|n| (attack.request)(world, n)).collect();
            let (stats, counter) = (stats.clone(), counter.clone());
            tasks.push(tokio::spawn(async move {
                let mut conn: Option<Connection> = None;
                let mut next = Instant::now();
                loop {
                    if let Some(every) = interval {
                        tokio::time::sleep_until(next.into()).await;
                        next += every;
                    }
                    let n = counter.fetch_add(1, Ordering::Relaxed);
                    let r = &requests[n % requests.len()];
                    let req = Request::get(&r.host, &r.target).proto(r.proto);
                    stats.sent.fetch_add(1, Ordering::Relaxed);
                    let sent = Instant::now();
                    let result = async {
                        if conn.is_none() {
                            conn = Some(Connection::open(addr, &Transport::Plain, r.proto).await?);
                        }
                        conn.as_mut().expect("opened").send(&req).await
                    };
                    match tokio::time::timeout(Duration::from_secs(60), result).await {
                        Ok(Ok(resp)) => {
                            stats.answered.fetch_add(1, Ordering::Relaxed);
                            stats.statuses.add(resp.status);
                        }
                        failed => {
                            let why = match failed {
                                Ok(Err(e)) => e.to_string(),
                                _ => "no answer in 60 s".to_string(),
                            };
                            let _ = stats.first_error.set(why);
                            stats.errors.fetch_add(1, Ordering::Relaxed);
                            conn = None;
                        }
                    }
                    let us = sent.elapsed().as_micros() as u64;
                    stats.total_us.fetch_add(us, Ordering::Relaxed);
                    stats.slowest_us.fetch_max(us, Ordering::Relaxed);
                }
            }));
        }
        HostileLoop {
            tasks,
            stats,
            started: Instant::now(),
        }
    }

    async fn stop(self) -> HostileResult {
        for t in &self.tasks {
            t.abort();
        }
        for t in self.tasks {
            let _ = t.await;
        }
        let s = &self.stats;
        let (sent, answered, errors) = (
            s.sent.load(Ordering::Relaxed),
            s.answered.load(Ordering::Relaxed),
            s.errors.load(Ordering::Relaxed),
        );
        let done = (answered + errors).max(1);
        HostileResult {
            sent,
            summary: json!({
                "seconds": self.started.elapsed().as_secs_f64(),
                "sent": sent,
                "answered": answered,
                "errors_or_timeouts": errors,
                "unanswered_at_stop": sent.saturating_sub(answered + errors),
                "first_error": s.first_error.get(),
                "statuses": s.statuses.json(),
                // Of the requests that finished.
                "mean_ms": s.total_us.load(Ordering::Relaxed) as f64 / done as f64 / 1e3,
                "slowest_ms": s.slowest_us.load(Ordering::Relaxed) as f64 / 1e3,
            }),
        }
    }
}

// ---------------------------------------------------------------------------
// The correctness checks

async fn run_checks(plan: &Plan, wanted: &dyn Fn(&str) -> bool) -> Result<Vec<Value>> {
    let echo = EchoServer::start(EchoIdentity::new(QUIET_NS, "", "web", "web-1")).await?;
    let manifests = Manifests::new("teapot-hostile-")?;
    manifests.write("quiet.yaml", &quiet_docs(echo.addr()))?;
    let args: Vec<String> = ["--threads", &plan.threads.to_string()]
        .map(String::from)
        .to_vec();
    let echo_log = std::env::var_os("HOSTILE_LOG").is_some();
    let mut proxy =
        ManifestsProxy::start(&plan.teapot, &manifests.dir, DOMAIN, &args, &[], echo_log).await?;
    proxy.wait_generation_within(0, plan.reload_bound).await?;
    wait_quiet_served(&proxy).await?;
    let mut out = Vec::new();
    for check in CHECKS.iter().filter(|c| wanted(c.name)) {
        let seen_before = echo.targets().len();
        let request = (check.request)();
        let answer = raw_exchange(proxy.http, &request).await;
        // The backend may still be reading what was forwarded.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let seen: Vec<String> = echo.targets().into_iter().skip(seen_before).collect();
        let statuses = statuses(&answer);
        let pass = (check.verdict)(&statuses, &seen);
        let r = json!({
            "name": check.name,
            "finding": check.finding,
            "expect": check.expect,
            "statuses": statuses,
            "backend_saw": seen,
            "pass": pass,
        });
        eprintln!("  check {r}");
        out.push(r);
    }
    proxy.stop().await;
    echo.stop().await;
    Ok(out)
}

/// Sends `request` and reads until the proxy closes or 3 s pass.
async fn raw_exchange(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut received = Vec::new();
    let Ok(mut tcp) = TcpStream::connect(addr).await else {
        return received;
    };
    if tcp.write_all(request).await.is_err() {
        return received;
    }
    let _ = tokio::time::timeout(Duration::from_secs(3), async {
        let mut buf = [0u8; 8192];
        loop {
            match tcp.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => received.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    received
}

/// The status of every HTTP/1.1 response head in `bytes`.
fn statuses(bytes: &[u8]) -> Vec<u16> {
    let text = String::from_utf8_lossy(bytes);
    let mut out = Vec::new();
    let mut at = 0;
    while let Some(i) = text[at..].find("HTTP/1.1 ") {
        let start = at + i + "HTTP/1.1 ".len();
        if let Some(code) = text.get(start..start + 3).and_then(|c| c.parse().ok()) {
            out.push(code);
        }
        at = start;
    }
    out
}

// ---------------------------------------------------------------------------
// Hostile backends

/// A port nothing listens on: bound, then released.
async fn closed_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").await?;
    Ok(l.local_addr()?.port())
}

/// An h2c server that answers every stream with a response head of about
/// `head_bytes` (HPACK literals, no Huffman, in CONTINUATION frames of
/// 16 KiB) and no body.
async fn start_h2c_huge_head(head_bytes: usize) -> Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    let block: Arc<Vec<u8>> = Arc::new(huge_header_block(head_bytes));
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let block = block.clone();
            tokio::spawn(async move {
                let _ = serve_h2c(tcp, &block).await;
            });
        }
    });
    Ok(addr)
}

fn huge_header_block(bytes: usize) -> Vec<u8> {
    // `:status: 200` from the static table, then literals without indexing.
    let mut block = vec![0x88];
    let value = "v".repeat(4000);
    let mut i = 0;
    while block.len() < bytes {
        let name = format!("x-big-{i}");
        block.push(0x00);
        hpack_length(&mut block, name.len());
        block.extend_from_slice(name.as_bytes());
        hpack_length(&mut block, value.len());
        block.extend_from_slice(value.as_bytes());
        i += 1;
    }
    block
}

async fn serve_h2c(mut tcp: TcpStream, block: &[u8]) -> std::io::Result<()> {
    use teapot_testkit::h2frames::{
        ACK, CONTINUATION, END_HEADERS, END_STREAM, GOAWAY, HEADERS, PING, SETTINGS,
    };
    const MAX_FRAME: usize = 16 * 1024;
    let mut preface = [0u8; 24];
    tcp.read_exact(&mut preface).await?;
    tcp.write_all(&frame(SETTINGS, 0, 0, &[])).await?;
    loop {
        let mut head = [0u8; 9];
        tcp.read_exact(&mut head).await?;
        let len = (usize::from(head[0]) << 16) | (usize::from(head[1]) << 8) | usize::from(head[2]);
        let (kind, flags) = (head[3], head[4]);
        let stream = u32::from_be_bytes([head[5], head[6], head[7], head[8]]) & 0x7fff_ffff;
        let mut payload = vec![0u8; len];
        tcp.read_exact(&mut payload).await?;
        match kind {
            SETTINGS if flags & ACK == 0 => tcp.write_all(&frame(SETTINGS, ACK, 0, &[])).await?,
            PING if flags & ACK == 0 => tcp.write_all(&frame(PING, ACK, 0, &payload)).await?,
            GOAWAY => return Ok(()),
            HEADERS => {
                let mut out = Vec::with_capacity(block.len() + block.len() / MAX_FRAME * 9 + 9);
                let chunks: Vec<&[u8]> = block.chunks(MAX_FRAME).collect();
                for (i, chunk) in chunks.iter().enumerate() {
                    let last = if i + 1 == chunks.len() {
                        END_HEADERS
                    } else {
                        0
                    };
                    if i == 0 {
                        out.extend(frame(HEADERS, END_STREAM | last, stream, chunk));
                    } else {
                        out.extend(frame(CONTINUATION, last, stream, chunk));
                    }
                }
                tcp.write_all(&out).await?;
            }
            _ => {}
        }
    }
}

// ---------------------------------------------------------------------------
// The table

fn print_table(attacks: &[Value], checks: &[Value]) {
    let f = |v: &Value| v.as_f64().map_or("-".to_string(), |x| format!("{x:.1}"));
    println!(
        "\n| attack | quiet p99 before (ms) | quiet p99 during (ms) | ratio (goal <= 2x) | quiet cut off | RSS added (MiB, goal < 64) | load (ms) | bystander recompile (ms, goal < 100) before -> with | hostile req: sent, mean ms | log lines / hostile req |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for a in attacks {
        if let Some(e) = a.get("error") {
            println!("| {} | error: {e} |", a["name"].as_str().unwrap_or("?"));
            continue;
        }
        println!(
            "| {} | {} | {} | {:.2}x | {} | {} | {} | {} -> {} | {}, {} | {:.2} |",
            a["name"].as_str().unwrap_or("?"),
            f(&a["quiet_before"]["p99_ms"]),
            f(&a["quiet_during"]["p99_ms"]),
            a["quiet_p99_ratio"].as_f64().unwrap_or(f64::NAN),
            a["quiet_during"]["cut_off"],
            f(&a["rss_added_mib"]),
            f(&a["load_ms"]),
            f(&a["bystander_recompile_before"]["compile_ms_median"]),
            f(&a["bystander_recompile_after"]["compile_ms_median"]),
            a["hostile"]["sent"],
            f(&a["hostile"]["mean_ms"]),
            a["log_lines_per_hostile_request"]
                .as_f64()
                .unwrap_or(f64::NAN),
        );
    }
    if !checks.is_empty() {
        println!("\n| check | statuses | expect | result |\n|---|---|---|---|");
        for c in checks {
            println!(
                "| {} | {} | {} | {} |",
                c["name"].as_str().unwrap_or("?"),
                c["statuses"],
                c["expect"].as_str().unwrap_or(""),
                if c["pass"] == true { "PASS" } else { "FAIL" }
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn routes_stay_within_the_crd_bounds() {
        let world = World {
            h2c_backend: "127.0.0.1:1".parse().unwrap(),
            closed_port: 1,
        };
        for attack in ATTACKS {
            for (_, docs) in (attack.objects)(&world, 1) {
                for d in docs.iter().filter(|d| d["kind"] == "HTTPRoute") {
                    let rules = d["spec"]["rules"].as_array().unwrap();
                    let matches: usize = rules
                        .iter()
                        .map(|r| r["matches"].as_array().map_or(0, Vec::len))
                        .sum();
                    assert!(rules.len() <= 16, "{}", attack.name);
                    assert!(matches <= 128, "{}: {matches} matches", attack.name);
                    assert!(
                        d["spec"]["hostnames"].as_array().unwrap().len() <= MAX_ROUTE_HOSTNAMES
                    );
                }
            }
        }
    }

    #[test]
    fn stall_path_never_matches_and_has_the_length() {
        let p = stall_path(7 * 1024);
        assert_eq!(p.len(), 7 * 1024);
        assert!(p[p.len() - 61..].bytes().all(|b| b == b'b'));
        assert!(p.bytes().filter(|&b| b == b'a').count() > 3000);
    }

    #[test]
    fn statuses_lists_every_response_head() {
        let s = statuses(b"HTTP/1.1 200 OK\r\n\r\nHTTP/1.1 400 Bad Request\r\n\r\n");
        assert_eq!(s, [200, 400]);
    }
}
