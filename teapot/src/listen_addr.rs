//! Listen addresses as the chart writes them. Kubernetes substitutes
//! `$(POD_IP)` as it is, so `--admin=$(POD_IP):9080` on an IPv6 pod is
//! `fd00::1:9080`, which no socket-address parser takes (it wants
//! `[fd00::1]:9080`), and the chart cannot bracket by family. A listen
//! address always has a port, so an unbracketed IPv6 address followed by
//! `:PORT` has one reading: the address, then the port.

use std::net::{Ipv6Addr, SocketAddr};

/// `ADDRESS:PORT` as a socket address, `[v6]:PORT` or an unbracketed
/// `v6:PORT` alike.
pub(crate) fn socket_addr(text: &str) -> Result<SocketAddr, String> {
    if let Ok(addr) = text.parse::<SocketAddr>() {
        return Ok(addr);
    }
    bare_v6(text).ok_or_else(|| {
        format!("{text:?} is not ADDRESS:PORT (an IPv6 address as [ADDRESS]:PORT or ADDRESS:PORT)")
    })
}

/// A listener flag that also takes a host name (`localhost:9080`) or
/// `off`: an unbracketed `v6:PORT` is bracketed, anything else is kept for
/// the binder to resolve or refuse.
pub(crate) fn listener(text: &str) -> Result<String, String> {
    // A socket address never has an unbracketed IPv6 address, so what
    // `bare_v6` reads is never one already.
    Ok(bare_v6(text).map_or_else(|| text.to_string(), |addr| addr.to_string()))
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
