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
    /// The TLS version negotiated (`TLSv1.3`, `TLSv1.2`), for the access
    /// log; `None` on plain connections. Read once per connection, so a
    /// request pays nothing for it.
    pub tls_version: Option<&'static str>,
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

/// The lengths of the names an edit may not write: the hop-by-hop and
/// framing ones (`crate::wire::is_hop_by_hop`) and `host`.
const ENGINE_OWNED_LENGTHS: u32 =
    1 << 2 | 1 << 4 | 1 << 7 | 1 << 10 | 1 << 14 | 1 << 16 | 1 << 17 | 1 << 18 | 1 << 19;

/// Header changes applied while a head is copied, without building a map:
/// fields named by a removal or a replacement are skipped, then the
/// replacements and the additions are written, each in the order given.
/// Names are matched case-insensitively; a name that is not a token, a
/// value with CR, LF or another control byte but HTAB, a framing or
/// hop-by-hop name (`content-length`, `transfer-encoding`, `connection`,
/// `upgrade`...: the engine writes those itself) and an addition of a
/// second `host` are dropped (never written; a dropped replacement still
/// removes the client's field).
///
/// The fields are kept as they go on the wire (`name: value\r\n`, checked
/// once, when pushed): writing a head copies all of them at once. A router
/// that edits every request, like the forwarding headers, pays two
/// allocations for all its edits, and writes values in place
/// ([`Self::push_set_with`], [`Self::set_fmt`]) instead of building a
/// `String` for each.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    /// The replacements, then the additions, as written.
    wire: Vec<u8>,
    /// Where the additions start in `wire`.
    appends_at: usize,
    /// The names removals and replacements take out of the head, each
    /// after its length (u16, little-endian).
    skipped: Vec<u8>,
}

impl HeaderEdits {
    /// Room for `bytes` bytes of edits (names and values, plus 4 per edit).
    pub fn with_capacity(bytes: usize) -> Self {
        HeaderEdits {
            wire: Vec::with_capacity(bytes),
            appends_at: 0,
            skipped: Vec::with_capacity(bytes / 2),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.wire.is_empty() && self.skipped.is_empty()
    }

    /// Replaces every field called `name` with one `name: value`.
    pub fn set(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push_set(name.as_ref(), value.as_ref());
        self
    }

    /// Adds one more `name: value` field, keeping those already there.
    pub fn append(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push_append(name.as_ref(), value.as_ref());
        self
    }

    /// Drops every field called `name`.
    pub fn remove(mut self, name: impl AsRef<[u8]>) -> Self {
        self.push_remove(name.as_ref());
        self
    }

    /// [`Self::set`] in place.
    pub fn push_set(&mut self, name: &[u8], value: &[u8]) {
        self.push_field(name, |v| v.extend_from_slice(value), true);
    }

    /// [`Self::append`] in place.
    pub fn push_append(&mut self, name: &[u8], value: &[u8]) {
        self.push_field(name, |v| v.extend_from_slice(value), false);
    }

    /// [`Self::remove`] in place.
    pub fn push_remove(&mut self, name: &[u8]) {
        self.skip(name);
    }

    /// [`Self::set`] with the value formatted straight into the edits.
    pub fn set_fmt(&mut self, name: &[u8], value: std::fmt::Arguments<'_>) {
        // Writing into a Vec cannot fail; a Display impl that errs leaves
        // what it wrote, as `to_string` would panic instead.
        self.push_set_with(name, |buf| {
            let _ = std::fmt::Write::write_fmt(&mut ByteWriter(buf), value);
        });
    }

    /// [`Self::set`] with the value written straight into the edits by
    /// `write` (bytes appended to the vector it is given): for values put
    /// together per request without `fmt`'s machinery.
    pub fn push_set_with(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>)) {
        self.push_field(name, write, true);
    }

    /// `other`'s edits after these, as if pushed here one by one, without
    /// checking them again (they were when pushed to `other`): for a set
    /// of edits a router keeps and reuses.
    pub fn push_all(&mut self, other: &HeaderEdits) {
        let (sets, appends) = other.wire.split_at(other.appends_at);
        if self.appends_at == self.wire.len() {
            // No additions here yet: nothing to move.
            self.wire.extend_from_slice(sets);
        } else {
            self.wire
                .splice(self.appends_at..self.appends_at, sets.iter().copied());
        }
        self.appends_at += sets.len();
        self.wire.extend_from_slice(appends);
        self.skipped.extend_from_slice(&other.skipped);
    }

    /// Writes `name: value\r\n` at the end of `wire`, checks it, and for
    /// a replacement moves it before the additions and skips the name.
    /// A name or value too long for the old length fields (u16, u32) is
    /// dropped whole, as no head a limit lets through has one.
    fn push_field(&mut self, name: &[u8], write: impl FnOnce(&mut Vec<u8>), replace: bool) {
        let start = self.wire.len();
        self.wire.extend_from_slice(name);
        self.wire.extend_from_slice(b": ");
        let value_at = self.wire.len();
        write(&mut self.wire);
        let value = &self.wire[value_at..];
        if u16::try_from(name.len()).is_err() || u32::try_from(value.len()).is_err() {
            tracing::debug!("oversized header edit dropped");
            self.wire.truncate(start);
            return;
        }
        // The framing and hop-by-hop fields are the engine's own (it
        // writes them after the edits), and a second Host would let the
        // upstream route by another authority: an edit never writes them.
        // One test of the name's length clears most names (every request
        // pushes some edits).
        let engine_owned = ENGINE_OWNED_LENGTHS
            .checked_shr(name.len() as u32)
            .is_some_and(|bits| bits & 1 == 1)
            && (crate::wire::is_hop_by_hop(name)
                || (!replace && name.eq_ignore_ascii_case(b"host")));
        let valid = !name.is_empty()
            && !engine_owned
            && name.iter().all(|&b| crate::scan::is_tchar(b))
            && crate::scan::is_field_value(value);
        if valid {
            self.wire.extend_from_slice(b"\r\n");
        } else {
            tracing::debug!(name = %String::from_utf8_lossy(name), "invalid header edit dropped");
            self.wire.truncate(start);
        }
        if !replace {
            return;
        }
        self.skip(name);
        if valid {
            // Replacements go before the additions already there (if any).
            let len = self.wire.len() - start;
            if self.appends_at != start {
                self.wire[self.appends_at..].rotate_right(len);
            }
            self.appends_at += len;
        }
    }

    fn skip(&mut self, name: &[u8]) {
        let Ok(n) = u16::try_from(name.len()) else {
            tracing::debug!("oversized header edit dropped");
            return;
        };
        self.skipped.extend_from_slice(&n.to_le_bytes());
        self.skipped.extend_from_slice(name);
    }

    /// The fields to write, as bytes (`name: value\r\n` each):
    /// replacements, then additions. Public for another writer of heads
    /// (HTTP/2 to HTTP/1) that drops the replaced names itself.
    pub fn wire(&self) -> &[u8] {
        &self.wire
    }

    /// The fields to write, one by one (for tests and `Debug`).
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        self.wire
            .split(|&b| b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| {
                // A checked name has no colon, a checked value no CR or LF.
                let line = line.strip_suffix(b"\r").unwrap_or(line);
                let colon = line.iter().position(|&b| b == b':').unwrap_or(line.len());
                (&line[..colon], line.get(colon + 2..).unwrap_or_default())
            })
    }

    pub(crate) fn skips(&self, name: &[u8]) -> bool {
        let mut rest = self.skipped.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<2>() {
            let (skipped, tail) = tail.split_at(usize::from(u16::from_le_bytes(*len)));
            if skipped.eq_ignore_ascii_case(name) {
                return true;
            }
            rest = tail;
        }
        false
    }
}

impl std::fmt::Debug for HeaderEdits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
        let mut skipped = Vec::new();
        let mut rest = self.skipped.as_slice();
        while let Some((len, tail)) = rest.split_first_chunk::<2>() {
            let (name, tail) = tail.split_at(usize::from(u16::from_le_bytes(*len)));
            skipped.push(text(name));
            rest = tail;
        }
        f.debug_struct("HeaderEdits")
            .field("skipped", &skipped)
            .field(
                "fields",
                &self
                    .fields()
                    .map(|(n, v)| (text(n), text(v)))
                    .collect::<Vec<_>>(),
            )
            .finish()
    }
}

struct ByteWriter<'a>(&'a mut Vec<u8>);

impl std::fmt::Write for ByteWriter<'_> {
    fn write_str(&mut self, s: &str) -> std::fmt::Result {
        self.0.extend_from_slice(s.as_bytes());
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::{HeaderEdits, RequestTarget};

    #[test]
    fn edits_in_one_buffer_keep_their_order_and_kinds() {
        let mut edits = HeaderEdits::with_capacity(64).append("x-added", "1");
        edits.set_fmt(b"x-port", format_args!("{}", 8443u16));
        edits.push_remove(b"x-gone");
        edits.push_set(b"x-empty", b"");
        edits.push_set_with(b"x-bytes", |v| v.extend_from_slice(b"a;b"));
        let fields: Vec<_> = edits.fields().collect();
        assert_eq!(
            fields,
            [
                (&b"x-port"[..], &b"8443"[..]),
                (b"x-empty", b""),
                (b"x-bytes", b"a;b"),
                (b"x-added", b"1")
            ]
        );
        assert!(edits.skips(b"X-Gone") && edits.skips(b"x-port"));
        assert!(!edits.skips(b"x-added"), "an addition keeps the client's");
        // Too long for its length field: dropped, the rest intact.
        edits.set_fmt(&[b'a'; 70_000], format_args!("v"));
        edits.push_set_with(&[b'a'; 70_000], |v| v.push(b'v'));
        assert_eq!(edits.fields().count(), 4);
        assert!(!HeaderEdits::default().skips(b"x"));
        // push_all is pushing one by one.
        let kept = HeaderEdits::default()
            .append("x-a2", "2")
            .set("x-s2", "s")
            .remove("x-r2");
        let mut one_by_one = HeaderEdits::default().set("x-s1", "1").append("x-a1", "1");
        let mut at_once = one_by_one.clone();
        one_by_one = one_by_one
            .append("x-a2", "2")
            .set("x-s2", "s")
            .remove("x-r2");
        at_once.push_all(&kept);
        assert_eq!(at_once, one_by_one);
        assert!(at_once.skips(b"x-r2") && at_once.skips(b"X-S1"));
    }

    /// A value or name that could split the head, or a field that would
    /// frame the message a second time, is never written: the smuggling
    /// a header filter could otherwise open.
    #[test]
    fn edits_never_carry_line_breaks_framing_or_a_second_host() {
        let edits = HeaderEdits::default()
            .set("x-a", "1\r\nx-injected: 1")
            .append("x-b", "2\nx-injected: 2")
            .append("x-c", "3\r")
            .set("x-d\r\nx-injected", "4")
            .append("x d", "5")
            .set("Content-Length", "0")
            .append("transfer-encoding", "chunked")
            .set("connection", "keep-alive")
            .append("upgrade", "h2c")
            .append("Host", "evil.example")
            .set("x-ok", "fine\tvalue");
        let fields: Vec<_> = edits.fields().collect();
        assert_eq!(fields, [(&b"x-ok"[..], &b"fine\tvalue"[..])]);
        for name in [
            "te",
            "trailer",
            "keep-alive",
            "proxy-connection",
            "proxy-authenticate",
            "proxy-authorization",
            "TE",
        ] {
            let e = HeaderEdits::default().set(name, "1").append(name, "2");
            assert_eq!(e.fields().count(), 0, "{name}");
        }
        // Dropped replacements still take the client's field out.
        for name in ["x-a", "content-length", "connection"] {
            assert!(edits.skips(name.as_bytes()), "{name}");
        }
        // Replacing Host is a rewrite: one Host, the new one.
        let host = HeaderEdits::default().set("host", "b.example");
        assert_eq!(
            host.fields().collect::<Vec<_>>(),
            [(&b"host"[..], &b"b.example"[..])]
        );
        assert!(host.skips(b"Host"));
    }

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
