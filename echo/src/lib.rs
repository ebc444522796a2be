//! The echo backend of `teapot echo` and `teapot demo`: it answers every
//! request with its identity and the request it saw. The conformance suite
//! and the integration tests use the same server (through `teapot-testkit`),
//! so what the demo shows is what the tests check.
//!
//! The server is the echo backend of the Kubernetes ingress conformance
//! suite, in Rust. Every request is answered with a JSON description of what arrived, so a
//! test can see exactly what the proxy forwarded (path, Host, headers,
//! protocol) and which backend answered (namespace, ingress, service, pod).
//! The contract follows `images/echoserver/echoserver.go` of
//! kubernetes-sigs/ingress-controller-conformance:
//!
//! ```json
//! {"path": "/a?b=c", "host": "foo.bar.com", "method": "GET", "proto": "HTTP/1.1",
//!  "headers": {"User-Agent": ["Go-http-client/1.1"]},
//!  "namespace": "ns", "ingress": "ing", "service": "svc", "pod": "pod-1",
//!  "bodyLength": 0}
//! ```
//!
//! `bodyLength` is our addition. Like Go's `net/http`, `headers` leaves out
//! `Host` (reported as `host`) and `Transfer-Encoding`, and uses Go's canonical
//! header spelling (`X-Forwarded-For`).
//!
//! Test hooks (not in the Go server):
//! - `X-Echo-Delay-Ms: N` waits N ms (at most 30 000) before answering, to keep
//!   a request in flight across a reload or a graceful shutdown;
//! - `X-Echo-Status: NNN` answers with that status (200..=599), body unchanged;
//! - `Upgrade: websocket` gets a real handshake, then every text or binary
//!   message is echoed back until the client closes;
//!
//! [`EchoServer::start_echo_basic`] adds the hooks of the Gateway API
//! conformance echo, `echo-basic` (kubernetes-sigs/gateway-api-conformance-images):
//! - `X-Echo-Set-Header: Name:value,Other:value` sets those response headers
//!   (a name given twice gets its values joined with `,`; entries that are no
//!   valid header are ignored);
//! - a `delay` query parameter (a Go duration: `1s`, `500ms`, `1m30s`; at most
//!   [`MAX_DELAY`]) waits before answering; an unparsable one is a 500 with
//!   `{"message": ...}`, as echo-basic answers.
//!
//! A connection that arrived through TLS (a terminator in front of the
//! server hands it over with [`Intake::serve`]) adds echo-basic's `tls`
//! object ([`TlsFacts`]): `version`, `peerCertificates` (PEM, when the
//! client presented any), `serverName`, `negotiatedProtocol` (when ALPN
//! settled one) and `cipherSuite`; a plain connection has none, as
//! echo-basic leaves `tls` out of a plain request's JSON.
//!
//! [`EchoServer::targets`] lists the request targets served (the last
//! [`TARGET_LOG_LEN`]), as the Gateway API conformance suite reads them from
//! echo-basic's log to see a mirrored request arrive.
//!
//! `/health` answers `200 OK` as text.
//!
//! [`certs`] makes the demo's self-signed certificate and its
//! `kubernetes.io/tls` Secret; the test CA of `teapot-testkit` issues its
//! leaves with the same parameters.

pub mod certs;
mod retry;

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::header::{self, HeaderMap, HeaderValue};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Upper bound for `X-Echo-Delay-Ms`, so a typo cannot hang a test run.
pub const MAX_DELAY: Duration = Duration::from_secs(30);

/// Test hook: wait this many milliseconds before answering.
pub const DELAY_HEADER: &str = "x-echo-delay-ms";

/// Test hook: answer with this status code.
pub const STATUS_HEADER: &str = "x-echo-status";

/// Test hook (echo-basic's): set these `Name:value` response headers.
pub const SET_HEADER: &str = "x-echo-set-header";

/// How many request targets [`EchoServer::targets`] remembers.
pub const TARGET_LOG_LEN: usize = 1024;

/// What a server adds to the ingress echo's contract.
#[derive(Debug, Default)]
struct Extras {
    /// echo-basic's hooks (`X-Echo-Set-Header`, `?delay=`, the retry
    /// simulation under `/retry/`).
    echo_basic: bool,
    targets: TargetLog,
    retries: retry::Retries,
}

/// The last [`TARGET_LOG_LEN`] request targets, oldest first.
#[derive(Debug, Default)]
struct TargetLog(std::sync::Mutex<std::collections::VecDeque<String>>);

impl TargetLog {
    fn record(&self, target: &str) {
        // A poisoned lock only means a panicking writer; the log stays usable.
        let mut log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if log.len() == TARGET_LOG_LEN {
            log.pop_front();
        }
        log.push_back(target.to_owned());
    }

    fn snapshot(&self) -> Vec<String> {
        let log = self.0.lock().unwrap_or_else(|e| e.into_inner());
        log.iter().cloned().collect()
    }
}

/// Who this echo instance claims to be (the suite's NAMESPACE/INGRESS_NAME/SERVICE_NAME/POD_NAME env).
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct EchoIdentity {
    pub namespace: String,
    pub ingress: String,
    pub service: String,
    pub pod: String,
}

impl EchoIdentity {
    /// Shorthand for tests that name all four parts.
    pub fn new(namespace: &str, ingress: &str, service: &str, pod: &str) -> EchoIdentity {
        EchoIdentity {
            namespace: namespace.to_owned(),
            ingress: ingress.to_owned(),
            service: service.to_owned(),
            pod: pod.to_owned(),
        }
    }
}

/// What echo-basic reports of the TLS connection a request arrived on
/// (its `TLSAssertions`, the JSON's `tls`), as the terminator that
/// accepted the connection saw the handshake.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct TlsFacts {
    /// `TLSv1.3`, `TLSv1.2` (echo-basic's spelling).
    pub version: String,
    /// The client's certificates, leaf first, each as Go's `pem.Encode`
    /// writes it ([`certificate_pem`]).
    #[serde(rename = "peerCertificates", skip_serializing_if = "Vec::is_empty")]
    pub peer_certificates: Vec<String>,
    /// The SNI the client sent (empty without one).
    #[serde(rename = "serverName")]
    pub server_name: String,
    /// The protocol ALPN settled, empty when none was.
    #[serde(
        rename = "negotiatedProtocol",
        skip_serializing_if = "String::is_empty"
    )]
    pub negotiated_protocol: String,
    /// Go's `tls.CipherSuiteName`: the IANA name (`TLS_AES_128_GCM_SHA256`).
    #[serde(rename = "cipherSuite")]
    pub cipher_suite: String,
}

/// Go's `pem.Encode` of a `CERTIFICATE` block: base64 in lines of 64,
/// each ending in `\n`, between the BEGIN and END lines. echo-basic
/// reports peer certificates so, and the conformance suite compares them
/// with a Secret's `tls.crt` as text.
pub fn certificate_pem(der: &[u8]) -> String {
    use base64::Engine as _;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        // Base64 is ASCII, so every chunk is valid UTF-8.
        out.push_str(&String::from_utf8_lossy(line));
        out.push('\n');
    }
    out.push_str("-----END CERTIFICATE-----\n");
    out
}

/// An echo server running in a background task on `127.0.0.1:<random port>`.
///
/// Dropping it shuts it down like [`EchoServer::stop`], without waiting.
#[derive(Debug)]
pub struct EchoServer {
    addr: SocketAddr,
    identity: EchoIdentity,
    requests: Arc<AtomicU64>,
    extras: Arc<Extras>,
    /// The connections' state, for [`Intake`]: weak, so that a terminator
    /// holding an intake does not keep a stopped server's state alive.
    shared: Weak<Shared>,
    // Dropping the sender also resolves the receiver, which is what makes a
    // plain drop of the server a shutdown.
    shutdown: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl EchoServer {
    /// Binds 127.0.0.1:0 and serves in a spawned tokio task until stop()/drop.
    pub async fn start(identity: EchoIdentity) -> std::io::Result<EchoServer> {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), identity).await
    }

    /// Like [`EchoServer::start`] on another local address: a tenant's
    /// endpoints may never be loopback, so tests of Tenant namespaces
    /// serve on one of the machine's own interface addresses.
    pub async fn start_on(
        ip: std::net::IpAddr,
        identity: EchoIdentity,
    ) -> std::io::Result<EchoServer> {
        Self::start_with((ip, 0).into(), identity, Extras::default()).await
    }

    /// Like [`EchoServer::start`], with echo-basic's hooks (module docs).
    pub async fn start_echo_basic(identity: EchoIdentity) -> std::io::Result<EchoServer> {
        let extras = Extras {
            echo_basic: true,
            ..Extras::default()
        };
        Self::start_with((std::net::Ipv4Addr::LOCALHOST, 0).into(), identity, extras).await
    }

    /// Like [`EchoServer::start_echo_basic`] at `addr`: the Gateway API
    /// conformance runner's pods each listen on an address of their own at
    /// echo-basic's port, as an EndpointSlice a test writes names them.
    pub async fn start_echo_basic_at(
        addr: SocketAddr,
        identity: EchoIdentity,
    ) -> std::io::Result<EchoServer> {
        let extras = Extras {
            echo_basic: true,
            ..Extras::default()
        };
        Self::start_with(addr, identity, extras).await
    }

    async fn start_with(
        addr: SocketAddr,
        identity: EchoIdentity,
        extras: Extras,
    ) -> std::io::Result<EchoServer> {
        let listener = TcpListener::bind(addr).await?;
        let addr = listener.local_addr()?;
        let requests = Arc::new(AtomicU64::new(0));
        let extras = Arc::new(extras);
        let (shutdown, stopped) = oneshot::channel::<()>();
        let (shared, control) =
            Shared::with_extras(identity.clone(), requests.clone(), extras.clone());
        let weak = Arc::downgrade(&shared);
        let task = tokio::spawn(serve(listener, shared, control, async move {
            // Ok (stop) and Err (sender dropped) both mean "shut down".
            let _ = stopped.await;
        }));
        Ok(EchoServer {
            addr,
            identity,
            requests,
            extras,
            shared: weak,
            shutdown,
            task,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn identity(&self) -> &EchoIdentity {
        &self.identity
    }

    /// Number of requests served so far (all connections).
    ///
    /// A request counts as soon as it arrives, so a delayed request that is
    /// still in flight is already included.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::Relaxed)
    }

    /// The request targets (path and query, as reported in `path`) of the
    /// last [`TARGET_LOG_LEN`] requests, oldest first.
    pub fn targets(&self) -> Vec<String> {
        self.extras.targets.snapshot()
    }

    /// Where connections accepted elsewhere join this server, answered as
    /// its own (the same identity, hooks, request count and target log).
    pub fn intake(&self) -> Intake {
        Intake(self.shared.clone())
    }

    /// Graceful stop: stop accepting, let in-flight requests finish, close
    /// idle connections and WebSockets, then return.
    pub async fn stop(self) {
        let _ = self.shutdown.send(());
        match self.task.await {
            Ok(Ok(())) => {}
            Ok(Err(err)) => tracing::warn!(%err, "echo server ended with an error"),
            Err(err) => tracing::warn!(%err, "echo server task failed"),
        }
    }
}

/// mini-redis style entry point so callers can bind themselves.
///
/// Serves until `shutdown` completes, then shuts down gracefully and returns
/// once every connection (and WebSocket) is closed.
pub async fn run(
    listener: TcpListener,
    identity: EchoIdentity,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    let (shared, control) = Shared::new(identity, Arc::new(AtomicU64::new(0)));
    serve(listener, shared, control, shutdown).await
}

/// Hands connections accepted elsewhere to an [`EchoServer`]: a TLS
/// terminator in front of it passes each connection on with what the
/// handshake settled, which the echo reports as echo-basic's `tls`.
#[derive(Clone, Debug)]
pub struct Intake(Weak<Shared>);

impl Intake {
    /// Serves `io` until it closes or the server shuts down; a connection
    /// handed over after the server stopped is closed at once.
    pub async fn serve<IO>(&self, io: IO, tls: Option<TlsFacts>)
    where
        IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        if let Some(shared) = self.0.upgrade() {
            serve_with_tls(io, shared, tls.map(Arc::new)).await;
        }
    }
}

/// State every connection and WebSocket task shares.
///
/// Public for callers that accept connections themselves (a TLS listener in
/// front of the echo service) and hand them to [`serve_connection`].
pub struct Shared {
    identity: EchoIdentity,
    requests: Arc<AtomicU64>,
    extras: Arc<Extras>,
    /// Turns `true` once the server shuts down.
    shutdown: watch::Receiver<bool>,
    /// Never used to send: the serve loop learns that the last task finished
    /// when every `Arc<Shared>` (and with it this sender) is gone and its
    /// receiver yields `None` (the mini-redis `shutdown_complete` pattern).
    _alive: mpsc::Sender<()>,
}

/// The handles that control a set of connections sharing one [`Shared`].
///
/// Dropping it without shutting down leaves the connections serving.
pub struct Control {
    shutdown: watch::Sender<bool>,
    all_closed: mpsc::Receiver<()>,
}

impl Shared {
    /// State for connections answering as `identity`, counting into `requests`.
    pub fn new(identity: EchoIdentity, requests: Arc<AtomicU64>) -> (Arc<Shared>, Control) {
        Shared::with_extras(identity, requests, Arc::new(Extras::default()))
    }

    fn with_extras(
        identity: EchoIdentity,
        requests: Arc<AtomicU64>,
        extras: Arc<Extras>,
    ) -> (Arc<Shared>, Control) {
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (alive_tx, alive_rx) = mpsc::channel(1);
        let shared = Arc::new(Shared {
            identity,
            requests,
            extras,
            shutdown: shutdown_rx,
            _alive: alive_tx,
        });
        let control = Control {
            shutdown: shutdown_tx,
            all_closed: alive_rx,
        };
        (shared, control)
    }

    /// Resolves once the server shuts down.
    async fn shutting_down(&self) {
        let mut rx = self.shutdown.clone();
        if rx.wait_for(|down| *down).await.is_err() {
            // The sender is gone without ever saying "shut down": the owner
            // (a test) let it go, so keep serving until the task is dropped.
            std::future::pending::<()>().await;
        }
    }
}

async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut control: Control,
    shutdown: impl Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // Small responses: don't let Nagle delay them.
                    let _ = stream.set_nodelay(true);
                    tokio::spawn(serve_connection(stream, shared.clone()));
                }
                Err(err) => {
                    // Accept errors (EMFILE, ECONNABORTED, ...) are transient
                    // for a server; back off briefly instead of spinning.
                    tracing::warn!(%err, "echo server accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            },
        }
    }
    // Stop accepting first, so clients see "connection refused" rather than a
    // connection that is never served.
    drop(listener);
    let _ = control.shutdown.send(true);
    drop(shared);
    // `None` once every connection and WebSocket task has dropped its Arc.
    let _ = control.all_closed.recv().await;
    Ok(())
}

/// Serves one accepted connection (plain TCP, or TLS in tests) until it closes
/// or the server shuts down, in which case in-flight requests may finish.
pub async fn serve_connection<IO>(io: IO, shared: Arc<Shared>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    serve_with_tls(io, shared, None).await;
}

/// [`serve_connection`] for a connection whose requests report `tls`.
async fn serve_with_tls<IO>(io: IO, shared: Arc<Shared>, tls: Option<Arc<TlsFacts>>)
where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = {
        let shared = shared.clone();
        service_fn(move |req| {
            let (shared, tls) = (shared.clone(), tls.clone());
            async move {
                if let Some(answer) = retry::simulate(&req, &shared).await {
                    return answer;
                }
                Ok::<_, retry::Dropped>(handle(req, shared, tls).await)
            }
        })
    };
    // `auto` sniffs the HTTP/2 preface, so one port speaks HTTP/1.1 and
    // cleartext HTTP/2 (prior knowledge), whichever the proxy is configured to use.
    let builder = auto::Builder::new(TokioExecutor::new());
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    tokio::pin!(conn);
    tokio::select! {
        result = conn.as_mut() => {
            if let Err(err) = result {
                tracing::debug!(%err, "echo connection ended with an error");
            }
        }
        () = shared.shutting_down() => {
            conn.as_mut().graceful_shutdown();
            if let Err(err) = conn.await {
                tracing::debug!(%err, "echo connection ended with an error during shutdown");
            }
        }
    }
}

async fn handle(
    mut req: Request<Incoming>,
    shared: Arc<Shared>,
    tls: Option<Arc<TlsFacts>>,
) -> Response<Full<Bytes>> {
    shared.requests.fetch_add(1, Ordering::Relaxed);

    if req.version() == Version::HTTP_11 && wants_websocket(req.headers()) {
        return websocket_handshake(&mut req, shared);
    }
    // Path only, any method: that is what Go's mux does with "/health".
    if req.uri().path() == "/health" {
        return text(StatusCode::OK, "OK");
    }

    let status = match hook_value(req.headers(), STATUS_HEADER) {
        Ok(None) => StatusCode::OK,
        Ok(Some(code)) => match u16::try_from(code)
            .ok()
            .and_then(|c| StatusCode::from_u16(c).ok())
        {
            Some(status) if (200..=599).contains(&status.as_u16()) => status,
            // 1xx would not be a final answer, so it is refused like garbage.
            _ => return text(StatusCode::BAD_REQUEST, "X-Echo-Status must be 200..=599"),
        },
        Err(msg) => return text(StatusCode::BAD_REQUEST, &msg),
    };
    // Logged on arrival, as echo-basic logs "Echoing back request made to".
    let target = request_target(req.version(), req.uri());
    shared.extras.targets.record(&target);
    let mut delay = match hook_value(req.headers(), DELAY_HEADER) {
        Ok(ms) => Duration::from_millis(ms.unwrap_or(0)).min(MAX_DELAY),
        Err(msg) => return text(StatusCode::BAD_REQUEST, &msg),
    };
    if shared.extras.echo_basic
        && let Some(value) = query_value(req.uri().query().unwrap_or_default(), "delay")
    {
        match go_duration(&value) {
            Ok(wait) => delay = delay.max(wait.min(MAX_DELAY)),
            Err(msg) => return echo_basic_error(&msg),
        }
    }

    let (parts, mut body) = req.into_parts();
    // Count the body frame by frame instead of buffering it: only its length
    // is reported.
    let mut body_length: u64 = 0;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(frame) => {
                if let Some(data) = frame.data_ref() {
                    body_length += data.len() as u64;
                }
            }
            Err(err) => {
                tracing::debug!(%err, "echo request body failed");
                return text(StatusCode::BAD_REQUEST, "request body could not be read");
            }
        }
    }

    if !delay.is_zero() {
        tokio::time::sleep(delay).await;
    }

    let reply = EchoReply {
        path: target,
        host: request_host(&parts),
        method: parts.method.as_str(),
        proto: proto_name(parts.version),
        headers: go_headers(&parts.headers),
        identity: &shared.identity,
        tls: tls.as_deref(),
        body_length,
    };
    let body = match serde_json::to_vec(&reply) {
        Ok(body) => body,
        Err(err) => return text(StatusCode::INTERNAL_SERVER_ERROR, &format!("json: {err}")),
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if shared.extras.echo_basic {
        set_requested_headers(&parts.headers, response.headers_mut());
    }
    response
}

/// The first value of `key` in a query string, percent-decoding `%XX`.
fn query_value(query: &str, key: &str) -> Option<String> {
    query.split('&').find_map(|pair| {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        (k == key).then(|| percent_decode(v))
    })
}

fn percent_decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let hex = |i: usize| bytes.get(i).and_then(|b| (*b as char).to_digit(16));
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits: at most 0xff.
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            (b'+', _, _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Go's `time.ParseDuration` for the non-negative durations a test asks
/// for: decimal numbers with units `ns`, `us`/`µs`, `ms`, `s`, `m`, `h`,
/// concatenated (`1m30s`); `0` alone is allowed.
fn go_duration(text: &str) -> Result<Duration, String> {
    let invalid = || format!("time: invalid duration \"{text}\"");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    let mut rest = text;
    let mut total = 0f64;
    if rest.is_empty() {
        return Err(invalid());
    }
    while !rest.is_empty() {
        let number_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("time: missing unit in duration \"{text}\""))?;
        let number: f64 = rest[..number_len].parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let seconds = match &rest[..unit_len] {
            "ns" => 1e-9,
            "us" | "µs" | "μs" => 1e-6,
            "ms" => 1e-3,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            unit => {
                return Err(format!(
                    "time: unknown unit \"{unit}\" in duration \"{text}\""
                ));
            }
        };
        total += number * seconds;
        rest = &rest[unit_len..];
    }
    Duration::try_from_secs_f64(total).map_err(|_| invalid())
}

/// echo-basic's `processError`: a 500 with `{"message": ...}`.
fn echo_basic_error(message: &str) -> Response<Full<Bytes>> {
    let body = serde_json::json!({ "message": message }).to_string();
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// echo-basic's `X-Echo-Set-Header`: every `Name:value` entry of every such
/// header becomes a response header; a repeated name gets `,value` appended
/// to its first value. Entries that are no valid header are skipped.
fn set_requested_headers(request: &HeaderMap, response: &mut HeaderMap) {
    for list in request.get_all(SET_HEADER) {
        let Ok(list) = list.to_str() else { continue };
        for entry in list.split(',') {
            let (name, value) = entry.trim().split_once(':').unwrap_or((entry.trim(), ""));
            let Ok(name) = header::HeaderName::from_bytes(name.trim().as_bytes()) else {
                continue;
            };
            let value = value.trim();
            let joined = match response.get(&name) {
                Some(first) => format!("{},{value}", String::from_utf8_lossy(first.as_bytes())),
                None => value.to_owned(),
            };
            if let Ok(joined) = HeaderValue::from_str(&joined) {
                response.insert(name, joined);
            }
        }
    }
}

/// The JSON body; field order follows the Go struct.
#[derive(Serialize)]
struct EchoReply<'a> {
    path: String,
    host: String,
    method: &'a str,
    proto: &'static str,
    headers: BTreeMap<String, Vec<String>>,
    #[serde(flatten)]
    identity: &'a EchoIdentity,
    #[serde(skip_serializing_if = "Option::is_none")]
    tls: Option<&'a TlsFacts>,
    #[serde(rename = "bodyLength")]
    body_length: u64,
}

/// Go's `r.RequestURI`: the request target as received. HTTP/1 keeps the
/// whole target (absolute-form included); for HTTP/2 it is `:path`, which
/// hyper folds into the URI next to `:scheme` and `:authority`.
fn request_target(version: Version, uri: &http::Uri) -> String {
    if version == Version::HTTP_2 {
        uri.path_and_query()
            .map_or_else(|| "/".to_owned(), |pq| pq.as_str().to_owned())
    } else {
        uri.to_string()
    }
}

/// Go's `r.Host`: the URI's authority when the target carried one
/// (absolute-form, or `:authority` in HTTP/2), else the Host header.
fn request_host(parts: &http::request::Parts) -> String {
    if let Some(authority) = parts.uri.authority() {
        return authority.as_str().to_owned();
    }
    parts
        .headers
        .get(header::HOST)
        .map(|h| String::from_utf8_lossy(h.as_bytes()).into_owned())
        .unwrap_or_default()
}

fn proto_name(version: Version) -> &'static str {
    match version {
        Version::HTTP_09 => "HTTP/0.9",
        Version::HTTP_10 => "HTTP/1.0",
        Version::HTTP_2 => "HTTP/2.0",
        Version::HTTP_3 => "HTTP/3.0",
        _ => "HTTP/1.1",
    }
}

/// The headers as Go's `r.Header` shows them: canonical names, values in
/// arrival order, without `Host` and `Transfer-Encoding` (Go moves those to
/// `r.Host` / `r.TransferEncoding`).
fn go_headers(headers: &HeaderMap) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for name in headers.keys() {
        if name == header::HOST || name == header::TRANSFER_ENCODING {
            continue;
        }
        let values = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        out.insert(canonical_header_name(name.as_str()), values);
    }
    out
}

/// Go's `textproto.CanonicalMIMEHeaderKey`: upper-case the first letter and
/// every letter after a hyphen, lower-case the rest ("x-forwarded-for" ->
/// "X-Forwarded-For"). Names hyper accepted are already valid tokens, so Go's
/// "leave invalid keys alone" rule never applies.
pub fn canonical_header_name(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// Parses a numeric test-hook header; garbage is an error so a broken test
/// fails loudly instead of silently getting the default.
fn hook_value(headers: &HeaderMap, name: &str) -> Result<Option<u64>, String> {
    let Some(value) = headers.get(name) else {
        return Ok(None);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .map(Some)
        .ok_or_else(|| format!("{name} must be a decimal number"))
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    // What Go's content sniffing picks for a plain `w.Write("OK")`.
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    response
}

fn wants_websocket(headers: &HeaderMap) -> bool {
    headers.get_all(header::UPGRADE).iter().any(|v| {
        v.to_str().is_ok_and(|v| {
            v.split(',')
                .any(|t| t.trim().eq_ignore_ascii_case("websocket"))
        })
    })
}

/// Answers 101 and echoes on the upgraded connection in a separate task,
/// because hyper only hands the socket over after the 101 has been written.
fn websocket_handshake(req: &mut Request<Incoming>, shared: Arc<Shared>) -> Response<Full<Bytes>> {
    let Some(key) = req.headers().get(header::SEC_WEBSOCKET_KEY) else {
        return text(StatusCode::BAD_REQUEST, "missing Sec-WebSocket-Key");
    };
    let accept = derive_accept_key(key.as_bytes());
    let on_upgrade = hyper::upgrade::on(req);
    tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => echo_websocket(TokioIo::new(upgraded), shared).await,
            Err(err) => tracing::debug!(%err, "websocket upgrade failed"),
        }
    });

    let mut response = Response::new(Full::default());
    *response.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let headers = response.headers_mut();
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    headers.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    match HeaderValue::from_str(&accept) {
        Ok(accept) => {
            headers.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
        }
        // Base64 is always a valid header value; keep the branch panic-free anyway.
        Err(_) => return text(StatusCode::INTERNAL_SERVER_ERROR, "bad accept key"),
    }
    response
}

async fn echo_websocket<IO>(io: IO, shared: Arc<Shared>)
where
    IO: AsyncRead + AsyncWrite + Unpin,
{
    let mut ws = WebSocketStream::from_raw_socket(io, Role::Server, None).await;
    loop {
        tokio::select! {
            message = ws.next() => match message {
                Some(Ok(message @ (Message::Text(_) | Message::Binary(_)))) => {
                    if ws.send(message).await.is_err() {
                        break;
                    }
                }
                // Pings are answered and a Close is confirmed by tungstenite
                // itself on the next poll; the stream then ends with `None`.
                Some(Ok(_)) => {}
                Some(Err(err)) => {
                    tracing::debug!(%err, "websocket echo ended with an error");
                    break;
                }
                None => break,
            },
            () = shared.shutting_down() => {
                let frame = CloseFrame { code: CloseCode::Away, reason: "echo server shutting down".into() };
                let _ = ws.close(Some(frame)).await;
                break;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_match_go() {
        assert_eq!(canonical_header_name("x-forwarded-for"), "X-Forwarded-For");
        assert_eq!(canonical_header_name("user-agent"), "User-Agent");
        assert_eq!(canonical_header_name("etag"), "Etag");
        assert_eq!(canonical_header_name("x--a"), "X--A");
    }

    #[test]
    fn set_header_hook_follows_echo_basic() {
        let mut request = HeaderMap::new();
        request.append(
            SET_HEADER,
            HeaderValue::from_static("Some-Header: a, Other:b"),
        );
        request.append(
            SET_HEADER,
            HeaderValue::from_static("some-header:c,,bad name:x"),
        );
        request.append(SET_HEADER, HeaderValue::from_static(""));
        let mut response = HeaderMap::new();
        response.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        set_requested_headers(&request, &mut response);
        assert_eq!(response["some-header"], "a,c");
        assert_eq!(response["other"], "b");
        assert_eq!(response[header::CONTENT_TYPE], "application/json");
        assert_eq!(response.len(), 3, "{response:?}");
    }

    #[test]
    fn go_durations() {
        let ms = |n| Duration::from_millis(n);
        assert_eq!(go_duration("1s").unwrap(), ms(1000));
        assert_eq!(go_duration("500ms").unwrap(), ms(500));
        assert_eq!(go_duration("1m30s").unwrap(), ms(90_000));
        assert_eq!(go_duration("1.5s").unwrap(), ms(1500));
        assert_eq!(go_duration("0").unwrap(), Duration::ZERO);
        assert_eq!(go_duration("10us").unwrap(), Duration::from_micros(10));
        for bad in ["", "1", "s", "1x", "-1s", "1..2s"] {
            assert!(go_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(
            query_value("a=1&delay=1%73&b", "delay").as_deref(),
            Some("1s")
        );
        assert_eq!(query_value("delay", "delay").as_deref(), Some(""));
        assert_eq!(query_value("x=1", "delay"), None);
        assert_eq!(percent_decode("a+b%2"), "a b%2");
    }

    /// One HTTP/1.1 request over `io`'s other end; the response's body.
    async fn request_over(intake: &Intake, tls: Option<TlsFacts>) -> serde_json::Value {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let intake = intake.clone();
        let served = tokio::spawn(async move { intake.serve(server, tls).await });
        client
            .write_all(b"GET /tls HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut response = Vec::new();
        client.read_to_end(&mut response).await.unwrap();
        served.await.unwrap();
        let response = String::from_utf8(response).unwrap();
        let (_, body) = response.split_once("\r\n\r\n").unwrap();
        serde_json::from_str(body).unwrap()
    }

    #[tokio::test]
    async fn a_handed_over_connection_reports_its_tls() {
        let echo = EchoServer::start_echo_basic(EchoIdentity::new("ns", "", "svc", "pod-1"))
            .await
            .unwrap();
        let facts = TlsFacts {
            version: "TLSv1.3".into(),
            peer_certificates: vec![certificate_pem(b"client")],
            server_name: "abc.example.com".into(),
            negotiated_protocol: String::new(),
            cipher_suite: "TLS_AES_128_GCM_SHA256".into(),
        };
        let json = request_over(&echo.intake(), Some(facts)).await;
        assert_eq!(json["pod"], "pod-1");
        assert_eq!(json["path"], "/tls");
        assert_eq!(json["tls"]["serverName"], "abc.example.com");
        assert_eq!(json["tls"]["version"], "TLSv1.3");
        assert_eq!(json["tls"]["cipherSuite"], "TLS_AES_128_GCM_SHA256");
        assert_eq!(
            json["tls"]["peerCertificates"],
            serde_json::json!([
                "-----BEGIN CERTIFICATE-----\nY2xpZW50\n-----END CERTIFICATE-----\n"
            ])
        );
        // echo-basic leaves out an unset ALPN protocol and no certificates.
        assert!(json["tls"].get("negotiatedProtocol").is_none(), "{json}");
        let plain = request_over(&echo.intake(), None).await;
        assert!(plain.get("tls").is_none(), "{plain}");
        assert_eq!(echo.targets(), vec!["/tls", "/tls"]);

        let intake = echo.intake();
        echo.stop().await;
        // A stopped server's intake closes what it is handed.
        let (mut client, server) = tokio::io::duplex(1024);
        intake.serve(server, None).await;
        let mut rest = Vec::new();
        use tokio::io::AsyncReadExt;
        client.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty());
    }

    #[test]
    fn certificates_are_encoded_as_go_writes_pem() {
        let pem = certificate_pem(&[0u8; 60]);
        let lines: Vec<&str> = pem.lines().collect();
        assert_eq!(lines[0], "-----BEGIN CERTIFICATE-----");
        assert_eq!(lines[1].len(), 64);
        assert_eq!(lines[2].len(), 16);
        assert_eq!(lines[3], "-----END CERTIFICATE-----");
        assert!(pem.ends_with("-----\n"));
    }

    #[test]
    fn target_log_keeps_the_newest() {
        let log = TargetLog::default();
        for i in 0..TARGET_LOG_LEN + 2 {
            log.record(&format!("/{i}"));
        }
        let seen = log.snapshot();
        assert_eq!(seen.len(), TARGET_LOG_LEN);
        assert_eq!(seen[0], "/2");
        assert_eq!(seen.last().map(String::as_str), Some("/1025"));
    }
}
