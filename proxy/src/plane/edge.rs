//! Front-door checks and limits: what a client may send before
//! anything routes on it. Pure rules, below both engines and the decision.
//!
//! - [`scan_h1`] and [`Refusal`]: the HTTP/1 framing rules, whose home is
//!   the engine crate (`teapot_h1::scan`): it reads the raw header block
//!   once and refuses every framing ambiguity that could make the proxy
//!   and a backend disagree on where a request ends. Re-exported here for
//!   the rest of the proxy.
//! - [`check_host`] and [`check_h2_fields`] keep one authority in charge of
//!   routing and keep control bytes out of HTTP/2 fields.
//! - [`EdgeConfig`]: the sizes, deadlines and connection caps, every
//!   default documented in docs/edge.md; the caps are enforced where
//!   connections are accepted (crate::plane::accept).

use std::time::Duration;

pub use teapot_h1::scan::{
    H1Framing, HeadLimits, Refusal, body_limit, is_authority, is_field_value, is_tchar, scan_h1,
};

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
    /// waits for its 429/503 (crate::live::fairness): a client looping on
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

impl From<crate::live::fairness::OverLimit> for Refusal {
    fn from(over: crate::live::fairness::OverLimit) -> Refusal {
        match over {
            crate::live::fairness::OverLimit::Rate => Refusal::TenantRate,
            crate::live::fairness::OverLimit::Connections => Refusal::TenantConnections,
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
}
