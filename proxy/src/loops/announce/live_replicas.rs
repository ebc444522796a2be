//! Which announcer replicas are live, as this replica sees them: the
//! view built from the announcer Leases ([`super::membership`] writes and
//! watches them) and from BFD between the replicas
//! ([`super::peer_liveness`]). Below both, so each reads and writes it
//! without importing the other.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;

/// The label every announcer Lease carries (what the watch selects).
pub const ANNOUNCER_LABEL: &str = "teapot.dev/announcer";
/// Comma-separated pool names this replica may announce.
pub const POOLS_ANNOTATION: &str = "teapot.dev/announce-pools";
/// Comma-separated addresses this replica holds on its interface now.
pub const OWNED_ANNOTATION: &str = "teapot.dev/announce-owned";
/// Where this replica answers BFD from the others of its L2 pools
/// (`ADDR:PORT`; absent without `--l2-bfd`).
pub const BFD_ANNOTATION: &str = "teapot.dev/announce-bfd";
/// Comma-separated replicas this one counted live when it wrote its
/// Lease (itself among them once its own watch shows its renewals): what
/// makes it live for the others ([`View::live`]).
pub const LIVE_ANNOTATION: &str = "teapot.dev/announce-live";
/// The Lease duration in milliseconds: `leaseDurationSeconds` is whole
/// seconds, and without BFD the default is 1.5 s.
pub const LEASE_MS_ANNOTATION: &str = "teapot.dev/announce-lease-ms";
/// Lease name prefix; the rest is the replica's name.
pub const LEASE_PREFIX: &str = "teapot-announcer-";

/// One announcer Lease as this replica last saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observed {
    pub replica: String,
    /// The Lease's resourceVersion: a new one is a renewal.
    pub version: String,
    /// When this replica saw that version first (its own clock).
    pub seen: Instant,
    pub duration: Duration,
    pub pools: BTreeSet<String>,
    pub owned: BTreeSet<IpAddr>,
    /// Its BFD endpoint ([`BFD_ANNOTATION`]).
    pub bfd: Option<SocketAddr>,
    /// The replicas it counted live ([`LIVE_ANNOTATION`]); `None`: a
    /// build that does not say, taken as counting itself.
    pub counts: Option<BTreeSet<String>>,
}

/// A replica whose Lease this long after its BFD session failed is a
/// renewal that was already on its way: still gone.
pub const RENEWAL_IN_FLIGHT: Duration = Duration::from_millis(500);

/// Every announcer Lease this replica knows of, by replica name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct View {
    /// This replica's name: its own Lease needs no word from itself.
    pub me: String,
    pub leases: BTreeMap<String, Observed>,
    /// Replicas whose BFD session with this one failed, and when
    /// ([`crate::loops::announce::peer_liveness`]): gone at once, unless their
    /// Lease is renewed after that (a BFD path broken between live
    /// replicas costs one move of their addresses, not two owners for
    /// good).
    pub silenced: BTreeMap<String, Instant>,
    /// The state of each BFD session with another replica.
    pub bfd: BTreeMap<String, teapot_announce::bfd::State>,
    /// Counts BFD sessions that came back Up after failing: the others
    /// may have counted this replica gone meanwhile, so it announces what
    /// it owns again.
    pub rejoined: u64,
    /// Every BFD session of this replica failed at once and none of the
    /// failures is confirmed: this replica is the one cut off (its link
    /// down, its node frozen). It counts itself gone, so it releases its
    /// addresses, takes none and its Lease does not name it live, until
    /// a session has been Up again for a while
    /// ([`crate::loops::announce::peer_liveness`]).
    pub cut_off: bool,
}

impl View {
    /// Takes the watch's current Leases: a changed resourceVersion is a
    /// renewal seen now; a Lease gone is a replica gone.
    pub fn observe<'a>(
        &mut self,
        leases: impl IntoIterator<Item = &'a Lease>,
        now: Instant,
        default_duration: Duration,
    ) {
        let mut next = BTreeMap::new();
        for lease in leases {
            let Some(replica) = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()) else {
                continue;
            };
            let version = lease.metadata.resource_version.clone().unwrap_or_default();
            let annotation = |key: &str| {
                lease
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(key))
                    .map(String::as_str)
                    .unwrap_or("")
                    .to_string()
            };
            let seen = match self.leases.get(&replica) {
                Some(old) if old.version == version => old.seen,
                _ => now,
            };
            let duration = match annotation(LEASE_MS_ANNOTATION).parse::<u64>() {
                Ok(ms) if ms > 0 => Duration::from_millis(ms),
                _ => lease
                    .spec
                    .as_ref()
                    .and_then(|s| s.lease_duration_seconds)
                    .and_then(|s| u64::try_from(s).ok())
                    .map_or(default_duration, Duration::from_secs),
            };
            next.insert(
                replica.clone(),
                Observed {
                    replica,
                    version,
                    seen,
                    duration,
                    pools: annotation(POOLS_ANNOTATION)
                        .split(',')
                        .filter(|p| !p.is_empty())
                        .map(String::from)
                        .collect(),
                    owned: annotation(OWNED_ANNOTATION)
                        .split(',')
                        .filter_map(|a| a.parse().ok())
                        .collect(),
                    bfd: annotation(BFD_ANNOTATION).parse().ok(),
                    counts: lease
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(LIVE_ANNOTATION))
                        .map(|l| {
                            l.split(',')
                                .filter(|r| !r.is_empty())
                                .map(String::from)
                                .collect()
                        }),
                },
            );
        }
        self.leases = next;
    }

    /// Replicas allowed to announce `pool` whose Lease changed within its
    /// duration, confirmed both ways: this replica sees the Lease renewed
    /// (and BFD has not said otherwise since), and the Lease says its
    /// holder counted itself live when it wrote it, so its own watch of
    /// the Leases is current and it takes what the hash gives it. A
    /// replica whose renewals reach the API while its own watch is stale
    /// (back from a cut link, its watch still in TCP back-off) is no
    /// candidate: the others keep its addresses.
    pub fn live(&self, pool: &str, now: Instant) -> BTreeSet<String> {
        self.leases
            .values()
            .filter(|o| o.pools.contains(pool) && self.is_live(o, now))
            .map(|o| o.replica.clone())
            .collect()
    }

    /// Every replica live now, any pool.
    pub fn live_any(&self, now: Instant) -> BTreeSet<String> {
        self.leases
            .values()
            .filter(|o| self.is_live(o, now))
            .map(|o| o.replica.clone())
            .collect()
    }

    /// The live replicas of `pool` and what every Lease lists as held:
    /// what an L2 announcer of the pool follows.
    pub fn replicas(&self, pool: &str, now: Instant) -> teapot_announce::l2::Replicas {
        teapot_announce::l2::Replicas {
            live: self.live(pool, now),
            listed: self
                .leases
                .values()
                .map(|o| (o.replica.clone(), o.owned.clone()))
                .collect(),
        }
    }

    /// The next instant a replica's liveness changes by itself, without
    /// any event: the soonest Lease to run out. What a follower of this
    /// view sleeps until, at the latest.
    pub fn next_expiry(&self, now: Instant) -> Option<Instant> {
        self.leases
            .values()
            .map(|o| o.seen + o.duration)
            .filter(|at| *at > now)
            .min()
    }

    fn is_live(&self, o: &Observed, now: Instant) -> bool {
        let silent = self
            .silenced
            .get(&o.replica)
            .is_some_and(|since| o.seen < *since + RENEWAL_IN_FLIGHT);
        let confirmed = if o.replica == self.me {
            !self.cut_off
        } else {
            o.counts.as_ref().is_none_or(|c| c.contains(&o.replica))
        };
        now.duration_since(o.seen) < o.duration && !silent && confirmed
    }
}
