//! BFD between the replicas of the L2 pools (`--l2-bfd`, docs/announce.md
//! "L2 mode"): a replica that dies, loses its link or goes silent is
//! counted gone within the BFD detection time (300 ms at `100x3`) instead
//! of when its announcer Lease runs out (up to `--l2-lease`, 2 s), so its
//! addresses move in well under a second. The Lease stays the membership
//! and the last word:
//!
//! - Each replica publishes its BFD endpoint on its Lease
//!   ([`super::live_replicas::BFD_ANNOTATION`]) and runs one single-hop BFD
//!   session (RFC 5880/5881, the speaker's own implementation) with every
//!   other replica that publishes one.
//! - A session that was Up and failed puts the replica in
//!   [`View::silenced`]: gone for the hash at once. A session that never
//!   came Up (the port blocked between nodes) changes nothing: liveness
//!   by the Lease alone.
//! - Its Lease renewed after the failure brings it back: a BFD path broken
//!   between live replicas moves their addresses once, it does not make
//!   two owners for good.
//! - A replica cut off itself sees every session fail within about one
//!   interval. So a failure counts only when another session is still Up
//!   two intervals later, or when this replica's own Lease renewal came
//!   back through the API after it; a replica on a dead link takes
//!   nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use teapot_announce::bfd::{self, BfdStatus, State, Timing};
use tokio::sync::watch;

use crate::loops::live_replicas::View;

/// The replicas' BFD port: not 3784, where a BFD daemon on the node (FRR's
/// bfdd peering with the routers) listens.
pub const DEFAULT_PORT: u16 = 7784;
/// How often the sessions' states are looked at: small beside the
/// detection time.
const POLL: Duration = Duration::from_millis(20);

/// Where this replica answers BFD, and how fast.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LivenessConfig {
    /// Its address on the L2 interface.
    pub local: IpAddr,
    pub port: u16,
    pub timing: Timing,
}

impl LivenessConfig {
    /// What the Lease publishes.
    pub fn endpoint(&self) -> SocketAddr {
        SocketAddr::new(self.local, self.port)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Down {
    since: Instant,
    confirmed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Track {
    /// The session's failure count last seen: a larger one is a failure.
    failures: u64,
    down: Option<Down>,
}

/// Turns the sessions' states into [`View::silenced`].
#[derive(Debug, Default)]
pub(crate) struct Judge {
    tracks: BTreeMap<String, Track>,
    /// Sessions that came back Up after a failure ([`View::rejoined`]).
    pub(crate) rejoined: u64,
}

impl Judge {
    /// `statuses`: every session now, by replica; `own_seen`: when this
    /// replica last saw its own Lease renewed; `confirm_after`: how long
    /// after a failure another session must still be Up for it to count
    /// without waiting for the Lease.
    pub(crate) fn observe(
        &mut self,
        statuses: &BTreeMap<String, BfdStatus>,
        own_seen: Option<Instant>,
        now: Instant,
        confirm_after: Duration,
    ) -> BTreeMap<String, Instant> {
        self.tracks.retain(|r, _| statuses.contains_key(r));
        for (replica, status) in statuses {
            let track = self.tracks.entry(replica.clone()).or_insert(Track {
                failures: status.failures,
                down: None,
            });
            if status.failures > track.failures {
                track.failures = status.failures;
                track.down = Some(Down {
                    since: now,
                    confirmed: false,
                });
            }
            if status.state == State::Up && track.down.take().is_some() {
                self.rejoined += 1;
            }
        }
        let up: BTreeSet<&String> = statuses
            .iter()
            .filter(|(_, s)| s.state == State::Up)
            .map(|(r, _)| r)
            .collect();
        let mut silenced = BTreeMap::new();
        for (replica, track) in &mut self.tracks {
            let Some(down) = &mut track.down else {
                continue;
            };
            let reached_api = own_seen.is_some_and(|seen| seen > down.since);
            let others_up = now >= down.since + confirm_after && up.iter().any(|r| *r != replica);
            down.confirmed |= reached_api || others_up;
            if down.confirmed {
                silenced.insert(replica.clone(), down.since);
            }
        }
        silenced
    }
}

/// Replicas whose Lease publishes an endpoint that is someone else's now:
/// this replica's own, or one a Lease renewed later also publishes. That
/// is a run killed on its node whose Lease lingers, its node's address
/// and port taken by its restart (under another name: the process id is
/// part of it). Counted gone at once rather than for the rest of its
/// Lease; and no session goes to this replica's own endpoint, where it
/// would answer itself and keep the dead one live. Silenced since its
/// Lease's version was seen, so no renewal of it counts as coming after.
fn ghosts(view: &View, me: &str, config: &LivenessConfig) -> BTreeMap<String, Instant> {
    view.leases
        .values()
        .filter(|o| o.replica != me)
        .filter(|o| {
            o.bfd.is_some_and(|at| {
                at == config.endpoint()
                    || view.leases.values().any(|newer| {
                        newer.replica != o.replica && newer.bfd == Some(at) && newer.seen > o.seen
                    })
            })
        })
        .map(|o| (o.replica.clone(), o.seen))
        .collect()
}

/// The replicas to run a session with, by name: every other one whose
/// Lease is current and publishes an endpoint of this replica's family,
/// other than this replica's own endpoint ([`ghosts`]). A replica
/// restarted on the same node publishes the endpoint its killed run did,
/// whose Lease lingers until it expires: the Lease seen renewed last has
/// it.
fn peers(
    view: &View,
    me: &str,
    config: &LivenessConfig,
    now: Instant,
) -> BTreeMap<String, SocketAddr> {
    let mut by_endpoint: BTreeMap<SocketAddr, (&str, Instant)> = BTreeMap::new();
    for o in view.leases.values() {
        let Some(at) = o.bfd else { continue };
        if o.replica == me
            || at == config.endpoint()
            || at.is_ipv4() != config.local.is_ipv4()
            || now.duration_since(o.seen) >= o.duration
        {
            continue;
        }
        let newer = by_endpoint.get(&at).is_none_or(|(_, seen)| o.seen > *seen);
        if newer {
            by_endpoint.insert(at, (&o.replica, o.seen));
        }
    }
    by_endpoint
        .into_iter()
        .map(|(at, (replica, _))| (replica.to_string(), at))
        .collect()
}

/// Runs the sessions with the replicas `view` lists and writes
/// [`View::silenced`] until aborted.
pub async fn run(me: String, config: LivenessConfig, view: watch::Sender<View>) {
    let listener = bfd::Listener::new(config.port);
    let mut leases = view.subscribe();
    let mut sessions: BTreeMap<String, (SocketAddr, bfd::Handle)> = BTreeMap::new();
    let mut refused: BTreeSet<SocketAddr> = BTreeSet::new();
    let mut judge = Judge::default();
    tracing::info!(endpoint = %config.endpoint(), interval = ?config.timing.interval, multiplier = config.timing.multiplier, "BFD with the other announcers");
    loop {
        let (wanted, own_seen, ghosts) = {
            let v = leases.borrow_and_update();
            (
                peers(&v, &me, &config, Instant::now()),
                v.leases.get(&me).map(|o| o.seen),
                ghosts(&v, &me, &config),
            )
        };
        sessions.retain(|r, (at, _)| wanted.get(r) == Some(at));
        for (replica, at) in &wanted {
            if sessions.contains_key(replica) {
                continue;
            }
            match bfd::start(&listener, config.local, at.ip(), at.port(), config.timing) {
                Ok(handle) => {
                    refused.remove(at);
                    sessions.insert(replica.clone(), (*at, handle));
                }
                // Retried on the next look (a session just dropped may
                // still hold the address); said once.
                Err(e) if refused.insert(*at) => {
                    tracing::warn!(%replica, endpoint = %at, error = %e, "BFD with the announcer not started; liveness by its Lease");
                }
                Err(_) => {}
            }
        }
        let statuses: BTreeMap<String, BfdStatus> = sessions
            .iter()
            .map(|(r, (_, h))| (r.clone(), *h.status.borrow()))
            .collect();
        let mut silenced = judge.observe(
            &statuses,
            own_seen,
            Instant::now(),
            config.timing.interval * 2,
        );
        for (replica, since) in ghosts {
            silenced.entry(replica).or_insert(since);
        }
        let states: BTreeMap<String, State> =
            statuses.iter().map(|(r, s)| (r.clone(), s.state)).collect();
        view.send_if_modified(|v| {
            if v.silenced == silenced && v.bfd == states && v.rejoined == judge.rejoined {
                return false;
            }
            v.bfd = states;
            v.rejoined = judge.rejoined;
            for (replica, _) in silenced
                .iter()
                .filter(|(r, _)| !v.silenced.contains_key(*r))
            {
                tracing::warn!(%replica, "announcer silent on BFD: counted gone");
            }
            v.silenced = silenced;
            true
        });
        tokio::select! {
            r = leases.changed() => if r.is_err() { return },
            _ = tokio::time::sleep(POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIRM: Duration = Duration::from_millis(200);

    fn status(state: State, failures: u64) -> BfdStatus {
        BfdStatus {
            state,
            diag: 0,
            failures,
        }
    }

    fn statuses(list: &[(&str, State, u64)]) -> BTreeMap<String, BfdStatus> {
        list.iter()
            .map(|(r, s, f)| (r.to_string(), status(*s, *f)))
            .collect()
    }

    #[test]
    fn sessions_go_to_current_leases_never_to_itself_and_a_reused_endpoint_to_the_newest() {
        use crate::loops::live_replicas::Observed;
        let t0 = Instant::now();
        let config = LivenessConfig {
            local: "192.0.2.10".parse().unwrap(),
            port: DEFAULT_PORT,
            timing: crate::loops::announce::DEFAULT_L2_BFD,
        };
        let observed = |replica: &str, seen: Instant, bfd: Option<&str>| Observed {
            replica: replica.into(),
            version: "1".into(),
            seen,
            duration: Duration::from_secs(2),
            pools: BTreeSet::new(),
            owned: BTreeSet::new(),
            bfd: bfd.map(|b| b.parse().unwrap()),
            counts: None,
        };
        let mut view = View::default();
        for o in [
            observed("a-1", t0, Some("192.0.2.10:7784")),
            // Killed on this node; a-1 is its restart under a new name.
            observed("z-0", t0, Some("192.0.2.10:7784")),
            // Killed, and b-9 is its restart on the same node.
            observed("b-1", t0, Some("192.0.2.11:7784")),
            observed("b-9", t0 + Duration::from_secs(1), Some("192.0.2.11:7784")),
            observed("c-1", t0, None),
            observed("d-1", t0, Some("[2001:db8::13]:7784")),
            observed("e-1", t0 - Duration::from_secs(5), Some("192.0.2.14:7784")),
        ] {
            view.leases.insert(o.replica.clone(), o);
        }
        let now = t0 + Duration::from_secs(1);
        assert_eq!(
            peers(&view, "a-1", &config, now),
            [("b-9".to_string(), "192.0.2.11:7784".parse().unwrap())].into(),
            "no session with its own endpoint"
        );
        // The Lease publishing this replica's endpoint is counted gone, and
        // so is b-1, whose endpoint b-9 took.
        assert_eq!(
            ghosts(&view, "a-1", &config),
            [("b-1".to_string(), t0), ("z-0".to_string(), t0)].into()
        );
    }

    #[test]
    fn a_failure_counts_once_another_session_is_still_up() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        let up = statuses(&[("b", State::Up, 0), ("c", State::Up, 0)]);
        assert!(judge.observe(&up, None, t0, CONFIRM).is_empty());
        let b_failed = statuses(&[("b", State::Down, 1), ("c", State::Up, 0)]);
        let t1 = t0 + Duration::from_secs(1);
        // Not yet: this replica may be the one cut off.
        assert!(judge.observe(&b_failed, None, t1, CONFIRM).is_empty());
        let silenced = judge.observe(&b_failed, None, t1 + CONFIRM, CONFIRM);
        assert_eq!(silenced, [("b".to_string(), t1)].into());
        // b comes back.
        assert_eq!(judge.rejoined, 0);
        let back = statuses(&[("b", State::Up, 1), ("c", State::Up, 0)]);
        assert!(
            judge
                .observe(&back, None, t1 + CONFIRM * 2, CONFIRM)
                .is_empty()
        );
        assert_eq!(judge.rejoined, 1);
    }

    #[test]
    fn a_replica_cut_off_takes_nothing_until_its_own_lease_comes_back() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        let up = statuses(&[("b", State::Up, 0), ("c", State::Up, 0)]);
        judge.observe(&up, None, t0, CONFIRM);
        // Both fail within one interval: this replica is the one cut off.
        let t1 = t0 + Duration::from_secs(1);
        let one = statuses(&[("b", State::Down, 1), ("c", State::Up, 0)]);
        assert!(judge.observe(&one, None, t1, CONFIRM).is_empty());
        let both = statuses(&[("b", State::Down, 1), ("c", State::Down, 1)]);
        let later = t1 + Duration::from_millis(100);
        assert!(judge.observe(&both, None, later, CONFIRM).is_empty());
        assert!(
            judge
                .observe(&both, Some(t0), later + CONFIRM * 10, CONFIRM)
                .is_empty(),
            "an old renewal of its own proves nothing"
        );
        // Its own renewal made it through the API after the failures:
        // the others are the ones gone.
        let seen = later + CONFIRM * 11;
        let silenced = judge.observe(&both, Some(seen), seen, CONFIRM);
        assert_eq!(silenced.keys().collect::<Vec<_>>(), ["b", "c"]);
        // Its link back, both sessions come Up: twice a reason to
        // announce again what it owns.
        let back = statuses(&[("b", State::Up, 1), ("c", State::Up, 1)]);
        assert!(judge.observe(&back, Some(seen), seen, CONFIRM).is_empty());
        assert_eq!(judge.rejoined, 2);
    }

    #[test]
    fn with_one_other_replica_the_own_lease_confirms() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        judge.observe(&statuses(&[("b", State::Up, 0)]), None, t0, CONFIRM);
        let t1 = t0 + Duration::from_secs(1);
        let failed = statuses(&[("b", State::Down, 1)]);
        assert!(judge.observe(&failed, None, t1, CONFIRM).is_empty());
        assert!(
            judge
                .observe(&failed, None, t1 + CONFIRM, CONFIRM)
                .is_empty()
        );
        let renewed = t1 + Duration::from_millis(700);
        assert_eq!(
            judge.observe(&failed, Some(renewed), renewed, CONFIRM),
            [("b".to_string(), t1)].into()
        );
    }

    #[test]
    fn failures_before_the_first_look_and_sessions_never_up_change_nothing() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        let old = statuses(&[("b", State::Down, 4), ("c", State::Up, 0)]);
        assert!(judge.observe(&old, Some(t0), t0, CONFIRM).is_empty());
        assert!(
            judge
                .observe(&old, Some(t0 + CONFIRM * 2), t0 + CONFIRM * 2, CONFIRM)
                .is_empty()
        );
        // A session that goes away takes its failure with it.
        let mut judge = Judge::default();
        judge.observe(&statuses(&[("b", State::Up, 0)]), None, t0, CONFIRM);
        judge.observe(&statuses(&[("b", State::Down, 1)]), None, t0, CONFIRM);
        assert!(
            judge
                .observe(&BTreeMap::new(), Some(t0 + CONFIRM), t0 + CONFIRM, CONFIRM)
                .is_empty()
        );
    }
}
