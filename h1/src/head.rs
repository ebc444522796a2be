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
}

impl<'o> RequestHeadWriter<'o> {
    /// `METHOD TARGET HTTP/1.1`; an empty target (an HTTP/2 `:path` may
    /// not be one, a URI without a path is) is written as `/`.
    #[inline]
    pub fn start(out: &'o mut Vec<u8>, method: &[u8], target: &[u8]) -> Self {
        out.extend_from_slice(method);
        out.push(b' ');
        out.extend_from_slice(if target.is_empty() { b"/" } else { target });
        out.extend_from_slice(b" HTTP/1.1\r\n");
        RequestHeadWriter { out }
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

    /// The body's framing field, then the blank line that ends the head.
    #[inline]
    pub fn finish(self, body: BodyLength) {
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

    #[test]
    fn an_empty_target_is_the_root() {
        assert!(written("GET", "", BodyLength::Unframed).starts_with("GET / HTTP/1.1\r\n"));
    }
}
