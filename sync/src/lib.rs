//! The tenant agent's EndpointSlice mirror (`teapot agent`, docs/architecture.md
//! "LB cluster API").
//!
//! For every tenant Service that the controller half has mirrored into the
//! LB cluster (an LB Service labelled with its source), one LB EndpointSlice
//! per address family the Service has carries where traffic goes, named like
//! the mirrored Service (the IPv6 one with [`IPV6_SUFFIX`]; see
//! [`desired_slices`]):
//!
//! - [`Mode::NodePort`] (default): the InternalIPs of that family of the
//!   nodes that host ready endpoints, deduplicated, with the Service's
//!   NodePorts;
//! - [`Mode::Pod`]: the ready pod IPs with their target ports, for clusters
//!   whose pod network the LB cluster can reach.
//!
//! The mode is chosen per agent and overridden per Service with the
//! annotation [`MODE_ANNOTATION`] on the tenant Service (in the api
//! crate's allowlist; read by the agent only, never copied to the LB
//! cluster).
//!
//! Why writes stay few: the reconciler reads reflector stores (tenant
//! EndpointSlices, Nodes, LB Services) that also trigger it, so a burst of
//! events becomes one pending reconcile per Service (the runtime
//! deduplicates); a write happens only when the computed slice differs from
//! the last one written; and writes of one slice are spaced by at least
//! [`SyncConfig::min_write_interval`], a spacing that doubles while changes
//! keep arriving within it (up to [`MAX_INTERVAL_FACTOR`] times) and falls
//! back after a quiet spell, so a 500-pod rollout in `pod` mode is a
//! handful of writes rather than 500 while an isolated change still goes
//! out at once. Node changes matter only when a
//! node's InternalIP changes or a node goes away. A periodic full resync
//! forgets what was written and recomputes everything, which repairs the LB
//! side after restarts, missed events or foreign edits.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::net::IpAddr;
use std::str::FromStr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Config as ControllerConfig, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use parking_lot::Mutex;
use teapot_api::admission::{MANAGED_BY_LABEL, MANAGED_BY_SYNC};
use teapot_api::hostname::mirrored_service_name;
use teapot_api::names::SERVICE_NAME_LABEL;

pub mod shared;
pub mod stopping;
pub use shared::Shared;

/// Label on every LB object the agent writes: the tenant namespace.
pub const SOURCE_NAMESPACE_LABEL: &str = "teapot.dev/source-namespace";
/// Label on every LB object the agent writes: the tenant object's name
/// (shortened past 63 characters; the name of the LB object is the key).
pub const SOURCE_NAME_LABEL: &str = "teapot.dev/source-name";
/// Annotation on every LB object the agent writes: the tenant object's UID.
pub const SOURCE_UID_ANNOTATION: &str = "teapot.dev/source-uid";
/// Label on the LB Ingresses, Services and Secrets the agent writes (the
/// EndpointSlices carry [`MANAGED_BY_LABEL`]` = `[`MANAGED_BY_SYNC`]).
pub const APP_MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
/// Value of [`APP_MANAGED_BY_LABEL`].
pub const AGENT: &str = "teapot-agent";
/// [`APP_MANAGED_BY_LABEL`] of what `teapot capi` writes; the agent's GC
/// leaves those objects alone.
pub const CAPI: &str = "teapot-capi";
/// Field manager of every server-side apply the agent makes.
pub const FIELD_MANAGER: &str = "teapot-agent";
/// Per-Service override of the agent's mode, on the tenant Service:
/// `nodeport` or `pod`. Tenant-facing, so it is in the api crate's
/// allowlist like every `teapot.dev/` key; the agent reads it and never
/// copies it (it means nothing on the LB cluster).
pub const MODE_ANNOTATION: &str = "teapot.dev/endpoints";

/// The one error type of the agent (`teapot agent`): this crate is its
/// EndpointSlice half and `teapot-controller` its Ingress/Service half,
/// which reuses this type as `teapot_controller::Error`, so both halves
/// report a failure of the same kind the same way.
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
    #[error("a reflector store was dropped: the agent is shutting down")]
    StoreGone,
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

/// Where endpoint addresses come from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    /// Node InternalIPs and NodePorts: works on any network.
    #[default]
    NodePort,
    /// Pod IPs and target ports: the LB cluster must reach the pod network.
    Pod,
}

impl FromStr for Mode {
    type Err = String;
    fn from_str(s: &str) -> Result<Mode, String> {
        match s {
            "nodeport" => Ok(Mode::NodePort),
            "pod" => Ok(Mode::Pod),
            other => Err(format!(
                "{other:?} is not an endpoints mode: use \"nodeport\" or \"pod\""
            )),
        }
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::NodePort => "nodeport",
            Mode::Pod => "pod",
        })
    }
}

/// What the sync half needs.
#[derive(Clone)]
pub struct SyncConfig {
    pub tenant: Client,
    pub lb: Client,
    /// The tenant's namespace in the LB cluster (`tenant-<cluster>`).
    pub lb_namespace: String,
    pub mode: Mode,
    /// Full resync: forget what was written, recompute everything.
    pub resync: Duration,
    /// Least time between two writes of one LB EndpointSlice.
    pub min_write_interval: Duration,
}

impl SyncConfig {
    pub fn new(tenant: Client, lb: Client, lb_namespace: impl Into<String>) -> SyncConfig {
        SyncConfig {
            tenant,
            lb,
            lb_namespace: lb_namespace.into(),
            mode: Mode::NodePort,
            resync: Duration::from_secs(300),
            min_write_interval: Duration::from_millis(500),
        }
    }
}

/// Prometheus metrics of the sync half (registered by the agent).
#[derive(Clone, Debug)]
pub struct SyncMetrics {
    /// EndpointSlice writes to the LB cluster.
    pub writes: prometheus::IntCounter,
    /// Reconciles by result (`ok`, `error`).
    pub reconciles: prometheus::IntCounterVec,
}

impl SyncMetrics {
    pub fn new(registry: &prometheus::Registry) -> Result<SyncMetrics, prometheus::Error> {
        let writes = prometheus::IntCounter::new(
            "sync_endpointslice_writes_total",
            "EndpointSlice writes to the LB cluster",
        )?;
        let reconciles = prometheus::IntCounterVec::new(
            prometheus::Opts::new("sync_reconciles_total", "Service reconciles by result"),
            &["result"],
        )?;
        registry.register(Box::new(writes.clone()))?;
        registry.register(Box::new(reconciles.clone()))?;
        Ok(SyncMetrics { writes, reconciles })
    }
}

/// Tells any number of waiting tasks when watcher streams have listed
/// everything once.
///
/// Why not `Store::wait_until_ready`: in kube-runtime 5 it polls one
/// shared oneshot receiver, which keeps only the last waker it was polled
/// with. Of several reconciles waiting for a store at once (every Service
/// at start-up, when the EndpointSlices list slower than the Services),
/// only the last one polled was ever woken; the others waited forever, and
/// every later event for their Services queued behind them, so those
/// Services were never mirrored. A `tokio::sync::watch` wakes every waiter.
///
/// It also counts later listings (after a 410 or a lost connection): their
/// objects reach the store only when the listing completes, after the
/// events that triggered reconciles, and objects deleted meanwhile trigger
/// nothing, so [`Listed::relists`] asks for a reconcile of everything.
#[derive(Clone, Debug)]
pub struct Listed {
    streams: Vec<tokio::sync::watch::Receiver<bool>>,
    relists: Arc<tokio::sync::watch::Sender<u64>>,
}

impl Default for Listed {
    fn default() -> Listed {
        Listed {
            streams: Vec::new(),
            relists: Arc::new(tokio::sync::watch::channel(0).0),
        }
    }
}

impl Listed {
    /// Passes `stream` through, noting its completed listings (`InitDone`;
    /// a reflector upstream has filled its store by then).
    pub fn track<K, S>(&mut self, stream: S) -> impl Stream<Item = S::Item> + Send + 'static
    where
        K: Send + 'static,
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::watch::channel(false);
        self.streams.push(rx);
        let relists = self.relists.clone();
        stream.inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) && tx.send_replace(true) {
                relists.send_modify(|n| *n += 1);
            }
        })
    }

    /// One item per listing after the first of any tracked stream.
    pub fn relists(&self) -> impl Stream<Item = ()> + Send + 'static {
        futures::stream::unfold(self.relists.subscribe(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        })
    }

    /// Whether every tracked stream has listed.
    pub fn is_done(&self) -> bool {
        self.streams.iter().all(|rx| *rx.borrow())
    }

    /// Resolves once every tracked stream has listed; `false` when one of
    /// them ended first (shutdown).
    pub async fn wait(&self) -> bool {
        for rx in &self.streams {
            if rx.clone().wait_for(|listed| *listed).await.is_err() {
                return false;
            }
        }
        true
    }
}

/// What one LB slice was last written as, and when.
#[derive(Debug)]
struct Written {
    slice: serde_json::Value,
    at: Instant,
    /// The spacing this slice's next write keeps after `at`.
    interval: Duration,
    /// A change came within `interval` and waits for it: the Service is
    /// in a rollout.
    deferred: bool,
}

/// Longest spacing of one slice's writes, in multiples of the minimum.
pub const MAX_INTERVAL_FACTOR: u32 = 8;

impl Written {
    /// How long a change computed now waits, and the spacing after the
    /// write it leads to. A change after a quiet spell is written at once
    /// and the spacing goes back to `min`; a change that had to wait
    /// doubles the spacing (up to `min` x [`MAX_INTERVAL_FACTOR`]), so a
    /// long rollout costs a handful of writes (the interval grows 0.5, 1,
    /// 2, 4 s) while isolated changes keep the minimum delay.
    fn spacing(&self, min: Duration) -> (Duration, Duration) {
        let wait = self.interval.saturating_sub(self.at.elapsed());
        let next = if self.deferred || !wait.is_zero() {
            (self.interval * 2).min(min * MAX_INTERVAL_FACTOR).max(min)
        } else {
            min
        };
        (wait, next)
    }
}

/// Shared by every reconcile.
pub struct Context {
    config: SyncConfig,
    metrics: SyncMetrics,
    nodes: Store<Node>,
    slices: Store<EndpointSlice>,
    /// Which tenant slices belong to which Service.
    slice_index: SliceIndex,
    lb_services: Store<Service>,
    /// The slices this half wrote, as the LB cluster has them: which parts
    /// to delete when a Service shrinks, also after a restart.
    lb_slices: Store<EndpointSlice>,
    /// The stores above have listed.
    listed: Listed,
    written: Mutex<HashMap<String, Written>>,
    failures: Failures,
}

/// The names of the tenant EndpointSlices of each Service, so a reconcile
/// reads its Service's slices rather than scanning every slice of the
/// cluster (10,000 Services: a burst of changes would cost each of them a
/// pass over all). Keys may outlive their slice (one deleted while a watch
/// was down, or relabelled): the lookup goes through the store and checks
/// the label again, so a stale key costs one miss and nothing else.
#[derive(Clone, Debug, Default)]
struct SliceIndex(Arc<Mutex<HashMap<ServiceKey, BTreeSet<String>>>>);

/// A tenant Service: namespace, name.
type ServiceKey = (String, String);

impl SliceIndex {
    fn note(&self, event: &watcher::Event<EndpointSlice>) {
        let (slice, add) = match event {
            watcher::Event::Apply(s) | watcher::Event::InitApply(s) => (s, true),
            watcher::Event::Delete(s) => (s, false),
            watcher::Event::Init | watcher::Event::InitDone => return,
        };
        let (Some(namespace), Some(service)) =
            (slice.namespace(), slice.labels().get(SERVICE_NAME_LABEL))
        else {
            return;
        };
        let key = (namespace, service.clone());
        let mut index = self.0.lock();
        if add {
            index.entry(key).or_default().insert(slice.name_any());
        } else if let Some(names) = index.get_mut(&key) {
            names.remove(&slice.name_any());
            if names.is_empty() {
                index.remove(&key);
            }
        }
    }

    fn names(&self, namespace: &str, service: &str) -> Vec<String> {
        self.0
            .lock()
            .get(&(namespace.to_string(), service.to_string()))
            .map(|n| n.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The tenant Service an LB object mirrors, from its source labels.
pub fn source_of(meta: &ObjectMeta) -> Option<(String, String)> {
    let labels = meta.labels.as_ref()?;
    Some((
        labels.get(SOURCE_NAMESPACE_LABEL)?.clone(),
        labels.get(SOURCE_NAME_LABEL)?.clone(),
    ))
}

/// A label value for a name: names longer than a label value are
/// shortened the way [`teapot_api::hostname::shorten`] does.
pub fn label_value(name: &str) -> String {
    teapot_api::hostname::shorten(name, teapot_api::hostname::MAX_LABEL)
}

/// The ready condition as EndpointSlice semantics define it: unset means
/// ready.
fn is_ready(endpoint: &Endpoint) -> bool {
    endpoint
        .conditions
        .as_ref()
        .and_then(|c| c.ready)
        .unwrap_or(true)
}

/// The InternalIPs of a node that traffic can reach, the first of each
/// family (IPv4 before IPv6): a dual-stack node lists one of each, and a
/// NodePort listens on the node's address of the Service's family.
pub fn internal_ips(node: &Node) -> Vec<IpAddr> {
    let mut ips: Vec<IpAddr> = Vec::with_capacity(2);
    for ip in node
        .status
        .iter()
        .flat_map(|s| s.addresses.iter().flatten())
        .filter(|a| a.type_ == "InternalIP")
        .filter_map(|a| a.address.parse::<IpAddr>().ok())
    {
        if !ips.iter().any(|known| known.is_ipv6() == ip.is_ipv6()) {
            ips.push(ip);
        }
    }
    ips.sort_by_key(IpAddr::is_ipv6);
    ips
}

/// The address families the agent mirrors: the `addressType` of the LB
/// EndpointSlice and the suffix of its name after the mirrored Service's
/// (an EndpointSlice holds one family; the IPv4 slice keeps the plain name
/// it always had).
pub const FAMILIES: [(&str, &str); 2] = [("IPv4", ""), ("IPv6", IPV6_SUFFIX)];

/// Suffix of the LB EndpointSlice holding a Service's IPv6 endpoints.
pub const IPV6_SUFFIX: &str = "-ipv6";

/// Endpoints per LB EndpointSlice: the API server refuses more, and so
/// does the webhook under the default `maxEndpointsPerSlice`. A family with
/// more is split over several slices, as the EndpointSlice controller
/// does; the proxy merges a Service's slices by their
/// `kubernetes.io/service-name` label.
pub const MAX_ENDPOINTS_PER_SLICE: usize = 1000;

/// LB EndpointSlices per Service and family, so at most 5,000 endpoints per
/// family are mirrored: Kubernetes' tested bound on backends per Service
/// (and on nodes per cluster, which bounds `nodeport` mode), and with two
/// families the webhook's EndpointSlice quota of
/// [`teapot_api::admission::SLICES_PER_SERVICE`] per Service. A tenant
/// Service with more ready endpoints has the first 5,000 of each family
/// (by address) mirrored and a warning logged, so one hostile Service
/// cannot make the agent write without limit.
pub const MAX_SLICES_PER_FAMILY: usize =
    teapot_api::admission::SLICES_PER_SERVICE as usize / FAMILIES.len();

/// Separator before the ordinal of a family's second and later slices:
/// a dot, which no Service name (a DNS label) holds, so `web.2` never
/// meets the slice of a Service named `web-2`.
pub const PART_SEPARATOR: char = '.';

/// The LB EndpointSlice names of the tenant Service `namespace/name`, one
/// per family of [`FAMILIES`].
pub fn slice_names(namespace: &str, name: &str) -> [String; 2] {
    let mirrored = mirrored_service_name(namespace, name);
    FAMILIES.map(|(_, suffix)| format!("{mirrored}{suffix}"))
}

/// Every LB EndpointSlice name the tenant Service `namespace/name` can
/// have: per family, the first slice ([`slice_names`]) and the
/// `.2` ... `.`[`MAX_SLICES_PER_FAMILY`] parts after it.
pub fn all_slice_names(namespace: &str, name: &str) -> Vec<String> {
    slice_names(namespace, name)
        .into_iter()
        .flat_map(|first| (0..MAX_SLICES_PER_FAMILY).map(move |i| part_name(&first, i)))
        .collect()
}

/// The name of part `index` (from 0) of a family's slices.
fn part_name(first: &str, index: usize) -> String {
    if index == 0 {
        first.to_string()
    } else {
        format!("{first}{PART_SEPARATOR}{}", index + 1)
    }
}

/// The mode of one Service: its annotation, else the agent's.
pub fn mode_of(service: &Service, default: Mode) -> Result<Mode, Error> {
    match service.annotations().get(MODE_ANNOTATION) {
        None => Ok(default),
        Some(v) => v.parse().map_err(|message| Error::Invalid {
            object: object_name(service),
            field: format!("metadata.annotations[{MODE_ANNOTATION}]"),
            message,
        }),
    }
}

fn object_name(service: &Service) -> String {
    format!(
        "Service {}/{}",
        service.namespace().unwrap_or_default(),
        service.name_any()
    )
}

/// Computes the LB EndpointSlices for `service` from its tenant slices:
/// one per family of [`FAMILIES`] the Service has (the IPv4 one always, as
/// before dual-stack; the IPv6 one when `spec.ipFamilies` names IPv6 or a
/// tenant slice is IPv6). A tenant slice's endpoints go to the LB slice of
/// its family: in `nodeport` mode as the hosting nodes' InternalIPs of that
/// family (kube-proxy opens a Service's NodePort on the node addresses of
/// the Service's families only), in `pod` mode as the pod IPs.
/// `node_ips` resolves a node name to its InternalIPs ([`internal_ips`]).
pub fn desired_slices(
    service: &Service,
    slices: &[Arc<EndpointSlice>],
    node_ips: &dyn Fn(&str) -> Vec<IpAddr>,
    mode: Mode,
    lb_namespace: &str,
) -> Result<Vec<EndpointSlice>, Error> {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let mirrored = mirrored_service_name(&namespace, &name);
    let spec = service.spec.as_ref();
    let node_ports: Vec<EndpointPort> = spec
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|p| {
            Some(EndpointPort {
                name: p.name.clone(),
                port: Some(p.node_port?),
                protocol: p.protocol.clone(),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect();
    if mode == Mode::NodePort && node_ports.is_empty() {
        return Err(Error::Invalid {
            object: object_name(service),
            field: "spec.ports[].nodePort".into(),
            message: format!(
                "no port has a NodePort (spec.type is {}): set spec.type to NodePort, or annotate the Service {MODE_ANNOTATION}: pod when the LB cluster reaches pod IPs",
                spec.and_then(|s| s.type_.as_deref()).unwrap_or("ClusterIP")
            ),
        });
    }
    let declared = spec.and_then(|s| s.ip_families.as_ref());
    let mut out = Vec::with_capacity(FAMILIES.len());
    for (family, suffix) in FAMILIES {
        let v6 = family == "IPv6";
        let of_family: Vec<&Arc<EndpointSlice>> =
            slices.iter().filter(|s| s.address_type == family).collect();
        let wanted =
            !v6 || !of_family.is_empty() || declared.is_some_and(|f| f.iter().any(|f| f == family));
        if !wanted {
            continue;
        }
        let mut addresses = BTreeSet::new();
        let ports: Vec<EndpointPort> = match mode {
            Mode::NodePort => {
                for endpoint in of_family
                    .iter()
                    .flat_map(|s| s.endpoints.iter().flatten())
                    .filter(|e| is_ready(e))
                {
                    if let Some(node) = endpoint.node_name.as_deref() {
                        addresses
                            .extend(node_ips(node).into_iter().filter(|ip| ip.is_ipv6() == v6));
                    }
                }
                node_ports.clone()
            }
            Mode::Pod => {
                let mut by_name: BTreeMap<Option<String>, EndpointPort> = BTreeMap::new();
                for slice in &of_family {
                    for port in slice.ports.iter().flatten() {
                        by_name
                            .entry(port.name.clone())
                            .or_insert_with(|| port.clone());
                    }
                    for endpoint in slice.endpoints.iter().flatten().filter(|e| is_ready(e)) {
                        addresses.extend(
                            endpoint
                                .addresses
                                .iter()
                                .filter_map(|a| a.parse::<IpAddr>().ok())
                                .filter(|ip| ip.is_ipv6() == v6),
                        );
                    }
                }
                by_name.into_values().collect()
            }
        };
        let max = MAX_ENDPOINTS_PER_SLICE * MAX_SLICES_PER_FAMILY;
        if addresses.len() > max {
            tracing::warn!(service = %format!("{namespace}/{name}"), family, endpoints = addresses.len(), mirrored = max, "more endpoints than the agent mirrors per Service and family; the rest are not served");
        }
        let endpoints: Vec<Endpoint> = addresses
            .into_iter()
            .take(max)
            .map(|ip: IpAddr| Endpoint {
                addresses: vec![ip.to_string()],
                conditions: Some(EndpointConditions {
                    ready: Some(true),
                    ..EndpointConditions::default()
                }),
                ..Endpoint::default()
            })
            .collect();
        let first = format!("{mirrored}{suffix}");
        // An empty family keeps its first slice, empty: the Service stays
        // known to the proxy with no endpoint rather than vanishing.
        let parts: Vec<Vec<Endpoint>> = if endpoints.is_empty() {
            vec![Vec::new()]
        } else {
            endpoints
                .chunks(MAX_ENDPOINTS_PER_SLICE)
                .map(<[Endpoint]>::to_vec)
                .collect()
        };
        for (index, endpoints) in parts.into_iter().enumerate() {
            out.push(EndpointSlice {
                metadata: ObjectMeta {
                    name: Some(part_name(&first, index)),
                    namespace: Some(lb_namespace.to_string()),
                    labels: Some(BTreeMap::from([
                        (SERVICE_NAME_LABEL.to_string(), mirrored.clone()),
                        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_SYNC.to_string()),
                        (SOURCE_NAMESPACE_LABEL.to_string(), namespace.clone()),
                        (SOURCE_NAME_LABEL.to_string(), label_value(&name)),
                    ])),
                    annotations: service.metadata.uid.as_ref().map(|uid| {
                        BTreeMap::from([(SOURCE_UID_ANNOTATION.to_string(), uid.clone())])
                    }),
                    ..ObjectMeta::default()
                },
                address_type: family.into(),
                endpoints: Some(endpoints),
                ports: Some(ports.clone()),
            });
        }
    }
    Ok(out)
}

/// Reconciles one tenant Service: writes its LB EndpointSlice when the
/// controller has mirrored it and the slice changed.
pub async fn reconcile(service: Arc<Service>, ctx: Arc<Context>) -> Result<Action, Error> {
    // A store that has not listed yet would yield an empty slice and take a
    // served route down after a restart.
    if !ctx.listed.wait().await {
        return Err(Error::StoreGone);
    }
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let mirrored = mirrored_service_name(&namespace, &name);
    let names = all_slice_names(&namespace, &name);
    let lb_ref = ObjectRef::<Service>::new(&mirrored).within(&ctx.config.lb_namespace);
    if ctx.lb_services.get(&lb_ref).is_none() {
        tracing::debug!(service = %format!("{namespace}/{name}"), "not mirrored on the LB side (yet)");
        // Not exported (or no longer): the controller's GC removes the slices.
        let mut written = ctx.written.lock();
        for n in &names {
            written.remove(n);
        }
        return Ok(Action::await_change());
    }
    let mode = mode_of(&service, ctx.config.mode)?;
    let slices: Vec<Arc<EndpointSlice>> = ctx
        .slice_index
        .names(&namespace, &name)
        .into_iter()
        .filter_map(|slice| ctx.slices.get(&ObjectRef::new(&slice).within(&namespace)))
        .filter(|s| s.labels().get(SERVICE_NAME_LABEL) == Some(&name))
        .collect();
    let nodes = &ctx.nodes;
    let node_ips = |n: &str| {
        nodes
            .get(&ObjectRef::<Node>::new(n))
            .map(|node| internal_ips(&node))
            .unwrap_or_default()
    };
    let desired = desired_slices(&service, &slices, &node_ips, mode, &ctx.config.lb_namespace)?;
    let api: Api<EndpointSlice> = Api::namespaced(ctx.config.lb.clone(), &ctx.config.lb_namespace);
    let min = ctx.config.min_write_interval;
    let mut requeue: Option<Duration> = None;
    for slice in &desired {
        let slice_name = slice.metadata.name.clone().unwrap_or_default();
        tracing::debug!(service = %format!("{namespace}/{name}"), slice = %slice_name, slices = slices.len(), endpoints = slice.endpoints.as_ref().map_or(0, Vec::len), "computed");
        let value = serde_json::to_value(slice)?;
        let (wait, interval) = {
            let mut written = ctx.written.lock();
            match written.get_mut(&slice_name) {
                Some(w) if w.slice == value => continue,
                Some(w) => {
                    let (wait, next) = w.spacing(min);
                    w.deferred |= !wait.is_zero();
                    (wait, next)
                }
                None => (Duration::ZERO, min),
            }
        };
        if !wait.is_zero() {
            // Events arriving meanwhile collapse into one pending reconcile,
            // which then computes from the newest store.
            requeue = Some(requeue.map_or(wait, |r| r.min(wait)));
            continue;
        }
        api.patch(
            &slice_name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(slice),
        )
        .await?;
        ctx.metrics.writes.inc();
        tracing::debug!(service = %format!("{namespace}/{name}"), slice = %slice_name, %mode, endpoints = slice.endpoints.as_ref().map_or(0, Vec::len), "EndpointSlice written");
        ctx.written.lock().insert(
            slice_name,
            Written {
                slice: value,
                at: Instant::now(),
                interval,
                deferred: false,
            },
        );
    }
    // Slices the Service no longer needs, after the ones it does were
    // written (a shrink never leaves a moment with fewer endpoints): a
    // family it no longer has (a dual-stack Service made IPv4-only), parts
    // past its endpoint count. Either would keep routing to old endpoints.
    for gone in names
        .iter()
        .filter(|n| !desired.iter().any(|d| d.metadata.name.as_ref() == Some(*n)))
    {
        let on_lb = ctx
            .lb_slices
            .get(&ObjectRef::new(gone).within(&ctx.config.lb_namespace))
            .is_some();
        if on_lb || ctx.written.lock().contains_key(gone) {
            match api.delete(gone, &Default::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e.into()),
            }
            ctx.written.lock().remove(gone);
            ctx.metrics.writes.inc();
            tracing::debug!(service = %format!("{namespace}/{name}"), slice = %gone, "EndpointSlice the Service no longer needs deleted");
        }
    }
    if let Some(wait) = requeue {
        return Ok(Action::requeue(wait));
    }
    ctx.failures.clear(&format!("{namespace}/{name}"));
    Ok(Action::await_change())
}

/// Logs, counts and requeues with exponential backoff (1 s to 5 min).
pub fn error_policy(service: Arc<Service>, error: &Error, ctx: Arc<Context>) -> Action {
    let key = format!(
        "{}/{}",
        service.namespace().unwrap_or_default(),
        service.name_any()
    );
    let failures = ctx.failures.record(key.clone());
    ctx.metrics.reconciles.with_label_values(&["error"]).inc();
    tracing::warn!(service = %key, %error, failures, "EndpointSlice sync failed; retrying");
    Action::requeue(backoff(failures))
}

/// Consecutive reconcile failures by object key, which set the requeue
/// [`backoff`] of both agent halves' error policies. A success clears the
/// object, so its next failure is retried after 1 s again.
#[derive(Debug, Default)]
pub struct Failures(Mutex<HashMap<String, u32>>);

impl Failures {
    /// Counts one more failure of `key`; returns the count so far (1 for
    /// the first).
    pub fn record(&self, key: String) -> u32 {
        let mut counts = self.0.lock();
        let n = counts.entry(key).or_insert(0);
        *n = n.saturating_add(1);
        *n
    }

    /// Forgets the failures of `key` after it reconciled.
    pub fn clear(&self, key: &str) {
        self.0.lock().remove(key);
    }
}

/// 1 s, 2 s, 4 s, ... up to 5 min.
pub fn backoff(failures: u32) -> Duration {
    let secs = 1u64 << failures.saturating_sub(1).min(9);
    Duration::from_secs(secs.min(300))
}

/// Turns Node events into "reconcile everything" only when a node's
/// InternalIP changed or a node vanished (status heartbeats are frequent
/// and irrelevant here).
fn node_changes(
    stream: impl Stream<Item = Result<Node, watcher::Error>> + Send + 'static,
    nodes: Store<Node>,
) -> impl Stream<Item = ()> + Send + 'static {
    let mut known: HashMap<String, Vec<IpAddr>> = HashMap::new();
    stream.filter_map(move |event| {
        let changed = match event {
            Ok(_) => {
                let current: HashMap<String, Vec<IpAddr>> = nodes
                    .state()
                    .iter()
                    .map(|n| (n.name_any(), internal_ips(n)))
                    .collect();
                let changed = current != known;
                known = current;
                changed
            }
            Err(_) => false,
        };
        futures::future::ready(changed.then_some(()))
    })
}

/// Runs the sync half alone until `shutdown` completes, with watches of
/// its own (the agent shares them with its controller half: [`run_shared`]).
pub async fn run(
    config: SyncConfig,
    metrics: SyncMetrics,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let mut listed = Listed::default();
    let services = Shared::watch(
        Api::<Service>::all(config.tenant.clone()),
        watcher::Config::default(),
        &mut listed,
    );
    let lb_services = Shared::watch(
        Api::<Service>::namespaced(config.lb.clone(), &config.lb_namespace),
        lb_copies(),
        &mut listed,
    );
    run_shared(config, metrics, &services, &lb_services, listed, shutdown).await;
}

/// What selects the LB objects the agent wrote.
pub fn lb_copies() -> watcher::Config {
    watcher::Config::default().labels(&format!("{APP_MANAGED_BY_LABEL}={AGENT}"))
}

/// Runs the sync half until `shutdown` completes, on the agent's one
/// watch of tenant Services and of LB Services (`listed` tracks them).
/// Tenant EndpointSlices, Nodes and LB EndpointSlices only this half
/// reads, so it watches them itself.
pub async fn run_shared(
    config: SyncConfig,
    metrics: SyncMetrics,
    services: &Shared<Service>,
    lb_services: &Shared<Service>,
    mut listed: Listed,
    shutdown: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let tenant = config.tenant.clone();
    let (nodes, node_writer) = reflector::store();
    let node_stream = listed
        .track(reflector::reflector(
            node_writer,
            watcher(Api::<Node>::all(tenant.clone()), watcher::Config::default()),
        ))
        .touched_objects();
    let (slices, slice_writer) = reflector::store();
    let slice_index = SliceIndex::default();
    let indexer = slice_index.clone();
    let slice_stream = listed
        .track(reflector::reflector(
            slice_writer,
            watcher(
                Api::<EndpointSlice>::all(tenant.clone()),
                watcher::Config::default(),
            ),
        ))
        .inspect(move |event| {
            if let Ok(event) = event {
                indexer.note(event);
            }
        })
        .touched_objects();
    let (lb_slices, lb_slice_writer) = reflector::store();
    // Read, never a trigger: this half's own writes would only come back.
    let lb_slice_stream = listed
        .track(reflector::reflector(
            lb_slice_writer,
            watcher(
                Api::<EndpointSlice>::namespaced(config.lb.clone(), &config.lb_namespace),
                watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_SYNC}")),
            ),
        ))
        .filter_map(|_| futures::future::ready(None::<()>));
    let resync = config.resync;
    let ctx = Arc::new(Context {
        config,
        metrics: metrics.clone(),
        nodes: nodes.clone(),
        slices,
        slice_index,
        lb_services: lb_services.store(),
        lb_slices,
        listed,
        written: Mutex::new(HashMap::new()),
        failures: Failures::default(),
    });
    let forget = ctx.clone();
    let ticks = futures::stream::unfold((), move |()| async move {
        tokio::time::sleep(resync).await;
        Some(((), ()))
    })
    .map(move |()| {
        forget.written.lock().clear();
    });
    let relists = ctx.listed.relists();
    let all = futures::stream::select(
        futures::stream::select(node_changes(node_stream, nodes), ticks),
        futures::stream::select(relists, lb_slice_stream),
    );
    let shutdown = futures::FutureExt::shared(shutdown);
    let controller = Controller::for_stream(services.applied(), services.store())
        .with_config(ControllerConfig::default().debounce(Duration::from_millis(20)))
        .watches_stream(slice_stream, |slice: EndpointSlice| {
            let service = slice.labels().get(SERVICE_NAME_LABEL)?.clone();
            Some(ObjectRef::<Service>::new(&service).within(&slice.namespace()?))
        })
        .watches_stream(lb_services.touched(), |lb: Service| {
            let (namespace, name) = source_of(&lb.metadata)?;
            Some(ObjectRef::<Service>::new(&name).within(&namespace))
        })
        .reconcile_all_on(all)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile, error_policy, ctx)
        .for_each(|result| {
            let metrics = metrics.clone();
            async move {
                match result {
                    Ok(_) => metrics.reconciles.with_label_values(&["ok"]).inc(),
                    Err(e) => tracing::debug!(error = %e, "sync controller event"),
                }
            }
        });
    stopping::until_stopped(controller, services.store(), shutdown).await;
}

#[cfg(test)]
mod tests;
