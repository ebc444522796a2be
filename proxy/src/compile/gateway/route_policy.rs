//! RouteTrafficPolicy (teapot_api::route_policy): client address lists,
//! rate limits, in-flight limits and custom error pages on HTTPRoute and
//! GRPCRoute rules.
//!
//! - Attachment: a policy names routes of its own namespace only (its
//!   `targetRefs` have no namespace); `sectionName` names a rule by its
//!   `name`, none the whole route.
//! - Meaning: the spec is written as the ingress-nginx annotations it
//!   stands for and compiled by an Ingress's reader
//!   (crate::compile::traffic::NginxAnnotations), so a CIDR or a limit
//!   means the same on both; the counters are in the tenant's table
//!   (crate::compile::policies), as an Ingress's. `customErrors` is
//!   `custom-http-errors` with `default-backend` at the policy's port,
//!   resolved by the Ingress's own code (crate::compile::policies), the
//!   page request naming the route as `X-Ingress-Name`.
//! - Conflicts: a rule's own policy replaces the route-wide one for that
//!   rule; among policies naming the same route (or rule), the oldest
//!   wins, then namespace/name, as BackendTLSPolicy's.
//! - Status ([`report`]): per target, `Accepted` True, or False with
//!   `Conflicted`, `TargetNotFound` or `Invalid`, and `ResolvedRefs` False
//!   (`BackendNotFound`) while `customErrors`' Service is missing (the
//!   replaced responses then get teapot's short page); in `/status` only.

use std::collections::BTreeMap;
use std::sync::Arc;

use teapot_api::annotations::NGINX_PREFIX;
use teapot_api::route_policy::{
    RouteTrafficPolicy, RouteTrafficPolicyCondition, RouteTrafficPolicyStatus,
    RouteTrafficPolicyTargetRef, RouteTrafficPolicyTargetStatus,
};
use teapot_model::store::{NsName, Store, Stored};
use teapot_model::tenancy::TenantView;

use super::inputs::RouteIn;
use super::{AgeKey, GROUP, Reported, RouteObject, age};
use crate::compile::backends::Resolver;
use crate::compile::basic_auth::{self, BasicAuth};
use crate::compile::policies::{ErrorPageOwner, Policies};
use crate::compile::routes::RoutePolicy;
use crate::compile::traffic::{Cors, NginxAnnotations, TrafficPolicy};

/// The traffic policies the RouteTrafficPolicies of one route give it:
/// the route-wide one's and each named rule's own.
#[derive(Default)]
pub(super) struct Attached {
    route: Option<Arc<TrafficPolicy>>,
    rules: Vec<(String, Arc<TrafficPolicy>)>,
}

impl Attached {
    /// Reads the winning policies of `route` (none: nothing allocated).
    pub(super) fn of<'p>(
        store: &Store,
        policies: &Policies<'p>,
        tenant: Option<&TenantView<'p>>,
        route: &RouteIn<'_>,
        resolver: &Resolver<'_>,
    ) -> Attached {
        let mut out = Attached::default();
        if store.route_traffic_policies.is_empty() {
            return out;
        }
        let winners = winners(store, &route.id.namespace, route.kind, &route.id.name);
        for (section, (_, id, policy)) in winners {
            let key = match &section {
                Some(rule) => format!("{} {}#{rule}", route.kind, route.id),
                None => format!("{} {}", route.kind, route.id),
            };
            let global = (policies.global_counts(), tenant.map_or("", |t| t.cluster));
            // Fail closed: a policy that cannot be read answers its
            // routes 503 rather than leave them without what it restricts.
            // A policy refused when read stands as that refusal
            // (teapot_model::validate::Parsed::Refused).
            let read = match store.refused_route_traffic_policies.get(id) {
                Some(why) => Err(vec![why.to_string()]),
                None => traffic(&policy.object, &key, || policies.rate_table(tenant), global),
            };
            let mut traffic = match read {
                Ok(traffic) => traffic,
                Err(problems) => TrafficPolicy {
                    refused: Some(problems.join("; ").into()),
                    ..TrafficPolicy::default()
                },
            };
            if let Some(errors) = &policy.object.spec.custom_errors {
                let meta = match &route.object {
                    RouteObject::Http(r) => &r.metadata,
                    RouteObject::Grpc(r) => &r.metadata,
                };
                let owner = ErrorPageOwner {
                    meta,
                    key: "spec.customErrors.backend",
                    port: Some(errors.backend.port),
                };
                let wanted = crate::compile::traffic::ErrorPageAnnotations {
                    codes: sorted_codes(&errors.codes),
                    backend: Some(errors.backend.name.clone()),
                };
                // What the resolution finds missing is in the status
                // (report): the same for every route of the policy.
                traffic.custom_errors =
                    policies.error_pages(wanted, &owner, tenant, resolver, &mut Vec::new());
            }
            if let Some(basic) = &policy.object.spec.basic_auth {
                traffic.basic_auth = Some(basic_auth(store, &route.id.namespace, basic, tenant));
            }
            match section {
                Some(rule) => out.rules.push((rule, Arc::new(traffic))),
                None => out.route = Some(Arc::new(traffic)),
            }
        }
        out
    }

    /// The route's policy (its tenant's gate, from `base`) with the
    /// route-wide RouteTrafficPolicy's traffic policy, if any.
    pub(super) fn route_policy(&self, base: Option<Arc<RoutePolicy>>) -> Option<Arc<RoutePolicy>> {
        let Some(traffic) = &self.route else {
            return base;
        };
        Some(Arc::new(RoutePolicy {
            max_body_size: base.as_ref().and_then(|p| p.max_body_size),
            tenant: base.as_ref().and_then(|p| p.tenant.clone()),
            traffic: Some(traffic.clone()),
        }))
    }

    /// A rule's traffic policy when it differs from the route's: its own
    /// RouteTrafficPolicy's (replacing the route-wide one), and its CORS
    /// filter over that (or over the route's).
    pub(super) fn rule_traffic(
        &self,
        rule: Option<&str>,
        route: Option<&RoutePolicy>,
        cors: Option<&Cors>,
    ) -> Option<Arc<TrafficPolicy>> {
        let own = rule.and_then(|name| self.rules.iter().find(|(n, _)| n == name).map(|(_, t)| t));
        match (own, cors) {
            (own, Some(cors)) => {
                let base = own.map(|t| RoutePolicy {
                    max_body_size: None,
                    tenant: None,
                    traffic: Some(t.clone()),
                });
                Some(super::filters::with_cors(base.as_ref().or(route), cors))
            }
            (Some(own), None) => Some(own.clone()),
            (None, None) => None,
        }
    }
}

/// A policy's `basicAuth`: the users of its namespace's Secret, or, when
/// they cannot be read (reported in the status, [`report`]), a setting
/// whose routes answer 503: never served unauthenticated.
fn basic_auth(
    store: &Store,
    namespace: &str,
    wanted: &teapot_api::route_policy::BasicAuth,
    tenant: Option<&TenantView<'_>>,
) -> Arc<BasicAuth> {
    let owner = tenant.map_or("", |t| t.cluster);
    let realm = wanted.realm.as_deref().unwrap_or("");
    let secret = (namespace, wanted.secret_ref.name.as_str());
    Arc::new(match basic_auth::users(store, secret, BASIC_AUTH_FIELD) {
        Ok(entries) => BasicAuth::new(&entries, realm, owner),
        Err(why) => BasicAuth::refused(why, realm, owner),
    })
}

const BASIC_AUTH_FIELD: &str = "spec.basicAuth.secretRef";

/// Whether `target` names route `kind`/`name` of `namespace` (a policy's
/// own: attachment never crosses namespaces).
fn names(target: &RouteTrafficPolicyTargetRef, namespace: &str, kind: &str, name: &str) -> bool {
    target.group == GROUP
        && target.kind == kind
        && target.name == name
        && target.namespace.as_deref().is_none_or(|ns| ns == namespace)
}

type Candidate<'s> = (AgeKey<'s>, &'s NsName, &'s Stored<RouteTrafficPolicy>);

/// The winning policy per section (`None`: the whole route) of route
/// `kind` `namespace/name`: the oldest, then namespace/name.
fn winners<'s>(
    store: &'s Store,
    namespace: &str,
    kind: &str,
    name: &str,
) -> BTreeMap<Option<String>, Candidate<'s>> {
    let mut out: BTreeMap<Option<String>, Candidate<'s>> = BTreeMap::new();
    let from = NsName::new(namespace, "");
    let in_namespace = store
        .route_traffic_policies
        .range(from..)
        .take_while(|(id, _)| id.namespace == namespace);
    for (id, policy) in in_namespace {
        let age = age(&policy.object.metadata, id);
        for t in &policy.object.spec.target_refs {
            if !names(t, namespace, kind, name) {
                continue;
            }
            let entry = out
                .entry(t.section_name.clone())
                .or_insert((age, id, policy));
            if age < entry.0 {
                *entry = (age, id, policy);
            }
        }
    }
    out
}

/// The policy's traffic policy, through the annotations' reader; the
/// values it cannot serve, named by the policy's fields.
fn traffic(
    policy: &RouteTrafficPolicy,
    route_key: &str,
    table: impl FnOnce() -> Arc<crate::live::rate_table::RateTable>,
    (counts, owner): (&crate::live::global_counts::GlobalCounts, &str),
) -> Result<TrafficPolicy, Vec<String>> {
    let fields = policy.spec.annotations();
    let key = |name: &str| format!("{NGINX_PREFIX}{name}");
    let annotations: BTreeMap<String, String> = fields
        .iter()
        .map(|a| (key(a.name), a.value.clone()))
        .collect();
    let mut problems = Vec::new();
    let nginx = NginxAnnotations::read(Some(&annotations), &mut problems);
    let mut traffic = nginx.policy(route_key, table, &mut problems);
    // `globalRateLimit` (crate::compile::global_rate), counted by the
    // route's stable key.
    if let Some(global) =
        crate::compile::global_rate::read(|n| nginx.get(n), route_key, owner, counts, &mut problems)
    {
        traffic.get_or_insert_default().global_rate = Some(global);
    }
    // `altSvc: false` (crate::plane::alt_svc).
    if policy.spec.alt_svc == Some(false) {
        traffic.get_or_insert_default().withhold_alt_svc = true;
    }
    if !problems.is_empty() {
        // The reader names the annotation; the tenant wrote the field.
        let renamed = problems
            .into_iter()
            .map(|p| {
                fields
                    .iter()
                    .find_map(|a| {
                        let rest = p.strip_prefix(&key(a.name))?;
                        Some(format!("{}{rest}", a.field))
                    })
                    .unwrap_or(p)
            })
            .collect();
        return Err(renamed);
    }
    match traffic {
        Some(traffic) => Ok(traffic),
        // Error pages or basic authentication alone: resolved by the
        // caller too.
        None if policy.spec.custom_errors.is_some()
            || policy.spec.basic_auth.is_some()
            || policy.spec.alt_svc.is_some() =>
        {
            Ok(TrafficPolicy::default())
        }
        None => Err(vec!["spec: sets nothing".to_string()]),
    }
}

/// `codes` as `custom-http-errors` reads them: ascending, each once.
fn sorted_codes(codes: &[u16]) -> Vec<u16> {
    let mut codes = codes.to_vec();
    codes.sort_unstable();
    codes.dedup();
    codes
}

/// Why `customErrors`' Service cannot answer pages, if it cannot: not
/// found, or without the port asked for.
fn missing_error_backend(
    store: &Store,
    id: &NsName,
    policy: &RouteTrafficPolicy,
) -> Option<String> {
    let backend = &policy.spec.custom_errors.as_ref()?.backend;
    let service = store.services.get(&teapot_model::store::NsRef {
        namespace: &id.namespace,
        name: &backend.name,
    });
    let ports = service.and_then(|s| s.object.spec.as_ref()?.ports.as_ref());
    let why = match ports {
        None if service.is_none() => "not found",
        Some(ports) if ports.iter().any(|p| p.port == backend.port) => return None,
        _ => "has no such port",
    };
    Some(format!(
        "spec.customErrors.backend: Service {}/{} port {} {why}; the replaced responses get teapot's short page",
        id.namespace, backend.name, backend.port
    ))
}

/// The status of every RouteTrafficPolicy: per target, whether it applies.
pub(crate) fn report(store: &Store) -> Vec<Reported<RouteTrafficPolicyStatus>> {
    let mut out = Vec::with_capacity(store.route_traffic_policies.len());
    // A global rate limit is read to be judged, its counts made here.
    let scratch = crate::live::global_counts::GlobalCounts::default();
    for (id, policy) in &store.route_traffic_policies {
        let generation = policy.object.metadata.generation;
        // The values are checked once: they are the same for every target.
        let invalid = match store.refused_route_traffic_policies.get(id) {
            Some(why) => Some(vec![why.to_string()]),
            None => traffic(
                &policy.object,
                "",
                || Arc::new(crate::live::rate_table::RateTable::new(1)),
                (&scratch, ""),
            )
            .err(),
        };
        let unresolved = missing_error_backend(store, id, &policy.object);
        let users = policy.object.spec.basic_auth.as_ref().and_then(|b| {
            let secret = (id.namespace.as_str(), b.secret_ref.name.as_str());
            basic_auth::users(store, secret, BASIC_AUTH_FIELD).err()
        });
        let targets = policy
            .object
            .spec
            .target_refs
            .iter()
            .map(|t| {
                let (ok, reason, message) = accepted(store, id, t, invalid.as_deref());
                let mut conditions = vec![RouteTrafficPolicyCondition {
                    type_: "Accepted".into(),
                    status: if ok { "True" } else { "False" }.into(),
                    reason: reason.into(),
                    message,
                    observed_generation: generation,
                    last_transition_time: None,
                }];
                if let Some(why) = unresolved.as_ref().filter(|_| ok) {
                    conditions.push(RouteTrafficPolicyCondition {
                        type_: "ResolvedRefs".into(),
                        status: "False".into(),
                        reason: "BackendNotFound".into(),
                        message: why.clone(),
                        observed_generation: generation,
                        last_transition_time: None,
                    });
                }
                if let Some(why) = users.as_ref().filter(|_| ok) {
                    conditions.push(RouteTrafficPolicyCondition {
                        type_: "ResolvedRefs".into(),
                        status: "False".into(),
                        reason: "InvalidSecret".into(),
                        message: format!("{why}; the routes answer 503"),
                        observed_generation: generation,
                        last_transition_time: None,
                    });
                }
                RouteTrafficPolicyTargetStatus {
                    target_ref: t.clone(),
                    conditions,
                }
            })
            .collect();
        out.push(Reported {
            namespace: id.namespace.clone(),
            name: id.name.clone(),
            status: RouteTrafficPolicyStatus { targets },
        });
    }
    out
}

/// The `Accepted` condition of one target of policy `id`.
fn accepted(
    store: &Store,
    id: &NsName,
    target: &RouteTrafficPolicyTargetRef,
    invalid: Option<&[String]>,
) -> (bool, &'static str, String) {
    if let Some(problems) = invalid {
        return (
            false,
            "Invalid",
            format!("{}; its routes answer 503", problems.join("; ")),
        );
    }
    if let Some(ns) = target.namespace.as_deref().filter(|ns| *ns != id.namespace) {
        return (
            false,
            "TargetNotFound",
            format!(
                "{ns} is another namespace: a RouteTrafficPolicy targets its own namespace's routes"
            ),
        );
    }
    let route = NsName::new(id.namespace.as_str(), target.name.as_str());
    let rules: Option<Vec<Option<&str>>> = match (target.group.as_str(), target.kind.as_str()) {
        (GROUP, "HTTPRoute") => store.http_routes.get(&route).map(|r| {
            let rules = r.object.spec.rules.iter().flatten();
            rules.map(|r| r.name.as_deref()).collect()
        }),
        (GROUP, "GRPCRoute") => store.grpc_routes.get(&route).map(|r| {
            let rules = r.object.spec.rules.iter().flatten();
            rules.map(|r| r.name.as_deref()).collect()
        }),
        _ => {
            return (
                false,
                "TargetNotFound",
                format!(
                    "{}/{} is not a route: a RouteTrafficPolicy targets {GROUP} HTTPRoutes and GRPCRoutes",
                    target.group, target.kind
                ),
            );
        }
    };
    let Some(rules) = rules else {
        return (
            false,
            "TargetNotFound",
            format!("{} {route} not found", target.kind),
        );
    };
    if let Some(section) = &target.section_name
        && !rules.contains(&Some(section.as_str()))
    {
        return (
            false,
            "TargetNotFound",
            format!("{} {route} has no rule named {section}", target.kind),
        );
    }
    let winners = winners(store, &id.namespace, &target.kind, &target.name);
    match winners.get(&target.section_name) {
        Some((_, winner, _)) if *winner != id => (
            false,
            "Conflicted",
            format!("RouteTrafficPolicy {winner} targets the same and is older (or first by name)"),
        ),
        _ => (
            true,
            "Accepted",
            "the policy applies to its target".to_string(),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::tests::test_store as store;
    use teapot_api::route_policy::{ClientAddresses, RateLimit, RouteTrafficPolicySpec};

    fn route() -> &'static str {
        "apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: web, namespace: shop}
spec:
  rules:
  - name: admin
    backendRefs: [{name: app, port: 80}]
  - name: public
    backendRefs: [{name: app, port: 80}]
"
    }

    fn policy(name: &str, created: &str, section: Option<&str>, allow: &str) -> String {
        let section = section.map_or(String::new(), |s| format!(", sectionName: {s}"));
        format!(
            "---
apiVersion: teapot.dev/v1alpha1
kind: RouteTrafficPolicy
metadata: {{name: {name}, namespace: shop, creationTimestamp: \"{created}\"}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: web{section}}}]
  clientAddresses: {{allow: [\"{allow}\"]}}
"
        )
    }

    fn statuses(store: &Store) -> Vec<(String, &'static str)> {
        report(store)
            .into_iter()
            .map(|r| {
                let c = &r.status.targets[0].conditions[0];
                let reason: &'static str = match c.reason.as_str() {
                    "Accepted" => "Accepted",
                    "Conflicted" => "Conflicted",
                    "TargetNotFound" => "TargetNotFound",
                    _ => "Invalid",
                };
                (r.name, reason)
            })
            .collect()
    }

    #[test]
    fn the_oldest_wins_and_the_others_are_conflicted() {
        let docs = format!(
            "{}{}{}{}",
            route(),
            policy("newer", "2024-02-01T00:00:00Z", None, "10.0.0.0/8"),
            policy("older", "2024-01-01T00:00:00Z", None, "192.168.0.0/16"),
            policy(
                "rule",
                "2024-03-01T00:00:00Z",
                Some("admin"),
                "172.16.0.0/12"
            ),
        );
        let store = store(&docs);
        let won = winners(&store, "shop", "HTTPRoute", "web");
        assert_eq!(won[&None].1.name, "older");
        assert_eq!(won[&Some("admin".to_string())].1.name, "rule");
        assert_eq!(
            statuses(&store),
            [
                ("newer".to_string(), "Conflicted"),
                ("older".to_string(), "Accepted"),
                ("rule".to_string(), "Accepted"),
            ]
        );
    }

    #[test]
    fn a_missing_route_or_rule_is_not_found() {
        let docs = format!(
            "{}{}",
            route(),
            policy("p", "2024-01-01T00:00:00Z", Some("nope"), "10.0.0.0/8"),
        );
        assert_eq!(
            statuses(&store(&docs)),
            [("p".to_string(), "TargetNotFound")]
        );
        let docs = policy("p", "2024-01-01T00:00:00Z", None, "10.0.0.0/8");
        assert_eq!(
            statuses(&store(&docs)),
            [("p".to_string(), "TargetNotFound")]
        );
    }

    #[test]
    fn a_rules_own_policy_replaces_the_route_wide_one_and_cors_adds_to_it() {
        let allow = |t: &TrafficPolicy| t.access.as_ref().unwrap().allow[0].to_string();
        let wide = |cidr: &str| {
            let spec = RouteTrafficPolicySpec {
                client_addresses: Some(ClientAddresses {
                    allow: vec![cidr.to_string()],
                    deny: Vec::new(),
                }),
                ..RouteTrafficPolicySpec::default()
            };
            let p = RouteTrafficPolicy::new("p", spec);
            Arc::new(
                traffic(
                    &p,
                    "k",
                    || Arc::new(crate::live::rate_table::RateTable::new(1)),
                    (&Default::default(), ""),
                )
                .unwrap(),
            )
        };
        let attached = Attached {
            route: Some(wide("10.0.0.0/8")),
            rules: vec![("admin".to_string(), wide("192.168.0.0/16"))],
        };
        let route = attached.route_policy(None).unwrap();
        assert_eq!(allow(route.traffic.as_deref().unwrap()), "10.0.0.0/8");
        let own = attached
            .rule_traffic(Some("admin"), Some(&route), None)
            .unwrap();
        assert_eq!(allow(&own), "192.168.0.0/16");
        assert!(
            attached
                .rule_traffic(Some("public"), Some(&route), None)
                .is_none()
        );
        let cors = Cors {
            origins: None,
            methods: String::new(),
            headers: String::new(),
            expose: None,
            credentials: false,
            max_age: String::new(),
            gateway: true,
        };
        let with = attached
            .rule_traffic(Some("public"), Some(&route), Some(&cors))
            .unwrap();
        assert_eq!(
            allow(&with),
            "10.0.0.0/8",
            "CORS adds to the route-wide policy"
        );
        assert!(with.cors.is_some());
    }

    /// The traffic policy on the route `host`'s first candidate forwards
    /// to (panics when it does not forward or its route is unresolved).
    fn traffic_on(
        s: &crate::compile::Snapshot,
        host: &str,
    ) -> Option<Arc<crate::compile::traffic::TrafficPolicy>> {
        use crate::compile::gateway::table::Action;
        let candidates = s.gateway.host(host).candidates();
        let Action::Backends { backends, .. } = &*candidates[0].action else {
            panic!("not forwarded");
        };
        let route = backends[0].route.as_ref().expect("resolved");
        route.policy.as_ref().and_then(|p| p.traffic.clone())
    }

    /// A GRPCRoute's rule gets its policy as an HTTPRoute's does: the one
    /// pipeline answers both.
    #[test]
    fn a_grpc_routes_rule_carries_its_policy() {
        use crate::compile::tests::compile_test_docs;
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: grpc, port: 50051}]}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ops}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: GRPCRoute\nmetadata: {name: g, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [g.example]\n  rules: [{name: calls, backendRefs: [{name: web, port: 50051}]}]\n".into(),
            "apiVersion: teapot.dev/v1alpha1\nkind: RouteTrafficPolicy\nmetadata: {name: p, namespace: ops}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: GRPCRoute, name: g, sectionName: calls}]\n  clientAddresses: {deny: [192.0.2.0/24]}\n".into(),
        ];
        let s = compile_test_docs(&docs, &crate::compile::CompileOptions::default());
        let traffic = traffic_on(&s, "g.example");
        let access = traffic
            .as_ref()
            .and_then(|t| t.access.as_ref())
            .expect("the rule's policy");
        assert_eq!(access.deny[0].to_string(), "192.0.2.0/24");
    }

    /// A policy the tenant's admission never saw (an operator's) with a
    /// value that cannot be read keeps its route refused (503), never
    /// served without the restriction it asked for.
    #[test]
    fn a_policy_that_cannot_be_read_refuses_its_routes() {
        use crate::compile::tests::compile_test_docs;
        // Past the reader's bound on ignored networks, which loading
        // does not check.
        let ignored = (0..65)
            .map(|i| format!("10.{i}.0.0/16"))
            .collect::<Vec<_>>()
            .join(", ");
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: http, port: 80}]}\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ops}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [r.example]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n".into(),
            format!(
                "apiVersion: teapot.dev/v1alpha1\nkind: RouteTrafficPolicy\nmetadata: {{name: p, namespace: ops}}\nspec:\n  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}}]\n  clientAddresses: {{allow: [10.0.0.0/8]}}\n  globalRateLimit: {{requests: 10, window: 1m, ignored: [{ignored}]}}\n"
            ),
        ];
        let s = compile_test_docs(&docs, &crate::compile::CompileOptions::default());
        let traffic = traffic_on(&s, "r.example").expect("the refused policy stays on the route");
        let why = traffic.refused.as_deref().expect("refused");
        assert!(why.contains("globalRateLimit"), "{why}");
        assert!(traffic.access.is_none());
    }

    /// A policy the manifests reader refuses (a value out of bounds) and
    /// that was never served before stands refused: its route answers
    /// 503 with why, naming the field, and its status is `Invalid`; it is
    /// not dropped, which would leave the route without its allow-list.
    #[test]
    fn a_policy_refused_when_read_refuses_its_routes() {
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: ops}\nspec: {ports: [{name: http, port: 80}]}\n",
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: ops}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n",
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {name: r, namespace: ops}\nspec:\n  parentRefs: [{name: gw}]\n  hostnames: [r.example]\n  rules: [{backendRefs: [{name: web, port: 80}]}]\n",
            "apiVersion: teapot.dev/v1alpha1\nkind: RouteTrafficPolicy\nmetadata: {name: p, namespace: ops}\nspec:\n  targetRefs: [{group: gateway.networking.k8s.io, kind: HTTPRoute, name: r}]\n  clientAddresses: {allow: [10.0.0.0/8]}\n  rateLimit: {requestsPerSecond: 200000}\n",
        ];
        let mut loaded = teapot_model::manifests::Loaded::default();
        teapot_model::manifests::load_text(
            std::path::Path::new("t.yaml"),
            &docs.join("---\n"),
            &Store::default(),
            &mut loaded,
        );
        assert_eq!(loaded.problems.len(), 1, "{:?}", loaded.problems);
        let s = crate::compile::compile(
            &loaded.store,
            loaded.problems,
            1,
            &crate::compile::CompileOptions::default(),
            &crate::live::endpoints::EndpointRegistry::default(),
        );
        let traffic = traffic_on(&s, "r.example").expect("the refused policy is on the route");
        let why = traffic.refused.as_deref().expect("refused");
        assert!(
            why.starts_with("spec.rateLimit.requestsPerSecond: "),
            "{why}"
        );
        let status = &s.report.route_traffic_policies[0].status.targets[0].conditions[0];
        assert_eq!(
            (status.status.as_str(), status.reason.as_str()),
            ("False", "Invalid")
        );
        assert!(
            status
                .message
                .starts_with("spec.rateLimit.requestsPerSecond: ")
                && status.message.ends_with("its routes answer 503"),
            "{}",
            status.message
        );
    }

    /// `loadBalance`, `satisfy`, `authCache` and `backendHTTP` are read by
    /// the Ingress's reader, as the annotations they stand for.
    #[test]
    fn balancing_satisfy_auth_cache_and_backend_http_read_as_the_annotations() {
        use teapot_api::route_policy::{AuthCache, BackendHttp};
        let mut spec = RouteTrafficPolicySpec {
            load_balance: Some("ewma".into()),
            satisfy: Some("any".into()),
            auth_cache: Some(AuthCache {
                key: "$http_authorization".into(),
                duration: Some("200 10m".into()),
            }),
            backend_http: Some(BackendHttp {
                version: Some("1.0".into()),
                connection: Some("keep-alive".into()),
            }),
            ..RouteTrafficPolicySpec::default()
        };
        let p = RouteTrafficPolicy::new("p", spec.clone());
        let table = || Arc::new(crate::live::rate_table::RateTable::new(16));
        let counts = crate::live::global_counts::GlobalCounts::default();
        let t = traffic(&p, "k", table, (&counts, "")).unwrap();
        assert!(t.ewma && t.satisfy_any && t.auth_cache.is_some());
        let http = t.upstream_http.as_deref().expect("the backend's head");
        assert_eq!(http.version, teapot_h1::HttpVersion::Http10);
        assert_eq!(
            http.connection.as_ref().map(|c| c.as_str()),
            Some("keep-alive")
        );
        spec.auth_cache.as_mut().unwrap().duration = Some("200 2h".into());
        let p = RouteTrafficPolicy::new("p", spec);
        let problems = traffic(&p, "k", table, (&counts, "")).unwrap_err();
        assert!(
            problems[0].starts_with("spec.authCache.key:"),
            "{problems:?}"
        );
    }

    /// `altSvc: false` withholds `Alt-Svc` on its routes; `true` alone
    /// is the default, not a policy that sets nothing.
    #[test]
    fn alt_svc_false_withholds_the_field_and_true_alone_is_accepted() {
        let table = || Arc::new(crate::live::rate_table::RateTable::new(16));
        let counts = crate::live::global_counts::GlobalCounts::default();
        for (alt_svc, withheld) in [(Some(false), true), (Some(true), false)] {
            let spec = RouteTrafficPolicySpec {
                alt_svc,
                ..RouteTrafficPolicySpec::default()
            };
            let p = RouteTrafficPolicy::new("p", spec);
            let t = traffic(&p, "k", table, (&counts, "")).unwrap();
            assert_eq!(t.withhold_alt_svc, withheld, "{alt_svc:?}");
            assert!(t.refused.is_none() && t.access.is_none());
        }
        let p = RouteTrafficPolicy::new("p", RouteTrafficPolicySpec::default());
        assert!(traffic(&p, "k", table, (&counts, "")).is_err());
    }

    #[test]
    fn limits_read_as_the_annotations_do_and_problems_name_the_field() {
        let mut spec = RouteTrafficPolicySpec {
            rate_limit: Some(RateLimit {
                requests_per_second: Some(2),
                requests_per_minute: None,
                burst_multiplier: Some(1),
                exempt: vec!["10.1.0.0/16".into()],
            }),
            in_flight_per_client: Some(3),
            ..RouteTrafficPolicySpec::default()
        };
        let p = RouteTrafficPolicy::new("p", spec.clone());
        let table = || Arc::new(crate::live::rate_table::RateTable::new(16));
        let counts = crate::live::global_counts::GlobalCounts::default();
        let t = traffic(&p, "k", table, (&counts, "")).unwrap();
        assert_eq!(t.rate.as_ref().unwrap().limits.len(), 1);
        assert_eq!(t.rate.as_ref().unwrap().exempt.len(), 1);
        assert_eq!(t.connections.as_ref().unwrap().limit, 3);
        spec.in_flight_per_client = Some(0);
        let p = RouteTrafficPolicy::new("p", spec);
        let problems = traffic(&p, "k", table, (&counts, "")).unwrap_err();
        assert!(
            problems[0].starts_with("spec.inFlightPerClient:"),
            "{problems:?}"
        );
    }
}
