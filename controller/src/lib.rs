//! The tenant agent (`teapot agent`, DESIGN.md "Roles"): runs in a tenant
//! cluster and makes teapot its Ingress controller.
//!
//! - [`class`]: installs (or checks) IngressClass `teapot`.
//! - [`ingress`]: reconciles Ingresses of class `teapot` into the LB
//!   cluster ([`mirror`] builds the copies): server-side apply under field
//!   manager `teapot-agent`, a finalizer that removes the copies, the LB
//!   status copied back, webhook refusals turned into an Event and a
//!   condition.
//! - [`gc`]: deletes LB copies without a live source, at start, after each
//!   deletion and on every resync.
//! - the EndpointSlice mirror is the sync crate ([`teapot_sync`]).
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`.
//!
//! Errors follow the controller-rs pattern: one [`Error`], `error_policy`
//! logs, counts and requeues with exponential backoff.

pub mod admin;
pub mod class;
pub mod gc;
pub mod ingress;
pub mod mirror;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use prometheus::{IntCounter, IntCounterVec, Opts, Registry};
use serde_json::Value;
use teapot_sync::{AGENT, APP_MANAGED_BY_LABEL, Mode, SyncConfig, SyncMetrics};
use tokio::sync::watch;

/// One error type for the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("Kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    /// A tenant object teapot cannot mirror, with the field at fault.
    #[error("{object}: {field}: {message}")]
    Invalid {
        object: String,
        field: String,
        message: String,
    },
    #[error(
        "IngressClass {name} belongs to controller {controller:?}, not {expected}: delete it or run the agent with --no-install-class"
    )]
    ClassTaken {
        name: String,
        controller: String,
        expected: &'static str,
    },
    #[error("serializing an object: {0}")]
    Serialize(#[from] serde_json::Error),
    #[error("metrics: {0}")]
    Metrics(#[from] prometheus::Error),
    #[error("admin listener: {0}")]
    Io(#[from] std::io::Error),
}

/// How the agent runs.
#[derive(Clone)]
pub struct AgentConfig {
    pub tenant: Client,
    pub lb: Client,
    /// The tenant's namespace in the LB cluster (`tenant-<cluster>`).
    pub lb_namespace: String,
    pub mode: Mode,
    /// Full resync and GC period.
    pub resync: Duration,
    /// Create IngressClass `teapot` when it is missing.
    pub install_class: bool,
    /// Least time between two writes of one LB EndpointSlice.
    pub min_write_interval: Duration,
    /// This replica's name in Events.
    pub instance: Option<String>,
}

impl AgentConfig {
    pub fn new(tenant: Client, lb: Client, lb_namespace: impl Into<String>) -> AgentConfig {
        AgentConfig {
            tenant,
            lb,
            lb_namespace: lb_namespace.into(),
            mode: Mode::NodePort,
            resync: Duration::from_secs(300),
            install_class: true,
            min_write_interval: Duration::from_millis(500),
            instance: None,
        }
    }
}

/// Prometheus metrics of the agent (prefix `teapot_agent_`).
#[derive(Clone, Debug)]
pub struct Metrics {
    pub registry: Registry,
    /// Reconciles by kind and result.
    pub reconciles: IntCounterVec,
    /// Writes (apply and delete) to the LB cluster by kind.
    pub lb_writes: IntCounterVec,
    /// Writes to tenant objects (status, conditions).
    pub tenant_writes: IntCounter,
    /// Writes the LB cluster refused (webhook or validation).
    pub refusals: IntCounter,
    pub gc_deletions: IntCounter,
    pub sync: SyncMetrics,
}

impl Metrics {
    pub fn new() -> Result<Metrics, prometheus::Error> {
        let registry = Registry::new_custom(Some("teapot_agent".into()), None)?;
        let reconciles = IntCounterVec::new(
            Opts::new("reconciles_total", "Reconciles by kind and result"),
            &["kind", "result"],
        )?;
        let lb_writes = IntCounterVec::new(
            Opts::new("lb_writes_total", "Writes to the LB cluster by kind"),
            &["kind"],
        )?;
        let tenant_writes = IntCounter::new(
            "tenant_writes_total",
            "Status and condition writes to tenant objects",
        )?;
        let refusals = IntCounter::new("refusals_total", "Writes the LB cluster refused")?;
        let gc_deletions = IntCounter::new(
            "gc_deletions_total",
            "LB copies deleted for lack of a source",
        )?;
        for c in [&tenant_writes, &refusals, &gc_deletions] {
            registry.register(Box::new(c.clone()))?;
        }
        registry.register(Box::new(reconciles.clone()))?;
        registry.register(Box::new(lb_writes.clone()))?;
        let sync = SyncMetrics::new(&registry)?;
        Ok(Metrics {
            registry,
            reconciles,
            lb_writes,
            tenant_writes,
            refusals,
            gc_deletions,
            sync,
        })
    }
}

/// What the Ingress reconciler shares.
pub struct Context {
    pub tenant: Client,
    pub lb: Client,
    pub config: AgentConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    /// What was last applied to the LB cluster, by kind and name: an
    /// unchanged object is not written again (cleared on every resync).
    applied: Mutex<HashMap<(String, String), Value>>,
    failures: Mutex<HashMap<String, u32>>,
}

impl Context {
    pub fn new(config: AgentConfig, metrics: Metrics) -> Context {
        let recorder = Recorder::new(
            config.tenant.clone(),
            Reporter {
                controller: AGENT.into(),
                instance: config.instance.clone(),
            },
        );
        Context {
            tenant: config.tenant.clone(),
            lb: config.lb.clone(),
            config,
            metrics,
            recorder,
            applied: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
        }
    }

    /// Forgets what was applied: the next reconciles write everything once.
    pub fn forget_applied(&self) {
        lock(&self.applied).clear();
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Ingresses in `store` that reference `name` in `namespace` through
/// `refs`.
fn referencing(
    store: &Store<Ingress>,
    namespace: Option<String>,
    name: String,
    refs: fn(&Ingress) -> std::collections::BTreeSet<String>,
) -> Vec<ObjectRef<Ingress>> {
    store
        .state()
        .iter()
        .filter(|i| i.namespace() == namespace && refs(i).contains(&name))
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}

/// Runs the agent until `shutdown` turns true: IngressClass, Ingress
/// controller, EndpointSlice sync, periodic GC. `ready` turns true once
/// the tenant Ingresses are listed.
pub async fn run(
    config: AgentConfig,
    metrics: Metrics,
    ready: Arc<AtomicBool>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    if config.install_class {
        class::ensure(&config.tenant).await?;
    }
    let ctx = Arc::new(Context::new(config.clone(), metrics.clone()));
    let stop = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let mut sync_config = SyncConfig::new(
        config.tenant.clone(),
        config.lb.clone(),
        &config.lb_namespace,
    );
    sync_config.mode = config.mode;
    sync_config.resync = config.resync;
    sync_config.min_write_interval = config.min_write_interval;
    let sync = tokio::spawn(teapot_sync::run(
        sync_config,
        metrics.sync.clone(),
        stop(shutdown.clone()),
    ));

    let gc_ctx = ctx.clone();
    let mut gc_stop = shutdown.clone();
    let gc_task = tokio::spawn(async move {
        loop {
            // At start too: copies whose source went away while the agent
            // was down have no finalizer event to remove them.
            if let Err(e) = gc::collect(&gc_ctx).await {
                tracing::warn!(error = %e, "garbage collection failed; retrying at the next resync");
            }
            tokio::select! {
                _ = tokio::time::sleep(gc_ctx.config.resync) => {}
                _ = admin::stopped(&mut gc_stop) => return,
            }
        }
    });

    let lb_ingresses = watcher(
        Api::<Ingress>::namespaced(config.lb.clone(), &config.lb_namespace),
        watcher::Config::default().labels(&format!("{APP_MANAGED_BY_LABEL}={AGENT}")),
    )
    .touched_objects();
    let controller = Controller::new(
        Api::<Ingress>::all(config.tenant.clone()),
        watcher::Config::default(),
    )
    .with_config(ControllerConfig::default().debounce(Duration::from_millis(20)));
    let store = controller.store();
    let ready_store = store.clone();
    tokio::spawn(async move {
        if ready_store.wait_until_ready().await.is_ok() {
            ready.store(true, Ordering::Release);
        }
    });
    let (services_store, secrets_store) = (store.clone(), store.clone());
    let forget = ctx.clone();
    let resync = config.resync;
    let ticks = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some(((), ()))
    })
    .map(move |()| forget.forget_applied());
    controller
        .watches_stream(lb_ingresses, |lb: Ingress| ingress::lb_ingress_source(&lb))
        .watches(
            Api::<Service>::all(config.tenant.clone()),
            watcher::Config::default(),
            move |s: Service| {
                referencing(
                    &services_store,
                    s.namespace(),
                    s.name_any(),
                    mirror::referenced_services,
                )
            },
        )
        .watches(
            Api::<Secret>::all(config.tenant.clone()),
            watcher::Config::default().fields("type=kubernetes.io/tls"),
            move |s: Secret| {
                referencing(
                    &secrets_store,
                    s.namespace(),
                    s.name_any(),
                    mirror::referenced_secrets,
                )
            },
        )
        .reconcile_all_on(ticks)
        .graceful_shutdown_on(stop(shutdown))
        .run(ingress::reconcile, ingress::error_policy, ctx)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "controller event");
            }
        })
        .await;
    gc_task.abort();
    let _ = sync.await;
    Ok(())
}
