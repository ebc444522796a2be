//! `teapot capi`: API-server endpoints on the L4 fleet for Cluster API
//! clusters (docs/capi.md). Runs in the management cluster; writes
//! Services and EndpointSlices into the LB cluster (the same cluster
//! unless `--lb-kubeconfig` names another).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use teapot_api::lease::LeaseOptions;
use teapot_capi::objects::CapiVersion;
use teapot_capi::{Config, Metrics};
use teapot_controller::Health;
use teapot_source::kube::KubeConfig;

#[derive(clap::Args, Debug)]
pub(crate) struct CapiArgs {
    /// Kubeconfig of the management cluster (default: KUBECONFIG, ~/.kube/config, else the in-cluster service account).
    #[arg(long, value_name = "FILE")]
    kubeconfig: Option<PathBuf>,
    /// Kubeconfig of the LB cluster (default: the management cluster).
    #[arg(long, value_name = "FILE", env = "TEAPOT_LB_KUBECONFIG")]
    lb_kubeconfig: Option<PathBuf>,
    /// LB-cluster namespace for the Services (repeatable; the first is the default, the others may be named by a Cluster's capi.teapot.dev/lb-namespace annotation). Operator namespaces, not a tenant's.
    #[arg(
        long = "lb-namespace",
        value_name = "NS",
        default_value = "teapot-capi"
    )]
    lb_namespaces: Vec<String>,
    /// Cluster API version served by the management cluster: v1beta2 (Cluster API 1.11+) or v1beta1.
    #[arg(long, default_value = "v1beta2")]
    capi_version: CapiVersion,
    /// Port of the LB Service, written as controlPlaneEndpoint.port.
    #[arg(long, default_value_t = 6443)]
    endpoint_port: u16,
    /// Port kube-apiserver listens on on the control-plane machines.
    #[arg(long, default_value_t = 6443)]
    apiserver_port: u16,
    /// Full resync period, in seconds.
    #[arg(long, default_value_t = 300)]
    resync_seconds: u64,
    /// Admin listener: /healthz, /readyz, /metrics.
    #[arg(long, default_value = "127.0.0.1:9082", value_parser = crate::listen_addr::listener)]
    admin: String,
    /// Namespace of the leader-election Lease in the LB cluster (default: the first --lb-namespace).
    #[arg(long, value_name = "NS")]
    lease_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "teapot-capi")]
    lease_name: String,
    /// Run without leader election (a single replica; two would both write).
    #[arg(long)]
    no_leader_election: bool,
}

pub(crate) async fn run(args: CapiArgs) -> anyhow::Result<()> {
    let connect = |path: Option<PathBuf>| async move {
        KubeConfig::connect(path.as_deref(), Vec::new())
            .await
            .map(|k| k.client)
    };
    let management = connect(args.kubeconfig.clone())
        .await
        .context("the management cluster")?;
    let lb = match &args.lb_kubeconfig {
        Some(path) => connect(Some(path.clone()))
            .await
            .context("the LB cluster")?,
        None => management.clone(),
    };
    let mut config = Config::new(management, lb, args.lb_namespaces[0].clone());
    config.lb_namespaces = args.lb_namespaces.clone();
    config.version = args.capi_version;
    config.endpoint_port = args.endpoint_port;
    config.apiserver_port = args.apiserver_port;
    config.resync = Duration::from_secs(args.resync_seconds.max(1));
    config.instance = std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty());
    if !args.no_leader_election {
        config.lease = Some(LeaseOptions::new(
            args.lease_namespace
                .clone()
                .unwrap_or_else(|| args.lb_namespaces[0].clone()),
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
    let admin_metrics = metrics.clone();
    let admin_health = health.clone();
    let admin = tokio::spawn(async move {
        teapot_capi::serve_admin(listener, &admin_metrics, admin_health, stopped).await
    });
    tracing::info!(lb_namespaces = ?args.lb_namespaces, capi_version = %args.capi_version, admin = %admin_addr, "teapot capi starting");
    let result = teapot_capi::run(config, metrics, health, crate::shutdown_signal()).await;
    let _ = stop.send(true);
    admin.await.context("the admin listener task failed")??;
    result.context("teapot capi")?;
    Ok(())
}
