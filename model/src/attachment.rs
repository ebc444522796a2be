//! Gateway API attachment rules, written once: which routes a listener
//! takes (kinds, namespaces), which cross-namespace references a
//! ReferenceGrant permits, and which hostnames a route serves on a
//! listener. The HTTP compile, the L4 compile and the agent all judge by
//! these, so a Gateway reads the same whichever plane serves it and
//! whichever cluster looks at it.

use teapot_api::HostPattern;
use teapot_gateway_api::generated::gateways::{
    GatewayListeners, GatewayListenersAllowedRoutesNamespacesFrom,
    GatewayListenersAllowedRoutesNamespacesSelector,
};
use teapot_gateway_api::generated::reference_grants::ReferenceGrantSpec;

/// The API group of every Gateway API kind.
pub use teapot_gateway_api::GROUP;

use crate::store::{NsName, Store};

/// A listener's protocol, classified once (`teapot_api::listener`).
pub use teapot_api::listener::ListenerProtocol;

/// The route kinds a listener of `protocol` can take; a protocol teapot
/// does not serve is judged as HTTP's (its listener is refused anyway).
pub fn protocol_kinds(protocol: &str) -> &'static [&'static str] {
    ListenerProtocol::of(protocol).map_or(ListenerProtocol::Http.kinds(), ListenerProtocol::kinds)
}

/// What a listener's `allowedRoutes.kinds` comes to.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RouteKinds {
    /// The kinds it takes.
    pub admitted: Vec<&'static str>,
    /// Kinds it names that its protocol cannot take (the listener's
    /// `ResolvedRefs` is `InvalidRouteKinds`).
    pub invalid: Vec<String>,
}

/// The route kinds `listener` takes. Unset or empty `allowedRoutes.kinds`
/// means its protocol's kinds (the specification: "when unspecified or
/// empty, the kinds of Routes selected are determined using the Listener
/// protocol"); a listed kind of another group or another protocol is
/// invalid, not admitted.
pub fn route_kinds(listener: &GatewayListeners) -> RouteKinds {
    let defaults = protocol_kinds(&listener.protocol);
    let listed = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.kinds.as_ref())
        .filter(|k| !k.is_empty());
    let Some(listed) = listed else {
        return RouteKinds {
            admitted: defaults.to_vec(),
            invalid: Vec::new(),
        };
    };
    let mut kinds = RouteKinds::default();
    for k in listed {
        let group_ok = k.group.as_deref().unwrap_or(GROUP) == GROUP;
        match defaults.iter().find(|d| **d == k.kind) {
            Some(d) if group_ok => {
                if !kinds.admitted.contains(d) {
                    kinds.admitted.push(d);
                }
            }
            _ => kinds.invalid.push(k.kind.clone()),
        }
    }
    kinds
}

/// Whether `listener` of a Gateway in `gateway_ns` takes routes from
/// `route_ns`: `allowedRoutes.namespaces.from` Same (the default), All,
/// or Selector, judged by `selected` (the compile reads Namespace labels;
/// the agent, which does not, answers no).
pub fn namespace_admitted(
    listener: &GatewayListeners,
    gateway_ns: &str,
    route_ns: &str,
    selected: impl FnOnce(&GatewayListenersAllowedRoutesNamespacesSelector) -> bool,
) -> bool {
    let namespaces = listener
        .allowed_routes
        .as_ref()
        .and_then(|a| a.namespaces.as_ref());
    match namespaces.and_then(|n| n.from.as_ref()) {
        None | Some(GatewayListenersAllowedRoutesNamespacesFrom::Same) => gateway_ns == route_ns,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::All) => true,
        Some(GatewayListenersAllowedRoutesNamespacesFrom::Selector) => namespaces
            .and_then(|n| n.selector.as_ref())
            .is_some_and(selected),
    }
}

/// Whether `listener` takes a route of `kind` from `route_ns`: both rules
/// above.
pub fn admits(
    listener: &GatewayListeners,
    gateway_ns: &str,
    route_ns: &str,
    kind: &str,
    selected: impl FnOnce(&GatewayListenersAllowedRoutesNamespacesSelector) -> bool,
) -> bool {
    route_kinds(listener).admitted.contains(&kind)
        && namespace_admitted(listener, gateway_ns, route_ns, selected)
}

/// Whether a ReferenceGrant (in the target's namespace) lets `from_kind`
/// objects of `from_ns` refer to the core `to_kind` (`Service`, `Secret`)
/// named `name`: a `from` entry of the referring kind and namespace, and
/// a `to` entry of the target kind whose name is unset (or empty) or the
/// target's.
pub fn grant_permits(
    grant: &ReferenceGrantSpec,
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    name: &str,
) -> bool {
    grant
        .from
        .iter()
        .any(|f| f.group == GROUP && f.kind == from_kind && f.namespace == from_ns)
        && grant.to.iter().any(|t| {
            t.group.is_empty()
                && t.kind == to_kind
                && t.name.as_deref().is_none_or(|n| n.is_empty() || n == name)
        })
}

/// Whether a ReferenceGrant of `store` in `to_ns` lets `from_kind`
/// objects of `from_ns` refer to the core `to_kind` named `name` there
/// ([`grant_permits`] over the grants of that namespace): the one reading
/// of the grants the HTTP and L4 compiles share.
pub fn granted(
    store: &Store,
    from_kind: &str,
    from_ns: &str,
    to_kind: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    store
        .reference_grants
        .range(NsName::new(to_ns, "")..)
        .take_while(|(id, _)| id.namespace == to_ns)
        .any(|(_, g)| grant_permits(&g.object.spec, from_kind, from_ns, to_kind, name))
}

/// Whether `name` lies strictly below `suffix` (at any depth).
fn below(name: &str, suffix: &str) -> bool {
    name.len() > suffix.len() + 1
        && name.ends_with(suffix)
        && name.as_bytes()[name.len() - suffix.len() - 1] == b'.'
}

/// The hostname a request must carry to match both a listener's hostname
/// and a route's: the more specific of the two when one covers the other,
/// else none (`None`). `None` for either side means any host. A Gateway
/// API wildcard matches any number of labels below its suffix
/// (`*.example.com` matches `a.b.example.com`, not `example.com`), unlike
/// an Ingress wildcard. The intersection is always one of the two, so it
/// is returned by reference.
pub fn intersect<'h>(
    listener: Option<&'h HostPattern>,
    route: Option<&'h HostPattern>,
) -> Option<Option<&'h HostPattern>> {
    use HostPattern::{Exact, Wildcard};
    match (listener, route) {
        (None, r) => Some(r),
        (l, None) => Some(l),
        (Some(Exact(l)), Some(r @ Exact(e))) => (l == e).then_some(Some(r)),
        (Some(Wildcard(s)), Some(e @ Exact(r))) | (Some(e @ Exact(r)), Some(Wildcard(s))) => {
            below(r, s).then_some(Some(e))
        }
        (Some(lw @ Wildcard(l)), Some(rw @ Wildcard(r))) => {
            if l == r || below(r, l) {
                Some(Some(rw))
            } else if below(l, r) {
                Some(Some(lw))
            } else {
                None
            }
        }
    }
}

/// The hostnames a route with `route` hostnames serves on a listener with
/// `listener`'s: each intersecting pair's intersection (a route without
/// hostnames takes the listener's). Empty: the route serves nothing
/// there. `None` in the result means any hostname.
pub fn served_hostnames<'h>(
    listener: Option<&'h HostPattern>,
    route: &'h [HostPattern],
) -> Vec<Option<&'h HostPattern>> {
    if route.is_empty() {
        return vec![listener];
    }
    let mut served: Vec<Option<&HostPattern>> = Vec::with_capacity(route.len());
    for h in route.iter().filter_map(|r| intersect(listener, Some(r))) {
        if !served.contains(&h) {
            served.push(h);
        }
    }
    served
}

#[cfg(test)]
mod tests {
    use super::*;
    use teapot_gateway_api::generated::reference_grants::{ReferenceGrantFrom, ReferenceGrantTo};

    fn h(s: &str) -> HostPattern {
        HostPattern::parse(s).unwrap()
    }

    fn i(l: Option<&str>, r: Option<&str>) -> Option<Option<String>> {
        let (l, r) = (l.map(h), r.map(h));
        intersect(l.as_ref(), r.as_ref()).map(|o| o.map(|p| p.to_string()))
    }

    #[test]
    fn intersections_follow_the_specification() {
        let some = |s: &str| Some(Some(s.to_string()));
        assert_eq!(i(None, None), Some(None));
        assert_eq!(i(None, Some("a.com")), some("a.com"));
        assert_eq!(i(Some("*.com"), None), some("*.com"));
        assert_eq!(i(Some("a.com"), Some("a.com")), some("a.com"));
        assert_eq!(i(Some("a.com"), Some("b.com")), None);
        assert_eq!(
            i(Some("*.example.com"), Some("a.b.example.com")),
            some("a.b.example.com")
        );
        assert_eq!(i(Some("*.example.com"), Some("example.com")), None);
        assert_eq!(
            i(Some("very.specific.com"), Some("*.specific.com")),
            some("very.specific.com")
        );
        assert_eq!(
            i(Some("*.com"), Some("*.example.com")),
            some("*.example.com")
        );
        assert_eq!(
            i(Some("*.example.com"), Some("*.com")),
            some("*.example.com")
        );
        assert_eq!(i(Some("*.example.com"), Some("*.example.org")), None);
    }

    #[test]
    fn a_route_serves_the_intersections_or_the_listeners_hostname() {
        let names = |l: Option<&str>, r: &[&str]| {
            let l = l.map(h);
            let r: Vec<HostPattern> = r.iter().map(|s| h(s)).collect();
            served_hostnames(l.as_ref(), &r)
                .into_iter()
                .map(|o| o.map(|p| p.to_string()))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            names(Some("*.example.com"), &[]),
            [Some("*.example.com".into())]
        );
        assert_eq!(names(None, &[]), [None]);
        assert_eq!(
            names(Some("*.example.com"), &["db.example.com", "db.example.org"]),
            [Some("db.example.com".into())]
        );
        assert_eq!(
            names(Some("db.example.com"), &["*.example.com"]),
            [Some("db.example.com".into())]
        );
        assert!(names(Some("example.com"), &["*.example.com"]).is_empty());
        assert_eq!(
            names(Some("a.example.com"), &["*.example.com", "a.example.com"]),
            [Some("a.example.com".into())],
            "each hostname once"
        );
    }

    fn listener(protocol: &str, kinds: Option<&[(&str, Option<&str>)]>) -> GatewayListeners {
        let mut l = serde_json::json!({"name": "l", "port": 80, "protocol": protocol});
        if let Some(kinds) = kinds {
            let kinds: Vec<serde_json::Value> = kinds
                .iter()
                .map(|(kind, group)| match group {
                    Some(g) => serde_json::json!({"kind": kind, "group": g}),
                    None => serde_json::json!({"kind": kind}),
                })
                .collect();
            l["allowedRoutes"] = serde_json::json!({ "kinds": kinds });
        }
        serde_json::from_value(l).unwrap()
    }

    #[test]
    fn unset_or_empty_kinds_are_the_protocols_and_others_are_invalid() {
        for protocol in ["HTTP", "HTTPS", "TLS", "TCP", "UDP"] {
            let defaults = protocol_kinds(protocol).to_vec();
            assert_eq!(route_kinds(&listener(protocol, None)).admitted, defaults);
            assert_eq!(
                route_kinds(&listener(protocol, Some(&[]))),
                RouteKinds {
                    admitted: defaults,
                    invalid: vec![]
                },
                "{protocol}: kinds: [] is the protocol's kinds"
            );
        }
        assert_eq!(
            route_kinds(&listener(
                "HTTP",
                Some(&[
                    ("GRPCRoute", None),
                    ("TCPRoute", None),
                    ("HTTPRoute", Some("example.com")),
                    ("GRPCRoute", Some(GROUP)),
                ])
            )),
            RouteKinds {
                admitted: vec!["GRPCRoute"],
                invalid: vec!["TCPRoute".into(), "HTTPRoute".into()],
            }
        );
        let tcp = listener("TCP", Some(&[]));
        assert!(admits(&tcp, "a", "a", "TCPRoute", |_| false));
        assert!(!admits(&tcp, "a", "a", "HTTPRoute", |_| false));
    }

    #[test]
    fn namespaces_default_to_the_gateways_own() {
        let mut l = listener("HTTP", None);
        assert!(namespace_admitted(&l, "gw", "gw", |_| false));
        assert!(!namespace_admitted(&l, "gw", "other", |_| true));
        let from = |f: &str| {
            serde_json::from_value(serde_json::json!({
                "namespaces": {"from": f, "selector": {"matchLabels": {"team": "a"}}}
            }))
            .ok()
        };
        l.allowed_routes = from("All");
        assert!(namespace_admitted(&l, "gw", "other", |_| false));
        l.allowed_routes = from("Selector");
        assert!(!namespace_admitted(&l, "gw", "other", |_| false));
        assert!(namespace_admitted(&l, "gw", "other", |_| true));
    }

    #[test]
    fn a_grant_names_the_referrer_and_the_target() {
        let grant = |to_name: Option<&str>| ReferenceGrantSpec {
            from: vec![ReferenceGrantFrom {
                group: GROUP.into(),
                kind: "HTTPRoute".into(),
                namespace: "app".into(),
            }],
            to: vec![ReferenceGrantTo {
                group: String::new(),
                kind: "Service".into(),
                name: to_name.map(String::from),
            }],
        };
        for name in [None, Some(""), Some("web")] {
            assert!(grant_permits(
                &grant(name),
                "HTTPRoute",
                "app",
                "Service",
                "web"
            ));
        }
        assert!(!grant_permits(
            &grant(Some("db")),
            "HTTPRoute",
            "app",
            "Service",
            "web"
        ));
        assert!(!grant_permits(
            &grant(None),
            "TCPRoute",
            "app",
            "Service",
            "web"
        ));
        assert!(!grant_permits(
            &grant(None),
            "HTTPRoute",
            "other",
            "Service",
            "web"
        ));
        assert!(!grant_permits(
            &grant(None),
            "HTTPRoute",
            "app",
            "Secret",
            "web"
        ));
    }
}
