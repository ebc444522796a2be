//! ListenerSet rules: what a tenant may write of a ListenerSet
//! (`gateway.networking.k8s.io/v1`), the listeners it adds to a Gateway.
//!
//! Its listeners are a tenant Gateway's listeners (the same checks,
//! [`super::gateway::check_listeners`]), HTTP and HTTPS only: a Gateway's
//! own TCP, UDP and TLS listeners are the L4 plane's, counted against the
//! tenant's `l4.maxListeners`, and a ListenerSet adds none. Its parentRef
//! may name a Gateway of another namespace, which is the point of the
//! kind (the operator's shared Gateway); whether it attaches is that
//! Gateway's `allowedListeners`, decided by the compile, never by the
//! tenant. A tenant holds at most [`MAX_LISTENER_SETS`] of them.

use teapot_gateway_api::ListenerSet;
use teapot_gateway_api::generated::gateways::GatewayListeners;

use super::gateway::{GATEWAY_GROUP, check_listeners, gateway_api_object};
use super::names::{dns_label, dns_subdomain};
use super::{AdmissionContext, Violation, quote};
use crate::annotations::ObjectKind;
use crate::listener::ListenerProtocol;

/// Most ListenerSets in one tenant namespace. Each adds up to a Gateway's
/// 64 listeners to a shared Gateway's listener table, which every
/// compile walks for every route.
pub const MAX_LISTENER_SETS: u32 = 16;

/// A ListenerSet's listeners as a Gateway's: the two kinds share the
/// listener schema (`ListenerEntry` is `Listener`), so the admission
/// rules, the compile's listener table and its attach walk read one type.
/// A listener the Gateway's type cannot hold (none the schema admits) is
/// left out.
pub fn listener_set_listeners(set: &ListenerSet) -> Vec<GatewayListeners> {
    set.spec
        .listeners
        .iter()
        .filter_map(|l| serde_json::to_value(l).ok())
        .filter_map(|v| serde_json::from_value(v).ok())
        .collect()
}

/// Checks a ListenerSet a tenant writes into `namespace`: the count per
/// namespace, its parentRef (a Gateway, any namespace), and its
/// listeners under a tenant Gateway's rules, HTTP and HTTPS only.
pub fn check_listener_set(
    ctx: &AdmissionContext<'_>,
    namespace: &str,
    set: &ListenerSet,
) -> Vec<Violation> {
    let mut out = gateway_api_object(ctx, namespace, &set.metadata, ObjectKind::ListenerSet);
    out.extend(ctx.over_limit(
        |e| e.listener_sets,
        MAX_LISTENER_SETS,
        "ListenerSets",
        "at most 16 per tenant",
    ));
    let p = &set.spec.parent_ref;
    let group = p.group.as_deref().unwrap_or(GATEWAY_GROUP);
    let kind = p.kind.as_deref().unwrap_or("Gateway");
    if group != GATEWAY_GROUP || kind != "Gateway" {
        out.push(Violation::new(
            "spec.parentRef",
            format!(
                "{} {} is not a Gateway: a ListenerSet adds listeners to a Gateway",
                quote(group),
                quote(kind)
            ),
        ));
    }
    if let Err(e) = dns_subdomain(&p.name) {
        out.push(Violation::new(
            "spec.parentRef.name",
            format!("must name a Gateway: {e}"),
        ));
    }
    if let Some(ns) = &p.namespace
        && let Err(e) = dns_label(ns)
    {
        out.push(Violation::new(
            "spec.parentRef.namespace",
            format!("must be a namespace: {e}"),
        ));
    }
    let listeners = listener_set_listeners(set);
    if listeners.len() != set.spec.listeners.len() {
        out.push(Violation::new(
            "spec.listeners",
            "a listener cannot be read as a Gateway listener",
        ));
    }
    if listeners.is_empty() {
        out.push(Violation::new(
            "spec.listeners",
            "a ListenerSet needs at least one listener",
        ));
    }
    let own = ctx.tenant.namespace_name();
    check_listeners(ctx, &listeners, &own, &mut out);
    for (i, l) in listeners.iter().enumerate() {
        if ListenerProtocol::of(&l.protocol).is_some_and(ListenerProtocol::is_l4) {
            out.push(Violation::new(
                format!("spec.listeners[{i}].protocol"),
                format!(
                    "a ListenerSet's listeners are HTTP or HTTPS; {} listeners go on a Gateway of your namespace",
                    l.protocol
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::super::{ExistingObjects, check_object};
    use super::*;

    fn set(listeners: &str, parent: &str) -> serde_json::Value {
        let yaml = format!(
            "apiVersion: gateway.networking.k8s.io/v1\nkind: ListenerSet\nmetadata: {{name: shop, namespace: {NS}}}\nspec:\n  parentRef: {parent}\n  listeners: {listeners}\n"
        );
        serde_yaml::from_str(&yaml).unwrap()
    }

    fn fields_of(v: &[Violation]) -> Vec<&str> {
        v.iter().map(|v| v.field.as_str()).collect()
    }

    const PARENT: &str = "{name: shared, namespace: edge}";

    /// The point of the kind: a tenant's listeners on the operator's
    /// Gateway of another namespace, with a hostname of its own.
    #[test]
    fn a_listener_set_on_a_gateway_of_another_namespace_is_admitted() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = set(
            "[{name: web, protocol: HTTPS, port: 443, hostname: shop.acme.lb.example.net, tls: {certificateRefs: [{name: shop-tls}]}}]",
            PARENT,
        );
        let c = check_object(&ctx, NS, &v);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
        assert!(c.object.is_some());
    }

    /// Its listeners are held to a tenant Gateway's rules: ports, TLS from
    /// the own namespace, hostnames under the host rules, routes from the
    /// own namespace; and HTTP or HTTPS only.
    #[test]
    fn listeners_follow_the_gateway_rules_and_are_http_only() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = set(
            "[{name: a, protocol: HTTP, port: 8080},
              {name: b, protocol: HTTPS, port: 443, tls: {certificateRefs: [{name: c, namespace: other}]}},
              {name: c, protocol: HTTP, port: 80, hostname: www.globex.lb.example.net},
              {name: d, protocol: HTTP, port: 80, allowedRoutes: {namespaces: {from: All}}},
              {name: e, protocol: TCP, port: 5432}]",
            PARENT,
        );
        let c = check_object(&ctx, NS, &v);
        let fields = fields_of(&c.violations);
        for want in [
            "spec.listeners[0].port",
            "spec.listeners[1].tls.certificateRefs[0].namespace",
            // A host under another tenant's zone.
            "spec.listeners[2].hostname",
            "spec.listeners[3].allowedRoutes.namespaces.from",
            "spec.listeners[4].protocol",
        ] {
            assert!(fields.contains(&want), "{want} not in {fields:?}");
        }
    }

    /// A set's TLS listener is refused for its protocol only: the L4
    /// plane serves a Gateway's own TLS listeners, not a set's; its mode
    /// Terminate and its certificates of the namespace are a Gateway
    /// listener's and not what is refused. A set's HTTPS certificate of
    /// another namespace is refused with the field named.
    #[test]
    fn a_tls_listener_is_refused_for_its_protocol_not_its_mode() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = set(
            "[{name: t, protocol: TLS, port: 9443, tls: {mode: Terminate, certificateRefs: [{name: db-tls}]}},
              {name: w, protocol: HTTPS, port: 443, tls: {certificateRefs: [{name: db-tls, namespace: tenant-globex}]}}]",
            PARENT,
        );
        let c = check_object(&ctx, NS, &v);
        assert_eq!(
            fields_of(&c.violations),
            [
                "spec.listeners[1].tls.certificateRefs[0].namespace",
                "spec.listeners[0].protocol"
            ],
            "{:?}",
            c.violations
        );
        assert!(
            c.violations[1]
                .message
                .contains("TLS listeners go on a Gateway")
        );
    }

    #[test]
    fn the_parent_is_a_gateway_and_there_is_a_listener() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let v = set(
            "[]",
            "{group: gateway.networking.k8s.io, kind: ListenerSet, name: other}",
        );
        let c = check_object(&ctx, NS, &v);
        assert_eq!(
            fields_of(&c.violations),
            ["spec.parentRef", "spec.listeners"],
            "{:?}",
            c.violations
        );
    }

    /// Listeners per ListenerSet: a Gateway's cap.
    #[test]
    fn listeners_per_set_are_bounded_like_a_gateways() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let many: Vec<String> = (0..65)
            .map(|i| format!("{{name: l{i}, protocol: HTTP, port: 80}}"))
            .collect();
        let v = set(&format!("[{}]", many.join(",")), PARENT);
        let c = check_object(&ctx, NS, &v);
        assert!(
            c.violations
                .iter()
                .any(|v| v.field == "spec.listeners" && v.message.contains("65 listeners")),
            "{:?}",
            c.violations
        );
    }

    /// ListenerSets per namespace: a new one past the bound is refused, an
    /// update of one there is not.
    #[test]
    fn listener_sets_per_namespace_are_bounded() {
        let f = Fixture::new();
        let v = set("[{name: web, protocol: HTTP, port: 80}]", PARENT);
        let full = ExistingObjects {
            is_new: true,
            listener_sets: MAX_LISTENER_SETS,
            ..ExistingObjects::default()
        };
        let c = check_object(&f.ctx().with_existing(full), NS, &v);
        assert_eq!(fields_of(&c.violations), ["(object)"], "{:?}", c.violations);
        assert!(c.violations[0].message.contains("ListenerSets"));
        let update = ExistingObjects {
            is_new: false,
            ..full
        };
        let c = check_object(&f.ctx().with_existing(update), NS, &v);
        assert!(c.violations.is_empty(), "{:?}", c.violations);
    }

    /// A tenant Gateway takes ListenerSets of its own namespace at most.
    #[test]
    fn a_tenant_gateway_allows_listener_sets_of_its_namespace_at_most() {
        let f = Fixture::new();
        let ctx = f.ctx();
        let gateway = |from: &str| -> serde_json::Value {
            serde_yaml::from_str(&format!(
                "apiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\nmetadata: {{name: g, namespace: {NS}}}\nspec:\n  gatewayClassName: teapot\n  allowedListeners: {{namespaces: {{from: {from}}}}}\n  listeners: [{{name: web, protocol: HTTP, port: 80}}]\n"
            ))
            .unwrap()
        };
        for ok in ["None", "Same"] {
            let c = check_object(&ctx, NS, &gateway(ok));
            assert!(c.violations.is_empty(), "{ok}: {:?}", c.violations);
        }
        for refused in ["All", "Selector"] {
            let c = check_object(&ctx, NS, &gateway(refused));
            assert_eq!(
                fields_of(&c.violations),
                ["spec.allowedListeners.namespaces.from"],
                "{refused}"
            );
        }
    }
}
