//! Address pools and listener keys.
//!
//! A pool is a named, ordered list of listen addresses given by the
//! operator (`--l4-pool NAME=ADDR[,ADDR…|CIDR]`). The order matters: new
//! Services take the first address where all their ports are free, so the
//! same inputs give the same allocation on every replica.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

/// Most addresses one pool may expand to (a /16 of IPv4): allocation scans
/// pools linearly, and nobody needs more listen addresses per replica.
pub const MAX_POOL_ADDRESSES: usize = 65_536;

/// TCP or UDP.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Protocol {
    #[serde(rename = "TCP")]
    Tcp,
    #[serde(rename = "UDP")]
    Udp,
}

impl Protocol {
    /// The Kubernetes spelling (`spec.ports[].protocol`).
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
        }
    }

    /// Parses `spec.ports[].protocol` (unset means TCP).
    pub fn from_service(protocol: Option<&str>) -> Result<Protocol, String> {
        match protocol.unwrap_or("TCP") {
            "TCP" => Ok(Protocol::Tcp),
            "UDP" => Ok(Protocol::Udp),
            other => Err(format!("protocol {other} is not supported (TCP or UDP)")),
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An address family, spelt as Kubernetes spells it (`spec.ipFamilies`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    V4,
    V6,
}

impl Family {
    pub fn of(ip: IpAddr) -> Family {
        match ip {
            IpAddr::V4(_) => Family::V4,
            IpAddr::V6(_) => Family::V6,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Family::V4 => "IPv4",
            Family::V6 => "IPv6",
        }
    }

    /// `IPv4` or `IPv6`, exactly (the API server accepts nothing else).
    pub fn parse(s: &str) -> Option<Family> {
        match s {
            "IPv4" => Some(Family::V4),
            "IPv6" => Some(Family::V6),
            _ => None,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one listener is: unique across the fleet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ListenerKey {
    pub addr: IpAddr,
    pub port: u16,
    pub protocol: Protocol,
}

impl ListenerKey {
    pub fn socket_addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::new(self.addr, self.port)
    }
}

impl fmt::Display for ListenerKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.socket_addr(), self.protocol)
    }
}

impl Serialize for ListenerKey {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A named list of listen addresses.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pool {
    pub name: String,
    pub addresses: Vec<IpAddr>,
}

impl Pool {
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.addresses.contains(&ip)
    }

    /// The families the pool holds addresses of, in the order its first
    /// address of each comes.
    pub fn families(&self) -> Vec<Family> {
        let mut out = Vec::with_capacity(2);
        for a in &self.addresses {
            let f = Family::of(*a);
            if !out.contains(&f) {
                out.push(f);
                if out.len() == 2 {
                    break;
                }
            }
        }
        out
    }
}

/// Why a `--l4-pool` value was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--l4-pool {value:?}: {why}")]
pub struct PoolParseError {
    pub value: String,
    pub why: String,
}

impl FromStr for Pool {
    type Err = PoolParseError;

    /// `NAME=ADDR[,ADDR…]` where each item is an IP address or a CIDR.
    /// A CIDR contributes its host addresses (without network and
    /// broadcast addresses for IPv4 prefixes shorter than /31).
    fn from_str(value: &str) -> Result<Pool, PoolParseError> {
        let err = |why: String| PoolParseError {
            value: value.to_string(),
            why,
        };
        let (name, items) = value
            .split_once('=')
            .ok_or_else(|| err("expected NAME=ADDR[,ADDR…|CIDR]".into()))?;
        let name = name.trim();
        let label_ok = !name.is_empty()
            && name.len() <= 63
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !name.starts_with('-')
            && !name.ends_with('-');
        if !label_ok {
            return Err(err(format!(
                "pool name {name:?} is not a DNS label (lowercase letters, digits, '-')"
            )));
        }
        let mut addresses: Vec<IpAddr> = Vec::new();
        for item in items.split(',').map(str::trim) {
            if item.is_empty() {
                return Err(err("empty address".into()));
            }
            if item.contains('/') {
                let net: IpNet = item
                    .parse()
                    .map_err(|e| err(format!("{item:?} is not a CIDR: {e}")))?;
                let room = MAX_POOL_ADDRESSES.saturating_sub(addresses.len());
                let hosts: Vec<IpAddr> = net.hosts().take(room + 1).collect();
                if hosts.len() > room {
                    return Err(err(format!(
                        "more than {MAX_POOL_ADDRESSES} addresses in one pool"
                    )));
                }
                addresses.extend(hosts);
            } else {
                let ip: IpAddr = item
                    .parse()
                    .map_err(|e| err(format!("{item:?} is not an IP address: {e}")))?;
                addresses.push(ip);
            }
        }
        let mut seen = std::collections::HashSet::new();
        addresses.retain(|a| seen.insert(*a));
        if addresses.len() > MAX_POOL_ADDRESSES {
            return Err(err(format!(
                "more than {MAX_POOL_ADDRESSES} addresses in one pool"
            )));
        }
        for a in &addresses {
            if a.is_unspecified() || a.is_multicast() {
                return Err(err(format!("{a} cannot be a listen address")));
            }
        }
        Ok(Pool {
            name: name.to_string(),
            addresses,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn parses_addresses_and_cidrs_in_order() {
        let p: Pool = "edge=10.0.0.9, 10.0.1.0/30,10.0.0.9,::1".parse().unwrap();
        assert_eq!(p.name, "edge");
        assert_eq!(
            p.addresses,
            [ip("10.0.0.9"), ip("10.0.1.1"), ip("10.0.1.2"), ip("::1")]
        );
        let single: Pool = "default=127.0.0.1/32".parse().unwrap();
        assert_eq!(single.addresses, [ip("127.0.0.1")]);
        let pair: Pool = "p=192.0.2.0/31".parse().unwrap();
        assert_eq!(pair.addresses.len(), 2);
    }

    #[test]
    fn refuses_bad_pools_with_the_reason() {
        for (value, why) in [
            ("nope", "NAME=ADDR"),
            ("Edge=10.0.0.1", "DNS label"),
            ("edge=", "empty address"),
            ("edge=10.0.0.1,,10.0.0.2", "empty address"),
            ("edge=10.0.0.300", "not an IP address"),
            ("edge=10.0.0.0/33", "not a CIDR"),
            ("edge=10.0.0.0/8", "more than 65536"),
            ("edge=0.0.0.0", "cannot be a listen address"),
        ] {
            let e = value.parse::<Pool>().unwrap_err();
            assert!(e.to_string().contains(why), "{value}: {e}");
            assert!(e.to_string().contains(value), "{e}");
        }
    }

    #[test]
    fn families_come_in_pool_order() {
        let p: Pool = "p=2001:db8::10,192.0.2.1,2001:db8::11".parse().unwrap();
        assert_eq!(p.families(), [Family::V6, Family::V4]);
        let p: Pool = "p=192.0.2.0/30".parse().unwrap();
        assert_eq!(p.families(), [Family::V4]);
        assert_eq!(Family::parse("IPv6"), Some(Family::V6));
        assert_eq!(Family::parse("ipv6"), None);
        assert_eq!(Family::of(ip("::1")).to_string(), "IPv6");
    }

    #[test]
    fn keys_print_as_address_and_protocol() {
        let k = ListenerKey {
            addr: ip("::1"),
            port: 53,
            protocol: Protocol::Udp,
        };
        assert_eq!(k.to_string(), "[::1]:53/UDP");
        assert_eq!(Protocol::from_service(None), Ok(Protocol::Tcp));
        assert!(Protocol::from_service(Some("SCTP")).is_err());
    }
}
