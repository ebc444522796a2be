//! Gateway API objects (docs/gateway-api.md): what the CRD schema makes
//! the API server refuse, checked again at load so that a hand-written
//! manifest fails the same way, naming the object and field; and the
//! hostnames an object claims, for the first-claimant rule.
//!
//! Only schema rules live here. What the specification answers with a
//! status condition instead of a refusal (a backend that does not exist,
//! an unsupported regular expression, a parent that is not there) is the
//! compile's, so those objects load and their status says why.

use std::time::Duration;

use teapot_api::HostPattern;
use teapot_gateway_api::generated::backend_tls_policies::BackendTlsPolicyValidationSubjectAltNamesType;
use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFiltersType, HttpRouteRulesMatchesPathType, HttpRouteRulesSessionPersistence,
    HttpRouteRulesSessionPersistenceCookieLifetimeType, HttpRouteRulesSessionPersistenceType,
};
use teapot_gateway_api::{BackendTlsPolicy, Gateway, GrpcRoute, HttpRoute};

use crate::field::FieldError;

/// Most weight on one backendRef (the CRD's bound).
pub const MAX_WEIGHT: i32 = 1_000_000;

/// Parses a Gateway API hostname (a listener's or a route's): a DNS name,
/// or `*.` and one; never an IP address.
pub fn parse_hostname(host: &str, field: &str) -> Result<HostPattern, FieldError> {
    if host.ends_with('.') {
        // The CRD pattern has no trailing dot, unlike an Ingress host.
        return Err(FieldError::at(field, "a hostname has no trailing dot"));
    }
    HostPattern::parse(host).map_err(|e| FieldError::at(field, e.to_string()))
}

/// A Gateway API `Duration` (GEP-2257): one to four `<number><unit>`
/// pairs, units `h`, `m`, `s`, `ms`, each number at most 5 digits.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || format!("{text:?} is not a duration such as 10s, 1m30s or 500ms");
    let bytes = text.as_bytes();
    let (mut i, mut parts, mut total) = (0, 0, Duration::ZERO);
    while i < bytes.len() {
        let start = i;
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        if i == start || i - start > 5 {
            return Err(bad());
        }
        let n: u64 = text[start..i].parse().map_err(|_| bad())?;
        let unit = match &bytes[i..] {
            [b'm', b's', ..] => {
                i += 2;
                Duration::from_millis(n)
            }
            [b'h', ..] => {
                i += 1;
                Duration::from_secs(n * 3600)
            }
            [b'm', ..] => {
                i += 1;
                Duration::from_secs(n * 60)
            }
            [b's', ..] => {
                i += 1;
                Duration::from_secs(n)
            }
            _ => return Err(bad()),
        };
        total += unit;
        parts += 1;
    }
    if parts == 0 || parts > 4 {
        return Err(bad());
    }
    Ok(total)
}

/// The CRD's header-name pattern: an RFC 9110 token.
fn header_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 256
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

fn check_header_name(name: &str, field: String) -> Result<(), FieldError> {
    if header_name(name) {
        Ok(())
    } else {
        Err(FieldError::at(
            field,
            format!("{name:?} is not an HTTP header name"),
        ))
    }
}

/// Validates a Gateway as its CRD schema would.
pub fn validate_gateway(gateway: &Gateway) -> Result<(), FieldError> {
    let spec = &gateway.spec;
    if spec.gateway_class_name.is_empty() {
        return Err(FieldError::at(
            "spec.gatewayClassName",
            "gatewayClassName is required",
        ));
    }
    validate_listeners(&spec.listeners)
}

/// Validates a ListenerSet as the API server would (a Gateway's listener
/// rules, a parent named) and converts its listeners.
pub fn listener_set(
    set: teapot_gateway_api::ListenerSet,
) -> Result<crate::store::StoredListenerSet, FieldError> {
    if set.spec.parent_ref.name.is_empty() {
        return Err(FieldError::at("spec.parentRef.name", "name is required"));
    }
    let listeners = teapot_api::admission::listener_set_listeners(&set);
    if listeners.len() != set.spec.listeners.len() {
        return Err(FieldError::at(
            "spec.listeners",
            "a listener cannot be read as a Gateway listener",
        ));
    }
    validate_listeners(&listeners)?;
    Ok(crate::store::StoredListenerSet { set, listeners })
}

/// The listener rules the CRD enforces on a Gateway and a ListenerSet
/// alike: at least one, names unique, ports, protocols, hostnames.
fn validate_listeners(
    listeners: &[teapot_gateway_api::generated::gateways::GatewayListeners],
) -> Result<(), FieldError> {
    if listeners.is_empty() {
        return Err(FieldError::at(
            "spec.listeners",
            "at least one listener is required",
        ));
    }
    let mut names = std::collections::HashSet::new();
    for (i, l) in listeners.iter().enumerate() {
        let at = format!("spec.listeners[{i}]");
        if l.name.is_empty() || !names.insert(l.name.as_str()) {
            return Err(FieldError::at(
                format!("{at}.name"),
                "listener names must be present and unique",
            ));
        }
        if !(1..=65535).contains(&l.port) {
            return Err(FieldError::at(
                format!("{at}.port"),
                "port must be between 1 and 65535",
            ));
        }
        if l.protocol.is_empty() {
            return Err(FieldError::at(
                format!("{at}.protocol"),
                "protocol is required",
            ));
        }
        if let Some(h) = &l.hostname {
            parse_hostname(h, &format!("{at}.hostname"))?;
        }
    }
    Ok(())
}

fn check_hostnames(hostnames: Option<&Vec<String>>) -> Result<(), FieldError> {
    for (i, h) in hostnames.into_iter().flatten().enumerate() {
        parse_hostname(h, &format!("spec.hostnames[{i}]"))?;
    }
    Ok(())
}

fn check_weight(weight: Option<i32>, at: String) -> Result<(), FieldError> {
    match weight {
        Some(w) if !(0..=MAX_WEIGHT).contains(&w) => Err(FieldError::at(
            at,
            format!("weight must be between 0 and {MAX_WEIGHT}"),
        )),
        _ => Ok(()),
    }
}

fn check_port(port: Option<i32>, at: String) -> Result<(), FieldError> {
    match port {
        Some(p) if !(1..=65535).contains(&p) => {
            Err(FieldError::at(at, "port must be between 1 and 65535"))
        }
        _ => Ok(()),
    }
}

/// Validates an HTTPRoute as its CRD schema (and its CEL rules) would.
pub fn validate_http_route(route: &HttpRoute) -> Result<(), FieldError> {
    let spec = &route.spec;
    check_hostnames(spec.hostnames.as_ref())?;
    for (i, p) in spec.parent_refs.iter().flatten().enumerate() {
        if p.name.is_empty() {
            return Err(FieldError::at(
                format!("spec.parentRefs[{i}].name"),
                "name is required",
            ));
        }
        check_port(p.port, format!("spec.parentRefs[{i}].port"))?;
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        let at = format!("spec.rules[{i}]");
        for (j, m) in rule.matches.iter().flatten().enumerate() {
            let at = format!("{at}.matches[{j}]");
            if let Some(path) = &m.path {
                let kind = path
                    .r#type
                    .clone()
                    .unwrap_or(HttpRouteRulesMatchesPathType::PathPrefix);
                let value = path.value.as_deref().unwrap_or("/");
                let absolute = !matches!(kind, HttpRouteRulesMatchesPathType::RegularExpression);
                if absolute && !value.starts_with('/') {
                    return Err(FieldError::at(
                        format!("{at}.path.value"),
                        "must be an absolute path starting with '/' for Exact and PathPrefix",
                    ));
                }
                if absolute && (value.contains("//") || value.contains("/./")) {
                    return Err(FieldError::at(
                        format!("{at}.path.value"),
                        "must not contain '//' or '/./'",
                    ));
                }
            }
            for (k, h) in m.headers.iter().flatten().enumerate() {
                check_header_name(&h.name, format!("{at}.headers[{k}].name"))?;
            }
            for (k, q) in m.query_params.iter().flatten().enumerate() {
                if q.name.is_empty() || q.name.len() > 256 {
                    return Err(FieldError::at(
                        format!("{at}.queryParams[{k}].name"),
                        "a query parameter name is 1 to 256 characters",
                    ));
                }
            }
        }
        for (j, f) in rule.filters.iter().flatten().enumerate() {
            let at = format!("{at}.filters[{j}]");
            let present = match f.r#type {
                HttpRouteRulesFiltersType::RequestHeaderModifier => {
                    f.request_header_modifier.is_some()
                }
                HttpRouteRulesFiltersType::ResponseHeaderModifier => {
                    f.response_header_modifier.is_some()
                }
                HttpRouteRulesFiltersType::RequestMirror => f.request_mirror.is_some(),
                HttpRouteRulesFiltersType::RequestRedirect => f.request_redirect.is_some(),
                HttpRouteRulesFiltersType::UrlRewrite => f.url_rewrite.is_some(),
                HttpRouteRulesFiltersType::ExtensionRef => f.extension_ref.is_some(),
                HttpRouteRulesFiltersType::Cors => f.cors.is_some(),
                HttpRouteRulesFiltersType::ExternalAuth => f.external_auth.is_some(),
            };
            if !present {
                return Err(FieldError::at(
                    format!("{at}.type"),
                    "the filter's configuration for its type is required",
                ));
            }
            if let Some(m) = &f.request_header_modifier {
                let names = m.set.iter().flatten().map(|h| &h.name);
                let names = names.chain(m.add.iter().flatten().map(|h| &h.name));
                for name in names.chain(m.remove.iter().flatten()) {
                    check_header_name(name, format!("{at}.requestHeaderModifier"))?;
                }
            }
            if let Some(m) = &f.response_header_modifier {
                let names = m.set.iter().flatten().map(|h| &h.name);
                let names = names.chain(m.add.iter().flatten().map(|h| &h.name));
                for name in names.chain(m.remove.iter().flatten()) {
                    check_header_name(name, format!("{at}.responseHeaderModifier"))?;
                }
            }
            if let Some(r) = &f.request_redirect {
                check_port(r.port, format!("{at}.requestRedirect.port"))?;
                if let Some(h) = &r.hostname {
                    parse_hostname(h, &format!("{at}.requestRedirect.hostname"))?;
                }
                if let Some(code) = r.status_code
                    && ![301, 302, 303, 307, 308].contains(&code)
                {
                    return Err(FieldError::at(
                        format!("{at}.requestRedirect.statusCode"),
                        "statusCode must be 301, 302, 303, 307 or 308",
                    ));
                }
            }
            if let Some(h) = f.url_rewrite.as_ref().and_then(|r| r.hostname.as_ref()) {
                parse_hostname(h, &format!("{at}.urlRewrite.hostname"))?;
            }
            if let Some(a) = &f.external_auth {
                let b = &a.backend_ref;
                let service = b.group.as_deref().unwrap_or("").is_empty()
                    && b.kind.as_deref().unwrap_or("Service") == "Service";
                if service && b.port.is_none() {
                    return Err(FieldError::at(
                        format!("{at}.externalAuth.backendRef"),
                        "Must have port for Service reference",
                    ));
                }
                check_port(b.port, format!("{at}.externalAuth.backendRef.port"))?;
            }
        }
        if let Some(sp) = &rule.session_persistence {
            check_session_persistence(sp, &format!("{at}.sessionPersistence"))?;
        }
        for (j, b) in rule.backend_refs.iter().flatten().enumerate() {
            check_weight(b.weight, format!("{at}.backendRefs[{j}].weight"))?;
            check_port(b.port, format!("{at}.backendRefs[{j}].port"))?;
        }
        if let Some(t) = &rule.timeouts {
            let request = t.request.as_deref().map(parse_duration).transpose();
            let request =
                request.map_err(|e| FieldError::at(format!("{at}.timeouts.request"), e))?;
            let backend = t.backend_request.as_deref().map(parse_duration).transpose();
            let backend =
                backend.map_err(|e| FieldError::at(format!("{at}.timeouts.backendRequest"), e))?;
            if let (Some(r), Some(b)) = (request, backend)
                && !r.is_zero()
                && b > r
            {
                return Err(FieldError::at(
                    format!("{at}.timeouts.backendRequest"),
                    "backendRequest timeout cannot be longer than request timeout",
                ));
            }
        }
    }
    Ok(())
}

/// A rule's sessionPersistence as its schema's CEL rules have it: the
/// type's own stanza only (type defaults to Cookie), and an
/// absoluteTimeout with a Permanent cookie.
fn check_session_persistence(
    sp: &HttpRouteRulesSessionPersistence,
    at: &str,
) -> Result<(), FieldError> {
    if let Some(t) = &sp.absolute_timeout {
        parse_duration(t).map_err(|e| FieldError::at(format!("{at}.absoluteTimeout"), e))?;
    }
    let cookie = !matches!(
        sp.r#type,
        Some(HttpRouteRulesSessionPersistenceType::Header)
    );
    let rule = |ok: bool, message: &str| {
        if ok {
            Ok(())
        } else {
            Err(FieldError::at(at, message))
        }
    };
    rule(
        sp.cookie.is_none() || cookie,
        "cookie must be nil if type is not Cookie",
    )?;
    rule(
        sp.cookie.is_some() || !cookie,
        "cookie must be specified for Cookie type",
    )?;
    rule(
        sp.header.is_none() || !cookie,
        "header must be nil if type is not Header",
    )?;
    rule(
        sp.header.is_some() || cookie,
        "header must be specified for Header type",
    )?;
    let permanent = sp.cookie.as_ref().and_then(|c| c.lifetime_type.as_ref());
    rule(
        !matches!(
            permanent,
            Some(HttpRouteRulesSessionPersistenceCookieLifetimeType::Permanent)
        ) || sp.absolute_timeout.is_some(),
        "AbsoluteTimeout must be specified when cookie lifetimeType is Permanent",
    )
}

/// Validates a BackendTLSPolicy as its CRD schema (and its CEL rules)
/// would: at least one target, the name verified a DNS name, exactly one
/// source of trust anchors, and each subjectAltName of its own type.
pub fn validate_backend_tls_policy(policy: &BackendTlsPolicy) -> Result<(), FieldError> {
    let spec = &policy.spec;
    if spec.target_refs.is_empty() {
        return Err(FieldError::at(
            "spec.targetRefs",
            "at least one targetRef is required",
        ));
    }
    for (i, t) in spec.target_refs.iter().enumerate() {
        if t.name.is_empty() {
            return Err(FieldError::at(
                format!("spec.targetRefs[{i}].name"),
                "name is required",
            ));
        }
        let same = spec
            .target_refs
            .iter()
            .filter(|o| o.group == t.group && o.kind == t.kind && o.name == t.name)
            .filter(|o| o.section_name == t.section_name)
            .count();
        if same > 1 {
            return Err(FieldError::at(
                format!("spec.targetRefs[{i}].sectionName"),
                "sectionName must be unique when targetRefs includes 2 or more references to the same target",
            ));
        }
    }
    let validation = &spec.validation;
    let hostname = &validation.hostname;
    if hostname.is_empty() || hostname.starts_with("*.") {
        return Err(FieldError::at(
            "spec.validation.hostname",
            "a hostname (no wildcard) is required",
        ));
    }
    parse_hostname(hostname, "spec.validation.hostname")?;
    let refs = validation
        .ca_certificate_refs
        .as_ref()
        .is_some_and(|r| !r.is_empty());
    let well_known = validation
        .well_known_ca_certificates
        .as_ref()
        .is_some_and(|w| !w.is_empty());
    match (refs, well_known) {
        (true, true) => {
            return Err(FieldError::at(
                "spec.validation",
                "must not contain both CACertificateRefs and WellKnownCACertificates",
            ));
        }
        (false, false) => {
            return Err(FieldError::at(
                "spec.validation",
                "must specify either CACertificateRefs or WellKnownCACertificates",
            ));
        }
        _ => {}
    }
    for (i, san) in validation.subject_alt_names.iter().flatten().enumerate() {
        let at = format!("spec.validation.subjectAltNames[{i}]");
        let (hostname, uri) = (
            san.hostname.as_deref().filter(|h| !h.is_empty()),
            san.uri.as_deref().filter(|u| !u.is_empty()),
        );
        match (&san.r#type, hostname, uri) {
            (BackendTlsPolicyValidationSubjectAltNamesType::Hostname, Some(h), None) => {
                parse_hostname(h, &format!("{at}.hostname"))?;
            }
            (BackendTlsPolicyValidationSubjectAltNamesType::Uri, None, Some(u)) => {
                if !u.contains("://") {
                    return Err(FieldError::at(
                        format!("{at}.uri"),
                        "a URI with a scheme and an authority is required",
                    ));
                }
            }
            (BackendTlsPolicyValidationSubjectAltNamesType::Hostname, ..) => {
                return Err(FieldError::at(
                    at,
                    "a Hostname subjectAltName has a hostname and no uri",
                ));
            }
            (BackendTlsPolicyValidationSubjectAltNamesType::Uri, ..) => {
                return Err(FieldError::at(
                    at,
                    "a URI subjectAltName has a uri and no hostname",
                ));
            }
        }
    }
    Ok(())
}

/// Validates a GRPCRoute as its CRD schema would.
pub fn validate_grpc_route(route: &GrpcRoute) -> Result<(), FieldError> {
    let spec = &route.spec;
    check_hostnames(spec.hostnames.as_ref())?;
    for (i, p) in spec.parent_refs.iter().flatten().enumerate() {
        if p.name.is_empty() {
            return Err(FieldError::at(
                format!("spec.parentRefs[{i}].name"),
                "name is required",
            ));
        }
        check_port(p.port, format!("spec.parentRefs[{i}].port"))?;
    }
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        let at = format!("spec.rules[{i}]");
        for (j, m) in rule.matches.iter().flatten().enumerate() {
            if let Some(method) = &m.method
                && method.service.is_none()
                && method.method.is_none()
            {
                return Err(FieldError::at(
                    format!("{at}.matches[{j}].method"),
                    "one or both of service and method must be specified",
                ));
            }
            for (k, h) in m.headers.iter().flatten().enumerate() {
                check_header_name(&h.name, format!("{at}.matches[{j}].headers[{k}].name"))?;
            }
        }
        for (j, b) in rule.backend_refs.iter().flatten().enumerate() {
            check_weight(b.weight, format!("{at}.backendRefs[{j}].weight"))?;
            check_port(b.port, format!("{at}.backendRefs[{j}].port"))?;
        }
    }
    Ok(())
}

/// The hostnames a Gateway's listeners claim (typed form of
/// [`teapot_api::admission::gateway_api_hostnames`]); invalid ones skipped.
pub fn gateway_hostnames(gateway: &Gateway) -> impl Iterator<Item = HostPattern> + '_ {
    gateway
        .spec
        .listeners
        .iter()
        .filter_map(|l| l.hostname.as_deref())
        .filter_map(|h| HostPattern::parse(h).ok())
}

/// The hostnames of a route's `spec.hostnames`; invalid ones skipped.
pub fn route_hostnames(hostnames: &[String]) -> impl Iterator<Item = HostPattern> + '_ {
    hostnames.iter().filter_map(|h| HostPattern::parse(h).ok())
}

/// Whether teapot serves Gateways of class `class`: a GatewayClass of that
/// name with teapot's controllerName, or (with no GatewayClass of that name
/// in the store, as in a manifests directory written for teapot) the class
/// named `teapot`. The one rule the HTTP and the L4 compile share.
pub fn is_teapot_class(store: &crate::store::Store, class: &str) -> bool {
    match store.gateway_classes.get(class) {
        Some(c) => c.object.spec.controller_name == teapot_api::names::GATEWAY_CONTROLLER_NAME,
        None => class == teapot_api::names::GATEWAY_CLASS,
    }
}

/// Whether namespace `name` matches a listener's
/// `allowedRoutes.namespaces.selector`. A namespace without a Namespace
/// object has only the label Kubernetes puts on every one,
/// `kubernetes.io/metadata.name`.
pub fn namespace_selected(
    store: &crate::store::Store,
    name: &str,
    selector: &teapot_gateway_api::generated::gateways::GatewayListenersAllowedRoutesNamespacesSelector,
) -> bool {
    let labels = store
        .namespaces
        .get(name)
        .and_then(|n| n.object.metadata.labels.as_ref());
    let label = |key: &str| -> Option<&str> {
        if key == "kubernetes.io/metadata.name" {
            return Some(name);
        }
        labels.and_then(|l| l.get(key)).map(String::as_str)
    };
    let by_labels = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| label(k) == Some(v.as_str()));
    let by_expressions = selector.match_expressions.iter().flatten().all(|e| {
        let values = e.values.as_deref().unwrap_or_default();
        match (e.operator.as_str(), label(&e.key)) {
            ("In", Some(v)) => values.iter().any(|x| x == v),
            ("NotIn", v) => v.is_none_or(|v| !values.iter().any(|x| x == v)),
            ("Exists", v) => v.is_some(),
            ("DoesNotExist", v) => v.is_none(),
            _ => false,
        }
    });
    by_labels && by_expressions
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_follow_gep_2257() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1h0m0s1ms").unwrap().as_millis(), 3_600_001);
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        for bad in ["", "10", "s", "1.5s", "123456s", "1h1m1s1ms1s", "-1s", "1d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }

    fn route(spec: &str) -> Result<(), FieldError> {
        let text = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r}}\nspec:\n{spec}"
        );
        validate_http_route(&serde_yaml::from_str(&text).unwrap())
    }

    #[test]
    fn session_persistence_and_external_auth_follow_the_schema() {
        let rule = |extra: &str| {
            route(&format!(
                "  rules: [{{backendRefs: [{{name: web, port: 80}}], {extra}}}]\n"
            ))
        };
        assert!(rule("sessionPersistence: {cookie: {name: pin}}").is_ok());
        assert!(rule("sessionPersistence: {type: Header, header: {name: x-s}}").is_ok());
        for (extra, field, says) in [
            (
                "sessionPersistence: {}",
                "spec.rules[0].sessionPersistence",
                "cookie must be specified",
            ),
            (
                "sessionPersistence: {type: Header, cookie: {}}",
                "spec.rules[0].sessionPersistence",
                "cookie must be nil",
            ),
            (
                "sessionPersistence: {cookie: {lifetimeType: Permanent}}",
                "spec.rules[0].sessionPersistence",
                "AbsoluteTimeout must be specified",
            ),
            (
                "sessionPersistence: {absoluteTimeout: 1d, cookie: {}}",
                "spec.rules[0].sessionPersistence.absoluteTimeout",
                "not a duration",
            ),
            (
                "filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: auth}}}]",
                "spec.rules[0].filters[0].externalAuth.backendRef",
                "Must have port",
            ),
        ] {
            let e = rule(extra).unwrap_err();
            assert_eq!(e.field.as_deref(), Some(field), "{extra}");
            assert!(e.message.contains(says), "{extra}: {}", e.message);
        }
    }

    #[test]
    fn route_errors_name_the_field() {
        assert!(route("  hostnames: [\"*.example.com\"]\n  rules: [{matches: [{path: {type: RegularExpression, value: \"(\"}}]}]\n").is_ok(),
            "a bad regex is a status condition, not a refusal");
        let field = |spec: &str| route(spec).unwrap_err().field.unwrap();
        assert_eq!(field("  hostnames: [\"a_b\"]\n"), "spec.hostnames[0]");
        assert_eq!(
            field("  rules: [{matches: [{path: {type: Exact, value: nope}}]}]\n"),
            "spec.rules[0].matches[0].path.value"
        );
        assert_eq!(
            field("  rules: [{matches: [{}, {headers: [{name: \"a b\", value: x}]}]}]\n"),
            "spec.rules[0].matches[1].headers[0].name"
        );
        assert_eq!(
            field("  rules: [{backendRefs: [{name: s, port: 80, weight: -1}]}]\n"),
            "spec.rules[0].backendRefs[0].weight"
        );
        assert_eq!(
            field("  rules: [{filters: [{type: RequestRedirect}]}]\n"),
            "spec.rules[0].filters[0].type"
        );
        assert_eq!(
            field("  rules: [{timeouts: {request: 1s, backendRequest: 2s}}]\n"),
            "spec.rules[0].timeouts.backendRequest"
        );
        assert_eq!(
            field("  rules: [{timeouts: {request: soon}}]\n"),
            "spec.rules[0].timeouts.request"
        );
    }

    #[test]
    fn gateway_errors_name_the_field() {
        let gateway = |listeners: &str| {
            let text = format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g}}\nspec:\n  gatewayClassName: teapot\n  listeners: {listeners}\n"
            );
            validate_gateway(&serde_yaml::from_str(&text).unwrap())
        };
        assert!(gateway("[{name: http, protocol: HTTP, port: 80, hostname: \"*.x.com\"}]").is_ok());
        let field = |l: &str| gateway(l).unwrap_err().field.unwrap();
        assert_eq!(field("[]"), "spec.listeners");
        assert_eq!(
            field("[{name: a, protocol: HTTP, port: 80}, {name: a, protocol: HTTP, port: 81}]"),
            "spec.listeners[1].name"
        );
        assert_eq!(
            field("[{name: a, protocol: HTTP, port: 0}]"),
            "spec.listeners[0].port"
        );
        assert_eq!(
            field("[{name: a, protocol: HTTP, port: 80, hostname: 10.0.0.1}]"),
            "spec.listeners[0].hostname"
        );
    }
}
