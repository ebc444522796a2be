//! The decision interface: what the engine asks the product about each
//! request, and what it may answer.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

pub use crate::edits::HeaderEdits;
use crate::upstream::Transport;

/// Facts about the client connection, fixed for its lifetime.
#[derive(Clone, Debug, Default)]
pub struct ConnInfo {
    /// The client's address (the TCP peer).
    pub client: Option<SocketAddr>,
    /// The local address the client connected to.
    pub local: Option<SocketAddr>,
    /// The connection is TLS (decides `X-Forwarded-Proto` and the like).
    pub tls: bool,
    /// The TLS version negotiated (`TLSv1.3`, `TLSv1.2`), for the access
    /// log; `None` on plain connections. Read once per connection, so a
    /// request pays nothing for it.
    pub tls_version: Option<&'static str>,
    /// The TLS server name the client asked for.
    pub sni: Option<Arc<str>>,
    /// The ALPN protocol negotiated (`http/1.1`, or none).
    pub alpn: Option<Arc<str>>,
    /// What the router's TLS handshake established beyond the SNI (a
    /// client certificate's outcome), opaque to the engine.
    pub tls_facts: Option<Arc<dyn std::any::Any + Send + Sync>>,
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

/// Per-request timeout overrides; `None` takes the engine's default.
#[derive(Clone, Copy, Debug, Default)]
pub struct Timeouts {
    /// Connecting to one upstream address.
    pub connect: Option<Duration>,
    /// Longest wait for any upstream byte (response head or body) and for
    /// the upstream to accept request bytes; when it passes before the
    /// response head, the client gets a 504.
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

    /// A retry ([`Forward::retry`]) is about to begin: [`Upstreams::next`]
    /// counts from attempt 0 again. With `again`, addresses this request
    /// already tried may be given again once no untried one is left;
    /// `false`: no address is left to try, the last try's answer stands.
    fn new_try(&mut self, _again: bool) -> bool {
        true
    }

    /// How connections are secured after TCP connects (TLS to the
    /// backend); `None`, the default: plain TCP.
    fn transport(&self) -> Option<Arc<dyn Transport>> {
        None
    }

    /// `addr` connected but [`Transport::secure`] failed or timed out (a
    /// handshake or a certificate refused): the address is reachable, so
    /// this is no [`Upstreams::failed`].
    fn secure_failed(&mut self, _addr: SocketAddr) {}

    /// Whether a final response of `status`, the upstream's or the
    /// engine's own 502 or 504, is answered by [`Upstreams::replacement`]
    /// instead (a product's error pages). Asked once per response; the
    /// default is never.
    fn replaces(&self, _status: u16) -> bool {
        false
    }

    /// Fields the engine's own 502 and 504 for this request carry besides
    /// its plain-text type (a route's CORS fields, so a browser reads the
    /// error); the default is none.
    fn local_fields(&self) -> &[(Bytes, Bytes)] {
        &[]
    }

    /// The answer sent in place of a response [`Upstreams::replaces`]
    /// chose. The upstream's response is not relayed: its connection is
    /// closed with its body unread.
    fn replacement(&mut self, status: u16) -> impl Future<Output = Respond> + Send {
        std::future::ready(Respond::new(status, "replaced", Bytes::new()))
    }

    /// The pace of the response body to the client (a product's
    /// bandwidth limit), taken once when a final response is relayed;
    /// `None`, the default: as fast as the client reads.
    fn pacer(&mut self) -> Option<Box<dyn Pacer>> {
        None
    }

    /// The bytes of this request's bodies the engine may hold instead of
    /// streaming them (a product's `proxy-request-buffering` and
    /// `proxy-buffering`, granted from its budget), asked once before the
    /// backend is contacted, with the request body's framing; the
    /// default: none, both streamed (crate::engine::buffering).
    fn buffering(&mut self, _body: crate::BodyFraming) -> Buffering {
        Buffering::default()
    }

    /// How the fields of the upstream's final response head are
    /// rewritten (a product's `proxy_redirect`, `proxy_cookie_domain`),
    /// asked once per response; `None`, the default: sent as the upstream
    /// wrote them.
    fn response_rewrite(&self) -> Option<&dyn RewriteField> {
        None
    }
}

/// A rewrite of response fields' values ([`Upstreams::response_rewrite`]).
pub trait RewriteField: Send + Sync {
    /// Writes to `out` the value the field `name` (as the upstream spelt
    /// it) goes on with in place of `value`, and says whether it wrote
    /// one. The engine checks what was written as it checks an edit's
    /// value (no CR, LF or other control byte) and sends the upstream's
    /// own value when it fails; the fields [`HeaderEdits`] replace are
    /// not asked about.
    fn rewrite(&self, name: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool;
}

/// A limit on how fast a response body goes to the client, asked before
/// each write of it. The engine reads the upstream again only once what
/// it holds is written, so a paced response holds no more memory than
/// another, and waits on a timer between the pieces.
pub trait Pacer: Send {
    /// Of `ready` body bytes, how many may be written at `now` (at least
    /// one when `ready` is not 0), or the instant to ask again.
    fn permit(
        &mut self,
        ready: usize,
        now: std::time::Instant,
    ) -> Result<usize, std::time::Instant>;
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

/// A request target that replaces the client's in the forwarded head (a
/// URL rewrite), checked once, when made: origin form (`/` first) and
/// visible ASCII only, so it can neither end the request line early (a
/// space would start the version; CR or LF a header) nor carry a byte an
/// upstream might read otherwise.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestTarget(Box<str>);

impl RequestTarget {
    /// `None` for a target that is not a `/`-rooted run of visible ASCII
    /// (`0x21..=0x7e`): spaces, controls and non-ASCII bytes must be
    /// percent-encoded in a target (RFC 9112 §3.2, RFC 3986 §2).
    pub fn new(target: impl Into<Box<str>>) -> Option<Self> {
        let target = target.into();
        let valid = target.starts_with('/')
            && u16::try_from(target.len()).is_ok()
            && target.bytes().all(|b| b.is_ascii_graphic());
        valid.then_some(RequestTarget(target))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Forward the request to an upstream.
#[derive(Clone, Debug)]
pub struct Forward<U = Arc<[SocketAddr]>> {
    /// Where to connect; lives until the request (or its upgraded tunnel)
    /// ends, so it may hold per-request resources.
    pub upstreams: U,
    /// The target sent upstream instead of the client's (`None`: the
    /// client's, in origin form).
    pub target: Option<RequestTarget>,
    /// Edits to the request head sent upstream.
    pub request_edits: HeaderEdits,
    /// Edits to the response head sent to the client: applied to the
    /// upstream's final response head (not to 1xx heads, nor to the
    /// engine's own answers).
    pub response_edits: HeaderEdits,
    pub timeouts: Timeouts,
    /// The route's body limit; lowers the engine's maximum, never raises
    /// it (`None` or 0: the engine's).
    pub max_body_size: Option<u64>,
    /// Passed to the [`Observer`](crate::Observer), e.g. a route or tenant name.
    pub tag: Option<Arc<str>>,
    /// The version and `Connection` field of the head sent upstream
    /// (default: HTTP/1.1, none); an upgrade is always HTTP/1.1 with
    /// `Connection: upgrade`.
    pub http: crate::upstream_http::UpstreamHttp,
    /// When a failed try is sent again ([`crate::retry`]); `None`, the
    /// default: only a connect failure moves on to the next address, and
    /// a reused connection that failed before answering is retried once.
    pub retry: Option<Arc<crate::RetryPolicy>>,
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
            target: None,
            request_edits: HeaderEdits::default(),
            response_edits: HeaderEdits::default(),
            timeouts: Timeouts::default(),
            max_body_size: None,
            tag: None,
            http: crate::upstream_http::UpstreamHttp::DEFAULT,
            retry: None,
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
///
/// A [`Forward`] is boxed where the router makes it: it is several hundred
/// bytes, and on its way from the router's future through the engine's
/// plan it was moved (copied) about eight times per request.
#[derive(Clone, Debug)]
pub enum Decision<U = Arc<[SocketAddr]>> {
    Forward(Box<Forward<U>>),
    Respond(Respond),
}

impl<U> Decision<U> {
    /// Forward as `forward` says.
    pub fn forward(forward: Forward<U>) -> Self {
        Decision::Forward(Box::new(forward))
    }
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

/// Bytes of one request's bodies the engine may hold; 0: streamed as
/// they come (the default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Buffering {
    /// Request body bytes read before the backend is contacted.
    pub request: usize,
    /// Response body bytes read from the backend ahead of the client.
    pub response: usize,
}

#[cfg(test)]
mod tests {
    use super::RequestTarget;

    #[test]
    fn rewritten_targets_are_origin_form_visible_ascii() {
        for good in ["/", "/a/b?c=d&e=%20f", "/~!$&'()*+,;=:@"] {
            assert_eq!(
                RequestTarget::new(good).map(|t| t.as_str().to_owned()),
                Some(good.to_owned()),
                "{good}"
            );
        }
        for bad in [
            "",
            "a/b",
            "*",
            "http://a.example/",
            "/a b",
            "/a HTTP/1.1\r\nhost: evil",
            "/a\r\nx: 1",
            "/a\nb",
            "/a\tb",
            "/a\u{0}b",
            "/a\u{7f}",
            "/caf\u{e9}",
        ] {
            assert!(RequestTarget::new(bad).is_none(), "{bad:?}");
        }
        assert!(RequestTarget::new("/".repeat(70_000)).is_none());
    }
}
