//! The regular expressions of a route: each must compile to a bounded
//! automaton ([`crate::regex`]), and all of a tenant's together stay
//! within `limits.maxRegexes` and `limits.maxRegexBytes`.
//!
//! Compiling is the one expensive step of a review (a pattern whose
//! automaton does not fit costs up to ~15 ms before it is refused), so
//! what one object may make the webhook or a proxy reload compile is
//! bounded before anything is compiled ([`CompileBudget`]): the patterns
//! are counted against the tenant's `maxRegexes` first, and an object over
//! it is refused without compiling any; then they are compiled in order
//! until [`MAX_COSTLY_REFUSALS`] were refused as too large or the automata
//! built pass the object's share of `maxRegexBytes`
//! ([`MAX_OBJECT_REGEX_BYTES`]), and the rest is refused unchecked. One
//! review thus compiles at most a few MiB of automata, whatever the object.

use super::{AdmissionContext, OBJECT_FIELD, TenantObjectRef, Violation};
use crate::regex::{self, RegexCost, RegexError, RoutePattern, TenantRegex};

/// Patterns refused as too large before the rest of an object's are left
/// unchecked: each such refusal costs a whole determinization.
pub const MAX_COSTLY_REFUSALS: usize = 2;

/// The most automaton memory one object's patterns are compiled to: a
/// quarter of the default `maxRegexBytes`, so that a single review builds
/// about 2 MiB of automata at most (tens of milliseconds of CPU). Routes
/// written for ingress-nginx's regex paths need a few KiB each.
pub const MAX_OBJECT_REGEX_BYTES: u64 = 2 * 1024 * 1024;

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
pub fn regex_budget(ctx: &AdmissionContext<'_>) -> RegexCost {
    RegexCost {
        count: ctx.limits.max_regexes,
        bytes: ctx.limits.max_regex_bytes,
    }
}

/// What compiling one object's patterns may still cost. Made by
/// [`CompileBudget::for_object`], which refuses (without compiling
/// anything) an object with more patterns than its tenant may hold.
#[derive(Debug)]
pub(crate) struct CompileBudget {
    /// Automaton bytes this object's patterns may still take.
    bytes_left: u64,
    /// Bytes built so far.
    built: u64,
    costly_refusals: usize,
    /// Why compiling stopped, once it has.
    spent: Option<Spent>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Spent {
    CostlyRefusals,
    Bytes,
}

impl CompileBudget {
    /// The budget for `patterns` (the object's, [`object_regexes`]), or the
    /// refusal of an object whose patterns alone are more than its tenant
    /// may hold: counted, none compiled.
    pub(crate) fn for_object(
        ctx: &AdmissionContext<'_>,
        patterns: &[RoutePattern],
    ) -> Result<CompileBudget, Violation> {
        let max = regex_budget(ctx);
        let count = u32::try_from(patterns.len()).unwrap_or(u32::MAX);
        let (others, own_before) = match ctx.existing {
            Some(e) => (e.regex, e.own_regex),
            // The proxy's re-check: the object alone against the limits
            // (it counts the tenant's total itself, `teapot_model::tenancy`).
            None => (RegexCost::default(), RegexCost::default()),
        };
        let total = others.count.saturating_add(count);
        // Only an object whose patterns grow is refused, so lowering the
        // limits never blocks an update that keeps or shrinks them.
        if total > max.count && count > own_before.count {
            return Err(Violation::new(
                OBJECT_FIELD,
                format!(
                    "your tenant's routes would hold {total} regular expressions, more than its limit (maxRegexes = {}); none of this object's {count} was compiled. Use Exact or PathPrefix matches where they do, or ask the operator to raise the limit",
                    max.count
                ),
            ));
        }
        let room = max
            .bytes
            .saturating_sub(others.bytes)
            .min(MAX_OBJECT_REGEX_BYTES)
            .max(own_before.bytes);
        Ok(CompileBudget {
            bytes_left: room,
            built: 0,
            costly_refusals: 0,
            spent: None,
        })
    }

    /// Runs `compile` unless the budget is spent; counts what it built
    /// (`memory` of a success) or a refusal as too large.
    pub(crate) fn compile<T>(
        &mut self,
        compile: impl FnOnce() -> Result<T, RegexError>,
        memory: impl FnOnce(&T) -> usize,
    ) -> Option<Result<T, RegexError>> {
        if self.costly_refusals >= MAX_COSTLY_REFUSALS {
            // Said only when a pattern is left unchecked.
            self.spent.get_or_insert(Spent::CostlyRefusals);
        }
        if self.spent.is_some() {
            return None;
        }
        let result = compile();
        match &result {
            Ok(t) => {
                self.built = self.built.saturating_add(memory(t) as u64);
                if self.built > self.bytes_left {
                    self.spent = Some(Spent::Bytes);
                }
            }
            Err(RegexError::TooLarge { .. }) => self.costly_refusals += 1,
            Err(_) => {}
        }
        Some(result)
    }

    /// The violation that says why compiling stopped, if it did.
    pub(crate) fn refusal(&self) -> Option<Violation> {
        let message = match self.spent? {
            Spent::CostlyRefusals => format!(
                "{MAX_COSTLY_REFUSALS} regular expressions of this object need automata larger than allowed; the ones after them were not checked. Fix those first"
            ),
            Spent::Bytes => format!(
                "this object's regular expressions need more than {} KiB of automata (the most one object may hold: {} KiB, within the tenant's maxRegexBytes); the ones after were not checked. Use Exact or PathPrefix matches, ASCII classes instead of \\w or \\d, or split the routes",
                self.built.div_ceil(1024),
                self.bytes_left / 1024
            ),
        };
        Some(Violation::new(OBJECT_FIELD, message))
    }
}

/// Each pattern of a route that does not compile, on its field, then the
/// budgets ([`check_budgeted`]). An Ingress's patterns are checked by
/// `policy::ingress`, with their captures and named as written.
pub(crate) fn check_regexes(
    ctx: &AdmissionContext<'_>,
    object: TenantObjectRef<'_>,
) -> Vec<Violation> {
    let patterns = object_regexes(object);
    check_budgeted(ctx, &patterns, |budget, out| {
        for p in &patterns {
            match budget.compile(|| TenantRegex::compile(&p.pattern), |r| r.memory()) {
                None => return,
                Some(Err(e)) => out.push(Violation::new(&p.field, e.to_string())),
                Some(Ok(_)) => {}
            }
        }
    })
}

/// The budgets of an object's `patterns`: the count against `maxRegexes`
/// before anything is compiled; `compile` (which compiles each pattern
/// through the [`CompileBudget`] and names its own refusals); then, at
/// admission (the proxy counts a tenant's total itself,
/// `teapot_model::tenancy`), the tenant's budget with this object's
/// patterns in it. Only an object whose patterns grow is refused, so
/// lowering the limits never blocks an update that keeps or shrinks them.
pub(crate) fn check_budgeted(
    ctx: &AdmissionContext<'_>,
    patterns: &[RoutePattern],
    compile: impl FnOnce(&mut CompileBudget, &mut Vec<Violation>),
) -> Vec<Violation> {
    if patterns.is_empty() {
        return Vec::new();
    }
    let mut budget = match CompileBudget::for_object(ctx, patterns) {
        Ok(b) => b,
        Err(v) => return vec![v],
    };
    let mut out = Vec::new();
    compile(&mut budget, &mut out);
    if let Some(v) = budget.refusal() {
        out.push(v);
        return out;
    }
    let Some(existing) = ctx.existing else {
        return out;
    };
    // Every pattern was compiled above: weighed from the cache.
    let own = regex::cost(patterns);
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

    fn violations(ctx: &AdmissionContext<'_>, route: &Value) -> Vec<Violation> {
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

    /// The review's stall: 3,072 patterns (16 rules of 64 matches, each a
    /// path, a header and a query pattern), inside the CRD maxima and
    /// maxObjectBytes, cost ~12 s of CPU when every one was compiled
    /// before the count was checked. Now none is compiled.
    #[test]
    fn an_object_over_the_count_is_refused_without_compiling_any() {
        let f = Fixture::new();
        let mut rules = String::new();
        for i in 0..16 {
            rules.push_str("  - matches:\n");
            for j in 0..64 {
                let n = i * 64 + j;
                rules.push_str(&format!(
                    "    - path: {{type: RegularExpression, value: \"/\\\\w{{4}}N{n}\"}}\n      headers: [{{name: x, type: RegularExpression, value: \"h\\\\w{{4}}N{n}\"}}]\n      queryParams: [{{name: q, type: RegularExpression, value: \"q\\\\w{{4}}N{n}\"}}]\n"
                ));
            }
            rules.push_str("    backendRefs: [{name: web, port: 80}]\n");
        }
        let route: Value = yaml(&format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: {NS}}}\nspec:\n  parentRefs: [{{name: gw}}]\n  rules:\n{rules}"
        ));
        let patterns = object_regexes(TenantObjectRef::HttpRoute(
            &serde_json::from_value(route.clone()).unwrap(),
        ));
        assert_eq!(patterns.len(), 3072);
        for ctx in [
            f.ctx(),
            f.ctx().with_existing(ExistingObjects {
                is_new: true,
                ..ExistingObjects::default()
            }),
        ] {
            let got = violations(&ctx, &route);
            let budget: Vec<_> = got
                .iter()
                .filter(|v| v.message.contains("maxRegexes"))
                .collect();
            assert_eq!(budget.len(), 1, "{got:?}");
            assert!(
                budget[0]
                    .message
                    .contains("none of this object's 3072 was compiled"),
                "{}",
                budget[0].message
            );
        }
        let compiled = patterns
            .iter()
            .filter(|p| regex::cache::compiled(&p.pattern))
            .count();
        assert_eq!(compiled, 0);
    }

    /// Under the count, patterns whose automaton explodes each cost a whole
    /// determinization (up to ~15 ms): compiling stops after
    /// MAX_COSTLY_REFUSALS of them.
    #[test]
    fn compiling_stops_after_a_few_costly_refusals() {
        let f = Fixture::new();
        let matches: String = (0..200)
            .map(|n| {
                format!("    - path: {{type: RegularExpression, value: \"/\\\\w{{4}}S{n}\"}}\n")
            })
            .collect();
        let route = http_route(&matches);
        let got = violations(&f.ctx(), &route);
        assert_eq!(
            fields(&got),
            [
                "spec.rules[0].matches[0].path.value",
                "spec.rules[0].matches[1].path.value",
                OBJECT_FIELD,
            ],
            "{got:?}"
        );
        assert!(got[2].message.contains("not checked"), "{}", got[2].message);
        let compiled = (0..200)
            .filter(|n| regex::cache::compiled(&format!("/\\w{{4}}S{n}")))
            .count();
        assert_eq!(compiled, MAX_COSTLY_REFUSALS);
    }

    /// Patterns that each fit but are large stop once the object's
    /// automata pass MAX_OBJECT_REGEX_BYTES: `\w` alone is ~160 KiB.
    #[test]
    fn compiling_stops_at_the_objects_share_of_automaton_bytes() {
        let f = Fixture::new();
        let matches: String = (0..100)
            .map(|n| format!("    - path: {{type: RegularExpression, value: \"/B{n}\\\\w\"}}\n"))
            .collect();
        let route = http_route(&matches);
        let got = violations(&f.ctx(), &route);
        assert_eq!(fields(&got), [OBJECT_FIELD], "{got:?}");
        assert!(
            got[0].message.contains("KiB of automata"),
            "{}",
            got[0].message
        );
        let compiled = (0..100)
            .filter(|n| regex::cache::compiled(&format!("/B{n}\\w")))
            .count();
        let one = TenantRegex::compile("/B0\\w").unwrap().memory() as u64;
        assert_eq!(
            compiled as u64,
            MAX_OBJECT_REGEX_BYTES / one + 1,
            "{one} bytes each"
        );
    }

    /// An Ingress's regex paths are compiled under the same budget.
    #[test]
    fn ingress_regex_paths_share_the_budget() {
        let f = Fixture::new();
        let paths: String = (0..100)
            .map(|n| format!("      - {{path: \"/\\\\w{{4}}I{n}\", pathType: ImplementationSpecific, backend: {{service: {{name: web, port: {{number: 80}}}}}}}}\n"))
            .collect();
        let ingress: Value = yaml(&format!(
            "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata:\n  name: i\n  namespace: {NS}\n  annotations: {{nginx.ingress.kubernetes.io/use-regex: \"true\"}}\nspec:\n  ingressClassName: teapot\n  rules:\n  - host: a.{NS}.lb.example.com\n    http:\n      paths:\n{paths}"
        ));
        let got = violations(&f.ctx(), &ingress);
        assert!(
            got.iter()
                .any(|v| v.field == OBJECT_FIELD && v.message.contains("not checked")),
            "{got:?}"
        );
        let compiled = (0..100)
            .filter(|n| {
                regex::cache::compiled(&regex::path_gate_pattern(&format!("/\\w{{4}}I{n}")))
            })
            .count();
        assert_eq!(compiled, MAX_COSTLY_REFUSALS);
    }
}
