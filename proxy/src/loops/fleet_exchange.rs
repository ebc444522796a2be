//! The exchange of `global-rate-limit`'s counts between the fleet's
//! replicas (crate::live::global_counts): one UDP socket per replica,
//! peers named by the operator (`--fleet-peers`), every datagram
//! authenticated with HMAC-SHA256 under the fleet's key
//! (`--fleet-key-file`).
//!
//! A replica sends only the counts that changed, at most once per
//! [`BATCH`] (many keys per datagram, each at most
//! [`crate::live::global_counts::MAX_DATAGRAM`] bytes), and sleeps while
//! nothing changes: a replica without traffic sends nothing and wakes
//! for nothing but a peer's datagram. A datagram is dropped before its
//! records are read when it comes from an address that is not a peer,
//! when its MAC does not verify, or when its sequence number is not
//! above the last one that peer sent (a replay); lost datagrams cost only
//! accuracy, as the next change of a key sends its whole count again.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::live::global_counts::{
    GlobalCounts, MAX_DATAGRAM, MAX_PEERS, RECORDS_PER_DATAGRAM, mac_key, open, seal, unix_ms,
};

/// The shortest time between two sends: changes in between go together.
pub const BATCH: Duration = Duration::from_millis(100);
/// A peer heard from within this long counts as alive (the metric).
const ALIVE: Duration = Duration::from_secs(60);
/// The shortest fleet key accepted, in bytes.
pub const MIN_KEY: usize = 16;

/// Where this replica listens, who its peers are, and the fleet's key.
#[derive(Clone)]
pub struct FleetConfig {
    pub listen: SocketAddr,
    pub peers: Vec<SocketAddr>,
    pub key: Arc<[u8]>,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("key", &"<redacted>")
            .finish()
    }
}

impl FleetConfig {
    /// Checks the settings: a key long enough, at most [`MAX_PEERS`]
    /// peers, at least one.
    pub fn new(
        listen: SocketAddr,
        mut peers: Vec<SocketAddr>,
        key: &[u8],
    ) -> Result<FleetConfig, String> {
        let key = key.trim_ascii();
        if key.len() < MIN_KEY {
            return Err(format!(
                "the fleet key holds {} bytes; at least {MIN_KEY} are needed",
                key.len()
            ));
        }
        peers.retain(|p| *p != listen);
        peers.sort_unstable();
        peers.dedup();
        if peers.is_empty() {
            return Err("--fleet-peers names no peer besides this replica".into());
        }
        if peers.len() > MAX_PEERS {
            return Err(format!(
                "--fleet-peers names {} peers; at most {MAX_PEERS}",
                peers.len()
            ));
        }
        Ok(FleetConfig {
            listen,
            peers,
            key: Arc::from(key),
        })
    }
}

/// The exchange's socket and what it knows of each peer.
pub struct Exchange {
    socket: tokio::net::UdpSocket,
    peers: Vec<Peer>,
    key: ring::hmac::Key,
    counts: Arc<GlobalCounts>,
    sequence: u64,
}

struct Peer {
    addr: SocketAddr,
    /// The highest sequence number accepted from it.
    last: u64,
    heard: Option<Instant>,
}

impl Exchange {
    /// Binds the socket and turns the counts to the fleet's, before the
    /// first compile, so every route counts for the fleet from the start.
    pub fn bind(config: &FleetConfig, counts: Arc<GlobalCounts>) -> std::io::Result<Exchange> {
        let socket = std::net::UdpSocket::bind(config.listen)?;
        socket.set_nonblocking(true)?;
        counts.set_fleet(true);
        Ok(Exchange {
            socket: tokio::net::UdpSocket::from_std(socket)?,
            peers: config
                .peers
                .iter()
                .map(|&addr| Peer {
                    addr,
                    last: 0,
                    heard: None,
                })
                .collect(),
            key: mac_key(&config.key),
            counts,
            sequence: 0,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Sends changed counts and merges the peers' until `stop`.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        let mut buf = vec![0u8; MAX_DATAGRAM + 1];
        let mut last_send: Option<Instant> = None;
        loop {
            tokio::select! {
                () = async { drop(stop.wait_for(|s| *s).await) } => return,
                received = self.socket.recv_from(&mut buf) => match received {
                    Ok((n, from)) => self.receive(&buf[..n], from),
                    Err(e) => tracing::debug!(error = %e, "fleet exchange receive"),
                },
                () = self.counts.wait_changed() => {
                    if let Some(at) = last_send {
                        tokio::time::sleep_until((at + BATCH).into()).await;
                    }
                    self.send().await;
                    last_send = Some(Instant::now());
                }
            }
        }
    }

    async fn send(&mut self) {
        let records = self.counts.take_changes(unix_ms());
        for chunk in records.chunks(RECORDS_PER_DATAGRAM) {
            // Above every number sent before, this process's or an
            // earlier one's on the same address.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            self.sequence = now.max(self.sequence + 1);
            let datagram = seal(&self.key, self.sequence, chunk);
            for peer in &self.peers {
                match self.socket.send_to(&datagram, peer.addr).await {
                    Ok(_) => self.counts.metrics.sent.inc_by(chunk.len() as u64),
                    Err(e) => tracing::debug!(peer = %peer.addr, error = %e, "fleet exchange send"),
                }
            }
        }
        self.count_alive();
    }

    fn receive(&mut self, datagram: &[u8], from: SocketAddr) {
        let refused = &self.counts.metrics.refused;
        let Some(index) = self.peers.iter().position(|p| p.addr == from) else {
            refused.inc();
            return;
        };
        let Some((sequence, records)) = open(&self.key, datagram) else {
            refused.inc();
            return;
        };
        let peer = &mut self.peers[index];
        if sequence <= peer.last {
            refused.inc();
            return;
        }
        peer.last = sequence;
        peer.heard = Some(Instant::now());
        self.counts.merge(index as u16, &records, unix_ms());
        self.count_alive();
    }

    fn count_alive(&self) {
        let alive = self
            .peers
            .iter()
            .filter(|p| p.heard.is_some_and(|t| t.elapsed() < ALIVE))
            .count();
        self.counts.metrics.peers.set(alive as i64);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"a fleet key of thirty-two bytes!";

    /// Waits (at most 5 s) for `counter` to reach `n`.
    async fn settle(counter: &prometheus::IntCounter, n: u64) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while counter.get() < n && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    #[test]
    fn settings_are_checked() {
        let a: SocketAddr = "127.0.0.1:7001".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:7002".parse().unwrap();
        assert!(FleetConfig::new(a, vec![b], b"short").is_err());
        assert!(FleetConfig::new(a, vec![a], KEY).is_err(), "itself only");
        let many: Vec<SocketAddr> = (0..=MAX_PEERS as u16)
            .map(|i| SocketAddr::from(([127, 0, 0, 1], 8000 + i)))
            .collect();
        assert!(FleetConfig::new(a, many, KEY).is_err());
        let c = FleetConfig::new(a, vec![b, a, b], KEY).unwrap();
        assert_eq!(c.peers, [b]);
        assert!(!format!("{c:?}").contains("thirty"));
    }

    /// Two exchanges on 127.0.0.1: a count made on one reaches the
    /// other. A datagram from a stranger, or from a peer's address with
    /// another key's MAC, or replayed, changes nothing; the same record
    /// signed with the fleet's key does.
    #[tokio::test]
    async fn counts_cross_and_forgeries_do_not() {
        let (ca, cb) = (
            Arc::new(GlobalCounts::default()),
            Arc::new(GlobalCounts::default()),
        );
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let free = || {
            std::net::UdpSocket::bind(any)
                .unwrap()
                .local_addr()
                .unwrap()
        };
        let (aa, ab) = (free(), free());
        // A third peer of b's, played by the test.
        let third = std::net::UdpSocket::bind(any).unwrap();
        let at = third.local_addr().unwrap();
        let a = Exchange::bind(&FleetConfig::new(aa, vec![ab], KEY).unwrap(), ca.clone()).unwrap();
        let b = Exchange::bind(
            &FleetConfig::new(ab, vec![aa, at], KEY).unwrap(),
            cb.clone(),
        )
        .unwrap();
        let ra = ca.route("ns/web", "t", 3, 60_000);
        let rb = cb.route("ns/web", "t", 3, 60_000);
        let (stop_tx, stop) = watch::channel(false);
        let ta = tokio::spawn(a.run(stop.clone()));
        let tb = tokio::spawn(b.run(stop.clone()));
        ra.admit(5, unix_ms()).unwrap();
        ra.admit(5, unix_ms()).unwrap();
        // The two counted on a reach b: one more passes there, no more.
        let received = &cb.metrics.received;
        settle(received, 1).await;
        assert_eq!(cb.metrics.received.get(), 1);
        assert!(rb.admit(5, unix_ms()).is_ok());
        assert!(rb.admit(5, unix_ms()).is_err());
        let record = crate::live::global_counts::Record {
            route: rb.id,
            window_ms: 60_000,
            key: 6,
            number: unix_ms() / 60_000,
            count: 3,
        };
        let sign = |key: &[u8], seq| {
            let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
            crate::live::global_counts::seal(&key, seq, &[record])
        };
        let refused = &cb.metrics.refused;
        // A stranger, with the fleet's key.
        let stranger = std::net::UdpSocket::bind(any).unwrap();
        stranger.send_to(&sign(KEY, 10), ab).unwrap();
        // The third peer's address, another key.
        third
            .send_to(&sign(b"not the fleet's key, as long as it", 11), ab)
            .unwrap();
        settle(refused, 2).await;
        assert_eq!(cb.metrics.refused.get(), 2);
        assert!(rb.admit(6, unix_ms()).is_ok(), "no forged count is merged");
        // Signed with the fleet's key from the peer: merged (3 + 1 there).
        third.send_to(&sign(KEY, 12), ab).unwrap();
        settle(received, 2).await;
        assert!(rb.admit(6, unix_ms()).is_err());
        // Replayed: refused.
        third.send_to(&sign(KEY, 12), ab).unwrap();
        settle(refused, 3).await;
        assert_eq!(cb.metrics.refused.get(), 3);
        assert_eq!(cb.metrics.peers.get(), 2);
        stop_tx.send(true).unwrap();
        ta.await.unwrap();
        tb.await.unwrap();
    }
}
