//! Whether an L4 address is announced, as the status writer can tell it
//! (docs/announce.md, "Events and conditions"): the `Announced` condition
//! of a Service (and a Gateway) holding an address, while the proxy
//! announces L4 addresses (`--announce-l4` with announcement on).
//!
//! The status writer is one replica, and not necessarily an announcer
//! itself. What it can know of the others:
//!
//! - the pools (every replica runs with the same `--announce-pool`s);
//! - L2: the announcer Leases ([`crate::loops::announce::membership`]). A replica
//!   holds one only while ready, and it names the pools that replica may
//!   announce (its interface, `subnet=` and `node-label=` decided that),
//!   so the live replicas of a pool and the hash's owner among them are
//!   exactly what the announcers themselves compute;
//! - BGP: the same Leases. A replica with a BGP speaker holds one too
//!   (naming the BGP pools it may announce), and carries its sessions on
//!   it ([`BGP_ANNOTATION`]: how many are established for each family).
//!   The annotation rides on the renewals the Lease has anyway, so a
//!   session that comes and goes costs no API write of its own and the
//!   others read it at most one renewal late. A BGP address is announced
//!   when some live replica allowed to announce its pool has an
//!   established session carrying its family.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams};
use teapot_announce::wire::Family;

use crate::loops::announce::bgp_events::{BGP_ANNOTATION, BgpSessions};

use crate::compile::snapshot::Condition;
use crate::loops::announce::membership::{ANNOUNCER_LABEL, View};
use crate::loops::announce::pools::{AnnouncePool, Mode};

/// The condition type, next to the L4 compile's `Allocated`,
/// `PortsAllocated`, `BackendsReady` and `Configured`.
pub const ANNOUNCED: &str = "Announced";

/// What the status writer knows of the announcers when their Leases could
/// be read: the Leases, each replica's BGP sessions, and the time to
/// judge liveness at.
#[derive(Clone, Copy)]
pub struct Announcers<'a> {
    pub view: &'a View,
    pub bgp: &'a BTreeMap<String, BgpSessions>,
    pub now: Instant,
}

fn family_name(family: Family) -> &'static str {
    match family {
        Family::Ipv4 => "IPv4",
        Family::Ipv6 => "IPv6",
    }
}

/// A BGP pool's address: announced when a live replica allowed to
/// announce the pool has an established session carrying its family.
/// Live here is a Lease renewed within its duration: no owner moves on
/// it, so it needs none of the L2 confirmation ([`View::live`]) that
/// keeps a replica out for a renewal after it starts.
fn announced_by_bgp(addr: IpAddr, pool: &str, announcers: Announcers) -> Condition {
    let family = Family::of(&addr);
    let live: std::collections::BTreeSet<String> = announcers
        .view
        .leases
        .values()
        .filter(|o| o.pools.contains(pool) && announcers.now.duration_since(o.seen) < o.duration)
        .map(|o| o.replica.clone())
        .collect();
    if live.is_empty() {
        return Condition::new(
            ANNOUNCED,
            false,
            "NoAnnouncer",
            format!(
                "{addr}: pool {pool}, mode bgp: no ready replica may announce it (none holds a \
                 current announcer Lease for the pool; the pool's subnet= and node-label= decide \
                 which replicas may)"
            ),
        );
    }
    let sessions = |r: &String| announcers.bgp.get(r).copied().unwrap_or_default();
    let carrying: Vec<&String> = live
        .iter()
        .filter(|r| sessions(r).carrying(family) > 0)
        .collect();
    let name = family_name(family);
    if !carrying.is_empty() {
        let count: usize = carrying.iter().map(|r| sessions(r).carrying(family)).sum();
        let names: Vec<&str> = carrying.iter().map(|r| r.as_str()).collect();
        return Condition::new(
            ANNOUNCED,
            true,
            "Announced",
            format!(
                "{addr}: pool {pool}, mode bgp: announced over {count} established BGP session(s) carrying {name}, by replica(s) {}",
                names.join(", ")
            ),
        );
    }
    let other: Vec<&str> = live
        .iter()
        .filter(|r| {
            let s = sessions(r);
            s.ipv4 + s.ipv6 > 0
        })
        .map(|r| r.as_str())
        .collect();
    let message = if other.is_empty() {
        format!(
            "{addr}: pool {pool}, mode bgp: none of the {} ready replica(s) that may announce it has an \
             established BGP session (their teapot_bgp_session_established and BGPSessionDown Events say why)",
            live.len()
        )
    } else {
        format!(
            "{addr}: pool {pool}, mode bgp: no established BGP session carries {name}; replica(s) {} have \
             sessions for the other family only (a session over {name}, or next-hop= for {name} on the \
             other family's session, carries it)",
            other.join(", ")
        )
    };
    Condition::new(ANNOUNCED, false, "NoBGPSession", message)
}

/// What the status writer needs to know of the announcement: present
/// only while L4 addresses are announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceStatusConfig {
    pub pools: Vec<AnnouncePool>,
    /// The announcer Lease duration a Lease without one counts with.
    pub lease_duration: Duration,
}

/// Whether `addr` is announced: True naming its pool and mode (and the
/// owning replica in L2 mode, the replicas with sessions in BGP mode),
/// False with the reason it cannot be, Unknown when the announcer Leases
/// cannot be read. `announcers`: `None` when the last read failed.
pub fn announced(
    addr: IpAddr,
    pools: &[AnnouncePool],
    announcers: Option<Announcers>,
) -> Condition {
    if !crate::loops::announce::config::routable(&addr) {
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
    let Some(announcers) = announcers else {
        return Condition {
            type_: ANNOUNCED,
            status: "Unknown",
            reason: "AnnouncersUnknown",
            message: format!(
                "{addr}: pool {name}, mode {}: the announcer Leases cannot be read",
                pool.mode.as_str()
            ),
        };
    };
    match pool.mode {
        Mode::Bgp => announced_by_bgp(addr, name, announcers),
        Mode::L2 => {
            let live = announcers.view.live(name, announcers.now);
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
/// status pass (every status Lease renewal or compile). Liveness is judged as the announcers judge it
/// ([`View::observe`]: a Lease counts live while its resourceVersion
/// changed within its duration, on this replica's clock).
pub struct AnnouncerLeases {
    pub config: AnnounceStatusConfig,
    api: Api<Lease>,
    view: View,
    /// Each replica's [`BGP_ANNOTATION`], by the Lease's holder.
    bgp: BTreeMap<String, BgpSessions>,
    /// The last list succeeded.
    readable: bool,
}

impl AnnouncerLeases {
    pub fn new(client: kube::Client, namespace: &str, config: AnnounceStatusConfig) -> Self {
        AnnouncerLeases {
            config,
            api: Api::namespaced(client, namespace),
            view: View::default(),
            bgp: BTreeMap::new(),
            readable: true,
        }
    }

    /// Reads the Leases again.
    pub async fn refresh(&mut self) {
        if self.config.pools.is_empty() {
            return;
        }
        let params = ListParams::default().labels(&format!("{ANNOUNCER_LABEL}=true"));
        match self.api.list(&params).await {
            Ok(list) => {
                self.view
                    .observe(&list.items, Instant::now(), self.config.lease_duration);
                self.bgp = bgp_sessions(&list.items);
                self.readable = true;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot list the announcer Leases; the Announced condition is Unknown until they can be read");
                self.readable = false;
            }
        }
    }

    pub fn condition(&self, addr: IpAddr) -> Condition {
        let announcers = self.readable.then(|| Announcers {
            view: &self.view,
            bgp: &self.bgp,
            now: Instant::now(),
        });
        announced(addr, &self.config.pools, announcers)
    }
}

/// [`BGP_ANNOTATION`] of each Lease that has a readable one, by holder.
fn bgp_sessions(leases: &[Lease]) -> BTreeMap<String, BgpSessions> {
    leases
        .iter()
        .filter_map(|lease| {
            let holder = lease.spec.as_ref()?.holder_identity.clone()?;
            let text = lease.metadata.annotations.as_ref()?.get(BGP_ANNOTATION)?;
            Some((holder, BgpSessions::parse(text)?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loops::announce::membership::Observed;
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
            pool("wan6", "2001:db8:ffff::/64", Mode::Bgp),
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

    const NO_BGP: &BTreeMap<String, BgpSessions> = &BTreeMap::new();

    fn at<'a>(
        view: &'a View,
        bgp: &'a BTreeMap<String, BgpSessions>,
        now: Instant,
    ) -> Option<Announcers<'a>> {
        Some(Announcers { view, bgp, now })
    }

    #[test]
    fn an_address_in_no_pool_is_not_announced_and_the_message_says_which_flag() {
        let view = View::default();
        let c = announced(
            addr("192.0.2.7"),
            &pools(),
            at(&view, NO_BGP, Instant::now()),
        );
        assert_eq!(
            (c.type_, c.status, c.reason),
            (ANNOUNCED, "False", "NotInAnnouncePool")
        );
        assert!(c.message.contains("192.0.2.7"), "{}", c.message);
        assert!(c.message.contains("--announce-pool"), "{}", c.message);
    }

    fn sessions(peers: usize, ipv4: usize, ipv6: usize) -> BgpSessions {
        BgpSessions { peers, ipv4, ipv6 }
    }

    #[test]
    fn a_bgp_address_is_announced_when_a_live_replica_has_a_session_of_its_family() {
        let now = Instant::now();
        let v = view(
            now,
            &[
                ("lb-1", &["wan", "wan6"], 0),
                ("lb-2", &["wan", "wan6"], 1),
                // Gone: its Lease ran out; what it said no longer counts.
                ("lb-3", &["wan", "wan6"], 5),
            ],
        );
        let bgp: BTreeMap<String, BgpSessions> = [
            ("lb-1".to_string(), sessions(2, 1, 0)),
            ("lb-2".to_string(), sessions(2, 0, 0)),
            ("lb-3".to_string(), sessions(2, 2, 2)),
        ]
        .into();
        let c = announced(addr("203.0.113.9"), &pools(), at(&v, &bgp, now));
        assert_eq!((c.status, c.reason), ("True", "Announced"), "{}", c.message);
        assert!(c.message.contains("pool wan, mode bgp"), "{}", c.message);
        assert!(
            c.message
                .contains("1 established BGP session(s) carrying IPv4, by replica(s) lb-1"),
            "{}",
            c.message
        );
        // No live replica has an IPv6 session: the message says so.
        let c = announced(addr("2001:db8:ffff::10"), &pools(), at(&v, &bgp, now));
        assert_eq!((c.status, c.reason), ("False", "NoBGPSession"));
        assert!(
            c.message
                .contains("no established BGP session carries IPv6")
                && c.message.contains("lb-1"),
            "{}",
            c.message
        );
    }

    #[test]
    fn a_bgp_address_without_any_established_session_or_announcer_is_not_announced() {
        let now = Instant::now();
        let v = view(now, &[("lb-1", &["wan"], 0), ("lb-2", &["wan"], 0)]);
        // lb-2 is a build that does not publish its sessions: none known.
        let bgp: BTreeMap<String, BgpSessions> = [("lb-1".to_string(), sessions(2, 0, 0))].into();
        let c = announced(addr("203.0.113.9"), &pools(), at(&v, &bgp, now));
        assert_eq!((c.status, c.reason), ("False", "NoBGPSession"));
        assert!(
            c.message.contains(
                "none of the 2 ready replica(s) that may announce it has an established BGP session"
            ),
            "{}",
            c.message
        );
        // No replica may announce the pool at all.
        let v = view(now, &[("lb-1", &["office"], 0)]);
        let c = announced(addr("203.0.113.9"), &pools(), at(&v, &bgp, now));
        assert_eq!((c.status, c.reason), ("False", "NoAnnouncer"));
        assert!(c.message.contains("pool wan, mode bgp"), "{}", c.message);
        // Leases that cannot be read: not known either way.
        let c = announced(addr("203.0.113.9"), &pools(), None);
        assert_eq!((c.status, c.reason), ("Unknown", "AnnouncersUnknown"));
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
        let c = announced(a, &pools(), at(&v, NO_BGP, now));
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
        let c = announced(addr("198.51.100.7"), &pools(), at(&v, NO_BGP, now));
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
