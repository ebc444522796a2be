//! HTTP/3 (`teapot proxy --http3`): a QUIC endpoint (quinn) on UDP at the
//! HTTPS listener's address and port, HTTP/3 framing by the h3 crate, and
//! every request handed to the HTTP/2 server's exchange
//! ([`H2Server::exchange`]): the same front-door checks, routing
//! decision, policies, error pages, backend paths (HTTP/1, h2c, gRPC,
//! TLS backends), access log, metrics and request IDs. Only the two
//! halves of the stream differ (crate::plane::h3_stream).
//!
//! TLS is rustls with the TCP path's certificate resolver
//! ([`SniResolver`]: ACME, wildcards, tenant Secrets by SNI), TLS 1.3
//! only (QUIC has no other), ALPN `h3`, and no 0-RTT: early data can be
//! replayed, and the pipeline does not tell replayable requests apart.
//! Hosts with a client-certificate setting are not verified over QUIC:
//! their requests get the 421 of a connection checked under another
//! setting (crate::plane::client_cert::check), so the client retries
//! over TCP.
//!
//! An endpoint on every serving thread (crate::plane::serving), each
//! with a socket of one `SO_REUSEPORT` group at the HTTPS address: its
//! connections are tasks of that thread, beside its TCP connections. A
//! QUIC connection outlives its 4-tuple, so the kernel hands each packet
//! to the thread its connection ID names, not by the 4-tuple's hash
//! (crate::plane::quic_threads): a client whose NAT rebinds stays on its
//! thread. The handshake count behind the Retry threshold is the
//! replica's.
//!
//! A handshake flood from spoofable addresses is met with QUIC address
//! validation: once [`QuicOptions::retry_above`] handshakes are in flight,
//! a client that has not proven its address gets a Retry (stateless: no
//! connection, no slot, no per-client pace spent) and is admitted when it
//! comes back with the token. The reset and token keys are the fleet's
//! when `--quic-key-file` is given (crate::plane::quic_keys), so another
//! replica's stateless reset is believed and its Retry tokens are good.

use std::net::SocketAddr;
use std::pin::pin;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use futures::stream::FuturesUnordered;
use h3::error::Code;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE};
use teapot_h1::ConnInfo;
use tokio::sync::{oneshot, watch};

use crate::plane::ServeError;
use crate::plane::accept::Slots;
use crate::plane::edge::EdgeConfig;
use crate::plane::h2::H2Server;
use crate::plane::h2_stream::{Client, STREAM_WINDOW};
use crate::plane::h3_stream::{H3Recv, H3Send, read_ahead, within};
use crate::plane::proxy::Router;
use crate::plane::quic_keys::QuicKeys;
use crate::plane::tls::SniResolver;

/// The uni streams an HTTP/3 client needs: its control stream and the
/// QPACK encoder and decoder streams (RFC 9114 §6.2, RFC 9204 §4.2).
const CLIENT_UNI_STREAMS: u32 = 3;

/// What quinn may hold of a connection's answers not yet acknowledged:
/// a few streams' windows, as HTTP/2 holds one window per stream.
const SEND_WINDOW: u64 = 4 * STREAM_WINDOW as u64;

/// After GOAWAY, how long a connection without requests waits for its
/// client to close it before teapot does: enough for the last answer's
/// acknowledgement (closing discards what the client has not
/// acknowledged).
const CLOSE_AFTER_GOAWAY: Duration = Duration::from_secs(1);

/// h3's `shutdown(n)` names in GOAWAY the stream `n` after the last one
/// accepted, and a client takes every stream from the one named on as
/// not processed (RFC 9114 §5.2): 1 names the first stream not accepted,
/// so the accepted ones (which are answered) are not retried elsewhere.
const GOAWAY_AFTER_ACCEPTED: usize = 1;

/// HTTP/3's connection error codes (RFC 9114 §8.1) teapot closes with.
const H3_NO_ERROR: u32 = 0x100;
const H3_GENERAL_PROTOCOL_ERROR: u32 = 0x101;

/// Handshakes in flight before unvalidated clients get a Retry: a busy
/// replica's real handshakes stay below it (a few hundred handshakes a
/// second at a 100 ms RTT hold a few dozen), and a spoofed flood holds at
/// most this many connection slots for `--header-read-timeout` each.
pub const DEFAULT_RETRY_ABOVE: usize = 256;

/// The HTTP/3 endpoint's settings beyond the TCP path's
/// (docs/reference.md, "HTTP/3").
#[derive(Clone, Debug)]
pub struct QuicOptions {
    /// Handshakes in flight past which a client must prove its address
    /// with a Retry round trip first (`--http3-retry-above`; 0: always).
    pub retry_above: usize,
    /// The fleet's reset and token keys (`--quic-key-file`); `None`:
    /// this process's own.
    pub keys: Option<QuicKeys>,
    /// `teapot_http3_handshakes_total{result}` ([`handshake_counter`]);
    /// `None`: not counted.
    pub handshakes: Option<prometheus::IntCounterVec>,
}

impl Default for QuicOptions {
    fn default() -> QuicOptions {
        QuicOptions {
            retry_above: DEFAULT_RETRY_ABOVE,
            keys: None,
            handshakes: None,
        }
    }
}

/// What became of each QUIC connection attempt, by `result`: `retry` (a
/// stateless Retry asked the client to prove its address first: the
/// handshake-flood defence at work), `refused` (no connection slot, or
/// its address over its pace), `failed` and `timeout` (the handshake),
/// `accepted` (HTTP/3 served on it). A rising `retry` with few `accepted`
/// is a flood; `refused` is the connection caps.
pub fn handshake_counter() -> Result<prometheus::IntCounterVec, prometheus::Error> {
    prometheus::IntCounterVec::new(
        prometheus::Opts::new(
            "http3_handshakes_total",
            "QUIC connection attempts on the HTTP/3 endpoint, by what became of them",
        ),
        &["result"],
    )
}

/// The rustls and QUIC settings of the HTTP/3 endpoint (docs/reference.md,
/// "HTTP/3"; docs/edge.md).
pub fn server_config(
    sni: Arc<SniResolver>,
    edge: &EdgeConfig,
    options: &QuicOptions,
) -> Result<quinn::ServerConfig, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider)
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| ServeError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_cert_resolver(sni);
    tls.alpn_protocols = vec![b"h3".to_vec()];
    tls.max_early_data_size = 0;
    let quic = quinn::crypto::rustls::QuicServerConfig::try_from(tls)
        .map_err(|e| ServeError::Tls(e.to_string()))?;
    let mut server = match &options.keys {
        Some(keys) => quinn::ServerConfig::new(Arc::new(quic), keys.token_key()),
        None => quinn::ServerConfig::with_crypto(Arc::new(quic)),
    };
    server.transport_config(Arc::new(transport(edge)?));
    Ok(server)
}

/// Streams and windows as on HTTP/2: `max_concurrent_streams` request
/// streams, a 64 KiB window per stream and for the whole connection (what
/// one client connection makes teapot hold), the HTTP/2 idle timeout; no
/// keep-alive pings from teapot (an idle connection costs no CPU).
fn transport(edge: &EdgeConfig) -> Result<quinn::TransportConfig, ServeError> {
    let mut t = quinn::TransportConfig::default();
    let idle = quinn::IdleTimeout::try_from(edge.h2.idle_timeout)
        .map_err(|e| ServeError::Tls(format!("HTTP/3 idle timeout: {e}")))?;
    t.max_concurrent_bidi_streams(edge.h2.max_concurrent_streams.into())
        .max_concurrent_uni_streams(CLIENT_UNI_STREAMS.into())
        .stream_receive_window(STREAM_WINDOW.into())
        .receive_window(STREAM_WINDOW.into())
        .send_window(SEND_WINDOW)
        .max_idle_timeout(Some(idle))
        .keep_alive_interval(None);
    Ok(t)
}

/// HTTP/3 on the serving threads: what stops it. Each thread's part
/// ([`QuicThread`]) runs on that thread.
pub struct Http3 {
    endpoints: Vec<quinn::Endpoint>,
    done: Vec<oneshot::Receiver<()>>,
}

impl std::fmt::Debug for Http3 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http3")
            .field("endpoints", &self.endpoints.len())
            .finish_non_exhaustive()
    }
}

/// What the endpoints of one replica share: the Retry threshold counts
/// the replica's handshakes in flight, not one thread's.
struct Shared {
    handshaking: AtomicUsize,
    retry_above: usize,
    handshakes: Option<prometheus::IntCounterVec>,
}

/// One serving thread's HTTP/3 endpoint, before its thread runs it: its
/// socket of the group (crate::plane::quic_threads) and the settings,
/// with connection IDs that name the thread.
pub struct QuicThread {
    socket: std::net::UdpSocket,
    endpoint_config: quinn::EndpointConfig,
    server_config: quinn::ServerConfig,
    router: Router,
    slots: Slots,
    shared: Arc<Shared>,
    started: std::sync::mpsc::Sender<Result<quinn::Endpoint, ServeError>>,
    done: oneshot::Sender<()>,
}

impl std::fmt::Debug for QuicThread {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicThread")
            .field("local", &self.socket.local_addr().ok())
            .finish_non_exhaustive()
    }
}

/// Until every thread's endpoint runs (or one could not start).
pub struct Http3Starting {
    started: std::sync::mpsc::Receiver<Result<quinn::Endpoint, ServeError>>,
    /// One per endpoint: its drain is over.
    done: Vec<oneshot::Receiver<()>>,
}

impl Http3 {
    /// One part per socket (`sockets[i]` for serving thread `i`). Each
    /// part serves once its thread runs [`QuicThread::serve`];
    /// [`Http3Starting::started`] waits for all of them.
    pub fn per_thread(
        sockets: Vec<std::net::UdpSocket>,
        config: quinn::ServerConfig,
        router: Router,
        slots: Slots,
        options: &QuicOptions,
    ) -> Result<(Http3Starting, Vec<QuicThread>), ServeError> {
        let keys = match &options.keys {
            Some(keys) => keys.clone(),
            None => QuicKeys::random()?,
        };
        let shared = Arc::new(Shared {
            handshaking: AtomicUsize::new(0),
            retry_above: options.retry_above,
            handshakes: options.handshakes.clone(),
        });
        // quinn-udp sends a burst of packets in one call (GSO) and takes
        // coalesced ones (GRO) where the kernel has them (Linux 4.18 and
        // 5.0); 1 segment means one packet per system call. The group's
        // sockets are alike: the first tells.
        if let Some(first) = sockets.first() {
            let udp = quinn::udp::UdpSocketState::new(first.into())?;
            tracing::info!(
                local = %first.local_addr()?,
                endpoints = sockets.len(),
                gso_segments = udp.max_gso_segments(),
                gro_segments = udp.gro_segments(),
                "http3 endpoint"
            );
        }
        let (started, starting) = std::sync::mpsc::channel();
        let mut done = Vec::with_capacity(sockets.len());
        let mut threads = Vec::with_capacity(sockets.len());
        for (i, socket) in sockets.into_iter().enumerate() {
            let index = u8::try_from(i).map_err(|_| {
                ServeError::Tls(format!(
                    "HTTP/3 serves at most {} threads",
                    crate::plane::quic_threads::MAX_QUIC_THREADS
                ))
            })?;
            let (done_tx, done_rx) = oneshot::channel();
            done.push(done_rx);
            threads.push(QuicThread {
                socket,
                endpoint_config: keys.endpoint_config(index),
                server_config: config.clone(),
                router: router.clone(),
                slots: slots.clone(),
                shared: shared.clone(),
                started: started.clone(),
                done: done_tx,
            });
        }
        let starting = Http3Starting {
            started: starting,
            done,
        };
        Ok((starting, threads))
    }

    /// After the grace period: waits (up to `wait`) for the drained
    /// connections to close on their own (closing one discards answers
    /// its client has not acknowledged yet), then closes what is left.
    /// Before the serving threads end, whose runtimes run the endpoints.
    pub async fn finish(self, wait: Duration) {
        let all_done = futures::future::join_all(self.done);
        let mut all_done = pin!(all_done);
        if tokio::time::timeout(wait, &mut all_done).await.is_ok() {
            return;
        }
        for endpoint in &self.endpoints {
            endpoint.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
        }
        if tokio::time::timeout(wait, all_done).await.is_err() {
            tracing::warn!("the HTTP/3 endpoints did not stop in time");
        }
    }
}

impl Http3Starting {
    /// Once the serving threads run: every endpoint's start, or the first
    /// error.
    pub fn started(self) -> Result<Http3, ServeError> {
        let mut endpoints = Vec::with_capacity(self.done.len());
        for _ in 0..self.done.len() {
            let endpoint = self
                .started
                .recv()
                .map_err(|_| ServeError::Io(std::io::Error::other("a serving thread ended")))??;
            endpoints.push(endpoint);
        }
        Ok(Http3 {
            endpoints,
            done: self.done,
        })
    }
}

impl QuicThread {
    /// The endpoint on this thread's runtime (a `LocalSet`: connections
    /// are tasks of this thread) until `stop`, then its drain.
    pub async fn serve(self, stop: watch::Receiver<bool>) {
        let QuicThread {
            socket,
            endpoint_config,
            server_config,
            router,
            slots,
            shared,
            started,
            done,
        } = self;
        let local = match socket.local_addr() {
            Ok(local) => local,
            Err(e) => {
                let _ = started.send(Err(ServeError::Io(e)));
                return;
            }
        };
        let endpoint = match quinn::Endpoint::new(
            endpoint_config,
            Some(server_config),
            socket,
            Arc::new(quinn::TokioRuntime),
        ) {
            Ok(endpoint) => endpoint,
            Err(e) => {
                let _ = started.send(Err(ServeError::Io(e)));
                return;
            }
        };
        let _ = started.send(Ok(endpoint.clone()));
        drop(started);
        let app = Rc::new(App::new(router, slots, local, shared));
        accept(&endpoint, app, stop).await;
        endpoint.wait_idle().await;
        let _ = done.send(());
    }
}

/// Accepts connections until `stop`, within the connection caps.
async fn accept(endpoint: &quinn::Endpoint, app: Rc<App>, mut stop: watch::Receiver<bool>) {
    loop {
        if *stop.borrow() {
            break;
        }
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => {
                    // Before any slot or pace is spent on it: under a
                    // flood, an address not proven is asked to prove
                    // itself, which costs teapot one stateless packet.
                    if app.must_validate(&incoming) {
                        if let Err(e) = incoming.retry() {
                            e.into_incoming().ignore();
                        }
                        app.count("retry");
                        continue;
                    }
                    // The TCP listeners' caps and pace per client
                    // address, counted with their connections.
                    let client = incoming.remote_address().ip().to_canonical();
                    let Some(slot) = app.slots.admit(Some(client)) else {
                        incoming.refuse();
                        app.count("refused");
                        continue;
                    };
                    let handshake = Handshaking::start(&app.shared);
                    let app = app.clone();
                    let stop = stop.clone();
                    tokio::task::spawn_local(async move {
                        app.connection(incoming, handshake, stop).await;
                        drop(slot);
                    });
                }
                None => return,
            },
            _ = stop.changed() => {}
        }
    }
    // Those open drain; a new one is refused at once (CONNECTION_REFUSED,
    // where an endpoint without a server config would answer with a
    // stateless reset its client cannot tell from noise, and wait for its
    // timeout), so its client goes elsewhere.
    loop {
        tokio::select! {
            incoming = endpoint.accept() => match incoming {
                Some(incoming) => incoming.refuse(),
                None => return,
            },
            () = endpoint.wait_idle() => return,
        }
    }
}

/// One handshake in flight, counted until it ends either way.
struct Handshaking(Arc<Shared>);

impl Handshaking {
    fn start(shared: &Arc<Shared>) -> Handshaking {
        shared.handshaking.fetch_add(1, Ordering::Relaxed);
        Handshaking(shared.clone())
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.handshaking.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Per serving endpoint: the exchange and the connection caps.
struct App {
    h2: H2Server,
    router: Router,
    slots: Slots,
    local: SocketAddr,
    alpn: Arc<str>,
    /// The replica's handshakes in flight, its Retry threshold and count.
    shared: Arc<Shared>,
}

impl App {
    fn new(router: Router, slots: Slots, local: SocketAddr, shared: Arc<Shared>) -> App {
        App {
            h2: H2Server::new(router.clone()),
            router,
            slots,
            local,
            alpn: Arc::from("h3"),
            shared,
        }
    }

    /// One connection attempt's end in `teapot_http3_handshakes_total`.
    fn count(&self, result: &str) {
        if let Some(c) = &self.shared.handshakes {
            c.with_label_values(&[result]).inc();
        }
    }

    /// Whether `incoming` gets a Retry: its address is not proven, and
    /// enough handshakes are in flight to suspect a flood.
    fn must_validate(&self, incoming: &quinn::Incoming) -> bool {
        must_validate(
            self.shared.handshaking.load(Ordering::Relaxed),
            self.shared.retry_above,
            incoming.remote_address_validated(),
            incoming.may_retry(),
        )
    }

    /// One QUIC connection: its HTTP/3 requests until the client closes
    /// it, it idles past QUIC's idle timeout, or `stop` drains it.
    async fn connection(
        &self,
        incoming: quinn::Incoming,
        handshaking: Handshaking,
        mut stop: watch::Receiver<bool>,
    ) {
        let handshake = self.router.edge.header_read_timeout;
        let conn = match incoming.accept() {
            Ok(connecting) => match tokio::time::timeout(handshake, connecting).await {
                Ok(Ok(conn)) => conn,
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "QUIC handshake failed");
                    self.count("failed");
                    return;
                }
                Err(_) => {
                    tracing::debug!("QUIC handshake timed out");
                    self.count("timeout");
                    return;
                }
            },
            Err(e) => {
                tracing::debug!(error = %e, "QUIC connection refused");
                self.count("failed");
                return;
            }
        };
        let sni = conn
            .handshake_data()
            .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
            .and_then(|d| d.server_name)
            .map(Arc::from);
        let info = ConnInfo {
            client: Some(crate::plane::socket_group::canonical(conn.remote_address())),
            local: Some(self.local),
            tls: true,
            tls_version: Some("TLSv1.3"),
            sni,
            alpn: Some(self.alpn.clone()),
            tls_facts: None,
        };
        let mut builder = h3::server::builder();
        // No grease: h3 would end every response with a reserved frame,
        // and clients that skip unknown frames without seeing the
        // stream's end there (aioquic) never see the response finish.
        builder
            .max_field_section_size(self.router.edge.h2.max_header_list_size.into())
            .send_grease(false);
        let built = builder.build::<_, Bytes>(h3_quinn::Connection::new(conn.clone()));
        let mut h3 = match tokio::time::timeout(handshake, built).await {
            Ok(Ok(h3)) => h3,
            _ => {
                conn.close(quinn::VarInt::from_u32(H3_GENERAL_PROTOCOL_ERROR), b"");
                self.count("failed");
                return;
            }
        };
        self.count("accepted");
        drop(handshaking);
        let mut streams = FuturesUnordered::new();
        let mut draining = *stop.borrow();
        if draining {
            let _ = h3.shutdown(GOAWAY_AFTER_ACCEPTED).await;
        }
        let mut accepting = !draining;
        let mut closing = pin!(tokio::time::sleep(CLOSE_AFTER_GOAWAY));
        // Made once, not once a turn of the loop (a turn per stream
        // accepted and per stream answered): each `closed()` takes the
        // connection's lock and joins a wait list.
        let mut closed = pin!(conn.closed());
        let mut stopped = pin!(stop.changed());
        loop {
            tokio::select! {
                biased;
                Some(()) = streams.next(), if !streams.is_empty() => {
                    if draining && streams.is_empty() {
                        closing.as_mut().reset(tokio::time::Instant::now() + CLOSE_AFTER_GOAWAY);
                    }
                }
                next = h3.accept(), if accepting => match next {
                    // Boxed: FuturesUnordered would otherwise copy the
                    // whole (large) stream future into its task, which
                    // costs more than the box (callgrind, benches/http.md).
                    Ok(Some(resolver)) => streams.push(Box::pin(self.stream(resolver, &info))),
                    Ok(None) => accepting = false,
                    Err(e) => {
                        tracing::debug!(error = %e, "HTTP/3 connection ended");
                        accepting = false;
                    }
                },
                _ = &mut stopped, if !draining => {
                    draining = true;
                    // Every stream below the GOAWAY's ID was accepted
                    // already and is answered; one at or above it is
                    // left unaccepted, as the client was told.
                    accepting = false;
                    let _ = h3.shutdown(GOAWAY_AFTER_ACCEPTED).await;
                    closing.as_mut().reset(tokio::time::Instant::now() + CLOSE_AFTER_GOAWAY);
                }
                _ = &mut closed => break,
                () = &mut closing, if draining && streams.is_empty() => break,
            }
            // Drained, the connection waits for its client to close it or
            // for `closing`: the last answers' acknowledgements.
            if !accepting && !draining && streams.is_empty() {
                break;
            }
        }
        while streams.next().await.is_some() {}
        conn.close(quinn::VarInt::from_u32(H3_NO_ERROR), b"");
    }

    /// One request stream: its head (within the header timeout), then the
    /// HTTP/2 server's exchange over its two halves.
    async fn stream(
        &self,
        resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
        conn: &ConnInfo,
    ) {
        let timeout = self.router.edge.header_read_timeout;
        let (req, stream) = match request_head(resolver, timeout).await {
            Ok(Ok(resolved)) => resolved,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "HTTP/3 request refused");
                return;
            }
            Err(_) => return,
        };
        let (parts, ()) = req.into_parts();
        let (mut send, mut recv) = stream.split();
        if crate::plane::h2::malformed(&parts) {
            send.stop_stream(Code::H3_MESSAGE_ERROR);
            recv.stop_sending(Code::H3_MESSAGE_ERROR);
            return;
        }
        let (first, ended) = match body_known(&parts) {
            Some(empty) => (None, empty),
            None => match read_ahead(&mut recv, timeout).await {
                Ok(read) => read,
                Err(_) => return,
            },
        };
        let client = Client::h3(
            H3Recv::new(recv, first, ended),
            H3Send::new(send),
            self.router.options.write_timeout,
        );
        self.h2.exchange(&parts, client, conn).await;
    }
}

/// A stream's head within `timeout`. A function of its own, so that the
/// head's future is held in this small one and not in the stream's (whose
/// exchange would then be laid out beside it, and every stream future
/// would be that much larger to build and move).
async fn request_head(
    resolver: h3::server::RequestResolver<h3_quinn::Connection, Bytes>,
    timeout: Duration,
) -> Result<
    Result<
        (
            http::Request<()>,
            h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>,
        ),
        h3::error::StreamError,
    >,
    tokio::time::error::Elapsed,
> {
    within!(timeout, resolver.resolve_request())
}

/// [`App::must_validate`]'s rule: a Retry only for an address not proven
/// (a client that came back with a Retry token is admitted whatever the
/// count), only when quinn can still ask (a Retry is asked once), and
/// only past `above` handshakes in flight.
fn must_validate(in_flight: usize, above: usize, validated: bool, may_retry: bool) -> bool {
    !validated && may_retry && in_flight >= above
}

/// Whether a request's head tells if it has a body (`Some(true)`: none):
/// a Content-Length does, and a gRPC call always has one (a bidirectional
/// call's client may wait for the answer's head before its first
/// message, so it is not read ahead). Otherwise the body is read ahead
/// for its first piece or its end.
fn body_known(parts: &http::request::Parts) -> Option<bool> {
    if let Some(length) = parts.headers.get(CONTENT_LENGTH) {
        return Some(length.as_bytes() == b"0");
    }
    let grpc = parts
        .headers
        .get(CONTENT_TYPE)
        .is_some_and(|t| t.as_bytes().starts_with(b"application/grpc"));
    grpc.then_some(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parts(headers: &[(&str, &str)]) -> http::request::Parts {
        let mut req = http::Request::builder().uri("https://a.example/");
        for (n, v) in headers {
            req = req.header(*n, *v);
        }
        req.body(()).unwrap().into_parts().0
    }

    #[test]
    fn a_body_is_read_ahead_only_when_the_head_does_not_tell() {
        assert_eq!(body_known(&parts(&[("content-length", "0")])), Some(true));
        assert_eq!(body_known(&parts(&[("content-length", "5")])), Some(false));
        assert_eq!(
            body_known(&parts(&[("content-type", "application/grpc+proto")])),
            Some(false)
        );
        assert_eq!(body_known(&parts(&[])), None);
    }

    #[test]
    fn only_unproven_addresses_past_the_threshold_are_asked_to_retry() {
        assert!(!must_validate(3, 4, false, true));
        assert!(must_validate(4, 4, false, true));
        assert!(!must_validate(9, 4, true, true), "a token came back");
        assert!(!must_validate(9, 4, false, false), "asked once already");
        assert!(must_validate(0, 0, false, true), "0: always");
    }

    /// The kernel's `major.minor`, on Linux.
    fn kernel() -> Option<(u32, u32)> {
        let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").ok()?;
        let mut parts = release.trim().split(['.', '-']);
        Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
    }

    #[test]
    fn the_endpoint_socket_batches_with_gso_and_gro_where_the_kernel_has_them() {
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let udp = quinn::udp::UdpSocketState::new((&socket).into()).unwrap();
        let Some(version) = kernel() else {
            return;
        };
        if version >= (4, 18) {
            assert!(udp.max_gso_segments() > 1, "no GSO on Linux {version:?}");
        }
        if version >= (5, 0) {
            assert!(udp.gro_segments() > 1, "no GRO on Linux {version:?}");
        }
    }

    #[test]
    fn the_endpoint_is_configured_without_keep_alive_pings() {
        use crate::compile::snapshot::Snapshot;
        let snapshots = Arc::new(arc_swap::ArcSwap::from_pointee(Snapshot::default()));
        let key = teapot_model::certificate::TlsCertificate::self_signed_default()
            .unwrap()
            .key;
        let sni = Arc::new(SniResolver::new(snapshots, key));
        let edge = EdgeConfig::default();
        assert!(server_config(sni.clone(), &edge, &QuicOptions::default()).is_ok());
        let keys = QuicOptions {
            keys: Some(QuicKeys::from_secret(b"a fleet secret of 32 bytes, more").unwrap()),
            ..QuicOptions::default()
        };
        assert!(server_config(sni, &edge, &keys).is_ok());
        let t = transport(&edge).unwrap();
        let debug = format!("{t:?}");
        assert!(debug.contains("keep_alive_interval: None"), "{debug}");
    }
}
