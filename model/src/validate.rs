//! Typed parsing and validation of one document, as the API server would
//! do it before storing: a document either becomes an [`Object`] or a
//! [`FieldError`] that names the field.

use k8s_openapi::api::core::v1::{ConfigMap, Secret, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::networking::v1::{Ingress, IngressBackend, IngressClass};
use teapot_api::names::{SERVICE_NAME_LABEL, TLS_SECRET_TYPE};
use teapot_api::{HostPattern, PathKind, Tenant, path};

use crate::certificate::TlsCertificate;
use crate::endpoints::{CompactSlice, MAX_ADDRESSES_PER_ENDPOINT};
use crate::gateway;
use crate::store::{Kind, Object, TlsSecret};

pub use crate::field::FieldError;

/// Parses `value` as `kind` and validates it. Every source hands its
/// objects over as JSON values (a YAML document is read straight into one),
/// so each object is converted once into its typed form.
pub fn parse_object(
    kind: Kind,
    mut value: serde_json::Value,
    namespace: &str,
) -> Result<Object, FieldError> {
    strip_bookkeeping(&mut value);
    Ok(match kind {
        Kind::Ingress => {
            let ingress: Ingress = typed(value)?;
            validate_ingress(&ingress)?;
            Object::Ingress(ingress)
        }
        Kind::IngressClass => Object::IngressClass(typed::<IngressClass>(value)?),
        Kind::Service => {
            let service: Service = typed(value)?;
            validate_service(&service)?;
            Object::Service(service)
        }
        Kind::EndpointSlice => {
            let slice: EndpointSlice = typed(value)?;
            validate_endpoint_slice(&slice)?;
            Object::EndpointSlice(CompactSlice::new(slice, namespace))
        }
        Kind::Secret => {
            let secret: Secret = typed(value)?;
            if teapot_api::admission::is_ca_secret(&secret) {
                Object::CaSecret(ca_secret(secret)?)
            } else if teapot_api::admission::is_htpasswd_secret(&secret) {
                Object::CaSecret(htpasswd_secret(secret)?)
            } else if let Some(lines) = htpasswd_map(&secret) {
                // An operator's `auth-map`: kept as the lines it stands for.
                let mut secret = secret;
                secret.string_data = None;
                secret.data = Some(
                    [(
                        teapot_api::htpasswd::AUTH_KEY.to_string(),
                        k8s_openapi::ByteString(lines),
                    )]
                    .into(),
                );
                Object::CaSecret(htpasswd_secret(secret)?)
            } else {
                Object::Secret(parse_tls_secret(secret)?)
            }
        }
        Kind::Tenant => {
            let tenant: Tenant = typed(value)?;
            validate_tenant(&tenant)?;
            Object::Tenant(tenant)
        }
        Kind::GatewayClass => {
            let class: teapot_gateway_api::GatewayClass = typed(value)?;
            if class.spec.controller_name.is_empty() {
                return Err(FieldError::at(
                    "spec.controllerName",
                    "controllerName is required",
                ));
            }
            Object::GatewayClass(class)
        }
        Kind::Gateway => {
            let gateway: teapot_gateway_api::Gateway = typed(value)?;
            gateway::validate_gateway(&gateway)?;
            Object::Gateway(Box::new(gateway))
        }
        Kind::ListenerSet => {
            let set: teapot_gateway_api::ListenerSet = typed(value)?;
            Object::ListenerSet(Box::new(gateway::listener_set(set)?))
        }
        Kind::HttpRoute => {
            let route: teapot_gateway_api::HttpRoute = typed(value)?;
            gateway::validate_http_route(&route)?;
            Object::HttpRoute(Box::new(route))
        }
        Kind::GrpcRoute => {
            let route: teapot_gateway_api::GrpcRoute = typed(value)?;
            gateway::validate_grpc_route(&route)?;
            Object::GrpcRoute(Box::new(route))
        }
        Kind::ReferenceGrant => Object::ReferenceGrant(typed(value)?),
        Kind::TlsRoute => {
            let route: teapot_gateway_api::TlsRoute = typed(value)?;
            for (i, h) in route.spec.hostnames.iter().enumerate() {
                gateway::parse_hostname(h, &format!("spec.hostnames[{i}]"))?;
            }
            Object::TlsRoute(route)
        }
        Kind::TcpRoute => Object::TcpRoute(typed(value)?),
        Kind::UdpRoute => Object::UdpRoute(typed(value)?),
        Kind::BackendTlsPolicy => {
            let policy: teapot_gateway_api::BackendTlsPolicy = typed(value)?;
            gateway::validate_backend_tls_policy(&policy)?;
            Object::BackendTlsPolicy(Box::new(policy))
        }
        Kind::ConfigMap => Object::ConfigMap(ca_config_map(typed(value)?)),
        Kind::RouteTrafficPolicy => {
            let policy: teapot_api::route_policy::RouteTrafficPolicy = typed(value)?;
            validate_route_traffic_policy(&policy)?;
            Object::RouteTrafficPolicy(Box::new(policy))
        }
        Kind::Namespace => Object::Namespace(typed(value)?),
    })
}

/// The annotation kubectl repeats a whole applied object in.
pub const LAST_APPLIED_ANNOTATION: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops what the API server and kubectl add to an object for their own
/// bookkeeping, before it is typed: `metadata.managedFields` (often larger
/// than the object itself, and grown by every writer, the fleet's own
/// status writes too) and the value of the last-applied annotation (a
/// second copy of the object). No reader of the store needs either, and
/// they were most of a stored object's bytes in a real cluster. The
/// annotation's key stays, with an empty value: the tenant check refuses
/// an object by the key alone, and still does.
fn strip_bookkeeping(value: &mut serde_json::Value) {
    let Some(meta) = value
        .get_mut("metadata")
        .and_then(serde_json::Value::as_object_mut)
    else {
        return;
    };
    meta.remove("managedFields");
    if let Some(applied) = meta
        .get_mut("annotations")
        .and_then(serde_json::Value::as_object_mut)
        .and_then(|a| a.get_mut(LAST_APPLIED_ANNOTATION))
        .filter(|v| v.is_string())
    {
        *applied = serde_json::Value::String(String::new());
    }
}

/// A document as read: an object served as written, or a refused one
/// that stands in the store in its place.
#[derive(Debug)]
pub enum Parsed {
    Object(Object),
    /// Refused, and kept so that what it would restrict is refused rather
    /// than served without it: a RouteTrafficPolicy whose spec cannot be
    /// served but whose `targetRefs` can be read, kept as
    /// [`Object::RefusedRouteTrafficPolicy`] (its routes answer 503, its
    /// status is `Invalid`). `error` names the field.
    Refused {
        object: Object,
        error: FieldError,
    },
}

/// [`parse_object`], with the refusals that stand in the store in the
/// object's place ([`Parsed::Refused`]). A RouteTrafficPolicy whose
/// `targetRefs` cannot be read is refused as [`parse_object`] refuses it:
/// there is nothing to attach the refusal to.
pub fn parse_document(
    kind: Kind,
    value: serde_json::Value,
    namespace: &str,
) -> Result<Parsed, FieldError> {
    if kind != Kind::RouteTrafficPolicy {
        return parse_object(kind, value, namespace).map(Parsed::Object);
    }
    // What a refusal keeps, taken before the value is consumed: small.
    let head = (
        value.get("metadata").cloned(),
        value.pointer("/spec/targetRefs").cloned(),
    );
    match parse_object(kind, value, namespace) {
        Ok(object) => Ok(Parsed::Object(object)),
        Err(mut error) => match refused_route_traffic_policy(head) {
            Some(policy) => {
                let why = match &error.field {
                    Some(field) => format!("{field}: {}", error.message),
                    None => error.message.clone(),
                };
                Ok(Parsed::Refused {
                    object: Object::RefusedRouteTrafficPolicy(Box::new(policy), why.into()),
                    error,
                })
            }
            None => {
                if !error
                    .field
                    .as_deref()
                    .is_some_and(|f| f.starts_with("spec.targetRefs"))
                {
                    error.message.push_str(
                        "; spec.targetRefs cannot be read either, so the policy is attached to no route",
                    );
                }
                Err(error)
            }
        },
    }
}

/// The policy a refused RouteTrafficPolicy stands as: its metadata (what
/// attachment, age order and status read) and `targetRefs`, if those can
/// be read and name a target.
fn refused_route_traffic_policy(
    (metadata, targets): (Option<serde_json::Value>, Option<serde_json::Value>),
) -> Option<teapot_api::route_policy::RouteTrafficPolicy> {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    let meta: ObjectMeta = serde_json::from_value(metadata?).ok()?;
    let target_refs: Vec<teapot_api::route_policy::RouteTrafficPolicyTargetRef> =
        serde_json::from_value(targets?).ok()?;
    if target_refs.is_empty() {
        return None;
    }
    Some(teapot_api::route_policy::RouteTrafficPolicy {
        metadata: ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            uid: meta.uid,
            generation: meta.generation,
            resource_version: meta.resource_version,
            creation_timestamp: meta.creation_timestamp,
            ..ObjectMeta::default()
        },
        spec: teapot_api::route_policy::RouteTrafficPolicySpec {
            target_refs,
            ..Default::default()
        },
        status: None,
    })
}

/// Validates a RouteTrafficPolicy: a target at least, and every value as
/// the ingress-nginx annotation it stands for is read (one reader, errors
/// named by the policy's own fields).
fn validate_route_traffic_policy(
    policy: &teapot_api::route_policy::RouteTrafficPolicy,
) -> Result<(), FieldError> {
    if policy.spec.target_refs.is_empty() {
        return Err(FieldError::at(
            "spec.targetRefs",
            "at least one targetRef is required",
        ));
    }
    match teapot_api::admission::route_traffic_value_errors(&policy.spec)
        .into_iter()
        .next()
    {
        Some((field, why)) => Err(FieldError::at(field, why)),
        None => Ok(()),
    }
}

/// A ConfigMap as the store keeps it: its metadata, `ca.crt`, and the
/// response fields an Ingress's `custom-headers` may name when every
/// other key is one within the bounds of teapot_api::response_headers.
/// Otherwise those keys are dropped and the first refusal is kept in
/// annotation `REFUSED_ANNOTATION`, so an Ingress naming the ConfigMap is
/// told which entry is at fault. Every namespace has a `kube-root-ca.crt`
/// and tenants' applications keep their configuration in ConfigMaps;
/// holding all of that would cost memory for nothing, so nothing past
/// those bounds is kept.
fn ca_config_map(mut config_map: ConfigMap) -> ConfigMap {
    use teapot_api::admission::CA_CERT_KEY;
    use teapot_api::response_headers::{REFUSED_ANNOTATION, parse};
    config_map.binary_data = None;
    config_map.immutable = None;
    config_map.metadata.managed_fields = None;
    config_map.metadata.annotations = None;
    if let Some(data) = &mut config_map.data
        && let Err(refusal) = parse(data.iter().map(|(k, v)| (k.as_str(), v.as_str())))
    {
        data.retain(|k, _| k == CA_CERT_KEY);
        config_map.metadata.annotations =
            Some([(REFUSED_ANNOTATION.to_string(), refusal.to_string())].into());
    }
    config_map
}

/// A CA Secret as the store keeps it: name, namespace, labels and uid,
/// and `ca.crt` (merged from `stringData`) as `data`, a PEM bundle. Secrets
/// are sensitive: whatever else one holds (an application's password in
/// the same Secret, the last-applied annotation that repeats it) is never
/// kept, so the tenant re-check sees only what is kept and passes.
fn ca_secret(secret: Secret) -> Result<Secret, FieldError> {
    use teapot_api::admission::CA_SECRET_KEY;
    let ca = teapot_api::admission::secret_value(&secret, CA_SECRET_KEY)
        .unwrap_or_default()
        .to_vec();
    teapot_api::admission::check_ca_bundle(&ca).map_err(|v| FieldError::at(v.field, v.message))?;
    Ok(kept_secret(secret.metadata, CA_SECRET_KEY, ca))
}

/// An Opaque Secret as the store keeps it: the metadata teapot reads
/// (name, namespace, labels, uid, version) and one key.
fn kept_secret(
    meta: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
    value: Vec<u8>,
) -> Secret {
    Secret {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: meta.name,
            namespace: meta.namespace,
            labels: meta.labels,
            uid: meta.uid,
            resource_version: meta.resource_version,
            ..Default::default()
        },
        type_: Some(teapot_api::names::CA_SECRET_TYPE.into()),
        data: Some([(key.to_string(), k8s_openapi::ByteString(value))].into()),
        ..Secret::default()
    }
}

/// A basic authentication users' Secret as the store keeps it (beside
/// the CA Secrets, an Opaque Secret too): its metadata as [`ca_secret`]
/// keeps it and `auth` alone, its htpasswd lines checked against the
/// bounds (teapot_api::htpasswd) so an oversized or unservable Secret is
/// named where it is read.
fn htpasswd_secret(secret: Secret) -> Result<Secret, FieldError> {
    use teapot_api::htpasswd::{AUTH_KEY, parse_file};
    let auth = teapot_api::admission::secret_value(&secret, AUTH_KEY)
        .unwrap_or_default()
        .to_vec();
    parse_file(&auth).map_err(|why| FieldError::at(format!("data.{AUTH_KEY}"), why))?;
    Ok(kept_secret(secret.metadata, AUTH_KEY, auth))
}

/// An Opaque Secret every key of which is a user and every value a
/// password hash teapot verifies (ingress-nginx's `auth-map`), as the
/// htpasswd lines it stands for; `None` for any other Secret.
fn htpasswd_map(secret: &Secret) -> Option<Vec<u8>> {
    let opaque = secret
        .type_
        .as_deref()
        .unwrap_or(teapot_api::names::CA_SECRET_TYPE)
        == teapot_api::names::CA_SECRET_TYPE;
    if !opaque {
        return None;
    }
    // As the API server merges them: `stringData` over `data`.
    let mut merged: std::collections::BTreeMap<&str, &[u8]> = std::collections::BTreeMap::new();
    for (k, v) in secret.data.iter().flatten() {
        merged.insert(k, &v.0);
    }
    for (k, v) in secret.string_data.iter().flatten() {
        merged.insert(k, v.as_bytes());
    }
    if merged.is_empty() {
        return None;
    }
    let entries = teapot_api::htpasswd::parse_map(merged).ok()?;
    Some(teapot_api::htpasswd::to_file(&entries).into_bytes())
}

fn typed<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, FieldError> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        FieldError {
            field: (path != ".").then_some(path),
            message: e.into_inner().to_string(),
        }
    })
}

fn validate_ingress(ingress: &Ingress) -> Result<(), FieldError> {
    let Some(spec) = &ingress.spec else {
        return Err(FieldError::at("spec", "spec is required"));
    };
    if let Some(backend) = &spec.default_backend {
        validate_backend(backend, "spec.defaultBackend")?;
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        if let Some(host) = &rule.host {
            HostPattern::parse(host)
                .map_err(|e| FieldError::at(format!("spec.rules[{i}].host"), e.to_string()))?;
        }
        let Some(http) = &rule.http else { continue };
        for (j, p) in http.paths.iter().enumerate() {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            PathKind::parse(&p.path_type)
                .map_err(|e| FieldError::at(format!("{at}.pathType"), e.to_string()))?;
            if let Some(value) = &p.path {
                path::validate(value)
                    .map_err(|e| FieldError::at(format!("{at}.path"), e.to_string()))?;
            } else if p.path_type != "ImplementationSpecific" {
                return Err(FieldError::at(
                    format!("{at}.path"),
                    "path is required for pathType Exact and Prefix",
                ));
            }
            validate_backend(&p.backend, &format!("{at}.backend"))?;
        }
    }
    for (i, tls) in spec.tls.iter().flatten().enumerate() {
        for (j, host) in tls.hosts.iter().flatten().enumerate() {
            HostPattern::parse(host)
                .map_err(|e| FieldError::at(format!("spec.tls[{i}].hosts[{j}]"), e.to_string()))?;
        }
    }
    Ok(())
}

fn validate_backend(backend: &IngressBackend, at: &str) -> Result<(), FieldError> {
    match (&backend.service, &backend.resource) {
        (Some(service), None) => {
            if service.name.is_empty() {
                return Err(FieldError::at(
                    format!("{at}.service.name"),
                    "name is required",
                ));
            }
            match &service.port {
                Some(port) if port.number.is_some() != port.name.is_some() => Ok(()),
                _ => Err(FieldError::at(
                    format!("{at}.service.port"),
                    "exactly one of port.number and port.name is required",
                )),
            }
        }
        (None, Some(_)) => Ok(()), // served as 503 with a status message
        _ => Err(FieldError::at(
            at,
            "exactly one of backend.service and backend.resource is required",
        )),
    }
}

fn validate_service(service: &Service) -> Result<(), FieldError> {
    let ports = service
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .map(Vec::as_slice)
        .unwrap_or_default();
    for (i, p) in ports.iter().enumerate() {
        if !(1..=65535).contains(&p.port) {
            return Err(FieldError::at(
                format!("spec.ports[{i}].port"),
                "port must be between 1 and 65535",
            ));
        }
    }
    Ok(())
}

fn validate_endpoint_slice(slice: &EndpointSlice) -> Result<(), FieldError> {
    let has_service = slice
        .metadata
        .labels
        .as_ref()
        .is_some_and(|l| l.get(SERVICE_NAME_LABEL).is_some_and(|v| !v.is_empty()));
    if !has_service {
        return Err(FieldError::at(
            format!("metadata.labels[\"{SERVICE_NAME_LABEL}\"]"),
            "the label naming the Service is required",
        ));
    }
    for (i, p) in slice.ports.iter().flatten().enumerate() {
        if let Some(port) = p.port
            && !(1..=65535).contains(&port)
        {
            return Err(FieldError::at(
                format!("ports[{i}].port"),
                "port must be between 1 and 65535",
            ));
        }
    }
    for (i, e) in slice.endpoints.iter().flatten().enumerate() {
        if e.addresses.len() > MAX_ADDRESSES_PER_ENDPOINT {
            return Err(FieldError::at(
                format!("endpoints[{i}].addresses"),
                format!("more than {MAX_ADDRESSES_PER_ENDPOINT} addresses"),
            ));
        }
        if slice.address_type != "FQDN" {
            for (j, a) in e.addresses.iter().enumerate() {
                if a.parse::<std::net::IpAddr>().is_err() {
                    return Err(FieldError::at(
                        format!("endpoints[{i}].addresses[{j}]"),
                        format!("{a:?} is not an IP address"),
                    ));
                }
            }
        }
    }
    Ok(())
}

fn validate_tenant(tenant: &Tenant) -> Result<(), FieldError> {
    let spec = &tenant.spec;
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if !label_ok(&spec.cluster) {
        return Err(FieldError::at(
            "spec.cluster",
            "must be one lowercase DNS label (a-z, 0-9, '-', at most 63 characters)",
        ));
    }
    if let Some(ns) = &spec.namespace
        && !label_ok(ns)
    {
        return Err(FieldError::at(
            "spec.namespace",
            "must be a valid namespace name",
        ));
    }
    for (i, domain) in spec.allowed_domains.iter().enumerate() {
        match HostPattern::parse(domain) {
            Ok(HostPattern::Exact(_)) => {}
            Ok(HostPattern::Wildcard(_)) => {
                return Err(FieldError::at(
                    format!("spec.allowedDomains[{i}]"),
                    "a domain covers its subdomains already; write it without '*.'",
                ));
            }
            Err(e) => {
                return Err(FieldError::at(
                    format!("spec.allowedDomains[{i}]"),
                    e.to_string(),
                ));
            }
        }
    }
    for (i, cidr) in spec.node_cidrs.iter().enumerate() {
        if cidr.parse::<ipnet::IpNet>().is_err() {
            return Err(FieldError::at(
                format!("spec.nodeCIDRs[{i}]"),
                format!("{cidr:?} is not a CIDR such as 10.0.0.0/24"),
            ));
        }
    }
    Ok(())
}

fn parse_tls_secret(secret: Secret) -> Result<TlsSecret, FieldError> {
    let kind = secret.type_.as_deref().unwrap_or("Opaque");
    if kind != TLS_SECRET_TYPE {
        return Err(FieldError::at(
            "type",
            format!(
                "only {TLS_SECRET_TYPE} Secrets, or {} ones with a ca.crt, are read, this one is {kind}",
                teapot_api::names::CA_SECRET_TYPE
            ),
        ));
    }
    let field = |key: &str| -> Result<Vec<u8>, FieldError> {
        if let Some(v) = secret.data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.0.clone());
        }
        if let Some(v) = secret.string_data.as_ref().and_then(|d| d.get(key)) {
            return Ok(v.clone().into_bytes());
        }
        Err(FieldError::at(format!("data[\"{key}\"]"), "is required"))
    };
    let cert = field("tls.crt")?;
    let key = field("tls.key")?;
    let certificate = TlsCertificate::from_pem(&cert, &key).map_err(|e| FieldError {
        field: Some(e.field().to_string()),
        message: e.to_string(),
    })?;
    Ok(TlsSecret {
        certificate: std::sync::Arc::new(certificate),
        source: secret,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ingress(spec: &str) -> Result<Object, FieldError> {
        let text = format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i}}\nspec:\n{spec}"
        );
        parse_object(
            Kind::Ingress,
            serde_yaml::from_str(&text).unwrap(),
            "default",
        )
    }

    #[test]
    fn ingress_errors_name_the_field() {
        let bad_host = ingress("  rules:\n  - host: \"a_b.com\"\n");
        assert_eq!(
            bad_host.unwrap_err().field.as_deref(),
            Some("spec.rules[0].host")
        );
        let bad_path = ingress(
            "  rules:\n  - http:\n      paths:\n      - {path: nope, pathType: Prefix, backend: {service: {name: s, port: {number: 80}}}}\n",
        );
        assert_eq!(
            bad_path.unwrap_err().field.as_deref(),
            Some("spec.rules[0].http.paths[0].path")
        );
        let bad_type = ingress(
            "  rules:\n  - http:\n      paths:\n      - {path: /, pathType: Regex, backend: {service: {name: s, port: {number: 80}}}}\n",
        );
        assert_eq!(
            bad_type.unwrap_err().field.as_deref(),
            Some("spec.rules[0].http.paths[0].pathType")
        );
        let no_port = ingress("  defaultBackend: {service: {name: s}}\n");
        assert_eq!(
            no_port.unwrap_err().field.as_deref(),
            Some("spec.defaultBackend.service.port")
        );
        let missing_type = ingress(
            "  rules:\n  - http:\n      paths:\n      - {path: /, backend: {service: {name: s, port: {number: 80}}}}\n",
        );
        assert_eq!(
            missing_type.unwrap_err().field.as_deref(),
            Some("spec.rules[0].http.paths[0].pathType")
        );
    }

    #[test]
    fn tenants_are_checked_field_by_field() {
        let tenant = |spec: &str| {
            let text = format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: t}}\nspec:\n{spec}"
            );
            parse_object(Kind::Tenant, serde_yaml::from_str(&text).unwrap(), "")
        };
        assert!(tenant("  cluster: acme\n  nodeCIDRs: [10.0.0.0/24]\n").is_ok());
        assert_eq!(
            tenant("  cluster: Acme\n").unwrap_err().field.as_deref(),
            Some("spec.cluster")
        );
        assert_eq!(
            tenant("  cluster: a\n  nodeCIDRs: [10.0.0.0/33]\n")
                .unwrap_err()
                .field
                .as_deref(),
            Some("spec.nodeCIDRs[0]")
        );
        assert_eq!(
            tenant("  cluster: a\n  allowedDomains: [\"*.x.com\"]\n")
                .unwrap_err()
                .field
                .as_deref(),
            Some("spec.allowedDomains[0]")
        );
    }

    #[test]
    fn secrets_must_be_tls_and_parse() {
        let text = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/tls\nstringData:\n  tls.crt: nope\n  tls.key: nope\n";
        let e = parse_object(Kind::Secret, serde_yaml::from_str(text).unwrap(), "d").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("data[\"tls.crt\"]"));
        let opaque = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\n";
        let e = parse_object(Kind::Secret, serde_yaml::from_str(opaque).unwrap(), "d").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("type"));
    }

    /// proxy-ssl-secret's CA Secret: ca.crt is kept, nothing else of it,
    /// and a ca.crt that is no PEM bundle is named.
    #[test]
    fn a_ca_secret_keeps_its_ca_crt_alone() {
        let ca = teapot_testkit::certs::TestCa::new("backend CA");
        let value = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "ca", "namespace": "shop", "labels": {"app": "web"},
                         "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "s3cret"}},
            "stringData": {"ca.crt": ca.cert_pem(), "password": "s3cret"},
        });
        let Ok(Object::CaSecret(kept)) = parse_object(Kind::Secret, value, "shop") else {
            panic!("not a CA Secret");
        };
        let data = kept.data.as_ref().unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["ca.crt"]);
        assert_eq!(data["ca.crt"].0, ca.cert_pem().as_bytes());
        assert_eq!(kept.string_data, None);
        assert_eq!(kept.metadata.annotations, None);
        assert_eq!(kept.metadata.labels.as_ref().unwrap()["app"], "web");
        assert!(
            !serde_json::to_string(&kept.metadata)
                .unwrap()
                .contains("s3cret")
        );

        let bad = "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\nstringData: {ca.crt: nope}\n";
        let e = parse_object(Kind::Secret, serde_yaml::from_str(bad).unwrap(), "d").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("data[\"ca.crt\"]"));
    }

    /// Basic authentication's users: `auth` is kept, nothing else of the
    /// Secret; a line past the bounds (bcrypt cost 31) is named, and the
    /// Secret not kept.
    /// A ConfigMap keeps `ca.crt` and, when every other key is a
    /// response field within the bounds, those; otherwise the first
    /// refusal, named, and nothing of the other keys.
    #[test]
    fn a_config_map_keeps_response_fields_within_the_bounds() {
        use teapot_api::response_headers::REFUSED_ANNOTATION;
        let cm = |data: serde_json::Value| {
            let value = serde_json::json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "h", "namespace": "shop", "annotations": {"a": "b"}},
                "data": data,
            });
            match parse_object(Kind::ConfigMap, value, "shop") {
                Ok(Object::ConfigMap(c)) => c,
                other => panic!("{other:?}"),
            }
        };
        let kept = cm(serde_json::json!({"X-Frame-Options": "DENY", "ca.crt": "pem"}));
        assert_eq!(kept.data.unwrap().len(), 2);
        assert_eq!(kept.metadata.annotations, None);
        let refused = cm(serde_json::json!({"Set-Cookie": "s=1", "X-A": "1", "ca.crt": "pem"}));
        assert_eq!(refused.data.unwrap().keys().collect::<Vec<_>>(), ["ca.crt"]);
        let why = &refused.metadata.annotations.unwrap()[REFUSED_ANNOTATION];
        assert!(
            why.starts_with("data[\"Set-Cookie\"]: Set-Cookie may not be set"),
            "{why}"
        );
        let many: serde_json::Map<String, serde_json::Value> =
            (0..40).map(|i| (format!("X-{i}"), "1".into())).collect();
        let refused = cm(serde_json::Value::Object(many));
        assert!(refused.data.unwrap().is_empty());
        let why = &refused.metadata.annotations.unwrap()[REFUSED_ANNOTATION];
        assert!(why.starts_with("data: 40 response fields"), "{why}");
    }

    #[test]
    fn a_users_secret_keeps_its_auth_alone() {
        let value = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
            "metadata": {"name": "users", "namespace": "shop"},
            "stringData": {"auth": "alice:{SHA}qUqP5cyxm6YcTAhz05Hph5gvu9M=\n", "password": "s3cret"},
        });
        let Ok(Object::CaSecret(kept)) = parse_object(Kind::Secret, value, "shop") else {
            panic!("not kept");
        };
        let data = kept.data.as_ref().unwrap();
        assert_eq!(data.keys().collect::<Vec<_>>(), ["auth"]);
        assert!(!serde_json::to_string(&kept).unwrap().contains("s3cret"));
        let costly = "alice:$2y$31$WvD7gZ4VeRFMxZcjx6m1a.0NZ7HTAGtCA0zH8Ss6eHptLVqcx1cxS";
        let bad = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "u"},
            "stringData": {"auth": costly},
        });
        let e = parse_object(Kind::Secret, bad, "d").unwrap_err();
        assert_eq!(e.field.as_deref(), Some("data.auth"));
        assert!(
            e.message.contains("line 1: bcrypt cost 31"),
            "{}",
            e.message
        );
        // An operator's auth-map is kept as its lines.
        let map = serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "m", "namespace": "ops"},
            "data": {"alice": "e1BMQUlOfXg="},
            "stringData": {"bob": "{PLAIN}y"},
        });
        let Ok(Object::CaSecret(kept)) = parse_object(Kind::Secret, map, "ops") else {
            panic!("an auth-map is kept");
        };
        assert_eq!(
            kept.data.unwrap()["auth"].0,
            b"alice:{PLAIN}x\nbob:{PLAIN}y\n"
        );
    }

    #[test]
    fn endpoint_slices_need_their_service_label_and_ips() {
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e}\naddressType: IPv4\nendpoints: []\n";
        let e = parse_object(
            Kind::EndpointSlice,
            serde_yaml::from_str(text).unwrap(),
            "d",
        )
        .unwrap_err();
        assert!(e.field.unwrap().contains("kubernetes.io/service-name"));
        let text = "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: e, labels: {kubernetes.io/service-name: s}}\naddressType: IPv4\nendpoints: [{addresses: [not-an-ip]}]\n";
        let e = parse_object(
            Kind::EndpointSlice,
            serde_yaml::from_str(text).unwrap(),
            "d",
        )
        .unwrap_err();
        assert_eq!(e.field.as_deref(), Some("endpoints[0].addresses[0]"));
    }
}
