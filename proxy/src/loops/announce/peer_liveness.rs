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
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use teapot_announce::bfd::{self, BfdStatus, State, Timing};
use tokio::sync::watch;

use crate::loops::announce::live_replicas::View;

/// The replicas' BFD port: not 3784, where a BFD daemon on the node (FRR's
/// bfdd peering with the routers) listens.
pub const DEFAULT_PORT: u16 = 7784;

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
    /// Failed with every other session while this replica was cut off:
    /// another session coming back proves nothing about this one.
    cut: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Track {
    /// The session's failure count last seen: a larger one is a failure.
    failures: u64,
    down: Option<Down>,
    /// Since when the session has been Up without a break.
    up_since: Option<Instant>,
}

/// How long after a failure another session must still be Up for it to
/// count (`confirm_after`), and how long a session must be Up again
/// before a replica counted gone, or this replica cut off, counts again
/// (`hold`): a link that flaps moves addresses once, not at every flap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Rules {
    pub(crate) confirm_after: Duration,
    pub(crate) hold: Duration,
}

impl Rules {
    /// Two intervals to confirm, three to come back.
    pub(crate) fn of(timing: &Timing) -> Rules {
        Rules {
            confirm_after: timing.interval * 2,
            hold: timing.interval * 3,
        }
    }
}

/// Turns the sessions' states into [`View::silenced`] and
/// [`View::cut_off`].
#[derive(Debug, Default)]
pub(crate) struct Judge {
    tracks: BTreeMap<String, Track>,
    /// Sessions that came back Up after a failure ([`View::rejoined`]).
    pub(crate) rejoined: u64,
    /// Since when every session has been down at once, none of the
    /// failures confirmed: this replica is the one cut off.
    pub(crate) cut: Option<Instant>,
    /// When the verdict changes by itself if nothing else does (a
    /// failure due for confirmation, a session Up long enough): the
    /// caller's next look, with no poll in between.
    pub(crate) wake: Option<Instant>,
}

impl Judge {
    /// `statuses`: every session now, by replica; `own_seen`: when this
    /// replica last saw its own Lease renewed.
    pub(crate) fn observe(
        &mut self,
        statuses: &BTreeMap<String, BfdStatus>,
        own_seen: Option<Instant>,
        now: Instant,
        rules: Rules,
    ) -> BTreeMap<String, Instant> {
        self.tracks.retain(|r, _| statuses.contains_key(r));
        let mut wake: Option<Instant> = None;
        let mut wake_at = |at: Instant| {
            if at > now {
                wake = Some(wake.map_or(at, |w| w.min(at)));
            }
        };
        for (replica, status) in statuses {
            let track = self.tracks.entry(replica.clone()).or_insert(Track {
                failures: status.failures,
                down: None,
                up_since: None,
            });
            if status.failures > track.failures {
                track.failures = status.failures;
                // A session failing again before it held Up is the same
                // absence: its first failure stands.
                track.down.get_or_insert(Down {
                    since: now,
                    confirmed: false,
                    cut: false,
                });
                track.up_since = None;
            }
            if status.state != State::Up {
                track.up_since = None;
                continue;
            }
            let up_since = *track.up_since.get_or_insert(now);
            if track.down.is_some() {
                if now >= up_since + rules.hold {
                    track.down = None;
                    self.rejoined += 1;
                } else {
                    wake_at(up_since + rules.hold);
                }
            }
        }
        // Cut off: two sessions or more, every one failed, none of the
        // failures confirmed. Each failure is marked, so the first
        // session back does not confirm the others' (they fail within
        // an interval of each other, and come back up to a second apart
        // at BFD's slow pace).
        let all_failed = self.tracks.len() >= 2
            && self
                .tracks
                .values()
                .all(|t| t.down.is_some_and(|d| !d.confirmed));
        if all_failed {
            for down in self.tracks.values_mut().filter_map(|t| t.down.as_mut()) {
                down.cut = true;
            }
            self.cut.get_or_insert(now);
        }
        if self.cut.is_some() {
            let back = self
                .tracks
                .values()
                .filter_map(|t| t.up_since)
                .any(|up| now >= up + rules.hold);
            if back || self.tracks.len() < 2 {
                self.cut = None;
            }
            for up in self.tracks.values().filter_map(|t| t.up_since) {
                wake_at(up + rules.hold);
            }
        }
        let up: BTreeSet<&String> = statuses
            .iter()
            .filter(|(_, s)| s.state == State::Up)
            .map(|(r, _)| r)
            .collect();
        let single = self.tracks.len() == 1;
        let mut silenced = BTreeMap::new();
        for (replica, track) in &mut self.tracks {
            let Some(down) = &mut track.down else {
                continue;
            };
            // This replica's own renewal back through the API after the
            // failure says the other one is the one gone, unless the
            // failure came with every other session's: a replica back
            // from a cut link renews while the others are as live as
            // ever (with one session left there is nothing to compare).
            let reached_api =
                (!down.cut || single) && own_seen.is_some_and(|seen| seen > down.since);
            let others_up = !down.cut
                && now >= down.since + rules.confirm_after
                && up.iter().any(|r| *r != replica);
            down.confirmed |= reached_api || others_up;
            if down.confirmed {
                silenced.insert(replica.clone(), down.since);
            } else if !down.cut {
                wake_at(down.since + rules.confirm_after);
            }
        }
        self.wake = wake;
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

/// When the next current Lease with a BFD endpoint runs out: its session
/// goes then ([`peers`]), with no poll before.
fn next_expiry(view: &View, now: Instant) -> Option<Instant> {
    view.leases
        .values()
        .filter(|o| o.bfd.is_some())
        .map(|o| o.seen + o.duration)
        .filter(|at| *at > now)
        .min()
}

/// Resolves when the state of a session not in `ended` changes; with the
/// name of a session whose task ended (its state never changes again).
async fn any_changed(
    sessions: &mut BTreeMap<String, (SocketAddr, bfd::Handle)>,
    ended: &BTreeSet<String>,
) -> Option<String> {
    let live: Vec<(&String, &mut bfd::Handle)> = sessions
        .iter_mut()
        .filter(|(replica, _)| !ended.contains(replica.as_str()))
        .map(|(replica, (_, handle))| (replica, handle))
        .collect();
    if live.is_empty() {
        return std::future::pending().await;
    }
    let changes = live.into_iter().map(|(replica, handle)| {
        Box::pin(async move { handle.status.changed().await.err().map(|_| replica.clone()) })
    });
    futures::future::select_all(changes).await.0
}

/// Runs the sessions with the replicas `view` lists and writes
/// [`View::silenced`] and [`View::cut_off`] until aborted. Event-driven:
/// it looks again when the Leases change, when a session's state
/// changes (pushed by the BFD thread), and at the instants a verdict
/// changes by itself (a failure due for confirmation, a session Up long
/// enough, a Lease running out); at rest it sleeps. `wakes` counts its
/// looks (`/metrics`).
pub async fn run(
    me: String,
    config: LivenessConfig,
    view: watch::Sender<View>,
    wakes: Arc<AtomicU64>,
) {
    let listener = bfd::Listener::new(config.port);
    let mut leases = view.subscribe();
    let mut sessions: BTreeMap<String, (SocketAddr, bfd::Handle)> = BTreeMap::new();
    let mut refused: BTreeSet<SocketAddr> = BTreeSet::new();
    // Sessions whose task ended: their last state stands (as a session
    // never started does) and they are not waited on, or a task that
    // ends at once would be restarted in a loop.
    let mut ended: BTreeSet<String> = BTreeSet::new();
    let mut judge = Judge::default();
    let rules = Rules::of(&config.timing);
    tracing::info!(endpoint = %config.endpoint(), interval = ?config.timing.interval, multiplier = config.timing.multiplier, "BFD with the other announcers");
    loop {
        wakes.fetch_add(1, Ordering::Relaxed);
        let now = Instant::now();
        let (wanted, own_seen, ghosts, expiry) = {
            let v = leases.borrow_and_update();
            (
                peers(&v, &me, &config, now),
                v.leases.get(&me).map(|o| o.seen),
                ghosts(&v, &me, &config),
                next_expiry(&v, now),
            )
        };
        sessions.retain(|r, (at, _)| wanted.get(r) == Some(at));
        ended.retain(|r| sessions.contains_key(r));
        let mut retry = None;
        for (replica, at) in &wanted {
            if sessions.contains_key(replica) {
                continue;
            }
            match bfd::start(&listener, config.local, at.ip(), at.port(), config.timing) {
                Ok(handle) => {
                    refused.remove(at);
                    sessions.insert(replica.clone(), (*at, handle));
                }
                // Retried an interval later (a session just dropped may
                // still hold the address); said once.
                Err(e) => {
                    retry = Some(now + config.timing.interval);
                    if refused.insert(*at) {
                        tracing::warn!(%replica, endpoint = %at, error = %e, "BFD with the announcer not started; liveness by its Lease");
                    }
                }
            }
        }
        let statuses: BTreeMap<String, BfdStatus> = sessions
            .iter_mut()
            .map(|(r, (_, h))| (r.clone(), *h.status.borrow_and_update()))
            .collect();
        let was_cut = judge.cut.is_some();
        let mut silenced = judge.observe(&statuses, own_seen, Instant::now(), rules);
        let cut_off = judge.cut.is_some();
        if cut_off && !was_cut {
            tracing::warn!(
                sessions = statuses.len(),
                "every BFD session failed at once: this replica is the one cut off; it holds and takes no L2 address until a session is back"
            );
        } else if was_cut && !cut_off {
            tracing::info!("BFD session back: this replica counts itself live again");
        }
        for (replica, since) in ghosts {
            silenced.entry(replica).or_insert(since);
        }
        let states: BTreeMap<String, State> =
            statuses.iter().map(|(r, s)| (r.clone(), s.state)).collect();
        view.send_if_modified(|v| {
            if v.silenced == silenced
                && v.bfd == states
                && v.rejoined == judge.rejoined
                && v.cut_off == cut_off
            {
                return false;
            }
            v.bfd = states;
            v.rejoined = judge.rejoined;
            v.cut_off = cut_off;
            for (replica, _) in silenced
                .iter()
                .filter(|(r, _)| !v.silenced.contains_key(*r))
            {
                tracing::warn!(%replica, "announcer silent on BFD: counted gone");
            }
            v.silenced = silenced;
            true
        });
        // A change written here wakes this loop once more, to find
        // nothing new: marking it seen could hide a Lease change that
        // came in meanwhile.
        let deadline = [judge.wake, expiry, retry].into_iter().flatten().min();
        tokio::select! {
            r = leases.changed() => if r.is_err() { return },
            gone = any_changed(&mut sessions, &ended) => {
                if let Some(replica) = gone {
                    tracing::warn!(%replica, "BFD session with the announcer ended; liveness by its Lease");
                    ended.insert(replica);
                }
            }
            _ = async { tokio::time::sleep_until(deadline.unwrap_or_else(Instant::now).into()).await }, if deadline.is_some() => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIRM: Duration = Duration::from_millis(200);
    const HOLD: Duration = Duration::from_millis(300);
    const RULES: Rules = Rules {
        confirm_after: CONFIRM,
        hold: HOLD,
    };

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
        use crate::loops::announce::live_replicas::Observed;
        let t0 = Instant::now();
        let config = LivenessConfig {
            local: "192.0.2.10".parse().unwrap(),
            port: DEFAULT_PORT,
            timing: crate::loops::announce::config::DEFAULT_L2_BFD,
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
        assert!(judge.observe(&up, None, t0, RULES).is_empty());
        assert_eq!(judge.wake, None, "nothing due: no look until an event");
        let b_failed = statuses(&[("b", State::Down, 1), ("c", State::Up, 0)]);
        let t1 = t0 + Duration::from_secs(1);
        // Not yet: this replica may be the one cut off. The next look is
        // due when the failure can be confirmed.
        assert!(judge.observe(&b_failed, None, t1, RULES).is_empty());
        assert_eq!(judge.wake, Some(t1 + CONFIRM));
        let silenced = judge.observe(&b_failed, None, t1 + CONFIRM, RULES);
        assert_eq!(silenced, [("b".to_string(), t1)].into());
        assert_eq!(judge.cut, None);
        // b comes back: counted again once its session has stayed Up for
        // the hold, not at its first packet.
        let t2 = t1 + CONFIRM * 2;
        let back = statuses(&[("b", State::Up, 1), ("c", State::Up, 0)]);
        assert_eq!(
            judge.observe(&back, None, t2, RULES),
            [("b".to_string(), t1)].into()
        );
        assert_eq!((judge.rejoined, judge.wake), (0, Some(t2 + HOLD)));
        // It flaps: down again before the hold, still gone.
        let again = statuses(&[("b", State::Down, 2), ("c", State::Up, 0)]);
        let t3 = t2 + HOLD / 2;
        assert!(judge.observe(&again, None, t3, RULES).contains_key("b"));
        let t4 = t3 + CONFIRM;
        let back = statuses(&[("b", State::Up, 2), ("c", State::Up, 0)]);
        judge.observe(&back, None, t4, RULES);
        assert!(judge.observe(&back, None, t4 + HOLD, RULES).is_empty());
        assert_eq!((judge.rejoined, judge.wake), (1, None));
    }

    #[test]
    fn a_replica_cut_off_counts_itself_out_and_back_once_a_session_holds() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        let up = statuses(&[("b", State::Up, 0), ("c", State::Up, 0)]);
        judge.observe(&up, None, t0, RULES);
        // Both fail within one interval: this replica is the one cut off.
        let t1 = t0 + Duration::from_secs(1);
        let one = statuses(&[("b", State::Down, 1), ("c", State::Up, 0)]);
        assert!(judge.observe(&one, None, t1, RULES).is_empty());
        assert_eq!(judge.cut, None);
        let both = statuses(&[("b", State::Down, 1), ("c", State::Down, 1)]);
        let later = t1 + Duration::from_millis(100);
        assert!(judge.observe(&both, None, later, RULES).is_empty());
        assert_eq!(judge.cut, Some(later));
        // Its own renewal back through the API (its link is back) says
        // nothing about the others: they renew as well.
        let seen = later + CONFIRM * 3;
        assert!(judge.observe(&both, Some(seen), seen, RULES).is_empty());
        assert_eq!(judge.cut, Some(later));
        // b's session comes back first; c's at BFD's slow pace, up to a
        // second later. Neither failure is confirmed by the other session
        // coming back, and the replica counts itself once b's session has
        // held.
        let b_back = statuses(&[("b", State::Up, 1), ("c", State::Down, 1)]);
        let t2 = seen + CONFIRM;
        assert!(judge.observe(&b_back, Some(seen), t2, RULES).is_empty());
        assert_eq!((judge.cut, judge.wake), (Some(later), Some(t2 + HOLD)));
        assert!(
            judge
                .observe(&b_back, Some(seen), t2 + HOLD, RULES)
                .is_empty()
        );
        assert_eq!(judge.cut, None);
        assert!(
            judge
                .observe(&b_back, Some(seen), t2 + HOLD * 5, RULES)
                .is_empty(),
            "c's failure came with the cut: b being up proves nothing"
        );
        let all_back = statuses(&[("b", State::Up, 1), ("c", State::Up, 1)]);
        let t3 = t2 + HOLD * 6;
        judge.observe(&all_back, Some(seen), t3, RULES);
        assert!(
            judge
                .observe(&all_back, Some(seen), t3 + HOLD, RULES)
                .is_empty()
        );
        // Twice a reason to announce again what it owns.
        assert_eq!(judge.rejoined, 2);
    }

    #[test]
    fn a_replica_cut_off_whose_peers_leases_ran_out_is_alone_again() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        judge.observe(
            &statuses(&[("b", State::Up, 0), ("c", State::Up, 0)]),
            None,
            t0,
            RULES,
        );
        let both = statuses(&[("b", State::Down, 1), ("c", State::Down, 1)]);
        judge.observe(&both, None, t0, RULES);
        assert!(judge.cut.is_some());
        // Both really died: their Leases ran out, their sessions went.
        judge.observe(&BTreeMap::new(), None, t0 + Duration::from_secs(2), RULES);
        assert_eq!(judge.cut, None);
    }

    #[test]
    fn with_one_other_replica_the_own_lease_confirms() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        judge.observe(&statuses(&[("b", State::Up, 0)]), None, t0, RULES);
        let t1 = t0 + Duration::from_secs(1);
        let failed = statuses(&[("b", State::Down, 1)]);
        assert!(judge.observe(&failed, None, t1, RULES).is_empty());
        assert!(judge.observe(&failed, None, t1 + CONFIRM, RULES).is_empty());
        let renewed = t1 + Duration::from_millis(700);
        assert_eq!(
            judge.observe(&failed, Some(renewed), renewed, RULES),
            [("b".to_string(), t1)].into()
        );
    }

    #[test]
    fn failures_before_the_first_look_and_sessions_never_up_change_nothing() {
        let mut judge = Judge::default();
        let t0 = Instant::now();
        let old = statuses(&[("b", State::Down, 4), ("c", State::Up, 0)]);
        assert!(judge.observe(&old, Some(t0), t0, RULES).is_empty());
        assert!(
            judge
                .observe(&old, Some(t0 + CONFIRM * 2), t0 + CONFIRM * 2, RULES)
                .is_empty()
        );
        // A session that goes away takes its failure with it.
        let mut judge = Judge::default();
        judge.observe(&statuses(&[("b", State::Up, 0)]), None, t0, RULES);
        judge.observe(&statuses(&[("b", State::Down, 1)]), None, t0, RULES);
        assert!(
            judge
                .observe(&BTreeMap::new(), Some(t0 + CONFIRM), t0 + CONFIRM, RULES)
                .is_empty()
        );
    }
}
