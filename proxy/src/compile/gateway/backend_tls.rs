//! Gateway API BackendTLSPolicy (`gateway.networking.k8s.io/v1`): TLS from
//! the proxy to a Service's backends, for the HTTPRoutes (HTTP/1.1 over
//! TLS, ALPN `http/1.1`) and GRPCRoutes (HTTP/2 over TLS, ALPN `h2`) whose
//! backendRefs name that Service port.
//!
//! The settings become the same [`BackendTls`] an Ingress's `proxy-ssl-*`
//! annotations make, so the one TLS client ([`crate::live::upstream_tls`])
//! serves both: its session cache and pool class are shared by every route
//! to the same backend with the same settings.
//!
//! - Which policy: those of the Service's namespace whose `targetRefs`
//!   name the Service (group `""`, kind `Service`) and either the port's
//!   name (`sectionName`) or no section. A policy naming the port is more
//!   specific and wins over one naming the whole Service; among equals the
//!   oldest wins, then namespace/name order (the specification's conflict
//!   rule). The others are `Conflicted` for that port.
//! - Trust anchors: the `ca.crt` of each `caCertificateRefs` ConfigMap in
//!   the policy's namespace (the only kind read: Secrets in a tenant
//!   namespace are `kubernetes.io/tls` pairs), or the proxy host's trust
//!   store for `wellKnownCACertificates: System`. Verification is never
//!   off: a policy whose anchors cannot be read (no such ConfigMap, no
//!   `ca.crt`, no PEM certificate in it, another kind) makes the backend
//!   answer 503, never connected to unverified.
//! - `hostname` is the SNI and, without `subjectAltNames`, the name
//!   verified; with them, one of those (DNS or URI) must be in the
//!   certificate instead.
//! - Status ([`report`]): one `status.ancestors` entry per teapot Gateway a
//!   route to a targeted Service is attached to, with `Accepted` (False
//!   `Conflicted` when another policy wins every port this one names,
//!   `NoValidCACertificate` when no reference is usable) and
//!   `ResolvedRefs` (False `InvalidKind` or `InvalidCACertificateRef`,
//!   naming the reference).
//! - Client certificate: the `spec.tls.backend.clientCertificateRef` of the
//!   Gateways a route names as parents ([`GatewayClientCert`]), a
//!   `kubernetes.io/tls` Secret of the Gateway's namespace (another
//!   namespace's with a ReferenceGrant, for operators' Gateways). Its
//!   backends under a policy present it. The route's rules compile once for
//!   all its parents, so parents presenting different certificates (or one
//!   none) make those backends answer 503, as does a reference that cannot
//!   be used: never connected without the certificate a Gateway asks for.

use std::sync::Arc;

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::ServicePort;
use rustls::sign::CertifiedKey;
use teapot_api::admission::{CA_CERT_KEY, WELL_KNOWN_SYSTEM};
use teapot_api::names::GATEWAY_CONTROLLER_NAME;
use teapot_gateway_api::generated::backend_tls_policies::BackendTlsPolicyValidationSubjectAltNamesType as SanType;
use teapot_gateway_api::generated::backend_tls_policies::{
    BackendTlsPolicyStatus, BackendTlsPolicyStatusAncestors,
    BackendTlsPolicyStatusAncestorsAncestorRef,
};
use teapot_gateway_api::{BackendTlsPolicy, Gateway};
use teapot_model::store::{NsName, NsRef, Store, Stored};

use super::{Reported, condition};
use crate::compile::backends::Resolver;
use crate::compile::upstream::{Protocol, Upstream};
use crate::live::upstream_tls::{BackendTls, SubjectAltName};

/// The client certificate a route's backends under a policy present, or
/// why they answer 503 instead.
pub(super) type ClientCert = Result<Option<Arc<CertifiedKey>>, String>;

/// A Gateway's `spec.tls.backend.clientCertificateRef`, resolved.
#[derive(Clone, Debug)]
pub(super) struct GatewayClientCert {
    /// The Secret named, as `namespace/name`: what parents must agree on.
    pub secret: String,
    /// The key pair, or the Gateway's ResolvedRefs reason and message.
    pub key: Result<Arc<CertifiedKey>, (&'static str, String)>,
}

/// The client certificate `gateway` (`id`) names, if any; `tenant`: its
/// namespace is a tenant's, whose Gateways use their own Secrets only.
pub(super) fn gateway_client_cert(
    store: &Store,
    id: &NsName,
    gateway: &Gateway,
    tenant: bool,
) -> Option<GatewayClientCert> {
    let r = gateway
        .spec
        .tls
        .as_ref()?
        .backend
        .as_ref()?
        .client_certificate_ref
        .as_ref()?;
    let ns = r.namespace.as_deref().unwrap_or(&id.namespace);
    let at = "spec.tls.backend.clientCertificateRef";
    let key = if !r.group.as_deref().unwrap_or("").is_empty()
        || r.kind.as_deref().unwrap_or("Secret") != "Secret"
    {
        Err((
            "InvalidClientCertificateRef",
            format!("{at} {} is not a core Secret", r.name),
        ))
    } else if !crate::compile::attach::gateway_may_use_secret(store, id, tenant, ns, &r.name) {
        Err((
            "RefNotPermitted",
            format!(
                "{at}: no ReferenceGrant lets this Gateway use Secret {ns}/{}",
                r.name
            ),
        ))
    } else {
        match store.secrets.get(&NsRef {
            namespace: ns,
            name: &r.name,
        }) {
            Some(secret) => Ok(secret.object.certificate.key.clone()),
            None => Err((
                "InvalidClientCertificateRef",
                format!(
                    "{at}: Secret {ns}/{} not found or not a usable kubernetes.io/tls Secret (tls.crt and tls.key)",
                    r.name
                ),
            )),
        }
    };
    Some(GatewayClientCert {
        secret: format!("{ns}/{}", r.name),
        key,
    })
}

/// The client certificate of a route whose parent Gateways (teapot's,
/// with their own) are `parents`.
pub(super) fn route_client_cert<'g>(
    parents: impl IntoIterator<Item = (&'g NsName, Option<&'g GatewayClientCert>)>,
) -> ClientCert {
    let mut chosen: Option<(&NsName, Option<&GatewayClientCert>)> = None;
    for (gateway, cert) in parents {
        match chosen {
            None => chosen = Some((gateway, cert)),
            Some((first, seen)) if seen.map(|c| &c.secret) != cert.map(|c| &c.secret) => {
                let named = |c: Option<&GatewayClientCert>| {
                    c.map_or("none".to_string(), |c| format!("Secret {}", c.secret))
                };
                return Err(format!(
                    "the route's Gateways present different backend client certificates (Gateway {first}: {}; Gateway {gateway}: {})",
                    named(seen),
                    named(cert)
                ));
            }
            Some(_) => {}
        }
    }
    match chosen.and_then(|(gateway, cert)| Some((gateway, cert?))) {
        None => Ok(None),
        Some((_, GatewayClientCert { key: Ok(key), .. })) => Ok(Some(key.clone())),
        Some((
            gateway,
            GatewayClientCert {
                key: Err((_, why)), ..
            },
        )) => Err(format!("Gateway {gateway}: {why}")),
    }
}

/// `upstream` (a Service port's) as the BackendTLSPolicy on that port
/// makes the proxy speak to it: unchanged without one, over TLS with one
/// (presenting `client_cert`), answering 503 when the policy or the client
/// certificate cannot be used.
pub(super) fn secured(
    store: &Store,
    resolver: &Resolver<'_>,
    (h2, client_cert): (bool, &ClientCert),
    (namespace, service, port): (&str, &str, &ServicePort),
    upstream: Arc<Upstream>,
) -> Arc<Upstream> {
    let Some((id, policy)) = policy_for(store, namespace, service, port.name.as_deref()) else {
        return upstream;
    };
    let client_cert = match client_cert {
        Ok(key) => key.clone(),
        Err(why) => {
            tracing::warn!(
                policy = %id,
                service = %format_args!("{namespace}/{service}"),
                "backend client certificate cannot be used: {why}; the backend answers 503"
            );
            return Arc::new(upstream.unusable(format!("BackendTLSPolicy {id}: {why}")));
        }
    };
    let settings = match settings(store, id, &policy.object, h2) {
        Ok(settings) => BackendTls {
            client_cert,
            ..settings
        },
        Err(unusable) => {
            tracing::warn!(
                policy = %id,
                service = %format_args!("{namespace}/{service}"),
                "BackendTLSPolicy cannot be used ({}): {}; the backend answers 503",
                unusable.reason,
                unusable.message
            );
            return Arc::new(
                upstream.unusable(format!("BackendTLSPolicy {id}: {}", unusable.message)),
            );
        }
    };
    match resolver.registry().tls(settings) {
        Ok(tls) => Arc::new(upstream.speaking(Protocol::Tls(tls))),
        Err(e) => {
            tracing::warn!(
                policy = %id,
                service = %format_args!("{namespace}/{service}"),
                "BackendTLSPolicy cannot be used: {e}; the backend answers 503"
            );
            Arc::new(upstream.unusable(format!("BackendTLSPolicy {id}: {e}")))
        }
    }
}

/// `upstream` (Service port `port` of `namespace/service`) as a Terminate
/// TLS listener's TLSRoute reaches it: over TLS when a BackendTLSPolicy
/// names the port, no client certificate, refused (no endpoint) when the
/// policy cannot be used, as for HTTP routes.
pub(crate) fn secured_stream(
    store: &Store,
    resolver: &Resolver<'_>,
    (namespace, service, port): (&str, &str, i32),
    upstream: Arc<Upstream>,
) -> Arc<Upstream> {
    let service_port = store
        .services
        .get(&NsName::new(namespace, service))
        .and_then(|s| s.object.spec.as_ref())
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| {
            ports
                .iter()
                .find(|p| p.port == port && p.protocol.as_deref().unwrap_or("TCP") == "TCP")
        });
    match service_port {
        Some(p) => secured(
            store,
            resolver,
            (false, &Ok(None)),
            (namespace, service, p),
            upstream,
        ),
        None => upstream,
    }
}

/// Why a policy cannot be used: a reason of the specification's
/// ResolvedRefs condition and a message naming the field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Unusable {
    pub reason: &'static str,
    pub message: String,
}

/// How a policy names one Service port: not at all, the whole Service, or
/// that port by name (more specific).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Targets {
    Service,
    Port,
}

fn targets(policy: &BackendTlsPolicy, service: &str, port_name: Option<&str>) -> Option<Targets> {
    policy
        .spec
        .target_refs
        .iter()
        .filter(|t| t.group.is_empty() && t.kind == "Service" && t.name == service)
        .filter_map(|t| match t.section_name.as_deref() {
            None | Some("") => Some(Targets::Service),
            Some(section) => (Some(section) == port_name).then_some(Targets::Port),
        })
        .max()
}

/// The policy that applies to a Service port, with the ones it wins
/// over in [`policies_on`].
fn policy_for<'s>(
    store: &'s Store,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Option<(&'s NsName, &'s Stored<BackendTlsPolicy>)> {
    policies_on(store, namespace, service, port_name)
        .into_iter()
        .next()
}

/// The policies naming a Service port, the winner first: a policy naming
/// the port before one naming the whole Service, then the oldest, then
/// namespace/name.
pub(super) fn policies_on<'s>(
    store: &'s Store,
    namespace: &str,
    service: &str,
    port_name: Option<&str>,
) -> Vec<(&'s NsName, &'s Stored<BackendTlsPolicy>)> {
    let from = NsName::new(namespace, "");
    let mut found: Vec<_> = store
        .backend_tls_policies
        .range(from..)
        .take_while(|(id, _)| id.namespace == namespace)
        .filter_map(|(id, p)| {
            targets(&p.object, service, port_name)
                .map(|how| (how, super::age(&p.object.metadata, id), id, p))
        })
        .collect();
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.into_iter().map(|(_, _, id, p)| (id, p)).collect()
}

/// The TLS settings a policy asks for, or why it cannot be used.
pub(super) fn settings(
    store: &Store,
    id: &NsName,
    policy: &BackendTlsPolicy,
    h2: bool,
) -> Result<BackendTls, Unusable> {
    let validation = &policy.spec.validation;
    let system_roots = match validation.well_known_ca_certificates.as_deref() {
        None | Some("") => false,
        Some(WELL_KNOWN_SYSTEM) => true,
        Some(other) => {
            return Err(Unusable {
                reason: "Invalid",
                message: format!(
                    "spec.validation.wellKnownCACertificates {other:?} is not served (teapot knows {WELL_KNOWN_SYSTEM:?})"
                ),
            });
        }
    };
    let verify = if system_roots {
        None
    } else {
        Some(ca_bundle(store, id, policy)?)
    };
    let subject_alt_names = validation
        .subject_alt_names
        .iter()
        .flatten()
        .filter_map(|san| match san.r#type {
            SanType::Hostname => san.hostname.clone().map(SubjectAltName::Dns),
            SanType::Uri => san.uri.clone().map(SubjectAltName::Uri),
        })
        .collect();
    Ok(BackendTls {
        h2,
        name: validation.hostname.clone(),
        // The specification's MUST: hostname is the SNI.
        sni: true,
        verify,
        // No depth bound of its own: the trust anchors decide.
        depth: u32::MAX,
        client_cert: None,
        system_roots,
        subject_alt_names,
        // The policy has no place for them: rustls's defaults.
        tls12_suites: None,
        versions: None,
    })
}

/// The `ca.crt` PEM of every usable `caCertificateRefs` entry, joined.
/// Invalid entries are skipped while another one is usable (the
/// ResolvedRefs condition still names them); with none usable the policy
/// cannot be used.
fn ca_bundle(store: &Store, id: &NsName, policy: &BackendTlsPolicy) -> Result<Vec<u8>, Unusable> {
    let mut pem = Vec::new();
    let mut first_problem = None;
    for (i, r) in policy
        .spec
        .validation
        .ca_certificate_refs
        .iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.validation.caCertificateRefs[{i}]");
        match ca_of_ref(store, &id.namespace, (&r.group, &r.kind, &r.name)) {
            Ok(ca) => {
                pem.extend_from_slice(ca.as_bytes());
                pem.push(b'\n');
            }
            Err((reason, why)) => {
                first_problem.get_or_insert(Unusable {
                    reason,
                    message: format!("{at}: {why}"),
                });
            }
        }
    }
    match first_problem {
        Some(problem) if pem.is_empty() => Err(problem),
        _ if pem.is_empty() => Err(Unusable {
            reason: "NoValidCACertificate",
            message: "spec.validation.caCertificateRefs names no ConfigMap".into(),
        }),
        _ => Ok(pem),
    }
}

/// One reference's `ca.crt`, or the ResolvedRefs reason it has none.
pub(super) fn ca_of_ref<'s>(
    store: &'s Store,
    namespace: &str,
    (group, kind, name): (&str, &str, &str),
) -> Result<&'s str, (&'static str, String)> {
    if !group.is_empty() || kind != "ConfigMap" {
        return Err((
            "InvalidKind",
            format!("{group:?} {kind:?} is not a ConfigMap (the kind teapot reads ca.crt from)"),
        ));
    }
    let Some(config_map) = store.config_maps.get(&NsRef { namespace, name }) else {
        return Err((
            "InvalidCACertificateRef",
            format!("ConfigMap {namespace}/{name} not found"),
        ));
    };
    let ca = config_map
        .object
        .data
        .as_ref()
        .and_then(|d| d.get(CA_CERT_KEY));
    match ca {
        Some(ca) if teapot_api::admission::check_ca_bundle(ca.as_bytes()).is_ok() => Ok(ca),
        Some(_) => Err((
            "InvalidCACertificateRef",
            format!("ConfigMap {namespace}/{name}: {CA_CERT_KEY} is not a PEM certificate bundle"),
        )),
        None => Err((
            "InvalidCACertificateRef",
            format!("ConfigMap {namespace}/{name} has no {CA_CERT_KEY}"),
        )),
    }
}

/// Most ancestors in one status (the CRD's bound).
const MAX_ANCESTORS: usize = 16;

/// The status of every BackendTLSPolicy some route's backend brings into
/// use: per teapot Gateway such a route names, the policy's conditions.
pub(crate) fn report(store: &Store) -> Vec<Reported<BackendTlsPolicyStatus>> {
    let mut out = Vec::new();
    for (id, policy) in &store.backend_tls_policies {
        let ancestors = ancestors(store, id, &policy.object);
        if ancestors.is_empty() {
            continue;
        }
        let generation = policy.object.metadata.generation;
        let conditions: Vec<_> = conditions(store, id, &policy.object)
            .into_iter()
            .map(|(type_, ok, reason, message)| condition(type_, ok, reason, message, generation))
            .collect();
        let ancestors = ancestors
            .into_iter()
            .take(MAX_ANCESTORS)
            .map(|gateway| BackendTlsPolicyStatusAncestors {
                ancestor_ref: BackendTlsPolicyStatusAncestorsAncestorRef {
                    group: Some(teapot_gateway_api::GROUP.into()),
                    kind: Some("Gateway".into()),
                    name: gateway.name,
                    namespace: Some(gateway.namespace),
                    port: None,
                    section_name: None,
                },
                conditions: conditions.clone(),
                controller_name: GATEWAY_CONTROLLER_NAME.into(),
            })
            .collect();
        out.push(Reported {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            status: BackendTlsPolicyStatus { ancestors },
        });
    }
    out
}

/// Whether `policy` names Service `service` at all (any port).
fn names_service(policy: &BackendTlsPolicy, service: &str) -> bool {
    policy
        .spec
        .target_refs
        .iter()
        .any(|t| t.group.is_empty() && t.kind == "Service" && t.name == service)
}

/// A backendRef or parentRef as the ancestor search reads it: group,
/// kind, namespace, name.
type RefParts<'s> = (Option<&'s str>, Option<&'s str>, Option<&'s str>, &'s str);

/// The teapot Gateways that HTTPRoutes and GRPCRoutes to a Service the
/// policy names are attached to.
fn ancestors(store: &Store, id: &NsName, policy: &BackendTlsPolicy) -> BTreeSet<NsName> {
    let mut out = BTreeSet::new();
    // The two route kinds have the same shapes under different generated
    // types.
    macro_rules! each_route {
        ($routes:expr) => {
            for (rid, r) in $routes {
                let spec = &r.object.spec;
                let rules = spec.rules.iter().flatten();
                let backends = rules.flat_map(|rule| rule.backend_refs.iter().flatten());
                add_ancestors(
                    store,
                    (id, policy),
                    &rid.namespace,
                    backends.map(|b| {
                        let (group, kind) = (b.group.as_deref(), b.kind.as_deref());
                        (group, kind, b.namespace.as_deref(), b.name.as_str())
                    }),
                    spec.parent_refs.iter().flatten().map(|p| {
                        let (group, kind) = (p.group.as_deref(), p.kind.as_deref());
                        (group, kind, p.namespace.as_deref(), p.name.as_str())
                    }),
                    &mut out,
                );
            }
        };
    }
    each_route!(&store.http_routes);
    each_route!(&store.grpc_routes);
    // TLSRoutes: a Terminate listener reaches their backends under the
    // policy (rules and backendRefs are lists, not optional, there).
    for (rid, r) in &store.tls_routes {
        let spec = &r.object.spec;
        add_ancestors(
            store,
            (id, policy),
            &rid.namespace,
            spec.rules
                .iter()
                .flat_map(|rule| rule.backend_refs.iter())
                .map(|b| {
                    let (group, kind) = (b.group.as_deref(), b.kind.as_deref());
                    (group, kind, b.namespace.as_deref(), b.name.as_str())
                }),
            spec.parent_refs.iter().flatten().map(|p| {
                let (group, kind) = (p.group.as_deref(), p.kind.as_deref());
                (group, kind, p.namespace.as_deref(), p.name.as_str())
            }),
            &mut out,
        );
    }
    out
}

/// Adds the teapot Gateways of one route's `parents` when one of its
/// `backends` is a Service the policy names.
fn add_ancestors<'s>(
    store: &Store,
    (id, policy): (&NsName, &BackendTlsPolicy),
    route_ns: &str,
    mut backends: impl Iterator<Item = RefParts<'s>>,
    parents: impl Iterator<Item = RefParts<'s>>,
    out: &mut BTreeSet<NsName>,
) {
    let uses = backends.any(|(group, kind, namespace, name)| {
        group.unwrap_or("").is_empty()
            && kind.unwrap_or("Service") == "Service"
            && namespace.unwrap_or(route_ns) == id.namespace
            && names_service(policy, name)
    });
    if !uses {
        return;
    }
    for (group, kind, namespace, name) in parents {
        if group.unwrap_or(teapot_gateway_api::GROUP) != teapot_gateway_api::GROUP
            || kind.unwrap_or("Gateway") != "Gateway"
        {
            continue;
        }
        let gateway = NsName::new(namespace.unwrap_or(route_ns), name);
        let ours = store.gateways.get(&gateway).is_some_and(|g| {
            teapot_model::gateway::is_teapot_class(store, &g.object.spec.gateway_class_name)
        });
        if ours {
            out.insert(gateway);
        }
    }
}

/// `Accepted` and `ResolvedRefs` of a policy, as (type, ok, reason,
/// message).
fn conditions(
    store: &Store,
    id: &NsName,
    policy: &BackendTlsPolicy,
) -> [(&'static str, bool, &'static str, String); 2] {
    let validation = &policy.spec.validation;
    let mut resolved = (
        "ResolvedRefs",
        true,
        "ResolvedRefs",
        "every reference resolved".to_string(),
    );
    let mut usable = 0;
    for (i, r) in validation.ca_certificate_refs.iter().flatten().enumerate() {
        match ca_of_ref(store, &id.namespace, (&r.group, &r.kind, &r.name)) {
            Ok(_) => usable += 1,
            Err((reason, why)) if resolved.1 => {
                resolved = (
                    "ResolvedRefs",
                    false,
                    reason,
                    format!("spec.validation.caCertificateRefs[{i}]: {why}"),
                );
            }
            Err(_) => {}
        }
    }
    let accepted = if let Err(unusable) = settings(store, id, policy, false) {
        let reason = if usable == 0 && unusable.reason != "Invalid" {
            "NoValidCACertificate"
        } else {
            unusable.reason
        };
        (
            "Accepted",
            false,
            reason,
            format!("{}; its backends answer 503", unusable.message),
        )
    } else if let Some(winner) = conflicted(store, id, policy) {
        (
            "Accepted",
            false,
            "Conflicted",
            format!("BackendTLSPolicy {winner} applies to every Service port this one names"),
        )
    } else {
        (
            "Accepted",
            true,
            "Accepted",
            "the policy applies to its Services' backends".to_string(),
        )
    };
    [accepted, resolved]
}

/// The policy that wins every Service port `policy` names, if one does
/// (per port: the more specific target, then the oldest, then the name).
fn conflicted(store: &Store, id: &NsName, policy: &BackendTlsPolicy) -> Option<NsName> {
    let mut winners = BTreeSet::new();
    for t in &policy.spec.target_refs {
        if !t.group.is_empty() || t.kind != "Service" {
            continue;
        }
        let Some(service) = store.services.get(&NsRef {
            namespace: &id.namespace,
            name: &t.name,
        }) else {
            continue;
        };
        let ports = service.object.spec.as_ref().and_then(|s| s.ports.as_ref());
        for port in ports.into_iter().flatten() {
            let name = port.name.as_deref();
            if let Some((winner, _)) = policy_for(store, &id.namespace, &t.name, name)
                && targets(policy, &t.name, name).is_some()
            {
                if winner == id {
                    return None;
                }
                winners.insert(winner.clone());
            }
        }
    }
    winners.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::tests::test_store as store;

    /// A GRPCRoute's backend under a policy speaks HTTP/2 over TLS, an
    /// HTTPRoute's HTTP/1.1; a policy whose ConfigMap is missing leaves
    /// the backend without endpoints (503), never plain or unverified.
    #[test]
    fn routes_to_a_policy_s_service_speak_tls_or_answer_503() {
        use crate::compile::gateway::table::Action;
        use crate::compile::tests::compile_test_docs;
        let routes = |cm: &str| {
            let docs = [
                "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: https, port: 8443}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: ops, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [\"10.0.0.1\"]}]\nports: [{name: https, port: 8443}]\n".to_string(),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ops}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: h, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [h.example]\n  rules: [{backendRefs: [{name: web, port: 8443}]}]\n".into(),
                "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [g.example]\n  rules: [{backendRefs: [{name: web, port: 8443}]}]\n".into(),
                policy("p", "2024-01-01T00:00:00Z", "{group: \"\", kind: Service, name: web, sectionName: https}"),
                cm.to_string(),
            ];
            let s = compile_test_docs(&docs, &crate::compile::CompileOptions::default());
            ["h.example", "g.example"].map(|host| {
                let candidates = s.gateway.host(host).candidates();
                let Action::Backends { backends, .. } = &*candidates[0].action else {
                    panic!("{host}: not forwarded");
                };
                let route = backends[0].route.as_ref().expect("resolved");
                let upstream = &route.upstream;
                (
                    upstream.protocol.tls().map(|t| t.h2()),
                    upstream.endpoints.load().len(),
                )
            })
        };
        assert_eq!(routes(&config_map()), [(Some(false), 1), (Some(true), 1)]);
        let absent =
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: unrelated, namespace: ops}\n";
        assert_eq!(routes(absent), [(None, 0), (None, 0)]);
    }

    /// The client certificate of the route's Gateway is presented; a
    /// missing Secret is the Gateway's ResolvedRefs False and the backend's
    /// 503, as are parents that disagree; without a reference, none.
    #[test]
    fn backends_present_their_gateway_s_client_certificate() {
        use crate::compile::gateway::table::Action;
        use crate::compile::tests::compile_test_docs;
        let client = teapot_testkit::certs::TestCa::new("client CA").issue_client("teapot");
        let gateway = |name: &str, secret: Option<&str>| {
            let tls = secret.map_or(String::new(), |s| {
                format!("  tls: {{backend: {{clientCertificateRef: {{name: {s}}}}}}}\n")
            });
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: ops}}\nspec:\n  gatewayClassName: teapot\n  listeners: [{{name: http, protocol: HTTP, port: 80}}]\n{tls}"
            )
        };
        let compile = |gateways: &[(&str, Option<&str>)]| {
            let parents: Vec<String> = gateways
                .iter()
                .map(|(g, _)| format!("{{name: {g}}}"))
                .collect();
            let mut docs = vec![
                "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: https, port: 8443}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: ops, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [\"10.0.0.1\"]}]\nports: [{name: https, port: 8443}]\n".to_string(),
                format!(
                    "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: h, namespace: ops}}\nspec:\n  parentRefs: [{}]\n  hostnames: [h.example]\n  rules: [{{backendRefs: [{{name: web, port: 8443}}]}}]\n",
                    parents.join(", ")
                ),
                policy("p", "2024-01-01T00:00:00Z", "{group: \"\", kind: Service, name: web}"),
                config_map(),
                teapot_testkit::certs::tls_secret_yaml("ops", "mtls", &client),
                teapot_testkit::certs::tls_secret_yaml("ops", "other", &client),
            ];
            docs.extend(gateways.iter().map(|(g, s)| gateway(g, *s)));
            let s = compile_test_docs(&docs, &crate::compile::CompileOptions::default());
            let candidates = s.gateway.host("h.example").candidates();
            let Action::Backends { backends, .. } = &*candidates[0].action else {
                panic!("not forwarded");
            };
            let upstream = &backends[0].route.as_ref().expect("resolved").upstream;
            let presented = upstream
                .protocol
                .tls()
                .map(|t| t.settings.client_cert.is_some());
            let status = serde_json::to_value(&s.report.gateway).unwrap();
            let resolved: Vec<String> = status["gateways"]
                .as_array()
                .unwrap()
                .iter()
                .map(|g| {
                    let c = g["status"]["conditions"].as_array().unwrap();
                    c.iter()
                        .find(|c| c["type"] == "ResolvedRefs")
                        .map_or("-".into(), |c| c["reason"].as_str().unwrap().to_string())
                })
                .collect();
            (presented, upstream.endpoints.load().len(), resolved)
        };
        assert_eq!(
            compile(&[("gw", Some("mtls"))]),
            (Some(true), 1, vec!["ResolvedRefs".to_string()])
        );
        assert_eq!(
            compile(&[("gw", None)]),
            (Some(false), 1, vec!["-".to_string()])
        );
        assert_eq!(
            compile(&[("gw", Some("absent"))]),
            (None, 0, vec!["InvalidClientCertificateRef".to_string()])
        );
        // Both Gateways name the same Secret: presented; different: 503.
        assert_eq!(
            compile(&[("a", Some("mtls")), ("b", Some("mtls"))]).0,
            Some(true)
        );
        assert_eq!(compile(&[("a", Some("mtls")), ("b", Some("other"))]).1, 0);
        assert_eq!(compile(&[("a", Some("mtls")), ("b", None)]).1, 0);
    }

    fn policy(name: &str, created: &str, target: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: BackendTLSPolicy\nmetadata: {{name: {name}, namespace: ops, creationTimestamp: \"{created}\"}}\nspec:\n  targetRefs: [{target}]\n  validation:\n    hostname: web.ops.example\n    caCertificateRefs: [{{group: \"\", kind: ConfigMap, name: ca}}]\n"
        )
    }

    const CONFIG_MAP: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: ca, namespace: ops}\ndata:\n  ca.crt: |\n";

    fn config_map() -> String {
        let ca = teapot_testkit::certs::TestCa::new("backend CA");
        let pem: String = ca
            .cert_pem()
            .lines()
            .map(|l| format!("    {l}\n"))
            .collect();
        format!("{CONFIG_MAP}{pem}")
    }

    #[test]
    fn the_port_s_own_policy_wins_then_the_oldest_then_the_name() {
        let docs = [
            policy(
                "b-old",
                "2024-01-01T00:00:00Z",
                "{group: \"\", kind: Service, name: web}",
            ),
            policy(
                "a-new",
                "2025-01-01T00:00:00Z",
                "{group: \"\", kind: Service, name: web}",
            ),
            policy(
                "c-same",
                "2024-01-01T00:00:00Z",
                "{group: \"\", kind: Service, name: web}",
            ),
            policy(
                "z-port",
                "2026-01-01T00:00:00Z",
                "{group: \"\", kind: Service, name: web, sectionName: https}",
            ),
            policy(
                "other",
                "2020-01-01T00:00:00Z",
                "{group: \"\", kind: Service, name: api}",
            ),
        ]
        .join("---\n");
        let store = store(&docs);
        let names = |port| {
            policies_on(&store, "ops", "web", port)
                .into_iter()
                .map(|(id, _)| id.name.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(Some("https")), ["z-port", "b-old", "c-same", "a-new"]);
        assert_eq!(names(Some("http")), ["b-old", "c-same", "a-new"]);
        assert_eq!(names(None), ["b-old", "c-same", "a-new"]);
        assert!(policies_on(&store, "other", "web", None).is_empty());
    }

    #[test]
    fn settings_verify_always_and_name_the_unusable_reference() {
        let target = "{group: \"\", kind: Service, name: web}";
        let docs = format!(
            "{}---\n{}",
            policy("p", "2024-01-01T00:00:00Z", target),
            config_map()
        );
        let store_ok = store(&docs);
        let id = NsName::new("ops", "p");
        let p = &store_ok.backend_tls_policies[&id].object;
        let s = settings(&store_ok, &id, p, true).unwrap();
        assert!(s.h2 && s.sni && s.verify.is_some() && !s.system_roots);
        assert_eq!(s.name, "web.ops.example");

        // No ConfigMap: never unverified.
        let missing = store(&policy("p", "2024-01-01T00:00:00Z", target));
        let p = &missing.backend_tls_policies[&id].object;
        let e = settings(&missing, &id, p, false).unwrap_err();
        assert_eq!(e.reason, "InvalidCACertificateRef");
        assert!(
            e.message.contains("caCertificateRefs[0]") && e.message.contains("ops/ca not found"),
            "{e:?}"
        );

        // A ConfigMap without a PEM certificate.
        let bad = store(&format!(
            "{}---\n{CONFIG_MAP}    not a certificate\n",
            policy("p", "2024-01-01T00:00:00Z", target)
        ));
        let p = &bad.backend_tls_policies[&id].object;
        assert_eq!(
            settings(&bad, &id, p, false).unwrap_err().reason,
            "InvalidCACertificateRef"
        );

        // The host's trust store: no ConfigMap read; an unknown set is
        // refused, never unverified.
        let system = store(&policy("p", "2024-01-01T00:00:00Z", target).replace(
            "caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]",
            "wellKnownCACertificates: System",
        ));
        let p = &system.backend_tls_policies[&id].object;
        let s = settings(&system, &id, p, false).unwrap();
        assert!(s.system_roots && s.verify.is_none() && s.sni);
        let mozilla = store(&policy("p", "2024-01-01T00:00:00Z", target).replace(
            "caCertificateRefs: [{group: \"\", kind: ConfigMap, name: ca}]",
            "wellKnownCACertificates: example.com/mozilla",
        ));
        let p = &mozilla.backend_tls_policies[&id].object;
        assert_eq!(
            settings(&mozilla, &id, p, false).unwrap_err().reason,
            "Invalid"
        );

        // A Secret is not read.
        let secret = store(
            &policy("p", "2024-01-01T00:00:00Z", target).replace("kind: ConfigMap", "kind: Secret"),
        );
        let p = &secret.backend_tls_policies[&id].object;
        assert_eq!(
            settings(&secret, &id, p, false).unwrap_err().reason,
            "InvalidKind"
        );
    }

    /// Status: one ancestor per teapot Gateway of a route to the Service;
    /// the older policy on the same port is Accepted, the newer Conflicted;
    /// a missing ConfigMap is NoValidCACertificate / InvalidCACertificateRef.
    #[test]
    fn status_names_the_gateways_and_the_conflicts() {
        let target = "{group: \"\", kind: Service, name: web}";
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: https, port: 8443}]}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GatewayClass\nmetadata: {name: teapot}\nspec: {controllerName: teapot.dev/gateway-controller}\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ops}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: h, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  rules: [{backendRefs: [{name: web, port: 8443}]}]\n".into(),
            policy("old", "2024-01-01T00:00:00Z", target),
            policy("new", "2025-01-01T00:00:00Z", target),
            policy("unused", "2025-01-01T00:00:00Z", "{group: \"\", kind: Service, name: api}"),
            config_map(),
        ]
        .join("---\n");
        let conditions = |store: &Store| {
            report(store)
                .into_iter()
                .map(|r| {
                    let a = &r.status.ancestors;
                    assert_eq!(a.len(), 1, "{a:?}");
                    assert_eq!(a[0].ancestor_ref.name, "gw");
                    let c: Vec<String> = a[0]
                        .conditions
                        .iter()
                        .map(|c| format!("{}={}/{}", c.type_, c.status, c.reason))
                        .collect();
                    (r.name, c.join(" "))
                })
                .collect::<Vec<_>>()
        };
        let mut store = store(&docs);
        assert_eq!(
            conditions(&store),
            [
                (
                    "new".to_string(),
                    "Accepted=False/Conflicted ResolvedRefs=True/ResolvedRefs".to_string()
                ),
                (
                    "old".into(),
                    "Accepted=True/Accepted ResolvedRefs=True/ResolvedRefs".into()
                ),
            ]
        );
        store.config_maps.clear();
        let old = report(&store)
            .into_iter()
            .find(|r| r.name == "old")
            .unwrap();
        let c = &old.status.ancestors[0].conditions;
        assert_eq!(
            (c[0].reason.as_str(), c[1].reason.as_str()),
            ("NoValidCACertificate", "InvalidCACertificateRef")
        );
        assert!(
            c[1].message.contains("ConfigMap ops/ca not found"),
            "{}",
            c[1].message
        );
    }
}
