//! The request-smuggling defence: HTTP/1 request framing rules.
//!
//! Ported from `proxy/src/plane/edge.rs` (`scan_h1`, `Refusal`, `H1Framing`,
//! `body_limit`), which this module replaces as their home. [`scan_h1`]
//! reads the raw header block once, without allocating, and refuses every
//! framing ambiguity that could make the proxy and a backend disagree on
//! where a request ends. It runs *before* `httparse` sees the block, so the
//! refusal category is ours, not the parser's.

/// Limits of the request header block.
#[derive(Clone, Debug)]
pub struct HeadLimits {
    /// Longest HTTP/1 request line, bytes (414 beyond).
    pub max_request_line: usize,
    /// Largest header block incl. request line, bytes (431 beyond).
    pub max_header_bytes: usize,
    /// Most header fields in one request (431 beyond). Clamped to
    /// [`MAX_HEADERS_CAP`] by the engine.
    pub max_headers: usize,
}

/// The most header fields the engine ever parses in a head, a request's
/// or a backend's response (its `httparse` slots live on the stack); a
/// response with more is a 502. teapot's h2c backends are held to the same
/// count.
pub const MAX_HEADERS_CAP: usize = 128;

/// Largest backend response head, bytes: the engine's default
/// (`EngineConfig::max_response_header_bytes`), and the header list size
/// teapot allows its h2c backends.
pub const MAX_RESPONSE_HEADER_BYTES: usize = 64 * 1024;

impl Default for HeadLimits {
    fn default() -> Self {
        HeadLimits {
            max_request_line: 8 * 1024,
            max_header_bytes: 32 * 1024,
            max_headers: 100,
        }
    }
}

/// Why a request or connection was refused. The label is the `reason` of
/// `teapot_edge_refusals_total`. Same categories, order and labels as
/// the proxy's edge module had, plus two appended for what Pingora's own parser
/// used to refuse: [`Refusal::BadRequestLine`] and
/// [`Refusal::BadChunkedBody`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Refusal {
    BothLengths,
    TransferEncoding,
    DuplicateLength,
    BadLength,
    ObsFold,
    BareCrLf,
    ControlByte,
    SpaceBeforeColon,
    BadHeaderName,
    Http10BodyNoLength,
    H2cUpgrade,
    DuplicateHost,
    BadHost,
    RequestLineTooLong,
    HeaderTooLarge,
    TooManyHeaders,
    BodyTooLarge,
    HeaderTimeout,
    ConnectionCap,
    ClientConnectionCap,
    TenantRate,
    TenantConnections,
    ClientConnectionRate,
    /// A request line `httparse` refuses (bad method token, target or
    /// version) once the framing scan passed.
    BadRequestLine,
    /// A chunked request body whose framing is malformed (size line, CRLF
    /// after the data, trailer fields).
    BadChunkedBody,
}

impl Refusal {
    pub const ALL: [Refusal; 25] = [
        Refusal::BothLengths,
        Refusal::TransferEncoding,
        Refusal::DuplicateLength,
        Refusal::BadLength,
        Refusal::ObsFold,
        Refusal::BareCrLf,
        Refusal::ControlByte,
        Refusal::SpaceBeforeColon,
        Refusal::BadHeaderName,
        Refusal::Http10BodyNoLength,
        Refusal::H2cUpgrade,
        Refusal::DuplicateHost,
        Refusal::BadHost,
        Refusal::RequestLineTooLong,
        Refusal::HeaderTooLarge,
        Refusal::TooManyHeaders,
        Refusal::BodyTooLarge,
        Refusal::HeaderTimeout,
        Refusal::ConnectionCap,
        Refusal::ClientConnectionCap,
        Refusal::TenantRate,
        Refusal::TenantConnections,
        Refusal::ClientConnectionRate,
        Refusal::BadRequestLine,
        Refusal::BadChunkedBody,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Refusal::BothLengths => "both_lengths",
            Refusal::TransferEncoding => "transfer_encoding",
            Refusal::DuplicateLength => "duplicate_length",
            Refusal::BadLength => "bad_length",
            Refusal::ObsFold => "obs_fold",
            Refusal::BareCrLf => "bare_cr_lf",
            Refusal::ControlByte => "control_byte",
            Refusal::SpaceBeforeColon => "space_before_colon",
            Refusal::BadHeaderName => "bad_header_name",
            Refusal::Http10BodyNoLength => "http10_body_no_length",
            Refusal::H2cUpgrade => "h2c_upgrade",
            Refusal::DuplicateHost => "duplicate_host",
            Refusal::BadHost => "bad_host",
            Refusal::RequestLineTooLong => "request_line_too_long",
            Refusal::HeaderTooLarge => "header_too_large",
            Refusal::TooManyHeaders => "too_many_headers",
            Refusal::BodyTooLarge => "body_too_large",
            Refusal::HeaderTimeout => "header_timeout",
            Refusal::ConnectionCap => "connection_cap",
            Refusal::ClientConnectionCap => "client_connection_cap",
            Refusal::TenantRate => "tenant_rate",
            Refusal::TenantConnections => "tenant_connections",
            Refusal::ClientConnectionRate => "client_connection_rate",
            Refusal::BadRequestLine => "bad_request_line",
            Refusal::BadChunkedBody => "bad_chunked_body",
        }
    }

    pub fn status(self) -> u16 {
        match self {
            Refusal::RequestLineTooLong => 414,
            Refusal::HeaderTooLarge | Refusal::TooManyHeaders => 431,
            Refusal::BodyTooLarge => 413,
            Refusal::HeaderTimeout => 408,
            Refusal::ConnectionCap
            | Refusal::ClientConnectionCap
            | Refusal::TenantConnections
            | Refusal::ClientConnectionRate => 503,
            Refusal::TenantRate => 429,
            _ => 400,
        }
    }

    /// The body of the proxy's answer: status first, like the proxy's other answers.
    pub fn body(self) -> &'static str {
        match self {
            Refusal::BothLengths => "400 both Content-Length and Transfer-Encoding\n",
            Refusal::TransferEncoding => "400 Transfer-Encoding other than chunked\n",
            Refusal::DuplicateLength => "400 more than one Content-Length\n",
            Refusal::BadLength => "400 malformed Content-Length\n",
            Refusal::ObsFold => "400 obsolete line folding\n",
            Refusal::BareCrLf => "400 bare CR or LF in the header\n",
            Refusal::ControlByte => "400 control character in the header\n",
            Refusal::SpaceBeforeColon => "400 whitespace before a header colon\n",
            Refusal::BadHeaderName => "400 invalid header name\n",
            Refusal::Http10BodyNoLength => "400 HTTP/1.0 request body without Content-Length\n",
            Refusal::H2cUpgrade => "400 Upgrade: h2c is not supported\n",
            Refusal::DuplicateHost => "400 more than one Host\n",
            Refusal::BadHost => "400 invalid Host\n",
            Refusal::RequestLineTooLong => "414 request line too long\n",
            Refusal::HeaderTooLarge => "431 request header too large\n",
            Refusal::TooManyHeaders => "431 too many header fields\n",
            Refusal::BodyTooLarge => "413 request body too large\n",
            Refusal::HeaderTimeout => "408 request header timeout\n",
            Refusal::ConnectionCap | Refusal::ClientConnectionCap => "503 too many connections\n",
            Refusal::ClientConnectionRate => "503 too many new connections\n",
            Refusal::TenantRate => "429 this tenant's request rate limit is reached\n",
            Refusal::TenantConnections => "503 this tenant's connection limit is reached\n",
            Refusal::BadRequestLine => "400 malformed request line\n",
            Refusal::BadChunkedBody => "400 malformed chunked body\n",
        }
    }
}

/// What the framing scan learned about a valid request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct H1Framing {
    pub content_length: Option<u64>,
    pub chunked: bool,
}

/// Scans the raw HTTP/1 request header (request line through the blank
/// line) and refuses every framing ambiguity.
///
/// One pass, no allocation: this runs on every HTTP/1 request.
pub fn scan_h1(raw: &[u8], limits: &HeadLimits) -> Result<H1Framing, Refusal> {
    if raw.len() > limits.max_header_bytes {
        return Err(Refusal::HeaderTooLarge);
    }
    let mut framing = H1Framing::default();
    let mut lengths = 0usize;
    let mut encodings = 0usize;
    let mut hosts = 0usize;
    let mut fields = 0usize;
    let mut http10 = false;
    let mut method_may_have_body = false;
    let mut first = true;
    let mut rest = raw;
    while !rest.is_empty() {
        // Every line must end in CRLF: a bare LF is where parsers that
        // accept it and parsers that do not disagree on the next line.
        let Some(nl) = find_byte(rest, b'\n') else {
            // The block is complete; anything after the last LF would be
            // a line without an ending.
            return Err(Refusal::BareCrLf);
        };
        if nl == 0 || rest[nl - 1] != b'\r' {
            return Err(Refusal::BareCrLf);
        }
        let line = &rest[..nl - 1];
        rest = &rest[nl + 1..];
        // Byte by byte only when a word has a control byte (HTAB too),
        // so the refusal names the first one found.
        if !is_visible(line) {
            for &b in line {
                match b {
                    b'\r' => return Err(Refusal::BareCrLf),
                    b'\t' => {}
                    0..=0x1f | 0x7f => return Err(Refusal::ControlByte),
                    _ => {}
                }
            }
        }
        if first {
            first = false;
            if line.len() > limits.max_request_line {
                return Err(Refusal::RequestLineTooLong);
            }
            http10 = line.ends_with(b" HTTP/1.0");
            method_may_have_body = !(line.starts_with(b"GET ")
                || line.starts_with(b"HEAD ")
                || line.starts_with(b"OPTIONS ")
                || line.starts_with(b"DELETE ")
                || line.starts_with(b"TRACE "));
            continue;
        }
        if line.is_empty() {
            // The blank line ends the block; nothing may follow it.
            if !rest.is_empty() {
                return Err(Refusal::BareCrLf);
            }
            break;
        }
        if matches!(line[0], b' ' | b'\t') {
            return Err(Refusal::ObsFold);
        }
        fields += 1;
        if fields > limits.max_headers {
            return Err(Refusal::TooManyHeaders);
        }
        let (name, value) = split_field(line)?;
        if eq_lower(name, b"content-length") {
            lengths += 1;
            if lengths > 1 {
                return Err(Refusal::DuplicateLength);
            }
            framing.content_length = Some(parse_length(value)?);
        } else if eq_lower(name, b"transfer-encoding") {
            encodings += 1;
            // Anything but one `chunked` is a TE.TE obfuscation waiting
            // for a backend that reads the list differently.
            if encodings > 1 || !value.eq_ignore_ascii_case(b"chunked") {
                return Err(Refusal::TransferEncoding);
            }
            framing.chunked = true;
        } else if name.eq_ignore_ascii_case(b"host") {
            hosts += 1;
            if hosts > 1 {
                return Err(Refusal::DuplicateHost);
            }
            if !is_authority(value) {
                return Err(Refusal::BadHost);
            }
        } else if name.eq_ignore_ascii_case(b"upgrade") && has_token(value, b"h2c") {
            return Err(Refusal::H2cUpgrade);
        }
    }
    if framing.chunked && framing.content_length.is_some() {
        return Err(Refusal::BothLengths);
    }
    if http10 {
        if framing.chunked {
            return Err(Refusal::TransferEncoding);
        }
        if method_may_have_body && framing.content_length.is_none() {
            return Err(Refusal::Http10BodyNoLength);
        }
    }
    Ok(framing)
}

/// Splits one field line (no CRLF, already free of control bytes) into a
/// validated name and its OWS-trimmed value. Shared with the chunked
/// trailer check.
pub(crate) fn split_field(line: &[u8]) -> Result<(&[u8], &[u8]), Refusal> {
    let Some(colon) = line.iter().position(|&b| b == b':') else {
        return Err(Refusal::BadHeaderName);
    };
    let name = &line[..colon];
    if name.is_empty() {
        return Err(Refusal::BadHeaderName);
    }
    if matches!(name[name.len() - 1], b' ' | b'\t') {
        return Err(Refusal::SpaceBeforeColon);
    }
    if !name.iter().all(|&b| is_tchar(b)) {
        return Err(Refusal::BadHeaderName);
    }
    Ok((name, trim_ows(&line[colon + 1..])))
}

/// RFC 9110 §5.6.2 token characters.
pub fn is_tchar(b: u8) -> bool {
    TCHAR[usize::from(b)]
}

/// A table: every field name of every head (and every edit) goes through
/// [`is_tchar`] byte by byte.
static TCHAR: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'!' | b'#'
                    | b'$'
                    | b'%'
                    | b'&'
                    | b'\''
                    | b'*'
                    | b'+'
                    | b'-'
                    | b'.'
                    | b'^'
                    | b'_'
                    | b'`'
                    | b'|'
                    | b'~'
            );
        i += 1;
    }
    t
};

pub(crate) fn trim_ows(mut v: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = v {
        v = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = v {
        v = rest;
    }
    v
}

/// Digits only: no sign, no list, no whitespace inside, at most 19 digits
/// so it always fits a u64. Public for the proxy's HTTP/2 path, which
/// reads lengths by the same rule.
pub fn parse_length(v: &[u8]) -> Result<u64, Refusal> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(Refusal::BadLength);
    }
    Ok(v.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

pub(crate) fn has_token(list: &[u8], token: &[u8]) -> bool {
    list.split(|&b| b == b',')
        .any(|t| trim_ows(t).eq_ignore_ascii_case(token))
}

/// A Host value that names one authority: a reg-name or IP literal with an
/// optional port. No list, no userinfo, no whitespace, no path.
pub fn is_authority(v: &[u8]) -> bool {
    !v.is_empty() && v.len() <= 255 + 6 && v.iter().all(|&b| AUTHORITY[usize::from(b)])
}

/// A table, as [`TCHAR`]: every request's Host passes [`is_authority`].
static AUTHORITY: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        t[i] = b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']');
        i += 1;
    }
    t
};

/// A field value the engine may write: no CR, LF, NUL or other control
/// byte but HTAB (what [`scan_h1`] lets through, and what a router's edits
/// must respect).
pub fn is_field_value(v: &[u8]) -> bool {
    // A word with a control byte is looked at byte by byte, since HTAB is
    // allowed. Every request's forwarding headers pass here.
    let byte_ok = |b: u8| b == b'\t' || (b >= 0x20 && b != 0x7f);
    let (words, rest) = v.as_chunks::<8>();
    words.iter().all(|word| {
        control_bytes(u64::from_le_bytes(*word)) == 0 || word.iter().all(|&b| byte_ok(b))
    }) && rest.iter().all(|&b| byte_ok(b))
}

// The request head, the response head and every edit are looked at eight
// bytes at a time (SWAR): these run on every byte of every head, and one
// byte at a time they were a tenth of the engine's instructions.
const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The high bit of each byte of `x` that is zero, and maybe of bytes above
/// the lowest one (a borrow): the lowest set bit is exact, and the result
/// is zero exactly when no byte is.
fn zero_bytes(x: u64) -> u64 {
    x.wrapping_sub(ONES) & !x & HIGH
}

/// Non-zero exactly when a byte of `x` is under 0x20 or is 0x7f. (A byte
/// under 0x20 borrows into its own high bit; no byte at or above it can.)
fn control_bytes(x: u64) -> u64 {
    (x.wrapping_sub(ONES * 0x20) & !x & HIGH) | zero_bytes(x ^ (ONES * 0x7f))
}

/// No byte under 0x20 (HTAB included) and no DEL.
pub(crate) fn is_visible(v: &[u8]) -> bool {
    let (words, rest) = v.as_chunks::<8>();
    words
        .iter()
        .all(|w| control_bytes(u64::from_le_bytes(*w)) == 0)
        && match last_word(v, rest.len()) {
            // The tail in the word that ends `v` (bytes looked at twice
            // pass twice): one word, not a loop over up to seven bytes.
            Some(w) => control_bytes(w) == 0,
            None => rest.iter().all(|&b| b >= 0x20 && b != 0x7f),
        }
}

/// The eight bytes that end `v` as a word, when `v` has a tail of
/// `tail` bytes past its whole words and at least one whole word.
fn last_word(v: &[u8], tail: usize) -> Option<u64> {
    if tail == 0 || v.len() < 8 {
        return None;
    }
    let (_, last) = v.split_last_chunk::<8>()?;
    Some(u64::from_le_bytes(*last))
}

/// Whether `name` is `lower` in any case (ASCII letters folded, every
/// other byte as it is); `lower` is lowercase. Eight bytes at a time:
/// every field of every head is compared with the names the engine acts
/// on, and a name of the same length was compared a byte at a time.
pub(crate) fn eq_lower(name: &[u8], lower: &[u8]) -> bool {
    debug_assert!(!lower.iter().any(u8::is_ascii_uppercase));
    if name.len() != lower.len() {
        return false;
    }
    if name.len() < 8 {
        return name.eq_ignore_ascii_case(lower);
    }
    let (words, rest) = name.as_chunks::<8>();
    let (lower_words, _) = lower.as_chunks::<8>();
    words
        .iter()
        .zip(lower_words)
        .all(|(w, l)| fold_case(u64::from_le_bytes(*w)) == u64::from_le_bytes(*l))
        && match (last_word(name, rest.len()), last_word(lower, rest.len())) {
            (Some(w), Some(l)) => fold_case(w) == l,
            _ => true,
        }
}

/// Each ASCII capital of `x` as its small letter; every other byte as it
/// is.
fn fold_case(x: u64) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let heptets = x & LOW7;
    // The high bit of each byte: at least `A`, past `Z` (no carry leaves
    // a byte: a heptet is at most 0x7f).
    let from_a = heptets.wrapping_add(ONES * u64::from(0x80 - b'A'));
    let past_z = heptets.wrapping_add(ONES * u64::from(0x80 - b'Z' - 1));
    let capital = from_a & !past_z & !x & HIGH;
    x | (capital >> 2)
}

/// The first `needle` in `hay`.
pub(crate) fn find_byte(hay: &[u8], needle: u8) -> Option<usize> {
    let (words, rest) = hay.as_chunks::<8>();
    let pattern = ONES * u64::from(needle);
    for (i, word) in words.iter().enumerate() {
        let found = zero_bytes(u64::from_le_bytes(*word) ^ pattern);
        if found != 0 {
            return Some(i * 8 + (found.trailing_zeros() / 8) as usize);
        }
    }
    // The tail in the word that ends `hay`: the bytes it shares with the
    // last whole word hold no `needle`, so the first found is the tail's.
    if let Some(w) = last_word(hay, rest.len()) {
        let found = zero_bytes(w ^ pattern);
        return (found != 0).then(|| hay.len() - 8 + (found.trailing_zeros() / 8) as usize);
    }
    rest.iter()
        .position(|&b| b == needle)
        .map(|p| words.len() * 8 + p)
}

/// The effective body limit: the route's limit lowers the operator
/// maximum, never raises it (0 means "no limit" on both sides).
pub fn body_limit(operator: u64, route: Option<u64>) -> u64 {
    match (operator, route) {
        (0, Some(r)) => r,
        (o, Some(r)) if r != 0 => o.min(r),
        (o, _) => o,
    }
}

/// The end of a head (after its blank line) in `buf`, searching from about
/// `from`. A bare-LF blank line also ends it, so that the scan can refuse
/// it rather than the engine waiting for a CRLF that never comes.
pub(crate) fn find_head_end(buf: &[u8], from: usize) -> Option<usize> {
    // Two vectorised passes over the head rather than a search per line:
    // the first "\n\r\n" (a CRLF blank line), then any "\n\n" before it.
    static CRLF_BLANK: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\r\n"));
    static LF_BLANK: std::sync::LazyLock<memchr::memmem::Finder<'static>> =
        std::sync::LazyLock::new(|| memchr::memmem::Finder::new(b"\n\n"));
    let start = from.saturating_sub(3).min(buf.len());
    let hay = &buf[start..];
    let crlf = CRLF_BLANK.find(hay);
    let before = crlf.map_or(hay.len(), |p| p + 2);
    match (LF_BLANK.find(&hay[..before]), crlf) {
        (Some(p), _) => Some(start + p + 2),
        (None, Some(p)) => Some(start + p + 3),
        (None, None) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every string of up to 11 bytes over `a`, CR, LF and DEL (so that
    /// words, tails and the word that overlaps a tail all get each
    /// case), against byte-by-byte definitions.
    #[test]
    fn word_scans_agree_with_byte_scans() {
        const ALPHABET: [u8; 4] = [b'a', b'\r', b'\n', 0x7f];
        let mut s = Vec::new();
        for len in 0..=11u32 {
            for mut n in 0..ALPHABET.len().pow(len) {
                s.clear();
                for _ in 0..len {
                    s.push(ALPHABET[n % ALPHABET.len()]);
                    n /= ALPHABET.len();
                }
                let visible = s.iter().all(|&b| b >= 0x20 && b != 0x7f);
                assert_eq!(
                    is_visible(&s),
                    visible,
                    "{:?}",
                    s.escape_ascii().to_string()
                );
                for needle in [b'\n', b'\r'] {
                    let first = s.iter().position(|&b| b == needle);
                    assert_eq!(
                        find_byte(&s, needle),
                        first,
                        "{:?}",
                        s.escape_ascii().to_string()
                    );
                }
            }
        }
    }

    #[test]
    fn names_compare_in_any_case() {
        let lower: Vec<u8> = (0..=255u8).filter(|b| !b.is_ascii_uppercase()).collect();
        // Every byte against every byte of a name, at each position of a
        // name of 8 to 17 bytes (whole words, tails, overlaps).
        for len in 8..=17 {
            for at in [0, 7, len / 2, len - 1] {
                for &l in &lower {
                    let mut want = vec![b'x'; len];
                    want[at] = l;
                    for b in 0..=255u8 {
                        let mut name = want.clone();
                        name[at] = b;
                        assert_eq!(
                            eq_lower(&name, &want),
                            name.eq_ignore_ascii_case(&want),
                            "{:?} {:?}",
                            name.escape_ascii().to_string(),
                            want.escape_ascii().to_string()
                        );
                    }
                }
            }
        }
        assert!(eq_lower(b"Content-Length", b"content-length"));
        assert!(eq_lower(b"TRANSFER-ENCODING", b"transfer-encoding"));
        assert!(eq_lower(b"Te", b"te"));
        assert!(!eq_lower(b"content-lengthx", b"content-length"));
        assert!(!eq_lower(b"content\rlength", b"content-length"));
    }

    #[test]
    fn authority_table_is_the_host_charset() {
        for b in 0..=255u8 {
            let allowed = b.is_ascii_alphanumeric() || b".-_:[]".contains(&b);
            assert_eq!(is_authority(&[b]), allowed, "byte {b:#04x}");
        }
        assert!(!is_authority(b""));
        assert!(is_authority("a".repeat(261).as_bytes()));
        assert!(!is_authority("a".repeat(262).as_bytes()));
    }

    #[test]
    fn tchar_table_is_rfc_9110_token_chars() {
        for b in 0..=255u8 {
            let rfc = b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b);
            assert_eq!(is_tchar(b), rfc, "byte {b:#04x}");
        }
    }

    fn scan(raw: &str) -> Result<H1Framing, Refusal> {
        scan_h1(raw.as_bytes(), &HeadLimits::default())
    }

    #[test]
    fn plain_requests_pass() {
        assert_eq!(
            scan("GET / HTTP/1.1\r\nHost: a.example\r\n\r\n"),
            Ok(H1Framing::default())
        );
        assert_eq!(
            scan("POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n"),
            Ok(H1Framing {
                content_length: Some(5),
                chunked: false
            })
        );
        assert_eq!(
            scan("POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: Chunked\r\n\r\n"),
            Ok(H1Framing {
                content_length: None,
                chunked: true
            })
        );
        assert!(scan("GET / HTTP/1.0\r\n\r\n").is_ok());
        assert!(scan("POST / HTTP/1.0\r\nContent-Length: 0\r\n\r\n").is_ok());
        assert!(scan("GET / HTTP/1.1\r\nHost: [::1]:8080\r\nX-A: \t v \t\r\n\r\n").is_ok());
        assert!(scan("GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\n\r\n").is_ok());
    }

    #[test]
    fn framing_ambiguities_are_refused() {
        use Refusal::*;
        let cases: &[(&str, Refusal)] = &[
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
                BothLengths,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: identity, chunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: xchunked\r\n\r\n",
                TransferEncoding,
            ),
            (
                "POST / HTTP/1.1\r\nTransfer-Encoding: \x0bchunked\r\n\r\n",
                ControlByte,
            ),
            (
                "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n",
                DuplicateLength,
            ),
            ("POST / HTTP/1.1\r\nContent-Length: 1, 1\r\n\r\n", BadLength),
            ("POST / HTTP/1.1\r\nContent-Length: +1\r\n\r\n", BadLength),
            ("POST / HTTP/1.1\r\nContent-Length: 1 2\r\n\r\n", BadLength),
            (
                "POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
                BadLength,
            ),
            ("GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", ObsFold),
            ("GET / HTTP/1.1\r\nX-A: a\n\r\n", BareCrLf),
            ("GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", BareCrLf),
            ("GET / HTTP/1.1\r\nX-A: a\0b\r\n\r\n", ControlByte),
            ("GET / HTTP/1.1\r\nX-A : a\r\n\r\n", SpaceBeforeColon),
            (
                "GET / HTTP/1.1\r\nTransfer-Encoding\t: chunked\r\n\r\n",
                SpaceBeforeColon,
            ),
            ("GET / HTTP/1.1\r\nX(A): a\r\n\r\n", BadHeaderName),
            ("GET / HTTP/1.1\r\n: a\r\n\r\n", BadHeaderName),
            ("GET / HTTP/1.1\r\nnocolon\r\n\r\n", BadHeaderName),
            ("POST / HTTP/1.0\r\n\r\n", Http10BodyNoLength),
            (
                "POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n",
                TransferEncoding,
            ),
            ("GET / HTTP/1.1\r\nUpgrade: h2c\r\n\r\n", H2cUpgrade),
            (
                "GET / HTTP/1.1\r\nUpgrade: websocket, H2C\r\n\r\n",
                H2cUpgrade,
            ),
            (
                "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
                DuplicateHost,
            ),
            ("GET / HTTP/1.1\r\nHost: a, b\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: u@a\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\nHost: \r\n\r\n", BadHost),
            ("GET / HTTP/1.1\r\n\r\nGET", BareCrLf),
        ];
        for (raw, want) in cases {
            assert_eq!(scan(raw), Err(*want), "{raw:?}");
        }
    }

    #[test]
    fn size_limits() {
        let limits = HeadLimits {
            max_request_line: 32,
            max_header_bytes: 128,
            max_headers: 2,
        };
        let long_line = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(40));
        assert_eq!(
            scan_h1(long_line.as_bytes(), &limits),
            Err(Refusal::RequestLineTooLong)
        );
        let big = format!("GET / HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(200));
        assert_eq!(
            scan_h1(big.as_bytes(), &limits),
            Err(Refusal::HeaderTooLarge)
        );
        let many = "GET / HTTP/1.1\r\nA: 1\r\nB: 2\r\nC: 3\r\n\r\n";
        assert_eq!(
            scan_h1(many.as_bytes(), &limits),
            Err(Refusal::TooManyHeaders)
        );
        assert_eq!(Refusal::TooManyHeaders.status(), 431);
        assert_eq!(Refusal::BodyTooLarge.status(), 413);
    }

    #[test]
    fn refusal_table_matches_declaration_order() {
        for (i, r) in Refusal::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i, "{r:?}");
        }
    }

    #[test]
    fn labels_are_unique_and_bodies_start_with_the_status() {
        let mut labels: Vec<_> = Refusal::ALL.iter().map(|r| r.label()).collect();
        labels.sort_unstable();
        labels.dedup();
        assert_eq!(labels.len(), Refusal::ALL.len());
        for r in Refusal::ALL {
            assert!(r.body().starts_with(&r.status().to_string()), "{r:?}");
            assert!(r.body().ends_with('\n'));
        }
    }

    #[test]
    fn route_limits_only_lower_the_operator_maximum() {
        assert_eq!(body_limit(100, None), 100);
        assert_eq!(body_limit(100, Some(10)), 10);
        assert_eq!(body_limit(100, Some(1000)), 100);
        assert_eq!(body_limit(100, Some(0)), 100);
        assert_eq!(body_limit(0, Some(10)), 10);
        assert_eq!(body_limit(0, None), 0);
    }

    #[test]
    fn field_helpers() {
        assert_eq!(split_field(b"A: b "), Ok((&b"A"[..], &b"b"[..])));
        assert_eq!(split_field(b"A :b"), Err(Refusal::SpaceBeforeColon));
        assert!(has_token(b"keep-alive, Upgrade", b"upgrade"));
        assert!(!has_token(b"keep-alive, upgraded", b"upgrade"));
        assert!(is_field_value(b"a\tb c"));
        assert!(!is_field_value(b"a\r\nb"));
        // Every byte at every position of a word and of the tail, and the
        // first of two needles.
        for len in [1, 7, 8, 9, 16, 23] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    let visible = b >= 0x20 && b != 0x7f;
                    assert_eq!(is_visible(&v), visible, "byte {b:#04x} at {at} of {len}");
                    let first = v.iter().position(|&c| c == b);
                    assert_eq!(find_byte(&v, b), first, "byte {b:#04x} at {at} of {len}");
                    if at + 1 < len {
                        v[len - 1] = b;
                        assert_eq!(find_byte(&v, b), first, "two of {b:#04x}");
                    }
                }
            }
        }
        assert_eq!(find_byte(b"", b'\n'), None);
        assert_eq!(find_byte(&[0x80, 0x01, 0x0a, 0x0a], b'\n'), Some(2));
        for len in [1, 7, 8, 9, 16, 23] {
            for at in 0..len {
                for b in 0..=255u8 {
                    let mut v = vec![b'x'; len];
                    v[at] = b;
                    let allowed = b == b'\t' || (b >= 0x20 && b != 0x7f);
                    assert_eq!(
                        is_field_value(&v),
                        allowed,
                        "byte {b:#04x} at {at} of {len}"
                    );
                }
            }
        }
        assert_eq!(parse_length(b"0"), Ok(0));
        assert_eq!(parse_length(b"-0"), Err(Refusal::BadLength));
    }
}
