//! The sockets and the thread of BFD: the receiving [`Listener`] every
//! session of a speaker shares (port 3784, GTSM), each session's sending
//! socket, and the task that runs a [`Machine`] against them.

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

use super::packet::{ControlPacket, diag};
use super::session::{Machine, Received, jittered};
use super::{BfdStatus, CONTROL_PORT, SOURCE_PORTS, State, TTL, Timing};

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
