//! Ingress rules.

use std::collections::BTreeSet;

use k8s_openapi::api::networking::v1::{Ingress, IngressBackend};

use super::hosts::{HostScope, check_host, host_scope};
use super::meta::check_metadata;
use super::names::{dns_subdomain, dns1035_label, port_name};
use super::regexes::{CompileBudget, check_budgeted};
use super::strings::key_field;
use super::{AdmissionContext, Violation, check_path, quote};
use crate::annotations::ObjectKind;
use crate::host::HostPattern;
use crate::names::INGRESS_CLASS;
use crate::path::PathKind;
use crate::regex::{self, PathRegex};

/// Checks an Ingress a tenant writes into `namespace`: class `teapot`;
/// hosts valid, in the tenant's scope and held by nobody else (rules and
/// `tls`); paths of the strict class; backends only Services of the
/// namespace with a valid port; TLS Secrets of the namespace; hosts,
/// paths and Ingresses within the tenant's limits; metadata rules.
pub fn check_ingress(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    ingress: &Ingress,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(
        ctx,
        namespace,
        &ingress.metadata,
        ObjectKind::Ingress,
        &mut out,
    );
    out.extend(ctx.over_limit(
        |e| e.ingresses,
        ctx.limits.max_ingresses,
        "Ingresses",
        "maxIngresses",
    ));
    let Some(spec) = &ingress.spec else {
        out.push(Violation::new("spec", "spec is required"));
        return out;
    };
    if spec.ingress_class_name.as_deref() != Some(INGRESS_CLASS) {
        out.push(Violation::new(
            "spec.ingressClassName",
            format!(
                "must be {INGRESS_CLASS:?} (found {}): tenant Ingresses are served by teapot only",
                spec.ingress_class_name
                    .as_deref()
                    .map_or("none".to_string(), quote)
            ),
        ));
    }
    if let Some(backend) = &spec.default_backend {
        check_backend(backend, "spec.defaultBackend", &mut out);
    }
    let max_hosts = ctx.limits.max_hosts_per_ingress as usize;
    let max_paths = ctx.limits.max_paths_per_ingress as usize;
    let rules = spec.rules.as_deref().unwrap_or_default();
    if rules.len() > max_hosts {
        out.push(Violation::new(
            "spec.rules",
            format!(
                "{} rules, more than the limit (maxHostsPerIngress = {max_hosts})",
                rules.len()
            ),
        ));
    }
    let regex_paths = regex::ingress_uses_regex(ingress);
    // Counted against the tenant's budget before any is compiled.
    out.extend(check_budgeted(
        ctx,
        &regex::ingress_regexes(ingress),
        |budget, out| {
            check_canary_pattern(ingress, budget, out);
            check_match_cn(ingress, budget, out);
            if regex_paths {
                check_regex_paths(ingress, budget, out);
            }
        },
    ));
    check_auth(ctx, ingress, &mut out);
    check_auth_tls(namespace, ingress, &mut out);
    check_basic_auth(namespace, ingress, &mut out);
    out.extend(check_custom_headers(
        namespace,
        ingress.metadata.annotations.as_ref(),
    ));
    let mut hosts = BTreeSet::new();
    let mut paths = 0usize;
    for (i, rule) in rules.iter().enumerate() {
        if let Some(host) = &rule.host
            && let Some((h, _)) = check_host(ctx, &format!("spec.rules[{i}].host"), host, &mut out)
        {
            hosts.insert(h);
        }
        let Some(http) = &rule.http else { continue };
        paths += http.paths.len();
        for (j, p) in http.paths.iter().enumerate() {
            let at = format!("spec.rules[{i}].http.paths[{j}]");
            if let Err(e) = PathKind::parse(&p.path_type) {
                out.push(Violation::new(format!("{at}.pathType"), e.to_string()));
            }
            match &p.path {
                // A regex path is checked as one (`check_regex_paths`).
                Some(_) if regex_paths => {}
                Some(path) => {
                    if let Err(e) = check_path(path) {
                        out.push(Violation::new(format!("{at}.path"), e));
                    }
                }
                None if p.path_type != "ImplementationSpecific" => out.push(Violation::new(
                    format!("{at}.path"),
                    "path is required for pathType Exact and Prefix",
                )),
                None => {}
            }
            check_backend(&p.backend, &format!("{at}.backend"), &mut out);
        }
    }
    if paths > max_paths {
        out.push(Violation::new(
            "spec.rules",
            format!("{paths} paths, more than the limit (maxPathsPerIngress = {max_paths})"),
        ));
    }
    let tls = spec.tls.as_deref().unwrap_or_default();
    if tls.len() > max_hosts {
        out.push(Violation::new(
            "spec.tls",
            format!(
                "{} entries, more than the limit (maxHostsPerIngress = {max_hosts})",
                tls.len()
            ),
        ));
    }
    for (i, t) in tls.iter().enumerate() {
        for (j, host) in t.hosts.iter().flatten().enumerate() {
            let field = format!("spec.tls[{i}].hosts[{j}]");
            if let Some((h, _)) = check_host(ctx, &field, host, &mut out) {
                hosts.insert(h);
            }
        }
        if let Some(name) = &t.secret_name
            && let Err(e) = dns_subdomain(name)
        {
            out.push(Violation::new(
                format!("spec.tls[{i}].secretName"),
                format!("must name a Secret in this namespace: {e}"),
            ));
        }
    }
    // `server-alias` names are host claims like rule hosts (and count
    // against the same limit): a host another tenant holds, or outside
    // this tenant's scope, is refused here as a rule's host is.
    const ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";
    let aliases = ingress
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ALIAS));
    for name in aliases
        .into_iter()
        .flat_map(|v| v.split(','))
        .map(str::trim)
    {
        let field = format!("metadata.annotations[{ALIAS:?}]");
        if name.is_empty() {
            continue;
        }
        if name.starts_with('*') || name.contains(':') {
            out.push(Violation::new(
                field,
                format!("{name:?}: an alias is an exact host name"),
            ));
        } else if let Some((h, _)) = check_host(ctx, &field, name, &mut out) {
            hosts.insert(h);
        }
    }
    if hosts.len() > max_hosts {
        out.push(Violation::new(
            "spec",
            format!(
                "{} distinct hosts, more than the limit (maxHostsPerIngress = {max_hosts})",
                hosts.len()
            ),
        ));
    }
    out
}

/// The paths of an Ingress with `use-regex` or `rewrite-target`: each a
/// regular expression within the bounded engine's limits, and every `$N`
/// of `rewrite-target` a group each of them has (ingress-nginx would send
/// an empty string for a group that does not exist).
fn check_regex_paths(ingress: &Ingress, budget: &mut CompileBudget, out: &mut Vec<Violation>) {
    let annotations = ingress.metadata.annotations.as_ref();
    let target = annotations.and_then(|a| a.get(regex::REWRITE_TARGET));
    let target_field = key_field("metadata.annotations", regex::REWRITE_TARGET);
    if let Some(target) = target
        && !target.starts_with('/')
    {
        out.push(Violation::new(
            &target_field,
            format!(
                "{} is not a path starting with '/': teapot rewrites the path the backends get and never redirects with it",
                quote(target)
            ),
        ));
    }
    if let Some(target) = target
        && target.contains('?')
    {
        out.push(Violation::new(
            &target_field,
            format!(
                "{} carries a query: teapot keeps the request's query and rewrites only the path",
                quote(target)
            ),
        ));
    }
    let wanted = target.map_or(0, |t| regex::target_groups(t).max().unwrap_or(0));
    for (field, path) in regex::ingress_paths(ingress) {
        let Some(compiled) = budget.compile(|| PathRegex::compile(path), |r| r.memory()) else {
            return;
        };
        match compiled {
            Err(e) => out.push(Violation::new(
                &field,
                format!("a regular expression here (use-regex or rewrite-target): {e}"),
            )),
            Ok(r) if wanted > r.groups() => out.push(Violation::new(
                &target_field,
                format!(
                    "${wanted} refers to capture group {wanted}, but the path {} at {field} has {} group(s)",
                    quote(path),
                    r.groups()
                ),
            )),
            Ok(_) => {}
        }
    }
}

/// `canary-by-header-pattern` compiles within the bounded engine's
/// limits (its syntax checked alone first, so it cannot reach outside its
/// group).
fn check_canary_pattern(ingress: &Ingress, budget: &mut CompileBudget, out: &mut Vec<Violation>) {
    let annotations = ingress.metadata.annotations.as_ref();
    let Some(pattern) = annotations.and_then(|a| a.get(regex::CANARY_PATTERN)) else {
        return;
    };
    let Some(checked) = budget.compile(|| regex::compile_contains(pattern), |r| r.memory()) else {
        return;
    };
    if let Err(why) = checked.map_err(|e| e.to_string()) {
        out.push(Violation::new(
            key_field("metadata.annotations", regex::CANARY_PATTERN),
            why,
        ));
    }
}

/// `auth-tls-match-cn` compiles within the bounded engine's limits, as
/// the canary pattern does (a subject contains a match, as nginx's `~`
/// searches `$ssl_client_s_dn`).
fn check_match_cn(ingress: &Ingress, budget: &mut CompileBudget, out: &mut Vec<Violation>) {
    use crate::annotations::AUTH_TLS_MATCH_CN;
    let annotations = ingress.metadata.annotations.as_ref();
    // A value the allowlist refuses (control characters, no `CN=`) is
    // named there, and not compiled.
    let Some(pattern) = annotations
        .and_then(|a| a.get(AUTH_TLS_MATCH_CN))
        .filter(|p| crate::annotations::parse(ObjectKind::Ingress, AUTH_TLS_MATCH_CN, p).is_ok())
    else {
        return;
    };
    let Some(checked) = budget.compile(|| regex::compile_contains(pattern), |r| r.memory()) else {
        return;
    };
    if let Err(e) = checked {
        out.push(Violation::new(
            key_field("metadata.annotations", AUTH_TLS_MATCH_CN),
            e.to_string(),
        ));
    }
}

/// Client certificates (`auth-tls-*`): the CA Secret one of the Ingress's
/// own namespace (the agent mirrors the tenant's Secret there), and no
/// setting that asks for certificates without the Secret (a value that
/// does not parse is named by the allowlist's check).
fn check_auth_tls(namespace: &str, ingress: &Ingress, out: &mut Vec<Violation>) {
    use crate::annotations::{AUTH_TLS_SECRET, AuthTls, parse};
    let annotations = ingress.metadata.annotations.iter().flatten();
    match AuthTls::read(namespace, annotations) {
        Ok(None) => {}
        Ok(Some(auth)) => {
            let (ns, name) = &auth.secret;
            if ns != namespace {
                out.push(Violation::new(
                    key_field("metadata.annotations", AUTH_TLS_SECRET),
                    format!(
                        "names Secret {ns}/{name}: the CA Secret of client certificates must be in the Ingress's own namespace {namespace}"
                    ),
                ));
            }
        }
        Err(errors) => {
            let value = |key: &str| {
                let v = ingress.metadata.annotations.as_ref()?.get(key)?;
                Some(v.as_str())
            };
            for (key, why) in errors {
                let readable =
                    value(key).is_some_and(|v| parse(ObjectKind::Ingress, key, v).is_ok());
                if readable {
                    out.push(Violation::new(key_field("metadata.annotations", key), why));
                }
            }
        }
    }
}

/// Admission of an Ingress of `namespace`: its `custom-headers` names a
/// ConfigMap of that namespace (the agent mirrors the tenant's there), as
/// ingress-nginx allows only its own namespace's. A value that does not
/// read is the allowlist's to name.
fn check_custom_headers(
    namespace: &str,
    annotations: Option<&std::collections::BTreeMap<String, String>>,
) -> Option<Violation> {
    let (ns, name) = crate::response_headers::config_map_ref(namespace, annotations)?.ok()?;
    (ns != namespace).then(|| {
        Violation::new(
            format!("metadata.annotations[{:?}]", crate::response_headers::ANNOTATION),
            format!(
                "names ConfigMap {ns}/{name}: the response fields' ConfigMap must be in the Ingress's own namespace {namespace}"
            ),
        )
    })
}

/// Basic authentication (`auth-type: basic`): the users' Secret one of
/// the Ingress's own namespace (the agent mirrors the tenant's Secret
/// there), and no companion without `auth-type` or `auth-type` without
/// its Secret (a value that does not parse is named by the allowlist's
/// check). What the Secret holds is the Secret's own admission.
fn check_basic_auth(namespace: &str, ingress: &Ingress, out: &mut Vec<Violation>) {
    use crate::annotations::{AUTH_SECRET, BasicAuthAnnotations, parse};
    let annotations = ingress.metadata.annotations.iter().flatten();
    match BasicAuthAnnotations::read(namespace, annotations) {
        Ok(None) => {}
        Ok(Some(auth)) => {
            let (ns, name) = &auth.secret;
            if ns != namespace {
                out.push(Violation::new(
                    key_field("metadata.annotations", AUTH_SECRET),
                    format!(
                        "names Secret {ns}/{name}: the users' Secret must be in the Ingress's own namespace {namespace}"
                    ),
                ));
            }
        }
        Err(errors) => {
            let value = |key: &str| {
                let v = ingress.metadata.annotations.as_ref()?.get(key)?;
                Some(v.as_str())
            };
            for (key, why) in errors {
                // Absent (auth-secret missing) or readable: named here; a
                // value that does not parse is named by the allowlist.
                let named_elsewhere =
                    value(key).is_some_and(|v| parse(ObjectKind::Ingress, key, v).is_err());
                if !named_elsewhere {
                    out.push(Violation::new(key_field("metadata.annotations", key), why));
                }
            }
        }
    }
}

/// An `auth-url` naming an address: the tenant's own nodes only, as an
/// endpoint would be (its form is the allowlist's to check); no framing
/// or forwarding field among `auth-response-headers`.
fn check_auth(ctx: &AdmissionContext<'_>, ingress: &Ingress, out: &mut Vec<Violation>) {
    use crate::annotations::{AuthHost, AuthTarget, auth_response_header_refused};
    const AUTH_URL: &str = "nginx.ingress.kubernetes.io/auth-url";
    const COPIED: &str = "nginx.ingress.kubernetes.io/auth-response-headers";
    let annotations = ingress.metadata.annotations.as_ref();
    if let Some(url) = annotations.and_then(|a| a.get(AUTH_URL))
        && let Ok(AuthTarget {
            host: AuthHost::Address(ip),
            ..
        }) = AuthTarget::parse(url)
        && let Err(why) = super::addresses::check_endpoint_address(ctx, ip)
    {
        out.push(Violation::new(
            key_field("metadata.annotations", AUTH_URL),
            format!("the authentication service must be one of your Services or inside your nodeCIDRs: {why}"),
        ));
    }
    let copied = annotations.and_then(|a| a.get(COPIED));
    for name in copied.into_iter().flat_map(|v| v.split(',')).map(str::trim) {
        if let Some(why) = auth_response_header_refused(name) {
            out.push(Violation::new(
                key_field("metadata.annotations", COPIED),
                format!("{name} cannot be copied from the authentication service: {why}"),
            ));
        }
    }
}

fn check_backend(backend: &IngressBackend, at: &str, out: &mut Vec<Violation>) {
    if backend.resource.is_some() {
        out.push(Violation::new(
            format!("{at}.resource"),
            "resource backends are refused: a backend must be a Service in the same namespace",
        ));
        return;
    }
    let Some(service) = &backend.service else {
        out.push(Violation::new(at, "a service backend is required"));
        return;
    };
    if let Err(e) = dns1035_label(&service.name) {
        out.push(Violation::new(
            format!("{at}.service.name"),
            format!("must name a Service in this namespace: {e}"),
        ));
    }
    let Some(port) = &service.port else {
        out.push(Violation::new(
            format!("{at}.service.port"),
            "a port number or name is required",
        ));
        return;
    };
    match (&port.number, &port.name) {
        (Some(n), None) => {
            if !(1..=65535).contains(n) {
                out.push(Violation::new(
                    format!("{at}.service.port.number"),
                    format!("{n} is not a port (1-65535)"),
                ));
            }
        }
        (None, Some(name)) => {
            if let Err(e) = port_name(name) {
                out.push(Violation::new(format!("{at}.service.port.name"), e));
            }
        }
        _ => out.push(Violation::new(
            format!("{at}.service.port"),
            "exactly one of number and name is required",
        )),
    }
}

/// Custom hosts of an admitted Ingress that wait for their DNS proof, as
/// one message each (the webhook returns them as warnings).
pub fn pending_custom_hosts(ctx: &AdmissionContext<'_>, ingress: &Ingress) -> Vec<String> {
    let Some(spec) = &ingress.spec else {
        return Vec::new();
    };
    let name = ingress.metadata.name.as_deref().unwrap_or("");
    let assigned = crate::hostname::assigned_hostname(name, ctx.cluster(), ctx.domain);
    let token = ctx.tenant.verification_token();
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for (i, rule) in spec.rules.iter().flatten().enumerate() {
        let Some(raw) = &rule.host else { continue };
        let Ok(host) = HostPattern::parse(raw) else {
            continue;
        };
        let custom = host_scope(ctx, &host) == Ok(HostScope::Custom)
            && ctx
                .holdings
                .holder_conflicting(&host, ctx.cluster())
                .is_none();
        if custom && seen.insert(host.to_string()) {
            out.push(format!(
                "spec.rules[{i}].host: {host} is a custom domain; teapot serves it once DNS proves it is yours: a CNAME to {assigned}, or a TXT record _teapot.{host} containing {token:?}"
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::ExistingObjects;
    use super::super::testing::*;
    use super::*;

    const BACKEND: &str = "backend: {service: {name: web, port: {number: 80}}}";

    fn rule(host: &str, path: &str) -> String {
        format!(
            "  - host: {host:?}\n    http:\n      paths:\n      - {{path: {path:?}, pathType: Prefix, {BACKEND}}}\n"
        )
    }

    fn check(spec: &str) -> Vec<String> {
        let f = Fixture::new();
        let ing = ingress(spec);
        fields(&check_ingress(&f.ctx(), NS, &ing))
    }

    #[test]
    fn a_good_ingress() {
        let spec = format!(
            "  ingressClassName: teapot\n  rules:\n{}{}{}  tls:\n  - hosts: [shop.example.com]\n    secretName: shop-tls\n",
            rule("web-shop.acme.lb.example.net", "/"),
            rule("shop.example.com", "/api/v1"),
            rule("www.acme-shop.com", "/"),
        );
        assert_eq!(check(&spec), Vec::<String>::new());
    }

    fn with_annotations(annotations: &str, paths: &[&str]) -> Ingress {
        let paths: String = paths
            .iter()
            .map(|p| {
                format!("      - {{path: {p:?}, pathType: ImplementationSpecific, {BACKEND}}}\n")
            })
            .collect();
        yaml(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: web, namespace: {NS}, annotations: {{{annotations}}}}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - host: web-shop.acme.lb.example.net\n    http:\n      paths:\n{paths}"
        ))
    }

    fn violations(ing: &Ingress) -> Vec<Violation> {
        let f = Fixture::new();
        check_ingress(&f.ctx(), NS, ing)
    }

    #[test]
    fn basic_auth_names_a_secret_of_its_own_namespace() {
        let n = |k: &str| format!("nginx.ingress.kubernetes.io/{k}");
        let got = |a: &str| fields(&violations(&with_annotations(a, &["/"])));
        let ok = format!(
            "{}: basic, {}: users, {}: Staff",
            n("auth-type"),
            n("auth-secret"),
            n("auth-realm")
        );
        assert_eq!(got(&ok), Vec::<String>::new());
        let own = format!(
            "{}: basic, {}: {NS}/users",
            n("auth-type"),
            n("auth-secret")
        );
        assert_eq!(got(&own), Vec::<String>::new());
        let secret_field = format!("metadata.annotations[\"{}\"]", n("auth-secret"));
        let other = format!(
            "{}: basic, {}: other/users",
            n("auth-type"),
            n("auth-secret")
        );
        assert_eq!(got(&other), std::slice::from_ref(&secret_field));
        // Served open by ingress-nginx: refused here.
        assert_eq!(
            got(&format!("{}: basic", n("auth-type"))),
            std::slice::from_ref(&secret_field)
        );
        assert_eq!(got(&format!("{}: users", n("auth-secret"))), [secret_field]);
        let type_field = format!("metadata.annotations[\"{}\"]", n("auth-type"));
        let digest = format!("{}: digest, {}: users", n("auth-type"), n("auth-secret"));
        assert_eq!(got(&digest), [type_field]);
    }

    #[test]
    fn regex_paths_are_checked_as_regexes_with_their_groups() {
        const TARGET: &str = "nginx.ingress.kubernetes.io/rewrite-target";
        let target_field = format!("metadata.annotations[\"{TARGET}\"]");
        // Served: a regex path (not a strict path) with the groups used.
        let ok = with_annotations(&format!("{TARGET}: /$2"), &["/something(/|$)(.*)"]);
        assert!(violations(&ok).is_empty(), "{:?}", violations(&ok));
        let ok = with_annotations(
            "nginx.ingress.kubernetes.io/use-regex: \"true\"",
            &["/foo/bar/[a-z]{3}"],
        );
        assert!(violations(&ok).is_empty());
        // A bad pattern, named on its path field with the reason.
        let bad = violations(&with_annotations(
            &format!("{TARGET}: /$1"),
            &["/a/(.*)", "/(unclosed"],
        ));
        assert_eq!(
            fields(&bad),
            ["spec.rules[0].http.paths[1].path"],
            "{bad:?}"
        );
        assert!(bad[0].message.contains("unclosed"), "{}", bad[0].message);
        // `$2` beyond the one group of a path: on the annotation, naming
        // the path.
        let beyond = violations(&with_annotations(
            &format!("{TARGET}: /$2"),
            &["/a/(.*)", "/b/(x)/(.*)"],
        ));
        assert_eq!(fields(&beyond), [target_field.as_str()], "{beyond:?}");
        assert!(
            beyond[0].message.contains("$2")
                && beyond[0]
                    .message
                    .contains("spec.rules[0].http.paths[0].path")
                && beyond[0].message.contains("1 group"),
            "{}",
            beyond[0].message
        );
        // A target with a query, or not a path.
        for target in ["/x?a=1", "https://elsewhere.example/$1"] {
            let got = violations(&with_annotations(
                &format!("{TARGET}: {target:?}"),
                &["/(.*)"],
            ));
            assert_eq!(fields(&got), [target_field.as_str()], "{target}: {got:?}");
        }
        // canary-by-header-pattern: on its annotation, with the reason.
        const PATTERN: &str = "nginx.ingress.kubernetes.io/canary-by-header-pattern";
        let pattern_field = format!("metadata.annotations[\"{PATTERN}\"]");
        let ok = with_annotations(&format!("{PATTERN}: \"^(v1|v2)$\""), &["/"]);
        assert!(violations(&ok).is_empty(), "{:?}", violations(&ok));
        for bad in ["(unclosed", "a)|(b", "(?:.*a.{40})", "[][**da?$&*"] {
            let got = violations(&with_annotations(&format!("{PATTERN}: {bad:?}"), &["/"]));
            assert_eq!(fields(&got), [pattern_field.as_str()], "{bad}: {got:?}");
        }
        // Without the annotations the same path is a strict path, refused.
        let plain = violations(&with_annotations("", &["/(unclosed"]));
        assert_eq!(fields(&plain), ["spec.rules[0].http.paths[0].path"]);
    }

    /// `server-alias` names are host claims: one in another tenant's
    /// subtree, a wildcard or a port is refused on the annotation; one of
    /// the tenant's own is admitted.
    #[test]
    fn server_alias_names_are_host_claims() {
        const ALIAS: &str = "nginx.ingress.kubernetes.io/server-alias";
        let field = format!("metadata.annotations[\"{ALIAS}\"]");
        let ok = with_annotations(&format!("{ALIAS}: \"x.acme.lb.example.net\""), &["/"]);
        assert!(violations(&ok).is_empty(), "{:?}", violations(&ok));
        for bad in [
            "x.globex.lb.example.net",
            "*.acme.lb.example.net",
            "y.acme.lb.example.net:80",
        ] {
            let got = violations(&with_annotations(
                &format!("{ALIAS}: \"x.acme.lb.example.net, {bad}\""),
                &["/"],
            ));
            assert_eq!(fields(&got), [field.as_str()], "{bad}: {got:?}");
        }
    }

    #[test]
    fn class_hosts_and_paths() {
        let spec = format!(
            "  ingressClassName: nginx\n  rules:\n{}{}{}{}",
            rule("*.example.com", "/"),
            // globex's custom domain: a claim, decided by DNS proof in the
            // proxy, not refused here (an unproven claim blocks nobody).
            rule("www.globex.com", "/"),
            rule("a.acme.lb.example.net", "/a\";}"),
            rule("b.acme.lb.example.net", "/%2e%2e/admin"),
        );
        assert_eq!(
            check(&spec),
            [
                "spec.ingressClassName",
                "spec.rules[0].host",
                "spec.rules[2].http.paths[0].path",
                "spec.rules[3].http.paths[0].path",
            ]
        );
    }

    #[test]
    fn backends_stay_in_the_namespace() {
        let spec = "  ingressClassName: teapot\n  defaultBackend: {resource: {apiGroup: v1, kind: Secret, name: x}}\n  rules:\n  - http:\n      paths:\n      - {path: /, pathType: Prefix, backend: {service: {name: other/web, port: {number: 80}}}}\n      - {path: /b, pathType: Prefix, backend: {service: {name: web.other, port: {number: 0}}}}\n      - {path: /c, pathType: Prefix, backend: {service: {name: web, port: {name: HTTP}}}}\n      - {path: /d, pathType: Prefix, backend: {service: {name: web}}}\n";
        assert_eq!(
            check(spec),
            [
                "spec.defaultBackend.resource",
                "spec.rules[0].http.paths[0].backend.service.name",
                "spec.rules[0].http.paths[1].backend.service.name",
                "spec.rules[0].http.paths[1].backend.service.port.number",
                "spec.rules[0].http.paths[2].backend.service.port.name",
                "spec.rules[0].http.paths[3].backend.service.port",
            ]
        );
    }

    #[test]
    fn tls_hosts_and_secrets() {
        let spec = "  ingressClassName: teapot\n  tls:\n  - hosts: [\"*.shop.example.com\", \"*.example.org\"]\n    secretName: other-ns/tls\n";
        assert_eq!(
            check(spec),
            ["spec.tls[0].hosts[1]", "spec.tls[0].secretName"]
        );
    }

    #[test]
    fn limits() {
        let mut f = Fixture::new();
        f.limit_hosts(2, 3);
        let spec = format!(
            "  ingressClassName: teapot\n  rules:\n{}{}{}",
            rule("a.acme.lb.example.net", "/"),
            rule("b.acme.lb.example.net", "/"),
            rule("c.acme.lb.example.net", "/"),
        );
        let ctx = f.ctx().with_existing(ExistingObjects {
            is_new: true,
            ingresses: 500,
            ..ExistingObjects::default()
        });
        let got = fields(&check_ingress(&ctx, NS, &ingress(&spec)));
        assert_eq!(got, ["(object)", "spec.rules", "spec"]);
        let spec = format!(
            "  ingressClassName: teapot\n  rules:\n{}      - {{path: /a, pathType: Exact, {BACKEND}}}\n      - {{path: /b, pathType: Exact, {BACKEND}}}\n      - {{path: /c, pathType: Exact, {BACKEND}}}\n",
            rule("a.acme.lb.example.net", "/"),
        );
        let got = fields(&check_ingress(&f.ctx(), NS, &ingress(&spec)));
        assert_eq!(got, ["spec.rules"]);
    }

    #[test]
    fn namespace_must_be_the_tenants() {
        let f = Fixture::new();
        let ing = ingress("  ingressClassName: teapot\n");
        let got = fields(&check_ingress(&f.ctx(), "tenant-globex", &ing));
        assert_eq!(got, ["metadata.namespace"]);
    }

    #[test]
    fn custom_hosts_are_reported_as_pending() {
        let f = Fixture::new();
        let spec = format!(
            "  ingressClassName: teapot\n  rules:\n{}{}",
            rule("www.acme-shop.com", "/"),
            rule("shop.example.com", "/"),
        );
        let w = pending_custom_hosts(&f.ctx(), &ingress(&spec));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("CNAME to web.acme.lb.example.net"),
            "{}",
            w[0]
        );
        assert!(w[0].contains("teapot-tenant=acme"), "{}", w[0]);
    }

    /// Client certificates: the CA Secret of the tenant's own namespace
    /// only, never asked for without it, the subject pattern bounded.
    #[test]
    fn client_certificates_name_the_tenants_own_ca_secret() {
        const P: &str = "nginx.ingress.kubernetes.io/auth-tls-";
        let field = |name: &str| format!("metadata.annotations[\"{P}{name}\"]");
        let own = with_annotations(
            &format!(
                "{P}secret: {NS}/client-ca, {P}verify-client: optional, {P}match-cn: 'CN=(alice|bob)', {P}pass-certificate-to-upstream: 'true', {P}verify-depth: '2', {P}error-page: 'https://login.example/cert'"
            ),
            &["/"],
        );
        assert!(violations(&own).is_empty(), "{:?}", violations(&own));
        let bare = with_annotations(&format!("{P}secret: client-ca"), &["/"]);
        assert!(violations(&bare).is_empty(), "{:?}", violations(&bare));
        // Another namespace's Secret: refused, naming it and the tenant's.
        let other = violations(&with_annotations(
            &format!("{P}secret: ops/client-ca"),
            &["/"],
        ));
        assert_eq!(fields(&other), [field("secret")]);
        assert!(
            other[0].message.contains("ops/client-ca") && other[0].message.contains(NS),
            "{}",
            other[0].message
        );
        // Asked for without the Secret.
        let alone = violations(&with_annotations(
            &format!("{P}verify-client: 'on'"),
            &["/"],
        ));
        assert_eq!(fields(&alone), [field("verify-client")]);
        assert!(alone[0].message.contains("needs"), "{}", alone[0].message);
        // Bad values are named once, by the allowlist.
        let bad = violations(&with_annotations(
            &format!("{P}secret: client-ca, {P}verify-client: 'yes'"),
            &["/"],
        ));
        assert_eq!(fields(&bad), [field("verify-client")], "{bad:?}");
        // A subject pattern that does not parse, or whose automaton does
        // not fit the bound.
        for pattern in ["CN=(unclosed", "CN=(?:[\\s\\S]*a[\\s\\S]{60})"] {
            let bad = violations(&with_annotations(
                &format!("{P}secret: client-ca, {P}match-cn: '{pattern}'"),
                &["/"],
            ));
            assert_eq!(fields(&bad), [field("match-cn")], "{pattern}: {bad:?}");
        }
    }

    #[test]
    fn custom_headers_name_a_config_map_of_the_ingress_s_namespace() {
        use std::collections::BTreeMap;
        let a = |v: &str| {
            BTreeMap::from([(
                crate::response_headers::ANNOTATION.to_string(),
                v.to_string(),
            )])
        };
        assert_eq!(check_custom_headers("shop", Some(&a("shop/headers"))), None);
        assert_eq!(check_custom_headers("shop", Some(&a("a/b/c"))), None);
        let v = check_custom_headers("shop", Some(&a("ops/headers"))).unwrap();
        assert_eq!(
            v.field,
            "metadata.annotations[\"nginx.ingress.kubernetes.io/custom-headers\"]"
        );
        assert!(v.message.contains("ConfigMap ops/headers"), "{v}");
    }
}
