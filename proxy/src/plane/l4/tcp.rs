//! TCP listeners: accept, connect to an endpoint (retrying others before
//! any byte is sent), optional PROXY v2 header, then a full-duplex relay
//! that passes half-closes on and ends on idle, on drain or on kill.

use std::future::Future as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::Poll;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, watch};
use tokio::time::Instant;

use super::context::{ActiveGuard, Context};
use super::proxy_protocol::header_v2;
use super::sni::{Hello, MAX_READ, server_name};
use super::woken::Woken;
use crate::compile::l4::pool::{ListenerKey, Protocol};
use crate::compile::l4::table::Route;
use crate::compile::upstream::{Endpoint, Tried, Upstream};
use crate::plane::access_log::Entry;

/// Relay buffer per direction while data flows: large enough for bulk
/// transfers to move in few syscalls. An idle connection holds none (see
/// [`pump`]).
const BUFFER: usize = 32 * 1024;

pub(super) async fn serve(
    listener: TcpListener,
    key: ListenerKey,
    mut routes: watch::Receiver<Arc<Route>>,
    ctx: Arc<Context>,
) {
    let slots = Arc::new(Semaphore::new(ctx.config.max_connections));
    let mut series = ServiceSeries::of(&routes.borrow(), &ctx.metrics);
    loop {
        // The route is checked here, and the waits below try the permit
        // and the accept first: a connection already waiting costs no
        // registration with the route's watch, and a steady stream of
        // them still sees a route change (or the listener's end).
        match routes.has_changed() {
            Err(_) => break,
            Ok(true) => series = ServiceSeries::of(&routes.borrow_and_update(), &ctx.metrics),
            Ok(false) => {}
        }
        // At the cap, stop accepting: clients wait in the backlog instead
        // of being accepted and dropped.
        let permit = tokio::select! {
            biased;
            p = slots.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
            changed = routes.changed() => if changed.is_err() { break } else {
                series = ServiceSeries::of(&routes.borrow(), &ctx.metrics);
                continue
            },
        };
        let (stream, peer) = tokio::select! {
            biased;
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of file descriptors and the like: back off.
                    tracing::warn!(listener = %key, error = %e, "L4 accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            changed = routes.changed() => if changed.is_err() { break } else {
                series = ServiceSeries::of(&routes.borrow(), &ctx.metrics);
                continue
            },
        };
        let routes = routes.clone();
        let ctx = ctx.clone();
        let series = series.clone();
        // Boxed: the relay's future is about 2 KiB, and tokio moves a
        // task's future several times on its way in (`spawn`, the task
        // cell, its stage): the copies cost more than the allocation.
        tokio::spawn(Box::pin(async move {
            let _permit = permit;
            connection(stream, peer, routes, ctx, series).await;
        }));
    }
    tracing::debug!(listener = %key, "L4 TCP listener stopped accepting");
}

/// How a relayed connection ended.
#[derive(Debug)]
enum End {
    Done,
    Idle,
    Drained,
    Killed,
    /// One side reset the connection (or failed): the other side is reset
    /// too (see [`relay`]).
    Aborted(Side, std::io::Error),
}

/// A side of a relayed connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Side {
    Client,
    Upstream,
}

/// Which socket of a [`pump`] failed.
#[derive(Debug)]
enum Fault {
    Read(std::io::Error),
    Write(std::io::Error),
}

impl Fault {
    /// The side that failed, for a pump reading `from` and writing the
    /// other side.
    fn side(self, from: Side) -> (Side, std::io::Error) {
        let other = match from {
            Side::Client => Side::Upstream,
            Side::Upstream => Side::Client,
        };
        match self {
            Fault::Read(e) => (from, e),
            Fault::Write(e) => (other, e),
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

async fn connection(
    client: TcpStream,
    peer: SocketAddr,
    mut routes: watch::Receiver<Arc<Route>>,
    ctx: Arc<Context>,
    series: Arc<ServiceSeries>,
) {
    let _active = ActiveGuard::new(&ctx);
    let metrics = &ctx.metrics;
    metrics.tcp_connections_total.inc();
    metrics.tcp_connections_active.inc();
    let _gauge = scopeguard(|| metrics.tcp_connections_active.dec());
    let route = routes.borrow_and_update().clone();
    // The route moved on between the accept and here: its own series.
    let series = if series.service == route.service {
        series
    } else {
        ServiceSeries::of(&route, metrics)
    };
    series.connections.inc();
    let mut line = Line::new(&ctx, &series.label, peer);
    let mut client = client;
    // TLS passthrough: the backends are chosen by the ClientHello's
    // server name, read (not answered) before anything is connected.
    let (chosen, refusals, hello) = match &route.sni {
        None => (route.upstream.clone(), route.refusals.clone(), Vec::new()),
        Some(sni) => match read_hello(&mut client, &ctx).await {
            Ok((bytes, name)) => match sni.choose(name.as_deref()) {
                Some((upstream, refusals)) => (upstream.clone(), refusals.clone(), bytes),
                None => {
                    tracing::debug!(service = %route.service, client = %peer, server_name = ?name,
                        "no TLSRoute for the server name; connection closed");
                    if let Some(line) = line.as_mut() {
                        line.entry.reason = Some("no_route");
                    }
                    return;
                }
            },
            Err(why) => {
                tracing::debug!(service = %route.service, client = %peer, %why,
                    "no ClientHello read; connection closed");
                if let Some(line) = line.as_mut() {
                    line.entry.reason = Some("bad_request");
                }
                return;
            }
        },
    };
    // A Gateway route's share for invalid backendRefs is refused, by weight.
    if refusals.as_ref().is_some_and(|r| r.refuse_next()) {
        tracing::debug!(service = %route.service, client = %peer,
            "connection refused: its share belongs to an invalid backendRef");
        if let Some(line) = line.as_mut() {
            line.entry.reason = Some("invalid_backend");
        }
        return;
    }
    let Some((mut upstream, endpoint)) = connect(&chosen, &ctx).await else {
        tracing::debug!(service = %route.service, client = %peer,
            "no L4 endpoint accepted the connection");
        series.connect_failures.inc();
        if let Some(line) = line.as_mut() {
            line.entry.reason = Some("no_endpoint");
        }
        return;
    };
    if let Some(line) = line.as_mut() {
        line.entry.upstream = Some(endpoint.addr);
    }
    // TCP_NODELAY: the client's socket has it from the listener
    // (manager::bind_tcp), the upstream's from `connect_to`.
    if route.options.proxy_protocol {
        let local = client
            .local_addr()
            .unwrap_or_else(|_| SocketAddr::new(peer.ip(), 0));
        let header = header_v2(peer, local, Protocol::Tcp);
        if send(&mut upstream.split().1, &header, &mut true)
            .await
            .is_err()
        {
            if let Some(line) = line.as_mut() {
                line.entry.reason = Some("connection_error");
            }
            return;
        }
    }
    if !hello.is_empty() {
        if send(&mut upstream.split().1, &hello, &mut true)
            .await
            .is_err()
        {
            if let Some(line) = line.as_mut() {
                line.entry.reason = Some("connection_error");
            }
            return;
        }
        metrics.bytes_in.inc_by(hello.len() as u64);
    }
    let counted = Counted {
        bytes_in: series.bytes_in.clone(),
        bytes_out: series.bytes_out.clone(),
        seen_in: AtomicU64::new(hello.len() as u64),
        seen_out: AtomicU64::new(0),
    };
    let end = relay(
        client,
        upstream,
        endpoint.addr,
        route.options.tcp_idle_timeout,
        &mut routes,
        &ctx,
        &counted,
    )
    .await;
    if let Some(line) = line.as_mut() {
        line.entry.bytes_in = counted.seen_in.load(Ordering::Relaxed);
        line.entry.bytes_out = counted.seen_out.load(Ordering::Relaxed);
        line.entry.reason = match &end {
            End::Done => None,
            End::Idle => Some("idle_timeout"),
            End::Drained => Some("drained"),
            End::Killed => Some("shutdown"),
            End::Aborted(..) => Some("connection_error"),
        };
    }
    match end {
        End::Done | End::Killed => {}
        End::Idle => {
            tracing::debug!(service = %route.service, client = %peer, "L4 connection idle; closed")
        }
        End::Drained => {
            tracing::debug!(service = %route.service, client = %peer, "L4 connection drained; closed")
        }
        End::Aborted(side, e) => {
            tracing::debug!(service = %route.service, client = %peer, ?side, error = %e, "L4 connection aborted")
        }
    }
}

/// A connection's per-Service byte counters, and its own totals for the
/// access log.
struct Counted {
    bytes_in: IntCounter,
    bytes_out: IntCounter,
    seen_in: AtomicU64,
    seen_out: AtomicU64,
}

/// The connection's access-log line, sent when it is dropped: every way
/// out of [`connection`] ends the connection.
struct Line<'c> {
    log: &'c crate::plane::access_log::AccessLog,
    start: Instant,
    entry: Entry,
}

impl<'c> Line<'c> {
    /// Boxed: the entry is most of the line, and inline it would sit in
    /// every connection's task even with the log off.
    fn new(ctx: &'c Context, service: &str, peer: SocketAddr) -> Option<Box<Self>> {
        let log = &ctx.metrics.access_log;
        if !log.is_on() {
            return None;
        }
        let mut entry = Entry::tcp();
        entry.tag = Some(Arc::from(format!("\x1f{service}")));
        entry.client = Some(peer);
        // Every way out of `connection` sets the reason; only a task the
        // exiting runtime drops mid-relay keeps this one.
        entry.reason = Some("shutdown");
        Some(Box::new(Line {
            log,
            start: Instant::now(),
            entry,
        }))
    }
}

impl Drop for Line<'_> {
    fn drop(&mut self) {
        let failed = self.entry.is_error();
        if self.log.wants(if failed { 0 } else { 200 }, failed) {
            let mut entry = std::mem::replace(&mut self.entry, Entry::tcp());
            entry.duration = self.start.elapsed();
            self.log.send(entry);
        }
    }
}

/// Reads from `client` until its ClientHello names a server (or says it
/// names none), within the connect timeout and [`MAX_READ`] bytes.
/// Returns the bytes read, to be sent on untouched, and the name.
async fn read_hello(
    client: &mut TcpStream,
    ctx: &Context,
) -> Result<(Vec<u8>, Option<String>), String> {
    let mut bytes = Vec::with_capacity(2048);
    let deadline = Instant::now() + ctx.config.connect_timeout;
    loop {
        match server_name(&bytes) {
            Hello::Complete(name) => return Ok((bytes, name)),
            Hello::Invalid(why) => return Err(why.to_string()),
            Hello::Incomplete => {}
        }
        if bytes.len() >= MAX_READ {
            return Err("the ClientHello did not end within the read bound".into());
        }
        bytes.reserve(1024);
        let read = tokio::time::timeout_at(deadline, client.read_buf(&mut bytes)).await;
        match read {
            Ok(Ok(0)) => return Err("the client closed before its ClientHello ended".into()),
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(_) => return Err("no complete ClientHello within the connect timeout".into()),
        }
    }
}

/// Connects to the upstream's endpoints round-robin, skipping ejected
/// ones; a failure ejects the endpoint and tries the next one.
async fn connect(upstream: &Upstream, ctx: &Context) -> Option<(TcpStream, Arc<Endpoint>)> {
    let mut tried = Tried::default();
    for _ in 0..ctx.config.connect_attempts.max(1) {
        let endpoint = upstream.pick(&mut tried)?.clone();
        match tokio::time::timeout(ctx.config.connect_timeout, connect_to(endpoint.addr)).await {
            Ok(Ok(stream)) => {
                endpoint.mark_healthy();
                return Some((stream, endpoint));
            }
            Ok(Err(e)) => {
                tracing::debug!(endpoint = %endpoint.addr, error = %e, "L4 connect failed; endpoint ejected");
                endpoint.eject();
                ctx.metrics.tcp_connect_failures_total.inc();
            }
            Err(_) => {
                tracing::debug!(endpoint = %endpoint.addr, "L4 connect timed out; endpoint ejected");
                endpoint.eject();
                ctx.metrics.tcp_connect_failures_total.inc();
            }
        }
    }
    None
}

/// Linux's `EINPROGRESS`: a non-blocking connect under way.
const EINPROGRESS: i32 = 115;

/// A non-blocking connect that does not wait for the event loop when the
/// connection is already up when `connect` returns, as it is to a node on
/// the same host or bridge: the kernel completes a loopback handshake
/// inside the system call. tokio's `TcpStream::connect` always waits for
/// the socket to turn writable, one more turn of the event loop per
/// connection before the first byte moves (HAProxy sends at once). One
/// `getpeername` tells the two cases apart; a connection still under way
/// waits for writability as before. The socket gets `TCP_NODELAY` before
/// the connect, so relayed bytes go out at once.
async fn connect_to(addr: SocketAddr) -> std::io::Result<TcpStream> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM.nonblocking(),
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_tcp_nodelay(true)?;
    match socket.connect(&addr.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let established = socket.peer_addr().is_ok();
    let stream = TcpStream::from_std(std::net::TcpStream::from(socket))?;
    if !established {
        stream.writable().await?;
        if let Some(e) = stream.take_error()? {
            return Err(e);
        }
    }
    Ok(stream)
}

/// Milliseconds since the relay started, for the idle clock.
fn elapsed_ms(start: Instant) -> u64 {
    start.elapsed().as_millis() as u64
}

async fn relay(
    mut client: TcpStream,
    mut upstream: TcpStream,
    endpoint: SocketAddr,
    idle: Duration,
    routes: &mut watch::Receiver<Arc<Route>>,
    ctx: &Context,
    counted: &Counted,
) -> End {
    let end = relay_until_end(
        &mut client,
        &mut upstream,
        endpoint,
        idle,
        routes,
        ctx,
        counted,
    )
    .await;
    // An abort is passed on as an abort, as HAProxy does: the other side
    // learns the connection failed instead of seeing a clean end, and the
    // socket teapot closes leaves no TIME_WAIT behind. Closing the
    // upstream side with a FIN after every client reset kept one
    // ephemeral port per connection in TIME_WAIT for a minute; at a few
    // thousand connections a second the range fills and every connect
    // searches it.
    match &end {
        End::Aborted(Side::Client, _) => {
            let _ = upstream.set_zero_linger();
        }
        End::Aborted(Side::Upstream, _) => {
            let _ = client.set_zero_linger();
        }
        _ => {}
    }
    end
}

async fn relay_until_end(
    client: &mut TcpStream,
    upstream: &mut TcpStream,
    endpoint: SocketAddr,
    idle: Duration,
    routes: &mut watch::Receiver<Arc<Route>>,
    ctx: &Context,
    counted: &Counted,
) -> End {
    let start = Instant::now();
    let last = AtomicU64::new(0);
    let one_ended = AtomicBool::new(false);
    let (mut cr, mut cw) = client.split();
    let (mut ur, mut uw) = upstream.split();
    let both = async {
        tokio::try_join!(
            async {
                pump(
                    &mut cr,
                    &mut uw,
                    &last,
                    start,
                    [&ctx.metrics.bytes_in, &counted.bytes_in],
                    &counted.seen_in,
                    &one_ended,
                )
                .await
                .map_err(|f| f.side(Side::Client))
            },
            async {
                pump(
                    &mut ur,
                    &mut cw,
                    &last,
                    start,
                    [&ctx.metrics.bytes_out, &counted.bytes_out],
                    &counted.seen_out,
                    &one_ended,
                )
                .await
                .map_err(|f| f.side(Side::Upstream))
            },
        )
    };
    tokio::pin!(both);
    let idle_timer = tokio::time::sleep(idle);
    tokio::pin!(idle_timer);
    let mut kill = ctx.kill.clone();
    // The route and the kill switch change rarely; behind `Woken` they are
    // not polled on each of the connection's wakes for its sockets.
    let interrupted = std::pin::pin!(interruption(routes, endpoint, &mut kill, ctx));
    let mut interrupted = Woken::new(interrupted);
    loop {
        tokio::select! {
            biased;
            r = &mut both => return match r {
                Ok(_) => End::Done,
                Err((side, e)) => End::Aborted(side, e),
            },
            end = &mut interrupted => return end,
            () = &mut idle_timer => {
                let quiet = Duration::from_millis(elapsed_ms(start) - last.load(Ordering::Relaxed));
                if quiet >= idle {
                    return End::Idle;
                }
                idle_timer.as_mut().reset(Instant::now() + (idle - quiet));
            }
        }
    }
}

/// Ends a relay from outside: the kill switch at once; a closed listener,
/// or an endpoint no longer in the route, within the drain timeout.
async fn interruption(
    routes: &mut watch::Receiver<Arc<Route>>,
    endpoint: SocketAddr,
    kill: &mut watch::Receiver<bool>,
    ctx: &Context,
) -> End {
    let removed = async {
        loop {
            let changed = routes.changed().await;
            if changed.is_err()
                || !routes
                    .borrow()
                    .upstream
                    .endpoints
                    .iter()
                    .any(|e| e.addr == endpoint)
            {
                return;
            }
        }
    };
    tokio::select! {
        () = removed => {}
        _ = kill.changed() => return End::Killed,
    }
    tokio::select! {
        () = tokio::time::sleep(ctx.config.drain_timeout) => End::Drained,
        _ = kill.changed() => End::Killed,
    }
}

/// Copies one direction; at EOF passes the half-close on (FIN) and lets
/// the other direction continue. The direction that ends last sends no
/// FIN of its own: the relay ends with it and closing the socket sends
/// one, so a connection costs one `shutdown` (as HAProxy's does), not two.
///
/// Waits for readability without a buffer, so an idle connection holds
/// none: one is taken when data arrives, reused while reads keep finding
/// data, and given back when the socket is drained. A bulk transfer keeps
/// one buffer; thousands of quiet connections keep none (docs/decisions.md,
/// "L4 relay buffers only while data flows").
async fn pump(
    r: &mut ReadHalf<'_>,
    w: &mut WriteHalf<'_>,
    last: &AtomicU64,
    start: Instant,
    bytes: [&IntCounter; 2],
    seen: &AtomicU64,
    one_ended: &AtomicBool,
) -> Result<(), Fault> {
    loop {
        // Through `poll_read_ready`, which takes from the task's budget as
        // the read does: `readable()` does not, so once the budget ran out
        // mid-burst it answered "ready" while the read kept saying
        // "pending", and the relay spun without ever yielding.
        std::future::poll_fn(|cx| r.as_ref().poll_read_ready(cx))
            .await
            .map_err(Fault::Read)?;
        let mut buf = Buffer::new();
        let mut direct = true;
        loop {
            buf.0.clear();
            let Some(read) = read_now(r, &mut buf.0).await else {
                // Drained: the buffer goes back until the next burst.
                break;
            };
            let n = read.map_err(Fault::Read)?;
            if n == 0 {
                // The peer may already be gone; the other direction decides.
                if !one_ended.swap(true, Ordering::Relaxed) {
                    let _ = w.shutdown().await;
                }
                return Ok(());
            }
            send(w, &buf.0, &mut direct).await.map_err(Fault::Write)?;
            for counter in bytes {
                counter.inc_by(n as u64);
            }
            seen.fetch_add(n as u64, Ordering::Relaxed);
            last.store(elapsed_ms(start), Ordering::Relaxed);
        }
    }
}

/// Sends all of `bytes`: straight to the socket while `direct`, through
/// tokio's wait for writability for what the socket did not take at once.
///
/// tokio lets a socket write only once the event loop has reported it
/// writable, and a socket registered after `connect` has no report yet: the
/// first bytes to an upstream waited one turn of the event loop, and the
/// connection's task one more wake, although the connection was up. A
/// send the socket cannot take yet fails with `EWOULDBLOCK` and costs
/// nothing else. Once a send was short, the rest of the burst goes through
/// tokio alone (`direct` is cleared until the burst ends), so a full
/// socket is tried once per burst, not twice per write.
async fn send(w: &mut WriteHalf<'_>, bytes: &[u8], direct: &mut bool) -> std::io::Result<()> {
    let mut sent = 0;
    if *direct {
        match socket2::SockRef::from(w.as_ref()).send(bytes) {
            Ok(n) => sent = n,
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted
                ) => {}
            Err(e) => return Err(e),
        }
        if sent == bytes.len() {
            return Ok(());
        }
        *direct = false;
    }
    w.write_all(&bytes[sent..]).await
}

/// One read into `buf`'s spare capacity (zeroing 32 KiB per burst would
/// show in the connection rate), or `None` when the socket has nothing or
/// the task has used up its budget (the caller's wait then yields).
///
/// Through tokio's `poll_read`, which takes a read that fills the buffer
/// only partly as the socket drained and clears its readiness: the next
/// wait goes to epoll instead of a `recv` that would block, one system
/// call saved per burst and direction (`try_read_buf` keeps the
/// readiness until a read fails).
async fn read_now(r: &mut ReadHalf<'_>, buf: &mut Vec<u8>) -> Option<std::io::Result<usize>> {
    let mut read = std::pin::pin!(r.read_buf(buf));
    std::future::poll_fn(|cx| {
        Poll::Ready(match read.as_mut().poll(cx) {
            Poll::Ready(n) => Some(n),
            Poll::Pending => None,
        })
    })
    .await
}

/// One direction's relay buffer, held only while data flows.
struct Buffer(Vec<u8>);

impl Buffer {
    fn new() -> Buffer {
        #[cfg(test)]
        tests::LIVE_BUFFERS.with(|n| n.set(n.get() + 1));
        Buffer(Vec::with_capacity(BUFFER))
    }
}

#[cfg(test)]
impl Drop for Buffer {
    fn drop(&mut self) {
        tests::LIVE_BUFFERS.with(|n| n.set(n.get() - 1));
    }
}

/// Runs `f` when dropped (the connection gauge must fall on every path).
fn scopeguard<F: FnOnce()>(f: F) -> impl Drop {
    struct Guard<F: FnOnce()>(Option<F>);
    impl<F: FnOnce()> Drop for Guard<F> {
        fn drop(&mut self) {
            if let Some(f) = self.0.take() {
                f();
            }
        }
    }
    Guard(Some(f))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    thread_local! {
        /// Relay buffers alive on this thread (the tests run the relay on
        /// a current-thread runtime).
        pub(super) static LIVE_BUFFERS: Cell<isize> = const { Cell::new(0) };
    }

    /// Two connected sockets on 127.0.0.1.
    async fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (near, far) = tokio::join!(TcpStream::connect(addr), listener.accept());
        (near.unwrap(), far.unwrap().0)
    }

    fn counter() -> IntCounter {
        IntCounter::new("relayed_bytes", "bytes").unwrap()
    }

    /// The relay of one direction, with the end the test writes to and the
    /// end it reads from: `client` -> (`proxy_in` -> `proxy_out`) -> `upstream`.
    struct Direction {
        client: TcpStream,
        proxy_in: TcpStream,
        proxy_out: TcpStream,
        upstream: TcpStream,
    }

    async fn direction() -> Direction {
        let (client, proxy_in) = pair().await;
        let (proxy_out, upstream) = pair().await;
        Direction {
            client,
            proxy_in,
            proxy_out,
            upstream,
        }
    }

    /// A long burst outlasts the task's budget (tokio's cooperative
    /// scheduling): the relay must yield and go on, not spin in place (it
    /// did: its wait said "ready" while its read said "pending"). The
    /// relay runs on a thread and runtime of its own, so a relay that
    /// spins cannot stall the check.
    #[test]
    fn a_burst_longer_than_the_task_budget_is_relayed() {
        let runtime = || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
        };
        let ends = runtime();
        let Direction {
            mut client,
            proxy_in,
            proxy_out,
            mut upstream,
        } = ends.block_on(direction());
        let (proxy_in, proxy_out) = (proxy_in.into_std().unwrap(), proxy_out.into_std().unwrap());
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let relayed = runtime().block_on(async move {
                let mut proxy_in = TcpStream::from_std(proxy_in).unwrap();
                let mut proxy_out = TcpStream::from_std(proxy_out).unwrap();
                let (mut r, _) = proxy_in.split();
                let (_, mut w) = proxy_out.split();
                let (c1, c2, last, seen) =
                    (counter(), counter(), AtomicU64::new(0), AtomicU64::new(0));
                let ended = AtomicBool::new(false);
                pump(
                    &mut r,
                    &mut w,
                    &last,
                    Instant::now(),
                    [&c1, &c2],
                    &seen,
                    &ended,
                )
                .await
            });
            let _ = done.send(relayed.is_ok());
        });
        // Thousands of reads: far more than the 128 operations of a budget.
        const BURST: usize = 64 * 1024 * 1024;
        let ends = std::thread::spawn(move || {
            ends.block_on(async move {
                let sending = async {
                    client.write_all(&vec![7u8; BURST]).await.unwrap();
                    client.shutdown().await.unwrap();
                };
                let receiving = async {
                    let (mut got, mut chunk) = (0usize, vec![0u8; 256 * 1024]);
                    loop {
                        match upstream.read(&mut chunk).await.unwrap() {
                            0 => return got,
                            n => got += n,
                        }
                    }
                };
                tokio::join!(sending, receiving).1
            })
        });
        // A guard against a hang, not a measurement: the spinning relay
        // never finished at all.
        let relayed = finished
            .recv_timeout(Duration::from_secs(120))
            .expect("the relay passed the burst on and ended");
        assert!(relayed);
        assert_eq!(ends.join().unwrap(), BURST);
    }

    #[tokio::test]
    async fn connect_to_gives_a_connected_socket_with_no_delay_or_the_refusal() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (near, far) = tokio::join!(connect_to(addr), listener.accept());
        let (mut near, mut far) = (near.unwrap(), far.unwrap().0);
        assert_eq!(near.peer_addr().unwrap(), addr);
        assert!(near.nodelay().unwrap());
        near.write_all(b"x").await.unwrap();
        let mut byte = [0u8; 1];
        far.read_exact(&mut byte).await.unwrap();
        assert_eq!(&byte, b"x");
        // Nothing listens on the port any more: the refusal, not a socket.
        drop(listener);
        let refused = connect_to(addr).await.unwrap_err();
        assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
    }

    /// tokio has reported nothing about a socket registered after
    /// `connect` yet, and its own write would wait for that report: the
    /// relay's send goes out at once.
    #[tokio::test]
    async fn the_first_bytes_to_a_new_upstream_go_out_without_waiting_for_the_event_loop() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Up when `connect` returns (loopback), and sent to before the
        // event loop has turned: the accept comes after.
        let mut near = connect_to(addr).await.unwrap();
        let (_, mut w) = near.split();
        let mut direct = true;
        let sent = futures::FutureExt::now_or_never(send(&mut w, b"hello", &mut direct));
        assert!(matches!(sent, Some(Ok(()))), "the send waited: {sent:?}");
        assert!(
            direct,
            "a send the socket took whole keeps the next one direct"
        );
        let (mut far, _) = listener.accept().await.unwrap();
        let mut got = [0u8; 5];
        far.read_exact(&mut got).await.unwrap();
        assert_eq!(&got, b"hello");
    }

    #[tokio::test]
    async fn an_idle_direction_holds_no_buffer_and_a_burst_is_relayed_whole() {
        let Direction {
            mut client,
            mut proxy_in,
            mut proxy_out,
            mut upstream,
        } = direction().await;
        let (mut r, _) = proxy_in.split();
        let (_, mut w) = proxy_out.split();
        let (c1, c2, last, seen) = (counter(), counter(), AtomicU64::new(0), AtomicU64::new(0));
        let ended = AtomicBool::new(false);
        let pumping = pump(
            &mut r,
            &mut w,
            &last,
            Instant::now(),
            [&c1, &c2],
            &seen,
            &ended,
        );
        tokio::pin!(pumping);
        // More than one buffer's worth, so the burst takes several reads.
        let burst: Vec<u8> = (0..3 * BUFFER + 17).map(|i| i as u8).collect();
        let talk = async {
            // Before any data: nothing held.
            assert_eq!(LIVE_BUFFERS.get(), 0);
            client.write_all(b"hello").await.unwrap();
            let mut got = [0u8; 5];
            upstream.read_exact(&mut got).await.unwrap();
            assert_eq!(&got, b"hello");
            // Relayed, and quiet again: the buffer went back (the relay
            // yields only after its read found nothing more).
            assert_eq!(LIVE_BUFFERS.get(), 0);
            client.write_all(&burst).await.unwrap();
            let mut got = vec![0u8; burst.len()];
            upstream.read_exact(&mut got).await.unwrap();
            assert!(got == burst, "the burst arrived changed");
            assert_eq!(LIVE_BUFFERS.get(), 0);
        };
        tokio::select! {
            biased;
            r = &mut pumping => panic!("the relay ended before the client closed: {r:?}"),
            () = talk => {}
        }
        // The client's FIN ends this direction and is passed on.
        client.shutdown().await.unwrap();
        pumping.await.unwrap();
        let mut rest = Vec::new();
        upstream.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
        assert_eq!(LIVE_BUFFERS.get(), 0);
        let total = 5 + burst.len() as u64;
        assert_eq!(seen.load(Ordering::Relaxed), total);
        assert_eq!(c1.get(), total);
        assert_eq!(c2.get(), total);
    }
}
