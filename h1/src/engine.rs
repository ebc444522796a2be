//! The per-connection proxy loop.
//!
//! One [`Engine::serve`] call owns one client connection from its first
//! byte to its close, on the caller's task: no task, channel or timer is
//! spawned per request. The loop is
//!
//! read head → [`scan_h1`] → `httparse` (in place) → [`Router::decide`] →
//! local answer, or: write the upstream head (edits spliced in) → relay the
//! request body while watching for an early or 1xx response → relay the
//! response head and body → return the upstream connection to the
//! [`Pool`] → next request from whatever is left in the buffer.
//!
//! Buffers (client input, upstream input, both outputs) live as long as
//! the connection and are reused by every request on it.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tokio::time::{Instant, timeout};

use crate::body::{BodyDecoder, BodyError, BodyFraming, Emit};
use crate::connect::{ConnectError, connect_upstream};
use crate::head::{BodyLength, RequestHeadWriter};
use crate::observer::{Observer, Outcome, RequestLog, UpstreamError};
use crate::pool::Pool;
use crate::response::{
    HeadFields, ResponseFraming, head_fields, header_slots, parse_head, response_head_len,
};
use crate::retry::{Failed, Tries, Verdict};
use crate::router::{ConnInfo, Decision, Forward, Pacer, RequestHead, Respond, Router, Upstreams};
use crate::scan::{
    HeadLimits, MAX_HEADERS_CAP, MAX_RESPONSE_HEADER_BYTES, Refusal, body_limit, find_head_end,
    is_authority, scan_h1,
};
use crate::upstream::UpstreamConn;
use crate::upstream_http::UpstreamHttp;
use crate::wire::{
    checked_field, connection_options, field, reason, status_line, write_fields,
    write_fields_rewritten, write_u64,
};

// A child of the engine: it reads and writes the connection's buffers.
#[path = "buffering.rs"]
pub(crate) mod buffering;

/// Engine-wide settings; per-request overrides come from the router.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    pub limits: HeadLimits,
    /// From the start of [`Engine::serve`] to the complete first request
    /// head; the connection is closed without an answer when it runs out.
    pub header_read_timeout: Duration,
    /// From the end of one response to the complete head of the next
    /// request on a keep-alive connection (client idle timeout).
    pub keepalive_timeout: Duration,
    /// Largest request body, bytes (0: no limit); routes may only lower it.
    pub max_body_size: u64,
    pub connect_timeout: Duration,
    /// Longest wait for an upstream byte, or for the upstream to take
    /// request bytes; also bounds a client that stops sending its body.
    pub upstream_read_timeout: Duration,
    /// Longest wait for the client to take response bytes.
    pub client_write_timeout: Duration,
    /// Largest upstream response head, bytes (502 beyond).
    pub max_response_header_bytes: usize,
    /// Idle connections kept per upstream address.
    pub pool_max_idle_per_upstream: usize,
    /// Idle connections older than this are not reused.
    pub pool_idle_timeout: Duration,
    /// Bytes read from a socket at a time (buffers grow to about this).
    pub read_chunk: usize,
    /// An upgraded connection (WebSocket) with no byte either way for
    /// this long is closed (at most twice this long after the last byte).
    pub tunnel_idle_timeout: Duration,
    /// `Server` of the engine's own answers, and of relayed responses
    /// that carry none (`None`: not added).
    pub server: Option<Bytes>,
    /// Bodies of the engine's 502 and 504 answers (plain text).
    pub bad_gateway_body: Bytes,
    pub gateway_timeout_body: Bytes,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            limits: HeadLimits::default(),
            header_read_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            max_body_size: 100 * 1024 * 1024,
            connect_timeout: Duration::from_secs(5),
            upstream_read_timeout: Duration::from_secs(60),
            client_write_timeout: Duration::from_secs(60),
            max_response_header_bytes: MAX_RESPONSE_HEADER_BYTES,
            pool_max_idle_per_upstream: 64,
            pool_idle_timeout: Duration::from_secs(30),
            read_chunk: 16 * 1024,
            tunnel_idle_timeout: Duration::from_secs(3600),
            server: None,
            bad_gateway_body: Bytes::from_static(b"502 upstream failed\n"),
            gateway_timeout_body: Bytes::from_static(b"504 upstream timed out\n"),
        }
    }
}

/// A client connection the engine serves.
///
/// An idle keep-alive connection should cost almost nothing: no read
/// buffer, no response buffer. A stream that can say when it becomes
/// readable (a TCP socket) lets the engine give its buffers back while it
/// waits and take fresh ones when the next request arrives, with no extra
/// system call (the read that found nothing is the one that armed the
/// wait). Streams that cannot (TLS, test pipes) keep their buffers, as
/// before.
pub trait ClientStream: AsyncRead + AsyncWrite + Unpin {
    /// Whether [`ClientStream::poll_readable`] means anything.
    fn tells_readable(&self) -> bool {
        false
    }

    /// Ready once a read would find bytes (or the end of the stream).
    fn poll_readable(&mut self, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// Whether the stream must be shut down before it is dropped for its
    /// peer to see a clean end (TLS: the close_notify alert).
    fn ends_with_shutdown(&self) -> bool {
        true
    }

    /// Whether waiting on the stream costs nothing more than it already
    /// has; `false` for a socket not yet in the event loop
    /// ([`crate::ClientTcp`]), which a wait would put there.
    fn in_event_loop(&self) -> bool {
        true
    }
}

impl ClientStream for TcpStream {
    fn tells_readable(&self) -> bool {
        true
    }

    /// Closing the socket sends the same FIN a `shutdown` would, one
    /// system call later: a connection that ends (`Connection: close`, a
    /// new connection per request) saves one.
    fn ends_with_shutdown(&self) -> bool {
        false
    }

    fn poll_readable(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin + ?Sized> ClientStream for Box<T> {}

impl ClientStream for tokio::io::DuplexStream {}

/// Why [`Engine::serve`] returned. The client connection is finished in
/// every case (the engine handles keep-alive itself).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnEnd {
    /// The client closed between requests (or mid-request).
    ClientClosed,
    /// No next request within the keep-alive timeout.
    IdleTimeout,
    /// The first (or a partial) request head did not arrive in time.
    HeaderTimeout,
    /// Shutdown was signalled; the connection ended at a request boundary.
    Shutdown,
    /// The engine closed it: `Connection: close`, a refusal, an error.
    Closed,
    /// It switched protocols (101) and the tunnel has ended.
    Upgraded,
}

/// The HTTP/1.1 proxy engine. Share it (`Arc<Engine>`) between all
/// connections of a listener; it holds the router, the observer and the
/// upstream [`Pool`].
pub struct Engine<R, O = ()> {
    router: R,
    observer: O,
    config: EngineConfig,
    pool: Pool,
}

impl<R, O> std::fmt::Debug for Engine<R, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("config", &self.config)
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl<R: Router, O: Observer> Engine<R, O> {
    pub fn new(router: R, observer: O, mut config: EngineConfig) -> Self {
        config.limits.max_headers = config.limits.max_headers.min(MAX_HEADERS_CAP);
        config.read_chunk = config.read_chunk.max(1024);
        let pool = Pool::new(config.pool_max_idle_per_upstream, config.pool_idle_timeout);
        Engine {
            router,
            observer,
            config,
            pool,
        }
    }

    pub fn config(&self) -> &EngineConfig {
        &self.config
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    pub fn router(&self) -> &R {
        &self.router
    }

    pub fn observer(&self) -> &O {
        &self.observer
    }

    /// Serves one client connection until it closes, times out, fails, is
    /// upgraded, or `shutdown` turns `true` (then at the next request
    /// boundary; a request in flight finishes with `Connection: close`).
    ///
    /// Not an `async fn`: the connection's state is built here and the
    /// future holds it once, where an `async fn` would keep its arguments
    /// beside the state they were moved into for the connection's life.
    pub fn serve<S>(
        self: &Arc<Self>,
        client: S,
        conn: ConnInfo,
        shutdown: watch::Receiver<bool>,
    ) -> impl Future<Output = ConnEnd> + use<S, R, O>
    where
        S: ClientStream,
    {
        let mut c = Conn {
            engine: self.clone(),
            info: conn,
            client,
            shutdown,
            inbuf: Buf::default(),
            upbuf: Buf::default(),
            out: Vec::new(),
            up_out: Vec::new(),
            log: LogHead::default(),
            reads: Deadline::default(),
            client_writes: Deadline::default(),
        };
        async move { c.run().await }
    }
}

/// How long an answer may take before a client not yet in the event loop
/// is watched for a hang-up while it waits (`Conn::send_request`).
const HANGUP_WATCH_AFTER: Duration = Duration::from_millis(100);

/// The first read of a connection that waited without a buffer: most
/// request heads fit, and a larger one grows the buffer to the full
/// read size.
const IDLE_READ: usize = 2048;

/// Room for an upstream request head or a response head: most fit, a
/// larger one grows its buffer.
const HEAD_CAPACITY: usize = 1024;

/// A growable read buffer with a consumed prefix; its memory comes from,
/// and goes back to, the thread's spares ([`crate::spare`]).
#[derive(Debug, Default)]
struct Buf {
    data: Vec<u8>,
    start: usize,
}

impl Drop for Buf {
    fn drop(&mut self) {
        crate::spare::give(std::mem::take(&mut self.data));
    }
}

impl Buf {
    fn filled(&self) -> &[u8] {
        &self.data[self.start..]
    }

    fn is_empty(&self) -> bool {
        self.start == self.data.len()
    }

    fn consume(&mut self, n: usize) {
        self.start += n;
        debug_assert!(self.start <= self.data.len());
        if self.start >= self.data.len() {
            self.data.clear();
            self.start = 0;
        }
    }

    fn clear(&mut self) {
        self.data.clear();
        self.start = 0;
    }

    /// Gives the memory back (an idle connection's buffer).
    fn release(&mut self) {
        *self = Buf::default();
    }

    fn holds_memory(&self) -> bool {
        self.data.capacity() > 0
    }

    /// One read attempt with the buffer already held: `None` when
    /// nothing is there yet (the attempt armed the stream's readiness).
    async fn try_read_from<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        chunk: usize,
    ) -> Option<io::Result<usize>> {
        let mut read = std::pin::pin!(self.read_from(r, chunk));
        std::future::poll_fn(|cx| match read.as_mut().poll(cx) {
            Poll::Pending => Poll::Ready(None),
            Poll::Ready(v) => Poll::Ready(Some(v)),
        })
        .await
    }

    async fn read_from<R: AsyncRead + Unpin>(
        &mut self,
        r: &mut R,
        chunk: usize,
    ) -> io::Result<usize> {
        if self.data.capacity() == 0 {
            self.data = crate::spare::take(chunk);
        } else if self.data.capacity() - self.data.len() < chunk / 2 {
            if self.start > 0 {
                self.data.drain(..self.start);
                self.start = 0;
            }
            self.data.reserve(chunk);
        }
        r.read_buf(&mut self.data).await
    }
}

/// The current request's method, path and host, copied for the observer
/// (the head's bytes leave the buffer before the request ends): one
/// string, a head buffer from the thread's spares while the connection is
/// busy, given back when it goes idle (three strings were three
/// allocations per request, an idle connection keeping none).
#[derive(Debug, Default)]
struct LogHead {
    /// The method, the path, then the host.
    text: String,
    method_end: usize,
    path_end: usize,
    has_host: bool,
}

impl LogHead {
    fn set(&mut self, method: &str, path: &str, host: Option<&str>) {
        if self.text.capacity() == 0 {
            // Empty, so no byte for the check to look at.
            self.text = String::from_utf8(crate::spare::take(HEAD_CAPACITY)).unwrap_or_default();
        }
        self.text.clear();
        self.text.push_str(method);
        self.method_end = self.text.len();
        self.text.push_str(path);
        self.path_end = self.text.len();
        self.has_host = host.is_some();
        self.text.push_str(host.unwrap_or(""));
    }

    fn clear(&mut self) {
        self.text.clear();
        self.method_end = 0;
        self.path_end = 0;
        self.has_host = false;
    }

    fn method(&self) -> &str {
        self.text.get(..self.method_end).unwrap_or_default()
    }

    fn path(&self) -> &str {
        self.text
            .get(self.method_end..self.path_end)
            .unwrap_or_default()
    }

    fn host(&self) -> Option<&str> {
        self.has_host
            .then(|| self.text.get(self.path_end..).unwrap_or_default())
    }

    /// Gives the memory back (an idle or closed connection's).
    fn release(&mut self) {
        crate::spare::give(std::mem::take(self).text.into_bytes());
    }
}

/// Per-request accounting for the observer.
#[derive(Debug)]
struct Stats {
    start: Instant,
    /// When the request ended, once known: read once and shared by the
    /// durations, the pool's idle clock and the next keep-alive deadline.
    end: std::cell::Cell<Option<Instant>>,
    bytes_in: u64,
    bytes_out: u64,
    status: u16,
    upstream: Option<SocketAddr>,
    upstream_start: Option<Instant>,
    upstream_time: Option<Duration>,
    ttfb: Option<Duration>,
    /// When the final response head was complete: the request's end as
    /// well when its whole answer came with the head and went to the
    /// client without a wait (one clock read fewer per request).
    answered: Option<Instant>,
    /// Some write to the client had to wait.
    waited: bool,
    reused: bool,
    retried: bool,
    client_abort: bool,
}

impl Stats {
    /// The end of the request: the time already read for it, or now.
    fn ended(&self) -> Instant {
        self.end.get().unwrap_or_else(|| {
            let now = Instant::now();
            self.end.set(Some(now));
            now
        })
    }

    /// `start` until the next request's first byte moves it.
    fn new(start: Instant) -> Self {
        Stats {
            start,
            end: std::cell::Cell::new(None),
            bytes_in: 0,
            bytes_out: 0,
            status: 0,
            upstream: None,
            upstream_start: None,
            upstream_time: None,
            ttfb: None,
            answered: None,
            waited: false,
            reused: false,
            retried: false,
            client_abort: false,
        }
    }
}

/// What the head and the router decided.
enum Plan<U> {
    /// Small: the route's [`Forward`] is in its own box, from the router.
    Forward(ForwardPlan<U>),
    Local {
        respond: Respond,
        head_request: bool,
        /// The request has a body the engine did not read.
        unread_body: bool,
        client_keepalive: bool,
    },
    Refuse(Refusal),
}

struct ForwardPlan<U> {
    fwd: Box<Forward<U>>,
    body: BodyFraming,
    head_request: bool,
    /// Safe to send again on a fresh connection: idempotent, no body.
    retryable: bool,
    /// The method is idempotent (RFC 9110 §9.2.2).
    idempotent: bool,
    client_keepalive: bool,
    client_http10: bool,
    upgrade: bool,
    /// A chunked body to an HTTP/1.0 backend: sent only held whole.
    length_required: bool,
}

/// Why waiting for a request head ended without one.
enum HeadWait {
    /// EOF; `partial` if some bytes of a head had arrived.
    Closed {
        partial: bool,
    },
    Timeout {
        partial: bool,
    },
    Shutdown,
    Refused(Refusal),
    /// Nothing of the next head yet, the buffers given back: the wait
    /// goes on in [`Conn::idle_wait`], outside the boxed exchange.
    Idle,
}

/// How one exchange ended, for [`Conn::run`].
enum Step {
    /// Went idle before the next head began.
    Idle,
    KeepAlive {
        ended: Instant,
    },
    End(ConnEnd),
}

/// How one request ended, for the loop.
enum Next {
    KeepAlive,
    Close(ConnEnd),
}

/// An upstream failure before the response head was complete.
struct UpErr {
    kind: UpstreamError,
    /// Some response byte had arrived.
    responded: bool,
}

/// What the request-sending phase produced.
enum Sent {
    /// A final response head of this length is at the start of `upbuf`.
    Response {
        head_len: usize,
        status: u16,
    },
    Upstream(UpErr),
    /// The client went away or sent a malformed body.
    Client(Outcome),
    /// The client's body went over the limit.
    TooLarge,
}

struct Conn<S, R, O> {
    engine: Arc<Engine<R, O>>,
    info: ConnInfo,
    client: S,
    shutdown: watch::Receiver<bool>,
    inbuf: Buf,
    upbuf: Buf,
    out: Vec<u8>,
    up_out: Vec<u8>,
    log: LogHead,
    /// The header and keep-alive timeouts, and the upstream read timeout
    /// (waits for any upstream byte): one timer, as a connection waits
    /// for one of them at a time, so an idle connection keeps one.
    reads: Deadline,
    /// The client write timeout; made only when a write has to wait.
    client_writes: Deadline,
}

/// One reusable timer for one kind of wait on a connection, instead of a
/// `tokio::time::timeout` per wait: each of those put an entry into the
/// runtime's timer wheel and took it out again, several times per request.
///
/// The timer is moved lazily. A wait whose deadline is at or after the
/// armed one leaves the timer alone; when it fires before the current
/// wait's deadline it is re-armed for it. Deadlines of one kind only grow
/// on a connection (now + the same timeout), so under traffic the wheel
/// is touched about once per timeout period, not per request. A wait with
/// an earlier deadline moves the timer at once: the read timer serves the
/// keep-alive wait and the upstream wait, which with the defaults (60 s
/// each) never moves it earlier; a route whose upstream read timeout is
/// shorter than the keep-alive timeout moves it once per request.
#[derive(Default)]
struct Deadline {
    /// Made at the first wait that blocks.
    sleep: Option<std::pin::Pin<Box<tokio::time::Sleep>>>,
}

/// A wait ran past its deadline.
struct Elapsed;

impl Deadline {
    /// `fut`'s output, unless `at` comes first.
    async fn run<F: Future>(&mut self, at: Instant, fut: F) -> Result<F::Output, Elapsed> {
        self.run_until(|| at, std::pin::pin!(fut)).await
    }

    /// [`Self::run`] with the deadline made by `at` only if `fut` has to
    /// wait: a write the socket takes at once, or a read that finds its
    /// bytes, reads no clock for a deadline it never needs.
    ///
    /// `fut` comes pinned by the caller: moved in, it would be held twice
    /// in this future (as the argument and as the pinned local), and the
    /// per-request future that awaits this is allocated per request.
    async fn run_until<F: Future>(
        &mut self,
        at: impl FnOnce() -> Instant,
        mut fut: std::pin::Pin<&mut F>,
    ) -> Result<F::Output, Elapsed> {
        let mut make = Some(at);
        let mut armed: Option<Instant> = None;
        std::future::poll_fn(|cx| {
            if let std::task::Poll::Ready(v) = fut.as_mut().poll(cx) {
                return std::task::Poll::Ready(Ok(v));
            }
            // Only a wait that blocks needs the timer: a write the socket
            // takes at once, the usual case, makes and moves none.
            let first = armed.is_none();
            let at = *armed.get_or_insert_with(|| make.take().map_or_else(Instant::now, |f| f()));
            let sleep = match &mut self.sleep {
                Some(sleep) => {
                    if first && at < sleep.deadline() {
                        sleep.as_mut().reset(at);
                    }
                    sleep
                }
                None => self.sleep.insert(Box::pin(tokio::time::sleep_until(at))),
            };
            loop {
                std::task::ready!(sleep.as_mut().poll(cx));
                if sleep.deadline() >= at {
                    return std::task::Poll::Ready(Err(Elapsed));
                }
                // Fired for an earlier wait: on to this one's deadline.
                sleep.as_mut().reset(at);
            }
        })
        .await
    }
}

impl std::fmt::Debug for Deadline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Deadline")
            .field("at", &self.sleep.as_ref().map(|s| s.deadline()))
            .finish()
    }
}

const IDEMPOTENT: [&str; 6] = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];

/// A closed connection's head buffers go to the thread's spares, as its
/// read buffers do ([`Buf`]'s drop).
impl<S, R, O> Drop for Conn<S, R, O> {
    fn drop(&mut self) {
        crate::spare::give(std::mem::take(&mut self.out));
        crate::spare::give(std::mem::take(&mut self.up_out));
        self.log.release();
    }
}

impl<S, R, O> Conn<S, R, O>
where
    S: ClientStream,
    R: Router,
    O: Observer,
{
    fn cfg(&self) -> &EngineConfig {
        &self.engine.config
    }

    fn shutting_down(&self) -> bool {
        *self.shutdown.borrow()
    }

    async fn run(&mut self) -> ConnEnd {
        let mut last_end = Instant::now();
        let mut deadline = last_end + self.cfg().header_read_timeout;
        let mut first = true;
        loop {
            // Waiting for a head is all an idle connection does, and what
            // its task is sized for: reading the head, routing and
            // forwarding are boxed below, once per request, so a quiet
            // keep-alive connection does not carry their state. After an
            // answer, the wait is also the look for the next request: a
            // client that sent it (or pipelined it) is read at once, and one
            // that has not gives its buffers back before the wait, without
            // an exchange boxed for a read that finds nothing.
            if self.inbuf.is_empty()
                && self.client.tells_readable()
                && let Err(wait) = self.idle_wait(deadline, last_end, first).await
            {
                return self.head_wait_end(&wait, first, &mut Stats::new(last_end));
            }
            match Box::pin(self.exchange(last_end, deadline, first)).await {
                Step::Idle => {}
                Step::KeepAlive { ended } => {
                    first = false;
                    last_end = ended;
                    deadline = last_end + self.cfg().keepalive_timeout;
                }
                Step::End(end) => return end,
            }
        }
    }

    /// Waits until the client sends a head (the buffers the connection
    /// holds go back as soon as it has to wait), the
    /// deadline passes, the client closes, or shutdown ends a wait between
    /// requests: at once for a connection idle longer than
    /// [`IDLE_CLOSE_GRACE`], at the end of the grace otherwise (a request
    /// sent in it is served, with `Connection: close`).
    async fn idle_wait(
        &mut self,
        deadline: Instant,
        idle_since: Instant,
        first: bool,
    ) -> Result<(), HeadWait> {
        enum Woke<T> {
            Wait(T),
            Shutdown,
        }
        let Conn {
            client,
            shutdown,
            reads,
            inbuf,
            upbuf,
            out,
            up_out,
            log,
            ..
        } = self;
        // The buffers go back once the client is found to have sent
        // nothing yet. Pinned here: moved into the deadline's future, the
        // closure's captures would be held twice in the connection's task.
        let woke = {
            let mut held = inbuf.holds_memory();
            let poll_readable = std::pin::pin!(std::future::poll_fn(|cx| {
                let r = client.poll_readable(cx);
                if held && r.is_pending() {
                    held = false;
                    release_buffers(inbuf, upbuf, out, up_out, log);
                }
                r
            }));
            let readable = reads.run_until(|| deadline, poll_readable);
            if first {
                Woke::Wait(readable.await)
            } else {
                tokio::select! {
                    biased;
                    r = readable => Woke::Wait(r),
                    () = shutdown_signal(shutdown) => Woke::Shutdown,
                }
            }
        };
        let ready = match woke {
            Woke::Wait(r) => r,
            Woke::Shutdown => {
                let grace = idle_since + IDLE_CLOSE_GRACE;
                let r = reads
                    .run(
                        deadline.min(grace),
                        std::future::poll_fn(|cx| client.poll_readable(cx)),
                    )
                    .await;
                if r.is_err() && grace <= deadline {
                    return Err(HeadWait::Shutdown);
                }
                r
            }
        };
        match ready {
            Err(_) => Err(HeadWait::Timeout { partial: false }),
            Ok(Err(_)) => Err(HeadWait::Closed { partial: false }),
            Ok(Ok(())) => Ok(()),
        }
    }

    /// One head read and answered; boxed by [`Conn::run`].
    async fn exchange(&mut self, last_end: Instant, deadline: Instant, first: bool) -> Step {
        let mut stats = Stats::new(last_end);
        let head_len = match self.read_head(deadline, first, &mut stats).await {
            Ok(n) => n,
            Err(HeadWait::Idle) => return Step::Idle,
            Err(HeadWait::Refused(r)) => {
                self.refuse(r, &mut stats).await;
                return Step::End(ConnEnd::Closed);
            }
            Err(wait) => return Step::End(self.head_wait_end(&wait, first, &mut stats)),
        };
        stats.bytes_in += head_len as u64;
        // Boxed apart: moved into its box once, where inline it would be
        // moved with the exchange (twice, 5 KiB each time, per request).
        let next = Box::pin(self.request(head_len, &mut stats)).await;
        self.up_out.clear();
        self.upbuf.clear();
        match next {
            Next::KeepAlive => {
                self.log.clear();
                Step::KeepAlive {
                    ended: stats.end.get().unwrap_or_else(Instant::now),
                }
            }
            Next::Close(end) => {
                if self.client.ends_with_shutdown() {
                    let _ = timeout(self.cfg().client_write_timeout, self.client.shutdown()).await;
                }
                Step::End(end)
            }
        }
    }

    /// How the connection ends when its wait for a head did (a refused
    /// head is answered first, by [`Conn::exchange`]).
    fn head_wait_end(&self, wait: &HeadWait, first: bool, stats: &mut Stats) -> ConnEnd {
        match *wait {
            HeadWait::Closed { partial } => {
                if partial {
                    stats.client_abort = true;
                    self.observe(stats, Outcome::ClientAbort, None);
                }
                ConnEnd::ClientClosed
            }
            HeadWait::Timeout { partial } if partial || first => {
                self.observe(stats, Outcome::Refused(Refusal::HeaderTimeout), None);
                ConnEnd::HeaderTimeout
            }
            HeadWait::Timeout { .. } => ConnEnd::IdleTimeout,
            HeadWait::Shutdown | HeadWait::Idle => ConnEnd::Shutdown,
            HeadWait::Refused(_) => ConnEnd::Closed,
        }
    }

    /// One request whose head is the first `head_len` bytes of `inbuf`:
    /// routed, answered or forwarded.
    async fn request(&mut self, head_len: usize, stats: &mut Stats) -> Next {
        // After an idle wait both heads start empty: one allocation each
        // at the size a head usually takes, not a doubling from nothing.
        for head in [&mut self.up_out, &mut self.out] {
            if head.capacity() == 0 {
                *head = crate::spare::take(HEAD_CAPACITY);
            } else {
                head.reserve(HEAD_CAPACITY);
            }
        }
        let plan = {
            let Conn {
                engine,
                info,
                inbuf,
                up_out,
                log,
                ..
            } = self;
            prepare(
                &inbuf.filled()[..head_len],
                &engine.config,
                &engine.router,
                info,
                up_out,
                log,
            )
            .await
        };
        self.inbuf.consume(head_len);
        match plan {
            Plan::Refuse(r) => {
                self.refuse(r, stats).await;
                Next::Close(ConnEnd::Closed)
            }
            Plan::Local {
                respond,
                head_request,
                unread_body,
                client_keepalive,
            } => {
                let keep = client_keepalive && !unread_body && !respond.close;
                let next = self.local(&respond, head_request, keep, stats).await;
                self.observe(stats, Outcome::Local(respond.reason), respond.tag.as_ref());
                next
            }
            // The plan (and what the router put in it, e.g. a
            // tenant's slot) lives until the request has ended.
            Plan::Forward(mut plan) => self.forward(&mut plan, stats).await,
        }
    }

    fn observe(&self, stats: &Stats, outcome: Outcome, tag: Option<&std::sync::Arc<str>>) {
        self.engine.observer.on_request(&RequestLog {
            method: self.log.method(),
            path: self.log.path(),
            host: self.log.host(),
            status: stats.status,
            bytes_in: stats.bytes_in,
            bytes_out: stats.bytes_out,
            upstream: stats.upstream,
            upstream_time: stats.upstream_time,
            upstream_ttfb: stats.ttfb,
            total_time: stats.ended().duration_since(stats.start),
            outcome,
            client_abort: stats.client_abort,
            reused: stats.reused,
            retried: stats.retried,
            tag,
            conn: &self.info,
        });
    }

    /// Reads until `inbuf` starts with a complete head; returns its length.
    ///
    /// Shutdown ends the wait between requests, not before the first: the
    /// client connected to be served (a replica handing its traffic over
    /// still accepts until the routers have moved), and the header-read
    /// deadline bounds that wait.
    async fn read_head(
        &mut self,
        deadline: Instant,
        first: bool,
        stats: &mut Stats,
    ) -> Result<usize, HeadWait> {
        let crate::scan::HeadLimits {
            max_request_line,
            max_header_bytes,
            ..
        } = self.engine.config.limits;
        let chunk = self.engine.config.read_chunk;
        let mut scanned = 0usize;
        loop {
            // RFC 9112 §2.2: ignore CRLFs before a request line.
            let mut skip = 0;
            let buf = self.inbuf.filled();
            while buf[skip..].starts_with(b"\r\n") {
                skip += 2;
            }
            if skip > 0 {
                stats.bytes_in += skip as u64;
                self.inbuf.consume(skip);
                scanned = 0;
            }
            let buf = self.inbuf.filled();
            if let Some(end) = find_head_end(buf, scanned) {
                if stats.bytes_in == 0 {
                    stats.start = Instant::now();
                }
                return Ok(end);
            }
            scanned = buf.len();
            if !method_so_far_is_token(buf) {
                return Err(HeadWait::Refused(Refusal::BadRequestLine));
            }
            if buf.len() > max_request_line && crate::scan::find_byte(buf, b'\n').is_none() {
                return Err(HeadWait::Refused(Refusal::RequestLineTooLong));
            }
            if buf.len() > max_header_bytes {
                return Err(HeadWait::Refused(Refusal::HeaderTooLarge));
            }
            let partial = !buf.is_empty();
            if partial && stats.bytes_in == 0 {
                stats.start = Instant::now();
            }
            // Until the first byte, the end of the previous response.
            let idle_since = stats.start;
            // A stream that tells readiness tries its first read too: the
            // readiness it told may be a guess (a client socket not yet in
            // the event loop, crate::client_tcp), and a connection that
            // sent nothing yet must wait holding no buffer.
            if !partial && (self.inbuf.holds_memory() || self.client.tells_readable()) {
                // A client that pipelines, or answers at once, finds the
                // buffer still there; otherwise the buffers go back. A
                // stream that tells readiness waits on it in
                // `Conn::idle_wait`, outside this exchange; one that cannot
                // waits below in a small read, and a larger head grows it
                // as usual.
                // With the buffer as it is: growing it to a full read
                // chunk for a look that mostly finds nothing was a
                // reallocation per keep-alive request.
                let look = chunk.min(IDLE_READ);
                match self.inbuf.try_read_from(&mut self.client, look).await {
                    Some(Ok(0)) | Some(Err(_)) => return Err(HeadWait::Closed { partial }),
                    Some(Ok(_)) => continue,
                    None => {
                        self.release_idle();
                        if self.client.tells_readable() {
                            return Err(HeadWait::Idle);
                        }
                    }
                }
            }
            let Conn {
                client,
                inbuf,
                shutdown,
                reads,
                ..
            } = self;
            // An idle connection's first read takes a small buffer.
            let chunk = if inbuf.holds_memory() {
                chunk
            } else {
                IDLE_READ
            };
            let read = reads.run(deadline, inbuf.read_from(client, chunk));
            let n = if partial {
                read.await
            } else {
                tokio::select! {
                    biased;
                    r = read => r,
                    () = drained(shutdown, idle_since), if !first => return Err(HeadWait::Shutdown),
                }
            };
            match n {
                Err(_) => return Err(HeadWait::Timeout { partial }),
                Ok(Ok(0)) | Ok(Err(_)) => return Err(HeadWait::Closed { partial }),
                Ok(Ok(_)) => {}
            }
        }
    }

    /// An idle keep-alive connection gives back every buffer it holds for
    /// requests; the next request takes fresh ones.
    fn release_idle(&mut self) {
        release_buffers(
            &mut self.inbuf,
            &mut self.upbuf,
            &mut self.out,
            &mut self.up_out,
            &mut self.log,
        );
    }

    /// [`Self::flush`] at `pacer`'s pace: the first `unpaced` bytes at
    /// once, then the pieces it permits, with a timer between them; each
    /// write bounded by the client write timeout as any other.
    async fn flush_paced(
        &mut self,
        pacer: &mut dyn Pacer,
        unpaced: &mut usize,
        stats: &mut Stats,
    ) -> io::Result<()> {
        let to = self.engine.config.client_write_timeout;
        let mut at = 0;
        let mut r = Ok(());
        while at < self.out.len() {
            let ready = self.out.len() - at;
            let n = if *unpaced > 0 {
                let n = ready.min(*unpaced);
                *unpaced -= n;
                n
            } else {
                match pacer.permit(ready, std::time::Instant::now()) {
                    Ok(n) => n.clamp(1, ready),
                    Err(until) => {
                        tokio::time::sleep_until(Instant::from_std(until)).await;
                        continue;
                    }
                }
            };
            let Conn {
                client,
                out,
                client_writes,
                ..
            } = self;
            let piece = &out[at..at + n];
            stats.waited = true;
            let write = std::pin::pin!(async {
                client.write_all(piece).await?;
                client.flush().await
            });
            r = client_writes
                .run_until(|| Instant::now() + to, write)
                .await
                .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
            if r.is_err() {
                break;
            }
            at += n;
            stats.bytes_out += n as u64;
        }
        self.out.clear();
        if r.is_err() {
            stats.client_abort = true;
        }
        r
    }

    /// Writes `out` to the client and clears it.
    async fn flush(&mut self, stats: &mut Stats) -> io::Result<()> {
        if self.out.is_empty() {
            return Ok(());
        }
        let to = self.engine.config.client_write_timeout;
        let Conn {
            client,
            out,
            client_writes,
            ..
        } = self;
        let waited = &mut stats.waited;
        let write = std::pin::pin!(async {
            client.write_all(out).await?;
            client.flush().await
        });
        let r = client_writes
            .run_until(
                || {
                    *waited = true;
                    Instant::now() + to
                },
                write,
            )
            .await
            .unwrap_or_else(|_| Err(io::ErrorKind::TimedOut.into()));
        stats.bytes_out += self.out.len() as u64;
        self.out.clear();
        if r.is_err() {
            stats.client_abort = true;
        }
        r
    }

    async fn refuse(&mut self, r: Refusal, stats: &mut Stats) {
        self.out.clear();
        write_local_head(
            &mut self.out,
            r.status(),
            &PLAIN_TEXT,
            r.body().len() as u64,
            false,
            self.engine.config.server.as_deref(),
        );
        self.out.extend_from_slice(r.body().as_bytes());
        stats.status = r.status();
        let _ = self.flush(stats).await;
        self.observe(stats, Outcome::Refused(r), None);
    }

    async fn local(
        &mut self,
        respond: &Respond,
        head_request: bool,
        keep: bool,
        stats: &mut Stats,
    ) -> Next {
        let keep = keep && !self.shutting_down();
        self.out.clear();
        write_local_head(
            &mut self.out,
            respond.status,
            &respond.headers,
            respond.body.len() as u64,
            keep,
            self.engine.config.server.as_deref(),
        );
        if !head_request {
            self.out.extend_from_slice(&respond.body);
        }
        stats.status = respond.status;
        match self.flush(stats).await {
            Ok(()) if keep => Next::KeepAlive,
            Ok(()) => Next::Close(ConnEnd::Closed),
            Err(_) => Next::Close(ConnEnd::ClientClosed),
        }
    }

    /// [`Self::gateway_error`], or its replacement when the router's
    /// [`Upstreams::replaces`] its status.
    async fn upstream_failed(
        &mut self,
        plan: &mut ForwardPlan<R::Upstreams>,
        e: UpstreamError,
        keep: bool,
        stats: &mut Stats,
    ) -> Next {
        let mut status = gateway_status(e);
        // A retry policy may answer connection errors otherwise (the
        // Gateway API's: 503).
        let own = plan.fwd.retry.as_ref();
        let own = own.and_then(|p| p.error_status(e.into()));
        if let Some(own) = own {
            status = own;
        }
        if !plan.fwd.upstreams.replaces(status) {
            let fields = plan.fwd.upstreams.local_fields().to_vec();
            if own.is_some() {
                let mut respond = Respond::new(status, "", RETRIES_FAILED);
                respond.headers.extend_from_slice(&PLAIN_TEXT);
                respond.headers.extend_from_slice(&fields);
                return self.local(&respond, false, keep, stats).await;
            }
            return Box::pin(self.gateway_error(e, keep, &fields, stats)).await;
        }
        let respond = plan.fwd.upstreams.replacement(status).await;
        let keep = keep && !respond.close;
        self.local(&respond, plan.head_request, keep, stats).await
    }

    /// A 502/504 for an upstream failure before any response byte was
    /// relayed, with the router's `fields` ([`Upstreams::local_fields`]).
    async fn gateway_error(
        &mut self,
        e: UpstreamError,
        keep: bool,
        fields: &[(Bytes, Bytes)],
        stats: &mut Stats,
    ) -> Next {
        let status = gateway_status(e);
        let config = &self.engine.config;
        let body = if status == 504 {
            config.gateway_timeout_body.clone()
        } else {
            config.bad_gateway_body.clone()
        };
        let mut respond = Respond::new(status, "", body);
        respond.headers.extend_from_slice(&PLAIN_TEXT);
        respond.headers.extend_from_slice(fields);
        self.local(&respond, false, keep, stats).await
    }

    /// An upstream connection: a pooled one to the picked address when
    /// there is one, else a fresh connect, moving on to the next address
    /// the router's [`Upstreams`] gives while connects fail. `retry` is an
    /// address whose pooled connection just failed: connected to afresh
    /// first.
    async fn connect(
        &self,
        plan: &mut ForwardPlan<R::Upstreams>,
        mut retry: Option<SocketAddr>,
        attempts: &mut u32,
        stats: &mut Stats,
    ) -> Result<(UpstreamConn, SocketAddr, bool), UpstreamError> {
        let to = plan
            .fwd
            .timeouts
            .connect
            .unwrap_or(self.engine.config.connect_timeout);
        let transport = plan.fwd.upstreams.transport();
        let class = transport.as_ref().map_or(crate::pool::PLAIN, |t| t.class());
        let mut err = UpstreamError::Connect;
        loop {
            let addr = match retry.take() {
                Some(addr) => addr,
                None => {
                    let Some(addr) = plan.fwd.upstreams.next(*attempts) else {
                        return Err(err);
                    };
                    *attempts += 1;
                    let now = stats.upstream_start.unwrap_or_else(Instant::now);
                    if let Some(s) = self.engine.pool.take_at(addr, class, now) {
                        return Ok((s, addr, true));
                    }
                    addr
                }
            };
            stats.upstream = Some(addr);
            let upstreams = &mut plan.fwd.upstreams;
            // Boxed, as every path a request rarely takes: the request's
            // future is allocated per request, sized for its largest path.
            match Box::pin(connect_upstream(addr, transport.as_deref(), to, || {
                upstreams.connected(addr)
            }))
            .await
            {
                Ok(conn) => return Ok((conn, addr, false)),
                Err(e) if e.handshake() => {
                    tracing::debug!(%addr, error = %e, "securing the upstream connection failed");
                    plan.fwd.upstreams.secure_failed(addr);
                    err = gateway_error_of(&e);
                }
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "upstream connect failed");
                    plan.fwd.upstreams.failed(addr);
                    err = gateway_error_of(&e);
                }
            }
        }
    }

    async fn forward(&mut self, plan: &mut ForwardPlan<R::Upstreams>, stats: &mut Stats) -> Next {
        let limit = body_limit(self.engine.config.max_body_size, plan.fwd.max_body_size);
        if let BodyFraming::Length(n) = plan.body
            && limit != 0
            && n > limit
        {
            self.refuse(Refusal::BodyTooLarge, stats).await;
            return Next::Close(ConnEnd::Closed);
        }
        let read_to = plan
            .fwd
            .timeouts
            .read
            .unwrap_or(self.engine.config.upstream_read_timeout);
        let mut decoder = BodyDecoder::new(plan.body, Emit::Same, limit);
        // Body bytes already buffered behind the head go out with it; a
        // framing error among them is refused before any upstream sees a
        // byte of the request.
        if !decoder.is_done() {
            match decoder.feed(self.inbuf.filled(), &mut self.up_out) {
                Ok(n) => {
                    stats.bytes_in += n as u64;
                    self.inbuf.consume(n);
                }
                Err(BodyError::TooLarge) => {
                    self.refuse(Refusal::BodyTooLarge, stats).await;
                    return Next::Close(ConnEnd::Closed);
                }
                Err(BodyError::BadChunk(_)) => {
                    self.refuse(Refusal::BadChunkedBody, stats).await;
                    return Next::Close(ConnEnd::Closed);
                }
            }
        }
        // `proxy-request-buffering`: the body is read before any backend
        // is contacted (crate::engine::buffering).
        let held = plan.fwd.upstreams.buffering(plan.body);
        if held.request > 0 && !decoder.is_done() {
            match Box::pin(self.hold_request_body(&mut decoder, held.request, read_to, stats)).await
            {
                buffering::Held::Ready => {}
                buffering::Held::Refused(r) => {
                    self.refuse(r, stats).await;
                    return Next::Close(ConnEnd::Closed);
                }
                buffering::Held::ClientGone => {
                    self.observe(stats, Outcome::ClientAbort, plan.fwd.tag.as_ref());
                    return Next::Close(ConnEnd::ClientClosed);
                }
            }
        }
        if held.request > 0 && decoder.is_done() {
            // Held whole, also when it came with its head: with its length.
            buffering::dechunk(&mut self.up_out);
        }
        if plan.length_required
            && !buffering::with_length(&mut self.up_out, held.request > 0 && decoder.is_done())
        {
            let mut respond = Respond::new(411, "length_required", LENGTH_REQUIRED);
            respond.tag = plan.fwd.tag.clone();
            let next = self.local(&respond, plan.head_request, false, stats).await;
            self.observe(stats, Outcome::Local(respond.reason), plan.fwd.tag.as_ref());
            return next;
        }
        let up_start = Instant::now();
        stats.upstream_start = Some(up_start);
        let mut attempts = 0u32;
        let mut retry = None;
        // The route's retry policy, when this request may be sent again:
        // its head and whole body are in `up_out` (nothing left to read
        // from the client), and it is no upgrade.
        let mut tries = match &plan.fwd.retry {
            Some(p) if !plan.upgrade && p.may_resend(plan.idempotent, decoder.is_done()) => {
                plan.retryable = true;
                Some(Tries::new(up_start))
            }
            _ => None,
        };
        // A policy retrying connection errors counts every try: then no
        // try goes uncounted as a stale pooled connection's.
        let retry_stale = plan.retryable
            && !(tries.is_some() && plan.fwd.retry.as_ref().is_some_and(|p| p.on_error));
        let class = plan
            .fwd
            .upstreams
            .transport()
            .map_or(crate::pool::PLAIN, |t| t.class());
        let (up, addr, sent) = loop {
            let (mut up, addr, reused) = match self.connect(plan, retry, &mut attempts, stats).await
            {
                Ok(c) => c,
                Err(e) => {
                    let e = match self.after_try(plan, &mut tries, e.into()).await {
                        Some(Verdict::Retry(_)) => {
                            attempts = 0;
                            continue;
                        }
                        Some(Verdict::Expired) => UpstreamError::ReadTimeout,
                        _ => e,
                    };
                    // No body byte was read: the connection stays usable
                    // unless there is a body still to come.
                    let keep = plan.client_keepalive && plan.body == BodyFraming::None;
                    let next = Box::pin(self.upstream_failed(plan, e, keep, stats)).await;
                    self.observe(stats, Outcome::Upstream(e), plan.fwd.tag.as_ref());
                    return next;
                }
            };
            stats.upstream = Some(addr);
            stats.reused |= reused;
            let try_to = match (&plan.fwd.retry, &tries) {
                (Some(p), Some(t)) => p.try_timeout(t, read_to, Instant::now()),
                _ => read_to,
            };
            // A pooled connection's first try reads no clock for its
            // deadline: the request's start upstream was just read.
            let since =
                (reused && attempts == 1 && tries.as_ref().is_none_or(|t| t.retried() == 0))
                    .then_some(up_start);
            let sent = self
                .send_request(&mut up, &mut decoder, plan, (try_to, since), stats)
                .await;
            if let Sent::Upstream(UpErr {
                responded: false, ..
            }) = sent
                && reused
                && retry_stale
                && !stats.retried
            {
                tracing::debug!(%addr, "reused upstream connection failed; retrying once");
                stats.retried = true;
                retry = Some(addr);
                self.upbuf.clear();
                continue;
            }
            let failed = match &sent {
                _ if tries.is_none() => None,
                Sent::Response { status, .. } => Some(Failed::Status(*status)),
                Sent::Upstream(e) => Some(Failed::from(e.kind)),
                _ => None,
            };
            if let Some(failed) = failed {
                match self.after_try(plan, &mut tries, failed).await {
                    Some(Verdict::Retry(_)) => {
                        self.discard_answer(up, (addr, class), &sent, plan.head_request);
                        attempts = 0;
                        retry = None;
                        continue;
                    }
                    Some(Verdict::Expired) => {
                        self.upbuf.clear();
                        let e = UpErr {
                            kind: UpstreamError::ReadTimeout,
                            responded: false,
                        };
                        break (up, addr, Sent::Upstream(e));
                    }
                    _ => {}
                }
            }
            break (up, addr, sent);
        };
        self.up_out.clear();
        let head_len = match sent {
            Sent::Response { status, .. } if plan.fwd.upstreams.replaces(status) => {
                // The upstream's answer is not relayed: its connection
                // goes, its body unread.
                drop(up);
                self.upbuf.clear();
                stats.upstream_time = Some(up_start.elapsed());
                let keep = plan.client_keepalive && decoder.is_done();
                let respond = plan.fwd.upstreams.replacement(status).await;
                let keep = keep && !respond.close;
                let next = self.local(&respond, plan.head_request, keep, stats).await;
                self.observe(stats, Outcome::Local(respond.reason), plan.fwd.tag.as_ref());
                return next;
            }
            Sent::Response { head_len, .. } => head_len,
            Sent::Upstream(e) => {
                stats.upstream_time = Some(up_start.elapsed());
                let keep = plan.client_keepalive && decoder.is_done();
                let next = if stats.status < 200 {
                    Box::pin(self.upstream_failed(plan, e.kind, keep, stats)).await
                } else {
                    Next::Close(ConnEnd::Closed)
                };
                self.observe(stats, Outcome::Upstream(e.kind), plan.fwd.tag.as_ref());
                return next;
            }
            Sent::Client(Outcome::Refused(r)) if stats.status < 200 => {
                self.refuse(r, stats).await;
                return Next::Close(ConnEnd::Closed);
            }
            Sent::Client(outcome) => {
                self.observe(stats, outcome, plan.fwd.tag.as_ref());
                return Next::Close(ConnEnd::ClientClosed);
            }
            Sent::TooLarge => {
                self.refuse(Refusal::BodyTooLarge, stats).await;
                return Next::Close(ConnEnd::Closed);
            }
        };
        let request_done = decoder.is_done();
        let pacer = plan.fwd.upstreams.pacer();
        self.respond(
            up,
            (addr, class),
            head_len,
            plan,
            request_done,
            (read_to, pacer, held.response),
            stats,
        )
        .await
    }

    /// The retry policy's verdict on a try that ended as `failed`
    /// ([`crate::retry`]); `None` without a policy. Before a retry the
    /// router is told a new try begins (with no address left, the last
    /// answer stands) and the backoff is waited out.
    async fn after_try(
        &self,
        plan: &mut ForwardPlan<R::Upstreams>,
        tries: &mut Option<Tries>,
        failed: Failed,
    ) -> Option<Verdict> {
        let (Some(policy), Some(tries)) = (&plan.fwd.retry, tries) else {
            return None;
        };
        let verdict = policy.decide(tries, failed, Instant::now());
        if let Verdict::Retry(wait) = verdict {
            if !plan.fwd.upstreams.new_try(policy.same_endpoint_again) {
                return Some(Verdict::Last);
            }
            tracing::debug!(?failed, retry = tries.retried(), "retrying the request");
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
        }
        Some(verdict)
    }

    /// A retried try's answer is not relayed: its connection goes back to
    /// the pool when the whole answer (a body of at most
    /// [`crate::retry::DRAIN_MAX`] bytes) is already read and the backend
    /// keeps it open, else it is closed, the rest unread.
    fn discard_answer(
        &mut self,
        up: UpstreamConn,
        (addr, class): (SocketAddr, u64),
        sent: &Sent,
        head_request: bool,
    ) {
        let got = self.upbuf.filled();
        let whole = match sent {
            Sent::Response { .. } => {
                match crate::response::parse_response(got, head_request, |_, _| true) {
                    Ok(Some(head)) if head.framing.keep_alive => {
                        crate::retry::answer_read_whole(head.len, head.framing.body, got.len())
                    }
                    _ => false,
                }
            }
            _ => false,
        };
        if whole {
            self.engine.pool.put_at(addr, class, up, Instant::now());
        }
        self.upbuf.clear();
    }

    /// Sends the head in `up_out` and the request body, relaying any 1xx
    /// response on the way, until a final response head is in `upbuf`.
    async fn send_request(
        &mut self,
        up: &mut UpstreamConn,
        decoder: &mut BodyDecoder,
        plan: &ForwardPlan<R::Upstreams>,
        (read_to, mut since): (Duration, Option<Instant>),
        stats: &mut Stats,
    ) -> Sent {
        let chunk = self.engine.config.read_chunk;
        let max_head = self.engine.config.max_response_header_bytes;
        let mut up_pos = 0usize;
        // A bodyless request keeps its head in `up_out` for a retry.
        let keep_head = plan.retryable;
        let mut responded = false;
        // A client not yet in the event loop is watched for a hang-up only
        // once its answer is slow: watching would put it there (two system
        // calls), and a quick answer finds out by being written.
        let mut slow_answer = false;
        let mut first_write = true;
        // Where the upstream's read timeout counts from: the time given
        // (the request's start upstream, on a pooled connection), else the
        // first wait's; kept while nothing had to wait (a write the socket
        // took at once), and through the wait that found the answer slow.
        loop {
            // A complete response head ends the sending phase (an early
            // final response abandons the rest of the body).
            if !self.upbuf.is_empty() {
                responded = true;
                match response_head_len(self.upbuf.filled()) {
                    Err(_) => {
                        return Sent::Upstream(UpErr {
                            kind: UpstreamError::BadResponse,
                            responded,
                        });
                    }
                    Ok(Some((len, status))) => {
                        let now = Instant::now();
                        if stats.ttfb.is_none() {
                            stats.ttfb = stats.upstream_start.map(|t| now.duration_since(t));
                        }
                        if (100..200).contains(&status) && status != 101 {
                            self.out.clear();
                            if write_interim(&mut self.out, &self.upbuf.filled()[..len]).is_err() {
                                return Sent::Upstream(UpErr {
                                    kind: UpstreamError::BadResponse,
                                    responded,
                                });
                            }
                            // An HTTP/1.0 client gets no interim answer.
                            if !plan.client_http10 && self.flush(stats).await.is_err() {
                                return Sent::Client(Outcome::ClientAbort);
                            }
                            self.out.clear();
                            self.upbuf.consume(len);
                            continue;
                        }
                        stats.answered = Some(now);
                        return Sent::Response {
                            head_len: len,
                            status,
                        };
                    }
                    Ok(None) if self.upbuf.filled().len() > max_head => {
                        return Sent::Upstream(UpErr {
                            kind: UpstreamError::BadResponse,
                            responded,
                        });
                    }
                    Ok(None) => {}
                }
            }
            let sending = up_pos < self.up_out.len();
            if sending && first_write {
                // The request's first bytes: nothing can have been answered
                // before them, so they go without a look at the backend's
                // side first (a look that finds nothing registers the task
                // with the socket: a lock and a hundred instructions).
                first_write = false;
                let bytes = &self.up_out[up_pos..];
                let wrote = std::future::poll_fn(|cx| {
                    Poll::Ready(std::pin::Pin::new(&mut *up).poll_write(cx, bytes))
                })
                .await;
                match wrote {
                    Poll::Ready(Ok(n)) if n > 0 => {
                        up_pos += n;
                        if up_pos == self.up_out.len() && !keep_head {
                            self.up_out.clear();
                            up_pos = 0;
                        }
                        continue;
                    }
                    Poll::Ready(_) => {
                        return Sent::Upstream(UpErr {
                            kind: UpstreamError::Closed,
                            responded,
                        });
                    }
                    // The socket takes nothing yet: waited for below, with
                    // the answer.
                    Poll::Pending => {}
                }
            }
            let need_body = !decoder.is_done();
            // With the body sent, the client is still read (up to a head's
            // worth of pipelined bytes, kept for later) so that a client
            // hanging up is noticed while its answer is awaited.
            let watch_hangup = slow_answer || self.client.in_event_loop();
            let watch_client = need_body
                || (watch_hangup
                    && self.inbuf.filled().len() < self.engine.config.limits.max_header_bytes);
            // A watch for a hang-up (no body to read) reads with the buffer
            // the head came in: a full read chunk grew it on every request,
            // and only the grown one went back to the spares.
            let client_chunk = if need_body {
                chunk
            } else {
                chunk.min(IDLE_READ)
            };
            let hangup_grace = !sending && !need_body && !watch_hangup;
            let grace_first = hangup_grace && HANGUP_WATCH_AFTER < read_to;
            let mut blocked = false;
            let Conn {
                client,
                inbuf,
                upbuf,
                up_out,
                reads,
                ..
            } = self;
            let (mut up_r, mut up_w) = up.split();
            enum Ev {
                Wrote(io::Result<usize>),
                ClientRead(io::Result<usize>),
                UpRead(io::Result<usize>),
            }
            let until = || {
                blocked = true;
                let since = *since.get_or_insert_with(Instant::now);
                if grace_first {
                    since + HANGUP_WATCH_AFTER
                } else {
                    since + read_to
                }
            };
            let ev = {
                let select = std::pin::pin!(async {
                    // In a fixed order instead of a random one (no draw per
                    // wait): the backend's answer first, as it ends the sending;
                    // the write and the client's read never race (`sending`),
                    // and the answer read is bounded by its head's limit.
                    tokio::select! {
                        biased;
                        r = upbuf.read_from(&mut up_r, chunk) => Ev::UpRead(r),
                        r = up_w.write(&up_out[up_pos..]), if sending => Ev::Wrote(r),
                        r = inbuf.read_from(client, client_chunk), if !sending && watch_client => Ev::ClientRead(r),
                    }
                });
                reads.run_until(until, select).await
            };
            let ev = match ev {
                Ok(ev) => {
                    // Only a write the socket took at once keeps the
                    // start: bytes that came in begin a new wait.
                    if blocked || !matches!(ev, Ev::Wrote(_)) {
                        since = None;
                    }
                    ev
                }
                Err(_) if grace_first => {
                    slow_answer = true;
                    continue;
                }
                Err(_) if !sending && need_body => {
                    // The client stopped sending its body.
                    stats.client_abort = true;
                    return Sent::Client(Outcome::ClientAbort);
                }
                Err(_) => {
                    return Sent::Upstream(UpErr {
                        kind: UpstreamError::ReadTimeout,
                        responded,
                    });
                }
            };
            match ev {
                Ev::Wrote(Ok(n)) if n > 0 => {
                    up_pos += n;
                    if up_pos == self.up_out.len() && !keep_head {
                        self.up_out.clear();
                        up_pos = 0;
                    }
                }
                Ev::Wrote(_) => {
                    return Sent::Upstream(UpErr {
                        kind: UpstreamError::Closed,
                        responded,
                    });
                }
                Ev::ClientRead(Ok(0)) | Ev::ClientRead(Err(_)) => {
                    stats.client_abort = true;
                    return Sent::Client(Outcome::ClientAbort);
                }
                Ev::ClientRead(Ok(_)) if !need_body => {}
                Ev::ClientRead(Ok(_)) => {
                    match decoder.feed(self.inbuf.filled(), &mut self.up_out) {
                        Ok(n) => {
                            stats.bytes_in += n as u64;
                            self.inbuf.consume(n);
                        }
                        Err(BodyError::TooLarge) => return Sent::TooLarge,
                        Err(BodyError::BadChunk(_)) => {
                            return Sent::Client(Outcome::Refused(Refusal::BadChunkedBody));
                        }
                    }
                }
                Ev::UpRead(Ok(0)) | Ev::UpRead(Err(_)) => {
                    return Sent::Upstream(UpErr {
                        kind: UpstreamError::Closed,
                        responded: responded || !self.upbuf.is_empty(),
                    });
                }
                Ev::UpRead(Ok(_)) => {}
            }
        }
    }

    /// Relays the final response whose head (`head_len` bytes) starts
    /// `upbuf`, then its body; pools the upstream connection when it can.
    #[allow(clippy::too_many_arguments)]
    async fn respond(
        &mut self,
        mut up: UpstreamConn,
        (addr, class): (SocketAddr, u64),
        head_len: usize,
        plan: &ForwardPlan<R::Upstreams>,
        request_done: bool,
        (read_to, mut pacer, ahead): (Duration, Option<Box<dyn Pacer>>, usize),
        stats: &mut Stats,
    ) -> Next {
        let tag = plan.fwd.tag.as_ref();
        let shutting_down = self.shutting_down();
        let parsed = {
            let Conn {
                engine, upbuf, out, ..
            } = self;
            out.clear();
            write_response_head(
                out,
                &upbuf.filled()[..head_len],
                plan,
                request_done && !shutting_down,
                engine.config.server.as_deref(),
            )
        };
        self.upbuf.consume(head_len);
        let Ok(resp) = parsed else {
            stats.upstream_time = stats.upstream_start.map(|t| t.elapsed());
            let fields = plan.fwd.upstreams.local_fields().to_vec();
            let next =
                Box::pin(self.gateway_error(UpstreamError::BadResponse, false, &fields, stats))
                    .await;
            self.observe(stats, Outcome::Upstream(UpstreamError::BadResponse), tag);
            return next;
        };
        stats.status = resp.status;
        if resp.status == 101 {
            return Box::pin(self.tunnel(up, stats, tag)).await;
        }
        let emit = if resp.body == BodyFraming::Chunked && plan.client_http10 {
            Emit::Raw
        } else {
            Emit::Same
        };
        let mut decoder = BodyDecoder::new(resp.body, emit, 0);
        let chunk = self.engine.config.read_chunk;
        let mut outcome = Outcome::Proxied;
        // The head goes at once; a pacer paces the body only.
        let mut unpaced = self.out.len();
        // `proxy-buffering`: the backend's answer is all read while the
        // client still has some to take (crate::engine::buffering).
        let mut read_whole = false;
        // Whether the answer took more than its head's read and one write.
        let mut waited = ahead > 0 || pacer.is_some();
        loop {
            match decoder.feed(self.upbuf.filled(), &mut self.out) {
                Ok(n) => self.upbuf.consume(n),
                Err(_) => {
                    outcome = Outcome::Upstream(UpstreamError::BadResponse);
                    break;
                }
            }
            if ahead > 0 && decoder.is_done() {
                read_whole = true;
                break;
            }
            let flushed = if ahead > 0 {
                let (up, d) = (&mut up, &mut decoder);
                Box::pin(self.flush_reading_ahead(up, d, ahead, &mut pacer, &mut unpaced, stats))
                    .await
            } else {
                match pacer.as_deref_mut() {
                    Some(pacer) => Box::pin(self.flush_paced(pacer, &mut unpaced, stats)).await,
                    None => self.flush(stats).await,
                }
                .map(|()| false)
            };
            match flushed {
                Err(_) => {
                    outcome = Outcome::ClientAbort;
                    break;
                }
                // The backend's answer is read, the client not done.
                Ok(true) => {
                    read_whole = true;
                    break;
                }
                Ok(false) => {}
            }
            if decoder.is_done() {
                break;
            }
            waited = true;
            let r = {
                let read = std::pin::pin!(self.upbuf.read_from(&mut up, chunk));
                self.reads
                    .run_until(|| Instant::now() + read_to, read)
                    .await
            };
            match r {
                Ok(Ok(0)) => {
                    if decoder.eof() {
                        let _ = self.flush(stats).await;
                        break;
                    }
                    outcome = Outcome::Upstream(UpstreamError::Closed);
                    break;
                }
                Ok(Ok(_)) => {}
                Ok(Err(_)) => {
                    outcome = Outcome::Upstream(UpstreamError::Closed);
                    break;
                }
                Err(_) => {
                    outcome = Outcome::Upstream(UpstreamError::ReadTimeout);
                    break;
                }
            }
        }
        // Reusable: the response ended at its framing, nothing unsolicited
        // followed, both the request and the response allow keep-alive,
        // and the route's head does (not HTTP/1.0, no `Connection: close`).
        let reusable = |upbuf: &Buf| {
            request_done && resp.upstream_keepalive && plan.fwd.http.reuses() && upbuf.is_empty()
        };
        let mut up = Some(up);
        if read_whole {
            // The backend's part ends here: its connection pooled (or
            // closed) before the client has the rest, written from memory.
            let done = Instant::now();
            stats.upstream_time = stats.upstream_start.map(|t| done.duration_since(t));
            if let Some(up) = up.take()
                && reusable(&self.upbuf)
            {
                self.engine.pool.put_at(addr, class, up, done);
            }
            self.upbuf.clear();
            let flushed = match pacer.as_deref_mut() {
                Some(pacer) => Box::pin(self.flush_paced(pacer, &mut unpaced, stats)).await,
                None => self.flush(stats).await,
            };
            if flushed.is_err() {
                outcome = Outcome::ClientAbort;
            }
        }
        if !waited && !stats.waited && stats.end.get().is_none() {
            stats.end.set(stats.answered);
        }
        let end = stats.ended();
        if !read_whole {
            stats.upstream_time = stats.upstream_start.map(|t| end.duration_since(t));
        }
        let complete = outcome == Outcome::Proxied;
        if let Some(up) = up
            && complete
            && reusable(&self.upbuf)
        {
            self.engine.pool.put_at(addr, class, up, end);
        }
        self.upbuf.clear();
        self.observe(stats, outcome, tag);
        if complete && resp.client_keepalive {
            Next::KeepAlive
        } else if stats.client_abort {
            Next::Close(ConnEnd::ClientClosed)
        } else {
            Next::Close(ConnEnd::Closed)
        }
    }

    /// After a 101: the head is in `out`; bytes either side already read
    /// go first, then both directions are copied until one closes.
    async fn tunnel(
        &mut self,
        mut up: UpstreamConn,
        stats: &mut Stats,
        tag: Option<&std::sync::Arc<str>>,
    ) -> Next {
        let leftover = std::mem::take(&mut self.upbuf.data);
        self.out.extend_from_slice(&leftover[self.upbuf.start..]);
        self.upbuf.clear();
        if self.flush(stats).await.is_err() {
            self.observe(stats, Outcome::ClientAbort, tag);
            return Next::Close(ConnEnd::ClientClosed);
        }
        if !self.inbuf.is_empty() {
            stats.bytes_in += self.inbuf.filled().len() as u64;
            if up.write_all(self.inbuf.filled()).await.is_err() {
                self.observe(stats, Outcome::Upstream(UpstreamError::Closed), tag);
                return Next::Close(ConnEnd::Closed);
            }
            self.inbuf.clear();
        }
        let idle = self.cfg().tunnel_idle_timeout;
        let relayed = crate::tunnel::relay(&mut self.client, &mut up, idle).await;
        stats.bytes_in += relayed.from_client;
        stats.bytes_out += relayed.from_upstream;
        if relayed.idle {
            tracing::debug!("upgraded connection idle for the tunnel timeout; closed");
        }
        stats.upstream_time = stats.upstream_start.map(|t| t.elapsed());
        self.observe(stats, Outcome::Upgraded, tag);
        Next::Close(ConnEnd::Upgraded)
    }
}

/// How long a connection that has just answered may still send its next
/// request once shutdown begins: that request is served with
/// `Connection: close` instead of racing the close of an idle
/// connection (a client that sends as the server closes sees its request
/// fail with no response byte). Longer idle connections close at once.
const IDLE_CLOSE_GRACE: Duration = Duration::from_millis(250);

/// [`Conn::release_idle`], on the connection's fields.
fn release_buffers(
    inbuf: &mut Buf,
    upbuf: &mut Buf,
    out: &mut Vec<u8>,
    up_out: &mut Vec<u8>,
    log: &mut LogHead,
) {
    inbuf.release();
    upbuf.release();
    crate::spare::give(std::mem::take(out));
    crate::spare::give(std::mem::take(up_out));
    log.release();
    // The timers stay: re-arming one per request is what `Deadline`
    // exists to avoid, and each is a hundred bytes.
}

/// Shutdown, for a connection idle since `idle_since`.
async fn drained(rx: &mut watch::Receiver<bool>, idle_since: Instant) {
    shutdown_signal(rx).await;
    tokio::time::sleep_until(idle_since + IDLE_CLOSE_GRACE).await;
}

async fn shutdown_signal(rx: &mut watch::Receiver<bool>) {
    loop {
        if *rx.borrow_and_update() {
            return;
        }
        if rx.changed().await.is_err() {
            // The sender is gone: no shutdown will ever be signalled.
            std::future::pending::<()>().await;
        }
    }
}

/// Whether an incomplete head can still start with a method: a client
/// speaking another protocol (a TLS hello, HTTP/2 frames without the h2c
/// preface) is refused at its first bytes, not at the header timeout.
fn method_so_far_is_token(buf: &[u8]) -> bool {
    let end = buf.iter().position(|&b| b == b' ').unwrap_or(buf.len());
    buf[..end].iter().all(|&b| crate::scan::is_tchar(b))
}

fn write_interim(out: &mut Vec<u8>, raw: &[u8]) -> Result<(), ()> {
    let mut slots = header_slots();
    let resp = parse_head(raw, &mut slots)?;
    let status = resp.code.unwrap_or(100);
    status_line(out, status, clean_reason(resp.reason.unwrap_or("")));
    let opts = connection_options(resp.headers);
    write_fields(out, raw, resp.headers, opts, &Default::default());
    out.extend_from_slice(b"\r\n");
    Ok(())
}

fn clean_reason(r: &str) -> &[u8] {
    if crate::scan::is_field_value(r.as_bytes()) {
        r.as_bytes()
    } else {
        b""
    }
}

/// The engine's plain-text answers (refusals, 502, 504).
static PLAIN_TEXT: [(Bytes, Bytes); 1] = [(
    Bytes::from_static(b"content-type"),
    Bytes::from_static(b"text/plain; charset=utf-8"),
)];

fn write_local_head(
    out: &mut Vec<u8>,
    status: u16,
    headers: &[(Bytes, Bytes)],
    len: u64,
    keep: bool,
    server: Option<&[u8]>,
) {
    status_line(out, status, reason(status).as_bytes());
    crate::wire::date_field(out);
    if let Some(server) = server {
        field(out, b"server", server);
    }
    for (n, v) in headers {
        if crate::hop::is_hop_by_hop(n) {
            continue;
        }
        checked_field(out, n, v);
    }
    if !(100..200).contains(&status) && status != 204 && status != 304 {
        out.extend_from_slice(b"content-length: ");
        write_u64(out, len);
        out.extend_from_slice(b"\r\n");
    }
    if !keep {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// What the response head says about the rest of the exchange.
struct RespFacts {
    status: u16,
    body: BodyFraming,
    upstream_keepalive: bool,
    client_keepalive: bool,
}

/// Parses the upstream's final response head and writes the client's.
fn write_response_head<U: Upstreams>(
    out: &mut Vec<u8>,
    raw: &[u8],
    plan: &ForwardPlan<U>,
    may_keep_client: bool,
    server: Option<&[u8]>,
) -> Result<RespFacts, ()> {
    let mut slots = header_slots();
    let resp = parse_head(raw, &mut slots)?;
    let status = resp.code.ok_or(())?;
    let http10 = resp.version == Some(0);
    if status == 101 && !plan.upgrade {
        return Err(());
    }
    let HeadFields {
        opts,
        framing:
            ResponseFraming {
                body,
                length,
                keep_alive: upstream_keepalive,
            },
        has_server,
        has_date,
    } = head_fields(status, http10, plan.head_request, resp.headers).map_err(|_| ())?;
    let client_chunked = body == BodyFraming::Chunked && !plan.client_http10;
    // A refused upgrade closes: the client may already have sent bytes of
    // the protocol it asked for, which are no request.
    let client_keepalive = may_keep_client
        && plan.client_keepalive
        && !plan.upgrade
        && body != BodyFraming::Close
        && (body != BodyFraming::Chunked || client_chunked);

    status_line(out, status, clean_reason(resp.reason.unwrap_or("")));
    let edits = &plan.fwd.response_edits;
    match plan.fwd.upstreams.response_rewrite() {
        None => write_fields(out, raw, resp.headers, opts, edits),
        Some(rewrite) => write_fields_rewritten(out, resp.headers, opts, edits, Some(rewrite)),
    }
    if let Some(server) = server
        && !has_server
    {
        field(out, b"server", server);
    }
    // RFC 9110 6.6.1: a recipient with a clock adds the Date a response
    // lacks when it forwards it.
    if !has_date {
        crate::wire::date_field(out);
    }
    match body {
        BodyFraming::Length(n) => {
            out.extend_from_slice(b"content-length: ");
            write_u64(out, n);
            out.extend_from_slice(b"\r\n");
        }
        BodyFraming::Chunked if client_chunked => {
            out.extend_from_slice(b"transfer-encoding: chunked\r\n");
        }
        BodyFraming::None if status != 204 && !(100..200).contains(&status) => {
            // HEAD and 304 keep the length of the representation.
            if let Some(n) = length {
                out.extend_from_slice(b"content-length: ");
                write_u64(out, n);
                out.extend_from_slice(b"\r\n");
            }
        }
        _ => {}
    }
    if status == 101 {
        if let Some(u) = resp
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case("upgrade"))
        {
            field(out, b"upgrade", u.value);
        }
        out.extend_from_slice(b"connection: upgrade\r\n");
    } else if !client_keepalive {
        out.extend_from_slice(b"connection: close\r\n");
    } else if plan.client_http10 {
        out.extend_from_slice(b"connection: keep-alive\r\n");
    }
    out.extend_from_slice(b"\r\n");
    Ok(RespFacts {
        status,
        body,
        upstream_keepalive,
        client_keepalive,
    })
}

/// A request head's field slots (4 KiB) from a per-thread spare. They
/// live across the router's `decide`, so on the stack they were part of
/// the per-request future: 4 KiB more to allocate and move per request.
struct RequestSlots<'b>(Vec<httparse::Header<'b>>);

thread_local! {
    static SPARE_SLOTS: std::cell::Cell<Vec<httparse::Header<'static>>> =
        const { std::cell::Cell::new(Vec::new()) };
}

impl<'b> RequestSlots<'b> {
    /// The thread's spare, or a new one while another request holds it
    /// (its router still deciding).
    fn take() -> Self {
        let spare = SPARE_SLOTS
            .try_with(std::cell::Cell::take)
            .unwrap_or_default();
        let mut slots = relabel(spare);
        if slots.capacity() < MAX_HEADERS_CAP {
            slots = Vec::with_capacity(MAX_HEADERS_CAP);
        }
        RequestSlots(slots)
    }

    fn uninit(&mut self) -> &mut [std::mem::MaybeUninit<httparse::Header<'b>>] {
        &mut self.0.spare_capacity_mut()[..MAX_HEADERS_CAP]
    }
}

impl Drop for RequestSlots<'_> {
    fn drop(&mut self) {
        let slots = relabel(std::mem::take(&mut self.0));
        let _ = SPARE_SLOTS.try_with(|s| s.set(slots));
    }
}

/// An emptied vector of fields as one for fields of another lifetime,
/// its memory kept: collecting nothing from a vector into one of a type
/// of the same layout reuses its allocation (the standard library's
/// in-place collect; `spare_slots_are_reused` checks it).
fn relabel<'b>(mut v: Vec<httparse::Header<'_>>) -> Vec<httparse::Header<'b>> {
    v.clear();
    v.into_iter()
        .map(|_| -> httparse::Header<'b> { unreachable!("the vector is empty") })
        .collect()
}

/// Scans, parses, routes and (for a forward) writes the upstream head.
async fn prepare<R: Router>(
    raw: &[u8],
    config: &EngineConfig,
    router: &R,
    info: &ConnInfo,
    up_out: &mut Vec<u8>,
    log: &mut LogHead,
) -> Plan<R::Upstreams> {
    let framing = match scan_h1(raw, &config.limits) {
        Ok(f) => f,
        Err(r) => return Plan::Refuse(r),
    };
    let mut slots = RequestSlots::take();
    let mut req = httparse::Request::new(&mut []);
    match req.parse_with_uninit_headers(raw, slots.uninit()) {
        Ok(httparse::Status::Complete(n)) if n == raw.len() => {}
        _ => return Plan::Refuse(Refusal::BadRequestLine),
    }
    let (Some(method), Some(target), Some(version)) = (req.method, req.path, req.version) else {
        return Plan::Refuse(Refusal::BadRequestLine);
    };
    let headers: &[httparse::Header<'_>] = req.headers;
    let host_field = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("host"))
        .and_then(|h| std::str::from_utf8(crate::scan::trim_ows(h.value)).ok());
    // Absolute form: the target's authority is the one that routes, and a
    // Host field that names another is refused (no routing confusion).
    if method == "CONNECT" {
        log.set(method, target, host_field);
        return Plan::Local {
            respond: Respond::new(405, "connect", "405 CONNECT is not supported\n").header(
                bytes::Bytes::from_static(b"allow"),
                bytes::Bytes::from_static(b"GET, HEAD, POST, PUT, DELETE, OPTIONS, PATCH"),
            ),
            head_request: false,
            unread_body: framing.chunked || framing.content_length.is_some_and(|n| n > 0),
            client_keepalive: false,
        };
    }
    let (path, host, add_host) = match split_absolute(target) {
        Ok(None) => (target, host_field, false),
        Ok(Some((authority, path))) => {
            if host_field.is_some_and(|h| !h.eq_ignore_ascii_case(authority)) {
                return Plan::Refuse(Refusal::BadHost);
            }
            (path, Some(authority), host_field.is_none())
        }
        Err(r) => return Plan::Refuse(r),
    };
    log.set(method, path, host);
    let body = if framing.chunked {
        BodyFraming::Chunked
    } else {
        match framing.content_length {
            None | Some(0) => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    };
    let opts = connection_options(headers);
    let http10 = version == 0;
    let client_keepalive = if http10 {
        opts.keep_alive && !opts.close
    } else {
        !opts.close
    };
    let head_request = method == "HEAD";
    let upgrade_value = headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("upgrade"))
        .map(|h| h.value)
        .filter(|_| opts.upgrade && !http10);
    let head = RequestHead {
        method,
        path,
        version,
        host,
        headers,
        content_length: framing.content_length,
        chunked: framing.chunked,
    };
    let fwd = match router.decide(&head, info).await {
        Decision::Respond(respond) => {
            return Plan::Local {
                respond,
                head_request,
                unread_body: body != BodyFraming::None,
                client_keepalive,
            };
        }
        Decision::Forward(f) if f.upstreams.is_empty() => {
            return Plan::Local {
                respond: Respond::new(503, "no_upstream", "503 no upstream\n"),
                head_request,
                unread_body: body != BodyFraming::None,
                client_keepalive,
            };
        }
        Decision::Forward(f) => f,
    };
    // An upgrade is HTTP/1.1 with its own `Connection`, whatever the
    // route's version: HTTP/1.0 has no upgrade.
    let http = match upgrade_value {
        Some(_) => &UpstreamHttp::DEFAULT,
        None => &fwd.http,
    };
    // An HTTP/1.0 backend cannot be sent a body of unknown length: it
    // goes only when held whole, with its length (`proxy-request-buffering`),
    // else 411 (crate::engine::buffering).
    let length_required = body == BodyFraming::Chunked && !http.takes_unknown_length();
    up_out.clear();
    // A rewritten target was checked when it was made (RequestTarget).
    let target = fwd.target.as_ref().map_or(path, |t| t.as_str());
    let mut up_head =
        RequestHeadWriter::start_with(up_out, method.as_bytes(), target.as_bytes(), http);
    if add_host && !fwd.request_edits.skips(b"host") {
        up_head.field(b"host", host.unwrap_or("").as_bytes());
    }
    write_fields(up_head.buffer(), raw, headers, opts, &fwd.request_edits);
    if let Some(u) = upgrade_value {
        up_head.field(b"upgrade", u);
        up_head.field(b"connection", b"upgrade");
    }
    up_head.finish(match body {
        BodyFraming::Length(n) => BodyLength::Length(n),
        BodyFraming::Chunked => BodyLength::Chunked,
        _ if framing.content_length == Some(0) => BodyLength::Empty,
        _ => BodyLength::Unframed,
    });
    Plan::Forward(ForwardPlan {
        fwd,
        body,
        head_request,
        retryable: body == BodyFraming::None && IDEMPOTENT.contains(&method),
        idempotent: IDEMPOTENT.contains(&method),
        client_keepalive,
        client_http10: http10,
        upgrade: upgrade_value.is_some(),
        length_required,
    })
}

/// The 411's body: a request to an HTTP/1.0 backend must say its length.
const LENGTH_REQUIRED: &str =
    "411 this route's backend speaks HTTP/1.0: send the body with a Content-Length\n";

// Here, not in crate::retry, which imports nothing of the engine's.
impl From<UpstreamError> for Failed {
    fn from(e: UpstreamError) -> Self {
        match e {
            UpstreamError::Connect => Failed::Connect,
            UpstreamError::ConnectTimeout => Failed::ConnectTimeout,
            UpstreamError::ReadTimeout => Failed::Timeout,
            UpstreamError::Closed => Failed::Closed,
            UpstreamError::BadResponse => Failed::BadResponse,
        }
    }
}

/// The body of a connection error's answer on a route whose retry
/// policy sets its status.
const RETRIES_FAILED: &str = "the backend could not be reached or closed the connection\n";

/// How a failed connect is told to the observer and answered: a timeout,
/// of the connect or of securing it, is a 504; any other failure a 502.
fn gateway_error_of(e: &ConnectError) -> UpstreamError {
    if e.timed_out() {
        UpstreamError::ConnectTimeout
    } else {
        UpstreamError::Connect
    }
}

/// The status of an upstream failure before any response byte.
fn gateway_status(e: UpstreamError) -> u16 {
    match e {
        UpstreamError::ConnectTimeout | UpstreamError::ReadTimeout => 504,
        _ => 502,
    }
}

/// `Ok(Some((authority, path)))` for an absolute-form target,
/// `Ok(None)` for origin form or `*`.
fn split_absolute(target: &str) -> Result<Option<(&str, &str)>, Refusal> {
    if target.starts_with('/') || target == "*" {
        return Ok(None);
    }
    let lower = |p: &str| {
        target.len() >= p.len() && target.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes())
    };
    let rest = if lower("http://") {
        &target[7..]
    } else if lower("https://") {
        &target[8..]
    } else {
        return Err(Refusal::BadRequestLine);
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if !is_authority(authority.as_bytes()) {
        return Err(Refusal::BadHost);
    }
    // The origin form of `http://a?q` is `/?q`; that needs a copy, so it
    // is refused instead (no client sends it).
    if path.is_empty() {
        return Ok(Some((authority, "/")));
    }
    if path.starts_with('?') {
        return Err(Refusal::BadRequestLine);
    }
    Ok(Some((authority, path)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_protocol_is_no_request() {
        assert!(method_so_far_is_token(b""));
        assert!(method_so_far_is_token(b"GE"));
        assert!(method_so_far_is_token(b"GET /\0"));
        assert!(!method_so_far_is_token(b"\x16\x03\x01"));
        assert!(!method_so_far_is_token(b"\0\0\x1d\x01"));
    }

    #[test]
    fn head_end_is_found_incrementally() {
        let raw = b"GET / HTTP/1.1\r\nA: b\r\n\r\nNEXT";
        assert_eq!(find_head_end(raw, 0), Some(raw.len() - 4));
        for cut in 0..raw.len() - 4 {
            assert_eq!(find_head_end(&raw[..cut], 0), None, "{cut}");
            assert_eq!(find_head_end(raw, cut), Some(raw.len() - 4), "{cut}");
        }
        assert_eq!(find_head_end(b"GET / HTTP/1.1\n\n", 0), Some(16));
        assert_eq!(find_head_end(b"GET / HTTP/1.1\r\nA: b\n\r\n", 0), Some(23));
    }

    /// The first blank line ends the head, whichever of "\n\n" and
    /// "\n\r\n" it is: every string over the alphabet {a, \r, \n} up to
    /// seven bytes, from every starting offset, against a byte-by-byte scan.
    #[test]
    fn head_end_is_the_first_blank_line() {
        fn reference(buf: &[u8], from: usize) -> Option<usize> {
            let start = from.saturating_sub(3);
            (start..buf.len()).find_map(|i| match &buf[i..] {
                [b'\n', b'\n', ..] => Some(i + 2),
                [b'\n', b'\r', b'\n', ..] => Some(i + 3),
                _ => None,
            })
        }
        let alphabet = [b'a', b'\r', b'\n'];
        for len in 0..=7u32 {
            for mut code in 0..3usize.pow(len) {
                let buf: Vec<u8> = (0..len)
                    .map(|_| {
                        let b = alphabet[code % 3];
                        code /= 3;
                        b
                    })
                    .collect();
                for from in 0..=buf.len() {
                    assert_eq!(
                        find_head_end(&buf, from),
                        reference(&buf, from),
                        "{buf:?} from {from}"
                    );
                }
            }
        }
    }

    /// The serve future must be `Send` for a `Send` stream (Pingora's
    /// `ServerApp::process_new` is an `async_trait` method, and teapot's
    /// accept loop spawns it), and small: it is allocated once per
    /// connection and lives as long as it, idle or not, so routing and
    /// forwarding are boxed per request (docs/capacity.md).
    #[test]
    fn serve_future_is_send_and_small() {
        fn is_send<T: Send>(_: &T) {}
        let router =
            |_: &RequestHead<'_>, _: &ConnInfo| Decision::Respond(Respond::new(404, "none", ""));
        let engine = Engine::new(router, (), EngineConfig::default());
        let (_tx, rx) = watch::channel(false);
        let (stream, _peer) = tokio::io::duplex(64);
        let fut = Arc::new(engine).serve(stream, ConnInfo::default(), rx);
        is_send(&fut);
        let size = std::mem::size_of_val(&fut);
        assert!(size <= 1024, "serve future is {size} bytes");
    }

    /// The request slots go back to the thread and come out again with
    /// the same memory: no allocation per request.
    #[test]
    fn spare_slots_are_reused() {
        let at = {
            let mut slots = RequestSlots::take();
            assert!(slots.uninit().len() == MAX_HEADERS_CAP);
            slots.0.as_ptr()
        };
        let again = RequestSlots::take();
        assert_eq!(again.0.as_ptr(), at);
        // Taken while another holds the spare: a new one.
        let other = RequestSlots::take();
        assert_ne!(other.0.as_ptr(), at);
        assert!(other.0.capacity() >= MAX_HEADERS_CAP);
    }

    #[test]
    fn absolute_targets() {
        assert_eq!(split_absolute("/a?b"), Ok(None));
        assert_eq!(split_absolute("*"), Ok(None));
        assert_eq!(
            split_absolute("http://a.example/x?y"),
            Ok(Some(("a.example", "/x?y")))
        );
        assert_eq!(split_absolute("HTTPS://a:8443"), Ok(Some(("a:8443", "/"))));
        assert_eq!(split_absolute("http://u@a/"), Err(Refusal::BadHost));
        assert_eq!(split_absolute("ftp://a/"), Err(Refusal::BadRequestLine));
        assert_eq!(
            split_absolute("a.example:443"),
            Err(Refusal::BadRequestLine)
        );
    }
}
