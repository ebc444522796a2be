//! The admission rules: what a tenant may write into its LB-cluster
//! namespace (docs/architecture.md, "Security rules that shape the code").
//!
//! Pure functions over typed Kubernetes objects, shared by the webhook
//! (which admits or refuses) and the proxy (which re-checks what it routes,
//! defence in depth). No I/O and no crypto: the webhook adds the
//! certificate/key check on what [`tls_secret_data`] returns.
//!
//! Every rule is an allowlist, and every check reports **all** its
//! violations, each with the field it is about, so a refused tenant can fix
//! everything in one go. A tenant string never reaches a message unescaped:
//! it is quoted with [`quote`] (Rust `Debug` escaping, truncated).
//!
//! Entry points:
//! - [`check_object`]: a whole object as JSON (size, control characters,
//!   unknown fields, typed parse, then the typed checks below).
//! - [`check_ingress`], [`check_service`], [`check_endpoint_slice`],
//!   [`check_secret`]: the typed checks; [`check_gateway`],
//!   [`check_listener_set`], [`check_route`] and [`check_reference_grant`]
//!   for the Gateway API kinds.
//! - [`tls_secret_data`] and [`check_ca_bundle`]: what a TLS Secret must
//!   hold and what its `ca.crt` may be, for the certificate checks of the
//!   webhook and the proxy.
//! - [`check_endpoint_address`]: one endpoint address (the proxy calls it
//!   for every endpoint it compiles in a tenant namespace).
//! - [`host_scope`] and [`Holdings`]: which hosts a tenant may use.
//! - [`check_tenant`]: a `Tenant` object, as an admin writes it.

mod addresses;
mod endpoint_slice;
mod gateway;
mod hosts;
mod ingress;
mod listener_set;
mod meta;
pub(crate) mod names;
mod regexes;
mod route_traffic;
mod secret;
mod service;
pub(crate) mod strings;
mod tenant;

use std::fmt;

use ipnet::IpNet;
use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::Ingress;
use serde_json::Value;
use teapot_gateway_api::{
    BackendTlsPolicy, Gateway, GrpcRoute, HttpRoute, ListenerSet, ReferenceGrant, TcpRoute,
    TlsRoute, UdpRoute,
};

use crate::kind::ObjectKind;
use crate::route_policy::RouteTrafficPolicy;
use crate::tenant::{EffectiveLimits, Tenant, TenantLimits};

pub use addresses::{check_endpoint_address, forbidden_address};
pub use endpoint_slice::check_endpoint_slice;
pub use gateway::{
    CA_CERT_KEY, GATEWAY_GROUP, HTTP_LISTENER_PORT, HTTPS_LISTENER_PORT, ROUTE_KINDS,
    WELL_KNOWN_SYSTEM, check_backend_tls_policy, check_config_map, check_gateway,
    check_gateway_host, check_reference_grant, check_route, gateway_api_hostnames,
    pending_gateway_hosts,
};
pub use hosts::{Holder, Holdings, HostScope, check_host, host_scope};
pub use ingress::{check_ingress, pending_custom_hosts};
pub use listener_set::{MAX_LISTENER_SETS, check_listener_set, listener_set_listeners};
pub use meta::{check_annotations, check_labels};
pub use names::{dns_label, dns_subdomain, dns1035_label, port_name};
pub use regexes::{object_regex_cost, object_regexes, regex_budget};
pub use route_traffic::{
    ROUTE_TRAFFIC_POLICY_TARGETS, check_route_traffic_policy, route_traffic_value_errors,
};
pub use secret::{
    CA_SECRET_KEY, MAX_CA_BUNDLE_BYTES, MAX_CA_CERTS, TLS_SECRET_KEYS, TlsSecretData,
    check_ca_bundle, check_secret, is_ca_secret, is_htpasswd_secret, secret_value, tls_secret_data,
};
pub use service::{MAX_SOURCE_RANGES, check_service, source_ranges};
pub use strings::{check_path, check_strings, is_forbidden_char, pem_field, quote, unknown_fields};
pub use tenant::check_tenant;

/// The field of violations about the object as a whole (size, counts).
pub const OBJECT_FIELD: &str = "(object)";

/// Longest rule path.
pub const MAX_PATH_LEN: usize = 1024;
/// Most ports on one Service or EndpointSlice (the API server's own bound
/// for EndpointSlices).
pub const MAX_PORTS: usize = 100;
/// Most addresses on one endpoint.
pub const MAX_ADDRESSES_PER_ENDPOINT: usize = 100;
/// L4 listeners (ports of `LoadBalancer` Services) when the Tenant sets no
/// `spec.l4.maxListeners`.
pub const DEFAULT_MAX_LISTENERS: u32 = 50;
/// EndpointSlices a tenant may hold per Service it may hold.
pub const SLICES_PER_SERVICE: u32 = 10;
/// Label the agent puts on every EndpointSlice it writes.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// The only value of [`MANAGED_BY_LABEL`] a tenant slice may carry.
pub const MANAGED_BY_SYNC: &str = "sync.teapot.dev";

/// One broken rule: the field it is about and what is wrong, in words a
/// tenant can act on.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Violation {
    /// Field path such as `spec.rules[0].host`, or [`OBJECT_FIELD`].
    pub field: String,
    pub message: String,
}

impl Violation {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Violation {
        Violation {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

/// A tenant's other objects in its namespace (not counting the one under
/// review), for the count limits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExistingObjects {
    /// Whether the object under review is new (a create). Count limits
    /// only stop new objects, so lowering a limit never blocks updates.
    pub is_new: bool,
    pub ingresses: u32,
    pub services: u32,
    pub endpoint_slices: u32,
    pub secrets: u32,
    /// The tenant's other Gateway API objects (Gateways, routes and
    /// ReferenceGrants), counted against `maxIngresses`.
    pub gateway_api: u32,
    /// The tenant's other ListenerSets (also counted in `gateway_api`).
    pub listener_sets: u32,
    /// Ports of the tenant's other `LoadBalancer` Services and TLS, TCP and
    /// UDP listeners of its other Gateways.
    pub lb_listeners: u32,
    /// Bytes of the JSON form of the tenant's other objects.
    pub bytes: u64,
    /// Bytes of the previous version of the object under review (0 for a
    /// create).
    pub own_bytes: u64,
    /// The regular expressions of the tenant's other routes.
    pub regex: crate::regex::RegexCost,
    /// Those of the previous version of the object under review.
    pub own_regex: crate::regex::RegexCost,
}

/// What a check needs to know besides the object.
#[derive(Clone, Debug)]
pub struct AdmissionContext<'a> {
    /// The tenant that owns the namespace.
    pub tenant: &'a Tenant,
    /// The operator's DOMAIN (lowercase, no trailing dot): hosts
    /// `INGRESS.CLUSTER.lb.DOMAIN`.
    pub domain: &'a str,
    /// The LB cluster's own ranges (node, pod and service CIDRs): never an
    /// endpoint.
    pub lb_networks: &'a [IpNet],
    /// Hosts, domains and node networks held by others.
    pub holdings: &'a Holdings,
    /// The tenant's `nodeCIDRs`, parsed.
    pub node_networks: Vec<IpNet>,
    /// The tenant's limits, defaults filled in.
    pub limits: EffectiveLimits,
    /// Counts for the limits; `None` skips the count checks (the proxy).
    pub existing: Option<ExistingObjects>,
}

impl<'a> AdmissionContext<'a> {
    pub fn new(
        tenant: &'a Tenant,
        domain: &'a str,
        lb_networks: &'a [IpNet],
        holdings: &'a Holdings,
    ) -> AdmissionContext<'a> {
        AdmissionContext {
            tenant,
            domain,
            lb_networks,
            holdings,
            node_networks: tenant.node_networks(),
            limits: TenantLimits::effective(tenant.spec.limits.as_ref()),
            existing: None,
        }
    }

    /// Turns the count limits on.
    pub fn with_existing(mut self, existing: ExistingObjects) -> AdmissionContext<'a> {
        self.existing = Some(existing);
        self
    }

    /// The tenant's CLUSTER.
    pub fn cluster(&self) -> &str {
        &self.tenant.spec.cluster
    }

    /// `CLUSTER.lb.DOMAIN`.
    pub fn zone(&self) -> String {
        crate::hostname::tenant_zone(self.cluster(), self.domain)
    }

    /// Most L4 listeners.
    pub fn max_listeners(&self) -> u32 {
        self.tenant
            .spec
            .l4
            .as_ref()
            .and_then(|l| l.max_listeners)
            .unwrap_or(DEFAULT_MAX_LISTENERS)
    }

    /// A count-limit violation when the object is new and `others + 1`
    /// exceeds `max`.
    fn over_limit(
        &self,
        others: impl Fn(&ExistingObjects) -> u32,
        max: u32,
        what: &str,
        limit_name: &str,
    ) -> Option<Violation> {
        let existing = self.existing?;
        let count = others(&existing);
        (existing.is_new && count >= max).then(|| {
            Violation::new(
                OBJECT_FIELD,
                format!(
                    "{what}: your tenant has {count}, its limit is {max} ({limit_name}); delete one or ask the operator to raise the limit"
                ),
            )
        })
    }
}

/// A tenant object after its typed parse.
#[derive(Clone, Debug)]
pub enum TenantObject {
    Ingress(Box<Ingress>),
    Service(Box<Service>),
    EndpointSlice(Box<EndpointSlice>),
    Secret(Box<Secret>),
    Gateway(Box<Gateway>),
    ListenerSet(Box<ListenerSet>),
    HttpRoute(Box<HttpRoute>),
    GrpcRoute(Box<GrpcRoute>),
    TlsRoute(Box<TlsRoute>),
    TcpRoute(Box<TcpRoute>),
    UdpRoute(Box<UdpRoute>),
    ReferenceGrant(Box<ReferenceGrant>),
    BackendTlsPolicy(Box<BackendTlsPolicy>),
    ConfigMap(Box<ConfigMap>),
    RouteTrafficPolicy(Box<RouteTrafficPolicy>),
}

impl TenantObject {
    pub fn kind(&self) -> ObjectKind {
        match self {
            TenantObject::Ingress(_) => ObjectKind::Ingress,
            TenantObject::Service(_) => ObjectKind::Service,
            TenantObject::EndpointSlice(_) => ObjectKind::EndpointSlice,
            TenantObject::Secret(_) => ObjectKind::Secret,
            TenantObject::Gateway(_) => ObjectKind::Gateway,
            TenantObject::ListenerSet(_) => ObjectKind::ListenerSet,
            TenantObject::HttpRoute(_) => ObjectKind::HttpRoute,
            TenantObject::GrpcRoute(_) => ObjectKind::GrpcRoute,
            TenantObject::TlsRoute(_) => ObjectKind::TlsRoute,
            TenantObject::TcpRoute(_) => ObjectKind::TcpRoute,
            TenantObject::UdpRoute(_) => ObjectKind::UdpRoute,
            TenantObject::ReferenceGrant(_) => ObjectKind::ReferenceGrant,
            TenantObject::BackendTlsPolicy(_) => ObjectKind::BackendTlsPolicy,
            TenantObject::ConfigMap(_) => ObjectKind::ConfigMap,
            TenantObject::RouteTrafficPolicy(_) => ObjectKind::RouteTrafficPolicy,
        }
    }
}

/// A tenant object borrowed, for the checks of an object that is typed
/// already.
#[derive(Clone, Copy, Debug)]
pub enum TenantObjectRef<'a> {
    Ingress(&'a Ingress),
    Service(&'a Service),
    EndpointSlice(&'a EndpointSlice),
    Secret(&'a Secret),
    Gateway(&'a Gateway),
    ListenerSet(&'a ListenerSet),
    HttpRoute(&'a HttpRoute),
    GrpcRoute(&'a GrpcRoute),
    TlsRoute(&'a TlsRoute),
    TcpRoute(&'a TcpRoute),
    UdpRoute(&'a UdpRoute),
    ReferenceGrant(&'a ReferenceGrant),
    BackendTlsPolicy(&'a BackendTlsPolicy),
    ConfigMap(&'a ConfigMap),
    RouteTrafficPolicy(&'a RouteTrafficPolicy),
}

impl serde::Serialize for TenantObjectRef<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            TenantObjectRef::Ingress(o) => o.serialize(s),
            TenantObjectRef::Service(o) => o.serialize(s),
            TenantObjectRef::EndpointSlice(o) => o.serialize(s),
            TenantObjectRef::Secret(o) => o.serialize(s),
            TenantObjectRef::Gateway(o) => o.serialize(s),
            TenantObjectRef::ListenerSet(o) => o.serialize(s),
            TenantObjectRef::HttpRoute(o) => o.serialize(s),
            TenantObjectRef::GrpcRoute(o) => o.serialize(s),
            TenantObjectRef::TlsRoute(o) => o.serialize(s),
            TenantObjectRef::TcpRoute(o) => o.serialize(s),
            TenantObjectRef::UdpRoute(o) => o.serialize(s),
            TenantObjectRef::ReferenceGrant(o) => o.serialize(s),
            TenantObjectRef::BackendTlsPolicy(o) => o.serialize(s),
            TenantObjectRef::ConfigMap(o) => o.serialize(s),
            TenantObjectRef::RouteTrafficPolicy(o) => o.serialize(s),
        }
    }
}

impl<'a> TenantObjectRef<'a> {
    pub fn creation_timestamp(
        &self,
    ) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Time> {
        self.metadata().creation_timestamp.as_ref()
    }

    pub fn metadata(&self) -> &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
        match *self {
            TenantObjectRef::Ingress(o) => &o.metadata,
            TenantObjectRef::Service(o) => &o.metadata,
            TenantObjectRef::EndpointSlice(o) => &o.metadata,
            TenantObjectRef::Secret(o) => &o.metadata,
            TenantObjectRef::Gateway(o) => &o.metadata,
            TenantObjectRef::ListenerSet(o) => &o.metadata,
            TenantObjectRef::HttpRoute(o) => &o.metadata,
            TenantObjectRef::GrpcRoute(o) => &o.metadata,
            TenantObjectRef::TlsRoute(o) => &o.metadata,
            TenantObjectRef::TcpRoute(o) => &o.metadata,
            TenantObjectRef::UdpRoute(o) => &o.metadata,
            TenantObjectRef::ReferenceGrant(o) => &o.metadata,
            TenantObjectRef::BackendTlsPolicy(o) => &o.metadata,
            TenantObjectRef::ConfigMap(o) => &o.metadata,
            TenantObjectRef::RouteTrafficPolicy(o) => &o.metadata,
        }
    }

    pub fn kind(&self) -> ObjectKind {
        match self {
            TenantObjectRef::Ingress(_) => ObjectKind::Ingress,
            TenantObjectRef::Service(_) => ObjectKind::Service,
            TenantObjectRef::EndpointSlice(_) => ObjectKind::EndpointSlice,
            TenantObjectRef::Secret(_) => ObjectKind::Secret,
            TenantObjectRef::Gateway(_) => ObjectKind::Gateway,
            TenantObjectRef::ListenerSet(_) => ObjectKind::ListenerSet,
            TenantObjectRef::HttpRoute(_) => ObjectKind::HttpRoute,
            TenantObjectRef::GrpcRoute(_) => ObjectKind::GrpcRoute,
            TenantObjectRef::TlsRoute(_) => ObjectKind::TlsRoute,
            TenantObjectRef::TcpRoute(_) => ObjectKind::TcpRoute,
            TenantObjectRef::UdpRoute(_) => ObjectKind::UdpRoute,
            TenantObjectRef::ReferenceGrant(_) => ObjectKind::ReferenceGrant,
            TenantObjectRef::BackendTlsPolicy(_) => ObjectKind::BackendTlsPolicy,
            TenantObjectRef::ConfigMap(_) => ObjectKind::ConfigMap,
            TenantObjectRef::RouteTrafficPolicy(_) => ObjectKind::RouteTrafficPolicy,
        }
    }
}

impl TenantObject {
    pub fn as_ref(&self) -> TenantObjectRef<'_> {
        match self {
            TenantObject::Ingress(o) => TenantObjectRef::Ingress(o),
            TenantObject::Service(o) => TenantObjectRef::Service(o),
            TenantObject::EndpointSlice(o) => TenantObjectRef::EndpointSlice(o),
            TenantObject::Secret(o) => TenantObjectRef::Secret(o),
            TenantObject::Gateway(o) => TenantObjectRef::Gateway(o),
            TenantObject::ListenerSet(o) => TenantObjectRef::ListenerSet(o),
            TenantObject::HttpRoute(o) => TenantObjectRef::HttpRoute(o),
            TenantObject::GrpcRoute(o) => TenantObjectRef::GrpcRoute(o),
            TenantObject::TlsRoute(o) => TenantObjectRef::TlsRoute(o),
            TenantObject::TcpRoute(o) => TenantObjectRef::TcpRoute(o),
            TenantObject::UdpRoute(o) => TenantObjectRef::UdpRoute(o),
            TenantObject::ReferenceGrant(o) => TenantObjectRef::ReferenceGrant(o),
            TenantObject::BackendTlsPolicy(o) => TenantObjectRef::BackendTlsPolicy(o),
            TenantObject::ConfigMap(o) => TenantObjectRef::ConfigMap(o),
            TenantObject::RouteTrafficPolicy(o) => TenantObjectRef::RouteTrafficPolicy(o),
        }
    }
}

/// What [`check_object`] found.
#[derive(Clone, Debug, Default)]
pub struct Checked {
    pub violations: Vec<Violation>,
    /// Things that are admitted but worth telling (a custom domain waits
    /// for its DNS proof).
    pub warnings: Vec<String>,
    /// The typed object, when it parsed.
    pub object: Option<TenantObject>,
}

/// The tenant kind for `apiVersion` and `kind`, or `None` for anything a
/// tenant may not write.
pub fn object_kind(api_version: &str, kind: &str) -> Option<ObjectKind> {
    match (api_version, kind) {
        ("networking.k8s.io/v1", "Ingress") => Some(ObjectKind::Ingress),
        ("v1", "Service") => Some(ObjectKind::Service),
        ("discovery.k8s.io/v1", "EndpointSlice") => Some(ObjectKind::EndpointSlice),
        ("v1", "Secret") => Some(ObjectKind::Secret),
        ("v1", "ConfigMap") => Some(ObjectKind::ConfigMap),
        ("teapot.dev/v1alpha1", "RouteTrafficPolicy") => Some(ObjectKind::RouteTrafficPolicy),
        ("gateway.networking.k8s.io/v1", kind) => match kind {
            "Gateway" => Some(ObjectKind::Gateway),
            "ListenerSet" => Some(ObjectKind::ListenerSet),
            "HTTPRoute" => Some(ObjectKind::HttpRoute),
            "GRPCRoute" => Some(ObjectKind::GrpcRoute),
            "TLSRoute" => Some(ObjectKind::TlsRoute),
            "TCPRoute" => Some(ObjectKind::TcpRoute),
            "UDPRoute" => Some(ObjectKind::UdpRoute),
            "ReferenceGrant" => Some(ObjectKind::ReferenceGrant),
            "BackendTLSPolicy" => Some(ObjectKind::BackendTlsPolicy),
            _ => None,
        },
        _ => None,
    }
}

/// What a tenant is told about a kind it may not write.
pub fn refused_kind_message(api_version: &str, kind: &str) -> String {
    if api_version.starts_with("gateway.networking.k8s.io/") && kind == "GatewayClass" {
        return "GatewayClass is the operator's: tenant Gateways use the class \"teapot\" the operator installs".to_string();
    }
    if let Some(version) = api_version.strip_prefix("gateway.networking.k8s.io/")
        && version != "v1"
    {
        return format!(
            "{} {} is not accepted in a tenant namespace: teapot admits the Gateway API kinds as gateway.networking.k8s.io/v1",
            quote(api_version),
            quote(kind)
        );
    }
    format!(
        "{} {} is not accepted in a tenant namespace: teapot admits networking.k8s.io/v1 Ingress, v1 Service, discovery.k8s.io/v1 EndpointSlice, v1 Secret, v1 ConfigMap (ca.crt only), and gateway.networking.k8s.io/v1 Gateway, ListenerSet, HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute, ReferenceGrant and BackendTLSPolicy, and teapot.dev/v1alpha1 RouteTrafficPolicy",
        quote(api_version),
        quote(kind)
    )
}

/// Checks one object a tenant wants to write into `namespace`: its kind,
/// size, every string in it, unknown fields, the typed parse, and the
/// rules of its kind. A Secret's certificate and key are not parsed here
/// (see [`tls_secret_data`]).
pub fn check_object(ctx: &AdmissionContext<'_>, namespace: &str, value: &Value) -> Checked {
    let mut checked = Checked::default();
    let out = &mut checked.violations;
    let Some(map) = value.as_object() else {
        out.push(Violation::new(
            OBJECT_FIELD,
            "the object is not a JSON object",
        ));
        return checked;
    };
    let text = |key: &str| map.get(key).and_then(Value::as_str).unwrap_or("");
    let Some(kind) = object_kind(text("apiVersion"), text("kind")) else {
        out.push(Violation::new(
            "kind",
            refused_kind_message(text("apiVersion"), text("kind")),
        ));
        return checked;
    };
    let size = json_size(value);
    out.extend(check_size(ctx, size));
    out.extend(check_total(ctx, size));
    out.extend(check_strings(value, pem_field(kind)));
    let typed = match kind {
        ObjectKind::Ingress => parse(value).map(|o| TenantObject::Ingress(Box::new(o))),
        ObjectKind::Service => parse(value).map(|o| TenantObject::Service(Box::new(o))),
        ObjectKind::EndpointSlice => parse(value).map(|o| TenantObject::EndpointSlice(Box::new(o))),
        ObjectKind::Secret => parse(value).map(|o| TenantObject::Secret(Box::new(o))),
        ObjectKind::Gateway => parse(value).map(|o| TenantObject::Gateway(Box::new(o))),
        ObjectKind::ListenerSet => parse(value).map(|o| TenantObject::ListenerSet(Box::new(o))),
        ObjectKind::HttpRoute => parse(value).map(|o| TenantObject::HttpRoute(Box::new(o))),
        ObjectKind::GrpcRoute => parse(value).map(|o| TenantObject::GrpcRoute(Box::new(o))),
        ObjectKind::TlsRoute => parse(value).map(|o| TenantObject::TlsRoute(Box::new(o))),
        ObjectKind::TcpRoute => parse(value).map(|o| TenantObject::TcpRoute(Box::new(o))),
        ObjectKind::UdpRoute => parse(value).map(|o| TenantObject::UdpRoute(Box::new(o))),
        ObjectKind::ReferenceGrant => {
            parse(value).map(|o| TenantObject::ReferenceGrant(Box::new(o)))
        }
        ObjectKind::BackendTlsPolicy => {
            parse(value).map(|o| TenantObject::BackendTlsPolicy(Box::new(o)))
        }
        ObjectKind::ConfigMap => parse(value).map(|o| TenantObject::ConfigMap(Box::new(o))),
        ObjectKind::RouteTrafficPolicy => {
            parse(value).map(|o| TenantObject::RouteTrafficPolicy(Box::new(o)))
        }
    };
    let object = match typed {
        Ok(o) => o,
        Err(v) => {
            out.push(v);
            return checked;
        }
    };
    let known = serde_json::to_value(object.as_ref());
    match known {
        Ok(known) => out.extend(unknown_fields(value, &known)),
        Err(e) => out.push(Violation::new(
            OBJECT_FIELD,
            format!("the object cannot be read back: {e}"),
        )),
    }
    let (violations, warnings) = check_kind(ctx, namespace, object.as_ref());
    out.extend(violations);
    if out.is_empty() {
        checked.warnings = warnings;
    }
    checked.object = Some(object);
    checked
}

fn parse<T: serde::de::DeserializeOwned>(value: &Value) -> Result<T, Violation> {
    // The plain parse is faster; the tracked one only runs to name the
    // field of an error.
    if let Ok(t) = <T as serde::Deserialize>::deserialize(value) {
        return Ok(t);
    }
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." {
            OBJECT_FIELD.to_string()
        } else {
            path
        };
        Violation::new(field, format!("cannot be read: {}", e.into_inner()))
    })
}

/// Bytes of `value` as compact JSON, without building the text.
/// The size rule: the object as JSON within `maxObjectBytes`.
fn check_size(ctx: &AdmissionContext<'_>, size: usize) -> Option<Violation> {
    let max = ctx.limits.max_object_bytes as usize;
    (size > max).then(|| {
        Violation::new(
            OBJECT_FIELD,
            format!(
                "the object is {size} bytes as JSON, more than the limit (maxObjectBytes = {max})"
            ),
        )
    })
}

/// The tenant's total at admission: its other objects and this one within
/// `maxTotalBytes`. Only an object that grows is refused, so lowering the
/// limit never blocks an update that keeps or shrinks an object.
fn check_total(ctx: &AdmissionContext<'_>, size: usize) -> Option<Violation> {
    // Admission only: the proxy counts a tenant's total itself, over every
    // object it loaded (`teapot_model::tenancy`).
    let existing = ctx.existing?;
    let total = existing.bytes.saturating_add(size as u64);
    let max = ctx.limits.max_total_bytes;
    (total > max && size as u64 > existing.own_bytes).then(|| {
        Violation::new(
            OBJECT_FIELD,
            format!(
                "your tenant's objects would be {total} bytes as JSON, more than its limit (maxTotalBytes = {max}); delete some or ask the operator to raise the limit"
            ),
        )
    })
}

/// The rules of each kind, on the typed object; and, for an Ingress that
/// passes, the custom domains still waiting for their proof.
fn check_kind(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    object: TenantObjectRef<'_>,
) -> (Vec<Violation>, Vec<String>) {
    let violations = match object {
        TenantObjectRef::Ingress(o) => {
            let violations = check_ingress(ctx, namespace, o);
            let warnings = if violations.is_empty() {
                pending_custom_hosts(ctx, o)
            } else {
                Vec::new()
            };
            return (violations, warnings);
        }
        TenantObjectRef::Service(o) => return (check_service(ctx, namespace, o), Vec::new()),
        TenantObjectRef::EndpointSlice(o) => {
            return (check_endpoint_slice(ctx, namespace, o), Vec::new());
        }
        TenantObjectRef::Secret(o) => return (check_secret(ctx, namespace, o), Vec::new()),
        TenantObjectRef::Gateway(o) => check_gateway(ctx, namespace, o),
        TenantObjectRef::ListenerSet(o) => check_listener_set(ctx, namespace, o),
        TenantObjectRef::ReferenceGrant(o) => check_reference_grant(ctx, namespace, o),
        TenantObjectRef::BackendTlsPolicy(o) => check_backend_tls_policy(ctx, namespace, o),
        TenantObjectRef::ConfigMap(o) => {
            return (check_config_map(ctx, namespace, o), Vec::new());
        }
        TenantObjectRef::RouteTrafficPolicy(o) => {
            return (check_route_traffic_policy(ctx, namespace, o), Vec::new());
        }
        TenantObjectRef::HttpRoute(_)
        | TenantObjectRef::GrpcRoute(_)
        | TenantObjectRef::TlsRoute(_)
        | TenantObjectRef::TcpRoute(_)
        | TenantObjectRef::UdpRoute(_) => {
            let mut out = match serde_json::to_value(object) {
                Ok(value) => check_route(ctx, namespace, object.kind(), object.metadata(), &value),
                Err(e) => vec![Violation::new(
                    OBJECT_FIELD,
                    format!("the object cannot be read back: {e}"),
                )],
            };
            out.extend(regexes::check_regexes(ctx, object));
            out
        }
    };
    // Gateway API kinds: custom hostnames wait for their DNS proof.
    let warnings = match serde_json::to_value(object) {
        Ok(value) if violations.is_empty() => pending_gateway_hosts(ctx, object.kind(), &value),
        _ => Vec::new(),
    };
    (violations, warnings)
}

/// Checks an object that is typed already (the proxy's second check; its
/// sources parsed every object once): size, every string in it, and the
/// rules of its kind. Unknown fields cannot be there: the typed form has
/// none.
pub fn check_typed(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    object: TenantObjectRef<'_>,
) -> Vec<Violation> {
    check_typed_sized(ctx, namespace, object, json_size(&object))
}

/// [`check_typed`] for an object whose JSON size the caller has already
/// counted.
pub fn check_typed_sized(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    object: TenantObjectRef<'_>,
    size: usize,
) -> Vec<Violation> {
    let mut out: Vec<Violation> = check_size(ctx, size).into_iter().collect();
    out.extend(check_strings(&object, pem_field(object.kind())));
    out.extend(check_kind(ctx, namespace, object).0);
    out
}

/// Bytes of `value`'s JSON form: what the size limits count.
pub fn json_size(value: &impl serde::Serialize) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Formats a violation list for humans: `field: message; field: message`,
/// at most `max` of them, then how many more.
pub fn summarize(violations: &[Violation], max: usize) -> String {
    let mut out = violations
        .iter()
        .take(max)
        .map(Violation::to_string)
        .collect::<Vec<_>>()
        .join("; ");
    if violations.len() > max {
        out.push_str(&format!("; and {} more", violations.len() - max));
    }
    out
}

#[cfg(test)]
pub(crate) mod testing;

#[cfg(test)]
mod tests {
    use super::testing::*;
    use super::*;

    #[test]
    fn check_object_rejects_other_kinds_and_unparseable_objects() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}});
        let c = check_object(&ctx, NS, &pod);
        assert_eq!(fields(&c.violations), ["kind"]);
        let bad = serde_json::json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}, "spec": {"ports": [{"port": "eighty"}]}});
        let c = check_object(&ctx, NS, &bad);
        assert_eq!(fields(&c.violations), ["spec.ports[0].port"]);
        assert!(c.object.is_none());
        let c = check_object(&ctx, NS, &Value::String("x".into()));
        assert_eq!(fields(&c.violations), [OBJECT_FIELD]);
    }

    #[test]
    fn check_object_finds_unknown_fields_control_characters_and_size() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s\u{7}", "namespace": NS},
            "spec": {"ports": [{"port": 80, "regex": "/.*"}], "snippet": "x"},
            "status": {"whatever": 1}
        });
        let c = check_object(&ctx, NS, &v);
        let got = fields(&c.violations);
        assert!(got.contains(&"metadata.name".to_string()), "{got:?}");
        assert!(got.contains(&"spec.ports[0].regex".to_string()), "{got:?}");
        assert!(got.contains(&"spec.snippet".to_string()), "{got:?}");
        assert!(!got.iter().any(|f| f.starts_with("status")), "{got:?}");
        let big = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "s", "namespace": NS, "labels": {"a": "b".repeat(63)}},
            "spec": {"ports": (1..10000).map(|p| serde_json::json!({"port": p, "name": format!("p{p}")})).collect::<Vec<_>>()}
        });
        let c = check_object(&ctx, NS, &big);
        assert!(fields(&c.violations).contains(&OBJECT_FIELD.to_string()));
    }

    #[test]
    fn a_valid_object_passes_with_its_typed_form() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = serde_json::json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "web.shop", "namespace": NS, "creationTimestamp": null,
                         "annotations": {"teapot.dev/ssl-redirect": "true"}},
            "spec": {"ingressClassName": "teapot", "rules": [{"host": "www.acme-shop.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]},
            "status": {"loadBalancer": {}}
        });
        let c = check_object(&ctx, NS, &v);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert!(matches!(c.object, Some(TenantObject::Ingress(_))));
        assert_eq!(c.warnings.len(), 1, "custom domain pending proof");
        assert!(c.warnings[0].contains("www.acme-shop.com"));
    }

    #[test]
    fn count_limits_stop_only_new_objects() {
        let f = Fixture::new();
        let full = ExistingObjects {
            is_new: true,
            services: 1000,
            ..ExistingObjects::default()
        };
        let svc = service("  ports: [{port: 80}]\n");
        let v = check_service(&f.ctx().with_existing(full), NS, &svc);
        assert_eq!(fields(&v), [OBJECT_FIELD]);
        let update = ExistingObjects {
            is_new: false,
            ..full
        };
        assert!(check_service(&f.ctx().with_existing(update), NS, &svc).is_empty());
    }

    #[test]
    fn the_total_stops_objects_that_grow_past_it() {
        let f = Fixture::new();
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "web", "namespace": NS},
            "spec": {"ports": [{"port": 80}]}
        });
        let size = json_size(&v) as u64;
        let max = crate::tenant::DEFAULT_MAX_TOTAL_BYTES;
        let near = ExistingObjects {
            is_new: true,
            bytes: max - size + 1,
            ..ExistingObjects::default()
        };
        let c = check_object(&f.ctx().with_existing(near), NS, &v);
        assert_eq!(fields(&c.violations), [OBJECT_FIELD]);
        assert!(c.violations[0].message.contains("maxTotalBytes"));
        // An update that does not grow the object passes, even over a
        // lowered limit.
        let same = ExistingObjects {
            is_new: false,
            own_bytes: size,
            ..near
        };
        assert!(
            check_object(&f.ctx().with_existing(same), NS, &v)
                .violations
                .is_empty()
        );
        let room = ExistingObjects {
            bytes: max - size,
            ..near
        };
        assert!(
            check_object(&f.ctx().with_existing(room), NS, &v)
                .violations
                .is_empty()
        );
    }

    #[test]
    fn summaries_are_bounded() {
        let v: Vec<_> = (0..5)
            .map(|i| Violation::new(format!("f{i}"), "m"))
            .collect();
        assert_eq!(summarize(&v, 2), "f0: m; f1: m; and 3 more");
    }
}
