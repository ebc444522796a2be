//! The listeners: one UDP socket and one TCP listener on the same address,
//! answering from whatever zone the handle holds at the time of each
//! query.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use std::io::{IoSlice, IoSliceMut};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

use arc_swap::ArcSwap;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::{
    ControlMessage, MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg, sendmmsg,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};

use crate::Error;
use crate::answer::{self, MAX_QUERY, Transport};
use crate::escape::LogQuestion;
use crate::metrics::Metrics;
use crate::rrl::{self, Limiter, RateLimit, Verdict};
use crate::zone::Zone;

/// What the listeners hold: the zone, swapped whole by its owner.
pub type ZoneHandle = Arc<ArcSwap<Zone>>;

/// How the listeners behave.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    pub rate_limit: RateLimit,
    /// A TCP connection with no complete query for this long is closed.
    pub tcp_idle: Duration,
    /// TCP connections served at once. With all taken, a new connection
    /// takes the slot of the one idle the longest (waiting for a query);
    /// with none idle it is refused.
    pub max_tcp_connections: usize,
    /// TCP connections one client prefix (the rate limit's prefix
    /// lengths) holds at once; more from it are refused. 0: no share.
    pub tcp_per_prefix: usize,
    /// A TCP connection is closed this long after it was accepted, however
    /// busy it keeps.
    pub tcp_lifetime: Duration,
    /// An answer the client has not taken (read into its socket buffer)
    /// within this closes the connection.
    pub tcp_write_timeout: Duration,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            rate_limit: RateLimit::default(),
            tcp_idle: Duration::from_secs(10),
            max_tcp_connections: 256,
            // A sixteenth of the slots: room for a site's few resolvers
            // behind one prefix (RFC 7766 clients reuse one connection
            // per server), while a prefix alone cannot take the listener.
            tcp_per_prefix: 16,
            tcp_lifetime: Duration::from_secs(30),
            tcp_write_timeout: Duration::from_secs(2),
        }
    }
}

/// A UDP socket and a TCP listener bound to one address.
#[derive(Debug)]
pub struct Sockets {
    pub udp: std::net::UdpSocket,
    pub tcp: std::net::TcpListener,
}

impl Sockets {
    /// Binds UDP, then TCP on the port UDP got (so port 0 gives one port
    /// for both); a TCP port taken by something else is tried again with a
    /// new pair. On a busy host most of the ephemeral range can be held by
    /// client sockets (a test suite opening thousands of connections), so
    /// eight tries were seen to fail; each try costs two binds.
    pub fn bind(addr: SocketAddr) -> Result<Sockets, Error> {
        let err = |source| Error::Bind { addr, source };
        let mut last = None;
        for _ in 0..256 {
            let udp = std::net::UdpSocket::bind(addr).map_err(err)?;
            let bound = udp.local_addr().map_err(err)?;
            match std::net::TcpListener::bind(bound) {
                Ok(tcp) => return Ok(Sockets { udp, tcp }),
                Err(e) if addr.port() == 0 => last = Some(e),
                Err(e) => return Err(err(e)),
            }
        }
        Err(err(last.unwrap_or_else(|| {
            std::io::Error::other("no port for UDP and TCP")
        })))
    }

    pub fn local_addr(&self) -> Result<SocketAddr, Error> {
        self.udp.local_addr().map_err(Error::Io)
    }
}

/// Serves until `shutdown` resolves: UDP and TCP stop at once (a DNS
/// query is one round trip; a client whose answer is cut off asks another
/// server of the NS set).
pub async fn run(
    sockets: Sockets,
    zone: ZoneHandle,
    config: ServerConfig,
    metrics: Metrics,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), Error> {
    let addr = sockets.local_addr()?;
    sockets.udp.set_nonblocking(true)?;
    sockets.tcp.set_nonblocking(true)?;
    let tcp = TcpListener::from_std(sockets.tcp)?;
    let (stop_tx, stop_rx) = watch::channel(false);
    tracing::info!(%addr, origin = %zone.load().origin(), "DNS listener (UDP and TCP)");
    // UDP on a thread of its own, blocking in poll(2) when idle: tokio
    // adds nothing to a listener that answers each datagram in place.
    // Closing `wake` (and `stopping`, seen between batches under load)
    // ends it.
    let (wake_rx, wake) = std::io::pipe()?;
    let stopping = Arc::new(AtomicBool::new(false));
    let (udp_done, udp_stopped) = tokio::sync::oneshot::channel::<()>();
    let udp = Udp {
        socket: sockets.udp,
        zone: zone.clone(),
        limiter: Limiter::new(config.rate_limit),
        metrics: metrics.clone(),
        stopping: stopping.clone(),
        wake: wake_rx,
    };
    std::thread::Builder::new()
        .name("teapot-dns-udp".into())
        .spawn(move || {
            udp.serve();
            let _ = udp_done.send(());
        })?;
    let tcp_task = tokio::spawn(serve_tcp(tcp, zone, config, metrics, stop_rx));
    shutdown.await;
    let _ = stop_tx.send(true);
    stopping.store(true, Ordering::Release);
    drop(wake);
    let _ = udp_stopped.await;
    let _ = tcp_task.await;
    tracing::info!(%addr, "DNS listener stopped");
    Ok(())
}

/// Datagrams taken from the socket, and answers sent, per system call
/// (recvmmsg, sendmmsg): the kernel's per-call cost is shared by a batch,
/// and a client gets its answers in bursts, woken once for several.
const BATCH: usize = 32;

/// One byte more than a query may have: a longer datagram is seen as
/// longer and dropped, not cut to a valid-looking prefix.
const DATAGRAM: usize = MAX_QUERY + 1;

/// The UDP listener's buffers, kept from one batch to the next: nothing
/// is allocated per query.
struct Batch {
    /// The message headers of recvmmsg and of sendmmsg, apart: each call
    /// sets up its own, and a receive's address buffers must stay its own.
    receiving: MultiHeaders<SockaddrStorage>,
    sending: MultiHeaders<SockaddrStorage>,
    counts: Counts,
    queries: Box<[[u8; DATAGRAM]; BATCH]>,
    lens: [usize; BATCH],
    peers: [Option<SockaddrStorage>; BATCH],
    answers: Vec<Vec<u8>>,
    /// Which answers go out, and to whom.
    sends: [usize; BATCH],
    to: [Option<SockaddrStorage>; BATCH],
}

impl Batch {
    fn new() -> Batch {
        Batch {
            receiving: MultiHeaders::preallocate(BATCH, None),
            sending: MultiHeaders::preallocate(BATCH, None),
            counts: Counts::default(),
            queries: Box::new([[0; DATAGRAM]; BATCH]),
            lens: [0; BATCH],
            peers: [None; BATCH],
            answers: (0..BATCH).map(|_| Vec::with_capacity(512)).collect(),
            sends: [0; BATCH],
            to: [None; BATCH],
        }
    }

    /// The datagrams waiting, up to [`BATCH`]; `WouldBlock` when none is.
    fn receive(&mut self, fd: RawFd) -> std::io::Result<usize> {
        let mut slices = self.queries.each_mut().map(|q| [IoSliceMut::new(q)]);
        let received = recvmmsg(
            fd,
            &mut self.receiving,
            slices.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        )
        .map_err(std::io::Error::from)?;
        let mut n = 0;
        for (i, m) in received.enumerate() {
            self.lens[i] = m.bytes;
            self.peers[i] = m.address;
            n = i + 1;
        }
        Ok(n)
    }

    /// Sends answers `from..count` of the send list; how many went.
    fn send(&mut self, fd: RawFd, from: usize, count: usize) -> std::io::Result<usize> {
        let answers = &self.answers;
        let sends = &self.sends;
        // A fixed array (no allocation); only the first `count - from`
        // slices are handed to the kernel, the rest merely fill it.
        let slices: [[IoSlice<'_>; 1]; BATCH] = std::array::from_fn(|k| {
            let i = sends[(from + k).min(BATCH - 1)];
            [IoSlice::new(&answers[i])]
        });
        let sent = sendmmsg(
            fd,
            &mut self.sending,
            slices[..count - from].iter(),
            &self.to[from..count],
            [] as [ControlMessage<'_>; 0],
            MsgFlags::MSG_DONTWAIT,
        )
        .map_err(std::io::Error::from)?;
        Ok(sent.count())
    }
}

/// A peer's address as the standard library's.
fn socket_addr(peer: &SockaddrStorage) -> Option<SocketAddr> {
    if let Some(a) = peer.as_sockaddr_in() {
        return Some(SocketAddr::V4((*a).into()));
    }
    peer.as_sockaddr_in6().map(|a| SocketAddr::V6((*a).into()))
}

/// The UDP listener's counts of one batch, added to the shared series
/// once per batch rather than once per datagram.
#[derive(Default)]
struct Counts {
    bytes_in: u64,
    bytes_out: u64,
    slipped: u64,
    dropped: u64,
    not_a_query: u64,
    /// By the index of the RCODE label in [`answer::RCODES`] (one more
    /// for "other"), and truncated or not.
    responses: [[u64; 2]; answer::RCODES.len() + 1],
}

fn rcode_index(rcode: &str) -> usize {
    answer::RCODES
        .iter()
        .position(|r| *r == rcode)
        .unwrap_or(answer::RCODES.len())
}

/// The UDP listener's thread.
struct Udp {
    socket: std::net::UdpSocket,
    zone: ZoneHandle,
    limiter: Limiter,
    metrics: Metrics,
    stopping: Arc<AtomicBool>,
    /// Readable (at its end) once the server stops.
    wake: std::io::PipeReader,
}

impl Udp {
    fn serve(mut self) {
        let started = Instant::now();
        let series = UdpSeries::new(&self.metrics);
        let fd = self.socket.as_raw_fd();
        let mut batch = Batch::new();
        while !self.stopping.load(Ordering::Acquire) {
            let n = match batch.receive(fd) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    if !self.wait(PollFlags::POLLIN) {
                        break;
                    }
                    continue;
                }
                Err(e) => {
                    // ICMP errors of earlier sends show up here on Linux;
                    // the socket is fine.
                    tracing::debug!(error = %e, "DNS UDP receive");
                    continue;
                }
            };
            let now = started.elapsed().as_secs();
            let count = self.answer(&mut batch, n, now);
            let mut from = 0;
            while from < count {
                match batch.send(fd, from, count) {
                    Ok(sent) => from += sent.max(1),
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        // The socket's send buffer is full: wait for room
                        // rather than drop what is answered already.
                        if !self.wait(PollFlags::POLLOUT) {
                            return;
                        }
                    }
                    Err(e) => {
                        // An answer the kernel refuses (an unroutable
                        // peer) is skipped; the rest still go.
                        tracing::debug!(error = %e, "DNS UDP send");
                        from += 1;
                    }
                }
            }
            series.add(&batch.counts);
        }
    }

    /// Waits until the socket is ready for `what`; false once the server
    /// stops.
    fn wait(&self, what: PollFlags) -> bool {
        let mut fds = [
            PollFd::new(self.socket.as_fd(), what),
            PollFd::new(self.wake.as_fd(), PollFlags::POLLIN),
        ];
        loop {
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => break,
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!(error = %e, "DNS UDP poll");
                    return false;
                }
            }
        }
        fds[1].revents().is_none_or(|r| r.is_empty()) && !self.stopping.load(Ordering::Acquire)
    }

    /// Answers the `n` datagrams of `batch` into its answer buffers and
    /// lists those that go out; their count.
    fn answer(&mut self, batch: &mut Batch, n: usize, now: u64) -> usize {
        let zone = self.zone.load();
        let Batch {
            queries,
            lens,
            peers,
            answers,
            sends,
            to,
            counts,
            ..
        } = batch;
        *counts = Counts::default();
        let mut count = 0;
        for i in 0..n {
            let len = lens[i];
            counts.bytes_in += len as u64;
            let Some(peer) = peers[i] else { continue };
            let Some(addr) = socket_addr(&peer) else {
                continue;
            };
            let query = &queries[i][..len.min(DATAGRAM)];
            let out = &mut answers[i];
            let Some(response) = answer::respond_into(&zone, query, Transport::Udp, out) else {
                counts.not_a_query += 1;
                continue;
            };
            match self
                .limiter
                .check(addr.ip(), response.rate_key, out.len(), now)
            {
                Verdict::Send => {}
                Verdict::Slip => {
                    counts.slipped += 1;
                    match answer::slip(query) {
                        Some(b) => *out = b,
                        None => continue,
                    }
                }
                Verdict::Drop => {
                    counts.dropped += 1;
                    continue;
                }
            }
            counts.responses[rcode_index(response.rcode)][usize::from(response.truncated)] += 1;
            counts.bytes_out += out.len() as u64;
            tracing::trace!(
                peer = %addr,
                name = %LogQuestion(query),
                rcode = response.rcode,
                bytes = out.len(),
                "DNS UDP answer"
            );
            sends[count] = i;
            to[count] = Some(peer);
            count += 1;
        }
        count
    }
}

/// The UDP listener's series, each looked up once: a label lookup per
/// query costs a hash and a lock.
struct UdpSeries {
    bytes_in: prometheus::IntCounter,
    bytes_out: prometheus::IntCounter,
    slipped: prometheus::IntCounter,
    dropped: prometheus::IntCounter,
    not_a_query: prometheus::IntCounter,
    responses: Vec<[prometheus::IntCounter; 2]>,
}

impl UdpSeries {
    fn new(metrics: &Metrics) -> UdpSeries {
        let rcodes = answer::RCODES.iter().copied().chain(["other"]);
        UdpSeries {
            bytes_in: metrics.bytes_in.with_label_values(&["udp"]),
            bytes_out: metrics.bytes_out.with_label_values(&["udp"]),
            slipped: metrics.rate_limited.with_label_values(&["slip"]),
            dropped: metrics.rate_limited.with_label_values(&["drop"]),
            not_a_query: metrics.dropped.with_label_values(&["not_a_query"]),
            responses: rcodes
                .map(|rcode| {
                    [false, true].map(|truncated| metrics.counter(rcode, Transport::Udp, truncated))
                })
                .collect(),
        }
    }

    /// A batch's counts, one atomic add per series that moved.
    fn add(&self, counts: &Counts) {
        for (series, n) in [
            (&self.bytes_in, counts.bytes_in),
            (&self.bytes_out, counts.bytes_out),
            (&self.slipped, counts.slipped),
            (&self.dropped, counts.dropped),
            (&self.not_a_query, counts.not_a_query),
        ] {
            if n > 0 {
                series.inc_by(n);
            }
        }
        for (series, counted) in self.responses.iter().zip(&counts.responses) {
            for (c, n) in series.iter().zip(counted) {
                if *n > 0 {
                    c.inc_by(*n);
                }
            }
        }
    }
}

/// The TCP connections being served: who holds a slot, from which
/// prefix, and since when it waits for a query.
#[derive(Debug)]
struct Slots {
    max: usize,
    per_prefix: usize,
    next: u64,
    open: HashMap<u64, Open>,
    by_prefix: HashMap<u128, usize>,
}

#[derive(Debug)]
struct Open {
    prefix: u128,
    /// Waiting for a query (a partial one counts: a client that trickles
    /// bytes is idle) since then; `None` while answering.
    idle_since: Option<Instant>,
    close: Arc<Notify>,
}

/// Why a connection was not admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refused {
    PrefixShare,
    Full,
}

impl Slots {
    /// A slot for a connection from `prefix`: free, or taken from the
    /// connection idle the longest (which is told to close).
    fn admit(&mut self, prefix: u128, now: Instant) -> Result<(u64, Arc<Notify>, bool), Refused> {
        let held = self.by_prefix.get(&prefix).copied().unwrap_or(0);
        if self.per_prefix > 0 && held >= self.per_prefix {
            return Err(Refused::PrefixShare);
        }
        let mut evicted = false;
        if self.open.len() >= self.max {
            // A linear scan: the table holds `max` entries, and this runs
            // only when it is full.
            let oldest = self
                .open
                .iter()
                .filter_map(|(id, o)| o.idle_since.map(|t| (t, *id)))
                .min();
            let Some((_, id)) = oldest else {
                return Err(Refused::Full);
            };
            if let Some(o) = self.remove(id) {
                o.close.notify_one();
            }
            evicted = true;
        }
        let id = self.next;
        self.next += 1;
        let close = Arc::new(Notify::new());
        self.open.insert(
            id,
            Open {
                prefix,
                idle_since: Some(now),
                close: close.clone(),
            },
        );
        *self.by_prefix.entry(prefix).or_insert(0) += 1;
        Ok((id, close, evicted))
    }

    fn remove(&mut self, id: u64) -> Option<Open> {
        let o = self.open.remove(&id)?;
        if let Some(n) = self.by_prefix.get_mut(&o.prefix) {
            *n -= 1;
            if *n == 0 {
                self.by_prefix.remove(&o.prefix);
            }
        }
        Some(o)
    }
}

/// One connection's slot, given back when the connection ends (unless it
/// was taken for a newcomer already).
struct Slot {
    slots: Arc<Mutex<Slots>>,
    id: u64,
}

impl Slot {
    fn idle(&self, idle: bool) {
        let mut slots = lock(&self.slots);
        if let Some(o) = slots.open.get_mut(&self.id) {
            o.idle_since = idle.then(Instant::now);
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        lock(&self.slots).remove(self.id);
    }
}

fn lock(slots: &Mutex<Slots>) -> std::sync::MutexGuard<'_, Slots> {
    // The table is consistent after every statement; a panic elsewhere
    // does not make it unusable.
    slots.lock().unwrap_or_else(|e| e.into_inner())
}

async fn serve_tcp(
    listener: TcpListener,
    zone: ZoneHandle,
    config: ServerConfig,
    metrics: Metrics,
    mut stop: watch::Receiver<bool>,
) {
    let slots = Arc::new(Mutex::new(Slots {
        max: config.max_tcp_connections.max(1),
        per_prefix: config.tcp_per_prefix,
        next: 0,
        open: HashMap::new(),
        by_prefix: HashMap::new(),
    }));
    let closed = |reason: &str| metrics.tcp_closed.with_label_values(&[reason]);
    let (refused_share, refused_full, evictions) =
        (closed("prefix_share"), closed("full"), closed("evicted"));
    let mut connections = tokio::task::JoinSet::new();
    loop {
        // Always accepted: a connection waiting in the kernel's queue
        // behind held slots is the starvation this listener prevents.
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(r) => r,
                Err(e) => {
                    tracing::warn!(error = %e, "DNS TCP accept");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = stop.changed() => break,
        };
        let prefix = rrl::prefix(
            peer.ip(),
            config.rate_limit.ipv4_prefix,
            config.rate_limit.ipv6_prefix,
        );
        let admitted = lock(&slots).admit(prefix, Instant::now());
        let (id, close) = match admitted {
            Ok((id, close, evicted)) => {
                if evicted {
                    evictions.inc();
                }
                (id, close)
            }
            Err(why) => {
                match why {
                    Refused::PrefixShare => refused_share.inc(),
                    Refused::Full => refused_full.inc(),
                }
                tracing::debug!(%peer, reason = ?why, "DNS TCP connection refused");
                continue;
            }
        };
        let slot = Slot {
            slots: slots.clone(),
            id,
        };
        let (zone, metrics, config) = (zone.clone(), metrics.clone(), config.clone());
        connections.spawn(async move {
            metrics.tcp_connections.inc();
            let deadline = tokio::time::sleep(config.tcp_lifetime);
            let ended = tokio::select! {
                r = serve_connection(stream, &zone, &metrics, &config, &slot) => r,
                // Counted where the eviction was decided.
                _ = close.notified() => Ok(None),
                _ = deadline => Ok(Some("lifetime")),
            };
            drop(slot);
            metrics.tcp_connections.dec();
            match ended {
                Ok(None) => {}
                Ok(Some(reason)) => metrics.tcp_closed.with_label_values(&[reason]).inc(),
                Err(e) => tracing::debug!(%peer, error = %e, "DNS TCP connection"),
            }
        });
        // Finished connections leave the set as others arrive.
        while connections.try_join_next().is_some() {}
    }
    connections.abort_all();
}

/// Queries one after another (RFC 7766 allows pipelining; answering in
/// order is allowed too), each a 2-byte length and the message. Ends with
/// the reason the server closed it (a metrics label), `None` when the
/// client did.
async fn serve_connection(
    mut stream: TcpStream,
    zone: &ZoneHandle,
    metrics: &Metrics,
    config: &ServerConfig,
    slot: &Slot,
) -> std::io::Result<Option<&'static str>> {
    let idle = config.tcp_idle;
    let mut buf = vec![0u8; MAX_QUERY];
    loop {
        slot.idle(true);
        let mut len = [0u8; 2];
        match tokio::time::timeout(idle, stream.read_exact(&mut len)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
            Ok(Err(e)) => return Err(e),
            Err(_) => return Ok(Some("idle")),
        }
        let len = usize::from(u16::from_be_bytes(len));
        if len > MAX_QUERY {
            metrics.dropped.with_label_values(&["too_long"]).inc();
            return Ok(None);
        }
        let query = &mut buf[..len];
        match tokio::time::timeout(idle, stream.read_exact(query)).await {
            Ok(r) => r?,
            Err(_) => return Ok(Some("idle")),
        };
        slot.idle(false);
        metrics
            .bytes_in
            .with_label_values(&["tcp"])
            .inc_by(len as u64 + 2);
        let Some(response) = answer::respond(&zone.load(), query, Transport::Tcp) else {
            metrics.dropped.with_label_values(&["not_a_query"]).inc();
            return Ok(None);
        };
        metrics.count(response.rcode, Transport::Tcp, false);
        let mut out = Vec::with_capacity(response.bytes.len() + 2);
        out.extend_from_slice(&(response.bytes.len() as u16).to_be_bytes());
        out.extend_from_slice(&response.bytes);
        tracing::trace!(
            name = %LogQuestion(query),
            rcode = response.rcode,
            bytes = out.len(),
            "DNS TCP answer"
        );
        // A client that sends queries and never reads the answers would
        // otherwise hold its slot for as long as it likes.
        match tokio::time::timeout(config.tcp_write_timeout, stream.write_all(&out)).await {
            Ok(r) => r?,
            Err(_) => return Ok(Some("write_timeout")),
        }
        metrics
            .bytes_out
            .with_label_values(&["tcp"])
            .inc_by(out.len() as u64);
    }
}
