//! The tenant agent (`teapot agent`, docs/architecture.md, "Roles"): runs in a tenant
//! cluster and makes teapot its Ingress controller.
//!
//! - [`class`]: installs (or checks) IngressClass `teapot`.
//! - [`ingress`]: reconciles Ingresses of class `teapot` into the LB
//!   cluster ([`mirror`] builds the copies): server-side apply under field
//!   manager `teapot-agent`, a finalizer that removes the copies, the LB
//!   status copied back, webhook refusals turned into an Event and a
//!   condition.
//! - [`service`]: reconciles Services of `type: LoadBalancer` and class
//!   `teapot.dev/lb` (L4) into the LB cluster the same way, and copies the
//!   address the fleet allocated back.
//! - [`report`]: what both write back (status, conditions, Events) and
//!   their shared writes (finalizer, server-side apply).
//! - [`gateway`]: reconciles Gateways of class `teapot` and the routes
//!   attached to them into the LB cluster the same way ([`gateway_mirror`]
//!   builds the copies), when the tenant cluster serves the Gateway API.
//! - [`gc`]: deletes LB copies without a live source, at start, after each
//!   deletion and on every resync.
//! - the EndpointSlice mirror is the sync crate ([`teapot_sync`]).
//! - [`admin`]: `/healthz`, `/readyz`, `/metrics`.
//! - leader election: with [`AgentConfig::lease`], only the holder of a
//!   Lease in the tenant cluster runs all of the above; the other replicas
//!   stand by.
//!
//! Errors follow the controller-rs pattern: one [`Error`], `error_policy`
//! logs, counts and requeues with exponential backoff.

pub mod admin;
pub mod class;
pub mod gateway;
pub mod gateway_mirror;
pub mod gc;
pub mod headers_mirror;
pub mod ingress;
pub mod mirror;
pub mod nginx_refs;
pub mod report;
pub mod service;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::Api;
use kube::runtime::controller::{Config as ControllerConfig, Controller};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use prometheus::{IntCounter, IntCounterVec, IntGauge, Opts, Registry};
use serde_json::Value;
use teapot_api::lease::{LeaseOptions, while_leading};
use teapot_sync::stopping::until_stopped;
use teapot_sync::{AGENT, Listed, Mode, Shared, SyncConfig, SyncMetrics};
use tokio::sync::watch;

/// The agent's one error type, shared with its EndpointSlice half
/// (`teapot-sync`): the agent is these two crates.
pub use teapot_sync::Error;

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
    /// Create IngressClass `teapot` (and GatewayClass `teapot`) when it is
    /// missing.
    pub install_class: bool,
    /// Whether Gateways and routes are synced.
    pub gateway_api: GatewayApi,
    /// Least time between two writes of one LB EndpointSlice.
    pub min_write_interval: Duration,
    /// This replica's name in Events.
    pub instance: Option<String>,
    /// Leader election among replicas: a Lease in the tenant cluster.
    /// `None`: this process is the only one and always leads.
    pub lease: Option<LeaseOptions>,
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
            gateway_api: GatewayApi::Detect,
            min_write_interval: Duration::from_millis(500),
            instance: None,
            lease: None,
        }
    }
}

/// Whether the agent syncs Gateways and routes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GatewayApi {
    /// [`run`] asks the tenant cluster: on when it serves the Gateway API
    /// (its CRDs are installed), off otherwise. Anything that reads the
    /// config without [`run`] deciding sees it off.
    #[default]
    Detect,
    On,
    Off,
}

impl AgentConfig {
    /// Whether the Gateway API half runs (decided by [`run`]).
    pub fn gateway_api_on(&self) -> bool {
        self.gateway_api == GatewayApi::On
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
    /// 1 while this replica holds the lease (or runs without one).
    pub leader: IntGauge,
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
        let leader = IntGauge::new(
            "leader",
            "1 while this replica holds the agent's lease and reconciles",
        )?;
        registry.register(Box::new(leader.clone()))?;
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
            leader,
            sync,
        })
    }
}

/// The agent's one watch of each tenant kind that several controllers
/// read (and of the LB Services both halves read): every controller of
/// both halves reads these stores and is triggered by their changes, and
/// the reconcilers look referenced objects up here instead of asking the
/// API server on every reconcile.
#[derive(Clone)]
pub struct Watches {
    pub services: Shared<Service>,
    /// Certificates (`kubernetes.io/tls`).
    pub tls_secrets: Shared<Secret>,
    /// CA bundles and htpasswd users (`Opaque`).
    pub opaque_secrets: Shared<Secret>,
    pub config_maps: Shared<ConfigMap>,
    /// The LB Services the agent wrote.
    pub lb_services: Shared<Service>,
}

impl Watches {
    /// Starts the watches; `listed` learns when each has listed.
    pub fn start(config: &AgentConfig, listed: &mut Listed) -> Watches {
        let all = watcher::Config::default;
        let tenant = || config.tenant.clone();
        Watches {
            services: Shared::watch(Api::all(tenant()), all(), listed),
            tls_secrets: Shared::watch(
                Api::all(tenant()),
                all().fields("type=kubernetes.io/tls"),
                listed,
            ),
            opaque_secrets: Shared::watch(Api::all(tenant()), all().fields("type=Opaque"), listed),
            config_maps: Shared::watch(Api::all(tenant()), all(), listed),
            lb_services: Shared::watch(
                Api::namespaced(config.lb.clone(), &config.lb_namespace),
                teapot_sync::lb_copies(),
                listed,
            ),
        }
    }

    /// The tenant Secret `namespace/name` of a type the agent reads
    /// (`kubernetes.io/tls` or `Opaque`; any other type is not watched and
    /// counts as missing).
    pub fn secret(&self, namespace: &str, name: &str) -> Option<Arc<Secret>> {
        let key = ObjectRef::new(name).within(namespace);
        self.tls_secrets
            .store()
            .get(&key)
            .or_else(|| self.opaque_secrets.store().get(&key))
    }

    /// The tenant Service `namespace/name`.
    pub fn service(&self, namespace: &str, name: &str) -> Option<Arc<Service>> {
        self.services
            .store()
            .get(&ObjectRef::new(name).within(namespace))
    }

    /// Waits (up to 10 s) until the stores hold every tenant Service,
    /// watched Secret and ConfigMap as `tenant` lists them now: for callers
    /// that run a reconciler by hand (tests, benches) right after a change,
    /// where the controllers would have been triggered by the change itself.
    pub async fn caught_up(&self, tenant: &Client) -> Result<bool, Error> {
        async fn same<K>(store: &Store<K>, api: Api<K>, fields: &str) -> Result<bool, Error>
        where
            K: kube::Resource<DynamicType = ()>
                + Clone
                + std::fmt::Debug
                + serde::de::DeserializeOwned,
        {
            let listed = api
                .list(&kube::api::ListParams::default().fields(fields))
                .await?;
            Ok(listed.items.len() == store.state().len()
                && listed.items.iter().all(|o| {
                    store
                        .get(&ObjectRef::from_obj(o))
                        .is_some_and(|s| s.meta().resource_version == o.meta().resource_version)
                }))
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let all = Api::all(tenant.clone());
            let done = same(&self.services.store(), all, "").await?
                && same(
                    &self.tls_secrets.store(),
                    Api::all(tenant.clone()),
                    "type=kubernetes.io/tls",
                )
                .await?
                && same(
                    &self.opaque_secrets.store(),
                    Api::all(tenant.clone()),
                    "type=Opaque",
                )
                .await?
                && same(&self.config_maps.store(), Api::all(tenant.clone()), "").await?;
            if done || tokio::time::Instant::now() > deadline {
                return Ok(done);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// The tenant ConfigMap `namespace/name`.
    pub fn config_map(&self, namespace: &str, name: &str) -> Option<Arc<ConfigMap>> {
        self.config_maps
            .store()
            .get(&ObjectRef::new(name).within(namespace))
    }
}

/// What the Ingress reconciler shares.
pub struct Context {
    pub tenant: Client,
    pub lb: Client,
    pub config: AgentConfig,
    pub metrics: Metrics,
    pub recorder: Recorder,
    pub watches: Watches,
    /// What was last applied to the LB cluster, by kind and name: an
    /// unchanged object is not written again (cleared on every resync).
    applied: Mutex<HashMap<(String, String), Value>>,
    failures: teapot_sync::Failures,
}

impl Context {
    pub fn new(config: AgentConfig, metrics: Metrics, watches: Watches) -> Context {
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
            watches,
            applied: Mutex::new(HashMap::new()),
            failures: teapot_sync::Failures::default(),
        }
    }

    /// Forgets what was applied: the next reconciles write everything once.
    pub fn forget_applied(&self) {
        self.applied.lock().clear();
    }
}

/// Ingresses in `store` that reference `name` in `namespace` through
/// `refs`.
fn referencing(
    store: &Store<Ingress>,
    namespace: Option<String>,
    name: String,
    refs: fn(&Ingress) -> std::collections::BTreeSet<nginx_refs::TenantRef>,
) -> Vec<ObjectRef<Ingress>> {
    let named = (namespace.unwrap_or_default(), name);
    store
        .state()
        .iter()
        .filter(|i| refs(i).contains(&named))
        .map(|i| ObjectRef::from_obj(i.as_ref()))
        .collect()
}

/// What the admin listener reports.
#[derive(Debug, Default)]
pub struct Health {
    /// This replica holds the lease (or runs without one) and reconciles.
    pub leading: AtomicBool,
    /// As the leader: the tenant Ingresses and Services are listed.
    pub listed: AtomicBool,
}

impl Health {
    /// `/readyz`: a standby is ready (to take over; a rollout must not wait
    /// for it to lead), a leader once its listings are complete.
    pub fn ready(&self) -> bool {
        !self.leading.load(Ordering::Acquire) || self.listed.load(Ordering::Acquire)
    }

    /// The role for `/readyz` and logs.
    pub fn role(&self) -> &'static str {
        match (
            self.leading.load(Ordering::Acquire),
            self.listed.load(Ordering::Acquire),
        ) {
            (false, _) => "standby",
            (true, false) => "leader, listing",
            (true, true) => "leader",
        }
    }

    fn set_leading(&self, metrics: &Metrics, leading: bool) {
        self.listed.store(false, Ordering::Release);
        self.leading.store(leading, Ordering::Release);
        metrics.leader.set(i64::from(leading));
    }
}

/// Runs the agent until `shutdown` turns true. Without a lease it leads at
/// once; with one it stands by until it holds the lease, reconciles while
/// it renews it, and goes back to standing by (controllers stopped, caches
/// dropped) when a renewal fails, so two replicas never write at once
/// (the other can take the lease only after it expired).
pub async fn run(
    mut config: AgentConfig,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    if config.install_class {
        // Every replica checks: a class owned by another controller is
        // fatal wherever it is seen. Creating it twice is a harmless 409.
        class::ensure(&config.tenant).await?;
    }
    if config.gateway_api == GatewayApi::Detect {
        config.gateway_api = if gateway::probe(&config.tenant).await? {
            GatewayApi::On
        } else {
            tracing::warn!(
                "the tenant cluster does not serve the Gateway API (no gateway.networking.k8s.io CRDs): syncing Ingresses and Services only; restart the agent after installing them"
            );
            GatewayApi::Off
        };
    }
    if config.gateway_api_on() && config.install_class {
        class::ensure_gateway_class(&config.tenant).await?;
    }
    let Some(options) = config.lease.clone() else {
        health.set_leading(&metrics, true);
        return lead(config, metrics, health, shutdown).await;
    };
    let client = config.tenant.clone();
    let leading = while_leading(
        client,
        options,
        shutdown,
        |on| health.set_leading(&metrics, on),
        |lost| lead(config.clone(), metrics.clone(), health.clone(), lost),
    )
    .await;
    match leading {
        Some(Ok(result)) => result,
        Some(Err(e)) => {
            tracing::error!(error = %e, "the agent's controllers panicked");
            Ok(())
        }
        None => Ok(()),
    }
}

/// A primary watch for a controller whose listing `listed` tracks (instead
/// of the store's `wait_until_ready`; see [`Listed`]).
fn primary<K>(
    api: Api<K>,
    listed: &mut Listed,
) -> (
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
    Store<K>,
)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let (store, writer) = reflector::store();
    let stream = listed
        .track(reflector::reflector(
            writer,
            watcher(api, watcher::Config::default()),
        ))
        .applied_objects();
    (stream, store)
}

/// The leader's work until `shutdown` turns true: Ingress and L4 Service
/// controllers, EndpointSlice sync, periodic GC.
async fn lead(
    config: AgentConfig,
    metrics: Metrics,
    health: Arc<Health>,
    shutdown: watch::Receiver<bool>,
) -> Result<(), Error> {
    let mut listed = Listed::default();
    let watches = Watches::start(&config, &mut listed);
    let ctx = Arc::new(Context::new(
        config.clone(),
        metrics.clone(),
        watches.clone(),
    ));
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
    let (sync_watches, sync_listed, sync_stop) =
        (watches.clone(), listed.clone(), stop(shutdown.clone()));
    let sync_metrics = metrics.sync.clone();
    let sync = tokio::spawn(async move {
        teapot_sync::run_shared(
            sync_config,
            sync_metrics,
            &sync_watches.services,
            &sync_watches.lb_services,
            sync_listed,
            sync_stop,
        )
        .await;
    });

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

    let (ingresses, store) = primary(Api::<Ingress>::all(config.tenant.clone()), &mut listed);
    let ready_health = health.clone();
    tokio::spawn(async move {
        if listed.wait().await {
            ready_health.listed.store(true, Ordering::Release);
        }
    });
    let lb_ingresses = watcher(
        Api::<Ingress>::namespaced(config.lb.clone(), &config.lb_namespace),
        teapot_sync::lb_copies(),
    )
    .touched_objects();
    let (services_store, secrets_store, ca_secrets_store) =
        (store.clone(), store.clone(), store.clone());
    let config_maps_store = store.clone();
    let resync = config.resync;
    let ticks = |ctx: Arc<Context>| {
        futures::stream::unfold((), move |()| async move {
            tokio::time::sleep(resync).await;
            Some(((), ()))
        })
        .map(move |()| ctx.forget_applied())
    };
    let debounce = ControllerConfig::default().debounce(Duration::from_millis(20));
    let ingress_store = store.clone();
    let ingress_controller = Controller::for_stream(ingresses, store)
        .with_config(debounce.clone())
        .watches_stream(lb_ingresses, |lb: Ingress| ingress::lb_ingress_source(&lb))
        .watches_stream(watches.services.touched(), move |s: Service| {
            referencing(
                &services_store,
                s.namespace(),
                s.name_any(),
                mirror::referenced_services,
            )
        })
        .watches_stream(watches.tls_secrets.touched(), move |s: Secret| {
            referencing(
                &secrets_store,
                s.namespace(),
                s.name_any(),
                mirror::referenced_secrets,
            )
        })
        // proxy-ssl-secret's CA Secrets (Opaque, ca.crt alone): a change
        // reconciles the Ingresses naming one; nothing of them is kept.
        .watches_stream(watches.opaque_secrets.touched(), move |s: Secret| {
            referencing(
                &ca_secrets_store,
                s.namespace(),
                s.name_any(),
                mirror::referenced_secrets,
            )
        })
        // custom-headers' ConfigMaps: a change reconciles the Ingresses
        // naming one, which copy it again (crate::headers_mirror).
        .watches_stream(watches.config_maps.touched(), move |c: ConfigMap| {
            referencing(
                &config_maps_store,
                c.namespace(),
                c.name_any(),
                headers_mirror::referenced_config_maps,
            )
        })
        .reconcile_all_on(ticks(ctx.clone()))
        .graceful_shutdown_on(stop(shutdown.clone()))
        .run(ingress::reconcile, ingress::error_policy, ctx.clone())
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "Ingress controller event");
            }
        });
    let (gateway_ctx, gateway_stop) = (ctx.clone(), shutdown.clone());
    let service_store = watches.services.store();
    let service_controller =
        Controller::for_stream(watches.services.applied(), service_store.clone())
            .with_config(debounce)
            .watches_stream(watches.lb_services.touched(), |lb: Service| {
                service::lb_service_source(&lb)
            })
            .reconcile_all_on(ticks(ctx.clone()))
            .graceful_shutdown_on(stop(shutdown.clone()))
            .run(service::reconcile, service::error_policy, ctx)
            .for_each(|result| async move {
                if let Err(e) = result {
                    tracing::debug!(error = %e, "Service controller event");
                }
            });
    let gateway_api = async move {
        if config.gateway_api_on() {
            gateway::run_controllers(gateway_ctx, gateway_stop).await;
        }
    };
    // Each ends at once if stopped before its own watch listed
    // (teapot_sync::stopping).
    futures::future::join3(
        until_stopped(ingress_controller, ingress_store, stop(shutdown.clone())),
        until_stopped(service_controller, service_store, stop(shutdown)),
        gateway_api,
    )
    .await;
    gc_task.abort();
    let _ = sync.await;
    Ok(())
}
