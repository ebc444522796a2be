//! A Service's `spec.loadBalancerSourceRanges`, compiled for the accept
//! path: the networks become sorted, merged address intervals per family,
//! so admitting a client is one binary search whatever the list holds
//! (the API bounds it at [`teapot_api::admission::MAX_SOURCE_RANGES`]), with
//! no allocation and no parsing per connection or datagram.

use std::net::IpAddr;

use ipnet::IpNet;

/// The clients one Service's listeners admit. A listener without a set
/// admits everyone (an absent or empty list, as Kubernetes reads it); a
/// set admits exactly the addresses in its networks, so a set of IPv6
/// networks alone refuses every IPv4 client.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SourceRanges {
    /// Inclusive `(first, last)` intervals, sorted, disjoint and not
    /// adjacent.
    v4: Box<[(u32, u32)]>,
    v6: Box<[(u128, u128)]>,
    /// The networks as normalised by the API, for the report.
    nets: Vec<IpNet>,
}

impl SourceRanges {
    pub fn new(nets: Vec<IpNet>) -> SourceRanges {
        let mut v4 = Vec::new();
        let mut v6 = Vec::new();
        for net in &nets {
            match net {
                IpNet::V4(n) => v4.push((u32::from(n.network()), u32::from(n.broadcast()))),
                IpNet::V6(n) => v6.push((u128::from(n.network()), u128::from(n.broadcast()))),
            }
        }
        SourceRanges {
            v4: merge(v4),
            v6: merge(v6),
            nets,
        }
    }

    /// Whether `client` may reach the listener. An IPv4 client on an IPv6
    /// socket arrives as `::ffff:a.b.c.d` and is compared as the IPv4
    /// address it is: otherwise an IPv6 listener would admit no IPv4
    /// client of an IPv4 range, or, worse, an IPv4 list written as
    /// `::ffff:0:0/96` would be the only way to say "every IPv4 client".
    pub fn admits(&self, client: IpAddr) -> bool {
        match client.to_canonical() {
            IpAddr::V4(a) => within(&self.v4, u32::from(a)),
            IpAddr::V6(a) => within(&self.v6, u128::from(a)),
        }
    }

    pub fn networks(&self) -> &[IpNet] {
        &self.nets
    }
}

fn merge<T: Copy + Ord + num_like::Next>(mut spans: Vec<(T, T)>) -> Box<[(T, T)]> {
    spans.sort_unstable();
    let mut out: Vec<(T, T)> = Vec::with_capacity(spans.len());
    for (first, last) in spans {
        match out.last_mut() {
            Some(prev) if prev.1.next().is_none_or(|n| first <= n) => {
                prev.1 = prev.1.max(last);
            }
            _ => out.push((first, last)),
        }
    }
    out.into_boxed_slice()
}

fn within<T: Copy + Ord>(spans: &[(T, T)], addr: T) -> bool {
    // The last interval starting at or before `addr` is the only one that
    // can hold it.
    let i = spans.partition_point(|&(first, _)| first <= addr);
    i > 0 && addr <= spans[i - 1].1
}

mod num_like {
    /// The address after this one, if any: adjacent intervals merge.
    pub trait Next: Sized {
        fn next(self) -> Option<Self>;
    }
    impl Next for u32 {
        fn next(self) -> Option<u32> {
            self.checked_add(1)
        }
    }
    impl Next for u128 {
        fn next(self) -> Option<u128> {
            self.checked_add(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(nets: &[&str]) -> SourceRanges {
        SourceRanges::new(nets.iter().map(|n| n.parse().unwrap()).collect())
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn admits_exactly_the_networks_in_both_families() {
        let s = set(&[
            "198.51.100.0/24",
            "10.0.0.0/8",
            "2001:db8::/32",
            "192.0.2.7/32",
        ]);
        for inside in [
            "198.51.100.0",
            "198.51.100.255",
            "10.255.255.255",
            "192.0.2.7",
            "2001:db8:ffff::1",
            // An IPv4 client of an IPv6 socket.
            "::ffff:10.1.2.3",
        ] {
            assert!(s.admits(ip(inside)), "{inside}");
        }
        for outside in [
            "198.51.101.0",
            "9.255.255.255",
            "11.0.0.0",
            "192.0.2.6",
            "192.0.2.8",
            "127.0.0.1",
            "::1",
            "2001:db9::",
            "::ffff:127.0.0.1",
            // The IPv4-compatible form is not an IPv4 client.
            "::10.1.2.3",
        ] {
            assert!(!s.admits(ip(outside)), "{outside}");
        }
    }

    #[test]
    fn one_family_alone_refuses_the_other() {
        let v6 = set(&["::/0"]);
        assert!(v6.admits(ip("2001:db8::1")));
        assert!(!v6.admits(ip("192.0.2.1")));
        assert!(!v6.admits(ip("::ffff:192.0.2.1")));
        let v4 = set(&["0.0.0.0/0"]);
        assert!(v4.admits(ip("255.255.255.255")));
        assert!(v4.admits(ip("::ffff:192.0.2.1")));
        assert!(!v4.admits(ip("::1")));
    }

    #[test]
    fn overlapping_and_adjacent_networks_merge() {
        let s = set(&[
            "10.0.1.0/24",
            "10.0.0.0/24",
            "10.0.0.128/25",
            "10.0.3.0/24",
            "255.255.255.255/32",
            "255.255.255.254/32",
        ]);
        assert_eq!(
            &*s.v4,
            [
                (0x0a00_0000, 0x0a00_01ff),
                (0x0a00_0300, 0x0a00_03ff),
                (0xffff_fffe, 0xffff_ffff)
            ]
        );
        assert!(!s.admits(ip("10.0.2.0")));
        assert!(s.admits(ip("10.0.1.255")));
        assert_eq!(s.networks().len(), 6);
    }
}
