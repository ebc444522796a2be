//! The decision interface: what the engine asks the product about each
//! request, and what it may answer.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

/// Facts about the client connection, fixed for its lifetime.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address (the TCP peer).
    pub client: Option<SocketAddr>,
    /// The local address the client connected to.
    pub local: Option<SocketAddr>,
    /// The connection is TLS (decides `X-Forwarded-Proto` and the like).
    pub tls: bool,
    /// The TLS server name the client asked for.
    pub sni: Option<Arc<str>>,
    /// The ALPN protocol negotiated (`http/1.1`, or none).
    pub alpn: Option<Arc<str>>,
}

/// One request's head as parsed, borrowed from the connection's buffer.
///
/// Everything here passed [`scan_h1`](crate::scan_h1): framing fields
/// are unambiguous, `host` names one authority.
#[derive(Debug)]
pub struct RequestHead<'a> {
    pub(crate) method: &'a str,
    pub(crate) path: &'a str,
    pub(crate) version: u8,
    pub(crate) host: Option<&'a str>,
    pub(crate) headers: &'a [httparse::Header<'a>],
    pub(crate) content_length: Option<u64>,
    pub(crate) chunked: bool,
}

impl<'a> RequestHead<'a> {
    /// The method token, e.g. `GET`.
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request target in origin form (`/path?query`), or `*`. An
    /// absolute-form target has been split into this and [`Self::host`].
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The minor version: 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub fn version(&self) -> u8 {
        self.version
    }

    /// The authority the request names: the absolute-form target's, else
    /// the Host field's. `None` when neither is present.
    pub fn host(&self) -> Option<&'a str> {
        self.host
    }

    /// All header fields in order, names as sent.
    pub fn headers(&self) -> impl Iterator<Item = (&'a str, &'a [u8])> + '_ {
        self.headers.iter().map(|h| (h.name, h.value))
    }

    /// The first field called `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&'a [u8]> {
        self.headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    }

    /// The declared Content-Length, if any.
    pub fn content_length(&self) -> Option<u64> {
        self.content_length
    }

    /// The body is chunked.
    pub fn is_chunked(&self) -> bool {
        self.chunked
    }
}

/// Header changes applied while a head is copied, without building a map:
/// fields named in `remove` or `set` are skipped, then `set` and `append`
/// are written in order. Names are matched case-insensitively; a name that
/// is not a token or a value with CR, LF or another control byte but HTAB
/// is dropped (never written).
#[derive(Clone, Debug, Default)]
pub struct HeaderEdits {
    pub remove: Vec<Bytes>,
    pub set: Vec<(Bytes, Bytes)>,
    pub append: Vec<(Bytes, Bytes)>,
}

impl HeaderEdits {
    pub fn is_empty(&self) -> bool {
        self.remove.is_empty() && self.set.is_empty() && self.append.is_empty()
    }

    /// Replaces every field called `name` with one `name: value`.
    pub fn set(mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.set.push((name.into(), value.into()));
        self
    }

    /// Adds one more `name: value` field, keeping those already there.
    pub fn append(mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.append.push((name.into(), value.into()));
        self
    }

    /// Drops every field called `name`.
    pub fn remove(mut self, name: impl Into<Bytes>) -> Self {
        self.remove.push(name.into());
        self
    }

    pub(crate) fn skips(&self, name: &[u8]) -> bool {
        self.remove.iter().any(|r| r.eq_ignore_ascii_case(name))
            || self.set.iter().any(|(n, _)| n.eq_ignore_ascii_case(name))
    }
}

/// Per-request timeout overrides; `None` takes the engine's default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts {
    /// Connecting to one upstream address.
    pub connect: Option<Duration>,
    /// Longest wait for any upstream byte (response head or body) and for
    /// the upstream to accept request bytes.
    pub read: Option<Duration>,
}

/// Where a forwarded request may connect, asked one address at a time so
/// a product can pick (round-robin, health) without building a list per
/// request, and hear back how each connect went.
pub trait Upstreams: Send + 'static {
    /// The address for connect attempt `attempt` (0, 1, ...); `None` when
    /// no more may be tried.
    fn next(&mut self, attempt: u32) -> Option<SocketAddr>;

    /// Nothing can ever be tried: answered 503 before anything is read.
    fn is_empty(&self) -> bool {
        false
    }

    /// A fresh connection to `addr` was established.
    fn connected(&mut self, _addr: SocketAddr) {}

    /// Connecting to `addr` failed or timed out.
    fn failed(&mut self, _addr: SocketAddr) {}
}

/// A fixed list, tried in order.
impl Upstreams for Arc<[SocketAddr]> {
    fn next(&mut self, attempt: u32) -> Option<SocketAddr> {
        self.get(attempt as usize).copied()
    }

    fn is_empty(&self) -> bool {
        <[SocketAddr]>::is_empty(self)
    }
}

/// Forward the request to an upstream.
#[derive(Clone, Debug)]
pub struct Forward<U = Arc<[SocketAddr]>> {
    /// Where to connect; lives until the request (or its upgraded tunnel)
    /// ends, so it may hold per-request resources.
    pub upstreams: U,
    /// Edits to the request head sent upstream.
    pub request_edits: HeaderEdits,
    /// Edits to the response head sent to the client.
    pub response_edits: HeaderEdits,
    pub timeouts: Timeouts,
    /// The route's body limit; lowers the engine's maximum, never raises
    /// it (`None` or 0: the engine's).
    pub max_body_size: Option<u64>,
    /// Passed to the [`Observer`](crate::Observer), e.g. a route or tenant name.
    pub tag: Option<Arc<str>>,
}

impl Forward {
    pub fn to(upstreams: impl Into<Arc<[SocketAddr]>>) -> Self {
        Forward::via(upstreams.into())
    }
}

impl<U: Upstreams> Forward<U> {
    pub fn via(upstreams: U) -> Self {
        Forward {
            upstreams,
            request_edits: HeaderEdits::default(),
            response_edits: HeaderEdits::default(),
            timeouts: Timeouts::default(),
            max_body_size: None,
            tag: None,
        }
    }
}

/// Answer the request locally (404, 503, 429, redirects...). The engine
/// adds `content-length` and `connection`; the body is not sent to a HEAD.
#[derive(Clone, Debug)]
pub struct Respond {
    pub status: u16,
    pub headers: Vec<(Bytes, Bytes)>,
    pub body: Bytes,
    /// Close the client connection after the answer.
    pub close: bool,
    /// The observer's `Outcome::Local` reason, e.g. `"no_route"`.
    pub reason: &'static str,
    pub tag: Option<Arc<str>>,
}

impl Respond {
    pub fn new(status: u16, reason: &'static str, body: impl Into<Bytes>) -> Self {
        Respond {
            status,
            headers: Vec::new(),
            body: body.into(),
            close: false,
            reason,
            tag: None,
        }
    }

    pub fn header(mut self, name: impl Into<Bytes>, value: impl Into<Bytes>) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }
}

/// What to do with one request.
#[derive(Clone, Debug)]
pub enum Decision<U = Arc<[SocketAddr]>> {
    Forward(Forward<U>),
    Respond(Respond),
}

/// The product's routing: called once per request, after the head passed
/// the framing rules and before any body byte is read. The future is not
/// boxed: a router that decides from a snapshot returns a ready one, and
/// the per-request cost stays a lookup; one that must wait (an ACME
/// challenge store, a refusal delay) awaits only on those requests.
// No `'static` bound: a router borrowing nothing is `'static` anyway, and
// the bound would make rustc prove the serve future `Send` for every
// lifetime of a boxed `dyn Fn` router (which it cannot).
pub trait Router: Send + Sync {
    type Upstreams: Upstreams;

    fn decide(
        &self,
        head: &RequestHead<'_>,
        conn: &ConnInfo,
    ) -> impl Future<Output = Decision<Self::Upstreams>> + Send;
}

impl<F> Router for F
where
    F: Fn(&RequestHead<'_>, &ConnInfo) -> Decision + Send + Sync,
{
    type Upstreams = Arc<[SocketAddr]>;

    fn decide(
        &self,
        head: &RequestHead<'_>,
        conn: &ConnInfo,
    ) -> impl Future<Output = Decision> + Send {
        std::future::ready(self(head, conn))
    }
}
