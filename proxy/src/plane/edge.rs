//! Front-door checks and limits (issue #9): what a client may send before
//! anything routes on it, and how much of the fleet one client may hold.
//!
//! Pingora 0.9 already refuses a lot (see docs/edge.md for the split); the
//! checks here close the rest and make the framing rules ours, so a future
//! Pingora change cannot silently loosen them:
//!
//! - [`scan_h1`] reads the raw HTTP/1 header block once, without
//!   allocating, and refuses every framing ambiguity that could make the
//!   proxy and a backend disagree on where a request ends.
//! - [`check_host`] and [`check_h2_fields`] keep one authority in charge of
//!   routing and keep control bytes out of HTTP/2 fields.
//! - [`EdgeApp`] wraps the Pingora application: connection caps (total and
//!   per client address) and a header-read deadline against slowloris,
//!   which Pingora's per-read timeout does not give.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use pingora_http::RequestHeader;
use tokio::time::Instant;

/// Limits of the front door. Every default is documented in docs/edge.md.
#[derive(Clone, Debug)]
pub struct EdgeConfig {
    /// Longest HTTP/1 request line, bytes (414 beyond).
    pub max_request_line: usize,
    /// Largest header block incl. request line, bytes (431 beyond).
    pub max_header_bytes: usize,
    /// Most header fields in one request (431 beyond).
    pub max_headers: usize,
    /// Time from accept to a complete first request header; the connection
    /// is closed without an answer when it runs out.
    pub header_read_timeout: Duration,
    /// Time from the end of one response to the complete header of the
    /// next request on a keep-alive connection.
    pub keepalive_timeout: Duration,
    /// Largest request body, bytes; the operator maximum that per-route
    /// annotations can only lower (0: no limit).
    pub max_body_size: u64,
    /// Open client connections, all addresses together (0: no limit).
    pub max_connections: usize,
    /// Open client connections from one IP address (0: no limit).
    pub max_connections_per_client: usize,
    /// How long a request over its Tenant's rate or connection limit
    /// waits for its 429/503 (crate::compile::fairness): a client looping on
    /// refusals must not be able to take the replica's CPU from other
    /// tenants.
    pub tenant_refusal_delay: Duration,
    /// New connections per second from one IP address, with a burst of
    /// one second's worth (0: no limit). Bounds how fast one client can
    /// reopen HTTP/2 connections that were closed for abuse (rapid reset,
    /// MadeYouReset), and connection churn in general.
    pub max_connection_rate_per_client: u32,
    pub h2: H2Limits,
}

/// HTTP/2 limits, handed to the h2 crate (per connection).
#[derive(Clone, Debug)]
pub struct H2Limits {
    /// SETTINGS_MAX_CONCURRENT_STREAMS; streams over it are refused
    /// (REFUSED_STREAM).
    pub max_concurrent_streams: u32,
    /// SETTINGS_MAX_HEADER_LIST_SIZE (decoded); larger header lists are
    /// answered 431 by h2.
    pub max_header_list_size: u32,
    /// Streams the client opened and reset before they were accepted
    /// (rapid reset, CVE-2023-44487); over it: GOAWAY ENHANCE_YOUR_CALM.
    pub max_pending_accept_reset_streams: usize,
    /// Streams the server had to reset because of the client's errors
    /// over the connection's life (MadeYouReset, CVE-2025-8671); over it:
    /// GOAWAY ENHANCE_YOUR_CALM.
    pub max_local_error_reset_streams: usize,
    /// An HTTP/2 connection without streams is closed after this.
    pub idle_timeout: Duration,
}

impl Default for H2Limits {
    fn default() -> Self {
        H2Limits {
            max_concurrent_streams: 100,
            max_header_list_size: 32 * 1024,
            max_pending_accept_reset_streams: 20,
            max_local_error_reset_streams: 100,
            idle_timeout: Duration::from_secs(60),
        }
    }
}

impl H2Limits {
    /// The h2 server options Pingora hands to every HTTP/2 connection.
    pub fn options(&self) -> pingora_core::protocols::http::v2::server::H2Options {
        let mut o = pingora_core::protocols::http::v2::server::default_h2_options();
        o.max_concurrent_streams(self.max_concurrent_streams)
            .max_header_list_size(self.max_header_list_size)
            .max_pending_accept_reset_streams(self.max_pending_accept_reset_streams)
            .max_local_error_reset_streams(Some(self.max_local_error_reset_streams));
        o
    }
}

impl Default for EdgeConfig {
    fn default() -> Self {
        EdgeConfig {
            max_request_line: 8 * 1024,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            keepalive_timeout: Duration::from_secs(60),
            max_body_size: 100 * 1024 * 1024,
            max_connections: 50_000,
            max_connections_per_client: 512,
            tenant_refusal_delay: Duration::from_millis(500),
            // Off: clients behind one NAT or egress proxy share an
            // address, and one limit cannot fit both them and an abuser.
            max_connection_rate_per_client: 0,
            h2: H2Limits::default(),
        }
    }
}

/// Why a request or connection was refused. The label is the `reason` of
/// `teapot_edge_refusals_total`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    BothLengths,
    TransferEncoding,
    DuplicateLength,
    BadLength,
    ObsFold,
    BareCrLf,
    ControlByte,
    SpaceBeforeColon,
    BadHeaderName,
    Http10BodyNoLength,
    H2cUpgrade,
    DuplicateHost,
    BadHost,
    RequestLineTooLong,
    HeaderTooLarge,
    TooManyHeaders,
    BodyTooLarge,
    HeaderTimeout,
    ConnectionCap,
    ClientConnectionCap,
    TenantRate,
    TenantConnections,
    ClientConnectionRate,
}

impl From<crate::compile::fairness::OverLimit> for Refusal {
    fn from(over: crate::compile::fairness::OverLimit) -> Refusal {
        match over {
            crate::compile::fairness::OverLimit::Rate => Refusal::TenantRate,
            crate::compile::fairness::OverLimit::Connections => Refusal::TenantConnections,
        }
    }
}

impl Refusal {
    pub const ALL: [Refusal; 23] = [
        Refusal::BothLengths,
        Refusal::TransferEncoding,
        Refusal::DuplicateLength,
        Refusal::BadLength,
        Refusal::ObsFold,
        Refusal::BareCrLf,
        Refusal::ControlByte,
        Refusal::SpaceBeforeColon,
        Refusal::BadHeaderName,
        Refusal::Http10BodyNoLength,
        Refusal::H2cUpgrade,
        Refusal::DuplicateHost,
        Refusal::BadHost,
        Refusal::RequestLineTooLong,
        Refusal::HeaderTooLarge,
        Refusal::TooManyHeaders,
        Refusal::BodyTooLarge,
        Refusal::HeaderTimeout,
        Refusal::ConnectionCap,
        Refusal::ClientConnectionCap,
        Refusal::TenantRate,
        Refusal::TenantConnections,
        Refusal::ClientConnectionRate,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::BothLengths => "both_lengths",
            Refusal::TransferEncoding => "transfer_encoding",
            Refusal::DuplicateLength => "duplicate_length",
            Refusal::BadLength => "bad_length",
            Refusal::ObsFold => "obs_fold",
            Refusal::BareCrLf => "bare_cr_lf",
            Refusal::ControlByte => "control_byte",
            Refusal::SpaceBeforeColon => "space_before_colon",
            Refusal::BadHeaderName => "bad_header_name",
            Refusal::Http10BodyNoLength => "http10_body_no_length",
            Refusal::H2cUpgrade => "h2c_upgrade",
            Refusal::DuplicateHost => "duplicate_host",
            Refusal::BadHost => "bad_host",
            Refusal::RequestLineTooLong => "request_line_too_long",
            Refusal::HeaderTooLarge => "header_too_large",
            Refusal::TooManyHeaders => "too_many_headers",
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::HeaderTimeout => "header_timeout",
            Refusal::ConnectionCap => "connection_cap",
            Refusal::ClientConnectionCap => "client_connection_cap",
            Refusal::TenantRate => "tenant_rate",
            Refusal::TenantConnections => "tenant_connections",
            Refusal::ClientConnectionRate => "client_connection_rate",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Refusal::RequestLineTooLong => 414,
            Refusal::HeaderTooLarge | Refusal::TooManyHeaders => 431,
            Refusal::BodyTooLarge => 413,
            Refusal::HeaderTimeout => 408,
            Refusal::ConnectionCap
            | Refusal::ClientConnectionCap
            | Refusal::TenantConnections
            | Refusal::ClientConnectionRate => 503,
            Refusal::TenantRate => 429,
            _ => 400,
        }
    }

    /// The body of the proxy's answer: status first, like the proxy's other answers.
    pub fn body(self) -> &'static str {
        match self {
            Refusal::BothLengths => "400 both Content-Length and Transfer-Encoding\n",
            Refusal::TransferEncoding => "400 Transfer-Encoding other than chunked\n",
            Refusal::DuplicateLength => "400 more than one Content-Length\n",
            Refusal::BadLength => "400 malformed Content-Length\n",
            Refusal::ObsFold => "400 obsolete line folding\n",
            Refusal::BareCrLf => "400 bare CR or LF in the header\n",
            Refusal::ControlByte => "400 control character in the header\n",
            Refusal::SpaceBeforeColon => "400 whitespace before a header colon\n",
            Refusal::BadHeaderName => "400 invalid header name\n",
            Refusal::Http10BodyNoLength => "400 HTTP/1.0 request body without Content-Length\n",
            Refusal::H2cUpgrade => "400 Upgrade: h2c is not supported\n",
            Refusal::DuplicateHost => "400 more than one Host\n",
            Refusal::BadHost => "400 invalid Host\n",
            Refusal::RequestLineTooLong => "414 request line too long\n",
            Refusal::HeaderTooLarge => "431 request header too large\n",
            Refusal::TooManyHeaders => "431 too many header fields\n",
            Refusal::BodyTooLarge => "413 request body too large\n",
            Refusal::HeaderTimeout => "408 request header timeout\n",
            Refusal::ConnectionCap | Refusal::ClientConnectionCap => "503 too many connections\n",
            Refusal::ClientConnectionRate => "503 too many new connections\n",
            Refusal::TenantRate => "429 this tenant's request rate limit is reached\n",
            Refusal::TenantConnections => "503 this tenant's connection limit is reached\n",
        }
    }
}

/// What the framing scan learned about a valid request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H1Framing {
    pub content_length: Option<u64>,
    pub chunked: bool,
}

/// Scans the raw HTTP/1 request header (request line through the blank
/// line, as Pingora read it) and refuses every framing ambiguity.
///
/// One pass, no allocation: this runs on every HTTP/1 request.
pub fn scan_h1(raw: &[u8], limits: &EdgeConfig) -> Result<H1Framing, Refusal> {
    if raw.len() > limits.max_header_bytes {
        return Err(Refusal::HeaderTooLarge);
    }
    let mut framing = H1Framing::default();
    let mut lengths = 0usize;
    let mut encodings = 0usize;
    let mut hosts = 0usize;
    let mut fields = 0usize;
    let mut http10 = false;
    let mut method_may_have_body = false;
    let mut first = true;
    let mut rest = raw;
    while !rest.is_empty() {
        // Every line must end in CRLF: a bare LF is where parsers that
        // accept it and parsers that do not disagree on the next line.
        let Some(nl) = rest.iter().position(|&b| b == b'\n') else {
            // Pingora hands over a complete block; anything after the
            // last LF would be a line without an ending.
            return Err(Refusal::BareCrLf);
        };
        if nl == 0 || rest[nl - 1] != b'\r' {
            return Err(Refusal::BareCrLf);
        }
        let line = &rest[..nl - 1];
        rest = &rest[nl + 1..];
        for &b in line {
            match b {
                b'\r' => return Err(Refusal::BareCrLf),
                b'\t' => {}
                0..=0x1f | 0x7f => return Err(Refusal::ControlByte),
                _ => {}
            }
        }
        if first {
            first = false;
            if line.len() > limits.max_request_line {
                return Err(Refusal::RequestLineTooLong);
            }
            http10 = line.ends_with(b" HTTP/1.0");
            method_may_have_body = !(line.starts_with(b"GET ")
                || line.starts_with(b"HEAD ")
                || line.starts_with(b"OPTIONS ")
                || line.starts_with(b"DELETE ")
                || line.starts_with(b"TRACE "));
            continue;
        }
        if line.is_empty() {
            // The blank line ends the block; nothing may follow it.
            if !rest.is_empty() {
                return Err(Refusal::BareCrLf);
            }
            break;
        }
        if matches!(line[0], b' ' | b'\t') {
            return Err(Refusal::ObsFold);
        }
        fields += 1;
        if fields > limits.max_headers {
            return Err(Refusal::TooManyHeaders);
        }
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            return Err(Refusal::BadHeaderName);
        };
        let name = &line[..colon];
        if name.is_empty() {
            return Err(Refusal::BadHeaderName);
        }
        if matches!(name[name.len() - 1], b' ' | b'\t') {
            return Err(Refusal::SpaceBeforeColon);
        }
        if !name.iter().all(|&b| is_tchar(b)) {
            return Err(Refusal::BadHeaderName);
        }
        let value = trim_ows(&line[colon + 1..]);
        if name.eq_ignore_ascii_case(b"content-length") {
            lengths += 1;
            if lengths > 1 {
                return Err(Refusal::DuplicateLength);
            }
            framing.content_length = Some(parse_length(value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            encodings += 1;
            // Anything but one `chunked` is a TE.TE obfuscation waiting
            // for a backend that reads the list differently.
            if encodings > 1 || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(Refusal::TransferEncoding);
            }
            framing.chunked = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if hosts > 1 {
                return Err(Refusal::DuplicateHost);
            }
            if !is_authority(value) {
                return Err(Refusal::BadHost);
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") && has_token(value, b"h2c") {
            return Err(Refusal::H2cUpgrade);
        }
    }
    if framing.chunked && framing.content_length.is_some() {
        return Err(Refusal::BothLengths);
    }
    if http10 {
        if framing.chunked {
            return Err(Refusal::TransferEncoding);
        }
        if method_may_have_body && framing.content_length.is_none() {
            return Err(Refusal::Http10BodyNoLength);
        }
    }
    Ok(framing)
}

/// RFC 9110 §5.6.2 token characters.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Digits only: no sign, no list, no whitespace inside, at most 19 digits
/// so it always fits a u64.
fn parse_length(v: &[u8]) -> Result<u64, Refusal> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Refusal::BadLength);
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

fn has_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .any(|t| trim_ows(t).eq_ignore_ascii_case(token))
}

/// A Host value that names one authority: a reg-name or IP literal with an
/// optional port. No list, no userinfo, no whitespace, no path.
fn is_authority(v: &[u8]) -> bool {
    !v.is_empty()
        && v.len() <= 255 + 6
        && v.iter().all(|&b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

/// Host rules for both protocols: exactly one `host` field, naming one
/// authority. Pingora already refuses a Host that differs from an
/// absolute-form target or `:authority`.
pub fn check_host(req: &RequestHeader) -> Result<(), Refusal> {
    let mut hosts = req.headers.get_all(http::header::HOST).iter();
    if let Some(host) = hosts.next() {
        if hosts.next().is_some() {
            return Err(Refusal::DuplicateHost);
        }
        if !is_authority(host.as_bytes()) {
            return Err(Refusal::BadHost);
        }
    }
    if let Some(a) = req.uri.authority()
        && !is_authority(a.as_str().as_bytes())
    {
        return Err(Refusal::BadHost);
    }
    Ok(())
}

/// HTTP/2 fields carry no framing of their own, but downgraded to HTTP/1.1
/// a CR, LF or NUL in a name or value would split a header upstream.
pub fn check_h2_fields(req: &RequestHeader) -> Result<(), Refusal> {
    for (name, value) in req.headers.iter() {
        if name.as_str().bytes().any(|b| !is_tchar(b)) {
            return Err(Refusal::BadHeaderName);
        }
        if value
            .as_bytes()
            .iter()
            .any(|&b| b != b'\t' && (b < 0x20 || b == 0x7f))
        {
            return Err(Refusal::ControlByte);
        }
    }
    if req.headers.contains_key(http::header::TRANSFER_ENCODING) {
        // RFC 9113 §8.2.2: connection-specific fields are malformed in HTTP/2.
        return Err(Refusal::TransferEncoding);
    }
    Ok(())
}

/// The effective body limit: the route's annotation lowers the operator
/// maximum, never raises it (0 means "no limit" on both sides).
pub fn body_limit(operator: u64, route: Option<u64>) -> u64 {
    match (operator, route) {
        (0, Some(r)) => r,
        (o, Some(r)) if r != 0 => o.min(r),
        (o, _) => o,
    }
}

// ---------------------------------------------------------------------------
// Connection-level limits.

tokio::task_local! {
    /// The state of the connection the current task serves; present only
    /// inside [`EdgeApp`] for HTTP/1 (HTTP/2 streams run in their own tasks).
    static CONNECTION: Arc<ConnState>;
}

/// Header-read deadline of one connection, in milliseconds after `origin`;
/// `u64::MAX` while a request is being served (then Pingora's read and
/// write timeouts apply).
#[derive(Debug)]
struct ConnState {
    origin: Instant,
    deadline_ms: AtomicU64,
}

impl ConnState {
    fn deadline(&self) -> Option<Instant> {
        match self.deadline_ms.load(Ordering::Acquire) {
            u64::MAX => None,
            ms => Some(self.origin + Duration::from_millis(ms)),
        }
    }

    fn set_deadline_in(&self, d: Duration) {
        let ms = (self.origin.elapsed() + d).as_millis();
        self.deadline_ms
            .store(u64::try_from(ms).unwrap_or(u64::MAX - 1), Ordering::Release);
    }
}

/// A request header was read: its deadline no longer applies.
pub fn header_complete() {
    let _ = CONNECTION.try_with(|c| c.deadline_ms.store(u64::MAX, Ordering::Release));
}

/// A response is done: the next request header must arrive within `within`.
pub fn request_done(within: Duration) {
    let _ = CONNECTION.try_with(|c| c.set_deadline_in(within));
}

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

/// Wraps the Pingora HTTP application with the connection caps and the
/// header-read deadline.
pub struct EdgeApp<A> {
    inner: Arc<A>,
    config: EdgeConfig,
    table: Arc<ConnectionTable>,
    metrics: crate::plane::metrics::Metrics,
    h2c: bool,
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
        inner: A,
        config: EdgeConfig,
        metrics: crate::plane::metrics::Metrics,
        h2c: bool,
    ) -> Self {
        EdgeApp {
            inner: Arc::new(inner),
            config,
            table: Arc::new(ConnectionTable::default()),
            metrics,
            h2c,
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

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
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let _slot = match self.table.admit(client, &self.config) {
            Ok(slot) => slot,
            Err(refusal) => {
                // Closing at once is the cheapest answer to a flood; the
                // client sees a reset, not a 503 it would have to read.
                self.metrics.refused(refusal);
                return None;
            }
        };
        let h2 = if stream.get_ssl_digest().is_some() {
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
            // HTTP/2 has its own idle timeout and streams in their own tasks.
            return self.inner.process_new(stream, shutdown).await;
        }
        let state = Arc::new(ConnState {
            origin: Instant::now(),
            deadline_ms: AtomicU64::new(0),
        });
        state.set_deadline_in(self.config.header_read_timeout);
        let serve = CONNECTION.scope(state.clone(), self.inner.process_new(stream, shutdown));
        tokio::pin!(serve);
        loop {
            let deadline = state.deadline();
            let sleep = async {
                match deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            // The deadline changes when a request starts or ends, so the
            // sleep is re-armed at least that often; a request never waits
            // on more than one stale wake-up.
            let recheck =
                tokio::time::sleep(self.config.header_read_timeout.min(Duration::from_secs(1)));
            tokio::select! {
                out = &mut serve => return out,
                () = sleep => {
                    if state.deadline().is_some_and(|at| at <= Instant::now()) {
                        self.metrics.refused(Refusal::HeaderTimeout);
                        // Dropping the future closes the socket.
                        return None;
                    }
                }
                () = recheck => {}
            }
        }
    }

    async fn cleanup(&self) {
        self.inner.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(raw: &str) -> Result<H1Framing, Refusal> {
        scan_h1(raw.as_bytes(), &EdgeConfig::default())
    }

    #[test]
    fn plain_requests_pass() {
        assert_eq!(
            scan("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"),
            Ok(H1Framing::default())
        );
        assert_eq!(
            scan("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"),
            Ok(H1Framing {
                content_length: Some(5),
                chunked: false
            })
        );
        assert_eq!(
            scan("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(H1Framing {
                content_length: None,
                chunked: true
            })
        );
        assert!(scan("GET / HTTP/1.0\r\n\r\n").is_ok());
        assert!(scan("POST / HTTP/1.0\r\nContent-Length: 0\r\n\r\n").is_ok());
        assert!(scan("GET / HTTP/1.1\r\nHost: [::1]:8080\r\nX-A: \t v \t\r\n\r\n").is_ok());
        assert!(scan("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n").is_ok());
    }

    #[test]
    fn framing_ambiguities_are_refused() {
        use Refusal::*;
        let cases: &[(&str, Refusal)] = &[
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                BothLengths,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
                ControlByte,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                DuplicateLength,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", BadLength),
            ("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", BadLength),
            ("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", BadLength),
            (
                "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                BadLength,
            ),
            ("GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", ObsFold),
            ("GET / HTTP/1.1\r\nX-A: a\n\r\n", BareCrLf),
            ("GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", BareCrLf),
            ("GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n", ControlByte),
            ("GET / HTTP/1.1\r\nX-A : a\r\n\r\n", SpaceBeforeColon),
            (
                "GET / HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n",
                SpaceBeforeColon,
            ),
            ("GET / HTTP/1.1\r\nX(A): a\r\n\r\n", BadHeaderName),
            ("GET / HTTP/1.1\r\n: a\r\n\r\n", BadHeaderName),
            ("GET / HTTP/1.1\r\nnocolon\r\n\r\n", BadHeaderName),
            ("POST / HTTP/1.0\r\n\r\n", Http10BodyNoLength),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                TransferEncoding,
            ),
            ("GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n", H2cUpgrade),
            (
                "GET / HTTP/1.1\r\nUpgrade: websocket, H2C\r\n\r\n",
                H2cUpgrade,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                DuplicateHost,
            ),
            ("GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: \r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\n\r\nGET", BareCrLf),
        ];
        for (raw, want) in cases {
            assert_eq!(scan(raw), Err(*want), "{raw:?}");
        }
    }

    #[test]
    fn size_limits() {
        let limits = EdgeConfig {
            max_request_line: 32,
            max_header_bytes: 128,
            max_headers: 2,
            ..EdgeConfig::default()
        };
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(40));
        assert_eq!(
            scan_h1(long_line.as_bytes(), &limits),
            Err(Refusal::RequestLineTooLong)
        );
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(200));
        assert_eq!(
            scan_h1(big.as_bytes(), &limits),
            Err(Refusal::HeaderTooLarge)
        );
        let many = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(
            scan_h1(many.as_bytes(), &limits),
            Err(Refusal::TooManyHeaders)
        );
        assert_eq!(Refusal::TooManyHeaders.status(), 431);
        assert_eq!(Refusal::BodyTooLarge.status(), 413);
    }

    #[test]
    fn refusal_table_matches_declaration_order() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
    }

    #[test]
    fn route_limits_only_lower_the_operator_maximum() {
        assert_eq!(body_limit(100, None), 100);
        assert_eq!(body_limit(100, Some(10)), 10);
        assert_eq!(body_limit(100, Some(1000)), 100);
        assert_eq!(body_limit(100, Some(0)), 100);
        assert_eq!(body_limit(0, Some(10)), 10);
        assert_eq!(body_limit(0, None), 0);
    }

    #[test]
    fn h2_fields_and_host() {
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.insert_header("x-a", "ok").unwrap();
        assert!(check_h2_fields(&req).is_ok());
        req.insert_header("transfer-encoding", "chunked").unwrap();
        assert_eq!(check_h2_fields(&req), Err(Refusal::TransferEncoding));
        let mut req = RequestHeader::build("GET", b"/", None).unwrap();
        req.append_header("host", "a").unwrap();
        assert!(check_host(&req).is_ok());
        req.append_header("host", "b").unwrap();
        assert_eq!(check_host(&req), Err(Refusal::DuplicateHost));
    }

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
}
