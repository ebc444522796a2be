//! Listen addresses as the chart writes them. Kubernetes substitutes
//! `$(POD_IP)` as it is, so `--admin=$(POD_IP):9080` on an IPv6 pod is
//! `fd00::1:9080`, which no socket-address parser takes (it wants
//! `[fd00::1]:9080`), and the chart cannot bracket by family. A listen
//! address always has a port, so an unbracketed IPv6 address followed by
//! `:PORT` has one reading: the address, then the port.
//!
//! The chart listens on `[::]:PORT`, every family the node has: both on a
//! dual-stack or IPv6 node (teapot's listeners take IPv4 on `[::]`), and
//! `0.0.0.0:PORT` on a node whose kernel runs without IPv6
//! (`ipv6.disable=1`), where no IPv6 socket can be opened at all.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

/// `ADDRESS:PORT` as a socket address, `[v6]:PORT` or an unbracketed
/// `v6:PORT` alike.
pub(crate) fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    let addr = match text.parse::<SocketAddr>() {
        Ok(addr) => addr,
        Err(_) => bare_v6(text).ok_or_else(|| {
            format!(
                "{text:?} is not ADDRESS:PORT (an IPv6 address as [ADDRESS]:PORT or ADDRESS:PORT)"
            )
        })?,
    };
    Ok(every_family(addr, host_has_ipv6))
}

/// A listener flag that also takes a host name (`localhost:9080`) or
/// `off`: an unbracketed `v6:PORT` is bracketed, anything else is kept for
/// the binder to resolve or refuse.
pub(crate) fn listener(text: &str) -> Result<String, String> {
    // A socket address never has an unbracketed IPv6 address, so what
    // `bare_v6` reads is never one already.
    let addr = bare_v6(text).or_else(|| text.parse::<SocketAddr>().ok());
    Ok(addr.map_or_else(
        || text.to_string(),
        |addr| every_family(addr, host_has_ipv6).to_string(),
    ))
}

/// `[::]:PORT` where the host can open an IPv6 socket, else
/// `0.0.0.0:PORT`; any other address as it is.
fn every_family(addr: SocketAddr, has_ipv6: impl FnOnce() -> bool) -> SocketAddr {
    match addr {
        SocketAddr::V6(v6) if v6.ip().is_unspecified() && !has_ipv6() => {
            SocketAddr::from((Ipv4Addr::UNSPECIFIED, v6.port()))
        }
        addr => addr,
    }
}

fn host_has_ipv6() -> bool {
    std::net::UdpSocket::bind((Ipv6Addr::UNSPECIFIED, 0)).is_ok()
}

fn bare_v6(text: &str) -> Option<SocketAddr> {
    let (address, port) = text.rsplit_once(':')?;
    let address = address.parse::<Ipv6Addr>().ok()?;
    let port = port.parse::<u16>().ok()?;
    Some(SocketAddr::from((address, port)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unbracketed_ipv6_address_takes_its_last_group_as_the_port() {
        assert_eq!(
            socket_addr("fd00::1:7946").unwrap(),
            "[fd00::1]:7946".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            socket_addr("[fd00::1]:7946").unwrap(),
            "[fd00::1]:7946".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(
            socket_addr("10.0.0.5:7946").unwrap(),
            "10.0.0.5:7946".parse::<SocketAddr>().unwrap()
        );
        assert_eq!(listener("2001:db8::5:9080").unwrap(), "[2001:db8::5]:9080");
        assert_eq!(listener("10.0.0.5:9080").unwrap(), "10.0.0.5:9080");
        assert_eq!(listener("[::1]:9080").unwrap(), "[::1]:9080");
    }

    #[test]
    fn the_unspecified_ipv6_address_falls_back_to_ipv4_only_without_ipv6() {
        let any: SocketAddr = "[::]:8080".parse().unwrap();
        assert_eq!(every_family(any, || true), any);
        assert_eq!(
            every_family(any, || false),
            "0.0.0.0:8080".parse::<SocketAddr>().unwrap()
        );
        // A named IPv6 address fails to bind there, as it should.
        let named: SocketAddr = "[2001:db8::1]:8080".parse().unwrap();
        assert_eq!(every_family(named, || false), named);
        // This machine has IPv6: the flags keep `[::]`.
        assert!(host_has_ipv6());
        assert_eq!(listener("[::]:8080").unwrap(), "[::]:8080");
        assert_eq!(
            socket_addr("[::]:53").unwrap(),
            "[::]:53".parse::<SocketAddr>().unwrap()
        );
    }

    #[test]
    fn what_is_not_an_address_and_port_is_refused_or_left_to_the_binder() {
        // Eight groups: without the last there is no IPv6 address left.
        assert!(socket_addr("1:2:3:4:5:6:7:8").is_err());
        assert!(socket_addr("fd00::1").is_err());
        assert!(socket_addr("fd00::1:70000").is_err());
        assert!(socket_addr("10.0.0.5").is_err());
        assert_eq!(listener("off").unwrap(), "off");
        assert_eq!(listener("localhost:9080").unwrap(), "localhost:9080");
    }
}
