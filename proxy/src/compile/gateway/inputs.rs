//! An HTTPRoute or GRPCRoute as the compile reads it, whatever its kind:
//! its parentRefs, rules and backendRefs in one shape, the matches of
//! each rule compiled when read ([`super::matchers`]).

use std::sync::Arc;

use serde::Serialize;
use teapot_api::HostPattern;
use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFilters, HttpRouteRulesRetry, HttpRouteRulesSessionPersistence,
};
use teapot_gateway_api::{GrpcRoute, HttpRoute};
use teapot_model::store::NsName;

use super::backend_tls;
use super::matchers::{any_path, grpc_matcher, http_matcher};
use super::table::Matcher;
use super::{AgeKey, RouteObject, age};

/// A parentRef, whatever the route kind.
#[derive(Debug)]
pub(super) struct ParentIn<'s> {
    pub(super) group: Option<&'s str>,
    pub(super) kind: Option<&'s str>,
    pub(super) name: &'s str,
    pub(super) namespace: Option<&'s str>,
    pub(super) port: Option<i32>,
    pub(super) section: Option<&'s str>,
}

/// A backendRef, whatever the route kind.
#[derive(Debug)]
pub(super) struct BackendIn<'s> {
    pub(super) group: Option<&'s str>,
    pub(super) kind: Option<&'s str>,
    pub(super) name: &'s str,
    pub(super) namespace: Option<&'s str>,
    pub(super) port: Option<i32>,
    pub(super) weight: Option<i32>,
    /// Its own filters, as HTTPRoute rule filters (converted once).
    pub(super) filters: Vec<HttpRouteRulesFilters>,
}

/// A rule's backendRefs, read as [`BackendIn`] when compiled (no list
/// built per rule beforehand).
#[derive(Debug)]
pub(super) enum BackendsIn<'s> {
    Http(&'s [teapot_gateway_api::generated::http_routes::HttpRouteRulesBackendRefs]),
    Grpc(&'s [teapot_gateway_api::generated::grpc_routes::GrpcRouteRulesBackendRefs]),
}

impl<'s> BackendsIn<'s> {
    pub(super) fn len(&self) -> usize {
        match self {
            BackendsIn::Http(b) => b.len(),
            BackendsIn::Grpc(b) => b.len(),
        }
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = BackendIn<'s>> + use<'s> {
        let (http, grpc) = match *self {
            BackendsIn::Http(b) => (b, &[][..]),
            BackendsIn::Grpc(b) => (&[][..], b),
        };
        let http = http.iter().map(|b| BackendIn {
            group: b.group.as_deref(),
            kind: b.kind.as_deref(),
            name: &b.name,
            namespace: b.namespace.as_deref(),
            port: b.port,
            weight: b.weight,
            filters: as_http_filters(b.filters.as_ref()),
        });
        let grpc = grpc.iter().map(|b| BackendIn {
            group: b.group.as_deref(),
            kind: b.kind.as_deref(),
            name: &b.name,
            namespace: b.namespace.as_deref(),
            port: b.port,
            weight: b.weight,
            filters: as_http_filters(b.filters.as_ref()),
        });
        http.chain(grpc)
    }
}

/// A rule, whatever the route kind: matches already compiled.
#[derive(Debug)]
pub(super) struct RuleIn<'s> {
    pub(super) matches: Result<Vec<Matcher>, String>,
    pub(super) backends: BackendsIn<'s>,
    pub(super) filters: std::borrow::Cow<'s, [HttpRouteRulesFilters]>,
    pub(super) timeouts: (Option<&'s str>, Option<&'s str>),
    /// The rule's `name`: a RouteTrafficPolicy's `sectionName`.
    pub(super) name: Option<&'s str>,
    /// The rule's `sessionPersistence` (HTTPRoute).
    pub(super) session: Option<&'s HttpRouteRulesSessionPersistence>,
    /// The rule's `retry` (HTTPRoute).
    pub(super) retry: Option<&'s HttpRouteRulesRetry>,
}

/// An HTTPRoute or GRPCRoute as the compile reads it.
#[derive(Debug)]
pub(super) struct RouteIn<'s> {
    pub(super) id: &'s NsName,
    pub(super) grpc: bool,
    pub(super) kind: &'static str,
    pub(super) age: AgeKey<'s>,
    /// `spec.hostnames`, parsed once (invalid ones were refused at load).
    pub(super) hosts: Vec<HostPattern>,
    /// The object, shared with the store, for its status.
    pub(super) object: RouteObject,
    pub(super) parents: Vec<ParentIn<'s>>,
    pub(super) rules: Vec<RuleIn<'s>>,
    /// What its backends under a BackendTLSPolicy present (from its parent
    /// Gateways, set when the route compiles).
    pub(super) client_cert: backend_tls::ClientCert,
}

impl<'s> RouteIn<'s> {
    pub(super) fn http(id: &'s NsName, r: &'s Arc<HttpRoute>) -> RouteIn<'s> {
        let spec = &r.spec;
        RouteIn {
            object: RouteObject::Http(r.clone()),
            id,
            grpc: false,
            kind: "HTTPRoute",
            age: age(&r.metadata, id),
            hosts: parse_hosts(spec.hostnames.as_deref()),
            parents: spec
                .parent_refs
                .iter()
                .flatten()
                .map(|p| ParentIn {
                    group: p.group.as_deref(),
                    kind: p.kind.as_deref(),
                    name: &p.name,
                    namespace: p.namespace.as_deref(),
                    port: p.port,
                    section: p.section_name.as_deref(),
                })
                .collect(),
            client_cert: Ok(None),
            rules: match &spec.rules {
                Some(rules) => rules.iter().map(http_rule).collect(),
                // No rules: one rule matching everything, with no backend.
                None => Vec::new(),
            },
        }
    }

    pub(super) fn grpc(id: &'s NsName, r: &'s Arc<GrpcRoute>) -> RouteIn<'s> {
        let spec = &r.spec;
        RouteIn {
            object: RouteObject::Grpc(r.clone()),
            id,
            grpc: true,
            kind: "GRPCRoute",
            age: age(&r.metadata, id),
            hosts: parse_hosts(spec.hostnames.as_deref()),
            parents: spec
                .parent_refs
                .iter()
                .flatten()
                .map(|p| ParentIn {
                    group: p.group.as_deref(),
                    kind: p.kind.as_deref(),
                    name: &p.name,
                    namespace: p.namespace.as_deref(),
                    port: p.port,
                    section: p.section_name.as_deref(),
                })
                .collect(),
            rules: spec
                .rules
                .iter()
                .flatten()
                .map(|rule| {
                    let matches = match &rule.matches {
                        Some(m) if !m.is_empty() => m.iter().map(grpc_matcher).collect(),
                        _ => Ok(vec![any_path()]),
                    };
                    RuleIn {
                        matches,
                        backends: BackendsIn::Grpc(
                            rule.backend_refs.as_deref().unwrap_or_default(),
                        ),
                        filters: std::borrow::Cow::Owned(as_http_filters(rule.filters.as_ref())),
                        timeouts: (None, None),
                        name: rule.name.as_deref(),
                        session: None,
                        retry: None,
                    }
                })
                .collect(),
            client_cert: Ok(None),
        }
    }
}

pub(super) fn parse_hosts(hostnames: Option<&[String]>) -> Vec<HostPattern> {
    hostnames
        .unwrap_or_default()
        .iter()
        .filter_map(|h| HostPattern::parse(h).ok())
        .collect()
}

/// Filters of another generated type (backend-level, GRPCRoute) as
/// HTTPRoute rule filters: the same shape under another name, converted
/// once per compile where present (rare).
pub(super) fn as_http_filters<T: Serialize>(
    filters: Option<&Vec<T>>,
) -> Vec<HttpRouteRulesFilters> {
    match filters {
        Some(f) if !f.is_empty() => serde_json::to_value(f)
            .ok()
            .and_then(|v| serde_json::from_value(v).ok())
            .unwrap_or_default(),
        _ => Vec::new(),
    }
}

pub(super) fn http_rule(
    rule: &teapot_gateway_api::generated::http_routes::HttpRouteRules,
) -> RuleIn<'_> {
    let matches = match &rule.matches {
        Some(m) if !m.is_empty() => m.iter().map(http_matcher).collect(),
        _ => Ok(vec![any_path()]),
    };
    RuleIn {
        matches,
        backends: BackendsIn::Http(rule.backend_refs.as_deref().unwrap_or_default()),
        filters: std::borrow::Cow::Borrowed(rule.filters.as_deref().unwrap_or_default()),
        timeouts: (
            rule.timeouts.as_ref().and_then(|t| t.request.as_deref()),
            rule.timeouts
                .as_ref()
                .and_then(|t| t.backend_request.as_deref()),
        ),
        name: rule.name.as_deref(),
        session: rule.session_persistence.as_ref(),
        retry: rule.retry.as_ref(),
    }
}

/// A ListenerSet naming a Gateway of teapot's class as its parent, as the
/// Gateway compile reads it: whether the Gateway takes it, and where its
/// listeners sit in the Gateway's listener table.
#[derive(Debug)]
pub(super) struct SetIn<'s> {
    pub(super) id: &'s NsName,
    pub(super) set: &'s teapot_model::store::StoredListenerSet,
    /// Why it is not attached: the ListenerSet's `Accepted=False` reason
    /// and message.
    pub(super) refused: Option<(&'static str, String)>,
    /// Its listeners' indexes in the table (empty when refused).
    pub(super) range: std::ops::Range<usize>,
}

impl<'s> SetIn<'s> {
    pub(super) fn part(&self) -> crate::compile::api_status::SetPart<'s> {
        crate::compile::api_status::SetPart {
            id: self.id,
            generation: self.set.set.metadata.generation,
            refused: self.refused.clone(),
            range: self.range.clone(),
        }
    }
}

/// The ListenerSets whose parentRef names Gateway `gateway` (`id`), oldest
/// first (creationTimestamp, then namespace/name: older sets win listener
/// conflicts), each attached or refused. The Gateway decides: its
/// `allowedListeners` (`from`: None, the default, takes none; Same its
/// own namespace's; Selector the namespaces its selector matches; All
/// any), never the ListenerSet. A tenant's ListenerSet also attaches only
/// to a Gateway of its own namespace or an operator's: another tenant's
/// Gateway never takes it, whatever that Gateway allows (its admission
/// lets it allow Same at most).
pub(super) fn listener_sets<'s>(
    store: &'s teapot_model::store::Store,
    tenancy: &teapot_model::tenancy::Tenancy<'_>,
    id: &NsName,
    gateway: &teapot_gateway_api::Gateway,
) -> Vec<SetIn<'s>> {
    use teapot_gateway_api::generated::gateways::GatewayAllowedListenersNamespacesFrom as From;
    let mut out: Vec<SetIn<'s>> = store
        .listener_sets
        .iter()
        .filter(|(set_id, s)| {
            let p = &s.object.set.spec.parent_ref;
            p.group
                .as_deref()
                .unwrap_or(teapot_model::attachment::GROUP)
                == teapot_model::attachment::GROUP
                && p.kind.as_deref().unwrap_or("Gateway") == "Gateway"
                && p.name == id.name
                && p.namespace.as_deref().unwrap_or(&set_id.namespace) == id.namespace
        })
        .map(|(set_id, s)| SetIn {
            id: set_id,
            set: &s.object,
            refused: None,
            range: 0..0,
        })
        .collect();
    out.sort_by(|a, b| {
        let age = |s: &SetIn<'s>| age(&s.set.set.metadata, s.id);
        age(a).cmp(&age(b))
    });
    let namespaces = gateway
        .spec
        .allowed_listeners
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    let gateway_tenant = tenancy.get(&id.namespace).map(|t| t.cluster);
    for s in &mut out {
        let ns = s.id.namespace.as_str();
        let allowed = match namespaces.and_then(|n| n.from.as_ref()) {
            None | Some(From::None) => false,
            Some(From::Same) => ns == id.namespace,
            Some(From::All) => true,
            Some(From::Selector) => namespaces
                .and_then(|n| n.selector.as_ref())
                .and_then(|sel| serde_json::to_value(sel).ok())
                .and_then(|v| serde_json::from_value(v).ok())
                .is_some_and(|sel| teapot_model::gateway::namespace_selected(store, ns, &sel)),
        };
        let set_tenant = tenancy.get(ns).map(|t| t.cluster);
        s.refused = if !allowed {
            Some((
                "NotAllowed",
                format!(
                    "Gateway {id}'s allowedListeners does not admit ListenerSets from namespace {ns}"
                ),
            ))
        } else if ns != id.namespace && gateway_tenant.is_some() && set_tenant != gateway_tenant {
            Some((
                "NotAllowed",
                format!(
                    "Gateway {id} is another tenant's: it takes ListenerSets of its own namespace only"
                ),
            ))
        } else {
            None
        };
    }
    out
}

/// The listeners of the attached sets, in table order after the
/// Gateway's (`first`: how many the Gateway has), their ranges set.
pub(super) fn attached_listeners<'s>(
    sets: &mut [SetIn<'s>],
    first: usize,
) -> Vec<&'s [teapot_gateway_api::generated::gateways::GatewayListeners]> {
    let mut at = first;
    let mut out = Vec::new();
    for s in sets.iter_mut().filter(|s| s.refused.is_none()) {
        let n = s.set.listeners.len();
        s.range = at..at + n;
        at += n;
        out.push(s.set.listeners.as_slice());
    }
    out
}

/// ListenerSets through the whole compile. Named `tests`, as the
/// architecture check leaves test modules' imports out of the file graph.
#[cfg(test)]
mod tests {
    use serde_json::Value;

    use crate::compile::CompileOptions;
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    const CLASS: &str = "apiVersion: gateway.networking.k8s.io/v1
kind: GatewayClass
metadata: {name: teapot}
spec: {controllerName: teapot.dev/gateway-controller}
";

    fn tenant(cluster: &str) -> String {
        format!(
            "apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: {cluster}}}\nspec: {{cluster: {cluster}, nodeCIDRs: [10.9.0.0/24]}}\n"
        )
    }

    fn gateway(ns: &str, name: &str, allowed: &str, listeners: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"2024-01-01T00:00:00Z\"}}\nspec:\n  gatewayClassName: teapot\n  {allowed}\n  listeners: {listeners}\n"
        )
    }

    /// A ListenerSet of `ns` on Gateway `parent` (`namespace/name`),
    /// created `day` of January 2025 (older sets win conflicts).
    fn set(ns: &str, name: &str, parent: &str, day: u32, listeners: &str) -> String {
        let (pns, pname) = parent.split_once('/').unwrap();
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: {name}, namespace: {ns}, creationTimestamp: \"2025-01-{day:02}T00:00:00Z\"}}\nspec:\n  parentRef: {{name: {pname}, namespace: {pns}}}\n  listeners: {listeners}\n"
        )
    }

    fn route(ns: &str, name: &str, parents: &str) -> String {
        format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: {name}, namespace: {ns}}}\nspec:\n  parentRefs: {parents}\n  rules: [{{matches: [{{path: {{type: PathPrefix, value: /}}}}]}}]\n"
        )
    }

    fn compile(docs: &[String]) -> Snapshot {
        let options = CompileOptions {
            domain: "example.net".into(),
            ..CompileOptions::default()
        };
        compile_test_docs(docs, &options)
    }

    fn report(s: &Snapshot) -> Value {
        serde_json::to_value(&s.report.gateway).unwrap()
    }

    /// `{namespace/name: (Accepted reason, Programmed reason)}` of every
    /// ListenerSet.
    fn set_reasons(s: &Snapshot) -> Vec<(String, String, String)> {
        report(s)["listenerSets"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|l| {
                let c = &l["status"]["conditions"];
                (
                    format!(
                        "{}/{}",
                        l["namespace"].as_str().unwrap(),
                        l["name"].as_str().unwrap()
                    ),
                    c[0]["reason"].as_str().unwrap().to_string(),
                    c[1]["reason"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    }

    fn gateway_status(s: &Snapshot, ns: &str, name: &str) -> Value {
        report(s)["gateways"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["namespace"] == ns && g["name"] == name)
            .unwrap()["status"]
            .clone()
    }

    fn served(s: &Snapshot, host: &str) -> bool {
        !s.gateway.host(host).candidates().is_empty()
    }

    const HTTP_A: &str = "[{name: a, protocol: HTTP, port: 80, hostname: a.example}]";

    /// The Gateway's `allowedListeners` decides, never the ListenerSet:
    /// None (the default) takes none, Same its namespace's, Selector the
    /// namespaces its selector matches, All any.
    #[test]
    fn allowed_listeners_decides_which_sets_attach() {
        let namespace =
            "apiVersion: v1\nkind: Namespace\nmetadata: {name: team, labels: {listeners: yes}}\n"
                .to_string();
        let sets = [
            set(
                "edge",
                "own",
                "edge/shared",
                1,
                "[{name: o, protocol: HTTP, port: 80, hostname: own.example}]",
            ),
            set(
                "team",
                "theirs",
                "edge/shared",
                2,
                "[{name: t, protocol: HTTP, port: 80, hostname: team.example}]",
            ),
        ];
        let cases = [
            ("", ["NotAllowed", "NotAllowed"], 0),
            (
                "allowedListeners: {namespaces: {from: None}}",
                ["NotAllowed", "NotAllowed"],
                0,
            ),
            (
                "allowedListeners: {namespaces: {from: Same}}",
                ["Accepted", "NotAllowed"],
                1,
            ),
            (
                "allowedListeners: {namespaces: {from: Selector, selector: {matchLabels: {listeners: \"yes\"}}}}",
                ["NotAllowed", "Accepted"],
                1,
            ),
            (
                "allowedListeners: {namespaces: {from: All}}",
                ["Accepted", "Accepted"],
                2,
            ),
        ];
        for (allowed, want, attached) in cases {
            let mut docs = vec![
                CLASS.to_string(),
                namespace.clone(),
                gateway("edge", "shared", allowed, HTTP_A),
            ];
            docs.extend(sets.iter().cloned());
            docs.push(route("edge", "r-own", "[{kind: ListenerSet, name: own}]"));
            docs.push(route(
                "team",
                "r-team",
                "[{kind: ListenerSet, name: theirs}]",
            ));
            let s = compile(&docs);
            let got = set_reasons(&s);
            assert_eq!(
                got.iter()
                    .map(|(n, a, _)| (n.as_str(), a.as_str()))
                    .collect::<Vec<_>>(),
                [("edge/own", want[0]), ("team/theirs", want[1])],
                "{allowed}"
            );
            let status = gateway_status(&s, "edge", "shared");
            assert_eq!(status["attachedListenerSets"], attached, "{allowed}");
            let condition = status["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "AttachedListenerSets")
                .unwrap()
                .clone();
            assert_eq!(
                condition["status"],
                if attached > 0 { "True" } else { "False" }
            );
            // A set's routes are served on its hosts once it is attached,
            // and nowhere while it is not.
            assert_eq!(
                [served(&s, "own.example"), served(&s, "team.example")],
                want.map(|w| w == "Accepted"),
                "{allowed}"
            );
        }
    }

    /// A Gateway no ListenerSet names and that allows none keeps its
    /// status as before the kind.
    #[test]
    fn a_gateway_without_sets_reports_none() {
        let s = compile(&[CLASS.to_string(), gateway("edge", "shared", "", HTTP_A)]);
        let status = gateway_status(&s, "edge", "shared");
        assert!(status.get("attachedListenerSets").is_none(), "{status}");
        assert_eq!(status["conditions"].as_array().unwrap().len(), 2);
        assert!(report(&s).get("listenerSets").is_none());
    }

    /// A tenant's listeners on the operator's shared Gateway: its route
    /// attached to the set is served on the set's hostname, a hostname
    /// under the tenant's zone; a hostname under another tenant's zone is
    /// never served, whatever the Gateway allows.
    #[test]
    fn a_tenant_set_on_the_shared_gateway_serves_its_own_hosts_only() {
        let docs = [
            CLASS.to_string(),
            tenant("acme"),
            tenant("globex"),
            gateway(
                "edge",
                "shared",
                "allowedListeners: {namespaces: {from: All}}",
                HTTP_A,
            ),
            set(
                "tenant-acme",
                "shop",
                "edge/shared",
                1,
                "[{name: web, protocol: HTTP, port: 80, hostname: shop.acme.lb.example.net}]",
            ),
            set(
                "tenant-acme",
                "steal",
                "edge/shared",
                2,
                "[{name: web, protocol: HTTP, port: 80, hostname: www.globex.lb.example.net}]",
            ),
            route(
                "tenant-acme",
                "r",
                "[{kind: ListenerSet, name: shop}, {kind: ListenerSet, name: steal}]",
            ),
        ];
        let s = compile(&docs);
        assert!(served(&s, "shop.acme.lb.example.net"));
        assert!(!served(&s, "www.globex.lb.example.net"));
        // Nor the Gateway's own listener: the route named the sets only.
        assert!(!served(&s, "a.example"));
        let reasons = set_reasons(&s);
        assert!(
            reasons.contains(&(
                "tenant-acme/shop".into(),
                "Accepted".into(),
                "Programmed".into()
            )),
            "{reasons:?}"
        );
    }

    /// A tenant's ListenerSet on another tenant's Gateway is not attached
    /// (a tenant Gateway allows its own namespace's at most), and a route
    /// through it is not served.
    #[test]
    fn a_tenant_set_on_another_tenants_gateway_is_not_attached() {
        let docs = [
            CLASS.to_string(),
            tenant("acme"),
            tenant("globex"),
            gateway(
                "tenant-globex",
                "gw",
                "allowedListeners: {namespaces: {from: Same}}",
                "[{name: web, protocol: HTTP, port: 80}]",
            ),
            set(
                "tenant-acme",
                "sneak",
                "tenant-globex/gw",
                1,
                "[{name: web, protocol: HTTP, port: 80, hostname: x.acme.lb.example.net}]",
            ),
            route("tenant-acme", "r", "[{kind: ListenerSet, name: sneak}]"),
        ];
        let s = compile(&docs);
        assert_eq!(
            set_reasons(&s),
            [(
                "tenant-acme/sneak".into(),
                "NotAllowed".into(),
                "NotAllowed".into()
            )]
        );
        assert!(!served(&s, "x.acme.lb.example.net"));
        let status = report(&s);
        let parent = &status["httpRoutes"][0]["status"]["parents"][0];
        assert_eq!(parent["conditions"][0]["status"], "False", "{parent}");
        assert_eq!(
            gateway_status(&s, "tenant-globex", "gw")["attachedListenerSets"],
            0
        );
    }

    /// Conflicts across one table: the Gateway's listener wins over a
    /// set's, an older set's over a younger's; the loser is not served.
    #[test]
    fn hostname_conflicts_go_to_the_gateway_then_older_sets() {
        let all = "allowedListeners: {namespaces: {from: All}}";
        let docs = [
            CLASS.to_string(),
            gateway("edge", "shared", all, HTTP_A),
            set(
                "edge",
                "young",
                "edge/shared",
                2,
                "[{name: b, protocol: HTTP, port: 80, hostname: b.example}]",
            ),
            set(
                "edge",
                "old",
                "edge/shared",
                1,
                "[{name: a, protocol: HTTP, port: 80, hostname: a.example}, {name: b, protocol: HTTP, port: 80, hostname: b.example}]",
            ),
        ];
        let s = compile(&docs);
        let sets = report(&s)["listenerSets"].clone();
        let conflicted = |set: &str, listener: &str| -> String {
            let set = sets
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == set)
                .unwrap();
            let l = set["status"]["listeners"]
                .as_array()
                .unwrap()
                .iter()
                .find(|l| l["name"] == listener)
                .unwrap();
            let c = l["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Conflicted")
                .unwrap();
            format!(
                "{}/{}",
                c["status"].as_str().unwrap(),
                c["reason"].as_str().unwrap()
            )
        };
        assert_eq!(conflicted("old", "a"), "True/HostnameConflict");
        assert_eq!(conflicted("old", "b"), "False/NoConflicts");
        assert_eq!(conflicted("young", "b"), "True/HostnameConflict");
        // The young set has no listener left: not accepted.
        assert!(set_reasons(&s).contains(&(
            "edge/young".into(),
            "ListenersNotValid".into(),
            "ListenersNotValid".into()
        )));
    }

    /// A route names a set's listener by the set and sectionName; the
    /// same sectionName on the Gateway finds no listener there.
    #[test]
    fn routes_attach_to_a_sets_listener_by_section_name() {
        let all = "allowedListeners: {namespaces: {from: Same}}";
        let docs = [
            CLASS.to_string(),
            gateway("edge", "shared", all, HTTP_A),
            set(
                "edge",
                "ls",
                "edge/shared",
                1,
                "[{name: x, protocol: HTTP, port: 80, hostname: x.example}, {name: y, protocol: HTTP, port: 80, hostname: y.example}]",
            ),
            route(
                "edge",
                "by-set",
                "[{kind: ListenerSet, name: ls, sectionName: x}]",
            ),
            route("edge", "by-gateway", "[{name: shared, sectionName: y}]"),
        ];
        let s = compile(&docs);
        assert!(served(&s, "x.example"));
        assert!(!served(&s, "y.example"));
        assert!(!served(&s, "a.example"));
        let status = report(&s);
        let routes = status["httpRoutes"].as_array().unwrap();
        let by_gateway = routes.iter().find(|r| r["name"] == "by-gateway").unwrap();
        assert_eq!(
            by_gateway["status"]["parents"][0]["conditions"][0]["reason"],
            "NoMatchingParent"
        );
        let set = &status["listenerSets"][0]["status"]["listeners"];
        assert_eq!(set[0]["attachedRoutes"], 1);
        assert_eq!(set[1]["attachedRoutes"], 0);
    }
}
