//! `teapot`: one binary, one subcommand per role.
//!
//! - `teapot proxy`: the data plane (`--manifests DIR` or `--kube`).
//! - `teapot demo`: the proxy on the embedded example with built-in echo
//!   backends, for a first look.
//! - `teapot echo`: the echo backend alone (tests, benchmarks, demos).
//! - `teapot webhook`: the LB cluster's admission webhook.
//! - `teapot validate`: the webhook's rules over files, offline; with
//!   `--from ingress-nginx`, what becomes of Ingresses moving to teapot.
//! - `teapot tenant add`: a new tenant's LB-cluster objects as YAML.
//! - `teapot agent`: the tenant-cluster agent (Ingress controller and
//!   EndpointSlice mirror).
//! - `teapot top`: a live per-tenant view of a proxy's admin endpoint.
//! - `teapot capi`: API-server endpoints on the fleet for Cluster API
//!   clusters (management cluster).

mod acme_args;
mod agent_cmd;
mod allocator;
mod alt_svc_args;
mod announce_args;
mod capi_cmd;
mod demo;
mod dns_args;
mod edge_args;
mod fleet_args;
mod input;
mod kube_args;
mod l4_args;
mod listen_addr;
mod migrate_cmd;
mod observe_args;
mod tenant_cmd;
mod top_cmd;
mod webhook_cmd;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context;
use clap::{Parser, Subcommand, ValueEnum};
use teapot_proxy::compile::CompileOptions;
use teapot_proxy::loops::proof::{ProofLimits, ProofTiming};
use teapot_proxy::plane::proxy::UpstreamOptions;
use teapot_proxy::server::{BoundAddrs, Http3};
use teapot_proxy::{Listeners, ProxyConfig};

#[derive(Parser, Debug)]
#[command(
    name = "teapot",
    version,
    about = "Shared load balancing for tenant Kubernetes clusters"
)]
struct Cli {
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "TEAPOT_LOG_FORMAT")]
    log_format: LogFormat,
    /// Threads: the async runtime's workers, and for `proxy` and `demo`
    /// also the serving threads and the L4 TCP event loops, each with its
    /// own listening sockets (0: one per core).
    #[arg(long, global = true, default_value_t = 0, env = "TEAPOT_THREADS")]
    threads: usize,
    #[command(subcommand)]
    command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    Text,
    Json,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve Ingresses from a directory of Kubernetes manifests or from the Kubernetes API.
    // Boxed: the proxy has by far the most flags (clippy: large_enum_variant).
    Proxy(Box<ProxyArgs>),
    /// Run the proxy on the embedded example with built-in echo backends.
    Demo(demo::DemoArgs),
    /// Run one echo backend (JSON description of each request).
    Echo(EchoArgs),
    /// Run the LB cluster's admission webhook (AdmissionReview v1 over HTTPS).
    Webhook(webhook_cmd::WebhookArgs),
    /// Check manifests against the webhook's rules offline, printing every violation.
    Validate(webhook_cmd::ValidateArgs),
    /// LB-cluster objects of a tenant (`tenant add CLUSTER`), for installs without the chart's `tenants:`.
    Tenant(tenant_cmd::TenantArgs),
    /// Run the tenant-cluster agent: mirror Ingresses and EndpointSlices to the LB cluster.
    Agent(agent_cmd::AgentArgs),
    /// Give Cluster API clusters an API-server endpoint on the L4 fleet (runs in the management cluster).
    Capi(capi_cmd::CapiArgs),
    /// Live per-tenant requests/s, errors and p99 of a proxy, from its admin endpoint.
    Top(top_cmd::TopArgs),
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct ListenArgs {
    /// Plain HTTP listener ("off" to disable).
    #[arg(long, default_value = "[::]:8080", value_parser = listen_addr::listener)]
    pub(crate) http: String,
    /// HTTPS listener ("off" to disable).
    #[arg(long, default_value = "[::]:8443", value_parser = listen_addr::listener)]
    pub(crate) https: String,
    /// Admin listener: /healthz, /readyz, /metrics, /status (an IPv6 address bracketed or not: `fd00::1:9080`).
    #[arg(long, default_value = "127.0.0.1:9080", value_parser = listen_addr::listener)]
    pub(crate) admin: String,
}

#[derive(clap::Args, Debug)]
struct ProxyArgs {
    /// Directory of Kubernetes YAML (Ingress, IngressClass, Service, EndpointSlice, Secret, Tenant), watched for changes (or --kube).
    #[arg(long, env = "TEAPOT_MANIFESTS")]
    manifests: Option<PathBuf>,
    #[command(flatten)]
    kube: kube_args::KubeArgs,
    #[command(flatten)]
    status: kube_args::StatusArgs,
    #[command(flatten)]
    listen: ListenArgs,
    #[command(flatten)]
    tuning: TuningArgs,
    #[command(flatten)]
    edge: edge_args::EdgeArgs,
    // Boxed: the ACME flags would make `Command` lopsided (clippy).
    #[command(flatten)]
    acme: Box<acme_args::AcmeArgs>,
    #[command(flatten)]
    l4: Box<l4_args::L4Args>,
    #[command(flatten)]
    observe: Box<observe_args::ObserveArgs>,
    #[command(flatten)]
    announce: Box<announce_args::AnnounceArgs>,
    #[command(flatten)]
    dns: Box<dns_args::DnsArgs>,
    #[command(flatten)]
    fleet: fleet_args::FleetArgs,
    #[command(flatten)]
    alt_svc: alt_svc_args::AltSvcArgs,
}

#[derive(clap::Args, Debug, Clone)]
pub(crate) struct TuningArgs {
    /// Address written to Ingress status (IP or hostname, repeatable). Default: the HTTP listener's IP, or 127.0.0.1 when it listens on all addresses.
    #[arg(long = "status-address")]
    status_addresses: Vec<String>,
    /// Seconds in-flight requests get to finish after SIGTERM.
    #[arg(long, default_value_t = 25)]
    grace_period: u64,
    /// Cleartext HTTP/2 (prior knowledge) on the plain listener, told from HTTP/1 by the connection's first bytes: the default; the flag is kept for older command lines.
    #[arg(long)]
    h2c: bool,
    /// Serve only HTTP/1.1 on the plain listener: a client's HTTP/2 preface is refused as a malformed HTTP/1 request (ingress-nginx's use-http2: "false").
    #[arg(long, conflicts_with = "h2c")]
    no_h2c: bool,
    /// HTTP/3 (QUIC) on UDP at the HTTPS listener's address and port, with the same certificates, routes and policies as HTTPS over TCP, advertised with Alt-Svc while it answers (--http3-advertise): the default. Without this flag a UDP port that cannot be bound leaves HTTPS over TCP alone (logged); with it the start fails.
    #[arg(long)]
    http3: bool,
    /// Serve no HTTP/3: no UDP socket, no Alt-Svc.
    #[arg(long, conflicts_with = "http3")]
    no_http3: bool,
    /// HTTP/3: QUIC handshakes in flight on this replica past which a client that has not proven its address gets a Retry first (one round trip; stateless, so a flood of spoofed Initial packets holds no connection slot). 0: every client.
    #[arg(long, default_value_t = teapot_proxy::plane::h3::DEFAULT_RETRY_ABOVE)]
    http3_retry_above: usize,
    /// HTTP/3: file holding the fleet's QUIC secret (at least 16 bytes, the same on every replica): the stateless reset and Retry token keys are derived from it, so a replica that gets another's connection after a path change resets it at once and the client reconnects, instead of waiting for its idle timeout. Without it each process draws its own keys.
    #[arg(long, value_name = "FILE")]
    quic_key_file: Option<PathBuf>,
    /// Redirect plain HTTP for an Ingress's TLS hosts to HTTPS (308) when neither ssl-redirect annotation says, as ingress-nginx's ssl-redirect defaults to true; false serves them over HTTP unless an Ingress sets ssl-redirect: "true".
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    ssl_redirect_default: bool,
    /// Upstream connect timeout, milliseconds.
    #[arg(long, default_value_t = 3000)]
    connect_timeout_ms: u64,
    /// Upstream read/write timeout, seconds.
    #[arg(long, default_value_t = 60)]
    upstream_timeout: u64,
    /// Idle upstream connections kept for reuse.
    #[arg(long, default_value_t = 1024)]
    upstream_pool_size: usize,
    /// External authentication (auth-url): sub-requests in flight per
    /// tenant (and for the operator namespaces together) per replica;
    /// past it a request gets 503 at once.
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..))]
    auth_concurrency: u32,
    /// External authentication (auth-url): milliseconds from connecting
    /// to the answer's head; past it the request gets 500.
    #[arg(long, default_value_t = 5000, value_parser = clap::value_parser!(u64).range(1..))]
    auth_timeout_ms: u64,
    /// DOMAIN of the hostnames assigned to tenant Ingresses (INGRESS.CLUSTER.lb.DOMAIN).
    #[arg(long, default_value = "localhost", env = "TEAPOT_DOMAIN")]
    domain: String,
    /// The LB cluster's own address ranges (repeatable): never a tenant endpoint.
    #[arg(long = "lb-cidr")]
    lb_cidrs: Vec<ipnet::IpNet>,
    /// DNS server for custom-domain proofs, IP:PORT (repeatable; default: the system's).
    #[arg(long = "dns-server")]
    dns_servers: Vec<SocketAddr>,
    /// Seconds between checks of a custom domain that is not proven yet.
    #[arg(long, default_value_t = 15)]
    proof_recheck_pending: u64,
    /// Seconds between re-checks of a proven custom domain.
    #[arg(long, default_value_t = 300)]
    proof_recheck_proven: u64,
    /// Seconds a custom domain keeps routing after its proof disappears.
    #[arg(long, default_value_t = 3600)]
    proof_grace: u64,
    /// Custom-domain checks in flight at once, across tenants.
    #[arg(long, default_value_t = 16)]
    proof_concurrency: usize,
    /// Custom-domain checks in flight at once for one tenant (the rest of the pool stays free for the others).
    #[arg(long, default_value_t = 4)]
    proof_tenant_concurrency: usize,
    /// Seconds one custom-domain check may take, every lookup included.
    #[arg(long, default_value_t = 10)]
    proof_timeout: u64,
}

#[derive(clap::Args, Debug)]
struct EchoArgs {
    #[arg(long, default_value = "127.0.0.1:3000")]
    listen: SocketAddr,
    /// What the echo reports as its service (and namespace/ingress/pod).
    #[arg(long, default_value = "echo")]
    service: String,
    #[arg(long, default_value = "default")]
    namespace: String,
    #[arg(long, default_value = "")]
    ingress: String,
    #[arg(long, default_value = "echo-0")]
    pod: String,
}

fn main() -> anyhow::Result<()> {
    allocator::tune();
    teapot_proxy::plane::serving::on_quiet(allocator::return_freed_memory);
    let cli = Cli::parse();
    init_logging(cli.log_format);
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    runtime
        .enable_all()
        .thread_name("teapot")
        .on_thread_park(teapot_proxy::plane::serving::parked);
    if cli.threads > 0 {
        runtime.worker_threads(cli.threads);
    }
    let runtime = runtime.build().context("cannot start the async runtime")?;
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Proxy(args) => run_proxy(*args, cli.threads).await,
            Command::Demo(args) => demo::run(args, cli.threads).await,
            Command::Echo(args) => run_echo(args).await,
            Command::Webhook(args) => webhook_cmd::run_webhook(args).await,
            Command::Validate(args) => webhook_cmd::run_validate(args).await,
            Command::Tenant(args) => tenant_cmd::run(args),
            Command::Agent(args) => agent_cmd::run_agent(args).await,
            Command::Capi(args) => capi_cmd::run(args).await,
            Command::Top(args) => top_cmd::run(args).await,
        }
    });
    // Connections still open after the grace period are dropped here.
    runtime.shutdown_timeout(Duration::from_secs(1));
    result
}

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        tracing_subscriber::EnvFilter::new("info,pingora_core=warn,pingora_proxy=warn")
    });
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    // Library lines a bad client can trigger per request are paced
    // (teapot_proxy::plane::logflood); teapot's own lines never are.
    let noise = teapot_proxy::plane::logflood::ClientNoise(
        teapot_proxy::plane::logflood::NoiseState::global().clone(),
    );
    let layer = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let layer = match format {
        LogFormat::Json => layer.json().boxed(),
        LogFormat::Text => layer.boxed(),
    };
    tracing_subscriber::registry()
        .with(layer.with_filter(noise))
        .with(filter)
        .init();
}

fn optional(addr: &str) -> Option<&str> {
    (addr != "off").then_some(addr)
}

impl TuningArgs {
    pub(crate) fn http3(&self) -> Http3 {
        match (self.no_http3, self.http3) {
            (true, _) => Http3::Off,
            (false, true) => Http3::Required,
            (false, false) => Http3::WhereFree,
        }
    }
}

/// Binds the listeners and prints the one stdout line tools read.
pub(crate) fn bind(
    listen: &ListenArgs,
    dns: Option<SocketAddr>,
    http3: Http3,
) -> anyhow::Result<(Listeners, BoundAddrs)> {
    let mut listeners = Listeners::bind(
        optional(&listen.http),
        optional(&listen.https),
        &listen.admin,
    )?;
    listeners.bind_quic(optional(&listen.https), http3)?;
    listeners.dns = dns.map(teapot_dns::Sockets::bind).transpose()?;
    let addrs = listeners.addrs()?;
    let line = serde_line(&addrs);
    println!("{line}");
    Ok((listeners, addrs))
}

fn serde_line(addrs: &BoundAddrs) -> String {
    let field = |a: Option<SocketAddr>| a.map_or("null".to_string(), |a| format!("\"{a}\""));
    // "dns" and "http3" only when they listen: readers of the line before
    // they existed see the line they know.
    let dns = addrs
        .dns
        .map(|a| format!(",\"dns\":\"{a}\""))
        .unwrap_or_default();
    let http3 = addrs
        .http3
        .map(|a| format!(",\"http3\":\"{a}\""))
        .unwrap_or_default();
    format!(
        "{{\"event\":\"listening\",\"http\":{},\"https\":{},\"admin\":\"{}\"{dns}{http3}}}",
        field(addrs.http),
        field(addrs.https),
        addrs.admin
    )
}

pub(crate) fn proxy_config(
    manifests: PathBuf,
    tuning: &TuningArgs,
    addrs: &BoundAddrs,
) -> ProxyConfig {
    let mut config = ProxyConfig::new(manifests);
    let status_addresses = if tuning.status_addresses.is_empty() {
        let ip = addrs.http.or(addrs.https).map(|a| a.ip());
        vec![match ip {
            Some(ip) if !ip.is_unspecified() => ip.to_string(),
            _ => "127.0.0.1".to_string(),
        }]
    } else {
        tuning.status_addresses.clone()
    };
    config.compile = CompileOptions {
        status_addresses,
        domain: tuning.domain.to_ascii_lowercase(),
        lb_networks: tuning.lb_cidrs.clone(),
        ssl_redirect_default: tuning.ssl_redirect_default,
        ..CompileOptions::default()
    };
    config.dns_servers = tuning.dns_servers.clone();
    config.proof_timing = ProofTiming {
        recheck_pending: Duration::from_secs(tuning.proof_recheck_pending),
        recheck_proven: Duration::from_secs(tuning.proof_recheck_proven),
        grace: Duration::from_secs(tuning.proof_grace),
    };
    config.proof_limits = ProofLimits {
        concurrent: tuning.proof_concurrency.max(1),
        per_tenant: tuning.proof_tenant_concurrency.max(1),
        check_timeout: Duration::from_secs(tuning.proof_timeout.max(1)),
    };
    config.grace_period = Duration::from_secs(tuning.grace_period);
    config.h2c = tuning.h2c || !tuning.no_h2c;
    config.quic.retry_above = tuning.http3_retry_above;
    config.upstream_pool_size = tuning.upstream_pool_size;
    config.upstream = UpstreamOptions {
        connect_timeout: Duration::from_millis(tuning.connect_timeout_ms),
        read_timeout: Duration::from_secs(tuning.upstream_timeout),
        write_timeout: Duration::from_secs(tuning.upstream_timeout),
        auth: teapot_proxy::plane::traffic::auth::AuthLimits {
            timeout: Duration::from_millis(tuning.auth_timeout_ms),
            concurrency: tuning.auth_concurrency,
        },
        ..UpstreamOptions::default()
    };
    config
}

async fn run_proxy(args: ProxyArgs, threads: usize) -> anyhow::Result<()> {
    let mut kube = args.kube.connect(args.manifests.as_deref()).await?;
    let acme = args.acme.config(kube.is_some())?;
    if let Some(kube) = kube.as_mut() {
        kube.lease_namespace = args.status.lease_namespace().to_string();
    }
    let kube_status = kube.as_ref().and(args.status.options());
    let (listeners, addrs) = bind(&args.listen, args.dns.listen(), args.tuning.http3())?;
    let l4 = args.l4.config(kube.is_some());
    let mut config = proxy_config(args.manifests.unwrap_or_default(), &args.tuning, &addrs);
    config.serving_threads = threads;
    if let Some(path) = &args.tuning.quic_key_file {
        let secret =
            std::fs::read(path).with_context(|| format!("--quic-key-file {}", path.display()))?;
        config.quic.keys = Some(
            teapot_proxy::plane::quic_keys::QuicKeys::from_secret(&secret)
                .with_context(|| format!("--quic-key-file {}", path.display()))?,
        );
    }
    config.acme = acme;
    config.kube = kube;
    config.kube_status = kube_status;
    config.edge = args.edge.config();
    config.l4 = l4;
    config.observe = args.observe.config();
    config.fleet = args.fleet.config()?;
    config.alt_svc = args.alt_svc.config();
    config
        .compile
        .tenant_gates
        .global_counts
        .set_status(args.fleet.status_code());
    config.announce = args.announce.config().map_err(anyhow::Error::msg)?;
    config.dns = args
        .dns
        .config(&config.compile.domain, &config.compile.status_addresses)?;
    let wildcards = args
        .dns
        .acme_wildcard_zone(config.dns.as_ref(), config.acme.is_some())?;
    if let Some(acme) = config.acme.as_mut() {
        acme.wildcard_zone = wildcards;
    }
    teapot_proxy::run(config, listeners, shutdown_signal()).await?;
    Ok(())
}

async fn run_echo(args: EchoArgs) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind {}", args.listen))?;
    tracing::info!(addr = %listener.local_addr()?, "echo backend listening");
    let identity = teapot_echo::EchoIdentity {
        namespace: args.namespace,
        ingress: args.ingress,
        service: args.service,
        pod: args.pod,
    };
    teapot_echo::run(listener, identity, shutdown_signal()).await?;
    Ok(())
}

/// Resolves on SIGTERM or SIGINT.
pub(crate) async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        tracing::error!("cannot install signal handlers; stop the process with SIGKILL");
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}
