//! `teapot webhook` (the admission webhook) and `teapot validate` (the same
//! rules over files, for admins and CI; with `--from ingress-nginx`, what
//! becomes of Ingresses written for ingress-nginx: crate::migrate_cmd).

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use ipnet::IpNet;
use teapot_model::manifests::load_dir;
use teapot_model::store::Store;
use teapot_webhook::offline::validate_text;
use teapot_webhook::{PolicyConfig, PolicyState, Validator, WebhookConfig};

/// Settings both subcommands share.
#[derive(clap::Args, Debug, Clone)]
pub(crate) struct PolicyArgs {
    /// Directory of manifests with the Tenants and the objects that already hold hosts and addresses (the proxy's manifests format); `teapot webhook` takes --kube instead in production.
    #[arg(long, env = "TEAPOT_MANIFESTS")]
    manifests: Option<PathBuf>,
    /// The operator's DOMAIN: tenants get INGRESS.CLUSTER.lb.DOMAIN.
    #[arg(long, env = "TEAPOT_DOMAIN")]
    domain: Option<String>,
    /// A range of the LB cluster itself (nodes, pods, services): never an endpoint. Repeatable.
    #[arg(long = "lb-cidr", value_name = "CIDR")]
    lb_cidrs: Vec<IpNet>,
}

impl PolicyArgs {
    fn policy(&self) -> anyhow::Result<PolicyConfig> {
        let domain = self.domain.as_deref().context(
            "give --domain DOMAIN (or TEAPOT_DOMAIN): tenants get INGRESS.CLUSTER.lb.DOMAIN",
        )?;
        Ok(PolicyConfig::new(domain, self.lb_cidrs.clone())?)
    }
}

#[derive(clap::Args, Debug)]
pub(crate) struct WebhookArgs {
    /// HTTPS listener.
    #[arg(long, default_value = "[::]:8443", value_parser = crate::listen_addr::socket_addr)]
    listen: SocketAddr,
    /// PEM certificate chain served to the API server (reloaded when it changes).
    #[arg(long, env = "TEAPOT_WEBHOOK_CERT")]
    cert: PathBuf,
    /// PEM private key (reloaded when it changes).
    #[arg(long, env = "TEAPOT_WEBHOOK_KEY")]
    key: PathBuf,
    #[command(flatten)]
    policy: PolicyArgs,
    #[command(flatten)]
    kube: crate::kube_args::KubeArgs,
    /// Seconds open connections get to finish after SIGTERM.
    #[arg(long, default_value_t = 10)]
    grace_period: u64,
    /// Reviews judged at once, on their own threads (0: the CPUs, at least 2).
    #[arg(long, default_value_t = 0)]
    review_workers: usize,
    /// Reviews of one tenant judged at once (0: half the workers); at most the workers less one, so one tenant's reviews never hold them all.
    #[arg(long, default_value_t = 0)]
    review_tenant_share: usize,
    /// Milliseconds a review may wait for a worker before it is refused with 429 (keep it below the webhook's timeoutSeconds).
    #[arg(long, default_value_t = 5000)]
    review_wait_ms: u64,
}

#[derive(clap::Args, Debug)]
pub(crate) struct ValidateArgs {
    /// File of Kubernetes YAML or JSON to check ("-" for stdin). Repeatable.
    #[arg(short = 'f', long = "file", required_unless_present = "cluster")]
    pub(crate) files: Vec<PathBuf>,
    #[command(flatten)]
    pub(crate) migration: crate::migrate_cmd::MigrationArgs,
    /// Judge every object as this tenant's (its CLUSTER): objects without a namespace go to the tenant's.
    #[arg(long)]
    tenant: Option<String>,
    #[command(flatten)]
    policy: PolicyArgs,
}

/// Runs the webhook until SIGTERM or SIGINT.
pub(crate) async fn run_webhook(args: WebhookArgs) -> anyhow::Result<()> {
    let policy = args.policy.policy()?;
    let kube = args.kube.connect(args.policy.manifests.as_deref()).await?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("cannot bind {}", args.listen))?;
    let addr = listener.local_addr()?;
    println!("{{\"event\":\"listening\",\"webhook\":\"{addr}\"}}");
    let manifests = args.policy.manifests.unwrap_or_default();
    let mut config = WebhookConfig::new(args.cert, args.key, manifests, policy);
    config.kube = kube;
    config.grace_period = Duration::from_secs(args.grace_period);
    if args.review_workers > 0 {
        config.pool.workers = args.review_workers;
        config.pool.share = args.review_workers / 2;
    }
    if args.review_tenant_share > 0 {
        config.pool.share = args.review_tenant_share;
    }
    config.pool.wait = Duration::from_millis(args.review_wait_ms);
    teapot_webhook::run(config, listener, crate::shutdown_signal()).await?;
    Ok(())
}

/// Prints every violation as `file: Kind ns/name: field: message` and
/// exits 1 when there is one.
pub(crate) async fn run_validate(args: ValidateArgs) -> anyhow::Result<()> {
    if args.migration.from.is_some() {
        return crate::migrate_cmd::run(&args.files, &args.migration).await;
    }
    let validator = Validator::new(args.policy.policy()?);
    let dir = args
        .policy
        .manifests
        .as_deref()
        .context("teapot validate needs --manifests DIR (the LB-cluster state)")?;
    let state = load_state(dir)?;
    let (mut objects, mut refused) = (0usize, 0usize);
    for file in &args.files {
        let (label, text) = crate::input::read_input(file)?;
        for report in validate_text(&validator, &state, &text, args.tenant.as_deref()) {
            objects += 1;
            for w in &report.verdict.warnings {
                eprintln!("{label}: {}: warning: {w}", report.object);
            }
            if !report.verdict.allowed {
                refused += 1;
                for v in &report.verdict.violations {
                    println!("{label}: {}: {v}", report.object);
                }
            }
        }
    }
    eprintln!("{objects} objects checked, {refused} refused");
    if refused > 0 {
        // Refusals are the answer, not an error of the tool: exit 1 like
        // a linter, without an error trace.
        use std::io::Write as _;
        let _ = std::io::stdout().flush();
        std::process::exit(1);
    }
    Ok(())
}

fn load_state(dir: &Path) -> anyhow::Result<PolicyState> {
    std::fs::read_dir(dir)
        .with_context(|| format!("cannot read the manifests directory {}", dir.display()))?;
    let loaded = load_dir(dir, &Store::default());
    for p in &loaded.problems {
        eprintln!("warning: skipped manifest: {p}");
    }
    Ok(PolicyState::from_store(
        &loaded.store,
        loaded.problems.len(),
    ))
}
