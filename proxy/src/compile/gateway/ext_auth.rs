//! The ExternalAuth filter (HTTPRoute, experimental channel), protocol
//! HTTP: compiled to the external authentication `auth-url` uses
//! ([`ExternalAuth`], asked by crate::plane::traffic::auth within the
//! tenant's concurrency bound and the operator's timeout), on the
//! filter's own terms ([`GatewayAuthTerms`]): the client's method and path
//! under `http.path`, `Host`, `Authorization` and the `allowedHeaders`;
//! a 200 passes with the `allowedResponseHeaders` (every field of the
//! answer when none are listed), anything else is relayed to the client.
//!
//! The authentication service is a Service reached as a backendRef is
//! (another namespace's only with a ReferenceGrant); one that does not
//! resolve fails closed (500, as the filter asks) and is reported in the
//! route's ResolvedRefs. Not served, refused here and by the webhook:
//! protocol GRPC (Envoy's ext_authz) and `forwardBody` with a `maxSize`
//! (the request body is never buffered for the sub-request).

use std::sync::Arc;

use teapot_gateway_api::generated::http_routes::{
    HttpRouteRulesFiltersExternalAuth, HttpRouteRulesFiltersExternalAuthProtocol,
};
use teapot_model::store::{NsRef, Store};

use super::backend_refs::{service_key, service_reference};
use super::inputs::RouteIn;
use crate::compile::backends::Resolver;
use crate::compile::traffic::{ExternalAuth, GatewayAuthTerms};
use crate::compile::upstream::Upstream;
use crate::live::fairness::TenantGates;

/// The filter's terms, or why it is not served (the rule is then not
/// served either: a filter is never skipped).
pub(super) fn terms(f: &HttpRouteRulesFiltersExternalAuth) -> Result<GatewayAuthTerms, String> {
    if matches!(f.protocol, HttpRouteRulesFiltersExternalAuthProtocol::Grpc) {
        return Err(
            "ExternalAuth externalAuth.protocol GRPC is not served: teapot asks an HTTP authentication service (protocol HTTP)"
                .into(),
        );
    }
    if f.forward_body
        .as_ref()
        .and_then(|b| b.max_size)
        .is_some_and(|n| n > 0)
    {
        return Err(
            "ExternalAuth externalAuth.forwardBody.maxSize is not served: the request body is not sent to the authentication service (leave it unset or 0)"
                .into(),
        );
    }
    let http = f.http.as_ref();
    let names = |list: Option<&Vec<String>>,
                 field: &str|
     -> Result<Vec<http::HeaderName>, String> {
        list.into_iter()
            .flatten()
            .map(|n| {
                http::HeaderName::from_bytes(n.to_ascii_lowercase().as_bytes()).map_err(|_| {
                    format!("ExternalAuth externalAuth.http.{field}: {n:?} is not a header name")
                })
            })
            .collect()
    };
    let request_headers = names(
        http.and_then(|h| h.allowed_headers.as_ref()),
        "allowedHeaders",
    )?;
    let response_headers = names(
        http.and_then(|h| h.allowed_response_headers.as_ref()),
        "allowedResponseHeaders",
    )?;
    let prefix = http.and_then(|h| h.path.as_deref()).unwrap_or("");
    if !prefix.is_empty() && (!prefix.starts_with('/') || prefix.contains(['?', '#'])) {
        return Err(format!(
            "ExternalAuth externalAuth.http.path {prefix:?} is not an absolute path"
        ));
    }
    Ok(GatewayAuthTerms {
        // The client's path starts with `/`: one separator between them.
        path_prefix: Arc::from(prefix.trim_end_matches('/')),
        request_headers,
        response_headers,
    })
}

/// Where the filter's sub-requests go: the Service its backendRef names,
/// counted against `owner`'s authentication bound (a tenant cluster, or
/// "" for the operator namespaces); with the ResolvedRefs reason when it
/// does not resolve (every request then fails closed).
pub(super) fn external_auth<'s>(
    store: &'s Store,
    resolver: &mut Resolver<'s>,
    route: &RouteIn<'s>,
    f: &HttpRouteRulesFiltersExternalAuth,
    (gates, owner): (&TenantGates, &str),
) -> (ExternalAuth, Option<(&'static str, String)>) {
    let b = &f.backend_ref;
    let ns = b.namespace.as_deref().unwrap_or(&route.id.namespace);
    let (upstream, problem) = match resolve(store, route, f, ns) {
        Ok(((ns, name), port)) => (resolver.service(ns, name, port), None),
        Err(problem) => {
            let upstream = Upstream::new(
                format!("ExternalAuth {ns}/{}", b.name),
                Vec::new(),
                Some(problem.1.clone()),
            );
            (Arc::new(upstream), Some(problem))
        }
    };
    let auth = ExternalAuth {
        upstream,
        authority: Arc::from(format!("{}.{ns}", b.name)),
        gate: gates.rate_tables.auth_gate(owner),
        owner: Arc::from(owner),
        refused: None,
        ..ExternalAuth::refused(String::new())
    };
    (auth, problem)
}

/// A Service port: the store's own namespace and name, and the port.
type ServicePort<'s> = ((&'s str, &'s str), i32);

/// The backendRef's Service and port, as a route's backendRef resolves.
fn resolve<'s>(
    store: &'s Store,
    route: &RouteIn<'s>,
    f: &HttpRouteRulesFiltersExternalAuth,
    ns: &str,
) -> Result<ServicePort<'s>, (&'static str, String)> {
    let b = &f.backend_ref;
    let reference = (
        b.group.as_deref(),
        b.kind.as_deref(),
        ns,
        b.name.as_str(),
        b.port,
    );
    let port = service_reference(store, route, reference, "ExternalAuth backendRef")?;
    let service = store.services.get(&NsRef {
        namespace: ns,
        name: &b.name,
    });
    let has_port = service
        .and_then(|s| s.object.spec.as_ref())
        .and_then(|s| s.ports.as_ref())
        .is_some_and(|ports| ports.iter().any(|p| p.port == port));
    match service_key(store, ns, &b.name) {
        Some(key) if has_port => Ok((key, port)),
        _ => Err((
            "BackendNotFound",
            format!(
                "ExternalAuth Service {ns}/{} with port {port} not found",
                b.name
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(yaml: &str) -> Result<GatewayAuthTerms, String> {
        let f: HttpRouteRulesFiltersExternalAuth = serde_yaml::from_str(yaml).unwrap();
        terms(&f)
    }

    #[test]
    fn http_terms_are_read() {
        let t = read(
            "{protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {path: /check/, allowedHeaders: [X-Tenant], allowedResponseHeaders: [X-User]}}",
        )
        .unwrap();
        assert_eq!(&*t.path_prefix, "/check");
        assert_eq!(
            t.request_headers,
            vec![http::HeaderName::from_static("x-tenant")]
        );
        assert_eq!(
            t.response_headers,
            vec![http::HeaderName::from_static("x-user")]
        );
        let bare = read("{protocol: HTTP, backendRef: {name: auth, port: 8080}}").unwrap();
        assert_eq!(bare, GatewayAuthTerms::default());
    }

    #[test]
    fn grpc_and_a_forwarded_body_are_named_and_not_served() {
        let grpc = read("{protocol: GRPC, backendRef: {name: auth, port: 9000}}").unwrap_err();
        assert!(grpc.contains("externalAuth.protocol GRPC"), "{grpc}");
        let body = read(
            "{protocol: HTTP, backendRef: {name: auth, port: 8080}, forwardBody: {maxSize: 1024}}",
        )
        .unwrap_err();
        assert!(body.contains("externalAuth.forwardBody.maxSize"), "{body}");
        // maxSize 0 forwards no body: served.
        read("{protocol: HTTP, backendRef: {name: auth, port: 8080}, forwardBody: {maxSize: 0}}")
            .unwrap();
        let name = read(
            "{protocol: HTTP, backendRef: {name: auth, port: 8080}, http: {allowedHeaders: [\"a b\"]}}",
        )
        .unwrap_err();
        assert!(name.contains("externalAuth.http.allowedHeaders"), "{name}");
    }
}
