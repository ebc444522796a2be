//! The exchange of `global-rate-limit`'s counts between the fleet's
//! replicas (crate::live::global_counts): one UDP socket per replica,
//! peers named by the operator (`--fleet-peers`) or found from the fleet's
//! Service in kube mode (`--fleet-service`, crate::loops::fleet_peers,
//! swapped while running), every datagram authenticated with HMAC-SHA256
//! under the fleet's key (`--fleet-key-file`).
//!
//! A replica sends only the counts that changed, at most once per
//! [`BATCH`] (many keys per datagram, each at most
//! [`crate::live::global_counts::MAX_DATAGRAM`] bytes), and sleeps while
//! nothing changes: a replica without traffic sends nothing and wakes
//! for nothing but a peer's datagram or a change of its peers. A datagram
//! is dropped before its records are read when it comes from an address
//! that is not a peer now, when its MAC does not verify, or when its
//! sequence number is not above the last one that peer sent (a replay,
//! remembered for a while after the peer leaves the set); lost datagrams
//! cost only accuracy, as the next change of a key sends its whole count
//! again.

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;

use crate::live::global_counts::{
    GlobalCounts, MAX_DATAGRAM, MAX_PEERS, RECORDS_PER_DATAGRAM, mac_key, open, seal, unix_ms,
};
use crate::loops::fleet_peers::Discovery;

/// The shortest time between two sends: changes in between go together.
pub const BATCH: Duration = Duration::from_millis(100);
/// The shortest fleet key accepted, in bytes.
pub const MIN_KEY: usize = 16;
/// Peers that left the set whose last sequence number is remembered, so
/// one that comes back cannot be replayed its old datagrams.
const DEPARTED: usize = 2 * MAX_PEERS;

/// Where this replica listens, who its peers are, and the fleet's key.
#[derive(Clone)]
pub struct FleetConfig {
    pub listen: SocketAddr,
    /// The peers named by the operator (`--fleet-peers`).
    pub peers: Vec<SocketAddr>,
    /// Peers found from the fleet's Service instead (`--fleet-service`,
    /// kube mode): the set starts empty and follows its EndpointSlices.
    pub discovery: Option<Discovery>,
    pub key: Arc<[u8]>,
}

impl std::fmt::Debug for FleetConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FleetConfig")
            .field("listen", &self.listen)
            .field("peers", &self.peers)
            .field("discovery", &self.discovery)
            .field("key", &"<redacted>")
            .finish()
    }
}

fn checked_key(key: &[u8]) -> Result<Arc<[u8]>, String> {
    let key = key.trim_ascii();
    if key.len() < MIN_KEY {
        return Err(format!(
            "the fleet key holds {} bytes; at least {MIN_KEY} are needed",
            key.len()
        ));
    }
    Ok(Arc::from(key))
}

impl FleetConfig {
    /// Checks the settings: a key long enough, at most [`MAX_PEERS`]
    /// peers, at least one.
    pub fn new(
        listen: SocketAddr,
        mut peers: Vec<SocketAddr>,
        key: &[u8],
    ) -> Result<FleetConfig, String> {
        let key = checked_key(key)?;
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
            discovery: None,
            key,
        })
    }

    /// Peers found from a Service (kube mode); the key checked as
    /// [`FleetConfig::new`] does.
    pub fn discovered(
        listen: SocketAddr,
        discovery: Discovery,
        key: &[u8],
    ) -> Result<FleetConfig, String> {
        Ok(FleetConfig {
            listen,
            peers: Vec::new(),
            discovery: Some(discovery),
            key: checked_key(key)?,
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
    /// The peer set from the fleet's Service (`None` until listed).
    discovered: Option<Discovered>,
    /// The number the next new peer gets: a peer's counts in a window are
    /// kept under its number, so a new peer never takes over the counts
    /// of one that just left.
    next_id: u16,
    /// (address, last sequence) of peers that left the set, newest last.
    departed: VecDeque<(SocketAddr, u64)>,
}

struct Discovered {
    peers: watch::Receiver<Option<Vec<SocketAddr>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Discovered {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Peer {
    addr: SocketAddr,
    /// The exchange's number for it (crate::live::global_counts's peer).
    id: u16,
    /// The highest sequence number accepted from it.
    last: u64,
}

impl Exchange {
    /// Binds the socket and turns the counts to the fleet's, before the
    /// first compile, so every route counts for the fleet from the start.
    pub fn bind(config: &FleetConfig, counts: Arc<GlobalCounts>) -> std::io::Result<Exchange> {
        Exchange::bind_in(config, counts, None)
    }

    /// As [`Exchange::bind`]; with `--fleet-service`, also starts watching
    /// the Service's EndpointSlices through `client` (kube mode's).
    pub fn bind_in(
        config: &FleetConfig,
        counts: Arc<GlobalCounts>,
        client: Option<&kube::Client>,
    ) -> std::io::Result<Exchange> {
        let discovered = match (&config.discovery, client) {
            (None, _) => None,
            (Some(_), None) => {
                return Err(std::io::Error::other(
                    "--fleet-service needs --kube: the fleet's Service is read from the Kubernetes API",
                ));
            }
            (Some(d), Some(client)) => {
                let (peers, task) = crate::loops::fleet_peers::spawn(
                    client.clone(),
                    d.clone(),
                    counts.metrics.clone(),
                );
                Some(Discovered { peers, task })
            }
        };
        let socket = std::net::UdpSocket::bind(config.listen)?;
        socket.set_nonblocking(true)?;
        counts.set_fleet(true);
        let mut exchange = Exchange {
            socket: tokio::net::UdpSocket::from_std(socket)?,
            peers: Vec::new(),
            key: mac_key(&config.key),
            counts,
            sequence: 0,
            discovered,
            next_id: 0,
            departed: VecDeque::new(),
        };
        exchange.set_peers(&config.peers);
        Ok(exchange)
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
                changed = async {
                    match self.discovered.as_mut() {
                        Some(d) => d.peers.changed().await.is_ok(),
                        None => std::future::pending().await,
                    }
                } => {
                    if !changed {
                        // The watch ended (never while this replica runs);
                        // the last set stays.
                        self.discovered = None;
                        continue;
                    }
                    let peers = self
                        .discovered
                        .as_mut()
                        .and_then(|d| d.peers.borrow_and_update().clone());
                    if let Some(peers) = peers {
                        self.set_peers(&peers);
                    }
                }
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

    /// Makes `addrs` the peers (this replica's own address left out, at
    /// most [`MAX_PEERS`]): a peer that stays keeps its number and last
    /// sequence; one that leaves is no longer sent to or heard, its
    /// counts weigh until their windows end; when one joins, every count
    /// of this replica is sent again at the next exchange.
    fn set_peers(&mut self, addrs: &[SocketAddr]) {
        let own = self.socket.local_addr().ok();
        let mut old = std::mem::take(&mut self.peers);
        let in_use: HashSet<u16> = old.iter().map(|p| p.id).collect();
        let mut joined = false;
        for &addr in addrs {
            if Some(addr) == own || self.peers.iter().any(|p| p.addr == addr) {
                continue;
            }
            if self.peers.len() == MAX_PEERS {
                break;
            }
            let peer = match old.iter().position(|p| p.addr == addr) {
                Some(i) => old.swap_remove(i),
                None => {
                    let mut id = self.next_id;
                    while in_use.contains(&id) || self.peers.iter().any(|p| p.id == id) {
                        id = id.wrapping_add(1);
                    }
                    self.next_id = id.wrapping_add(1);
                    let last = self
                        .departed
                        .iter()
                        .rev()
                        .find(|(a, _)| *a == addr)
                        .map_or(0, |(_, last)| *last);
                    joined = true;
                    Peer { addr, id, last }
                }
            };
            self.peers.push(peer);
        }
        for gone in old {
            self.counts.metrics.peers.forget(gone.id);
            self.departed.retain(|(a, _)| *a != gone.addr);
            if self.departed.len() == DEPARTED {
                self.departed.pop_front();
            }
            self.departed.push_back((gone.addr, gone.last));
        }
        if joined {
            self.counts.resend_all();
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
        let id = peer.id;
        self.counts.metrics.peers.heard(id, Instant::now());
        self.counts.merge(id, &records, unix_ms());
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

    /// A replica's counts and a UDP address on 127.0.0.1 that was free a
    /// moment ago, for an exchange to bind.
    fn replica() -> (Arc<GlobalCounts>, SocketAddr) {
        let free = std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        (Arc::new(GlobalCounts::default()), free)
    }

    /// Two exchanges on 127.0.0.1: a count made on one reaches the
    /// other. A datagram from a stranger, or from a peer's address with
    /// another key's MAC, or replayed, changes nothing; the same record
    /// signed with the fleet's key does.
    #[tokio::test]
    async fn counts_cross_and_forgeries_do_not() {
        let ((ca, aa), (cb, ab)) = (replica(), replica());
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
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

    /// A replica whose peers come from its Service's EndpointSlices (the
    /// API double): a's datagrams are refused while a is not listed,
    /// merged once its ready endpoint is, and refused again once it goes
    /// not ready; the alive gauge forgets it then, without an exchange.
    #[tokio::test]
    async fn peers_swap_live_with_the_services_slices() {
        let api = teapot_testkit::apiserver::ApiServer::start().await;
        let ((ca, aa), (cb, ab)) = (replica(), replica());
        let discovery = Discovery {
            namespace: "teapot-system".into(),
            service: "lb-fleet".into(),
            default_port: ab.port(),
            own_pod: Some("proxy-b".into()),
            own_addrs: Vec::new(),
        };
        let a = Exchange::bind(&FleetConfig::new(aa, vec![ab], KEY).unwrap(), ca.clone()).unwrap();
        let config = FleetConfig::discovered(ab, discovery, KEY).unwrap();
        assert!(
            Exchange::bind_in(&config, cb.clone(), None).is_err(),
            "no kube client"
        );
        let b = Exchange::bind_in(&config, cb.clone(), Some(&api.client())).unwrap();
        let ra = ca.route("ns/web", "t", 1_000_000, 60_000);
        let _rb = cb.route("ns/web", "t", 1_000_000, 60_000);
        let (stop_tx, stop) = watch::channel(false);
        let ta = tokio::spawn(a.run(stop.clone()));
        let tb = tokio::spawn(b.run(stop.clone()));
        let slice = |ready: bool| {
            serde_json::json!({
                "apiVersion": "discovery.k8s.io/v1",
                "kind": "EndpointSlice",
                "metadata": {"name": "lb-fleet-x", "namespace": "teapot-system",
                             "labels": {"kubernetes.io/service-name": "lb-fleet"}},
                "addressType": "IPv4",
                "endpoints": [
                    {"addresses": ["127.0.0.1"], "conditions": {"ready": ready},
                     "targetRef": {"kind": "Pod", "name": "proxy-a"}},
                    {"addresses": ["127.0.0.1"], "conditions": {"ready": true},
                     "targetRef": {"kind": "Pod", "name": "proxy-b"}},
                ],
                "ports": [{"name": "fleet", "port": aa.port(), "protocol": "UDP"}],
            })
        };
        // Counts on a until `counter` of b passes `n` (a sends on each
        // change; b's peers change in between).
        let until = |counter: prometheus::IntCounter, n: u64| {
            let ra = ra.clone();
            async move {
                let deadline = Instant::now() + Duration::from_secs(10);
                while counter.get() < n {
                    assert!(Instant::now() < deadline, "{} < {n}", counter.get());
                    ra.admit(1, unix_ms()).unwrap();
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        until(cb.metrics.refused.clone(), 1).await;
        assert_eq!(cb.metrics.received.get(), 0);
        api.apply(slice(true));
        until(cb.metrics.received.clone(), 1).await;
        assert_eq!(cb.metrics.peers.get(), 1);
        api.apply(slice(false));
        let refused = cb.metrics.refused.get();
        until(cb.metrics.refused.clone(), refused + 1).await;
        assert_eq!(cb.metrics.peers.get(), 0, "a left the set");
        stop_tx.send(true).unwrap();
        ta.await.unwrap();
        tb.await.unwrap();
    }

    /// A peer that stays keeps its number and last sequence; a new one
    /// gets a number no current or just departed peer holds; one that
    /// comes back cannot be replayed what it sent before it left.
    #[tokio::test]
    async fn peer_numbers_and_sequences_survive_a_swap() {
        let any: SocketAddr = "127.0.0.1:0".parse().unwrap();
        let addr = |port: u16| SocketAddr::from(([10, 0, 0, 1], port));
        let config = FleetConfig::new(any, vec![addr(1), addr(2)], KEY).unwrap();
        let mut x = Exchange::bind(&config, Arc::new(GlobalCounts::default())).unwrap();
        x.peers[1].last = 77;
        let ids = |x: &Exchange| -> Vec<(u16, u16, u64)> {
            x.peers
                .iter()
                .map(|p| (p.addr.port(), p.id, p.last))
                .collect()
        };
        assert_eq!(ids(&x), [(1, 0, 0), (2, 1, 77)]);
        x.set_peers(&[addr(2), addr(3)]);
        assert_eq!(ids(&x), [(2, 1, 77), (3, 2, 0)]);
        x.set_peers(&[addr(3), addr(4)]);
        assert_eq!(ids(&x), [(3, 2, 0), (4, 3, 0)]);
        x.set_peers(&[addr(2), addr(3), addr(4)]);
        assert_eq!(ids(&x), [(2, 4, 77), (3, 2, 0), (4, 3, 0)]);
        // Its own address is never a peer.
        let own = x.local_addr().unwrap();
        x.set_peers(&[own, addr(3)]);
        assert_eq!(ids(&x), [(3, 2, 0)]);
    }
}
