//! How a route's requests are written to its HTTP/1 backends
//! ([`UpstreamHttp`]: ingress-nginx's `proxy-http-version` and
//! `connection-proxy-header`), carried by a router's decision
//! (crate::router::Forward) to the head encoder (crate::head). A leaf:
//! it imports nothing of the crate, so both may name it.

use std::sync::Arc;

/// The HTTP/1 version a request is sent to its backend in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HttpVersion {
    /// HTTP/1.0: no chunked body, no reuse of the connection.
    Http10,
    #[default]
    Http11,
}

/// The most bytes of a [`ConnectionValue`]: a few options
/// (`keep-alive`, `close`, `upgrade`) fit many times over.
pub const MAX_CONNECTION_VALUE: usize = 64;

/// A `Connection` field value a route sends its backends instead of
/// teapot's (none, keep-alive by HTTP/1.1's default): comma-separated
/// tokens, checked once when made, so it can never split a head.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionValue(Arc<str>);

impl ConnectionValue {
    /// `None` unless `value` is one to [`MAX_CONNECTION_VALUE`] bytes of
    /// comma-separated HTTP tokens (RFC 9110 §5.6.2; spaces around the
    /// commas). The tokens are kept as written, one `, ` between them.
    pub fn new(value: &str) -> Option<Self> {
        if value.len() > MAX_CONNECTION_VALUE {
            return None;
        }
        let tokens: Vec<&str> = value.split(',').map(|t| t.trim_matches(' ')).collect();
        let token = |t: &str| !t.is_empty() && t.bytes().all(is_tchar);
        tokens
            .iter()
            .all(|t| token(t))
            .then(|| ConnectionValue(tokens.join(", ").into()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether one of its tokens is `name` (any case).
    pub fn has(&self, name: &str) -> bool {
        self.0.split(", ").any(|t| t.eq_ignore_ascii_case(name))
    }
}

/// RFC 9110 §5.6.2 `tchar`.
fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// How a route's requests are written to its HTTP/1 backends. The
/// default is teapot's own: HTTP/1.1, no `Connection` field, the
/// connection reused.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UpstreamHttp {
    pub version: HttpVersion,
    /// The `Connection` field sent (the client's never passes: it is
    /// hop-by-hop); `None`: none.
    pub connection: Option<ConnectionValue>,
}

impl UpstreamHttp {
    /// teapot's own, for heads no route setting applies to (an upgrade
    /// writes its own `Connection: upgrade`).
    pub const DEFAULT: UpstreamHttp = UpstreamHttp {
        version: HttpVersion::Http11,
        connection: None,
    };

    /// Whether a body of unknown length can go (chunked): only in
    /// HTTP/1.1. Otherwise the caller sends it only when it held all of it
    /// (`proxy-request-buffering`), with its `Content-Length`, and answers
    /// 411 before anything is sent when it did not.
    pub fn takes_unknown_length(&self) -> bool {
        self.version == HttpVersion::Http11
    }

    /// Whether the connection may be pooled after the exchange: not after
    /// an HTTP/1.0 request (its backend closes unless asked for
    /// keep-alive, and may close even then), nor when the route's
    /// `Connection` says `close`.
    pub fn reuses(&self) -> bool {
        self.version == HttpVersion::Http11
            && !self.connection.as_ref().is_some_and(|c| c.has("close"))
    }
}
