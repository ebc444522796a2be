//! The speaker: one session task per configured peer, all announcing the
//! same watched address set, stopped together with the graceful sequence.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::Error;
use crate::announcer::{Announcer, Held, Mode, Stopping};
use crate::bfd;
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
    /// The UDP port BFD packets are received on, and the one they are sent
    /// to: [`bfd::CONTROL_PORT`] (RFC 5881) unless a test runs speaker and
    /// router on one host.
    pub bfd_listen_port: u16,
    pub bfd_peer_port: u16,
    /// Graceful restart (RFC 4724): the restart time offered to every
    /// peer, after which a router that lost the session without a
    /// NOTIFICATION drops the routes it kept. `None`: not offered.
    pub graceful_restart: Option<Duration>,
    /// The port passive peers connect to ([`crate::peer::BGP_PORT`]
    /// unless a test runs speaker and router on one host).
    pub listen_port: u16,
}

impl SpeakerConfig {
    pub fn new(local_asn: u32, peers: Vec<PeerConfig>) -> SpeakerConfig {
        SpeakerConfig {
            local_asn,
            router_id: None,
            graceful_shutdown_wait: DEFAULT_GRACEFUL_SHUTDOWN_WAIT,
            peers,
            bfd_listen_port: bfd::CONTROL_PORT,
            bfd_peer_port: bfd::CONTROL_PORT,
            graceful_restart: None,
            listen_port: crate::peer::BGP_PORT,
        }
    }

    pub fn validate(&self) -> Result<(), Error> {
        if let Some(time) = self.graceful_restart
            && (time.is_zero() || time.as_secs() > crate::wire::MAX_RESTART_TIME_SECS as u64)
        {
            return Err(Error::Config {
                setting: "graceful restart time".into(),
                reason: format!(
                    "{time:?}: between 1 and {} seconds (12 bits in the capability)",
                    crate::wire::MAX_RESTART_TIME_SECS
                ),
            });
        }
        let mut seen = BTreeSet::new();
        let mut with_bfd = BTreeSet::new();
        for peer in &self.peers {
            peer.validate(self.local_asn)?;
            if !seen.insert(peer.socket_addr()) {
                return Err(Error::Config {
                    setting: format!("BGP peer {}", peer.socket_addr()),
                    reason: "configured twice".into(),
                });
            }
            // BFD packets are told apart by their source address.
            if peer.bfd.is_some() && !with_bfd.insert(peer.address) {
                return Err(Error::Config {
                    setting: format!("BGP peer {} bfd", peer.socket_addr()),
                    reason: "another peer at this address has BFD already".into(),
                });
            }
        }
        Ok(())
    }
}

/// One `teapot_bgp_*` series: name, type, help, the value of a peer. The
/// name is written in full so that a search for it (and the chart's check
/// that its alerts read defined metrics) finds it here.
type Series = (
    &'static str,
    &'static str,
    &'static str,
    fn(&PeerStatus) -> u64,
);

/// Every peer's status, readable from anywhere (`/status`, metrics) while
/// the speaker runs.
#[derive(Debug, Clone, Default)]
pub struct Statuses(Vec<watch::Receiver<PeerStatus>>);

/// Statuses followed elsewhere than a [`Speaker`] (a test's own senders).
impl From<Vec<watch::Receiver<PeerStatus>>> for Statuses {
    fn from(receivers: Vec<watch::Receiver<PeerStatus>>) -> Statuses {
        Statuses(receivers)
    }
}

impl Statuses {
    /// One receiver per peer, to follow its changes.
    pub fn receivers(&self) -> Vec<watch::Receiver<PeerStatus>> {
        self.0.clone()
    }

    pub fn snapshot(&self) -> Vec<PeerStatus> {
        self.0.iter().map(|r| r.borrow().clone()).collect()
    }

    /// The sessions in Prometheus' text format, `teapot_bgp_*` per peer,
    /// for appending to a scrape.
    pub fn render_prometheus(&self) -> String {
        use std::fmt::Write;
        let peers = self.snapshot();
        let mut out = String::new();
        let series: [Series; 5] = [
            (
                "teapot_bgp_session_established",
                "gauge",
                "1 when the BGP session to the peer is established",
                |p| (p.state == crate::SessionState::Established) as u64,
            ),
            (
                "teapot_bgp_routes_announced",
                "gauge",
                "Host routes the peer holds from this replica",
                |p| p.announced as u64,
            ),
            (
                "teapot_bgp_announcements_sent_total",
                "counter",
                "Routes sent in UPDATEs to the peer, re-announcements included",
                |p| p.announcements_sent,
            ),
            (
                "teapot_bgp_withdrawals_sent_total",
                "counter",
                "Routes withdrawn from the peer",
                |p| p.withdrawals_sent,
            ),
            (
                "teapot_bgp_sessions_established_total",
                "counter",
                "BGP sessions established with the peer",
                |p| p.sessions_established,
            ),
        ];
        for (name, kind, help, value) in series {
            let _ = writeln!(out, "# HELP {name} {help}.");
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for p in &peers {
                let _ = writeln!(out, "{name}{{peer=\"{}\"}} {}", p.peer, value(p));
            }
        }
        let _ = writeln!(
            out,
            "# HELP teapot_bgp_session_failures_total BGP sessions to the peer that failed or ended, by reason.\n# TYPE teapot_bgp_session_failures_total counter"
        );
        for p in &peers {
            for (reason, n) in &p.failures {
                let _ = writeln!(
                    out,
                    "teapot_bgp_session_failures_total{{peer=\"{}\",reason=\"{reason}\"}} {n}",
                    p.peer
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP teapot_bfd_session_up 1 when the BFD session to the peer is Up.\n# TYPE teapot_bfd_session_up gauge"
        );
        for p in &peers {
            if let Some(bfd) = p.bfd {
                let up = (bfd.state == bfd::State::Up) as u8;
                let _ = writeln!(out, "teapot_bfd_session_up{{peer=\"{}\"}} {up}", p.peer);
            }
        }
        out
    }
}

/// A passive peer: its address, its TCP-MD5 password, where its
/// connections go.
type Passive = (
    IpAddr,
    Option<crate::md5::Key>,
    tokio::sync::mpsc::Sender<tokio::net::TcpStream>,
);

/// One listening socket per family of the passive peers, on `port`, with
/// each peer's TCP-MD5 password set on it (the kernel checks the router's
/// SYN against it).
fn listen(port: u16, passive: &[Passive]) -> Result<Vec<tokio::net::TcpListener>, Error> {
    let io = |what: &'static str| move |e| Error::Io(what, e);
    let mut out = Vec::new();
    for v6 in [false, true] {
        let peers: Vec<&Passive> = passive.iter().filter(|p| p.0.is_ipv6() == v6).collect();
        if peers.is_empty() {
            continue;
        }
        let (socket, any) = if v6 {
            let socket =
                tokio::net::TcpSocket::new_v6().map_err(io("creating the listening socket"))?;
            socket2::SockRef::from(&socket)
                .set_only_v6(true)
                .map_err(io("setting IPV6_V6ONLY on the listening socket"))?;
            (socket, IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED))
        } else {
            let socket =
                tokio::net::TcpSocket::new_v4().map_err(io("creating the listening socket"))?;
            (socket, IpAddr::V4(Ipv4Addr::UNSPECIFIED))
        };
        socket
            .set_reuseaddr(true)
            .map_err(io("setting SO_REUSEADDR on the listening socket"))?;
        for (address, key, _) in &peers {
            if let Some(key) = key {
                crate::md5::set_key(&socket, *address, key)
                    .map_err(io("setting TCP-MD5 (TCP_MD5SIG) on the listening socket"))?;
            }
        }
        socket
            .bind(std::net::SocketAddr::new(any, port))
            .map_err(io("binding the BGP listening port"))?;
        out.push(
            socket
                .listen(16)
                .map_err(io("listening for passive peers"))?,
        );
    }
    Ok(out)
}

/// Hands each connection to the passive peer with its source address;
/// closes any other at once (the speaker talks to configured routers
/// only). Ends when the speaker stops.
async fn accept(
    listeners: Vec<tokio::net::TcpListener>,
    passive: Vec<Passive>,
    mut stop: watch::Receiver<bool>,
) {
    let mut accepting = JoinSet::new();
    let passive = Arc::new(passive);
    for listener in listeners {
        let passive = passive.clone();
        accepting.spawn(async move {
            loop {
                let (stream, from) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        tracing::warn!(error = %e, "BGP accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let from_ip = match from.ip() {
                    IpAddr::V6(a) => a.to_ipv4_mapped().map_or(IpAddr::V6(a), IpAddr::V4),
                    a => a,
                };
                match passive.iter().find(|p| p.0 == from_ip) {
                    // A full queue: the session is busy with an earlier
                    // connection; this one is closed.
                    Some((_, _, tx)) => {
                        let _ = tx.try_send(stream);
                    }
                    None => tracing::warn!(%from, "BGP connection from an address that is no passive peer: closed"),
                }
            }
        });
    }
    let _ = stop.wait_for(|s| *s).await;
    accepting.abort_all();
}

/// The running speaker. Dropping it without [`Speaker::stop`] ends the
/// sessions abruptly (routers fall back on their hold timers).
#[derive(Debug)]
pub struct Speaker {
    addrs: watch::Sender<BTreeSet<IpAddr>>,
    /// Never changes: a speaker owns no address alone.
    held: watch::Sender<Held>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
    statuses: Statuses,
}

impl Speaker {
    /// Starts one session task per peer on the current tokio runtime;
    /// each announces `addrs`, and the set as it changes through
    /// [`Announcer::set_addresses`].
    pub fn start(config: SpeakerConfig, addrs: BTreeSet<IpAddr>) -> Result<Speaker, Error> {
        config.validate()?;
        let (addrs_tx, addrs) = watch::channel(addrs);
        let shared = Arc::new(Shared {
            local_asn: config.local_asn,
            router_id: config.router_id,
            graceful_shutdown_wait: config.graceful_shutdown_wait,
            bfd: bfd::Listener::new(config.bfd_listen_port),
            bfd_peer_port: config.bfd_peer_port,
            graceful_restart: config.graceful_restart,
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = JoinSet::new();
        let mut statuses = Vec::new();
        let mut passive = Vec::new();
        for peer in config.peers {
            let (status, status_rx) = watch::channel(PeerStatus::new(&peer));
            statuses.push(status_rx);
            let incoming = peer.passive.then(|| {
                let (tx, rx) = tokio::sync::mpsc::channel(4);
                passive.push((peer.address, peer.md5.clone(), tx));
                rx
            });
            tasks.spawn(session::run(
                shared.clone(),
                peer,
                addrs.clone(),
                stop_rx.clone(),
                status,
                incoming,
            ));
        }
        if !passive.is_empty() {
            let listeners = listen(config.listen_port, &passive)?;
            tasks.spawn(accept(listeners, passive, stop_rx));
        }
        Ok(Speaker {
            addrs: addrs_tx,
            held: watch::channel(Held::default()).0,
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

    /// The sender of the announced set, for tests that change it in place.
    #[cfg(test)]
    pub(crate) fn addresses_sender(&self) -> watch::Sender<BTreeSet<IpAddr>> {
        self.addrs.clone()
    }
}

impl Announcer for Speaker {
    fn mode(&self) -> Mode {
        Mode::Bgp
    }

    fn set_addresses(&self, addrs: BTreeSet<IpAddr>) -> bool {
        self.addrs.send_if_modified(|set| {
            if *set == addrs {
                return false;
            }
            *set = addrs;
            true
        })
    }

    fn held(&self) -> watch::Receiver<Held> {
        self.held.subscribe()
    }

    fn sessions(&self) -> Option<Vec<watch::Receiver<PeerStatus>>> {
        Some(self.statuses.receivers())
    }

    fn stop(self: Box<Self>) -> Stopping {
        Box::pin(Speaker::stop(*self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_new_set_of_addresses_is_taken_once_and_nothing_is_owned() {
        let speaker =
            Speaker::start(SpeakerConfig::new(64501, Vec::new()), BTreeSet::new()).unwrap();
        let set: BTreeSet<IpAddr> = ["203.0.113.10".parse().unwrap()].into();
        assert!(speaker.set_addresses(set.clone()));
        assert!(!speaker.set_addresses(set.clone()), "the same set again");
        assert_eq!(*speaker.addresses_sender().borrow(), set);
        // Every replica announces every address: none is held alone.
        assert!(speaker.held().borrow().owned.is_empty());
        assert_eq!(speaker.sessions().map(|s| s.len()), Some(0));
        Box::new(speaker).stop().await;
    }

    #[test]
    fn prometheus_text_has_one_series_per_peer_and_name() {
        let peer: PeerConfig = "192.0.2.1,64500".parse().unwrap();
        let (_tx, rx) = watch::channel(PeerStatus {
            announced: 2,
            announcements_sent: 3,
            ..PeerStatus::new(&peer)
        });
        let with_bfd: PeerConfig = "192.0.2.5,64500,bfd=100x3".parse().unwrap();
        let (_tx2, rx2) = watch::channel(PeerStatus {
            failures: [("refused_open", 2), ("connect", 1)].into_iter().collect(),
            bfd: Some(bfd::BfdStatus {
                state: bfd::State::Up,
                ..Default::default()
            }),
            ..PeerStatus::new(&with_bfd)
        });
        let text = Statuses(vec![rx, rx2]).render_prometheus();
        assert!(text.contains("teapot_bfd_session_up{peer=\"192.0.2.5:179\"} 1\n"));
        assert!(!text.contains("teapot_bfd_session_up{peer=\"192.0.2.1:179\"}"));
        assert!(text.contains(
            "teapot_bgp_session_failures_total{peer=\"192.0.2.5:179\",reason=\"refused_open\"} 2\n"
        ));
        assert!(text.contains(
            "teapot_bgp_session_failures_total{peer=\"192.0.2.5:179\",reason=\"connect\"} 1\n"
        ));
        assert!(text.contains("teapot_bgp_session_established{peer=\"192.0.2.1:179\"} 0\n"));
        assert!(text.contains("teapot_bgp_routes_announced{peer=\"192.0.2.1:179\"} 2\n"));
        assert!(text.contains("# TYPE teapot_bgp_announcements_sent_total counter\n"));
        assert!(text.contains("teapot_bgp_announcements_sent_total{peer=\"192.0.2.1:179\"} 3\n"));
        assert_eq!(text.lines().filter(|l| !l.starts_with('#')).count(), 13);
    }
}
