//! A member of an address's `SO_REUSEPORT` group: how each serving
//! thread gets a socket of its own at the shared HTTP and HTTPS addresses
//! (crate::plane::serving) and at the HTTP/3 address
//! (crate::plane::quic_threads). Below both, so that neither imports the
//! other.
//!
//! The chart listens on `[::]`, which takes both families: an IPv4 peer of
//! such a socket is `::ffff:a.b.c.d`, and [`canonical`] is how every
//! reader of a connection's addresses sees it as the IPv4 address it is.

use std::net::SocketAddr;

/// A socket of `ty` for `addr` that joins the address's group once bound.
pub fn member(
    addr: SocketAddr,
    ty: socket2::Type,
    protocol: socket2::Protocol,
) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), ty, Some(protocol))?;
    socket.set_reuse_port(true)?;
    if let SocketAddr::V6(v6) = addr
        && v6.ip().is_unspecified()
    {
        // `[::]` takes IPv4 as well whatever the node's
        // `net.ipv6.bindv6only` says, as HAProxy's `v4v6` does: one
        // listener serves both families of the fleet's addresses.
        socket.set_only_v6(false)?;
    }
    Ok(socket)
}

/// `addr` as the peer or local address it is on the wire: an IPv4 address
/// seen through a dual-stack IPv6 socket (`::ffff:a.b.c.d`) as IPv4, so
/// that forwarding fields, access lists, limits per client and the access
/// log name an IPv4 client as one on an IPv4 listener would.
pub fn canonical(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(addr.ip().to_canonical(), addr.port())
}

/// An address of a Pingora connection's socket digest (its `peer_addr`
/// or `local_addr`), [`canonical`]; `None` for a Unix socket.
pub fn inet(addr: Option<&pingora_core::protocols::l4::socket::SocketAddr>) -> Option<SocketAddr> {
    addr.and_then(|a| a.as_inet()).map(|a| canonical(*a))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_ipv4_client_of_a_dual_stack_socket_is_named_as_ipv4() {
        let mapped: SocketAddr = "[::ffff:192.0.2.7]:40000".parse().unwrap();
        assert_eq!(canonical(mapped), "192.0.2.7:40000".parse().unwrap());
        let v6: SocketAddr = "[2001:db8::7]:40000".parse().unwrap();
        assert_eq!(canonical(v6), v6);
        let v4: SocketAddr = "192.0.2.7:1".parse().unwrap();
        assert_eq!(canonical(v4), v4);
    }

    /// An IPv4 client reaches a `[::]` group member and is seen as IPv4
    /// once canonical.
    #[test]
    fn the_unspecified_ipv6_address_takes_ipv4_clients() {
        let socket = member(
            "[::]:0".parse().unwrap(),
            socket2::Type::STREAM,
            socket2::Protocol::TCP,
        )
        .unwrap();
        assert!(!socket.only_v6().unwrap());
        socket
            .bind(&"[::]:0".parse::<SocketAddr>().unwrap().into())
            .unwrap();
        socket.listen(8).unwrap();
        let listener: std::net::TcpListener = socket.into();
        let port = listener.local_addr().unwrap().port();
        let client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (_, peer) = listener.accept().unwrap();
        assert!(peer.is_ipv6(), "{peer}");
        assert_eq!(canonical(peer), client.local_addr().unwrap());
    }
}
