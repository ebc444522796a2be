//! Body framing: Content-Length, chunked (re-validated and re-encoded)
//! and close-delimited bodies, decoded incrementally from a read buffer.
//!
//! The decoder never consumes a byte past the framed end of the body, so
//! whatever follows (a pipelined request, or bytes a smuggler hoped a
//! backend would read as one) stays in the buffer for the next head parse.

use crate::scan::{Refusal, is_tchar, split_field};

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
    /// Past the size digits, inside the chunk extensions.
    Ext(Ext),
    SizeLf,
    Data,
    DataCr,
    DataLf,
    /// Inside the trailer section, at the start of a line or within one.
    Trailer,
    TrailerEndLf,
    Done,
}

/// Where the chunk-size line is within its grammar (RFC 9112 §7.1.1, RFC
/// 9110 §5.6):
///
/// ```text
/// chunk-ext     = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] )
/// chunk-ext-val = token / quoted-string
/// quoted-string = DQUOTE *( qdtext / quoted-pair ) DQUOTE
/// ```
///
/// Extensions are dropped when the body is re-chunked, but they are still
/// read to the letter: a line a backend (or a proxy in front) would end
/// somewhere else, say inside a quoted-string left open at the CRLF, is
/// where the two disagree on where the next request starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ext {
    /// Whitespace after the size or a value: only a `;` may follow.
    Bws,
    /// After a `;`: whitespace, then a name.
    NameStart,
    Name,
    /// Whitespace after a name: `=` or `;` must follow.
    AfterName,
    /// After a `=`: whitespace, then a token or a quoted-string.
    ValueStart,
    Token,
    Quoted,
    /// After a backslash inside a quoted-string.
    Escape,
    /// Right after a quoted-string's closing quote.
    Closed,
}

/// What one byte of a chunk extension does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ExtStep {
    Next(Ext),
    /// The CR ending the line.
    LineEnd,
}

/// The transition for byte `b` in state `at`; every byte the grammar has
/// no place for is refused, CR and LF inside a quoted-string first.
fn ext_step(at: Ext, b: u8) -> Result<ExtStep, &'static str> {
    use Ext::*;
    use ExtStep::{LineEnd, Next};
    let ws = matches!(b, b' ' | b'\t');
    Ok(match at {
        Bws if ws => Next(Bws),
        NameStart if ws => Next(NameStart),
        AfterName if ws => Next(AfterName),
        ValueStart if ws => Next(ValueStart),
        Name if ws => Next(AfterName),
        Token | Closed if ws => Next(Bws),
        Bws | Name | AfterName | Token | Closed if b == b';' => Next(NameStart),
        Name | AfterName if b == b'=' => Next(ValueStart),
        Name | Token | Closed if b == b'\r' => LineEnd,
        NameStart | Name if is_tchar(b) => Next(Name),
        ValueStart | Token if is_tchar(b) => Next(Token),
        ValueStart if b == b'"' => Next(Quoted),
        Quoted => match b {
            b'"' => Next(Closed),
            b'\\' => Next(Escape),
            b'\t' | b' ' | 0x21 | 0x23..=0x5b | 0x5d..=0x7e | 0x80..=0xff => Next(Quoted),
            _ => return Err("CR, LF or control byte in a chunk extension's quoted-string"),
        },
        Escape => match b {
            b'\t' | b' ' | 0x21..=0x7e | 0x80..=0xff => Next(Quoted),
            _ => return Err("chunk extension's quoted-pair escapes no character"),
        },
        NameStart => return Err("chunk extension without a name"),
        ValueStart => return Err("chunk extension '=' without a value"),
        Bws => return Err("whitespace in the chunk-size line not before ';'"),
        Name | AfterName | Token | Closed => return Err("chunk extension"),
    })
}

/// A chunked HTTP/1 body decoded to its payload, for a relay into another
/// framing (a backend's response to an HTTP/2 client): the same grammar,
/// limits and trailer rules as the engine's own bodies, extensions and
/// trailers dropped.
#[derive(Debug)]
pub struct ChunkedPayload(BodyDecoder);

impl Default for ChunkedPayload {
    fn default() -> Self {
        ChunkedPayload(BodyDecoder::new(BodyFraming::Chunked, Emit::Raw, 0))
    }
}

impl ChunkedPayload {
    /// Decodes from `input`, appends the payload to `out` and returns how
    /// many input bytes belong to the body (never more than that).
    pub fn feed(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<usize, BodyError> {
        self.0.feed(input, out)
    }

    /// Whether the last chunk and the trailer section have been read.
    pub fn is_done(&self) -> bool {
        self.0.is_done()
    }
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
                        b';' | b' ' | b'\t' | b'\r' if self.digits > 0 => {
                            self.state = match b {
                                b';' => ChunkState::Ext(Ext::NameStart),
                                b'\r' => ChunkState::SizeLf,
                                _ => ChunkState::Ext(Ext::Bws),
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
                ChunkState::Ext(at) => {
                    self.line += 1;
                    if self.line > MAX_CHUNK_LINE {
                        return Err(BodyError::BadChunk("chunk extension too long"));
                    }
                    self.state = match ext_step(at, b).map_err(BodyError::BadChunk)? {
                        ExtStep::Next(next) => ChunkState::Ext(next),
                        ExtStep::LineEnd => ChunkState::SizeLf,
                    };
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

    /// `line` as the size line of a one-byte chunk, then the last chunk.
    fn chunk_with_line(line: &[u8]) -> Vec<u8> {
        [line, b"\r\na\r\n0\r\n\r\n"].concat()
    }

    fn refused(wire: &[u8]) -> bool {
        [1, 2, 1000]
            .iter()
            .all(|&step| run(BodyFraming::Chunked, Emit::Same, wire, step).is_err())
    }

    #[test]
    fn chunk_lines_in_the_grammar_are_accepted() {
        let good: &[&[u8]] = &[
            b"1",
            b"01",
            b"000000000000001",
            b"1;a",
            b"1;a=b",
            b"1;a=b;c",
            b"1;a=b;c=d",
            b"1;!#$%&'*+-.^_`|~09AZaz=!#$%&'*+-.^_`|~",
            b"1;a=\"\"",
            b"1;a=\"x y\tz\"",
            b"1;a=\"\\\"\"",
            b"1;a=\"\\\\\"",
            b"1;a=\"say \\\"hi\\\"; b=c\"",
            b"1;a=\"\\x\\ \\\t\"",
            b"1;a=\"!#[]~\x80\xff\"",
            b"1;a=\"\\\xff\"",
            b"1;a=\"x\";b",
            b"1 ;a",
            b"1\t;a",
            b"1; a",
            b"1;a =b",
            b"1;a= b",
            b"1;a = \"b\" ; c = d",
            b"1;a=b ;c",
            b"1;a;b;c",
        ];
        for line in good {
            let wire = chunk_with_line(line);
            for step in [1, 2, 1000] {
                let (out, used, done) = run(BodyFraming::Chunked, Emit::Same, &wire, step)
                    .unwrap_or_else(|e| {
                        panic!("{:?} step {step}: {e}", line.escape_ascii().to_string())
                    });
                assert!(done, "{:?}", line.escape_ascii().to_string());
                assert_eq!(used, wire.len());
                // Extensions are never forwarded.
                assert_eq!(out, b"1\r\na\r\n0\r\n\r\n");
            }
        }
    }

    #[test]
    fn chunk_lines_outside_the_grammar_are_refused() {
        let bad: &[&[u8]] = &[
            // Size: hex digits only, at least one, at most 16.
            b"",
            b";a",
            b" 1",
            b"+1",
            b"0x1",
            b"1g",
            b"1.",
            b"1,2",
            b"1=a",
            b"1\"a\"",
            b"11111111111111111",
            b"00000000000000001",
            // Whitespace after the size or a value leads to a `;`.
            b"1 ",
            b"1\t",
            b"1 a",
            b"1;a ",
            b"1;a=b ",
            b"1;a=\"b\" ",
            // A name after every `;`.
            b"1;",
            b"1; ",
            b"1;;a",
            b"1;=b",
            b"1;a;",
            b"1;\"a\"",
            b"1;a(b)",
            b"1;a/b",
            b"1;a@b",
            b"1;a b",
            // A value after every `=`.
            b"1;a=",
            b"1;a= ",
            b"1;a=;b",
            b"1;a==b",
            b"1;a=b=c",
            b"1;a=(b)",
            b"1;a=b,c",
            b"1;a=b\"c\"",
            // Quoted-strings: closed on the line, no control byte, no
            // escape of nothing, nothing glued after the closing quote.
            b"1;a=\"",
            b"1;a=\"b",
            b"1;a=\"b\\\"",
            b"1;a=\"b\\",
            b"1;a=\"b\"c",
            b"1;a=\"b\"\"c\"",
            b"1;a=\"\0\"",
            b"1;a=\"\x01\"",
            b"1;a=\"\x7f\"",
            b"1;a=\"\x1b[0m\"",
            b"1;a=\"\\\x7f\"",
            b"1;a=\"\\\0\"",
            // Control bytes anywhere in the line.
            b"1;a\0",
            b"1;a=b\x0b",
            b"1;\x7f",
            b"1\x0c;a",
        ];
        for line in bad {
            assert!(
                refused(&chunk_with_line(line)),
                "{:?}",
                line.escape_ascii().to_string()
            );
        }
        // Line endings: a bare LF or CR anywhere in the line, also inside
        // a quoted-string (where a reader that reads it on ends the line
        // elsewhere), and an escape or a quote left open at the CRLF.
        let endings: &[&[u8]] = &[
            b"1\na\r\n0\r\n\r\n",
            b"1\r\ra\r\n0\r\n\r\n",
            b"1;a\nb\r\na\r\n0\r\n\r\n",
            b"1;a\rb\r\na\r\n0\r\n\r\n",
            b"1;a=\"\n\"\r\na\r\n0\r\n\r\n",
            b"1;a=\"\r\"\r\na\r\n0\r\n\r\n",
            b"1;a=\"\r\n\"\r\na\r\n0\r\n\r\n",
            b"1;a=\"\\\r\n\"\r\na\r\n0\r\n\r\n",
            b"1;a=\"\\\n\"\r\na\r\n0\r\n\r\n",
            b"0;a=\"\r\n\r\nGET / HTTP/1.1\r\nHost: b\r\n\r\n\"\r\n\r\n",
            b"0;a=\"\\\r\n\r\n",
        ];
        for wire in endings {
            assert!(refused(wire), "{:?}", wire.escape_ascii().to_string());
        }
        // The extension's length is bounded like the size's.
        let long = [&b"1;a="[..], &[b'b'; MAX_CHUNK_LINE]].concat();
        assert!(refused(&chunk_with_line(&long)));
        let fits = [&b"1;a="[..], &[b'b'; MAX_CHUNK_LINE - 4]].concat();
        assert!(!refused(&chunk_with_line(&fits)));
    }

    /// The open quote at the end of the last chunk's line: refused before
    /// a byte after it is taken as the end of the body.
    #[test]
    fn an_open_quote_does_not_end_the_last_chunk() {
        let wire = b"0;a=\"\r\n\r\nGET /x HTTP/1.1\r\nHost: b.example\r\n\r\n";
        for step in [1, 6, 7, 1000] {
            let mut d = BodyDecoder::new(BodyFraming::Chunked, Emit::Same, 0);
            let mut out = Vec::new();
            let mut pos = 0;
            let verdict = loop {
                let end = (pos + step).min(wire.len());
                match d.feed(&wire[pos..end], &mut out) {
                    Ok(n) => pos += n,
                    Err(e) => break Err(e),
                }
                if d.is_done() || pos == wire.len() {
                    break Ok(pos);
                }
            };
            assert!(
                matches!(verdict, Err(BodyError::BadChunk(_))),
                "step {step}: {verdict:?}"
            );
            assert!(!d.is_done());
        }
    }

    #[test]
    fn trailer_sections_follow_the_header_rules() {
        let good: &[&[u8]] = &[
            b"0\r\n\r\n",
            b"0;a=\"b\"\r\n\r\n",
            b"0\r\nX: y\r\n\r\n",
            b"0\r\nX:\r\n\r\n",
            b"0\r\nX:y\r\nZ: \t w \t\r\n\r\n",
            b"0\r\nX: a\tb \x80\xff\"\\\r\n\r\n",
        ];
        for wire in good {
            for step in [1, 2, 1000] {
                let r = run(BodyFraming::Chunked, Emit::Same, wire, step);
                assert!(
                    matches!(r, Ok((_, n, true)) if n == wire.len()),
                    "{:?} step {step}: {r:?}",
                    wire.escape_ascii().to_string()
                );
            }
        }
        let bad: &[&[u8]] = &[
            b"0\r\nX: y\n\r\n",
            b"0\r\nX: y\r\n\n",
            b"0\r\n\n",
            b"0\r\n\r\r\n",
            b"0\r\n\rX: y\r\n\r\n",
            b"0\r\nX: a\rb\r\n\r\n",
            b"0\r\nX: a\0b\r\n\r\n",
            b"0\r\nX: a\x7f\r\n\r\n",
            b"0\r\nX: a\x1b\r\n\r\n",
            b"0\r\n X: y\r\n\r\n",
            b"0\r\nX: y\r\n\tz\r\n\r\n",
            b"0\r\nX : y\r\n\r\n",
            b"0\r\nX\t: y\r\n\r\n",
            b"0\r\n: y\r\n\r\n",
            b"0\r\nX(1): y\r\n\r\n",
            b"0\r\n\"X\": y\r\n\r\n",
            b"0\r\nnocolon\r\n\r\n",
            b"0\r\nGET / HTTP/1.1\r\n\r\n",
        ];
        for wire in bad {
            assert!(refused(wire), "{:?}", wire.escape_ascii().to_string());
        }
        let big = [
            &b"0\r\n"[..],
            &b"X: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n"
                .repeat(MAX_TRAILERS / 64 + 1),
            b"\r\n",
        ]
        .concat();
        assert!(refused(&big));
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
