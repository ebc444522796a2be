//! `proxy-request-buffering` and `proxy-buffering` for HTTP/2 clients of
//! HTTP/1 backends (crate::plane::h2_upstream), as the HTTP/1 engine holds
//! them (`teapot_h1::Buffering`): the request body read before the
//! backend is contacted, up to the bytes the budget granted
//! (crate::live::buffers), and the response read from the backend ahead
//! of the client's flow-control window up to its grant. A route without
//! them pays one look at its policy.

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt};

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
    while out.body.len() < granted.request {
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
