//! A backend's response head and how its body is framed (RFC 9112 §6.3),
//! for the engine and for any other path that reads HTTP/1 responses
//! (teapot's HTTP/2-to-HTTP/1 exchange): one set of rules, whichever
//! protocol the client speaks.

use std::mem::MaybeUninit;

use crate::body::BodyFraming;
use crate::scan::{MAX_HEADERS_CAP, MAX_RESPONSE_HEADER_BYTES, eq_lower, parse_length, trim_ows};
use crate::wire::{ConnOptions, connection_options};

/// What a final response head says about its body and its connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseFraming {
    pub body: BodyFraming,
    /// The `Content-Length` it declared (a HEAD or 304 answer keeps the
    /// representation's length while it has no body).
    pub length: Option<u64>,
    /// Both the version and `Connection` allow another request on the
    /// backend's connection, and the body's end is framed.
    pub keep_alive: bool,
}

/// The framing of a response with `status` to a request (HEAD:
/// `head_request`): no body for HEAD, 1xx, 204 and 304; chunked when
/// `Transfer-Encoding` is exactly `chunked` (any other coding cannot be
/// forwarded as it is, and both framings at once are refused: RFC 9112
/// §6.3 point 3); else one `Content-Length` (repeats must agree); else
/// close-delimited. `Err`: the head cannot be relayed.
pub fn response_framing(
    status: u16,
    http10: bool,
    head_request: bool,
    headers: &[httparse::Header<'_>],
) -> Result<ResponseFraming, &'static str> {
    framing_with(
        status,
        http10,
        head_request,
        headers,
        connection_options(headers),
    )
}

/// [`response_framing`] with the head's `Connection` options already read
/// (the engine reads them once, for the fields it drops too).
pub(crate) fn framing_with(
    status: u16,
    http10: bool,
    head_request: bool,
    headers: &[httparse::Header<'_>],
    opts: ConnOptions,
) -> Result<ResponseFraming, &'static str> {
    let mut length: Option<u64> = None;
    let mut chunked = false;
    for h in headers {
        if eq_lower(h.name.as_bytes(), b"content-length") {
            read_length(&mut length, h.value)?;
        } else if eq_lower(h.name.as_bytes(), b"transfer-encoding") {
            read_coding(&mut chunked, h.value)?;
        }
    }
    framing_of(status, http10, head_request, (length, chunked), opts)
}

fn read_length(length: &mut Option<u64>, value: &[u8]) -> Result<(), &'static str> {
    let n = parse_length(trim_ows(value)).map_err(|_| "malformed Content-Length")?;
    if length.is_some_and(|l| l != n) {
        return Err("conflicting Content-Length");
    }
    *length = Some(n);
    Ok(())
}

fn read_coding(chunked: &mut bool, value: &[u8]) -> Result<(), &'static str> {
    if *chunked || !trim_ows(value).eq_ignore_ascii_case(b"chunked") {
        return Err("a transfer coding other than chunked");
    }
    *chunked = true;
    Ok(())
}

/// What the engine reads of a final response head's fields, in one walk
/// over them: its `Connection` options, its framing, and whether it has
/// its own `Server` and `Date`.
pub(crate) struct HeadFields {
    pub(crate) opts: ConnOptions,
    pub(crate) framing: ResponseFraming,
    pub(crate) has_server: bool,
    pub(crate) has_date: bool,
}

/// [`HeadFields`] of a response with `status` (see [`response_framing`]).
pub(crate) fn head_fields(
    status: u16,
    http10: bool,
    head_request: bool,
    headers: &[httparse::Header<'_>],
) -> Result<HeadFields, &'static str> {
    let mut opts = ConnOptions::default();
    let (mut length, mut chunked) = (None, false);
    let (mut has_server, mut has_date) = (false, false);
    for h in headers {
        let name = h.name.as_bytes();
        // By length first: most names are none of these five.
        match name.len() {
            4 => has_date |= name.eq_ignore_ascii_case(b"date"),
            6 => has_server |= name.eq_ignore_ascii_case(b"server"),
            10 if eq_lower(name, b"connection") => opts.read(h.value),
            14 if eq_lower(name, b"content-length") => read_length(&mut length, h.value)?,
            17 if eq_lower(name, b"transfer-encoding") => read_coding(&mut chunked, h.value)?,
            _ => {}
        }
    }
    let framing = framing_of(status, http10, head_request, (length, chunked), opts)?;
    Ok(HeadFields {
        opts,
        framing,
        has_server,
        has_date,
    })
}

fn framing_of(
    status: u16,
    http10: bool,
    head_request: bool,
    (length, chunked): (Option<u64>, bool),
    opts: ConnOptions,
) -> Result<ResponseFraming, &'static str> {
    if chunked && length.is_some() {
        return Err("both Content-Length and Transfer-Encoding");
    }
    let bodyless = head_request || status == 204 || status == 304 || (100..200).contains(&status);
    let body = if bodyless {
        BodyFraming::None
    } else if chunked {
        BodyFraming::Chunked
    } else if let Some(n) = length {
        BodyFraming::Length(n)
    } else {
        BodyFraming::Close
    };
    let keep_alive = body != BodyFraming::Close
        && status != 101
        && if http10 {
            opts.keep_alive && !opts.close
        } else {
            !opts.close
        };
    Ok(ResponseFraming {
        body,
        length,
        keep_alive,
    })
}

/// A complete, valid response head: its status, framing and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseHead {
    pub status: u16,
    pub framing: ResponseFraming,
    /// Bytes of the head, its blank line included.
    pub len: usize,
}

/// Parses the response head at the start of `buf` as the engine does:
/// `Ok(None)` until it is complete (at most
/// [`MAX_RESPONSE_HEADER_BYTES`], [`MAX_HEADERS_CAP`] fields), each field
/// handed to `field` in order (`false` from it refuses the head), then
/// [`response_framing`]. A 101 is refused: only the engine's own upgrade
/// relay takes one.
pub fn parse_response(
    buf: &[u8],
    head_request: bool,
    mut field: impl FnMut(&str, &[u8]) -> bool,
) -> Result<Option<ResponseHead>, &'static str> {
    let len = match response_head_len(buf)? {
        Some((len, _)) => len,
        None if buf.len() > MAX_RESPONSE_HEADER_BYTES => return Err("response head too large"),
        None => return Ok(None),
    };
    if len > MAX_RESPONSE_HEADER_BYTES {
        return Err("response head too large");
    }
    let mut slots = header_slots();
    let resp = parse_head(&buf[..len], &mut slots).map_err(|()| "malformed response head")?;
    let status = resp.code.ok_or("malformed status line")?;
    if status == 101 {
        return Err("an upgrade where none was asked for");
    }
    let framing = response_framing(status, resp.version == Some(0), head_request, resp.headers)?;
    for h in resp.headers.iter() {
        if !field(h.name, h.value) {
            return Err("malformed response field");
        }
    }
    Ok(Some(ResponseHead {
        status,
        framing,
        len,
    }))
}

/// `Some((head length, status))` once a response head is complete. Only
/// the status line is read here: the head is parsed once, by
/// [`parse_head`], which refuses a malformed one. Bytes that cannot
/// begin a status line are refused at once rather than waited on.
pub(crate) fn response_head_len(buf: &[u8]) -> Result<Option<(usize, u16)>, &'static str> {
    const PREFIX: &[u8] = b"HTTP/1.";
    let n = buf.len().min(PREFIX.len());
    if buf[..n] != PREFIX[..n] {
        return Err("malformed status line");
    }
    let Some(end) = crate::scan::find_head_end(buf, 0) else {
        return Ok(None);
    };
    // "HTTP/1.x NNN": the version digit, one space, three digits.
    let line = &buf[..end];
    match line.get(8..12) {
        Some([b' ', a, b, c]) if [a, b, c].iter().all(|d| d.is_ascii_digit()) => {
            let code = |d: &u8| u16::from(d - b'0');
            Ok(Some((end, code(a) * 100 + code(b) * 10 + code(c))))
        }
        _ => Err("malformed status code"),
    }
}

/// Room for a head's fields, left uninitialised: httparse fills only what
/// it parses, and zeroing all 128 slots cost more than parsing a short head.
pub(crate) fn header_slots<'b>() -> [MaybeUninit<httparse::Header<'b>>; MAX_HEADERS_CAP] {
    [const { MaybeUninit::uninit() }; MAX_HEADERS_CAP]
}

/// A complete response head, its fields in `slots`; anything else is
/// `Err`. Every line must end in CRLF, as in a request head (crate::scan):
/// a bare LF is where parsers that disagree about a message's end split
/// it differently.
pub(crate) fn parse_head<'h, 'b>(
    raw: &'b [u8],
    slots: &'h mut [MaybeUninit<httparse::Header<'b>>],
) -> Result<httparse::Response<'h, 'b>, ()> {
    let mut resp = httparse::Response::new(&mut []);
    let parsed = match httparse::ParserConfig::default()
        .parse_response_with_uninit_headers(&mut resp, raw, slots)
    {
        Ok(httparse::Status::Complete(n)) => n,
        _ => return Err(()),
    };
    // Where each line ends, from what httparse parsed (its default
    // configuration: no folding, no LF inside a line):
    // a field's line starts right after the line before it ends, and the
    // blank line ends the head. So each field's start and the head's end
    // are checked, not every byte for an LF, which was a quarter of the
    // head's parse. The slices are `raw`'s; positions are compared by
    // address, any other would fail the check.
    let head = &raw[..parsed];
    let base = raw.as_ptr().addr();
    let after_crlf =
        |at: usize| at.checked_sub(2).and_then(|from| head.get(from..at)) == Some(b"\r\n");
    // The empty lines httparse skips before the status line (none after
    // `response_head_len`) must be CRLFs too.
    let empty = raw
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(raw.len());
    if !head.ends_with(b"\r\n\r\n")
        || !raw[..empty].chunks(2).all(|line| line == b"\r\n")
        || !resp
            .headers
            .iter()
            .all(|h| after_crlf(h.name.as_ptr().addr().wrapping_sub(base)))
        // Bytes past the blank line (none: the head is cut there), one LF
        // at a time.
        || (parsed < raw.len()
            && memchr::memchr_iter(b'\n', &raw[parsed..])
                .any(|lf| raw[..parsed + lf].last() != Some(&b'\r')))
    {
        return Err(());
    }
    Ok(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(head: &[u8], head_request: bool) -> Result<Option<ResponseHead>, &'static str> {
        parse_response(head, head_request, |_, _| true)
    }

    fn framing(head: &[u8], head_request: bool) -> ResponseFraming {
        parse(head, head_request).unwrap().unwrap().framing
    }

    #[test]
    fn response_framing_follows_rfc_9112() {
        let h = parse(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", false)
            .unwrap()
            .unwrap();
        assert_eq!(h.framing.body, BodyFraming::Length(5));
        assert!(h.framing.keep_alive);
        assert_eq!(h.len, 38);
        assert_eq!(h.status, 200);
        let chunked = framing(
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
            false,
        );
        assert_eq!(chunked.body, BodyFraming::Chunked);
        let close = framing(b"HTTP/1.1 200 OK\r\nServer: x\r\n\r\n", false);
        assert_eq!(close.body, BodyFraming::Close);
        assert!(!close.keep_alive);
        let head = framing(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", true);
        assert_eq!(head.body, BodyFraming::None);
        assert_eq!(head.length, Some(5));
        assert!(!framing(b"HTTP/1.0 200 OK\r\nContent-Length: 1\r\n\r\n", false).keep_alive);
        assert!(
            framing(
                b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 1\r\n\r\n",
                false
            )
            .keep_alive
        );
        assert!(!framing(b"HTTP/1.1 204 No\r\nConnection: close\r\n\r\n", false).keep_alive);
        assert!(
            parse(b"HTTP/1.1 200 OK\r\nContent", false)
                .unwrap()
                .is_none()
        );
        assert!(parse(b"HTT", false).unwrap().is_none());
        let mut fields = Vec::new();
        parse_response(
            b"HTTP/1.1 200 OK\r\nA: 1\r\nB:  2 \r\n\r\n",
            false,
            |n, v| {
                fields.push((n.to_owned(), v.to_vec()));
                true
            },
        )
        .unwrap();
        assert_eq!(
            fields,
            [("A".into(), b"1".to_vec()), ("B".into(), b"2".to_vec())]
        );
        assert!(parse_response(b"HTTP/1.1 200 OK\r\nA: 1\r\n\r\n", false, |_, _| false).is_err());
    }

    /// The head check by counts refuses exactly what a search for an LF
    /// without its CR before the parse did: every byte that matters at
    /// every position of a head, put in or replacing the one there.
    #[test]
    fn bare_line_feeds_are_refused_as_by_a_search() {
        fn reference(raw: &[u8]) -> bool {
            if memchr::memchr_iter(b'\n', raw).any(|lf| lf == 0 || raw[lf - 1] != b'\r') {
                return false;
            }
            let mut slots = header_slots();
            let mut resp = httparse::Response::new(&mut []);
            matches!(
                httparse::ParserConfig::default()
                    .parse_response_with_uninit_headers(&mut resp, raw, &mut slots),
                Ok(httparse::Status::Complete(_))
            )
        }
        let bytes = [b'\r', b'\n', b' ', b'\t', b':', b'x', b'0', 0x80, 0, 0x7f];
        let mut accepted = 0;
        for head in [
            &b"HTTP/1.1 200 OK\r\nA: b\r\nC:d \r\nE:\r\n\r\n"[..],
            b"HTTP/1.1 204\r\n\r\n",
            b"HTTP/1.0 200 \r\nX: \t\r\n\r\n",
            b"\r\nHTTP/1.1 200 OK\r\nA:  \r\nB: c\r\nD: e f\r\n\r\n",
            b"\r\n\r\nHTTP/1.1 200\r\n\r\n",
        ] {
            for at in 0..=head.len() {
                for &b in &bytes {
                    for replace in [false, true] {
                        if replace && at == head.len() {
                            continue;
                        }
                        let mut raw = head.to_vec();
                        if replace {
                            raw[at] = b;
                        } else {
                            raw.insert(at, b);
                        }
                        // Each with the bytes after it too (a head cut at
                        // its first blank line has none).
                        for raw in [raw.clone(), [raw.as_slice(), b"\n"].concat()] {
                            let mut slots = header_slots();
                            let ours = parse_head(&raw, &mut slots).is_ok();
                            assert_eq!(
                                ours,
                                reference(&raw),
                                "{:?}",
                                raw.escape_ascii().to_string()
                            );
                            accepted += usize::from(ours);
                        }
                    }
                }
            }
        }
        assert!(accepted > 100, "{accepted}");
    }

    #[test]
    fn response_heads_that_are_refused() {
        for bad in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"HTTP/1.1 20 OK\r\n\r\n",
            b"HTTP/2 200 OK\r\n\r\n",
            b"HTTP/1.1 101 Switching\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nBad Name: x\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nX: a\0b\r\n\r\n",
            b"HTTP/1.1 200 OK\r\n folded\r\n\r\n",
            b"HTTP/1.1 200 OK\r\nA: b\r\n\nContent-Length: 5\r\n\r\n",
            b"HTTP/1.1 200 OK\nA: b\r\n\r\n",
        ] {
            assert!(
                parse(bad, false).is_err(),
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
        let mut big = b"HTTP/1.1 200 OK\r\n".to_vec();
        big.resize(MAX_RESPONSE_HEADER_BYTES + 1, b'a');
        assert!(parse(&big, false).is_err());
    }
}
