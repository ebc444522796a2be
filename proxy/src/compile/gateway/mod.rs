//! Gateway API compile (docs/gateway-api.md): GatewayClass, Gateway,
//! HTTPRoute and GRPCRoute into the snapshot's [`GatewayTable`], and their
//! status in the form the Gateway API status subresources take.
//!
//! - GatewayClasses of controller `teapot.dev/gateway-controller` (and the
//!   class `teapot` when no object names it otherwise) are ours; a
//!   Gateway of another class is not touched.
//! - HTTP listeners on port 80 are served on `--http`, HTTPS listeners on
//!   443 (TLS terminated with their `certificateRefs`) on `--https`. TLS,
//!   TCP and UDP listeners belong to the L4 plane; other ports and
//!   protocols are not served and their listener says why.
//! - Routes attach to listeners by `parentRefs` (`sectionName`, `port`),
//!   `allowedRoutes` and hostname intersection ([`teapot_model::attachment`]);
//!   their rules become one list of [`Candidate`]s in the
//!   specification's precedence, shared by each hostname they bind to
//!   ([`table`]).
//! - In a tenant namespace a listener without hostname binds to the
//!   Gateway's assigned hostname `GATEWAY.CLUSTER.lb.DOMAIN`, and every
//!   hostname passes the tenant host rules, as Ingress hosts do.
//!
//! Ingresses and Gateway API routes share hosts by specificity (an exact
//! host beats a wildcard, and a longer wildcard a shorter one, across both
//! APIs); on the very same host pattern the older object holds it and the
//! other is told in its status ([`GatewayCompile::claim`]).
//!
//! Layout: this file drives the compile (Gateways, their listeners, the
//! routes bound to them oldest first); a route as the compile reads it is
//! `inputs`, its matches `matchers`, its rules into the table's
//! targets `rules`, their filters and the traffic policy they add
//! `filters`, its Service references `backend_refs`; the per-host
//! table the request path reads is [`table`].

mod backend_refs;
pub(crate) mod backend_tls;
mod cors;
mod ext_auth;
mod filters;
pub(crate) mod frontend;
mod inputs;
mod matchers;
mod retry;
pub(crate) mod route_policy;
mod rules;
mod session;
pub mod table;

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, Time};
use k8s_openapi::jiff::Timestamp;
use teapot_api::names::GATEWAY_CONTROLLER_NAME;
use teapot_api::{HostPattern, hostname};
use teapot_gateway_api::generated::gateway_classes::GatewayClassStatus;
use teapot_gateway_api::generated::gateways::{GatewayListeners, GatewayStatusAddresses};
use teapot_gateway_api::{Gateway, GrpcRoute, HttpRoute};
use teapot_model::store::{NsName, NsRef, Store};

use crate::compile::api_status::{self, GatewayParts, ListenerOutcome, ParentReport};
pub use crate::compile::api_status::{GatewayReport, Reported, RouteReport};
use crate::compile::backends::Resolver;
use crate::compile::certs::CertTable;
use crate::compile::condition::Condition;
use crate::compile::policies::Policies;
use crate::compile::{attach, listeners};
use inputs::{ParentIn, RouteIn};
use rules::compile_rules;
use table::{Candidate, RouteInfo, TableBuilder, Target};
pub use table::{GatewayTable, RequestFacts, RequestHeaders};

/// The group of every Gateway API kind.
use teapot_model::attachment::GROUP;

/// The route the compile reads: an HTTPRoute or a GRPCRoute.
#[derive(Clone, Debug)]
enum RouteObject {
    Http(Arc<HttpRoute>),
    Grpc(Arc<GrpcRoute>),
}

impl From<RouteObject> for api_status::RouteObject {
    fn from(route: RouteObject) -> Self {
        match route {
            RouteObject::Http(r) => api_status::RouteObject::Http(r),
            RouteObject::Grpc(r) => api_status::RouteObject::Grpc(r),
        }
    }
}

/// A condition. `lastTransitionTime` is the epoch: the compile reads no
/// clock; the status writer stamps the time when it applies a change.
fn condition(
    type_: &str,
    ok: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> MetaCondition {
    MetaCondition {
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
        message: message.into(),
        observed_generation: generation,
        reason: reason.into(),
        status: if ok { "True" } else { "False" }.into(),
        type_: type_.into(),
    }
}

/// Which listener plane serves a listener.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Plane {
    Http,
    Https,
}

/// A listener as routes see it after the Gateway compile, beside its
/// classification.
#[derive(Debug)]
struct Listener {
    /// `None`: not served by the HTTP plane (its conditions, or the
    /// other plane's, say why).
    plane: Option<Plane>,
    /// The hostname routes intersect with (the assigned hostname in a
    /// tenant namespace when the listener has none).
    hostname: Option<HostPattern>,
    attached: u32,
    /// The HTTP plane's conditions of its HTTP and HTTPS listeners;
    /// `None` for the others, which the HTTP plane does not judge.
    conditions: Option<Vec<Condition>>,
}

/// A Gateway of our class.
#[derive(Debug)]
struct GatewayEntry<'s> {
    id: &'s NsName,
    gateway: &'s Gateway,
    /// Every listener, classified once for both planes.
    classes: Vec<listeners::ListenerClass<'s>>,
    /// The HTTP plane's view of each, by index in `classes`.
    listeners: Vec<Listener>,
    addresses: Vec<GatewayStatusAddresses>,
    /// `spec.tls.backend.clientCertificateRef`, resolved.
    client_cert: Option<backend_tls::GatewayClientCert>,
    /// The ListenerSets naming it, oldest first; the listeners of those
    /// attached follow its own in `classes`.
    sets: Vec<inputs::SetIn<'s>>,
    /// It has its own address (`listeners::own_address`): its routes go
    /// to a table per port of its own, never the shared one.
    own: bool,
}

/// The Gateways of our class and the ListenerSets naming them by
/// (ListenerSet?, namespace, name), as indexes: the Gateway's, and the
/// set's among its `sets`.
type GatewayIndex<'s> = std::collections::HashMap<
    (bool, &'s str, &'s str),
    (usize, Option<usize>),
    foldhash::fast::RandomState,
>;

/// What the compile has built before the Ingresses are compiled, and
/// finishes after.
pub struct GatewayCompile<'s> {
    builder: TableBuilder,
    /// The client-certificate settings of the hosts HTTPS listeners serve.
    frontends: frontend::Frontends,
    /// The tables of Gateways with their own address, one per Gateway
    /// and port: requests on that socket see only it
    /// (`compile::l4::EdgeTables`), and Ingresses never share its hosts.
    own: std::collections::BTreeMap<(NsName, u16), TableBuilder>,
    report: GatewayReport,
    /// Each Gateway's part for its status, rendered with the L4 plane's
    /// ([`api_status::gateways`]).
    gateways: Vec<GatewayParts<'s>>,
    /// (route name, age key) of each route by its index in age order:
    /// a host pattern's holder is the route that bound it first
    /// ([`TableBuilder::holder`]), the oldest, as routes bind oldest first.
    claimants: Vec<(Arc<str>, AgeKey<'s>)>,
    /// Whether any route bound to any host.
    bound_any: bool,
    /// Host patterns released to older Ingresses, with the routes that
    /// lost them and the Ingress that holds them.
    released: Vec<(String, Arc<str>, String)>,
    /// (host, Secret) certificates of HTTPS listeners, added after the
    /// Ingresses' (an Ingress's certificate keeps its host); the host
    /// `None` for a Gateway with its own address, whose certificates its
    /// own sockets choose and the shared one never answers with
    /// ([`CertTable::add_listener_secret`]).
    certificates: Vec<(Option<HostPattern>, NsName)>,
    /// The number of each served HTTPS listener in its socket's
    /// `HttpsListeners` (the shared table's, or its Gateway's own table
    /// at its port), by (Gateway, listener index).
    https_ids: std::collections::HashMap<(&'s NsName, usize), u32>,
}

/// The order of claimants: `creationTimestamp`, those without one after,
/// then namespace/name (as `teapot_model::store::age_key`, the time copied
/// so that a sort's comparisons do not read the objects).
pub type AgeKey<'s> = (bool, Option<Timestamp>, &'s NsName);

fn age<'s>(
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    id: &'s NsName,
) -> AgeKey<'s> {
    let created = meta.creation_timestamp.as_ref().map(|t| t.0);
    (created.is_none(), created, id)
}

/// Everything the Gateway compile reads besides the store.
pub(super) struct Context<'c, 'h, 's, 't> {
    pub store: &'s Store,
    /// Which hosts a tenant may route, shared with the other compiles.
    pub hosts: &'c mut crate::compile::bind::TenantHosts<'h, 't>,
    /// The tenants' gates: an ExternalAuth filter's sub-requests count
    /// against its tenant's authentication bound.
    pub gates: &'c crate::live::fairness::TenantGates,
}

impl<'s> GatewayCompile<'s> {
    /// Compiles every Gateway API object of `store`.
    pub(super) fn new<'p, 't>(
        cx: &mut Context<'_, '_, 's, 't>,
        resolver: &mut Resolver<'s>,
        policies: &mut Policies<'p>,
    ) -> GatewayCompile<'s>
    where
        't: 'p,
    {
        let store = cx.store;
        let mut out = GatewayCompile {
            builder: TableBuilder::default(),
            frontends: frontend::Frontends::default(),
            own: std::collections::BTreeMap::new(),
            report: GatewayReport::default(),
            gateways: Vec::new(),
            claimants: Vec::new(),
            bound_any: false,
            released: Vec::new(),
            certificates: Vec::new(),
            https_ids: std::collections::HashMap::new(),
        };
        if store.gateways.is_empty() && store.gateway_classes.is_empty() {
            return out;
        }
        let ours = |class: &str| teapot_model::gateway::is_teapot_class(store, class);
        for (name, class) in &store.gateway_classes {
            if class.object.spec.controller_name != GATEWAY_CONTROLLER_NAME {
                continue;
            }
            let generation = class.object.metadata.generation;
            out.report.classes.push(Reported {
                namespace: String::new(),
                name: name.clone(),
                status: GatewayClassStatus {
                    conditions: Some(vec![
                        Condition::new("Accepted", true, "Accepted", "").to_meta(generation),
                    ]),
                    supported_features: None,
                },
            });
        }
        let mut gateways: Vec<GatewayEntry<'s>> = store
            .gateways
            .iter()
            .filter(|(_, g)| ours(&g.object.spec.gateway_class_name))
            .map(|(id, g)| gateway_entry(cx, id, &g.object, &mut out.certificates))
            .collect();
        // The HTTPS listeners of the shared socket, and of each socket of
        // a Gateway with its own address, for the 421 check and the
        // certificate of a name no certificate names
        // (table::HttpsListeners): an operator's listener selects the
        // names of its hostname; a tenant's only the hosts its routes bind
        // there, after the tenant's host rules (`bind_parent`), so a
        // tenant's listener hostname never takes another's names.
        for g in &gateways {
            for (i, l) in g.listeners.iter().enumerate() {
                if l.plane != Some(Plane::Https) {
                    continue;
                }
                let owner = g
                    .sets
                    .iter()
                    .find(|s| s.range.contains(&i))
                    .map_or(g.id, |s| s.id);
                let certs = listener_secrets(owner, g.classes[i].spec)
                    .iter()
                    .filter_map(|s| {
                        store.secrets.get(&NsRef {
                            namespace: &s.namespace,
                            name: &s.name,
                        })
                    })
                    .map(|s| s.object.certificate.key.clone())
                    .collect();
                let own = g.own.then_some(g.classes[i].port);
                let https = out.https_listeners(g.id, own);
                let n = https.listener(certs);
                if cx.hosts.tenancy.get(&owner.namespace).is_none() {
                    https.add(l.hostname.as_ref(), n);
                }
                out.https_ids.insert((g.id, i), n);
            }
        }

        // Routes oldest first: the order decides precedence ties.
        let mut routes: Vec<RouteIn<'s>> = Vec::new();
        for (id, r) in &store.http_routes {
            routes.push(RouteIn::http(id, &r.object));
        }
        for (id, r) in &store.grpc_routes {
            routes.push(RouteIn::grpc(id, &r.object));
        }
        routes.sort_by(|a, b| a.age.cmp(&b.age));
        // Sized once: a large compile otherwise rehashes its host maps a
        // dozen times as they grow.
        let hosts: usize = routes.iter().map(|r| r.hosts.len().max(1)).sum();
        out.builder.reserve(hosts);
        out.claimants.reserve(routes.len());
        let by_name: GatewayIndex<'s> = gateways
            .iter()
            .enumerate()
            .flat_map(|(i, g)| {
                let sets = g.sets.iter().enumerate().map(move |(j, s)| {
                    (
                        (true, s.id.namespace.as_str(), s.id.name.as_str()),
                        (i, Some(j)),
                    )
                });
                std::iter::once((
                    (false, g.id.namespace.as_str(), g.id.name.as_str()),
                    (i, None),
                ))
                .chain(sets)
            })
            .collect();
        for (index, route) in routes.iter_mut().enumerate() {
            out.route(
                cx,
                resolver,
                policies,
                (&mut gateways, &by_name),
                route,
                index as u32,
            );
        }

        out.gateways = gateways
            .into_iter()
            .map(|g| GatewayParts {
                id: g.id,
                generation: g.gateway.metadata.generation,
                http: g
                    .listeners
                    .into_iter()
                    .map(|l| {
                        let conditions = l.conditions?;
                        Some(ListenerOutcome {
                            supported_kinds: Vec::new(),
                            attached_routes: l.attached,
                            conditions,
                        })
                    })
                    .zip(&g.classes)
                    .map(|(outcome, class)| {
                        outcome.map(|o| ListenerOutcome {
                            supported_kinds: class.kinds.admitted.clone(),
                            ..o
                        })
                    })
                    .collect(),
                classes: g.classes,
                gateway_listeners: g.gateway.spec.listeners.len(),
                sets: g.sets.iter().map(inputs::SetIn::part).collect(),
                allows_sets: g.gateway.spec.allowed_listeners.is_some(),
                refused: crate::compile::listeners::gateway_refusal(g.gateway),
                addresses: g.addresses,
                // The specification's ResolvedRefs for the backend client
                // certificate; Gateways without one report none.
                client_cert: g.client_cert.map(|cert| match cert.key {
                    Ok(_) => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
                    Err((reason, message)) => {
                        Condition::new("ResolvedRefs", false, reason, message)
                    }
                }),
                insecure_frontend: frontend::insecure_condition(g.gateway),
            })
            .collect();
        out
    }

    /// Whether no route bound anywhere (the Ingress compile then skips
    /// [`Self::claim`]).
    pub fn is_empty(&self) -> bool {
        !self.bound_any
    }

    /// Whether an Ingress of age `ingress_age` may use `host` (`None`: its
    /// rules without host): `Err` names the older route holding it; a
    /// younger route holding it here gives it up.
    pub fn claim(
        &mut self,
        host: Option<&HostPattern>,
        ingress: &str,
        ingress_age: AgeKey<'_>,
    ) -> Result<(), String> {
        let Some(holder) = self.builder.holder(host) else {
            return Ok(());
        };
        if let Some((name, route_age)) = self.claimants.get(holder as usize)
            && *route_age < ingress_age
        {
            let host = host.map_or("*".to_string(), |h| h.to_string());
            return Err(format!(
                "host {host} is held by older Gateway API route {name}"
            ));
        }
        let label = host.map_or("*".to_string(), |h| h.to_string());
        for name in self.builder.release(host) {
            self.released
                .push((label.clone(), name, ingress.to_string()));
        }
        Ok(())
    }

    /// Adds the client-certificate settings of the hosts its HTTPS
    /// listeners on the shared 443 serve (after the Ingresses', as
    /// certificates: a host's first setting keeps it, frontend.rs), and
    /// returns those of each own socket of a Gateway with its own address.
    pub fn client_auth(
        &self,
        table: &mut crate::compile::client_auth::ClientAuthTable,
    ) -> frontend::OwnSettings {
        self.frontends.add_to(table)
    }

    /// The HTTPS listeners of the shared socket, or (`own`: the port) of
    /// that socket of `gateway`'s own address.
    fn https_listeners(
        &mut self,
        gateway: &NsName,
        own: Option<u16>,
    ) -> &mut table::HttpsListeners {
        match own {
            Some(port) => self
                .own
                .entry((gateway.clone(), port))
                .or_default()
                .https_listeners(),
            None => self.builder.https_listeners(),
        }
    }

    /// The tables of Gateways with their own address, by Gateway and port.
    pub fn take_own(&mut self) -> std::collections::BTreeMap<(NsName, u16), GatewayTable> {
        std::mem::take(&mut self.own)
            .into_iter()
            .map(|(k, b)| (k, b.build()))
            .collect()
    }

    /// The table, the report (its Gateways' statuses left for
    /// [`api_status::gateways`]) and each Gateway's part, with the HTTPS
    /// listeners' certificates added where no Ingress put one.
    pub fn finish(
        mut self,
        store: &Store,
        certs: &mut CertTable,
    ) -> (GatewayTable, GatewayReport, Vec<GatewayParts<'s>>) {
        for (host, secret) in &self.certificates {
            if let Some(s) = store.secrets.get(&NsRef {
                namespace: &secret.namespace,
                name: &secret.name,
            }) {
                certs.add_listener_secret(host.as_ref(), secret, &s.object.certificate);
            }
        }
        // Rare (an Ingress older than a route on one host): the reports
        // are searched by name rather than indexed on every compile.
        for (host, route, ingress) in std::mem::take(&mut self.released) {
            let message = format!(
                "host {host} is held by older Ingress {ingress}; this route does not serve it"
            );
            let c = Condition::new("Conflicted", true, "OlderIngressWins", message);
            let reports = self
                .report
                .http_routes
                .iter_mut()
                .chain(self.report.grpc_routes.iter_mut());
            for r in reports.filter(|r| {
                route
                    .strip_prefix(r.namespace())
                    .and_then(|n| n.strip_prefix('/'))
                    == Some(r.name())
            }) {
                for parent in &mut r.parents {
                    parent.conditions.push(c.clone());
                }
            }
        }
        (self.builder.build(), self.report, self.gateways)
    }

    #[allow(clippy::too_many_arguments)]
    fn route<'p, 't>(
        &mut self,
        cx: &mut Context<'_, '_, 's, 't>,
        resolver: &mut Resolver<'s>,
        policies: &mut Policies<'p>,
        (gateways, by_name): (&mut [GatewayEntry<'s>], &GatewayIndex<'s>),
        route: &mut RouteIn<'s>,
        index: u32,
    ) where
        't: 'p,
    {
        let id = route.id;
        let mut name = String::with_capacity(id.namespace.len() + 1 + id.name.len());
        name.push_str(&id.namespace);
        name.push('/');
        name.push_str(&id.name);
        let name: Arc<str> = Arc::from(name);
        debug_assert_eq!(self.claimants.len(), index as usize);
        self.claimants.push((name.clone(), route.age));
        let tenancy = cx.hosts.tenancy;
        let tenant = tenancy.get(&id.namespace);
        let attached = route_policy::Attached::of(cx.store, policies, tenant, route, resolver);
        let info = Arc::new(RouteInfo {
            name: name.clone(),
            policy: attached.route_policy(policies.tenant(tenant)),
        });
        // The rules, once for every listener they bind to.
        let rules_in = std::mem::take(&mut route.rules);
        route.client_cert = backend_tls::route_client_cert(
            route
                .parents
                .iter()
                .filter_map(|p| gateway_of(p, &id.namespace, by_name))
                .map(|(i, _)| (gateways[i].id, gateways[i].client_cert.as_ref())),
        );
        let route = &*route;
        // Every served rule has at least one target (a rule without
        // matches matches everything): no targets, no rule served.
        let owner = (cx.gates, tenant.map_or("", |t| t.cluster));
        let (targets, resolved, invalid_rules) = compile_rules(
            (cx.store, owner),
            resolver,
            route,
            (rules_in, &attached),
            &info,
            index,
        );
        // The rules as one sorted list per listener plane (HTTP, HTTPS),
        // made at the first listener of that plane and shared by every
        // hostname bound through it.
        let mut lists: PlaneLists = Vec::new();
        let mut parents = Vec::with_capacity(route.parents.len());
        for (position, p) in route.parents.iter().enumerate() {
            // Not a parent teapot implements, or not a Gateway of our
            // class: not ours to report.
            let Some((gateway, set)) =
                gateway_of(p, &id.namespace, by_name).map(|(i, set)| (&mut gateways[i], set))
            else {
                continue;
            };
            let mut conditions = Vec::with_capacity(2);
            // A route none of whose rules can be served is not attached.
            let countable = !targets.is_empty() || invalid_rules.is_empty();
            let accepted = self.bind_parent(
                cx,
                gateway,
                route,
                (p, set),
                (&targets, &mut lists),
                index,
                countable,
            );
            match accepted {
                Ok(()) if invalid_rules.is_empty() => {
                    conditions.push(Condition::new("Accepted", true, "Accepted", ""));
                }
                Ok(()) => {
                    conditions.push(Condition::new("Accepted", true, "Accepted", ""));
                    conditions.push(Condition::new(
                        "PartiallyInvalid",
                        true,
                        "UnsupportedValue",
                        invalid_rules.join("; "),
                    ));
                }
                Err((reason, message)) => {
                    conditions.push(Condition::new("Accepted", false, reason, message));
                }
            }
            conditions.push(match &resolved {
                Ok(()) => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
                Err((reason, message)) => {
                    Condition::new("ResolvedRefs", false, reason, message.clone())
                }
            });
            parents.push(ParentReport {
                index: position,
                conditions,
            });
        }
        if targets.is_empty() && !invalid_rules.is_empty() {
            for parent in &mut parents {
                if let Some(c) = parent.conditions.iter_mut().find(|c| c.type_ == "Accepted") {
                    *c = Condition::new(
                        "Accepted",
                        false,
                        "UnsupportedValue",
                        invalid_rules.join("; "),
                    );
                }
            }
        }
        if parents.is_empty() {
            return;
        }
        let list = if route.grpc {
            &mut self.report.grpc_routes
        } else {
            &mut self.report.http_routes
        };
        list.push(RouteReport::new(route.object.clone().into(), parents));
    }

    /// Binds a route's rules to the listeners of one parentRef; the
    /// reason when it binds to none.
    #[allow(clippy::too_many_arguments)]
    fn bind_parent<'t>(
        &mut self,
        cx: &mut Context<'_, '_, 's, 't>,
        gateway: &mut GatewayEntry<'s>,
        route: &RouteIn<'s>,
        (parent, set): (&ParentIn<'s>, Option<usize>),
        (targets, lists): (&[Arc<Target>], &mut PlaneLists),
        index: u32,
        countable: bool,
    ) -> Result<(), (&'static str, String)> {
        let id = route.id;
        let tenancy = cx.hosts.tenancy;
        let tenant = tenancy.get(&id.namespace);
        let store = cx.store;
        let hosts = &mut *cx.hosts;
        // A parentRef to the Gateway walks its own listeners; one to a
        // ListenerSet walks the set's, with the set as the listeners'
        // owner (`Same` is the set's namespace, a tenant route binds its
        // own namespace's sets).
        let (owner, range): (&'s NsName, std::ops::Range<usize>) = match set {
            None => (gateway.id, 0..gateway.gateway.spec.listeners.len()),
            Some(j) => {
                let s = &gateway.sets[j];
                if let Some((_, why)) = &s.refused {
                    return Err((
                        "NotAllowedByListeners",
                        format!("ListenerSet {} is not attached: {why}", s.id),
                    ));
                }
                (s.id, s.range.clone())
            }
        };
        // A listener the HTTP plane refused only for what it references
        // (an HTTPS listener whose certificate cannot be read) serves
        // nothing, yet the routes that attach to it count in its
        // attachedRoutes: the specification counts attachment by
        // allowedRoutes and parentRefs alone, whatever the listener's state.
        let refs_only: Vec<bool> = gateway.classes[range.clone()]
            .iter()
            .zip(&gateway.listeners[range.clone()])
            .map(|(c, l)| {
                matches!(
                    c.plane,
                    Some(
                        crate::compile::listeners::Plane::Http
                            | crate::compile::listeners::Plane::Https
                    )
                ) && c.refused.is_none()
                    && c.conflict.is_none()
                    && l.plane.is_none()
            })
            .collect();
        // A tenant's route is left out: its host rule records custom
        // domains as it admits them, once per route.
        if countable && tenant.is_none() && refs_only.contains(&true) {
            let counted: Vec<usize> = attach::attach(
                store,
                owner,
                gateway.classes[range.clone()]
                    .iter()
                    .zip(&gateway.listeners[range.clone()])
                    .zip(&refs_only)
                    .map(|((c, l), refs_only)| attach::Seat {
                        spec: c.spec,
                        hostname: l.hostname.as_ref(),
                        kinds: &c.kinds.admitted,
                        served: l.plane.is_some() || *refs_only,
                    }),
                &attach::RouteFacts {
                    kind: route.kind,
                    namespace: &id.namespace,
                    tenant: tenant.is_some(),
                    hostnames: Some(&route.hosts),
                },
                (parent.section, parent.port),
                |_| Ok(()),
            )
            .map(|w| w.listeners.iter().map(|(i, _)| *i).collect())
            .unwrap_or_default();
            for i in counted.into_iter().filter(|i| refs_only[*i]) {
                gateway.listeners[range.start + i].attached += 1;
            }
        }
        let walk = attach::attach(
            store,
            owner,
            gateway.classes[range.clone()]
                .iter()
                .zip(&gateway.listeners[range.clone()])
                .map(|(c, l)| attach::Seat {
                    spec: c.spec,
                    hostname: l.hostname.as_ref(),
                    kinds: &c.kinds.admitted,
                    served: l.plane.is_some(),
                }),
            &attach::RouteFacts {
                kind: route.kind,
                namespace: &id.namespace,
                tenant: tenant.is_some(),
                hostnames: Some(&route.hosts),
            },
            (parent.section, parent.port),
            |h| match tenant {
                Some(t) => hosts.admit(t, h),
                None => Ok(()),
            },
        )
        .map_err(|r| (r.reason, r.message))?;
        let tenant_owner = tenancy.get(&owner.namespace).is_some();
        for (i, served) in &walk.listeners {
            let i = &(range.start + *i);
            let listener = &gateway.listeners[*i];
            let spec = gateway.classes[*i].spec;
            let https = listener.plane == Some(Plane::Https);
            let rank = table::listener_rank(listener.hostname.as_ref());
            for &host in served {
                let at = match lists.iter().position(|(p, r, _)| *p == https && *r == rank) {
                    Some(at) => at,
                    None => {
                        let planes = (!https, https);
                        let list = table::route_list(
                            targets
                                .iter()
                                .map(|t| Candidate::new(t.clone(), planes, rank))
                                .collect(),
                        );
                        lists.push((https, rank, list));
                        lists.len() - 1
                    }
                };
                let list = &lists[at].2;
                if gateway.own {
                    self.own
                        .entry((gateway.id.clone(), gateway.classes[*i].port))
                        .or_default()
                        .bind(host, index, list);
                } else {
                    self.builder.bind(host, index, list);
                    self.bound_any = true;
                }
                if https {
                    // The listener's client-certificate validation goes on
                    // every host it serves (frontend.rs).
                    let gateway_tenant = tenancy.get(&gateway.id.namespace).is_some();
                    self.frontends.bind(
                        store,
                        (gateway.id, gateway.gateway, gateway_tenant),
                        (spec.port, gateway.own.then_some(gateway.classes[*i].port)),
                        host,
                    );
                }
                if https && (gateway.own || host.is_some()) {
                    // The listener's certificates also cover the hosts its
                    // routes bring (a listener without hostname).
                    let shared = host.filter(|_| !gateway.own).cloned();
                    for s in listener_secrets(owner, spec) {
                        self.certificates.push((shared.clone(), s));
                    }
                }
                if https
                    && tenant_owner
                    && let Some(n) = self.https_ids.get(&(gateway.id, *i)).copied()
                {
                    let own = gateway.own.then_some(gateway.classes[*i].port);
                    self.https_listeners(gateway.id, own).add(host, n);
                }
            }
        }
        let attached: Vec<usize> = walk
            .listeners
            .iter()
            .map(|(i, _)| range.start + *i)
            .collect();
        for i in attached {
            gateway.listeners[i].attached += u32::from(countable);
        }
        Ok(())
    }
}

/// The index of the teapot Gateway `parent` (of a route of `namespace`)
/// names, directly or through a ListenerSet naming it (then the set's
/// index too), if it names one.
fn gateway_of(
    parent: &ParentIn<'_>,
    namespace: &str,
    by_name: &GatewayIndex<'_>,
) -> Option<(usize, Option<usize>)> {
    let group = parent.group.unwrap_or(GROUP);
    let set = match (group, parent.kind.unwrap_or("Gateway")) {
        (GROUP, "Gateway") => false,
        (GROUP, "ListenerSet") => true,
        _ => return None,
    };
    let namespace = parent.namespace.unwrap_or(namespace);
    by_name.get(&(set, namespace, parent.name)).copied()
}

/// The Secrets a listener's `certificateRefs` name (own namespace unless
/// a ReferenceGrant allowed another; checked when the listener compiled).
fn listener_secrets(gateway: &NsName, listener: &GatewayListeners) -> Vec<NsName> {
    listener
        .tls
        .as_ref()
        .and_then(|t| t.certificate_refs.as_ref())
        .into_iter()
        .flatten()
        .map(|r| {
            NsName::new(
                r.namespace
                    .clone()
                    .unwrap_or_else(|| gateway.namespace.clone()),
                r.name.clone(),
            )
        })
        .collect()
}

fn gateway_entry<'s>(
    cx: &mut Context<'_, '_, 's, '_>,
    id: &'s NsName,
    gateway: &'s Gateway,
    certificates: &mut Vec<(Option<HostPattern>, NsName)>,
) -> GatewayEntry<'s> {
    let store = cx.store;
    let tenancy = cx.hosts.tenancy;
    let tenant = tenancy.get(&id.namespace);
    let assigned = tenant.map(|t| {
        HostPattern::Exact(hostname::assigned_hostname(
            &id.name,
            t.cluster,
            &cx.hosts.options.domain,
        ))
    });
    let every_operator_gateway = cx
        .hosts
        .options
        .l4
        .as_ref()
        .is_some_and(|l4| l4.config.gateway_own_addresses);
    let own = listeners::own_address(gateway, tenant.is_some(), every_operator_gateway);
    let addresses = match &assigned {
        Some(h) => vec![GatewayStatusAddresses {
            r#type: Some("Hostname".into()),
            value: h.to_string(),
        }],
        // Its own address, added from the L4 plane's part, is all it has:
        // the fleet's shared address does not reach it.
        None if own => Vec::new(),
        None => cx
            .hosts
            .options
            .status_addresses
            .iter()
            .map(|a| GatewayStatusAddresses {
                r#type: Some(
                    if a.parse::<std::net::IpAddr>().is_ok() {
                        "IPAddress"
                    } else {
                        "Hostname"
                    }
                    .into(),
                ),
                value: a.clone(),
            })
            .collect(),
    };
    let mut sets = inputs::listener_sets(store, tenancy, id, gateway);
    let set_listeners = inputs::attached_listeners(&mut sets, gateway.spec.listeners.len());
    let classes = listeners::classify_table(gateway, own, &set_listeners);
    let mut listeners = Vec::with_capacity(classes.len());
    for (i, class) in classes.iter().enumerate() {
        let l = class.spec;
        // A ListenerSet's listener is its set's: the set's namespace for
        // its certificates, its tenant's host rules, and in a tenant
        // namespace the set's assigned hostname when it names none.
        let set = sets.iter().find(|s| s.range.contains(&i));
        let id: &NsName = set.map_or(id, |s| s.id);
        let tenant = tenancy.get(&id.namespace);
        let assigned = match set {
            None => assigned.clone(),
            Some(s) => tenant.map(|t| {
                HostPattern::Exact(hostname::assigned_hostname(
                    &s.id.name,
                    t.cluster,
                    &cx.hosts.options.domain,
                ))
            }),
        };
        // The hostname routes intersect with, whichever plane serves it.
        let hostname = match (&class.hostname, &assigned) {
            (Some(h), _) => Some(h.clone()),
            (None, Some(own)) if l.hostname.is_none() => Some(own.clone()),
            (None, _) => None,
        };
        let mut plane = match class.plane {
            Some(listeners::Plane::Http) => Some(Plane::Http),
            Some(listeners::Plane::Https) => Some(Plane::Https),
            // The L4 plane's, or no plane's: their outcome is not this
            // compile's to decide (`api_status`).
            _ => {
                listeners.push(Listener {
                    plane: None,
                    hostname,
                    attached: 0,
                    conditions: None,
                });
                continue;
            }
        };
        let refs = class.certificate_refs();
        let mut conditions = Vec::new();
        if let Some((reason, message)) = &class.refused {
            conditions.push(Condition::new("Accepted", false, reason, message.clone()));
        }
        let invalid_kinds = &class.kinds.invalid;
        let mut resolved: Result<(), (&'static str, String)> = Ok(());
        if !invalid_kinds.is_empty() {
            resolved = Err((
                "InvalidRouteKinds",
                format!("route kinds not supported: {}", invalid_kinds.join(", ")),
            ));
        }
        if plane == Some(Plane::Https) {
            if class.refused.is_some() {
                plane = None;
            }
            if refs.is_empty() && resolved.is_ok() {
                resolved = Err((
                    "InvalidCertificateRef",
                    "an HTTPS listener needs certificateRefs".into(),
                ));
            }
            for r in refs {
                let ns = r.namespace.as_deref().unwrap_or(&id.namespace);
                let kind_ok = r.group.as_deref().unwrap_or("").is_empty()
                    && r.kind.as_deref().unwrap_or("Secret") == "Secret";
                let why = if !kind_ok {
                    Some((
                        "InvalidCertificateRef",
                        format!("certificateRef {} is not a core Secret", r.name),
                    ))
                } else if !attach::gateway_may_use_secret(store, id, tenant.is_some(), ns, &r.name)
                {
                    Some((
                        "RefNotPermitted",
                        format!(
                            "no ReferenceGrant lets this Gateway use Secret {ns}/{}",
                            r.name
                        ),
                    ))
                } else if !store.secrets.contains_key(&NsRef {
                    namespace: ns,
                    name: &r.name,
                }) {
                    Some((
                        "InvalidCertificateRef",
                        format!(
                            "Secret {ns}/{} not found or not a usable kubernetes.io/tls Secret",
                            r.name
                        ),
                    ))
                } else {
                    None
                };
                if let Some(why) = why
                    && resolved.is_ok()
                {
                    resolved = Err(why);
                }
            }
            // Frontend client-certificate validation (frontend.rs): a
            // listener none of whose CAs can be read is not served.
            match frontend::for_port(store, id, gateway, tenant.is_some(), l.port) {
                Err((reason, message)) => {
                    conditions.push(Condition::new(
                        "Accepted",
                        false,
                        "NoValidCACertificate",
                        message.clone(),
                    ));
                    if resolved.is_ok() {
                        resolved = Err((reason, message));
                    }
                }
                Ok(f) => {
                    if let Some(unresolved) = f.unresolved
                        && resolved.is_ok()
                    {
                        resolved = Err(unresolved);
                    }
                }
            }
            if resolved.is_err() {
                plane = None;
            }
        }
        // A conflicted listener is neither accepted nor programmed, for the
        // conflict's reason (as the specification's ListenerSet tests read
        // it).
        let mut conflict: Option<&'static str> = None;
        if plane.is_some() {
            if let Some((reason, message)) = &class.conflict {
                conditions.push(Condition::new("Conflicted", true, reason, message.clone()));
                conflict = Some(reason);
                plane = None;
            } else {
                conditions.push(Condition::new("Conflicted", false, "NoConflicts", ""));
            }
        }
        if plane.is_some() {
            conditions.push(Condition::new("Accepted", true, "Accepted", ""));
        } else if let Some(reason) = conflict {
            conditions.push(Condition::new(
                "Accepted",
                false,
                reason,
                "the listener is not served (see Conflicted)",
            ));
        } else if !conditions.iter().any(|c| c.type_ == "Accepted") {
            conditions.push(Condition::new(
                "Accepted",
                false,
                "Invalid",
                "the listener is not served (see ResolvedRefs)",
            ));
        }
        conditions.push(match resolved {
            Ok(()) => Condition::new("ResolvedRefs", true, "ResolvedRefs", ""),
            Err((reason, message)) => Condition::new("ResolvedRefs", false, reason, message),
        });
        conditions.push(if plane.is_some() {
            Condition::new("Programmed", true, "Programmed", "")
        } else {
            Condition::new(
                "Programmed",
                false,
                conflict.unwrap_or("Invalid"),
                "the listener is not served",
            )
        });
        // A tenant's certificates go on the hosts its routes bind (after
        // the tenant host rules, in `attach`), never on a bare listener
        // hostname: certificates only for routed hosts.
        if plane == Some(Plane::Https)
            && tenant.is_none()
            && let Some(h) = &hostname
        {
            let shared = (!own).then(|| h.clone());
            for s in listener_secrets(id, l) {
                certificates.push((shared.clone(), s));
            }
        }
        listeners.push(Listener {
            plane,
            hostname,
            attached: 0,
            conditions: Some(conditions),
        });
    }
    GatewayEntry {
        id,
        gateway,
        classes,
        listeners,
        addresses,
        client_cert: backend_tls::gateway_client_cert(store, id, gateway, tenant.is_some()),
        own,
        sets,
    }
}

/// A route's candidate lists, one per (HTTPS plane?, listener hostname
/// rank) it binds through: shared by every hostname bound that way.
type PlaneLists = Vec<(bool, u32, Arc<[Candidate]>)>;

#[cfg(test)]
mod tests {
    use crate::compile::CompileOptions;
    use crate::compile::tests::compile_test_docs;

    /// `allowedRoutes.kinds: []` is the protocol's kinds: the route
    /// attaches and is served (the rule the L4 compile and the agent
    /// judge by too, `teapot_model::attachment`).
    #[test]
    fn empty_route_kinds_are_the_protocols() {
        let docs = [
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80, allowedRoutes: {kinds: []}}]\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [b.example]\n  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]\n".into(),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        assert!(!s.gateway.host("b.example").candidates().is_empty());
    }

    /// An HTTPRoute aimed at a TCP listener is told the listener does not
    /// allow HTTPRoutes (the L4 plane serves that listener).
    #[test]
    fn a_route_aimed_at_an_l4_listener_is_not_allowed_there() {
        let docs = [
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: db, protocol: TCP, port: 5432}]\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: infra}\nspec:\n  parentRefs: [{name: gw, sectionName: db}]\n  hostnames: [b.example]\n  rules: [{matches: [{path: {type: PathPrefix, value: /}}]}]\n".into(),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let accepted = &status["httpRoutes"][0]["status"]["parents"][0]["conditions"][0];
        assert_eq!(accepted["reason"], "NotAllowedByListeners", "{accepted}");
        assert_eq!(
            accepted["message"], "listener db does not admit HTTPRoute",
            "{accepted}"
        );
    }

    /// The shared socket's HTTPS listeners as the 421 check reads them:
    /// each served listener selects the names of its hostname (exact,
    /// then wildcard at any depth, then the catch-all) with its
    /// certificate; an HTTP listener selects none.
    #[test]
    fn https_listeners_select_the_names_of_their_hostnames() {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["*.org".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let indented =
            |pem: &str| -> String { pem.lines().map(|l| format!("    {l}\n")).collect() };
        let listener = |name: &str, hostname: &str| {
            format!(
                "  - {{name: {name}, protocol: HTTPS, port: 443, {hostname} tls: {{certificateRefs: [{{name: tls}}]}}}}\n"
            )
        };
        let docs = [
            format!(
                "apiVersion: v1\nkind: Secret\nmetadata: {{name: tls, namespace: infra}}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: |\n{}  tls.key: |\n{}",
                indented(&cert.pem()),
                indented(&key.serialize_pem())
            ),
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: gw, namespace: infra}}\nspec:\n  gatewayClassName: teapot\n  listeners:\n{}{}{}{}  - {{name: http, protocol: HTTP, port: 80, hostname: plain.org}}\n",
                listener("https", ""),
                listener("exact", "hostname: second-example.org,"),
                listener("wild", "hostname: \"*.wildcard.org\","),
                listener("wild-exact", "hostname: fourth-example.wildcard.org,"),
            ),
        ];
        let s = compile_test_docs(&docs, &CompileOptions::default());
        let l = s.gateway.https_listeners();
        let any = l.select(Some("example.org")).expect("the catch-all");
        assert_eq!(l.select(Some("plain.org")), Some(any));
        assert_eq!(l.select(None), Some(any));
        let exact = l.select(Some("second-example.org")).unwrap();
        let wild = l.select(Some("a.b.wildcard.org")).unwrap();
        let wild_exact = l.select(Some("fourth-example.wildcard.org")).unwrap();
        let mut all = vec![any, exact, wild, wild_exact];
        all.sort();
        all.dedup();
        assert_eq!(all.len(), 4, "four listeners");
        let served = s.certs.lookup("second-example.org").unwrap();
        assert!(l.serves(any, served) && l.serves(wild, served));
        assert!(std::sync::Arc::ptr_eq(l.certificate(any).unwrap(), served));
    }
}
