//! Kubernetes Events for this replica's BGP sessions (docs/announce.md,
//! "Events and conditions"). BGP replicas publish their sessions nowhere
//! but their own `/status` and `/metrics`, so the status writer's
//! `Announced` condition cannot say that a router no longer hears from a
//! replica; each replica says it of itself, on its Pod: a Warning
//! `BGPSessionDown` when a session is lost or cannot be established (the
//! router then has none of this replica's routes), a Normal
//! `BGPSessionEstablished` when it is (again). One Event per change of a
//! session, never one per retry of a peer that keeps refusing.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use teapot_announce::{PeerStatus, SessionState, Statuses};
use tokio::sync::watch;

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
