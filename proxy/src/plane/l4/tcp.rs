//! The TCP data path: accept, the ClientHello read of TLS passthrough,
//! connect with retries, the PROXY v2 header, a full-duplex relay that
//! passes half-closes and resets on, and the idle, drain and kill ends, as
//! one state machine per connection on event-loop threads of their own.
//!
//! Why not tasks on tokio: a bare relay on tokio costs 1.07x HAProxy's CPU
//! per connection and the same relay on its own epoll loop 0.91x
//! (`l4-report --floor`, benches/l4.md). The reactor is the difference: a
//! task is woken through the scheduler for every readiness event, and each
//! socket is removed from epoll before its close. Here an event is handled
//! where it arrives, a socket is closed without `EPOLL_CTL_DEL` (the close removes
//! it), reads go into one buffer per loop and only bytes a socket did not
//! take are kept per connection.
//!
//! Layout: [`Loops`] is the handle the listener manager holds (one loop
//! per serving thread, each with its own `SO_REUSEPORT` socket per
//! listener); [`Command`] is what it sends them; [`EventLoop`] owns the
//! listeners and connections of one thread; [`Conn`] and [`Phase`] are a
//! connection and where it is in its life.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io::{ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use prometheus::IntCounter;
use slab::Slab;

use super::context::{ActiveGuard, Context};
use super::proxy_protocol::header_v2;
use super::sni::{Hello, MAX_READ, server_name};
use crate::compile::l4::gateway::Refusals;
use crate::compile::l4::pool::{ListenerKey, Protocol};
use crate::compile::l4::table::Route;
use crate::compile::upstream::{Tried, Upstream};
use crate::live::endpoints::Endpoint;
use crate::plane::access_log::Entry;

/// The read buffer each loop shares among its connections: large enough
/// for bulk transfers to move in few system calls.
const BUFFER: usize = 32 * 1024;

// A ClientHello is read through the same buffer, up to its bound.
const _: () = assert!(MAX_READ <= BUFFER);

/// Tokens: the waker, then listeners, then two per connection.
const WAKER: Token = Token(usize::MAX);
const LISTENERS: usize = 1 << 40;

/// After a failed accept (out of descriptors and the like).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// How often a loop held at its listener's cap looks again whether a
/// connection another loop served has ended (one this loop served resumes
/// it at once). Only while held: a loop with no client waiting past the
/// cap never wakes for it.
const CAP_RECHECK: Duration = Duration::from_millis(20);

/// One of a listener's `max_connections` slots, counted over every loop
/// serving it, given back when dropped.
struct ListenerSlot(Arc<AtomicUsize>);

impl ListenerSlot {
    /// A slot, if the listener has one free.
    fn take(count: &Arc<AtomicUsize>, max: usize) -> Option<ListenerSlot> {
        use std::sync::atomic::Ordering::{AcqRel, Acquire};
        count
            .fetch_update(AcqRel, Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| ListenerSlot(count.clone()))
    }
}

impl Drop for ListenerSlot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
    }
}

/// How a connection reached its loop.
enum Arrival {
    /// From one of this loop's listening sockets, holding a slot of its
    /// listener's cap.
    Accepted(ListenerSlot),
    /// Accepted elsewhere (TLS passthrough on the HTTPS listener), with the
    /// ClientHello already read and what it holds there while it lives.
    Adopted { hello: Vec<u8>, held: Box<dyn Send> },
}

/// Clients outside the source ranges one listener resets per turn of the
/// loop; the rest wait in the backlog for the next turn. A flood of
/// refused clients costs no connection slot, but without this bound their
/// accepts alone could keep the loop from every other socket it serves.
const REFUSALS_PER_TURN: usize = 64;

/// A connection whose listener has closed.
const NO_LISTENER: usize = usize::MAX;

/// A connection another listener accepted and handed over
/// ([`Loops::adopt`]): no listener of the loop counts it or drains it.
const ADOPTED: usize = usize::MAX - 1;

/// A listener the loops serve. Not its key: a Service removed and added
/// again binds a new listener on the same key while the old one's close is
/// still on its way, and the close must not reach the new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(super) struct ListenerId(u64);

/// What the listener manager tells a loop.
pub(super) enum Command {
    /// Serve `socket` (this loop's own socket for the listener).
    Listen {
        id: ListenerId,
        key: ListenerKey,
        socket: std::net::TcpListener,
        route: Arc<Route>,
        /// The listener's connections on every loop, against the cap.
        open: Arc<AtomicUsize>,
    },
    /// The listener's route changed: new connections use it; connections
    /// to an endpoint no longer in it drain.
    Route { id: ListenerId, route: Arc<Route> },
    /// Stop accepting; the listener's connections drain.
    Close { id: ListenerId },
    /// Relay a connection the shared HTTPS listener accepted and read
    /// the ClientHello of (crate::plane::passthrough): `hello` goes to the
    /// backend first; `held` (its slots under the edge's caps) lives as
    /// long as the connection.
    Adopt(Box<Adopted>),
    /// End every connection now and stop.
    Kill,
}

/// A connection handed to the loops by [`Loops::adopt`].
pub struct Adopted {
    pub socket: std::net::TcpStream,
    pub peer: SocketAddr,
    pub route: Arc<Route>,
    pub hello: Vec<u8>,
    pub held: Box<dyn Send>,
}

/// Hands connections accepted elsewhere to the loops: TLS passthrough on
/// the shared HTTPS listener (crate::plane::passthrough), relayed as the
/// L4 plane relays its own (connect retries, half-closes, idle timeout,
/// metrics, log lines, the shutdown's drain).
#[derive(Clone)]
pub struct Adopter {
    loops: Arc<Loops>,
    ctx: Arc<Context>,
}

impl std::fmt::Debug for Adopter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adopter").finish_non_exhaustive()
    }
}

impl Adopter {
    pub(super) fn new(loops: Arc<Loops>, ctx: Arc<Context>) -> Adopter {
        Adopter { loops, ctx }
    }

    pub fn adopt(&self, adopted: Adopted) {
        self.loops.adopt(adopted);
    }

    /// A route to `upstream`, named for `service`, with the plane's
    /// options: its idle timeout; no PROXY header (ingress-nginx sends
    /// none to a passthrough backend) and no source ranges.
    pub fn route(
        &self,
        service: teapot_model::store::NsName,
        upstream: Arc<Upstream>,
    ) -> Arc<Route> {
        Arc::new(Route {
            service,
            port_name: String::new(),
            upstream,
            sni: None,
            refusals: None,
            options: crate::compile::l4::table::RouteOptions {
                source_ranges: None,
                proxy_protocol: false,
                tcp_idle_timeout: self.ctx.config.tcp_idle_timeout,
                udp_idle_timeout: self.ctx.config.udp_idle_timeout,
                health: Default::default(),
            },
            edge: None,
        })
    }
}

/// The event-loop threads of the TCP data path.
pub(super) struct Loops {
    loops: Vec<Handle>,
    next_id: std::sync::atomic::AtomicU64,
    /// The loop the next adopted connection goes to.
    next_adopt: std::sync::atomic::AtomicUsize,
}

struct Handle {
    commands: mpsc::Sender<Command>,
    waker: Arc<Waker>,
    thread: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl std::fmt::Debug for Loops {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loops")
            .field("threads", &self.loops.len())
            .finish()
    }
}

impl Loops {
    pub fn start(threads: usize, ctx: &Arc<Context>) -> std::io::Result<Loops> {
        let mut loops = Vec::with_capacity(threads.max(1));
        for i in 0..threads.max(1) {
            let poll = Poll::new()?;
            let waker = Arc::new(Waker::new(poll.registry(), WAKER)?);
            let (tx, rx) = mpsc::channel();
            let event_loop = EventLoop::new(poll, rx, ctx.clone());
            let thread = std::thread::Builder::new()
                .name(format!("teapot-l4-{i}"))
                .spawn(move || event_loop.run())?;
            loops.push(Handle {
                commands: tx,
                waker,
                thread: std::sync::Mutex::new(Some(thread)),
            });
        }
        Ok(Loops {
            loops,
            next_id: std::sync::atomic::AtomicU64::new(0),
            next_adopt: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// How many sockets a listener needs: one per loop.
    pub fn len(&self) -> usize {
        self.loops.len()
    }

    /// Hands each loop its own socket for `key`.
    pub fn listen(
        &self,
        key: ListenerKey,
        sockets: Vec<std::net::TcpListener>,
        route: &Arc<Route>,
    ) -> ListenerId {
        let id = ListenerId(
            self.next_id
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        );
        let open = Arc::new(AtomicUsize::new(0));
        for (handle, socket) in self.loops.iter().zip(sockets) {
            handle.send(Command::Listen {
                id,
                key,
                socket,
                route: route.clone(),
                open: open.clone(),
            });
        }
        id
    }

    /// Relays a connection accepted elsewhere, on the loops in turn.
    pub fn adopt(&self, adopted: Adopted) {
        let n = self
            .next_adopt
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        if let Some(handle) = self.loops.get(n % self.loops.len().max(1)) {
            handle.send(Command::Adopt(Box::new(adopted)));
        }
    }

    pub fn route(&self, id: ListenerId, route: &Arc<Route>) {
        for handle in &self.loops {
            handle.send(Command::Route {
                id,
                route: route.clone(),
            });
        }
    }

    pub fn close(&self, id: ListenerId) {
        for handle in &self.loops {
            handle.send(Command::Close { id });
        }
    }

    /// Ends every connection and waits for the threads (each ends at
    /// once: the connections' lines are queued for the access log first).
    pub fn kill(&self) {
        for handle in &self.loops {
            handle.send(Command::Kill);
        }
        for handle in &self.loops {
            let thread = handle.thread.lock().map(|mut t| t.take());
            if let Ok(Some(t)) = thread {
                let _ = t.join();
            }
        }
    }
}

impl Drop for Loops {
    fn drop(&mut self) {
        self.kill();
    }
}

impl Handle {
    fn send(&self, command: Command) {
        // A loop that has ended (killed) has nothing left to tell.
        if self.commands.send(command).is_ok() {
            let _ = self.waker.wake();
        }
    }
}

/// A Service's series, looked up when the listener's route changes
/// rather than per connection (a label string and four lookups each).
struct ServiceSeries {
    service: teapot_model::store::NsName,
    label: String,
    connections: IntCounter,
    connect_failures: IntCounter,
    bytes_in: IntCounter,
    bytes_out: IntCounter,
}

impl ServiceSeries {
    fn of(route: &Route, metrics: &super::L4Metrics) -> Arc<ServiceSeries> {
        let label = route.service.to_string();
        Arc::new(ServiceSeries {
            service: route.service.clone(),
            connections: metrics.service_connections.with_label_values(&[&label]),
            connect_failures: metrics
                .service_connect_failures
                .with_label_values(&[&label]),
            bytes_in: metrics.service_bytes.with_label_values(&[&label, "in"]),
            bytes_out: metrics.service_bytes.with_label_values(&[&label, "out"]),
            label,
        })
    }
}

struct Listening {
    key: ListenerKey,
    socket: TcpListener,
    route: Arc<Route>,
    series: Arc<ServiceSeries>,
    /// Its connections alive on every loop, against `max_connections`:
    /// the cap is the listener's, whichever loop the kernel hands a client
    /// to.
    open: Arc<AtomicUsize>,
    /// Held until then (clients wait in the backlog): at the cap, to look
    /// again, or backing off after a failed accept.
    retry_at: Option<Instant>,
    /// Held at the cap (rather than backing off): a connection of its own
    /// ending resumes it at once.
    at_cap: bool,
}

/// One side's socket and what the loop knows of it (edge-triggered: the
/// readiness is remembered until a call says "would block").
struct Side {
    socket: TcpStream,
    readable: bool,
    writable: bool,
    /// epoll reported the peer's FIN or an error: a short read no longer
    /// means the socket is drained (the EOF waits behind the data, and no
    /// further edge will announce it).
    closing: bool,
    /// Its EOF has been read.
    ended: bool,
    /// Bytes for this side that its socket has not taken yet.
    owed: Vec<u8>,
    /// The other side's FIN has been passed on to this one.
    shut: bool,
}

impl Side {
    fn new(socket: TcpStream) -> Side {
        Side {
            socket,
            readable: false,
            writable: false,
            closing: false,
            ended: false,
            owed: Vec::new(),
            shut: false,
        }
    }
}

const CLIENT: usize = 0;
const UPSTREAM: usize = 1;

enum Phase {
    /// TLS passthrough: reading the ClientHello that names the backends.
    Hello {
        bytes: Vec<u8>,
        by: Instant,
    },
    Connecting(Connecting),
    Relay {
        endpoint: SocketAddr,
    },
}

/// A connect under way to `endpoint`; `preface` goes out first once it is
/// up (the PROXY header, then a passthrough ClientHello of `hello` bytes,
/// counted as relayed once it is handed over).
struct Connecting {
    endpoint: Arc<Endpoint>,
    upstream: Arc<Upstream>,
    tried: Tried,
    attempts: u32,
    by: Instant,
    preface: Vec<u8>,
    hello: usize,
}

/// How a connection ended.
#[derive(Debug)]
enum End {
    Done,
    Idle,
    Drained,
    Killed,
    NoRoute,
    /// No usable ClientHello within the bounds.
    BadRequest,
    InvalidBackend,
    NoEndpoint,
    /// The client is outside the Service's source ranges (they changed
    /// while it was connected): reset.
    Refused,
    /// A read or write on this side failed (or it was reset): the other
    /// side is reset too.
    Aborted(usize, std::io::Error),
}

struct Conn {
    /// Unique in the loop: a timer for a slot reused since is stale.
    id: u64,
    listener: usize,
    route: Arc<Route>,
    series: Arc<ServiceSeries>,
    peer: SocketAddr,
    sides: [Option<Side>; 2],
    phase: Phase,
    line: Option<Box<Line>>,
    seen_in: u64,
    seen_out: u64,
    last_active: Instant,
    /// Set when its listener closed or its endpoint left the route.
    drain_by: Option<Instant>,
    /// The deadline of the timer entry that counts for it.
    armed: Option<Instant>,
    _active: ActiveGuard,
    /// What an adopted connection holds elsewhere while it lives.
    _held: Option<Box<dyn Send>>,
    /// An accepted connection's slot of its listener's cap.
    _listener_slot: Option<ListenerSlot>,
}

impl Conn {
    /// The connect under way, taken out of the phase, which the caller
    /// sets next (a relay, or the next connect).
    fn take_connecting(&mut self) -> Option<Connecting> {
        let placeholder = Phase::Relay {
            endpoint: SocketAddr::from(([0, 0, 0, 0], 0)),
        };
        match std::mem::replace(&mut self.phase, placeholder) {
            Phase::Connecting(c) => Some(c),
            other => {
                self.phase = other;
                None
            }
        }
    }

    fn deadline(&self) -> Instant {
        match &self.phase {
            Phase::Hello { by, .. } | Phase::Connecting(Connecting { by, .. }) => *by,
            Phase::Relay { .. } => {
                let idle = self.last_active + self.route.options.tcp_idle_timeout;
                self.drain_by.map_or(idle, |d| d.min(idle))
            }
        }
    }
}

/// The connection's access-log line, sent when it is dropped.
struct Line {
    log: crate::plane::access_log::AccessLog,
    start: Instant,
    entry: Entry,
}

impl Line {
    /// Boxed: the entry is most of the line, and inline it would sit in
    /// every connection even with the log off.
    fn new(ctx: &Context, service: &str, peer: SocketAddr) -> Option<Box<Line>> {
        let log = &ctx.metrics.access_log;
        if !log.is_on() {
            return None;
        }
        let mut entry = Entry::tcp();
        entry.tag = Some(Arc::from(format!("\x1f{service}")));
        entry.client = Some(peer);
        // Every way out sets the reason; only a loop that ends mid-relay
        // keeps this one.
        entry.reason = Some("shutdown");
        Some(Box::new(Line {
            log: log.clone(),
            start: Instant::now(),
            entry,
        }))
    }
}

impl Drop for Line {
    fn drop(&mut self) {
        let failed = self.entry.is_error();
        if self.log.wants(if failed { 0 } else { 200 }, failed) {
            let mut entry = std::mem::replace(&mut self.entry, Entry::tcp());
            entry.duration = self.start.elapsed();
            self.log.send(entry);
        }
    }
}

struct EventLoop {
    poll: Poll,
    commands: mpsc::Receiver<Command>,
    ctx: Arc<Context>,
    listeners: Slab<Listening>,
    by_id: std::collections::HashMap<ListenerId, usize>,
    /// Listeners backing off after a failed accept.
    retrying: usize,
    /// Listeners that reached [`REFUSALS_PER_TURN`]: accepted again next
    /// turn, which then polls without waiting.
    accept_later: Vec<usize>,
    /// Listeners with connections waiting, accepted after the turn's
    /// events: a slot freed during the turn is not reused before the
    /// turn's other events for it are handled.
    to_accept: Vec<usize>,
    conns: Slab<Conn>,
    /// (deadline, slot, id); entries whose deadline is not the
    /// connection's `armed` one are stale and skipped.
    timers: BinaryHeap<Reverse<(Instant, usize, u64)>>,
    next_id: u64,
    buf: Vec<u8>,
    now: Instant,
}

impl EventLoop {
    fn new(poll: Poll, commands: mpsc::Receiver<Command>, ctx: Arc<Context>) -> EventLoop {
        EventLoop {
            poll,
            commands,
            ctx,
            listeners: Slab::new(),
            by_id: std::collections::HashMap::new(),
            retrying: 0,
            accept_later: Vec::new(),
            to_accept: Vec::new(),
            conns: Slab::new(),
            timers: BinaryHeap::new(),
            next_id: 0,
            buf: vec![0; BUFFER],
            now: Instant::now(),
        }
    }

    fn run(mut self) {
        let mut events = Events::with_capacity(1024);
        loop {
            let timeout = self.timeout();
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != ErrorKind::Interrupted
            {
                tracing::error!(error = %e, "L4 event loop failed");
                self.kill_all();
                return;
            }
            // One clock read per turn stamps every event of the turn.
            self.now = Instant::now();
            self.to_accept.append(&mut self.accept_later);
            for event in events.iter() {
                let token = event.token();
                if token == WAKER {
                    continue;
                }
                if token.0 >= LISTENERS {
                    self.to_accept.push(token.0 - LISTENERS);
                    continue;
                }
                self.on_socket(token.0 / 2, token.0 % 2, event);
            }
            self.accept_waiting();
            if !self.take_commands() {
                return;
            }
            self.fire_timers();
            self.accept_waiting();
        }
    }

    fn timeout(&self) -> Option<Duration> {
        if !self.accept_later.is_empty() {
            return Some(Duration::ZERO);
        }
        let conn = self.timers.peek().map(|Reverse((at, _, _))| *at);
        let retry = if self.retrying == 0 {
            None
        } else {
            self.listeners.iter().filter_map(|(_, l)| l.retry_at).min()
        };
        let next = match (conn, retry) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }?;
        // Rounded up to the millisecond epoll counts in, so a timer is
        // not found early and polled for again with a zero timeout.
        let left = next.saturating_duration_since(Instant::now());
        Some(Duration::from_millis(
            left.as_nanos().div_ceil(1_000_000) as u64
        ))
    }

    /// Handles what the manager sent; false once killed.
    fn take_commands(&mut self) -> bool {
        while let Ok(command) = self.commands.try_recv() {
            match command {
                Command::Listen {
                    id,
                    key,
                    socket,
                    route,
                    open,
                } => self.listen(id, key, socket, route, open),
                Command::Route { id, route } => self.route(id, route),
                Command::Close { id } => self.close(id),
                Command::Adopt(a) => {
                    let Adopted {
                        socket,
                        peer,
                        route,
                        hello,
                        held,
                    } = *a;
                    let _ = socket.set_nonblocking(true);
                    let series = ServiceSeries::of(&route, &self.ctx.metrics);
                    let client = TcpStream::from_std(socket);
                    self.start(
                        ADOPTED,
                        client,
                        peer,
                        route,
                        series,
                        Arrival::Adopted { hello, held },
                    );
                }
                Command::Kill => {
                    self.kill_all();
                    return false;
                }
            }
        }
        true
    }

    fn listen(
        &mut self,
        id: ListenerId,
        key: ListenerKey,
        socket: std::net::TcpListener,
        route: Arc<Route>,
        open: Arc<AtomicUsize>,
    ) {
        let mut socket = TcpListener::from_std(socket);
        let slot = self.listeners.vacant_entry();
        let token = Token(LISTENERS + slot.key());
        if let Err(e) = self
            .poll
            .registry()
            .register(&mut socket, token, Interest::READABLE)
        {
            tracing::warn!(listener = %key, error = %e, "L4 listener not registered");
            return;
        }
        let series = ServiceSeries::of(&route, &self.ctx.metrics);
        self.by_id.insert(id, slot.key());
        slot.insert(Listening {
            key,
            socket,
            route,
            series,
            open,
            retry_at: None,
            at_cap: false,
        });
    }

    fn route(&mut self, id: ListenerId, route: Arc<Route>) {
        let Some(&slot) = self.by_id.get(&id) else {
            return;
        };
        let l = &mut self.listeners[slot];
        if l.series.service != route.service {
            l.series = ServiceSeries::of(&route, &self.ctx.metrics);
        }
        let old = std::mem::replace(&mut l.route, route.clone());
        if old.options.source_ranges != route.options.source_ranges
            && let Some(ranges) = &route.options.source_ranges
        {
            // A client the Service's owner no longer admits keeps no
            // connection it opened before: the restriction holds from the
            // moment it is served, not from the client's next connect.
            let outside: Vec<usize> = self
                .conns
                .iter()
                .filter(|(_, c)| c.listener == slot && !ranges.admits(c.peer.ip()))
                .map(|(i, _)| i)
                .collect();
            if !outside.is_empty() {
                self.ctx
                    .metrics
                    .source_range_refusals
                    .with_label_values(&[&self.listeners[slot].series.label, "TCP"])
                    .inc_by(outside.len() as u64);
            }
            for i in outside {
                self.end(i, End::Refused);
            }
        }
        // Every table sends every listener its route; only an endpoint
        // that left it sends its connections into their drain.
        let left = old.upstream.endpoints.load().iter().any(|e| {
            !route
                .upstream
                .endpoints
                .load()
                .iter()
                .any(|n| n.addr == e.addr)
        });
        if !left {
            return;
        }
        let drain_by = self.now + self.ctx.config.drain_timeout;
        let mut arm = Vec::new();
        for (i, conn) in self.conns.iter_mut() {
            if conn.listener != slot || conn.drain_by.is_some() {
                continue;
            }
            if let Phase::Relay { endpoint } = conn.phase
                && !route
                    .upstream
                    .endpoints
                    .load()
                    .iter()
                    .any(|e| e.addr == endpoint)
            {
                conn.drain_by = Some(drain_by);
                arm.push(i);
            }
        }
        for i in arm {
            self.arm(i);
        }
    }

    fn close(&mut self, id: ListenerId) {
        let Some(slot) = self.by_id.remove(&id) else {
            return;
        };
        // Dropped, not deregistered: the close takes it out of epoll.
        let l = self.listeners.remove(slot);
        let key = l.key;
        if l.retry_at.is_some() {
            self.retrying -= 1;
        }
        drop(l);
        tracing::debug!(listener = %key, "L4 TCP listener stopped accepting");
        let drain_by = self.now + self.ctx.config.drain_timeout;
        let mut arm = Vec::new();
        for (i, conn) in self.conns.iter_mut() {
            if conn.listener != slot {
                continue;
            }
            // Cut loose from the slot, which a new listener may take; one
            // still connecting starts its drain once it relays.
            conn.listener = NO_LISTENER;
            if matches!(conn.phase, Phase::Relay { .. }) && conn.drain_by.is_none() {
                conn.drain_by = Some(drain_by);
                arm.push(i);
            }
        }
        for i in arm {
            self.arm(i);
        }
    }

    fn accept_waiting(&mut self) {
        while let Some(slot) = self.to_accept.pop() {
            self.accept(slot);
        }
    }

    fn accept(&mut self, slot: usize) {
        let mut refused = 0;
        while let Some(l) = self.listeners.get_mut(slot) {
            if refused == REFUSALS_PER_TURN {
                self.accept_later.push(slot);
                break;
            }
            let Some(listener_slot) = ListenerSlot::take(&l.open, self.ctx.config.max_connections)
            else {
                // At the cap: clients wait in the backlog instead of being
                // accepted and dropped, until a slot frees on any loop.
                l.at_cap = true;
                if l.retry_at.is_none() {
                    self.retrying += 1;
                }
                l.retry_at = Some(self.now + CAP_RECHECK);
                break;
            };
            let (client, peer) = match l.socket.accept() {
                Ok(accepted) => accepted,
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => {
                    tracing::warn!(listener = %l.key, error = %e, "L4 accept failed");
                    l.at_cap = false;
                    if l.retry_at.is_none() {
                        self.retrying += 1;
                    }
                    l.retry_at = Some(self.now + ACCEPT_BACKOFF);
                    break;
                }
            };
            if let Some(ranges) = &l.route.options.source_ranges
                && !ranges.admits(peer.ip())
            {
                // Refused before anything is spent on it: no connection
                // slot, no upstream connect, no ClientHello read, no log
                // line (a flood would make one per attempt). A reset, not
                // a FIN: the client learns it was refused, and the
                // listener's address keeps no TIME_WAIT for it.
                let _ = socket2::SockRef::from(&client).set_linger(Some(Duration::ZERO));
                drop(client);
                refused += 1;
                continue;
            }
            let route = l.route.clone();
            let series = l.series.clone();
            self.start(
                slot,
                client,
                peer,
                route,
                series,
                Arrival::Accepted(listener_slot),
            );
        }
        // One series lookup per batch, not per refused client.
        if refused > 0
            && let Some(l) = self.listeners.get(slot)
        {
            self.ctx
                .metrics
                .source_range_refusals
                .with_label_values(&[&l.series.label, "TCP"])
                .inc_by(refused as u64);
        }
    }

    fn start(
        &mut self,
        listener: usize,
        mut client: TcpStream,
        peer: SocketAddr,
        route: Arc<Route>,
        series: Arc<ServiceSeries>,
        arrival: Arrival,
    ) {
        let metrics = &self.ctx.metrics;
        metrics.tcp_connections_total.inc();
        metrics.tcp_connections_active.inc();
        series.connections.inc();
        let entry = self.conns.vacant_entry();
        let slot = entry.key();
        // Both directions' interest at once: edge-triggered, writability
        // is reported only when it changes, and asking for it later would
        // cost an `EPOLL_CTL_MOD` per connection that ever fills a socket.
        let registered = self.poll.registry().register(
            &mut client,
            Token(2 * slot),
            Interest::READABLE | Interest::WRITABLE,
        );
        let line = Line::new(&self.ctx, &series.label, peer);
        self.next_id += 1;
        let (hello, held, listener_slot) = match arrival {
            Arrival::Adopted { hello, held } => (Some(hello), Some(held), None),
            Arrival::Accepted(slot) => (None, None, Some(slot)),
        };
        let read_hello = route.sni.is_some() && hello.is_none();
        entry.insert(Conn {
            id: self.next_id,
            listener,
            route,
            series,
            peer,
            sides: [Some(Side::new(client)), None],
            phase: Phase::Hello {
                bytes: Vec::new(),
                by: self.now + self.ctx.config.connect_timeout,
            },
            line,
            seen_in: 0,
            seen_out: 0,
            last_active: self.now,
            drain_by: None,
            armed: None,
            _active: ActiveGuard::new(&self.ctx),
            _held: held,
            _listener_slot: listener_slot,
        });
        if let Err(e) = registered {
            self.end(slot, End::Aborted(CLIENT, e));
            return;
        }
        if read_hello {
            // TLS passthrough: the backends are chosen by the ClientHello's
            // server name, read (not answered) before anything connects.
            self.arm(slot);
            return;
        }
        let conn = &self.conns[slot];
        let upstream = conn.route.upstream.clone();
        let refusals = conn.route.refusals.clone();
        self.choose(slot, upstream, refusals, hello.unwrap_or_default());
    }

    /// The upstream is known: a refused share ends here, the rest connects.
    fn choose(
        &mut self,
        slot: usize,
        upstream: Arc<Upstream>,
        refusals: Option<Arc<Refusals>>,
        hello: Vec<u8>,
    ) {
        // A Gateway route's share for invalid backendRefs is refused, by weight.
        if refusals.as_ref().is_some_and(|r| r.refuse_next()) {
            self.end(slot, End::InvalidBackend);
            return;
        }
        let conn = &self.conns[slot];
        let mut preface = Vec::new();
        if conn.route.options.proxy_protocol {
            let client = conn.sides[CLIENT].as_ref().map(|s| &s.socket);
            let local = client
                .and_then(|c| c.local_addr().ok())
                .map(crate::plane::socket_group::canonical)
                .unwrap_or_else(|| SocketAddr::new(conn.peer.ip(), 0));
            preface = header_v2(conn.peer, local, Protocol::Tcp);
        }
        preface.extend_from_slice(&hello);
        self.connect(slot, upstream, Tried::default(), 0, preface, hello.len());
    }

    /// Starts a connect to the next endpoint that will take one; ends the
    /// connection when none is left.
    fn connect(
        &mut self,
        slot: usize,
        upstream: Arc<Upstream>,
        mut tried: Tried,
        mut attempts: u32,
        preface: Vec<u8>,
        hello: usize,
    ) {
        let max = self.ctx.config.connect_attempts.max(1);
        while attempts < max {
            attempts += 1;
            let Some(endpoint) = upstream.pick(&mut tried).map(|e| Arc::clone(&e)) else {
                break;
            };
            let mut socket = match connect_started(endpoint.addr) {
                Ok(s) => TcpStream::from_std(s),
                Err(e) => {
                    self.connect_failed(&endpoint, &e);
                    continue;
                }
            };
            if let Err(e) = self.poll.registry().register(
                &mut socket,
                Token(2 * slot + 1),
                Interest::READABLE | Interest::WRITABLE,
            ) {
                self.connect_failed(&endpoint, &e);
                continue;
            }
            let by = self.now + self.ctx.config.connect_timeout;
            let conn = &mut self.conns[slot];
            conn.sides[UPSTREAM] = Some(Side::new(socket));
            conn.phase = Phase::Connecting(Connecting {
                endpoint,
                upstream,
                tried,
                attempts,
                by,
                preface,
                hello,
            });
            self.arm(slot);
            return;
        }
        self.conns[slot].series.connect_failures.inc();
        self.end(slot, End::NoEndpoint);
    }

    fn connect_failed(&self, endpoint: &Endpoint, e: &std::io::Error) {
        tracing::debug!(endpoint = %endpoint.addr, error = %e, "L4 connect failed; endpoint ejected");
        endpoint.eject();
        self.ctx.metrics.tcp_connect_failures_total.inc();
    }

    /// The connect under way failed or timed out: the next endpoint.
    fn retry(&mut self, slot: usize, why: &std::io::Error) {
        let conn = &mut self.conns[slot];
        conn.sides[UPSTREAM] = None;
        let Some(c) = conn.take_connecting() else {
            return;
        };
        self.connect_failed(&c.endpoint, why);
        self.connect(slot, c.upstream, c.tried, c.attempts, c.preface, c.hello);
    }

    fn on_socket(&mut self, slot: usize, side: usize, event: &mio::event::Event) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let Some(s) = conn.sides[side].as_mut() else {
            return;
        };
        s.closing |= event.is_read_closed() || event.is_error();
        s.readable |= event.is_readable() || s.closing;
        s.writable |= event.is_writable() || event.is_write_closed() || event.is_error();
        let relaying = matches!(conn.phase, Phase::Relay { .. });
        let connecting = matches!(conn.phase, Phase::Connecting(_));
        match (relaying, connecting) {
            (true, _) => self.drive(slot),
            (false, false) => {
                if side == CLIENT {
                    self.read_hello(slot);
                }
            }
            (false, true) => {
                if side == UPSTREAM {
                    // A refused connect reports an error and a hang-up; a
                    // backend that accepts and closes at once is connected.
                    if event.is_error() || event.is_write_closed() {
                        let e = self.conns[slot].sides[UPSTREAM]
                            .as_ref()
                            .and_then(|s| s.socket.take_error().ok().flatten())
                            .unwrap_or_else(|| ErrorKind::ConnectionRefused.into());
                        self.retry(slot, &e);
                    } else if event.is_writable() {
                        self.connected(slot);
                    }
                }
            }
        }
    }

    fn read_hello(&mut self, slot: usize) {
        let conn = &mut self.conns[slot];
        let Phase::Hello { bytes, .. } = &mut conn.phase else {
            return;
        };
        let Some(client) = conn.sides[CLIENT].as_mut() else {
            return;
        };
        let why = loop {
            match server_name(bytes) {
                Hello::Complete(name) => {
                    let bytes = std::mem::take(bytes);
                    let Some(sni) = conn.route.sni.clone() else {
                        return;
                    };
                    match sni.choose(name.as_deref()) {
                        Some((upstream, refusals)) => {
                            let (upstream, refusals) = (upstream.clone(), refusals.clone());
                            self.choose(slot, upstream, refusals, bytes);
                        }
                        None => {
                            tracing::debug!(service = %conn.route.service, client = %conn.peer,
                                server_name = ?name, "no TLSRoute for the server name; connection closed");
                            self.end(slot, End::NoRoute);
                        }
                    }
                    return;
                }
                Hello::Invalid(why) => break why.to_string(),
                Hello::Incomplete => {}
            }
            if bytes.len() >= MAX_READ {
                break "the ClientHello did not end within the read bound".to_string();
            }
            if !client.readable {
                return;
            }
            // Through the loop's buffer, up to the bound: nothing is
            // zero-filled per read.
            let room = MAX_READ - bytes.len();
            match client.socket.read(&mut self.buf[..room]) {
                Ok(0) => break "the client closed before its ClientHello ended".to_string(),
                Ok(n) => bytes.extend_from_slice(&self.buf[..n]),
                Err(e) if e.kind() == ErrorKind::WouldBlock => {
                    client.readable = false;
                    return;
                }
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) => break e.to_string(),
            }
        };
        tracing::debug!(service = %conn.route.service, client = %conn.peer, %why,
            "no ClientHello read; connection closed");
        self.end(slot, End::BadRequest);
    }

    fn connected(&mut self, slot: usize) {
        let conn = &mut self.conns[slot];
        let Some(Connecting {
            endpoint,
            preface,
            hello,
            ..
        }) = conn.take_connecting()
        else {
            return;
        };
        endpoint.mark_healthy();
        // A passthrough ClientHello counts as relayed once it is handed over.
        self.ctx.metrics.bytes_in.inc_by(hello as u64);
        conn.series.bytes_in.inc_by(hello as u64);
        conn.seen_in += hello as u64;
        if let Some(line) = conn.line.as_mut() {
            line.entry.upstream = Some(endpoint.addr);
        }
        conn.phase = Phase::Relay {
            endpoint: endpoint.addr,
        };
        conn.last_active = self.now;
        if conn.listener == NO_LISTENER && conn.drain_by.is_none() {
            conn.drain_by = Some(self.now + self.ctx.config.drain_timeout);
        }
        if let Some(up) = conn.sides[UPSTREAM].as_mut() {
            up.owed = preface;
        }
        self.arm(slot);
        self.drive(slot);
    }

    /// Moves what can move, in both directions, until nothing can.
    fn drive(&mut self, slot: usize) {
        let metrics = &self.ctx.metrics;
        let conn = &mut self.conns[slot];
        let [Some(client), Some(upstream)] = &mut conn.sides else {
            return;
        };
        let end = loop {
            let mut moved = false;
            let mut failed = None;
            for from in [CLIENT, UPSTREAM] {
                let (src, dst) = if from == CLIENT {
                    (&mut *client, &mut *upstream)
                } else {
                    (&mut *upstream, &mut *client)
                };
                let to = 1 - from;
                // What this side still owes the other goes first.
                if !dst.owed.is_empty() && dst.writable {
                    match dst.socket.write(&dst.owed) {
                        Ok(n) => {
                            dst.owed.drain(..n);
                            moved = true;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => dst.writable = false,
                        Err(e) if e.kind() == ErrorKind::Interrupted => {}
                        Err(e) => {
                            failed = Some((to, e));
                            break;
                        }
                    }
                }
                // The direction that ends last sends no FIN of its own: the
                // close sends one, so a connection costs one `shutdown`.
                let last = dst.ended && src.owed.is_empty();
                if src.ended && dst.owed.is_empty() && !dst.shut && !last {
                    // The peer may already be gone; the other direction decides.
                    let _ = dst.socket.shutdown(Shutdown::Write);
                    dst.shut = true;
                }
                if !dst.owed.is_empty() || src.ended || !src.readable {
                    continue;
                }
                match src.socket.read(&mut self.buf) {
                    Ok(0) => {
                        src.ended = true;
                        moved = true;
                    }
                    Ok(n) => {
                        moved = true;
                        conn.last_active = self.now;
                        if from == CLIENT {
                            metrics.bytes_in.inc_by(n as u64);
                            conn.series.bytes_in.inc_by(n as u64);
                            conn.seen_in += n as u64;
                        } else {
                            metrics.bytes_out.inc_by(n as u64);
                            conn.series.bytes_out.inc_by(n as u64);
                            conn.seen_out += n as u64;
                        }
                        // A read that filled the buffer partly drained the
                        // socket: the next read would block.
                        if n < self.buf.len() && !src.closing {
                            src.readable = false;
                        }
                        // A short write or "would block" means the socket is
                        // full until epoll says otherwise; an interrupted one
                        // is sent again from `owed` on the next pass.
                        match dst.socket.write(&self.buf[..n]) {
                            Ok(m) if m == n => {}
                            Ok(m) => {
                                dst.owed.extend_from_slice(&self.buf[m..n]);
                                dst.writable = false;
                            }
                            Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                dst.owed.extend_from_slice(&self.buf[..n]);
                                dst.writable = false;
                            }
                            Err(e) if e.kind() == ErrorKind::Interrupted => {
                                dst.owed.extend_from_slice(&self.buf[..n]);
                            }
                            Err(e) => {
                                failed = Some((to, e));
                                break;
                            }
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => src.readable = false,
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => {
                        failed = Some((from, e));
                        break;
                    }
                }
            }
            if let Some((side, e)) = failed {
                break Some(End::Aborted(side, e));
            }
            if client.ended && upstream.ended && client.owed.is_empty() && upstream.owed.is_empty()
            {
                break Some(End::Done);
            }
            if !moved {
                break None;
            }
        };
        if let Some(end) = end {
            self.end(slot, end);
        }
    }

    /// Makes sure a timer entry stands at the connection's deadline.
    fn arm(&mut self, slot: usize) {
        let Some(conn) = self.conns.get_mut(slot) else {
            return;
        };
        let at = conn.deadline();
        if conn.armed.is_some_and(|armed| armed <= at) {
            // An earlier entry fires first and re-arms from there.
            return;
        }
        conn.armed = Some(at);
        self.timers.push(Reverse((at, slot, conn.id)));
    }

    fn fire_timers(&mut self) {
        let now = Instant::now();
        while let Some(Reverse((at, slot, id))) = self.timers.peek().copied() {
            if at > now {
                break;
            }
            self.timers.pop();
            let Some(conn) = self.conns.get_mut(slot) else {
                continue;
            };
            if conn.id != id || conn.armed != Some(at) {
                continue;
            }
            conn.armed = None;
            if conn.deadline() > now {
                // Data moved since: the idle clock starts again from there.
                self.arm(slot);
                continue;
            }
            match &conn.phase {
                Phase::Hello { .. } => {
                    tracing::debug!(service = %conn.route.service, client = %conn.peer,
                        "no complete ClientHello within the connect timeout; connection closed");
                    self.end(slot, End::BadRequest);
                }
                Phase::Connecting(Connecting { endpoint, .. }) => {
                    tracing::debug!(endpoint = %endpoint.addr, "L4 connect timed out; endpoint ejected");
                    self.retry(slot, &ErrorKind::TimedOut.into());
                }
                Phase::Relay { .. } => {
                    let end = if conn.drain_by.is_some_and(|d| d <= now) {
                        End::Drained
                    } else {
                        End::Idle
                    };
                    self.end(slot, end);
                }
            }
        }
        if self.retrying == 0 {
            return;
        }
        for (slot, l) in self.listeners.iter_mut() {
            if l.retry_at.is_some_and(|at| at <= now) {
                l.retry_at = None;
                l.at_cap = false;
                self.retrying -= 1;
                self.to_accept.push(slot);
            }
        }
    }

    fn kill_all(&mut self) {
        let slots: Vec<usize> = self.conns.iter().map(|(slot, _)| slot).collect();
        for slot in slots {
            self.end(slot, End::Killed);
        }
    }

    /// Ends a connection: the log line, the metrics, the reset passed on,
    /// and the listener's slot given back.
    fn end(&mut self, slot: usize, end: End) {
        let mut conn = self.conns.remove(slot);
        self.ctx.metrics.tcp_connections_active.dec();
        // An abort is passed on as an abort, as HAProxy does: the other
        // side learns the connection failed instead of seeing a clean end,
        // and the socket teapot closes leaves no TIME_WAIT behind.
        if let End::Aborted(side, _) = &end
            && let Some(other) = &conn.sides[1 - side]
        {
            let _ = socket2::SockRef::from(&other.socket).set_linger(Some(Duration::ZERO));
        }
        if let End::Refused = &end {
            for side in conn.sides.iter().flatten() {
                let _ = socket2::SockRef::from(&side.socket).set_linger(Some(Duration::ZERO));
            }
        }
        if let Some(line) = conn.line.as_mut() {
            line.entry.bytes_in = conn.seen_in;
            line.entry.bytes_out = conn.seen_out;
            line.entry.reason = match &end {
                End::Done => None,
                End::Idle => Some("idle_timeout"),
                End::Drained => Some("drained"),
                End::Killed => Some("shutdown"),
                End::NoRoute => Some("no_route"),
                End::BadRequest => Some("bad_request"),
                End::InvalidBackend => Some("invalid_backend"),
                End::NoEndpoint => Some("no_endpoint"),
                End::Refused => Some("source_range"),
                End::Aborted(..) => Some("connection_error"),
            };
        }
        let (service, peer) = (&conn.route.service, conn.peer);
        match &end {
            End::Done | End::Killed | End::NoRoute | End::BadRequest => {}
            End::Idle => {
                tracing::debug!(service = %service, client = %peer, "L4 connection idle; closed")
            }
            End::Drained => {
                tracing::debug!(service = %service, client = %peer, "L4 connection drained; closed")
            }
            End::InvalidBackend => tracing::debug!(service = %service, client = %peer,
                "connection refused: its share belongs to an invalid backendRef"),
            End::NoEndpoint => tracing::debug!(service = %service, client = %peer,
                "no L4 endpoint accepted the connection"),
            End::Refused => tracing::debug!(service = %service, client = %peer,
                "L4 connection reset: the client is outside the Service's new source ranges"),
            End::Aborted(side, e) => {
                let side = if *side == CLIENT {
                    "client"
                } else {
                    "upstream"
                };
                tracing::debug!(service = %service, client = %peer, side, error = %e, "L4 connection aborted")
            }
        }
        // The sockets close as they drop, which takes them out of epoll.
        let listener = conn.listener;
        drop(conn);
        if let Some(l) = self.listeners.get_mut(listener)
            && l.at_cap
        {
            // Held at the cap, so it has a recheck due: this is sooner.
            l.retry_at = None;
            l.at_cap = false;
            self.retrying -= 1;
            self.to_accept.push(listener);
        }
        // Timer entries of ended connections go stale; past twice the live
        // ones the heap is swept, so it stays in proportion to them.
        if self.timers.len() > 2 * self.conns.len() + 1024 {
            let conns = &self.conns;
            self.timers.retain(|Reverse((at, slot, id))| {
                conns
                    .get(*slot)
                    .is_some_and(|c| c.id == *id && c.armed == Some(*at))
            });
        }
    }
}

/// Accept backlog of TCP listeners.
const BACKLOG: i32 = 1024;

/// A non-blocking TCP socket for `addr`'s family with `TCP_NODELAY`, so
/// relayed bytes go out at once: every socket of the data path starts so.
fn nodelay_socket(addr: SocketAddr) -> std::io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    Ok(socket)
}

/// One listening socket per event loop, all on `addr` (`SO_REUSEPORT`:
/// the kernel spreads new connections over them). A bind still fails on
/// an address another program holds without `SO_REUSEPORT`; the sockets of
/// a listener closed a moment ago may still be open beside new ones, and
/// then share its first connections. Accepted sockets inherit the
/// listener's `TCP_NODELAY` (Linux copies it), one system call fewer each.
pub(super) fn bind(addr: SocketAddr, loops: usize) -> std::io::Result<Vec<std::net::TcpListener>> {
    (0..loops.max(1))
        .map(|_| {
            let socket = nodelay_socket(addr)?;
            // A restart must not wait for TIME_WAIT of the previous process.
            socket.set_reuse_address(true)?;
            socket.set_reuse_port(true)?;
            socket.bind(&addr.into())?;
            socket.listen(BACKLOG)?;
            Ok(socket.into())
        })
        .collect()
}

/// A socket for `addr`, its connect started. A loopback connect is often
/// up before this returns; the loop learns either way from the socket
/// turning writable.
fn connect_started(addr: SocketAddr) -> std::io::Result<std::net::TcpStream> {
    let socket = nodelay_socket(addr)?;
    match socket.connect(&addr.into()) {
        Err(e) if e.raw_os_error() != Some(EINPROGRESS) => return Err(e),
        _ => {}
    }
    Ok(socket.into())
}

/// Linux's `EINPROGRESS`: a non-blocking connect under way.
const EINPROGRESS: i32 = 115;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compile::l4::L4Config;
    use crate::compile::l4::table::{HealthOptions, RouteOptions};
    use crate::live::endpoints::EndpointRegistry;
    use crate::plane::l4::L4Metrics;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn context(config: L4Config) -> (Arc<Context>, tokio::sync::watch::Sender<bool>) {
        let (kill, kill_rx) = tokio::sync::watch::channel(false);
        let ctx = Context {
            config,
            metrics: L4Metrics::register(&prometheus::Registry::new()).unwrap(),
            active: Default::default(),
            kill: kill_rx,
            nodes: Arc::default(),
        };
        (Arc::new(ctx), kill)
    }

    fn route(endpoints: &[SocketAddr], idle: Duration) -> Arc<Route> {
        let registry = EndpointRegistry::default();
        let endpoints = endpoints.iter().map(|a| registry.endpoint(*a)).collect();
        Arc::new(Route {
            service: teapot_model::store::NsName::new("t", "relay"),
            port_name: String::new(),
            upstream: Arc::new(Upstream::new("t/relay".into(), endpoints, None)),
            sni: None,
            refusals: None,
            options: RouteOptions {
                source_ranges: None,
                proxy_protocol: false,
                tcp_idle_timeout: idle,
                udp_idle_timeout: idle,
                health: HealthOptions::default(),
            },
            edge: None,
        })
    }

    /// An echo that answers each read; stops reading for `stall` first, so
    /// a burst fills the relay's sockets and the rest waits as owed bytes.
    async fn echo(stall: Duration) -> SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                tokio::spawn(async move {
                    tokio::time::sleep(stall).await;
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                    let _ = w.shutdown().await;
                });
            }
        });
        addr
    }

    /// A listener served by `loops`, its address.
    fn serve(loops: &Loops, route: &Arc<Route>) -> SocketAddr {
        serve_as(loops, route, None).0
    }

    /// A listener served by `loops` under `key` (its own address's when
    /// none): its address and id.
    fn serve_as(
        loops: &Loops,
        route: &Arc<Route>,
        key: Option<ListenerKey>,
    ) -> (SocketAddr, ListenerId) {
        let socket = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        socket.set_nonblocking(true).unwrap();
        let addr = socket.local_addr().unwrap();
        let key = key.unwrap_or(ListenerKey {
            addr: addr.ip(),
            port: addr.port(),
            protocol: Protocol::Tcp,
        });
        (addr, loops.listen(key, vec![socket], route))
    }

    async fn exchange(addr: SocketAddr, data: &[u8]) -> Vec<u8> {
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = s.split();
        let send = async {
            w.write_all(data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut back = Vec::new();
        let (_, read) = tokio::join!(send, r.read_to_end(&mut back));
        read.unwrap();
        back
    }

    #[tokio::test]
    async fn a_burst_larger_than_the_sockets_take_is_relayed_whole_after_a_half_close() {
        let backend = echo(Duration::from_millis(200)).await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let addr = serve(&loops, &route(&[backend], Duration::from_secs(60)));
        let data: Vec<u8> = (0..8 << 20).map(|i: u32| (i % 251) as u8).collect();
        let back = tokio::time::timeout(Duration::from_secs(20), exchange(addr, &data))
            .await
            .expect("relayed within 20 s");
        assert!(
            back == data,
            "{} of {} bytes came back",
            back.len(),
            data.len()
        );
        assert_eq!(ctx.metrics.bytes_in.get(), data.len() as u64);
        assert_eq!(ctx.metrics.bytes_out.get(), data.len() as u64);
        // The connection is gone once both sides ended.
        for _ in 0..100 {
            if ctx.active.load(std::sync::atomic::Ordering::Relaxed) == 0 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(ctx.active.load(std::sync::atomic::Ordering::Relaxed), 0);
    }

    #[tokio::test]
    async fn a_refused_endpoint_is_ejected_and_the_next_one_takes_the_connection() {
        let backend = echo(Duration::ZERO).await;
        // A port nothing listens on: bound, then closed.
        let refused = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let route = route(&[refused, backend], Duration::from_secs(60));
        let addr = serve(&loops, &route);
        for i in 0..4u8 {
            assert_eq!(exchange(addr, &[i; 3]).await, vec![i; 3]);
        }
        assert!(ctx.metrics.tcp_connect_failures_total.get() >= 1);
        assert!(route.upstream.endpoints.load()[0].is_ejected());
    }

    #[tokio::test]
    async fn a_quiet_connection_ends_at_its_idle_timeout_and_a_busy_one_does_not() {
        let backend = echo(Duration::ZERO).await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let idle = Duration::from_millis(300);
        let addr = serve(&loops, &route(&[backend], idle));
        let mut busy = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut quiet = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = std::time::Instant::now();
        let mut byte = [0u8; 1];
        // The busy one moves a byte every 100 ms for a second.
        while started.elapsed() < Duration::from_secs(1) {
            busy.write_all(b"x").await.unwrap();
            busy.read_exact(&mut byte).await.unwrap();
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), quiet.read_to_end(&mut rest)).await;
        assert!(
            matches!(read, Ok(Ok(0))),
            "the quiet connection ended: {read:?}"
        );
        busy.write_all(b"y").await.unwrap();
        busy.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
    }

    #[tokio::test]
    async fn a_late_close_of_a_listener_does_not_reach_the_next_one_on_its_key() {
        let backend = echo(Duration::ZERO).await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let route = route(&[backend], Duration::from_secs(60));
        let key = ListenerKey {
            addr: std::net::Ipv4Addr::LOCALHOST.into(),
            port: 1,
            protocol: Protocol::Tcp,
        };
        // A Service removed and added again: the new listener is bound
        // before the old one's close arrives.
        let (old, old_id) = serve_as(&loops, &route, Some(key));
        let (new, _) = serve_as(&loops, &route, Some(key));
        loops.close(old_id);
        assert_eq!(exchange(new, b"still").await, b"still".to_vec());
        let refused = tokio::time::timeout(Duration::from_secs(2), async {
            loop {
                match tokio::net::TcpStream::connect(old).await {
                    Err(_) => return,
                    Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                }
            }
        })
        .await;
        assert!(refused.is_ok(), "the old listener closed");
    }

    /// `route`'s with source ranges `nets` (none: everyone).
    fn ranged(route: &Route, nets: &[&str]) -> Arc<Route> {
        let mut options = route.options.clone();
        options.source_ranges = (!nets.is_empty()).then(|| {
            Arc::new(crate::compile::l4::SourceRanges::new(
                nets.iter().map(|n| n.parse().unwrap()).collect(),
            ))
        });
        Arc::new(Route {
            service: route.service.clone(),
            port_name: String::new(),
            upstream: route.upstream.clone(),
            sni: None,
            refusals: None,
            options,
            edge: None,
        })
    }

    /// A backend that counts the connections it accepts and echoes.
    async fn counting_echo() -> (SocketAddr, Arc<std::sync::atomic::AtomicUsize>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let count = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let seen = count.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                tokio::spawn(async move {
                    let (mut r, mut w) = s.split();
                    let _ = tokio::io::copy(&mut r, &mut w).await;
                });
            }
        });
        (addr, count)
    }

    /// Whether a connection to `addr` ends without one byte relayed.
    async fn refused_at(addr: SocketAddr) -> bool {
        let Ok(mut s) = tokio::net::TcpStream::connect(addr).await else {
            return true;
        };
        let _ = s.write_all(b"hello").await;
        let mut back = Vec::new();
        match tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut back)).await {
            Ok(Ok(_)) => back.is_empty(),
            Ok(Err(e)) => e.kind() == ErrorKind::ConnectionReset,
            Err(_) => false,
        }
    }

    /// Waits up to 2 s for `done`: a counter moves just after the
    /// client saw its effect.
    async fn eventually(done: impl Fn() -> bool) {
        for _ in 0..200 {
            if done() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(done(), "not within 2 s");
    }

    fn refusals(ctx: &Context, protocol: &str) -> u64 {
        ctx.metrics
            .source_range_refusals
            .with_label_values(&["t/relay", protocol])
            .get()
    }

    #[tokio::test]
    async fn a_client_outside_the_source_ranges_is_reset_at_accept_and_reaches_no_endpoint() {
        let (backend, connects) = counting_echo().await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let open = route(&[backend], Duration::from_secs(60));
        let addr = serve(&loops, &ranged(&open, &["10.0.0.0/8", "2001:db8::/32"]));
        assert!(refused_at(addr).await, "127.0.0.1 is outside 10.0.0.0/8");
        // More refused clients than one turn resets: the rest wait for the
        // next turns and are refused all the same.
        let flood = 3 * REFUSALS_PER_TURN;
        let mut clients = Vec::new();
        for _ in 0..flood {
            clients.push(tokio::spawn(refused_at(addr)));
        }
        for c in clients {
            assert!(c.await.unwrap());
        }
        eventually(|| refusals(&ctx, "TCP") == 1 + flood as u64).await;
        assert_eq!(connects.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(ctx.metrics.tcp_connections_total.get(), 0);
        assert_eq!(ctx.active.load(std::sync::atomic::Ordering::Relaxed), 0);
        // Inside the ranges (or without any) the same client is served.
        let addr = serve(&loops, &ranged(&open, &["192.0.2.0/24", "127.0.0.0/8"]));
        assert_eq!(exchange(addr, b"in").await, b"in".to_vec());
        let addr = serve(&loops, &open);
        assert_eq!(exchange(addr, b"all").await, b"all".to_vec());
        assert_eq!(connects.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn an_ipv6_client_is_held_to_the_ipv6_ranges() {
        let (backend, connects) = counting_echo().await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let open = route(&[backend], Duration::from_secs(60));
        let serve6 = |route: &Arc<Route>| {
            let socket = std::net::TcpListener::bind("[::1]:0").unwrap();
            socket.set_nonblocking(true).unwrap();
            let addr = socket.local_addr().unwrap();
            let key = ListenerKey {
                addr: addr.ip(),
                port: addr.port(),
                protocol: Protocol::Tcp,
            };
            loops.listen(key, vec![socket], route);
            addr
        };
        let v4_only = serve6(&ranged(&open, &["0.0.0.0/0"]));
        assert!(refused_at(v4_only).await, "::1 is in no IPv4 range");
        let other = serve6(&ranged(&open, &["2001:db8::/32"]));
        assert!(refused_at(other).await);
        assert_eq!(connects.load(std::sync::atomic::Ordering::SeqCst), 0);
        let own = serve6(&ranged(&open, &["::1/128"]));
        assert_eq!(exchange(own, b"v6").await, b"v6".to_vec());
        eventually(|| refusals(&ctx, "TCP") == 2).await;
    }

    #[tokio::test]
    async fn narrowed_source_ranges_reset_the_connections_of_clients_now_outside() {
        let (backend, _) = counting_echo().await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(1, &ctx).unwrap();
        let open = route(&[backend], Duration::from_secs(60));
        let (addr, id) = serve_as(&loops, &open, None);
        let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
        s.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        s.read_exact(&mut byte).await.unwrap();
        // Widened: the connection carries on.
        loops.route(id, &ranged(&open, &["127.0.0.0/8"]));
        s.write_all(b"y").await.unwrap();
        s.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"y");
        // Narrowed past it: reset.
        loops.route(id, &ranged(&open, &["10.0.0.0/8"]));
        let mut rest = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
        assert!(
            matches!(&read, Ok(Err(e)) if e.kind() == ErrorKind::ConnectionReset),
            "{read:?}"
        );
        assert_eq!(refusals(&ctx, "TCP"), 1);
        // The loop's thread closes the sockets (the reset the client just
        // read) before the connection's count is given back.
        eventually(|| ctx.active.load(std::sync::atomic::Ordering::Relaxed) == 0).await;
    }

    /// Two loops, each with its own socket of the listener: the kernel
    /// hands clients to both, and the cap still holds for the listener.
    #[tokio::test]
    async fn the_cap_holds_for_the_listener_over_every_loop() {
        let (backend, served) = counting_echo().await;
        let (ctx, _kill) = context(L4Config {
            max_connections: 1,
            ..L4Config::default()
        });
        let loops = Loops::start(2, &ctx).unwrap();
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let key = ListenerKey {
            addr: addr.ip(),
            port,
            protocol: Protocol::Tcp,
        };
        let sockets = bind(addr, loops.len()).unwrap();
        loops.listen(key, sockets, &route(&[backend], Duration::from_secs(60)));
        let mut first = tokio::net::TcpStream::connect(addr).await.unwrap();
        first.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        first.read_exact(&mut byte).await.unwrap();
        // From eight source ports: both loops' sockets get some.
        let mut waiting = Vec::new();
        for _ in 0..8 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"y").await.unwrap();
            waiting.push(s);
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
        let seen = |n: usize| served.load(std::sync::atomic::Ordering::SeqCst) == n;
        assert!(seen(1), "served past the cap");
        drop(first);
        // The freed slot goes to one waiting client, whichever loop holds
        // it (another loop's sees it at its next look).
        eventually(|| seen(2)).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(seen(2), "one slot freed, more than one client served");
    }

    #[tokio::test]
    async fn the_kill_ends_every_connection_and_stops_the_loops() {
        let backend = echo(Duration::ZERO).await;
        let (ctx, _kill) = context(L4Config::default());
        let loops = Loops::start(2, &ctx).unwrap();
        let addr = serve(&loops, &route(&[backend], Duration::from_secs(60)));
        let mut open = Vec::new();
        for _ in 0..4 {
            let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
            s.write_all(b"x").await.unwrap();
            let mut byte = [0u8; 1];
            s.read_exact(&mut byte).await.unwrap();
            open.push(s);
        }
        assert_eq!(ctx.active.load(std::sync::atomic::Ordering::Relaxed), 4);
        tokio::task::spawn_blocking(move || loops.kill())
            .await
            .unwrap();
        assert_eq!(ctx.active.load(std::sync::atomic::Ordering::Relaxed), 0);
        for mut s in open {
            let mut rest = Vec::new();
            let read = tokio::time::timeout(Duration::from_secs(2), s.read_to_end(&mut rest)).await;
            assert!(read.is_ok(), "the connection ended");
        }
    }
}
