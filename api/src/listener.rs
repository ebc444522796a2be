//! A Gateway listener's protocol, classified once: the admission policy,
//! the HTTP and L4 compiles and the attachment rules
//! (`teapot_model::attachment`) all match on [`ListenerProtocol`], never
//! on the protocol string.

/// A listener's protocol: HTTP and HTTPS are the HTTP plane's, TCP, UDP
/// and TLS the L4 plane's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListenerProtocol {
    Http,
    Https,
    Tcp,
    Udp,
    Tls,
}

impl ListenerProtocol {
    /// `None`: a protocol teapot does not serve (the listener is not
    /// accepted, `UnsupportedProtocol`).
    pub fn of(protocol: &str) -> Option<ListenerProtocol> {
        Some(match protocol {
            "HTTP" => ListenerProtocol::Http,
            "HTTPS" => ListenerProtocol::Https,
            "TCP" => ListenerProtocol::Tcp,
            "UDP" => ListenerProtocol::Udp,
            "TLS" => ListenerProtocol::Tls,
            _ => return None,
        })
    }

    /// Served by the L4 plane.
    pub fn is_l4(self) -> bool {
        matches!(
            self,
            ListenerProtocol::Tcp | ListenerProtocol::Udp | ListenerProtocol::Tls
        )
    }

    /// The route kinds a listener of this protocol can take (the
    /// specification's defaults, and all teapot serves for each).
    pub fn kinds(self) -> &'static [&'static str] {
        match self {
            ListenerProtocol::Tls => &["TLSRoute"],
            ListenerProtocol::Tcp => &["TCPRoute"],
            ListenerProtocol::Udp => &["UDPRoute"],
            ListenerProtocol::Http | ListenerProtocol::Https => &["HTTPRoute", "GRPCRoute"],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_served_protocol_has_one_plane_and_its_kinds() {
        for (name, l4, kinds) in [
            ("HTTP", false, &["HTTPRoute", "GRPCRoute"][..]),
            ("HTTPS", false, &["HTTPRoute", "GRPCRoute"]),
            ("TCP", true, &["TCPRoute"]),
            ("UDP", true, &["UDPRoute"]),
            ("TLS", true, &["TLSRoute"]),
        ] {
            let p = ListenerProtocol::of(name).expect(name);
            assert_eq!(p.is_l4(), l4, "{name}");
            assert_eq!(p.kinds(), kinds, "{name}");
        }
        // Case matters (the API's enum), and nothing else is served.
        for other in ["http", "SCTP", "QUIC", ""] {
            assert_eq!(ListenerProtocol::of(other), None, "{other}");
        }
    }
}
