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

pub(crate) mod backend_tls;
mod cors;
mod ext_auth;
pub(crate) mod route_policy;
mod session;
pub mod table;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;
use serde::Serialize;
use teapot_api::names::GATEWAY_CONTROLLER_NAME;
use teapot_api::regex::{TenantRegex, grpc_method_pattern};
use teapot_api::{HostPattern, hostname};
use teapot_gateway_api::generated::gateway_classes::GatewayClassStatus;
use teapot_gateway_api::generated::gateways::{
    GatewayListeners, GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};
use teapot_gateway_api::generated::grpc_routes::{
    GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethodType, GrpcRouteStatus,
    GrpcRouteStatusParents, GrpcRouteStatusParentsParentRef,
};
use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFilters, HttpRouteRulesFiltersExternalAuth,
    HttpRouteRulesFiltersRequestRedirectPathType, HttpRouteRulesFiltersRequestRedirectScheme,
    HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewritePathType, HttpRouteRulesMatches,
    HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParamsType, HttpRouteRulesSessionPersistence, HttpRouteStatus,
    HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};
use teapot_gateway_api::{Gateway, GrpcRoute, HttpRoute};
use teapot_model::store::{NsName, NsRef, Store};

use crate::compile::backends::Resolver;
use crate::compile::certs::CertTable;
use crate::compile::policies::Policies;
use crate::compile::routes::{Route, RoutePolicy};
use crate::compile::traffic::{Cors, GatewayAuthTerms, TrafficPolicy};
use crate::compile::{attach, listeners};
use table::{
    Action, Backend, BackendFilters, Candidate, Filters, HeaderEdits, Matcher, Mirror, PathChange,
    PathMatch, Redirect, Rewrite, RouteInfo, TableBuilder, Target, ValueMatch,
};
pub use table::{GatewayTable, RequestFacts, RequestHeaders};

/// The group of every Gateway API kind.
use teapot_model::attachment::{self, GROUP, ListenerProtocol};

/// The Gateway API part of `/status`, in the shapes of the status
/// subresources (what the kube status writer applies).
#[derive(Debug, Default, Serialize)]
pub struct GatewayReport {
    #[serde(rename = "gatewayClasses")]
    pub classes: Vec<Reported<GatewayClassStatus>>,
    pub gateways: Vec<Reported<GatewayStatus>>,
    #[serde(rename = "httpRoutes")]
    pub http_routes: Vec<RouteReport>,
    #[serde(rename = "grpcRoutes")]
    pub grpc_routes: Vec<RouteReport>,
}

impl GatewayReport {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
            && self.gateways.is_empty()
            && self.http_routes.is_empty()
            && self.grpc_routes.is_empty()
    }
}

/// One object's status.
#[derive(Debug, Serialize)]
pub struct Reported<S> {
    /// Empty for cluster-scoped objects.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub namespace: String,
    pub name: String,
    pub status: S,
}

/// A route's status, kept compact (fixed words, the route object shared
/// with the store) and rendered as the typed `HTTPRouteStatus` or
/// `GRPCRouteStatus` when asked ([`RouteReport::http_status`], `/status`):
/// building those for every route was a share of each compile, as
/// rendering every backend would be (`snapshot::Backends`).
#[derive(Debug)]
pub struct RouteReport {
    route: RouteObject,
    /// Per reported parentRef: its index in `spec.parentRefs` and its
    /// conditions.
    parents: Vec<(usize, Vec<Cond>)>,
}

#[derive(Clone, Debug)]
enum RouteObject {
    Http(Arc<HttpRoute>),
    Grpc(Arc<GrpcRoute>),
}

/// A condition before rendering.
#[derive(Clone, Debug)]
struct Cond {
    type_: &'static str,
    ok: bool,
    reason: &'static str,
    message: String,
}

impl Cond {
    fn new(
        type_: &'static str,
        ok: bool,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Cond {
        Cond {
            type_,
            ok,
            reason,
            message: message.into(),
        }
    }
}

impl RouteReport {
    pub fn namespace(&self) -> &str {
        let meta = match &self.route {
            RouteObject::Http(r) => &r.metadata,
            RouteObject::Grpc(r) => &r.metadata,
        };
        meta.namespace.as_deref().unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        let meta = match &self.route {
            RouteObject::Http(r) => &r.metadata,
            RouteObject::Grpc(r) => &r.metadata,
        };
        meta.name.as_deref().unwrap_or("")
    }

    fn conditions(&self, conditions: &[Cond]) -> Vec<Condition> {
        let generation = match &self.route {
            RouteObject::Http(r) => r.metadata.generation,
            RouteObject::Grpc(r) => r.metadata.generation,
        };
        conditions
            .iter()
            .map(|c| condition(c.type_, c.ok, c.reason, c.message.clone(), generation))
            .collect()
    }

    /// The status of an HTTPRoute (`None` for a GRPCRoute).
    pub fn http_status(&self) -> Option<HttpRouteStatus> {
        let RouteObject::Http(route) = &self.route else {
            return None;
        };
        let refs = route.spec.parent_refs.as_deref().unwrap_or_default();
        Some(HttpRouteStatus {
            parents: self
                .parents
                .iter()
                .filter_map(|(i, conditions)| {
                    let p = refs.get(*i)?;
                    Some(HttpRouteStatusParents {
                        conditions: self.conditions(conditions),
                        controller_name: GATEWAY_CONTROLLER_NAME.into(),
                        parent_ref: HttpRouteStatusParentsParentRef {
                            group: p.group.clone(),
                            kind: p.kind.clone(),
                            name: p.name.clone(),
                            namespace: p.namespace.clone(),
                            port: p.port,
                            section_name: p.section_name.clone(),
                        },
                    })
                })
                .collect(),
        })
    }

    /// The status of a GRPCRoute (`None` for an HTTPRoute).
    pub fn grpc_status(&self) -> Option<GrpcRouteStatus> {
        let RouteObject::Grpc(route) = &self.route else {
            return None;
        };
        let refs = route.spec.parent_refs.as_deref().unwrap_or_default();
        Some(GrpcRouteStatus {
            parents: self
                .parents
                .iter()
                .filter_map(|(i, conditions)| {
                    let p = refs.get(*i)?;
                    Some(GrpcRouteStatusParents {
                        conditions: self.conditions(conditions),
                        controller_name: GATEWAY_CONTROLLER_NAME.into(),
                        parent_ref: GrpcRouteStatusParentsParentRef {
                            group: p.group.clone(),
                            kind: p.kind.clone(),
                            name: p.name.clone(),
                            namespace: p.namespace.clone(),
                            port: p.port,
                            section_name: p.section_name.clone(),
                        },
                    })
                })
                .collect(),
        })
    }
}

impl Serialize for RouteReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(3))?;
        map.serialize_entry("namespace", self.namespace())?;
        map.serialize_entry("name", self.name())?;
        match (self.http_status(), self.grpc_status()) {
            (Some(s), _) => map.serialize_entry("status", &s)?,
            (None, Some(s)) => map.serialize_entry("status", &s)?,
            (None, None) => {}
        }
        map.end()
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
) -> Condition {
    Condition {
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

/// A listener as routes see it after the Gateway compile.
#[derive(Debug)]
struct Listener<'s> {
    spec: &'s GatewayListeners,
    /// `None`: not served (its conditions say why).
    plane: Option<Plane>,
    /// The hostname routes intersect with (the assigned hostname in a
    /// tenant namespace when the listener has none).
    hostname: Option<HostPattern>,
    /// Route kinds it admits.
    kinds: Vec<&'static str>,
    attached: i32,
    conditions: Vec<Condition>,
}

/// A Gateway of our class.
#[derive(Debug)]
struct GatewayEntry<'s> {
    id: &'s NsName,
    gateway: &'s Gateway,
    listeners: Vec<Listener<'s>>,
    addresses: Vec<GatewayStatusAddresses>,
    /// `spec.tls.backend.clientCertificateRef`, resolved.
    client_cert: Option<backend_tls::GatewayClientCert>,
}

/// The Gateways of our class by (namespace, name), as indexes.
type GatewayIndex<'s> =
    std::collections::HashMap<(&'s str, &'s str), usize, foldhash::fast::RandomState>;

/// What the compile has built before the Ingresses are compiled, and
/// finishes after.
pub struct GatewayCompile<'s> {
    builder: TableBuilder,
    report: GatewayReport,
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
    /// Ingresses' (an Ingress's certificate keeps its host).
    certificates: Vec<(HostPattern, NsName)>,
}

/// The order of claimants: `creationTimestamp`, those without one after,
/// then namespace/name (as `teapot_model::store::age_key`).
pub type AgeKey<'s> = (bool, Option<&'s Timestamp>, &'s NsName);

fn age<'s>(
    meta: &'s k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    id: &'s NsName,
) -> AgeKey<'s> {
    let created = meta.creation_timestamp.as_ref().map(|t| &t.0);
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
            report: GatewayReport::default(),
            claimants: Vec::new(),
            bound_any: false,
            released: Vec::new(),
            certificates: Vec::new(),
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
                    conditions: Some(vec![condition(
                        "Accepted", true, "Accepted", "", generation,
                    )]),
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
            .map(|(i, g)| ((g.id.namespace.as_str(), g.id.name.as_str()), i))
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

        for g in gateways {
            let generation = g.gateway.metadata.generation;
            let accepted = g.listeners.iter().any(|l| l.plane.is_some());
            let listeners = g
                .listeners
                .into_iter()
                .map(|l| GatewayStatusListeners {
                    attached_routes: l.attached,
                    conditions: l.conditions,
                    name: l.spec.name.clone(),
                    supported_kinds: Some(
                        l.kinds
                            .iter()
                            .map(|k| GatewayStatusListenersSupportedKinds {
                                group: Some(GROUP.into()),
                                kind: (*k).into(),
                            })
                            .collect(),
                    ),
                })
                .collect();
            let mut conditions = if accepted {
                vec![
                    condition("Accepted", true, "Accepted", "", generation),
                    condition("Programmed", true, "Programmed", "", generation),
                ]
            } else {
                vec![
                    condition(
                        "Accepted",
                        false,
                        "ListenersNotValid",
                        "no listener teapot serves",
                        generation,
                    ),
                    condition(
                        "Programmed",
                        false,
                        "Invalid",
                        "no listener teapot serves",
                        generation,
                    ),
                ]
            };
            // The specification's ResolvedRefs for the backend client
            // certificate; Gateways without one report none, as before.
            if let Some(cert) = &g.client_cert {
                conditions.push(match &cert.key {
                    Ok(_) => condition("ResolvedRefs", true, "ResolvedRefs", "", generation),
                    Err((reason, message)) => {
                        condition("ResolvedRefs", false, reason, message.clone(), generation)
                    }
                });
            }
            out.report.gateways.push(Reported {
                namespace: g.id.namespace.clone(),
                name: g.id.name.clone(),
                status: GatewayStatus {
                    addresses: Some(g.addresses),
                    attached_listener_sets: None,
                    conditions: Some(conditions),
                    listeners: Some(listeners),
                },
            });
        }
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

    /// The table and report, with the HTTPS listeners' certificates added
    /// where no Ingress put one.
    pub fn finish(mut self, store: &Store, certs: &mut CertTable) -> (GatewayTable, GatewayReport) {
        for (host, secret) in &self.certificates {
            if let Some(s) = store.secrets.get(&NsRef {
                namespace: &secret.namespace,
                name: &secret.name,
            }) && certs.insert(host, s.object.certificate.key.clone())
                && let Some(not_after) = s.object.certificate.not_after
            {
                certs.note_secret(secret.to_string(), not_after);
            }
        }
        // Rare (an Ingress older than a route on one host): the reports
        // are searched by name rather than indexed on every compile.
        for (host, route, ingress) in std::mem::take(&mut self.released) {
            let message = format!(
                "host {host} is held by older Ingress {ingress}; this route does not serve it"
            );
            let c = Cond::new("Conflicted", true, "OlderIngressWins", message);
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
                for (_, conditions) in &mut r.parents {
                    conditions.push(c.clone());
                }
            }
        }
        (self.builder.build(), self.report)
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
                .map(|i| (gateways[i].id, gateways[i].client_cert.as_ref())),
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
            let Some(gateway) = gateway_of(p, &id.namespace, by_name).map(|i| &mut gateways[i])
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
                p,
                (&targets, &mut lists),
                index,
                countable,
            );
            match accepted {
                Ok(()) if invalid_rules.is_empty() => {
                    conditions.push(Cond::new("Accepted", true, "Accepted", ""));
                }
                Ok(()) => {
                    conditions.push(Cond::new("Accepted", true, "Accepted", ""));
                    conditions.push(Cond::new(
                        "PartiallyInvalid",
                        true,
                        "UnsupportedValue",
                        invalid_rules.join("; "),
                    ));
                }
                Err((reason, message)) => {
                    conditions.push(Cond::new("Accepted", false, reason, message));
                }
            }
            conditions.push(match &resolved {
                Ok(()) => Cond::new("ResolvedRefs", true, "ResolvedRefs", ""),
                Err((reason, message)) => Cond::new("ResolvedRefs", false, reason, message.clone()),
            });
            parents.push((position, conditions));
        }
        if targets.is_empty() && !invalid_rules.is_empty() {
            for (_, conditions) in &mut parents {
                if let Some(c) = conditions.iter_mut().find(|c| c.type_ == "Accepted") {
                    *c = Cond::new(
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
        list.push(RouteReport {
            route: route.object.clone(),
            parents,
        });
    }

    /// Binds a route's rules to the listeners of one parentRef; the
    /// reason when it binds to none.
    #[allow(clippy::too_many_arguments)]
    fn bind_parent<'t>(
        &mut self,
        cx: &mut Context<'_, '_, 's, 't>,
        gateway: &mut GatewayEntry<'s>,
        route: &RouteIn<'s>,
        parent: &ParentIn<'s>,
        (targets, lists): (&[Arc<Target>], &mut PlaneLists),
        index: u32,
        countable: bool,
    ) -> Result<(), (&'static str, String)> {
        let id = route.id;
        let tenancy = cx.hosts.tenancy;
        let tenant = tenancy.get(&id.namespace);
        let store = cx.store;
        let hosts = &mut *cx.hosts;
        let walk = attach::attach(
            store,
            gateway.id,
            gateway.listeners.iter().map(|l| attach::Seat {
                spec: l.spec,
                hostname: l.hostname.as_ref(),
                kinds: &l.kinds,
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
        for (i, served) in &walk.listeners {
            let listener = &gateway.listeners[*i];
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
                self.builder.bind(host, index, list);
                self.bound_any = true;
                if https && let Some(h) = host {
                    // The listener's certificates also cover the hosts its
                    // routes bring (a listener without hostname).
                    for s in listener_secrets(gateway.id, listener.spec) {
                        self.certificates.push((h.clone(), s));
                    }
                }
            }
        }
        let attached: Vec<usize> = walk.listeners.iter().map(|(i, _)| *i).collect();
        for i in attached {
            gateway.listeners[i].attached += i32::from(countable);
        }
        Ok(())
    }
}

/// The index of the teapot Gateway `parent` (of a route of `namespace`)
/// names, if it names one.
fn gateway_of(parent: &ParentIn<'_>, namespace: &str, by_name: &GatewayIndex<'_>) -> Option<usize> {
    let group = parent.group.unwrap_or(GROUP);
    let kind = parent.kind.unwrap_or("Gateway");
    if group != GROUP || kind != "Gateway" {
        return None;
    }
    let namespace = parent.namespace.unwrap_or(namespace);
    by_name.get(&(namespace, parent.name)).copied()
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
    certificates: &mut Vec<(HostPattern, NsName)>,
) -> GatewayEntry<'s> {
    let store = cx.store;
    let generation = gateway.metadata.generation;
    let tenancy = cx.hosts.tenancy;
    let tenant = tenancy.get(&id.namespace);
    let assigned = tenant.map(|t| {
        HostPattern::Exact(hostname::assigned_hostname(
            &id.name,
            t.cluster,
            &cx.hosts.options.domain,
        ))
    });
    let addresses = match &assigned {
        Some(h) => vec![GatewayStatusAddresses {
            r#type: Some("Hostname".into()),
            value: h.to_string(),
        }],
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
    let mut listeners = Vec::with_capacity(gateway.spec.listeners.len());
    for class in listeners::classify(gateway) {
        let l = class.spec;
        let refs = class.certificate_refs();
        let mut conditions = Vec::new();
        if class.protocol.is_some_and(ListenerProtocol::is_l4) {
            conditions.push(condition(
                "Accepted",
                false,
                "UnsupportedProtocol",
                // With the L4 plane on, its report replaces this entry
                // (`compile::gateway_join`); what stays is the L4
                // plane being off.
                format!(
                    "{} listeners are served by the L4 plane, which is off (--l4 false)",
                    l.protocol
                ),
                generation,
            ));
        } else if let Some((reason, message)) = &class.refused {
            conditions.push(condition(
                "Accepted",
                false,
                reason,
                message.clone(),
                generation,
            ));
        }
        let mut plane = match class.plane {
            Some(listeners::Plane::Http) => Some(Plane::Http),
            Some(listeners::Plane::Https) => Some(Plane::Https),
            _ => None,
        };
        let attachment::RouteKinds {
            admitted: kinds,
            invalid: invalid_kinds,
        } = class.kinds;
        let mut resolved: Result<(), (&str, String)> = Ok(());
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
                } else if !gateway_may_use_secret(store, id, tenant.is_some(), ns, &r.name) {
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
            if resolved.is_err() {
                plane = None;
            }
        }
        let hostname = match (class.hostname, &assigned) {
            (Some(h), _) => Some(h),
            (None, Some(own)) if l.hostname.is_none() => Some(own.clone()),
            (None, _) => None,
        };
        if plane.is_some() {
            if let Some((reason, message)) = class.conflict {
                conditions.push(condition("Conflicted", true, reason, message, generation));
                plane = None;
            } else {
                conditions.push(condition(
                    "Conflicted",
                    false,
                    "NoConflicts",
                    "",
                    generation,
                ));
            }
        }
        if plane.is_some() {
            conditions.push(condition("Accepted", true, "Accepted", "", generation));
        } else if !conditions.iter().any(|c| c.type_ == "Accepted") {
            conditions.push(condition(
                "Accepted",
                false,
                "Invalid",
                "the listener is not served (see ResolvedRefs)",
                generation,
            ));
        }
        conditions.push(match &resolved {
            Ok(()) => condition("ResolvedRefs", true, "ResolvedRefs", "", generation),
            Err((reason, message)) => {
                condition("ResolvedRefs", false, reason, message.clone(), generation)
            }
        });
        conditions.push(if plane.is_some() {
            condition("Programmed", true, "Programmed", "", generation)
        } else {
            condition(
                "Programmed",
                false,
                "Invalid",
                "the listener is not served",
                generation,
            )
        });
        // A tenant's certificates go on the hosts its routes bind (after
        // the tenant host rules, in `attach`), never on a bare listener
        // hostname: certificates only for routed hosts.
        if plane == Some(Plane::Https)
            && tenant.is_none()
            && let Some(h) = &hostname
        {
            for s in listener_secrets(id, l) {
                certificates.push((h.clone(), s));
            }
        }
        listeners.push(Listener {
            spec: l,
            plane,
            hostname,
            kinds,
            attached: 0,
            conditions,
        });
    }
    GatewayEntry {
        id,
        gateway,
        listeners,
        addresses,
        client_cert: backend_tls::gateway_client_cert(store, id, gateway, tenant.is_some()),
    }
}

/// A route's candidate list per listener plane (HTTP, HTTPS), made when
/// first bound.
/// A route's candidate lists, one per (HTTPS plane?, listener hostname
/// rank) it binds through: shared by every hostname bound that way.
type PlaneLists = Vec<(bool, u32, Arc<[Candidate]>)>;

/// A parentRef, whatever the route kind.
#[derive(Debug)]
struct ParentIn<'s> {
    group: Option<&'s str>,
    kind: Option<&'s str>,
    name: &'s str,
    namespace: Option<&'s str>,
    port: Option<i32>,
    section: Option<&'s str>,
}

/// A backendRef, whatever the route kind.
#[derive(Debug)]
struct BackendIn<'s> {
    group: Option<&'s str>,
    kind: Option<&'s str>,
    name: &'s str,
    namespace: Option<&'s str>,
    port: Option<i32>,
    weight: Option<i32>,
    /// Its own filters, as HTTPRoute rule filters (converted once).
    filters: Vec<HttpRouteRulesFilters>,
}

/// A rule's backendRefs, read as [`BackendIn`] when compiled (no list
/// built per rule beforehand).
#[derive(Debug)]
enum BackendsIn<'s> {
    Http(&'s [teapot_gateway_api::generated::http_routes::HttpRouteRulesBackendRefs]),
    Grpc(&'s [teapot_gateway_api::generated::grpc_routes::GrpcRouteRulesBackendRefs]),
}

impl<'s> BackendsIn<'s> {
    fn len(&self) -> usize {
        match self {
            BackendsIn::Http(b) => b.len(),
            BackendsIn::Grpc(b) => b.len(),
        }
    }

    fn iter(&self) -> impl Iterator<Item = BackendIn<'s>> + use<'s> {
        let (http, grpc) = match *self {
            BackendsIn::Http(b) => (b, &[][..]),
            BackendsIn::Grpc(b) => (&[][..], b),
        };
        let http = http.iter().map(|b| BackendIn {
            group: b.group.as_deref(),
            kind: b.kind.as_deref(),
            name: &b.name,
            namespace: b.namespace.as_deref(),
            port: b.port,
            weight: b.weight,
            filters: as_http_filters(b.filters.as_ref()),
        });
        let grpc = grpc.iter().map(|b| BackendIn {
            group: b.group.as_deref(),
            kind: b.kind.as_deref(),
            name: &b.name,
            namespace: b.namespace.as_deref(),
            port: b.port,
            weight: b.weight,
            filters: as_http_filters(b.filters.as_ref()),
        });
        http.chain(grpc)
    }
}

/// A rule, whatever the route kind: matches already compiled.
#[derive(Debug)]
struct RuleIn<'s> {
    matches: Result<Vec<Matcher>, String>,
    backends: BackendsIn<'s>,
    filters: std::borrow::Cow<'s, [HttpRouteRulesFilters]>,
    timeouts: (Option<&'s str>, Option<&'s str>),
    /// The rule's `name`: a RouteTrafficPolicy's `sectionName`.
    name: Option<&'s str>,
    /// The rule's `sessionPersistence` (HTTPRoute).
    session: Option<&'s HttpRouteRulesSessionPersistence>,
}

/// An HTTPRoute or GRPCRoute as the compile reads it.
#[derive(Debug)]
struct RouteIn<'s> {
    id: &'s NsName,
    grpc: bool,
    kind: &'static str,
    age: AgeKey<'s>,
    /// `spec.hostnames`, parsed once (invalid ones were refused at load).
    hosts: Vec<HostPattern>,
    /// The object, shared with the store, for its status.
    object: RouteObject,
    parents: Vec<ParentIn<'s>>,
    rules: Vec<RuleIn<'s>>,
    /// What its backends under a BackendTLSPolicy present (from its parent
    /// Gateways, set when the route compiles).
    client_cert: backend_tls::ClientCert,
}

impl<'s> RouteIn<'s> {
    fn http(id: &'s NsName, r: &'s Arc<HttpRoute>) -> RouteIn<'s> {
        let spec = &r.spec;
        RouteIn {
            object: RouteObject::Http(r.clone()),
            id,
            grpc: false,
            kind: "HTTPRoute",
            age: age(&r.metadata, id),
            hosts: parse_hosts(spec.hostnames.as_deref()),
            parents: spec
                .parent_refs
                .iter()
                .flatten()
                .map(|p| ParentIn {
                    group: p.group.as_deref(),
                    kind: p.kind.as_deref(),
                    name: &p.name,
                    namespace: p.namespace.as_deref(),
                    port: p.port,
                    section: p.section_name.as_deref(),
                })
                .collect(),
            client_cert: Ok(None),
            rules: match &spec.rules {
                Some(rules) => rules.iter().map(http_rule).collect(),
                // No rules: one rule matching everything, with no backend.
                None => Vec::new(),
            },
        }
    }

    fn grpc(id: &'s NsName, r: &'s Arc<GrpcRoute>) -> RouteIn<'s> {
        let spec = &r.spec;
        RouteIn {
            object: RouteObject::Grpc(r.clone()),
            id,
            grpc: true,
            kind: "GRPCRoute",
            age: age(&r.metadata, id),
            hosts: parse_hosts(spec.hostnames.as_deref()),
            parents: spec
                .parent_refs
                .iter()
                .flatten()
                .map(|p| ParentIn {
                    group: p.group.as_deref(),
                    kind: p.kind.as_deref(),
                    name: &p.name,
                    namespace: p.namespace.as_deref(),
                    port: p.port,
                    section: p.section_name.as_deref(),
                })
                .collect(),
            rules: spec
                .rules
                .iter()
                .flatten()
                .map(|rule| {
                    let matches = match &rule.matches {
                        Some(m) if !m.is_empty() => m.iter().map(grpc_matcher).collect(),
                        _ => Ok(vec![any_path()]),
                    };
                    RuleIn {
                        matches,
                        backends: BackendsIn::Grpc(
                            rule.backend_refs.as_deref().unwrap_or_default(),
                        ),
                        filters: std::borrow::Cow::Owned(as_http_filters(rule.filters.as_ref())),
                        timeouts: (None, None),
                        name: rule.name.as_deref(),
                        session: None,
                    }
                })
                .collect(),
            client_cert: Ok(None),
        }
    }
}

fn parse_hosts(hostnames: Option<&[String]>) -> Vec<HostPattern> {
    hostnames
        .unwrap_or_default()
        .iter()
        .filter_map(|h| HostPattern::parse(h).ok())
        .collect()
}

/// Filters of another generated type (backend-level, GRPCRoute) as
/// HTTPRoute rule filters: the same shape under another name, converted
/// once per compile where present (rare).
fn as_http_filters<T: Serialize>(filters: Option<&Vec<T>>) -> Vec<HttpRouteRulesFilters> {
    match filters {
        Some(f) if !f.is_empty() => serde_json::to_value(f)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

fn http_rule(rule: &teapot_gateway_api::generated::http_routes::HttpRouteRules) -> RuleIn<'_> {
    let matches = match &rule.matches {
        Some(m) if !m.is_empty() => m.iter().map(http_matcher).collect(),
        _ => Ok(vec![any_path()]),
    };
    RuleIn {
        matches,
        backends: BackendsIn::Http(rule.backend_refs.as_deref().unwrap_or_default()),
        filters: std::borrow::Cow::Borrowed(rule.filters.as_deref().unwrap_or_default()),
        timeouts: (
            rule.timeouts.as_ref().and_then(|t| t.request.as_deref()),
            rule.timeouts
                .as_ref()
                .and_then(|t| t.backend_request.as_deref()),
        ),
        name: rule.name.as_deref(),
        session: rule.session_persistence.as_ref(),
    }
}

fn any_path() -> Matcher {
    Matcher {
        path: PathMatch::Prefix("".into()),
        method: None,
        headers: Box::new([]),
        query: Box::new([]),
    }
}

/// A tenant pattern as a bounded automaton (`teapot_api::regex`), shared
/// with every route and earlier snapshot that holds the same pattern, so a
/// reload compiles only patterns it has not seen.
fn regex(pattern: &str) -> Result<Arc<TenantRegex>, String> {
    TenantRegex::compile(pattern).map_err(|e| e.to_string())
}

fn value_match(exact: bool, value: &str) -> Result<ValueMatch, String> {
    if exact {
        Ok(ValueMatch::Exact(value.into()))
    } else {
        regex(value).map(ValueMatch::Regex)
    }
}

fn http_matcher(m: &HttpRouteRulesMatches) -> Result<Matcher, String> {
    let path = match &m.path {
        None => PathMatch::Prefix("".into()),
        Some(p) => {
            let value = p.value.as_deref().unwrap_or("/");
            match p
                .r#type
                .as_ref()
                .unwrap_or(&HttpRouteRulesMatchesPathType::PathPrefix)
            {
                HttpRouteRulesMatchesPathType::Exact => PathMatch::Exact(value.into()),
                HttpRouteRulesMatchesPathType::PathPrefix => {
                    PathMatch::Prefix(value.trim_end_matches('/').into())
                }
                HttpRouteRulesMatchesPathType::RegularExpression => PathMatch::Regex(regex(value)?),
            }
        }
    };
    // Only the first of several conditions on one header name counts.
    let mut headers: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if headers.iter().any(|(n, _)| **n == *name) {
            continue;
        }
        let exact = !matches!(
            h.r#type,
            Some(HttpRouteRulesMatchesHeadersType::RegularExpression)
        );
        headers.push((name.into(), value_match(exact, &h.value)?));
    }
    let mut query: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for q in m.query_params.iter().flatten() {
        if query.iter().any(|(n, _)| **n == *q.name) {
            continue;
        }
        let exact = !matches!(
            q.r#type,
            Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression)
        );
        query.push((q.name.as_str().into(), value_match(exact, &q.value)?));
    }
    let method = m.method.as_ref().map(|method| {
        serde_json::to_value(method)
            .ok()
            .and_then(|v| v.as_str().map(Box::from))
            .unwrap_or_default()
    });
    Ok(Matcher {
        path,
        method,
        headers: headers.into_boxed_slice(),
        query: query.into_boxed_slice(),
    })
}

/// A GRPCRoute match as a path and header match: gRPC calls are POSTs to
/// `/SERVICE/METHOD`.
fn grpc_matcher(
    m: &teapot_gateway_api::generated::grpc_routes::GrpcRouteRulesMatches,
) -> Result<Matcher, String> {
    let path = match &m.method {
        None => PathMatch::Prefix("".into()),
        Some(method) => {
            let exact = !matches!(
                method.r#type,
                Some(GrpcRouteRulesMatchesMethodType::RegularExpression)
            );
            let (service, name) = (method.service.as_deref(), method.method.as_deref());
            match (service, name, exact) {
                (Some(s), Some(m), true) => PathMatch::Exact(format!("/{s}/{m}").into()),
                (Some(s), None, true) => PathMatch::Prefix(format!("/{s}").into()),
                // The one list of method patterns the tenant budget counts.
                _ => {
                    let pattern = grpc_method_pattern(service, name, !exact).unwrap_or_default();
                    PathMatch::Regex(regex(&pattern)?)
                }
            }
        }
    };
    let mut headers: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if headers.iter().any(|(n, _)| **n == *name) {
            continue;
        }
        let exact = !matches!(
            h.r#type,
            Some(GrpcRouteRulesMatchesHeadersType::RegularExpression)
        );
        headers.push((name.into(), value_match(exact, &h.value)?));
    }
    Ok(Matcher {
        path,
        method: None,
        headers: headers.into_boxed_slice(),
        query: Box::new([]),
    })
}

/// The route's rules; whether every backendRef resolved (the reason when
/// not); the messages of rules that could not be served.
#[allow(clippy::type_complexity)]
fn compile_rules<'s>(
    (store, auth_owner): (&'s Store, (&crate::live::fairness::TenantGates, &str)),
    resolver: &mut Resolver<'s>,
    route: &RouteIn<'s>,
    (rules, attached): (Vec<RuleIn<'s>>, &route_policy::Attached),
    info: &Arc<RouteInfo>,
    route_index: u32,
) -> (
    Vec<Arc<Target>>,
    Result<(), (&'static str, String)>,
    Vec<String>,
) {
    let mut resolved: Result<(), (&'static str, String)> = Ok(());
    let mut invalid = Vec::new();
    let mut out = Vec::with_capacity(rules.len());
    // The backendRefs this route resolved: its rules often name the same
    // Service port again, and a reference resolves the same way within
    // one compile.
    #[allow(clippy::type_complexity)]
    let mut resolved_backends: Vec<(
        (Option<&str>, Option<&str>, Option<&str>, &str, Option<i32>),
        Route,
        bool,
    )> = Vec::new();
    let rules = if rules.is_empty() {
        // No rules: one that matches everything, with no backend.
        vec![RuleIn {
            matches: Ok(vec![any_path()]),
            backends: BackendsIn::Http(&[]),
            filters: std::borrow::Cow::Borrowed(&[]),
            timeouts: (None, None),
            name: None,
            session: None,
        }]
    } else {
        rules
    };
    for (index, mut rule) in rules.into_iter().enumerate() {
        let matches = std::mem::replace(&mut rule.matches, Ok(Vec::new()));
        let matchers = match matches {
            Ok(m) => m,
            Err(e) => {
                invalid.push(format!("rule {index}: {e}"));
                continue;
            }
        };
        // Most rules have neither filters nor timeouts: nothing to read.
        let plain = rule.filters.is_empty() && rule.timeouts == (None, None);
        let read;
        let spec = if plain {
            &NO_FILTERS
        } else {
            match filter_spec(&rule.filters, rule.timeouts, route.grpc) {
                Ok(s) => {
                    read = s;
                    &read
                }
                Err(e) => {
                    invalid.push(format!("rule {index}: {e}"));
                    continue;
                }
            }
        };
        let mut mirrors = Vec::new();
        for (ns, name, port, per_million) in &spec.mirrors {
            let ns = ns.as_deref().unwrap_or(&route.id.namespace);
            let permitted = ns == route.id.namespace
                || attachment::granted(store, route.kind, &route.id.namespace, "Service", ns, name);
            if let (true, Some((ns, name))) = (permitted, service_key(store, ns, name)) {
                mirrors.push(Mirror {
                    upstream: resolver.service(ns, name, *port),
                    per_million: *per_million,
                });
            }
        }
        // The rule's traffic policy, once for all its backends.
        let mut rule_traffic =
            attached.rule_traffic(rule.name, info.policy.as_deref(), spec.cors.as_ref());
        let mut persistence = None;
        if let Some(session) = rule.session {
            match session::affinity(session, route.id, index) {
                Ok(affinity) => {
                    persistence = Some(affinity.cookie.as_str().into());
                    rule_traffic = Some(edited(rule_traffic.as_deref(), info, |t| {
                        t.affinity = Some(affinity)
                    }));
                }
                Err(e) => {
                    invalid.push(format!("rule {index}: {e}"));
                    continue;
                }
            }
        }
        if let Some((filter, terms)) = &spec.external_auth {
            let (auth, problem) =
                ext_auth::external_auth(store, resolver, route, filter, auth_owner);
            if let (Some(problem), Ok(())) = (problem, &resolved) {
                resolved = Err(problem);
            }
            rule_traffic = Some(edited(rule_traffic.as_deref(), info, |t| {
                t.auth = Some(Arc::new(auth));
                t.auth_terms = Some(terms.clone());
            }));
        }
        let action = if let Some(redirect) = spec.redirect.clone() {
            Action::Redirect(redirect)
        } else {
            let mut backends = Vec::with_capacity(rule.backends.len());
            let mut total = 0u64;
            for b in rule.backends.iter() {
                let b = &b;
                let weight = b.weight.unwrap_or(1).max(0) as u64;
                let mut h2c = route.grpc;
                let key = (b.group, b.kind, b.namespace, b.name, b.port);
                let found = match resolved_backends.iter().find(|(k, ..)| *k == key) {
                    Some((_, r, app_h2c)) => Ok((r.clone(), *app_h2c)),
                    None => backend(store, resolver, route, b, info).inspect(|(r, app_h2c)| {
                        resolved_backends.push((key, r.clone(), *app_h2c));
                    }),
                };
                let mut target = match found {
                    Ok((r, app_h2c)) => {
                        h2c |= app_h2c;
                        Ok(r)
                    }
                    Err(why) => {
                        if resolved.is_ok() {
                            resolved = Err(why);
                        }
                        Err(())
                    }
                };
                if let (Some(traffic), Ok(r)) = (&rule_traffic, &mut target) {
                    *r = with_traffic(r, traffic);
                }
                let own = if b.filters.is_empty() {
                    BackendFilters::None
                } else {
                    match filter_spec(&b.filters, (None, None), route.grpc) {
                        Ok(s) => {
                            if let (Some(cors), Ok(r)) = (&s.cors, &mut target) {
                                *r = with_traffic(r, &with_cors(r.policy.as_deref(), cors));
                            }
                            if let (Some((filter, terms)), Ok(r)) = (&s.external_auth, &mut target)
                            {
                                let (auth, problem) = ext_auth::external_auth(
                                    store, resolver, route, filter, auth_owner,
                                );
                                if let (Some(problem), Ok(())) = (problem, &resolved) {
                                    resolved = Err(problem);
                                }
                                let own = r.policy.as_deref().and_then(|p| p.traffic.as_deref());
                                let traffic = edited(own, info, |t| {
                                    t.auth = Some(Arc::new(auth));
                                    t.auth_terms = Some(terms.clone());
                                });
                                *r = with_traffic(r, &traffic);
                            }
                            backend_filters(&s, &matchers)
                        }
                        Err(e) => {
                            invalid.push(format!("rule {index} backendRef {}: {e}", b.name));
                            // A filter is never skipped (the specification's
                            // MUST): the backend's share is answered 500.
                            target = Err(());
                            BackendFilters::None
                        }
                    }
                };
                total += weight;
                backends.push(Backend {
                    weight,
                    route: target,
                    filters: own,
                    h2c,
                });
            }
            if total == 0 {
                Action::Unroutable
            } else {
                Action::Backends {
                    backends: backends.into_boxed_slice(),
                    total,
                    next: AtomicU64::new(0),
                    persistence,
                }
            }
        };
        let filters = if spec.uses_prefix() || (plain && mirrors.is_empty()) {
            None
        } else {
            let f = merged_filters(spec, None);
            let f = match (f, mirrors.is_empty()) {
                (None, true) => None,
                (f, _) => Some(f.unwrap_or_default()),
            };
            f.map(|mut f| {
                f.mirrors = mirrors.clone();
                Arc::new(f)
            })
        };
        let action = Arc::new(action);
        let targets = matchers.into_iter().enumerate().map(|(m, matcher)| {
            let filters = if spec.uses_prefix() {
                let prefix = match &matcher.path {
                    PathMatch::Prefix(p) => Some(&**p),
                    _ => None,
                };
                let mut f = merged_filters(spec, prefix).unwrap_or_default();
                f.mirrors = mirrors.clone();
                Some(Arc::new(f))
            } else {
                filters.clone()
            };
            Arc::new(Target::new(
                matcher,
                action.clone(),
                info.clone(),
                filters,
                (route_index, index as u32, m as u32),
            ))
        });
        out.extend(targets);
    }
    (out, resolved, invalid)
}

/// The traffic policy of `base` (the route's own, if any) with `cors` as
/// its CORS: a rule's filter adds to what the route has, never drops it.
fn with_cors(base: Option<&RoutePolicy>, cors: &Cors) -> Arc<TrafficPolicy> {
    let mut traffic = base
        .and_then(|p| p.traffic.as_deref())
        .cloned()
        .unwrap_or_default();
    traffic.cors = Some(cors.clone());
    Arc::new(traffic)
}

/// A copy of `own` (a rule's or backendRef's traffic policy so far; none:
/// the route's own, if any) with `edit` made: a rule's sessionPersistence
/// or ExternalAuth adds to what the route has, never drops it.
fn edited(
    own: Option<&TrafficPolicy>,
    info: &RouteInfo,
    edit: impl FnOnce(&mut TrafficPolicy),
) -> Arc<TrafficPolicy> {
    let mut traffic = own
        .or_else(|| info.policy.as_deref().and_then(|p| p.traffic.as_deref()))
        .cloned()
        .unwrap_or_default();
    edit(&mut traffic);
    Arc::new(traffic)
}

/// `route` with a rule's (or a backendRef's) traffic policy besides the
/// limits of the route's tenant: one policy per rule and backend, the
/// backend's own replacing the rule's.
fn with_traffic(route: &Route, traffic: &Arc<TrafficPolicy>) -> Route {
    let base = route.policy.as_deref();
    let policy = RoutePolicy {
        max_body_size: base.and_then(|p| p.max_body_size),
        tenant: base.and_then(|p| p.tenant.clone()),
        traffic: Some(traffic.clone()),
    };
    Route::new(
        route.upstream.clone(),
        Some(Arc::new(policy)),
        route.ingress.clone(),
    )
}

/// The store's own strings for a Service's namespace and name (the
/// resolver's cache keys borrow from the store).
fn service_key<'s>(store: &'s Store, ns: &str, name: &str) -> Option<(&'s str, &'s str)> {
    store
        .services
        .get_key_value(&NsRef {
            namespace: ns,
            name,
        })
        .map(|(k, _)| (k.namespace.as_str(), k.name.as_str()))
}

/// A Service reference of `route` (a backendRef's, an ExternalAuth
/// filter's: `what` in the messages) checked as the specification asks:
/// a core Service, in the route's namespace or one whose ReferenceGrant
/// lets it in, with a port. The port, or the ResolvedRefs reason.
fn service_reference(
    store: &Store,
    route: &RouteIn<'_>,
    (group, kind, ns, name, port): (Option<&str>, Option<&str>, &str, &str, Option<i32>),
    what: &str,
) -> Result<i32, (&'static str, String)> {
    let group = group.unwrap_or("");
    let kind = kind.unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        return Err((
            "InvalidKind",
            format!("{what} {name} is a {group}/{kind}, not a Service"),
        ));
    }
    if ns != route.id.namespace
        && !attachment::granted(store, route.kind, &route.id.namespace, "Service", ns, name)
    {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {ns} lets {} use Service {ns}/{name}",
                route.kind
            ),
        ));
    }
    port.ok_or_else(|| ("UnsupportedValue", format!("{what} {name} has no port")))
}

/// A backendRef's route and whether its Service port says `appProtocol:
/// kubernetes.io/h2c`, or the ResolvedRefs reason it does not resolve.
fn backend<'s>(
    store: &'s Store,
    resolver: &mut Resolver<'s>,
    route: &RouteIn<'s>,
    b: &BackendIn<'s>,
    info: &Arc<RouteInfo>,
) -> Result<(Route, bool), (&'static str, String)> {
    let ns: &'s str = b.namespace.unwrap_or(&route.id.namespace);
    let reference = (b.group, b.kind, ns, b.name, b.port);
    let port = service_reference(store, route, reference, "backendRef")?;
    let Some(service) = store.services.get(&NsRef {
        namespace: ns,
        name: b.name,
    }) else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} not found", b.name),
        ));
    };
    let service_port = service
        .object
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == port));
    let Some(service_port) = service_port else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} has no port {port}", b.name),
        ));
    };
    let h2c = service_port.app_protocol.as_deref() == Some("kubernetes.io/h2c");
    let upstream = resolver.service(ns, b.name, port);
    let upstream = backend_tls::secured(
        store,
        resolver,
        (route.grpc, &route.client_cert),
        (ns, b.name, service_port),
        upstream,
    );
    Ok((
        Route::new(upstream, info.policy.clone(), info.name.clone()),
        h2c,
    ))
}

/// A rule's filters, read once: what [`merged_filters`] builds from.
#[derive(Clone, Debug, Default)]
struct FilterSpec {
    request: HeaderEditsSpec,
    response: HeaderEditsSpec,
    rewrite_host: Option<String>,
    rewrite_path: Option<PathChange>,
    redirect: Option<Redirect>,
    /// (namespace, name, port, per million).
    mirrors: Vec<(Option<String>, String, i32, u32)>,
    request_timeout: Option<std::time::Duration>,
    backend_timeout: Option<std::time::Duration>,
    /// The CORS filter: the rule's (or the backendRef's) traffic policy.
    cors: Option<Cors>,
    /// The ExternalAuth filter (protocol HTTP) and its terms.
    external_auth: Option<(HttpRouteRulesFiltersExternalAuth, Arc<GatewayAuthTerms>)>,
}

#[derive(Clone, Debug, Default)]
struct HeaderEditsSpec {
    set: Vec<(String, String)>,
    add: Vec<(String, String)>,
    remove: Vec<String>,
}

impl HeaderEditsSpec {
    const NONE: HeaderEditsSpec = HeaderEditsSpec {
        set: Vec::new(),
        add: Vec::new(),
        remove: Vec::new(),
    };
}

/// No filter, no timeout: what most rules have (a static: nothing to
/// build or drop per rule).
static NO_FILTERS: FilterSpec = FilterSpec {
    request: HeaderEditsSpec::NONE,
    response: HeaderEditsSpec::NONE,
    rewrite_host: None,
    rewrite_path: None,
    redirect: None,
    mirrors: Vec::new(),
    request_timeout: None,
    backend_timeout: None,
    cors: None,
    external_auth: None,
};

impl FilterSpec {
    fn uses_prefix(&self) -> bool {
        matches!(self.rewrite_path, Some(PathChange::Prefix(_)))
    }
}

fn filter_spec(
    filters: &[HttpRouteRulesFilters],
    (request, backend): (Option<&str>, Option<&str>),
    grpc: bool,
) -> Result<FilterSpec, String> {
    let mut spec = FilterSpec::default();
    let timeout = |t: Option<&str>| -> Result<Option<std::time::Duration>, String> {
        t.map(teapot_model::gateway::parse_duration)
            .transpose()
            .map(|d| d.filter(|d| !d.is_zero()))
    };
    spec.request_timeout = timeout(request)?;
    spec.backend_timeout = timeout(backend)?;
    for f in filters {
        match f.r#type {
            HttpRouteRulesFiltersType::RequestHeaderModifier => {
                if let Some(m) = &f.request_header_modifier {
                    let e = &mut spec.request;
                    e.set.extend(
                        m.set
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.add.extend(
                        m.add
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.remove
                        .extend(m.remove.iter().flatten().map(|h| h.to_ascii_lowercase()));
                }
            }
            HttpRouteRulesFiltersType::ResponseHeaderModifier => {
                if let Some(m) = &f.response_header_modifier {
                    let e = &mut spec.response;
                    e.set.extend(
                        m.set
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.add.extend(
                        m.add
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.remove
                        .extend(m.remove.iter().flatten().map(|h| h.to_ascii_lowercase()));
                }
            }
            HttpRouteRulesFiltersType::RequestRedirect if !grpc => {
                let Some(r) = &f.request_redirect else {
                    continue;
                };
                let path = r.path.as_ref().map(|p| match p.r#type {
                    HttpRouteRulesFiltersRequestRedirectPathType::ReplaceFullPath => {
                        PathChange::Full(p.replace_full_path.clone().unwrap_or_default().into())
                    }
                    HttpRouteRulesFiltersRequestRedirectPathType::ReplacePrefixMatch => {
                        PathChange::Prefix(
                            p.replace_prefix_match.clone().unwrap_or_default().into(),
                        )
                    }
                });
                spec.redirect = Some(Redirect {
                    scheme: r.scheme.as_ref().map(|s| match s {
                        HttpRouteRulesFiltersRequestRedirectScheme::Http => "http",
                        HttpRouteRulesFiltersRequestRedirectScheme::Https => "https",
                    }),
                    hostname: r.hostname.as_deref().map(Into::into),
                    port: r.port.and_then(|p| u16::try_from(p).ok()),
                    path,
                    status: r
                        .status_code
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(302),
                });
            }
            HttpRouteRulesFiltersType::UrlRewrite if !grpc => {
                let Some(r) = &f.url_rewrite else { continue };
                spec.rewrite_host = r.hostname.clone();
                spec.rewrite_path = r.path.as_ref().map(|p| match p.r#type {
                    HttpRouteRulesFiltersUrlRewritePathType::ReplaceFullPath => {
                        PathChange::Full(p.replace_full_path.clone().unwrap_or_default().into())
                    }
                    HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch => {
                        PathChange::Prefix(
                            p.replace_prefix_match.clone().unwrap_or_default().into(),
                        )
                    }
                });
            }
            HttpRouteRulesFiltersType::Cors if !grpc => {
                let Some(c) = &f.cors else { continue };
                spec.cors = Some(cors::cors(c)?);
            }
            HttpRouteRulesFiltersType::ExternalAuth if !grpc => {
                let Some(a) = &f.external_auth else { continue };
                if spec.external_auth.is_some() {
                    return Err("ExternalAuth appears twice".into());
                }
                spec.external_auth = Some((a.clone(), Arc::new(ext_auth::terms(a)?)));
            }
            HttpRouteRulesFiltersType::RequestMirror => {
                let Some(m) = &f.request_mirror else { continue };
                let b = &m.backend_ref;
                let group = b.group.as_deref().unwrap_or("");
                let kind = b.kind.as_deref().unwrap_or("Service");
                if !group.is_empty() || kind != "Service" {
                    return Err(format!(
                        "RequestMirror backendRef {} is not a Service",
                        b.name
                    ));
                }
                let Some(port) = b.port else {
                    return Err(format!("RequestMirror backendRef {} has no port", b.name));
                };
                let per_million = match (&m.fraction, m.percent) {
                    (Some(f), _) => {
                        let d = f.denominator.unwrap_or(100).max(1) as u64;
                        (f.numerator.max(0) as u64 * 1_000_000 / d).min(1_000_000) as u32
                    }
                    (None, Some(p)) => (p.clamp(0, 100) as u32) * 10_000,
                    (None, None) => 1_000_000,
                };
                spec.mirrors
                    .push((b.namespace.clone(), b.name.clone(), port, per_million));
            }
            _ => {
                let kind = serde_json::to_value(&f.r#type)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                return Err(format!("filter {kind} is not supported"));
            }
        }
    }
    Ok(spec)
}

/// A backendRef's own filters: its RequestRedirect is kept (answered by
/// the decision, `plane::decide`), and a URLRewrite replacing the matched
/// prefix gets one `Filters` per match of the rule, each with the prefix
/// its match took.
fn backend_filters(spec: &FilterSpec, matchers: &[Matcher]) -> BackendFilters {
    let build = |prefix: Option<&str>| {
        let mut f = merged_filters(spec, prefix).unwrap_or_default();
        f.redirect = spec.redirect.clone();
        f.matched_prefix = prefix.map(Into::into);
        (!f.is_empty()).then(|| Arc::new(f))
    };
    fn prefix(m: &Matcher) -> Option<&str> {
        match &m.path {
            PathMatch::Prefix(p) => Some(p),
            _ => None,
        }
    }
    match matchers {
        _ if !spec.uses_prefix() => {
            build(None).map_or(BackendFilters::None, BackendFilters::Shared)
        }
        [one] => build(prefix(one)).map_or(BackendFilters::None, BackendFilters::Shared),
        many => {
            let each: Option<Box<[Arc<Filters>]>> = many.iter().map(|m| build(prefix(m))).collect();
            each.map_or(BackendFilters::None, BackendFilters::PerMatch)
        }
    }
}

/// The filters a request gets from one filter list, with the matched
/// prefix; `None` when nothing is to be done.
fn merged_filters(spec: &FilterSpec, prefix: Option<&str>) -> Option<Filters> {
    let edits = |s: &HeaderEditsSpec| HeaderEdits {
        set: s
            .set
            .iter()
            .map(|(n, v)| (n.as_str().into(), v.as_str().into()))
            .collect(),
        add: s
            .add
            .iter()
            .map(|(n, v)| (n.as_str().into(), v.as_str().into()))
            .collect(),
        remove: s.remove.iter().map(|n| n.as_str().into()).collect(),
    };
    let rewrite = (spec.rewrite_host.is_some() || spec.rewrite_path.is_some()).then(|| Rewrite {
        hostname: spec.rewrite_host.as_deref().map(Into::into),
        path: spec.rewrite_path.clone(),
    });
    let filters = Filters {
        request_headers: edits(&spec.request),
        response_headers: edits(&spec.response),
        rewrite,
        mirrors: Vec::new(),
        redirect: None,
        matched_prefix: prefix.map(Into::into),
        request_timeout: spec.request_timeout,
        backend_timeout: spec.backend_timeout,
    };
    (!filters.is_empty()).then_some(filters)
}

/// Whether Gateway `gateway` may use Secret `ns/name` (a listener's
/// certificate, the backend client certificate): its own namespace's
/// always; another namespace's only for an operator Gateway, and only
/// with a ReferenceGrant (a tenant Gateway never reaches out of its
/// namespace).
pub(crate) fn gateway_may_use_secret(
    store: &Store,
    gateway: &NsName,
    tenant: bool,
    ns: &str,
    name: &str,
) -> bool {
    ns == gateway.namespace
        || (!tenant
            && attachment::granted(store, "Gateway", &gateway.namespace, "Secret", ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    /// A Gateway without listener hostname in `infra`, Service `web` with
    /// an endpoint, and an HTTPRoute of `rules` on `b.example`.
    fn compile(rules: &str) -> Snapshot {
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: infra}\nspec: {ports: [{port: 8080}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: infra, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [\"10.0.0.1\"]}]\nports: [{name: \"\", port: 8080}]\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: infra}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [b.example]\n  rules:\n{rules}"
            ),
        ];
        compile_test_docs(&docs, &CompileOptions::default())
    }

    /// The first backend's filters of the candidate whose path condition
    /// prints as `path`, as the decision picks them (by match index).
    fn backend_filters_of<'s>(s: &'s Snapshot, path: &str) -> Option<&'s Filters> {
        let candidates = s.gateway.host("b.example").candidates();
        let c = candidates
            .iter()
            .find(|c| format!("{:?}", c.matcher.path) == path)
            .unwrap_or_else(|| panic!("no candidate {path}"));
        let Action::Backends { backends, .. } = &*c.action else {
            panic!("{path}: not forwarded");
        };
        backends[0].filters.get(c.match_index()).map(|f| &**f)
    }

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

    #[test]
    fn a_backend_prefix_rewrite_gets_the_prefix_of_each_match() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /a}}, {path: {type: PathPrefix, value: /b/c/}}, {path: {type: Exact, value: /e}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}}]\n",
        );
        let prefix = |path: &str| {
            backend_filters_of(&s, path)
                .expect("filters")
                .matched_prefix
                .as_deref()
                .map(String::from)
        };
        assert_eq!(prefix(r#"Prefix("/a")"#).as_deref(), Some("/a"));
        assert_eq!(prefix(r#"Prefix("/b/c")"#).as_deref(), Some("/b/c"));
        assert_eq!(prefix(r#"Exact("/e")"#), None);
        // What the request path makes of that prefix is the plane's
        // (`plane::decide` tests the rewrite end to end).
    }

    #[test]
    fn a_backend_redirect_is_kept_and_other_backend_filters_are_shared() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /r}}, {path: {type: PathPrefix, value: /s}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /to}, statusCode: 301}}]\n  - matches: [{path: {type: PathPrefix, value: /h}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: b}]}}]\n",
        );
        let candidates = s.gateway.host("b.example").candidates();
        let c = candidates
            .iter()
            .find(|c| matches!(&c.matcher.path, PathMatch::Prefix(p) if &**p == "/s"))
            .unwrap();
        let Action::Backends { backends, .. } = &*c.action else {
            panic!("not forwarded");
        };
        assert!(
            matches!(backends[0].filters, BackendFilters::Shared(_)),
            "the redirect's prefix is the match's, read at request time"
        );
        let redirect = backend_filters_of(&s, r#"Prefix("/r")"#)
            .and_then(|f| f.redirect.clone())
            .expect("redirect kept");
        assert_eq!(redirect.status, 301);
        assert_eq!(redirect.path, Some(PathChange::Prefix("/to".into())));
        let headers = backend_filters_of(&s, r#"Prefix("/h")"#).unwrap();
        assert_eq!(headers.request_headers.set.len(), 1);
        assert!(headers.redirect.is_none() && headers.matched_prefix.is_none());
    }

    #[test]
    fn an_unsupported_backend_filter_is_named_and_its_backend_not_served() {
        let s = compile(
            "  - backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Auth, name: a}}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = &status["httpRoutes"][0]["status"]["parents"][0]["conditions"];
        let partial = conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "PartiallyInvalid")
            .unwrap_or_else(|| panic!("{conditions}"));
        assert_eq!(
            partial["message"],
            "rule 0 backendRef web: filter ExtensionRef is not supported"
        );
        let candidates = s.gateway.host("b.example").candidates();
        let Action::Backends { backends, .. } = &*candidates[0].action else {
            panic!("not a backend rule");
        };
        assert!(backends[0].route.is_err(), "a filter is never skipped");
    }

    /// The CORS filter of a rule is every backend's policy; a
    /// backendRef's own replaces it for that backend; GRPCRoute has none.
    #[test]
    fn a_cors_filter_is_the_policy_of_its_rules_backends() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /a}}]\n    filters: [{type: CORS, cors: {allowOrigins: [\"https://*.b.example\"], allowMethods: [GET]}}]\n    backendRefs:\n    - {name: web, port: 8080}\n    - name: web\n      port: 8080\n      filters: [{type: CORS, cors: {allowOrigins: [\"*\"], allowCredentials: true, maxAge: 60}}]\n  - matches: [{path: {type: PathPrefix, value: /b}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let candidates = s.gateway.host("b.example").candidates();
        let backends = |path: &str| {
            let c = candidates
                .iter()
                .find(|c| format!("{:?}", c.matcher.path).contains(path))
                .unwrap_or_else(|| panic!("no candidate {path}"));
            let Action::Backends { backends, .. } = &*c.action else {
                panic!("{path}: not forwarded");
            };
            backends
                .iter()
                .map(|b| {
                    b.route
                        .as_ref()
                        .unwrap()
                        .traffic()
                        .and_then(|t| t.cors.clone())
                })
                .collect::<Vec<_>>()
        };
        let a = backends("/a");
        let rule = a[0].as_ref().expect("the rule's filter");
        assert!(rule.gateway && !rule.credentials);
        assert_eq!((rule.methods.as_str(), rule.max_age.as_str()), ("GET", "5"));
        assert!(rule.origins.as_ref().unwrap()[0].matches("https://x.y.b.example"));
        let own = a[1].as_ref().expect("the backendRef's filter");
        assert!(own.origins.is_none() && own.credentials && own.max_age == "60");
        assert_eq!(backends("/b"), vec![None], "another rule has no CORS");
    }

    /// The rule's backends and conditions of a compile.
    fn rule_of(s: &Snapshot) -> (&[Backend], Option<&str>, serde_json::Value) {
        let candidates = s.gateway.host("b.example").candidates();
        let Action::Backends {
            backends,
            persistence,
            ..
        } = &*candidates[0].action
        else {
            panic!("not forwarded");
        };
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = status["httpRoutes"][0]["status"]["parents"][0]["conditions"].clone();
        (backends, persistence.as_deref(), conditions)
    }

    /// sessionPersistence is the cookie affinity of every backend of the
    /// rule, and the rule's backends are pinned by the same cookie.
    #[test]
    fn session_persistence_is_the_affinity_of_the_rules_backends() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /cart}}]\n    sessionPersistence: {absoluteTimeout: 10m, cookie: {name: pin, lifetimeType: Permanent, path: /cart}}\n    backendRefs: [{name: web, port: 8080, weight: 3}, {name: web, port: 8080, weight: 1}]\n",
        );
        let (backends, persistence, _) = rule_of(&s);
        assert_eq!(persistence, Some("pin"));
        for b in backends {
            let a = b
                .route
                .as_ref()
                .unwrap()
                .traffic()
                .unwrap()
                .affinity
                .clone();
            let a = a.expect("affinity");
            assert_eq!(
                (a.cookie.as_str(), a.path.as_str(), a.max_age),
                ("pin", "/cart", Some(600))
            );
        }
        // Not served: the rule is not, and the reason is named.
        let s = compile(
            "  - sessionPersistence: {type: Header, header: {name: x-session}}\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let text = status["httpRoutes"][0]["status"]["parents"][0]["conditions"].to_string();
        assert!(
            text.contains("sessionPersistence.type Header is not served"),
            "{text}"
        );
        assert!(s.gateway.host("b.example").candidates().is_empty());
    }

    /// The ExternalAuth filter asks the Service its backendRef names, on
    /// the filter's terms; one that does not resolve fails closed and is
    /// reported; GRPC is not served.
    #[test]
    fn an_external_auth_filter_is_the_rules_authentication() {
        let s = compile(
            "  - filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: web, port: 8080}, http: {path: /check, allowedResponseHeaders: [X-User]}}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let (backends, _, conditions) = rule_of(&s);
        let traffic = backends[0].route.as_ref().unwrap().traffic().unwrap();
        let auth = traffic.auth.as_ref().expect("authentication");
        assert_eq!(auth.upstream.endpoints.len(), 1);
        let terms = traffic.auth_terms.as_ref().unwrap();
        assert_eq!(&*terms.path_prefix, "/check");
        assert_eq!(terms.response_headers[0].as_str(), "x-user");
        assert!(conditions.to_string().contains("\"ResolvedRefs\""));
        let s = compile(
            "  - backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: missing, port: 80}}}]\n",
        );
        let (backends, _, conditions) = rule_of(&s);
        let traffic = backends[0].route.as_ref().unwrap().traffic().unwrap();
        assert!(traffic.auth.as_ref().unwrap().upstream.endpoints.is_empty());
        let text = conditions.to_string();
        assert!(
            text.contains("ExternalAuth Service infra/missing with port 80 not found"),
            "{text}"
        );
        let s = compile(
            "  - filters: [{type: ExternalAuth, externalAuth: {protocol: GRPC, backendRef: {name: web, port: 8080}}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        assert!(s.gateway.host("b.example").candidates().is_empty());
    }

    #[test]
    fn a_cors_origin_that_is_no_origin_is_named() {
        let s = compile(
            "  - filters: [{type: CORS, cors: {allowOrigins: [\"https://a.example\", \"a.example/x\"]}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = &status["httpRoutes"][0]["status"]["parents"][0]["conditions"];
        assert!(
            conditions
                .to_string()
                .contains("rule 0: cors.allowOrigins[1] \\\"a.example/x\\\" is not"),
            "{conditions}"
        );
    }
}
