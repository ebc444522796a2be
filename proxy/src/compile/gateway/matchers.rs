//! A rule's matches as the table's [`Matcher`]s: path, method, headers
//! and query parameters of an HTTPRoute, service and method of a
//! GRPCRoute; tenant patterns as bounded automata.

use std::sync::Arc;

use teapot_api::regex::{TenantRegex, grpc_method_pattern};
use teapot_gateway_api::generated::grpc_routes::{
    GrpcRouteRulesMatchesHeadersType, GrpcRouteRulesMatchesMethodType,
};
use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesMatches, HttpRouteRulesMatchesHeadersType, HttpRouteRulesMatchesPathType,
    HttpRouteRulesMatchesQueryParamsType,
};

use super::table::{Matcher, PathMatch, ValueMatch};

pub(super) fn any_path() -> Matcher {
    Matcher {
        path: PathMatch::Prefix("".into()),
        method: None,
        headers: Box::new([]),
        query: Box::new([]),
    }
}

/// A tenant pattern as a bounded automaton (`teapot_api::regex`), shared
/// with every route and earlier snapshot that holds the same pattern, so a
/// reload compiles only patterns it has not seen.
pub(super) fn regex(pattern: &str) -> Result<Arc<TenantRegex>, String> {
    TenantRegex::compile(pattern).map_err(|e| e.to_string())
}

pub(super) fn value_match(exact: bool, value: &str) -> Result<ValueMatch, String> {
    if exact {
        Ok(ValueMatch::Exact(value.into()))
    } else {
        regex(value).map(ValueMatch::Regex)
    }
}

pub(super) fn http_matcher(m: &HttpRouteRulesMatches) -> Result<Matcher, String> {
    let path = match &m.path {
        None => PathMatch::Prefix("".into()),
        Some(p) => {
            let value = p.value.as_deref().unwrap_or("/");
            match p
                .r#type
                .as_ref()
                .unwrap_or(&HttpRouteRulesMatchesPathType::PathPrefix)
            {
                HttpRouteRulesMatchesPathType::Exact => PathMatch::Exact(value.into()),
                HttpRouteRulesMatchesPathType::PathPrefix => {
                    PathMatch::Prefix(value.trim_end_matches('/').into())
                }
                HttpRouteRulesMatchesPathType::RegularExpression => PathMatch::Regex(regex(value)?),
            }
        }
    };
    // Only the first of several conditions on one header name counts.
    let mut headers: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if headers.iter().any(|(n, _)| **n == *name) {
            continue;
        }
        let exact = !matches!(
            h.r#type,
            Some(HttpRouteRulesMatchesHeadersType::RegularExpression)
        );
        headers.push((name.into(), value_match(exact, &h.value)?));
    }
    let mut query: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for q in m.query_params.iter().flatten() {
        if query.iter().any(|(n, _)| **n == *q.name) {
            continue;
        }
        let exact = !matches!(
            q.r#type,
            Some(HttpRouteRulesMatchesQueryParamsType::RegularExpression)
        );
        query.push((q.name.as_str().into(), value_match(exact, &q.value)?));
    }
    let method = m.method.as_ref().map(|method| {
        serde_json::to_value(method)
            .ok()
            .and_then(|v| v.as_str().map(Box::from))
            .unwrap_or_default()
    });
    Ok(Matcher {
        path,
        method,
        headers: headers.into_boxed_slice(),
        query: query.into_boxed_slice(),
    })
}

/// A GRPCRoute match as a path and header match: gRPC calls are POSTs to
/// `/SERVICE/METHOD`.
pub(super) fn grpc_matcher(
    m: &teapot_gateway_api::generated::grpc_routes::GrpcRouteRulesMatches,
) -> Result<Matcher, String> {
    let path = match &m.method {
        None => PathMatch::Prefix("".into()),
        Some(method) => {
            let exact = !matches!(
                method.r#type,
                Some(GrpcRouteRulesMatchesMethodType::RegularExpression)
            );
            let (service, name) = (method.service.as_deref(), method.method.as_deref());
            match (service, name, exact) {
                (Some(s), Some(m), true) => PathMatch::Exact(format!("/{s}/{m}").into()),
                (Some(s), None, true) => PathMatch::Prefix(format!("/{s}").into()),
                // The one list of method patterns the tenant budget counts.
                _ => {
                    let pattern = grpc_method_pattern(service, name, !exact).unwrap_or_default();
                    PathMatch::Regex(regex(&pattern)?)
                }
            }
        }
    };
    let mut headers: Vec<(Box<str>, ValueMatch)> = Vec::new();
    for h in m.headers.iter().flatten() {
        let name = h.name.to_ascii_lowercase();
        if headers.iter().any(|(n, _)| **n == *name) {
            continue;
        }
        let exact = !matches!(
            h.r#type,
            Some(GrpcRouteRulesMatchesHeadersType::RegularExpression)
        );
        headers.push((name.into(), value_match(exact, &h.value)?));
    }
    Ok(Matcher {
        path,
        method: None,
        headers: headers.into_boxed_slice(),
        query: Box::new([]),
    })
}
