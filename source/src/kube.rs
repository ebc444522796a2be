//! The Kubernetes watch source: the production alternative to the
//! manifests directory (both feed the same store; docs/architecture.md).
//!
//! One [`kube::runtime::watcher`] per kind (Tenants, IngressClasses,
//! Ingresses, Services, EndpointSlices and `kubernetes.io/tls` Secrets, and
//! a second Secret watch for `Opaque` CA Secrets, of which only those with
//! a `ca.crt` are kept, that key alone), all
//! namespaces or one watcher per listed namespace, each with kube's default
//! backoff. Objects are watched as [`DynamicObject`]s, not typed: a typed
//! list fails as a whole on one undecodable object, and one bad object
//! must never hide the others. Each object then goes through the manifests
//! loader's own typed parse and validation ([`validate::parse_object`]);
//! one that fails becomes a [`Problem`] naming object and field, and the
//! store keeps its last good version, exactly as a bad document in a file.
//!
//! Consumers read a [`Loaded`] copy ([`KubeSource::snapshot`]) after a
//! change, coalesced by [`coalesced`] (a burst of events is one
//! recompile), and only after [`KubeSource::is_synced`]: every watcher has
//! finished its first list. Before that the proxy is not ready and the
//! webhook refuses everything.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use teapot_api::Tenant;
use teapot_api::admission::CA_SECRET_KEY;
use teapot_api::names::{CA_SECRET_TYPE, TLS_SECRET_TYPE};
use tokio::sync::watch;

use teapot_model::manifests::{Loaded, Problem};
use teapot_model::store::{Kind, NsName, Object, ObjectKey, Origin, SliceChange, Store};
use teapot_model::validate;

use crate::Error;

/// Label of every certificate Secret the ACME issuer writes; the Secret
/// watch leaves these out (they are not a tenant's certificates), and the
/// webhook refuses the label on a tenant's Secret.
pub const CERTIFICATE_LABEL: &str = "teapot.dev/acme-certificate";

/// How long the event stream must be quiet before consumers recompile.
pub const DEBOUNCE: Duration = Duration::from_millis(100);

/// `--lease-namespace` when neither it nor `POD_NAMESPACE` is set.
pub const DEFAULT_LEASE_NAMESPACE: &str = "teapot-system";

/// Where to watch.
#[derive(Clone)]
pub struct KubeConfig {
    pub client: kube::Client,
    /// Namespaces to watch the namespaced kinds in; empty: all namespaces.
    /// Cluster-scoped kinds (Tenant, IngressClass) are always watched whole.
    pub namespaces: Vec<String>,
    /// The proxy's own namespace (`--lease-namespace`): the Leases, and
    /// the ACME account and challenge tokens.
    pub lease_namespace: String,
}

impl std::fmt::Debug for KubeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeConfig")
            .field("namespaces", &self.namespaces)
            .field("lease_namespace", &self.lease_namespace)
            .finish_non_exhaustive()
    }
}

impl KubeConfig {
    /// All namespaces, read only.
    pub fn new(client: kube::Client) -> KubeConfig {
        KubeConfig {
            client,
            namespaces: Vec::new(),
            lease_namespace: DEFAULT_LEASE_NAMESPACE.into(),
        }
    }

    /// A client from `kubeconfig`, or else as kubectl finds one
    /// (`KUBECONFIG`, `~/.kube/config`, the in-cluster service account).
    pub async fn connect(
        kubeconfig: Option<&Path>,
        namespaces: Vec<String>,
    ) -> Result<KubeConfig, Error> {
        let config = match kubeconfig {
            Some(path) => {
                let file = kube::config::Kubeconfig::read_from(path)
                    .map_err(|e| Error::Kube(format!("{}: {e}", path.display())))?;
                kube::Config::from_custom_kubeconfig(file, &Default::default())
                    .await
                    .map_err(|e| Error::Kube(format!("{}: {e}", path.display())))?
            }
            None => kube::Config::infer()
                .await
                .map_err(|e| Error::Kube(e.to_string()))?,
        };
        let client = kube::Client::try_from(config).map_err(|e| Error::Kube(e.to_string()))?;
        Ok(KubeConfig {
            client,
            namespaces,
            lease_namespace: DEFAULT_LEASE_NAMESPACE.into(),
        })
    }
}

/// The `ApiResource` of each kind the proxy reads.
pub fn api_resource(kind: Kind) -> ApiResource {
    match kind {
        Kind::Ingress => ApiResource::erase::<Ingress>(&()),
        Kind::IngressClass => ApiResource::erase::<IngressClass>(&()),
        Kind::Service => ApiResource::erase::<Service>(&()),
        Kind::EndpointSlice => ApiResource::erase::<EndpointSlice>(&()),
        Kind::Secret => ApiResource::erase::<Secret>(&()),
        Kind::Tenant => ApiResource::erase::<Tenant>(&()),
        // Gateway API kinds (docs/gateway-api.md): watched when served
        // (GATEWAY_API_KINDS).
        Kind::GatewayClass => gateway_api("GatewayClass", "gatewayclasses"),
        Kind::Gateway => gateway_api("Gateway", "gateways"),
        Kind::ListenerSet => gateway_api("ListenerSet", "listenersets"),
        Kind::HttpRoute => gateway_api("HTTPRoute", "httproutes"),
        Kind::GrpcRoute => gateway_api("GRPCRoute", "grpcroutes"),
        Kind::ReferenceGrant => gateway_api("ReferenceGrant", "referencegrants"),
        Kind::TlsRoute => gateway_api("TLSRoute", "tlsroutes"),
        Kind::TcpRoute => gateway_api("TCPRoute", "tcproutes"),
        Kind::UdpRoute => gateway_api("UDPRoute", "udproutes"),
        Kind::BackendTlsPolicy => gateway_api("BackendTLSPolicy", "backendtlspolicies"),
        Kind::ConfigMap => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        Kind::RouteTrafficPolicy => {
            ApiResource::erase::<teapot_api::route_policy::RouteTrafficPolicy>(&())
        }
        Kind::Namespace => ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
    }
}

fn gateway_api(kind: &str, plural: &str) -> ApiResource {
    let gvk = kube::api::GroupVersionKind::gvk("gateway.networking.k8s.io", "v1", kind);
    ApiResource::from_gvk_with_plural(&gvk, plural)
}

/// The kinds every cluster serves, in the order the watchers start.
pub const KINDS: [Kind; 6] = [
    Kind::Tenant,
    Kind::IngressClass,
    Kind::Ingress,
    Kind::Service,
    Kind::EndpointSlice,
    Kind::Secret,
];

/// The Gateway API kinds (docs/gateway-api-l4.md, "Kube mode"), watched
/// after [`KINDS`] when the API server serves them. Their CRDs are
/// optional: a kind the server answers with 404 (not installed) or 403
/// (the role does not grant it) counts as listed and empty, so the source
/// syncs as it did before the Gateway API, and is asked again every
/// [`REPROBE`], so CRDs installed later are picked up without a restart.
pub const GATEWAY_API_KINDS: [Kind; 10] = [
    Kind::GatewayClass,
    Kind::Gateway,
    Kind::ListenerSet,
    Kind::HttpRoute,
    Kind::GrpcRoute,
    Kind::ReferenceGrant,
    Kind::TlsRoute,
    Kind::TcpRoute,
    Kind::UdpRoute,
    Kind::BackendTlsPolicy,
];

/// Kinds read for what Gateway API objects refer to: Namespaces, for the
/// labels a listener's `allowedRoutes.namespaces.from: Selector` matches,
/// and ConfigMaps, for the `ca.crt` a BackendTLSPolicy names (the store
/// keeps that key only), and RouteTrafficPolicies, teapot's own policy for
/// routes (its CRD may not be installed).
/// Optional like [`GATEWAY_API_KINDS`]: a role without them (the
/// webhook's) reads none, and no Gateway selects by them.
pub const GATEWAY_API_CONTEXT_KINDS: [Kind; 3] =
    [Kind::Namespace, Kind::ConfigMap, Kind::RouteTrafficPolicy];

/// How often an optional kind the server does not serve is asked again.
pub const REPROBE: Duration = Duration::from_secs(30);

/// One watcher: a kind, in all namespaces or one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchSpec {
    pub kind: Kind,
    pub namespace: Option<String>,
    /// For [`Kind::Secret`]: the watch of `Opaque` Secrets, of which only
    /// CA Secrets (a `ca.crt`) are kept, instead of the `kubernetes.io/tls`
    /// one.
    pub ca_secrets: bool,
}

impl WatchSpec {
    /// The watchers `namespaces` needs (see [`KubeConfig::namespaces`]).
    pub fn all(namespaces: &[String]) -> Vec<WatchSpec> {
        let mut specs = Vec::new();
        for kind in KINDS
            .into_iter()
            .chain(GATEWAY_API_KINDS)
            .chain(GATEWAY_API_CONTEXT_KINDS)
        {
            let scopes: Vec<Option<String>> = if !kind.is_namespaced() || namespaces.is_empty() {
                vec![None]
            } else {
                namespaces.iter().cloned().map(Some).collect()
            };
            // proxy-ssl-secret's CA Secrets are Opaque, a second watch of
            // the same kind after the certificates'.
            let watches: &[bool] = if kind == Kind::Secret {
                &[false, true]
            } else {
                &[false]
            };
            for &ca_secrets in watches {
                specs.extend(scopes.iter().map(|namespace| WatchSpec {
                    kind,
                    namespace: namespace.clone(),
                    ca_secrets,
                }));
            }
        }
        specs
    }

    /// One watcher of `kind`, with the kind's main selector.
    pub fn of(kind: Kind, namespace: Option<String>) -> WatchSpec {
        WatchSpec {
            kind,
            namespace,
            ca_secrets: false,
        }
    }

    fn label(&self) -> String {
        let kind = if self.ca_secrets {
            format!("{} ({CA_SECRET_TYPE})", self.kind)
        } else {
            self.kind.to_string()
        };
        match &self.namespace {
            Some(ns) => format!("{kind} in {ns}"),
            None => kind,
        }
    }

    /// Whether this watcher keeps `object`: a CA Secret watch sees every
    /// Opaque Secret but keeps only those with a `ca.crt` (the store then
    /// keeps that key alone); the others are as if absent.
    fn keeps(&self, object: &DynamicObject) -> bool {
        // CA Secrets, and basic authentication's users (`auth`).
        let data = object.data.get("data");
        !self.ca_secrets
            || [CA_SECRET_KEY, teapot_api::htpasswd::AUTH_KEY]
                .iter()
                .any(|key| data.and_then(|d| d.get(key)).is_some())
    }
}

/// The running watchers and what they have seen. Cheap to clone; the
/// watchers stop when the last clone is dropped.
#[derive(Clone)]
pub struct KubeSource {
    shared: Arc<Shared>,
    _tasks: Arc<Tasks>,
}

impl std::fmt::Debug for KubeSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeSource")
            .field("synced", &self.is_synced())
            .finish_non_exhaustive()
    }
}

/// Background tasks that end with their owner (the last clone of a source
/// or store): aborted on drop.
pub struct Tasks(pub Vec<tokio::task::JoinHandle<()>>);

impl Drop for Tasks {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

struct Shared {
    state: Mutex<SourceState>,
    /// Counts applied events; consumers wait for it to move.
    changes: watch::Sender<u64>,
    synced: watch::Sender<bool>,
}

#[derive(Default)]
struct SourceState {
    /// Every object that validated, or its last good version.
    store: Store,
    /// Objects whose current version does not validate.
    problems: BTreeMap<ObjectKey, Problem>,
    watchers: Vec<WatcherState>,
    /// Objects applied or removed since the last
    /// [`KubeSource::snapshot_changes`] (at most one per stored object).
    changed: HashSet<ObjectKey>,
    /// A problem was recorded or cleared since then: the reader's report
    /// of problems is out of date.
    problems_moved: bool,
}

struct WatcherState {
    spec: WatchSpec,
    /// Keys this watcher reported, so a re-list can drop the vanished.
    seen: HashSet<ObjectKey>,
    /// Keys of a re-list in progress.
    relist: Option<HashSet<ObjectKey>>,
    synced: bool,
}

impl KubeSource {
    /// Starts the watchers `config` asks for (see [`WatchSpec::all`]).
    /// Needs a tokio runtime.
    pub fn start(config: &KubeConfig) -> KubeSource {
        KubeSource::start_with(&config.client, WatchSpec::all(&config.namespaces))
    }

    /// Starts exactly these watchers.
    pub fn start_with(client: &kube::Client, specs: Vec<WatchSpec>) -> KubeSource {
        let (changes, _) = watch::channel(0);
        let (synced, _) = watch::channel(specs.is_empty());
        let shared = Arc::new(Shared {
            state: Mutex::new(SourceState {
                watchers: specs
                    .iter()
                    .map(|spec| WatcherState {
                        spec: spec.clone(),
                        seen: HashSet::new(),
                        relist: None,
                        synced: false,
                    })
                    .collect(),
                ..SourceState::default()
            }),
            changes,
            synced,
        });
        let tasks = specs
            .into_iter()
            .enumerate()
            .map(|(id, spec)| tokio::spawn(run_watcher(shared.clone(), client.clone(), id, spec)))
            .collect();
        KubeSource {
            shared,
            _tasks: Arc::new(Tasks(tasks)),
        }
    }

    /// Whether every watcher has finished its first list.
    pub fn is_synced(&self) -> bool {
        *self.shared.synced.borrow()
    }

    /// Resolves once every watcher has finished its first list.
    pub async fn wait_synced(&self) {
        let mut rx = self.shared.synced.subscribe();
        let _ = rx.wait_for(|s| *s).await;
    }

    /// A receiver that changes whenever an event was applied; pass it to
    /// [`coalesced`].
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.changes.subscribe()
    }

    /// The objects now, as the manifests loader would return them: the
    /// store plus one [`Problem`] per object whose current version fails.
    pub fn snapshot(&self) -> Loaded {
        let state = self.shared.state.lock();
        Loaded {
            store: state.store.clone(),
            problems: state.problems.values().cloned().collect(),
        }
    }

    /// [`Self::snapshot`], with the objects applied or removed since the
    /// last call (every other object is the previous snapshot's, the same
    /// `Arc`). For the one reader that follows the source.
    pub fn snapshot_changes(&self) -> (Loaded, Vec<ObjectKey>) {
        let mut state = self.shared.state.lock();
        let changed = std::mem::take(&mut state.changed).into_iter().collect();
        state.problems_moved = false;
        let loaded = Loaded {
            store: state.store.clone(),
            problems: state.problems.values().cloned().collect(),
        };
        (loaded, changed)
    }

    /// [`Self::snapshot_changes`] made in `store`, the reader's copy of the
    /// store as the last snapshot or call left it but for the objects
    /// `diverged` names (which the reader took out or put a previous
    /// version of back): each object applied or removed since then, and
    /// each diverged one, replaced in it by the source's (the same `Arc`),
    /// nothing else copied. The lock the watches write with is held for as
    /// long as the change takes, where a snapshot holds it for a copy of
    /// every map (at 100k Ingresses, longer than the compile of a route
    /// change). Returns what `store` held before for those objects (a
    /// store of them alone: what the tenant check puts back), their keys,
    /// and every problem.
    pub fn changes_into(
        &self,
        store: &mut Store,
        diverged: &[ObjectKey],
    ) -> (Store, Vec<ObjectKey>, Vec<Problem>) {
        self.shared.state.lock().changes_into(store, diverged)
    }

    /// The EndpointSlices applied or removed since the last call or
    /// [`Self::snapshot_changes`], when they are all that changed and no
    /// problem was recorded or cleared: what the reader applies in place
    /// to the store it has (`teapot_model::store::Store::apply_slices`)
    /// instead of a snapshot, which clones every map. `None` (nothing
    /// taken) otherwise, and when a changed slice is one `reported` says
    /// the reader reports a problem of (the tenant check refused it): only
    /// a load says what became of that.
    pub fn take_slice_changes(
        &self,
        reported: impl Fn(&ObjectKey) -> bool,
    ) -> Option<Vec<SliceChange>> {
        self.shared.state.lock().take_slice_changes(reported)
    }

    /// Whether every change waiting for the reader is an EndpointSlice's
    /// (the reader then takes them without waiting for a burst to end).
    pub fn slices_alone_pending(&self) -> bool {
        self.shared.state.lock().slices_alone_pending()
    }
}

/// The longest a burst may hold a change back. Under a steady stream of
/// changes (a rollout, an operator's automation, 20 Ingress edits a
/// second) there is never a quiet period, and without a bound nothing
/// would go live until the stream stops.
pub const MAX_COALESCE: Duration = Duration::from_secs(1);

/// How long a burst of whole changes (watch events; files closed after
/// writing or renamed into place) waits for others to join it, and the
/// longest a change applied in place waits: a rollout's slices still go
/// out together, while a lone pod restart is served within milliseconds.
pub const PROMPT_QUIET: Duration = Duration::from_millis(5);
pub const PROMPT_MAX: Duration = Duration::from_millis(20);

/// How many times its own cost a compile waits after the last before it
/// starts. A lone change after a quiet spell compiles at once; under a
/// steady stream of changes (one tenant's automation, a hostile one)
/// compiles take at most `1 / (1 + PACE_FACTOR)` of a core, whatever the
/// store's size, where a fixed quiet period bounded nothing once a
/// compile outgrew it.
pub const PACE_FACTOR: u32 = 3;

/// When the next compile may start: after the last reload that took
/// `took` and ended at `finished`, [`PACE_FACTOR`] times `took` (at most
/// [`MAX_COALESCE`]), and never before the pace an earlier one set.
#[derive(Clone, Copy, Debug)]
pub struct Pace {
    not_before: tokio::time::Instant,
}

impl Default for Pace {
    fn default() -> Self {
        Pace {
            not_before: tokio::time::Instant::now(),
        }
    }
}

impl Pace {
    /// A reload between `started` and `finished`.
    pub fn record(&mut self, started: tokio::time::Instant, finished: tokio::time::Instant) {
        let took = finished.saturating_duration_since(started);
        let next = finished + (took * PACE_FACTOR).min(MAX_COALESCE);
        self.not_before = self.not_before.max(next);
    }

    /// The earliest the next compile may start.
    pub fn not_before(&self) -> tokio::time::Instant {
        self.not_before
    }
}

/// When a burst that began at `first` ends unless another change comes
/// first, asked at `now`: applied in place (`prompt`), [`PROMPT_QUIET`]
/// after the last change and at most [`PROMPT_MAX`] after the first,
/// whatever the pace (nothing is compiled); otherwise `quiet` after the
/// last and at most [`MAX_COALESCE`] after the first, and not before
/// `pace` allows a compile. The one rule of the directory watcher and the
/// kube source.
pub fn burst_ends(
    first: tokio::time::Instant,
    now: tokio::time::Instant,
    prompt: bool,
    quiet: Duration,
    pace: Option<&Pace>,
) -> tokio::time::Instant {
    if prompt {
        return (first + PROMPT_MAX).min(now + PROMPT_QUIET);
    }
    let settled = (first + MAX_COALESCE).min(now + quiet);
    pace.map_or(settled, |p| settled.max(p.not_before()))
}

/// Waits for a change, then until `quiet` passes without another (or
/// [`MAX_COALESCE`] after the first): a burst of events becomes one
/// wake-up. Returns false when the source is gone.
pub async fn coalesced(changes: &mut watch::Receiver<u64>, quiet: Duration) -> bool {
    coalesced_unless_prompt(changes, quiet, None, || false).await
}

/// [`coalesced`], not returning before `pace` allows a compile, or with
/// [`PROMPT_QUIET`] and [`PROMPT_MAX`] instead (and no pace: nothing is
/// compiled) while `prompt` says that what is waiting is applied in place.
pub async fn coalesced_unless_prompt(
    changes: &mut watch::Receiver<u64>,
    quiet: Duration,
    pace: Option<&Pace>,
    prompt: impl Fn() -> bool,
) -> bool {
    if changes.changed().await.is_err() {
        return false;
    }
    let first = tokio::time::Instant::now();
    loop {
        let now = tokio::time::Instant::now();
        let until = burst_ends(first, now, prompt(), quiet, pace);
        if until <= now {
            return true;
        }
        match tokio::time::timeout_at(until, changes.changed()).await {
            Ok(Ok(())) => continue,
            Ok(Err(_)) => return false,
            Err(_) => return true,
        }
    }
}

async fn run_watcher(shared: Arc<Shared>, client: kube::Client, id: usize, spec: WatchSpec) {
    let resource = api_resource(spec.kind);
    let api: Api<DynamicObject> = match &spec.namespace {
        Some(ns) => Api::namespaced_with(client, ns, &resource),
        None => Api::all_with(client, &resource),
    };
    let mut config = watcher::Config::default();
    if spec.ca_secrets {
        // Field selectors cannot ask for a key, so every Opaque Secret
        // comes by (service-account tokens, registry credentials and Helm
        // releases, which are other types, do not); only the CA Secrets
        // among them are kept (WatchSpec::keeps), and of those only ca.crt.
        config = config.fields(&format!("type={CA_SECRET_TYPE}"));
    } else if spec.kind == Kind::Secret {
        // The proxy reads certificates only; other Secrets stay unseen
        // (and need no RBAC beyond the list/watch with this selector).
        // Certificates from ACME are not a tenant's own certificates (which
        // would switch ACME off for their hosts): the ACME store reads them.
        config = config
            .fields(&format!("type={TLS_SECRET_TYPE}"))
            .labels(&format!("!{}", CERTIFICATE_LABEL));
    }
    let label = spec.label();
    let optional = spec.kind.is_gateway_api() || GATEWAY_API_CONTEXT_KINDS.contains(&spec.kind);
    // Said once per change, not every REPROBE.
    let mut told = false;
    loop {
        if optional && !served(&api, &label, &mut told).await {
            shared.absent(id);
            tokio::time::sleep(REPROBE).await;
            continue;
        }
        let mut events = watcher(api.clone(), config.clone())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(event) => shared.handle(id, &resource, event),
                Err(e) if optional && unserved(&e) => {
                    told = false;
                    // The CRD went away (or the role lost it): its
                    // objects are gone with it; ask again as at start.
                    tracing::warn!(watch = %label, error = %e, "no longer served; dropping its objects");
                    shared.absent(id);
                    break;
                }
                Err(e) => {
                    tracing::warn!(watch = %label, error = %e, "watch failed; retrying with backoff")
                }
            }
        }
        if !optional {
            return;
        }
    }
}

/// Whether the API server answers a one-item list of an optional kind.
/// Other failures (a timeout, a 500) count as served: the watcher's own
/// backoff then retries, and the source waits for it as for any kind.
async fn served(api: &Api<DynamicObject>, label: &str, told: &mut bool) -> bool {
    match api.list(&kube::api::ListParams::default().limit(1)).await {
        Ok(_) => {
            if *told {
                tracing::info!(watch = %label, "now served by the API server; watching");
            }
            *told = false;
            true
        }
        Err(kube::Error::Api(status)) if status.is_not_found() || status.is_forbidden() => {
            if std::mem::replace(told, true) {
                return false;
            }
            tracing::info!(
                watch = %label,
                code = status.code,
                "not served by the API server (CRD not installed, or not granted); \
                 treated as empty, asked again every {}s",
                REPROBE.as_secs()
            );
            false
        }
        Err(e) => {
            tracing::warn!(watch = %label, error = %e, "could not ask whether it is served; watching");
            true
        }
    }
}

/// A watch error that says the kind is not served (any more).
fn unserved(e: &watcher::Error) -> bool {
    match e {
        watcher::Error::InitialListFailed(kube::Error::Api(s))
        | watcher::Error::WatchStartFailed(kube::Error::Api(s))
        | watcher::Error::WatchFailed(kube::Error::Api(s)) => s.is_not_found() || s.is_forbidden(),
        watcher::Error::WatchError(s) => s.is_not_found() || s.is_forbidden(),
        _ => false,
    }
}

impl Shared {
    /// An optional kind is not served: nothing of it exists (what it
    /// reported before is removed) and it counts as listed.
    fn absent(&self, id: usize) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let w = &mut state.watchers[id];
        w.relist = None;
        let gone: Vec<ObjectKey> = w.seen.drain().collect();
        let first = !w.synced;
        w.synced = true;
        let changed = !gone.is_empty();
        for key in gone {
            state.remove(&key);
        }
        if first && state.watchers.iter().all(|w| w.synced) {
            tracing::info!("every watch has listed: the kube source is synced");
            self.synced.send_replace(true);
        }
        drop(guard);
        if changed {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn handle(&self, id: usize, resource: &ApiResource, event: watcher::Event<DynamicObject>) {
        let mut guard = self.state.lock();
        let state = &mut *guard;
        let kind = state.watchers[id].spec.kind;
        match event {
            watcher::Event::Init => state.watchers[id].relist = Some(HashSet::new()),
            // Left out of the re-list, so InitDone drops a previous version.
            watcher::Event::InitApply(object) if !state.watchers[id].spec.keeps(&object) => {}
            watcher::Event::Apply(object) if !state.watchers[id].spec.keeps(&object) => {
                // A CA Secret whose ca.crt was removed is gone.
                let key = key_of(kind, &object);
                if state.watchers[id].seen.remove(&key) {
                    state.remove(&key);
                } else {
                    return;
                }
            }
            watcher::Event::InitApply(object) => {
                let key = state.apply(kind, resource, object);
                let w = &mut state.watchers[id];
                w.relist.get_or_insert_with(HashSet::new).insert(key);
            }
            watcher::Event::InitDone => {
                let w = &mut state.watchers[id];
                let listed = w.relist.take().unwrap_or_default();
                let gone: Vec<ObjectKey> = w.seen.difference(&listed).cloned().collect();
                w.seen = listed;
                let first = !w.synced;
                w.synced = true;
                tracing::info!(watch = %w.spec.label(), objects = w.seen.len(), removed = gone.len(), "watch listed");
                for key in gone {
                    state.remove(&key);
                }
                if first && state.watchers.iter().all(|w| w.synced) {
                    tracing::info!("every watch has listed: the kube source is synced");
                    self.synced.send_replace(true);
                }
            }
            watcher::Event::Apply(object) => {
                let key = state.apply(kind, resource, object);
                state.watchers[id].seen.insert(key);
            }
            watcher::Event::Delete(object) => {
                let key = key_of(kind, &object);
                state.watchers[id].seen.remove(&key);
                state.remove(&key);
            }
        }
        drop(guard);
        self.changes.send_modify(|n| *n += 1);
    }
}

impl SourceState {
    /// Whether `object` is the stored Ingress with `key` but for its
    /// status and `resourceVersion`, neither of which a compile reads
    /// (`managedFields` never reaches the store: `validate::parse_object`).
    fn bookkeeping_only(&self, key: &ObjectKey, object: &Object) -> bool {
        let Object::Ingress(new) = object else {
            return false;
        };
        let id = NsName::new(key.namespace.clone(), key.name.clone());
        let Some(old) = self.store.ingresses.get(&id) else {
            return false;
        };
        let bare = |i: &Ingress| {
            let mut i = i.clone();
            i.status = None;
            i.metadata.resource_version = None;
            i
        };
        bare(&old.object) == bare(new)
    }

    fn changes_into(
        &mut self,
        store: &mut Store,
        diverged: &[ObjectKey],
    ) -> (Store, Vec<ObjectKey>, Vec<Problem>) {
        let mut changed = std::mem::take(&mut self.changed);
        changed.extend(diverged.iter().cloned());
        let changed: Vec<ObjectKey> = changed.into_iter().collect();
        self.problems_moved = false;
        let mut before = Store::default();
        for key in &changed {
            before.retain_from(store, key);
            store.remove(key);
            store.retain_from(&self.store, key);
        }
        (before, changed, self.problems.values().cloned().collect())
    }

    fn slices_alone_pending(&self) -> bool {
        !self.problems_moved && self.changed.iter().all(|k| k.kind == Kind::EndpointSlice)
    }

    fn take_slice_changes(
        &mut self,
        reported: impl Fn(&ObjectKey) -> bool,
    ) -> Option<Vec<SliceChange>> {
        if !self.slices_alone_pending()
            || self
                .changed
                .iter()
                .any(|k| self.problems.contains_key(k) || reported(k))
        {
            return None;
        }
        let changed = std::mem::take(&mut self.changed);
        Some(
            changed
                .into_iter()
                .map(|key| {
                    let id = NsName::new(key.namespace, key.name);
                    let slice = self.store.endpoint_slices.get(&id).cloned();
                    SliceChange { id, slice }
                })
                .collect(),
        )
    }

    /// Validates one object into the store, or records why not (keeping
    /// the last good version). Returns its key.
    fn apply(
        &mut self,
        kind: Kind,
        resource: &ApiResource,
        mut object: DynamicObject,
    ) -> ObjectKey {
        let key = key_of(kind, &object);
        // Never stored (validate::parse_object drops it too): not worth
        // the copy into the loader's value either.
        object.metadata.managed_fields = None;
        let origin = origin_of(resource, &key);
        let parsed = to_value(resource, &object)
            .and_then(|value| validate::parse_document(kind, value, &key.namespace));
        let e = match parsed {
            Ok(validate::Parsed::Object(object)) => {
                let problem_cleared = self.problems.remove(&key).is_some();
                if problem_cleared {
                    self.problems_moved = true;
                    tracing::info!(object = %key, "object valid again");
                }
                // An Ingress whose status alone changed (most often the
                // fleet's own status write coming back) is stored, so the
                // status writer reads it, but changes nothing a compile
                // reads: every replica recompiling for it would cost a
                // compile per status write.
                if problem_cleared || !self.bookkeeping_only(&key, &object) {
                    self.changed.insert(key.clone());
                }
                self.store.insert(key.clone(), object, origin.clone());
                return key;
            }
            // As the manifests reader: a version served before is kept
            // (the store's rule for a bad update), a new one stands refused.
            Ok(validate::Parsed::Refused { object, mut error }) => {
                self.changed.insert(key.clone());
                if !self.store.serves(&key) {
                    self.store.insert(key.clone(), object, origin.clone());
                    error
                        .message
                        .push_str(teapot_model::manifests::REFUSED_STANDS);
                }
                error
            }
            Err(e) => {
                self.changed.insert(key.clone());
                e
            }
        };
        let problem = Problem {
            file: origin.file.to_path_buf(),
            document: 0,
            object: Some(key.to_string()),
            field: e.field,
            message: e.message,
            kept_previous: self.store.serves(&key),
        };
        if self.problems.get(&key) != Some(&problem) {
            self.problems_moved = true;
            tracing::warn!(
                object = %key,
                field = problem.field.as_deref().unwrap_or(""),
                kept_previous = problem.kept_previous,
                "skipped object from the API: {}",
                problem.message
            );
        }
        self.problems.insert(key.clone(), problem);
        key
    }

    fn remove(&mut self, key: &ObjectKey) {
        self.changed.insert(key.clone());
        self.store.remove(key);
        if self.problems.remove(key).is_some() {
            self.problems_moved = true;
        }
    }
}

fn key_of(kind: Kind, object: &DynamicObject) -> ObjectKey {
    ObjectKey {
        kind,
        namespace: if kind.is_namespaced() {
            object.metadata.namespace.clone().unwrap_or_default()
        } else {
            String::new()
        },
        name: object.metadata.name.clone().unwrap_or_default(),
    }
}

/// The object's API path, so a problem says where it came from.
fn origin_of(resource: &ApiResource, key: &ObjectKey) -> Origin {
    let root = if resource.group.is_empty() {
        format!("/api/{}", resource.version)
    } else {
        format!("/apis/{}/{}", resource.group, resource.version)
    };
    let path = if key.namespace.is_empty() {
        format!("kube:{root}/{}/{}", resource.plural, key.name)
    } else {
        format!(
            "kube:{root}/namespaces/{}/{}/{}",
            key.namespace, resource.plural, key.name
        )
    };
    Origin {
        file: std::sync::Arc::from(std::path::Path::new(&path)),
        document: 0,
    }
}

/// The object as the loader's JSON value, with the type fields list items
/// lack.
fn to_value(
    resource: &ApiResource,
    object: &DynamicObject,
) -> Result<serde_json::Value, validate::FieldError> {
    let fail = |e: &dyn std::fmt::Display| validate::FieldError {
        field: None,
        message: format!("cannot read the object: {e}"),
    };
    let mut value = serde_json::to_value(object).map_err(|e| fail(&e))?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), resource.api_version.clone().into());
        map.insert("kind".into(), resource.kind.clone().into());
    }
    Ok(value)
}

#[cfg(test)]
mod tests {
    //! The ApiServerVerifier pattern of kube-rs's controller-rs: a
    //! `tower_test` mock stands in for the API server and the test answers
    //! each request the watcher makes, checking it precisely.

    use super::*;
    use http::{Request, Response};
    use kube::client::Body;
    use serde_json::json;

    type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

    async fn next_request(
        handle: &mut Handle,
    ) -> (
        Request<Body>,
        tower_test::mock::SendResponse<Response<Body>>,
    ) {
        // Longer than REPROBE: under paused time the re-probe must come
        // first.
        tokio::time::timeout(2 * REPROBE, handle.next_request())
            .await
            .expect("the watcher sends a request in time")
            .expect("the client is alive")
    }

    fn tenant(name: &str, cluster: &str, cidr: &str, rv: &str) -> serde_json::Value {
        json!({
            "metadata": {"name": name, "resourceVersion": rv},
            "spec": {"cluster": cluster, "nodeCIDRs": [cidr]},
        })
    }

    #[tokio::test]
    async fn bad_objects_become_problems_and_keep_the_last_good_version() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let source = KubeSource::start_with(&client, vec![WatchSpec::of(Kind::Tenant, None)]);

        // The initial list: one good Tenant and one with a bad CLUSTER.
        let (request, send) = next_request(&mut handle).await;
        assert_eq!(request.method(), http::Method::GET);
        assert_eq!(request.uri().path(), "/apis/teapot.dev/v1alpha1/tenants");
        assert!(!request.uri().query().unwrap_or("").contains("watch=true"));
        let list = json!({
            "apiVersion": "teapot.dev/v1alpha1", "kind": "TenantList",
            "metadata": {"resourceVersion": "10"},
            "items": [tenant("acme", "acme", "10.1.0.0/16", "5"), tenant("bad", "Bad", "10.2.0.0/16", "6")],
        });
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list).unwrap(),
        )));

        // The watch from the list's version: acme turns invalid.
        let (request, send) = next_request(&mut handle).await;
        let query = request.uri().query().unwrap_or("").to_string();
        assert!(query.contains("watch=true"), "{query}");
        assert!(query.contains("resourceVersion=10"), "{query}");
        source.wait_synced().await;
        let loaded = source.snapshot();
        assert_eq!(loaded.store.tenants.len(), 1);
        assert_eq!(loaded.problems.len(), 1);
        let p = &loaded.problems[0];
        assert_eq!(p.object.as_deref(), Some("Tenant bad"));
        assert_eq!(p.field.as_deref(), Some("spec.cluster"));
        assert!(!p.kept_previous);
        assert_eq!(
            p.file,
            std::path::PathBuf::from("kube:/apis/teapot.dev/v1alpha1/tenants/bad")
        );

        let mut changes = source.changes();
        let event = json!({"type": "MODIFIED", "object": {
            "apiVersion": "teapot.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": "acme", "resourceVersion": "11"},
            "spec": {"cluster": "acme", "nodeCIDRs": ["10.1.0.0/33"]},
        }});
        send.send_response(Response::new(Body::from(format!("{event}\n").into_bytes())));
        assert!(coalesced(&mut changes, Duration::from_millis(10)).await);
        let loaded = source.snapshot();
        let acme = &loaded.store.tenants["acme"].object;
        assert_eq!(
            acme.spec.node_cidrs,
            ["10.1.0.0/16"],
            "the last good version"
        );
        let p = loaded
            .problems
            .iter()
            .find(|p| p.object.as_deref() == Some("Tenant acme"))
            .expect("a problem for acme");
        assert_eq!(p.field.as_deref(), Some("spec.nodeCIDRs[0]"));
        assert!(p.kept_previous);
    }

    #[tokio::test]
    async fn secrets_are_listed_with_the_tls_type_selector() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let _source = KubeSource::start_with(
            &client,
            vec![WatchSpec::of(Kind::Secret, Some("tenant-acme".into()))],
        );
        let (request, _send) = next_request(&mut handle).await;
        assert_eq!(
            request.uri().path(),
            "/api/v1/namespaces/tenant-acme/secrets"
        );
        let query = request.uri().query().unwrap_or("");
        assert!(
            query.contains("fieldSelector=type%3Dkubernetes.io%2Ftls"),
            "{query}"
        );
        // ACME's certificates are not a tenant's: left to the ACME store.
        assert!(
            query.contains("labelSelector=%21teapot.dev%2Facme-certificate"),
            "{query}"
        );
    }

    /// Against the API double: the Secret watches are the certificates'
    /// and the Opaque one, which keeps a CA Secret's ca.crt alone, leaves
    /// out an Opaque Secret without one, and drops a CA Secret whose
    /// ca.crt goes.
    #[tokio::test]
    async fn opaque_secrets_are_kept_as_their_ca_crt_only() {
        use teapot_testkit::apiserver::ApiServer;
        let specs = WatchSpec::all(&[]);
        let secret_watches: Vec<_> = specs.iter().filter(|s| s.kind == Kind::Secret).collect();
        assert_eq!(secret_watches.len(), 2);
        assert_eq!(secret_watches[1].label(), "Secret (Opaque)");

        let api = ApiServer::start().await;
        let ca = teapot_testkit::certs::TestCa::new("backend CA");
        let ca = ca.cert_pem();
        // The API's own encoding of `data`.
        let b64 = |s: &str| {
            serde_json::to_value(k8s_openapi::ByteString(s.as_bytes().to_vec()))
                .unwrap()
                .as_str()
                .unwrap()
                .to_string()
        };
        let secret = |name: &str, data: serde_json::Value| {
            json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                   "metadata": {"name": name, "namespace": "shop",
                                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{\"password\": \"s3cret\"}"}},
                   "data": data})
        };
        api.apply(secret(
            "backend-ca",
            json!({"ca.crt": b64(ca), "password": b64("s3cret")}),
        ));
        api.apply(secret("app", json!({"password": b64("s3cret")})));
        let source = KubeSource::start_with(
            &api.client(),
            vec![WatchSpec {
                kind: Kind::Secret,
                namespace: None,
                ca_secrets: true,
            }],
        );
        tokio::time::timeout(Duration::from_secs(30), source.wait_synced())
            .await
            .expect("synced in time");
        assert!(
            api.requests()
                .iter()
                .any(|r| r.param("fieldSelector").as_deref() == Some("type=Opaque"))
        );
        let loaded = source.snapshot();
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        assert!(loaded.store.secrets.is_empty());
        let id = NsName::new("shop".to_string(), "backend-ca".to_string());
        assert_eq!(loaded.store.ca_secrets.keys().collect::<Vec<_>>(), [&id]);
        let kept = &loaded.store.ca_secrets[&id].object;
        let keys: Vec<_> = kept
            .data
            .iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        assert_eq!(keys, ["ca.crt"]);
        assert_eq!(kept.metadata.annotations, None);
        assert!(
            !serde_json::to_string(kept)
                .unwrap()
                .contains(&b64("s3cret"))
        );

        let mut changes = source.changes();
        api.apply(secret("backend-ca", json!({"password": b64("s3cret")})));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !source.snapshot().store.ca_secrets.is_empty() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "ca.crt removed, still kept"
            );
            coalesced(&mut changes, Duration::from_millis(10)).await;
        }
        assert!(source.snapshot().problems.is_empty());
    }

    /// Against the API double: events a watcher missed (a compaction while
    /// it was away) come back through the 410 -> re-list path, which
    /// drops what vanished.
    #[tokio::test]
    async fn a_relist_after_410_drops_what_vanished() {
        use teapot_testkit::apiserver::ApiServer;
        let api = ApiServer::start().await;
        for name in ["a", "b"] {
            let mut t = tenant(name, name, "10.1.0.0/16", "");
            t["apiVersion"] = json!("teapot.dev/v1alpha1");
            t["kind"] = json!("Tenant");
            t["metadata"]
                .as_object_mut()
                .unwrap()
                .remove("resourceVersion");
            api.apply(t);
        }
        let source = KubeSource::start_with(&api.client(), vec![WatchSpec::of(Kind::Tenant, None)]);
        tokio::time::timeout(Duration::from_secs(30), source.wait_synced())
            .await
            .expect("synced in time");
        assert_eq!(source.snapshot().store.tenants.len(), 2);

        assert!(api.delete_unannounced("teapot.dev/v1alpha1", "Tenant", "", "b"));
        api.compact();
        api.drop_watches();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while source.snapshot().store.tenants.len() != 1 {
            assert!(tokio::time::Instant::now() < deadline, "b still known");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(source.snapshot().store.tenants.contains_key("a"));
        let lists = api
            .requests()
            .iter()
            .filter(|r| r.path.ends_with("/tenants") && r.param("watch").is_none())
            .count();
        assert_eq!(lists, 2, "the initial list and the re-list");
    }

    fn tcp_route(name: &str) -> serde_json::Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRoute",
            "metadata": {"name": name, "namespace": "ops", "resourceVersion": "7"},
            "spec": {"parentRefs": [{"name": "edge", "sectionName": "db"}],
                     "rules": [{"backendRefs": [{"name": "db", "port": 5432}]}]},
        })
    }

    /// A cluster without the Gateway API CRDs: the kind answers 404, the
    /// source syncs without it, and asks again; once the CRD is there its
    /// objects arrive.
    #[tokio::test(start_paused = true)]
    async fn an_unserved_gateway_api_kind_is_empty_until_its_crd_appears() {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::Client::new(service, "default");
        let source = KubeSource::start_with(&client, vec![WatchSpec::of(Kind::TcpRoute, None)]);
        let path = "/apis/gateway.networking.k8s.io/v1/tcproutes";
        let not_found = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "reason": "NotFound", "code": 404,
                               "message": "the server could not find the requested resource"});

        let (request, send) = next_request(&mut handle).await;
        assert_eq!(request.uri().path(), path);
        assert!(request.uri().query().unwrap_or("").contains("limit=1"));
        let mut answer = Response::new(Body::from(serde_json::to_vec(&not_found).unwrap()));
        *answer.status_mut() = http::StatusCode::NOT_FOUND;
        send.send_response(answer);
        tokio::time::timeout(Duration::from_secs(1), source.wait_synced())
            .await
            .expect("an unserved kind does not hold the source back");
        assert!(source.snapshot().store.tcp_routes.is_empty());

        // REPROBE later (virtual time): the CRD is installed now.
        let list = |items: Vec<serde_json::Value>| {
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "TCPRouteList",
                   "metadata": {"resourceVersion": "8"}, "items": items})
        };
        let (request, send) = next_request(&mut handle).await;
        assert_eq!(request.uri().path(), path);
        assert!(request.uri().query().unwrap_or("").contains("limit=1"));
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list(vec![tcp_route("db")])).unwrap(),
        )));
        let (request, send) = next_request(&mut handle).await;
        assert_eq!(request.uri().path(), path);
        assert!(!request.uri().query().unwrap_or("").contains("watch=true"));
        send.send_response(Response::new(Body::from(
            serde_json::to_vec(&list(vec![tcp_route("db")])).unwrap(),
        )));
        let (request, watch) = next_request(&mut handle).await;
        assert!(request.uri().query().unwrap_or("").contains("watch=true"));
        let loaded = source.snapshot();
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let route =
            &loaded.store.tcp_routes[&NsName::new("ops".to_string(), "db".to_string())].object;
        assert_eq!(route.spec.rules[0].backend_refs[0].name, "db");

        // The CRD is removed: the watch is answered 404, the objects go
        // with it, and the kind is asked about again.
        let mut changes = source.changes();
        let mut answer = Response::new(Body::from(serde_json::to_vec(&not_found).unwrap()));
        *answer.status_mut() = http::StatusCode::NOT_FOUND;
        watch.send_response(answer);
        assert!(coalesced(&mut changes, Duration::from_millis(10)).await);
        assert!(source.snapshot().store.tcp_routes.is_empty());
        let (request, _probe) = next_request(&mut handle).await;
        assert!(request.uri().query().unwrap_or("").contains("limit=1"));
    }

    /// Against the API double: the Gateway API kinds are watched with the
    /// others and reach the store, typed and validated.
    #[tokio::test]
    async fn gateway_api_objects_reach_the_store() {
        use teapot_testkit::apiserver::ApiServer;
        let api = ApiServer::start().await;
        let gw = "gateway.networking.k8s.io/v1";
        api.apply(
            json!({"apiVersion": gw, "kind": "GatewayClass", "metadata": {"name": "teapot"},
                         "spec": {"controllerName": "teapot.dev/gateway-controller"}}),
        );
        api.apply(json!({"apiVersion": gw, "kind": "Gateway",
                         "metadata": {"name": "edge", "namespace": "ops"},
                         "spec": {"gatewayClassName": "teapot", "listeners": [
                             {"name": "db", "port": 5432, "protocol": "TCP"},
                             {"name": "dns", "port": 53, "protocol": "UDP"},
                             {"name": "tls", "port": 8443, "protocol": "TLS",
                              "tls": {"mode": "Passthrough"}}]}}));
        let mut route = tcp_route("db");
        route["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("resourceVersion");
        api.apply(route);
        for kind in [
            "UDPRoute",
            "TLSRoute",
            "HTTPRoute",
            "GRPCRoute",
            "ReferenceGrant",
            "BackendTLSPolicy",
        ] {
            let spec = match kind {
                "BackendTLSPolicy" => {
                    json!({"targetRefs": [{"group": "", "kind": "Service", "name": "a"}],
                                            "validation": {"hostname": "a.example.com",
                                                           "caCertificateRefs": [{"group": "", "kind": "ConfigMap", "name": "ca"}]}})
                }
                "ReferenceGrant" => json!({"from": [{"group": "gateway.networking.k8s.io",
                                          "kind": "TCPRoute", "namespace": "ops"}],
                                          "to": [{"group": "", "kind": "Service"}]}),
                "TLSRoute" => {
                    json!({"parentRefs": [{"name": "edge"}], "hostnames": ["a.example.com"],
                                     "rules": [{"backendRefs": [{"name": "a", "port": 443}]}]})
                }
                _ => json!({"parentRefs": [{"name": "edge"}],
                            "rules": [{"backendRefs": [{"name": "a", "port": 53}]}]}),
            };
            api.apply(json!({"apiVersion": gw, "kind": kind,
                             "metadata": {"name": "r", "namespace": "ops"}, "spec": spec}));
        }
        api.apply(json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "ca", "namespace": "ops"},
                         "data": {"ca.crt": "PEM", "app.conf": "not kept"}}));
        api.apply(
            json!({"apiVersion": "teapot.dev/v1alpha1", "kind": "RouteTrafficPolicy",
                         "metadata": {"name": "r", "namespace": "ops"},
                         "spec": {"targetRefs": [{"group": gw.split('/').next().unwrap(),
                                                  "kind": "HTTPRoute", "name": "r"}],
                                  "inFlightPerClient": 5}}),
        );
        let source = KubeSource::start(&KubeConfig::new(api.client()));
        tokio::time::timeout(Duration::from_secs(30), source.wait_synced())
            .await
            .expect("synced in time");
        let loaded = source.snapshot();
        assert!(loaded.problems.is_empty(), "{:?}", loaded.problems);
        let store = &loaded.store;
        let key = |n: &str| NsName::new("ops".to_string(), n.to_string());
        assert!(store.backend_tls_policies.contains_key(&key("r")));
        assert!(store.route_traffic_policies.contains_key(&key("r")));
        let data = store.config_maps[&key("ca")].object.data.clone().unwrap();
        assert_eq!(
            data.keys().collect::<Vec<_>>(),
            ["ca.crt"],
            "only ca.crt is kept"
        );
        assert!(store.gateway_classes.contains_key("teapot"));
        assert_eq!(store.gateways[&key("edge")].object.spec.listeners.len(), 3);
        assert!(store.tcp_routes.contains_key(&key("db")));
        assert!(store.udp_routes.contains_key(&key("r")));
        assert!(store.tls_routes.contains_key(&key("r")));
        assert!(store.http_routes.contains_key(&key("r")));
        assert!(store.grpc_routes.contains_key(&key("r")));
        assert!(store.reference_grants.contains_key(&key("r")));

        // A change is watched like any other kind's.
        let mut changes = source.changes();
        assert!(api.delete(gw, "TCPRoute", "ops", "db"));
        while source.snapshot().store.tcp_routes.contains_key(&key("db")) {
            assert!(coalesced(&mut changes, Duration::from_millis(10)).await);
        }
    }

    /// A RouteTrafficPolicy the validation refuses, new, stands refused
    /// on its targets (fail closed); a refused update of one served keeps
    /// the served one, reported.
    #[test]
    fn a_refused_route_traffic_policy_stands_or_keeps_the_last_good() {
        let resource = api_resource(Kind::RouteTrafficPolicy);
        let object = |name: &str, in_flight: u32| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "teapot.dev/v1alpha1", "kind": "RouteTrafficPolicy",
                "metadata": {"name": name, "namespace": "ops"},
                "spec": {"targetRefs": [{"group": "gateway.networking.k8s.io",
                                         "kind": "HTTPRoute", "name": "r"}],
                         "inFlightPerClient": in_flight},
            }))
            .unwrap()
        };
        let mut state = SourceState::default();
        let new = state.apply(Kind::RouteTrafficPolicy, &resource, object("new", 0));
        let id = NsName::new("ops", "new");
        assert!(state.store.route_traffic_policies.contains_key(&id));
        let why = &state.store.refused_route_traffic_policies[&id];
        assert!(why.starts_with("spec.inFlightPerClient: "), "{why}");
        let p = &state.problems[&new];
        assert!(!p.kept_previous && p.message.ends_with("its routes answer 503"));

        let kept = state.apply(Kind::RouteTrafficPolicy, &resource, object("kept", 5));
        assert!(!state.problems.contains_key(&kept));
        state.apply(Kind::RouteTrafficPolicy, &resource, object("kept", 0));
        let id = NsName::new("ops", "kept");
        assert!(state.problems[&kept].kept_previous);
        assert!(!state.store.refused_route_traffic_policies.contains_key(&id));
        let served = &state.store.route_traffic_policies[&id].object;
        assert_eq!(served.spec.in_flight_per_client, Some(5));
        // Fixed: served, the refusal gone.
        state.apply(Kind::RouteTrafficPolicy, &resource, object("new", 3));
        assert!(state.store.refused_route_traffic_policies.is_empty());
        assert!(!state.problems.contains_key(&new));
    }

    /// The reader takes EndpointSlice changes alone without a snapshot;
    /// anything else, or a problem recorded or cleared, leaves them for
    /// one.
    #[test]
    fn endpoint_slice_changes_alone_are_taken_without_a_snapshot() {
        let resource = api_resource(Kind::EndpointSlice);
        let slice = |name: &str, ok: bool| -> DynamicObject {
            let endpoints = if ok {
                json!([{"addresses": ["10.0.0.1"]}])
            } else {
                json!("not a list")
            };
            serde_json::from_value(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "t",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "endpoints": endpoints,
            }))
            .unwrap()
        };
        let mut state = SourceState::default();
        let a = state.apply(Kind::EndpointSlice, &resource, slice("a", true));
        state.apply(Kind::EndpointSlice, &resource, slice("b", true));
        let mut taken = state.take_slice_changes(|_| false).expect("slices alone");
        taken.sort_by(|x, y| x.id.cmp(&y.id));
        assert_eq!(taken.len(), 2);
        assert!(taken.iter().all(|c| c.slice.is_some()));
        assert!(
            state
                .take_slice_changes(|_| false)
                .expect("nothing pending")
                .is_empty()
        );

        state.remove(&a);
        let taken = state.take_slice_changes(|_| false).expect("a removal");
        assert!(taken[0].slice.is_none() && taken[0].id.name == "a");

        // A slice that fails: its problem must reach the report.
        state.apply(Kind::EndpointSlice, &resource, slice("b", false));
        assert!(!state.slices_alone_pending());
        assert!(state.take_slice_changes(|_| false).is_none());
        state.changed.clear();
        state.problems_moved = false;
        // Valid again: the problem goes, which a snapshot says.
        state.apply(Kind::EndpointSlice, &resource, slice("b", true));
        assert!(state.take_slice_changes(|_| false).is_none());
        state.problems_moved = false;
        state.changed.clear();

        // Another kind with them: a snapshot.
        state.apply(Kind::EndpointSlice, &resource, slice("c", true));
        state.changed.insert(ObjectKey {
            kind: Kind::Service,
            namespace: "t".into(),
            name: "web".into(),
        });
        assert!(state.take_slice_changes(|_| false).is_none());
        assert_eq!(state.changed.len(), 2, "nothing taken");
    }

    /// The reader's copy brought up to date in place equals a snapshot:
    /// the same objects (the source's `Arc`s), what changed before in the
    /// store returned, nothing pending after.
    #[test]
    fn changes_into_a_copy_make_the_snapshot() {
        let resource = api_resource(Kind::EndpointSlice);
        let slice = |name: &str, ip: &str| {
            serde_json::from_value::<DynamicObject>(json!({
                "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
                "metadata": {"name": name, "namespace": "t", "resourceVersion": "1",
                             "labels": {"kubernetes.io/service-name": "web"}},
                "addressType": "IPv4",
                "ports": [{"name": "http", "port": 8080}],
                "endpoints": [{"addresses": [ip]}],
            }))
            .unwrap()
        };
        let mut state = SourceState::default();
        let a = state.apply(Kind::EndpointSlice, &resource, slice("a", "10.0.0.1"));
        state.apply(Kind::EndpointSlice, &resource, slice("b", "10.0.0.2"));
        let mut copy = Store::default();
        let (before, changed, problems) = state.changes_into(&mut copy, &[]);
        assert_eq!((before.len(), changed.len(), problems.len()), (0, 2, 0));

        let old_b = copy.endpoint_slices[&NsName::new("t", "b")].object.clone();
        state.apply(Kind::EndpointSlice, &resource, slice("b", "10.0.0.3"));
        state.apply(Kind::EndpointSlice, &resource, slice("c", "10.0.0.4"));
        state.remove(&a);
        let (before, changed, _) = state.changes_into(&mut copy, &[]);
        assert_eq!(changed.len(), 3);
        let mut names: Vec<&str> = before
            .endpoint_slices
            .keys()
            .map(|id| id.name.as_str())
            .collect();
        names.sort_unstable();
        assert_eq!(names, ["a", "b"], "what was there before; c was not");
        assert!(Arc::ptr_eq(
            &before.endpoint_slices[&NsName::new("t", "b")].object,
            &old_b
        ));
        assert_eq!(copy.len(), state.store.len());
        for (id, s) in &state.store.endpoint_slices {
            assert!(
                Arc::ptr_eq(&copy.endpoint_slices[id].object, &s.object),
                "{id:?}"
            );
        }
        assert!(state.changed.is_empty());
    }

    /// The fleet's own status write comes back as an Ingress event: stored
    /// (the status writer reads it) but no change for the compile; a spec
    /// change is one.
    #[test]
    fn an_ingress_whose_status_alone_changed_is_no_change() {
        let resource = api_resource(Kind::Ingress);
        let ingress = |host: &str, version: &str, status: serde_json::Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
                "metadata": {"name": "web", "namespace": "t", "resourceVersion": version},
                "spec": {"rules": [{"host": host}]},
                "status": status,
            }))
            .unwrap()
        };
        let mut state = SourceState::default();
        let key = state.apply(Kind::Ingress, &resource, ingress("a.test", "1", json!({})));
        assert!(state.changed.remove(&key));
        let written = json!({"loadBalancer": {"ingress": [{"hostname": "lb.example.net"}]}});
        state.apply(
            Kind::Ingress,
            &resource,
            ingress("a.test", "2", written.clone()),
        );
        assert!(state.changed.is_empty(), "a status write is no change");
        let stored = &state.store.ingresses[&NsName::new("t", "web")].object;
        assert!(stored.status.is_some(), "but the status is stored");
        state.apply(Kind::Ingress, &resource, ingress("b.test", "3", written));
        assert!(state.changed.contains(&key), "a spec change is one");
    }

    #[test]
    fn namespaces_multiply_namespaced_watches_only() {
        // Secrets twice: certificates, and CA Secrets.
        assert_eq!(WatchSpec::all(&[]).len(), 6 + 10 + 3 + 1);
        let specs = WatchSpec::all(&["a".into(), "b".into()]);
        // Tenant, IngressClass, GatewayClass and Namespace once; the other
        // fifteen kinds (sixteen watches) in each namespace.
        assert_eq!(specs.len(), 4 + 16 * 2);
        assert!(
            specs
                .iter()
                .any(|s| s.kind == Kind::Tenant && s.namespace.is_none())
        );
    }

    #[tokio::test]
    async fn a_steady_stream_of_changes_still_wakes_the_consumer() {
        let (tx, mut rx) = watch::channel(0u64);
        let stream = tokio::spawn(async move {
            // Faster than the quiet period, forever.
            for n in 1.. {
                if tx.send(n).is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        // The bound guards against a hang only; without MAX_COALESCE the
        // wake-up never comes while the stream runs.
        let woke = tokio::time::timeout(
            Duration::from_secs(60),
            coalesced(&mut rx, Duration::from_millis(50)),
        )
        .await;
        assert_eq!(woke, Ok(true));
        stream.abort();
    }

    /// A compile waits PACE_FACTOR times the last one's cost (at most
    /// MAX_COALESCE), however early the burst settles; a change applied
    /// in place goes within PROMPT_MAX whatever the pace.
    #[tokio::test(start_paused = true)]
    async fn a_compile_waits_for_the_pace_and_an_in_place_change_does_not() {
        use tokio::time::Instant;
        let (tx, mut rx) = watch::channel(0u64);
        let mut pace = Pace::default();
        let started = Instant::now();
        let cost = Duration::from_millis(100);
        pace.record(started, started + cost);
        tx.send_modify(|n| *n += 1);
        assert!(coalesced_unless_prompt(&mut rx, PROMPT_QUIET, Some(&pace), || false).await);
        assert_eq!(Instant::now() - started, cost + cost * PACE_FACTOR);

        // A cheaper reload after it does not shorten the pace.
        let mut pace = Pace::default();
        let started = Instant::now();
        pace.record(started, started + cost);
        pace.record(started + cost, started + cost + Duration::from_millis(1));
        tx.send_modify(|n| *n += 1);
        assert!(coalesced_unless_prompt(&mut rx, PROMPT_QUIET, Some(&pace), || true).await);
        assert_eq!(
            Instant::now() - started,
            PROMPT_QUIET,
            "in place: not paced"
        );
        tx.send_modify(|n| *n += 1);
        assert!(coalesced_unless_prompt(&mut rx, PROMPT_QUIET, Some(&pace), || false).await);
        assert_eq!(Instant::now() - started, cost + cost * PACE_FACTOR);

        // A compile of 10 s waits MAX_COALESCE after it, no more.
        let mut pace = Pace::default();
        let started = Instant::now();
        pace.record(started, started + Duration::from_secs(10));
        tokio::time::sleep(Duration::from_secs(10)).await;
        tx.send_modify(|n| *n += 1);
        assert!(coalesced_unless_prompt(&mut rx, PROMPT_QUIET, Some(&pace), || false).await);
        assert_eq!(
            Instant::now() - started,
            Duration::from_secs(10) + MAX_COALESCE
        );

        // With no compile before it, a burst of whole changes settles in
        // PROMPT_QUIET.
        let pace = Pace::default();
        let started = Instant::now();
        tx.send_modify(|n| *n += 1);
        assert!(coalesced_unless_prompt(&mut rx, PROMPT_QUIET, Some(&pace), || false).await);
        assert_eq!(Instant::now() - started, PROMPT_QUIET);
    }
}
