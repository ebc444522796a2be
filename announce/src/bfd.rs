//! BFD, the part an announce-only speaker needs: asynchronous mode over a
//! single IP hop (RFC 5880, RFC 5881), one session per BGP peer configured
//! with `bfd=INTERVALxMULT`.
//!
//! The point is the router's side: its BFD daemon hears from the replica
//! every interval, and a replica that freezes or loses its link goes
//! silent, so the router tears the BGP session down after `MULT` missed
//! packets instead of waiting for the hold timer (3 s at the shortest).
//! Our side's detection resets the BGP session when the router is gone.
//!
//! No authentication, no demand mode, no echo function: a replica that
//! needs them runs a BFD daemon. Packets come in on one socket per address
//! family bound to port 3784 ([`Listener`]), shared by every session of a
//! speaker and sorted by source address; each session sends from its own
//! socket bound to a port in 49152-65535, with TTL 255, and only packets
//! that arrive with TTL 255 are taken (GTSM, RFC 5881 5): anything from
//! beyond the link is dropped.

use std::collections::HashMap;
use std::io::IoSliceMut;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::sys::socket::{
    ControlMessageOwned, MsgFlags, SockaddrStorage, recvmsg, setsockopt, sockopt,
};
use rand::{Rng, SeedableRng};
use tokio::io::Interest;
use tokio::net::UdpSocket;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::{Instant, sleep_until};

use crate::Error;

/// Where BFD control packets go (RFC 5881 4).
pub const CONTROL_PORT: u16 = 3784;
/// Source ports of control packets (RFC 5881 4).
pub const SOURCE_PORTS: std::ops::RangeInclusive<u16> = 49152..=65535;
/// Sent on every packet and required on every packet taken (RFC 5881 5).
pub const TTL: u8 = 255;
/// A control packet without authentication.
pub const PACKET_LEN: usize = 24;
/// RFC 5880 6.8.3: while the session is not Up, transmit no faster than
/// once a second.
pub const SLOW_TX: Duration = Duration::from_secs(1);
/// Shortest interval accepted in `bfd=`: FRR's floor too; below it a
/// loaded replica would miss its own packets.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
const VERSION: u8 = 1;

/// Diagnostic codes (RFC 5880 4.1).
pub mod diag {
    pub const NONE: u8 = 0;
    pub const DETECTION_TIME_EXPIRED: u8 = 1;
    pub const NEIGHBOR_SIGNALED_DOWN: u8 = 3;
    pub const ADMINISTRATIVELY_DOWN: u8 = 7;

    pub fn text(code: u8) -> &'static str {
        match code {
            NONE => "no diagnostic",
            DETECTION_TIME_EXPIRED => "control detection time expired",
            2 => "echo function failed",
            NEIGHBOR_SIGNALED_DOWN => "neighbor signaled session down",
            4 => "forwarding plane reset",
            5 => "path down",
            6 => "concatenated path down",
            ADMINISTRATIVELY_DOWN => "administratively down",
            8 => "reverse concatenated path down",
            _ => "unknown diagnostic",
        }
    }
}

/// A session's state (RFC 5880 4.1, 6.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum State {
    AdminDown,
    #[default]
    Down,
    Init,
    Up,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::AdminDown => "AdminDown",
            State::Down => "Down",
            State::Init => "Init",
            State::Up => "Up",
        }
    }

    fn bits(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    fn from_bits(bits: u8) -> State {
        match bits & 3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }
}

/// A BFD session's timing as configured: `bfd=100x3` is a packet every
/// 100 ms wanted both ways, and the session down after 3 missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    pub interval: Duration,
    pub multiplier: u8,
}

impl Timing {
    /// The time without a packet after which the session is down, when
    /// both sides use this timing.
    pub fn detection_time(&self) -> Duration {
        self.interval * self.multiplier as u32
    }

    /// `INTERVALxMULT`, the interval in milliseconds (`100x3`); the error
    /// says what was expected, for the caller to name its setting.
    pub fn parse(value: &str) -> Result<Timing, String> {
        let err = || {
            format!(
                "`{value}` is not INTERVALxMULTIPLIER (milliseconds x missed packets, e.g. 100x3)"
            )
        };
        let (interval, multiplier) = value.split_once('x').ok_or_else(err)?;
        let timing = Timing {
            interval: Duration::from_millis(interval.parse().map_err(|_| err())?),
            multiplier: multiplier.parse().map_err(|_| err())?,
        };
        timing.check()?;
        Ok(timing)
    }

    /// Whether the timing is one a session can run with: the interval
    /// within [`MIN_INTERVAL`] and [`MAX_INTERVAL`], a multiplier above 0.
    pub fn check(&self) -> Result<(), String> {
        if self.interval < MIN_INTERVAL {
            return Err(format!(
                "an interval of {:?} is below the {MIN_INTERVAL:?} minimum",
                self.interval
            ));
        }
        if self.interval > MAX_INTERVAL {
            return Err(format!(
                "an interval of {:?} is above {MAX_INTERVAL:?}: the hold timer or the Lease detects that",
                self.interval
            ));
        }
        if self.multiplier == 0 {
            return Err("a multiplier of 0 detects nothing".into());
        }
        Ok(())
    }
}

/// Above this, BFD detects nothing a BGP hold timer or an announcer
/// Lease would not.
pub const MAX_INTERVAL: Duration = Duration::from_secs(10);

/// A control packet without authentication (RFC 5880 4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlPacket {
    pub diag: u8,
    pub state: State,
    pub poll: bool,
    pub final_: bool,
    pub control_plane_independent: bool,
    pub demand: bool,
    pub detect_mult: u8,
    pub my_discriminator: u32,
    pub your_discriminator: u32,
    pub desired_min_tx: Duration,
    pub required_min_rx: Duration,
    pub required_min_echo_rx: Duration,
}

fn micros(d: Duration) -> [u8; 4] {
    u32::try_from(d.as_micros())
        .unwrap_or(u32::MAX)
        .to_be_bytes()
}

fn word(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

impl ControlPacket {
    pub fn encode(&self) -> [u8; PACKET_LEN] {
        let mut b = [0u8; PACKET_LEN];
        b[0] = (VERSION << 5) | (self.diag & 0x1f);
        b[1] = (self.state.bits() << 6)
            | (self.poll as u8) << 5
            | (self.final_ as u8) << 4
            | (self.control_plane_independent as u8) << 3
            | (self.demand as u8) << 1;
        b[2] = self.detect_mult;
        b[3] = PACKET_LEN as u8;
        b[4..8].copy_from_slice(&self.my_discriminator.to_be_bytes());
        b[8..12].copy_from_slice(&self.your_discriminator.to_be_bytes());
        b[12..16].copy_from_slice(&micros(self.desired_min_tx));
        b[16..20].copy_from_slice(&micros(self.required_min_rx));
        b[20..24].copy_from_slice(&micros(self.required_min_echo_rx));
        b
    }

    /// The reception checks of RFC 5880 6.8.6 that need no session: a
    /// packet failing one is discarded.
    pub fn decode(b: &[u8]) -> Result<ControlPacket, Error> {
        let bad = |reason: String| Err(Error::BfdPacket(reason));
        if b.len() < PACKET_LEN {
            return bad(format!("{} bytes, a control packet has 24", b.len()));
        }
        if b[0] >> 5 != VERSION {
            return bad(format!("version {}", b[0] >> 5));
        }
        let flags = b[1];
        if flags & 0x04 != 0 {
            return bad("authentication present, none configured".into());
        }
        let length = b[3] as usize;
        if length < PACKET_LEN || length > b.len() {
            return bad(format!(
                "length field {length} in a {}-byte packet",
                b.len()
            ));
        }
        if b[2] == 0 {
            return bad("detect multiplier 0".into());
        }
        if flags & 0x01 != 0 {
            return bad("multipoint bit set".into());
        }
        let packet = ControlPacket {
            diag: b[0] & 0x1f,
            state: State::from_bits(flags >> 6),
            poll: flags & 0x20 != 0,
            final_: flags & 0x10 != 0,
            control_plane_independent: flags & 0x08 != 0,
            demand: flags & 0x02 != 0,
            detect_mult: b[2],
            my_discriminator: word(b, 4),
            your_discriminator: word(b, 8),
            desired_min_tx: Duration::from_micros(word(b, 12) as u64),
            required_min_rx: Duration::from_micros(word(b, 16) as u64),
            required_min_echo_rx: Duration::from_micros(word(b, 20) as u64),
        };
        if packet.my_discriminator == 0 {
            return bad("my discriminator 0".into());
        }
        if packet.your_discriminator == 0 && !matches!(packet.state, State::Down | State::AdminDown)
        {
            return bad(format!(
                "your discriminator 0 in state {}",
                packet.state.as_str()
            ));
        }
        Ok(packet)
    }
}

/// What a received packet did to the session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received {
    /// Taken; `Some` when the state changed.
    Taken(Option<State>),
    /// Not for this BFD session (its Your Discriminator is another's), or the
    /// session is administratively down.
    Discarded,
}

/// One session's state machine (RFC 5880 6.2, 6.8), without sockets or
/// clocks: the caller feeds it packets and the time.
#[derive(Debug, Clone)]
pub struct Machine {
    state: State,
    local_diag: u8,
    local_discriminator: u32,
    remote_discriminator: u32,
    remote_state: State,
    timing: Timing,
    /// The remote's Required Min RX; 1 µs until heard (RFC 5880 6.8.1),
    /// so the first packets go out at our own pace.
    remote_min_rx: Duration,
    remote_desired_min_tx: Duration,
    remote_detect_mult: u8,
    /// A Poll Sequence runs: our timers changed and the remote has not
    /// answered with Final yet (RFC 5880 6.5).
    polling: bool,
    /// The remote polled: the next packet carries Final, at once.
    final_due: bool,
    last_heard: Option<Instant>,
}

impl Machine {
    pub fn new(local_discriminator: u32, timing: Timing) -> Machine {
        Machine {
            state: State::Down,
            local_diag: diag::NONE,
            local_discriminator,
            remote_discriminator: 0,
            remote_state: State::Down,
            timing,
            remote_min_rx: Duration::from_micros(1),
            remote_desired_min_tx: Duration::ZERO,
            remote_detect_mult: 0,
            polling: false,
            final_due: false,
            last_heard: None,
        }
    }

    pub fn state(&self) -> State {
        self.state
    }

    /// Why the session last left Up (or went AdminDown).
    pub fn diag(&self) -> u8 {
        self.local_diag
    }

    pub fn remote_state(&self) -> State {
        self.remote_state
    }

    pub fn remote_discriminator(&self) -> u32 {
        self.remote_discriminator
    }

    /// A packet with Final is owed to the remote's Poll.
    pub fn final_due(&self) -> bool {
        self.final_due
    }

    /// Desired Min TX as advertised: the configured interval while Up,
    /// at least a second otherwise (RFC 5880 6.8.3).
    pub fn desired_min_tx(&self) -> Duration {
        if self.state == State::Up {
            self.timing.interval
        } else {
            self.timing.interval.max(SLOW_TX)
        }
    }

    /// Time between our packets before jitter: the slower of what we want
    /// to send and what the remote wants to receive (RFC 5880 6.8.7).
    /// `None` when the remote asked for no packets (Required Min RX 0).
    pub fn tx_interval(&self) -> Option<Duration> {
        (!self.remote_min_rx.is_zero()).then(|| self.desired_min_tx().max(self.remote_min_rx))
    }

    /// RFC 5880 6.8.4, asynchronous mode: the remote's multiplier times
    /// the slower of its sending and our receiving.
    pub fn detection_time(&self) -> Duration {
        self.timing.interval.max(self.remote_desired_min_tx) * self.remote_detect_mult as u32
    }

    /// When silence from the remote means something: it takes the session
    /// Down from Init or Up, and forgets the remote's discriminator in
    /// Down (RFC 5880 6.8.1).
    pub fn detect_deadline(&self) -> Option<Instant> {
        let heard = self.last_heard?;
        (self.state != State::AdminDown && self.remote_discriminator != 0)
            .then(|| heard + self.detection_time())
    }

    /// The next packet to send. A Final owed is paid with it, and it
    /// carries Poll while a Poll Sequence runs (never both, RFC 5880 4.1).
    pub fn packet(&mut self) -> ControlPacket {
        let final_ = std::mem::take(&mut self.final_due);
        ControlPacket {
            diag: self.local_diag,
            state: self.state,
            poll: self.polling && !final_,
            final_,
            control_plane_independent: false,
            demand: false,
            detect_mult: self.timing.multiplier,
            my_discriminator: self.local_discriminator,
            your_discriminator: self.remote_discriminator,
            desired_min_tx: self.desired_min_tx(),
            required_min_rx: self.timing.interval,
            required_min_echo_rx: Duration::ZERO,
        }
    }

    fn set_state(&mut self, state: State, diag: u8) -> Option<State> {
        if state == self.state {
            return None;
        }
        let slow_before = self.desired_min_tx();
        self.state = state;
        self.local_diag = diag;
        // Desired Min TX follows Up (6.8.3): a change starts a Poll
        // Sequence so the remote recomputes its detection time.
        if self.desired_min_tx() != slow_before {
            self.polling = true;
        }
        Some(state)
    }

    /// RFC 5880 6.8.6 for a packet [`ControlPacket::decode`] accepted.
    pub fn receive(&mut self, packet: &ControlPacket, now: Instant) -> Received {
        if packet.your_discriminator != 0 && packet.your_discriminator != self.local_discriminator {
            return Received::Discarded;
        }
        if self.state == State::AdminDown {
            return Received::Discarded;
        }
        self.remote_discriminator = packet.my_discriminator;
        self.remote_state = packet.state;
        self.remote_min_rx = packet.required_min_rx;
        self.remote_desired_min_tx = packet.desired_min_tx;
        self.remote_detect_mult = packet.detect_mult;
        self.last_heard = Some(now);
        if packet.final_ {
            self.polling = false;
        }
        if packet.poll {
            self.final_due = true;
        }
        let changed = if packet.state == State::AdminDown {
            if self.state != State::Down {
                self.set_state(State::Down, diag::NEIGHBOR_SIGNALED_DOWN)
            } else {
                None
            }
        } else {
            match (self.state, packet.state) {
                (State::Down, State::Down) => self.set_state(State::Init, diag::NONE),
                (State::Down, State::Init) | (State::Init, State::Init | State::Up) => {
                    self.set_state(State::Up, diag::NONE)
                }
                (State::Up, State::Down) => {
                    self.set_state(State::Down, diag::NEIGHBOR_SIGNALED_DOWN)
                }
                _ => None,
            }
        };
        Received::Taken(changed)
    }

    /// The detection time passed without a packet: `Some(Down)` when that
    /// took the session down.
    pub fn expire(&mut self) -> Option<State> {
        self.remote_discriminator = 0;
        self.last_heard = None;
        match self.state {
            State::Init | State::Up => self.set_state(State::Down, diag::DETECTION_TIME_EXPIRED),
            _ => None,
        }
    }

    /// The local system takes the session down on purpose (a graceful
    /// stop): the remote learns it is no failure (RFC 5880 6.8.16).
    pub fn admin_down(&mut self) {
        self.set_state(State::AdminDown, diag::ADMINISTRATIVELY_DOWN);
    }
}

/// RFC 5880 6.8.7: each interval reduced by a random 0-25 % so sessions
/// do not synchronise, to 75-90 % with a multiplier of 1 so one late
/// packet cannot miss the remote's detection time.
pub fn jittered(interval: Duration, detect_mult: u8, rng: &mut impl Rng) -> Duration {
    let percent = if detect_mult == 1 {
        rng.random_range(75..=90)
    } else {
        rng.random_range(75..=100)
    };
    interval * percent / 100
}

/// What a BFD session looks like from outside.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BfdStatus {
    pub state: State,
    /// Why the session last went down (RFC 5880 diagnostic).
    pub diag: u8,
    /// Up to Down for a reason other than the remote's AdminDown: the
    /// router is gone, and the BGP session with it.
    pub failures: u64,
}

type Routes = Arc<Mutex<HashMap<IpAddr, mpsc::UnboundedSender<ControlPacket>>>>;

/// The thread BFD runs on, with a tokio runtime of its own: a packet due
/// every 100 ms must not wait behind whatever keeps the serving runtime
/// busy. Stopped (its tasks with it) when dropped.
#[derive(Debug)]
struct BfdThread {
    runtime: tokio::runtime::Handle,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl BfdThread {
    fn start() -> Result<BfdThread, Error> {
        let io = |e| Error::Io("starting the BFD thread", e);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io)?;
        let handle = runtime.handle().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        std::thread::Builder::new()
            .name("teapot-bfd".into())
            .spawn(move || {
                runtime.block_on(async {
                    let _ = stopped.await;
                });
            })
            .map_err(io)?;
        Ok(BfdThread {
            runtime: handle,
            stop: Some(stop),
        })
    }
}

impl Drop for BfdThread {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The receiving end every BFD session of a speaker shares: one socket
/// per address family on port 3784, opened with the first session of the
/// family. Packets are handed to the session of their source address;
/// packets from anyone else, or that came from beyond the link (TTL or
/// hop limit below 255), are dropped. The sessions and the sockets run
/// on a thread of their own, started with the first session.
#[derive(Debug)]
pub struct Listener {
    port: u16,
    routes: Routes,
    thread: Mutex<Option<BfdThread>>,
    /// Which families' sockets are open: IPv4, IPv6.
    open: Mutex<[bool; 2]>,
}

/// A session's place in the [`Listener`]: its packets arrive on `packets`;
/// dropping it frees the source address.
#[derive(Debug)]
pub struct Registration {
    peer: IpAddr,
    routes: Routes,
    pub packets: mpsc::UnboundedReceiver<ControlPacket>,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Ok(mut routes) = self.routes.lock() {
            routes.remove(&self.peer);
        }
    }
}

impl Listener {
    /// `port` is [`CONTROL_PORT`] outside tests.
    pub fn new(port: u16) -> Listener {
        Listener {
            port,
            routes: Arc::default(),
            thread: Mutex::default(),
            open: Mutex::default(),
        }
    }

    /// The BFD thread's runtime, started on first use.
    fn runtime(&self) -> Result<tokio::runtime::Handle, Error> {
        let mut thread = self.thread.lock().expect("BFD thread lock");
        if thread.is_none() {
            *thread = Some(BfdThread::start()?);
        }
        Ok(thread.as_ref().expect("started").runtime.clone())
    }

    /// Takes the packets from `peer`, opening the family's socket if it is
    /// not open yet.
    pub fn register(&self, peer: IpAddr) -> Result<Registration, Error> {
        let runtime = self.runtime()?;
        {
            let mut open = self.open.lock().expect("BFD listener lock");
            let family = peer.is_ipv6() as usize;
            if !open[family] {
                let socket = listen_socket(peer, self.port)?;
                let routes = self.routes.clone();
                runtime.spawn(async move {
                    // Registered with the reactor of the thread that reads it.
                    match UdpSocket::from_std(socket) {
                        Ok(socket) => read_packets(socket, routes).await,
                        Err(e) => tracing::error!(error = %e, "registering the BFD socket"),
                    }
                });
                open[family] = true;
            }
        }
        let (tx, packets) = mpsc::unbounded_channel();
        let mut routes = self.routes.lock().expect("BFD listener lock");
        if routes.contains_key(&peer) {
            return Err(Error::Config {
                setting: format!("BGP peer {peer} bfd"),
                reason: "another BFD session has this address".into(),
            });
        }
        routes.insert(peer, tx);
        Ok(Registration {
            peer,
            routes: self.routes.clone(),
            packets,
        })
    }
}

fn listen_socket(peer: IpAddr, port: u16) -> Result<std::net::UdpSocket, Error> {
    let io = |what: &'static str| move |e| Error::Io(what, e);
    let (domain, any) = match peer {
        IpAddr::V4(_) => (socket2::Domain::IPV4, IpAddr::V4(Ipv4Addr::UNSPECIFIED)),
        IpAddr::V6(_) => (socket2::Domain::IPV6, IpAddr::V6(Ipv6Addr::UNSPECIFIED)),
    };
    let socket = socket2::Socket::new(domain, socket2::Type::DGRAM, Some(socket2::Protocol::UDP))
        .map_err(io("creating the BFD socket"))?;
    socket
        .set_reuse_address(true)
        .map_err(io("setting SO_REUSEADDR on the BFD socket"))?;
    if peer.is_ipv6() {
        socket
            .set_only_v6(true)
            .map_err(io("setting IPV6_V6ONLY on the BFD socket"))?;
        setsockopt(&socket, sockopt::Ipv6RecvHopLimit, &true)
    } else {
        setsockopt(&socket, sockopt::Ipv4RecvTtl, &true)
    }
    .map_err(|e| Error::Io("asking for the TTL of BFD packets", e.into()))?;
    socket
        .set_nonblocking(true)
        .map_err(io("setting the BFD socket non-blocking"))?;
    socket
        .bind(&SocketAddr::new(any, port).into())
        .map_err(io("binding the BFD port"))?;
    Ok(socket.into())
}

/// One datagram with the TTL (hop limit) it arrived with.
fn receive_one(
    socket: &UdpSocket,
    buf: &mut [u8],
) -> std::io::Result<(usize, IpAddr, Option<i32>)> {
    let mut cmsg = nix::cmsg_space!(i32);
    let mut iov = [IoSliceMut::new(buf)];
    let msg = recvmsg::<SockaddrStorage>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut cmsg),
        MsgFlags::empty(),
    )?;
    let mut ttl = None;
    for c in msg.cmsgs()? {
        match c {
            ControlMessageOwned::Ipv4Ttl(t) | ControlMessageOwned::Ipv6HopLimit(t) => ttl = Some(t),
            _ => {}
        }
    }
    let from = msg
        .address
        .and_then(|a| {
            a.as_sockaddr_in()
                .map(|a| IpAddr::V4(a.ip()))
                .or_else(|| a.as_sockaddr_in6().map(|a| IpAddr::V6(a.ip())))
        })
        .ok_or_else(|| std::io::Error::other("datagram without a source address"))?;
    Ok((msg.bytes, from.to_canonical(), ttl))
}

async fn read_packets(socket: UdpSocket, routes: Routes) {
    let mut buf = [0u8; 512];
    loop {
        let received = socket
            .async_io(Interest::READABLE, || receive_one(&socket, &mut buf))
            .await;
        let (len, from, ttl) = match received {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(error = %e, "reading a BFD packet");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        if ttl != Some(TTL as i32) {
            tracing::debug!(%from, ?ttl, "BFD packet not from a direct neighbour: dropped");
            continue;
        }
        let packet = match ControlPacket::decode(&buf[..len]) {
            Ok(p) => p,
            Err(e) => {
                tracing::debug!(%from, error = %e, "BFD packet dropped");
                continue;
            }
        };
        let route = routes.lock().ok().and_then(|r| r.get(&from).cloned());
        if let Some(route) = route {
            let _ = route.send(packet);
        }
    }
}

/// The sending socket of one session: from `local` and a port of
/// [`SOURCE_PORTS`], to `peer`, TTL 255.
fn send_socket(local: IpAddr, peer: SocketAddr) -> Result<std::net::UdpSocket, Error> {
    let mut last = None;
    // RFC 5881 4: the source port is unique per session; a taken one is
    // another session's, so try others.
    for _ in 0..64 {
        let port = rand::rng().random_range(SOURCE_PORTS);
        match std::net::UdpSocket::bind(SocketAddr::new(local, port)) {
            Ok(socket) => {
                match peer {
                    SocketAddr::V4(_) => socket.set_ttl(TTL as u32),
                    SocketAddr::V6(_) => {
                        socket2::SockRef::from(&socket).set_unicast_hops_v6(TTL as u32)
                    }
                }
                .map_err(|e| Error::Io("setting the BFD TTL", e))?;
                socket
                    .connect(peer)
                    .map_err(|e| Error::Io("addressing the BFD peer", e))?;
                socket
                    .set_nonblocking(true)
                    .map_err(|e| Error::Io("setting the BFD socket non-blocking", e))?;
                return Ok(socket);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => last = Some(e),
            Err(e) => return Err(Error::Io("binding the BFD source port", e)),
        }
    }
    Err(Error::Io(
        "binding the BFD source port",
        last.unwrap_or_else(|| std::io::Error::other("no free port")),
    ))
}

/// The local address a packet to `peer` leaves from (the kernel's route
/// lookup; nothing is sent).
pub fn local_address_towards(peer: IpAddr) -> Result<IpAddr, Error> {
    let any = match peer {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
    };
    let io = |e| Error::Io("finding the local address towards the BFD peer", e);
    let probe = std::net::UdpSocket::bind(SocketAddr::new(any, 0)).map_err(io)?;
    probe
        .connect(SocketAddr::new(peer, CONTROL_PORT))
        .map_err(io)?;
    Ok(probe.local_addr().map_err(io)?.ip())
}

/// How the owner of a running session asks for AdminDown and reads its
/// state; dropping it ends the session.
#[derive(Debug)]
pub struct Handle {
    admin_down: watch::Sender<bool>,
    pub status: watch::Receiver<BfdStatus>,
    task: JoinHandle<()>,
}

impl Handle {
    /// Sends AdminDown (three times: it is UDP and said once) and returns
    /// when it is out; the session stays AdminDown until dropped.
    pub async fn admin_down(&mut self) {
        let _ = self.admin_down.send(true);
        let _ = self
            .status
            .wait_for(|s| s.state == State::AdminDown)
            .await
            .is_ok();
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the session with `peer` (its control port `peer_port`), sending
/// from `local`, on the listener's BFD thread; runs until the [`Handle`]
/// is dropped.
pub fn start(
    listener: &Listener,
    local: IpAddr,
    peer: IpAddr,
    peer_port: u16,
    timing: Timing,
) -> Result<Handle, Error> {
    let registration = listener.register(peer)?;
    let socket = send_socket(local, SocketAddr::new(peer, peer_port))?;
    let (admin_down, admin_down_rx) = watch::channel(false);
    let (status_tx, status) = watch::channel(BfdStatus::default());
    let discriminator = rand::rng().random_range(1..=u32::MAX);
    let machine = Machine::new(discriminator, timing);
    let task = listener.runtime()?.spawn(async move {
        match UdpSocket::from_std(socket) {
            Ok(socket) => run(socket, registration, machine, admin_down_rx, status_tx).await,
            Err(e) => tracing::error!(%peer, error = %e, "registering the BFD socket"),
        }
    });
    Ok(Handle {
        admin_down,
        status,
        task,
    })
}

async fn run(
    socket: UdpSocket,
    mut registration: Registration,
    mut machine: Machine,
    mut admin_down: watch::Receiver<bool>,
    status: watch::Sender<BfdStatus>,
) {
    let peer = registration.peer;
    let send = |machine: &mut Machine| {
        let packet = machine.packet();
        tracing::trace!(%peer, ?packet, "BFD packet out");
        let packet = packet.encode();
        // Best effort: a lost packet is what BFD's multiplier is for; a
        // send error (no route yet) is the same to the remote.
        if let Err(e) = socket.try_send(&packet) {
            tracing::debug!(%peer, error = %e, "sending a BFD packet");
        }
    };
    // `ThreadRng` cannot cross an await.
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    let mut next_tx = Instant::now();
    let far = Duration::from_secs(86_400);
    loop {
        let detect_at = machine.detect_deadline();
        tokio::select! {
            biased;
            changed = admin_down.changed(), if machine.state() != State::AdminDown => {
                if changed.is_err() {
                    return;
                }
                machine.admin_down();
                for _ in 0..3 {
                    send(&mut machine);
                }
                status.send_modify(|s| {
                    s.state = State::AdminDown;
                    s.diag = machine.diag();
                });
            }
            packet = registration.packets.recv() => {
                let Some(packet) = packet else { return };
                tracing::trace!(%peer, ?packet, "BFD packet in");
                let was = machine.state();
                let interval_was = machine.tx_interval();
                if let Received::Taken(Some(now_state)) = machine.receive(&packet, Instant::now()) {
                    transition(&status, &machine, peer, was, now_state);
                    if was == State::Down {
                        // Answer at once: the remote moves on without
                        // waiting a slow interval.
                        next_tx = Instant::now();
                    }
                }
                if machine.final_due() {
                    send(&mut machine);
                }
                // Up (or the remote asking for more): the packet due after
                // a slow interval comes at the new pace, or the remote's
                // detection time runs out before it.
                if let Some(interval) = machine.tx_interval()
                    && interval_was.is_none_or(|was| interval < was)
                {
                    let sooner = Instant::now() + jittered(interval, machine.timing.multiplier, &mut rng);
                    next_tx = next_tx.min(sooner);
                }
            }
            _ = sleep_until(next_tx) => {
                send(&mut machine);
                let interval = machine.tx_interval().unwrap_or(far);
                next_tx = Instant::now() + jittered(interval, machine.timing.multiplier, &mut rng);
            }
            _ = async { sleep_until(detect_at.unwrap_or_else(Instant::now)).await }, if detect_at.is_some() => {
                let was = machine.state();
                if let Some(now_state) = machine.expire() {
                    transition(&status, &machine, peer, was, now_state);
                }
            }
        }
    }
}

fn transition(
    status: &watch::Sender<BfdStatus>,
    machine: &Machine,
    peer: IpAddr,
    was: State,
    now: State,
) {
    let remote_admin_down = machine.remote_state() == State::AdminDown;
    let failed = was == State::Up && now == State::Down && !remote_admin_down;
    if now == State::Up {
        tracing::info!(%peer, "BFD session up");
    } else if was == State::Up {
        tracing::warn!(%peer, state = now.as_str(), diag = diag::text(machine.diag()), "BFD session down");
    }
    status.send_modify(|s| {
        s.state = now;
        s.diag = machine.diag();
        s.failures += failed as u64;
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    const TIMING: Timing = Timing {
        interval: Duration::from_millis(100),
        multiplier: 3,
    };

    #[test]
    fn timing_parses_and_refuses_with_the_reason() {
        assert_eq!(Timing::parse("100x3"), Ok(TIMING));
        for (bad, says) in [
            ("fastx3", "INTERVALxMULTIPLIER"),
            ("100", "INTERVALxMULTIPLIER"),
            ("100x300", "INTERVALxMULTIPLIER"),
            ("5x3", "minimum"),
            ("20000x3", "above"),
            ("100x0", "detects nothing"),
        ] {
            let e = Timing::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn control_packet_matches_hand_assembled_bytes() {
        let packet = ControlPacket {
            diag: diag::DETECTION_TIME_EXPIRED,
            state: State::Up,
            poll: true,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 0x0102_0304,
            your_discriminator: 0xa0b0_c0d0,
            desired_min_tx: Duration::from_millis(100),
            required_min_rx: Duration::from_millis(300),
            required_min_echo_rx: Duration::ZERO,
        };
        let bytes = [
            0x21, // version 1, diag 1
            0xe0, // state Up (3 << 6), Poll
            3,    // detect mult
            24,   // length
            0x01, 0x02, 0x03, 0x04, // my discriminator
            0xa0, 0xb0, 0xc0, 0xd0, // your discriminator
            0x00, 0x01, 0x86, 0xa0, // 100,000 µs
            0x00, 0x04, 0x93, 0xe0, // 300,000 µs
            0, 0, 0, 0, // no echo
        ];
        assert_eq!(packet.encode(), bytes);
        assert_eq!(ControlPacket::decode(&bytes).unwrap(), packet);

        // AdminDown with Final, the way a graceful stop answers a poll.
        let admin = [
            0x27, 0x10, 5, 24, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0x0f, 0x42, 0x40, 0, 0, 0, 0, 0, 0, 0, 0,
        ];
        let decoded = ControlPacket::decode(&admin).unwrap();
        assert_eq!(decoded.state, State::AdminDown);
        assert_eq!(decoded.diag, diag::ADMINISTRATIVELY_DOWN);
        assert!(decoded.final_ && !decoded.poll);
        assert_eq!(decoded.desired_min_tx, Duration::from_secs(1));
        assert_eq!(decoded.required_min_rx, Duration::ZERO);
        assert_eq!(decoded.encode(), admin);
    }

    #[test]
    fn packets_failing_rfc_5880_checks_are_discarded() {
        let good = ControlPacket {
            diag: 0,
            state: State::Up,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 7,
            your_discriminator: 9,
            desired_min_tx: Duration::from_millis(100),
            required_min_rx: Duration::from_millis(100),
            required_min_echo_rx: Duration::ZERO,
        }
        .encode();
        let with = |f: &dyn Fn(&mut [u8; 24])| {
            let mut b = good;
            f(&mut b);
            ControlPacket::decode(&b).unwrap_err().to_string()
        };
        assert!(with(&|b| b[0] = 0x40).contains("version 2"));
        assert!(with(&|b| b[1] |= 0x04).contains("authentication"));
        assert!(with(&|b| b[2] = 0).contains("multiplier 0"));
        assert!(with(&|b| b[1] |= 0x01).contains("multipoint"));
        assert!(with(&|b| b[3] = 23).contains("length field 23"));
        assert!(with(&|b| b[3] = 25).contains("length field 25"));
        assert!(with(&|b| b[4..8].fill(0)).contains("my discriminator 0"));
        assert!(with(&|b| b[8..12].fill(0)).contains("your discriminator 0 in state Up"));
        assert!(
            ControlPacket::decode(&good[..20])
                .unwrap_err()
                .to_string()
                .contains("20 bytes")
        );
        // Your Discriminator 0 is how a session starts.
        let mut first = good;
        first[1] = 1 << 6;
        first[8..12].fill(0);
        assert_eq!(ControlPacket::decode(&first).unwrap().state, State::Down);
    }

    fn from_remote(state: State, your: u32) -> ControlPacket {
        ControlPacket {
            diag: 0,
            state,
            poll: false,
            final_: false,
            control_plane_independent: false,
            demand: false,
            detect_mult: 3,
            my_discriminator: 42,
            your_discriminator: your,
            desired_min_tx: Duration::from_millis(300),
            required_min_rx: Duration::from_millis(200),
            required_min_echo_rx: Duration::ZERO,
        }
    }

    /// A session (discriminator 7) brought Up by a remote (42).
    fn up(now: Instant) -> Machine {
        let mut m = Machine::new(7, TIMING);
        m.receive(&from_remote(State::Down, 0), now);
        m.receive(&from_remote(State::Up, 7), now);
        m
    }

    #[test]
    fn three_way_handshake_and_the_slower_side_wins() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        // Not Up: no faster than a second, whatever is configured.
        let first = m.packet();
        assert_eq!((first.state, first.your_discriminator), (State::Down, 0));
        assert_eq!(first.desired_min_tx, SLOW_TX);
        assert_eq!(first.required_min_rx, Duration::from_millis(100));
        assert_eq!(m.tx_interval(), Some(SLOW_TX));

        assert_eq!(
            m.receive(&from_remote(State::Down, 0), now),
            Received::Taken(Some(State::Init))
        );
        assert_eq!(m.packet().your_discriminator, 42);
        assert_eq!(
            m.receive(&from_remote(State::Up, 7), now),
            Received::Taken(Some(State::Up))
        );
        // Up: our 100 ms against the remote's 200 ms Required Min RX.
        assert_eq!(m.tx_interval(), Some(Duration::from_millis(200)));
        // Detection: its multiplier 3 times the slower of its 300 ms TX
        // and our 100 ms RX.
        assert_eq!(m.detection_time(), Duration::from_millis(900));
        assert_eq!(m.detect_deadline(), Some(now + Duration::from_millis(900)));
        // Our Desired Min TX dropped to 100 ms: a Poll Sequence tells the
        // remote, until its Final.
        let polled = m.packet();
        assert!(polled.poll);
        assert_eq!(polled.desired_min_tx, Duration::from_millis(100));
        let mut fin = from_remote(State::Up, 7);
        fin.final_ = true;
        m.receive(&fin, now);
        assert!(!m.packet().poll);
    }

    #[test]
    fn a_poll_is_answered_with_final_and_without_poll() {
        let now = Instant::now();
        let mut m = up(now);
        assert!(m.packet().poll, "our own poll sequence runs");
        let mut poll = from_remote(State::Up, 7);
        poll.poll = true;
        m.receive(&poll, now);
        assert!(m.final_due());
        let answer = m.packet();
        assert!(answer.final_ && !answer.poll);
        assert!(!m.final_due());
    }

    #[test]
    fn from_init_the_remote_up_or_init_brings_the_session_up() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        m.receive(&from_remote(State::Down, 0), now);
        assert_eq!(
            m.receive(&from_remote(State::Init, 7), now),
            Received::Taken(Some(State::Up))
        );
        let mut n = Machine::new(8, TIMING);
        assert_eq!(
            n.receive(&from_remote(State::Init, 8), now),
            Received::Taken(Some(State::Up)),
            "Down and the remote in Init: Up"
        );
        assert_eq!(
            n.receive(&from_remote(State::Init, 8), now),
            Received::Taken(None)
        );
    }

    #[test]
    fn silence_for_the_detection_time_takes_the_session_down() {
        let now = Instant::now();
        let mut m = up(now);
        assert_eq!(m.expire(), Some(State::Down));
        assert_eq!(m.diag(), diag::DETECTION_TIME_EXPIRED);
        let p = m.packet();
        assert_eq!((p.state, p.your_discriminator), (State::Down, 0));
        assert_eq!(p.desired_min_tx, SLOW_TX, "back to the slow rate");
        assert_eq!(m.detect_deadline(), None, "nothing more to detect");
        assert_eq!(m.expire(), None);
    }

    #[test]
    fn the_remote_going_down_or_admin_down_takes_the_session_down() {
        let now = Instant::now();
        let mut m = up(now);
        assert_eq!(
            m.receive(&from_remote(State::Down, 7), now),
            Received::Taken(Some(State::Down))
        );
        assert_eq!(m.diag(), diag::NEIGHBOR_SIGNALED_DOWN);

        let mut m = up(now);
        assert_eq!(
            m.receive(&from_remote(State::AdminDown, 7), now),
            Received::Taken(Some(State::Down))
        );
        assert_eq!(m.remote_state(), State::AdminDown);
        // Down stays Down while the remote is AdminDown.
        assert_eq!(
            m.receive(&from_remote(State::AdminDown, 7), now),
            Received::Taken(None)
        );
    }

    #[test]
    fn other_sessions_packets_and_admin_down_are_not_taken() {
        let now = Instant::now();
        let mut m = Machine::new(7, TIMING);
        assert_eq!(
            m.receive(&from_remote(State::Up, 8), now),
            Received::Discarded
        );
        m.admin_down();
        let p = m.packet();
        assert_eq!(
            (p.state, p.diag),
            (State::AdminDown, diag::ADMINISTRATIVELY_DOWN)
        );
        assert_eq!(
            m.receive(&from_remote(State::Down, 0), now),
            Received::Discarded
        );
    }

    #[test]
    fn a_remote_asking_for_no_packets_gets_none() {
        let mut m = Machine::new(7, TIMING);
        let mut quiet = from_remote(State::Down, 0);
        quiet.required_min_rx = Duration::ZERO;
        m.receive(&quiet, Instant::now());
        assert_eq!(m.tx_interval(), None);
    }

    #[test]
    fn jitter_stays_within_rfc_5880_bounds() {
        let mut rng = rand::rng();
        let interval = Duration::from_millis(100);
        for _ in 0..1000 {
            let j = jittered(interval, 3, &mut rng);
            assert!(j >= Duration::from_millis(75) && j <= interval, "{j:?}");
            let j = jittered(interval, 1, &mut rng);
            assert!(
                j >= Duration::from_millis(75) && j <= Duration::from_millis(90),
                "{j:?}"
            );
        }
    }
}
