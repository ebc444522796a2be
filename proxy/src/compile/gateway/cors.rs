//! HTTPRoute's CORS filter (standard since Gateway API v1.4), compiled to
//! the traffic policy's [`Cors`] with the Gateway API's semantics
//! ([`Cors::gateway`]; answered by crate::plane::traffic::cors). A rule's
//! filter covers every backend of the rule; a backendRef's own covers
//! that backend, replacing the rule's.

use teapot_gateway_api::generated::http_routes::HttpRouteRulesFiltersCors;

use teapot_h1::scan::is_tchar;

use crate::compile::traffic::{Cors, OriginPattern, without_default_port};

/// The specification's default `Access-Control-Max-Age`.
const DEFAULT_MAX_AGE: i32 = 5;

/// The filter as teapot answers it; the error names the field.
pub fn cors(filter: &HttpRouteRulesFiltersCors) -> Result<Cors, String> {
    let origins = filter.allow_origins.as_deref().unwrap_or_default();
    let origins = if origins.iter().any(|o| o == "*") {
        None
    } else {
        let patterns = origins
            .iter()
            .enumerate()
            .map(|(i, o)| {
                origin(o).ok_or_else(|| {
                    format!(
                        "cors.allowOrigins[{i}] {o:?} is not \"*\" nor an origin scheme://host[:port] (the host may start with \"*\")"
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Some(patterns)
    };
    let list = |field: &str, names: Option<&Vec<String>>| -> Result<String, String> {
        let names = names.map(Vec::as_slice).unwrap_or_default();
        if names.iter().any(|n| n == "*") {
            return Ok("*".into());
        }
        for (i, n) in names.iter().enumerate() {
            if n.is_empty() || !n.bytes().all(is_tchar) {
                return Err(format!("cors.{field}[{i}] {n:?} is not an HTTP token"));
            }
        }
        Ok(names.join(", "))
    };
    let expose = list("exposeHeaders", filter.expose_headers.as_ref())?;
    let max_age = filter.max_age.unwrap_or(DEFAULT_MAX_AGE);
    if max_age < 0 {
        return Err(format!("cors.maxAge {max_age} is negative"));
    }
    Ok(Cors {
        // An empty list allows no origin: a filter that names none
        // shares nothing.
        origins,
        methods: list("allowMethods", filter.allow_methods.as_ref())?,
        headers: list("allowHeaders", filter.allow_headers.as_ref())?,
        expose: (!expose.is_empty()).then_some(expose),
        credentials: filter.allow_credentials.unwrap_or(false),
        max_age: max_age.to_string(),
        gateway: true,
    })
}

/// `scheme://host[:port]`, the host possibly `*` or starting with `*`
/// (greedy to the left: any number of labels), as the filter allows.
fn origin(written: &str) -> Option<OriginPattern> {
    let lower = written.to_ascii_lowercase();
    if !teapot_api::annotations::gateway_origin_ok(&lower) {
        return None;
    }
    let (scheme, rest) = lower.split_once("://")?;
    let (wildcard, text) = match rest.strip_prefix('*') {
        // The default port is matched written or not.
        Some(suffix) => (
            true,
            without_default_port(&format!("{scheme}://x{suffix}"))[scheme.len() + 4..].to_string(),
        ),
        None => (false, without_default_port(&lower).to_string()),
    };
    Some(OriginPattern {
        text,
        scheme: scheme.to_string(),
        wildcard,
        any_labels: true,
    })
}
