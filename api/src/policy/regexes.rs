//! The regular expressions of a route: each must compile to a bounded
//! automaton ([`crate::regex`]), and all of a tenant's together stay
//! within `limits.maxRegexes` and `limits.maxRegexBytes`.

use super::{OBJECT_FIELD, PolicyContext, TenantObjectRef, Violation};
use crate::regex::{self, RegexCost, RoutePattern, TenantRegex};

/// The patterns `object` carries (none for kinds without any).
pub fn object_regexes(object: TenantObjectRef<'_>) -> Vec<RoutePattern> {
    match object {
        TenantObjectRef::HttpRoute(r) => regex::http_route_regexes(r),
        TenantObjectRef::GrpcRoute(r) => regex::grpc_route_regexes(r),
        TenantObjectRef::Ingress(i) => regex::ingress_regexes(i),
        _ => Vec::new(),
    }
}

/// What `object`'s patterns cost its tenant's budget.
pub fn object_regex_cost(object: TenantObjectRef<'_>) -> RegexCost {
    regex::cost(&object_regexes(object))
}

/// The tenant's budget in force.
pub fn regex_budget(ctx: &PolicyContext<'_>) -> RegexCost {
    RegexCost {
        count: ctx.limits.max_regexes,
        bytes: ctx.limits.max_regex_bytes,
    }
}

/// Each pattern that does not compile, on its field; then, at admission
/// (the proxy counts a tenant's total itself, `teapot_model::tenancy`),
/// the tenant's budget with this object's patterns in it. Only an object
/// whose patterns grow is refused, so lowering the limits never blocks an
/// update that keeps or shrinks them.
pub(crate) fn check_regexes(
    ctx: &PolicyContext<'_>,
    object: TenantObjectRef<'_>,
) -> Vec<Violation> {
    let patterns = object_regexes(object);
    if patterns.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // An Ingress's paths are checked with their captures and named as
    // written (`policy::ingress`); only its budget is counted here.
    if !matches!(object, TenantObjectRef::Ingress(_)) {
        for p in &patterns {
            if let Err(e) = TenantRegex::compile(&p.pattern) {
                out.push(Violation::new(&p.field, e.to_string()));
            }
        }
    }
    let own = regex::cost(&patterns);
    let Some(existing) = ctx.existing else {
        return out;
    };
    let max = regex_budget(ctx);
    let total = existing.regex.plus(own);
    let grows = own.count > existing.own_regex.count || own.bytes > existing.own_regex.bytes;
    if total.exceeds(max) && grows {
        out.push(Violation::new(
            OBJECT_FIELD,
            format!(
                "your tenant's routes would hold {} regular expressions of {} KiB of automata, more than its limits (maxRegexes = {}, maxRegexBytes = {} KiB); use Exact or PathPrefix matches where they do, or ask the operator to raise the limits",
                total.count,
                total.bytes.div_ceil(1024),
                max.count,
                max.bytes / 1024
            ),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{ExistingObjects, check_object};
    use super::*;
    use serde_json::Value;

    fn http_route(matches: &str) -> Value {
        yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches:\n{matches}    backendRefs: [{{name: web, port: 80}}]\n"
        ))
    }

    fn violations(ctx: &PolicyContext<'_>, route: &Value) -> Vec<Violation> {
        check_object(ctx, NS, route).violations
    }

    #[test]
    fn each_pattern_that_does_not_fit_is_refused_on_its_field() {
        let f = Fixture::new();
        let route = http_route(
            "    - path: {type: RegularExpression, value: \"/ok/[0-9]+\"}\n    - path: {type: RegularExpression, value: \"/(?:[\\\\s\\\\S]*a[\\\\s\\\\S]{60})\"}\n      headers: [{name: x, type: RegularExpression, value: \"(unclosed\"}]\n      queryParams: [{name: q, type: RegularExpression, value: \"\\\\w{4}\\\\w{4}\\\\w{4}\"}]\n",
        );
        let got = violations(&f.ctx(), &route);
        assert_eq!(
            fields(&got),
            [
                "spec.rules[0].matches[1].path.value",
                "spec.rules[0].matches[1].headers[0].value",
                "spec.rules[0].matches[1].queryParams[0].value",
            ],
            "{got:?}"
        );
        assert!(got[0].message.contains("automaton"), "{}", got[0].message);
        assert!(got[1].message.contains("unclosed"), "{}", got[1].message);
    }

    #[test]
    fn grpc_method_patterns_count_and_are_checked() {
        let f = Fixture::new();
        let route: Value = yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {{name: g, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n  - matches:\n    - method: {{type: RegularExpression, service: \"(.*a.{{40}})\"}}\n    backendRefs: [{{name: web, port: 80}}]\n"
        ));
        let got = violations(&f.ctx(), &route);
        assert_eq!(fields(&got), ["spec.rules[0].matches[0].method"], "{got:?}");
    }

    #[test]
    fn the_tenant_budget_refuses_only_what_grows() {
        let mut f = Fixture::new();
        let limits = f.tenant.spec.limits.get_or_insert_default();
        limits.max_regexes = Some(3);
        let route = http_route(
            "    - path: {type: RegularExpression, value: \"/a[0-9]+\"}\n    - path: {type: RegularExpression, value: \"/b[0-9]+\"}\n",
        );
        let with = |others: u32, own: u32, is_new: bool| {
            let existing = ExistingObjects {
                is_new,
                regex: RegexCost {
                    count: others,
                    bytes: 1024,
                },
                own_regex: RegexCost {
                    count: own,
                    bytes: if own > 0 { u64::MAX } else { 0 },
                },
                ..ExistingObjects::default()
            };
            fields(&violations(&f.ctx().with_existing(existing), &route))
        };
        assert!(with(1, 0, true).is_empty(), "1 + 2 fits 3");
        assert_eq!(with(2, 0, true), [super::super::OBJECT_FIELD]);
        // An update that keeps its two patterns is not refused even when
        // the limit was lowered below what the tenant holds.
        assert!(with(5, 2, false).is_empty());
        let message = violations(
            &f.ctx().with_existing(ExistingObjects {
                is_new: true,
                regex: RegexCost { count: 2, bytes: 0 },
                ..ExistingObjects::default()
            }),
            &route,
        )
        .remove(0)
        .message;
        assert!(message.contains("maxRegexes = 3"), "{message}");
    }
}
