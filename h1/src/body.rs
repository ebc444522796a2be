//! Body framing: Content-Length, chunked (re-validated and re-encoded)
//! and close-delimited bodies, decoded incrementally from a read buffer.
//!
//! The decoder never consumes a byte past the framed end of the body, so
//! whatever follows (a pipelined request, or bytes a smuggler hoped a
//! backend would read as one) stays in the buffer for the next head parse.

use crate::scan::{Refusal, split_field};

/// How a message body is delimited on the wire.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body at all.
    None,
    /// Exactly this many bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the sender closes the connection (responses only).
    Close,
}

/// How the decoded body is written out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Emit {
    /// As received for Content-Length and close-delimited bodies;
    /// canonically re-chunked (extensions dropped, trailers re-validated)
    /// for chunked ones.
    Same,
    /// The payload only (a chunked response to an HTTP/1.0 client, which
    /// is then close-delimited).
    Raw,
}

/// Why a body could not be relayed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    #[error("malformed chunked body: {0}")]
    BadChunk(&'static str),
    #[error("body larger than the limit")]
    TooLarge,
}

/// Longest chunk-size line (size and extensions) and largest trailer
/// section accepted.
const MAX_CHUNK_LINE: usize = 4096;
const MAX_TRAILERS: usize = 16 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    Size,
    Ext,
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// Inside the trailer section, at the start of a line or within one.
    Trailer,
    TrailerEndLf,
    Done,
}

#[derive(Debug)]
pub(crate) struct BodyDecoder {
    framing: BodyFraming,
    emit: Emit,
    /// Content-Length: bytes still to come. Chunked: of the current chunk.
    remaining: u64,
    state: ChunkState,
    digits: u8,
    line: usize,
    trailers: Vec<u8>,
    /// Payload bytes decoded so far.
    pub(crate) payload: u64,
    /// 0: no limit.
    limit: u64,
    done: bool,
}

impl BodyDecoder {
    pub(crate) fn new(framing: BodyFraming, emit: Emit, limit: u64) -> Self {
        let (remaining, done) = match framing {
            BodyFraming::None => (0, true),
            BodyFraming::Length(n) => (n, n == 0),
            BodyFraming::Chunked | BodyFraming::Close => (0, false),
        };
        BodyDecoder {
            framing,
            emit,
            remaining,
            state: ChunkState::Size,
            digits: 0,
            line: 0,
            trailers: Vec::new(),
            payload: 0,
            limit,
            done,
        }
    }

    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    fn count(&mut self, n: u64) -> Result<(), BodyError> {
        self.payload += n;
        if self.limit != 0 && self.payload > self.limit {
            return Err(BodyError::TooLarge);
        }
        Ok(())
    }

    /// Decodes from `input`, appends what to forward to `out` and returns
    /// how many input bytes belong to the body (never more than that).
    pub(crate) fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, BodyError> {
        if self.done {
            return Ok(0);
        }
        match self.framing {
            BodyFraming::None => Ok(0),
            BodyFraming::Length(_) => {
                let n = (input.len() as u64).min(self.remaining) as usize;
                self.count(n as u64)?;
                out.extend_from_slice(&input[..n]);
                self.remaining -= n as u64;
                self.done = self.remaining == 0;
                Ok(n)
            }
            BodyFraming::Close => {
                self.count(input.len() as u64)?;
                out.extend_from_slice(input);
                Ok(input.len())
            }
            BodyFraming::Chunked => self.feed_chunked(input, out),
        }
    }

    /// The sender closed its side. Only a close-delimited body ends there.
    pub(crate) fn eof(&mut self) -> bool {
        if self.framing == BodyFraming::Close {
            self.done = true;
        }
        self.done
    }

    fn feed_chunked(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, BodyError> {
        let rechunk = self.emit == Emit::Same;
        let mut i = 0;
        while i < input.len() && !self.done {
            let b = input[i];
            match self.state {
                ChunkState::Size => {
                    let d = match b {
                        b'0'..=b'9' => b - b'0',
                        b'a'..=b'f' => b - b'a' + 10,
                        b'A'..=b'F' => b - b'A' + 10,
                        b';' | b'\r' if self.digits > 0 => {
                            self.state = if b == b';' {
                                ChunkState::Ext
                            } else {
                                ChunkState::SizeLf
                            };
                            i += 1;
                            continue;
                        }
                        _ => return Err(BodyError::BadChunk("chunk size")),
                    };
                    if self.digits >= 16 {
                        return Err(BodyError::BadChunk("chunk size too long"));
                    }
                    self.digits += 1;
                    self.remaining = self.remaining * 16 + u64::from(d);
                    i += 1;
                }
                ChunkState::Ext => {
                    self.line += 1;
                    if self.line > MAX_CHUNK_LINE {
                        return Err(BodyError::BadChunk("chunk extension too long"));
                    }
                    match b {
                        b'\r' => self.state = ChunkState::SizeLf,
                        b'\t' => {}
                        0..=0x1f | 0x7f => return Err(BodyError::BadChunk("chunk extension")),
                        _ => {}
                    }
                    i += 1;
                }
                ChunkState::SizeLf => {
                    if b != b'\n' {
                        return Err(BodyError::BadChunk("bare CR after chunk size"));
                    }
                    i += 1;
                    self.digits = 0;
                    self.line = 0;
                    if self.remaining == 0 {
                        self.state = ChunkState::Trailer;
                    } else {
                        self.count(self.remaining)
                            .map_err(|_| BodyError::TooLarge)?;
                        if rechunk {
                            write_hex(out, self.remaining);
                            out.extend_from_slice(b"\r\n");
                        }
                        self.state = ChunkState::Data;
                    }
                }
                ChunkState::Data => {
                    let n = ((input.len() - i) as u64).min(self.remaining) as usize;
                    out.extend_from_slice(&input[i..i + n]);
                    i += n;
                    self.remaining -= n as u64;
                    if self.remaining == 0 {
                        self.state = ChunkState::DataCr;
                    }
                }
                ChunkState::DataCr => {
                    if b != b'\r' {
                        return Err(BodyError::BadChunk("chunk data longer than its size"));
                    }
                    self.state = ChunkState::DataLf;
                    i += 1;
                }
                ChunkState::DataLf => {
                    if b != b'\n' {
                        return Err(BodyError::BadChunk("bare CR after chunk data"));
                    }
                    if rechunk {
                        out.extend_from_slice(b"\r\n");
                    }
                    self.state = ChunkState::Size;
                    i += 1;
                }
                ChunkState::Trailer => {
                    if self.line == 0 && b == b'\r' {
                        self.state = ChunkState::TrailerEndLf;
                        i += 1;
                        continue;
                    }
                    if self.trailers.len() >= MAX_TRAILERS {
                        return Err(BodyError::BadChunk("trailer section too large"));
                    }
                    self.trailers.push(b);
                    self.line += 1;
                    i += 1;
                    if b == b'\n' {
                        self.check_trailer_line()?;
                        self.line = 0;
                    }
                }
                ChunkState::TrailerEndLf => {
                    if b != b'\n' {
                        return Err(BodyError::BadChunk("bare CR in trailer section"));
                    }
                    i += 1;
                    if rechunk {
                        out.extend_from_slice(b"0\r\n");
                        out.extend_from_slice(&self.trailers);
                        out.extend_from_slice(b"\r\n");
                    }
                    self.trailers = Vec::new();
                    self.state = ChunkState::Done;
                    self.done = true;
                }
                ChunkState::Done => break,
            }
        }
        Ok(i)
    }

    /// The trailer line just completed (it ends in `\n`): the header rules
    /// apply; framing and routing fields are dropped, never forwarded.
    fn check_trailer_line(&mut self) -> Result<(), BodyError> {
        let start = self.trailers.len() - self.line;
        let line = &self.trailers[start..];
        let bad = |r: Refusal| BodyError::BadChunk(r.label());
        if line.len() < 2 || line[line.len() - 2] != b'\r' {
            return Err(bad(Refusal::BareCrLf));
        }
        let body = &line[..line.len() - 2];
        if matches!(body[0], b' ' | b'\t') {
            return Err(bad(Refusal::ObsFold));
        }
        for &b in body {
            match b {
                b'\r' | b'\n' => return Err(bad(Refusal::BareCrLf)),
                b'\t' => {}
                0..=0x1f | 0x7f => return Err(bad(Refusal::ControlByte)),
                _ => {}
            }
        }
        let (name, _) = split_field(body).map_err(bad)?;
        let dropped = [
            &b"content-length"[..],
            b"transfer-encoding",
            b"host",
            b"connection",
            b"trailer",
        ]
        .iter()
        .any(|d| name.eq_ignore_ascii_case(d));
        if dropped {
            self.trailers.truncate(start);
        }
        Ok(())
    }
}

pub(crate) fn write_hex(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 16];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b"0123456789abcdef"[(n & 15) as usize];
        n >>= 4;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feeds `wire` in pieces of `step` bytes; returns (output, consumed).
    fn run(
        framing: BodyFraming,
        emit: Emit,
        wire: &[u8],
        step: usize,
    ) -> Result<(Vec<u8>, usize, bool), BodyError> {
        let mut d = BodyDecoder::new(framing, emit, 0);
        let mut out = Vec::new();
        let mut pos = 0;
        while pos < wire.len() && !d.is_done() {
            let end = (pos + step).min(wire.len());
            let n = d.feed(&wire[pos..end], &mut out)?;
            pos += n;
            if n < end - (pos - n) {
                break;
            }
        }
        Ok((out, pos, d.is_done()))
    }

    #[test]
    fn content_length_stops_at_the_end() {
        for step in [1, 3, 100] {
            let (out, used, done) =
                run(BodyFraming::Length(5), Emit::Same, b"helloGET /", step).unwrap();
            assert_eq!((out.as_slice(), used, done), (&b"hello"[..], 5, true));
        }
    }

    #[test]
    fn chunked_is_rechunked_canonically_and_stops_at_the_end() {
        let wire = b"5;ext=1\r\nhello\r\n0A\r\n0123456789\r\n0\r\nX-T: v\r\n\r\nNEXT";
        for step in [1, 2, 7, 1000] {
            let (out, used, done) = run(BodyFraming::Chunked, Emit::Same, wire, step).unwrap();
            assert!(done);
            assert_eq!(used, wire.len() - 4, "step {step}");
            assert_eq!(
                String::from_utf8(out).unwrap(),
                "5\r\nhello\r\na\r\n0123456789\r\n0\r\nX-T: v\r\n\r\n"
            );
            let (raw, _, _) = run(BodyFraming::Chunked, Emit::Raw, wire, step).unwrap();
            assert_eq!(raw, b"hello0123456789");
        }
    }

    #[test]
    fn framing_trailers_are_dropped() {
        let wire = b"1\r\na\r\n0\r\nContent-Length: 5\r\nX: y\r\nHost: h\r\n\r\n";
        let (out, _, done) = run(BodyFraming::Chunked, Emit::Same, wire, 4).unwrap();
        assert!(done);
        assert_eq!(out, b"1\r\na\r\n0\r\nX: y\r\n\r\n");
    }

    #[test]
    fn malformed_chunks_are_refused() {
        let bad: &[&[u8]] = &[
            b"x\r\n",
            b"\r\n",
            b" 5\r\nhello\r\n0\r\n\r\n",
            b"5 \r\nhello\r\n0\r\n\r\n",
            b"-5\r\n",
            b"0x5\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhelloX\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhello\r\n0\r\n\n",
            b"5;a\nb\r\n",
            b"5;\x00\r\n",
            b"11111111111111111\r\n",
            b"0\r\nX : y\r\n\r\n",
            b"0\r\n y\r\n\r\n",
            b"0\r\nX: a\nb\r\n\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
            b"0\r\nnocolon\r\n\r\n",
        ];
        for wire in bad {
            for step in [1, 1000] {
                assert!(
                    run(BodyFraming::Chunked, Emit::Same, wire, step).is_err(),
                    "{:?} step {step}",
                    String::from_utf8_lossy(wire)
                );
            }
        }
    }

    #[test]
    fn limits_count_payload_bytes() {
        let mut d = BodyDecoder::new(BodyFraming::Chunked, Emit::Same, 4);
        let mut out = Vec::new();
        assert_eq!(
            d.feed(b"5\r\nhello\r\n", &mut out),
            Err(BodyError::TooLarge)
        );
        let mut d = BodyDecoder::new(BodyFraming::Close, Emit::Same, 4);
        assert_eq!(d.feed(b"hello", &mut out), Err(BodyError::TooLarge));
        let mut d = BodyDecoder::new(BodyFraming::Length(4), Emit::Same, 4);
        assert_eq!(d.feed(b"hello", &mut out), Ok(4));
    }

    #[test]
    fn only_close_delimited_bodies_end_at_eof() {
        assert!(BodyDecoder::new(BodyFraming::Close, Emit::Same, 0).eof());
        assert!(!BodyDecoder::new(BodyFraming::Length(3), Emit::Same, 0).eof());
        assert!(!BodyDecoder::new(BodyFraming::Chunked, Emit::Same, 0).eof());
        assert!(BodyDecoder::new(BodyFraming::Length(0), Emit::Same, 0).eof());
    }

    #[test]
    fn hex() {
        for n in [0u64, 1, 15, 16, 255, 0x10000, u64::MAX] {
            let mut out = Vec::new();
            write_hex(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{n:x}"));
        }
    }
}
