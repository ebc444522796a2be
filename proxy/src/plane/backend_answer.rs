//! A backend's HTTP/1.1 answer as the proxy reads it into `http` types:
//! the response head by the HTTP/1 engine's rules
//! (`teapot_h1::parse_response`: RFC 9112's framing, the engine's limits)
//! and a chunked body by its decoder. For the HTTP/2 server's HTTP/1
//! backends (`plane::h2_upstream`) and the sub-requests
//! (`plane::traffic::auth`), so a backend's answer is read the same
//! whichever path asked.

use bytes::{Buf, Bytes, BytesMut};
use http::header::TRANSFER_ENCODING;
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use teapot_h1::{BodyError, BodyFraming, ChunkedPayload};

/// A backend's response head, validated by the HTTP/1 engine's rules
/// (`teapot_h1::parse_response`: RFC 9112's framing, the engine's limits).
#[derive(Debug)]
pub struct ResponseHead {
    pub status: StatusCode,
    /// Its fields, less `Transfer-Encoding`, HTTP/1.1's framing that
    /// HTTP/2's DATA frames re-do (an HTTP/2 response must not carry it,
    /// RFC 9113 §8.2.2; `Router::edit_response` drops the connection's
    /// fields).
    pub headers: HeaderMap,
    pub framing: BodyFraming,
    /// Both the version and `Connection` allow another request.
    pub keep_alive: bool,
    /// Bytes of the head, its blank line included.
    pub len: usize,
}

impl ResponseHead {
    pub fn informational(&self) -> bool {
        self.status.is_informational()
    }
}

/// Parses a response head at the start of `buf`: `Ok(None)` until it is
/// complete. A 101 is refused: HTTP/2 has no upgrade.
pub fn parse_response(
    buf: &[u8],
    head_request: bool,
) -> std::result::Result<Option<ResponseHead>, &'static str> {
    let mut headers = HeaderMap::with_capacity(16);
    let head = teapot_h1::parse_response(buf, head_request, |name, value| {
        let Ok(name) = HeaderName::from_bytes(name.as_bytes()) else {
            return false;
        };
        if name == TRANSFER_ENCODING {
            return true;
        }
        match HeaderValue::from_bytes(value) {
            Ok(value) => {
                headers.append(name, value);
                true
            }
            Err(_) => false,
        }
    })?;
    let Some(head) = head else {
        return Ok(None);
    };
    let status = StatusCode::from_u16(head.status).map_err(|_| "unusable status code")?;
    Ok(Some(ResponseHead {
        status,
        headers,
        framing: head.framing.body,
        keep_alive: head.framing.keep_alive,
        len: head.len,
    }))
}

/// A chunked response body decoded to its payload by the HTTP/1 engine's
/// own decoder (`teapot_h1::ChunkedPayload`: RFC 9112's chunk-line
/// grammar, its limits and trailer rules), so a backend's body is read the
/// same whichever protocol the client speaks.
#[derive(Debug, Default)]
pub struct Chunked(ChunkedPayload);

impl Chunked {
    pub fn done(&self) -> bool {
        self.0.is_done()
    }

    /// The next payload bytes in `buf` (consumed), or `None` when `buf`
    /// holds no more of them (more must be read, or the body is done).
    pub fn decode(
        &mut self,
        buf: &mut BytesMut,
    ) -> std::result::Result<Option<Bytes>, &'static str> {
        if buf.is_empty() || self.0.is_done() {
            return Ok(None);
        }
        let mut out = Vec::new();
        let n = self.0.feed(buf, &mut out).map_err(|e| match e {
            BodyError::BadChunk(why) => why,
            BodyError::TooLarge => "chunked body larger than the limit",
        })?;
        buf.advance(n);
        Ok((!out.is_empty()).then(|| Bytes::from(out)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head as the HTTP/1 engine reads it, its fields in a header
    /// map without Transfer-Encoding; its rules are teapot_h1's (tested
    /// there).
    #[test]
    fn response_heads_by_the_engines_rules() {
        let h = parse_response(
            b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: 1\r\nX-A: 2\r\n\r\nhello",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.status, StatusCode::OK);
        assert_eq!(h.framing, BodyFraming::Length(5));
        assert!(h.keep_alive);
        assert_eq!(h.len, 54);
        assert_eq!(h.headers.get_all("x-a").iter().count(), 2);
        let h = parse_response(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        )
        .unwrap()
        .unwrap();
        assert_eq!(h.framing, BodyFraming::Chunked);
        assert!(!h.headers.contains_key(TRANSFER_ENCODING));
        assert!(h.headers.is_empty());
        assert!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent", false)
                .unwrap()
                .is_none()
        );
        // What the HTTP/1 engine refuses, this path refuses: a transfer
        // coding it cannot undo, both framings, a bare LF, an upgrade.
        let gzip = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n";
        assert!(parse_response(gzip, false).is_err());
        assert!(parse_response(b"HTTP/1.1 101 Switching\r\n\r\n", false).is_err());
        assert!(parse_response(b"HTTP/1.1 099 Low\r\n\r\n", false).is_err());
    }

    #[test]
    fn chunked_payload_across_reads() {
        let wire = b"5;ext=1\r\nhello\r\n6\r\n world\r\n0\r\nX-Trailer: 1\r\n\r\nNEXT";
        for split in 1..wire.len() {
            let mut d = Chunked::default();
            let mut buf = BytesMut::new();
            let mut out = Vec::new();
            for part in [&wire[..split], &wire[split..]] {
                buf.extend_from_slice(part);
                while let Some(b) = d.decode(&mut buf).unwrap() {
                    out.extend_from_slice(&b);
                }
            }
            assert!(d.done());
            assert_eq!(out, b"hello world");
            assert_eq!(&buf[..], b"NEXT", "nothing past the body is consumed");
        }
        // Data longer than its size: refused (with the payload before it:
        // the body is broken either way).
        let mut buf = BytesMut::from(&b"5\r\nhelloXX"[..]);
        assert!(Chunked::default().decode(&mut buf).is_err());
        let mut buf = BytesMut::from(&b"zz\r\n"[..]);
        assert!(Chunked::default().decode(&mut buf).is_err());
        // The engine's chunk-line grammar: a quoted-string left open at
        // the end of the line ends nothing.
        for bad in [
            &b"1;a=\"\r\nx\r\n0\r\n\r\n"[..],
            b"1;\r\nx\r\n",
            b"1;a=\r\nx\r\n",
        ] {
            let mut buf = BytesMut::from(bad);
            assert!(Chunked::default().decode(&mut buf).is_err(), "{bad:?}");
        }
    }
}
