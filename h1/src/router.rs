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

/// Header changes applied while a head is copied, without building a map:
/// fields named by a removal or a replacement are skipped, then the
/// replacements and the additions are written, each in the order given.
/// Names are matched case-insensitively; a name that is not a token or a
/// value with CR, LF or another control byte but HTAB is dropped (never
/// written).
///
/// Every edit lives in one byte buffer (operation, lengths, name, value,
/// back to back): a router that edits every request, like the forwarding
/// headers, pays one allocation for all its edits, and formats values in
/// place ([`Self::set_fmt`]) instead of building a `String` for each.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct HeaderEdits {
    buf: Vec<u8>,
}

/// Per edit: operation, name length (u16), value length (u32).
const EDIT_PREFIX: usize = 7;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Remove = 0,
    Set = 1,
    Append = 2,
}

impl HeaderEdits {
    /// Room for `bytes` bytes of edits (names and values, plus 7 per edit).
    pub fn with_capacity(bytes: usize) -> Self {
        HeaderEdits {
            buf: Vec::with_capacity(bytes),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Replaces every field called `name` with one `name: value`.
    pub fn set(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push(Op::Set, name.as_ref(), value.as_ref());
        self
    }

    /// Adds one more `name: value` field, keeping those already there.
    pub fn append(mut self, name: impl AsRef<[u8]>, value: impl AsRef<[u8]>) -> Self {
        self.push(Op::Append, name.as_ref(), value.as_ref());
        self
    }

    /// Drops every field called `name`.
    pub fn remove(mut self, name: impl AsRef<[u8]>) -> Self {
        self.push(Op::Remove, name.as_ref(), b"");
        self
    }

    /// [`Self::set`] in place.
    pub fn push_set(&mut self, name: &[u8], value: &[u8]) {
        self.push(Op::Set, name, value);
    }

    /// [`Self::remove`] in place.
    pub fn push_remove(&mut self, name: &[u8]) {
        self.push(Op::Remove, name, b"");
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
        let at = self.buf.len();
        if !self.push(Op::Set, name, b"") {
            return;
        }
        let before = self.buf.len();
        write(&mut self.buf);
        match u32::try_from(self.buf.len() - before) {
            Ok(len) => self.buf[at + 3..at + EDIT_PREFIX].copy_from_slice(&len.to_le_bytes()),
            Err(_) => self.buf.truncate(at),
        }
    }

    /// False when the edit was dropped: a name or value too long for its
    /// length field is no valid field in any head a limit lets through.
    fn push(&mut self, op: Op, name: &[u8], value: &[u8]) -> bool {
        let (Ok(n), Ok(v)) = (u16::try_from(name.len()), u32::try_from(value.len())) else {
            tracing::debug!("oversized header edit dropped");
            return false;
        };
        self.buf.reserve(EDIT_PREFIX + name.len() + value.len());
        self.buf.push(op as u8);
        self.buf.extend_from_slice(&n.to_le_bytes());
        self.buf.extend_from_slice(&v.to_le_bytes());
        self.buf.extend_from_slice(name);
        self.buf.extend_from_slice(value);
        true
    }

    fn iter(&self) -> impl Iterator<Item = (Op, &[u8], &[u8])> + '_ {
        let mut rest = self.buf.as_slice();
        std::iter::from_fn(move || {
            let (prefix, tail) = rest.split_first_chunk::<EDIT_PREFIX>()?;
            let op = match prefix[0] {
                0 => Op::Remove,
                1 => Op::Set,
                _ => Op::Append,
            };
            let n = usize::from(u16::from_le_bytes([prefix[1], prefix[2]]));
            let v = u32::from_le_bytes([prefix[3], prefix[4], prefix[5], prefix[6]]) as usize;
            let (name, tail) = tail.split_at(n);
            let (value, tail) = tail.split_at(v);
            rest = tail;
            Some((op, name, value))
        })
    }

    /// The fields to write: replacements, then additions.
    pub(crate) fn fields(&self) -> impl Iterator<Item = (&[u8], &[u8])> + '_ {
        let of = move |want: Op| {
            self.iter()
                .filter(move |(op, _, _)| *op == want)
                .map(|(_, n, v)| (n, v))
        };
        of(Op::Set).chain(of(Op::Append))
    }

    pub(crate) fn skips(&self, name: &[u8]) -> bool {
        self.iter()
            .any(|(op, n, _)| op != Op::Append && n.eq_ignore_ascii_case(name))
    }
}

impl std::fmt::Debug for HeaderEdits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut list = f.debug_list();
        for (op, n, v) in self.iter() {
            list.entry(&(op, String::from_utf8_lossy(n), String::from_utf8_lossy(v)));
        }
        list.finish()
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

#[cfg(test)]
mod tests {
    use super::HeaderEdits;

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
    }
}
