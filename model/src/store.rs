//! The object store: every object the proxy knows, keyed the way the API
//! server keys them, each remembering the file and document it came from.
//!
//! Objects enter the store only after they parsed and validated; an object
//! that fails keeps its last good version (see [`crate::manifests`]).

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Service};
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use teapot_api::Tenant;
use teapot_api::route_policy::RouteTrafficPolicy;
use teapot_gateway_api::{
    BackendTlsPolicy, Gateway, GatewayClass, GrpcRoute, HttpRoute, ReferenceGrant, TcpRoute,
    TlsRoute, UdpRoute,
};

use crate::certificate::TlsCertificate;
use crate::endpoints::CompactSlice;
use crate::service::CompactService;

/// Namespace and name of a namespaced object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NsName {
    pub namespace: String,
    pub name: String,
}

impl NsName {
    pub fn new(namespace: impl Into<String>, name: impl Into<String>) -> NsName {
        NsName {
            namespace: namespace.into(),
            name: name.into(),
        }
    }
}

impl fmt::Display for NsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// A borrowed [`NsName`] for lookups, so that finding a Service by an
/// Ingress backend's name allocates nothing.
#[derive(Clone, Copy, Debug)]
pub struct NsRef<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
}

impl std::hash::Hash for NsRef<'_> {
    // Must hash exactly as the derived `Hash` of `NsName` does.
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.namespace.hash(state);
        self.name.hash(state);
    }
}

impl hashbrown::Equivalent<NsName> for NsRef<'_> {
    fn equivalent(&self, key: &NsName) -> bool {
        self.namespace == key.namespace && self.name == key.name
    }
}

/// Where an object was read from. The file's path is shared by every
/// object read from it: the store copy of a load by name clones every
/// object's origin, and an `Arc` makes that a count, not an allocation.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Origin {
    pub file: Arc<Path>,
    /// Zero-based index of the YAML document in the file.
    pub document: usize,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (document {})", self.file.display(), self.document)
    }
}

/// An object plus where it came from.
#[derive(Debug)]
pub struct Stored<T> {
    pub object: Arc<T>,
    pub origin: Origin,
}

impl<T> Clone for Stored<T> {
    fn clone(&self) -> Self {
        Stored {
            object: self.object.clone(),
            origin: self.origin.clone(),
        }
    }
}

/// A `kubernetes.io/tls` Secret, already parsed into a usable certificate.
#[derive(Debug)]
pub struct TlsSecret {
    pub certificate: Arc<TlsCertificate>,
    /// The Secret as written, for the tenant policy re-check.
    pub source: k8s_openapi::api::core::v1::Secret,
}

/// One EndpointSlice replaced, added (`slice`) or removed (`None`): the
/// change teapot applies to a store without loading or compiling the rest
/// (`crate::manifests::read_slice_files`, the kube source's
/// `take_slice_changes`).
#[derive(Debug)]
pub struct SliceChange {
    pub id: NsName,
    pub slice: Option<Stored<CompactSlice>>,
}

/// A ListenerSet as the store keeps it: the object, and its listeners in
/// the Gateway's listener type (the two share the schema), converted once
/// when read (`gateway::listener_set`), so the compile puts them
/// in one listener table with their Gateway's and the attach walk reads
/// one type.
#[derive(Clone, Debug)]
pub struct StoredListenerSet {
    pub set: teapot_gateway_api::ListenerSet,
    pub listeners: Vec<teapot_gateway_api::generated::gateways::GatewayListeners>,
}

/// The kinds the proxy reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Ingress,
    IngressClass,
    Service,
    EndpointSlice,
    Secret,
    Tenant,
    GatewayClass,
    Gateway,
    /// Listeners added to a Gateway (kept with them in the Gateway's
    /// listener type, [`StoredListenerSet`]).
    ListenerSet,
    HttpRoute,
    GrpcRoute,
    ReferenceGrant,
    TlsRoute,
    TcpRoute,
    UdpRoute,
    BackendTlsPolicy,
    /// Read for the `ca.crt` a BackendTLSPolicy names; only that key is
    /// kept ([`crate::validate`]).
    ConfigMap,
    /// teapot's own policy for HTTPRoute and GRPCRoute rules
    /// (`teapot.dev/v1alpha1`, teapot_api::route_policy).
    RouteTrafficPolicy,
    /// Read for their labels: Gateway listeners admit routes by namespace
    /// selector.
    Namespace,
}

/// The Gateway API versions read: the generated types are v1's, and the
/// older versions the CRDs still serve have the same schema for what
/// teapot reads (the API server converts between them losslessly).
fn gateway_kind(version: &str, kind: &str) -> Option<Kind> {
    let stable = matches!(version, "v1" | "v1beta1");
    let experimental = matches!(version, "v1" | "v1alpha2" | "v1alpha3");
    match kind {
        "GatewayClass" if stable => Some(Kind::GatewayClass),
        "Gateway" if stable => Some(Kind::Gateway),
        // Standard since v1.5, served as v1 only.
        "ListenerSet" if version == "v1" => Some(Kind::ListenerSet),
        "HTTPRoute" if stable => Some(Kind::HttpRoute),
        "GRPCRoute" if stable || experimental => Some(Kind::GrpcRoute),
        "ReferenceGrant" if stable || experimental => Some(Kind::ReferenceGrant),
        "TLSRoute" if experimental => Some(Kind::TlsRoute),
        "TCPRoute" if experimental => Some(Kind::TcpRoute),
        "UDPRoute" if experimental => Some(Kind::UdpRoute),
        // v1alpha3 is no longer served by the standard channel's CRD;
        // its schema is v1's.
        "BackendTLSPolicy" if matches!(version, "v1" | "v1alpha3") => Some(Kind::BackendTlsPolicy),
        _ => None,
    }
}

impl Kind {
    /// Maps `apiVersion` and `kind` to a supported kind.
    pub fn from_type(api_version: &str, kind: &str) -> Option<Kind> {
        match (api_version, kind) {
            ("networking.k8s.io/v1", "Ingress") => Some(Kind::Ingress),
            ("networking.k8s.io/v1", "IngressClass") => Some(Kind::IngressClass),
            ("v1", "Service") => Some(Kind::Service),
            ("v1", "Secret") => Some(Kind::Secret),
            ("v1", "ConfigMap") => Some(Kind::ConfigMap),
            ("discovery.k8s.io/v1", "EndpointSlice") => Some(Kind::EndpointSlice),
            ("teapot.dev/v1alpha1", "Tenant") => Some(Kind::Tenant),
            ("teapot.dev/v1alpha1", "RouteTrafficPolicy") => Some(Kind::RouteTrafficPolicy),
            ("v1", "Namespace") => Some(Kind::Namespace),
            (api_version, kind) => {
                let version = api_version.strip_prefix("gateway.networking.k8s.io/")?;
                gateway_kind(version, kind)
            }
        }
    }

    pub fn is_namespaced(self) -> bool {
        !matches!(
            self,
            Kind::IngressClass | Kind::Tenant | Kind::GatewayClass | Kind::Namespace
        )
    }

    /// Whether the kind is one of the Gateway API's.
    pub fn is_gateway_api(self) -> bool {
        matches!(
            self,
            Kind::GatewayClass
                | Kind::Gateway
                | Kind::ListenerSet
                | Kind::HttpRoute
                | Kind::GrpcRoute
                | Kind::ReferenceGrant
                | Kind::TlsRoute
                | Kind::TcpRoute
                | Kind::UdpRoute
                | Kind::BackendTlsPolicy
        )
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Identity of any stored object.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey {
    pub kind: Kind,
    /// Empty for cluster-scoped kinds.
    pub namespace: String,
    pub name: String,
}

impl fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind, self.name)
        } else {
            write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
        }
    }
}

/// Hash maps of the compile path. Object names come from configuration, and
/// foldhash is seeded per map, so its speed costs no predictability an
/// attacker could use; SipHash was a tenth of a compile.
pub type FastHashMap<K, V> = hashbrown::HashMap<K, V, foldhash::fast::RandomState>;

/// Namespaced objects of one kind that compile looks up by name.
pub type ObjectMap<T> = FastHashMap<NsName, Stored<T>>;

/// Every object the proxy serves from.
#[derive(Clone, Debug, Default)]
pub struct Store {
    pub ingresses: BTreeMap<NsName, Stored<Ingress>>,
    pub ingress_classes: BTreeMap<String, Stored<IngressClass>>,
    /// In the compact form ([`crate::service`]), made on insert: a
    /// Service as written becomes one when it enters the store.
    pub services: ObjectMap<CompactService>,
    /// In the compact form ([`crate::endpoints`]): the bulk of a large
    /// store. Ordered, so one namespace's slices are a range: an endpoint
    /// change resolves its Services from that range
    /// ([`Store::namespace_slices`]), not from a scan of every slice.
    pub endpoint_slices: BTreeMap<NsName, Stored<CompactSlice>>,
    pub secrets: ObjectMap<TlsSecret>,
    /// CA Secrets (`Opaque`, what `proxy-ssl-secret` names to verify a
    /// backend without a client certificate) with their `ca.crt` only:
    /// every other key, and the annotations that could repeat them, are
    /// dropped when read ([`crate::validate`]). Same kind as
    /// [`Store::secrets`]; a name is in one map or the other. The users
    /// of basic authentication (`auth-secret`, Opaque with `auth`) are
    /// kept here too, with `auth` alone.
    pub ca_secrets: ObjectMap<k8s_openapi::api::core::v1::Secret>,
    /// Tenants by object name.
    pub tenants: BTreeMap<String, Stored<Tenant>>,
    /// Gateway API (docs/gateway-api.md): ordered maps, as the compile
    /// walks them whole and its status report is read in order.
    pub gateway_classes: BTreeMap<String, Stored<GatewayClass>>,
    pub gateways: BTreeMap<NsName, Stored<Gateway>>,
    pub listener_sets: BTreeMap<NsName, Stored<StoredListenerSet>>,
    pub http_routes: BTreeMap<NsName, Stored<HttpRoute>>,
    pub grpc_routes: BTreeMap<NsName, Stored<GrpcRoute>>,
    pub reference_grants: BTreeMap<NsName, Stored<ReferenceGrant>>,
    pub tls_routes: BTreeMap<NsName, Stored<TlsRoute>>,
    pub tcp_routes: BTreeMap<NsName, Stored<TcpRoute>>,
    pub udp_routes: BTreeMap<NsName, Stored<UdpRoute>>,
    pub backend_tls_policies: BTreeMap<NsName, Stored<BackendTlsPolicy>>,
    /// ConfigMaps with their `ca.crt` only (the trust anchors of
    /// BackendTLSPolicies; every other key is dropped when read).
    pub config_maps: ObjectMap<ConfigMap>,
    pub route_traffic_policies: BTreeMap<NsName, Stored<RouteTrafficPolicy>>,
    /// Why each RouteTrafficPolicy that stands refused was refused when
    /// read (`field: why`); the stored policy keeps its metadata and
    /// `targetRefs` alone. Fail closed: an operator's policy the reader
    /// refuses still reaches its routes, which answer 503, rather than
    /// leave them without what it would restrict
    /// ([`crate::validate::Parsed::Refused`]).
    pub refused_route_traffic_policies: BTreeMap<NsName, Arc<str>>,
    /// Namespaces by name, for their labels.
    pub namespaces: BTreeMap<String, Stored<Namespace>>,
}

/// One parsed object of any supported kind.
#[derive(Debug)]
pub enum Object {
    Ingress(Ingress),
    IngressClass(IngressClass),
    Service(Service),
    EndpointSlice(CompactSlice),
    Secret(TlsSecret),
    /// A CA Secret, as [`Store::ca_secrets`] keeps it.
    CaSecret(k8s_openapi::api::core::v1::Secret),
    Tenant(Tenant),
    GatewayClass(GatewayClass),
    Gateway(Box<Gateway>),
    ListenerSet(Box<StoredListenerSet>),
    HttpRoute(Box<HttpRoute>),
    GrpcRoute(Box<GrpcRoute>),
    ReferenceGrant(ReferenceGrant),
    TlsRoute(TlsRoute),
    TcpRoute(TcpRoute),
    UdpRoute(UdpRoute),
    BackendTlsPolicy(Box<BackendTlsPolicy>),
    ConfigMap(ConfigMap),
    RouteTrafficPolicy(Box<RouteTrafficPolicy>),
    /// A RouteTrafficPolicy whose spec was refused, standing in its place
    /// ([`Store::refused_route_traffic_policies`]): why (`field: why`),
    /// and the policy with its metadata and `targetRefs` alone.
    RefusedRouteTrafficPolicy(Box<RouteTrafficPolicy>, Arc<str>),
    Namespace(Namespace),
}

impl Store {
    /// The EndpointSlices of `namespace`.
    pub fn namespace_slices<'s>(
        &'s self,
        namespace: &str,
    ) -> impl Iterator<Item = (&'s NsName, &'s Stored<CompactSlice>)> + 's {
        let from = NsName::new(namespace, "");
        let namespace = namespace.to_string();
        self.endpoint_slices
            .range(from..)
            .take_while(move |(id, _)| id.namespace == namespace)
    }

    /// Puts EndpointSlice changes in place.
    pub fn apply_slices(&mut self, changes: Vec<SliceChange>) {
        for change in changes {
            match change.slice {
                Some(slice) => self.endpoint_slices.insert(change.id, slice),
                None => self.endpoint_slices.remove(&change.id),
            };
        }
    }

    /// Number of objects of every kind.
    pub fn len(&self) -> usize {
        self.ingresses.len()
            + self.ingress_classes.len()
            + self.services.len()
            + self.endpoint_slices.len()
            + self.secrets.len()
            + self.ca_secrets.len()
            + self.tenants.len()
            + self.gateway_classes.len()
            + self.gateways.len()
            + self.listener_sets.len()
            + self.http_routes.len()
            + self.grpc_routes.len()
            + self.reference_grants.len()
            + self.tls_routes.len()
            + self.tcp_routes.len()
            + self.udp_routes.len()
            + self.backend_tls_policies.len()
            + self.config_maps.len()
            + self.route_traffic_policies.len()
            + self.namespaces.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether an object with this key is stored.
    pub fn contains(&self, key: &ObjectKey) -> bool {
        let ns = || NsName::new(key.namespace.clone(), key.name.clone());
        match key.kind {
            Kind::Ingress => self.ingresses.contains_key(&ns()),
            Kind::IngressClass => self.ingress_classes.contains_key(&key.name),
            Kind::Service => self.services.contains_key(&ns()),
            Kind::EndpointSlice => self.endpoint_slices.contains_key(&ns()),
            Kind::Secret => self.secrets.contains_key(&ns()) || self.ca_secrets.contains_key(&ns()),
            Kind::Tenant => self.tenants.contains_key(&key.name),
            Kind::GatewayClass => self.gateway_classes.contains_key(&key.name),
            Kind::Gateway => self.gateways.contains_key(&ns()),
            Kind::ListenerSet => self.listener_sets.contains_key(&ns()),
            Kind::HttpRoute => self.http_routes.contains_key(&ns()),
            Kind::GrpcRoute => self.grpc_routes.contains_key(&ns()),
            Kind::ReferenceGrant => self.reference_grants.contains_key(&ns()),
            Kind::TlsRoute => self.tls_routes.contains_key(&ns()),
            Kind::TcpRoute => self.tcp_routes.contains_key(&ns()),
            Kind::UdpRoute => self.udp_routes.contains_key(&ns()),
            Kind::BackendTlsPolicy => self.backend_tls_policies.contains_key(&ns()),
            Kind::ConfigMap => self.config_maps.contains_key(&ns()),
            Kind::RouteTrafficPolicy => self.route_traffic_policies.contains_key(&ns()),
            Kind::Namespace => self.namespaces.contains_key(&key.name),
        }
    }

    /// Inserts an object; the caller has checked that the key is free.
    pub fn insert(&mut self, key: ObjectKey, object: Object, origin: Origin) {
        let ns = NsName::new(key.namespace, key.name.clone());
        match object {
            Object::Ingress(o) => {
                self.ingresses.insert(ns, stored(o, origin));
            }
            Object::IngressClass(o) => {
                self.ingress_classes.insert(key.name, stored(o, origin));
            }
            Object::Service(o) => {
                self.services
                    .insert(ns, stored(CompactService::new(o), origin));
            }
            Object::EndpointSlice(o) => {
                self.endpoint_slices.insert(ns, stored(o, origin));
            }
            Object::Secret(o) => {
                // A Secret's type is immutable in the API, but a manifests
                // file may change it: the name lives in one map only.
                self.ca_secrets.remove(&ns);
                self.secrets.insert(ns, stored(o, origin));
            }
            Object::CaSecret(o) => {
                self.secrets.remove(&ns);
                self.ca_secrets.insert(ns, stored(o, origin));
            }
            Object::Tenant(o) => {
                self.tenants.insert(key.name, stored(o, origin));
            }
            Object::GatewayClass(o) => {
                self.gateway_classes.insert(key.name, stored(o, origin));
            }
            Object::Gateway(o) => {
                self.gateways.insert(ns, stored(*o, origin));
            }
            Object::ListenerSet(o) => {
                self.listener_sets.insert(ns, stored(*o, origin));
            }
            Object::HttpRoute(o) => {
                self.http_routes.insert(ns, stored(*o, origin));
            }
            Object::GrpcRoute(o) => {
                self.grpc_routes.insert(ns, stored(*o, origin));
            }
            Object::ReferenceGrant(o) => {
                self.reference_grants.insert(ns, stored(o, origin));
            }
            Object::TlsRoute(o) => {
                self.tls_routes.insert(ns, stored(o, origin));
            }
            Object::TcpRoute(o) => {
                self.tcp_routes.insert(ns, stored(o, origin));
            }
            Object::UdpRoute(o) => {
                self.udp_routes.insert(ns, stored(o, origin));
            }
            Object::BackendTlsPolicy(o) => {
                self.backend_tls_policies.insert(ns, stored(*o, origin));
            }
            Object::ConfigMap(o) => {
                self.config_maps.insert(ns, stored(o, origin));
            }
            Object::RouteTrafficPolicy(o) => {
                self.refused_route_traffic_policies.remove(&ns);
                self.route_traffic_policies.insert(ns, stored(*o, origin));
            }
            Object::RefusedRouteTrafficPolicy(o, why) => {
                self.refused_route_traffic_policies.insert(ns.clone(), why);
                self.route_traffic_policies.insert(ns, stored(*o, origin));
            }
            Object::Namespace(o) => {
                self.namespaces.insert(key.name, stored(o, origin));
            }
        }
    }

    /// Removes the object with `key`, if any.
    pub fn remove(&mut self, key: &ObjectKey) {
        let ns = NsName::new(key.namespace.clone(), key.name.clone());
        match key.kind {
            Kind::Ingress => drop(self.ingresses.remove(&ns)),
            Kind::IngressClass => drop(self.ingress_classes.remove(&key.name)),
            Kind::Service => drop(self.services.remove(&ns)),
            Kind::EndpointSlice => drop(self.endpoint_slices.remove(&ns)),
            Kind::Secret => {
                self.secrets.remove(&ns);
                self.ca_secrets.remove(&ns);
            }
            Kind::Tenant => drop(self.tenants.remove(&key.name)),
            Kind::GatewayClass => drop(self.gateway_classes.remove(&key.name)),
            Kind::Gateway => drop(self.gateways.remove(&ns)),
            Kind::ListenerSet => drop(self.listener_sets.remove(&ns)),
            Kind::HttpRoute => drop(self.http_routes.remove(&ns)),
            Kind::GrpcRoute => drop(self.grpc_routes.remove(&ns)),
            Kind::ReferenceGrant => drop(self.reference_grants.remove(&ns)),
            Kind::TlsRoute => drop(self.tls_routes.remove(&ns)),
            Kind::TcpRoute => drop(self.tcp_routes.remove(&ns)),
            Kind::UdpRoute => drop(self.udp_routes.remove(&ns)),
            Kind::BackendTlsPolicy => drop(self.backend_tls_policies.remove(&ns)),
            Kind::ConfigMap => drop(self.config_maps.remove(&ns)),
            Kind::RouteTrafficPolicy => {
                self.route_traffic_policies.remove(&ns);
                self.refused_route_traffic_policies.remove(&ns);
            }
            Kind::Namespace => drop(self.namespaces.remove(&key.name)),
        }
    }

    /// Copies the stored object with `key` from `from` into `self`, keeping
    /// its original origin. Returns whether there was one.
    pub fn retain_from(&mut self, from: &Store, key: &ObjectKey) -> bool {
        let ns = NsName::new(key.namespace.clone(), key.name.clone());
        match key.kind {
            Kind::Ingress => copy(&from.ingresses, &mut self.ingresses, &ns),
            Kind::IngressClass => copy(&from.ingress_classes, &mut self.ingress_classes, &key.name),
            Kind::Service => copy(&from.services, &mut self.services, &ns),
            Kind::EndpointSlice => copy(&from.endpoint_slices, &mut self.endpoint_slices, &ns),
            Kind::Secret => {
                copy(&from.secrets, &mut self.secrets, &ns)
                    | copy(&from.ca_secrets, &mut self.ca_secrets, &ns)
            }
            Kind::Tenant => copy(&from.tenants, &mut self.tenants, &key.name),
            Kind::GatewayClass => copy(&from.gateway_classes, &mut self.gateway_classes, &key.name),
            Kind::Gateway => copy(&from.gateways, &mut self.gateways, &ns),
            Kind::ListenerSet => copy(&from.listener_sets, &mut self.listener_sets, &ns),
            Kind::HttpRoute => copy(&from.http_routes, &mut self.http_routes, &ns),
            Kind::GrpcRoute => copy(&from.grpc_routes, &mut self.grpc_routes, &ns),
            Kind::ReferenceGrant => copy(&from.reference_grants, &mut self.reference_grants, &ns),
            Kind::TlsRoute => copy(&from.tls_routes, &mut self.tls_routes, &ns),
            Kind::TcpRoute => copy(&from.tcp_routes, &mut self.tcp_routes, &ns),
            Kind::UdpRoute => copy(&from.udp_routes, &mut self.udp_routes, &ns),
            Kind::BackendTlsPolicy => copy(
                &from.backend_tls_policies,
                &mut self.backend_tls_policies,
                &ns,
            ),
            Kind::ConfigMap => copy(&from.config_maps, &mut self.config_maps, &ns),
            Kind::RouteTrafficPolicy => {
                let copied = copy(
                    &from.route_traffic_policies,
                    &mut self.route_traffic_policies,
                    &ns,
                );
                // A refused version is retained refused.
                match from.refused_route_traffic_policies.get(&ns) {
                    Some(why) if copied => {
                        self.refused_route_traffic_policies
                            .insert(ns.clone(), why.clone());
                    }
                    _ if copied => drop(self.refused_route_traffic_policies.remove(&ns)),
                    _ => {}
                }
                copied
            }
            Kind::Namespace => copy(&from.namespaces, &mut self.namespaces, &key.name),
        }
    }

    /// Whether the object with `key` is stored and served as written (not
    /// a refusal standing in its place).
    pub fn serves(&self, key: &ObjectKey) -> bool {
        self.contains(key)
            && !(key.kind == Kind::RouteTrafficPolicy
                && self
                    .refused_route_traffic_policies
                    .contains_key(&NsName::new(key.namespace.clone(), key.name.clone())))
    }

    /// Calls `f` with the key and origin of every stored object.
    pub fn for_each_key<'s>(&'s self, mut f: impl FnMut(ObjectKey, &'s Origin)) {
        let ns = |kind, id: &NsName| ObjectKey {
            kind,
            namespace: id.namespace.clone(),
            name: id.name.clone(),
        };
        let cluster = |kind, name: &String| ObjectKey {
            kind,
            namespace: String::new(),
            name: name.clone(),
        };
        for (k, v) in &self.ingresses {
            f(ns(Kind::Ingress, k), &v.origin);
        }
        for (k, v) in &self.services {
            f(ns(Kind::Service, k), &v.origin);
        }
        for (k, v) in &self.endpoint_slices {
            f(ns(Kind::EndpointSlice, k), &v.origin);
        }
        for (k, v) in &self.secrets {
            f(ns(Kind::Secret, k), &v.origin);
        }
        for (k, v) in &self.ca_secrets {
            f(ns(Kind::Secret, k), &v.origin);
        }
        for (k, v) in &self.config_maps {
            f(ns(Kind::ConfigMap, k), &v.origin);
        }
        for (k, v) in &self.ingress_classes {
            f(cluster(Kind::IngressClass, k), &v.origin);
        }
        for (k, v) in &self.tenants {
            f(cluster(Kind::Tenant, k), &v.origin);
        }
        for (k, v) in &self.gateway_classes {
            f(cluster(Kind::GatewayClass, k), &v.origin);
        }
        for (k, v) in &self.namespaces {
            f(cluster(Kind::Namespace, k), &v.origin);
        }
        self.for_each_gateway_api_key(|kind, id, origin| f(ns(kind, id), origin));
    }

    /// Calls `f` with the kind, name and origin of every namespaced
    /// Gateway API object.
    fn for_each_gateway_api_key<'s>(&'s self, mut f: impl FnMut(Kind, &'s NsName, &'s Origin)) {
        fn each<'s, T>(
            map: &'s BTreeMap<NsName, Stored<T>>,
            kind: Kind,
            f: &mut impl FnMut(Kind, &'s NsName, &'s Origin),
        ) {
            for (k, v) in map {
                f(kind, k, &v.origin);
            }
        }
        each(&self.gateways, Kind::Gateway, &mut f);
        each(&self.listener_sets, Kind::ListenerSet, &mut f);
        each(&self.http_routes, Kind::HttpRoute, &mut f);
        each(&self.grpc_routes, Kind::GrpcRoute, &mut f);
        each(&self.reference_grants, Kind::ReferenceGrant, &mut f);
        each(&self.tls_routes, Kind::TlsRoute, &mut f);
        each(&self.tcp_routes, Kind::TcpRoute, &mut f);
        each(&self.udp_routes, Kind::UdpRoute, &mut f);
        each(&self.backend_tls_policies, Kind::BackendTlsPolicy, &mut f);
        each(
            &self.route_traffic_policies,
            Kind::RouteTrafficPolicy,
            &mut f,
        );
    }

    /// The origin of the stored object with `key`.
    pub fn origin(&self, key: &ObjectKey) -> Option<&Origin> {
        let ns = NsRef {
            namespace: &key.namespace,
            name: &key.name,
        };
        match key.kind {
            Kind::Ingress => self
                .ingresses
                .get(&NsName::new(key.namespace.clone(), key.name.clone()))
                .map(|s| &s.origin),
            Kind::IngressClass => self.ingress_classes.get(&key.name).map(|s| &s.origin),
            Kind::Service => self.services.get(&ns).map(|s| &s.origin),
            Kind::EndpointSlice => self
                .endpoint_slices
                .get(&NsName::new(key.namespace.clone(), key.name.clone()))
                .map(|s| &s.origin),
            Kind::Secret => self
                .secrets
                .get(&ns)
                .map(|s| &s.origin)
                .or_else(|| self.ca_secrets.get(&ns).map(|s| &s.origin)),
            Kind::ConfigMap => self.config_maps.get(&ns).map(|s| &s.origin),
            Kind::Tenant => self.tenants.get(&key.name).map(|s| &s.origin),
            Kind::GatewayClass => self.gateway_classes.get(&key.name).map(|s| &s.origin),
            Kind::Namespace => self.namespaces.get(&key.name).map(|s| &s.origin),
            Kind::Gateway
            | Kind::ListenerSet
            | Kind::HttpRoute
            | Kind::GrpcRoute
            | Kind::ReferenceGrant
            | Kind::TlsRoute
            | Kind::TcpRoute
            | Kind::UdpRoute
            | Kind::BackendTlsPolicy
            | Kind::RouteTrafficPolicy => self.gateway_api_origin(key),
        }
    }

    fn gateway_api_origin(&self, key: &ObjectKey) -> Option<&Origin> {
        let id = NsName::new(key.namespace.clone(), key.name.clone());
        fn get<'s, T>(map: &'s BTreeMap<NsName, Stored<T>>, id: &NsName) -> Option<&'s Origin> {
            map.get(id).map(|s| &s.origin)
        }
        match key.kind {
            Kind::Gateway => get(&self.gateways, &id),
            Kind::ListenerSet => get(&self.listener_sets, &id),
            Kind::HttpRoute => get(&self.http_routes, &id),
            Kind::GrpcRoute => get(&self.grpc_routes, &id),
            Kind::ReferenceGrant => get(&self.reference_grants, &id),
            Kind::TlsRoute => get(&self.tls_routes, &id),
            Kind::TcpRoute => get(&self.tcp_routes, &id),
            Kind::UdpRoute => get(&self.udp_routes, &id),
            Kind::BackendTlsPolicy => get(&self.backend_tls_policies, &id),
            Kind::RouteTrafficPolicy => get(&self.route_traffic_policies, &id),
            _ => None,
        }
    }

    /// Keys of every object read from `origin` or a later document of the
    /// same file: what a YAML syntax error at `origin` hides from view.
    pub fn keys_from(&self, origin: &Origin) -> Vec<ObjectKey> {
        let hit = |o: &Origin| o.file == origin.file && o.document >= origin.document;
        let mut keys = Vec::new();
        let mut push = |kind, ns: &NsName| {
            keys.push(ObjectKey {
                kind,
                namespace: ns.namespace.clone(),
                name: ns.name.clone(),
            })
        };
        for (k, v) in &self.ingresses {
            if hit(&v.origin) {
                push(Kind::Ingress, k);
            }
        }
        for (k, v) in &self.services {
            if hit(&v.origin) {
                push(Kind::Service, k);
            }
        }
        for (k, v) in &self.endpoint_slices {
            if hit(&v.origin) {
                push(Kind::EndpointSlice, k);
            }
        }
        for (k, v) in &self.secrets {
            if hit(&v.origin) {
                push(Kind::Secret, k);
            }
        }
        for (k, v) in &self.ca_secrets {
            if hit(&v.origin) {
                push(Kind::Secret, k);
            }
        }
        for (k, v) in &self.config_maps {
            if hit(&v.origin) {
                push(Kind::ConfigMap, k);
            }
        }
        self.for_each_gateway_api_key(|kind, id, origin| {
            if hit(origin) {
                push(kind, id);
            }
        });
        for (kind, names) in [
            (
                Kind::IngressClass,
                cluster_scoped(&self.ingress_classes, &hit),
            ),
            (Kind::Tenant, cluster_scoped(&self.tenants, &hit)),
            (
                Kind::GatewayClass,
                cluster_scoped(&self.gateway_classes, &hit),
            ),
            (Kind::Namespace, cluster_scoped(&self.namespaces, &hit)),
        ] {
            keys.extend(names.into_iter().map(|name| ObjectKey {
                kind,
                namespace: String::new(),
                name,
            }));
        }
        keys
    }
}

/// The order in which Ingresses claim hosts and paths: oldest first by
/// `creationTimestamp`; objects without one (hand-written manifests) after
/// those with one; then by namespace/name, so the order is stable. The
/// time is copied (16 bytes): a key that points into its object makes
/// every comparison of a sort read two objects.
pub fn age_key<'a>(
    ingress: &Stored<Ingress>,
    id: &'a NsName,
) -> (bool, Option<k8s_openapi::jiff::Timestamp>, &'a NsName) {
    let created = ingress
        .object
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0);
    (created.is_none(), created, id)
}

/// The Ingresses of `ingresses` (the store's map) oldest first, as
/// [`age_key`] orders them. Each creation time is read once
/// (`sort_by_cached_key`), so the sort compares keys in one array:
/// comparing by [`age_key`] reads two Ingresses, scattered over the heap,
/// per comparison, about 1.7 million of them at 100k Ingresses on every
/// compile. The sort is stable, and the map's order is the id's, as
/// [`age_key`]'s last field has it.
pub fn ingresses_oldest_first(
    ingresses: &BTreeMap<NsName, Stored<Ingress>>,
) -> Vec<(&NsName, &Stored<Ingress>)> {
    let mut entries: Vec<(&NsName, &Stored<Ingress>)> = ingresses.iter().collect();
    entries.sort_by_cached_key(|(id, stored)| {
        let (missing, created, _) = age_key(stored, id);
        (missing, created)
    });
    entries
}

fn cluster_scoped<T>(
    map: &BTreeMap<String, Stored<T>>,
    hit: &impl Fn(&Origin) -> bool,
) -> Vec<String> {
    map.iter()
        .filter(|(_, v)| hit(&v.origin))
        .map(|(k, _)| k.clone())
        .collect()
}

fn stored<T>(object: T, origin: Origin) -> Stored<T> {
    Stored {
        object: Arc::new(object),
        origin,
    }
}

fn copy<K, V, M>(from: &M, to: &mut M, key: &K) -> bool
where
    M: MapLike<K, V>,
{
    match from.get_entry(key) {
        Some(v) => {
            to.put(key, v);
            true
        }
        None => false,
    }
}

/// BTreeMap and HashMap, so retention is written once.
trait MapLike<K, V> {
    fn get_entry(&self, key: &K) -> Option<V>;
    fn put(&mut self, key: &K, value: V);
}

impl<K: Ord + Clone, T> MapLike<K, Stored<T>> for BTreeMap<K, Stored<T>> {
    fn get_entry(&self, key: &K) -> Option<Stored<T>> {
        self.get(key).cloned()
    }
    fn put(&mut self, key: &K, value: Stored<T>) {
        self.insert(key.clone(), value);
    }
}

impl<K: std::hash::Hash + Eq + Clone, T, S: std::hash::BuildHasher> MapLike<K, Stored<T>>
    for hashbrown::HashMap<K, Stored<T>, S>
{
    fn get_entry(&self, key: &K) -> Option<Stored<T>> {
        self.get(key).cloned()
    }
    fn put(&mut self, key: &K, value: Stored<T>) {
        self.insert(key.clone(), value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The sort on copied keys gives what sorting by `age_key` gives, with
    /// times shared, missing, and in and against the ids' order.
    #[test]
    fn ingresses_oldest_first_is_the_age_key_order() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move |n: u64| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed % n
        };
        for round in 0..50 {
            let mut ingresses = BTreeMap::new();
            for _ in 0..(1 + next(300)) {
                let id = NsName::new(format!("ns{}", next(20)), format!("i{}", next(50)));
                let mut ingress = Ingress::default();
                // A few distinct times, so that many tie; a fifth without.
                if next(5) != 0 {
                    let at = k8s_openapi::jiff::Timestamp::from_second(next(8) as i64).unwrap();
                    ingress.metadata.creation_timestamp = Some(Time(at));
                }
                let origin = Origin {
                    file: Arc::from(Path::new("x.yaml")),
                    document: 0,
                };
                ingresses.insert(id, stored(ingress, origin));
            }
            let mut by_age_key: Vec<(&NsName, &Stored<Ingress>)> = ingresses.iter().collect();
            by_age_key.sort_by(|a, b| age_key(a.1, a.0).cmp(&age_key(b.1, b.0)));
            let want: Vec<&NsName> = by_age_key.iter().map(|(id, _)| *id).collect();
            let got: Vec<&NsName> = ingresses_oldest_first(&ingresses)
                .iter()
                .map(|(id, _)| *id)
                .collect();
            assert_eq!(got, want, "round {round}");
        }
    }

    #[test]
    fn a_borrowed_name_finds_the_owned_key() {
        let mut map: FastHashMap<NsName, u32> = FastHashMap::default();
        for i in 0..100 {
            map.insert(NsName::new(format!("ns{i}"), format!("svc{i}")), i);
        }
        for i in 0..100 {
            let (namespace, name) = (format!("ns{i}"), format!("svc{i}"));
            let key = NsRef {
                namespace: &namespace,
                name: &name,
            };
            assert_eq!(map.get(&key), Some(&i));
        }
        // The split between namespace and name matters.
        let key = NsRef {
            namespace: "ns1s",
            name: "vc1",
        };
        assert_eq!(map.get(&key), None);
    }
}
