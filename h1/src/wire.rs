//! Head serialization: request heads for upstreams and response heads for
//! clients, written as bytes straight from the parsed slices, with the
//! hop-by-hop rules and the router's edits applied on the way.

use crate::edits::HeaderEdits;
use crate::hop::is_hop_by_hop;
use crate::router::RewriteField;
use crate::scan::{eq_lower, has_token, is_field_value, is_tchar};

/// Fields a `Connection` option may not remove: routing and framing stay
/// under the engine's control.
fn is_protected(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(b"host")
        || name.eq_ignore_ascii_case(b"content-length")
        || name.eq_ignore_ascii_case(b"transfer-encoding")
}

/// Whether `name` is listed in any `Connection` field of `headers`.
pub(crate) fn connection_lists(headers: &[httparse::Header<'_>], name: &[u8]) -> bool {
    headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .any(|h| has_token(h.value, name))
}

/// The Connection options of a message.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnOptions {
    pub(crate) close: bool,
    pub(crate) keep_alive: bool,
    pub(crate) upgrade: bool,
    /// Some Connection field lists something else (a field to drop).
    pub(crate) other: bool,
}

pub(crate) fn connection_options(headers: &[httparse::Header<'_>]) -> ConnOptions {
    let mut o = ConnOptions::default();
    for h in headers
        .iter()
        .filter(|h| eq_lower(h.name.as_bytes(), b"connection"))
    {
        o.read(h.value);
    }
    o
}

impl ConnOptions {
    /// Adds the options of one `Connection` field's value.
    pub(crate) fn read(&mut self, value: &[u8]) {
        // Nearly every Connection field is one option: named without
        // splitting the value.
        let whole = crate::scan::trim_ows(value);
        if eq_lower(whole, b"keep-alive") {
            self.keep_alive = true;
            return;
        }
        if whole.eq_ignore_ascii_case(b"close") {
            self.close = true;
            return;
        }
        for t in value.split(|&b| b == b',') {
            let t = crate::scan::trim_ows(t);
            if t.eq_ignore_ascii_case(b"close") {
                self.close = true;
            } else if t.eq_ignore_ascii_case(b"keep-alive") {
                self.keep_alive = true;
            } else if t.eq_ignore_ascii_case(b"upgrade") {
                self.upgrade = true;
            } else if !t.is_empty() {
                self.other = true;
            }
        }
    }
}

/// Copies the end-to-end fields of `headers`, parsed from the head
/// `raw`, into `out`, then the edits. Fields kept one after another are
/// copied as they came, their lines in one piece: a head's fields mostly
/// go on unchanged, and a copy per name, separator, value and line end was
/// four small copies per field. The lines are the head's own, which the
/// parse checked (each field's line starts after a CRLF, none folded), so
/// only the spacing around a value can differ from writing them anew.
pub(crate) fn write_fields(
    out: &mut Vec<u8>,
    raw: &[u8],
    headers: &[httparse::Header<'_>],
    options: ConnOptions,
    edits: &HeaderEdits,
) {
    let base = raw.as_ptr().addr();
    // Where a field's line starts in `raw`.
    let at = |name: &str| {
        let at = name.as_ptr().addr().wrapping_sub(base);
        raw.get(at..)
            .is_some_and(|rest| rest.starts_with(name.as_bytes()))
            .then_some(at)
    };
    let mark = out.len();
    // Where the run of kept fields not yet copied starts.
    let mut run = None;
    for h in headers {
        let name = h.name.as_bytes();
        let kept = !(is_hop_by_hop(name)
            || (options.other && !is_protected(name) && connection_lists(headers, name))
            || (!edits.is_empty() && edits.skips(name)));
        if kept == run.is_some() {
            continue;
        }
        let here = at(h.name);
        match (run.take(), here) {
            (None, Some(here)) => run = Some(here),
            (Some(start), Some(here)) if here >= start => {
                out.extend_from_slice(&raw[start..here]);
            }
            // Not `raw`'s fields (no caller passes such): one by one.
            _ => {
                out.truncate(mark);
                return write_fields_rewritten(out, headers, options, edits, None);
            }
        }
    }
    if let Some(start) = run {
        // The last field's line ends at the first LF after its name: a
        // value holds none.
        let end = headers.last().and_then(|h| {
            let name_end = at(h.name)? + h.name.len();
            let lf = memchr::memchr(b'\n', &raw[name_end..])?;
            Some(name_end + lf + 1)
        });
        match end {
            Some(end) if end >= start => out.extend_from_slice(&raw[start..end]),
            _ => {
                out.truncate(mark);
                return write_fields_rewritten(out, headers, options, edits, None);
            }
        }
    }
    // Checked when they were pushed.
    out.extend_from_slice(edits.wire());
}

/// [`write_fields`], each copied field's value offered to `rewrite`
/// first (a response's, crate::router::Upstreams::response_rewrite).
pub(crate) fn write_fields_rewritten(
    out: &mut Vec<u8>,
    headers: &[httparse::Header<'_>],
    options: ConnOptions,
    edits: &HeaderEdits,
    rewrite: Option<&dyn RewriteField>,
) {
    for h in headers {
        let name = h.name.as_bytes();
        if is_hop_by_hop(name)
            || (options.other && !is_protected(name) && connection_lists(headers, name))
            || (!edits.is_empty() && edits.skips(name))
        {
            continue;
        }
        if let Some(rewrite) = rewrite {
            let start = out.len();
            out.extend_from_slice(name);
            out.extend_from_slice(b": ");
            let value_at = out.len();
            if rewrite.rewrite(name, h.value, out) && is_field_value(&out[value_at..]) {
                out.extend_from_slice(b"\r\n");
                continue;
            }
            out.truncate(start);
        }
        field(out, name, h.value);
    }
    // Checked when they were pushed.
    out.extend_from_slice(edits.wire());
}

pub(crate) fn field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    out.extend_from_slice(name);
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

/// A field from the router: written only if the name is a token and the
/// value cannot split the head.
pub(crate) fn checked_field(out: &mut Vec<u8>, name: &[u8], value: &[u8]) -> bool {
    if name.is_empty() || !name.iter().all(|&b| is_tchar(b)) || !is_field_value(value) {
        // The name may hold any byte (that is why it is refused): escaped
        // and cut, so it forges no log line.
        tracing::debug!(name = %name[..name.len().min(256)].escape_ascii(), "invalid header edit dropped");
        return false;
    }
    field(out, name, value);
    true
}

pub(crate) fn write_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

pub(crate) fn status_line(out: &mut Vec<u8>, status: u16, reason: &[u8]) {
    // Every status teapot writes has three digits (httparse reads three):
    // the line's start in one copy, not a division per digit.
    if (100..1000).contains(&status) {
        let digit = |n: u16| b'0' + (n % 10) as u8;
        out.extend_from_slice(&[
            b'H',
            b'T',
            b'T',
            b'P',
            b'/',
            b'1',
            b'.',
            b'1',
            b' ',
            digit(status / 100),
            digit(status / 10),
            digit(status),
            b' ',
        ]);
    } else {
        out.extend_from_slice(b"HTTP/1.1 ");
        write_u64(out, u64::from(status));
        out.push(b' ');
    }
    out.extend_from_slice(reason);
    out.extend_from_slice(b"\r\n");
}

/// The reason phrase the engine writes for its own answers.
pub(crate) fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        101 => "Switching Protocols",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        301 => "Moved Permanently",
        302 => "Found",
        304 => "Not Modified",
        307 => "Temporary Redirect",
        308 => "Permanent Redirect",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Content Too Large",
        414 => "URI Too Long",
        421 => "Misdirected Request",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "",
    }
}

/// `date: <now>\r\n`. The formatted date is cached per thread for the
/// second it names: one clock read per call, one format per second.
pub(crate) fn date_field(out: &mut Vec<u8>) {
    use std::cell::RefCell;
    use std::time::{SystemTime, UNIX_EPOCH};
    thread_local! {
        static DATE: RefCell<(u64, String)> = const { RefCell::new((u64::MAX, String::new())) };
    }
    let now = SystemTime::now();
    let second = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    DATE.with_borrow_mut(|(cached, text)| {
        if *cached != second {
            *cached = second;
            *text = httpdate::fmt_http_date(now);
        }
        out.extend_from_slice(b"date: ");
        out.extend_from_slice(text.as_bytes());
        out.extend_from_slice(b"\r\n");
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn fields_skip_hop_by_hop_connection_listed_and_edited() {
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut req = httparse::Request::new(&mut slots);
        let raw = b"GET / HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, X-Secret, Host\r\n\
            X-Secret: 1\r\nKeep-Alive: 5\r\nTE: trailers\r\nX-Forwarded-For: spoof\r\nX-Keep: k\r\n\r\n";
        req.parse(raw).unwrap();
        let opts = connection_options(req.headers);
        assert!(opts.keep_alive && opts.other && !opts.close);
        let edits = HeaderEdits::default()
            .set(
                Bytes::from_static(b"x-forwarded-for"),
                Bytes::from_static(b"10.0.0.1"),
            )
            .append(Bytes::from_static(b"bad name"), Bytes::from_static(b"v"))
            .append(Bytes::from_static(b"x-v"), Bytes::from_static(b"a\r\nb: c"));
        let mut out = Vec::new();
        write_fields(&mut out, raw, req.headers, opts, &edits);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Host: a\r\nX-Keep: k\r\nx-forwarded-for: 10.0.0.1\r\n"
        );
        // A replacement whose value could split the head is not written,
        // and still takes the client's field out; additions come last.
        let edits = HeaderEdits::default()
            .append("x-added", "1")
            .set("x-keep", "a\r\nx-evil: 1")
            .set("x-forwarded-for", "10.0.0.2");
        let mut out = Vec::new();
        write_fields(&mut out, raw, req.headers, opts, &edits);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Host: a\r\nx-forwarded-for: 10.0.0.2\r\nx-added: 1\r\n"
        );
    }

    /// Kept fields go on as their lines came, a run of them in one copy,
    /// the dropped ones cut out wherever they are, the last line to its
    /// CRLF.
    #[test]
    fn kept_fields_are_copied_as_their_lines_came() {
        let raw = b"GET / HTTP/1.1\r\nHost:a\r\nX-A:  1 \r\nConnection: close\r\n\
            X-B: 2\r\nTE: trailers\r\nKeep-Alive: 5\r\nX-C:\r\nX-D: 4\r\n\r\n";
        for last_dropped in [false, true] {
            let raw: &[u8] = if last_dropped {
                b"GET / HTTP/1.1\r\nX-A: 1\r\nX-B: 2\r\nTE: trailers\r\n\r\n"
            } else {
                raw
            };
            let mut slots = [httparse::EMPTY_HEADER; 16];
            let mut req = httparse::Request::new(&mut slots);
            req.parse(raw).unwrap();
            let opts = connection_options(req.headers);
            let mut out = b"GET / HTTP/1.1\r\n".to_vec();
            let edits = HeaderEdits::default().set("x-b", "new");
            write_fields(&mut out, raw, req.headers, opts, &edits);
            let want: &[u8] = if last_dropped {
                b"GET / HTTP/1.1\r\nX-A: 1\r\nx-b: new\r\n"
            } else {
                b"GET / HTTP/1.1\r\nHost:a\r\nX-A:  1 \r\nX-C:\r\nX-D: 4\r\nx-b: new\r\n"
            };
            assert_eq!(
                out.escape_ascii().to_string(),
                want.escape_ascii().to_string()
            );
            // Fields that are not `raw`'s are written one by one.
            let mut out = Vec::new();
            write_fields(&mut out, b"elsewhere", req.headers, opts, &edits);
            let mut each = Vec::new();
            write_fields_rewritten(&mut each, req.headers, opts, &edits, None);
            assert_eq!(out, each);
        }
    }

    /// A response rewrite sees each copied field (not those an edit
    /// replaces); a value it writes that could split the head is not
    /// sent, the upstream's own is.
    #[test]
    fn rewritten_fields_are_checked_like_edits() {
        struct Rewrite;
        impl RewriteField for Rewrite {
            fn rewrite(&self, name: &[u8], value: &[u8], out: &mut Vec<u8>) -> bool {
                if name.eq_ignore_ascii_case(b"location") {
                    out.extend_from_slice(b"/new");
                    out.extend_from_slice(value.strip_prefix(b"http://in").unwrap_or(value));
                    return true;
                }
                if name.eq_ignore_ascii_case(b"x-evil") {
                    out.extend_from_slice(b"a\r\nset-cookie: forged=1");
                    return true;
                }
                false
            }
        }
        let mut slots = [httparse::EMPTY_HEADER; 16];
        let mut resp = httparse::Response::new(&mut slots);
        let raw = b"HTTP/1.1 302 Found\r\nLocation: http://in/x\r\nX-Evil: kept\r\n\
            X-Other: 1\r\nX-Replaced: old\r\n\r\n";
        resp.parse(raw).unwrap();
        let opts = connection_options(resp.headers);
        let edits = HeaderEdits::default().set("x-replaced", "new");
        let mut out = Vec::new();
        write_fields_rewritten(&mut out, resp.headers, opts, &edits, Some(&Rewrite));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Location: /new/x\r\nX-Evil: kept\r\nX-Other: 1\r\nx-replaced: new\r\n"
        );
    }

    #[test]
    fn status_lines() {
        for status in [0u16, 7, 99, 100, 200, 404, 599, 999, 1000, u16::MAX] {
            let mut out = Vec::new();
            status_line(&mut out, status, b"Reason");
            assert_eq!(
                String::from_utf8(out).unwrap(),
                format!("HTTP/1.1 {status} Reason\r\n")
            );
        }
    }

    /// A value that is one option is read as the list it is.
    #[test]
    fn connection_options_of_one_option_and_of_lists() {
        let options = |value: &str| {
            let headers = [httparse::Header {
                name: "Connection",
                value: value.as_bytes(),
            }];
            let o = connection_options(&headers);
            (o.close, o.keep_alive, o.upgrade, o.other)
        };
        assert_eq!(options("keep-alive"), (false, true, false, false));
        assert_eq!(options(" Keep-Alive\t"), (false, true, false, false));
        assert_eq!(options("CLOSE"), (true, false, false, false));
        assert_eq!(options("close, keep-alive"), (true, true, false, false));
        assert_eq!(options("keep-alive, x-secret"), (false, true, false, true));
        assert_eq!(options("keep-alive,"), (false, true, false, false));
        assert_eq!(options("keep-alivex"), (false, false, false, true));
        assert_eq!(options("Upgrade"), (false, false, true, false));
        assert_eq!(options(""), (false, false, false, false));
    }

    #[test]
    fn numbers() {
        for n in [0u64, 7, 10, 1234567890, u64::MAX] {
            let mut out = Vec::new();
            write_u64(&mut out, n);
            assert_eq!(String::from_utf8(out).unwrap(), n.to_string());
        }
    }
}
