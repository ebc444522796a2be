//! The rules for a tenant's RouteTrafficPolicy (crate::route_policy):
//! it targets routes of its own namespace, HTTPRoutes and GRPCRoutes, and
//! its values are those ingress-nginx's annotations take, checked by
//! their parsers and named by the policy's own fields.

use super::gateway::GATEWAY_GROUP;
use super::meta::check_metadata;
use super::{PolicyContext, Violation, dns_subdomain, quote};
use crate::kind::ObjectKind;
use crate::route_policy::RouteTrafficPolicy;

/// The route kinds a RouteTrafficPolicy attaches to: the two answered by
/// the one request pipeline.
pub const ROUTE_TRAFFIC_POLICY_TARGETS: [&str; 2] = ["HTTPRoute", "GRPCRoute"];

/// Checks a RouteTrafficPolicy.
pub fn check_route_traffic_policy(
    ctx: &PolicyContext<'_>,
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
    for (field, why) in spec.value_errors() {
        out.push(Violation::new(field, why));
    }
    out
}
