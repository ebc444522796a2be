//! The speaker: one session task per configured peer, all announcing the
//! same watched address set, stopped together with the graceful sequence.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::Error;
use crate::peer::{PeerConfig, PeerStatus};
use crate::session::{self, Shared};

/// How long routers get to move traffic away after the GRACEFUL_SHUTDOWN
/// announcement before the routes are withdrawn, when none is configured.
pub const DEFAULT_GRACEFUL_SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
pub struct SpeakerConfig {
    pub local_asn: u32,
    /// BGP identifier; by default the session's local IPv4 address.
    pub router_id: Option<Ipv4Addr>,
    pub graceful_shutdown_wait: Duration,
    pub peers: Vec<PeerConfig>,
}

impl SpeakerConfig {
    pub fn new(local_asn: u32, peers: Vec<PeerConfig>) -> SpeakerConfig {
        SpeakerConfig {
            local_asn,
            router_id: None,
            graceful_shutdown_wait: DEFAULT_GRACEFUL_SHUTDOWN_WAIT,
            peers,
        }
    }

    pub fn validate(&self) -> Result<(), Error> {
        let mut seen = BTreeSet::new();
        for peer in &self.peers {
            peer.validate(self.local_asn)?;
            if !seen.insert(peer.socket_addr()) {
                return Err(Error::Config {
                    setting: format!("BGP peer {}", peer.socket_addr()),
                    reason: "configured twice".into(),
                });
            }
        }
        Ok(())
    }
}

/// Every peer's status, readable from anywhere (`/status`, metrics) while
/// the speaker runs.
#[derive(Debug, Clone, Default)]
pub struct Statuses(Vec<watch::Receiver<PeerStatus>>);

impl Statuses {
    pub fn snapshot(&self) -> Vec<PeerStatus> {
        self.0.iter().map(|r| r.borrow().clone()).collect()
    }
}

/// The running speaker. Dropping it without [`Speaker::stop`] ends the
/// sessions abruptly (routers fall back on their hold timers).
#[derive(Debug)]
pub struct Speaker {
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    statuses: Statuses,
}

impl Speaker {
    /// Starts one session task per peer on the current tokio runtime;
    /// each announces `addrs` as it changes.
    pub fn start(
        config: SpeakerConfig,
        addrs: watch::Receiver<BTreeSet<IpAddr>>,
    ) -> Result<Speaker, Error> {
        config.validate()?;
        let shared = Arc::new(Shared {
            local_asn: config.local_asn,
            router_id: config.router_id,
            graceful_shutdown_wait: config.graceful_shutdown_wait,
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut statuses = Vec::new();
        for peer in config.peers {
            let (status, status_rx) = watch::channel(PeerStatus::new(&peer));
            statuses.push(status_rx);
            tasks.spawn(session::run(
                shared.clone(),
                peer,
                addrs.clone(),
                stop_rx.clone(),
                status,
            ));
        }
        Ok(Speaker {
            stop,
            tasks,
            statuses: Statuses(statuses),
        })
    }

    pub fn statuses(&self) -> Statuses {
        self.statuses.clone()
    }

    /// The graceful stop: every established session re-announces its
    /// routes with GRACEFUL_SHUTDOWN, waits the configured moment, then
    /// withdraws them and sends a CEASE. Returns when every session is
    /// closed.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}
