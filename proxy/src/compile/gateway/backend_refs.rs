//! A route's references to Services (backendRefs, mirrors, an
//! ExternalAuth filter's backend) checked as the specification asks and
//! resolved to upstreams.

use std::sync::Arc;

use teapot_model::attachment;
use teapot_model::store::{NsRef, Store};

use super::backend_tls;
use super::inputs::{BackendIn, RouteIn};
use super::table::RouteInfo;
use crate::compile::backends::Resolver;
use crate::compile::routes::Route;

/// The store's own strings for a Service's namespace and name (the
/// resolver's cache keys borrow from the store).
pub(super) fn service_key<'s>(
    store: &'s Store,
    ns: &str,
    name: &str,
) -> Option<(&'s str, &'s str)> {
    store
        .services
        .get_key_value(&NsRef {
            namespace: ns,
            name,
        })
        .map(|(k, _)| (k.namespace.as_str(), k.name.as_str()))
}

/// A Service reference of `route` (a backendRef's, an ExternalAuth
/// filter's: `what` in the messages) checked as the specification asks:
/// a core Service, in the route's namespace or one whose ReferenceGrant
/// lets it in, with a port. The port, or the ResolvedRefs reason.
pub(super) fn service_reference(
    store: &Store,
    route: &RouteIn<'_>,
    (group, kind, ns, name, port): (Option<&str>, Option<&str>, &str, &str, Option<i32>),
    what: &str,
) -> Result<i32, (&'static str, String)> {
    let group = group.unwrap_or("");
    let kind = kind.unwrap_or("Service");
    if !group.is_empty() || kind != "Service" {
        return Err((
            "InvalidKind",
            format!("{what} {name} is a {group}/{kind}, not a Service"),
        ));
    }
    if ns != route.id.namespace
        && !attachment::granted(store, route.kind, &route.id.namespace, "Service", ns, name)
    {
        return Err((
            "RefNotPermitted",
            format!(
                "no ReferenceGrant in {ns} lets {} use Service {ns}/{name}",
                route.kind
            ),
        ));
    }
    port.ok_or_else(|| ("UnsupportedValue", format!("{what} {name} has no port")))
}

/// A backendRef's route and whether its Service port says `appProtocol:
/// kubernetes.io/h2c`, or the ResolvedRefs reason it does not resolve.
pub(super) fn backend<'s>(
    store: &'s Store,
    resolver: &mut Resolver<'s>,
    route: &RouteIn<'s>,
    b: &BackendIn<'s>,
    info: &Arc<RouteInfo>,
) -> Result<(Route, bool), (&'static str, String)> {
    let ns: &'s str = b.namespace.unwrap_or(&route.id.namespace);
    let reference = (b.group, b.kind, ns, b.name, b.port);
    let port = service_reference(store, route, reference, "backendRef")?;
    let Some(service) = store.services.get(&NsRef {
        namespace: ns,
        name: b.name,
    }) else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} not found", b.name),
        ));
    };
    let service_port = service
        .object
        .spec
        .as_ref()
        .and_then(|s| s.ports.as_ref())
        .and_then(|ports| ports.iter().find(|p| p.port == port));
    let Some(service_port) = service_port else {
        return Err((
            "BackendNotFound",
            format!("Service {ns}/{} has no port {port}", b.name),
        ));
    };
    let h2c = service_port.app_protocol.as_deref() == Some("kubernetes.io/h2c");
    let upstream = resolver.service(ns, b.name, port);
    let upstream = backend_tls::secured(
        store,
        resolver,
        (route.grpc, &route.client_cert),
        (ns, b.name, service_port),
        upstream,
    );
    Ok((
        Route::new(upstream, info.policy.clone(), info.name.clone()),
        h2c,
    ))
}
