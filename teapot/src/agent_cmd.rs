//! `teapot agent`: the tenant-cluster agent (docs/agent.md). Watches the
//! tenant cluster (in-cluster service account or a kubeconfig) and writes
//! sanitized copies into the tenant's namespace on the LB cluster (a
//! kubeconfig whose credentials reach only that namespace).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use teapot_api::lease::LeaseOptions;
use teapot_controller::{AgentConfig, Health, Metrics};
use teapot_sync::Mode;

#[derive(clap::Args, Debug)]
pub(crate) struct AgentArgs {
    /// Kubeconfig of the LB cluster (credentials for the tenant's namespace there only).
    #[arg(long, value_name = "FILE", env = "TEAPOT_LB_KUBECONFIG")]
    lb_kubeconfig: PathBuf,
    /// The tenant's namespace on the LB cluster (tenant-<cluster>).
    #[arg(long, value_name = "NS", env = "TEAPOT_LB_NAMESPACE")]
    lb_namespace: String,
    /// Kubeconfig of the tenant cluster (default: KUBECONFIG, ~/.kube/config, else the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    tenant_kubeconfig: Option<PathBuf>,
    /// Endpoint addresses: "nodeport" (node InternalIPs and NodePorts) or "pod" (pod IPs); a Service's teapot.dev/endpoints annotation overrides it.
    #[arg(long, default_value = "nodeport", value_parser = parse_mode)]
    mode: Mode,
    /// Full resync and garbage-collection period, in seconds.
    #[arg(long, default_value_t = 300)]
    resync_seconds: u64,
    /// Least time between two writes of one mirrored EndpointSlice, in milliseconds.
    #[arg(long, default_value_t = 500)]
    min_write_interval_ms: u64,
    /// Do not create IngressClass "teapot" (it must then exist, made by the cluster admin).
    #[arg(long)]
    no_install_class: bool,
    /// Admin listener: /healthz, /readyz, /metrics.
    #[arg(long, default_value = "127.0.0.1:9081", value_parser = crate::listen_addr::listener)]
    admin: String,
    /// Namespace of the leader-election Lease in the tenant cluster (default: POD_NAMESPACE, else the service account's namespace, else teapot-system).
    #[arg(long, value_name = "NS", env = "POD_NAMESPACE")]
    lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "teapot-agent")]
    lease_name: String,
    /// Run without leader election (a single replica; two would both write).
    #[arg(long)]
    no_leader_election: bool,
}

/// The namespace the agent runs in, for its Lease.
fn own_namespace(flag: Option<&str>) -> String {
    flag.map(str::to_string)
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_string())
        })
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "teapot-system".into())
}

fn parse_mode(s: &str) -> Result<Mode, String> {
    s.parse()
}

pub(crate) async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &Default::default())
                .await
                .with_context(|| format!("kubeconfig {}", path.display()))?
        }
        None => kube::Config::infer().await.context(
            "no tenant cluster: give --tenant-kubeconfig, set KUBECONFIG or run in a pod",
        )?,
    };
    kube::Client::try_from(config).context("building a Kubernetes client")
}

pub(crate) async fn run_agent(args: AgentArgs) -> anyhow::Result<()> {
    let tenant = client(args.tenant_kubeconfig.as_deref()).await?;
    let lb = client(Some(&args.lb_kubeconfig)).await?;
    let mut config = AgentConfig::new(tenant, lb, args.lb_namespace.clone());
    config.mode = args.mode;
    config.resync = Duration::from_secs(args.resync_seconds.max(1));
    config.min_write_interval = Duration::from_millis(args.min_write_interval_ms);
    config.install_class = !args.no_install_class;
    config.instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
    if !args.no_leader_election {
        config.lease = Some(LeaseOptions::new(
            own_namespace(args.lease_namespace.as_deref()),
            args.lease_name.clone(),
        ));
    }
    let metrics = Metrics::new()?;
    let health = Arc::new(Health::default());
    let listener = tokio::net::TcpListener::bind(&args.admin)
        .await
        .with_context(|| format!("binding the admin listener {}", args.admin))?;
    let admin_addr = listener.local_addr()?;
    println!("{{\"event\":\"listening\",\"admin\":\"{admin_addr}\"}}");
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let admin = tokio::spawn(teapot_controller::admin::run(
        listener,
        metrics.clone(),
        health.clone(),
        stopped.clone(),
    ));
    tracing::info!(lb_namespace = %args.lb_namespace, mode = %args.mode, admin = %admin_addr, "teapot agent starting");
    let mut agent = tokio::spawn(teapot_controller::run(config, metrics, health, stopped));
    // The agent ends on its own only on a fatal error (such as an
    // IngressClass owned by another controller).
    let result = tokio::select! {
        r = &mut agent => r,
        _ = crate::shutdown_signal() => {
            tracing::info!("shutting down");
            let _ = stop.send(true);
            agent.await
        }
    };
    let result = result.context("the agent task failed")?;
    let _ = stop.send(true);
    let _ = admin.await;
    result.context("teapot agent")?;
    Ok(())
}
