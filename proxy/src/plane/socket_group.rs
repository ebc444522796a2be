//! A member of an address's `SO_REUSEPORT` group: how each serving
//! thread gets a socket of its own at the shared HTTP and HTTPS addresses
//! (crate::plane::serving) and at the HTTP/3 address
//! (crate::plane::quic_threads). Below both, so that neither imports the
//! other.

use std::net::SocketAddr;

/// A socket of `ty` for `addr` that joins the address's group once bound.
pub fn member(
    addr: SocketAddr,
    ty: socket2::Type,
    protocol: socket2::Protocol,
) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(socket2::Domain::for_address(addr), ty, Some(protocol))?;
    socket.set_reuse_port(true)?;
    Ok(socket)
}
