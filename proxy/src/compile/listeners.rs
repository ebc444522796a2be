//! A Gateway's listeners, classified once for both listener planes: which
//! plane serves each (HTTP and HTTPS on the HTTP plane, TCP, UDP and TLS
//! passthrough on the L4 plane), the port rule, the TLS mode, the route
//! kinds it allows and its conflicts with the Gateway's other listeners.
//! The HTTP compile (`compile::gateway`) and the L4 compile
//! (`compile::l4::gateway`) both read [`classify`]'s answer, so a listener
//! rule is written here and nowhere else.

use teapot_api::HostPattern;
use teapot_gateway_api::Gateway;
use teapot_gateway_api::generated::gateways::{
    GatewayListeners, GatewayListenersTlsCertificateRefs, GatewayListenersTlsMode,
};
use teapot_model::attachment::{self, ListenerProtocol, RouteKinds};

/// The plane that serves a listener, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plane {
    /// HTTP: on port 80 of the shared listeners, or on any port of the
    /// Gateway's own address ([`own_address`]).
    Http,
    /// HTTPS, TLS terminated: on 443 of the shared listeners, or on any
    /// port of the Gateway's own address.
    Https,
    Tcp,
    Udp,
    /// TLS on the L4 plane: by SNI, passed through or (mode Terminate)
    /// terminated with the listener's certificate.
    Tls,
}

impl Plane {
    pub fn is_l4(self) -> bool {
        matches!(self, Plane::Tcp | Plane::Udp | Plane::Tls)
    }

    /// The transport of the socket an L4 listener needs: a TLS listener
    /// shares TCP sockets.
    pub fn transport(self) -> &'static str {
        match self {
            Plane::Udp => "UDP",
            _ => "TCP",
        }
    }

    /// The one route kind an L4 listener takes.
    pub fn l4_route_kind(self) -> Option<&'static str> {
        match self {
            Plane::Tcp => Some("TCPRoute"),
            Plane::Udp => Some("UDPRoute"),
            Plane::Tls => Some("TLSRoute"),
            Plane::Http | Plane::Https => None,
        }
    }
}

/// One listener as both compiles see it.
#[derive(Debug)]
pub struct ListenerClass<'s> {
    pub spec: &'s GatewayListeners,
    /// `None`: a protocol teapot does not serve.
    pub protocol: Option<ListenerProtocol>,
    /// The plane that serves it; `None`: no plane can (an unknown
    /// protocol, an HTTP port other than 80 or 443, an L4 port of 0).
    pub plane: Option<Plane>,
    /// The socket port (L4 listeners: never 0).
    pub port: u16,
    /// `tls.mode` is Passthrough.
    pub passthrough: bool,
    /// The listener's own hostname, parsed.
    pub hostname: Option<HostPattern>,
    /// What `allowedRoutes.kinds` comes to.
    pub kinds: RouteKinds,
    /// Why its plane refuses it: the `Accepted=False` reason and message.
    pub refused: Option<(&'static str, String)>,
    /// Why it conflicts with another listener of the Gateway
    /// (`Conflicted=True`): on the HTTP plane an earlier listener with
    /// the same port, protocol and hostname; on the L4 plane a socket
    /// shared with any other listener, unless all of them pass TLS
    /// through with distinct hostnames, which SNI tells apart.
    pub conflict: Option<(&'static str, String)>,
    /// The Gateway has its own address ([`own_address`]): this listener
    /// is served there, at its port, whatever its plane.
    pub own_address: bool,
}

impl<'s> ListenerClass<'s> {
    pub fn name(&self) -> &'s str {
        &self.spec.name
    }

    /// The Secrets its `tls.certificateRefs` name, as written.
    pub fn certificate_refs(&self) -> &'s [GatewayListenersTlsCertificateRefs] {
        self.spec
            .tls
            .as_ref()
            .and_then(|t| t.certificate_refs.as_deref())
            .unwrap_or_default()
    }
}

/// The ports of the shared listeners, as Gateway listeners name them.
pub const SHARED_HTTP_PORT: i32 = 80;
pub const SHARED_HTTPS_PORT: i32 = 443;

/// Whether `gateway` is served on an address of its own (from its
/// namespace's L4 pool) rather than on the fleet's shared listeners: it
/// asks for one (`spec.addresses`), or needs one (an HTTP listener on a
/// port other than 80, an HTTPS listener on one other than 443), or the
/// operator gives one to every Gateway of an operator namespace
/// (`every_operator_gateway`, `--gateway-own-addresses`; `tenant` false).
/// A Gateway with only TCP, UDP and TLS listeners beside HTTP on 80 and
/// HTTPS on 443 is not: its L4 listeners get an address, its HTTP
/// listeners stay on the shared ones, where its hostnames are served.
pub fn own_address(gateway: &Gateway, tenant: bool, every_operator_gateway: bool) -> bool {
    (every_operator_gateway && !tenant)
        || gateway
            .spec
            .addresses
            .as_ref()
            .is_some_and(|a| !a.is_empty())
        || gateway.spec.listeners.iter().any(|l| {
            let shared = match ListenerProtocol::of(&l.protocol) {
                Some(ListenerProtocol::Http) => SHARED_HTTP_PORT,
                Some(ListenerProtocol::Https) => SHARED_HTTPS_PORT,
                _ => return false,
            };
            // A port no socket can have needs no address.
            l.port != shared && (1..=65535).contains(&l.port)
        })
}

/// Why teapot does not accept `gateway` at all (its `Accepted=False`
/// reason and message): `spec.infrastructure.parametersRef` names
/// parameters, of which teapot reads none (`InvalidParameters`, which the
/// specification asks for a reference it cannot use), or `spec.addresses`
/// asks for an address of another type than `IPAddress`
/// (`UnsupportedAddress`).
pub fn gateway_refusal(gateway: &Gateway) -> Option<(&'static str, String)> {
    if let Some(p) = gateway
        .spec
        .infrastructure
        .as_ref()
        .and_then(|i| i.parameters_ref.as_ref())
    {
        return Some((
            "InvalidParameters",
            format!(
                "spec.infrastructure.parametersRef names {}/{} {}: teapot reads no Gateway \
                 parameters",
                p.group, p.kind, p.name
            ),
        ));
    }
    let unsupported = gateway
        .spec
        .addresses
        .iter()
        .flatten()
        .filter_map(|a| a.r#type.as_deref())
        .find(|t| *t != "IPAddress")?;
    Some((
        "UnsupportedAddress",
        format!("spec.addresses: type {unsupported} is not served; an IPAddress is"),
    ))
}

/// Every listener of `gateway`, in spec order, classified for the shared
/// listeners (HTTP on 80, HTTPS on 443 only).
pub fn classify(gateway: &Gateway) -> Vec<ListenerClass<'_>> {
    classify_at(gateway, false)
}

/// Every listener of `gateway`, in spec order, classified; `own`: the
/// Gateway has its own address ([`own_address`]), where HTTP and HTTPS
/// listeners are served on any port and share its sockets with its L4
/// listeners.
pub fn classify_at(gateway: &Gateway, own: bool) -> Vec<ListenerClass<'_>> {
    let specs = &gateway.spec.listeners;
    let mut out: Vec<ListenerClass<'_>> = specs.iter().map(|l| classify_one(l, own)).collect();
    // A Gateway teapot does not accept serves none of its listeners.
    if let Some((_, why)) = gateway_refusal(gateway) {
        for class in &mut out {
            class.plane = None;
            class.refused = Some((
                "UnsupportedValue",
                format!("the Gateway is not accepted: {why}"),
            ));
        }
        return out;
    }
    for i in 0..out.len() {
        if own && let Some(conflict) = own_conflict(&out, i) {
            out[i].conflict = Some(conflict);
            continue;
        }
        out[i].conflict = match out[i].plane {
            Some(Plane::Http | Plane::Https) => {
                let l = out[i].spec;
                specs[..i]
                    .iter()
                    .any(|o| {
                        o.port == l.port && o.protocol == l.protocol && o.hostname == l.hostname
                    })
                    .then(|| {
                        (
                            "HostnameConflict",
                            "another listener of this Gateway has the same port, protocol and \
                             hostname"
                                .to_string(),
                        )
                    })
            }
            Some(plane) => l4_conflict(&out, i, plane),
            None => None,
        };
    }
    out
}

/// The listener table of `gateway` with the ListenerSets attached to it
/// (`sets`, oldest first): the Gateway's listeners as [`classify_at`]
/// classifies them, then each set's. One table, so a conflict is found
/// across all of them in the order the specification gives: the Gateway's
/// listeners win, then older ListenerSets'. A ListenerSet's listeners are
/// served on the shared listeners' HTTP plane only; its TCP, UDP and TLS
/// listeners are refused (the L4 plane serves a Gateway's own).
pub fn classify_table<'s>(
    gateway: &'s Gateway,
    own: bool,
    sets: &[&'s [GatewayListeners]],
) -> Vec<ListenerClass<'s>> {
    let mut out = classify_at(gateway, own);
    let first = out.len();
    for l in sets.iter().flat_map(|s| s.iter()) {
        let mut class = classify_one(l, false);
        if class.plane.is_some_and(Plane::is_l4) {
            // A port a listener before it in the table holds with another
            // protocol of the same transport is a conflict first.
            let transport = |p: &str| if p == "UDP" { "UDP" } else { "TCP" };
            let holder = out.iter().find(|o| {
                o.spec.port == l.port
                    && o.spec.protocol != l.protocol
                    && transport(&o.spec.protocol) == transport(&l.protocol)
            });
            class.plane = None;
            class.refused = Some(match holder {
                Some(o) => (
                    "ProtocolConflict",
                    format!(
                        "port {} is listener {}'s, of protocol {}",
                        l.port,
                        o.name(),
                        o.spec.protocol
                    ),
                ),
                None => (
                    "UnsupportedProtocol",
                    format!(
                        "teapot serves a ListenerSet's HTTP and HTTPS listeners; {} listeners go \
                         on a Gateway",
                        l.protocol
                    ),
                ),
            });
        }
        out.push(class);
    }
    for i in first..out.len() {
        if !matches!(out[i].plane, Some(Plane::Http | Plane::Https)) {
            continue;
        }
        let l = out[i].spec;
        let taken = out[..i].iter().any(|o| {
            let o = o.spec;
            o.port == l.port && o.protocol == l.protocol && o.hostname == l.hostname
        });
        if taken {
            out[i].conflict = Some((
                "HostnameConflict",
                "a listener of the Gateway or of an older ListenerSet has the same port, \
                 protocol and hostname"
                    .to_string(),
            ));
        }
    }
    out
}

/// On a Gateway's own address one TCP port is one socket: the listeners
/// on it must all be HTTP, or all HTTPS (hostnames tell them apart), or
/// all TLS passthrough (the L4 rule, [`l4_conflict`]); any other mix is a
/// `ProtocolConflict` for each of them.
fn own_conflict(all: &[ListenerClass<'_>], i: usize) -> Option<(&'static str, String)> {
    let plane = all[i].plane?;
    if plane == Plane::Udp {
        return None;
    }
    let others: Vec<&str> = all
        .iter()
        .enumerate()
        .filter(|(j, o)| {
            *j != i
                && o.port == all[i].port
                && o.plane.is_some_and(|p| p != Plane::Udp && p != plane)
        })
        .map(|(_, o)| o.name())
        .collect();
    if others.is_empty() {
        return None;
    }
    Some((
        "ProtocolConflict",
        format!(
            "{}/TCP of the Gateway's address is also listener {} of another protocol",
            all[i].port,
            others.join(", ")
        ),
    ))
}

fn classify_one(l: &GatewayListeners, own: bool) -> ListenerClass<'_> {
    let protocol = ListenerProtocol::of(&l.protocol);
    let passthrough = matches!(
        l.tls.as_ref().and_then(|t| t.mode.as_ref()),
        Some(GatewayListenersTlsMode::Passthrough)
    );
    let l4_port = u16::try_from(l.port).ok().filter(|p| *p != 0);
    let (plane, refused) = match (protocol, l4_port) {
        (Some(ListenerProtocol::Http), Some(_)) if own => (Some(Plane::Http), None),
        (Some(ListenerProtocol::Http), _) if l.port == SHARED_HTTP_PORT => {
            (Some(Plane::Http), None)
        }
        (Some(ListenerProtocol::Https), Some(_)) if own || l.port == SHARED_HTTPS_PORT => (
            Some(Plane::Https),
            passthrough.then(|| {
                (
                    "UnsupportedProtocol",
                    "HTTPS listeners terminate TLS; Passthrough is for TLS listeners".to_string(),
                )
            }),
        ),
        (Some(ListenerProtocol::Http | ListenerProtocol::Https), _) => (
            None,
            Some((
                "PortUnavailable",
                format!(
                    "the shared listeners serve HTTP on port 80 and HTTPS on 443, not {}; \
                     a Gateway with its own address is served on any port",
                    l.port
                ),
            )),
        ),
        (Some(ListenerProtocol::Tcp), Some(_)) => (Some(Plane::Tcp), None),
        (Some(ListenerProtocol::Udp), Some(_)) => (Some(Plane::Udp), None),
        // Passthrough or Terminate (the L4 compile reads the certificates
        // of a Terminate listener): both are told apart by SNI.
        (Some(ListenerProtocol::Tls), Some(_)) => (Some(Plane::Tls), None),
        (Some(_), None) => (None, None),
        (None, _) => (
            None,
            Some((
                "UnsupportedProtocol",
                format!("protocol {} is not served", l.protocol),
            )),
        ),
    };
    ListenerClass {
        spec: l,
        protocol,
        plane,
        port: l4_port.unwrap_or(0),
        passthrough,
        hostname: l
            .hostname
            .as_deref()
            .and_then(|h| HostPattern::parse(h).ok()),
        kinds: attachment::route_kinds(l),
        refused,
        conflict: None,
        own_address: own,
    }
}

/// The L4 conflict of listener `i`: the listeners sharing its socket.
fn l4_conflict(
    all: &[ListenerClass<'_>],
    i: usize,
    plane: Plane,
) -> Option<(&'static str, String)> {
    let socket = (all[i].port, plane.transport());
    let sharing: Vec<&ListenerClass<'_>> = all
        .iter()
        .enumerate()
        .filter(|(j, o)| {
            *j != i
                && o.plane
                    .is_some_and(|p| p.is_l4() && (o.port, p.transport()) == socket)
        })
        .map(|(_, o)| o)
        .collect();
    if sharing.is_empty() {
        return None;
    }
    // TLS listeners of either mode share a socket by SNI (the
    // specification's TLSRouteModeMixed): the ClientHello names the
    // listener, which passes the connection through or terminates it.
    let sni = |l: &ListenerClass<'_>| l.plane == Some(Plane::Tls);
    let reason = if !(sni(&all[i]) && sharing.iter().all(|o| sni(o))) {
        "ProtocolConflict"
    } else if sharing.iter().any(|o| o.hostname == all[i].hostname) {
        "HostnameConflict"
    } else {
        return None;
    };
    let others: Vec<&str> = sharing.iter().map(|o| o.name()).collect();
    Some((
        reason,
        format!(
            "{}/{} is also listener {} of this Gateway",
            socket.0,
            socket.1,
            others.join(", ")
        ),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (name, protocol, port, hostname, tls.mode)
    type Spec<'a> = (&'a str, &'a str, i32, Option<&'a str>, Option<&'a str>);

    fn gateway(listeners: &[Spec<'_>]) -> Gateway {
        let listeners: Vec<serde_json::Value> = listeners
            .iter()
            .map(|(name, protocol, port, hostname, mode)| {
                let mut l = serde_json::json!({"name": name, "protocol": protocol, "port": port});
                if let Some(h) = hostname {
                    l["hostname"] = (*h).into();
                }
                if let Some(m) = mode {
                    l["tls"] = serde_json::json!({"mode": m});
                }
                l
            })
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1",
            "kind": "Gateway",
            "metadata": {"name": "g", "namespace": "ns"},
            "spec": {"gatewayClassName": "teapot", "listeners": listeners},
        }))
        .unwrap()
    }

    #[test]
    fn each_protocol_and_port_has_one_plane() {
        let g = gateway(&[
            ("http", "HTTP", 80, None, None),
            ("http8080", "HTTP", 8080, None, None),
            ("https-pt", "HTTPS", 443, None, Some("Passthrough")),
            ("tcp", "TCP", 5432, None, None),
            ("tcp0", "TCP", 0, None, None),
            ("tls-term", "TLS", 8443, None, Some("Terminate")),
            ("sctp", "SCTP", 9, None, None),
        ]);
        let got: Vec<_> = classify(&g)
            .iter()
            .map(|l| (l.name(), l.plane, l.refused.as_ref().map(|r| r.0)))
            .collect();
        assert_eq!(
            got,
            [
                ("http", Some(Plane::Http), None),
                ("http8080", None, Some("PortUnavailable")),
                ("https-pt", Some(Plane::Https), Some("UnsupportedProtocol")),
                ("tcp", Some(Plane::Tcp), None),
                ("tcp0", None, None),
                // Terminate is served (its certificates are the L4
                // compile's to read).
                ("tls-term", Some(Plane::Tls), None),
                ("sctp", None, Some("UnsupportedProtocol")),
            ]
        );
    }

    /// One table for the Gateway and its ListenerSets: the Gateway's
    /// listeners win a conflict, then older sets'; a set's L4 listener is
    /// refused, so it conflicts with nothing.
    #[test]
    fn a_gateway_with_parameters_or_an_address_type_teapot_lacks_is_not_accepted() {
        let mut g = gateway(&[("web", "HTTP", 80, None, None)]);
        assert_eq!(gateway_refusal(&g), None);
        assert_eq!(classify(&g)[0].plane, Some(Plane::Http));
        g.spec.addresses = Some(
            serde_json::from_value(serde_json::json!([
                {"type": "IPAddress", "value": "10.0.0.1"},
                {"type": "test/fake-invalid-type", "value": "x"}
            ]))
            .unwrap(),
        );
        assert_eq!(gateway_refusal(&g).unwrap().0, "UnsupportedAddress");
        let refused = classify(&g);
        assert_eq!(refused[0].plane, None);
        assert_eq!(refused[0].refused.as_ref().unwrap().0, "UnsupportedValue");
        g.spec.addresses = None;
        g.spec.infrastructure = Some(
            serde_json::from_value(serde_json::json!(
                {"parametersRef": {"group": "invalid.io", "kind": "InvalidParameters", "name": "x"}}
            ))
            .unwrap(),
        );
        let (reason, message) = gateway_refusal(&g).unwrap();
        assert_eq!(reason, "InvalidParameters");
        assert!(
            message.contains("invalid.io/InvalidParameters x"),
            "{message}"
        );
        assert_eq!(classify(&g)[0].plane, None);
    }

    #[test]
    fn listener_sets_join_the_table_after_the_gateway() {
        let g = gateway(&[("web", "HTTP", 80, Some("a.example"), None)]);
        let older = gateway(&[
            ("a", "HTTP", 80, Some("a.example"), None),
            ("b", "HTTP", 80, Some("b.example"), None),
            ("db", "TCP", 5432, None, None),
        ])
        .spec
        .listeners;
        let younger = gateway(&[
            ("b", "HTTP", 80, Some("b.example"), None),
            ("c", "HTTP", 80, Some("c.example"), None),
            // Port 80 is the Gateway's HTTP listener's: a conflict, before
            // the L4 listener a ListenerSet may not have.
            ("raw", "TCP", 80, None, None),
        ])
        .spec
        .listeners;
        let got: Vec<_> = classify_table(&g, false, &[&older, &younger])
            .iter()
            .map(|l| {
                (
                    l.name(),
                    l.plane,
                    l.conflict.as_ref().map(|r| r.0),
                    l.refused.as_ref().map(|r| r.0),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("web", Some(Plane::Http), None, None),
                ("a", Some(Plane::Http), Some("HostnameConflict"), None),
                ("b", Some(Plane::Http), None, None),
                ("db", None, None, Some("UnsupportedProtocol")),
                ("b", Some(Plane::Http), Some("HostnameConflict"), None),
                ("c", Some(Plane::Http), None, None),
                ("raw", None, None, Some("ProtocolConflict")),
            ]
        );
    }

    #[test]
    fn conflicts_follow_each_planes_rule() {
        let g = gateway(&[
            ("a", "HTTP", 80, Some("a.example"), None),
            ("b", "HTTP", 80, Some("a.example"), None),
            ("sni1", "TLS", 443, Some("x.example"), Some("Passthrough")),
            ("sni2", "TLS", 443, Some("y.example"), Some("Passthrough")),
            ("tcp", "TCP", 5000, None, None),
            ("tls", "TLS", 5000, Some("z.example"), Some("Passthrough")),
            ("udp", "UDP", 5000, None, None),
            (
                "mixed-term",
                "TLS",
                8883,
                Some("t.example"),
                Some("Terminate"),
            ),
            (
                "mixed-pass",
                "TLS",
                8883,
                Some("p.example"),
                Some("Passthrough"),
            ),
            (
                "same-term",
                "TLS",
                9883,
                Some("s.example"),
                Some("Terminate"),
            ),
            (
                "same-pass",
                "TLS",
                9883,
                Some("s.example"),
                Some("Passthrough"),
            ),
        ]);
        let got: Vec<_> = classify(&g)
            .iter()
            .map(|l| (l.name(), l.conflict.as_ref().map(|r| r.0)))
            .collect();
        assert_eq!(
            got,
            [
                // Only the later of two equal HTTP listeners conflicts.
                ("a", None),
                ("b", Some("HostnameConflict")),
                // SNI tells distinct hostnames apart on one socket.
                ("sni1", None),
                ("sni2", None),
                // A TCP and a TLS listener cannot share 5000/TCP; UDP
                // is another socket.
                ("tcp", Some("ProtocolConflict")),
                ("tls", Some("ProtocolConflict")),
                ("udp", None),
                // Mixed modes on one port: SNI names the listener
                // (TLSRouteModeMixed)...
                ("mixed-term", None),
                ("mixed-pass", None),
                // ...so one name cannot be both.
                ("same-term", Some("HostnameConflict")),
                ("same-pass", Some("HostnameConflict")),
            ]
        );
    }

    #[test]
    fn own_address_gateways_serve_http_on_any_port_and_share_sockets_by_protocol() {
        let shared = gateway(&[
            ("http", "HTTP", 80, None, None),
            ("https", "HTTPS", 443, None, None),
            ("db", "TCP", 5432, None, None),
        ]);
        // L4 listeners beside 80 and 443 keep HTTP on the shared listeners;
        // a port that no socket can have asks for nothing.
        assert!(!own_address(&shared, false, false));
        assert!(!own_address(
            &gateway(&[("zero", "HTTP", 0, None, None)]),
            false,
            false
        ));
        // Another port, or the operator's choice for its own namespaces.
        assert!(own_address(
            &gateway(&[("alt", "HTTP", 8080, None, None)]),
            true,
            false
        ));
        assert!(own_address(
            &gateway(&[("alt", "HTTPS", 8443, None, None)]),
            true,
            false
        ));
        assert!(own_address(&shared, false, true));
        assert!(!own_address(&shared, true, true));
        let mut asked = shared.clone();
        asked.spec.addresses = Some(vec![
            teapot_gateway_api::generated::gateways::GatewayAddresses {
                r#type: None,
                value: None,
            },
        ]);
        assert!(own_address(&asked, true, false));

        let g = gateway(&[
            ("a", "HTTP", 8080, Some("a.example"), None),
            ("b", "HTTP", 8080, Some("b.example"), None),
            ("tls", "HTTPS", 8443, None, None),
            ("mixed-http", "HTTP", 9000, None, None),
            ("mixed-tcp", "TCP", 9000, None, None),
            ("udp", "UDP", 8080, None, None),
        ]);
        let got: Vec<_> = classify_at(&g, true)
            .iter()
            .map(|l| (l.name(), l.plane, l.conflict.as_ref().map(|r| r.0)))
            .collect();
        assert_eq!(
            got,
            [
                // Hostnames tell HTTP listeners on one socket apart; UDP
                // is another socket.
                ("a", Some(Plane::Http), None),
                ("b", Some(Plane::Http), None),
                ("tls", Some(Plane::Https), None),
                ("mixed-http", Some(Plane::Http), Some("ProtocolConflict")),
                ("mixed-tcp", Some(Plane::Tcp), Some("ProtocolConflict")),
                ("udp", Some(Plane::Udp), None),
            ]
        );
        // On the shared listeners 8080 is not served.
        assert_eq!(classify(&g)[0].plane, None);
    }
}
