//! A rule's (or a backendRef's) filters: read once into a [`FilterSpec`],
//! built into the table's [`Filters`] per match, and the traffic policy
//! (CORS, ExternalAuth, sessionPersistence) they add to the route's.

use std::sync::Arc;

use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFilters, HttpRouteRulesFiltersExternalAuth,
    HttpRouteRulesFiltersRequestRedirectPathType, HttpRouteRulesFiltersRequestRedirectScheme,
    HttpRouteRulesFiltersType, HttpRouteRulesFiltersUrlRewritePathType,
};

use super::table::{
    BackendFilters, Filters, HeaderEdits, Matcher, PathChange, PathMatch, Redirect, Rewrite,
    RouteInfo,
};
use super::{cors, ext_auth};
use crate::compile::routes::{Route, RoutePolicy};
use crate::compile::traffic::{Cors, GatewayAuthTerms, TrafficPolicy};

/// The traffic policy of `base` (the route's own, if any) with `cors` as
/// its CORS: a rule's filter adds to what the route has, never drops it.
pub(super) fn with_cors(base: Option<&RoutePolicy>, cors: &Cors) -> Arc<TrafficPolicy> {
    let mut traffic = base
        .and_then(|p| p.traffic.as_deref())
        .cloned()
        .unwrap_or_default();
    traffic.cors = Some(cors.clone());
    Arc::new(traffic)
}

/// A copy of `own` (a rule's or backendRef's traffic policy so far; none:
/// the route's own, if any) with `edit` made: a rule's sessionPersistence
/// or ExternalAuth adds to what the route has, never drops it.
pub(super) fn edited(
    own: Option<&TrafficPolicy>,
    info: &RouteInfo,
    edit: impl FnOnce(&mut TrafficPolicy),
) -> Arc<TrafficPolicy> {
    let mut traffic = own
        .or_else(|| info.policy.as_deref().and_then(|p| p.traffic.as_deref()))
        .cloned()
        .unwrap_or_default();
    edit(&mut traffic);
    Arc::new(traffic)
}

/// `route` with a rule's (or a backendRef's) traffic policy besides the
/// limits of the route's tenant: one policy per rule and backend, the
/// backend's own replacing the rule's.
pub(super) fn with_traffic(route: &Route, traffic: &Arc<TrafficPolicy>) -> Route {
    let base = route.policy.as_deref();
    let policy = RoutePolicy {
        max_body_size: base.and_then(|p| p.max_body_size),
        tenant: base.and_then(|p| p.tenant.clone()),
        traffic: Some(traffic.clone()),
    };
    Route::new(
        route.upstream.clone(),
        Some(Arc::new(policy)),
        route.ingress.clone(),
    )
}

/// A rule's filters, read once: what [`merged_filters`] builds from.
#[derive(Clone, Debug, Default)]
pub(super) struct FilterSpec {
    pub(super) request: HeaderEditsSpec,
    pub(super) response: HeaderEditsSpec,
    pub(super) rewrite_host: Option<String>,
    pub(super) rewrite_path: Option<PathChange>,
    pub(super) redirect: Option<Redirect>,
    /// (namespace, name, port, per million).
    pub(super) mirrors: Vec<(Option<String>, String, i32, u32)>,
    pub(super) request_timeout: Option<std::time::Duration>,
    pub(super) backend_timeout: Option<std::time::Duration>,
    /// The CORS filter: the rule's (or the backendRef's) traffic policy.
    pub(super) cors: Option<Cors>,
    /// The ExternalAuth filter (protocol HTTP) and its terms.
    pub(super) external_auth: Option<(HttpRouteRulesFiltersExternalAuth, Arc<GatewayAuthTerms>)>,
    /// The rule's `retry` (crate::compile::gateway::retry).
    pub(super) retry: Option<Arc<teapot_h1::RetryPolicy>>,
}

#[derive(Clone, Debug, Default)]
pub(super) struct HeaderEditsSpec {
    pub(super) set: Vec<(String, String)>,
    pub(super) add: Vec<(String, String)>,
    pub(super) remove: Vec<String>,
}

impl HeaderEditsSpec {
    pub(super) const NONE: HeaderEditsSpec = HeaderEditsSpec {
        set: Vec::new(),
        add: Vec::new(),
        remove: Vec::new(),
    };
}

/// No filter, no timeout: what most rules have (a static: nothing to
/// build or drop per rule).
pub(super) static NO_FILTERS: FilterSpec = FilterSpec {
    request: HeaderEditsSpec::NONE,
    response: HeaderEditsSpec::NONE,
    rewrite_host: None,
    rewrite_path: None,
    redirect: None,
    mirrors: Vec::new(),
    request_timeout: None,
    backend_timeout: None,
    cors: None,
    external_auth: None,
    retry: None,
};

impl FilterSpec {
    pub(super) fn uses_prefix(&self) -> bool {
        matches!(self.rewrite_path, Some(PathChange::Prefix(_)))
    }
}

pub(super) fn filter_spec(
    filters: &[HttpRouteRulesFilters],
    (request, backend): (Option<&str>, Option<&str>),
    grpc: bool,
) -> Result<FilterSpec, String> {
    let mut spec = FilterSpec::default();
    let timeout = |t: Option<&str>| -> Result<Option<std::time::Duration>, String> {
        t.map(teapot_model::gateway::parse_duration)
            .transpose()
            .map(|d| d.filter(|d| !d.is_zero()))
    };
    spec.request_timeout = timeout(request)?;
    spec.backend_timeout = timeout(backend)?;
    for f in filters {
        match f.r#type {
            HttpRouteRulesFiltersType::RequestHeaderModifier => {
                if let Some(m) = &f.request_header_modifier {
                    let e = &mut spec.request;
                    e.set.extend(
                        m.set
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.add.extend(
                        m.add
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.remove
                        .extend(m.remove.iter().flatten().map(|h| h.to_ascii_lowercase()));
                }
            }
            HttpRouteRulesFiltersType::ResponseHeaderModifier => {
                if let Some(m) = &f.response_header_modifier {
                    let e = &mut spec.response;
                    e.set.extend(
                        m.set
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.add.extend(
                        m.add
                            .iter()
                            .flatten()
                            .map(|h| (h.name.to_ascii_lowercase(), h.value.clone())),
                    );
                    e.remove
                        .extend(m.remove.iter().flatten().map(|h| h.to_ascii_lowercase()));
                }
            }
            HttpRouteRulesFiltersType::RequestRedirect if !grpc => {
                let Some(r) = &f.request_redirect else {
                    continue;
                };
                let path = r.path.as_ref().map(|p| match p.r#type {
                    HttpRouteRulesFiltersRequestRedirectPathType::ReplaceFullPath => {
                        PathChange::Full(p.replace_full_path.clone().unwrap_or_default().into())
                    }
                    HttpRouteRulesFiltersRequestRedirectPathType::ReplacePrefixMatch => {
                        PathChange::Prefix(
                            p.replace_prefix_match.clone().unwrap_or_default().into(),
                        )
                    }
                });
                spec.redirect = Some(Redirect {
                    scheme: r.scheme.as_ref().map(|s| match s {
                        HttpRouteRulesFiltersRequestRedirectScheme::Http => "http",
                        HttpRouteRulesFiltersRequestRedirectScheme::Https => "https",
                    }),
                    hostname: r.hostname.as_deref().map(Into::into),
                    port: r.port.and_then(|p| u16::try_from(p).ok()),
                    path,
                    status: r
                        .status_code
                        .and_then(|c| u16::try_from(c).ok())
                        .unwrap_or(302),
                });
            }
            HttpRouteRulesFiltersType::UrlRewrite if !grpc => {
                let Some(r) = &f.url_rewrite else { continue };
                spec.rewrite_host = r.hostname.clone();
                spec.rewrite_path = r.path.as_ref().map(|p| match p.r#type {
                    HttpRouteRulesFiltersUrlRewritePathType::ReplaceFullPath => {
                        PathChange::Full(p.replace_full_path.clone().unwrap_or_default().into())
                    }
                    HttpRouteRulesFiltersUrlRewritePathType::ReplacePrefixMatch => {
                        PathChange::Prefix(
                            p.replace_prefix_match.clone().unwrap_or_default().into(),
                        )
                    }
                });
            }
            HttpRouteRulesFiltersType::Cors if !grpc => {
                let Some(c) = &f.cors else { continue };
                spec.cors = Some(cors::cors(c)?);
            }
            HttpRouteRulesFiltersType::ExternalAuth if !grpc => {
                let Some(a) = &f.external_auth else { continue };
                if spec.external_auth.is_some() {
                    return Err("ExternalAuth appears twice".into());
                }
                spec.external_auth = Some((a.clone(), Arc::new(ext_auth::terms(a)?)));
            }
            HttpRouteRulesFiltersType::RequestMirror => {
                let Some(m) = &f.request_mirror else { continue };
                let b = &m.backend_ref;
                let group = b.group.as_deref().unwrap_or("");
                let kind = b.kind.as_deref().unwrap_or("Service");
                if !group.is_empty() || kind != "Service" {
                    return Err(format!(
                        "RequestMirror backendRef {} is not a Service",
                        b.name
                    ));
                }
                let Some(port) = b.port else {
                    return Err(format!("RequestMirror backendRef {} has no port", b.name));
                };
                let per_million = match (&m.fraction, m.percent) {
                    (Some(f), _) => {
                        let d = f.denominator.unwrap_or(100).max(1) as u64;
                        (f.numerator.max(0) as u64 * 1_000_000 / d).min(1_000_000) as u32
                    }
                    (None, Some(p)) => (p.clamp(0, 100) as u32) * 10_000,
                    (None, None) => 1_000_000,
                };
                spec.mirrors
                    .push((b.namespace.clone(), b.name.clone(), port, per_million));
            }
            _ => {
                let kind = serde_json::to_value(&f.r#type)
                    .ok()
                    .and_then(|v| v.as_str().map(String::from))
                    .unwrap_or_default();
                return Err(format!("filter {kind} is not supported"));
            }
        }
    }
    Ok(spec)
}

/// A backendRef's own filters: its RequestRedirect is kept (answered by
/// the decision, `plane::decide`), and a URLRewrite replacing the matched
/// prefix gets one `Filters` per match of the rule, each with the prefix
/// its match took.
pub(super) fn backend_filters(spec: &FilterSpec, matchers: &[Matcher]) -> BackendFilters {
    let build = |prefix: Option<&str>| {
        let mut f = merged_filters(spec, prefix).unwrap_or_default();
        f.redirect = spec.redirect.clone();
        f.matched_prefix = prefix.map(Into::into);
        (!f.is_empty()).then(|| Arc::new(f))
    };
    fn prefix(m: &Matcher) -> Option<&str> {
        match &m.path {
            PathMatch::Prefix(p) => Some(p),
            _ => None,
        }
    }
    match matchers {
        _ if !spec.uses_prefix() => {
            build(None).map_or(BackendFilters::None, BackendFilters::Shared)
        }
        [one] => build(prefix(one)).map_or(BackendFilters::None, BackendFilters::Shared),
        many => {
            let each: Option<Box<[Arc<Filters>]>> = many.iter().map(|m| build(prefix(m))).collect();
            each.map_or(BackendFilters::None, BackendFilters::PerMatch)
        }
    }
}

/// The filters a request gets from one filter list, with the matched
/// prefix; `None` when nothing is to be done.
pub(super) fn merged_filters(spec: &FilterSpec, prefix: Option<&str>) -> Option<Filters> {
    let edits = |s: &HeaderEditsSpec| HeaderEdits {
        set: s
            .set
            .iter()
            .map(|(n, v)| (n.as_str().into(), v.as_str().into()))
            .collect(),
        add: s
            .add
            .iter()
            .map(|(n, v)| (n.as_str().into(), v.as_str().into()))
            .collect(),
        remove: s.remove.iter().map(|n| n.as_str().into()).collect(),
    };
    let rewrite = (spec.rewrite_host.is_some() || spec.rewrite_path.is_some()).then(|| Rewrite {
        hostname: spec.rewrite_host.as_deref().map(Into::into),
        path: spec.rewrite_path.clone(),
    });
    let filters = Filters {
        request_headers: edits(&spec.request),
        response_headers: edits(&spec.response),
        rewrite,
        mirrors: Vec::new(),
        redirect: None,
        matched_prefix: prefix.map(Into::into),
        request_timeout: spec.request_timeout,
        backend_timeout: spec.backend_timeout,
        retry: spec.retry.clone(),
    };
    (!filters.is_empty()).then_some(filters)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::CompileOptions;
    use crate::compile::gateway::table::{Action, Backend};
    use crate::compile::snapshot::Snapshot;
    use crate::compile::tests::compile_test_docs;

    /// A Gateway without listener hostname in `infra`, Service `web` with
    /// an endpoint, and an HTTPRoute of `rules` on `b.example`.
    fn compile(rules: &str) -> Snapshot {
        let docs = [
            "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: infra}\nspec: {ports: [{port: 8080}]}\n---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: web-1, namespace: infra, labels: {kubernetes.io/service-name: web}}\naddressType: IPv4\nendpoints: [{addresses: [\"10.0.0.1\"]}]\nports: [{name: \"\", port: 8080}]\n".to_string(),
            "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {name: gw, namespace: infra}\nspec:\n  gatewayClassName: teapot\n  listeners: [{name: http, protocol: HTTP, port: 80}]\n".into(),
            format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: HTTPRoute\nmetadata: {{name: r, namespace: infra}}\nspec:\n  parentRefs: [{{name: gw}}]\n  hostnames: [b.example]\n  rules:\n{rules}"
            ),
        ];
        compile_test_docs(&docs, &CompileOptions::default())
    }

    /// The first backend's filters of the candidate whose path condition
    /// prints as `path`, as the decision picks them (by match index).
    fn backend_filters_of<'s>(s: &'s Snapshot, path: &str) -> Option<&'s Filters> {
        let candidates = s.gateway.host("b.example").candidates();
        let c = candidates
            .iter()
            .find(|c| format!("{:?}", c.matcher.path) == path)
            .unwrap_or_else(|| panic!("no candidate {path}"));
        let Action::Backends { backends, .. } = &*c.action else {
            panic!("{path}: not forwarded");
        };
        backends[0].filters.get(c.match_index()).map(|f| &**f)
    }

    #[test]
    fn a_backend_prefix_rewrite_gets_the_prefix_of_each_match() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /a}}, {path: {type: PathPrefix, value: /b/c/}}, {path: {type: Exact, value: /e}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: URLRewrite, urlRewrite: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /x}}}]\n",
        );
        let prefix = |path: &str| {
            backend_filters_of(&s, path)
                .expect("filters")
                .matched_prefix
                .as_deref()
                .map(String::from)
        };
        assert_eq!(prefix(r#"Prefix("/a")"#).as_deref(), Some("/a"));
        assert_eq!(prefix(r#"Prefix("/b/c")"#).as_deref(), Some("/b/c"));
        assert_eq!(prefix(r#"Exact("/e")"#), None);
        // What the request path makes of that prefix is the plane's
        // (`plane::decide` tests the rewrite end to end).
    }

    #[test]
    fn a_backend_redirect_is_kept_and_other_backend_filters_are_shared() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /r}}, {path: {type: PathPrefix, value: /s}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: RequestRedirect, requestRedirect: {path: {type: ReplacePrefixMatch, replacePrefixMatch: /to}, statusCode: 301}}]\n  - matches: [{path: {type: PathPrefix, value: /h}}]\n    backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: RequestHeaderModifier, requestHeaderModifier: {set: [{name: X-A, value: b}]}}]\n",
        );
        let candidates = s.gateway.host("b.example").candidates();
        let c = candidates
            .iter()
            .find(|c| matches!(&c.matcher.path, PathMatch::Prefix(p) if &**p == "/s"))
            .unwrap();
        let Action::Backends { backends, .. } = &*c.action else {
            panic!("not forwarded");
        };
        assert!(
            matches!(backends[0].filters, BackendFilters::Shared(_)),
            "the redirect's prefix is the match's, read at request time"
        );
        let redirect = backend_filters_of(&s, r#"Prefix("/r")"#)
            .and_then(|f| f.redirect.clone())
            .expect("redirect kept");
        assert_eq!(redirect.status, 301);
        assert_eq!(redirect.path, Some(PathChange::Prefix("/to".into())));
        let headers = backend_filters_of(&s, r#"Prefix("/h")"#).unwrap();
        assert_eq!(headers.request_headers.set.len(), 1);
        assert!(headers.redirect.is_none() && headers.matched_prefix.is_none());
    }

    #[test]
    fn an_unsupported_backend_filter_is_named_and_its_backend_not_served() {
        let s = compile(
            "  - backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: ExtensionRef, extensionRef: {group: example.com, kind: Auth, name: a}}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = &status["httpRoutes"][0]["status"]["parents"][0]["conditions"];
        let partial = conditions
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "PartiallyInvalid")
            .unwrap_or_else(|| panic!("{conditions}"));
        assert_eq!(
            partial["message"],
            "rule 0 backendRef web: filter ExtensionRef is not supported"
        );
        let candidates = s.gateway.host("b.example").candidates();
        let Action::Backends { backends, .. } = &*candidates[0].action else {
            panic!("not a backend rule");
        };
        assert!(backends[0].route.is_err(), "a filter is never skipped");
    }

    /// The CORS filter of a rule is every backend's policy; a
    /// backendRef's own replaces it for that backend; GRPCRoute has none.
    #[test]
    fn a_cors_filter_is_the_policy_of_its_rules_backends() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /a}}]\n    filters: [{type: CORS, cors: {allowOrigins: [\"https://*.b.example\"], allowMethods: [GET]}}]\n    backendRefs:\n    - {name: web, port: 8080}\n    - name: web\n      port: 8080\n      filters: [{type: CORS, cors: {allowOrigins: [\"*\"], allowCredentials: true, maxAge: 60}}]\n  - matches: [{path: {type: PathPrefix, value: /b}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let candidates = s.gateway.host("b.example").candidates();
        let backends = |path: &str| {
            let c = candidates
                .iter()
                .find(|c| format!("{:?}", c.matcher.path).contains(path))
                .unwrap_or_else(|| panic!("no candidate {path}"));
            let Action::Backends { backends, .. } = &*c.action else {
                panic!("{path}: not forwarded");
            };
            backends
                .iter()
                .map(|b| {
                    b.route
                        .as_ref()
                        .unwrap()
                        .traffic()
                        .and_then(|t| t.cors.clone())
                })
                .collect::<Vec<_>>()
        };
        let a = backends("/a");
        let rule = a[0].as_ref().expect("the rule's filter");
        assert!(rule.gateway && !rule.credentials);
        assert_eq!((rule.methods.as_str(), rule.max_age.as_str()), ("GET", "5"));
        assert!(rule.origins.as_ref().unwrap()[0].matches("https://x.y.b.example"));
        let own = a[1].as_ref().expect("the backendRef's filter");
        assert!(own.origins.is_none() && own.credentials && own.max_age == "60");
        assert_eq!(backends("/b"), vec![None], "another rule has no CORS");
    }

    /// The rule's backends and conditions of a compile.
    fn rule_of(s: &Snapshot) -> (&[Backend], Option<&str>, serde_json::Value) {
        let candidates = s.gateway.host("b.example").candidates();
        let Action::Backends {
            backends,
            persistence,
            ..
        } = &*candidates[0].action
        else {
            panic!("not forwarded");
        };
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = status["httpRoutes"][0]["status"]["parents"][0]["conditions"].clone();
        (backends, persistence.as_deref(), conditions)
    }

    /// sessionPersistence is the cookie affinity of every backend of the
    /// rule, and the rule's backends are pinned by the same cookie.
    #[test]
    fn session_persistence_is_the_affinity_of_the_rules_backends() {
        let s = compile(
            "  - matches: [{path: {type: PathPrefix, value: /cart}}]\n    sessionPersistence: {absoluteTimeout: 10m, cookie: {name: pin, lifetimeType: Permanent, path: /cart}}\n    backendRefs: [{name: web, port: 8080, weight: 3}, {name: web, port: 8080, weight: 1}]\n",
        );
        let (backends, persistence, _) = rule_of(&s);
        assert_eq!(persistence, Some("pin"));
        for b in backends {
            let a = b
                .route
                .as_ref()
                .unwrap()
                .traffic()
                .unwrap()
                .affinity
                .clone();
            let a = a.expect("affinity");
            assert_eq!(
                (a.cookie.as_str(), a.path.as_str(), a.max_age),
                ("pin", "/cart", Some(600))
            );
        }
        // Not served: the rule is not, and the reason is named.
        let s = compile(
            "  - sessionPersistence: {type: Header, header: {name: x-session}}\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let text = status["httpRoutes"][0]["status"]["parents"][0]["conditions"].to_string();
        assert!(
            text.contains("sessionPersistence.type Header is not served"),
            "{text}"
        );
        assert!(s.gateway.host("b.example").candidates().is_empty());
    }

    /// The ExternalAuth filter asks the Service its backendRef names, on
    /// the filter's terms; one that does not resolve fails closed and is
    /// reported; GRPC is not served.
    #[test]
    fn an_external_auth_filter_is_the_rules_authentication() {
        let s = compile(
            "  - filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: web, port: 8080}, http: {path: /check, allowedResponseHeaders: [X-User]}}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let (backends, _, conditions) = rule_of(&s);
        let traffic = backends[0].route.as_ref().unwrap().traffic().unwrap();
        let auth = traffic.auth.as_ref().expect("authentication");
        assert_eq!(auth.upstream.endpoints.load().len(), 1);
        let terms = traffic.auth_terms.as_ref().unwrap();
        assert_eq!(&*terms.path_prefix, "/check");
        assert_eq!(terms.response_headers[0].as_str(), "x-user");
        assert!(conditions.to_string().contains("\"ResolvedRefs\""));
        let s = compile(
            "  - backendRefs:\n    - name: web\n      port: 8080\n      filters: [{type: ExternalAuth, externalAuth: {protocol: HTTP, backendRef: {name: missing, port: 80}}}]\n",
        );
        let (backends, _, conditions) = rule_of(&s);
        let traffic = backends[0].route.as_ref().unwrap().traffic().unwrap();
        assert!(
            traffic
                .auth
                .as_ref()
                .unwrap()
                .upstream
                .endpoints
                .load()
                .is_empty()
        );
        let text = conditions.to_string();
        assert!(
            text.contains("ExternalAuth Service infra/missing with port 80 not found"),
            "{text}"
        );
        let s = compile(
            "  - filters: [{type: ExternalAuth, externalAuth: {protocol: GRPC, backendRef: {name: web, port: 8080}}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        assert!(s.gateway.host("b.example").candidates().is_empty());
    }

    #[test]
    fn a_cors_origin_that_is_no_origin_is_named() {
        let s = compile(
            "  - filters: [{type: CORS, cors: {allowOrigins: [\"https://a.example\", \"a.example/x\"]}}]\n    backendRefs: [{name: web, port: 8080}]\n",
        );
        let status = serde_json::to_value(&s.report.gateway).unwrap();
        let conditions = &status["httpRoutes"][0]["status"]["parents"][0]["conditions"];
        assert!(
            conditions
                .to_string()
                .contains("rule 0: cors.allowOrigins[1] \\\"a.example/x\\\" is not"),
            "{conditions}"
        );
    }
}
