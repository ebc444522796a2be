//! An HTTPRoute or GRPCRoute as the compile reads it, whatever its kind:
//! its parentRefs, rules and backendRefs in one shape, the matches of
//! each rule compiled when read ([`super::matchers`]).

use std::sync::Arc;

use serde::Serialize;
use teapot_api::HostPattern;
use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFilters, HttpRouteRulesSessionPersistence,
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
    }
}
