//! Gateway API rules: what a tenant may write of Gateway,
//! HTTPRoute, GRPCRoute, TLSRoute, TCPRoute, UDPRoute and ReferenceGrant
//! into its namespace. GatewayClass is the operator's (cluster-scoped, never
//! a tenant's: [`super::object_kind`] does not accept it).
//!
//! The same allowlist spirit as the Ingress rules: class `teapot` only; no
//! address, infrastructure or listener placement a tenant picks; HTTP on
//! the shared port 80 and HTTPS on 443 (terminated by teapot with a Secret
//! of the namespace); TLS (passthrough, or terminated with a Secret of the
//! namespace as HTTPS is), TCP and UDP listeners on the L4 plane,
//! counted like the ports of `LoadBalancer` Services against
//! `l4.maxListeners`; hostnames under the Ingress host rules; every
//! reference (parent, backend, mirror, certificate, grant) inside the
//! tenant's own namespace, so a tenant can never name another tenant's
//! objects, with or without a ReferenceGrant.
//!
//! Routes are checked on their JSON form: the five route kinds share the
//! shapes checked here (`parentRefs`, `hostnames`, `rules[].backendRefs`,
//! filters) under different generated types, and the JSON form is the one
//! the tenant wrote, so the field paths read as the tenant's own.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::Value;
use teapot_gateway_api::generated::gateways::{
    GatewayAllowedListenersNamespacesFrom, GatewayListeners,
    GatewayListenersAllowedRoutesNamespacesFrom, GatewayListenersTlsMode,
};
use teapot_gateway_api::{BackendTlsPolicy, Gateway, ReferenceGrant};

use super::hosts::{HostScope, check_host, host_scope, within};
use super::meta::check_metadata;
use super::names::{dns_subdomain, dns1035_label};
use super::{AdmissionContext, Violation, check_path, quote};
use crate::annotations::ObjectKind;
use crate::host::HostPattern;
use crate::listener::ListenerProtocol;
use crate::names::GATEWAY_CLASS;

/// What every Gateway API object a tenant writes is held to: its
/// metadata, and the count of the tenant's Gateway API objects.
pub(super) fn gateway_api_object(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    meta: &ObjectMeta,
    kind: ObjectKind,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(ctx, namespace, meta, kind, &mut out);
    out.extend(ctx.over_limit(
        |e| e.gateway_api,
        ctx.limits.max_ingresses,
        "Gateway API objects (Gateways, routes and ReferenceGrants, counted like Ingresses)",
        "maxIngresses",
    ));
    out
}

/// `gateway.networking.k8s.io`.
pub const GATEWAY_GROUP: &str = teapot_gateway_api::GROUP;
/// The port of HTTP listeners: the fleet's shared HTTP plane.
pub const HTTP_LISTENER_PORT: i32 = 80;
/// The port of HTTPS listeners: the fleet's shared HTTPS plane.
pub const HTTPS_LISTENER_PORT: i32 = 443;
/// The route kinds a tenant may write.
pub const ROUTE_KINDS: &[&str] = &["HTTPRoute", "GRPCRoute", "TLSRoute", "TCPRoute", "UDPRoute"];
/// Most listeners on one Gateway (the CRD's own bound).
pub const MAX_LISTENERS_PER_GATEWAY: usize = 64;

/// Checks a Gateway a tenant writes into `namespace`: class `teapot`; no
/// `addresses` or `infrastructure`; client-certificate validation
/// (`tls.frontend`) from ConfigMaps or Secrets of the namespace;
/// `allowedListeners`
/// from the own namespace at most; a backend client certificate (`tls.backend`) from a
/// Secret of the namespace; each listener's protocol on its port (HTTP 80, HTTPS 443 with
/// TLS terminated from Secrets of the namespace, TLS passthrough or
/// terminated from Secrets of the namespace, TCP and UDP on any port of the
/// L4 plane); listener hostnames under the host
/// rules; routes attachable only from the Gateway's own namespace.
pub fn check_gateway(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    gateway: &Gateway,
) -> Vec<Violation> {
    let mut out = gateway_api_object(ctx, namespace, &gateway.metadata, ObjectKind::Gateway);
    let spec = &gateway.spec;
    if spec.gateway_class_name != GATEWAY_CLASS {
        out.push(Violation::new(
            "spec.gatewayClassName",
            format!(
                "must be {GATEWAY_CLASS:?} (found {}): tenant Gateways are served by teapot only",
                quote(&spec.gateway_class_name)
            ),
        ));
    }
    check_addresses(spec.addresses.as_deref().unwrap_or_default(), &mut out);
    if spec.infrastructure.is_some() {
        out.push(Violation::new(
            "spec.infrastructure",
            "infrastructure labels, annotations and parametersRef are refused: the proxy fleet is shared and configured by the operator",
        ));
    }
    // A tenant Gateway takes ListenerSets of its own namespace at most:
    // one from another namespace would be another tenant's listeners (and
    // hostnames) on this tenant's Gateway.
    if let Some(ns) = spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref())
    {
        if !matches!(
            ns.from,
            None | Some(
                GatewayAllowedListenersNamespacesFrom::None
                    | GatewayAllowedListenersNamespacesFrom::Same
            )
        ) {
            out.push(Violation::new(
                "spec.allowedListeners.namespaces.from",
                "only None or Same: ListenerSets attach from the Gateway's own namespace (All or Selector would let other tenants' listeners attach)",
            ));
        }
        if ns.selector.is_some() {
            out.push(Violation::new(
                "spec.allowedListeners.namespaces.selector",
                "namespace selectors are refused: ListenerSets attach from the Gateway's own namespace only",
            ));
        }
    }
    let own = ctx.tenant.namespace_name();
    if let Some(tls) = &spec.tls {
        if let Some(frontend) = &tls.frontend {
            check_frontend(frontend, namespace, &mut out);
        }
        if let Some(r) = tls
            .backend
            .as_ref()
            .and_then(|b| b.client_certificate_ref.as_ref())
        {
            let r = SecretRef {
                group: r.group.as_deref(),
                kind: r.kind.as_deref(),
                namespace: r.namespace.as_deref(),
                name: &r.name,
            };
            check_secret_ref(&r, "spec.tls.backend.clientCertificateRef", &own, &mut out);
        }
    }
    let own_address = own_address(gateway);
    let l4 = check_listeners_at(ctx, &spec.listeners, &own, own_address, &mut out);
    if l4 > 0 {
        let max = ctx.max_listeners();
        let others = ctx.existing.map_or(0, |e| e.lb_listeners);
        let total = others.saturating_add(l4);
        if total > max {
            out.push(Violation::new(
                "spec.listeners",
                format!(
                    "your tenant would have {total} L4 listeners (TLS, TCP and UDP listeners, and the HTTP and HTTPS ones of a Gateway with its own address, count like LoadBalancer Service ports), more than the limit (l4.maxListeners = {max})"
                ),
            ));
        }
    }
    out
}

/// `spec.addresses` of a tenant Gateway: at most one, of type
/// `IPAddress` (the CRD's default), its value empty: any address of the
/// Tenant's pool. A value is refused, as `loadBalancerIP` is on a
/// Service: an address is shared by the claims whose ports differ, so
/// naming one would put this Gateway on another tenant's VIP.
fn check_addresses(
    addresses: &[teapot_gateway_api::generated::gateways::GatewayAddresses],
    out: &mut Vec<Violation>,
) {
    if addresses.len() > 1 {
        out.push(Violation::new(
            "spec.addresses",
            "a Gateway gets one address of your Tenant's pool: name at most one",
        ));
    }
    for (i, a) in addresses.iter().enumerate() {
        let kind = a.r#type.as_deref().unwrap_or("IPAddress");
        if kind != "IPAddress" {
            out.push(Violation::new(
                format!("spec.addresses[{i}].type"),
                format!(
                    "{} is not served: an IPAddress of your Tenant's pool is (the hostname GATEWAY.CLUSTER.lb.DOMAIN is assigned)",
                    quote(kind)
                ),
            ));
            continue;
        }
        let value = a.value.as_deref().unwrap_or("");
        if !value.is_empty() {
            out.push(Violation::new(
                format!("spec.addresses[{i}].value"),
                format!(
                    "{}: addresses are allocated by teapot from your Tenant's pool; leave the value empty",
                    quote(value)
                ),
            ));
        }
    }
}

/// Whether a Gateway is served on an address of its own (the proxy's
/// `compile::listeners::own_address` for a tenant): it asks for one in
/// `spec.addresses`, or has HTTP on a port other than 80 or HTTPS other
/// than 443.
fn own_address(gateway: &Gateway) -> bool {
    gateway
        .spec
        .addresses
        .as_ref()
        .is_some_and(|a| !a.is_empty())
        || gateway.spec.listeners.iter().any(|l| {
            let shared = match ListenerProtocol::of(&l.protocol) {
                Some(ListenerProtocol::Http) => HTTP_LISTENER_PORT,
                Some(ListenerProtocol::Https) => HTTPS_LISTENER_PORT,
                _ => return false,
            };
            l.port != shared && (1..=65535).contains(&l.port)
        })
}

/// Checks the listeners of a tenant Gateway or ListenerSet (one rule for
/// both: a ListenerSet's listeners join a Gateway's listener table): how
/// many, each protocol on its port, TLS from Secrets of the namespace,
/// hostnames under the host rules, routes from the own namespace only.
/// Returns how many are L4 listeners (TLS, TCP, UDP).
pub(super) fn check_listeners(
    ctx: &AdmissionContext<'_>,
    listeners: &[GatewayListeners],
    own: &str,
    out: &mut Vec<Violation>,
) -> u32 {
    check_listeners_at(ctx, listeners, own, false, out)
}

/// [`check_listeners`]; `own_address`: a Gateway with its own address,
/// whose HTTP and HTTPS listeners may have any port and count with the L4
/// ones.
fn check_listeners_at(
    ctx: &AdmissionContext<'_>,
    listeners: &[GatewayListeners],
    own: &str,
    own_address: bool,
    out: &mut Vec<Violation>,
) -> u32 {
    if listeners.len() > MAX_LISTENERS_PER_GATEWAY {
        out.push(Violation::new(
            "spec.listeners",
            format!(
                "{} listeners, more than {MAX_LISTENERS_PER_GATEWAY}",
                listeners.len()
            ),
        ));
    }
    let mut hosts = BTreeSet::new();
    let mut l4 = 0u32;
    for (i, l) in listeners.iter().enumerate() {
        let at = format!("spec.listeners[{i}]");
        let port_must_be = |want: i32, out: &mut Vec<Violation>| {
            if own_address {
                if !(1..=65535).contains(&l.port) {
                    out.push(Violation::new(
                        format!("{at}.port"),
                        format!("{} is not a port (1-65535)", l.port),
                    ));
                }
            } else if l.port != want {
                out.push(Violation::new(
                    format!("{at}.port"),
                    format!(
                        "{} listeners are served on the fleet's port {want}, not {}",
                        l.protocol, l.port
                    ),
                ));
            }
        };
        match ListenerProtocol::of(&l.protocol) {
            Some(ListenerProtocol::Http) => {
                port_must_be(HTTP_LISTENER_PORT, out);
                l4 += u32::from(own_address);
                if l.tls.is_some() {
                    out.push(Violation::new(
                        format!("{at}.tls"),
                        "an HTTP listener has no tls; use protocol HTTPS",
                    ));
                }
            }
            Some(ListenerProtocol::Https) => {
                port_must_be(HTTPS_LISTENER_PORT, out);
                l4 += u32::from(own_address);
                check_listener_tls(l.tls.as_ref(), true, &at, own, out);
            }
            Some(protocol) => {
                if !(1..=65535).contains(&l.port) {
                    out.push(Violation::new(
                        format!("{at}.port"),
                        format!("{} is not a port (1-65535)", l.port),
                    ));
                }
                l4 += 1;
                if protocol == ListenerProtocol::Tls {
                    check_listener_tls(l.tls.as_ref(), false, &at, own, out);
                } else if l.tls.is_some() {
                    out.push(Violation::new(
                        format!("{at}.tls"),
                        format!("a {} listener has no tls", l.protocol),
                    ));
                }
            }
            None => out.push(Violation::new(
                format!("{at}.protocol"),
                format!("{} is not HTTP, HTTPS, TLS, TCP or UDP", quote(&l.protocol)),
            )),
        }
        if let Some(h) = &l.hostname
            && let Some((host, _)) = check_gateway_host(ctx, &format!("{at}.hostname"), h, out)
        {
            hosts.insert(host);
        }
        if let Some(allowed) = &l.allowed_routes {
            if let Some(ns) = &allowed.namespaces {
                if !matches!(
                    ns.from,
                    None | Some(GatewayListenersAllowedRoutesNamespacesFrom::Same)
                ) {
                    out.push(Violation::new(
                        format!("{at}.allowedRoutes.namespaces.from"),
                        "only Same: routes attach from the Gateway's own namespace (All or Selector would let other tenants' routes attach)",
                    ));
                }
                if ns.selector.is_some() {
                    out.push(Violation::new(
                        format!("{at}.allowedRoutes.namespaces.selector"),
                        "namespace selectors are refused: routes attach from the Gateway's own namespace only",
                    ));
                }
            }
            for (j, k) in allowed.kinds.iter().flatten().enumerate() {
                let group_ok = k.group.as_deref().is_none_or(|g| g == GATEWAY_GROUP);
                if !group_ok || !ROUTE_KINDS.contains(&k.kind.as_str()) {
                    out.push(Violation::new(
                        format!("{at}.allowedRoutes.kinds[{j}]"),
                        format!(
                            "{} {} is not a route kind teapot serves ({} of {GATEWAY_GROUP})",
                            quote(k.group.as_deref().unwrap_or(GATEWAY_GROUP)),
                            quote(&k.kind),
                            ROUTE_KINDS.join(", ")
                        ),
                    ));
                }
            }
        }
    }
    let max_hosts = ctx.limits.max_hosts_per_ingress as usize;
    if hosts.len() > max_hosts {
        out.push(Violation::new(
            "spec.listeners",
            format!(
                "{} distinct hostnames, more than the limit (maxHostsPerIngress = {max_hosts})",
                hosts.len()
            ),
        ));
    }
    l4
}

/// `tls` of an HTTPS listener (`https`: mode Terminate, certificates from
/// Secrets of the namespace) or of a TLS listener: mode Passthrough (no
/// certificate: the L4 plane forwards the bytes) or Terminate (the L4
/// plane ends TLS with the listener's certificate, read as an HTTPS
/// listener's, so held to the same rules: Secrets of the namespace).
fn check_listener_tls(
    tls: Option<&teapot_gateway_api::generated::gateways::GatewayListenersTls>,
    https: bool,
    at: &str,
    own: &str,
    out: &mut Vec<Violation>,
) {
    let Some(tls) = tls else {
        if https {
            out.push(Violation::new(
                format!("{at}.tls"),
                "an HTTPS listener needs tls with mode Terminate and certificateRefs",
            ));
        } else {
            out.push(Violation::new(
                format!("{at}.tls"),
                "a TLS listener needs tls with mode Passthrough, or Terminate with certificateRefs",
            ));
        }
        return;
    };
    // The API's default mode is Terminate.
    let passthrough = matches!(tls.mode, Some(GatewayListenersTlsMode::Passthrough));
    if https && passthrough {
        out.push(Violation::new(
            format!("{at}.tls.mode"),
            "HTTPS listeners terminate TLS; for passthrough use protocol TLS with a TLSRoute",
        ));
    }
    if tls.options.as_ref().is_some_and(|o| !o.is_empty()) {
        out.push(Violation::new(
            format!("{at}.tls.options"),
            "implementation-specific TLS options are refused",
        ));
    }
    let refs = tls.certificate_refs.as_deref().unwrap_or_default();
    if (https || !passthrough) && refs.is_empty() {
        out.push(Violation::new(
            format!("{at}.tls.certificateRefs"),
            if https {
                "an HTTPS listener needs a kubernetes.io/tls Secret of this namespace"
            } else {
                "a TLS listener of mode Terminate needs a kubernetes.io/tls Secret of this namespace"
            },
        ));
    }
    if !https && passthrough && !refs.is_empty() {
        out.push(Violation::new(
            format!("{at}.tls.certificateRefs"),
            "a passthrough listener holds no certificate",
        ));
    }
    for (j, r) in refs.iter().enumerate() {
        let r = SecretRef {
            group: r.group.as_deref(),
            kind: r.kind.as_deref(),
            namespace: r.namespace.as_deref(),
            name: &r.name,
        };
        check_secret_ref(&r, &format!("{at}.tls.certificateRefs[{j}]"), own, out);
    }
}

/// A reference to a certificate Secret, whichever field holds it.
struct SecretRef<'r> {
    group: Option<&'r str>,
    kind: Option<&'r str>,
    namespace: Option<&'r str>,
    name: &'r str,
}

/// A certificate reference a tenant writes: a core Secret of the
/// namespace (another namespace's Secret is another tenant's, or the
/// operator's).
/// `caCertificateRefs` one frontend validation may name.
pub const MAX_FRONTEND_CA_REFS: usize = 8;

/// A Gateway's client-certificate validation (`spec.tls.frontend`): CA
/// bundles from the `ca.crt` of ConfigMaps or Secrets of the Gateway's own
/// namespace (a ReferenceGrant never opens another tenant's CA), at most
/// [`MAX_FRONTEND_CA_REFS`] of them per validation.
fn check_frontend(
    frontend: &teapot_gateway_api::generated::gateways::GatewayTlsFrontend,
    own: &str,
    out: &mut Vec<Violation>,
) {
    type Ref<'a> = (&'a str, &'a str, Option<&'a str>);
    let mut validations: Vec<(String, Vec<Ref<'_>>)> = Vec::new();
    if let Some(v) = &frontend.default.validation {
        validations.push((
            "spec.tls.frontend.default.validation".into(),
            v.ca_certificate_refs
                .iter()
                .map(|r| (r.group.as_str(), r.kind.as_str(), r.namespace.as_deref()))
                .collect(),
        ));
    }
    for (i, p) in frontend.per_port.iter().flatten().enumerate() {
        if let Some(v) = &p.tls.validation {
            validations.push((
                format!("spec.tls.frontend.perPort[{i}].tls.validation"),
                v.ca_certificate_refs
                    .iter()
                    .map(|r| (r.group.as_str(), r.kind.as_str(), r.namespace.as_deref()))
                    .collect(),
            ));
        }
    }
    for (at, refs) in validations {
        if refs.is_empty() || refs.len() > MAX_FRONTEND_CA_REFS {
            out.push(Violation::new(
                format!("{at}.caCertificateRefs"),
                format!("name 1 to {MAX_FRONTEND_CA_REFS} CA bundles"),
            ));
        }
        for (j, (group, kind, namespace)) in refs.into_iter().enumerate() {
            let rat = format!("{at}.caCertificateRefs[{j}]");
            if !group.is_empty() || !matches!(kind, "ConfigMap" | "Secret") {
                out.push(Violation::new(
                    format!("{rat}.kind"),
                    "a ConfigMap or Secret of the core group, whose ca.crt holds the CA bundle",
                ));
            }
            if namespace.is_some_and(|ns| ns != own) {
                out.push(Violation::new(
                    format!("{rat}.namespace"),
                    "CA bundles come from the Gateway's own namespace",
                ));
            }
        }
    }
}

fn check_secret_ref(r: &SecretRef<'_>, rat: &str, own: &str, out: &mut Vec<Violation>) {
    if r.group.is_some_and(|g| !g.is_empty()) {
        out.push(Violation::new(
            format!("{rat}.group"),
            format!(
                "{} is not the core group: certificates are Secrets",
                quote(r.group.unwrap_or(""))
            ),
        ));
    }
    if r.kind.is_some_and(|k| k != "Secret") {
        out.push(Violation::new(
            format!("{rat}.kind"),
            format!("{} is not Secret", quote(r.kind.unwrap_or(""))),
        ));
    }
    if let Some(ns) = r.namespace
        && ns != own
    {
        out.push(Violation::new(
            format!("{rat}.namespace"),
            format!(
                "{} is not this namespace ({own}): certificates come from your own Secrets",
                quote(ns)
            ),
        ));
    }
    if let Err(e) = dns_subdomain(r.name) {
        out.push(Violation::new(
            format!("{rat}.name"),
            format!("must name a Secret in this namespace: {e}"),
        ));
    }
}

/// A Gateway API hostname (listener or route) under the Ingress host
/// rules ([`check_host`]), plus what Gateway API wildcards add: `*.foo.com`
/// matches every name below `foo.com`, any number of labels down, where an
/// Ingress wildcard matches one label. So a wildcard is also refused when
/// someone else holds any host or domain below its suffix.
pub fn check_gateway_host(
    ctx: &AdmissionContext<'_>,
    field: &str,
    raw: &str,
    out: &mut Vec<Violation>,
) -> Option<(HostPattern, HostScope)> {
    let (host, scope) = check_host(ctx, field, raw, out)?;
    if let HostPattern::Wildcard(suffix) = &host {
        let below = ctx
            .holdings
            .held_within(suffix, ctx.cluster())
            .into_iter()
            .find(|(shown, _)| {
                let bare = shown.strip_prefix("*.").unwrap_or(shown);
                bare != suffix && within(bare, suffix)
            });
        if let Some((_, holder)) = below {
            out.push(Violation::new(
                field,
                format!(
                    "{host} covers every name below {suffix}, and a host there is held by {}; a host belongs to one tenant",
                    holder.for_tenant()
                ),
            ));
            return None;
        }
    }
    Some((host, scope))
}

/// Checks a route of `kind` (one of [`ROUTE_KINDS`]) a tenant writes into
/// `namespace`, on its JSON form: parents only Gateways of the namespace;
/// hostnames under the host rules; backends (and mirrors) only Services of
/// the namespace with a port; no ExtensionRef filters, ExternalAuth only
/// over HTTP; sessionPersistence only by cookie; HTTP path matches of the strict path class; no `useDefaultGateways`.
pub fn check_route(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    kind: ObjectKind,
    meta: &ObjectMeta,
    route: &Value,
) -> Vec<Violation> {
    let mut out = gateway_api_object(ctx, namespace, meta, kind);
    let own = ctx.tenant.namespace_name();
    let Some(spec) = route.get("spec") else {
        out.push(Violation::new("spec", "spec is required"));
        return out;
    };
    if let Some(d) = spec.get("useDefaultGateways").and_then(Value::as_str)
        && d != "None"
    {
        out.push(Violation::new(
            "spec.useDefaultGateways",
            format!(
                "{} would attach the route to Gateways outside your namespace; name your Gateway in parentRefs",
                quote(d)
            ),
        ));
    }
    for (i, p) in items(spec, "parentRefs") {
        let at = format!("spec.parentRefs[{i}]");
        let group = text(p, "group").unwrap_or(GATEWAY_GROUP);
        let pkind = text(p, "kind").unwrap_or("Gateway");
        if group != GATEWAY_GROUP || !matches!(pkind, "Gateway" | "ListenerSet") {
            out.push(Violation::new(
                &at,
                format!(
                    "{} {} is not a Gateway or ListenerSet: a route attaches to a Gateway or ListenerSet of your namespace",
                    quote(group),
                    quote(pkind)
                ),
            ));
        }
        check_same_namespace(p, &at, &own, "Gateways", &mut out);
        check_name(p, &at, dns_subdomain, "a Gateway", &mut out);
        check_port(p, &at, false, &mut out);
    }
    let max_hosts = ctx.limits.max_hosts_per_ingress as usize;
    let hostnames: Vec<_> = items(spec, "hostnames").collect();
    if hostnames.len() > max_hosts {
        out.push(Violation::new(
            "spec.hostnames",
            format!(
                "{} hostnames, more than the limit (maxHostsPerIngress = {max_hosts})",
                hostnames.len()
            ),
        ));
    }
    for (i, h) in hostnames {
        let field = format!("spec.hostnames[{i}]");
        match h.as_str() {
            Some(h) => {
                check_gateway_host(ctx, &field, h, &mut out);
            }
            None => out.push(Violation::new(field, "a hostname is a string")),
        }
    }
    let mut matches = 0usize;
    for (i, rule) in items(spec, "rules") {
        let at = format!("spec.rules[{i}]");
        for (j, m) in items(rule, "matches") {
            matches += 1;
            if let Some(path) = m.get("path") {
                check_path_match(path, &format!("{at}.matches[{j}].path"), &mut out);
            }
            for (k, h) in items(m, "headers") {
                let name = h.get("name").unwrap_or(&Value::Null);
                check_header_name(
                    name,
                    format!("{at}.matches[{j}].headers[{k}].name"),
                    false,
                    &mut out,
                );
            }
        }
        for (j, f) in items(rule, "filters") {
            check_filter(f, &format!("{at}.filters[{j}]"), &own, &mut out);
        }
        if let Some(sp) = rule.get("sessionPersistence") {
            check_session_persistence(sp, &format!("{at}.sessionPersistence"), &mut out);
        }
        for (j, b) in items(rule, "backendRefs") {
            let bat = format!("{at}.backendRefs[{j}]");
            check_backend_ref(b, &bat, &own, &mut out);
            for (k, f) in items(b, "filters") {
                check_filter(f, &format!("{bat}.filters[{k}]"), &own, &mut out);
            }
        }
    }
    let max_paths = ctx.limits.max_paths_per_ingress as usize;
    if matches > max_paths {
        out.push(Violation::new(
            "spec.rules",
            format!("{matches} matches, more than the limit (maxPathsPerIngress = {max_paths})"),
        ));
    }
    out
}

/// Checks a ReferenceGrant: from routes and Gateways of the tenant's own
/// namespace only, to its own Services and Secrets. Since every reference
/// a tenant writes stays in its namespace, such a grant changes nothing;
/// it is admitted so that manifests written for other implementations
/// apply unchanged, and a grant that would open the namespace to another
/// is refused.
pub fn check_reference_grant(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    grant: &ReferenceGrant,
) -> Vec<Violation> {
    let mut out = gateway_api_object(ctx, namespace, &grant.metadata, ObjectKind::ReferenceGrant);
    let own = ctx.tenant.namespace_name();
    for (i, f) in grant.spec.from.iter().enumerate() {
        let at = format!("spec.from[{i}]");
        if f.namespace != own {
            out.push(Violation::new(
                format!("{at}.namespace"),
                format!(
                    "{} is not this namespace ({own}): a grant here may only name your own namespace",
                    quote(&f.namespace)
                ),
            ));
        }
        if f.group != GATEWAY_GROUP
            || !(f.kind == "Gateway" || ROUTE_KINDS.contains(&f.kind.as_str()))
        {
            out.push(Violation::new(
                format!("{at}.kind"),
                format!(
                    "{} {} is not a Gateway or route kind of {GATEWAY_GROUP}",
                    quote(&f.group),
                    quote(&f.kind)
                ),
            ));
        }
    }
    for (i, t) in grant.spec.to.iter().enumerate() {
        let at = format!("spec.to[{i}]");
        if !t.group.is_empty() || !(t.kind == "Service" || t.kind == "Secret") {
            out.push(Violation::new(
                format!("{at}.kind"),
                format!(
                    "{} {} is not a Service or Secret of the core group",
                    quote(&t.group),
                    quote(&t.kind)
                ),
            ));
        }
        if let Some(name) = &t.name
            && let Err(e) = dns_subdomain(name)
        {
            out.push(Violation::new(format!("{at}.name"), e));
        }
    }
    out
}

/// The `wellKnownCACertificates` value teapot serves: the proxy host's
/// trust store.
pub const WELL_KNOWN_SYSTEM: &str = "System";
/// The key of a ConfigMap holding a BackendTLSPolicy's trust anchors.
pub const CA_CERT_KEY: &str = "ca.crt";
/// The ConfigMap kube-controller-manager publishes into every namespace.
const KUBE_ROOT_CA: &str = "kube-root-ca.crt";

/// Checks a BackendTLSPolicy: its targets are Services and its trust
/// anchors ConfigMaps. Both references are local by the CRD's own schema
/// (no `namespace` field), so a tenant's policy only ever names its own
/// namespace's objects; what is checked is that they are of the kinds
/// teapot reads, so a policy that could never apply is refused here with
/// its field rather than accepted and ignored.
pub fn check_backend_tls_policy(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    policy: &BackendTlsPolicy,
) -> Vec<Violation> {
    let mut out = gateway_api_object(
        ctx,
        namespace,
        &policy.metadata,
        ObjectKind::BackendTlsPolicy,
    );
    let own = ctx.tenant.namespace_name();
    let spec = &policy.spec;
    for (i, t) in spec.target_refs.iter().enumerate() {
        check_local_ref(
            &mut out,
            &format!("spec.targetRefs[{i}]"),
            (&t.group, &t.kind, &t.name),
            ("Service", dns1035_label),
            &format!("a BackendTLSPolicy targets Services of your namespace ({own})"),
        );
    }
    let validation = &spec.validation;
    for (i, r) in validation.ca_certificate_refs.iter().flatten().enumerate() {
        check_local_ref(
            &mut out,
            &format!("spec.validation.caCertificateRefs[{i}]"),
            (&r.group, &r.kind, &r.name),
            ("ConfigMap", dns_subdomain),
            &format!(
                "teapot reads trust anchors from the ca.crt of a ConfigMap of your namespace ({own})"
            ),
        );
    }
    if let Some(well_known) = &validation.well_known_ca_certificates
        && !well_known.is_empty()
        && well_known != WELL_KNOWN_SYSTEM
    {
        out.push(Violation::new(
            "spec.validation.wellKnownCACertificates",
            format!(
                "{} is not served: teapot knows {WELL_KNOWN_SYSTEM:?} (the proxy host's trust store)",
                quote(well_known)
            ),
        ));
    }
    if spec.options.as_ref().is_some_and(|o| !o.is_empty()) {
        out.push(Violation::new(
            "spec.options",
            "teapot reads no BackendTLSPolicy options; remove spec.options",
        ));
    }
    out
}

/// A name syntax ([`dns1035_label`], [`dns_subdomain`]).
type NameRule = fn(&str) -> Result<(), String>;

/// A local reference (the CRD gives it no namespace) to a core-group
/// object: of `kind`, its name valid by `name_rule`; `why` says what the
/// kind is for.
fn check_local_ref(
    out: &mut Vec<Violation>,
    at: &str,
    (group, kind, name): (&str, &str, &str),
    (wanted, name_rule): (&str, NameRule),
    why: &str,
) {
    if !group.is_empty() || kind != wanted {
        out.push(Violation::new(
            format!("{at}.kind"),
            format!("{} {} is not a {wanted}: {why}", quote(group), quote(kind)),
        ));
    }
    if let Err(e) = name_rule(name) {
        out.push(Violation::new(format!("{at}.name"), e));
    }
}

/// Checks a ConfigMap: in a tenant namespace of the LB cluster it exists
/// only as the trust anchors of a BackendTLSPolicy, so it holds `ca.crt`,
/// a PEM bundle, and nothing else, or as the agent's copy of the response
/// fields an Ingress's `custom-headers` names (a name ending in
/// `-headers`, no `ca.crt`, every key a field within the bounds of
/// crate::response_headers). Counted with the Secrets.
pub fn check_config_map(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    config_map: &ConfigMap,
) -> Vec<Violation> {
    let mut out = Vec::new();
    // The API server's own `kube-root-ca.crt`, published into every
    // namespace with its description annotation: not a tenant's write.
    let meta = if config_map.metadata.name.as_deref() == Some(KUBE_ROOT_CA) {
        &ObjectMeta {
            annotations: None,
            ..config_map.metadata.clone()
        }
    } else {
        &config_map.metadata
    };
    check_metadata(ctx, namespace, meta, ObjectKind::ConfigMap, &mut out);
    out.extend(ctx.over_limit(
        |e| e.secrets,
        ctx.limits.max_ingresses,
        "Secrets and ConfigMaps",
        "maxIngresses",
    ));
    if config_map
        .binary_data
        .as_ref()
        .is_some_and(|b| !b.is_empty())
    {
        out.push(Violation::new(
            "binaryData",
            "a ConfigMap here holds only ca.crt (the trust anchors of a BackendTLSPolicy) in data",
        ));
    }
    let data = config_map.data.as_ref();
    // Without ca.crt, and named as the agent names its copies: the
    // response fields of an Ingress's custom-headers
    // (crate::response_headers), bounded there.
    let headers_copy = config_map
        .metadata
        .name
        .as_deref()
        .is_some_and(|n| n.ends_with(crate::response_headers::COPY_SUFFIX));
    if let Some(fields) =
        data.filter(|d| headers_copy && !d.is_empty() && !d.contains_key(CA_CERT_KEY))
    {
        let pairs = fields.iter().map(|(k, v)| (k.as_str(), v.as_str()));
        if let Err(e) = crate::response_headers::parse(pairs) {
            out.push(Violation::new(e.field, e.message));
        }
        return out;
    }
    for key in data.into_iter().flatten().map(|(k, _)| k) {
        if key != CA_CERT_KEY {
            out.push(Violation::new(
                format!("data[{}]", quote(key)),
                "a ConfigMap here holds only ca.crt (the trust anchors of a BackendTLSPolicy)",
            ));
        }
    }
    match data.and_then(|d| d.get(CA_CERT_KEY)) {
        Some(ca) => out.extend(super::check_ca_bundle(ca.as_bytes()).err()),
        None => out.push(Violation::new(
            format!("data[{}]", quote(CA_CERT_KEY)),
            "is required: the PEM bundle of trust anchors a BackendTLSPolicy names",
        )),
    }
    out
}

/// Custom hostnames of an admitted Gateway or route that wait for their
/// DNS proof, one message each (the webhook returns them as warnings).
/// The assigned name a CNAME points at is the Gateway's
/// (`GATEWAY.CLUSTER.lb.DOMAIN`); for a route, its first parent's.
pub fn pending_gateway_hosts(
    ctx: &AdmissionContext<'_>,
    kind: ObjectKind,
    object: &Value,
) -> Vec<String> {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let listeners = matches!(kind, ObjectKind::Gateway | ObjectKind::ListenerSet);
    let (gateway, hosts): (String, Vec<(String, &str)>) = if listeners {
        let name = object
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("");
        let hosts = items(spec, "listeners")
            .filter_map(|(i, l)| {
                Some((
                    format!("spec.listeners[{i}].hostname"),
                    text(l, "hostname")?,
                ))
            })
            .collect();
        (name.to_string(), hosts)
    } else {
        let parent = items(spec, "parentRefs")
            .find_map(|(_, p)| text(p, "name"))
            .unwrap_or("");
        let hosts = items(spec, "hostnames")
            .filter_map(|(i, h)| Some((format!("spec.hostnames[{i}]"), h.as_str()?)))
            .collect();
        (parent.to_string(), hosts)
    };
    let assigned = crate::hostname::assigned_hostname(&gateway, ctx.cluster(), ctx.domain);
    let token = ctx.tenant.verification_token();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (field, raw) in hosts {
        let Ok(host) = HostPattern::parse(raw) else {
            continue;
        };
        let custom = host_scope(ctx, &host) == Ok(HostScope::Custom);
        if custom && seen.insert(host.to_string()) {
            out.push(format!(
                "{field}: {host} is a custom domain; teapot serves it once DNS proves it is yours: a CNAME to {assigned}, or a TXT record _teapot.{host} containing {token:?}"
            ));
        }
    }
    out
}

/// The hostnames a Gateway API object claims, parsed (the invalid ones,
/// which admission refuses, skipped): a Gateway's listener hostnames, a
/// route's `spec.hostnames`. What [`super::Holdings::insert_gateway_host`]
/// records for the first-claimant rule.
pub fn gateway_api_hostnames(kind: ObjectKind, object: &Value) -> Vec<HostPattern> {
    let spec = object.get("spec").unwrap_or(&Value::Null);
    let raw: Vec<&str> = match kind {
        ObjectKind::Gateway | ObjectKind::ListenerSet => items(spec, "listeners")
            .filter_map(|(_, l)| text(l, "hostname"))
            .collect(),
        ObjectKind::HttpRoute | ObjectKind::GrpcRoute | ObjectKind::TlsRoute => {
            items(spec, "hostnames")
                .filter_map(|(_, h)| h.as_str())
                .collect()
        }
        _ => Vec::new(),
    };
    raw.into_iter()
        .filter_map(|h| HostPattern::parse(h).ok())
        .collect()
}

/// The elements of array `key` of `v`, with their index.
fn items<'a>(v: &'a Value, key: &str) -> impl Iterator<Item = (usize, &'a Value)> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| a.iter().enumerate())
        .into_iter()
        .flatten()
}

fn text<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn check_same_namespace(r: &Value, at: &str, own: &str, what: &str, out: &mut Vec<Violation>) {
    if let Some(ns) = text(r, "namespace")
        && ns != own
    {
        out.push(Violation::new(
            format!("{at}.namespace"),
            format!(
                "{} is not this namespace ({own}): only {what} of your own namespace may be referenced",
                quote(ns)
            ),
        ));
    }
}

fn check_name(
    r: &Value,
    at: &str,
    rule: fn(&str) -> Result<(), String>,
    what: &str,
    out: &mut Vec<Violation>,
) {
    let name = text(r, "name").unwrap_or("");
    if let Err(e) = rule(name) {
        out.push(Violation::new(
            format!("{at}.name"),
            format!("must name {what} in this namespace: {e}"),
        ));
    }
}

fn check_port(r: &Value, at: &str, required: bool, out: &mut Vec<Violation>) {
    match r.get("port").and_then(Value::as_i64) {
        Some(p) if !(1..=65535).contains(&p) => out.push(Violation::new(
            format!("{at}.port"),
            format!("{p} is not a port (1-65535)"),
        )),
        None if required => out.push(Violation::new(
            format!("{at}.port"),
            "a Service backend needs its port",
        )),
        _ => {}
    }
}

/// A backend (or mirror) reference: a Service of the namespace, by the
/// core group, with its port.
fn check_backend_ref(r: &Value, at: &str, own: &str, out: &mut Vec<Violation>) {
    let group = text(r, "group").unwrap_or("");
    let kind = text(r, "kind").unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        out.push(Violation::new(
            format!("{at}.kind"),
            format!(
                "{} {} is refused: a backend is a Service (core group) of your namespace",
                quote(group),
                quote(kind)
            ),
        ));
    }
    check_same_namespace(r, at, own, "Services", out);
    check_name(r, at, dns1035_label, "a Service", out);
    check_port(r, at, true, out);
}

/// Headers that frame the message or the connection: the proxy sets them
/// itself, and a route may not (a wrong `Content-Length` or
/// `Transfer-Encoding` towards a pooled upstream connection is request
/// smuggling material).
pub const FRAMING_HEADERS: &[&str] = &[
    "connection",
    "content-length",
    "host",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// An HTTP header name: an RFC 9110 token.
fn header_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_header_name(name: &Value, field: String, modifier: bool, out: &mut Vec<Violation>) {
    let Some(name) = name.as_str() else {
        out.push(Violation::new(field, "a header name is a string"));
        return;
    };
    if !header_token(name) {
        out.push(Violation::new(
            field,
            format!("{} is not an HTTP header name", quote(name)),
        ));
    } else if modifier && FRAMING_HEADERS.contains(&name.to_ascii_lowercase().as_str()) {
        out.push(Violation::new(
            field,
            format!(
                "{} frames the message or the connection; the proxy sets it itself (for the Host header use URLRewrite hostname)",
                quote(name)
            ),
        ));
    }
}

/// Header names and values of RequestHeaderModifier and
/// ResponseHeaderModifier.
fn check_header_modifiers(f: &Value, at: &str, out: &mut Vec<Violation>) {
    for modifier in ["requestHeaderModifier", "responseHeaderModifier"] {
        let Some(m) = f.get(modifier) else { continue };
        let request = modifier == "requestHeaderModifier";
        for op in ["set", "add"] {
            for (i, h) in items(m, op) {
                let name = h.get("name").unwrap_or(&Value::Null);
                let field = format!("{at}.{modifier}.{op}[{i}]");
                check_header_name(name, format!("{field}.name"), true, out);
                check_edited_header(name, request, format!("{field}.name"), out);
                let value = h.get("value").unwrap_or(&Value::Null);
                check_header_value(value, format!("{field}.value"), out);
            }
        }
        for (i, name) in items(m, "remove") {
            let field = format!("{at}.{modifier}.remove[{i}]");
            check_header_name(name, field.clone(), true, out);
            check_edited_header(name, request, field, out);
        }
    }
}

/// Longest header name a modifier may write (the CRD's bound).
pub const MAX_HEADER_NAME_LEN: usize = 256;
/// Longest header value a modifier may write (the CRD's bound): a value
/// longer than a backend's header limit would fail every request.
pub const MAX_HEADER_VALUE_LEN: usize = 4096;

/// Request fields teapot sets on every forwarded request from the real
/// peer and its own request IDs (docs/edge.md): the engines leave a
/// request modifier's edit of them unapplied, so a route naming one is
/// told instead of being ignored.
pub const FORWARDING_HEADERS: &[&str] = &[
    "forwarded",
    "traceparent",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-port",
    "x-forwarded-proto",
    "x-real-ip",
    "x-request-id",
];

/// Hop-by-hop fields besides the framing ones: the engines strip them on
/// the way through, so an edit of them never arrives.
pub const HOP_BY_HOP_HEADERS: &[&str] = &["proxy-authenticate", "proxy-authorization"];

/// What a modifier may not edit besides the framing headers: names too
/// long for a header, hop-by-hop fields, and on requests the forwarding
/// fields teapot writes itself. `name` has passed or failed
/// [`check_header_name`] already; a non-string is left to it.
fn check_edited_header(name: &Value, request: bool, field: String, out: &mut Vec<Violation>) {
    let Some(name) = name.as_str() else { return };
    if name.len() > MAX_HEADER_NAME_LEN {
        out.push(Violation::new(
            field,
            format!(
                "the header name is {} bytes long, more than {MAX_HEADER_NAME_LEN}",
                name.len()
            ),
        ));
        return;
    }
    let lower = name.to_ascii_lowercase();
    if HOP_BY_HOP_HEADERS.contains(&lower.as_str()) {
        out.push(Violation::new(
            field,
            format!(
                "{} is a hop-by-hop header: the proxy strips it, so the edit would never arrive",
                quote(name)
            ),
        ));
    } else if request && FORWARDING_HEADERS.contains(&lower.as_str()) {
        out.push(Violation::new(
            field,
            format!(
                "{} is set by the proxy on every request (from the real client, or its request ID); a route cannot change it",
                quote(name)
            ),
        ));
    }
}

/// A header value a modifier writes: a string of at most
/// [`MAX_HEADER_VALUE_LEN`] bytes. Control characters (a CR or LF would end
/// the field; NUL and the rest every engine refuses, dropping the edit)
/// are refused in every string of a tenant object, at this same field
/// (`super::strings::check_strings`, which every caller of the policy
/// runs), so they are not reported twice here.
fn check_header_value(value: &Value, field: String, out: &mut Vec<Violation>) {
    let Some(value) = value.as_str() else {
        out.push(Violation::new(field, "a header value is a string"));
        return;
    };
    if value.len() > MAX_HEADER_VALUE_LEN {
        out.push(Violation::new(
            field,
            format!(
                "the header value is {} bytes long, more than {MAX_HEADER_VALUE_LEN}",
                value.len()
            ),
        ));
    }
}

/// The path of a URLRewrite or RequestRedirect (`path` at `at`): a
/// ReplaceFullPath or ReplacePrefixMatch value of the strict path class
/// Ingress paths have (absolute, no query or fragment, no dot segments,
/// no control characters or escapes of separators). A request the engine
/// rewrote to anything else would fail (500) or reach the backend as
/// another path than the one written. ReplacePrefixMatch may be empty
/// (the matched prefix is removed).
fn check_path_modifier(path: &Value, at: &str, out: &mut Vec<Violation>) {
    for (key, may_be_empty) in [("replaceFullPath", false), ("replacePrefixMatch", true)] {
        let Some(value) = path.get(key) else { continue };
        let field = format!("{at}.{key}");
        let Some(value) = value.as_str() else {
            out.push(Violation::new(field, "a path is a string"));
            continue;
        };
        if value.is_empty() && may_be_empty {
            continue;
        }
        if let Err(e) = check_path(value) {
            out.push(Violation::new(field, format!("{}: {e}", quote(value))));
        }
    }
}

fn check_filter(f: &Value, at: &str, own: &str, out: &mut Vec<Violation>) {
    check_header_modifiers(f, at, out);
    let ty = text(f, "type").unwrap_or("");
    if ty == "ExtensionRef" || f.get("extensionRef").is_some() {
        out.push(Violation::new(
            format!("{at}.extensionRef"),
            "ExtensionRef filters are refused: they name implementation-specific objects teapot does not serve",
        ));
    }
    if let Some(auth) = f.get("externalAuth") {
        check_external_auth(auth, &format!("{at}.externalAuth"), own, out);
    } else if ty == "ExternalAuth" {
        out.push(Violation::new(
            format!("{at}.externalAuth"),
            "an ExternalAuth filter needs its externalAuth",
        ));
    }
    if let Some(cors) = f.get("cors") {
        check_cors(cors, &format!("{at}.cors"), out);
    }
    if let Some(m) = f.get("requestMirror")
        && let Some(b) = m.get("backendRef")
    {
        check_backend_ref(b, &format!("{at}.requestMirror.backendRef"), own, out);
    }
    for filter in ["urlRewrite", "requestRedirect"] {
        if let Some(path) = f.get(filter).and_then(|r| r.get("path")) {
            check_path_modifier(path, &format!("{at}.{filter}.path"), out);
        }
    }
}

/// The ExternalAuth filter at `at`: protocol HTTP to a Service of the
/// namespace; its path a clean absolute path; its header lists header
/// names, the response ones none the proxy frames the request with.
/// protocol GRPC (Envoy's ext_authz) and a forwarded body are not served.
fn check_external_auth(auth: &Value, at: &str, own: &str, out: &mut Vec<Violation>) {
    match text(auth, "protocol") {
        Some("HTTP") => {}
        Some("GRPC") => out.push(Violation::new(
            format!("{at}.protocol"),
            "GRPC (Envoy's ext_authz) is not served: teapot asks an HTTP authentication service (protocol HTTP)",
        )),
        _ => out.push(Violation::new(
            format!("{at}.protocol"),
            "the protocol is HTTP (GRPC is not served)",
        )),
    }
    if auth.get("grpc").is_some() {
        out.push(Violation::new(
            format!("{at}.grpc"),
            "grpc configures protocol GRPC, which is not served",
        ));
    }
    match auth.get("backendRef") {
        Some(b) => check_backend_ref(b, &format!("{at}.backendRef"), own, out),
        None => out.push(Violation::new(
            format!("{at}.backendRef"),
            "the authentication service's Service is required",
        )),
    }
    if let Some(n) = auth
        .get("forwardBody")
        .and_then(|b| b.get("maxSize"))
        .and_then(Value::as_i64)
        && n != 0
    {
        out.push(Violation::new(
            format!("{at}.forwardBody.maxSize"),
            format!("{n}: the request body is not sent to the authentication service (leave it unset or 0)"),
        ));
    }
    let Some(http) = auth.get("http") else {
        return;
    };
    if let Some(path) = http.get("path") {
        let field = format!("{at}.http.path");
        match path.as_str() {
            Some(p) => {
                if let Err(e) = check_path(p) {
                    out.push(Violation::new(field, format!("{}: {e}", quote(p))));
                }
            }
            None => out.push(Violation::new(field, "a path is a string")),
        }
    }
    for (i, name) in items(http, "allowedHeaders") {
        check_header_name(name, format!("{at}.http.allowedHeaders[{i}]"), false, out);
    }
    for (i, name) in items(http, "allowedResponseHeaders") {
        // Set on the request to the backend as a modifier's edit is: never
        // a framing, hop-by-hop or forwarding field.
        let field = format!("{at}.http.allowedResponseHeaders[{i}]");
        check_header_name(name, field.clone(), true, out);
        check_edited_header(name, true, field, out);
    }
}

/// A rule's `sessionPersistence` at `at`: type Cookie (Header is not
/// served), a Session cookie without absoluteTimeout (only a Permanent
/// one, whose Max-Age it is: teapot keeps no session state), and a
/// cookie name and path the Set-Cookie field can carry.
fn check_session_persistence(sp: &Value, at: &str, out: &mut Vec<Violation>) {
    if text(sp, "type") == Some("Header") || sp.get("header").is_some() {
        out.push(Violation::new(
            format!("{at}.type"),
            "Header is not served: teapot keeps sessions with a cookie (type Cookie)",
        ));
    }
    let cookie = sp.get("cookie");
    let permanent = cookie.and_then(|c| text(c, "lifetimeType")) == Some("Permanent");
    match (permanent, sp.get("absoluteTimeout")) {
        (true, None) => out.push(Violation::new(
            format!("{at}.absoluteTimeout"),
            "required with cookie.lifetimeType Permanent (the cookie's Max-Age)",
        )),
        (false, Some(_)) => out.push(Violation::new(
            format!("{at}.absoluteTimeout"),
            "not served with cookie.lifetimeType Session: teapot keeps no session state; use lifetimeType Permanent (the cookie's Max-Age)",
        )),
        _ => {}
    }
    if sp.get("idleTimeout").is_some() {
        out.push(Violation::new(
            format!("{at}.idleTimeout"),
            "not served: teapot keeps no session state to see a session idle",
        ));
    }
    let Some(cookie) = cookie else { return };
    if let Some(name) = cookie.get("name") {
        let ok = name
            .as_str()
            .is_some_and(|n| n.len() <= 256 && header_token(n));
        if !ok {
            out.push(Violation::new(
                format!("{at}.cookie.name"),
                "a cookie name is an HTTP token of at most 256 characters",
            ));
        }
    }
    if let Some(path) = cookie.get("path") {
        let ok = path.as_str().is_some_and(|p| {
            p.starts_with('/')
                && p.len() <= 1024
                && !p.bytes().any(|b| b == b';' || b.is_ascii_control())
        });
        if !ok {
            out.push(Violation::new(
                format!("{at}.cookie.path"),
                "a cookie path is absolute, at most 1024 characters, without ';'",
            ));
        }
    }
}

/// The CORS filter's lists: what the fleet would put in response fields
/// (origins, methods, header names), refused here rather than served as
/// a rule the proxy marks invalid.
fn check_cors(cors: &Value, at: &str, out: &mut Vec<Violation>) {
    for (i, o) in items(cors, "allowOrigins") {
        let field = format!("{at}.allowOrigins[{i}]");
        match o.as_str() {
            Some(o) if crate::annotations::gateway_origin_ok(&o.to_ascii_lowercase()) => {}
            _ => out.push(Violation::new(
                field,
                "an origin is \"*\" or scheme://host[:port], the host possibly \"*\" or starting with \"*.\"",
            )),
        }
    }
    for list in ["allowMethods", "allowHeaders", "exposeHeaders"] {
        for (i, n) in items(cors, list) {
            let token = n
                .as_str()
                .is_some_and(|n| n.len() <= 256 && header_token(n));
            if !token {
                out.push(Violation::new(
                    format!("{at}.{list}[{i}]"),
                    "a method or header name is an HTTP token (or \"*\")",
                ));
            }
        }
    }
}

/// An HTTPRoute path match: Exact and PathPrefix values of the strict
/// path class Ingress paths have (RegularExpression values are checked
/// with every other pattern of the route: `regexes::check_regexes`).
fn check_path_match(path: &Value, at: &str, out: &mut Vec<Violation>) {
    let ty = text(path, "type").unwrap_or("PathPrefix");
    let Some(value) = text(path, "value") else {
        return;
    };
    match ty {
        "Exact" | "PathPrefix" => {
            if let Err(e) = check_path(value) {
                out.push(Violation::new(format!("{at}.value"), e));
            }
        }
        // Compiled to a bounded automaton, or refused on this field, with
        // the route's other patterns (`regexes::check_regexes`).
        "RegularExpression" => {}
        other => out.push(Violation::new(
            format!("{at}.type"),
            format!(
                "{} is not Exact, PathPrefix or RegularExpression",
                quote(other)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{ExistingObjects, check_object};
    use super::*;

    fn gateway(spec: &str) -> Gateway {
        yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: shop, namespace: {NS}}}\nspec:\n{spec}"
        ))
    }

    fn gw(spec: &str) -> Vec<String> {
        let f = Fixture::new();
        fields(&check_gateway(&f.ctx(), NS, &gateway(spec)))
    }

    fn route(kind: &str, spec: &str) -> Vec<String> {
        let f = Fixture::new();
        let text = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: {kind}\nmetadata: {{name: r, namespace: {NS}}}\nspec:\n{spec}"
        );
        let value: Value = yaml(&text);
        let c = check_object(&f.ctx(), NS, &value);
        fields(&c.violations)
    }

    const LISTENERS: &str = "  gatewayClassName: teapot\n  listeners:\n  - {name: http, protocol: HTTP, port: 80, hostname: \"*.acme.lb.example.net\"}\n  - name: https\n    protocol: HTTPS\n    port: 443\n    hostname: shop.example.com\n    tls: {mode: Terminate, certificateRefs: [{name: shop-tls}]}\n  - {name: db, protocol: TCP, port: 5432}\n  - {name: dns, protocol: UDP, port: 53}\n  - {name: sni, protocol: TLS, port: 8443, tls: {mode: Passthrough}}\n";

    #[test]
    fn a_good_gateway() {
        assert_eq!(gw(LISTENERS), Vec::<String>::new());
    }

    #[test]
    fn class_addresses_and_infrastructure_are_refused() {
        let spec = "  gatewayClassName: nginx\n  addresses: [{type: Hostname, value: gw.example.com}, {value: 10.2.0.7}]\n  infrastructure: {parametersRef: {group: \"\", kind: ConfigMap, name: x}}\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n";
        assert_eq!(
            gw(spec),
            [
                "spec.gatewayClassName",
                "spec.addresses",
                "spec.addresses[0].type",
                "spec.addresses[1].value",
                "spec.infrastructure"
            ]
        );
    }

    /// A Gateway with its own address: `spec.addresses` asks for any of
    /// the pool's, never a named one; HTTP and HTTPS on any port.
    #[test]
    fn a_gateway_with_its_own_address_takes_any_port() {
        let asked = "  gatewayClassName: teapot\n  addresses: [{type: IPAddress, value: \"\"}]\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n";
        assert_eq!(gw(asked), Vec::<String>::new());
        let alt = "  gatewayClassName: teapot\n  listeners: [{name: alt, protocol: HTTP, port: 8080}, {name: tls, protocol: HTTPS, port: 8443, tls: {certificateRefs: [{name: shop-tls}]}}]\n";
        assert_eq!(gw(alt), Vec::<String>::new());
        // Another tenant's VIP is not for the naming.
        let bad = "  gatewayClassName: teapot\n  addresses: [{value: 10.2.0.7}]\n  listeners: [{name: alt, protocol: HTTP, port: 0}]\n";
        assert_eq!(
            gw(bad),
            ["spec.addresses[0].value", "spec.listeners[0].port"]
        );
    }

    #[test]
    fn listener_protocols_ports_and_tls() {
        let spec = "  gatewayClassName: teapot\n  listeners:\n  - {name: a, protocol: HTTP, port: 0}\n  - {name: b, protocol: HTTPS, port: 443}\n  - name: c\n    protocol: HTTPS\n    port: 443\n    tls: {mode: Passthrough, certificateRefs: [{name: x, namespace: tenant-globex}, {kind: ConfigMap, name: y}]}\n  - {name: d, protocol: TLS, port: 9443, tls: {mode: Terminate, certificateRefs: [{name: z}]}}\n  - {name: e, protocol: SCTP, port: 9}\n  - {name: f, protocol: TCP, port: 0}\n";
        assert_eq!(
            gw(spec),
            [
                "spec.listeners[0].port",
                "spec.listeners[1].tls",
                "spec.listeners[2].tls.mode",
                "spec.listeners[2].tls.certificateRefs[0].namespace",
                "spec.listeners[2].tls.certificateRefs[1].kind",
                "spec.listeners[4].protocol",
                "spec.listeners[5].port",
            ]
        );
    }

    /// A TLS listener of mode Terminate (the API's default mode) is served
    /// by the L4 plane with its certificate: its `certificateRefs` are
    /// held to an HTTPS listener's rules, Secrets of the own namespace.
    #[test]
    fn a_tls_listener_terminates_with_secrets_of_the_namespace() {
        let own = format!(
            "  gatewayClassName: teapot\n  listeners:\n  - {{name: t, protocol: TLS, port: 9443, hostname: db.acme.lb.example.net, tls: {{mode: Terminate, certificateRefs: [{{name: db-tls}}, {{group: \"\", kind: Secret, name: db-ec, namespace: {NS}}}]}}}}\n  - {{name: d, protocol: TLS, port: 9443, hostname: mq.acme.lb.example.net, tls: {{certificateRefs: [{{name: mq-tls}}]}}}}\n  - {{name: p, protocol: TLS, port: 9443, hostname: pg.acme.lb.example.net, tls: {{mode: Passthrough}}}}\n"
        );
        assert_eq!(gw(&own), Vec::<String>::new());
        let other = "  gatewayClassName: teapot\n  listeners:\n  - {name: t, protocol: TLS, port: 9443, tls: {mode: Terminate, certificateRefs: [{name: db-tls, namespace: tenant-globex}, {kind: ConfigMap, name: y}, {group: example.com, name: z}], options: {a: b}}}\n  - {name: n, protocol: TLS, port: 9444, tls: {mode: Terminate}}\n  - {name: m, protocol: TLS, port: 9445}\n  - {name: p, protocol: TLS, port: 9446, tls: {mode: Passthrough, certificateRefs: [{name: db-tls}]}}\n";
        assert_eq!(
            gw(other),
            [
                "spec.listeners[0].tls.options",
                "spec.listeners[0].tls.certificateRefs[0].namespace",
                "spec.listeners[0].tls.certificateRefs[1].kind",
                "spec.listeners[0].tls.certificateRefs[2].group",
                "spec.listeners[1].tls.certificateRefs",
                "spec.listeners[2].tls",
                "spec.listeners[3].tls.certificateRefs",
            ]
        );
        let f = Fixture::new();
        let v = check_gateway(&f.ctx(), NS, &gateway(other));
        let cross = v
            .iter()
            .find(|v| v.field == "spec.listeners[0].tls.certificateRefs[0].namespace")
            .unwrap();
        assert!(
            cross.message.contains("tenant-globex") && cross.message.contains("your own Secrets"),
            "{}",
            cross.message
        );
    }

    #[test]
    fn a_backend_client_certificate_is_a_secret_of_the_namespace() {
        let own =
            format!("{LISTENERS}  tls: {{backend: {{clientCertificateRef: {{name: mtls}}}}}}\n");
        assert_eq!(gw(&own), Vec::<String>::new());
        let explicit = format!(
            "{LISTENERS}  tls: {{backend: {{clientCertificateRef: {{group: \"\", kind: Secret, name: mtls, namespace: {NS}}}}}}}\n"
        );
        assert_eq!(gw(&explicit), Vec::<String>::new());
        let other = format!(
            "{LISTENERS}  tls:\n    backend: {{clientCertificateRef: {{group: example.com, kind: Vault, name: x, namespace: tenant-globex}}}}\n    frontend: {{default: {{validation: {{caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: ca}}]}}}}}}\n"
        );
        assert_eq!(
            gw(&other),
            [
                "spec.tls.backend.clientCertificateRef.group",
                "spec.tls.backend.clientCertificateRef.kind",
                "spec.tls.backend.clientCertificateRef.namespace",
            ]
        );
    }

    #[test]
    fn frontend_validation_takes_ca_bundles_of_the_namespace() {
        let own = format!(
            "{LISTENERS}  tls:\n    frontend:\n      default: {{validation: {{caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: ca}}]}}}}\n      perPort: [{{port: 443, tls: {{validation: {{mode: AllowInsecureFallback, caCertificateRefs: [{{group: \"\", kind: Secret, name: ca, namespace: {NS}}}]}}}}}}]\n"
        );
        assert_eq!(gw(&own), Vec::<String>::new());
        let other = format!(
            "{LISTENERS}  tls:\n    frontend:\n      default: {{validation: {{caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: ca, namespace: tenant-globex}}, {{group: example.com, kind: Vault, name: x}}]}}}}\n"
        );
        assert_eq!(
            gw(&other),
            [
                "spec.tls.frontend.default.validation.caCertificateRefs[0].namespace",
                "spec.tls.frontend.default.validation.caCertificateRefs[1].kind",
            ]
        );
        let refs: Vec<String> = (0..MAX_FRONTEND_CA_REFS + 1)
            .map(|i| format!("{{group: \"\", kind: ConfigMap, name: ca{i}}}"))
            .collect();
        let many = format!(
            "{LISTENERS}  tls:\n    frontend:\n      default: {{validation: {{caCertificateRefs: [{}]}}}}\n",
            refs.join(", ")
        );
        assert_eq!(
            gw(&many),
            ["spec.tls.frontend.default.validation.caCertificateRefs"]
        );
    }

    #[test]
    fn listener_hostnames_follow_the_host_rules() {
        let spec = "  gatewayClassName: teapot\n  listeners:\n  - {name: a, protocol: HTTP, port: 80, hostname: web.globex.lb.example.net}\n  - {name: b, protocol: HTTP, port: 80, hostname: www.globex.com}\n  - {name: c, protocol: HTTP, port: 80, hostname: \"*.example.com\"}\n  - {name: d, protocol: HTTP, port: 80, hostname: grafana.ops.example.org}\n  - {name: e, protocol: HTTP, port: 80, hostname: \"*.shop.example.com\"}\n";
        // b: another tenant's unproven custom claim blocks nobody (DNS
        // proof decides, as for Ingress hosts); e: within acme's grant, but
        // a Gateway API wildcard covers eu.api.shop.example.com two labels
        // down, which another holder has (an Ingress wildcard would not).
        let mut f = Fixture::new();
        f.holdings.insert(
            crate::admission::Holder::Operator {
                namespace: "monitoring".into(),
            },
            &HostPattern::parse("eu.api.shop.example.com").unwrap(),
        );
        let ingress_rules = check_host(&f.ctx(), "h", "*.shop.example.com", &mut Vec::new());
        assert!(ingress_rules.is_some(), "one label down is free");
        assert_eq!(
            fields(&check_gateway(&f.ctx(), NS, &gateway(spec))),
            [
                "spec.listeners[0].hostname",
                "spec.listeners[2].hostname",
                "spec.listeners[3].hostname",
                "spec.listeners[4].hostname",
            ]
        );
    }

    #[test]
    fn routes_attach_only_from_the_same_namespace() {
        let spec = "  gatewayClassName: teapot\n  listeners:\n  - name: http\n    protocol: HTTP\n    port: 80\n    allowedRoutes:\n      namespaces: {from: All}\n      kinds: [{kind: HTTPRoute}, {group: example.com, kind: Funnel}]\n  - name: b\n    protocol: HTTP\n    port: 80\n    allowedRoutes: {namespaces: {from: Selector, selector: {matchLabels: {a: b}}}}\n";
        assert_eq!(
            gw(spec),
            [
                "spec.listeners[0].allowedRoutes.namespaces.from",
                "spec.listeners[0].allowedRoutes.kinds[1]",
                "spec.listeners[1].allowedRoutes.namespaces.from",
                "spec.listeners[1].allowedRoutes.namespaces.selector",
            ]
        );
    }

    #[test]
    fn l4_listeners_count_against_the_listener_limit() {
        let mut f = Fixture::new();
        f.max_listeners(2);
        let ctx = f.ctx().with_existing(ExistingObjects {
            lb_listeners: 1,
            ..ExistingObjects::default()
        });
        let g = gateway(LISTENERS);
        assert_eq!(fields(&check_gateway(&ctx, NS, &g)), ["spec.listeners"]);
    }

    #[test]
    fn a_good_http_route() {
        let spec = "  parentRefs: [{name: shop, sectionName: http}]\n  hostnames: [web.acme.lb.example.net, \"*.shop.example.com\"]\n  rules:\n  - matches: [{path: {type: PathPrefix, value: /api}, headers: [{name: x-v, value: \"2\"}]}]\n    filters:\n    - {type: RequestMirror, requestMirror: {backendRef: {name: shadow, port: 8080}}}\n    - {type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: x-a, value: b}]}}\n    backendRefs: [{name: web, port: 80, weight: 90}, {name: web-canary, port: 80, weight: 10, namespace: tenant-acme}]\n";
        assert_eq!(route("HTTPRoute", spec), Vec::<String>::new());
    }

    #[test]
    fn route_references_stay_in_the_namespace() {
        let spec = "  parentRefs: [{name: shop, namespace: tenant-globex}, {kind: Service, group: \"\", name: web}]\n  hostnames: [web.globex.lb.example.net]\n  rules:\n  - matches: [{path: {type: PathPrefix, value: \"/%2e%2e/admin\"}}]\n    filters:\n    - {type: RequestMirror, requestMirror: {backendRef: {name: spy, namespace: tenant-globex, port: 80}}}\n    - {type: ExtensionRef, extensionRef: {group: example.com, kind: Lua, name: x}}\n    backendRefs:\n    - {name: web, namespace: tenant-globex, port: 80}\n    - {group: example.com, kind: Bucket, name: b, port: 80}\n    - {name: web}\n";
        assert_eq!(
            route("HTTPRoute", spec),
            [
                "spec.parentRefs[0].namespace",
                "spec.parentRefs[1]",
                "spec.hostnames[0]",
                "spec.rules[0].matches[0].path.value",
                "spec.rules[0].filters[0].requestMirror.backendRef.namespace",
                "spec.rules[0].filters[1].extensionRef",
                "spec.rules[0].backendRefs[0].namespace",
                "spec.rules[0].backendRefs[1].kind",
                "spec.rules[0].backendRefs[2].port",
            ]
        );
    }

    #[test]
    fn header_modifiers_leave_framing_to_the_proxy() {
        let spec = "  parentRefs: [{name: shop}]\n  rules:\n  - matches: [{headers: [{name: \"bad name\", value: x}, {name: Host, value: a}]}]\n    filters:\n    - type: RequestHeaderModifier\n      requestHeaderModifier:\n        set: [{name: Transfer-Encoding, value: chunked}, {name: X-Ok, value: y}]\n        add: [{name: content-length, value: \"0\"}]\n        remove: [Connection, X-Debug]\n    - type: ResponseHeaderModifier\n      responseHeaderModifier: {set: [{name: Strict-Transport-Security, value: max-age=60}]}\n    backendRefs: [{name: web, port: 80}]\n";
        assert_eq!(
            route("HTTPRoute", spec),
            [
                "spec.rules[0].matches[0].headers[0].name",
                "spec.rules[0].filters[0].requestHeaderModifier.set[0].name",
                "spec.rules[0].filters[0].requestHeaderModifier.add[0].name",
                "spec.rules[0].filters[0].requestHeaderModifier.remove[0]",
            ]
        );
    }

    /// A route with one header edit or path change: the violations'
    /// fields and messages.
    fn one_filter(filter: &str) -> Vec<(String, String)> {
        let spec = format!(
            "  parentRefs: [{{name: shop}}]\n  rules:\n  - filters:\n    - {{type: RequestHeaderModifier, requestHeaderModifier: {{set: [{{name: X-Ok, value: fine}}]}}}}\n    - {filter}\n    backendRefs: [{{name: web, port: 80}}]\n"
        );
        let f = Fixture::new();
        let route: Value = yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: web, namespace: {NS}}}\nspec:\n{spec}"
        ));
        let meta: ObjectMeta = serde_json::from_value(route["metadata"].clone()).unwrap();
        check_route(&f.ctx(), NS, ObjectKind::HttpRoute, &meta, &route)
            .into_iter()
            .map(|v| (v.field, v.message))
            .collect()
    }

    fn refused(filter: &str, field: &str, says: &str) {
        let v = one_filter(filter);
        assert_eq!(v.len(), 1, "{filter}: {v:?}");
        assert_eq!(v[0].0, field, "{filter}");
        assert!(v[0].1.contains(says), "{filter}: {}", v[0].1);
    }

    #[test]
    fn external_auth_over_http_is_admitted_with_field_named_errors() {
        let good = one_filter(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {path: /check, allowedHeaders: [X-Tenant], allowedResponseHeaders: [X-User]}, forwardBody: {maxSize: 0}}}",
        );
        assert!(good.is_empty(), "{good:?}");
        let at = "spec.rules[0].filters[1].externalAuth";
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: GRPC, backendRef: {name: auth, port: 9000}}}",
            &format!("{at}.protocol"),
            "GRPC (Envoy's ext_authz) is not served",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, port: 8080}, forwardBody: {maxSize: 1024}}}",
            &format!("{at}.forwardBody.maxSize"),
            "not sent to the authentication service",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, namespace: other, port: 8080}}}",
            &format!("{at}.backendRef.namespace"),
            "only Services of your own namespace",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth}}}",
            &format!("{at}.backendRef.port"),
            "needs its port",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {path: /a/../b}}}",
            &format!("{at}.http.path"),
            "/a/../b",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {allowedHeaders: [\"a b\"]}}}",
            &format!("{at}.http.allowedHeaders[0]"),
            "not an HTTP header name",
        );
        refused(
            "{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {allowedResponseHeaders: [Content-Length]}}}",
            &format!("{at}.http.allowedResponseHeaders[0]"),
            "frames the message",
        );
        refused("{type: ExternalAuth}", at, "needs its externalAuth");
    }

    #[test]
    fn session_persistence_is_admitted_by_cookie_only() {
        let rule = |sp: &str| {
            route(
                "HTTPRoute",
                &format!(
                    "  parentRefs: [{{name: shop}}]\n  rules:\n  - sessionPersistence: {sp}\n    backendRefs: [{{name: web, port: 80}}]\n"
                ),
            )
        };
        let at = "spec.rules[0].sessionPersistence";
        assert!(rule("{cookie: {name: pin}}").is_empty());
        assert!(
            rule("{type: Cookie, absoluteTimeout: 1h, cookie: {lifetimeType: Permanent, path: /cart}}")
                .is_empty()
        );
        assert_eq!(
            rule("{type: Header, header: {name: x-session}}"),
            [format!("{at}.type")]
        );
        assert_eq!(
            rule("{absoluteTimeout: 1h, cookie: {lifetimeType: Session}}"),
            [format!("{at}.absoluteTimeout")]
        );
        assert_eq!(
            rule("{cookie: {lifetimeType: Permanent}}"),
            [format!("{at}.absoluteTimeout")]
        );
        assert_eq!(
            rule("{cookie: {name: \"a;b\", path: \"/a;Secure\"}}"),
            [format!("{at}.cookie.name"), format!("{at}.cookie.path")]
        );
    }

    #[test]
    fn cors_lists_are_origins_and_tokens() {
        refused(
            "{type: CORS, cors: {allowOrigins: [\"https://*.a.example\", \"a.example\"]}}",
            "spec.rules[0].filters[1].cors.allowOrigins[1]",
            "scheme://host",
        );
        refused(
            "{type: CORS, cors: {allowOrigins: [\"*\"], allowHeaders: [\"x-a\", \"x b\"]}}",
            "spec.rules[0].filters[1].cors.allowHeaders[1]",
            "HTTP token",
        );
        assert!(one_filter("{type: CORS, cors: {allowOrigins: [\"https://*\", \"http://a.example:8080\", \"https://*.b.example\"], allowMethods: [\"*\"], exposeHeaders: [X-Total]}}").is_empty());
    }

    #[test]
    fn header_values_the_engines_would_drop_are_refused() {
        let long = "v".repeat(MAX_HEADER_VALUE_LEN + 1);
        let cases = [
            (
                &*format!(
                    "{{type: ResponseHeaderModifier, responseHeaderModifier: {{add: [{{name: X-A, value: {long}}}]}}}}"
                ),
                "spec.rules[0].filters[1].responseHeaderModifier.add[0].value",
                "more than 4096",
            ),
            (
                "{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: [5]}]}}",
                "spec.rules[0].filters[1].requestHeaderModifier.set[0].value",
                "is a string",
            ),
        ];
        for (filter, field, says) in cases {
            refused(filter, field, says);
        }
        assert!(one_filter("{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: \"b c é\"}]}}").is_empty());
        // CR, LF, NUL and DEL: refused at the value's own field by the
        // string rule every object passes (check_object), once.
        for (value, at) in [
            (
                "\"a\\r\\nX-Injected: 1\"",
                "requestHeaderModifier.set[0].value",
            ),
            ("\"a\\u0000b\"", "requestHeaderModifier.add[0].value"),
            ("\"a\\u007fb\"", "responseHeaderModifier.set[0].value"),
        ] {
            let (modifier, op) = at.split_once('.').unwrap();
            let op = op.split_once('[').unwrap().0;
            let filter = format!(
                "      - type: {}\n        {modifier}: {{{op}: [{{name: X-A, value: {value}}}]}}\n",
                if modifier.starts_with("request") {
                    "RequestHeaderModifier"
                } else {
                    "ResponseHeaderModifier"
                }
            );
            let spec = format!(
                "  parentRefs: [{{name: shop}}]\n  rules:\n  - filters:\n{filter}    backendRefs: [{{name: web, port: 80}}]\n"
            );
            assert_eq!(
                route("HTTPRoute", &spec),
                [format!("spec.rules[0].filters[0].{at}")],
                "{value}"
            );
        }
    }

    #[test]
    fn header_names_the_proxy_owns_are_refused() {
        let long = "x".repeat(MAX_HEADER_NAME_LEN + 1);
        let cases = [
            (
                "{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Forwarded-For, value: 1.2.3.4}]}}",
                "spec.rules[0].filters[1].requestHeaderModifier.set[0].name",
                "set by the proxy",
            ),
            (
                "{type: RequestHeaderModifier, requestHeaderModifier: {add: [{name: x-request-id, value: abc}]}}",
                "spec.rules[0].filters[1].requestHeaderModifier.add[0].name",
                "set by the proxy",
            ),
            (
                "{type: RequestHeaderModifier, requestHeaderModifier: {remove: [Forwarded]}}",
                "spec.rules[0].filters[1].requestHeaderModifier.remove[0]",
                "set by the proxy",
            ),
            (
                "{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: Proxy-Authorization, value: x}]}}",
                "spec.rules[0].filters[1].requestHeaderModifier.set[0].name",
                "hop-by-hop",
            ),
            (
                "{type: ResponseHeaderModifier, responseHeaderModifier: {remove: [Proxy-Authenticate]}}",
                "spec.rules[0].filters[1].responseHeaderModifier.remove[0]",
                "hop-by-hop",
            ),
            (
                &format!(
                    "{{type: ResponseHeaderModifier, responseHeaderModifier: {{set: [{{name: {long}, value: x}}]}}}}"
                ),
                "spec.rules[0].filters[1].responseHeaderModifier.set[0].name",
                "more than 256",
            ),
        ];
        for (filter, field, says) in cases {
            refused(filter, field, says);
        }
        // Only requests carry the forwarding fields; X-Forwarded-Prefix is
        // not one teapot sets.
        assert!(one_filter("{type: ResponseHeaderModifier, responseHeaderModifier: {set: [{name: X-Request-Id, value: a}]}}").is_empty());
        assert!(one_filter("{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-Forwarded-Prefix, value: /api}]}}").is_empty());
    }

    #[test]
    fn rewrite_and_redirect_paths_are_absolute_clean_paths() {
        let cases = [
            (
                "{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: relative/x}}}",
                "spec.rules[0].filters[1].urlRewrite.path.replaceFullPath",
                "start with '/'",
            ),
            (
                "{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: \"\"}}}",
                "spec.rules[0].filters[1].urlRewrite.path.replaceFullPath",
                "start with '/'",
            ),
            (
                "{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: \"/a?b=1\"}}}",
                "spec.rules[0].filters[1].urlRewrite.path.replacePrefixMatch",
                "query",
            ),
            (
                "{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: \"/a#frag\"}}}",
                "spec.rules[0].filters[1].urlRewrite.path.replacePrefixMatch",
                "query",
            ),
            (
                "{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /a/../admin}}}",
                "spec.rules[0].filters[1].requestRedirect.path.replaceFullPath",
                "segment",
            ),
            (
                "{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: \"/a\\r\\nLocation: x\"}}}",
                "spec.rules[0].filters[1].requestRedirect.path.replacePrefixMatch",
                "not allowed",
            ),
            (
                "{type: URLRewrite, urlRewrite: {path: {type: ReplaceFullPath, replaceFullPath: /a%2F..}}}",
                "spec.rules[0].filters[1].urlRewrite.path.replaceFullPath",
                "escape",
            ),
        ];
        for (filter, field, says) in cases {
            refused(filter, field, says);
        }
        for fine in [
            "{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: \"\"}}}",
            "{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /}}}",
            "{type: RequestRedirect, requestRedirect: {path: {type: ReplaceFullPath, replaceFullPath: /one/two}}}",
        ] {
            assert!(one_filter(fine).is_empty(), "{fine}");
        }
    }

    #[test]
    fn l4_routes_and_default_gateways() {
        let spec = "  useDefaultGateways: All\n  parentRefs: [{name: shop, sectionName: db}]\n  rules: [{backendRefs: [{name: db, port: 5432}, {name: db, namespace: kube-system, port: 53}]}]\n";
        assert_eq!(
            route("TCPRoute", spec),
            [
                "spec.useDefaultGateways",
                "spec.rules[0].backendRefs[1].namespace"
            ]
        );
        let spec = "  parentRefs: [{name: shop, sectionName: sni}]\n  hostnames: [db.acme.lb.example.net]\n  rules: [{backendRefs: [{name: db, port: 5432}]}]\n";
        assert_eq!(route("TLSRoute", spec), Vec::<String>::new());
        let spec =
            "  parentRefs: [{name: shop}]\n  rules: [{backendRefs: [{name: dns, port: 53}]}]\n";
        assert_eq!(route("UDPRoute", spec), Vec::<String>::new());
        let spec = "  parentRefs: [{name: shop}]\n  hostnames: [grpc.acme.lb.example.net]\n  rules: [{matches: [{method: {service: a.B, method: C}}], backendRefs: [{name: grpc, port: 9000}]}]\n";
        assert_eq!(route("GRPCRoute", spec), Vec::<String>::new());
    }

    #[test]
    fn reference_grants_name_only_the_own_namespace() {
        let f = Fixture::new();
        let grant = |spec: &str| -> ReferenceGrant {
            yaml(&format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: ReferenceGrant\nmetadata: {{name: g, namespace: {NS}}}\nspec:\n{spec}"
            ))
        };
        let ok = grant(&format!(
            "  from: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: {NS}}}]\n  to: [{{group: \"\", kind: Service}}]\n"
        ));
        assert!(check_reference_grant(&f.ctx(), NS, &ok).is_empty());
        let bad = grant(
            "  from: [{group: gateway.networking.k8s.io, kind: HTTPRoute, namespace: tenant-globex}, {group: \"\", kind: Pod, namespace: tenant-acme}]\n  to: [{group: \"\", kind: ConfigMap}]\n",
        );
        assert_eq!(
            fields(&check_reference_grant(&f.ctx(), NS, &bad)),
            [
                "spec.from[0].namespace",
                "spec.from[1].kind",
                "spec.to[0].kind"
            ]
        );
    }

    /// A BackendTLSPolicy's references have no namespace: a tenant's
    /// names its own Services and ConfigMaps, and one written into another
    /// tenant's namespace is refused like any object there. Kinds teapot
    /// does not read are refused with their field.
    #[test]
    fn backend_tls_policies_name_only_own_services_and_config_maps() {
        let f = Fixture::new();
        let policy = |namespace: &str, spec: &str| -> Value {
            yaml(&format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: p, namespace: {namespace}}}\nspec:\n{spec}"
            ))
        };
        let ok = "  targetRefs: [{group: \"\", kind: Service, name: web, sectionName: https}]\n  validation:\n    hostname: web.internal\n    caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]\n";
        let c = check_object(&f.ctx(), NS, &policy(NS, ok));
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        // Into another tenant's namespace: refused.
        let c = check_object(&f.ctx(), "tenant-globex", &policy("tenant-globex", ok));
        assert_eq!(fields(&c.violations), ["metadata.namespace"]);
        // A namespace field on a reference is not in the schema.
        let other = ok.replace("name: web,", "name: web, namespace: tenant-globex,");
        let c = check_object(&f.ctx(), NS, &policy(NS, &other));
        assert_eq!(fields(&c.violations), ["spec.targetRefs[0].namespace"]);
        let bad = "  targetRefs: [{group: \"\", kind: Pod, name: web}]\n  validation:\n    hostname: web.internal\n    caCertificateRefs: [{group: \"\", kind: Secret, name: ca}]\n    wellKnownCACertificates: Mozilla\n  options: {a: b}\n";
        let c = check_object(&f.ctx(), NS, &policy(NS, bad));
        assert_eq!(
            fields(&c.violations),
            [
                "spec.targetRefs[0].kind",
                "spec.validation.caCertificateRefs[0].kind",
                "spec.validation.wellKnownCACertificates",
                "spec.options"
            ]
        );
        assert!(
            c.violations[1]
                .message
                .contains("ConfigMap of your namespace (tenant-acme)"),
            "{}",
            c.violations[1].message
        );
    }

    /// A tenant's ConfigMap holds a PEM ca.crt and nothing else.
    #[test]
    fn config_maps_hold_only_a_ca_bundle() {
        let f = Fixture::new();
        let ca: String = teapot_testkit::certs::TestCa::new("backend CA")
            .cert_pem()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        let config_map = |data: &str| -> Value {
            yaml(&format!(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: ca, namespace: {NS}}}\n{data}"
            ))
        };
        let ok = config_map(&format!("data:\n  ca.crt: |\n{ca}"));
        let c = check_object(&f.ctx(), NS, &ok);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        let c = check_object(
            &f.ctx(),
            NS,
            &config_map("data: {app.conf: x, ca.crt: nope}\n"),
        );
        assert_eq!(
            fields(&c.violations),
            ["data[\"app.conf\"]", "data[\"ca.crt\"]"]
        );
        let c = check_object(&f.ctx(), NS, &config_map("binaryData: {x: eA==}\n"));
        assert_eq!(fields(&c.violations), ["binaryData", "data[\"ca.crt\"]"]);
        // The API server's own, published into every namespace.
        let root: Value = yaml(&format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: kube-root-ca.crt, namespace: {NS}, annotations: {{kubernetes.io/description: x}}}}\ndata:\n  ca.crt: |\n{ca}"
        ));
        let c = check_object(&f.ctx(), NS, &root);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }

    #[test]
    fn gateway_classes_and_other_versions_are_not_tenant_kinds() {
        let f = Fixture::new();
        let class = serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
            "metadata": {"name": "teapot"},
            "spec": {"controllerName": "teapot.dev/gateway-controller"}
        });
        let c = check_object(&f.ctx(), NS, &class);
        assert_eq!(fields(&c.violations), ["kind"]);
        assert!(
            c.violations[0].message.contains("GatewayClass"),
            "{}",
            c.violations[0].message
        );
    }

    #[test]
    fn claimed_hostnames_hold_like_ingress_hosts() {
        let route: Value =
            yaml("spec:\n  hostnames: [\"*.apps.example.com\", Bad_Host, shop.example.com]\n");
        let hosts = gateway_api_hostnames(ObjectKind::HttpRoute, &route);
        assert_eq!(hosts.len(), 2);
        let gateway: Value = yaml(
            "spec:\n  listeners: [{name: a, hostname: \"*.acme.lb.example.net\"}, {name: b}]\n",
        );
        assert_eq!(
            gateway_api_hostnames(ObjectKind::Gateway, &gateway).len(),
            1
        );
        assert!(gateway_api_hostnames(ObjectKind::TcpRoute, &route).is_empty());
        // Held by globex, the subtree blocks acme two labels down.
        let mut f = Fixture::new();
        for h in &hosts {
            f.holdings
                .insert_gateway_host(crate::admission::Holder::Tenant("globex".into()), h);
        }
        let mut out = Vec::new();
        assert!(check_gateway_host(&f.ctx(), "h", "a.b.apps.example.com", &mut out).is_none());
        assert!(out[0].message.contains("another tenant"), "{}", out[0]);
    }

    #[test]
    fn custom_gateway_hostnames_are_reported_as_pending() {
        let f = Fixture::new();
        let value: Value = yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: shop}}]\n  hostnames: [www.acme-shop.com, web.acme.lb.example.net]\n"
        ));
        let c = check_object(&f.ctx(), NS, &value);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert_eq!(c.warnings.len(), 1);
        assert!(
            c.warnings[0].contains("CNAME to shop.acme.lb.example.net"),
            "{}",
            c.warnings[0]
        );
    }
}
