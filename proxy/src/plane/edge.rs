//! Front-door checks and limits (issue #9): what a client may send before
//! anything routes on it, and how much of the fleet one client may hold.
//!
//! - [`scan_h1`] and [`Refusal`]: the HTTP/1 framing rules, whose home is
//!   the engine crate (`teapot_h1::scan`): it reads the raw header block
//!   once and refuses every framing ambiguity that could make the proxy
//!   and a backend disagree on where a request ends. Re-exported here for
//!   the rest of the proxy.
//! - [`check_host`] and [`check_h2_fields`] keep one authority in charge of
//!   routing and keep control bytes out of HTTP/2 fields.
//! - [`EdgeApp`] is the listener's application: connection caps (total and
//!   per client address), then HTTP/2 to teapot's HTTP/2 server
//!   (crate::plane::h2) and everything else to the HTTP/1 engine (crate::plane::h1), whose header-read deadline and
//!   keep-alive timeout are docs/edge.md's.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use pingora_core::apps::ServerApp;
use pingora_core::protocols::Stream;
use pingora_core::server::ShutdownWatch;
use teapot_h1::ConnInfo;
pub use teapot_h1::scan::{
    H1Framing, HeadLimits, Refusal, body_limit, is_authority, is_field_value, is_tchar, scan_h1,
};
use tokio::net::TcpStream;

use crate::plane::h1::H1Engine;

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
    /// The h2 server options of every HTTP/2 connection
    /// (crate::plane::h2).
    pub fn options(&self) -> h2::server::Builder {
        let mut o = h2::server::Builder::new();
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

impl EdgeConfig {
    /// The header-block limits the HTTP/1 engine enforces.
    pub fn head_limits(&self) -> HeadLimits {
        HeadLimits {
            max_request_line: self.max_request_line,
            max_header_bytes: self.max_header_bytes,
            max_headers: self.max_headers,
        }
    }
}

impl From<crate::compile::fairness::OverLimit> for Refusal {
    fn from(over: crate::compile::fairness::OverLimit) -> Refusal {
        match over {
            crate::compile::fairness::OverLimit::Rate => Refusal::TenantRate,
            crate::compile::fairness::OverLimit::Connections => Refusal::TenantConnections,
        }
    }
}

/// Host rules of an HTTP/2 request: at most one `host` field, and every
/// authority well formed (crate::plane::h2 also refuses a `host` that
/// differs from `:authority`; HTTP/1's rules are the engine's).
pub fn check_host(headers: &http::HeaderMap, uri: &http::Uri) -> Result<(), Refusal> {
    let mut hosts = headers.get_all(http::header::HOST).iter();
    if let Some(host) = hosts.next() {
        if hosts.next().is_some() {
            return Err(Refusal::DuplicateHost);
        }
        if !is_authority(host.as_bytes()) {
            return Err(Refusal::BadHost);
        }
    }
    if let Some(a) = uri.authority()
        && !is_authority(a.as_str().as_bytes())
    {
        return Err(Refusal::BadHost);
    }
    Ok(())
}

/// HTTP/2 fields carry no framing of their own, but downgraded to HTTP/1.1
/// a CR, LF or NUL in a name or value would split a header upstream.
pub fn check_h2_fields(headers: &http::HeaderMap) -> Result<(), Refusal> {
    for (name, value) in headers.iter() {
        if name.as_str().bytes().any(|b| !is_tchar(b)) {
            return Err(Refusal::BadHeaderName);
        }
        if !is_field_value(value.as_bytes()) {
            return Err(Refusal::ControlByte);
        }
    }
    if headers.contains_key(http::header::TRANSFER_ENCODING) {
        // RFC 9113 §8.2.2: connection-specific fields are malformed in HTTP/2.
        return Err(Refusal::TransferEncoding);
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Connection-level limits.

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
        }
    }
}

const H2_PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

impl EdgeApp<crate::plane::h2::H2Server> {
    /// One plain-HTTP connection from teapot's own accept loop
    /// (crate::plane::serving): the same slot and the same split as
    /// [`ServerApp::process_new`], on the bare socket. The HTTP/1 engine
    /// gets the `TcpStream` itself, so an idle keep-alive connection waits
    /// on the socket's readiness holding no buffer.
    pub async fn serve_tcp(self: Arc<Self>, tcp: TcpStream, stop: ShutdownWatch) {
        let shutdown = self.finish_on(&stop);
        drop(stop);
        // Heads and small answers go out at once, as Pingora's listener did.
        let _ = tcp.set_nodelay(true);
        let client = tcp.peer_addr().ok();
        let Some(_slot) = self.admit(client.map(|a| a.ip())) else {
            return;
        };
        let info = ConnInfo {
            client,
            local: tcp.local_addr().ok(),
            ..ConnInfo::default()
        };
        if self.h2c {
            let mut buf = [0u8; H2_PREFACE.len()];
            if matches!(tcp.peek(&mut buf).await, Ok(n) if n == buf.len()) && buf == H2_PREFACE {
                // Boxed: HTTP/2's connection future is several times the
                // HTTP/1 engine's, and every plain connection's task would
                // otherwise be sized for it.
                Box::pin(self.h2.serve(tcp, &info, shutdown)).await;
                return;
            }
        }
        self.h1.serve(tcp, &info, shutdown).await;
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
        let client = stream
            .get_socket_digest()
            .and_then(|d| d.peer_addr().and_then(|a| a.as_inet()).map(|a| a.ip()));
        let _slot = self.admit(client)?;
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
            // HTTP/2 has its own idle timeout; its streams are futures of
            // the connection's task (crate::plane::h2).
            return self.h2.process_new(stream, &self.finish_on(shutdown)).await;
        }
        let info = crate::plane::h1::conn_info(&stream);
        self.h1.serve(stream, &info, self.finish_on(shutdown)).await;
        None
    }

    async fn cleanup(&self) {
        self.h2.cleanup().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn h2_fields_and_host() {
        use http::HeaderValue;
        let uri = http::Uri::from_static("/");
        let mut headers = http::HeaderMap::new();
        headers.insert("x-a", HeaderValue::from_static("ok"));
        assert!(check_h2_fields(&headers).is_ok());
        headers.insert("transfer-encoding", HeaderValue::from_static("chunked"));
        assert_eq!(check_h2_fields(&headers), Err(Refusal::TransferEncoding));
        let mut headers = http::HeaderMap::new();
        headers.append("host", HeaderValue::from_static("a"));
        assert!(check_host(&headers, &uri).is_ok());
        headers.append("host", HeaderValue::from_static("b"));
        assert_eq!(check_host(&headers, &uri), Err(Refusal::DuplicateHost));
        let bad = http::Uri::from_static("https://a@b.example/");
        assert_eq!(
            check_host(&http::HeaderMap::new(), &bad),
            Err(Refusal::BadHost)
        );
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
