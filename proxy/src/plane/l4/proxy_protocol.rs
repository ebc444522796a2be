//! PROXY protocol version 2 header writer (haproxy.org proxy-protocol.txt,
//! section 2.2), for `teapot.dev/proxy-protocol: v2`.
//!
//! Only the writer is needed and it is a fixed 28- or 52-byte layout, so
//! it is written here rather than pulled in as a crate (`ppp`,
//! `proxy-header`): both bring a parser, TLV handling and their own error
//! types we would not use, for what is 30 lines checked byte by byte below.

use std::net::{IpAddr, SocketAddr};

use crate::compile::l4::pool::Protocol;

/// The 12-byte signature every v2 header starts with.
pub const SIGNATURE: [u8; 12] = [
    0x0D, 0x0A, 0x0D, 0x0A, 0x00, 0x0D, 0x0A, 0x51, 0x55, 0x49, 0x54, 0x0A,
];

/// The header announcing a connection from `client` to `local` (the
/// listener's address as the client saw it).
pub fn header_v2(client: SocketAddr, local: SocketAddr, protocol: Protocol) -> Vec<u8> {
    let transport: u8 = match protocol {
        Protocol::Tcp => 0x1,
        Protocol::Udp => 0x2,
    };
    let mut out = Vec::with_capacity(16 + 36);
    out.extend_from_slice(&SIGNATURE);
    // Version 2, command PROXY.
    out.push(0x21);
    match (client.ip(), local.ip()) {
        (IpAddr::V4(src), IpAddr::V4(dst)) => {
            out.push(0x10 | transport);
            out.extend_from_slice(&12u16.to_be_bytes());
            out.extend_from_slice(&src.octets());
            out.extend_from_slice(&dst.octets());
        }
        // Mixed families only happen with v4-mapped addresses on a
        // dual-stack socket: announce both as IPv6.
        (src, dst) => {
            let v6 = |ip: IpAddr| match ip {
                IpAddr::V4(v4) => v4.to_ipv6_mapped(),
                IpAddr::V6(v6) => v6,
            };
            out.push(0x20 | transport);
            out.extend_from_slice(&36u16.to_be_bytes());
            out.extend_from_slice(&v6(src).octets());
            out.extend_from_slice(&v6(dst).octets());
        }
    }
    out.extend_from_slice(&client.port().to_be_bytes());
    out.extend_from_slice(&local.port().to_be_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_tcp_header_bytes() {
        let h = header_v2(
            "192.0.2.10:51000".parse().unwrap(),
            "198.51.100.1:443".parse().unwrap(),
            Protocol::Tcp,
        );
        let mut want = SIGNATURE.to_vec();
        want.extend_from_slice(&[0x21, 0x11, 0x00, 0x0C]);
        want.extend_from_slice(&[192, 0, 2, 10, 198, 51, 100, 1]);
        want.extend_from_slice(&[0xC7, 0x38, 0x01, 0xBB]);
        assert_eq!(h, want);
        assert_eq!(h.len(), 28);
    }

    #[test]
    fn ipv6_and_mixed_headers() {
        let h = header_v2(
            "[2001:db8::1]:1234".parse().unwrap(),
            "[2001:db8::2]:53".parse().unwrap(),
            Protocol::Udp,
        );
        assert_eq!(h.len(), 52);
        assert_eq!(&h[12..16], &[0x21, 0x22, 0x00, 0x24]);
        assert_eq!(
            h[16..32],
            "2001:db8::1"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
        assert_eq!(&h[48..52], &[0x04, 0xD2, 0x00, 0x35]);
        let mixed = header_v2(
            "192.0.2.10:1".parse().unwrap(),
            "[2001:db8::2]:2".parse().unwrap(),
            Protocol::Tcp,
        );
        assert_eq!(mixed[13], 0x21);
        assert_eq!(
            &mixed[16..32],
            &"::ffff:192.0.2.10"
                .parse::<std::net::Ipv6Addr>()
                .unwrap()
                .octets()
        );
    }
}
