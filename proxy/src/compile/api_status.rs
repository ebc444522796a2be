//! The Gateway API status report, below both route compiles. The HTTP
//! compile (`compile::gateway`: HTTP and HTTPS listeners, HTTPRoutes and
//! GRPCRoutes) and the L4 compile (`compile::l4::gateway`: TCP, UDP and
//! TLS passthrough listeners, TCPRoutes, UDPRoutes and TLSRoutes) fill the
//! same parts, and each object's status is decided and rendered here once:
//!
//! - [`RouteReport`]: a route of any of the five kinds, with the
//!   conditions of each parentRef that names one of teapot's Gateways.
//! - [`ListenerOutcome`]: what the plane that serves a listener
//!   ([`crate::compile::listeners::classify`]'s plane) found for it; a listener no plane
//!   serves gets its outcome here ([`unserved`]).
//! - [`gateways`]: each Gateway's status from all its listeners, both
//!   planes', and the L4 address: Accepted when any listener is;
//!   Programmed unless no listener is accepted, or the accepted ones are
//!   all L4 listeners waiting for an address the L4 plane could not give.
//!
//! Conditions are [`Condition`]s until rendered; rendered, their
//! `lastTransitionTime` is the epoch (the compile reads no clock, the
//! status writer stamps the time of a change) and their
//! `observedGeneration` the object's generation.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition as MetaCondition, ObjectMeta};
use serde::Serialize;
use teapot_api::names::GATEWAY_CONTROLLER_NAME;
use teapot_gateway_api::generated::gateway_classes::GatewayClassStatus;
use teapot_gateway_api::generated::gateways::{
    GatewayStatus, GatewayStatusAddresses, GatewayStatusListeners,
    GatewayStatusListenersSupportedKinds,
};
use teapot_gateway_api::generated::grpc_routes::{
    GrpcRouteStatus, GrpcRouteStatusParents, GrpcRouteStatusParentsParentRef,
};
use teapot_gateway_api::generated::http_routes::{
    HttpRouteStatus, HttpRouteStatusParents, HttpRouteStatusParentsParentRef,
};
use teapot_gateway_api::generated::listener_sets::{
    ListenerSetStatus, ListenerSetStatusListeners, ListenerSetStatusListenersSupportedKinds,
};
use teapot_gateway_api::{GrpcRoute, HttpRoute, TcpRoute, TlsRoute, UdpRoute};
use teapot_model::attachment::{GROUP, ListenerProtocol};
use teapot_model::store::NsName;

use crate::compile::condition::Condition;
use crate::compile::listeners::{ListenerClass, Plane};

/// The Gateway API part of `/status`, in the shapes of the status
/// subresources (what the kube status writer applies). TCPRoutes,
/// UDPRoutes and TLSRoutes are in the L4 part of `/status`, beside the
/// addresses and sockets of their Gateways.
#[derive(Debug, Default, Serialize)]
pub struct GatewayReport {
    #[serde(rename = "gatewayClasses")]
    pub classes: Vec<Reported<GatewayClassStatus>>,
    pub gateways: Vec<Reported<GatewayStatus>>,
    #[serde(rename = "httpRoutes")]
    pub http_routes: Vec<RouteReport>,
    #[serde(rename = "grpcRoutes")]
    pub grpc_routes: Vec<RouteReport>,
    /// Left out when empty, so `/status` of a fleet without ListenerSets
    /// reads as before them.
    #[serde(rename = "listenerSets", skip_serializing_if = "Vec::is_empty")]
    pub listener_sets: Vec<Reported<ListenerSetStatus>>,
}

impl GatewayReport {
    pub fn is_empty(&self) -> bool {
        self.classes.is_empty()
            && self.gateways.is_empty()
            && self.http_routes.is_empty()
            && self.grpc_routes.is_empty()
            && self.listener_sets.is_empty()
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

/// The five route kinds; the L4 ones sort in the order the L4 report
/// lists them (TCP, UDP, TLS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
pub enum RouteKind {
    #[serde(rename = "HTTPRoute")]
    Http,
    #[serde(rename = "GRPCRoute")]
    Grpc,
    #[serde(rename = "TCPRoute")]
    Tcp,
    #[serde(rename = "UDPRoute")]
    Udp,
    #[serde(rename = "TLSRoute")]
    Tls,
}

impl RouteKind {
    pub fn as_str(self) -> &'static str {
        match self {
            RouteKind::Http => "HTTPRoute",
            RouteKind::Grpc => "GRPCRoute",
            RouteKind::Tcp => "TCPRoute",
            RouteKind::Udp => "UDPRoute",
            RouteKind::Tls => "TLSRoute",
        }
    }
}

/// A route object, shared with the store.
#[derive(Clone, Debug)]
pub enum RouteObject {
    Http(Arc<HttpRoute>),
    Grpc(Arc<GrpcRoute>),
    Tcp(Arc<TcpRoute>),
    Udp(Arc<UdpRoute>),
    Tls(Arc<TlsRoute>),
}

/// A parentRef as written, whatever the route kind.
struct ParentRefOf<'a> {
    group: Option<&'a str>,
    kind: Option<&'a str>,
    name: &'a str,
    namespace: Option<&'a str>,
    port: Option<i32>,
    section_name: Option<&'a str>,
}

impl RouteObject {
    pub fn kind(&self) -> RouteKind {
        match self {
            RouteObject::Http(_) => RouteKind::Http,
            RouteObject::Grpc(_) => RouteKind::Grpc,
            RouteObject::Tcp(_) => RouteKind::Tcp,
            RouteObject::Udp(_) => RouteKind::Udp,
            RouteObject::Tls(_) => RouteKind::Tls,
        }
    }

    fn metadata(&self) -> &ObjectMeta {
        match self {
            RouteObject::Http(r) => &r.metadata,
            RouteObject::Grpc(r) => &r.metadata,
            RouteObject::Tcp(r) => &r.metadata,
            RouteObject::Udp(r) => &r.metadata,
            RouteObject::Tls(r) => &r.metadata,
        }
    }

    /// `spec.parentRefs[i]`.
    fn parent_ref(&self, i: usize) -> Option<ParentRefOf<'_>> {
        macro_rules! at {
            ($route:expr) => {
                $route
                    .spec
                    .parent_refs
                    .as_deref()
                    .unwrap_or_default()
                    .get(i)
                    .map(|p| ParentRefOf {
                        group: p.group.as_deref(),
                        kind: p.kind.as_deref(),
                        name: &p.name,
                        namespace: p.namespace.as_deref(),
                        port: p.port,
                        section_name: p.section_name.as_deref(),
                    })
            };
        }
        match self {
            RouteObject::Http(r) => at!(r),
            RouteObject::Grpc(r) => at!(r),
            RouteObject::Tcp(r) => at!(r),
            RouteObject::Udp(r) => at!(r),
            RouteObject::Tls(r) => at!(r),
        }
    }
}

/// A route's status, kept compact (fixed words, the route object shared
/// with the store) and rendered when asked ([`RouteReport::status`],
/// `/status`): building the typed status of every route was a share of
/// each compile, as rendering every backend would be
/// (`snapshot::Backends`).
#[derive(Debug)]
pub struct RouteReport {
    route: RouteObject,
    /// One entry per parentRef that names one of teapot's Gateways.
    pub parents: Vec<ParentReport>,
}

/// A route's status under one parentRef.
#[derive(Debug)]
pub struct ParentReport {
    /// Its index in `spec.parentRefs`.
    pub index: usize,
    pub conditions: Vec<Condition>,
}

impl RouteReport {
    pub fn new(route: RouteObject, parents: Vec<ParentReport>) -> RouteReport {
        RouteReport { route, parents }
    }

    pub fn kind(&self) -> RouteKind {
        self.route.kind()
    }

    pub fn namespace(&self) -> &str {
        self.route
            .metadata()
            .namespace
            .as_deref()
            .unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.route.metadata().name.as_deref().unwrap_or("")
    }

    fn conditions(&self, conditions: &[Condition]) -> Vec<MetaCondition> {
        let generation = self.route.metadata().generation;
        conditions.iter().map(|c| c.to_meta(generation)).collect()
    }

    /// The parents with their parentRefs, those out of `spec.parentRefs`
    /// left out.
    fn parent_refs(&self) -> impl Iterator<Item = (ParentRefOf<'_>, &ParentReport)> {
        self.parents
            .iter()
            .filter_map(|p| Some((self.route.parent_ref(p.index)?, p)))
    }

    /// The status of an HTTPRoute (`None` for other kinds).
    pub fn http_status(&self) -> Option<HttpRouteStatus> {
        let RouteObject::Http(_) = &self.route else {
            return None;
        };
        Some(HttpRouteStatus {
            parents: self
                .parent_refs()
                .map(|(p, parent)| HttpRouteStatusParents {
                    conditions: self.conditions(&parent.conditions),
                    controller_name: GATEWAY_CONTROLLER_NAME.into(),
                    parent_ref: HttpRouteStatusParentsParentRef {
                        group: p.group.map(Into::into),
                        kind: p.kind.map(Into::into),
                        name: p.name.into(),
                        namespace: p.namespace.map(Into::into),
                        port: p.port,
                        section_name: p.section_name.map(Into::into),
                    },
                })
                .collect(),
        })
    }

    /// The status of a GRPCRoute (`None` for other kinds).
    pub fn grpc_status(&self) -> Option<GrpcRouteStatus> {
        let RouteObject::Grpc(_) = &self.route else {
            return None;
        };
        Some(GrpcRouteStatus {
            parents: self
                .parent_refs()
                .map(|(p, parent)| GrpcRouteStatusParents {
                    conditions: self.conditions(&parent.conditions),
                    controller_name: GATEWAY_CONTROLLER_NAME.into(),
                    parent_ref: GrpcRouteStatusParentsParentRef {
                        group: p.group.map(Into::into),
                        kind: p.kind.map(Into::into),
                        name: p.name.into(),
                        namespace: p.namespace.map(Into::into),
                        port: p.port,
                        section_name: p.section_name.map(Into::into),
                    },
                })
                .collect(),
        })
    }

    /// An L4 route's parents as the L4 report lists them: each parentRef
    /// with the defaults the CRD applies filled in, and its conditions.
    fn l4_parents(&self) -> Vec<L4Parent<'_>> {
        let namespace = self.namespace();
        self.parent_refs()
            .map(|(p, parent)| L4Parent {
                parent_ref: L4ParentRef {
                    group: p.group.unwrap_or(GROUP),
                    kind: p.kind.unwrap_or("Gateway"),
                    namespace: p.namespace.unwrap_or(namespace),
                    name: p.name,
                    section_name: p.section_name,
                    port: p.port,
                },
                conditions: &parent.conditions,
            })
            .collect()
    }

    /// The route's `status` as teapot writes it: one `parents[]` entry per
    /// parentRef to one of teapot's Gateways, with `controllerName`. The
    /// status writer sets `observedGeneration` and `lastTransitionTime`.
    pub fn status(&self) -> serde_json::Value {
        match self.kind() {
            RouteKind::Http => serde_json::to_value(self.http_status()).unwrap_or_default(),
            RouteKind::Grpc => serde_json::to_value(self.grpc_status()).unwrap_or_default(),
            RouteKind::Tcp | RouteKind::Udp | RouteKind::Tls => {
                let parents: Vec<serde_json::Value> = self
                    .l4_parents()
                    .into_iter()
                    .map(|p| {
                        serde_json::json!({
                            "parentRef": p.parent_ref,
                            "controllerName": GATEWAY_CONTROLLER_NAME,
                            "conditions": p.conditions,
                        })
                    })
                    .collect();
                serde_json::json!({ "parents": parents })
            }
        }
    }
}

/// A parentRef in the L4 report, defaults filled in.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct L4ParentRef<'a> {
    group: &'a str,
    kind: &'a str,
    namespace: &'a str,
    name: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    section_name: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    port: Option<i32>,
}

#[derive(Serialize)]
struct L4Parent<'a> {
    parent_ref: L4ParentRef<'a>,
    conditions: &'a [Condition],
}

/// HTTPRoutes and GRPCRoutes as `{namespace, name, status}` (the typed
/// status, as `gatewayAPI` lists them); TCPRoutes, UDPRoutes and
/// TLSRoutes as `{kind, namespace, name, parents}` (as the L4 report
/// lists them).
impl Serialize for RouteReport {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut map = serializer.serialize_map(Some(4))?;
        match self.kind() {
            RouteKind::Http | RouteKind::Grpc => {
                map.serialize_entry("namespace", self.namespace())?;
                map.serialize_entry("name", self.name())?;
                match (self.http_status(), self.grpc_status()) {
                    (Some(s), _) => map.serialize_entry("status", &s)?,
                    (None, Some(s)) => map.serialize_entry("status", &s)?,
                    (None, None) => {}
                }
            }
            RouteKind::Tcp | RouteKind::Udp | RouteKind::Tls => {
                map.serialize_entry("kind", &self.kind())?;
                map.serialize_entry("namespace", self.namespace())?;
                map.serialize_entry("name", self.name())?;
                map.serialize_entry("parents", &self.l4_parents())?;
            }
        }
        map.end()
    }
}

/// What the plane that serves a listener found for it: the kinds it
/// takes, the routes attached, its conditions (Accepted, Conflicted,
/// ResolvedRefs, Programmed, as the specification's listener status has
/// them).
#[derive(Debug, Default, Serialize)]
pub struct ListenerOutcome {
    /// `status.listeners[].supportedKinds`.
    pub supported_kinds: Vec<&'static str>,
    /// Routes attached (accepted) to this listener; of several on a TCP or
    /// UDP listener only the oldest is bound.
    pub attached_routes: u32,
    pub conditions: Vec<Condition>,
}

impl ListenerOutcome {
    /// Whether the listener is accepted.
    pub fn accepted(&self) -> bool {
        self.conditions.iter().any(|c| c.is_true("Accepted"))
    }
}

/// One Gateway of teapot's class as the HTTP compile hands it over. Every
/// such Gateway has one: its addresses and backend client certificate
/// are the HTTP plane's, and the classification is the one both planes
/// read.
#[derive(Debug)]
pub struct GatewayParts<'s> {
    pub id: &'s NsName,
    pub generation: Option<i64>,
    /// Every listener, classified, in spec order.
    pub classes: Vec<ListenerClass<'s>>,
    /// The HTTP plane's outcome of each of its listeners (`Plane::Http`,
    /// `Plane::Https`), by index in `classes`.
    pub http: Vec<Option<ListenerOutcome>>,
    /// `status.addresses`: the assigned hostname of a tenant's Gateway,
    /// the operator's status addresses otherwise.
    pub addresses: Vec<GatewayStatusAddresses>,
    /// The `ResolvedRefs` of `spec.tls.backend.clientCertificateRef`, when
    /// the Gateway names one.
    pub client_cert: Option<Condition>,
    /// `InsecureFrontendValidationMode`, when a frontend validation of the
    /// Gateway is `AllowInsecureFallback`
    /// (crate::compile::gateway::frontend).
    pub insecure_frontend: Option<Condition>,
    /// How many of `classes` are the Gateway's own listeners; those after
    /// are its ListenerSets' ([`crate::compile::listeners::classify_table`]).
    pub gateway_listeners: usize,
    /// The ListenerSets naming the Gateway, oldest first.
    pub sets: Vec<SetPart<'s>>,
    /// The Gateway sets `spec.allowedListeners`.
    pub allows_sets: bool,
    /// Why teapot does not accept the Gateway at all
    /// ([`crate::compile::listeners::gateway_refusal`]).
    pub refused: Option<(&'static str, String)>,
}

/// A ListenerSet as the Gateway compile hands it over with its parent's
/// parts.
#[derive(Debug)]
pub struct SetPart<'s> {
    pub id: &'s NsName,
    pub generation: Option<i64>,
    /// Why the Gateway does not take it (the `Accepted=False` reason and
    /// message).
    pub refused: Option<(&'static str, String)>,
    /// Its listeners' indexes in the parent's `classes`.
    pub range: std::ops::Range<usize>,
}

/// The L4 plane's part of one Gateway with L4 listeners.
#[derive(Debug)]
pub struct L4Part<'r> {
    pub namespace: &'r str,
    pub name: &'r str,
    /// The Gateway's address.
    pub address: Option<IpAddr>,
    /// Why it got none: its `Programmed=False` condition.
    pub refused: Option<&'r Condition>,
    /// Its L4 listeners' outcomes, by listener name.
    pub listeners: Vec<(&'r str, &'r ListenerOutcome)>,
}

/// Every Gateway's status from the HTTP plane's `parts` and the L4
/// plane's (`l4`: `None` when the L4 plane is off), sorted by namespace
/// and name.
pub fn gateways(
    parts: Vec<GatewayParts<'_>>,
    l4: Option<&[L4Part<'_>]>,
) -> (
    Vec<Reported<GatewayStatus>>,
    Vec<Reported<ListenerSetStatus>>,
) {
    let l4_by_name: Option<HashMap<(&str, &str), &L4Part<'_>>> =
        l4.map(|l4| l4.iter().map(|p| ((p.namespace, p.name), p)).collect());
    let mut sets = Vec::new();
    let mut out: Vec<Reported<GatewayStatus>> = parts
        .into_iter()
        .map(|g| {
            let l4 = l4_by_name.as_ref().map(|m| {
                m.get(&(g.id.namespace.as_str(), g.id.name.as_str()))
                    .copied()
            });
            gateway(g, l4, &mut sets)
        })
        .collect();
    out.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    sets.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    (out, sets)
}

/// One Gateway's status. `l4`: `None` when the L4 plane is off,
/// `Some(None)` when it has no part of this Gateway (no L4 listener).
fn gateway(
    mut g: GatewayParts<'_>,
    l4: Option<Option<&L4Part<'_>>>,
    sets: &mut Vec<Reported<ListenerSetStatus>>,
) -> Reported<GatewayStatus> {
    let generation = g.generation;
    let mut served = false;
    let mut served_http = false;
    // Some listener of the Gateway itself is not accepted.
    let mut invalid = false;
    let mut listeners = Vec::with_capacity(g.classes.len());
    for (i, class) in g.classes.iter().enumerate() {
        let own;
        let merged;
        let outcome = match class.plane {
            // On the Gateway's own address the L4 plane binds the socket:
            // its allocation decides whether the listener is served.
            Some(Plane::Http | Plane::Https) if class.own_address => {
                match g.http.get(i).and_then(Option::as_ref) {
                    Some(http) => {
                        merged = own_listener(http, class.name(), l4);
                        Some(&merged)
                    }
                    None => None,
                }
            }
            Some(Plane::Http | Plane::Https) => g.http.get(i).and_then(Option::as_ref),
            Some(_) => l4.flatten().and_then(|part| {
                part.listeners
                    .iter()
                    .find(|(name, _)| *name == class.name())
                    .map(|(_, o)| *o)
            }),
            None => None,
        };
        let outcome = match outcome {
            Some(o) => o,
            None => {
                own = unserved(class, l4.is_some());
                &own
            }
        };
        invalid |= !outcome.accepted() && i < g.gateway_listeners;
        // A ListenerSet's listener says nothing of its Gateway.
        if outcome.accepted() && i < g.gateway_listeners {
            served = true;
            // On its own address an HTTP listener is served once its
            // socket is there.
            served_http |= matches!(class.plane, Some(Plane::Http | Plane::Https))
                && (!class.own_address
                    || outcome.conditions.iter().any(|c| c.is_true("Programmed")));
        }
        listeners.push(GatewayStatusListeners {
            attached_routes: i32::try_from(outcome.attached_routes).unwrap_or(i32::MAX),
            conditions: outcome
                .conditions
                .iter()
                .map(|c| c.to_meta(generation))
                .collect(),
            name: class.name().to_string(),
            supported_kinds: Some(
                outcome
                    .supported_kinds
                    .iter()
                    .map(|kind| GatewayStatusListenersSupportedKinds {
                        group: Some(GROUP.into()),
                        kind: (*kind).into(),
                    })
                    .collect(),
            ),
        });
    }
    let set_listeners = listeners.split_off(g.gateway_listeners.min(listeners.len()));
    const NOT_SERVED: &str = "no listener teapot serves";
    let l4 = l4.flatten();
    let programmed = match l4.and_then(|part| part.refused) {
        _ if !served => Condition::new("Programmed", false, "Invalid", NOT_SERVED),
        // Only L4 listeners are accepted and they have no address: nothing
        // of the Gateway is served. An HTTP listener served is the
        // Gateway programmed, its L4 listeners each saying they wait.
        Some(refused) if !served_http => refused.clone(),
        None if !served_http && l4.is_none() && g.classes.iter().any(|c| c.own_address) => {
            Condition::new(
                "Programmed",
                false,
                "AddressNotAssigned",
                "the Gateway's own address comes from the L4 plane, which is off (--l4 false)",
            )
        }
        _ => Condition::new("Programmed", true, "Programmed", ""),
    };
    let accepted = if let Some((reason, message)) = &g.refused {
        Condition::new("Accepted", false, reason, message.clone())
    } else if served && invalid {
        // The specification's reason when one or more listeners are
        // invalid or unsupported; the Gateway is still accepted for the
        // others.
        Condition::new(
            "Accepted",
            true,
            "ListenersNotValid",
            "some listeners are not accepted",
        )
    } else if served {
        Condition::new("Accepted", true, "Accepted", "")
    } else {
        Condition::new("Accepted", false, "ListenersNotValid", NOT_SERVED)
    };
    let mut conditions = vec![accepted.to_meta(generation), programmed.to_meta(generation)];
    // The specification's ResolvedRefs for the backend client
    // certificate; Gateways without one report none.
    if let Some(c) = &g.client_cert {
        conditions.push(c.to_meta(generation));
    }
    if let Some(c) = &g.insecure_frontend {
        conditions.push(c.to_meta(generation));
    }
    let mut addresses = std::mem::take(&mut g.addresses);
    if let Some(addr) = l4.and_then(|part| part.address) {
        let value = addr.to_string();
        if !addresses
            .iter()
            .any(|a| a.value == value && a.r#type.as_deref() == Some("IPAddress"))
        {
            addresses.push(GatewayStatusAddresses {
                r#type: Some("IPAddress".into()),
                value,
            });
        }
    }
    let attached = listener_sets(&g, served, set_listeners, sets);
    if let Some((_, condition)) = &attached {
        conditions.push(condition.to_meta(generation));
    }
    Reported {
        namespace: g.id.namespace.clone(),
        name: g.id.name.clone(),
        status: GatewayStatus {
            addresses: Some(addresses),
            attached_listener_sets: attached.map(|(count, _)| count),
            conditions: Some(conditions),
            listeners: Some(listeners),
        },
    }
}

/// The status of each ListenerSet naming Gateway `g` (`served`: the
/// Gateway is accepted; `listeners`: the status of the sets' listeners,
/// in table order), and the Gateway's `attachedListenerSets` with its
/// `AttachedListenerSets` condition: `None` for a Gateway that neither
/// sets `allowedListeners` nor is named by a ListenerSet, whose status
/// stays as before the kind.
fn listener_sets(
    g: &GatewayParts<'_>,
    served: bool,
    listeners: Vec<GatewayStatusListeners>,
    out: &mut Vec<Reported<ListenerSetStatus>>,
) -> Option<(i32, Condition)> {
    let mut listeners = listeners.into_iter();
    let mut attached = 0i32;
    let mut refused = 0usize;
    for set in &g.sets {
        let own: Vec<ListenerSetStatusListeners> = listeners
            .by_ref()
            .take(set.range.len())
            .map(|l| ListenerSetStatusListeners {
                attached_routes: l.attached_routes,
                conditions: l.conditions,
                name: l.name,
                supported_kinds: l.supported_kinds.map(|kinds| {
                    kinds
                        .into_iter()
                        .map(|k| ListenerSetStatusListenersSupportedKinds {
                            group: k.group,
                            kind: k.kind,
                        })
                        .collect()
                }),
            })
            .collect();
        let any_accepted = own.iter().any(|l| {
            l.conditions
                .iter()
                .any(|c| c.type_ == "Accepted" && c.status == "True")
        });
        let (ok, reason, message) = match &set.refused {
            Some((reason, message)) => (false, *reason, message.clone()),
            None if !served => (
                false,
                "ParentNotAccepted",
                format!("Gateway {} is not accepted", g.id),
            ),
            None if !any_accepted => (
                false,
                "ListenersNotValid",
                "no listener of the ListenerSet is served".to_string(),
            ),
            None => (true, "", String::new()),
        };
        if set.refused.is_some() {
            refused += 1;
        } else if ok {
            attached += 1;
        }
        let conditions = if ok {
            vec![
                Condition::new("Accepted", true, "Accepted", ""),
                Condition::new("Programmed", true, "Programmed", ""),
            ]
        } else {
            vec![
                Condition::new("Accepted", false, reason, message.clone()),
                Condition::new("Programmed", false, reason, message),
            ]
        };
        out.push(Reported {
            namespace: set.id.namespace.clone(),
            name: set.id.name.clone(),
            status: ListenerSetStatus {
                conditions: Some(
                    conditions
                        .iter()
                        .map(|c| c.to_meta(set.generation))
                        .collect(),
                ),
                listeners: Some(own),
            },
        });
    }
    if g.sets.is_empty() && !g.allows_sets {
        return None;
    }
    let condition = if attached > 0 {
        Condition::new("AttachedListenerSets", true, "ListenerSetsAttached", "")
    } else if !g.allows_sets || (refused > 0 && refused == g.sets.len()) {
        Condition::new(
            "AttachedListenerSets",
            false,
            "ListenerSetsNotAllowed",
            "allowedListeners admits none of the ListenerSets naming this Gateway",
        )
    } else {
        Condition::new("AttachedListenerSets", false, "NoListenerSetsAttached", "")
    };
    Some((attached, condition))
}

/// The outcome of an HTTP or HTTPS listener of a Gateway with its own
/// address: the HTTP plane's, with the L4 plane's word on its socket (its
/// port refused: `Accepted=False`; `Programmed` once bound). Without the
/// L4 plane's part (the plane is off, or the Gateway got no address),
/// it is not programmed.
fn own_listener(
    http: &ListenerOutcome,
    name: &str,
    l4: Option<Option<&L4Part<'_>>>,
) -> ListenerOutcome {
    let mut out = ListenerOutcome {
        supported_kinds: http.supported_kinds.clone(),
        attached_routes: http.attached_routes,
        conditions: http.conditions.clone(),
    };
    let socket = l4.flatten().and_then(|part| {
        part.listeners
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, o)| *o)
    });
    let socket_conditions: Vec<Condition> = match socket {
        Some(o) => o.conditions.clone(),
        None => vec![Condition::new(
            "Programmed",
            false,
            "AddressNotAssigned",
            match l4 {
                None => {
                    "the Gateway's own address comes from the L4 plane, which is off (--l4 false)"
                }
                Some(_) => "the Gateway has no address",
            },
        )],
    };
    if !out.accepted() {
        return out;
    }
    for c in socket_conditions {
        if c.type_ == "Accepted" && c.status == "True" {
            continue;
        }
        match out.conditions.iter_mut().find(|o| o.type_ == c.type_) {
            Some(o) => *o = c,
            None => out.conditions.push(c),
        }
    }
    out
}

/// The outcome of a listener no plane serves: a protocol or port teapot
/// does not serve, or an L4 listener while the L4 plane is off
/// (`l4_on` false).
pub fn unserved(class: &ListenerClass<'_>, l4_on: bool) -> ListenerOutcome {
    let l4_protocol = class.protocol.is_some_and(ListenerProtocol::is_l4);
    let (reason, message) = if l4_protocol && !l4_on {
        (
            "UnsupportedProtocol",
            format!(
                "{} listeners are served by the L4 plane, which is off (--l4 false)",
                class.spec.protocol
            ),
        )
    } else if let Some((reason, message)) = &class.refused {
        (*reason, message.clone())
    } else {
        (
            "PortUnavailable",
            format!("port {} cannot be listened on", class.spec.port),
        )
    };
    let resolved = if class.kinds.invalid.is_empty() {
        Condition::new("ResolvedRefs", true, "ResolvedRefs", "")
    } else {
        Condition::new(
            "ResolvedRefs",
            false,
            "InvalidRouteKinds",
            format!(
                "route kinds not supported: {}",
                class.kinds.invalid.join(", ")
            ),
        )
    };
    // A listener refused for a conflict says so as the served ones do.
    let conflict = matches!(reason, "ProtocolConflict" | "HostnameConflict");
    let mut conditions = vec![
        Condition::new("Accepted", false, reason, message.clone()),
        resolved,
        Condition::new(
            "Programmed",
            false,
            if conflict { reason } else { "Invalid" },
            "the listener is not served",
        ),
    ];
    if conflict {
        conditions.push(Condition::new("Conflicted", true, reason, message));
    }
    ListenerOutcome {
        // A protocol teapot does not know takes no route kind at all.
        supported_kinds: if class.protocol.is_some() {
            class.kinds.admitted.clone()
        } else {
            Vec::new()
        },
        attached_routes: 0,
        conditions,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::Value;

    use crate::compile::CompileOptions;
    use crate::compile::l4::{L4Config, L4Inputs};
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: teapot}
spec: {controllerName: teapot.dev/gateway-controller}
";

    fn gateway(listeners: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: edge, namespace: ops}}
spec:
  gatewayClassName: teapot
  listeners: {listeners}
"
        )
    }

    /// Compiles `docs` with the L4 plane on (pool `default` of
    /// 127.0.0.1), or off.
    fn compile(docs: &[String], l4: bool) -> Snapshot {
        let options = CompileOptions {
            l4: l4.then(|| L4Inputs {
                config: Arc::new(L4Config {
                    pools: vec!["default=127.0.0.1".parse().unwrap()],
                    ..L4Config::default()
                }),
                previous: Arc::default(),
                runtime: Arc::default(),
            }),
            ..CompileOptions::default()
        };
        compile_test_docs(docs, &options)
    }

    /// The status of Gateway ops/edge, as `/status` shows it.
    fn status(s: &Snapshot) -> Value {
        let report = serde_json::to_value(&s.report.gateway).unwrap();
        let gateways = report["gateways"].as_array().unwrap();
        assert_eq!(gateways.len(), 1, "{report}");
        gateways[0]["status"].clone()
    }

    /// `(status, reason)` of the condition `type_` in `conditions`.
    fn condition(conditions: &Value, type_: &str) -> (String, String) {
        let c = conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == type_)
            .unwrap_or_else(|| panic!("no {type_} in {conditions}"));
        (
            c["status"].as_str().unwrap().to_string(),
            c["reason"].as_str().unwrap().to_string(),
        )
    }

    fn listener<'v>(status: &'v Value, name: &str) -> &'v Value {
        status["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .find(|l| l["name"] == name)
            .unwrap_or_else(|| panic!("no listener {name} in {status}"))
    }

    fn pair(status: &str, reason: &str) -> (String, String) {
        (status.to_string(), reason.to_string())
    }

    #[test]
    fn a_gateway_of_tcp_and_udp_listeners_only_is_accepted_and_programmed() {
        let s = compile(
            &[
                CLASS.into(),
                gateway(
                    "[{name: db, port: 5432, protocol: TCP}, {name: dns, port: 53, protocol: UDP}]",
                ),
            ],
            true,
        );
        let status = status(&s);
        assert_eq!(
            condition(&status["conditions"], "Accepted"),
            pair("True", "Accepted")
        );
        assert_eq!(
            condition(&status["conditions"], "Programmed"),
            pair("True", "Programmed")
        );
        assert_eq!(
            status["addresses"],
            serde_json::json!([{"type": "IPAddress", "value": "127.0.0.1"}])
        );
        for (name, kind) in [("db", "TCPRoute"), ("dns", "UDPRoute")] {
            let l = listener(&status, name);
            assert_eq!(l["supportedKinds"][0]["kind"], kind);
            for type_ in ["Accepted", "ResolvedRefs", "Programmed"] {
                assert_eq!(condition(&l["conditions"], type_).0, "True", "{l}");
            }
            assert_eq!(condition(&l["conditions"], "Conflicted").0, "False");
        }
        assert!(!status.to_string().contains("not served"), "{status}");
    }

    #[test]
    fn http_and_tcp_listeners_with_one_refused_on_each_plane() {
        let s = compile(
            &[
                CLASS.into(),
                gateway(
                    "[{name: web, port: 80, protocol: HTTP},
                      {name: secure, port: 443, protocol: HTTPS},
                      {name: db, port: 5432, protocol: TCP},
                      {name: term, port: 6443, protocol: TLS, tls: {mode: Terminate}},
                      {name: odd, port: 8080, protocol: HTTP},
                      {name: sctp, port: 9, protocol: SCTP}]",
                ),
            ],
            true,
        );
        let status = status(&s);
        // Accepted for the listeners served, with the specification's
        // reason for the ones that are not.
        assert_eq!(
            condition(&status["conditions"], "Accepted"),
            pair("True", "ListenersNotValid")
        );
        assert_eq!(
            condition(&status["conditions"], "Programmed"),
            pair("True", "Programmed")
        );
        let names: Vec<&str> = status["listeners"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| l["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["web", "secure", "db", "term", "odd", "sctp"]);
        let accepted = |name| condition(&listener(&status, name)["conditions"], "Accepted");
        assert_eq!(accepted("web"), pair("True", "Accepted"));
        assert_eq!(accepted("db"), pair("True", "Accepted"));
        // Refused by the HTTP plane: an HTTPS listener without certificates.
        assert_eq!(accepted("secure"), pair("False", "Invalid"));
        assert_eq!(
            condition(&listener(&status, "secure")["conditions"], "ResolvedRefs"),
            pair("False", "InvalidCertificateRef")
        );
        // Not served by the L4 plane: a Terminate listener without a
        // certificate.
        assert_eq!(accepted("term"), pair("True", "Accepted"));
        assert_eq!(
            condition(&listener(&status, "term")["conditions"], "ResolvedRefs"),
            pair("False", "InvalidCertificateRef")
        );
        // HTTP on 8080 gives the Gateway its own address, where it is
        // served (compile::listeners::own_address).
        assert_eq!(accepted("odd"), pair("True", "Accepted"));
        // Served by neither; a protocol teapot does not know takes no
        // route kind.
        assert_eq!(accepted("sctp"), pair("False", "UnsupportedProtocol"));
        assert_eq!(
            listener(&status, "sctp")["supportedKinds"],
            serde_json::json!([])
        );
        for name in ["secure", "term", "sctp"] {
            assert_eq!(
                condition(&listener(&status, name)["conditions"], "Programmed").0,
                "False",
                "{name}"
            );
        }
        assert_eq!(
            listener(&status, "db")["supportedKinds"][0]["kind"],
            "TCPRoute"
        );
        assert_eq!(
            listener(&status, "web")["supportedKinds"][0]["kind"],
            "HTTPRoute"
        );
    }

    /// The L4 plane has no address for this Gateway (its only L4 listener
    /// is refused, so it claims none), but its HTTP listener is served:
    /// the Gateway is programmed, as the DNS zone and route status read
    /// it. The status was once patched to "AddressNotAssigned" here.
    #[test]
    fn an_l4_address_refused_does_not_unprogram_served_http_listeners() {
        let s = compile(
            &[
                CLASS.into(),
                gateway(
                    "[{name: web, port: 80, protocol: HTTP},
                      {name: term, port: 6443, protocol: TLS, tls: {mode: Terminate}}]",
                ),
            ],
            true,
        );
        let l4 = &s.report.l4.as_ref().unwrap().gateways[0];
        assert_eq!(l4.address, None);
        let status = status(&s);
        assert_eq!(
            condition(&status["conditions"], "Programmed"),
            pair("True", "Programmed")
        );
        assert_eq!(
            condition(&listener(&status, "web")["conditions"], "Programmed").0,
            "True"
        );
        assert_eq!(
            condition(&listener(&status, "term")["conditions"], "ResolvedRefs"),
            pair("False", "InvalidCertificateRef")
        );
    }

    /// When the accepted listeners are all L4 ones and the L4 plane gave
    /// no address, the Gateway is not programmed, and says why.
    #[test]
    fn l4_listeners_without_an_address_leave_the_gateway_unprogrammed() {
        let tenant = "apiVersion: teapot.dev/v1alpha1
kind: Tenant
metadata: {name: acme}
spec: {cluster: acme, nodeCIDRs: [10.1.0.0/24]}
"
        .to_string();
        let gateway = gateway("[{name: db, port: 5432, protocol: TCP}]")
            .replace("namespace: ops", "namespace: tenant-acme");
        let s = compile(&[CLASS.into(), tenant, gateway], true);
        let status = status(&s);
        assert_eq!(
            condition(&status["conditions"], "Accepted"),
            pair("True", "Accepted")
        );
        assert_eq!(
            condition(&status["conditions"], "Programmed"),
            pair("False", "AddressNotAssigned")
        );
        assert_eq!(
            condition(&listener(&status, "db")["conditions"], "Programmed"),
            pair("False", "Pending")
        );
    }

    /// An HTTPS listener whose certificate cannot be read serves nothing,
    /// but counts the route attached to it.
    #[test]
    fn a_listener_with_unresolved_references_counts_its_routes() {
        let gw = gateway(
            "[{name: tls, port: 443, protocol: HTTPS, tls: {certificateRefs: [{name: does-not-exist}]}}]",
        );
        let route = "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: r, namespace: ops}
spec:
  parentRefs: [{name: edge, sectionName: tls}]
  rules: [{backendRefs: [{name: nowhere, port: 8080}]}]
";
        let s = compile(&[CLASS.into(), gw, route.into()], true);
        let status = status(&s);
        let tls = listener(&status, "tls");
        assert_eq!(tls["attachedRoutes"], 1, "{tls}");
        assert_eq!(
            condition(&tls["conditions"], "ResolvedRefs"),
            pair("False", "InvalidCertificateRef")
        );
        assert_eq!(condition(&tls["conditions"], "Programmed").0, "False");
    }

    /// A Gateway teapot does not accept says why, and serves nothing.
    #[test]
    fn a_gateway_with_parameters_is_refused_with_invalid_parameters() {
        let gw = gateway("[{name: web, port: 80, protocol: HTTP}]").replace(
            "  gatewayClassName: teapot\n",
            "  gatewayClassName: teapot\n  infrastructure:\n    parametersRef: {group: invalid.io, kind: InvalidParameters, name: invalid}\n",
        );
        let s = compile(&[CLASS.into(), gw], true);
        let status = status(&s);
        assert_eq!(
            condition(&status["conditions"], "Accepted"),
            pair("False", "InvalidParameters")
        );
        assert_eq!(condition(&status["conditions"], "Programmed").0, "False");
        assert_eq!(
            condition(&listener(&status, "web")["conditions"], "Accepted"),
            pair("False", "UnsupportedValue")
        );
    }

    #[test]
    fn with_the_l4_plane_off_an_l4_listener_says_so() {
        let s = compile(
            &[
                CLASS.into(),
                gateway(
                    "[{name: web, port: 80, protocol: HTTP}, {name: db, port: 5432, protocol: TCP}]",
                ),
            ],
            false,
        );
        let status = status(&s);
        let db = listener(&status, "db");
        assert_eq!(
            condition(&db["conditions"], "Accepted"),
            pair("False", "UnsupportedProtocol")
        );
        assert!(db.to_string().contains("--l4 false"), "{db}");
        assert_eq!(
            condition(&status["conditions"], "Programmed"),
            pair("True", "Programmed")
        );
    }
}
