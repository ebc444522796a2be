//! Where connections enter: the listener's application ([`EdgeApp`]).
//! It holds each connection against the caps of [`ConnectionTable`]
//! (total, per client address, and the pace of new connections per client
//! address), then hands HTTP/2 to teapot's HTTP/2 server (crate::plane::h2)
//! and everything else to the HTTP/1 engine (crate::plane::h1), whose
//! header-read deadline and keep-alive timeout are docs/edge.md's.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::Either;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use teapot_h1::{ClientTcp, ConnInfo};
use tokio::net::TcpStream;

use crate::plane::edge::{EdgeConfig, Refusal};
use crate::plane::h1::H1Engine;

/// Counts connections, total and per client address, and paces new
/// connections per client address.
#[derive(Debug, Default)]
pub struct ConnectionTable {
    total: AtomicUsize,
    per_client: parking_lot::Mutex<ClientMap>,
}

#[derive(Debug, Default)]
struct ClientMap {
    clients: HashMap<IpAddr, ClientState>,
    /// Size after the last sweep of idle entries.
    swept_at: usize,
}

#[derive(Debug, Default)]
struct ClientState {
    open: usize,
    /// GCRA theoretical arrival time of the next connection, ms on
    /// [`clock_ms`]; the entry outlives its connections until then, so
    /// closing and reopening does not reset the pace.
    tat_ms: u64,
}

fn clock_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_millis() as u64
}

/// One counted connection; uncounted on drop.
#[derive(Debug)]
pub struct ConnectionSlot {
    table: Arc<ConnectionTable>,
    client: Option<IpAddr>,
}

impl ConnectionTable {
    /// Takes a slot, or says which cap is full.
    pub fn admit(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        config: &EdgeConfig,
    ) -> Result<ConnectionSlot, Refusal> {
        self.admit_at(client, config, clock_ms())
    }

    fn admit_at(
        self: &Arc<Self>,
        client: Option<IpAddr>,
        config: &EdgeConfig,
        now_ms: u64,
    ) -> Result<ConnectionSlot, Refusal> {
        let total = self.total.fetch_add(1, Ordering::AcqRel) + 1;
        // The slot exists from here on, so every exit path uncounts it.
        let mut slot = ConnectionSlot {
            table: self.clone(),
            client: None,
        };
        if config.max_connections > 0 && total > config.max_connections {
            return Err(Refusal::ConnectionCap);
        }
        if let Some(ip) = client {
            let mut map = self.per_client.lock();
            map.sweep(now_ms);
            let state = map.clients.entry(ip).or_default();
            if config.max_connections_per_client > 0
                && state.open >= config.max_connections_per_client
            {
                return Err(Refusal::ClientConnectionCap);
            }
            if config.max_connection_rate_per_client > 0 {
                let interval = (1000 / u64::from(config.max_connection_rate_per_client)).max(1);
                let next = state.tat_ms.max(now_ms) + interval;
                if next > now_ms + 1000 {
                    return Err(Refusal::ClientConnectionRate);
                }
                state.tat_ms = next;
            }
            state.open += 1;
            slot.client = Some(ip);
        }
        Ok(slot)
    }

    pub fn total(&self) -> usize {
        self.total.load(Ordering::Acquire)
    }
}

impl ClientMap {
    /// Forgets clients without connections whose pace has run out, once
    /// the map has doubled since the last sweep (amortized O(1)).
    fn sweep(&mut self, now_ms: u64) {
        if self.clients.len() >= 2 * self.swept_at.max(512) {
            self.clients.retain(|_, c| c.open > 0 || c.tat_ms > now_ms);
            self.swept_at = self.clients.len();
        }
    }
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        self.table.total.fetch_sub(1, Ordering::AcqRel);
        if let Some(ip) = self.client {
            let mut map = self.table.per_client.lock();
            if let Some(c) = map.clients.get_mut(&ip) {
                c.open -= 1;
                if c.open == 0 && c.tat_ms <= clock_ms() {
                    map.clients.remove(&ip);
                }
            }
        }
    }
}

/// The listener's application: takes a connection slot, then hands the
/// connection to the HTTP/2 application or to the HTTP/1 engine.
pub struct EdgeApp<A> {
    h2: Arc<A>,
    h1: Arc<H1Engine>,
    config: EdgeConfig,
    table: Arc<ConnectionTable>,
    metrics: crate::plane::metrics::Metrics,
    h2c: bool,
    /// When set, what tells connections to finish (keep-alive off, HTTP/2
    /// GOAWAY) instead of the listener's stop: a replica handing its
    /// addresses over drains its connections while it still accepts.
    drain: Option<ShutdownWatch>,
    /// What takes an HTTPS connection's slot at accept and bounds its
    /// handshake, and on the shared HTTPS listener looks at it before the
    /// handshake (TLS passthrough by SNI, crate::plane::passthrough): set
    /// on every application serving HTTPS, the shared listener's and the
    /// one of Gateways' own addresses. Their TLS connections arrive
    /// counted.
    pre_tls: Option<pingora_core::listeners::PreTlsCallback>,
}

// Every field is shared: a clone is the same application (the plain
// listener's accept loop and the HTTPS listener's Pingora service of one
// thread hold one each).
impl<A> Clone for EdgeApp<A> {
    fn clone(&self) -> Self {
        EdgeApp {
            h2: self.h2.clone(),
            h1: self.h1.clone(),
            config: self.config.clone(),
            table: self.table.clone(),
            metrics: self.metrics.clone(),
            h2c: self.h2c,
            drain: self.drain.clone(),
            pre_tls: self.pre_tls.clone(),
        }
    }
}

impl<A> std::fmt::Debug for EdgeApp<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EdgeApp")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl<A> EdgeApp<A> {
    pub fn new(
        h2: A,
        h1: H1Engine,
        config: EdgeConfig,
        metrics: crate::plane::metrics::Metrics,
        h2c: bool,
    ) -> Self {
        EdgeApp {
            h2: Arc::new(h2),
            h1: Arc::new(h1),
            config,
            table: Arc::new(ConnectionTable::default()),
            metrics,
            h2c,
            drain: None,
            pre_tls: None,
        }
    }

    /// Connections to this application's HTTPS listener meet `pre_tls`
    /// before their handshake (crate::plane::serving sets it on the
    /// listener).
    pub fn with_pre_tls(mut self, pre_tls: pingora_core::listeners::PreTlsCallback) -> Self {
        self.pre_tls = Some(pre_tls);
        self
    }

    pub fn pre_tls(&self) -> Option<pingora_core::listeners::PreTlsCallback> {
        self.pre_tls.clone()
    }

    /// Takes slots under this application's caps for connections served
    /// beside it (TLS passthrough).
    pub fn slots(&self) -> Slots {
        Slots {
            table: self.table.clone(),
            config: self.config.clone(),
            metrics: self.metrics.clone(),
        }
    }

    /// Connections finish on `drain` rather than on the listener's stop.
    pub fn with_drain(mut self, drain: ShutdownWatch) -> Self {
        self.drain = Some(drain);
        self
    }

    /// A connection slot under the caps, or `None` (counted): the
    /// connection is then closed at once, the cheapest answer to a flood
    /// (the client sees a reset, not a 503 it would have to read).
    fn admit(&self, client: Option<IpAddr>) -> Option<ConnectionSlot> {
        self.table
            .admit(client, &self.config)
            .map_err(|refusal| self.metrics.refused(refusal))
            .ok()
    }

    /// The signal this connection finishes on.
    fn finish_on(&self, listener_stop: &ShutdownWatch) -> ShutdownWatch {
        self.drain.clone().unwrap_or_else(|| listener_stop.clone())
    }

    /// The application of another serving thread (crate::plane::serving):
    /// its own engine and HTTP/2 application, but the same connection
    /// table, so the caps hold for the replica, not per thread.
    pub fn sibling(&self, h2: A, h1: H1Engine) -> Self {
        EdgeApp {
            h2: Arc::new(h2),
            h1: Arc::new(h1),
            config: self.config.clone(),
            table: self.table.clone(),
            metrics: self.metrics.clone(),
            h2c: self.h2c,
            drain: self.drain.clone(),
            pre_tls: None,
        }
    }
}

/// The caps of an [`EdgeApp`] (the same table), for connections counted
/// before they reach it: an HTTPS connection takes its slot at accept,
/// before its handshake, and holds it for its whole life, terminated or
/// passed through (crate::plane::passthrough).
#[derive(Clone, Debug)]
pub struct Slots {
    table: Arc<ConnectionTable>,
    config: EdgeConfig,
    metrics: crate::plane::metrics::Metrics,
}

impl Slots {
    /// A slot, or `None` (counted as [`EdgeApp`]'s own refusals are).
    pub fn admit(&self, client: Option<IpAddr>) -> Option<ConnectionSlot> {
        self.table
            .admit(client, &self.config)
            .map_err(|refusal| self.metrics.refused(refusal))
            .ok()
    }

    /// The header-read deadline, which bounds a TLS handshake (and a
    /// ClientHello's read) from accept too.
    pub fn header_read_timeout(&self) -> std::time::Duration {
        self.config.header_read_timeout
    }

    pub fn metrics(&self) -> &crate::plane::metrics::Metrics {
        &self.metrics
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl EdgeApp<crate::plane::h2::H2Server> {
    /// One plain-HTTP connection from teapot's own accept loop
    /// (crate::plane::serving): the same slot and the same split as
    /// [`ServerApp::process_new`], on the bare socket. The HTTP/1 engine
    /// gets the socket itself, so an idle keep-alive connection waits on
    /// its readiness holding no buffer; and gets it not yet in the event
    /// loop ([`ClientTcp`]), so a connection that never waits on its
    /// client (a new connection per request) never joins it. `tcp` is
    /// non-blocking.
    ///
    /// `client` is the address `accept` returned, `local` the listener's
    /// when it is a single address (no system call per connection for
    /// either); a wildcard listener asks the socket.
    ///
    /// The slot is taken before the connection's task exists, so a refused
    /// connection costs no task; and not an `async fn`, so the task holds
    /// the connection's state once rather than beside the arguments it was
    /// built from (docs/capacity.md, "What the proxy keeps").
    pub fn serve_tcp(
        self: Arc<Self>,
        tcp: std::net::TcpStream,
        client: SocketAddr,
        local: Option<SocketAddr>,
        stop: &ShutdownWatch,
    ) -> Option<impl Future<Output = ()> + Send + 'static> {
        use crate::plane::socket_group::canonical;
        let client = canonical(client);
        let slot = self.admit(Some(client.ip()))?;
        let shutdown = self.finish_on(stop);
        // TCP_NODELAY comes from the listener (crate::plane::serving).
        let info = ConnInfo {
            client: Some(client),
            local: local.or_else(|| tcp.local_addr().ok()).map(canonical),
            ..ConnInfo::default()
        };
        // Cleartext HTTP/2 (prior knowledge) is told from HTTP/1 by the
        // client's first bytes, as nginx's `http2 on` does on a plain
        // listener. The listener defers accept until the client has sent
        // (crate::plane::serving), so the bytes are almost always there: a
        // peek without waiting decides.
        let sniffed = if self.h2c {
            sniff_now(&tcp)
        } else {
            Sniff::Http1
        };
        if sniffed == Sniff::Http1 {
            // The engine's future is the task: the slot rides in a closure
            // beside it, not in an `async` block that would hold the
            // engine's future a second time while awaiting it.
            let connection = self.h1.serve(ClientTcp::new(tcp), info, shutdown);
            return Some(Either::Left(connection.map(move |_| drop(slot))));
        }
        // Boxed: the rare connection that must wait for its first bytes,
        // and every HTTP/2 one, which holds more than this anyway.
        let deadline = tokio::time::Instant::now() + self.config.header_read_timeout;
        Some(Either::Right(Box::pin(async move {
            let _slot = slot;
            let tcp = match sniffed {
                Sniff::Http2 => tcp,
                _ => match sniff_wait(tcp, deadline).await {
                    Ok((Sniff::Http2, tcp)) => tcp,
                    Ok((Sniff::Http1, tcp)) => {
                        self.h1.serve(ClientTcp::new(tcp), info, shutdown).await;
                        return;
                    }
                    // The header timeout, as for an HTTP/1 head: counted,
                    // then closed, so a scrape after the client saw the
                    // close finds it counted.
                    Ok((Sniff::Undecided, tcp)) => {
                        self.metrics.refused(Refusal::HeaderTimeout);
                        drop(tcp);
                        return;
                    }
                    Err(_) => return,
                },
            };
            // The HTTP/2 server takes tokio's stream; its handshake (the
            // preface and SETTINGS) ends by the same deadline.
            let Ok(tcp) = TcpStream::from_std(tcp) else {
                return;
            };
            self.h2.serve_by(tcp, &info, shutdown, deadline).await;
        })))
    }
}

/// What a plain connection's first bytes say it speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sniff {
    /// The whole HTTP/2 connection preface.
    Http2,
    /// Anything else, the end of the stream or an error included (the
    /// HTTP/1 engine answers or closes it as it would have).
    Http1,
    /// A beginning of the preface, or nothing yet: more bytes decide.
    Undecided,
}

/// What `peeked` (the first bytes, at most the preface's length) says.
fn sniff(peeked: &[u8]) -> Sniff {
    if peeked.len() == H2_PREFACE.len() && peeked == H2_PREFACE {
        Sniff::Http2
    } else if peeked.is_empty() || !H2_PREFACE.starts_with(peeked) {
        Sniff::Http1
    } else {
        Sniff::Undecided
    }
}

/// [`sniff`] of what the socket holds now, without waiting: nothing yet
/// is [`Sniff::Undecided`].
fn sniff_now(tcp: &std::net::TcpStream) -> Sniff {
    let mut buf = [0u8; H2_PREFACE.len()];
    match tcp.peek(&mut buf) {
        Ok(n) => sniff(&buf[..n]),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Sniff::Undecided,
        Err(_) => Sniff::Http1,
    }
}

/// Waits (in the event loop) until the first bytes decide, at most the
/// preface's length, or until `deadline`, which is
/// [`Sniff::Undecided`]; the socket comes back out of the event loop, for
/// the HTTP/1 engine's direct reads (`teapot_h1::ClientTcp`), and at the
/// deadline still open, for the caller to count the refusal before the
/// client sees it. A readiness that brought no new byte is cleared, so a
/// client that sends the preface a byte at a time wakes this once per
/// byte, not in a loop.
async fn sniff_wait(
    tcp: std::net::TcpStream,
    deadline: tokio::time::Instant,
) -> std::io::Result<(Sniff, std::net::TcpStream)> {
    use tokio::io::unix::AsyncFd;
    // `AsyncFd::new` is deprecated because a `T` could close or swap its
    // descriptor while registered; an owned `TcpStream` never does, and
    // leaves the event loop with `into_inner` (as the plain listener in
    // crate::plane::serving).
    #[allow(deprecated)]
    let fd = AsyncFd::new(tcp)?;
    let mut buf = [0u8; H2_PREFACE.len()];
    let mut late = std::pin::pin!(tokio::time::sleep_until(deadline));
    loop {
        let readable = fd.readable();
        let mut ready = tokio::select! {
            biased;
            ready = readable => ready?,
            () = late.as_mut() => return Ok((Sniff::Undecided, fd.into_inner())),
        };
        let peeked = ready.try_io(|tcp| {
            let n = tcp.get_ref().peek(&mut buf)?;
            match sniff(&buf[..n]) {
                Sniff::Undecided => Err(std::io::ErrorKind::WouldBlock.into()),
                decided => Ok(decided),
            }
        });
        match peeked {
            Ok(Ok(decided)) => return Ok((decided, fd.into_inner())),
            Ok(Err(e)) => return Err(e),
            Err(_would_block) => continue,
        }
    }
}

#[async_trait]
impl<A> ServerApp for EdgeApp<A>
where
    A: ServerApp + Send + Sync + 'static,
{
    async fn process_new(
        self: &Arc<Self>,
        mut stream: Stream,
        shutdown: &ShutdownWatch,
    ) -> Option<Stream> {
        let tls = stream.get_ssl_digest().is_some();
        // Behind the pre-TLS hook a TLS connection took its slot at accept
        // and holds it in its stream (crate::plane::passthrough): counted
        // once, and while it handshook.
        let _slot = if tls && self.pre_tls.is_some() {
            None
        } else {
            let client = stream
                .get_socket_digest()
                .and_then(|d| crate::plane::socket_group::inet(d.peer_addr()))
                .map(|a| a.ip());
            Some(self.admit(client)?)
        };
        let h2 = if tls {
            matches!(
                stream.selected_alpn_proto(),
                Some(pingora_core::protocols::ALPN::H2)
            )
        } else if self.h2c {
            let mut buf = [0u8; H2_PREFACE.len()];
            matches!(stream.try_peek(&mut buf).await, Ok(true)) && buf == H2_PREFACE
        } else {
            false
        };
        if h2 {
            // HTTP/2 has its own idle timeout; its streams are futures of
            // the connection's task (crate::plane::h2).
            return self.h2.process_new(stream, &self.finish_on(shutdown)).await;
        }
        let info = crate::plane::h1::conn_info(&stream);
        let stream = ListenerStream::new(stream);
        // Boxed: inline, the engine's state would size this future, and
        // with it every HTTP/2 connection's, which never uses it.
        Box::pin(self.h1.serve(stream, info, self.finish_on(shutdown))).await;
        None
    }

    async fn cleanup(&self) {
        self.h2.cleanup().await;
    }
}

/// Pingora's TLS stream under the listener.
type TlsOverTcp =
    pingora_core::protocols::tls::TlsStream<pingora_core::protocols::l4::stream::Stream>;

/// A connection from Pingora's listener, for the HTTP/1 engine: over TLS
/// it tells the engine when the socket under the TLS layer is readable,
/// so an idle HTTPS connection waits for its next request holding no read
/// buffer, as a plain one does (docs/capacity.md, "What the proxy keeps").
struct ListenerStream {
    stream: Stream,
    tls: bool,
}

impl ListenerStream {
    fn new(stream: Stream) -> Self {
        let tls = Self::tls_of(&stream).is_some();
        ListenerStream { stream, tls }
    }

    fn tls_of(stream: &Stream) -> Option<&TlsOverTcp> {
        let io: &dyn pingora_core::protocols::IO = &**stream;
        io.as_any().downcast_ref::<TlsOverTcp>()
    }
}

impl tokio::io::AsyncRead for ListenerStream {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for ListenerStream {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> std::task::Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

impl teapot_h1::ClientStream for ListenerStream {
    fn tells_readable(&self) -> bool {
        self.tls
    }

    fn poll_readable(
        &mut self,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        match Self::tls_of(&self.stream) {
            Some(tls) => tls.poll_read_ready(cx),
            None => std::task::Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_caps_count_and_release() {
        let table = Arc::new(ConnectionTable::default());
        let config = EdgeConfig {
            max_connections: 3,
            max_connections_per_client: 2,
            ..EdgeConfig::default()
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let s1 = table.admit(Some(a), &config).unwrap();
        let _s2 = table.admit(Some(a), &config).unwrap();
        assert_eq!(
            table.admit(Some(a), &config).unwrap_err(),
            Refusal::ClientConnectionCap
        );
        let _s3 = table.admit(Some(b), &config).unwrap();
        assert_eq!(
            table.admit(Some(b), &config).unwrap_err(),
            Refusal::ConnectionCap
        );
        drop(s1);
        assert_eq!(table.total(), 2);
        let _s4 = table.admit(Some(a), &config).unwrap();
        assert_eq!(table.total(), 3);
    }

    /// An HTTPS connection from Pingora's listener tells the HTTP/1 engine
    /// when its next request arrives, so the engine waits for it holding
    /// no read buffer (before, it waited in a read with a 2 KiB buffer).
    #[tokio::test]
    async fn a_tls_connection_tells_the_engine_when_it_is_readable() {
        use teapot_h1::ClientStream;
        use teapot_testkit::client::{Connection, Proto, Request, Transport};
        use tokio::io::AsyncReadExt;

        let _ = rustls::crypto::ring::default_provider().install_default();
        let cert = teapot_model::certificate::TlsCertificate::self_signed_default().unwrap();
        let resolver = crate::plane::tls::SniResolver::new(Default::default(), cert.key);
        let config = rustls::ServerConfig::builder()
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(resolver));
        let acceptor = pingora_core::listeners::tls::Acceptor::from_server_config(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (send, sent) = tokio::sync::oneshot::channel::<()>();
        let client = tokio::spawn(async move {
            let transport = Transport::tls_insecure("teapot.invalid");
            let mut c = Connection::open(addr, &transport, Proto::Http1)
                .await
                .unwrap();
            // The request goes out only once the server has looked.
            let _ = sent.await;
            let _ = c.send(&Request::get("teapot.invalid", "/")).await;
        });
        let (tcp, _) = listener.accept().await.unwrap();
        let l4 = pingora_core::protocols::l4::stream::Stream::from(tcp);
        let tls: Stream = Box::new(acceptor.tls_handshake(l4).await.unwrap());
        let mut stream = ListenerStream::new(tls);
        assert!(stream.tells_readable());
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        assert!(
            stream.poll_readable(&mut cx).is_pending(),
            "nothing sent yet"
        );
        send.send(()).unwrap();
        std::future::poll_fn(|cx| stream.poll_readable(cx))
            .await
            .unwrap();
        let mut head = [0u8; 4];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"GET ");
        drop(stream);
        client.await.unwrap();
    }

    #[test]
    fn new_connections_per_client_are_paced() {
        let table = Arc::new(ConnectionTable::default());
        let config = EdgeConfig {
            max_connection_rate_per_client: 10,
            ..EdgeConfig::default()
        };
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let t = 50_000;
        // A second's burst, even when each connection closes at once.
        for _ in 0..10 {
            drop(table.admit_at(Some(a), &config, t).unwrap());
        }
        assert_eq!(
            table.admit_at(Some(a), &config, t).unwrap_err(),
            Refusal::ClientConnectionRate
        );
        assert!(table.admit_at(Some(b), &config, t).is_ok(), "per client");
        assert!(
            table.admit_at(Some(a), &config, t + 100).is_ok(),
            "one interval later"
        );
        assert_eq!(table.total(), 0, "every slot released");
    }

    /// A plain connection's task is what an idle keep-alive connection
    /// costs (docs/capacity.md, "What the proxy keeps"): the engine's
    /// state once, the slot beside it, nothing sized for a request.
    #[tokio::test]
    async fn a_plain_connection_task_is_small() {
        use crate::compile::snapshot::Snapshot;
        use crate::plane::metrics::Metrics;
        use crate::plane::proxy::Router;

        let snapshots = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let router = Router::new(snapshots, Metrics::new().unwrap(), Default::default());
        let app = Arc::new(EdgeApp::new(
            crate::plane::h2::H2Server::new(router.clone()),
            crate::plane::h1::engine(router, 8),
            EdgeConfig::default(),
            Metrics::new().unwrap(),
            false,
        ));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let tcp = tcp.into_std().unwrap();
        let (_stop, stop) = tokio::sync::watch::channel(false);
        let task = app.serve_tcp(tcp, addr, Some(addr), &stop).unwrap();
        let size = std::mem::size_of_val(&task);
        assert!(size <= 900, "a plain connection's future is {size} bytes");
    }

    /// The first bytes decide as soon as they can: any byte off the
    /// preface is HTTP/1 (a request shorter than the preface is not
    /// waited on), the whole preface HTTP/2, a beginning of it waits.
    #[test]
    fn the_first_bytes_tell_http2_from_http1() {
        assert_eq!(sniff(H2_PREFACE), Sniff::Http2);
        assert_eq!(sniff(b"GET / HTTP/1.0\r\n\r\n"), Sniff::Http1);
        assert_eq!(sniff(b"PO"), Sniff::Http1);
        assert_eq!(sniff(b"PRI * HTTP/1.1\r\n"), Sniff::Http1);
        assert_eq!(sniff(b""), Sniff::Http1, "the end of the stream");
        for n in 1..H2_PREFACE.len() {
            assert_eq!(sniff(&H2_PREFACE[..n]), Sniff::Undecided, "{n}");
        }
    }

    /// A client that sends the preface in pieces is served HTTP/2 once it
    /// is whole; one whose bytes are not the preface goes to HTTP/1 with
    /// every byte still unread.
    #[tokio::test]
    async fn a_preface_in_pieces_is_waited_for() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let mut client = TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        let tcp = tcp.into_std().unwrap();
        assert_eq!(sniff_now(&tcp), Sniff::Undecided, "nothing sent yet");
        client.write_all(&H2_PREFACE[..5]).await.unwrap();
        let never = tokio::time::Instant::now() + std::time::Duration::from_secs(3600);
        let waiting = tokio::spawn(sniff_wait(tcp, never));
        tokio::task::yield_now().await;
        client.write_all(&H2_PREFACE[5..]).await.unwrap();
        let (decided, tcp) = waiting.await.unwrap().unwrap();
        assert_eq!(decided, Sniff::Http2);
        let mut buf = [0u8; 24];
        assert_eq!(tcp.peek(&mut buf).unwrap(), 24, "nothing consumed");

        let mut client = TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        client.write_all(b"PRI").await.unwrap();
        let waiting = tokio::spawn(sniff_wait(tcp.into_std().unwrap(), never));
        tokio::task::yield_now().await;
        client.write_all(b"NT / HTTP/1.1\r\n").await.unwrap();
        let (decided, tcp) = waiting.await.unwrap().unwrap();
        assert_eq!(decided, Sniff::Http1);
        assert_eq!(tcp.peek(&mut buf).unwrap(), 18);
    }

    /// A beginning of the preface and then silence: at the deadline the
    /// socket comes back undecided and still open (the client has seen no
    /// close yet), so the header timeout is counted before the client can
    /// see it and a scrape after the close agrees with it.
    #[tokio::test]
    async fn a_stalled_preface_comes_back_open_at_the_deadline() {
        use tokio::io::AsyncWriteExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        client.write_all(&H2_PREFACE[..16]).await.unwrap();
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_millis(50);
        let (decided, tcp) = sniff_wait(tcp.into_std().unwrap(), deadline).await.unwrap();
        assert_eq!(decided, Sniff::Undecided);
        assert!(tokio::time::Instant::now() >= deadline);
        let client = client.into_std().unwrap();
        let mut buf = [0u8; 1];
        let open = client.peek(&mut buf).map_err(|e| e.kind());
        assert_eq!(open, Err(std::io::ErrorKind::WouldBlock), "closed already");
        // Closed with the preface unread: a reset rather than an end.
        drop(tcp);
        client.set_nonblocking(false).unwrap();
        let closed = client.peek(&mut buf).map_err(|e| e.kind());
        assert!(
            matches!(closed, Ok(0) | Err(std::io::ErrorKind::ConnectionReset)),
            "{closed:?}"
        );
    }
}
