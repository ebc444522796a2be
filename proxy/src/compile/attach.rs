//! The parentRef -> listener walk, once for every route kind (HTTPRoute,
//! GRPCRoute, TCPRoute, UDPRoute, TLSRoute): which listeners of one
//! Gateway a parentRef attaches a route to, or the one reason it attaches
//! to none. The HTTP compile (`compile::gateway`) and the L4 compile
//! (`compile::l4::gateway`) each bind what it returns in their own table;
//! the rules it applies are the Gateway API's (`teapot_model::attachment`)
//! and the tenant rules (`compile::bind`).

use teapot_api::HostPattern;
use teapot_gateway_api::generated::gateways::GatewayListeners;
use teapot_model::attachment;
use teapot_model::store::{NsName, Store};

/// One listener of the Gateway, as the walk reads it.
#[derive(Clone, Copy, Debug)]
pub struct Seat<'h> {
    pub spec: &'h GatewayListeners,
    /// Its hostname (on the HTTP plane, the assigned hostname of a
    /// tenant Gateway's listener without one).
    pub hostname: Option<&'h HostPattern>,
    /// The route kinds it allows (its protocol's, narrowed by
    /// `allowedRoutes.kinds`).
    pub kinds: &'h [&'static str],
    /// Whether its plane serves it (refused and conflicted listeners
    /// take no route).
    pub served: bool,
}

/// The route being attached.
#[derive(Clone, Copy, Debug)]
pub struct RouteFacts<'h> {
    /// `HTTPRoute`, `GRPCRoute`, `TCPRoute`, `UDPRoute` or `TLSRoute`.
    pub kind: &'static str,
    pub namespace: &'h str,
    /// The route belongs to a tenant (it binds its own Gateways only).
    pub tenant: bool,
    /// Its hostnames; `None` for kinds that have none (TCPRoute,
    /// UDPRoute), which take a listener whatever its hostname.
    pub hostnames: Option<&'h [HostPattern]>,
}

/// Why a parentRef attaches to no listener: the route's `Accepted=False`
/// reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub reason: &'static str,
    pub message: String,
}

/// The listeners a parentRef attaches to.
#[derive(Debug, Default)]
pub struct Attached<'h> {
    /// The listener's index in the Gateway's spec and the hostnames the
    /// route serves there (`None`: any; empty for kinds without
    /// hostnames).
    pub listeners: Vec<(usize, Vec<Option<&'h HostPattern>>)>,
    /// Why hostnames were left out by the tenant host rule.
    pub refused_hosts: Vec<String>,
}

/// Attaches a route to the listeners of `gateway` its parentRef names
/// (`section`, `port`). A listener takes the route when it allows the
/// route's kind, its plane serves it, it admits the route's namespace, a
/// tenant route binds its own Gateway, and (for kinds with hostnames) a
/// hostname both share passes `admit_host` (the tenant host rule). When
/// none does, the refusal is the first reason found, in listener order,
/// among the listeners that allow the route's kind; else that no named
/// listener allows the kind.
pub fn attach<'h>(
    store: &Store,
    gateway: &NsName,
    seats: impl IntoIterator<Item = Seat<'h>>,
    route: &RouteFacts<'h>,
    (section, port): (Option<&str>, Option<i32>),
    mut admit_host: impl FnMut(&HostPattern) -> Result<(), String>,
) -> Result<Attached<'h>, Refusal> {
    let mut first: Option<Refusal> = None;
    let mut refuse = |reason: &'static str, message: String| {
        if first.is_none() {
            first = Some(Refusal { reason, message });
        }
    };
    // A listener that allows the kind says more about why the route is
    // not attached than one of another kind (a TLSRoute on a Gateway
    // with TCP and TLS listeners is told the TLS listener's hostnames do
    // not match): its reason is reported first.
    let mut other_kind: Option<Refusal> = None;
    let mut out = Attached::default();
    let mut named = false;
    for (i, seat) in seats.into_iter().enumerate() {
        let name = &seat.spec.name;
        if section.is_some_and(|s| s != name) || port.is_some_and(|p| p != seat.spec.port) {
            continue;
        }
        named = true;
        // The kind first: a listener of another plane (an HTTPRoute
        // aimed at a TCP listener) does not allow the kind, whether or
        // not its own plane serves it.
        if !seat.kinds.contains(&route.kind) {
            if other_kind.is_none() {
                other_kind = Some(Refusal {
                    reason: "NotAllowedByListeners",
                    message: format!("listener {name} does not admit {}", route.kind),
                });
            }
            continue;
        }
        if !seat.served {
            refuse(
                "NotAllowedByListeners",
                format!("listener {name} is not served"),
            );
            continue;
        }
        let admitted =
            attachment::namespace_admitted(seat.spec, &gateway.namespace, route.namespace, |s| {
                teapot_model::gateway::namespace_selected(store, route.namespace, s)
            });
        if !admitted {
            refuse(
                "NotAllowedByListeners",
                format!(
                    "listener {name} does not admit routes from namespace {}",
                    route.namespace
                ),
            );
            continue;
        }
        if let Err(why) = crate::compile::bind::tenant_route_may_bind(
            route.tenant,
            route.namespace,
            &gateway.namespace,
        ) {
            refuse("NotAllowedByListeners", why.into());
            continue;
        }
        let Some(route_hosts) = route.hostnames else {
            out.listeners.push((i, Vec::new()));
            continue;
        };
        let mut hosts = attachment::served_hostnames(seat.hostname, route_hosts);
        if hosts.is_empty() {
            refuse(
                "NoMatchingListenerHostname",
                format!("no hostname of the route matches listener {name}"),
            );
            continue;
        }
        hosts.retain(|h| {
            let Some(h) = h else { return true };
            match admit_host(h) {
                Ok(()) => true,
                Err(why) => {
                    if !out.refused_hosts.contains(&why) {
                        out.refused_hosts.push(why.clone());
                    }
                    refuse("NoMatchingListenerHostname", why);
                    false
                }
            }
        });
        if !hosts.is_empty() {
            out.listeners.push((i, hosts));
        }
    }
    if !out.listeners.is_empty() {
        return Ok(out);
    }
    Err(match first.or(other_kind) {
        Some(refusal) if named => refusal,
        _ => Refusal {
            reason: "NoMatchingParent",
            message: format!(
                "Gateway {gateway} has no listener{}{}",
                section.map(|s| format!(" named {s}")).unwrap_or_default(),
                port.map(|p| format!(" on port {p}")).unwrap_or_default()
            ),
        },
    })
}

/// Whether Gateway `gateway` may use Secret `ns/name` (a listener's
/// certificate, HTTPS or TLS Terminate, the backend client certificate): its own namespace's
/// always; another namespace's only for an operator Gateway, and only
/// with a ReferenceGrant (a tenant Gateway never reaches out of its
/// namespace).
pub(crate) fn gateway_may_use_secret(
    store: &Store,
    gateway: &NsName,
    tenant: bool,
    ns: &str,
    name: &str,
) -> bool {
    ns == gateway.namespace
        || (!tenant
            && attachment::granted(store, "Gateway", &gateway.namespace, "Secret", ns, name))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn listener(name: &str, protocol: &str, port: i32) -> GatewayListeners {
        serde_json::from_value(serde_json::json!({
            "name": name, "protocol": protocol, "port": port,
        }))
        .unwrap()
    }

    fn seat<'h>(spec: &'h GatewayListeners, kinds: &'h [&'static str]) -> Seat<'h> {
        Seat {
            spec,
            hostname: None,
            kinds,
            served: true,
        }
    }

    fn route<'a>(kind: &'static str, hostnames: Option<&'a [HostPattern]>) -> RouteFacts<'a> {
        RouteFacts {
            kind,
            namespace: "ns",
            tenant: false,
            hostnames,
        }
    }

    /// An HTTPRoute aimed at a TCP listener is refused because the
    /// listener does not allow HTTPRoutes, not because it is unserved
    /// (the HTTP plane does not serve TCP listeners, the L4 plane does).
    #[test]
    fn a_route_at_a_listener_of_another_kind_is_not_allowed_there() {
        let store = Store::default();
        let gateway = NsName::new("ns", "g");
        let tcp = listener("db", "TCP", 5432);
        let unserved_tcp = Seat {
            served: false,
            ..seat(&tcp, &["TCPRoute"])
        };
        let refusal = attach(
            &store,
            &gateway,
            [unserved_tcp],
            &route("HTTPRoute", Some(&[])),
            (Some("db"), None),
            |_| Ok(()),
        )
        .unwrap_err();
        assert_eq!(refusal.reason, "NotAllowedByListeners");
        assert_eq!(refusal.message, "listener db does not admit HTTPRoute");
    }

    #[test]
    fn kinds_without_hostnames_take_any_listener_hostname() {
        let store = Store::default();
        let gateway = NsName::new("ns", "g");
        let tcp = listener("db", "TCP", 5432);
        let host = HostPattern::parse("db.example").unwrap();
        let with_host = Seat {
            hostname: Some(&host),
            ..seat(&tcp, &["TCPRoute"])
        };
        let got = attach(
            &store,
            &gateway,
            [with_host],
            &route("TCPRoute", None),
            (None, Some(5432)),
            |_| Ok(()),
        )
        .unwrap();
        assert_eq!(got.listeners, vec![(0, Vec::new())]);
    }

    #[test]
    fn the_first_reason_is_reported_and_no_named_listener_is_no_parent() {
        let store = Store::default();
        let gateway = NsName::new("ns", "g");
        let a = listener("a", "HTTP", 80);
        let b = listener("b", "HTTP", 80);
        let host = HostPattern::parse("a.example").unwrap();
        let route_hosts = [HostPattern::parse("b.example").unwrap()];
        let seats = [
            Seat {
                served: false,
                ..seat(&a, &["HTTPRoute"])
            },
            Seat {
                hostname: Some(&host),
                ..seat(&b, &["HTTPRoute"])
            },
        ];
        let facts = route("HTTPRoute", Some(&route_hosts));
        let refusal =
            attach(&store, &gateway, seats, &facts, (None, None), |_| Ok(())).unwrap_err();
        assert_eq!(refusal.reason, "NotAllowedByListeners");
        let refusal = attach(&store, &gateway, seats, &facts, (Some("b"), None), |_| {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(refusal.reason, "NoMatchingListenerHostname");
        // A listener of another kind named first does not hide the
        // hostname mismatch of the one that allows the kind.
        let tcp = listener("db", "TCP", 5432);
        let mixed = [seat(&tcp, &["TCPRoute"]), seats[1]];
        let refusal =
            attach(&store, &gateway, mixed, &facts, (None, None), |_| Ok(())).unwrap_err();
        assert_eq!(refusal.reason, "NoMatchingListenerHostname");
        let refusal = attach(&store, &gateway, seats, &facts, (Some("c"), None), |_| {
            Ok(())
        })
        .unwrap_err();
        assert_eq!(
            refusal,
            Refusal {
                reason: "NoMatchingParent",
                message: "Gateway ns/g has no listener named c".into()
            }
        );
    }

    #[test]
    fn hostnames_the_tenant_rule_refuses_are_left_out_with_why() {
        let store = Store::default();
        let gateway = NsName::new("ns", "g");
        let l = listener("https", "HTTPS", 443);
        let route_hosts = [
            HostPattern::parse("mine.example").unwrap(),
            HostPattern::parse("theirs.example").unwrap(),
        ];
        let facts = route("TLSRoute", Some(&route_hosts));
        let admit = |h: &HostPattern| match h.to_string().as_str() {
            "mine.example" => Ok(()),
            other => Err(format!("{other} is not yours")),
        };
        let got = attach(
            &store,
            &gateway,
            [seat(&l, &["TLSRoute"])],
            &facts,
            (None, None),
            admit,
        )
        .unwrap();
        assert_eq!(got.listeners, vec![(0, vec![Some(&route_hosts[0])])]);
        assert_eq!(got.refused_hosts, ["theirs.example is not yours"]);
    }
}
