//! `proxy-request-buffering` and `proxy-buffering` for HTTP/2 clients of
//! HTTP/1 backends (crate::plane::h2_upstream), as the HTTP/1 engine holds
//! them (`teapot_h1::Buffering`): the request body read before the
//! backend is contacted, up to the bytes the budget granted
//! (crate::live::buffers), and the response read from the backend ahead
//! of the client's flow-control window up to its grant. An answer read
//! whole that way gives its backend connection back (pooled, or closed)
//! before the client has taken it ([`Rest`]), as nginx's buffering frees
//! the backend from a slow client. A route without them pays one look at
//! its policy.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use teapot_h1::{BodyFraming, UpstreamConn};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::plane::backend_answer::Chunked;

use crate::live::buffers::{Budget, Held};
use crate::plane::h2_stream::{Failure, Responder, StreamCtx};
use crate::plane::proxy::Router;
use http::request::Parts;

/// What [`hold`] read of a request body, and the stream's grant.
#[derive(Default)]
pub(super) struct HeldBody {
    /// The body's first bytes (all of it when `complete`).
    body: BytesMut,
    /// The client ended the stream within the grant.
    complete: bool,
    /// Response bytes the backend may be read ahead by.
    pub ahead: usize,
    _held: Option<Held>,
}

/// Reads the request body of a stream on a buffering route, before its
/// backend is contacted: until the client ends it or the grant is held,
/// each wait for a piece bounded by `wait` (the route's read timeout, as
/// a streamed body's), the route's body limit kept.
pub(super) async fn hold(
    router: &Router,
    parts: &Parts,
    st: &mut StreamCtx<'_>,
) -> Result<HeldBody, Failure> {
    let Some(asked) = st.policy.as_ref().and_then(|p| p.buffering) else {
        return Ok(HeldBody::default());
    };
    let declared = parts
        .headers
        .get(http::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    let o = &router.options;
    let operator = (
        o.connect_timeout,
        router.read_timeout(st.gateway.as_ref()),
        o.write_timeout,
    );
    let (_, wait, _) =
        crate::plane::traffic::engines::upstream_timeouts(st.policy.as_deref(), operator);
    let framing = match (st.client.body.is_empty(), declared) {
        (true, _) => teapot_h1::BodyFraming::None,
        (false, Some(n)) => teapot_h1::BodyFraming::Length(n),
        (false, None) => teapot_h1::BodyFraming::Chunked,
    };
    let tenant = st._tenant.as_ref().map(|t| t.gate());
    let (granted, held) = crate::live::buffers::grant(
        Budget::global(),
        (asked.request, asked.response),
        tenant,
        framing,
    );
    let mut out = HeldBody {
        ahead: granted.response,
        _held: held,
        ..HeldBody::default()
    };
    if granted.request == 0 {
        return Ok(out);
    }
    let limit = st.body_limit;
    // A body of the declared length is read on to its end, so that it is
    // known whole (then it can be sent again).
    let short = |held: usize| held < granted.request || declared == Some(held as u64);
    while short(out.body.len()) {
        let piece = tokio::time::timeout(wait, st.client.body.read())
            .await
            .map_err(|_| Failure::ClientGone)??;
        let Some(piece) = piece else {
            out.complete = true;
            break;
        };
        if limit > 0 && st.client.body.bytes > limit {
            return Err(Failure::BodyTooLarge);
        }
        out.body.extend_from_slice(&piece);
    }
    Ok(out)
}

impl HeldBody {
    /// The client's whole body was held (it ended within the grant).
    pub(super) fn whole(&self) -> bool {
        self.complete
    }

    /// Puts the held body behind `head` (the request head, chunked when
    /// `chunked`): a complete body of unknown length goes with a
    /// `Content-Length` instead, a cut one as the first chunk. Returns
    /// whether the rest of the body is still chunked.
    pub(super) fn behind(&mut self, head: &mut Vec<u8>, chunked: bool) -> bool {
        const CHUNKED: &[u8] = b"transfer-encoding: chunked\r\n\r\n";
        if self.body.is_empty() && !self.complete {
            return chunked;
        }
        let body = std::mem::take(&mut self.body);
        if !chunked {
            head.extend_from_slice(&body);
            return false;
        }
        if self.complete && head.ends_with(CHUNKED) {
            head.truncate(head.len() - CHUNKED.len());
            head.extend_from_slice(format!("content-length: {}\r\n\r\n", body.len()).as_bytes());
            head.extend_from_slice(&body);
            return false;
        }
        if !body.is_empty() {
            head.extend_from_slice(format!("{:x}\r\n", body.len()).as_bytes());
            head.extend_from_slice(&body);
            head.extend_from_slice(b"\r\n");
        }
        chunked
    }
}

/// [`Responder::send_data`], reading the backend into `buf` meanwhile
/// while it holds less than `ahead` bytes: a slow client's window then
/// holds the backend no longer than the grant takes to fill. The caller's
/// next read finds the backend's end or failure, which stops the reading
/// ahead here.
pub(super) async fn send(
    out: &mut Responder,
    data: Bytes,
    end: bool,
    backend: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
    ahead: usize,
) -> Result<(), Failure> {
    if ahead == 0 {
        return out.send_data(data, end).await;
    }
    let send = out.send_data(data, end);
    tokio::pin!(send);
    let mut open = true;
    loop {
        tokio::select! {
            sent = &mut send => return sent,
            got = read_some(backend, buf), if open && buf.len() < ahead => {
                open = matches!(got, Ok(n) if n > 0);
            }
        }
    }
}

/// A response body read from the backend ahead of the client
/// (`proxy-buffering`), relayed by [`Rest::relay`]: the backend is read
/// while the client is written to, as long as less than the grant waits
/// for the client, and its connection is given back as soon as the body
/// is all read, however long the client then takes. The exchange
/// (crate::plane::h2_upstream) hands it over after the response head.
#[derive(Default)]
pub(super) struct Rest(Option<Relay>);

struct Relay {
    framing: BodyFraming,
    /// What was read after the head.
    buf: BytesMut,
    /// The backend's connection may be pooled once the body is read
    /// (keep-alive, the request body sent).
    reusable: bool,
    ahead: usize,
    read_timeout: Duration,
}

impl Rest {
    /// Whether a body of `framing` is relayed this way: one that ends by
    /// its framing (a body to the connection's end leaves no connection
    /// to give back).
    pub(super) fn relays(framing: BodyFraming) -> bool {
        matches!(framing, BodyFraming::Length(_) | BodyFraming::Chunked)
    }

    pub(super) fn new(
        framing: BodyFraming,
        buf: BytesMut,
        reusable: bool,
        (ahead, read_timeout): (usize, Duration),
    ) -> Rest {
        Rest(Some(Relay {
            framing,
            buf,
            reusable,
            ahead,
            read_timeout,
        }))
    }

    pub(super) fn relays_body(&self) -> bool {
        self.0.is_some()
    }

    /// Relays the body to `out`; `release` gets the backend's connection
    /// (and whether it may be pooled) once the body is all read.
    pub(super) async fn relay(
        self,
        out: &mut Responder,
        stream: UpstreamConn,
        release: impl FnOnce(UpstreamConn, bool),
    ) -> Result<(), Failure> {
        let Some(r) = self.0 else {
            return Ok(());
        };
        let Relay {
            framing,
            mut buf,
            reusable,
            ahead,
            read_timeout,
        } = r;
        let mut remaining = match framing {
            BodyFraming::Length(n) => n,
            _ => 0,
        };
        let mut chunked = Chunked::default();
        let mut release = Some(release);
        let mut stream = Some(stream);
        let mut queue = VecDeque::<Bytes>::new();
        let mut queued = 0usize;
        let mut idle = Some(out);
        let mut sending = None;
        let mut ending = false;
        loop {
            // What was read goes to the queue.
            let whole = match framing {
                BodyFraming::Length(_) => {
                    let take = remaining.min(buf.len() as u64) as usize;
                    if take > 0 {
                        remaining -= take as u64;
                        queued += take;
                        queue.push_back(buf.split_to(take).freeze());
                    }
                    remaining == 0
                }
                _ => {
                    while let Some(data) = chunked.decode(&mut buf).map_err(Failure::Upstream)? {
                        queued += data.len();
                        queue.push_back(data);
                    }
                    chunked.done()
                }
            };
            if whole && let (Some(stream), Some(release)) = (stream.take(), release.take()) {
                release(stream, reusable && buf.is_empty());
            }
            if let Some(out) = idle.take() {
                if let Some(data) = queue.pop_front() {
                    queued -= data.len();
                    ending = whole && queue.is_empty();
                    sending = Some(Box::pin(send_one(out, data, ending)));
                } else if whole {
                    ending = true;
                    sending = Some(Box::pin(send_one(out, Bytes::new(), true)));
                } else {
                    idle = Some(out);
                }
            }
            // With nothing queued the body needs more bytes to go on.
            let read_ahead = !whole && (queued + buf.len() < ahead || queue.is_empty());
            tokio::select! {
                (out, sent) = poll_opt(sending.as_mut()) => {
                    sent?;
                    if ending {
                        return Ok(());
                    }
                    sending = None;
                    idle = Some(out);
                }
                got = read_opt(stream.as_mut(), &mut buf, read_timeout), if read_ahead => {
                    match got {
                        Err(_) => return Err(Failure::ReadTimeout),
                        Ok(Ok(0)) => return Err(Failure::Upstream("upstream closed mid-body")),
                        Ok(Err(_)) => return Err(Failure::Upstream("reading the upstream response")),
                        Ok(Ok(_)) => {}
                    }
                }
            }
        }
    }
}

/// One piece to the client; the responder comes back with the result, so
/// that the relay's loop can hold the write in flight while it reads.
async fn send_one(
    out: &mut Responder,
    data: Bytes,
    end: bool,
) -> (&mut Responder, Result<(), Failure>) {
    let sent = out.send_data(data, end).await;
    (out, sent)
}

/// The write in flight, if any (none: never ready).
async fn poll_opt<F: std::future::Future + Unpin>(f: Option<&mut F>) -> F::Output {
    match f {
        Some(f) => f.await,
        None => std::future::pending().await,
    }
}

/// One read from the backend within `timeout` (no connection: never
/// ready; the relay reads only while it holds one).
async fn read_opt(
    stream: Option<&mut UpstreamConn>,
    buf: &mut BytesMut,
    timeout: Duration,
) -> Result<std::io::Result<usize>, tokio::time::error::Elapsed> {
    match stream {
        Some(s) => tokio::time::timeout(timeout, read_some(s, buf)).await,
        None => std::future::pending().await,
    }
}

async fn read_some(
    backend: &mut (impl AsyncRead + Unpin),
    buf: &mut BytesMut,
) -> std::io::Result<usize> {
    if buf.capacity() - buf.len() < 1024 {
        buf.reserve(16 * 1024);
    }
    backend.read_buf(buf).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(body: &[u8], complete: bool) -> HeldBody {
        HeldBody {
            body: BytesMut::from(body),
            complete,
            ..HeldBody::default()
        }
    }

    #[test]
    fn a_complete_body_of_unknown_length_goes_with_its_length() {
        let mut head = b"POST / HTTP/1.1\r\nhost: a\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        assert!(!held(b"hello", true).behind(&mut head, true));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST / HTTP/1.1\r\nhost: a\r\ncontent-length: 5\r\n\r\nhello"
        );
    }

    #[test]
    fn a_cut_body_is_the_first_chunk_and_a_declared_one_goes_as_it_is() {
        let mut head = b"POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        assert!(held(b"0123456789abcdefg", false).behind(&mut head, true));
        assert!(head.ends_with(b"chunked\r\n\r\n11\r\n0123456789abcdefg\r\n"));
        let mut head = b"PUT / HTTP/1.1\r\ncontent-length: 3\r\n\r\n".to_vec();
        assert!(!held(b"abc", true).behind(&mut head, false));
        assert!(head.ends_with(b"\r\n\r\nabc"));
        let mut head = b"GET / HTTP/1.1\r\n\r\n".to_vec();
        assert!(!HeldBody::default().behind(&mut head, false));
        assert_eq!(head, b"GET / HTTP/1.1\r\n\r\n");
    }
}
