//! Metrics and access-log hooks.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::router::ConnInfo;
use crate::scan::Refusal;

/// How a request ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Relayed to an upstream and its response relayed back in full.
    Proxied,
    /// Relayed, then the connection switched protocols (101) and the
    /// tunnel has closed.
    Upgraded,
    /// Answered by the router ([`Respond`](crate::Respond)) with this reason.
    Local(&'static str),
    /// Refused by the engine's framing rules or limits.
    Refused(Refusal),
    /// The upstream failed; the client got a 502/504 if nothing had been
    /// sent yet, else its connection was closed.
    Upstream(UpstreamError),
    /// The client went away (or sent a malformed body) before the exchange
    /// completed.
    ClientAbort,
}

/// What went wrong upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UpstreamError {
    Connect,
    ConnectTimeout,
    ReadTimeout,
    /// Closed or reset before a complete response.
    Closed,
    /// A response head or body the engine will not relay.
    BadResponse,
}

impl UpstreamError {
    pub fn label(self) -> &'static str {
        match self {
            UpstreamError::Connect => "connect",
            UpstreamError::ConnectTimeout => "connect_timeout",
            UpstreamError::ReadTimeout => "read_timeout",
            UpstreamError::Closed => "closed",
            UpstreamError::BadResponse => "bad_response",
        }
    }
}

/// One finished request, as the observer sees it. Borrowed: copy what
/// you keep.
#[derive(Debug)]
pub struct RequestLog<'a> {
    /// Empty when no request head was read (e.g. a header timeout).
    pub method: &'a str,
    pub path: &'a str,
    pub host: Option<&'a str>,
    /// The status sent to the client; 0 when none was sent.
    pub status: u16,
    /// Bytes read from the client for this request (head and body).
    pub bytes_in: u64,
    /// Bytes written to the client for this request (heads and body).
    pub bytes_out: u64,
    pub upstream: Option<SocketAddr>,
    /// From the start of connecting (or taking a pooled connection) to
    /// the end of the response.
    pub upstream_time: Option<Duration>,
    /// Time to the first response head byte from the upstream.
    pub upstream_ttfb: Option<Duration>,
    /// The whole request, from its first byte to the end of its response.
    pub total_time: Duration,
    pub outcome: Outcome,
    /// The client went away before the response was complete.
    pub client_abort: bool,
    /// The (first) upstream connection tried came from the pool.
    pub reused: bool,
    /// A reused connection failed and the request was sent again.
    pub retried: bool,
    pub tag: Option<&'a Arc<str>>,
    /// The client connection the request came on: its address, TLS and
    /// SNI, for an access log.
    pub conn: &'a ConnInfo,
}

/// Called once per request, on the connection's task. Keep it cheap
/// (counters, a channel send for an access log).
pub trait Observer: Send + Sync + 'static {
    fn on_request(&self, log: &RequestLog<'_>);
}

/// No observation.
impl Observer for () {
    fn on_request(&self, _: &RequestLog<'_>) {}
}
