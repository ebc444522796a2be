//! Makes this replica's addresses reachable over BGP (docs/announce.md):
//! the fleet's own addresses and every allocated L4 address, announced by
//! a `teapot_announce::Speaker` while the replica is ready and withdrawn
//! when it is not. On shutdown the speaker's graceful stop
//! (GRACEFUL_SHUTDOWN, a wait, the withdrawal) runs before the drain, so
//! routers move new connections away while requests still finish.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use teapot_announce::{Speaker, SpeakerConfig, Statuses};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::compile::snapshot::Snapshot;

/// How often readiness and the snapshot's L4 addresses are looked at: an
/// atomic load and a walk over the holdings, cheap at this rate, and no
/// hook into the reload loop or the readiness owners.
const FOLLOW_EVERY: Duration = Duration::from_millis(250);

#[derive(Clone, Debug)]
pub struct AnnounceConfig {
    pub speaker: SpeakerConfig,
    /// The fleet's own addresses (the ones `*.lb.DOMAIN` points at).
    pub addresses: BTreeSet<IpAddr>,
    /// Also every address an L4 Service holds.
    pub l4: bool,
}

/// An address a router could send traffic to: not loopback (the default
/// L4 pool is 127.0.0.1), unspecified, link-local or multicast.
fn routable(addr: &IpAddr) -> bool {
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
        set.extend(l4.holdings.values().map(|h| h.addr));
    }
    set.retain(routable);
    set
}

#[derive(Debug)]
pub struct Announcer {
    speaker: Speaker,
    follow: JoinHandle<()>,
}

impl Announcer {
    pub fn start(
        config: AnnounceConfig,
        snapshots: Arc<ArcSwap<Snapshot>>,
        ready: Arc<AtomicBool>,
    ) -> Result<Announcer, teapot_announce::Error> {
        let initial = wanted(&config, &snapshots.load(), ready.load(Ordering::Acquire));
        let (addrs, addrs_rx) = watch::channel(initial);
        let speaker = Speaker::start(config.speaker.clone(), addrs_rx)?;
        let follow = tokio::spawn(async move {
            let mut tick = tokio::time::interval(FOLLOW_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let now = wanted(&config, &snapshots.load(), ready.load(Ordering::Acquire));
                addrs.send_if_modified(|set| {
                    if *set == now {
                        return false;
                    }
                    tracing::info!(announced = now.len(), "BGP announcement set changed");
                    *set = now;
                    true
                });
            }
        });
        Ok(Announcer { speaker, follow })
    }

    pub fn statuses(&self) -> Statuses {
        self.speaker.statuses()
    }

    /// Stops following readiness (the shutdown's own `ready = false` must
    /// not withdraw ahead of the graceful sequence), then runs it.
    pub async fn stop(self) {
        self.follow.abort();
        self.speaker.stop().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_is_announced_unless_ready() {
        let config = AnnounceConfig {
            speaker: SpeakerConfig::new(64501, Vec::new()),
            addresses: ["203.0.113.10".parse().unwrap()].into(),
            l4: true,
        };
        let snapshot = Snapshot::default();
        assert!(wanted(&config, &snapshot, false).is_empty());
        assert_eq!(wanted(&config, &snapshot, true), config.addresses);
    }

    #[test]
    fn allocated_l4_addresses_join_but_loopback_never_does() {
        use crate::compile::l4::L4Compiled;
        use crate::compile::l4::allocation::Holding;
        use teapot_model::store::NsName;

        let holding = |addr: &str| Holding {
            addr: addr.parse().unwrap(),
            ports: None,
        };
        let snapshot = Snapshot {
            l4: Some(L4Compiled {
                holdings: [
                    (NsName::new("tenant-a", "db"), holding("203.0.113.20")),
                    (NsName::new("tenant-b", "dns"), holding("127.0.0.1")),
                ]
                .into(),
                ..L4Compiled::default()
            }),
            ..Snapshot::default()
        };
        let mut config = AnnounceConfig {
            speaker: SpeakerConfig::new(64501, Vec::new()),
            addresses: ["203.0.113.10".parse().unwrap()].into(),
            l4: true,
        };
        let got: Vec<String> = wanted(&config, &snapshot, true)
            .iter()
            .map(|a| a.to_string())
            .collect();
        assert_eq!(got, ["203.0.113.10", "203.0.113.20"]);
        config.l4 = false;
        assert_eq!(wanted(&config, &snapshot, true), config.addresses);
    }
}
