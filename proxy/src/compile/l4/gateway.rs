//! Gateway API on the L4 plane (docs/gateway-api-l4.md): Gateway listeners
//! of protocol TCP, UDP and TLS (mode Passthrough or Terminate), and the TCPRoutes,
//! UDPRoutes and TLSRoutes attached to them.
//!
//! A Gateway with such listeners is allocated like a LoadBalancer Service
//! ([`super::allocation`], same pools, holdings and first-holder rules):
//! one address for all its L4 listeners, each distinct `(port, transport)`
//! one claimed listener. Its holding is kept under [`holder_key`], a name
//! no Service can have, so Services and Gateways share one holdings map and
//! one state file. HTTP and HTTPS listeners are not this module's: they are
//! served on the proxy's `--http` / `--https` listeners (`compile::gateway`).
//!
//! Attachment follows the specification: a route's `parentRefs` name a
//! Gateway (and optionally a listener by `sectionName` and/or `port`); a
//! listener takes it when its protocol fits the route kind (TCPRoute ->
//! TCP, UDPRoute -> UDP, TLSRoute -> TLS) and its `allowedRoutes` allow the
//! route's namespace and kind. A TLSRoute's hostnames intersect the
//! listener's hostname (a wildcard is a suffix there). A TCP or UDP
//! listener forwards to one route: the oldest attached (creationTimestamp,
//! then namespace/name); later ones are told so (`Accepted=False`, reason
//! `Conflicted`, implementation-specific). All `backendRefs` of a route's
//! rules share its traffic by weight.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use teapot_api::HostPattern;
use teapot_gateway_api::Gateway;
use teapot_model::store::{NsName, Store};
use teapot_model::tenancy::Tenancy;

use super::allocation::{Holding, PortKey};
pub use super::forward::{
    Chosen, Refusals, SniEntry, SniRoutes, Target, Terminate, union, weighted,
};
use super::pool::Protocol;
pub use super::report::{GatewayPart, ListenerPart};
pub use crate::compile::api_status::RouteKind;
use crate::compile::api_status::{ListenerOutcome, ParentReport, RouteObject, RouteReport};
use crate::compile::attach;
use crate::compile::bind::TenantHosts;
use crate::compile::condition::Condition;
use crate::compile::listeners::{self, ListenerClass, Plane};
use crate::compile::upstream::Upstream;

use teapot_model::attachment::{self, GROUP};

/// Whether teapot serves `gateway`: its class is a GatewayClass of
/// teapot's controller, or (with no GatewayClass of that name in the
/// store, as in a manifests directory written for teapot) it is named
/// `teapot`.
pub fn is_teapot_gateway(store: &Store, gateway: &Gateway) -> bool {
    teapot_model::gateway::is_teapot_class(store, &gateway.spec.gateway_class_name)
}

/// The transport and mode of an L4 listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerKind {
    Tcp,
    Udp,
    TlsPassthrough,
    /// TLS ended at the proxy with the listener's certificate; the
    /// cleartext goes to the routes' backends (over TLS again when a
    /// BackendTLSPolicy asks).
    TlsTerminate,
    /// HTTP and HTTPS listeners of a Gateway with its own address: their
    /// socket is allocated and bound here, their routes are the HTTP
    /// compile's (`compile::gateway`).
    Http,
    Https,
}

impl ListenerKind {
    fn protocol(self) -> Protocol {
        match self {
            ListenerKind::Udp => Protocol::Udp,
            _ => Protocol::Tcp,
        }
    }

    /// The route kind this listener takes (an HTTP listener's routes are
    /// not attached here).
    fn route_kind(self) -> Option<RouteKind> {
        match self {
            ListenerKind::Tcp => Some(RouteKind::Tcp),
            ListenerKind::Udp => Some(RouteKind::Udp),
            ListenerKind::TlsPassthrough | ListenerKind::TlsTerminate => Some(RouteKind::Tls),
            ListenerKind::Http | ListenerKind::Https => None,
        }
    }

    fn is_edge(self) -> bool {
        matches!(self, ListenerKind::Http | ListenerKind::Https)
    }
}

/// One L4 listener of a Gateway, before allocation.
#[derive(Debug)]
pub(super) struct Listener<'s> {
    pub name: &'s str,
    pub port: u16,
    pub kind: ListenerKind,
    /// Why the listener is not served: the `Accepted=False` reason and
    /// message (`ProtocolConflict` and `HostnameConflict` also set
    /// `Conflicted=True`).
    pub problem: Option<(&'static str, String)>,
    /// `allowedRoutes.kinds` named a kind this listener cannot take
    /// (`ResolvedRefs=False`, `InvalidRouteKinds`); the valid ones still
    /// attach.
    pub invalid_kinds: Vec<String>,
    /// Whether its route kind is among the allowed ones.
    pub takes_routes: bool,
    /// A Terminate listener's certificate, or why none can be used
    /// (`ResolvedRefs=False`; the listener is not served: never a
    /// handshake with a certificate it did not name).
    pub terminate: Option<Result<Arc<Terminate>, (&'static str, String)>>,
}

/// The listeners of a Gateway this plane binds (its HTTP and HTTPS
/// listeners only when the Gateway has its own address), as
/// [`crate::compile::listeners::classify`] judged them: a listener's
/// problem is its conflict, else its plane's refusal.
pub(super) fn listeners<'s>(classes: &[ListenerClass<'s>]) -> Vec<Listener<'s>> {
    classes
        .iter()
        .filter_map(|l| {
            let kind = match l.plane? {
                Plane::Tcp => ListenerKind::Tcp,
                Plane::Udp => ListenerKind::Udp,
                Plane::Tls if l.passthrough => ListenerKind::TlsPassthrough,
                Plane::Tls => ListenerKind::TlsTerminate,
                Plane::Http if l.own_address => ListenerKind::Http,
                Plane::Https if l.own_address => ListenerKind::Https,
                // On the shared listeners: the HTTP compile's.
                Plane::Http | Plane::Https => return None,
            };
            Some(Listener {
                name: l.name(),
                port: l.port,
                kind,
                takes_routes: kind
                    .route_kind()
                    .is_some_and(|k| l.kinds.admitted.contains(&k.as_str())),
                invalid_kinds: l.kinds.invalid.clone(),
                problem: l.conflict.clone().or_else(|| l.refused.clone()),
                terminate: None,
            })
        })
        .collect()
}

/// Reads a Terminate listener's certificate: the first of its
/// `certificateRefs` (core Secrets of the Gateway's namespace, another
/// namespace's with a ReferenceGrant for an operator's Gateway, as for
/// HTTPS listeners) that the store holds as a usable `kubernetes.io/tls`
/// pair. Every reference must be valid, as the specification asks of
/// `ResolvedRefs`; none usable: the listener is not served.
fn terminate(
    store: &Store,
    id: &NsName,
    tenant: bool,
    class: &ListenerClass<'_>,
) -> Result<Arc<Terminate>, (&'static str, String)> {
    let refs = class.certificate_refs();
    if refs.is_empty() {
        return Err((
            "InvalidCertificateRef",
            "a TLS listener of mode Terminate needs certificateRefs".to_string(),
        ));
    }
    let mut key = None;
    for r in refs {
        let ns = r.namespace.as_deref().unwrap_or(&id.namespace);
        let kind_ok = r.group.as_deref().unwrap_or("").is_empty()
            && r.kind.as_deref().unwrap_or("Secret") == "Secret";
        if !kind_ok {
            return Err((
                "InvalidCertificateRef",
                format!("certificateRef {} is not a core Secret", r.name),
            ));
        }
        if !crate::compile::attach::gateway_may_use_secret(store, id, tenant, ns, &r.name) {
            return Err((
                "RefNotPermitted",
                format!(
                    "no ReferenceGrant lets this Gateway use Secret {ns}/{}",
                    r.name
                ),
            ));
        }
        let Some(secret) = store.secrets.get(&teapot_model::store::NsRef {
            namespace: ns,
            name: &r.name,
        }) else {
            return Err((
                "InvalidCertificateRef",
                format!(
                    "Secret {ns}/{} not found or not a usable kubernetes.io/tls Secret",
                    r.name
                ),
            ));
        };
        key.get_or_insert_with(|| secret.object.certificate.key.clone());
    }
    let key = key.expect("at least one reference");
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .map_err(|e| ("InvalidCertificateRef", e.to_string()))?
    .with_no_client_auth()
    .with_cert_resolver(Arc::new(OneCertificate(key)));
    Ok(Arc::new(Terminate {
        listener: format!("{id}/{}", class.name()),
        config: Arc::new(config),
    }))
}

/// A Terminate listener's certificate, whatever the ClientHello asks: SNI
/// has already chosen the listener.
#[derive(Debug)]
struct OneCertificate(Arc<rustls::sign::CertifiedKey>);

impl rustls::server::ResolvesServerCert for OneCertificate {
    fn resolve(
        &self,
        _: rustls::server::ClientHello<'_>,
    ) -> Option<Arc<rustls::sign::CertifiedKey>> {
        Some(self.0.clone())
    }
}

/// The distinct sockets the served listeners need.
pub(super) fn ports(listeners: &[Listener<'_>]) -> Vec<PortKey> {
    let set: BTreeSet<PortKey> = listeners
        .iter()
        .filter(|l| l.problem.is_none() && !matches!(l.terminate, Some(Err(_))))
        .map(|l| (l.port, l.kind.protocol()))
        .collect();
    set.into_iter().collect()
}

/// What `status.addresses` says the Gateway holds (kube mode, after a
/// restart): the first IP address; its ports are not recorded there, so
/// it counts as a hint for the address alone.
pub(super) fn status_holding(gateway: &Gateway) -> Option<Holding> {
    let addresses = gateway.status.as_ref()?.addresses.as_ref()?;
    let addr: IpAddr = addresses
        .iter()
        .filter(|a| a.r#type.as_deref().is_none_or(|t| t == "IPAddress"))
        .find_map(|a| a.value.parse().ok())?;
    Some(Holding::single(addr, None))
}

/// A parentRef as written, with the defaults the CRD applies.
#[derive(Clone, Debug)]
struct ParentRef<'s> {
    /// Its index in `spec.parentRefs`.
    index: usize,
    group: &'s str,
    kind: &'s str,
    namespace: &'s str,
    name: &'s str,
    section_name: Option<&'s str>,
    port: Option<i32>,
}

/// A backendRef as written.
#[derive(Clone, Debug)]
struct BackendRef<'s> {
    group: &'s str,
    kind: &'s str,
    namespace: Option<&'s str>,
    name: &'s str,
    port: Option<i32>,
    weight: i32,
}

/// One TCPRoute, UDPRoute or TLSRoute in the shape the three share.
#[derive(Debug)]
struct RouteView<'s> {
    kind: RouteKind,
    object: RouteObject,
    id: &'s NsName,
    created: Option<&'s Timestamp>,
    parents: Vec<ParentRef<'s>>,
    /// TLSRoute only; empty: every hostname of the listener.
    hostnames: Vec<HostPattern>,
    backends: Vec<BackendRef<'s>>,
}

macro_rules! route_view {
    ($object:ident, $id:expr, $route:expr, $hostnames:expr) => {{
        let route = $route;
        let id: &NsName = $id;
        let object = RouteObject::$object(route.clone());
        RouteView {
            kind: object.kind(),
            object,
            id,
            created: route.metadata.creation_timestamp.as_ref().map(|t| &t.0),
            parents: route
                .spec
                .parent_refs
                .iter()
                .flatten()
                .enumerate()
                .map(|(index, p)| ParentRef {
                    index,
                    group: p.group.as_deref().unwrap_or(GROUP),
                    kind: p.kind.as_deref().unwrap_or("Gateway"),
                    namespace: p.namespace.as_deref().unwrap_or(&id.namespace),
                    name: &p.name,
                    section_name: p.section_name.as_deref(),
                    port: p.port,
                })
                .collect(),
            hostnames: $hostnames,
            backends: route
                .spec
                .rules
                .iter()
                .flat_map(|r| r.backend_refs.iter())
                .map(|b| BackendRef {
                    group: b.group.as_deref().unwrap_or(""),
                    kind: b.kind.as_deref().unwrap_or("Service"),
                    namespace: b.namespace.as_deref(),
                    name: &b.name,
                    port: b.port,
                    weight: b.weight.unwrap_or(1),
                })
                .collect(),
        }
    }};
}

fn routes(store: &Store) -> Vec<RouteView<'_>> {
    let mut out: Vec<RouteView<'_>> = Vec::new();
    for (id, r) in &store.tcp_routes {
        out.push(route_view!(Tcp, id, &r.object, Vec::new()));
    }
    for (id, r) in &store.udp_routes {
        out.push(route_view!(Udp, id, &r.object, Vec::new()));
    }
    for (id, r) in &store.tls_routes {
        // The loader validated every hostname.
        let hosts = r
            .object
            .spec
            .hostnames
            .iter()
            .filter_map(|h| HostPattern::parse(h).ok())
            .collect();
        out.push(route_view!(Tls, id, &r.object, hosts));
    }
    // Oldest first: the specification's tie-break, and the first-holder
    // rule for TCP and UDP listeners.
    out.sort_by(|a, b| {
        (a.created.is_none(), a.created, a.id).cmp(&(b.created.is_none(), b.created, b.id))
    });
    out
}

/// A Gateway about to be allocated.
#[derive(Debug)]
pub(super) struct Plan<'s> {
    pub id: &'s NsName,
    pub gateway: &'s Gateway,
    /// Its L4 listeners.
    pub listeners: Vec<Listener<'s>>,
    /// Every listener, classified: a route aimed at any of them attaches
    /// or is refused by the one walk (`compile::attach`).
    classes: Vec<ListenerClass<'s>>,
}

/// Gateways of teapot's: those with L4 listeners are allocated; every one
/// answers the L4 routes that name it.
pub(super) fn plans<'s>(
    store: &'s Store,
    tenancy: &Tenancy<'_>,
    every_operator_gateway: bool,
) -> Vec<Plan<'s>> {
    store
        .gateways
        .iter()
        .filter(|(_, g)| is_teapot_gateway(store, &g.object))
        .map(|(id, g)| {
            let tenant = tenancy.get(&id.namespace).is_some();
            let own = listeners::own_address(&g.object, tenant, every_operator_gateway);
            let classes = listeners::classify_at(&g.object, own);
            let mut served = listeners(&classes);
            for l in &mut served {
                if l.kind == ListenerKind::TlsTerminate && l.problem.is_none() {
                    let class = classes
                        .iter()
                        .find(|c| c.name() == l.name)
                        .expect("a listener of the Gateway");
                    l.terminate = Some(terminate(store, id, tenant, class));
                }
            }
            Plan {
                id,
                gateway: &g.object,
                listeners: served,
                classes,
            }
        })
        .collect()
}

/// A route's valid backends with their weights.
type Weighted = Vec<(u32, Arc<Upstream>)>;

/// A route accepted on a listener: its index, and for a TLSRoute the
/// hostnames it serves there (`None`: any), those a tenant may not route
/// left out.
type Bound = (usize, Vec<Option<HostPattern>>);

/// Routes resolved against the Gateways: which route each listener serves
/// and every route's parent statuses.
pub(super) struct Attached<'s> {
    /// `(gateway, listener name)` -> routes accepted there, oldest first.
    by_listener: BTreeMap<(&'s NsName, &'s str), Vec<Bound>>,
    routes: Vec<RouteView<'s>>,
    /// Per route, its valid backends resolved, and the weight of its
    /// invalid ones.
    resolved: Vec<(Weighted, u32)>,
    /// Per TLSRoute, its backends as a Terminate listener reaches them:
    /// over TLS where a BackendTLSPolicy asks.
    secured: Vec<Weighted>,
    pub reports: Vec<RouteReport>,
}

/// Attaches every L4 route to the listeners of `plans` and resolves its
/// backends. `resolve(namespace, service, port, port name)` is the
/// compile's resolver. A tenant's route binds to its own Gateways only,
/// and a TLSRoute of a tenant serves the hostnames the tenant may route
/// (`hosts`: a custom domain once DNS proves it), as HTTPRoutes do
/// ([`crate::compile::bind`]).
pub(super) fn attach<'s>(
    store: &'s Store,
    hosts: &mut TenantHosts<'_, '_>,
    plans: &[Plan<'s>],
    resolve: &mut impl FnMut(&'s str, &'s str, i32, &'s str, bool) -> Arc<Upstream>,
) -> Attached<'s> {
    let tenancy = hosts.tenancy;
    let routes = routes(store);
    let mut by_listener: BTreeMap<(&'s NsName, &'s str), Vec<Bound>> = BTreeMap::new();
    let mut reports = Vec::new();
    let mut resolved = Vec::with_capacity(routes.len());
    let mut secured = Vec::with_capacity(routes.len());
    for (ri, route) in routes.iter().enumerate() {
        let (backends, tls_backends, invalid, refs_problem) =
            backends(store, tenancy, route, resolve);
        resolved.push((backends, invalid));
        secured.push(tls_backends);
        let tenant = tenancy.get(&route.id.namespace);
        let mut parents = Vec::new();
        for parent in &route.parents {
            if parent.group != GROUP || parent.kind != "Gateway" {
                continue;
            }
            let Some(plan) = plans
                .iter()
                .find(|p| p.id.namespace == parent.namespace && p.id.name == parent.name)
            else {
                // Not one of teapot's Gateways: its controller answers.
                continue;
            };
            // Every listener the parentRef names, HTTP and HTTPS ones too:
            // a route of the wrong kind there is NotAllowedByListeners.
            let walk = attach::attach(
                store,
                plan.id,
                plan.classes.iter().map(|c| attach::Seat {
                    spec: c.spec,
                    hostname: c.hostname.as_ref(),
                    kinds: &c.kinds.admitted,
                    served: c.plane.is_some_and(Plane::is_l4)
                        && c.refused.is_none()
                        && c.conflict.is_none(),
                }),
                &attach::RouteFacts {
                    kind: route.kind.as_str(),
                    namespace: &route.id.namespace,
                    tenant: tenant.is_some(),
                    hostnames: (route.kind == RouteKind::Tls).then_some(&route.hostnames[..]),
                },
                (parent.section_name, parent.port),
                |h| match tenant {
                    Some(t) => hosts.admit(t, h),
                    None => Ok(()),
                },
            );
            let accepted = match walk {
                Err(refusal) => Condition::new("Accepted", false, refusal.reason, refusal.message),
                Ok(walk) => {
                    for (i, served) in walk.listeners {
                        by_listener
                            .entry((plan.id, plan.classes[i].name()))
                            .or_default()
                            .push((ri, served.into_iter().map(|h| h.cloned()).collect()));
                    }
                    // Served in part: the hostnames left out, and why.
                    Condition::new("Accepted", true, "Accepted", walk.refused_hosts.join("; "))
                }
            };
            let refs = match &refs_problem {
                None => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
                Some((reason, message)) => {
                    Condition::new("ResolvedRefs", false, reason, message.clone())
                }
            };
            parents.push(ParentReport {
                index: parent.index,
                conditions: vec![accepted, refs],
            });
        }
        if !parents.is_empty() {
            reports.push(RouteReport::new(route.object.clone(), parents));
        }
    }
    // Several routes on one TCP or UDP listener are all Accepted and
    // counted in attachedRoutes, but only the oldest is bound: the
    // specification's conflict rule (GEP "Conflicts", and the
    // TCPRouteMultipleRoutesAttachment conformance test).
    reports.sort_by(|a, b| {
        (a.kind(), a.namespace(), a.name()).cmp(&(b.kind(), b.namespace(), b.name()))
    });
    Attached {
        by_listener,
        routes,
        resolved,
        secured,
        reports,
    }
}

/// Resolves a route's backendRefs: the weighted upstreams, for a TLSRoute
/// the same as a Terminate listener reaches them (BackendTLSPolicy
/// applied), the weight of the invalid ones, and the first problem as a
/// ResolvedRefs reason and message.
#[allow(clippy::type_complexity)]
fn backends<'s>(
    store: &'s Store,
    tenancy: &Tenancy<'_>,
    route: &RouteView<'s>,
    resolve: &mut impl FnMut(&'s str, &'s str, i32, &'s str, bool) -> Arc<Upstream>,
) -> (Weighted, Weighted, u32, Option<(&'static str, String)>) {
    let mut out = Vec::new();
    let mut secured = Vec::new();
    let mut invalid: u32 = 0;
    let mut problem: Option<(&'static str, String)> = None;
    let protocol = match route.kind {
        RouteKind::Udp => "UDP",
        _ => "TCP",
    };
    for (i, b) in route.backends.iter().enumerate() {
        // Counted as invalid until it resolves.
        let weight = u32::try_from(b.weight).unwrap_or(0);
        invalid = invalid.saturating_add(weight);
        let at = format!("spec.rules[].backendRefs[{i}] ({})", b.name);
        if !b.group.is_empty() || b.kind != "Service" {
            problem.get_or_insert((
                "InvalidKind",
                format!(
                    "{at}: only core Services are backends, not {}/{}",
                    b.group, b.kind
                ),
            ));
            continue;
        }
        let namespace: &'s str = b.namespace.unwrap_or(&route.id.namespace);
        if namespace != route.id.namespace {
            let permitted = tenancy.get(&route.id.namespace).is_none()
                && attachment::granted(
                    store,
                    route.kind.as_str(),
                    &route.id.namespace,
                    "Service",
                    namespace,
                    b.name,
                );
            if !permitted {
                problem.get_or_insert((
                    "RefNotPermitted",
                    format!("{at}: Service {namespace}/{} is in another namespace and no ReferenceGrant there allows it", b.name),
                ));
                continue;
            }
        }
        let Some(port) = b.port else {
            problem.get_or_insert((
                "UnsupportedValue",
                format!("{at}: a Service backend needs a port"),
            ));
            continue;
        };
        let Some(service) = store
            .services
            .get(&NsName::new(namespace, b.name))
            .map(|s| &s.object)
        else {
            problem.get_or_insert((
                "BackendNotFound",
                format!("{at}: Service {namespace}/{} not found", b.name),
            ));
            continue;
        };
        // The Service port of this number and the route's transport: its
        // name selects the EndpointSlice port (a TCP and a UDP port may
        // share a number, as DNS's do).
        let port_name: Option<&'s str> = service
            .spec
            .as_ref()
            .and_then(|s| s.ports.as_ref())
            .into_iter()
            .flatten()
            .find(|p| p.port == port && p.protocol.as_deref().unwrap_or("TCP") == protocol)
            .map(|p| p.name.as_deref().unwrap_or(""));
        let Some(port_name) = port_name else {
            problem.get_or_insert((
                "BackendNotFound",
                format!(
                    "{at}: Service {namespace}/{} has no {protocol} port {port}",
                    b.name
                ),
            ));
            continue;
        };
        invalid = invalid.saturating_sub(weight);
        let (store_ns, store_name) = store
            .services
            .get_key_value(&NsName::new(namespace, b.name))
            .map(|(k, _)| (k.namespace.as_str(), k.name.as_str()))
            .expect("looked up above");
        out.push((
            weight,
            resolve(store_ns, store_name, port, port_name, false),
        ));
        if route.kind == RouteKind::Tls {
            secured.push((weight, resolve(store_ns, store_name, port, port_name, true)));
        }
    }
    (out, secured, invalid, problem)
}

/// A Gateway's allocation: its address and the sockets refused there, or
/// the refusal's reason and message.
pub(super) type Allocation<'o> = Result<(IpAddr, &'o [(PortKey, String)]), (&'static str, String)>;

/// What one Gateway forwards, per socket, and its report, once its address
/// is known (`None`: refused, with the reason and message).
pub(super) fn serve<'s>(
    plan: &Plan<'s>,
    attached: &Attached<'s>,
    pool: Option<String>,
    outcome: Allocation<'_>,
    runtime: &Arc<super::Runtime>,
) -> (BTreeMap<super::pool::ListenerKey, Target>, GatewayPart) {
    let mut sockets: BTreeMap<super::pool::ListenerKey, Target> = BTreeMap::new();
    let mut listeners = Vec::new();
    let (address, refused_ports, gateway_conditions) = match &outcome {
        Ok((addr, refused)) => (
            Some(*addr),
            *refused,
            vec![Condition::new("Programmed", true, "Programmed", "")],
        ),
        Err((reason, message)) => (
            None,
            &[][..],
            vec![Condition::new(
                "Programmed",
                false,
                // An address `spec.addresses` names that the Gateway cannot
                // have (outside its pool, or another's): the
                // specification's reason for an address that cannot be
                // used, telling it from one never assigned.
                if matches!(*reason, "AddressNotInPool" | "AddressTaken") {
                    "AddressNotUsable"
                } else {
                    "AddressNotAssigned"
                },
                format!("{reason}: {message}"),
            )],
        ),
    };
    for l in &plan.listeners {
        let protocol = match l.kind {
            ListenerKind::Tcp => "TCP",
            ListenerKind::Udp => "UDP",
            ListenerKind::TlsPassthrough | ListenerKind::TlsTerminate => "TLS",
            ListenerKind::Http => "HTTP",
            ListenerKind::Https => "HTTPS",
        };
        if l.kind.is_edge() {
            listeners.push(edge_listener(
                l,
                protocol,
                address,
                refused_ports,
                runtime,
                &mut sockets,
            ));
            continue;
        }
        let attached_routes: &[Bound] = attached
            .by_listener
            .get(&(plan.id, l.name))
            .map_or(&[], Vec::as_slice);
        let mut conditions = Vec::new();
        let mut key = None;
        let mut bound = None;
        conditions.push(match &l.problem {
            Some((reason, message)) => Condition::new("Accepted", false, reason, message.clone()),
            None => Condition::new("Accepted", true, "Accepted", ""),
        });
        conditions.push(match &l.problem {
            Some((reason @ ("ProtocolConflict" | "HostnameConflict"), message)) => {
                Condition::new("Conflicted", true, reason, message.clone())
            }
            _ => Condition::new("Conflicted", false, "NoConflicts", ""),
        });
        let unresolved = match &l.terminate {
            Some(Err(why)) => Some(why),
            _ => None,
        };
        conditions.push(if let Some((reason, message)) = unresolved {
            Condition::new("ResolvedRefs", false, reason, message.clone())
        } else if l.invalid_kinds.is_empty() {
            Condition::new("ResolvedRefs", true, "ResolvedRefs", "")
        } else {
            Condition::new(
                "ResolvedRefs",
                false,
                "InvalidRouteKinds",
                format!(
                    "allowedRoutes.kinds: a {protocol} listener takes {} only, not {}",
                    l.kind.route_kind().map_or("", |k| k.as_str()),
                    l.invalid_kinds.join(", ")
                ),
            )
        });
        let programmed = if let Some((_, message)) = l.problem.as_ref().or(unresolved) {
            Condition::new("Programmed", false, "Invalid", message.clone())
        } else if let Some(addr) = address {
            let port = (l.port, l.kind.protocol());
            if let Some((_, why)) = refused_ports.iter().find(|(p, _)| *p == port) {
                conditions[0] = Condition::new("Accepted", false, "PortUnavailable", why.clone());
                Condition::new("Programmed", false, "Invalid", why.clone())
            } else {
                let k = super::pool::ListenerKey {
                    addr,
                    port: l.port,
                    protocol: l.kind.protocol(),
                };
                key = Some(k);
                let live = super::runtime::LiveState::new(runtime.clone(), k);
                let state = live.now();
                bound = Some(live);
                add_target(&mut sockets, k, l, attached_routes, attached);
                if state.starts_with("bind failed") {
                    Condition::new("Programmed", false, "Pending", state)
                } else {
                    Condition::new("Programmed", true, "Programmed", "")
                }
            }
        } else {
            Condition::new(
                "Programmed",
                false,
                "Pending",
                "the Gateway has no address".to_string(),
            )
        };
        conditions.push(programmed);
        listeners.push(ListenerPart {
            name: l.name.to_string(),
            port: l.port,
            protocol,
            listener: key,
            state: bound,
            outcome: ListenerOutcome {
                supported_kinds: match l.kind.route_kind() {
                    Some(k) if l.takes_routes => vec![k.as_str()],
                    _ => Vec::new(),
                },
                attached_routes: attached_routes.len() as u32,
                conditions,
            },
        });
    }
    for target in sockets.values_mut() {
        if let Target::Sni(sni) = target {
            sni.sort();
        }
    }
    let report = GatewayPart {
        namespace: plan.id.namespace.clone(),
        name: plan.id.name.clone(),
        pool,
        address,
        conditions: gateway_conditions,
        listeners,
    };
    (sockets, report)
}

/// An HTTP or HTTPS listener of a Gateway with its own address: its
/// socket when the address and port are granted, and the conditions the
/// allocation decides (`Accepted` when its port was refused,
/// `Programmed`); the HTTP compile's outcome gives the rest
/// (`api_status`).
fn edge_listener(
    l: &Listener<'_>,
    protocol: &'static str,
    address: Option<IpAddr>,
    refused_ports: &[(PortKey, String)],
    runtime: &Arc<super::Runtime>,
    sockets: &mut BTreeMap<super::pool::ListenerKey, Target>,
) -> ListenerPart {
    let mut conditions = Vec::new();
    let mut key = None;
    let mut bound = None;
    let programmed = if let Some((_, message)) = &l.problem {
        Condition::new("Programmed", false, "Invalid", message.clone())
    } else if let Some(addr) = address {
        let port = (l.port, l.kind.protocol());
        if let Some((_, why)) = refused_ports.iter().find(|(p, _)| *p == port) {
            conditions.push(Condition::new(
                "Accepted",
                false,
                "PortUnavailable",
                why.clone(),
            ));
            Condition::new("Programmed", false, "Invalid", why.clone())
        } else {
            let k = super::pool::ListenerKey {
                addr,
                port: l.port,
                protocol: l.kind.protocol(),
            };
            key = Some(k);
            let live = super::runtime::LiveState::new(runtime.clone(), k);
            let state = live.now();
            bound = Some(live);
            sockets.insert(
                k,
                Target::Edge {
                    tls: l.kind == ListenerKind::Https,
                },
            );
            if state.starts_with("bind failed") {
                Condition::new("Programmed", false, "Pending", state)
            } else {
                Condition::new("Programmed", true, "Programmed", "")
            }
        }
    } else {
        Condition::new(
            "Programmed",
            false,
            "AddressNotAssigned",
            "the Gateway has no address".to_string(),
        )
    };
    conditions.push(programmed);
    ListenerPart {
        name: l.name.to_string(),
        port: l.port,
        protocol,
        listener: key,
        state: bound,
        outcome: ListenerOutcome {
            supported_kinds: Vec::new(),
            attached_routes: 0,
            conditions,
        },
    }
}

fn add_target<'s>(
    sockets: &mut BTreeMap<super::pool::ListenerKey, Target>,
    key: super::pool::ListenerKey,
    listener: &Listener<'s>,
    attached_routes: &[Bound],
    attached: &Attached<'s>,
) {
    let label = |ri: usize| {
        let r = &attached.routes[ri];
        format!("{} {}", r.kind.as_str(), r.id)
    };
    match listener.kind {
        ListenerKind::Http | ListenerKind::Https => {}
        ListenerKind::Tcp | ListenerKind::Udp => {
            let (upstream, refusals) = match attached_routes.first() {
                Some(&(ri, _)) => {
                    let (backends, invalid) = &attached.resolved[ri];
                    weighted(label(ri), backends, *invalid)
                }
                None => (
                    Arc::new(Upstream::new(
                        format!("listener {}", listener.name),
                        Vec::new(),
                        Some("no route is attached to the listener".into()),
                    )),
                    None,
                ),
            };
            sockets.insert(key, Target::Backends(upstream, refusals));
        }
        ListenerKind::TlsPassthrough | ListenerKind::TlsTerminate => {
            let terminate = match &listener.terminate {
                Some(Ok(t)) => Some(t.clone()),
                // Not served (ports() left its socket out unless another
                // listener needs it).
                Some(Err(_)) => return,
                None => None,
            };
            let Target::Sni(sni) = sockets
                .entry(key)
                .or_insert_with(|| Target::Sni(SniRoutes::default()))
            else {
                return;
            };
            for (ri, served) in attached_routes {
                let (plain, invalid) = &attached.resolved[*ri];
                // A terminated connection's backends are the policy's;
                // a passed-through one's are reached as they are (the
                // client's TLS is the backend's).
                let backends = match terminate {
                    Some(_) => &attached.secured[*ri],
                    None => plain,
                };
                let chosen = Arc::new(weighted(label(*ri), backends, *invalid));
                for host in served {
                    sni.entries
                        .push((host.clone(), chosen.clone(), terminate.clone()));
                }
            }
        }
    }
}

/// The Gateway L4 compile through `compile::compile`, with Services in the
/// same pools.
#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::super::allocation::holder_key;
    use super::super::{Holding, L4Config, L4Inputs, L4Report};
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    fn compile(previous: BTreeMap<NsName, Holding>, docs: &[&str]) -> Snapshot {
        compile_with(previous, docs, CompileOptions::default())
    }

    /// [`compile`] with other options besides the L4 ones (domain, proofs).
    fn compile_with(
        previous: BTreeMap<NsName, Holding>,
        docs: &[&str],
        options: CompileOptions,
    ) -> Snapshot {
        let config = L4Config {
            pools: vec![
                "default=127.0.0.1".parse().unwrap(),
                "edge=192.0.2.10,192.0.2.11".parse().unwrap(),
            ],
            ..L4Config::default()
        };
        let options = CompileOptions {
            l4: Some(L4Inputs {
                config: Arc::new(config),
                previous: Arc::new(previous),
                runtime: Arc::default(),
            }),
            ..options
        };
        let docs: Vec<String> = docs.iter().map(|d| d.to_string()).collect();
        compile_test_docs(&docs, &options)
    }

    fn l4(s: &Snapshot) -> &L4Report {
        s.report.l4.as_ref().expect("L4 compiled")
    }

    fn gateway<'a>(s: &'a Snapshot, ns: &str, name: &str) -> &'a GatewayPart {
        l4(s)
            .gateways
            .iter()
            .find(|g| g.namespace == ns && g.name == name)
            .unwrap_or_else(|| panic!("Gateway {ns}/{name} not reported"))
    }

    fn listener<'a>(g: &'a GatewayPart, name: &str) -> &'a ListenerPart {
        g.listeners.iter().find(|l| l.name == name).unwrap()
    }

    fn condition<'a>(conditions: &'a [Condition], type_: &str) -> &'a Condition {
        conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("no {type_} in {conditions:?}"))
    }

    fn route<'a>(s: &'a Snapshot, kind: RouteKind, name: &str) -> &'a RouteReport {
        l4(s)
            .routes
            .iter()
            .find(|r| r.kind() == kind && r.name() == name)
            .unwrap_or_else(|| panic!("{kind:?} {name} not reported"))
    }

    const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: teapot}
spec: {controllerName: teapot.dev/gateway-controller}
";

    fn gw(ns: &str, name: &str, created: &str, listeners: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}
spec:
  gatewayClassName: teapot
  listeners: {listeners}
"
        )
    }

    fn svc(ns: &str, name: &str, created: &str, ports: &str) -> String {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}
spec: {{type: LoadBalancer, ports: {ports}}}
"
        )
    }

    /// A backend Service (ClusterIP: no listener of its own).
    fn backend(ns: &str, name: &str, ports: &str) -> String {
        format!(
            "apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: {ns}}}
spec: {{ports: {ports}}}
"
        )
    }

    fn slice(ns: &str, service: &str, ports: &str, ip: &str) -> String {
        format!(
            "apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {{name: {service}-1, namespace: {ns}, labels: {{kubernetes.io/service-name: {service}}}}}
addressType: IPv4
ports: {ports}
endpoints: [{{addresses: [\"{ip}\"]}}]
"
        )
    }

    fn route_doc(kind: &str, ns: &str, name: &str, created: &str, spec: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: {kind}
metadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"{created}\"}}
spec: {spec}
"
        )
    }

    const OLD: &str = "2024-01-01T00:00:00Z";
    const NEW: &str = "2025-01-01T00:00:00Z";

    #[test]
    fn a_listener_held_by_one_object_is_never_taken_by_another() {
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        let tcp = |p: u16| (p, Protocol::Tcp);
        // The younger Gateway holds 5432; the older Service holds 80 on the
        // same address and adds 5432.
        let previous = BTreeMap::from([
            (
                holder_key(&NsName::new("ops", "edge")),
                Holding::single(addr, Some([tcp(5432)].into())),
            ),
            (
                NsName::new("ops", "web"),
                Holding::single(addr, Some([tcp(80)].into())),
            ),
        ]);
        let s = compile(
            previous.clone(),
            &[
                CLASS,
                &gw(
                    "ops",
                    "edge",
                    NEW,
                    "[{name: db, port: 5432, protocol: TCP}]",
                ),
                &svc(
                    "ops",
                    "web",
                    OLD,
                    "[{name: http, port: 80}, {name: db, port: 5432}]",
                ),
            ],
        );
        let g = gateway(&s, "ops", "edge");
        assert_eq!(g.address, Some(addr));
        let db = listener(g, "db");
        assert_eq!(
            condition(&db.outcome.conditions, "Programmed").status,
            "True"
        );
        let web = l4(&s).services.iter().find(|r| r.name == "web").unwrap();
        let ports = condition(&web.conditions, "PortsAllocated");
        assert_eq!((ports.status, ports.reason), ("False", "AddressTaken"));
        assert!(ports.message.contains("Gateway ops/edge"), "{ports:?}");
        let holdings = &s.l4.as_ref().unwrap().holdings;
        assert_eq!(
            holdings[&NsName::new("ops", "web")].addresses[0].ports,
            Some([tcp(80)].into())
        );

        // The other way round: the Gateway adds a listener on a port the
        // Service holds there; only that listener is refused.
        let previous = BTreeMap::from([
            (
                holder_key(&NsName::new("ops", "edge")),
                Holding::single(addr, Some([tcp(5432)].into())),
            ),
            (
                NsName::new("ops", "web"),
                Holding::single(addr, Some([tcp(80)].into())),
            ),
        ]);
        let s = compile(
            previous,
            &[
                CLASS,
                &gw(
                    "ops",
                    "edge",
                    OLD,
                    "[{name: db, port: 5432, protocol: TCP}, {name: web, port: 80, protocol: TCP}]",
                ),
                &svc("ops", "web", NEW, "[{name: http, port: 80}]"),
            ],
        );
        let g = gateway(&s, "ops", "edge");
        let web = listener(g, "web");
        let accepted = condition(&web.outcome.conditions, "Accepted");
        assert_eq!(
            (accepted.status, accepted.reason),
            ("False", "PortUnavailable")
        );
        assert!(accepted.message.contains("Service ops/web"), "{accepted:?}");
        assert!(web.listener.is_none());
        assert_eq!(
            condition(&listener(g, "db").outcome.conditions, "Programmed").status,
            "True"
        );
        let t = &s.l4.as_ref().unwrap().table;
        let service_route = &t.listeners[&super::super::ListenerKey {
            addr,
            port: 80,
            protocol: Protocol::Tcp,
        }];
        assert_eq!(service_route.service, NsName::new("ops", "web"));
    }

    #[test]
    fn new_gateways_and_services_take_free_addresses_and_share_the_tenant_cap() {
        let tenant = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
  l4: {pool: edge, maxListeners: 3}
";
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                tenant,
                "apiVersion: v1
kind: Service
metadata: {name: dns, namespace: tenant-acme, creationTimestamp: \"2024-01-01T00:00:00Z\"}
spec: {type: LoadBalancer, loadBalancerClass: teapot.dev/lb, ports: [{name: dns, port: 53, protocol: UDP}, {name: db, port: 5432}]}
",
                &gw(
                    "tenant-acme",
                    "edge",
                    "2024-06-01T00:00:00Z",
                    "[{name: db, port: 5432, protocol: TCP}]",
                ),
                &gw(
                    "tenant-acme",
                    "late",
                    NEW,
                    "[{name: a, port: 7000, protocol: TCP}]",
                ),
            ],
        );
        let dns = l4(&s).services.iter().find(|r| r.name == "dns").unwrap();
        assert_eq!(dns.address, Some("192.0.2.10".parse().unwrap()));
        // 5432 is taken on .10: the Gateway gets the next address.
        let edge = gateway(&s, "tenant-acme", "edge");
        assert_eq!(edge.address, Some("192.0.2.11".parse().unwrap()));
        assert_eq!(edge.pool.as_deref(), Some("edge"));
        // Two Service ports and one Gateway listener: the cap is reached.
        let late = gateway(&s, "tenant-acme", "late");
        assert_eq!(late.address, None);
        let programmed = condition(&late.conditions, "Programmed");
        assert_eq!(
            (programmed.status, programmed.reason),
            ("False", "AddressNotAssigned")
        );
        assert!(
            programmed.message.contains("ListenerLimit"),
            "{programmed:?}"
        );
        assert!(
            programmed.message.contains("maxListeners = 3"),
            "{programmed:?}"
        );
    }

    #[test]
    fn routes_attach_by_section_port_kind_and_namespace_and_forward_by_weight() {
        let listeners = "[{name: db, port: 5432, protocol: TCP},
                          {name: dns, port: 53, protocol: UDP},
                          {name: tls, port: 8443, protocol: TLS, hostname: \"*.example.com\", tls: {mode: Passthrough},
                           allowedRoutes: {namespaces: {from: All}}},
                          {name: term, port: 9443, protocol: TLS, tls: {mode: Terminate}},
                          {name: web, port: 80, protocol: HTTP}]";
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                &gw("ops", "edge", OLD, listeners),
                &backend("ops", "pg-a", "[{name: pg, port: 5432}]"),
                &slice("ops", "pg-a", "[{name: pg, port: 15432}]", "127.0.0.2"),
                &backend("ops", "pg-b", "[{name: pg, port: 5432}]"),
                &slice("ops", "pg-b", "[{name: pg, port: 25432}]", "127.0.0.3"),
                &backend(
                    "ops",
                    "dns",
                    "[{name: dns-tcp, port: 53, protocol: TCP}, {name: dns, port: 53, protocol: UDP}]",
                ),
                &slice(
                    "ops",
                    "dns",
                    "[{name: dns-tcp, port: 1053, protocol: TCP}, {name: dns, port: 2053, protocol: UDP}]",
                    "127.0.0.4",
                ),
                &backend("apps", "site", "[{port: 443}]"),
                &slice("apps", "site", "[{port: 10443}]", "127.0.0.5"),
                &route_doc(
                    "TCPRoute",
                    "ops",
                    "pg",
                    OLD,
                    "{parentRefs: [{name: edge, sectionName: db}], rules: [{backendRefs: [{name: pg-a, port: 5432, weight: 3}, {name: pg-b, port: 5432}]}]}",
                ),
                &route_doc(
                    "TCPRoute",
                    "ops",
                    "pg-late",
                    NEW,
                    "{parentRefs: [{name: edge, port: 5432}], rules: [{backendRefs: [{name: pg-b, port: 5432}]}]}",
                ),
                &route_doc(
                    "UDPRoute",
                    "ops",
                    "dns",
                    OLD,
                    "{parentRefs: [{name: edge, sectionName: dns}, {name: edge, sectionName: db}], rules: [{backendRefs: [{name: dns, port: 53}]}]}",
                ),
                &route_doc(
                    "TCPRoute",
                    "apps",
                    "other-ns",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops, sectionName: db}], rules: [{backendRefs: [{name: site, port: 443}]}]}",
                ),
                &route_doc(
                    "TLSRoute",
                    "apps",
                    "site",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops}], hostnames: [site.example.com, other.org], rules: [{backendRefs: [{name: site, port: 443}, {name: pg-a, namespace: ops, port: 5432}]}]}",
                ),
                &route_doc(
                    "TLSRoute",
                    "apps",
                    "foreign",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops}], hostnames: [foreign.org], rules: [{backendRefs: [{name: site, port: 443}]}]}",
                ),
            ],
        );
        let g = gateway(&s, "ops", "edge");
        assert_eq!(g.address, Some("127.0.0.1".parse().unwrap()));
        let names: Vec<&str> = g.listeners.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["db", "dns", "tls", "term"],
            "HTTP listeners are not L4's"
        );
        // Both TCPRoutes are attached; the older is bound (below).
        assert_eq!(listener(g, "db").outcome.attached_routes, 2);
        assert_eq!(listener(g, "dns").outcome.attached_routes, 1);
        assert_eq!(listener(g, "tls").outcome.attached_routes, 1);
        // Terminate without certificateRefs: not served (fail closed).
        let term = &listener(g, "term").outcome.conditions;
        let refs = condition(term, "ResolvedRefs");
        assert_eq!(
            (refs.status, refs.reason),
            ("False", "InvalidCertificateRef")
        );
        assert_eq!(condition(term, "Programmed").status, "False");
        assert!(listener(g, "term").listener.is_none());

        let accepted = |kind, name: &str, parent: usize| {
            let r = route(&s, kind, name);
            let c = &r.parents[parent].conditions;
            (
                condition(c, "Accepted").reason,
                condition(c, "ResolvedRefs").reason,
            )
        };
        assert_eq!(
            accepted(RouteKind::Tcp, "pg", 0),
            ("Accepted", "ResolvedRefs")
        );
        assert_eq!(
            accepted(RouteKind::Tcp, "pg-late", 0),
            ("Accepted", "ResolvedRefs")
        );
        assert_eq!(
            accepted(RouteKind::Udp, "dns", 0),
            ("Accepted", "ResolvedRefs")
        );
        // Its second parentRef names the TCP listener.
        assert_eq!(
            accepted(RouteKind::Udp, "dns", 1),
            ("NotAllowedByListeners", "ResolvedRefs")
        );
        assert_eq!(
            accepted(RouteKind::Tcp, "other-ns", 0),
            ("NotAllowedByListeners", "ResolvedRefs")
        );
        // Accepted (its site.example.com is under the listener's wildcard),
        // but its cross-namespace backend has no grant.
        assert_eq!(
            accepted(RouteKind::Tls, "site", 0),
            ("Accepted", "RefNotPermitted")
        );
        assert_eq!(
            accepted(RouteKind::Tls, "foreign", 0),
            ("NoMatchingListenerHostname", "ResolvedRefs")
        );
        let status = route(&s, RouteKind::Tcp, "pg").status();
        assert_eq!(
            status["parents"][0]["controllerName"],
            teapot_api::names::GATEWAY_CONTROLLER_NAME
        );
        assert_eq!(status["parents"][0]["parentRef"]["sectionName"], "db");
        assert_eq!(status["parents"][0]["parentRef"]["namespace"], "ops");

        let table = &s.l4.as_ref().unwrap().table;
        let key = |port, protocol| super::super::ListenerKey {
            addr: "127.0.0.1".parse().unwrap(),
            port,
            protocol,
        };
        let db = &table.listeners[&key(5432, Protocol::Tcp)];
        assert_eq!(db.service, NsName::new("ops", "edge"));
        let rotation: Vec<String> = db
            .upstream
            .endpoints
            .load()
            .iter()
            .map(|e| e.addr.to_string())
            .collect();
        assert_eq!(
            rotation,
            [
                "127.0.0.2:15432",
                "127.0.0.2:15432",
                "127.0.0.3:25432",
                "127.0.0.2:15432"
            ]
        );
        let dns = &table.listeners[&key(53, Protocol::Udp)];
        assert_eq!(
            dns.upstream.endpoints.load()[0].addr.to_string(),
            "127.0.0.4:2053"
        );
        let tls = &table.listeners[&key(8443, Protocol::Tcp)];
        let sni = tls
            .sni
            .as_ref()
            .expect("a passthrough listener chooses by SNI");
        let (site, refusals) = sni.choose(Some("site.example.com")).expect("routed");
        assert_eq!(site.endpoints.load()[0].addr.to_string(), "127.0.0.5:10443");
        // Its ungranted backend's half of the connections is refused.
        let refusals = refusals.as_ref().expect("a refused share");
        assert_eq!((0..4).filter(|_| refusals.refuse_next()).count(), 2);
        assert!(
            sni.choose(Some("other.org")).is_none(),
            "outside the listener's hostname"
        );
        assert!(sni.choose(Some("x.example.com")).is_none());
        assert!(!table.listeners.contains_key(&key(9443, Protocol::Tcp)));
        assert!(!table.listeners.contains_key(&key(80, Protocol::Tcp)));
    }

    #[test]
    fn a_reference_grant_opens_a_backend_in_another_namespace() {
        let grant = "apiVersion: gateway.networking.k8s.io/v1
kind: ReferenceGrant
metadata: {name: from-apps, namespace: ops}
spec:
  from: [{group: gateway.networking.k8s.io, kind: TLSRoute, namespace: apps}]
  to: [{group: \"\", kind: Service, name: pg-a}]
";
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                grant,
                &gw(
                    "ops",
                    "edge",
                    OLD,
                    "[{name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough}, allowedRoutes: {namespaces: {from: All}}}]",
                ),
                &backend("ops", "pg-a", "[{name: pg, port: 5432}]"),
                &slice("ops", "pg-a", "[{name: pg, port: 15432}]", "127.0.0.2"),
                &route_doc(
                    "TLSRoute",
                    "apps",
                    "site",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops}], hostnames: [db.example.com], rules: [{backendRefs: [{name: pg-a, namespace: ops, port: 5432}]}]}",
                ),
            ],
        );
        let r = route(&s, RouteKind::Tls, "site");
        assert_eq!(
            condition(&r.parents[0].conditions, "ResolvedRefs").status,
            "True"
        );
        let table = &s.l4.as_ref().unwrap().table;
        let tls = &table.listeners[&super::super::ListenerKey {
            addr: "127.0.0.1".parse().unwrap(),
            port: 8443,
            protocol: Protocol::Tcp,
        }];
        let db = tls
            .sni
            .as_ref()
            .unwrap()
            .choose(Some("db.example.com"))
            .expect("routed");
        assert_eq!(db.0.endpoints.load()[0].addr.to_string(), "127.0.0.2:15432");
        assert!(db.1.is_none());
    }

    /// Kube mode after a restart: nothing remembered, the address the
    /// Gateway's status shows is kept while its ports are free there.
    #[test]
    fn the_status_address_is_kept_after_a_restart() {
        let mut doc = gw(
            "ops",
            "edge",
            OLD,
            "[{name: db, port: 5432, protocol: TCP}]",
        );
        doc.push_str(
            "status:\n  addresses: [{type: Hostname, value: edge.example.net}, {type: IPAddress, value: 192.0.2.11}]\n",
        );
        let tenant = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {cluster: acme, nodeCIDRs: [10.1.0.0/24], l4: {pool: edge}}
";
        let doc = doc.replace("namespace: ops", "namespace: tenant-acme");
        let s = compile(BTreeMap::new(), &[CLASS, tenant, &doc]);
        let g = gateway(&s, "tenant-acme", "edge");
        assert_eq!(
            g.address,
            Some("192.0.2.11".parse().unwrap()),
            "not the first pool address"
        );
    }

    /// The listener checks of the upstream conformance tests
    /// TLSRouteListenerPassthroughSupportedKinds and
    /// TCPRouteInvalidNonTCPListener; Terminate and Mixed are served
    /// (TLSRouteListenerTerminateNotSupported and
    /// TLSRouteListenerMixedTerminationNotSupported do not run for an
    /// implementation claiming TLSRouteModeTerminate and TLSRouteModeMixed),
    /// a Terminate listener without a usable certificate is not served.
    #[test]
    fn listener_conflicts_modes_kinds_and_http_parents() {
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                &gw(
                    "ops",
                    "mixed",
                    OLD,
                    "[{name: tls-terminate, port: 8443, protocol: TLS, hostname: t.example.com, tls: {mode: Terminate}},
                      {name: tls-passthrough, port: 8443, protocol: TLS, hostname: p.example.com, tls: {mode: Passthrough}},
                      {name: terminate-only, port: 9443, protocol: TLS, tls: {mode: Terminate}},
                      {name: kinds, port: 443, protocol: TLS, tls: {mode: Passthrough},
                       allowedRoutes: {kinds: [{kind: TCPRoute}, {kind: TLSRoute}]}},
                      {name: tcp-and-tls, port: 7000, protocol: TCP},
                      {name: tls-on-tcp, port: 7000, protocol: TLS, tls: {mode: Passthrough}}]",
                ),
                &gw(
                    "ops",
                    "http-only",
                    OLD,
                    "[{name: only-allow-http-routes, port: 80, protocol: HTTP, allowedRoutes: {kinds: [{kind: HTTPRoute}]}}]",
                ),
                &backend("ops", "db", "[{port: 8080}]"),
                &route_doc(
                    "TCPRoute",
                    "ops",
                    "tcp-route",
                    OLD,
                    "{parentRefs: [{name: http-only, sectionName: only-allow-http-routes}], rules: [{backendRefs: [{name: db, port: 8080}]}]}",
                ),
            ],
        );
        let g = gateway(&s, "ops", "mixed");
        for name in ["tls-terminate", "tls-passthrough"] {
            let c = &listener(g, name).outcome.conditions;
            assert_eq!(condition(c, "Accepted").status, "True", "{name}");
            assert_eq!(condition(c, "Conflicted").status, "False", "{name}");
        }
        assert!(listener(g, "tls-passthrough").listener.is_some());
        for name in ["tcp-and-tls", "tls-on-tcp"] {
            let l = listener(g, name);
            let accepted = condition(&l.outcome.conditions, "Accepted");
            assert_eq!(
                (accepted.status, accepted.reason),
                ("False", "ProtocolConflict"),
                "{name}"
            );
            assert_eq!(
                condition(&l.outcome.conditions, "Conflicted").status,
                "True",
                "{name}"
            );
            assert_eq!(l.outcome.attached_routes, 0);
            assert!(l.listener.is_none(), "{name}: not served");
        }
        for name in ["tls-terminate", "terminate-only"] {
            let c = &listener(g, name).outcome.conditions;
            let refs = condition(c, "ResolvedRefs");
            assert_eq!(
                (refs.status, refs.reason),
                ("False", "InvalidCertificateRef"),
                "{name}"
            );
            assert!(listener(g, name).listener.is_none(), "{name}: not served");
        }
        let kinds = listener(g, "kinds");
        let refs = condition(&kinds.outcome.conditions, "ResolvedRefs");
        assert_eq!((refs.status, refs.reason), ("False", "InvalidRouteKinds"));
        assert_eq!(kinds.outcome.supported_kinds, ["TLSRoute"]);
        assert_eq!(
            condition(&kinds.outcome.conditions, "Programmed").status,
            "True"
        );

        // A Gateway with HTTP listeners only is not an L4 one, but a
        // TCPRoute naming it is told why it is not attached.
        assert!(l4(&s).gateways.iter().all(|g| g.name != "http-only"));
        let r = route(&s, RouteKind::Tcp, "tcp-route");
        let accepted = condition(&r.parents[0].conditions, "Accepted");
        assert_eq!(
            (accepted.status, accepted.reason),
            ("False", "NotAllowedByListeners")
        );
    }

    /// `allowedRoutes.kinds: []` means the listener protocol's kinds, as
    /// unset does (the specification; the HTTP compile and the agent
    /// judge by the same rule in `teapot_model::attachment`).
    #[test]
    fn empty_route_kinds_are_the_protocols() {
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                &gw(
                    "ops",
                    "edge",
                    OLD,
                    "[{name: db, port: 5432, protocol: TCP, allowedRoutes: {kinds: []}}]",
                ),
                &backend("ops", "pg", "[{port: 5432}]"),
                &route_doc(
                    "TCPRoute",
                    "ops",
                    "db",
                    OLD,
                    "{parentRefs: [{name: edge}], rules: [{backendRefs: [{name: pg, port: 5432}]}]}",
                ),
            ],
        );
        let l = listener(gateway(&s, "ops", "edge"), "db");
        assert_eq!(l.outcome.supported_kinds, ["TCPRoute"]);
        assert_eq!(l.outcome.attached_routes, 1);
        let r = route(&s, RouteKind::Tcp, "db");
        assert_eq!(
            condition(&r.parents[0].conditions, "Accepted").status,
            "True"
        );
    }

    /// `allowedRoutes.namespaces.from: Selector` on an L4 listener admits
    /// routes from namespaces whose labels match, as on HTTP listeners.
    #[test]
    fn a_selector_admits_routes_by_their_namespaces_labels() {
        let listeners = "[{name: db, protocol: TCP, port: 5432, allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {team: data}}}}}]";
        let spec = "{parentRefs: [{name: edge, namespace: ops}], rules: [{backendRefs: [{name: pg, port: 5432}]}]}";
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                &gw("ops", "edge", OLD, listeners),
                "apiVersion: v1
kind: Namespace
metadata: {name: data, labels: {team: data}}
",
                &route_doc("TCPRoute", "data", "in", OLD, spec),
                &route_doc("TCPRoute", "web", "out", NEW, spec),
                &backend("data", "pg", "[{port: 5432}]"),
                &backend("web", "pg", "[{port: 5432}]"),
            ],
        );
        let accepted = |name: &str| {
            let r = route(&s, RouteKind::Tcp, name);
            let c = condition(&r.parents[0].conditions, "Accepted");
            (c.status, c.reason)
        };
        assert_eq!(accepted("in"), ("True", "Accepted"));
        assert_eq!(accepted("out"), ("False", "NotAllowedByListeners"));
        let g = gateway(&s, "ops", "edge");
        assert_eq!(listener(g, "db").outcome.attached_routes, 1);
    }

    #[test]
    fn gateways_of_other_classes_are_not_served() {
        let s = compile(
            BTreeMap::new(),
            &[
                "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: teapot}
spec: {controllerName: example.com/other}
",
                &gw(
                    "ops",
                    "edge",
                    OLD,
                    "[{name: db, port: 5432, protocol: TCP}]",
                ),
            ],
        );
        assert!(l4(&s).gateways.is_empty());
        // No GatewayClass object: the class named teapot is served.
        let s = compile(
            BTreeMap::new(),
            &[&gw(
                "ops",
                "edge",
                OLD,
                "[{name: db, port: 5432, protocol: TCP}]",
            )],
        );
        assert_eq!(l4(&s).gateways.len(), 1);
    }

    const TENANT_ACME: &str = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {cluster: acme, nodeCIDRs: [10.1.0.0/24], l4: {pool: edge}}
";

    /// The listener key of `port` (TCP) on a Gateway's address.
    fn indented(pem: &str) -> String {
        pem.lines().map(|l| format!("    {l}\n")).collect()
    }

    /// A Terminate listener with a readable certificate is served beside a
    /// Passthrough one on the same port (TLSRouteModeMixed): SNI picks the
    /// entry, the Terminate one with the listener's certificate and the
    /// backends under their BackendTLSPolicy (TLS to the backend), the
    /// Passthrough one without; a reference to a missing Secret, or to
    /// another namespace's without a ReferenceGrant, is not served.
    #[test]
    fn a_terminate_listener_serves_its_certificate_beside_passthrough_by_sni() {
        let ca = teapot_testkit::certs::TestCa::new("backend CA");
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["t.example.com".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let secret = format!(
            "apiVersion: v1\nkind: Secret\nmetadata: {{name: cert, namespace: ops}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
            indented(&cert.pem()),
            indented(&key.serialize_pem())
        );
        let config_map = format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca, namespace: ops}}\ndata:\n  ca.crt: |\n{}",
            indented(ca.cert_pem())
        );
        let policy = "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {name: p, namespace: ops}\nspec:\n  targetRefs: [{group: \"\", kind: Service, name: secure}]\n  validation:\n    hostname: secure.example\n    caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]\n";
        let s = compile(
            BTreeMap::new(),
            &[
                CLASS,
                &secret,
                &config_map,
                policy,
                &gw(
                    "ops",
                    "mixed",
                    OLD,
                    "[{name: term, port: 8883, protocol: TLS, hostname: t.example.com, tls: {mode: Terminate, certificateRefs: [{name: cert}]}},
                      {name: pass, port: 8883, protocol: TLS, hostname: p.example.com, tls: {mode: Passthrough}},
                      {name: missing, port: 9443, protocol: TLS, tls: {mode: Terminate, certificateRefs: [{name: absent}]}},
                      {name: foreign, port: 9444, protocol: TLS, tls: {mode: Terminate, certificateRefs: [{name: cert, namespace: other}]}}]",
                ),
                &backend("ops", "secure", "[{port: 8443}]"),
                &slice("ops", "secure", "[{port: 18443}]", "127.0.0.2"),
                &backend("ops", "plain", "[{port: 3000}]"),
                &slice("ops", "plain", "[{port: 13000}]", "127.0.0.3"),
                &route_doc(
                    "TLSRoute",
                    "ops",
                    "t",
                    OLD,
                    "{parentRefs: [{name: mixed, sectionName: term}], hostnames: [t.example.com], rules: [{backendRefs: [{name: secure, port: 8443}]}]}",
                ),
                &route_doc(
                    "TLSRoute",
                    "ops",
                    "p",
                    OLD,
                    "{parentRefs: [{name: mixed, sectionName: pass}], hostnames: [p.example.com], rules: [{backendRefs: [{name: secure, port: 8443}]}]}",
                ),
            ],
        );
        let g = gateway(&s, "ops", "mixed");
        for name in ["term", "pass"] {
            let l = listener(g, name);
            for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
                assert_eq!(
                    condition(&l.outcome.conditions, type_).status,
                    "True",
                    "{name} {type_}"
                );
            }
            assert_eq!(l.outcome.attached_routes, 1, "{name}");
            assert_eq!(l.outcome.supported_kinds, ["TLSRoute"]);
        }
        for (name, reason) in [
            ("missing", "InvalidCertificateRef"),
            ("foreign", "RefNotPermitted"),
        ] {
            let l = listener(g, name);
            assert_eq!(
                condition(&l.outcome.conditions, "ResolvedRefs").reason,
                reason
            );
            assert!(l.listener.is_none(), "{name}: not served");
        }
        let table = &s.l4.as_ref().unwrap().table;
        assert_eq!(table.listeners.len(), 1, "only 8883 is bound");
        let sni = table.listeners[&tcp_key(g, 8883)]
            .sni
            .clone()
            .expect("chosen by SNI");
        assert!(sni.terminates());
        let (term, t) = sni.choose_entry(Some("t.example.com")).expect("terminated");
        let t = t.expect("a Terminate entry");
        assert_eq!(t.listener, "ops/mixed/term");
        assert!(
            term.0.protocol.tls().is_some(),
            "the BackendTLSPolicy's TLS to the backend"
        );
        let (pass, p) = sni.choose_entry(Some("p.example.com")).expect("passed");
        assert!(p.is_none());
        assert!(
            pass.0.protocol.tls().is_none(),
            "passthrough: the client's TLS reaches the backend as it is"
        );
        assert_eq!(pass.0.endpoints.load().len(), 1);
        assert!(sni.choose_entry(Some("x.example.com")).is_none());
    }

    fn tcp_key(g: &GatewayPart, port: u16) -> super::super::ListenerKey {
        super::super::ListenerKey {
            addr: g.address.expect("the Gateway has an address"),
            port,
            protocol: Protocol::Tcp,
        }
    }

    /// Defence in depth for the policy's same-namespace parentRefs: a
    /// tenant's TCPRoute and TLSRoute naming an operator's Gateway whose
    /// listeners admit routes from All namespaces are not attached, as the
    /// HTTP compile refuses a tenant HTTPRoute there; an operator
    /// namespace's route still is.
    #[test]
    fn a_tenant_route_never_binds_to_another_namespaces_gateway() {
        let listeners =
            "[{name: db, port: 5432, protocol: TCP, allowedRoutes: {namespaces: {from: All}}},
                          {name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough},
                           allowedRoutes: {namespaces: {from: All}}}]";
        let s = compile_with(
            BTreeMap::new(),
            &[
                CLASS,
                TENANT_ACME,
                &gw("ops", "edge", OLD, listeners),
                &backend("tenant-acme", "db", "[{port: 5432}]"),
                &slice("tenant-acme", "db", "[{port: 5432}]", "10.1.0.5"),
                &backend("apps", "site", "[{port: 443}]"),
                &slice("apps", "site", "[{port: 10443}]", "127.0.0.5"),
                &route_doc(
                    "TCPRoute",
                    "tenant-acme",
                    "db",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops, sectionName: db}], rules: [{backendRefs: [{name: db, port: 5432}]}]}",
                ),
                &route_doc(
                    "TLSRoute",
                    "tenant-acme",
                    "site",
                    OLD,
                    "{parentRefs: [{name: edge, namespace: ops, sectionName: tls}], hostnames: [shop.acme.lb.example.net], rules: [{backendRefs: [{name: db, port: 5432}]}]}",
                ),
                &route_doc(
                    "TLSRoute",
                    "apps",
                    "site",
                    NEW,
                    "{parentRefs: [{name: edge, namespace: ops, sectionName: tls}], hostnames: [site.example.com], rules: [{backendRefs: [{name: site, port: 443}]}]}",
                ),
            ],
            CompileOptions {
                domain: "example.net".into(),
                ..CompileOptions::default()
            },
        );
        for kind in [RouteKind::Tcp, RouteKind::Tls] {
            let r = l4(&s)
                .routes
                .iter()
                .find(|r| r.kind() == kind && r.namespace() == "tenant-acme")
                .unwrap();
            let accepted = condition(&r.parents[0].conditions, "Accepted");
            assert_eq!(
                (accepted.status, accepted.reason),
                ("False", "NotAllowedByListeners"),
                "{kind:?}"
            );
            assert!(
                accepted.message.contains("own namespace's Gateways"),
                "{accepted:?}"
            );
        }
        let g = gateway(&s, "ops", "edge");
        assert_eq!(listener(g, "db").outcome.attached_routes, 0);
        assert_eq!(
            listener(g, "tls").outcome.attached_routes,
            1,
            "the operator's"
        );
        let table = &s.l4.as_ref().unwrap().table;
        let db = &table.listeners[&tcp_key(g, 5432)];
        assert!(db.upstream.endpoints.load().is_empty(), "{:?}", db.upstream);
        let sni = table.listeners[&tcp_key(g, 8443)].sni.clone().unwrap();
        assert!(sni.choose(Some("shop.acme.lb.example.net")).is_none());
        assert!(sni.choose(Some("site.example.com")).is_some());
    }

    /// A tenant TLSRoute's custom hostname waits for the DNS proof an
    /// HTTPRoute's waits for (a CNAME to an assigned hostname or the TXT
    /// token): not served before, its claim out for the prover, and the
    /// status says why; the tenant's own subtree is served at once.
    #[test]
    fn a_tenant_tls_route_serves_a_custom_hostname_once_dns_proves_it() {
        let docs = [
            CLASS,
            TENANT_ACME,
            &gw(
                "tenant-acme",
                "edge",
                OLD,
                "[{name: tls, port: 8443, protocol: TLS, tls: {mode: Passthrough}}]",
            ),
            &backend("tenant-acme", "shop", "[{port: 443}]"),
            &slice("tenant-acme", "shop", "[{port: 443}]", "10.1.0.5"),
            &route_doc(
                "TLSRoute",
                "tenant-acme",
                "shop",
                OLD,
                "{parentRefs: [{name: edge}], hostnames: [shop.acme.lb.example.net, www.acme-corp.com], rules: [{backendRefs: [{name: shop, port: 443}]}]}",
            ),
            &route_doc(
                "TLSRoute",
                "tenant-acme",
                "custom-only",
                OLD,
                "{parentRefs: [{name: edge}], hostnames: [db.acme-corp.com], rules: [{backendRefs: [{name: shop, port: 443}]}]}",
            ),
        ];
        let with_proofs = |proven: &[&str]| {
            let mut proofs = crate::compile::domains::ProofResults::default();
            for host in proven {
                proofs.insert(
                    "acme",
                    host,
                    crate::compile::domains::Proof {
                        routed: true,
                        detail: "CNAME to edge-tenant-acme.acme.lb.example.net".into(),
                    },
                );
            }
            compile_with(
                BTreeMap::new(),
                &docs,
                CompileOptions {
                    domain: "example.net".into(),
                    proofs: Some(Arc::new(proofs)),
                    ..CompileOptions::default()
                },
            )
        };
        let sni = |s: &Snapshot| {
            let g = gateway(s, "tenant-acme", "edge");
            s.l4.as_ref().unwrap().table.listeners[&tcp_key(g, 8443)]
                .sni
                .clone()
                .unwrap()
        };
        let accepted = |s: &Snapshot, name: &str| {
            let c = condition(
                &route(s, RouteKind::Tls, name).parents[0].conditions,
                "Accepted",
            );
            (c.status, c.reason, c.message.clone())
        };

        let waiting = with_proofs(&[]);
        let routes = sni(&waiting);
        assert!(routes.choose(Some("shop.acme.lb.example.net")).is_some());
        assert!(routes.choose(Some("www.acme-corp.com")).is_none());
        assert!(routes.choose(Some("db.acme-corp.com")).is_none());
        let (status, reason, message) = accepted(&waiting, "shop");
        assert_eq!((status, reason), ("True", "Accepted"));
        assert!(
            message.contains("www.acme-corp.com is waiting for its DNS proof"),
            "{message}"
        );
        let (status, reason, message) = accepted(&waiting, "custom-only");
        assert_eq!((status, reason), ("False", "NoMatchingListenerHostname"));
        assert!(
            message.contains("db.acme-corp.com is waiting for its DNS proof"),
            "{message}"
        );
        let claimed: Vec<&str> = waiting.claims.iter().map(|c| c.host.as_str()).collect();
        assert_eq!(claimed, ["db.acme-corp.com", "www.acme-corp.com"]);
        let g = gateway(&waiting, "tenant-acme", "edge");
        assert_eq!(listener(g, "tls").outcome.attached_routes, 1);

        let proven = with_proofs(&["www.acme-corp.com", "db.acme-corp.com"]);
        let routes = sni(&proven);
        for host in [
            "shop.acme.lb.example.net",
            "www.acme-corp.com",
            "db.acme-corp.com",
        ] {
            assert!(routes.choose(Some(host)).is_some(), "{host}");
        }
        assert_eq!(accepted(&proven, "shop").2, "");
        assert_eq!(accepted(&proven, "custom-only").0, "True");
    }

    /// An HTTPRoute of `ns` to Service `web` port 8080 on `parent`.
    fn http_route(ns: &str, name: &str, parent: &str, host: &str, filters: &str) -> String {
        route_doc(
            "HTTPRoute",
            ns,
            name,
            OLD,
            &format!(
                "{{parentRefs: [{parent}], hostnames: [{host}], rules: [{{filters: {filters}, backendRefs: [{{name: web, port: 8080}}]}}]}}"
            ),
        )
    }

    /// The HTTP listeners of a Gateway with its own address join its one
    /// claim, each socket gets that Gateway's routes at that port, and the
    /// shared table none of them.
    #[test]
    fn a_gateway_with_its_own_address_serves_http_on_any_port_there_only() {
        let docs = [
            CLASS.to_string(),
            gw(
                "ops",
                "own",
                OLD,
                "[{name: web, port: 80, protocol: HTTP}, {name: alt, port: 8080, protocol: HTTP}, {name: db, port: 5432, protocol: TCP}]",
            ),
            gw(
                "ops",
                "shared",
                OLD,
                "[{name: web, port: 80, protocol: HTTP}]",
            ),
            backend("ops", "web", "[{port: 8080}]"),
            slice("ops", "web", "[{port: 8080}]", "10.0.0.1"),
            http_route(
                "ops",
                "on-80",
                "{name: own, sectionName: web}",
                "a.example",
                "[]",
            ),
            http_route(
                "ops",
                "on-8080",
                "{name: own, sectionName: alt}",
                "b.example",
                "[{type: RequestRedirect, requestRedirect: {hostname: c.example}}]",
            ),
            http_route("ops", "shared", "{name: shared}", "s.example", "[]"),
        ];
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let s = compile(BTreeMap::new(), &docs);
        let g = gateway(&s, "ops", "own");
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(g.address, Some(addr));
        for name in ["web", "alt", "db"] {
            let l = listener(g, name);
            assert_eq!(
                condition(&l.outcome.conditions, "Programmed").status,
                "True",
                "{name}"
            );
        }
        // One claim: the HTTP ports with the TCP one.
        let held = &s.l4.as_ref().unwrap().holdings[&holder_key(&NsName::new("ops", "own"))];
        let tcp = |p: u16| (p, Protocol::Tcp);
        assert_eq!(
            held.addresses[0].ports,
            Some([tcp(80), tcp(5432), tcp(8080)].into())
        );
        // A Gateway with HTTP on 80 only stays on the shared listeners.
        assert!(l4(&s).gateways.iter().all(|g| g.name != "shared"));

        // A table per socket of its address; the shared table has none of
        // its routes (crate::plane::decide's tests send requests).
        let own = s.gateway.own();
        for port in [80, 8080] {
            let table = own
                .at(std::net::SocketAddr::new(addr, port))
                .flatten()
                .unwrap_or_else(|| panic!("a table at {port}"));
            assert_eq!(table.len(), 1, "{port}");
        }
        assert!(
            own.at(std::net::SocketAddr::new(addr, 5432))
                .is_some_and(|t| t.is_none())
        );
        assert!(s.gateway.host("a.example").candidates().is_empty());
        assert!(!s.gateway.host("s.example").candidates().is_empty());

        // Status: its own address alone (not the fleet's), listeners
        // programmed.
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let own = status["gateways"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["name"] == "own")
            .unwrap();
        assert_eq!(
            own["status"]["addresses"],
            serde_json::json!([{"type": "IPAddress", "value": "127.0.0.1"}])
        );
        for l in own["status"]["listeners"].as_array().unwrap() {
            let programmed = l["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Programmed")
                .unwrap();
            assert_eq!(programmed["status"], "True", "{l}");
        }
    }

    /// The ports of a Gateway's HTTP listeners are held like its L4 ones:
    /// a port another object holds on the address stays that object's, and
    /// the listener that asked for it is refused, alone.
    #[test]
    fn a_held_port_never_moves_to_a_gateways_http_listener() {
        let addr: IpAddr = "127.0.0.1".parse().unwrap();
        let previous = BTreeMap::from([
            (
                holder_key(&NsName::new("ops", "own")),
                Holding::single(addr, Some([(80, Protocol::Tcp)].into())),
            ),
            (
                NsName::new("ops", "web"),
                Holding::single(addr, Some([(8080, Protocol::Tcp)].into())),
            ),
        ]);
        let s = compile(
            previous,
            &[
                CLASS,
                &gw(
                    "ops",
                    "own",
                    NEW,
                    "[{name: web, port: 80, protocol: HTTP}, {name: alt, port: 8080, protocol: HTTP}]",
                ),
                &svc("ops", "web", OLD, "[{name: http, port: 8080}]"),
            ],
        );
        let g = gateway(&s, "ops", "own");
        assert_eq!(g.address, Some(addr));
        let alt = condition(&listener(g, "alt").outcome.conditions, "Accepted");
        assert_eq!((alt.status, alt.reason), ("False", "PortUnavailable"));
        let web = condition(&listener(g, "web").outcome.conditions, "Programmed");
        assert_eq!(web.status, "True");
        // Its address has a table at 80, none at 8080.
        let own = s.gateway.own();
        assert!(
            own.at("127.0.0.1:80".parse().unwrap())
                .is_some_and(|t| t.is_some())
        );
        assert!(
            own.at("127.0.0.1:8080".parse().unwrap())
                .is_some_and(|t| t.is_none())
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let listeners = &status["gateways"][0]["status"]["listeners"];
        let alt = listeners
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == "alt")
            .unwrap();
        let accepted = alt["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Accepted")
            .unwrap();
        assert_eq!(accepted["reason"], "PortUnavailable", "{alt}");
    }

    /// `spec.addresses` asks for an address: an empty value is any of the
    /// pool's, a value one of them; one outside the pool is refused and
    /// none of the Gateway's listeners is served.
    #[test]
    fn spec_addresses_ask_for_an_address_of_the_pool() {
        let with_address = |value: &str| {
            format!(
                "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: own, namespace: ops}}
spec:
  gatewayClassName: teapot
  addresses: [{{type: IPAddress, value: \"{value}\"}}]
  listeners: [{{name: web, port: 80, protocol: HTTP}}]
"
            )
        };
        let s = compile(BTreeMap::new(), &[CLASS, &with_address("")]);
        assert_eq!(
            gateway(&s, "ops", "own").address,
            Some("127.0.0.1".parse().unwrap())
        );
        let s = compile(BTreeMap::new(), &[CLASS, &with_address("127.0.0.1")]);
        assert_eq!(
            gateway(&s, "ops", "own").address,
            Some("127.0.0.1".parse().unwrap())
        );
        // The Gateway's reported status and its Programmed condition.
        let programmed_of = |s: &Snapshot| {
            let status = serde_json::to_value(&s.report.gateway).unwrap();
            let gw = status["gateways"][0]["status"].clone();
            let programmed = gw["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Programmed")
                .unwrap()
                .clone();
            (gw, programmed)
        };
        let s = compile(BTreeMap::new(), &[CLASS, &with_address("192.0.2.99")]);
        let g = gateway(&s, "ops", "own");
        assert_eq!(g.address, None);
        let (gw, programmed) = programmed_of(&s);
        assert_eq!(programmed["status"], "False", "{gw}");
        assert_eq!(programmed["reason"], "AddressNotUsable", "{gw}");

        // Several named: one outside the pool is said (the one to remove),
        // and the Gateway is served on none; the usable one alone serves.
        let both = with_address("192.0.2.99").replace(
            "value: \"192.0.2.99\"}]",
            "value: \"192.0.2.99\"}, {type: IPAddress, value: \"127.0.0.1\"}]",
        );
        let s = compile(BTreeMap::new(), &[CLASS, &both]);
        assert_eq!(gateway(&s, "ops", "own").address, None);
        let (gw, programmed) = programmed_of(&s);
        assert_eq!(programmed["reason"], "AddressNotUsable", "{gw}");
        assert!(
            programmed["message"]
                .as_str()
                .unwrap()
                .contains("192.0.2.99"),
            "{gw}"
        );
        // More entries than are read: refused naming the field.
        let many = with_address("").replace(
            "addresses: [{type: IPAddress, value: \"\"}]",
            &format!("addresses: [{}]", vec!["{value: \"\"}"; 17].join(", ")),
        );
        let s = compile(BTreeMap::new(), &[CLASS, &many]);
        assert_eq!(gateway(&s, "ops", "own").address, None);
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        assert!(
            status
                .to_string()
                .contains("spec.addresses: 17 entries, at most 16"),
            "{status}"
        );

        // A tenant names none: claims share an address when their ports
        // differ, so a named one could be another tenant's VIP.
        let tenant = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec:
  cluster: acme
  nodeCIDRs: [10.1.0.0/24]
  l4: {pool: edge}
";
        let in_tenant =
            |value: &str| with_address(value).replace("namespace: ops", "namespace: tenant-acme");
        let s = compile(BTreeMap::new(), &[CLASS, tenant, &in_tenant("192.0.2.10")]);
        assert_eq!(gateway(&s, "tenant-acme", "own").address, None);
        let s = compile(BTreeMap::new(), &[CLASS, tenant, &in_tenant("")]);
        assert!(gateway(&s, "tenant-acme", "own").address.is_some());
    }
}
