//! Whether an L4 address is announced, as the status writer can tell it
//! (docs/announce.md, "Events and conditions"): the `Announced` condition
//! of a Service (and a Gateway) holding an address, while the proxy
//! announces L4 addresses (`--announce-l4` with announcement on).
//!
//! The status writer is one replica, and not necessarily an announcer
//! itself. What it can know of the others:
//!
//! - the pools (every replica runs with the same `--announce-pool`s);
//! - L2: the announcer Leases ([`crate::loops::announcers`]). A replica
//!   holds one only while ready, and it names the pools that replica may
//!   announce (its interface, `subnet=` and `node-label=` decided that),
//!   so the live replicas of a pool and the hash's owner among them are
//!   exactly what the announcers themselves compute;
//! - BGP: nothing. BGP replicas hold no Lease and publish no session
//!   state anywhere but their own `/status` and `/metrics`, so a BGP
//!   address counts as announced once it is in a BGP pool; a replica
//!   without an established session shows in `teapot_bgp_session_established`.

use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};

use crate::compile::snapshot::Condition;
use crate::loops::announcers::{ANNOUNCER_LABEL, AnnouncePool, Mode, View};

/// The condition type, next to the L4 compile's `Allocated`,
/// `PortsAllocated`, `BackendsReady` and `Configured`.
pub const ANNOUNCED: &str = "Announced";

/// What the status writer needs to know of the announcement: present
/// only while L4 addresses are announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceStatusConfig {
    pub pools: Vec<AnnouncePool>,
    /// The announcer Lease duration a Lease without one counts with.
    pub lease_duration: Duration,
}

/// Whether `addr` is announced: True naming its pool and mode (and in L2
/// mode the owning replica), False with the reason it cannot be, Unknown
/// when the L2 announcer Leases cannot be read. `l2`: the announcer
/// Leases as last read and the time to judge them at; `None` when the
/// last read failed.
pub fn announced(addr: IpAddr, pools: &[AnnouncePool], l2: Option<(&View, Instant)>) -> Condition {
    if !crate::loops::announce::routable(&addr) {
        return Condition::new(
            ANNOUNCED,
            false,
            "NotRoutable",
            format!(
                "{addr} is a loopback, link-local, multicast or unspecified address: never announced"
            ),
        );
    }
    let Some(pool) = pools.iter().find(|p| p.contains(&addr)) else {
        return Condition::new(
            ANNOUNCED,
            false,
            "NotInAnnouncePool",
            format!(
                "{addr} is in no --announce-pool, so no replica announces it: add a pool containing it \
                 (--announce-pool NAME={addr},mode=l2|bgp; chart value announce.pools)"
            ),
        );
    };
    let name = &pool.name;
    match pool.mode {
        Mode::Bgp => Condition::new(
            ANNOUNCED,
            true,
            "Announced",
            format!(
                "{addr}: pool {name}, mode bgp: announced to the BGP peers of every ready replica the pool allows"
            ),
        ),
        Mode::L2 => {
            let Some((view, now)) = l2 else {
                return Condition {
                    type_: ANNOUNCED,
                    status: "Unknown",
                    reason: "AnnouncersUnknown",
                    message: format!(
                        "{addr}: pool {name}, mode l2: the announcer Leases cannot be read"
                    ),
                };
            };
            let live = view.live(name, now);
            match teapot_announce::l2::owner(&addr, &live) {
                Some(owner) => Condition::new(
                    ANNOUNCED,
                    true,
                    "Announced",
                    format!("{addr}: pool {name}, mode l2: answered for by replica {owner}"),
                ),
                None => Condition::new(
                    ANNOUNCED,
                    false,
                    "NoAnnouncer",
                    format!(
                        "{addr}: pool {name}, mode l2: no ready replica may announce it (none holds a \
                         current announcer Lease for the pool; the pool's interface=, subnet= and \
                         node-label= decide which replicas may)"
                    ),
                ),
            }
        }
    }
}

/// The announcer Leases as the status writer reads them: a list on each
/// status pass (every status Lease renewal or compile), only while some
/// pool is L2. Liveness is judged as the announcers judge it
/// ([`View::observe`]: a Lease counts live while its resourceVersion
/// changed within its duration, on this replica's clock).
pub struct AnnouncerLeases {
    pub config: AnnounceStatusConfig,
    api: Api<Lease>,
    view: View,
    /// The last list succeeded.
    readable: bool,
}

impl AnnouncerLeases {
    pub fn new(client: kube::Client, namespace: &str, config: AnnounceStatusConfig) -> Self {
        AnnouncerLeases {
            config,
            api: Api::namespaced(client, namespace),
            view: View::default(),
            readable: true,
        }
    }

    /// Reads the Leases again when some pool is L2.
    pub async fn refresh(&mut self) {
        if !self.config.pools.iter().any(|p| p.mode == Mode::L2) {
            return;
        }
        let params = ListParams::default().labels(&format!("{ANNOUNCER_LABEL}=true"));
        match self.api.list(&params).await {
            Ok(list) => {
                self.view
                    .observe(&list.items, Instant::now(), self.config.lease_duration);
                self.readable = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the announcer Leases; the Announced condition of L2 addresses is Unknown until they can be read");
                self.readable = false;
            }
        }
    }

    pub fn condition(&self, addr: IpAddr) -> Condition {
        let l2 = self.readable.then(|| (&self.view, Instant::now()));
        announced(addr, &self.config.pools, l2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::announcers::Observed;
    use std::collections::BTreeSet;

    fn pool(name: &str, range: &str, mode: Mode) -> AnnouncePool {
        AnnouncePool {
            name: name.into(),
            origin: format!("--announce-pool {name}"),
            ranges: vec![range.parse().unwrap()],
            mode,
            interface: (mode == Mode::L2).then(|| "eth1".into()),
            subnet: None,
            node_labels: Vec::new(),
        }
    }

    fn pools() -> Vec<AnnouncePool> {
        vec![
            pool("office", "198.51.100.0/26", Mode::L2),
            pool("wan", "203.0.113.0/24", Mode::Bgp),
        ]
    }

    /// One Lease per `(replica, pools, seen seconds ago)`, 2 s each.
    fn view(now: Instant, leases: &[(&str, &[&str], u64)]) -> View {
        View {
            leases: leases
                .iter()
                .map(|(replica, pools, ago)| {
                    let observed = Observed {
                        replica: replica.to_string(),
                        version: "1".into(),
                        seen: now - Duration::from_secs(*ago),
                        duration: Duration::from_secs(2),
                        pools: pools.iter().map(|p| p.to_string()).collect(),
                        owned: BTreeSet::new(),
                        bfd: None,
                        counts: None,
                    };
                    (replica.to_string(), observed)
                })
                .collect(),
            ..View::default()
        }
    }

    fn addr(a: &str) -> IpAddr {
        a.parse().unwrap()
    }

    #[test]
    fn an_address_in_no_pool_is_not_announced_and_the_message_says_which_flag() {
        let c = announced(
            addr("192.0.2.7"),
            &pools(),
            Some((&View::default(), Instant::now())),
        );
        assert_eq!(
            (c.type_, c.status, c.reason),
            (ANNOUNCED, "False", "NotInAnnouncePool")
        );
        assert!(c.message.contains("192.0.2.7"), "{}", c.message);
        assert!(c.message.contains("--announce-pool"), "{}", c.message);
    }

    #[test]
    fn a_bgp_address_is_announced_naming_pool_and_mode() {
        let c = announced(addr("203.0.113.9"), &pools(), None);
        assert_eq!((c.status, c.reason), ("True", "Announced"));
        assert!(c.message.contains("pool wan, mode bgp"), "{}", c.message);
    }

    #[test]
    fn an_l2_address_names_its_owner_among_the_live_replicas_of_its_pool() {
        let now = Instant::now();
        let v = view(
            now,
            &[
                ("lb-1", &["office"], 0),
                ("lb-2", &["office"], 1),
                ("lb-3", &["other"], 0),
            ],
        );
        let a = addr("198.51.100.7");
        let c = announced(a, &pools(), Some((&v, now)));
        assert_eq!((c.status, c.reason), ("True", "Announced"));
        let live: BTreeSet<String> = ["lb-1".to_string(), "lb-2".to_string()].into();
        let owner = teapot_announce::l2::owner(&a, &live).unwrap();
        assert!(
            c.message.contains(&format!(
                "pool office, mode l2: answered for by replica {owner}"
            )),
            "{}",
            c.message
        );
    }

    #[test]
    fn an_l2_pool_without_a_live_allowed_replica_has_no_announcer() {
        let now = Instant::now();
        // lb-1's Lease is stale; lb-2 may announce another pool only.
        let v = view(now, &[("lb-1", &["office"], 5), ("lb-2", &["other"], 0)]);
        let c = announced(addr("198.51.100.7"), &pools(), Some((&v, now)));
        assert_eq!((c.status, c.reason), ("False", "NoAnnouncer"));
        assert!(c.message.contains("pool office"), "{}", c.message);
        // Leases that cannot be read: not known either way.
        let c = announced(addr("198.51.100.7"), &pools(), None);
        assert_eq!((c.status, c.reason), ("Unknown", "AnnouncersUnknown"));
    }

    #[test]
    fn loopback_is_never_announced_even_inside_a_pool() {
        let everything = vec![pool("all", "0.0.0.0/0", Mode::Bgp)];
        let c = announced(addr("127.0.0.1"), &everything, None);
        assert_eq!((c.status, c.reason), ("False", "NotRoutable"));
    }
}
