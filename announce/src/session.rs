//! The per-peer task: connect, OPEN, keep the session alive, announce and
//! withdraw as the watched address set changes, and reconnect with backoff
//! when the session ends. On stop, the graceful sequence of RFC 8326.
//! With graceful restart (RFC 4724) configured, the OPEN carries the
//! capability and the initial announcements end with End-of-RIB, so a
//! router keeps this speaker's routes while it restarts.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::time::{Instant, sleep, sleep_until, timeout};

use crate::Error;
use crate::bfd;
use crate::md5;
use crate::peer::{PeerConfig, PeerStatus, SessionState};
use crate::wire::{
    self, Family, GracefulRestart, Message, Notification, Open, PathAttributes, code,
};

/// First pause after a failed or ended session; doubles up to
/// [`MAX_BACKOFF`] and starts over after an established session.
pub const MIN_BACKOFF: Duration = Duration::from_secs(1);
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// How long to wait for the TCP connection and for the peer's OPEN
/// (RFC 4271 suggests a large OpenSent hold time; routers answer at once).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const OPEN_TIMEOUT: Duration = Duration::from_secs(30);
/// What a connection timeout says when the peer has a TCP-MD5 password: a
/// router with another password (or none) drops the signed SYN without a
/// word, so a mismatch shows as nothing but this timeout.
const CONNECT_TIMEOUT_WITH_MD5: &str = "connecting, with TCP-MD5 configured (a password the router does not share looks exactly like this: it drops the segments unanswered)";

/// What every session of one speaker shares.
#[derive(Debug)]
pub struct Shared {
    pub local_asn: u32,
    pub router_id: Option<Ipv4Addr>,
    pub graceful_shutdown_wait: Duration,
    /// Where BFD packets from the routers arrive.
    pub bfd: bfd::Listener,
    /// The routers' BFD port ([`bfd::CONTROL_PORT`] outside tests).
    pub bfd_peer_port: u16,
    /// The restart time offered in the Graceful Restart capability;
    /// `None`: no capability, no End-of-RIB.
    pub graceful_restart: Option<Duration>,
}

/// How one session ended.
enum Ended {
    /// Stop was asked and the graceful sequence ran (or nothing was open).
    Stopped,
    /// The session had been established: the next attempt starts at the
    /// shortest backoff.
    AfterEstablished(Error),
    Failed(Error),
}

/// Runs until `stop` turns true: one session after another with backoff.
pub async fn run(
    shared: Arc<Shared>,
    peer: PeerConfig,
    mut addrs: watch::Receiver<BTreeSet<IpAddr>>,
    mut stop: watch::Receiver<bool>,
    status: watch::Sender<PeerStatus>,
    // A passive peer's connections, accepted by the speaker.
    mut incoming: Option<tokio::sync::mpsc::Receiver<TcpStream>>,
) {
    let mut backoff = MIN_BACKOFF;
    // Lives as long as the peer's task, across BGP sessions: the router's BFD
    // hears from this process as long as it runs.
    let mut bfd: Option<bfd::Handle> = None;
    // The Restart State bit goes on every session until one is
    // established: this process has no routes of its own to remember, so
    // its first session after start is the one after a restart, if there
    // was one (docs/announce.md, "Graceful restart").
    let mut first = true;
    loop {
        if stopping(&stop) {
            break;
        }
        if let (Some(timing), None) = (peer.bfd, &bfd) {
            match start_bfd(&shared, &peer, timing, &status) {
                Ok(handle) => bfd = Some(handle),
                Err(err) => {
                    failed(&peer, &status, &err, backoff);
                    tokio::select! {
                        _ = sleep(backoff) => {}
                        _ = until_stopped(&mut stop) => break,
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
        }
        let ended = session(
            &shared,
            &peer,
            &mut addrs,
            &mut stop,
            &status,
            bfd.as_mut(),
            Attempt {
                first,
                incoming: incoming.as_mut(),
            },
        )
        .await;
        status.send_modify(|s| {
            s.state = SessionState::Idle;
            s.announced = 0;
            s.families.clear();
        });
        if !matches!(ended, Ended::Failed(_)) {
            first = false;
        }
        let err = match ended {
            Ended::Stopped => break,
            Ended::AfterEstablished(err) => {
                backoff = MIN_BACKOFF;
                err
            }
            Ended::Failed(err) => err,
        };
        failed(&peer, &status, &err, backoff);
        tokio::select! {
            _ = sleep(backoff) => {}
            _ = until_stopped(&mut stop) => break,
        }
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
    // Stopped on purpose: the router's BFD learns it is no failure
    // (already done before the CEASE when a session was established).
    if let Some(bfd) = bfd.as_mut() {
        bfd.admin_down().await;
    }
    status.send_modify(|s| s.state = SessionState::Idle);
}

/// Records why a session failed or ended: `last_error` names the peer,
/// the failure is counted by reason, and the log says when the next
/// attempt comes.
fn failed(peer: &PeerConfig, status: &watch::Sender<PeerStatus>, err: &Error, retry_in: Duration) {
    let reason = err.failure_reason();
    tracing::warn!(peer = %peer.socket_addr(), error = %err, reason, ?retry_in, "BGP session down");
    status.send_modify(|s| {
        s.last_error = Some(format!("BGP peer {}: {err}", peer.socket_addr()));
        *s.failures.entry(reason).or_default() += 1;
    });
}

/// The BFD session beside a peer's BGP sessions, from the address a BGP
/// session to it would use; its state is copied into the peer's status.
fn start_bfd(
    shared: &Shared,
    peer: &PeerConfig,
    timing: bfd::Timing,
    status: &watch::Sender<PeerStatus>,
) -> Result<bfd::Handle, Error> {
    let local = match peer.source {
        Some(source) => source,
        None => bfd::local_address_towards(peer.address)?,
    };
    let handle = bfd::start(
        &shared.bfd,
        local,
        peer.address,
        shared.bfd_peer_port,
        timing,
    )?;
    let mut bfd_status = handle.status.clone();
    let status = status.clone();
    // Ends when the handle is dropped (the BFD task and its sender go).
    tokio::spawn(async move {
        loop {
            let now = *bfd_status.borrow_and_update();
            status.send_modify(|s| s.bfd = Some(now));
            if bfd_status.changed().await.is_err() {
                break;
            }
        }
    });
    Ok(handle)
}

/// Stop was asked, or whoever could ask is gone.
fn stopping(stop: &watch::Receiver<bool>) -> bool {
    *stop.borrow() || stop.has_changed().is_err()
}

/// Resolves when stop is asked or whoever could ask is gone.
async fn until_stopped(stop: &mut watch::Receiver<bool>) {
    // The guard `wait_for` returns is not `Send`: drop it here.
    let _ = stop.wait_for(|stop| *stop).await.is_ok();
}

async fn connect(peer: &PeerConfig, local_asn: u32) -> Result<TcpStream, Error> {
    let target = peer.socket_addr();
    let io = |what: &'static str| move |e| Error::Io(what, e);
    let socket = match target {
        SocketAddr::V4(_) => TcpSocket::new_v4(),
        SocketAddr::V6(_) => TcpSocket::new_v6(),
    }
    .map_err(io("creating the socket"))?;
    if let Some(source) = peer.source {
        socket
            .bind(SocketAddr::new(source, 0))
            .map_err(io("binding the source address"))?;
    }
    // Directly connected eBGP speaks with TTL 1 (RFC 4271 practice; a
    // router with GTSM expects it); multihop raises it; iBGP keeps the
    // system default.
    let ttl = match peer.multihop_ttl {
        Some(ttl) => Some(ttl),
        None if peer.remote_asn != local_asn => Some(1),
        None => None,
    };
    if let Some(ttl) = ttl {
        let sock = socket2::SockRef::from(&socket);
        match target {
            SocketAddr::V4(_) => sock.set_ttl_v4(ttl as u32),
            SocketAddr::V6(_) => sock.set_unicast_hops_v6(ttl as u32),
        }
        .map_err(io("setting the TTL"))?;
    }
    if let Some(key) = &peer.md5 {
        md5::set_key(&socket, peer.address, key).map_err(io("setting TCP-MD5 (TCP_MD5SIG)"))?;
    }
    let stream = timeout(CONNECT_TIMEOUT, socket.connect(target))
        .await
        .map_err(|_| {
            Error::Timeout(match peer.md5 {
                Some(_) => CONNECT_TIMEOUT_WITH_MD5,
                None => "connecting",
            })
        })?
        .map_err(io("connecting"))?;
    stream
        .set_nodelay(true)
        .map_err(io("setting TCP_NODELAY"))?;
    Ok(stream)
}

/// A passive peer's connection, set up as [`connect`] sets up its own:
/// the TTL by the same rule, no Nagle.
fn accepted(peer: &PeerConfig, local_asn: u32, stream: TcpStream) -> Result<TcpStream, Error> {
    let io = |what: &'static str| move |e| Error::Io(what, e);
    let ttl = match peer.multihop_ttl {
        Some(ttl) => Some(ttl),
        None if peer.remote_asn != local_asn => Some(1),
        None => None,
    };
    if let Some(ttl) = ttl {
        let sock = socket2::SockRef::from(&stream);
        match stream
            .local_addr()
            .map_err(io("reading the local address"))?
        {
            SocketAddr::V4(_) => sock.set_ttl_v4(ttl as u32),
            SocketAddr::V6(_) => sock.set_unicast_hops_v6(ttl as u32),
        }
        .map_err(io("setting the TTL"))?;
    }
    stream
        .set_nodelay(true)
        .map_err(io("setting TCP_NODELAY"))?;
    Ok(stream)
}

/// The session's reading and writing, with the bytes read but not yet
/// taken as messages.
struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    write_timeout: Duration,
}

impl Conn {
    async fn send(&mut self, bytes: &[u8]) -> Result<(), Error> {
        timeout(self.write_timeout, self.stream.write_all(bytes))
            .await
            .map_err(|_| Error::Timeout("writing to the peer"))?
            .map_err(|e| Error::Io("writing to the peer", e))
    }

    async fn send_all(&mut self, messages: Vec<Vec<u8>>) -> Result<(), Error> {
        for m in messages {
            self.send(&m).await?;
        }
        Ok(())
    }

    /// One whole message if the buffer holds one.
    fn take(&mut self) -> Result<Option<Message>, Error> {
        match wire::decode(&self.buf)? {
            Some((message, len)) => {
                self.buf.drain(..len);
                Ok(Some(message))
            }
            None => Ok(None),
        }
    }

    /// Reads more bytes. Cancel-safe: `read_buf` only appends what it read.
    async fn fill(&mut self) -> Result<(), Error> {
        match self.stream.read_buf(&mut self.buf).await {
            Ok(0) => Err(Error::Closed),
            Ok(_) => Ok(()),
            Err(e) => Err(Error::Io("reading from the peer", e)),
        }
    }

    async fn next(&mut self) -> Result<Message, Error> {
        loop {
            if let Some(m) = self.take()? {
                return Ok(m);
            }
            self.fill().await?;
        }
    }

    /// [`Conn::next`] with the message's bytes, for what the speaker
    /// reads no further than a look (the router's capabilities).
    async fn next_raw(&mut self) -> Result<(Message, Vec<u8>), Error> {
        loop {
            if let Some((message, len)) = wire::decode(&self.buf)? {
                return Ok((message, self.buf.drain(..len).collect()));
            }
            self.fill().await?;
        }
    }

    async fn notify_and_fail(&mut self, n: Notification, err: Error) -> Error {
        // Best effort: the peer learns why; the error is what is reported.
        let _ = self.send(&wire::encode_notification(&n)).await;
        err
    }
}

fn router_id(shared: &Shared, local: IpAddr) -> Ipv4Addr {
    if let Some(id) = shared.router_id {
        return id;
    }
    match local {
        IpAddr::V4(a) => a,
        // An IPv6-only host has no natural 32-bit identifier: the low 32
        // bits of its address (docs/announce.md says to set one when two
        // speakers could collide).
        IpAddr::V6(a) => {
            let low = u128::from(a) as u32;
            Ipv4Addr::from(low.max(1))
        }
    }
}

/// Announceable families and their next hops on a session from `local`.
fn next_hops(peer: &PeerConfig, local: IpAddr) -> Vec<(Family, IpAddr)> {
    let mut out = Vec::new();
    match (local, peer.next_hop_v4) {
        (_, Some(nh)) => out.push((Family::Ipv4, IpAddr::V4(nh))),
        (IpAddr::V4(a), None) => out.push((Family::Ipv4, IpAddr::V4(a))),
        _ => {}
    }
    match (local, peer.next_hop_v6) {
        (_, Some(nh)) => out.push((Family::Ipv6, IpAddr::V6(nh))),
        (IpAddr::V6(a), None) => out.push((Family::Ipv6, IpAddr::V6(a))),
        _ => {}
    }
    out
}

/// What one session attempt starts from.
struct Attempt<'a> {
    /// The peer's first session since the speaker started (the Restart
    /// State bit).
    first: bool,
    /// A passive peer's accepted connections; `None`: the speaker
    /// connects.
    incoming: Option<&'a mut tokio::sync::mpsc::Receiver<TcpStream>>,
}

async fn session(
    shared: &Shared,
    peer: &PeerConfig,
    addrs: &mut watch::Receiver<BTreeSet<IpAddr>>,
    stop: &mut watch::Receiver<bool>,
    status: &watch::Sender<PeerStatus>,
    bfd: Option<&mut bfd::Handle>,
    attempt: Attempt<'_>,
) -> Ended {
    let Attempt { first, incoming } = attempt;
    status.send_modify(|s| s.state = SessionState::Connect);
    let stream = match incoming {
        None => tokio::select! {
            r = connect(peer, shared.local_asn) => match r {
                Ok(s) => s,
                Err(e) => return Ended::Failed(e),
            },
            _ = until_stopped(stop) => return Ended::Stopped,
        },
        Some(incoming) => tokio::select! {
            s = incoming.recv() => match s {
                // The newest of what waited: the router gave up on the
                // older ones.
                Some(mut s) => {
                    while let Ok(newer) = incoming.try_recv() {
                        s = newer;
                    }
                    match accepted(peer, shared.local_asn, s) {
                        Ok(s) => s,
                        Err(e) => return Ended::Failed(e),
                    }
                }
                None => {
                    let _ = until_stopped(stop).await;
                    return Ended::Stopped;
                }
            },
            _ = until_stopped(stop) => return Ended::Stopped,
        },
    };
    let local = match stream.local_addr() {
        Ok(a) => a.ip(),
        Err(e) => return Ended::Failed(Error::Io("reading the local address", e)),
    };
    let hold = peer.hold_time;
    let mut conn = Conn {
        stream,
        buf: Vec::with_capacity(4096),
        write_timeout: if hold.is_zero() { OPEN_TIMEOUT } else { hold },
    };
    let offered = next_hops(peer, local);
    let open = Open {
        asn: shared.local_asn,
        hold_time_secs: hold.as_secs() as u16,
        router_id: router_id(shared, local),
        families: offered.iter().map(|(f, _)| *f).collect(),
        four_octet_as: true,
    };
    // The F bit on every family: the speaker keeps no forwarding state
    // to lose, the proxy serves the addresses as soon as it runs again,
    // and a clear bit would make the router flush the stale routes when
    // the session comes back, before they are announced again.
    let graceful_restart = shared.graceful_restart.map(|time| GracefulRestart {
        restarted: first,
        restart_time_secs: time.as_secs().min(wire::MAX_RESTART_TIME_SECS as u64) as u16,
        families: open.families.iter().map(|f| (*f, true)).collect(),
        // No N bit (RFC 8538): a NOTIFICATION ends the session without
        // graceful restart, so a router whose BFD or hold timer finds the
        // replica gone drops its routes at once, and a planned stop's
        // CEASE leaves nothing stale.
        notification: false,
    });
    status.send_modify(|s| s.state = SessionState::OpenSent);
    let (theirs, router_restart) = tokio::select! {
        r = opening(&mut conn, &open, graceful_restart.as_ref(), peer) => match r {
            Ok(theirs) => theirs,
            Err(e) => return Ended::Failed(e),
        },
        _ = until_stopped(stop) => {
            let _ = conn.send(&wire::encode_notification(&wire::cease("speaker stopping"))).await;
            return Ended::Stopped;
        }
    };
    let negotiated = hold.min(Duration::from_secs(theirs.hold_time_secs as u64));
    let families: Vec<(Family, IpAddr)> = offered
        .into_iter()
        .filter(|(f, _)| theirs.families.contains(f))
        .collect();
    let attrs = PathAttributes {
        ebgp_asn: (peer.remote_asn != shared.local_asn).then_some(shared.local_asn),
        four_octet_as: theirs.four_octet_as,
        local_pref: peer.local_pref,
        graceful_shutdown: false,
    };
    let router_restart_time = router_restart.map(|gr| gr.restart_time_secs);
    status.send_modify(|s| {
        s.state = SessionState::Established;
        s.sessions_established += 1;
        s.last_error = None;
        s.families = families.iter().map(|(f, _)| *f).collect();
        s.graceful_restart = shared.graceful_restart.is_some();
        s.router_graceful_restart = router_restart_time;
        s.end_of_rib_sent = false;
    });
    if shared.graceful_restart.is_some() && router_restart_time.is_none() {
        tracing::warn!(peer = %peer.socket_addr(), "graceful restart is configured but the router does not offer it: it drops this replica's routes whenever the session is lost");
    }
    tracing::info!(peer = %peer.socket_addr(), local = %local, hold = ?negotiated, ?families, restart_state = first, ?router_restart_time, "BGP session established");
    let mut established = Established {
        conn,
        families,
        attrs,
        announced: BTreeSet::new(),
        status,
        end_of_rib: shared.graceful_restart.map(|time| Instant::now() + time),
    };
    match established
        .run(
            negotiated,
            peer.keepalive,
            shared.graceful_shutdown_wait,
            addrs,
            stop,
            bfd,
        )
        .await
    {
        Ok(()) => Ended::Stopped,
        Err(e) => Ended::AfterEstablished(e),
    }
}

/// OPEN both ways and the KEEPALIVE that confirms it (OpenSent and
/// OpenConfirm): the peer's OPEN and its Graceful Restart capability.
async fn opening(
    conn: &mut Conn,
    open: &Open,
    graceful_restart: Option<&GracefulRestart>,
    peer: &PeerConfig,
) -> Result<(Open, Option<GracefulRestart>), Error> {
    conn.send(&wire::encode_open_with(open, graceful_restart))
        .await?;
    let (theirs, router_restart) = match timeout(OPEN_TIMEOUT, conn.next_raw()).await {
        Err(_) => return Err(Error::Timeout("waiting for the peer's OPEN")),
        Ok(Err(e)) => return Err(e),
        Ok(Ok((Message::Open(theirs), raw))) => (theirs, wire::graceful_restart_of(&raw)),
        Ok(Ok((Message::Notification(n), _))) => return Err(Error::Notification(n)),
        Ok(Ok((other, _))) => {
            let n = Notification {
                code: code::FSM,
                subcode: 1,
                data: vec![],
            };
            return Err(conn
                .notify_and_fail(n, Error::Protocol(format!("{other:?} before OPEN")))
                .await);
        }
    };
    if theirs.asn != peer.remote_asn {
        let n = Notification {
            code: code::OPEN_MESSAGE,
            subcode: code::BAD_PEER_AS,
            data: vec![],
        };
        let err = Error::WrongPeerAsn {
            got: theirs.asn,
            configured: peer.remote_asn,
        };
        return Err(conn.notify_and_fail(n, err).await);
    }
    if matches!(theirs.hold_time_secs, 1 | 2) {
        let n = Notification {
            code: code::OPEN_MESSAGE,
            subcode: code::UNACCEPTABLE_HOLD_TIME,
            data: vec![],
        };
        let err = Error::Protocol(format!(
            "peer's hold time {} s is below 3 s",
            theirs.hold_time_secs
        ));
        return Err(conn.notify_and_fail(n, err).await);
    }
    conn.send(&wire::encode_keepalive()).await?;
    match timeout(OPEN_TIMEOUT, conn.next()).await {
        Err(_) => Err(Error::Timeout(
            "waiting for the peer's KEEPALIVE after OPEN",
        )),
        Ok(Err(e)) => Err(e),
        Ok(Ok(Message::Keepalive)) => Ok((theirs, router_restart)),
        Ok(Ok(Message::Notification(n))) => Err(Error::Notification(n)),
        Ok(Ok(other)) => {
            let n = Notification {
                code: code::FSM,
                subcode: 2,
                data: vec![],
            };
            Err(conn
                .notify_and_fail(n, Error::Protocol(format!("{other:?} in OpenConfirm")))
                .await)
        }
    }
}

/// A deadline that never comes, for a disabled `select!` branch.
fn far_off() -> Instant {
    Instant::now() + Duration::from_secs(86_400 * 365)
}

struct Established<'a> {
    conn: Conn,
    families: Vec<(Family, IpAddr)>,
    attrs: PathAttributes,
    /// What the router holds from this BGP session.
    announced: BTreeSet<IpAddr>,
    status: &'a watch::Sender<PeerStatus>,
    /// With graceful restart, until End-of-RIB is sent: when it goes at
    /// the latest. It goes after the first announcements of a non-empty
    /// set (a proxy announces nothing until it is ready, and End-of-RIB
    /// before that would flush the routes the router kept), or at the
    /// restart time for a replica that has nothing to announce.
    end_of_rib: Option<Instant>,
}

impl Established<'_> {
    fn carried(&self, addr: &IpAddr) -> bool {
        self.families.iter().any(|(f, _)| *f == Family::of(addr))
    }

    async fn announce(&mut self, addrs: &[IpAddr]) -> Result<(), Error> {
        self.send_routes(addrs, false).await
    }

    async fn withdraw(&mut self, addrs: &[IpAddr]) -> Result<(), Error> {
        self.send_routes(addrs, true).await
    }

    /// Announces or withdraws `addrs`, family by family (addresses of a
    /// family the session does not carry are skipped), and counts them.
    async fn send_routes(&mut self, addrs: &[IpAddr], withdraw: bool) -> Result<(), Error> {
        for (family, next_hop) in self.families.clone() {
            let of_family: Vec<IpAddr> = addrs
                .iter()
                .filter(|a| Family::of(a) == family)
                .copied()
                .collect();
            if of_family.is_empty() {
                continue;
            }
            let messages = if withdraw {
                wire::encode_withdraw(family, &of_family)
            } else {
                wire::encode_announce(family, &of_family, next_hop, &self.attrs)
            };
            self.conn.send_all(messages).await?;
            for a in &of_family {
                if withdraw {
                    self.announced.remove(a);
                } else {
                    self.announced.insert(*a);
                }
            }
            let (sent, now) = (of_family.len() as u64, self.announced.len());
            self.status.send_modify(|s| {
                if withdraw {
                    s.withdrawals_sent += sent;
                } else {
                    s.announcements_sent += sent;
                }
                s.announced = now;
            });
        }
        Ok(())
    }

    /// Brings the router's view to `wanted`: withdrawals first, so a
    /// replaced set never briefly holds both.
    async fn sync(&mut self, wanted: &BTreeSet<IpAddr>) -> Result<(), Error> {
        let gone: Vec<IpAddr> = self.announced.difference(wanted).copied().collect();
        let new: Vec<IpAddr> = wanted
            .iter()
            .filter(|a| !self.announced.contains(a) && self.carried(a))
            .copied()
            .collect();
        self.withdraw(&gone).await?;
        self.announce(&new).await
    }

    /// End-of-RIB for every family of the session, once.
    async fn end_of_rib(&mut self) -> Result<(), Error> {
        if self.end_of_rib.take().is_none() {
            return Ok(());
        }
        let markers = self
            .families
            .iter()
            .map(|(f, _)| wire::encode_end_of_rib(*f))
            .collect();
        self.conn.send_all(markers).await?;
        self.status.send_modify(|s| s.end_of_rib_sent = true);
        tracing::info!(routes = self.announced.len(), "BGP End-of-RIB sent");
        Ok(())
    }

    async fn run(
        &mut self,
        hold: Duration,
        keepalive: Option<Duration>,
        graceful_wait: Duration,
        addrs: &mut watch::Receiver<BTreeSet<IpAddr>>,
        stop: &mut watch::Receiver<bool>,
        mut bfd: Option<&mut bfd::Handle>,
    ) -> Result<(), Error> {
        // RFC 4271 10: keepalive at a third of the hold time unless set
        // lower.
        let keepalive_every = match keepalive {
            Some(k) if k < hold / 3 => k,
            _ => hold / 3,
        };
        let far = Duration::from_secs(86_400 * 365);
        let mut keepalive_at = Instant::now() + if hold.is_zero() { far } else { keepalive_every };
        let mut hold_deadline = Instant::now() + if hold.is_zero() { far } else { hold };
        // `Some(until)`: the graceful-shutdown announcements went out and
        // the withdrawal follows at `until`.
        let mut draining: Option<Instant> = None;
        let mut addrs_open = true;
        // BFD failures before this BGP session are not this BGP session's.
        let mut bfd_status = bfd.as_ref().map(|b| b.status.clone());
        let bfd_failures = bfd_status
            .as_mut()
            .map_or(0, |s| s.borrow_and_update().failures);
        let wanted = addrs.borrow_and_update().clone();
        self.sync(&wanted).await?;
        if !wanted.is_empty() {
            self.end_of_rib().await?;
        }
        loop {
            if draining.is_none() && stopping(stop) {
                self.attrs.graceful_shutdown = true;
                let all: Vec<IpAddr> = self.announced.iter().copied().collect();
                self.announce(&all).await?;
                tracing::info!(routes = all.len(), wait = ?graceful_wait, "BGP graceful shutdown announced");
                draining = Some(Instant::now() + graceful_wait);
            }
            tokio::select! {
                biased;
                _ = stop.changed(), if draining.is_none() => {}
                _ = async { sleep_until(draining.unwrap_or(Instant::now())).await }, if draining.is_some() => {
                    let all: Vec<IpAddr> = self.announced.iter().copied().collect();
                    self.withdraw(&all).await?;
                    // AdminDown before the CEASE: the router's BFD takes
                    // the session down as asked, not as failed.
                    if let Some(bfd) = bfd.as_mut() {
                        bfd.admin_down().await;
                    }
                    let cease = wire::encode_notification(&wire::cease("teapot speaker stopping"));
                    self.conn.send(&cease).await?;
                    let _ = self.conn.stream.shutdown().await;
                    return Ok(());
                }
                read = self.conn.fill() => {
                    read?;
                    while let Some(message) = self.conn.take()? {
                        match message {
                            Message::Keepalive | Message::Update | Message::RouteRefresh => {}
                            Message::Notification(n) => return Err(Error::Notification(n)),
                            Message::Open(_) => {
                                let n = Notification { code: code::FSM, subcode: 3, data: vec![] };
                                return Err(self.conn.notify_and_fail(n, Error::Protocol("OPEN in Established".into())).await);
                            }
                        }
                        if !hold.is_zero() {
                            hold_deadline = Instant::now() + hold;
                        }
                    }
                }
                changed = async { bfd_status.as_mut().expect("guarded").changed().await }, if bfd_status.is_some() => {
                    let Some(watched) = bfd_status.as_mut() else { continue };
                    if changed.is_err() {
                        bfd_status = None;
                        continue;
                    }
                    let now = *watched.borrow_and_update();
                    if now.failures > bfd_failures {
                        // The router stopped answering BFD: it is gone,
                        // and routes through it with it.
                        let n = Notification { code: code::CEASE, subcode: code::BFD_DOWN, data: vec![] };
                        return Err(self.conn.notify_and_fail(n, Error::BfdDown(bfd::diag::text(now.diag))).await);
                    }
                }
                _ = sleep_until(hold_deadline) => {
                    let n = Notification { code: code::HOLD_TIMER_EXPIRED, subcode: 0, data: vec![] };
                    return Err(self.conn.notify_and_fail(n, Error::HoldTimerExpired(hold)).await);
                }
                _ = async { sleep_until(self.end_of_rib.unwrap_or(far_off())).await }, if self.end_of_rib.is_some() => {
                    self.end_of_rib().await?;
                }
                _ = sleep_until(keepalive_at) => {
                    self.conn.send(&wire::encode_keepalive()).await?;
                    keepalive_at = Instant::now() + keepalive_every;
                }
                changed = addrs.changed(), if draining.is_none() && addrs_open => {
                    // The owner of the address set is gone: keep what is
                    // announced until stopped.
                    if changed.is_err() {
                        addrs_open = false;
                        continue;
                    }
                    let wanted = addrs.borrow_and_update().clone();
                    self.sync(&wanted).await?;
                    if !wanted.is_empty() {
                        self.end_of_rib().await?;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The state machine against an in-process fake router on loopback.

    use std::net::Ipv6Addr;

    use tokio::net::TcpListener;

    use super::*;
    use crate::speaker::{Speaker, SpeakerConfig};

    const LOCAL_ASN: u32 = 65001;
    const ROUTER_ASN: u32 = 64500;
    const STEP: Duration = Duration::from_secs(20);

    /// What one received UPDATE said, as a router would read it.
    #[derive(Debug, Default, PartialEq, Eq)]
    struct Update {
        announced: Vec<IpAddr>,
        withdrawn: Vec<IpAddr>,
        next_hop: Option<IpAddr>,
        as_path: Option<Vec<u8>>,
        local_pref: Option<u32>,
        communities: Vec<u32>,
    }

    fn prefixes(mut b: &[u8], v6: bool) -> Vec<IpAddr> {
        let mut out = Vec::new();
        while let [len, rest @ ..] = b {
            let n = (*len as usize).div_ceil(8);
            let mut octets = [0u8; 16];
            octets[..n].copy_from_slice(&rest[..n]);
            out.push(if v6 {
                IpAddr::V6(Ipv6Addr::from(octets))
            } else {
                IpAddr::V4(Ipv4Addr::new(octets[0], octets[1], octets[2], octets[3]))
            });
            b = &rest[n..];
        }
        out
    }

    fn parse_update(msg: &[u8]) -> Update {
        let body = &msg[wire::HEADER_LEN..];
        let wlen = u16::from_be_bytes([body[0], body[1]]) as usize;
        let mut u = Update {
            withdrawn: prefixes(&body[2..2 + wlen], false),
            ..Update::default()
        };
        let alen = u16::from_be_bytes([body[2 + wlen], body[3 + wlen]]) as usize;
        let mut attrs = &body[4 + wlen..4 + wlen + alen];
        u.announced = prefixes(&body[4 + wlen + alen..], false);
        while !attrs.is_empty() {
            let (flags, kind) = (attrs[0], attrs[1]);
            let (len, start) = if flags & 0x10 != 0 {
                (u16::from_be_bytes([attrs[2], attrs[3]]) as usize, 4)
            } else {
                (attrs[2] as usize, 3)
            };
            let v = &attrs[start..start + len];
            match kind {
                2 => u.as_path = Some(v.to_vec()),
                3 => u.next_hop = Some(IpAddr::V4(Ipv4Addr::new(v[0], v[1], v[2], v[3]))),
                5 => u.local_pref = Some(u32::from_be_bytes(v.try_into().unwrap())),
                8 => {
                    u.communities = v
                        .chunks(4)
                        .map(|c| u32::from_be_bytes(c.try_into().unwrap()))
                        .collect()
                }
                14 => {
                    let nh: [u8; 16] = v[4..20].try_into().unwrap();
                    u.next_hop = Some(IpAddr::V6(Ipv6Addr::from(nh)));
                    u.announced.extend(prefixes(&v[21..], true));
                }
                15 => u.withdrawn.extend(prefixes(&v[3..], true)),
                _ => {}
            }
            attrs = &attrs[start + len..];
        }
        u
    }

    /// A router's side of one accepted connection.
    struct FakeRouter {
        stream: TcpStream,
        buf: Vec<u8>,
        /// The speaker's OPEN as sent.
        opened: Vec<u8>,
    }

    impl FakeRouter {
        async fn accept(listener: &TcpListener) -> FakeRouter {
            let (stream, _) = timeout(STEP, listener.accept())
                .await
                .expect("speaker connects")
                .unwrap();
            FakeRouter {
                stream,
                buf: Vec::new(),
                opened: Vec::new(),
            }
        }

        /// The next message, raw.
        async fn next_raw(&mut self) -> Option<Vec<u8>> {
            loop {
                if let Some((_, len)) = wire::decode(&self.buf).unwrap() {
                    return Some(self.buf.drain(..len).collect());
                }
                let n = timeout(STEP, self.stream.read_buf(&mut self.buf))
                    .await
                    .expect("speaker speaks")
                    .unwrap();
                if n == 0 {
                    return None;
                }
            }
        }

        async fn next(&mut self) -> Option<Message> {
            let raw = self.next_raw().await?;
            Some(wire::decode(&raw).unwrap().unwrap().0)
        }

        /// The next UPDATE, skipping keepalives.
        async fn update(&mut self) -> Update {
            loop {
                let raw = self.next_raw().await.expect("connection open");
                if raw[18] == 2 {
                    return parse_update(&raw);
                }
            }
        }

        async fn send(&mut self, bytes: &[u8]) {
            self.stream.write_all(bytes).await.unwrap();
        }

        /// OPEN exchange as a router with `asn` and `hold` seconds; returns
        /// the speaker's OPEN.
        async fn open(&mut self, asn: u32, hold: u16) -> Open {
            self.open_with(asn, hold, None).await
        }

        /// [`FakeRouter::open`] offering graceful restart when given.
        async fn open_with(&mut self, asn: u32, hold: u16, gr: Option<&GracefulRestart>) -> Open {
            let raw = self.next_raw().await.expect("an OPEN");
            let Some((Message::Open(theirs), _)) = wire::decode(&raw).unwrap() else {
                panic!("expected OPEN");
            };
            self.opened = raw;
            let open = Open {
                asn,
                hold_time_secs: hold,
                router_id: Ipv4Addr::new(192, 0, 2, 1),
                families: vec![Family::Ipv4, Family::Ipv6],
                four_octet_as: true,
            };
            self.send(&wire::encode_open_with(&open, gr)).await;
            theirs
        }

        async fn establish(&mut self, asn: u32, hold: u16) -> Open {
            let theirs = self.open(asn, hold).await;
            assert_eq!(self.next().await, Some(Message::Keepalive));
            self.send(&wire::encode_keepalive()).await;
            theirs
        }
    }

    fn start(peer: &str, addrs: &[&str]) -> (Speaker, watch::Sender<BTreeSet<IpAddr>>) {
        start_with(&[peer], addrs, |_| {})
    }

    fn start_with(
        peers: &[&str],
        addrs: &[&str],
        configure: impl FnOnce(&mut SpeakerConfig),
    ) -> (Speaker, watch::Sender<BTreeSet<IpAddr>>) {
        let set = addrs.iter().map(|a| a.parse().unwrap()).collect();
        let peers = peers.iter().map(|p| p.parse().unwrap()).collect();
        let mut config = SpeakerConfig::new(LOCAL_ASN, peers);
        config.graceful_shutdown_wait = Duration::from_millis(300);
        configure(&mut config);
        let speaker = Speaker::start(config, set).unwrap();
        let tx = speaker.addresses_sender();
        (speaker, tx)
    }

    /// A UDP port free a moment ago.
    fn free_udp_port() -> u16 {
        std::net::UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    /// A router's BFD side on 127.0.0.1, port `port`: its own state
    /// machine at 100 ms x 3 answering the speaker (control port
    /// `speaker_port`) until `quiet` turns true. Every packet the speaker
    /// sent (and the router's [`bfd::Listener`] took: TTL 255) comes out
    /// of the returned receiver.
    fn fake_bfd(
        port: u16,
        speaker_port: u16,
        mut quiet: watch::Receiver<bool>,
    ) -> tokio::sync::mpsc::UnboundedReceiver<bfd::ControlPacket> {
        let (seen, seen_rx) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let listener = bfd::Listener::new(port);
            let mut registration = listener.register(IpAddr::V4(Ipv4Addr::LOCALHOST)).unwrap();
            let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
            socket.set_ttl(255).unwrap();
            socket.connect(("127.0.0.1", speaker_port)).await.unwrap();
            let mut machine = bfd::Machine::new(
                99,
                bfd::Timing {
                    interval: Duration::from_millis(100),
                    multiplier: 3,
                },
            );
            let mut every = tokio::time::interval(Duration::from_millis(100));
            loop {
                let silent = *quiet.borrow();
                tokio::select! {
                    packet = registration.packets.recv() => {
                        let Some(packet) = packet else { return };
                        machine.receive(&packet, Instant::now());
                        if seen.send(packet).is_err() {
                            return;
                        }
                        if machine.final_due() && !silent {
                            let _ = socket.send(&machine.packet().encode()).await;
                        }
                    }
                    _ = every.tick(), if !silent => {
                        let _ = socket.send(&machine.packet().encode()).await;
                    }
                    changed = quiet.changed() => if changed.is_err() { return },
                }
            }
        });
        seen_rx
    }

    /// A speaker with one eBGP peer with `bfd=100x3` at a fake router on
    /// 127.0.0.1 with a BFD side, the session established and the BFD
    /// session Up.
    async fn ebgp_with_bfd() -> (
        Speaker,
        FakeRouter,
        watch::Sender<bool>,
        tokio::sync::mpsc::UnboundedReceiver<bfd::ControlPacket>,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (speaker_bfd, router_bfd) = (free_udp_port(), free_udp_port());
        let (quiet, quiet_rx) = watch::channel(false);
        let seen = fake_bfd(router_bfd, speaker_bfd, quiet_rx);
        let (speaker, _addrs) = start_with(
            &[&format!(
                "127.0.0.1,{ROUTER_ASN},port={port},hold=3,bfd=100x3"
            )],
            &["203.0.113.10"],
            |config| {
                config.bfd_listen_port = speaker_bfd;
                config.bfd_peer_port = router_bfd;
            },
        );
        let mut router = FakeRouter::accept(&listener).await;
        router.establish(ROUTER_ASN, 3).await;
        router.update().await;
        wait_status(&speaker, "BFD up", |s| {
            s.bfd.is_some_and(|b| b.state == bfd::State::Up)
        })
        .await;
        (speaker, router, quiet, seen)
    }

    /// Skips keepalives and UPDATEs: the NOTIFICATION that ends the
    /// session.
    async fn notification(router: &mut FakeRouter) -> Notification {
        loop {
            match router.next().await {
                Some(Message::Notification(n)) => return n,
                Some(_) => continue,
                None => panic!("closed without NOTIFICATION"),
            }
        }
    }

    /// A speaker with one eBGP peer (hold 3 s) at a fake router on
    /// 127.0.0.1, and the router's side of its first connection.
    async fn ebgp(
        addrs: &[&str],
    ) -> (
        Speaker,
        watch::Sender<BTreeSet<IpAddr>>,
        TcpListener,
        FakeRouter,
    ) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (speaker, tx) = start(&format!("127.0.0.1,{ROUTER_ASN},port={port},hold=3"), addrs);
        let router = FakeRouter::accept(&listener).await;
        (speaker, tx, listener, router)
    }

    async fn wait_status(
        speaker: &Speaker,
        what: &str,
        ok: impl Fn(&PeerStatus) -> bool,
    ) -> PeerStatus {
        let deadline = Instant::now() + STEP;
        loop {
            let s = speaker.statuses().snapshot().remove(0);
            if ok(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: {s:?}");
            sleep(Duration::from_millis(10)).await;
        }
    }

    #[tokio::test]
    async fn ebgp_announces_the_set_follows_changes_and_ignores_received_routes() {
        let (speaker, addrs, _listener, mut router) = ebgp(&["203.0.113.10", "2001:db8::10"]).await;
        let open = router.establish(ROUTER_ASN, 90).await;
        assert_eq!(open.asn, LOCAL_ASN);
        assert_eq!(open.hold_time_secs, 3);
        assert_eq!(open.router_id, Ipv4Addr::LOCALHOST);
        // An IPv4 session has no IPv6 next hop unless one is configured.
        assert_eq!(open.families, vec![Family::Ipv4]);

        let first = router.update().await;
        assert_eq!(
            first.announced,
            vec!["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(first.next_hop, Some("127.0.0.1".parse().unwrap()));
        assert_eq!(first.as_path, Some(vec![2, 1, 0, 0, 0xfd, 0xe9]));
        assert_eq!(first.local_pref, None);
        assert!(first.communities.is_empty());

        // A route the router offers changes nothing the speaker announces.
        let offered = wire::encode_announce(
            Family::Ipv4,
            &["198.51.100.7".parse().unwrap()],
            "192.0.2.1".parse().unwrap(),
            &PathAttributes {
                ebgp_asn: Some(ROUTER_ASN),
                four_octet_as: true,
                local_pref: 100,
                graceful_shutdown: false,
            },
        );
        router.send(&offered[0]).await;

        addrs.send_modify(|s| {
            s.insert("203.0.113.11".parse().unwrap());
        });
        let second = router.update().await;
        assert_eq!(
            second.announced,
            vec!["203.0.113.11".parse::<IpAddr>().unwrap()]
        );
        addrs.send_modify(|s| {
            s.remove(&"203.0.113.10".parse().unwrap());
        });
        let third = router.update().await;
        assert_eq!(
            third.withdrawn,
            vec!["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        assert!(third.announced.is_empty());

        let status = wait_status(&speaker, "one route announced", |s| s.announced == 1).await;
        assert_eq!(status.state, SessionState::Established);
        assert_eq!(status.announcements_sent, 2);
        assert_eq!(status.withdrawals_sent, 1);
        drop(speaker);
    }

    #[tokio::test]
    async fn ibgp_over_ipv6_uses_mp_reach_an_empty_as_path_and_local_pref() {
        let listener = TcpListener::bind("[::1]:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (speaker, _addrs) = start(
            &format!("::1,{LOCAL_ASN},port={port},hold=3,local-pref=150,next-hop=192.0.2.2"),
            &["203.0.113.10", "2001:db8::10"],
        );
        let mut router = FakeRouter::accept(&listener).await;
        let open = router.establish(LOCAL_ASN, 3).await;
        assert_eq!(open.families, vec![Family::Ipv4, Family::Ipv6]);
        let mut updates = [router.update().await, router.update().await];
        updates.sort_by_key(|u| u.announced.clone());
        let [v4, v6] = &updates[..] else {
            unreachable!()
        };
        assert_eq!(
            v4.announced,
            vec!["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(v4.next_hop, Some("192.0.2.2".parse().unwrap()));
        assert_eq!(
            v6.announced,
            vec!["2001:db8::10".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(v6.next_hop, Some("::1".parse().unwrap()));
        assert_eq!(v6.as_path, Some(vec![]));
        assert_eq!(v6.local_pref, Some(150));
        drop(speaker);
    }

    #[tokio::test]
    async fn graceful_stop_marks_routes_then_withdraws_then_ceases() {
        let (speaker, _addrs, listener, mut router) = ebgp(&["203.0.113.10", "203.0.113.11"]).await;
        router.establish(ROUTER_ASN, 3).await;
        assert_eq!(router.update().await.announced.len(), 2);
        let stopped = tokio::spawn(speaker.stop());

        let marked = router.update().await;
        assert_eq!(marked.announced.len(), 2);
        assert_eq!(marked.communities, vec![wire::GRACEFUL_SHUTDOWN]);
        let withdrawn = router.update().await;
        assert_eq!(withdrawn.withdrawn.len(), 2);
        let cease = loop {
            match router.next().await {
                Some(Message::Keepalive) => continue,
                other => break other,
            }
        };
        let Some(Message::Notification(n)) = cease else {
            panic!("expected CEASE, got {cease:?}");
        };
        assert_eq!(
            (n.code, n.subcode),
            (code::CEASE, code::ADMINISTRATIVE_SHUTDOWN)
        );
        assert_eq!(router.next().await, None, "connection closed after CEASE");
        timeout(STEP, stopped).await.expect("stop returns").unwrap();
        // Stopped means stopped: no reconnection.
        assert!(
            timeout(Duration::from_millis(1500), listener.accept())
                .await
                .is_err()
        );
    }

    /// A speaker with graceful restart (120 s) and one eBGP peer at a
    /// fake router on 127.0.0.1.
    async fn ebgp_with_graceful_restart(
        addrs: &[&str],
    ) -> (Speaker, watch::Sender<BTreeSet<IpAddr>>, TcpListener) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let (speaker, tx) = start_with(
            &[&format!("127.0.0.1,{ROUTER_ASN},port={port},hold=3")],
            addrs,
            |config| config.graceful_restart = Some(Duration::from_secs(120)),
        );
        (speaker, tx, listener)
    }

    /// Whether `update` is End-of-RIB: nothing announced, nothing
    /// withdrawn, no attribute but (for IPv6) an empty MP_UNREACH_NLRI.
    fn end_of_rib_family(raw: &[u8]) -> Option<Family> {
        if raw == wire::encode_end_of_rib(Family::Ipv4) {
            Some(Family::Ipv4)
        } else if raw == wire::encode_end_of_rib(Family::Ipv6) {
            Some(Family::Ipv6)
        } else {
            None
        }
    }

    #[tokio::test]
    async fn graceful_restart_is_offered_and_the_first_announcements_end_with_end_of_rib() {
        let (speaker, _addrs, listener) =
            ebgp_with_graceful_restart(&["203.0.113.10", "2001:db8::10"]).await;
        let mut router = FakeRouter::accept(&listener).await;
        let offer = GracefulRestart {
            restarted: false,
            restart_time_secs: 90,
            families: vec![(Family::Ipv4, false)],
            notification: false,
        };
        router.open_with(ROUTER_ASN, 3, Some(&offer)).await;
        assert_eq!(router.next().await, Some(Message::Keepalive));
        router.send(&wire::encode_keepalive()).await;
        let gr = wire::graceful_restart_of(&router.opened).expect("the capability");
        assert_eq!(
            gr,
            GracefulRestart {
                // First session of this process: the bit says it may
                // have restarted.
                restarted: true,
                restart_time_secs: 120,
                // The session runs over IPv4 from 127.0.0.1: IPv4 only.
                families: vec![(Family::Ipv4, true)],
                notification: false,
            }
        );
        // Over IPv4 from loopback only IPv4 is offered: End-of-RIB for
        // the one family.
        let mut seen = Vec::new();
        loop {
            let raw = router.next_raw().await.unwrap();
            if raw[18] != 2 {
                continue;
            }
            if let Some(family) = end_of_rib_family(&raw) {
                assert_eq!(family, Family::Ipv4);
                break;
            }
            seen.extend(parse_update(&raw).announced);
        }
        assert_eq!(seen, ["203.0.113.10".parse::<IpAddr>().unwrap()]);
        let status = wait_status(&speaker, "End-of-RIB recorded", |s| s.end_of_rib_sent).await;
        assert!(status.graceful_restart);
        assert_eq!(status.router_graceful_restart, Some(90));
        assert_eq!(status.families, [Family::Ipv4]);

        // The session is lost; the next one is no restart of the speaker.
        drop(router);
        let mut again = FakeRouter::accept(&listener).await;
        again.establish(ROUTER_ASN, 3).await;
        let gr = wire::graceful_restart_of(&again.opened).expect("the capability");
        assert!(!gr.restarted, "{gr:?}");
        let status = wait_status(&speaker, "re-established", |s| {
            s.sessions_established == 2 && s.end_of_rib_sent
        })
        .await;
        assert_eq!(status.router_graceful_restart, None);
        drop(speaker);
    }

    #[tokio::test]
    async fn end_of_rib_waits_for_something_to_announce() {
        // A proxy announces nothing until it is ready: End-of-RIB before
        // that would flush the routes the router kept across the restart.
        let (speaker, addrs, listener) = ebgp_with_graceful_restart(&[]).await;
        let mut router = FakeRouter::accept(&listener).await;
        router.establish(ROUTER_ASN, 3).await;
        wait_status(&speaker, "established", |s| {
            s.state == SessionState::Established
        })
        .await;
        sleep(Duration::from_millis(300)).await;
        assert!(!speaker.statuses().snapshot()[0].end_of_rib_sent);
        addrs.send_modify(|set| {
            set.insert("203.0.113.10".parse().unwrap());
        });
        let raw = loop {
            let raw = router.next_raw().await.unwrap();
            if raw[18] == 2 {
                break raw;
            }
        };
        assert_eq!(
            parse_update(&raw).announced,
            ["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        let raw = loop {
            let raw = router.next_raw().await.unwrap();
            if raw[18] == 2 {
                break raw;
            }
        };
        assert_eq!(end_of_rib_family(&raw), Some(Family::Ipv4));
        drop(speaker);
    }

    #[tokio::test]
    async fn without_graceful_restart_no_capability_and_no_end_of_rib() {
        let (speaker, _addrs, _listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.establish(ROUTER_ASN, 3).await;
        assert_eq!(wire::graceful_restart_of(&router.opened), None);
        assert_eq!(router.update().await.announced.len(), 1);
        let status = wait_status(&speaker, "announced", |s| s.announced == 1).await;
        assert!(!status.graceful_restart && !status.end_of_rib_sent);
        drop(speaker);
    }

    /// A TCP port free a moment ago.
    fn free_tcp_port() -> u16 {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }

    #[tokio::test]
    async fn a_passive_peer_is_waited_for_and_no_other_address_is_taken() {
        let port = free_tcp_port();
        let (speaker, _addrs) = start_with(
            &[&format!("127.0.0.1,{ROUTER_ASN},hold=3,passive=true")],
            &["203.0.113.10"],
            |config| config.listen_port = port,
        );
        // Nothing is dialled: the session waits in Connect.
        let status = wait_status(&speaker, "waiting", |s| s.state == SessionState::Connect).await;
        assert!(status.last_error.is_none());
        // A connection from an address that is no peer is closed unread.
        let stranger = tokio::net::TcpSocket::new_v4().unwrap();
        stranger.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stranger = timeout(
            STEP,
            stranger.connect(SocketAddr::from(([127, 0, 0, 1], port))),
        )
        .await
        .unwrap()
        .unwrap();
        let mut buf = [0u8; 64];
        let read = timeout(STEP, stranger.read(&mut buf))
            .await
            .expect("closed");
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        // The router connects: OPEN, the announcement.
        let stream = timeout(STEP, TcpStream::connect(("127.0.0.1", port)))
            .await
            .unwrap()
            .unwrap();
        let mut router = FakeRouter {
            stream,
            buf: Vec::new(),
            opened: Vec::new(),
        };
        router.establish(ROUTER_ASN, 3).await;
        assert_eq!(
            router.update().await.announced,
            ["203.0.113.10".parse::<IpAddr>().unwrap()]
        );
        // The router goes; it comes back, and the session with it.
        drop(router);
        wait_status(&speaker, "down", |s| s.state != SessionState::Established).await;
        let stream = timeout(STEP, TcpStream::connect(("127.0.0.1", port)))
            .await
            .unwrap()
            .unwrap();
        let mut again = FakeRouter {
            stream,
            buf: Vec::new(),
            opened: Vec::new(),
        };
        again.establish(ROUTER_ASN, 3).await;
        assert_eq!(again.update().await.announced.len(), 1);
        let stopped = tokio::spawn(speaker.stop());
        let n = notification(&mut again).await;
        assert_eq!(n.code, code::CEASE);
        timeout(STEP, stopped).await.expect("stop returns").unwrap();
    }

    #[tokio::test]
    async fn a_wrong_asn_is_refused_with_a_notification_and_retried() {
        let (speaker, _addrs, listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.open(64999, 3).await;
        let Some(Message::Notification(n)) = router.next().await else {
            panic!("expected NOTIFICATION");
        };
        assert_eq!((n.code, n.subcode), (code::OPEN_MESSAGE, code::BAD_PEER_AS));
        let status = wait_status(&speaker, "error recorded", |s| s.last_error.is_some()).await;
        assert!(status.last_error.unwrap().contains("AS 64999"));
        assert_eq!(status.failures.get("wrong_peer_asn"), Some(&1));
        assert_eq!(status.announced, 0);
        // After the backoff, a new attempt.
        let mut again = FakeRouter::accept(&listener).await;
        again.establish(ROUTER_ASN, 3).await;
        assert_eq!(again.update().await.announced.len(), 1);
        drop(speaker);
    }

    #[tokio::test]
    async fn a_closed_session_reconnects_and_announces_again() {
        let (speaker, _addrs, listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.establish(ROUTER_ASN, 3).await;
        router.update().await;
        router
            .send(&wire::encode_notification(&wire::cease("maintenance")))
            .await;
        drop(router);
        let status = wait_status(&speaker, "session down", |s| {
            s.state != SessionState::Established
        })
        .await;
        assert_eq!(status.announced, 0);
        let mut again = FakeRouter::accept(&listener).await;
        again.establish(ROUTER_ASN, 3).await;
        assert_eq!(again.update().await.announced.len(), 1);
        let status = wait_status(&speaker, "re-established", |s| s.sessions_established == 2).await;
        assert!(status.last_error.is_none());
        drop(speaker);
    }

    #[tokio::test]
    async fn bfd_comes_up_from_a_high_port_and_its_loss_resets_the_bgp_session() {
        let (speaker, mut router, quiet, mut seen) = ebgp_with_bfd().await;
        let status = speaker.statuses().snapshot().remove(0);
        assert_eq!(status.state, SessionState::Established);
        let first = seen.recv().await.unwrap();
        assert_eq!(first.detect_mult, 3);
        assert_eq!(first.required_min_rx, Duration::from_millis(100));
        assert!(speaker.statuses().render_prometheus().contains(&format!(
            "teapot_bfd_session_up{{peer=\"{}\"}} 1\n",
            status.peer
        )));

        // The router's BFD goes silent while its BGP keeps talking: the
        // speaker takes BGP down with CEASE / BFD Down (RFC 9384) long
        // before the hold timer.
        quiet.send(true).unwrap();
        let n = notification(&mut router).await;
        assert_eq!((n.code, n.subcode), (code::CEASE, code::BFD_DOWN));
        let status = wait_status(&speaker, "failure recorded, BFD down", |s| {
            s.failures.contains_key("bfd_down") && s.bfd.is_some_and(|b| b.state != bfd::State::Up)
        })
        .await;
        let error = status.last_error.unwrap();
        assert!(
            error.starts_with("BGP peer 127.0.0.1:") && error.contains("BFD session down"),
            "{error}"
        );
        assert!(speaker.statuses().render_prometheus().contains(&format!(
            "teapot_bfd_session_up{{peer=\"{}\"}} 0\n",
            status.peer
        )));
        drop(speaker);
    }

    #[tokio::test]
    async fn a_graceful_stop_sends_bfd_admin_down_then_the_cease() {
        let (speaker, mut router, _quiet, mut seen) = ebgp_with_bfd().await;
        let stopped = tokio::spawn(speaker.stop());
        let n = notification(&mut router).await;
        assert_eq!(
            (n.code, n.subcode),
            (code::CEASE, code::ADMINISTRATIVE_SHUTDOWN)
        );
        let admin_down = loop {
            let packet = timeout(STEP, seen.recv())
                .await
                .expect("AdminDown sent")
                .unwrap();
            if packet.state == bfd::State::AdminDown {
                break packet;
            }
        };
        assert_eq!(admin_down.diag, bfd::diag::ADMINISTRATIVELY_DOWN);
        assert_eq!(admin_down.your_discriminator, 99);
        timeout(STEP, stopped).await.expect("stop returns").unwrap();
    }

    #[tokio::test]
    async fn a_router_shutting_the_neighbor_down_is_named_counted_and_retried() {
        let (speaker, _addrs, listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.open(ROUTER_ASN, 3).await;
        // What FRR sends for `neighbor X shutdown`.
        router
            .send(&wire::encode_notification(&Notification {
                code: code::CEASE,
                subcode: code::ADMINISTRATIVE_SHUTDOWN,
                data: vec![],
            }))
            .await;
        let status = wait_status(&speaker, "error recorded", |s| s.last_error.is_some()).await;
        let error = status.last_error.unwrap();
        assert_eq!(
            error,
            format!(
                "BGP peer {}: peer sent NOTIFICATION cease (6/2) Administrative Shutdown",
                status.peer
            )
        );
        assert_eq!(status.failures.get("cease"), Some(&1));
        assert!(speaker.statuses().render_prometheus().contains(&format!(
            "teapot_bgp_session_failures_total{{peer=\"{}\",reason=\"cease\"}} 1\n",
            status.peer
        )));
        // The backoff, then another attempt.
        FakeRouter::accept(&listener).await;
        drop(speaker);
    }

    /// The peer's text reaches the log line and the status escaped: no
    /// CR, LF or ESC of its own.
    #[tokio::test]
    async fn a_hostile_shutdown_communication_reaches_no_log_raw() {
        let (speaker, _addrs, listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.open(ROUTER_ASN, 3).await;
        let text = b"down\r\nlevel=ERROR msg=forged\x1b]0;owned\x07";
        let mut data = vec![text.len() as u8];
        data.extend_from_slice(text);
        router
            .send(&wire::encode_notification(&Notification {
                code: code::CEASE,
                subcode: code::ADMINISTRATIVE_SHUTDOWN,
                data,
            }))
            .await;
        let status = wait_status(&speaker, "error recorded", |s| s.last_error.is_some()).await;
        let error = status.last_error.unwrap();
        assert!(!error.bytes().any(|b| b.is_ascii_control()), "{error:?}");
        assert!(
            error.ends_with(
                "Administrative Shutdown: down\\x0d\\x0alevel=ERROR msg=forged\\x1b]0;owned\\x07"
            ),
            "{error}"
        );
        FakeRouter::accept(&listener).await;
        drop(speaker);
    }

    #[tokio::test]
    async fn a_router_not_listening_is_named_counted_and_retried() {
        // A port nobody listens on: connection refused.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let (speaker, _addrs) = start(
            &format!("127.0.0.1,{ROUTER_ASN},port={port},hold=3"),
            &["203.0.113.10"],
        );
        let status = wait_status(&speaker, "two refused connections", |s| {
            s.failures.get("connect") >= Some(&2)
        })
        .await;
        let error = status.last_error.unwrap();
        assert!(
            error.starts_with(&format!("BGP peer 127.0.0.1:{port}: connecting:")),
            "{error}"
        );
        assert_eq!(status.state, SessionState::Idle);
        drop(speaker);
    }

    #[tokio::test]
    async fn a_misconfigured_peer_leaves_the_other_session_and_its_routes_alone() {
        let good = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let bad = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = |l: &TcpListener| {
            format!(
                "127.0.0.1,{ROUTER_ASN},port={},hold=3",
                l.local_addr().unwrap().port()
            )
        };
        let (speaker, _addrs) = start_with(&[&peer(&good), &peer(&bad)], &["203.0.113.10"], |_| {});
        let mut router = FakeRouter::accept(&good).await;
        router.establish(ROUTER_ASN, 3).await;
        assert_eq!(router.update().await.announced.len(), 1);
        // The other router is set up for another AS: its OPEN is refused,
        // twice (backoff in between).
        for _ in 0..2 {
            let mut wrong = FakeRouter::accept(&bad).await;
            wrong.open(64999, 3).await;
            let n = notification(&mut wrong).await;
            assert_eq!((n.code, n.subcode), (code::OPEN_MESSAGE, code::BAD_PEER_AS));
        }
        let statuses = speaker.statuses().snapshot();
        let refused = &statuses[1];
        assert_eq!(refused.failures.get("wrong_peer_asn"), Some(&2));
        let error = refused.last_error.as_deref().unwrap();
        assert_eq!(
            error,
            format!(
                "BGP peer {}: peer's OPEN says AS 64999, configured remote ASN is {ROUTER_ASN}",
                refused.peer
            )
        );
        // The good session never noticed: established once, its route
        // still announced, nothing withdrawn, no failure.
        let kept = &statuses[0];
        assert_eq!(kept.state, SessionState::Established);
        assert_eq!(kept.announced, 1);
        assert_eq!(kept.sessions_established, 1);
        assert_eq!(kept.withdrawals_sent, 0);
        assert!(kept.failures.is_empty() && kept.last_error.is_none());
        router.send(&wire::encode_keepalive()).await;
        drop(speaker);
    }

    /// A router on 127.0.0.1 that takes only segments signed with
    /// `password` (FRR's `neighbor 127.0.0.1 password ...`), and a speaker
    /// whose `password-file=` holds `in_file` connecting to it.
    fn md5_router_and_speaker(
        password: &[u8],
        in_file: &[u8],
    ) -> (Speaker, TcpListener, tempfile::NamedTempFile) {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        let localhost = IpAddr::V4(Ipv4Addr::LOCALHOST);
        let key = md5::Key::new(password.to_vec()).unwrap();
        md5::set_key(&socket, localhost, &key).unwrap();
        socket.bind(SocketAddr::new(localhost, 0)).unwrap();
        let listener = socket.listen(8).unwrap();
        let mut file = tempfile::NamedTempFile::new().unwrap();
        std::io::Write::write_all(&mut file, in_file).unwrap();
        let (speaker, _addrs) = start(
            &format!(
                "127.0.0.1,{ROUTER_ASN},port={},hold=3,password-file={}",
                listener.local_addr().unwrap().port(),
                file.path().display()
            ),
            &["203.0.113.10"],
        );
        (speaker, listener, file)
    }

    #[tokio::test]
    async fn a_shared_password_signs_the_session_and_status_says_md5_only() {
        // The file ends in a newline, as `echo s3cret > file` leaves it.
        let (speaker, listener, _file) = md5_router_and_speaker(b"s3cret", b"s3cret\n");
        // Unsigned, or signed with another key, the SYN would be dropped
        // and nothing accepted.
        let mut router = FakeRouter::accept(&listener).await;
        router.establish(ROUTER_ASN, 3).await;
        assert_eq!(router.update().await.announced.len(), 1);
        let status = wait_status(&speaker, "established", |s| {
            s.state == SessionState::Established
        })
        .await;
        assert!(status.md5);
        let shown = format!("{status:?}{}", speaker.statuses().render_prometheus());
        assert!(!shown.contains("s3cret"), "{shown}");
        drop(speaker);
    }

    #[tokio::test]
    async fn a_password_the_router_does_not_share_is_a_timeout_that_names_md5() {
        let (speaker, _listener, _file) = md5_router_and_speaker(b"the router's", b"another");
        let status = wait_status(&speaker, "a failed attempt", |s| !s.failures.is_empty()).await;
        assert_eq!(status.failures.get("timeout"), Some(&1), "{status:?}");
        let error = status.last_error.unwrap();
        assert_eq!(
            error,
            format!(
                "BGP peer {}: timed out {CONNECT_TIMEOUT_WITH_MD5}",
                status.peer
            )
        );
        assert!(status.md5 && status.state != SessionState::Established);
        drop(speaker);
    }

    #[tokio::test]
    async fn a_silent_peer_expires_the_hold_timer() {
        let (speaker, _addrs, _listener, mut router) = ebgp(&["203.0.113.10"]).await;
        router.establish(ROUTER_ASN, 3).await;
        // Keepalives keep coming from the speaker; nothing goes back.
        let n = loop {
            match router.next().await {
                Some(Message::Notification(n)) => break n,
                Some(_) => continue,
                None => panic!("closed without NOTIFICATION"),
            }
        };
        assert_eq!(n.code, code::HOLD_TIMER_EXPIRED);
        let status = wait_status(&speaker, "error recorded", |s| s.last_error.is_some()).await;
        assert!(status.last_error.unwrap().contains("hold timer"));
        drop(speaker);
    }
}
