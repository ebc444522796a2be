//! `teapot capi` (docs/capi.md): a highly available API-server
//! endpoint, on the shared L4 fleet, for every Cluster API cluster that
//! asks for one, before any of its machines exists.
//!
//! Runs in the management cluster. For each `Cluster` annotated
//! [`OPT_IN_ANNOTATION`]`: "true"` it keeps, in the LB cluster:
//!
//! - a selector-less `type: LoadBalancer` Service of class `teapot.dev/lb`,
//!   port 6443 ([`endpoint::service`]); once the fleet writes its address
//!   into `status.loadBalancer`, that address becomes the Cluster's
//!   `spec.controlPlaneEndpoint`, which is what bare-metal and
//!   private-cloud infrastructure providers wait for;
//! - one EndpointSlice following the control-plane Machines' InternalIPs
//!   ([`endpoint::slice`]): a Machine that starts deleting leaves it at
//!   once, so a rolling upgrade sends no new connection to a node being
//!   drained.
//!
//! A finalizer on the Cluster removes both (and so frees the address) once
//! its control plane is gone; a condition ([`reconcile::CONDITION`]) and
//! Events on the Cluster say where the endpoint stands.
//!
//! Follows the agent's shape (`teapot-controller`): one [`Error`], a
//! [`Context`], a controller-rs reconcile with an error policy that backs
//! off, server-side apply under field manager [`endpoint::MANAGER`], leader
//! election on a Lease ([`teapot_api::lease`]) so only one replica writes,
//! and the agent's admin listener ([`serve_admin`]).

pub mod endpoint;
pub mod objects;
pub mod reconcile;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef};
use kube::runtime::{WatchStreamExt, watcher};
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use teapot_api::lease::{LeaseOptions, while_leading};
use teapot_controller::Health;
use teapot_controller::admin::stopped;
use teapot_sync::{APP_MANAGED_BY_LABEL, Failures, Listed};
use tokio::sync::watch;

use crate::endpoint::{ClusterKey, MANAGER};
use crate::objects::{CLUSTER_NAME_LABEL, CONTROL_PLANE_LABEL, CapiVersion};

/// `"true"` on a Cluster: give it an endpoint on the fleet. Outside
/// `teapot.dev/`, whose annotations are the allowlist the LB cluster's
/// webhook enforces; a Cluster is never copied there.
pub const OPT_IN_ANNOTATION: &str = "capi.teapot.dev/control-plane-endpoint";
/// On a Cluster: the LB-cluster namespace of its Service, one of
/// [`Config::lb_namespaces`] (default: the first).
pub const LB_NAMESPACE_ANNOTATION: &str = "capi.teapot.dev/lb-namespace";
/// On opted-in Clusters: the Service and slice go before the Cluster does.
pub const FINALIZER: &str = "capi.teapot.dev/endpoint";

/// The one error type of `teapot capi`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("JSON: {0}")]
    Json(#[from] serde_json::Error),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
}

/// How `teapot capi` runs.
#[derive(Clone)]
pub struct Config {
    /// The management cluster: Clusters and Machines.
    pub management: Client,
    /// The LB cluster: the Services and EndpointSlices (the same client
    /// when both are one cluster).
    pub lb: Client,
    /// LB-cluster namespaces the Services may go to; the first is the
    /// default. An operator namespace (the fleet trusts its endpoints) or
    /// a tenant namespace (its Tenant's pool, quotas and nodeCIDRs apply;
    /// docs/capi.md, "Where the Service goes").
    pub lb_namespaces: Vec<String>,
    pub version: CapiVersion,
    /// The Service's port, and so `controlPlaneEndpoint.port`.
    pub endpoint_port: u16,
    /// The port kube-apiserver listens on on each control-plane Machine.
    pub apiserver_port: u16,
    /// Full resync period.
    pub resync: Duration,
    /// This replica's name in Events.
    pub instance: Option<String>,
    /// Leader election on a Lease in the LB cluster; `None`: this process
    /// is the only one and always leads.
    pub lease: Option<LeaseOptions>,
}

impl Config {
    pub fn new(management: Client, lb: Client, lb_namespace: impl Into<String>) -> Config {
        Config {
            management,
            lb,
            lb_namespaces: vec![lb_namespace.into()],
            version: CapiVersion::V1Beta2,
            endpoint_port: 6443,
            apiserver_port: 6443,
            resync: Duration::from_secs(300),
            instance: None,
            lease: None,
        }
    }
}

/// Prometheus metrics (prefix `teapot_capi_`).
#[derive(Clone, Debug)]
pub struct Metrics {
    pub registry: Registry,
    /// Reconciles by result (`ok`, `error`).
    pub reconciles: IntCounterVec,
    /// Writes to the LB cluster by kind (apply and delete).
    pub lb_writes: IntCounterVec,
    /// Writes to Clusters: finalizer, `controlPlaneEndpoint`, condition.
    pub cluster_writes: IntCounter,
    /// 1 while this replica holds the lease (or runs without one).
    pub leader: IntGauge,
}

impl Metrics {
    pub fn new() -> Result<Metrics, Error> {
        let registry = Registry::new_custom(Some("teapot_capi".into()), None)?;
        let reconciles = IntCounterVec::new(
            Opts::new("reconciles_total", "Cluster reconciles by result"),
            &["result"],
        )?;
        let lb_writes = IntCounterVec::new(
            Opts::new("lb_writes_total", "Writes to the LB cluster by kind"),
            &["kind"],
        )?;
        let cluster_writes = IntCounter::new(
            "cluster_writes_total",
            "Writes to Clusters (finalizer, controlPlaneEndpoint, condition)",
        )?;
        let leader = IntGauge::new(
            "leader",
            "1 while this replica holds the lease and reconciles",
        )?;
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(lb_writes.clone()))?;
        registry.register(Box::new(cluster_writes.clone()))?;
        registry.register(Box::new(leader.clone()))?;
        Ok(Metrics {
            registry,
            reconciles,
            lb_writes,
            cluster_writes,
            leader,
        })
    }
}

/// What the reconciler shares.
pub struct Context {
    pub config: Config,
    pub metrics: Metrics,
    /// Events on Clusters, in the management cluster.
    pub recorder: Recorder,
    pub clusters: ApiResource,
    pub machines: ApiResource,
    failures: Failures,
}

impl Context {
    pub fn new(config: Config, metrics: Metrics) -> Context {
        let recorder = Recorder::new(
            config.management.clone(),
            Reporter {
                controller: MANAGER.into(),
                instance: config.instance.clone(),
            },
        );
        Context {
            clusters: config.version.cluster(),
            machines: config.version.machine(),
            config,
            metrics,
            recorder,
            failures: Failures::default(),
        }
    }

    /// The reconcile key of a Cluster, for the controller's mappers.
    fn cluster_ref(&self, key: &ClusterKey) -> ObjectRef<DynamicObject> {
        ObjectRef::new_with(&key.name, self.clusters.clone()).within(&key.namespace)
    }
}

/// Serves `/healthz`, `/readyz` and `/metrics` (this crate's registry)
/// through the agent's admin listener until `shutdown` turns true.
pub async fn serve_admin(
    listener: tokio::net::TcpListener,
    metrics: &Metrics,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    // The agent's listener serves `registry` alone; its other metrics
    // are built and never registered there.
    let served = teapot_controller::Metrics {
        registry: metrics.registry.clone(),
        ..teapot_controller::Metrics::new()?
    };
    teapot_controller::admin::run(listener, served, health, shutdown).await;
    Ok(())
}

fn set_leading(health: &Health, metrics: &Metrics, leading: bool) {
    health.listed.store(false, Ordering::Release);
    health.leading.store(leading, Ordering::Release);
    metrics.leader.set(i64::from(leading));
}

/// Runs until `shutdown` resolves. Without a lease it leads at once; with
/// one it stands by until it holds the lease, reconciles while it renews
/// it, and stands by again (controller stopped) when a renewal fails, so
/// two replicas never write at once: the agent's protocol
/// (`teapot_controller::run`).
pub async fn run(
    config: Config,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), Error> {
    let (stop, stopping) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop.send(true);
    });
    let Some(options) = config.lease.clone() else {
        set_leading(&health, &metrics, true);
        lead(config, metrics.clone(), health.clone(), stopping).await;
        set_leading(&health, &metrics, false);
        return Ok(());
    };
    let client = config.lb.clone();
    while_leading(
        client,
        options,
        stopping,
        |on| set_leading(&health, &metrics, on),
        |lost| lead(config.clone(), metrics.clone(), health.clone(), lost),
    )
    .await;
    Ok(())
}

/// The leader's work until `shutdown` turns true: the Cluster controller,
/// woken by its Clusters, their control-plane Machines and their LB
/// Services' status.
async fn lead(
    config: Config,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) {
    let ctx = Arc::new(Context::new(config.clone(), metrics));
    let clusters = ctx.clusters.clone();

    let mut listed = Listed::default();
    let writer = reflector::store::Writer::new(clusters.clone());
    let store = writer.as_reader();
    let cluster_events = listed
        .track(reflector::reflector(
            writer,
            watcher(
                Api::<DynamicObject>::all_with(config.management.clone(), &clusters),
                watcher::Config::default(),
            ),
        ))
        .applied_objects();
    let ready_health = health.clone();
    tokio::spawn(async move {
        if listed.wait().await {
            ready_health.listed.store(true, Ordering::Release);
        }
    });

    let machine_ctx = ctx.clone();
    let machine_owner = move |machine: DynamicObject| {
        let name = machine.metadata.labels.as_ref()?.get(CLUSTER_NAME_LABEL)?;
        let key = ClusterKey::new(machine.metadata.namespace.clone()?, name.clone());
        Some(machine_ctx.cluster_ref(&key))
    };
    let service_ctx = ctx.clone();
    let service_owner = move |service: Service| {
        ClusterKey::of_lb_object(&service.metadata).map(|key| service_ctx.cluster_ref(&key))
    };
    let lb_services = futures::stream::select_all(config.lb_namespaces.iter().map(|ns| {
        watcher(
            Api::<Service>::namespaced(config.lb.clone(), ns),
            watcher::Config::default().labels(&format!("{APP_MANAGED_BY_LABEL}={MANAGER}")),
        )
        .touched_objects()
        .boxed()
    }));
    let resync = config.resync;
    let ticks = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some(((), ()))
    });
    let mut stop = shutdown.clone();
    let cluster_store = store.clone();
    let controller = Controller::for_stream_with(cluster_events, store, clusters)
        .watches_with(
            Api::<DynamicObject>::all_with(config.management.clone(), &ctx.machines),
            ctx.machines.clone(),
            watcher::Config::default().labels(CONTROL_PLANE_LABEL),
            machine_owner,
        )
        .watches_stream_with(lb_services, service_owner, ())
        .reconcile_all_on(ticks)
        .graceful_shutdown_on(async move { stopped(&mut stop).await })
        .run(reconcile::reconcile, reconcile::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "Cluster controller event");
            }
        });
    // Ends at once if stopped before the Clusters listed.
    let mut shutdown = shutdown;
    teapot_sync::stopping::until_stopped(controller, cluster_store, async move {
        stopped(&mut shutdown).await
    })
    .await;
}
