//! Which addresses a tenant's endpoints may point at.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ipnet::IpNet;

use super::AdmissionContext;

/// Cloud metadata and host-agent addresses outside link-local (which is
/// refused as a whole): Alibaba Cloud, Azure's wire server, AWS over IPv6.
const METADATA: &[IpAddr] = &[
    IpAddr::V4(Ipv4Addr::new(169, 254, 169, 254)),
    IpAddr::V4(Ipv4Addr::new(100, 100, 100, 200)),
    IpAddr::V4(Ipv4Addr::new(168, 63, 129, 16)),
    IpAddr::V6(Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254)),
];

/// Why `ip` is never an endpoint, whoever asks: unspecified, "this
/// network", loopback, link-local, multicast, broadcast, reserved, a cloud
/// metadata address, or one of the LB cluster's own ranges. IPv4-mapped
/// and NAT64 forms are judged by the IPv4 address inside.
pub fn forbidden_address(ip: IpAddr, lb_networks: &[IpNet]) -> Option<String> {
    let ip = ip.to_canonical();
    if METADATA.contains(&ip) {
        return Some(format!("{ip} is a cloud metadata address"));
    }
    if let Some(reason) = reserved(ip) {
        return Some(format!("{ip} is {reason}"));
    }
    if let Some(net) = lb_networks.iter().find(|n| n.contains(&ip)) {
        return Some(format!(
            "{ip} is inside {net}, a range of the LB cluster itself"
        ));
    }
    None
}

fn reserved(ip: IpAddr) -> Option<String> {
    match ip {
        IpAddr::V4(v4) => {
            let reason = if v4.is_unspecified() || v4.octets()[0] == 0 {
                "unspecified (0.0.0.0/8)"
            } else if v4.is_loopback() {
                "loopback (127.0.0.0/8)"
            } else if v4.is_link_local() {
                "link-local (169.254.0.0/16, where cloud metadata services live)"
            } else if v4.is_multicast() {
                "multicast (224.0.0.0/4)"
            } else if v4.is_broadcast() || v4.octets()[0] >= 240 {
                "reserved (240.0.0.0/4)"
            } else {
                return None;
            };
            Some(reason.to_string())
        }
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            let reason = if v6.is_unspecified() {
                "unspecified (::)"
            } else if v6.is_loopback() {
                "loopback (::1)"
            } else if v6.is_unicast_link_local() {
                "link-local (fe80::/10)"
            } else if v6.is_multicast() {
                "multicast (ff00::/8)"
            } else if seg[..6] == [0, 0, 0, 0, 0, 0] {
                "an IPv4-compatible IPv6 address (deprecated)"
            } else if seg[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                // NAT64: judge the IPv4 address it reaches.
                let o = v6.octets();
                let v4 = IpAddr::V4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
                if METADATA.contains(&v4) {
                    return Some("a NAT64 form of a cloud metadata address".into());
                }
                return reserved(v4).map(|r| format!("a NAT64 form of an address that is {r}"));
            } else {
                return None;
            };
            Some(reason.to_string())
        }
    }
}

/// Whether the tenant of `ctx` may have an endpoint at `ip`: not
/// [`forbidden_address`], inside its `nodeCIDRs`, and not inside another
/// tenant's. The proxy calls this for every endpoint it compiles in a
/// tenant namespace.
pub fn check_endpoint_address(ctx: &AdmissionContext<'_>, ip: IpAddr) -> Result<(), String> {
    if let Some(reason) = forbidden_address(ip, ctx.lb_networks) {
        return Err(reason);
    }
    let ip = ip.to_canonical();
    if ctx.node_networks.is_empty() {
        return Err(format!(
            "{ip} is not allowed: your Tenant lists no nodeCIDRs, so no endpoint address is; ask the operator to set spec.nodeCIDRs"
        ));
    }
    if !ctx.node_networks.iter().any(|n| n.contains(&ip)) {
        let nets: Vec<String> = ctx.node_networks.iter().map(ToString::to_string).collect();
        return Err(format!(
            "{ip} is outside your nodeCIDRs ({})",
            nets.join(", ")
        ));
    }
    if ctx.holdings.network_holder(ip, ctx.cluster()).is_some() {
        return Err(format!("{ip} is also inside another tenant's node network"));
    }
    Ok(())
}

/// Networks a node CIDR must not overlap.
pub(crate) fn forbidden_networks() -> Vec<(IpNet, &'static str)> {
    [
        ("0.0.0.0/8", "unspecified"),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved"),
        ("100.100.100.200/32", "cloud metadata"),
        ("168.63.129.16/32", "cloud metadata"),
        ("::/96", "unspecified, loopback and IPv4-compatible"),
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("fe80::/10", "link-local"),
        ("ff00::/8", "multicast"),
        ("fd00:ec2::254/128", "cloud metadata"),
    ]
    .into_iter()
    .filter_map(|(n, why)| n.parse().ok().map(|n| (n, why)))
    .collect()
}

/// Whether two networks share an address.
pub(crate) fn overlaps(a: &IpNet, b: &IpNet) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn never_endpoints() {
        let lb: Vec<IpNet> = vec!["10.96.0.0/12".parse().unwrap()];
        for bad in [
            "0.0.0.0",
            "0.1.2.3",
            "127.0.0.1",
            "127.8.8.8",
            "169.254.169.254",
            "169.254.1.1",
            "100.100.100.200",
            "168.63.129.16",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "::",
            "::1",
            "fe80::1",
            "ff02::1",
            "fd00:ec2::254",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::7f00:1",
            "10.96.0.1",
            "::ffff:10.100.0.1",
        ] {
            assert!(forbidden_address(ip(bad), &lb).is_some(), "{bad}");
        }
        for ok in [
            "10.1.0.5",
            "192.0.2.1",
            "2001:db8::1",
            "64:ff9b::a01:5",
            "fd00:1::5",
        ] {
            assert_eq!(forbidden_address(ip(ok), &lb), None, "{ok}");
        }
    }

    #[test]
    fn only_own_node_networks() {
        let f = Fixture::new();
        let ctx = f.ctx();
        assert_eq!(check_endpoint_address(&ctx, ip("10.1.0.5")), Ok(()));
        assert_eq!(check_endpoint_address(&ctx, ip("fd00:1::5")), Ok(()));
        assert_eq!(check_endpoint_address(&ctx, ip("::ffff:10.1.0.5")), Ok(()));
        let e = check_endpoint_address(&ctx, ip("10.2.0.5")).unwrap_err();
        assert!(e.contains("outside your nodeCIDRs"), "{e}");
        assert!(check_endpoint_address(&ctx, ip("127.0.0.1")).is_err());
        assert!(check_endpoint_address(&ctx, ip("10.96.0.10")).is_err());
        // An overlap between tenants' networks is refused on both sides.
        let mut f = Fixture::new();
        f.holdings
            .insert_network("globex", "10.1.0.128/25".parse().unwrap());
        let ctx = f.ctx();
        let e = check_endpoint_address(&ctx, ip("10.1.0.200")).unwrap_err();
        assert!(e.contains("another tenant"), "{e}");
        assert_eq!(check_endpoint_address(&ctx, ip("10.1.0.5")), Ok(()));
    }
}
