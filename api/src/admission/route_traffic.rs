//! The rules for a tenant's RouteTrafficPolicy (crate::route_policy):
//! it targets routes of its own namespace, HTTPRoutes and GRPCRoutes, and
//! its values are those ingress-nginx's annotations take, checked by
//! their parsers and named by the policy's own fields.

use super::gateway::GATEWAY_GROUP;
use super::meta::check_metadata;
use super::{AdmissionContext, Violation, dns_subdomain, quote};
use crate::annotations::{self, NGINX_PREFIX};
use crate::kind::ObjectKind;
use crate::route_policy::{RouteTrafficPolicy, RouteTrafficPolicySpec};

/// The route kinds a RouteTrafficPolicy attaches to: the two answered by
/// the one request pipeline.
pub const ROUTE_TRAFFIC_POLICY_TARGETS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];

/// Checks a RouteTrafficPolicy.
pub fn check_route_traffic_policy(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    policy: &RouteTrafficPolicy,
) -> Vec<Violation> {
    let mut out = Vec::new();
    check_metadata(
        ctx,
        namespace,
        &policy.metadata,
        ObjectKind::RouteTrafficPolicy,
        &mut out,
    );
    out.extend(ctx.over_limit(
        |e| e.gateway_api,
        ctx.limits.max_ingresses,
        "Gateway API objects (Gateways, routes, ReferenceGrants and policies, counted like Ingresses)",
        "maxIngresses",
    ));
    let own = ctx.tenant.namespace_name();
    let spec = &policy.spec;
    if spec.target_refs.is_empty() {
        out.push(Violation::new(
            "spec.targetRefs",
            "at least one targetRef is required",
        ));
    }
    for (i, t) in spec.target_refs.iter().enumerate() {
        let at = format!("spec.targetRefs[{i}]");
        if t.group != GATEWAY_GROUP || !ROUTE_TRAFFIC_POLICY_TARGETS.contains(&t.kind.as_str()) {
            out.push(Violation::new(
                format!("{at}.kind"),
                format!(
                    "{} {} is not a route: a RouteTrafficPolicy targets {GATEWAY_GROUP} HTTPRoutes and GRPCRoutes of your namespace ({own})",
                    quote(&t.group),
                    quote(&t.kind)
                ),
            ));
        }
        if let Some(ns) = &t.namespace
            && ns != namespace
        {
            out.push(Violation::new(
                format!("{at}.namespace"),
                format!(
                    "{} is another namespace: a RouteTrafficPolicy targets routes of its own namespace ({namespace}) only",
                    quote(ns)
                ),
            ));
        }
        if let Err(e) = dns_subdomain(&t.name) {
            out.push(Violation::new(format!("{at}.name"), e));
        }
        if let Some(section) = &t.section_name
            && let Err(e) = dns_subdomain(section)
        {
            out.push(Violation::new(format!("{at}.sectionName"), e));
        }
    }
    for (field, why) in route_traffic_value_errors(spec) {
        out.push(Violation::new(field, why));
    }
    out
}

/// Each value of `spec` the ingress-nginx annotations' parsers refuse, as
/// (the spec's field, why): the rules an Ingress's annotations are held
/// to, by the same code. The proxy's manifests reader refuses the same.
pub fn route_traffic_value_errors(spec: &RouteTrafficPolicySpec) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let fields = spec.annotations();
    for a in &fields {
        let key = format!("{NGINX_PREFIX}{}", a.name);
        let check = |value: &str| {
            annotations::parse(ObjectKind::Ingress, &key, value)
                .err()
                .map(|e| e.to_string())
        };
        if a.items.is_empty() {
            if let Some(e) = check(&a.value) {
                out.push((a.field.to_string(), e));
            }
            continue;
        }
        for (i, item) in a.items.iter().enumerate() {
            // A comma inside one item would read as two.
            let e = if item.contains(',') {
                Some(format!(
                    "{} is one address or network, not a list",
                    quote(item)
                ))
            } else {
                check(item)
            };
            if let Some(e) = e {
                out.push((format!("{}[{i}]", a.field), e));
            }
        }
    }
    if fields.is_empty() && spec.alt_svc.is_none() {
        out.push((
            "spec".to_string(),
            "sets nothing: give clientAddresses, rateLimit, inFlightPerClient, customErrors, basicAuth, bandwidth, loadBalance, satisfy, authCache, backendHTTP, buffering or altSvc"
                .to_string(),
        ));
    }
    // The users of the policy's own namespace: a name, no `NAMESPACE/`.
    if let Some(b) = &spec.basic_auth
        && b.secret_ref.name.contains('/')
    {
        out.push((
            "spec.basicAuth.secretRef.name".to_string(),
            format!(
                "{} names a Secret of another namespace: a Secret of the policy's own namespace is named by its name",
                quote(&b.secret_ref.name)
            ),
        ));
    }
    if let Some(e) = &spec.custom_errors {
        if e.codes.is_empty() {
            out.push((
                "spec.customErrors.codes".to_string(),
                "at least one status code is required".to_string(),
            ));
        }
        if !(1..=65535).contains(&e.backend.port) {
            out.push((
                "spec.customErrors.backend.port".to_string(),
                format!("{} is not a port (1 to 65535)", e.backend.port),
            ));
        }
    }
    if let Some(r) = &spec.rate_limit
        && r.requests_per_second.is_none()
        && r.requests_per_minute.is_none()
    {
        out.push((
            "spec.rateLimit".to_string(),
            "requestsPerSecond or requestsPerMinute is required".to_string(),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> RouteTrafficPolicySpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    fn fields(s: &RouteTrafficPolicySpec) -> Vec<String> {
        route_traffic_value_errors(s)
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    }

    #[test]
    fn bad_values_are_named_by_the_policys_field() {
        let s = spec(
            "targetRefs: []\nclientAddresses: {deny: [10.0.0.0/8, 10.0.0.300/8]}\nrateLimit: {requestsPerSecond: 0}\n",
        );
        assert_eq!(
            fields(&s),
            [
                "spec.clientAddresses.deny[1]",
                "spec.rateLimit.requestsPerSecond"
            ]
        );
        let s = spec("targetRefs: []\nclientAddresses: {allow: [\"10.0.0.0/8,192.0.2.1\"]}\n");
        assert_eq!(fields(&s), ["spec.clientAddresses.allow[0]"]);
        let s = spec("targetRefs: []\nrateLimit: {burstMultiplier: 3}\n");
        assert_eq!(fields(&s), ["spec.rateLimit"]);
        assert_eq!(fields(&spec("targetRefs: []\n")), ["spec"]);
        assert!(fields(&spec("targetRefs: []\naltSvc: false\n")).is_empty());
        let good = spec(
            "targetRefs: []\nclientAddresses: {allow: [10.0.0.0/8, 192.168.1.1]}\nrateLimit: {requestsPerSecond: 10, burstMultiplier: 2, exempt: [10.1.0.0/16]}\ninFlightPerClient: 20\n",
        );
        assert!(fields(&good).is_empty(), "{:?}", fields(&good));
    }

    #[test]
    fn custom_errors_are_named_by_the_policys_field() {
        let s = spec(
            "targetRefs: []\ncustomErrors: {codes: [404, 200, 503], backend: {name: Errors_Page, port: 0}}\n",
        );
        assert_eq!(
            fields(&s),
            [
                "spec.customErrors.codes[1]",
                "spec.customErrors.backend.name",
                "spec.customErrors.backend.port"
            ]
        );
        let s =
            spec("targetRefs: []\ncustomErrors: {codes: [], backend: {name: errors, port: 80}}\n");
        assert_eq!(fields(&s), ["spec.customErrors.codes"]);
        let good = spec(
            "targetRefs: []\ncustomErrors: {codes: [404, 503], backend: {name: errors, port: 8080}}\n",
        );
        assert!(fields(&good).is_empty(), "{:?}", fields(&good));
    }

    /// A hostile bandwidth is refused by the annotations' bounds, named by
    /// the policy's fields.
    #[test]
    fn bandwidth_bounds_are_named_by_the_policys_field() {
        let s = spec(
            "targetRefs: []\nbandwidth: {limitKiBPerSecond: 4294967295, unlimitedKiB: 1048577}\n",
        );
        assert_eq!(
            fields(&s),
            [
                "spec.bandwidth.limitKiBPerSecond",
                "spec.bandwidth.unlimitedKiB"
            ]
        );
        let good = spec(
            "targetRefs: []\nbandwidth: {limitKiBPerSecond: 1048576, unlimitedKiB: 1048576}\n",
        );
        assert!(fields(&good).is_empty(), "{:?}", fields(&good));
    }
}
