//! The one HTTP/1.1 request-head encoder. Every request teapot sends to a
//! backend over HTTP/1.1 leaves through [`RequestHeadWriter`]: one
//! forwarded by the engine, one carried from an HTTP/2 client, a mirrored
//! copy, and the sub-requests to authentication services and error-page
//! backends. The request line, the field syntax and the body's framing are
//! written here once, so a rule about them (an empty target, which framing
//! field a body gets) changes in one place.
//!
//! What goes into the head is each caller's: the engine copies the
//! client's end-to-end fields with its router's edits, the HTTP/2 path its
//! edited header map, a mirror drops the forwarding fields. Field values
//! come from parsers that already refused bytes which could split a head
//! (`httparse`, `http::HeaderValue`, [`crate::HeaderEdits`]'s checks).
//!
//! A route may ask for another version or `Connection` field
//! ([`UpstreamHttp`]: ingress-nginx's `proxy-http-version` and
//! `connection-proxy-header`); the writer writes both, and says which
//! bodies such a head can carry and whether its connection may be reused.

use crate::upstream_http::{HttpVersion, UpstreamHttp};
use crate::wire::{field, write_u64};

/// How the request's body is framed on the wire (RFC 9112 §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyLength {
    /// No framing field: no body, or one whose `Content-Length` is among
    /// the fields already written.
    Unframed,
    /// `content-length: 0`: a request that declared an empty body keeps
    /// saying so.
    Empty,
    /// `content-length: N`.
    Length(u64),
    /// `transfer-encoding: chunked`.
    Chunked,
}

/// A request head being written into a caller's buffer: the request line
/// first ([`RequestHeadWriter::start`]), then fields, then
/// [`RequestHeadWriter::finish`] with the body's framing and the blank line.
#[derive(Debug)]
pub struct RequestHeadWriter<'o> {
    out: &'o mut Vec<u8>,
    http: &'o UpstreamHttp,
}

impl<'o> RequestHeadWriter<'o> {
    /// `METHOD TARGET HTTP/1.1`; an empty target (an HTTP/2 `:path` may
    /// not be one, a URI without a path is) is written as `/`.
    #[inline]
    pub fn start(out: &'o mut Vec<u8>, method: &[u8], target: &[u8]) -> Self {
        Self::start_with(out, method, target, &UpstreamHttp::DEFAULT)
    }

    /// [`Self::start`] in `http`'s version; [`Self::finish`] writes its
    /// `Connection` field.
    #[inline]
    pub fn start_with(
        out: &'o mut Vec<u8>,
        method: &[u8],
        target: &[u8],
        http: &'o UpstreamHttp,
    ) -> Self {
        out.extend_from_slice(method);
        out.push(b' ');
        out.extend_from_slice(if target.is_empty() { b"/" } else { target });
        out.extend_from_slice(match http.version {
            HttpVersion::Http11 => b" HTTP/1.1\r\n",
            HttpVersion::Http10 => b" HTTP/1.0\r\n",
        });
        RequestHeadWriter { out, http }
    }

    /// One field, `name: value`.
    #[inline]
    pub fn field(&mut self, name: &[u8], value: &[u8]) {
        field(self.out, name, value);
    }

    /// Fields already encoded as `name: value\r\n` lines and checked when
    /// they were made ([`crate::HeaderEdits::wire`], the forwarding
    /// fields' per-connection block).
    #[inline]
    pub fn encoded(&mut self, fields: &[u8]) {
        self.out.extend_from_slice(fields);
    }

    /// The buffer, for the engine's copy of the client's fields.
    #[inline]
    pub(crate) fn buffer(&mut self) -> &mut Vec<u8> {
        self.out
    }

    /// The route's `Connection` field, the body's framing field, then the
    /// blank line that ends the head. A chunked body in an HTTP/1.0 head
    /// ([`UpstreamHttp::takes_unknown_length`]) never goes as written:
    /// the engine sends it only held whole, with its length instead, and
    /// answers 411 otherwise (crate::engine::buffering).
    #[inline]
    pub fn finish(self, body: BodyLength) {
        if let Some(c) = &self.http.connection {
            field(self.out, b"connection", c.as_str().as_bytes());
        }
        match body {
            BodyLength::Unframed => {}
            BodyLength::Empty => self.out.extend_from_slice(b"content-length: 0\r\n"),
            BodyLength::Length(n) => {
                self.out.extend_from_slice(b"content-length: ");
                write_u64(self.out, n);
                self.out.extend_from_slice(b"\r\n");
            }
            BodyLength::Chunked => self
                .out
                .extend_from_slice(b"transfer-encoding: chunked\r\n"),
        }
        self.out.extend_from_slice(b"\r\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::upstream_http::{ConnectionValue, MAX_CONNECTION_VALUE};

    fn written(method: &str, target: &str, body: BodyLength) -> String {
        let mut out = Vec::new();
        let mut head = RequestHeadWriter::start(&mut out, method.as_bytes(), target.as_bytes());
        head.field(b"host", b"a.example");
        head.encoded(b"x-one: 1\r\n");
        head.finish(body);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn each_framing_is_written_once_after_the_fields() {
        assert_eq!(
            written("GET", "/a?b", BodyLength::Unframed),
            "GET /a?b HTTP/1.1\r\nhost: a.example\r\nx-one: 1\r\n\r\n"
        );
        assert_eq!(
            written("POST", "/", BodyLength::Empty),
            "POST / HTTP/1.1\r\nhost: a.example\r\nx-one: 1\r\ncontent-length: 0\r\n\r\n"
        );
        assert_eq!(
            written("PUT", "/", BodyLength::Length(1234567890)),
            "PUT / HTTP/1.1\r\nhost: a.example\r\nx-one: 1\r\ncontent-length: 1234567890\r\n\r\n"
        );
        assert_eq!(
            written("POST", "/", BodyLength::Chunked),
            "POST / HTTP/1.1\r\nhost: a.example\r\nx-one: 1\r\ntransfer-encoding: chunked\r\n\r\n"
        );
    }

    fn written_with(http: &UpstreamHttp, body: BodyLength) -> String {
        let mut out = Vec::new();
        let mut head = RequestHeadWriter::start_with(&mut out, b"POST", b"/up", http);
        head.field(b"host", b"a.example");
        head.finish(body);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn a_routes_version_and_connection_are_written() {
        let http10 = UpstreamHttp {
            version: HttpVersion::Http10,
            connection: None,
        };
        assert_eq!(
            written_with(&http10, BodyLength::Length(3)),
            "POST /up HTTP/1.0\r\nhost: a.example\r\ncontent-length: 3\r\n\r\n"
        );
        let keep = UpstreamHttp {
            version: HttpVersion::Http11,
            connection: ConnectionValue::new("keep-alive"),
        };
        assert_eq!(
            written_with(&keep, BodyLength::Chunked),
            "POST /up HTTP/1.1\r\nhost: a.example\r\nconnection: keep-alive\r\ntransfer-encoding: chunked\r\n\r\n"
        );
        let both = UpstreamHttp {
            version: HttpVersion::Http10,
            connection: ConnectionValue::new("Keep-Alive ,x-a"),
        };
        assert_eq!(
            written_with(&both, BodyLength::Unframed),
            "POST /up HTTP/1.0\r\nhost: a.example\r\nconnection: Keep-Alive, x-a\r\n\r\n"
        );
        // teapot's own: HTTP/1.1 and no Connection field.
        assert_eq!(
            written_with(&UpstreamHttp::default(), BodyLength::Unframed),
            "POST /up HTTP/1.1\r\nhost: a.example\r\n\r\n"
        );
    }

    #[test]
    fn http10_takes_no_chunked_body_and_no_reuse() {
        let http10 = UpstreamHttp {
            version: HttpVersion::Http10,
            connection: ConnectionValue::new("keep-alive"),
        };
        assert!(!http10.takes_unknown_length());
        assert!(!http10.reuses());
        assert!(UpstreamHttp::DEFAULT.takes_unknown_length());
        assert!(UpstreamHttp::DEFAULT.reuses());
        let close = UpstreamHttp {
            version: HttpVersion::Http11,
            connection: ConnectionValue::new("x-a, Close"),
        };
        assert!(close.takes_unknown_length());
        assert!(!close.reuses());
        let upgrade = UpstreamHttp {
            version: HttpVersion::Http11,
            connection: ConnectionValue::new("upgrade"),
        };
        assert!(upgrade.reuses());
    }

    /// Anything that could end the field or the head early, or go past
    /// the bound, is refused when the value is made.
    #[test]
    fn connection_values_are_bounded_token_lists() {
        for good in ["close", "keep-alive", "upgrade", "keep-alive, x-a", "a,b"] {
            assert!(ConnectionValue::new(good).is_some(), "{good}");
        }
        assert!(ConnectionValue::new(&"a".repeat(MAX_CONNECTION_VALUE)).is_some());
        for bad in [
            "",
            ",",
            "close,",
            "keep alive",
            "close\r\nx-evil: 1",
            "close\n",
            "clo\tse",
            "a;b",
            "\"close\"",
            "caf\u{e9}",
            &"a".repeat(MAX_CONNECTION_VALUE + 1),
        ] {
            assert!(ConnectionValue::new(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn an_empty_target_is_the_root() {
        assert!(written("GET", "", BodyLength::Unframed).starts_with("GET / HTTP/1.1\r\n"));
    }
}
