//! The sanitized LB-cluster copies of tenant objects (docs/architecture.md, "LB
//! cluster API"). Pure functions: what to write, never how.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Secret, Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;
use teapot_api::admission::CA_SECRET_KEY;
use teapot_api::annotations::{IP_FAMILIES, IP_FAMILY_POLICY, PREFIX};
pub use teapot_api::hostname::mirrored_secret_name;
use teapot_api::hostname::{mirrored_ingress_name, mirrored_service_name};
use teapot_api::names::{CA_SECRET_TYPE, INGRESS_CLASS, LOAD_BALANCER_CLASS, TLS_SECRET_TYPE};
use teapot_sync::{
    AGENT, APP_MANAGED_BY_LABEL, MODE_ANNOTATION, SOURCE_NAME_LABEL, SOURCE_NAMESPACE_LABEL,
    SOURCE_UID_ANNOTATION, label_value,
};

use crate::Error;
use crate::nginx_refs::{self, TenantRef};

/// Whether teapot serves this Ingress: `spec.ingressClassName: teapot`.
/// (Class-less Ingresses and the deprecated annotation are left to the
/// cluster's default class, which the agent does not claim.)
pub fn is_ours(ingress: &Ingress) -> bool {
    ingress
        .spec
        .as_ref()
        .and_then(|s| s.ingress_class_name.as_deref())
        == Some(INGRESS_CLASS)
}

/// Whether teapot serves this Service at L4: `type: LoadBalancer` with
/// `spec.loadBalancerClass: teapot.dev/lb` (a class-less LoadBalancer
/// Service belongs to the cluster's own load-balancer controller).
pub fn is_l4(service: &Service) -> bool {
    service.spec.as_ref().is_some_and(|s| {
        s.type_.as_deref() == Some("LoadBalancer")
            && s.load_balancer_class.as_deref() == Some(LOAD_BALANCER_CLASS)
    })
}

/// The `teapot.dev/` annotations that travel to the LB copy: all of them
/// (unknown ones too, so the webhook refuses them with its message rather
/// than the agent dropping them silently) except the ones the agent itself
/// reads or writes.
pub(crate) fn travelling_annotations(
    annotations: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    annotations
        .iter()
        .filter(|(k, _)| {
            k.starts_with(PREFIX)
                && k.as_str() != SOURCE_UID_ANNOTATION
                && k.as_str() != MODE_ANNOTATION
        })
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

fn backends(ingress: &Ingress) -> impl Iterator<Item = &IngressBackend> {
    let spec = ingress.spec.as_ref();
    spec.and_then(|s| s.default_backend.as_ref())
        .into_iter()
        .chain(
            spec.and_then(|s| s.rules.as_ref())
                .into_iter()
                .flatten()
                .filter_map(|r| r.http.as_ref())
                .flat_map(|h| h.paths.iter().map(|p| &p.backend)),
        )
}

/// Tenant Services the Ingress routes to, as `(namespace, name)`: its
/// backends, and the Services its ingress-nginx annotations name (the auth
/// service may live in another namespace of the tenant's cluster).
pub fn referenced_services(ingress: &Ingress) -> BTreeSet<TenantRef> {
    let namespace = ingress.namespace().unwrap_or_default();
    backends(ingress)
        .filter_map(|b| {
            b.service
                .as_ref()
                .map(|s| (namespace.clone(), s.name.clone()))
        })
        .chain(nginx_refs::annotation_services(
            &namespace,
            ingress.annotations(),
        ))
        .collect()
}

/// Tenant Secrets its `spec.tls` names, and `proxy-ssl-secret`'s and
/// `auth-tls-secret`'s, as `(namespace, name)`.
pub fn referenced_secrets(ingress: &Ingress) -> BTreeSet<TenantRef> {
    let namespace = ingress.namespace().unwrap_or_default();
    ingress
        .spec
        .as_ref()
        .and_then(|s| s.tls.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| t.secret_name.clone().map(|n| (namespace.clone(), n)))
        .chain(nginx_refs::annotation_secrets(
            &namespace,
            ingress.annotations(),
        ))
        .collect()
}

/// Labels and annotations every LB copy carries.
pub(crate) fn lb_meta(
    name: String,
    lb_namespace: &str,
    source_namespace: &str,
    source_name: &str,
    uid: Option<&String>,
    mut annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    if let Some(uid) = uid {
        annotations.insert(SOURCE_UID_ANNOTATION.into(), uid.clone());
    }
    ObjectMeta {
        name: Some(name),
        namespace: Some(lb_namespace.to_string()),
        labels: Some(BTreeMap::from([
            (APP_MANAGED_BY_LABEL.into(), AGENT.into()),
            (SOURCE_NAMESPACE_LABEL.into(), source_namespace.into()),
            (SOURCE_NAME_LABEL.into(), label_value(source_name)),
        ])),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// The LB Ingress `<name>.<namespace>`: class `teapot`, backends and TLS
/// Secrets renamed to their mirrors, only `teapot.dev/` and
/// `nginx.ingress.kubernetes.io/` annotations (everything else belongs to
/// the tenant cluster; unknown keys under those prefixes are copied so the
/// webhook refuses them, never silently dropped).
pub fn lb_ingress(ingress: &Ingress, lb_namespace: &str) -> Result<Ingress, Error> {
    let namespace = ingress.namespace().ok_or_else(|| Error::Invalid {
        object: format!("Ingress {}", ingress.name_any()),
        field: "metadata.namespace".into(),
        message: "is missing".into(),
    })?;
    let name = ingress.name_any();
    let mut spec = ingress.spec.clone().unwrap_or_default();
    spec.ingress_class_name = Some(INGRESS_CLASS.into());
    let rename = |b: &mut IngressBackend| {
        if let Some(s) = b.service.as_mut() {
            s.name = mirrored_service_name(&namespace, &s.name);
        }
    };
    if let Some(b) = spec.default_backend.as_mut() {
        rename(b);
    }
    for rule in spec.rules.iter_mut().flatten() {
        for path in rule.http.iter_mut().flat_map(|h| h.paths.iter_mut()) {
            rename(&mut path.backend);
        }
    }
    for tls in spec.tls.iter_mut().flatten() {
        if let Some(secret) = tls.secret_name.as_mut() {
            *secret = mirrored_secret_name(&namespace, secret);
        }
    }
    let mut annotations = travelling_annotations(ingress.annotations());
    annotations.extend(nginx_refs::travelling(
        &namespace,
        lb_namespace,
        ingress.annotations(),
    ));
    Ok(Ingress {
        metadata: lb_meta(
            mirrored_ingress_name(&namespace, &name),
            lb_namespace,
            &namespace,
            &name,
            ingress.metadata.uid.as_ref(),
            annotations,
        ),
        spec: Some(spec),
        status: None,
    })
}

/// An L4 Service's `spec.ipFamilies` and `spec.ipFamilyPolicy` as the
/// annotations its LB copy carries them in (docs/agent.md): the copy's spec
/// cannot, since the LB cluster's API server checks them against its own
/// families and would refuse a dual-stack copy in a single-stack LB
/// cluster. The fleet reads them over the copy's (defaulted) spec. A field
/// the Service lacks writes nothing, so an annotation the tenant set
/// travels as written and the webhook judges it; a value Kubernetes would
/// not have admitted is written as it is, for the webhook to refuse naming
/// it rather than the agent guessing.
pub fn family_annotations(service: &Service) -> Vec<(String, String)> {
    let spec = service.spec.as_ref();
    let mut out = Vec::new();
    if let Some(families) = spec.and_then(|s| s.ip_families.as_ref())
        && !families.is_empty()
    {
        out.push((IP_FAMILIES.to_string(), families.join(",")));
    }
    if let Some(policy) = spec.and_then(|s| s.ip_family_policy.as_ref()) {
        out.push((IP_FAMILY_POLICY.to_string(), policy.clone()));
    }
    out
}

/// The selector-less LB Service for a tenant Service: the ports by name,
/// number and protocol (the EndpointSlice the sync half writes says where
/// they go), its `teapot.dev/` annotations. An L4 Service ([`is_l4`]) stays
/// `LoadBalancer` of class `teapot.dev/lb` without node ports (what the
/// webhook requires; the fleet allocates its address); any other is
/// `ClusterIP`. The same function serves the Ingress and the Service
/// reconcilers, so a Service that is both an Ingress backend and L4 gets one
/// copy that neither rewrites. An L4 copy keeps the Service's source ranges
/// ([`source_ranges`]): dropping them would open a Service its owner
/// restricted to every client of the fleet.
pub fn lb_service(service: &Service, lb_namespace: &str) -> Service {
    let namespace = service.namespace().unwrap_or_default();
    let name = service.name_any();
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .into_iter()
        .flatten()
        .map(|p| ServicePort {
            name: p.name.clone(),
            port: p.port,
            protocol: p.protocol.clone(),
            app_protocol: p.app_protocol.clone(),
            ..ServicePort::default()
        })
        .collect();
    let mut annotations = travelling_annotations(service.annotations());
    if is_l4(service) {
        annotations.extend(family_annotations(service));
    }
    Service {
        metadata: lb_meta(
            mirrored_service_name(&namespace, &name),
            lb_namespace,
            &namespace,
            &name,
            service.metadata.uid.as_ref(),
            annotations,
        ),
        spec: Some(if is_l4(service) {
            ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_class: Some(LOAD_BALANCER_CLASS.into()),
                allocate_load_balancer_node_ports: Some(false),
                ports: Some(ports),
                load_balancer_source_ranges: source_ranges(service),
                ..ServiceSpec::default()
            }
        } else {
            ServiceSpec {
                type_: Some("ClusterIP".into()),
                ports: Some(ports),
                ..ServiceSpec::default()
            }
        }),
        status: None,
    }
}

/// The annotation cloud providers read when `spec.loadBalancerSourceRanges`
/// is empty (comma-separated networks); the tenant's API server validates
/// it as it validates the field.
pub const SOURCE_RANGES_ANNOTATION: &str = "service.beta.kubernetes.io/load-balancer-source-ranges";

/// The networks an L4 Service admits, as the LB copy carries them:
/// `spec.loadBalancerSourceRanges`, or when that is empty the older
/// annotation (Kubernetes' precedence), each entry normalised as the fleet
/// reads it. An entry teapot cannot read is passed on as written, so the
/// LB cluster's webhook refuses the copy naming the entry (the tenant sees
/// it as `Accepted=False`) instead of the agent serving the Service with a
/// shorter list, or none. `None`: everyone.
pub fn source_ranges(service: &Service) -> Option<Vec<String>> {
    let field = service
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_source_ranges.clone())
        .unwrap_or_default();
    let ranges: Vec<String> = if field.is_empty() {
        service
            .annotations()
            .get(SOURCE_RANGES_ANNOTATION)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|r| !r.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default()
    } else {
        field
    };
    if ranges.is_empty() {
        return None;
    }
    Some(match teapot_api::admission::source_ranges(&ranges) {
        Ok(nets) => nets.iter().map(|n| n.to_string()).collect(),
        Err(_) => ranges,
    })
}

/// The LB copy of a tenant TLS Secret: `tls.crt`, `tls.key` and `ca.crt` only.
pub fn lb_secret(secret: &Secret, lb_namespace: &str) -> Result<Secret, Error> {
    let namespace = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    let object = format!("Secret {namespace}/{name}");
    if secret.type_.as_deref() != Some(TLS_SECRET_TYPE) {
        return Err(Error::Invalid {
            object,
            field: "type".into(),
            message: format!(
                "is {:?}; an Ingress's spec.tls needs a {TLS_SECRET_TYPE} Secret",
                secret.type_.as_deref().unwrap_or("")
            ),
        });
    }
    let data = secret.data.as_ref();
    let mut copied: BTreeMap<String, ByteString> = BTreeMap::new();
    for key in ["tls.crt", "tls.key"] {
        let value = data
            .and_then(|d| d.get(key))
            .ok_or_else(|| Error::Invalid {
                object: object.clone(),
                field: format!("data[{key}]"),
                message: "is required".into(),
            })?;
        copied.insert(key.into(), value.clone());
    }
    // The CA that proxy-ssl-secret's backend verification reads; the
    // webhook checks what it may hold.
    if let Some(ca) = data.and_then(|d| d.get("ca.crt")) {
        copied.insert("ca.crt".into(), ca.clone());
    }
    Ok(lb_secret_copy(
        secret,
        lb_namespace,
        TLS_SECRET_TYPE,
        copied,
    ))
}

/// The LB Secret `NS-NAME-<hash5>` for tenant Secret `secret`, of `type_`
/// with `data` alone.
fn lb_secret_copy(
    secret: &Secret,
    lb_namespace: &str,
    type_: &str,
    data: BTreeMap<String, ByteString>,
) -> Secret {
    let namespace = secret.namespace().unwrap_or_default();
    let name = secret.name_any();
    Secret {
        metadata: lb_meta(
            mirrored_secret_name(&namespace, &name),
            lb_namespace,
            &namespace,
            &name,
            secret.metadata.uid.as_ref(),
            BTreeMap::new(),
        ),
        type_: Some(type_.into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The LB copy of a Secret `ingress` names. `proxy-ssl-secret` and
/// `auth-tls-secret` may name a CA Secret (`Opaque` with a `ca.crt`: the
/// CA that verifies the backend or the clients), copied by
/// [`lb_ca_secret`]; every other reference (`spec.tls`) needs a TLS
/// Secret ([`lb_secret`]).
pub fn lb_ingress_secret(
    ingress: &Ingress,
    secret: &Secret,
    lb_namespace: &str,
) -> Result<Secret, Error> {
    let id = (secret.namespace().unwrap_or_default(), secret.name_any());
    if let Some((users, map)) = nginx_refs::basic_auth_secret(
        &ingress.namespace().unwrap_or_default(),
        ingress.annotations(),
    ) && users == id
    {
        return lb_htpasswd_secret(secret, map, lb_namespace);
    }
    let proxy_ssl = nginx_refs::annotation_secrets(
        &ingress.namespace().unwrap_or_default(),
        ingress.annotations(),
    )
    .contains(&id);
    if proxy_ssl && teapot_api::admission::is_ca_secret(secret) {
        lb_ca_secret(secret, lb_namespace)
    } else {
        lb_secret(secret, lb_namespace)
    }
}

/// The LB copy of a tenant CA Secret: `ca.crt` alone, whatever else the
/// Secret holds (an application's credentials may share it); Secrets are
/// sensitive, and nothing else of one leaves the tenant cluster.
pub fn lb_ca_secret(secret: &Secret, lb_namespace: &str) -> Result<Secret, Error> {
    let ca = secret
        .data
        .as_ref()
        .and_then(|d| d.get(CA_SECRET_KEY))
        .ok_or_else(|| Error::Invalid {
            object: format!(
                "Secret {}/{}",
                secret.namespace().unwrap_or_default(),
                secret.name_any()
            ),
            field: format!("data[{CA_SECRET_KEY}]"),
            message: "is required".into(),
        })?;
    let data = BTreeMap::from([(CA_SECRET_KEY.into(), ca.clone())]);
    Ok(lb_secret_copy(secret, lb_namespace, CA_SECRET_TYPE, data))
}

/// The LB copy of the users of a tenant's basic authentication: `auth`
/// alone (htpasswd lines), an `auth-map`'s keys and values written as
/// those lines; nothing else of the Secret leaves the tenant cluster. A
/// line teapot cannot serve is the webhook's to name on the copy; a map
/// entry it cannot serve is named here.
pub fn lb_htpasswd_secret(secret: &Secret, map: bool, lb_namespace: &str) -> Result<Secret, Error> {
    use teapot_api::htpasswd::{AUTH_KEY, parse_map, to_file};
    let invalid = |field: String, message: String| Error::Invalid {
        object: format!(
            "Secret {}/{}",
            secret.namespace().unwrap_or_default(),
            secret.name_any()
        ),
        field,
        message,
    };
    let data = secret.data.as_ref();
    let auth = if map {
        let pairs = data
            .into_iter()
            .flatten()
            .map(|(user, hash)| (user.as_str(), hash.0.as_slice()));
        let entries = parse_map(pairs).map_err(|why| invalid("data".into(), why))?;
        ByteString(to_file(&entries).into_bytes())
    } else {
        data.and_then(|d| d.get(AUTH_KEY))
            .cloned()
            .ok_or_else(|| invalid(format!("data[{AUTH_KEY}]"), "is required".into()))?
    };
    let data = BTreeMap::from([(AUTH_KEY.into(), auth)]);
    Ok(lb_secret_copy(secret, lb_namespace, CA_SECRET_TYPE, data))
}

/// The tenant Ingress an LB Ingress `<name>.<namespace>` mirrors
/// (namespaces have no dots, so the last dot splits).
pub fn source_of_lb_ingress(lb_name: &str) -> Option<(String, String)> {
    let (name, namespace) = lb_name.rsplit_once('.')?;
    (!name.is_empty() && !namespace.is_empty()).then(|| (namespace.into(), name.into()))
}
