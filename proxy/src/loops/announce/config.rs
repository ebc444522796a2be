//! What the announcement is told at start: the pools, the fleet's
//! addresses, L2 membership timing; and which addresses this replica
//! announces now.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::time::Duration;

use teapot_announce::SpeakerConfig;

use super::pools::AnnouncePool;
use crate::compile::snapshot::Snapshot;

/// How often readiness is looked at while the replica is not ready yet
/// (it turns ready once, after the first full list, and the follow loop
/// is stopped before the shutdown turns it back). Everything else wakes
/// the loop when it changes: a snapshot swapped in, the Leases, BFD, the
/// own Lease's health, and the instant the next Lease runs out.
pub(super) const FOLLOW_EVERY: Duration = Duration::from_millis(100);

/// The announcer Lease of a replica with BGP pools only: it carries the
/// sessions for the `Announced` condition, which may lag by a renewal, and
/// the replicas' liveness for it (no owner to move), so one API write
/// every 5 s per replica, and a replica gone is noticed within 15 s.
pub const BGP_RENEW: Duration = Duration::from_secs(5);
pub const BGP_LEASE: Duration = Duration::from_secs(15);

/// How long a stopping replica waits for the next owners to take its L2
/// addresses before it removes them anyway.
pub const HAND_OVER_BOUND: Duration = Duration::from_secs(5);

/// BFD between the replicas by default: 300 ms to count a silent one gone.
pub const DEFAULT_L2_BFD: teapot_announce::bfd::Timing = teapot_announce::bfd::Timing {
    interval: Duration::from_millis(100),
    multiplier: 3,
};

/// L2 membership timing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct L2Options {
    /// This replica's name in the hash and on its Lease.
    pub replica: String,
    pub renew_every: Duration,
    pub lease_duration: Duration,
    pub repeat_for: Duration,
    /// BFD with the other replicas (`--l2-bfd`); `None`: liveness by the
    /// Lease alone.
    pub bfd: Option<teapot_announce::bfd::Timing>,
    pub bfd_port: u16,
}

impl Default for L2Options {
    fn default() -> L2Options {
        L2Options {
            replica: crate::loops::announce::membership::replica_name(
                &teapot_api::lease::default_identity(),
            ),
            renew_every: Duration::from_secs(1),
            lease_duration: Duration::from_secs(2),
            repeat_for: teapot_announce::l2::DEFAULT_REPEAT_FOR,
            bfd: Some(DEFAULT_L2_BFD),
            bfd_port: crate::loops::announce::peer_liveness::DEFAULT_PORT,
        }
    }
}

#[derive(Clone, Debug)]
pub struct AnnounceConfig {
    /// BGP; `None` without `--bgp-peer`.
    pub speaker: Option<SpeakerConfig>,
    /// The fleet's own addresses (the ones `*.lb.DOMAIN` points at).
    pub addresses: BTreeSet<IpAddr>,
    /// Also every address an L4 Service holds.
    pub l4: bool,
    /// Each with its mode; never empty (the flags make a default pool).
    pub pools: Vec<AnnouncePool>,
    pub l2: L2Options,
    /// The Node this replica runs on (`NODE_NAME`), for `node-label=`.
    pub node_name: Option<String>,
}

/// Where the Leases live in kube mode.
#[derive(Clone)]
pub struct KubeMembership {
    pub client: kube::Client,
    pub namespace: String,
}

/// An address a router could send traffic to: not loopback (the default
/// L4 pool is 127.0.0.1), unspecified, link-local or multicast.
pub(crate) fn routable(addr: &IpAddr) -> bool {
    let local = match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => a.is_unicast_link_local(),
    };
    !(addr.is_loopback() || addr.is_unspecified() || addr.is_multicast() || local)
}

/// What this replica announces now: nothing unless ready.
pub fn wanted(config: &AnnounceConfig, snapshot: &Snapshot, ready: bool) -> BTreeSet<IpAddr> {
    if !ready {
        return BTreeSet::new();
    }
    let mut set = config.addresses.clone();
    if config.l4
        && let Some(l4) = &snapshot.l4
    {
        // Both addresses of a dual-stack Service.
        set.extend(l4.holdings.values().flat_map(|h| h.addrs()));
    }
    set.retain(routable);
    set
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A speaker with no peers announcing 203.0.113.10, no pools.
    pub(in crate::loops::announce) fn config(l4: bool) -> AnnounceConfig {
        AnnounceConfig {
            speaker: Some(SpeakerConfig::new(64501, Vec::new())),
            addresses: ["203.0.113.10".parse().unwrap()].into(),
            l4,
            pools: Vec::new(),
            l2: L2Options::default(),
            node_name: None,
        }
    }

    #[test]
    fn nothing_is_announced_unless_ready() {
        let config = config(true);
        let snapshot = Snapshot::default();
        assert!(wanted(&config, &snapshot, false).is_empty());
        assert_eq!(wanted(&config, &snapshot, true), config.addresses);
    }

    #[test]
    fn allocated_l4_addresses_join_but_loopback_never_does() {
        use crate::compile::l4::L4Compiled;
        use crate::compile::l4::allocation::Holding;
        use teapot_model::store::NsName;

        let holding = |addr: &str| Holding::single(addr.parse().unwrap(), None);
        let snapshot = Snapshot {
            l4: Some(L4Compiled {
                holdings: [
                    (NsName::new("tenant-a", "db"), holding("203.0.113.20")),
                    (NsName::new("tenant-b", "dns"), holding("127.0.0.1")),
                    // Dual-stack: both addresses.
                    (
                        NsName::new("tenant-c", "web"),
                        Holding {
                            addresses: ["203.0.113.30", "2001:db8::30"]
                                .iter()
                                .map(|a| crate::compile::l4::allocation::HeldAddress {
                                    addr: a.parse().unwrap(),
                                    ports: None,
                                })
                                .collect(),
                        },
                    ),
                ]
                .into(),
                ..L4Compiled::default()
            }),
            ..Snapshot::default()
        };
        let mut config = config(true);
        let got: Vec<String> = wanted(&config, &snapshot, true)
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(
            got,
            [
                "203.0.113.10",
                "203.0.113.20",
                "203.0.113.30",
                "2001:db8::30"
            ]
        );
        config.l4 = false;
        assert_eq!(wanted(&config, &snapshot, true), config.addresses);
    }
}
