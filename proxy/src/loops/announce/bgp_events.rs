//! Kubernetes Events for this replica's BGP sessions (docs/announce.md,
//! "Events and conditions"). BGP replicas publish their sessions nowhere
//! but their own `/status` and `/metrics`, so the status writer's
//! `Announced` condition cannot say that a router no longer hears from a
//! replica; each replica says it of itself, on its Pod: a Warning
//! `BGPSessionDown` when a session is lost or cannot be established (the
//! router then has none of this replica's routes), a Normal
//! `BGPSessionEstablished` when it is (again). One Event per change of a
//! session, never one per retry of a peer that keeps refusing.
//!
//! The replica also publishes how many of its sessions are established,
//! per family, on its announcer Lease ([`BGP_ANNOTATION`]), from which the
//! status writer's `Announced` condition tells whether some replica
//! announces an address ([`super::announced`]).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use teapot_announce::wire::Family;
use teapot_announce::{PeerStatus, SessionState, Statuses};
use tokio::sync::watch;

/// A replica's BGP sessions on its announcer Lease:
/// `peers=N,ipv4=E,ipv6=E`, the configured peers and the established
/// sessions carrying each family.
pub const BGP_ANNOTATION: &str = "teapot.dev/announce-bgp";

/// What [`BGP_ANNOTATION`] says.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BgpSessions {
    pub peers: usize,
    pub ipv4: usize,
    pub ipv6: usize,
}

impl BgpSessions {
    pub fn of<'a>(statuses: impl IntoIterator<Item = &'a PeerStatus>) -> BgpSessions {
        let mut out = BgpSessions::default();
        for s in statuses {
            out.peers += 1;
            if s.state != SessionState::Established {
                continue;
            }
            for family in &s.families {
                match family {
                    Family::Ipv4 => out.ipv4 += 1,
                    Family::Ipv6 => out.ipv6 += 1,
                }
            }
        }
        out
    }

    pub fn render(&self) -> String {
        format!("peers={},ipv4={},ipv6={}", self.peers, self.ipv4, self.ipv6)
    }

    /// Unknown keys are skipped (a later build may say more); a value that
    /// is no number makes the whole annotation unreadable.
    pub fn parse(text: &str) -> Option<BgpSessions> {
        let mut out = BgpSessions::default();
        for part in text.split(',').filter(|p| !p.is_empty()) {
            let (key, value) = part.split_once('=')?;
            let n: usize = value.parse().ok()?;
            match key {
                "peers" => out.peers = n,
                "ipv4" => out.ipv4 = n,
                "ipv6" => out.ipv6 = n,
                _ => {}
            }
        }
        Some(out)
    }

    pub fn carrying(&self, family: Family) -> usize {
        match family {
            Family::Ipv4 => self.ipv4,
            Family::Ipv6 => self.ipv6,
        }
    }
}

/// Keeps `annotations` holding [`BGP_ANNOTATION`] with this replica's
/// sessions, changed only when what it says changes (not on every
/// announcement counted or BFD packet), for the announcer Lease's next
/// renewal. Ends when the speaker is gone.
pub async fn publish_bgp_sessions(
    statuses: Statuses,
    annotations: watch::Sender<BTreeMap<String, String>>,
) {
    let mut peers = statuses.receivers();
    if peers.is_empty() {
        return;
    }
    loop {
        let now = BgpSessions::of(
            &peers
                .iter_mut()
                .map(|r| r.borrow_and_update().clone())
                .collect::<Vec<_>>(),
        )
        .render();
        annotations.send_if_modified(|a| {
            if a.get(BGP_ANNOTATION) == Some(&now) {
                return false;
            }
            a.insert(BGP_ANNOTATION.to_string(), now);
            true
        });
        let changes = peers.iter_mut().map(|r| Box::pin(r.changed()));
        if futures::future::select_all(changes).await.0.is_err() {
            return;
        }
    }
}

/// The Pod Events are about: `POD_NAME` (the chart sets it from the
/// downward API), else `HOSTNAME`, which is the Pod's name unless it runs
/// on the host's network.
pub fn this_pod(namespace: &str) -> Option<ObjectReference> {
    let name = ["POD_NAME", "HOSTNAME"]
        .into_iter()
        .find_map(|v| std::env::var(v).ok().filter(|n| !n.is_empty()))?;
    Some(ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: Some(name),
        namespace: Some(namespace.into()),
        ..ObjectReference::default()
    })
}

/// What to tell of `status`, given whether the last Event said the
/// session was up (`None`: nothing said yet): `Some(up)` on a change. A
/// session that has not failed yet (still connecting at start) is not
/// reported down.
fn change(said: Option<bool>, status: &PeerStatus) -> Option<bool> {
    let up = status.state == SessionState::Established;
    let down = !up && status.last_error.is_some();
    match (said, up, down) {
        (Some(true), true, _) | (Some(false), _, true) => None,
        (_, true, _) => Some(true),
        (_, _, true) => Some(false),
        _ => None,
    }
}

fn event(up: bool, status: &PeerStatus) -> Event {
    let peer = status.peer;
    if up {
        Event {
            type_: EventType::Normal,
            reason: "BGPSessionEstablished".into(),
            note: Some(format!(
                "BGP session to {peer} (AS {}) established: this replica's addresses are announced to it",
                status.remote_asn
            )),
            action: "Announce".into(),
            secondary: None,
        }
    } else {
        let why = status.last_error.as_deref().unwrap_or("not established");
        Event {
            type_: EventType::Warning,
            reason: "BGPSessionDown".into(),
            note: Some(
                format!(
                    "BGP session to {peer} (AS {}) is down: {why}; the router has none of this \
                     replica's routes until it is established again (retried with backoff)",
                    status.remote_asn
                )
                .chars()
                .take(1000)
                .collect(),
            ),
            action: "Announce".into(),
            secondary: None,
        }
    }
}

/// Follows every peer's status until `stop`, publishing an Event on each
/// change through `recorder` about `pod`.
pub async fn run(
    statuses: Statuses,
    client: kube::Client,
    pod: ObjectReference,
    mut stop: watch::Receiver<bool>,
) {
    let recorder = Recorder::new(
        client,
        Reporter {
            controller: "teapot-proxy".into(),
            instance: pod.name.clone(),
        },
    );
    let mut peers: Vec<(watch::Receiver<PeerStatus>, Option<bool>)> = statuses
        .receivers()
        .into_iter()
        .map(|r| (r, None))
        .collect();
    if peers.is_empty() {
        return;
    }
    loop {
        for (receiver, said) in &mut peers {
            let status = receiver.borrow_and_update().clone();
            if let Some(up) = change(*said, &status) {
                match recorder.publish(&event(up, &status), &pod).await {
                    Ok(()) => *said = Some(up),
                    Err(e) => {
                        tracing::warn!(peer = %status.peer, error = %e, "cannot publish the BGP session Event; retrying at the next change")
                    }
                }
            }
        }
        let changed =
            futures::future::select_all(peers.iter_mut().map(|(r, _)| Box::pin(r.changed())));
        tokio::select! {
            (result, _, _) = changed => if result.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn sessions(peers: usize, ipv4: usize, ipv6: usize) -> BgpSessions {
        BgpSessions { peers, ipv4, ipv6 }
    }

    #[test]
    fn the_bgp_annotation_reads_back_what_is_written_and_skips_what_it_does_not_know() {
        let peer = |spec: &str, state: SessionState, families: &[Family]| PeerStatus {
            state,
            families: families.to_vec(),
            ..PeerStatus::new(&spec.parse().unwrap())
        };
        let statuses = [
            peer(
                "192.0.2.1,64500",
                SessionState::Established,
                &[Family::Ipv4],
            ),
            peer(
                "2001:db8::1,64500",
                SessionState::Established,
                &[Family::Ipv4, Family::Ipv6],
            ),
            peer("192.0.2.5,64500", SessionState::Connect, &[]),
        ];
        let s = BgpSessions::of(&statuses);
        assert_eq!(s, sessions(3, 2, 1));
        assert_eq!(s.render(), "peers=3,ipv4=2,ipv6=1");
        assert_eq!(BgpSessions::parse(&s.render()), Some(s));
        assert_eq!(
            BgpSessions::parse("ipv6=1,later=x9,peers=1"),
            None,
            "a value that is no number"
        );
        assert_eq!(
            BgpSessions::parse("ipv6=1,later=9,peers=1"),
            Some(sessions(1, 0, 1))
        );
    }

    #[tokio::test]
    async fn the_annotation_changes_with_the_sessions_not_with_counters() {
        let peer: teapot_announce::PeerConfig = "192.0.2.1,64500".parse().unwrap();
        let (status, status_rx) = watch::channel(PeerStatus::new(&peer));
        let statuses = Statuses::from(vec![status_rx]);
        let (tx, mut rx) = watch::channel(BTreeMap::new());
        let task = tokio::spawn(publish_bgp_sessions(statuses, tx));
        rx.changed().await.unwrap();
        assert_eq!(
            rx.borrow_and_update()
                .get(BGP_ANNOTATION)
                .map(String::as_str),
            Some("peers=1,ipv4=0,ipv6=0")
        );
        status.send_modify(|s| {
            s.state = SessionState::Established;
            s.families = vec![Family::Ipv4];
        });
        rx.changed().await.unwrap();
        assert_eq!(
            rx.borrow_and_update()
                .get(BGP_ANNOTATION)
                .map(String::as_str),
            Some("peers=1,ipv4=1,ipv6=0")
        );
        // A counter moves: nothing to publish.
        status.send_modify(|s| s.announcements_sent += 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!rx.has_changed().unwrap());
        drop(status);
        task.await.unwrap();
    }

    fn status(state: SessionState, error: Option<&str>) -> PeerStatus {
        PeerStatus {
            state,
            last_error: error.map(str::to_string),
            ..PeerStatus::new(
                &"192.0.2.1,65000"
                    .parse::<teapot_announce::PeerConfig>()
                    .expect("a peer"),
            )
        }
    }

    #[test]
    fn one_event_per_change_never_one_per_retry() {
        let connecting = status(SessionState::Connect, None);
        let refused = status(
            SessionState::Idle,
            Some("peer sent NOTIFICATION Bad Peer AS"),
        );
        let up = status(SessionState::Established, None);
        assert_eq!(change(None, &connecting), None, "still connecting at start");
        assert_eq!(change(None, &refused), Some(false));
        assert_eq!(
            change(Some(false), &refused),
            None,
            "the next retry fails alike"
        );
        assert_eq!(change(Some(false), &connecting), None);
        assert_eq!(change(Some(false), &up), Some(true));
        assert_eq!(change(Some(true), &up), None);
        let lost = status(SessionState::Connect, Some("hold timer expired"));
        assert_eq!(change(Some(true), &lost), Some(false));
        let e = event(false, &lost);
        assert_eq!(e.reason, "BGPSessionDown");
        assert!(e.note.unwrap().contains("192.0.2.1:179"));
    }
}
