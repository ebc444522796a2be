//! Who may announce which address: the pools (docs/announce.md, "Pools").
//!
//! An [`AnnouncePool`] is a range of addresses with its mode (`l2` or
//! `bgp`) and the replicas allowed to announce it (a local address inside
//! `subnet`, node labels). Each address goes by the one pool containing
//! it; an address in no pool is not announced.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// A pool's mode is how its announcer makes the addresses reachable.
pub use teapot_announce::Mode;

/// One `--announce-pool`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnouncePool {
    pub name: String,
    /// The flag that made it, for errors (`--announce-pool lan`,
    /// `--l2-interface`).
    pub origin: String,
    pub ranges: Vec<ipnet::IpNet>,
    pub mode: Mode,
    /// L2: the interface the addresses go on.
    pub interface: Option<String>,
    /// Replicas with a local address inside it may announce the pool.
    pub subnet: Option<ipnet::IpNet>,
    /// Replicas whose Node has every one of these labels may announce it.
    pub node_labels: Vec<(String, String)>,
}

impl AnnouncePool {
    pub fn contains(&self, addr: &IpAddr) -> bool {
        self.ranges.iter().any(|r| r.contains(addr))
    }

    /// Whether a replica with these local addresses and node labels (`None`:
    /// no Node known, manifests mode) may announce this pool.
    pub fn allows(&self, local: &[IpAddr], node_labels: Option<&BTreeMap<String, String>>) -> bool {
        let subnet_ok = self
            .subnet
            .is_none_or(|net| local.iter().any(|a| net.contains(a)));
        let labels_ok = self.node_labels.is_empty()
            || node_labels.is_some_and(|labels| {
                self.node_labels
                    .iter()
                    .all(|(k, v)| labels.get(k).is_some_and(|have| have == v))
            });
        subnet_ok && labels_ok
    }
}

/// Two pools sharing an address would give it two modes or two owners:
/// refused, naming both.
pub fn check_overlap(pools: &[AnnouncePool]) -> Result<(), String> {
    for (i, a) in pools.iter().enumerate() {
        for b in &pools[i + 1..] {
            if a.name == b.name {
                return Err(format!("{}: given twice", a.origin));
            }
            for ra in &a.ranges {
                for rb in &b.ranges {
                    if ra.contains(&rb.network()) || rb.contains(&ra.network()) {
                        return Err(format!(
                            "{} and {} overlap ({ra} and {rb})",
                            a.origin, b.origin
                        ));
                    }
                }
            }
        }
    }
    Ok(())
}

/// The pool (index into `pools`) of each address, and the addresses in
/// no pool.
pub fn classify(
    pools: &[AnnouncePool],
    addrs: &BTreeSet<IpAddr>,
) -> (BTreeMap<usize, BTreeSet<IpAddr>>, BTreeSet<IpAddr>) {
    let mut by_pool: BTreeMap<usize, BTreeSet<IpAddr>> = BTreeMap::new();
    let mut outside = BTreeSet::new();
    for addr in addrs {
        match pools.iter().position(|p| p.contains(addr)) {
            Some(i) => {
                by_pool.entry(i).or_default().insert(*addr);
            }
            None => {
                outside.insert(*addr);
            }
        }
    }
    (by_pool, outside)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(name: &str, ranges: &[&str], mode: Mode) -> AnnouncePool {
        AnnouncePool {
            name: name.into(),
            origin: format!("--announce-pool {name}"),
            ranges: ranges.iter().map(|r| r.parse().unwrap()).collect(),
            mode,
            interface: None,
            subnet: None,
            node_labels: Vec::new(),
        }
    }

    #[test]
    fn each_address_goes_by_its_pool_and_outsiders_are_listed() {
        let pools = [
            pool("lan", &["192.0.2.0/28"], Mode::L2),
            pool("wan", &["203.0.113.10/32", "2001:db8::/64"], Mode::Bgp),
        ];
        let addrs: BTreeSet<IpAddr> = ["192.0.2.5", "203.0.113.10", "2001:db8::1", "198.51.100.1"]
            .iter()
            .map(|a| a.parse().unwrap())
            .collect();
        let (by_pool, outside) = classify(&pools, &addrs);
        assert_eq!(by_pool[&0].len(), 1);
        assert_eq!(by_pool[&1].len(), 2);
        assert_eq!(outside, ["198.51.100.1".parse().unwrap()].into());
    }

    #[test]
    fn overlapping_pools_are_refused_naming_both() {
        let err = check_overlap(&[
            pool("lan", &["192.0.2.0/24"], Mode::L2),
            pool("wan", &["203.0.113.0/24", "192.0.2.128/25"], Mode::Bgp),
        ])
        .unwrap_err();
        assert!(
            err.contains("--announce-pool lan and --announce-pool wan"),
            "{err}"
        );
        assert!(
            check_overlap(&[
                pool("lan", &["192.0.2.0/25"], Mode::L2),
                pool("wan", &["192.0.2.128/25"], Mode::Bgp),
            ])
            .is_ok()
        );
    }

    #[test]
    fn announcers_match_by_subnet_and_node_labels() {
        let mut p = pool("lan", &["192.0.2.0/24"], Mode::L2);
        let local: Vec<IpAddr> = vec!["10.0.0.5".parse().unwrap(), "192.0.2.11".parse().unwrap()];
        assert!(p.allows(&local, None));
        p.subnet = Some("198.51.100.0/24".parse().unwrap());
        assert!(!p.allows(&local, None));
        p.subnet = Some("192.0.2.0/24".parse().unwrap());
        p.node_labels = vec![("zone".into(), "a".into())];
        assert!(
            !p.allows(&local, None),
            "no Node known: a labelled pool is not ours"
        );
        let labels: BTreeMap<String, String> = [("zone".to_string(), "a".to_string())].into();
        assert!(p.allows(&local, Some(&labels)));
        let other: BTreeMap<String, String> = [("zone".to_string(), "b".to_string())].into();
        assert!(!p.allows(&local, Some(&other)));
    }
}
