//! Ingress paths and path types, and the request path as routes see it.

use std::borrow::Cow;

/// How a rule path matches, per networking.k8s.io/v1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PathKind {
    /// The whole path, case-sensitively.
    Exact,
    /// Element-wise on `/`. `ImplementationSpecific` is read as this.
    Prefix,
}

impl PathKind {
    /// Reads `pathType`; `ImplementationSpecific` behaves as `Prefix` (docs/architecture.md).
    pub fn parse(path_type: &str) -> Result<PathKind, PathError> {
        match path_type {
            "Exact" => Ok(PathKind::Exact),
            "Prefix" | "ImplementationSpecific" => Ok(PathKind::Prefix),
            other => Err(PathError::UnknownType(other.to_string())),
        }
    }
}

/// Checks a rule path: absolute, printable, no query or fragment, and no
/// `.`/`..` segments (a backend may resolve them into another route's path).
pub fn validate(path: &str) -> Result<(), PathError> {
    if !path.starts_with('/') {
        return Err(PathError::NotAbsolute);
    }
    if let Some(c) = path.chars().find(|c| c.is_control() || *c == ' ') {
        return Err(PathError::BadCharacter(c));
    }
    if path.contains(['?', '#']) {
        return Err(PathError::QueryOrFragment);
    }
    if path.split('/').any(|seg| seg == ".." || seg == ".") {
        return Err(PathError::DotSegment);
    }
    Ok(())
}

/// The key a `Prefix` rule is stored under: trailing slashes removed, so that
/// `/foo/` and `/foo` share one key and `/` is the empty key. They are
/// still two rules where both are written, as in ingress-nginx: the proxy's
/// route table sends `/foo` to the one without the slash and `/foo/`
/// and below to the one with ([`prefix_slashed`]).
pub fn prefix_key(path: &str) -> &str {
    path.trim_end_matches('/')
}

/// Whether a `Prefix` rule's path is written with a trailing slash that
/// makes it the second rule of its key (`/foo/`; `/` is the root, never
/// one).
pub fn prefix_slashed(path: &str) -> bool {
    path.len() > 1 && path.ends_with('/') && !prefix_key(path).is_empty()
}

/// The request path as routes match it and backends receive it
/// (docs/decisions.md, "Paths are normalised before matching"):
///
/// - percent-encoded unreserved characters are decoded (RFC 3986
///   §6.2.2.2): `%2e`/`%2E` is `.`, `%61` is `a`, since a backend reads
///   them so and `/%61dmin` must not miss an `/admin` rule;
/// - then `.` and `..` segments are removed (§5.2.4), encoded or not
///   (`.%2e` is `..`); a `..` at the root stays there (`/../x` is `/x`).
///
/// Nothing else changes: `%2F` stays encoded and is no segment separator
/// (it is data inside a segment, as Envoy's default keeps it), `//` stays,
/// other escapes keep their spelling, and an invalid escape (`%zz`, `%2`)
/// is left as sent. The query is not part of `path`. A path that is not
/// `/`-rooted (`*`) is returned as is.
///
/// Borrowed, without allocating, when nothing changes: one scan for `.`
/// and `%` (memchr) decides almost every request.
pub fn normalize(path: &str) -> Cow<'_, str> {
    if !needs_normalizing(path) {
        return Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    out.push('/');
    let mut segments = path[1..].split('/').peekable();
    while let Some(segment) = segments.next() {
        let start = out.len();
        push_decoded(&mut out, segment);
        let last = segments.peek().is_none();
        match &out[start..] {
            // `out` already ends with the `/` the next segment follows.
            "." => out.truncate(start),
            ".." => {
                out.truncate(start);
                if start > 1 {
                    // Drop the previous segment, keeping the `/` before it.
                    out.truncate(start - 1);
                    let slash = out.rfind('/').map_or(0, |i| i + 1);
                    out.truncate(slash);
                }
            }
            _ if !last => out.push('/'),
            _ => {}
        }
    }
    // Escapes kept after a stray `%` may leave the path as it was.
    if out == path {
        return Cow::Borrowed(path);
    }
    Cow::Owned(out)
}

/// Whether [`normalize`] may change `path`, found in one scan for `.` and
/// `%` that looks only at what it finds: a dot segment, or an escape of an
/// unreserved character.
fn needs_normalizing(path: &str) -> bool {
    let bytes = path.as_bytes();
    // A first search on its own: a path with neither byte (most of them)
    // then costs no iterator, measured 10-15 ns against 15-18.
    let Some(first) = memchr::memchr2(b'.', b'%', bytes) else {
        return false;
    };
    if bytes[0] != b'/' {
        return false;
    }
    let changes_at = |i: usize| match bytes[i] {
        // `i > 0`: the path starts with `/`.
        b'.' => {
            bytes[i - 1] == b'/'
                && matches!(&bytes[i + 1..], [] | [b'/', ..] | [b'.'] | [b'.', b'/', ..])
        }
        _ => escape_at(bytes, i).is_some_and(unreserved),
    };
    if changes_at(first) {
        return true;
    }
    // A plain path has one such byte (`/body.txt`'s dot): a second search
    // ends it without the iterator's state.
    let Some(second) = memchr::memchr2(b'.', b'%', &bytes[first + 1..]) else {
        return false;
    };
    let after = first + 1 + second;
    changes_at(after)
        || memchr::memchr2_iter(b'.', b'%', &bytes[after + 1..]).any(|i| changes_at(after + 1 + i))
}

/// The byte of the escape at `bytes[i]` (a `%`), if it is a valid one.
fn escape_at(bytes: &[u8], i: usize) -> Option<u8> {
    let hex = |i: usize| char::from(*bytes.get(i)?).to_digit(16);
    u8::try_from(hex(i + 1)? << 4 | hex(i + 2)?).ok()
}

/// The valid escapes of `segment`: where each starts, and its byte.
fn escapes(segment: &str) -> impl Iterator<Item = (usize, u8)> + '_ {
    let bytes = segment.as_bytes();
    memchr::memchr_iter(b'%', bytes).filter_map(|i| Some((i, escape_at(bytes, i)?)))
}

/// RFC 3986 §2.3.
fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

/// `segment` with its escapes of unreserved characters decoded, but for
/// a hex digit right after a stray `%` (`%%32e`): decoding it would make
/// a new escape (`%2e`) that a backend decodes once more.
fn push_decoded(out: &mut String, segment: &str) {
    let mut copied = 0;
    for (i, b) in escapes(segment).filter(|&(_, b)| unreserved(b)) {
        out.push_str(&segment[copied..i]);
        if b.is_ascii_hexdigit() && ends_in_stray_percent(out) {
            out.push_str(&segment[i..i + 3]);
        } else {
            out.push(char::from(b));
        }
        copied = i + 3;
    }
    out.push_str(&segment[copied..]);
}

/// Whether `out` ends in `%` or `%` and one hex digit: an escape that a
/// hex digit appended would complete.
fn ends_in_stray_percent(out: &str) -> bool {
    match out.as_bytes() {
        [.., b'%'] => true,
        [.., b'%', h] => h.is_ascii_hexdigit(),
        _ => false,
    }
}

/// Why a path was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("pathType {0:?} is not Exact, Prefix or ImplementationSpecific")]
    UnknownType(String),
    #[error("path must start with '/'")]
    NotAbsolute,
    #[error("character {0:?} is not allowed in a path")]
    BadCharacter(char),
    #[error("a path cannot carry a query or fragment")]
    QueryOrFragment,
    #[error("'.' and '..' segments are not allowed in a path")]
    DotSegment,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_types() {
        assert_eq!(PathKind::parse("Exact"), Ok(PathKind::Exact));
        assert_eq!(
            PathKind::parse("ImplementationSpecific"),
            Ok(PathKind::Prefix)
        );
        assert!(PathKind::parse("exact").is_err());
    }

    #[test]
    fn paths() {
        assert!(validate("/").is_ok());
        assert!(validate("/a/b-c_d.e~f%20").is_ok());
        assert!(validate("a").is_err());
        assert!(validate("/a/../b").is_err());
        assert!(validate("/a\n").is_err());
        assert!(validate("/a?b").is_err());
        assert_eq!(prefix_key("/"), "");
        assert_eq!(prefix_key("/foo/"), "/foo");
        assert!(prefix_slashed("/foo/"));
        assert!(!prefix_slashed("/foo"));
        assert!(!prefix_slashed("/"));
        assert!(!prefix_slashed("//"));
    }

    /// `normalize`, checking that an unchanged path is borrowed.
    fn norm(path: &str) -> String {
        let out = normalize(path);
        if out == path {
            assert!(matches!(out, Cow::Borrowed(_)), "{path:?} allocated");
        }
        out.into_owned()
    }

    #[test]
    fn rfc3986_dot_segments() {
        // §5.4.1 and §5.4.2, as the merged paths of base `/b/c/d;p` that
        // remove_dot_segments sees, and §5.2.4's own example.
        for (path, want) in [
            ("/b/c/g", "/b/c/g"),
            ("/b/c/./g", "/b/c/g"),
            ("/b/c/g/", "/b/c/g/"),
            ("/b/c/.", "/b/c/"),
            ("/b/c/./", "/b/c/"),
            ("/b/c/..", "/b/"),
            ("/b/c/../", "/b/"),
            ("/b/c/../g", "/b/g"),
            ("/b/c/../..", "/"),
            ("/b/c/../../", "/"),
            ("/b/c/../../g", "/g"),
            ("/b/c/../../../g", "/g"),
            ("/b/c/../../../../g", "/g"),
            ("/./g", "/g"),
            ("/../g", "/g"),
            ("/b/c/g.", "/b/c/g."),
            ("/b/c/.g", "/b/c/.g"),
            ("/b/c/g..", "/b/c/g.."),
            ("/b/c/..g", "/b/c/..g"),
            ("/b/c/./../g", "/b/g"),
            ("/b/c/./g/.", "/b/c/g/"),
            ("/b/c/g/./h", "/b/c/g/h"),
            ("/b/c/g/../h", "/b/c/h"),
            ("/b/c/g;x=1/./y", "/b/c/g;x=1/y"),
            ("/b/c/g;x=1/../y", "/b/c/y"),
            ("/a/b/c/./../../g", "/a/g"),
        ] {
            assert_eq!(norm(path), want, "{path}");
        }
    }

    #[test]
    fn encoded_dots_are_dots() {
        for path in [
            "/public/../admin",
            "/public/%2e%2e/admin",
            "/public/%2E%2E/admin",
            "/public/%2e%2E/admin",
            "/public/.%2e/admin",
            "/public/%2e./admin",
            "/public/.%2E/admin",
            "/public/./%2e%2e/./admin",
            "/public/x/%2e%2e/%2E%2e/admin",
            "/%2e%2e/admin",
            "/%2e/admin",
        ] {
            assert_eq!(norm(path), "/admin", "{path}");
        }
        assert_eq!(norm("/public/%2e/x"), "/public/x");
        assert_eq!(norm("/public/x/%2e"), "/public/x/");
        assert_eq!(norm("/public/x/%2e%2e"), "/public/");
        // A dot inside a segment is decoded, and is no dot segment.
        assert_eq!(norm("/index%2ehtml"), "/index.html");
        assert_eq!(norm("/a/%2e%2e%2e"), "/a/...");
        // Other unreserved characters too (RFC 3986 §6.2.2.2).
        assert_eq!(norm("/%61dmin/%7Euser"), "/admin/~user");
        assert_eq!(norm("/%41%2D%5f%30"), "/A-_0");
    }

    #[test]
    fn encoded_slashes_and_empty_segments_stay() {
        // `%2F` is data inside a segment: never a separator, never decoded.
        assert_eq!(norm("/public%2F..%2Fadmin"), "/public%2F..%2Fadmin");
        assert_eq!(norm("/a%2f%2e%2e%2fb"), "/a%2f..%2fb");
        assert_eq!(norm("/a/%2F/../b"), "/a/b");
        // `//` stays; a `..` after it removes the empty segment.
        assert_eq!(norm("//a//b"), "//a//b");
        assert_eq!(norm("/a//../b"), "/a/b");
        assert_eq!(norm("//../a"), "/a");
        // Escapes of reserved and other bytes keep their spelling.
        assert_eq!(
            norm("/a%20b/%3F%23/%25/caf%C3%A9"),
            "/a%20b/%3F%23/%25/caf%C3%A9"
        );
    }

    #[test]
    fn invalid_escapes_stay_as_sent() {
        for path in ["/%zz", "/%2", "/a%", "/%%", "/%+1", "/%2g", "/%-1/x"] {
            assert_eq!(norm(path), path);
        }
        assert_eq!(norm("/%zz/../%2"), "/%2");
        // A decoded hex digit never completes a stray `%` into an escape
        // that a backend would decode once more.
        assert_eq!(norm("/%%32e%%32e/admin"), "/%%32e%%32e/admin");
        assert_eq!(norm("/%2%65/x"), "/%2%65/x");
        assert_eq!(norm("/%%41"), "/%%41");
        assert_eq!(norm("/%%7e/%%2e"), "/%~/%.");
    }

    /// A backend's single percent-decoding, but for `%2F` (which teapot
    /// keeps as data, never a separator).
    fn decode_once(path: &str) -> String {
        let bytes = path.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match escape_at(bytes, i).filter(|&b| bytes[i] == b'%' && b != b'/') {
                Some(b) => {
                    out.push(b);
                    i += 3;
                }
                None => {
                    out.push(bytes[i]);
                    i += 1;
                }
            }
        }
        String::from_utf8_lossy(&out).into_owned()
    }

    /// Every path of up to five pieces: normalising is idempotent, and
    /// what a backend decodes from the result has no dot segment left.
    #[test]
    fn no_dot_segment_survives_one_more_decoding() {
        const PIECES: [&str; 11] = [
            "a", ".", "%2e", "%2E", "%", "%2", "%32", "%65", "/", "%2F", "%25",
        ];
        let mut paths = vec![String::from("/")];
        let mut start = 0;
        for _ in 0..5 {
            let end = paths.len();
            for i in start..end {
                for piece in PIECES {
                    let next = format!("{}{piece}", paths[i]);
                    paths.push(next);
                }
            }
            start = end;
        }
        for path in &paths {
            let once = normalize(path).into_owned();
            assert!(once.starts_with('/'), "{path:?} -> {once:?}");
            assert_eq!(normalize(&once), once, "{path:?} is not idempotent");
            let decoded = decode_once(&once);
            assert!(
                !decoded.split('/').any(|s| s == "." || s == ".."),
                "{path:?} -> {once:?} decodes to {decoded:?}"
            );
        }
    }

    /// The one scan of every `.` and `%` the early ends in
    /// [`needs_normalizing`] stand for.
    fn needs_normalizing_by_every_byte(path: &str) -> bool {
        let bytes = path.as_bytes();
        if !bytes.starts_with(b"/") {
            return false;
        }
        memchr::memchr2_iter(b'.', b'%', bytes).any(|i| match bytes[i] {
            b'.' => {
                bytes[i - 1] == b'/'
                    && matches!(&bytes[i + 1..], [] | [b'/', ..] | [b'.'] | [b'.', b'/', ..])
            }
            _ => escape_at(bytes, i).is_some_and(unreserved),
        })
    }

    /// Every path of up to four pieces (dots, escapes valid and not,
    /// slashes, letters of either case) with and without a leading `/`:
    /// the early ends answer as the scan of every byte does.
    #[test]
    fn plain_paths_end_early_as_the_whole_scan_would() {
        const PIECES: [&str; 16] = [
            "/", ".", "..", "a", "A", "~", "%", "%%", "%2e", "%2E", "%41", "%2F", "%zz", "%2",
            ".txt", "%7e",
        ];
        let mut paths = vec![String::new()];
        let mut last = vec![String::new()];
        for _ in 0..4 {
            last = last
                .iter()
                .flat_map(|p| PIECES.iter().map(move |piece| format!("{p}{piece}")))
                .collect();
            paths.extend(last.iter().cloned());
        }
        let mut checked = 0;
        for tail in &paths {
            for path in [tail.clone(), format!("/{tail}")] {
                assert_eq!(
                    needs_normalizing(&path),
                    needs_normalizing_by_every_byte(&path),
                    "{path:?}"
                );
                checked += 1;
            }
        }
        assert!(checked > 100_000);
    }

    #[test]
    fn borrowed_when_nothing_changes() {
        for path in [
            "/",
            "",
            "*",
            "/api/v1/users",
            "/index.html",
            "/a.b/.c/d./...",
            "/.well-known/acme-challenge/x",
            "/..a/a../.../.b",
            "/a%20b",
            "/a%2Fb",
            "/a//b",
        ] {
            let out = normalize(path);
            assert!(
                matches!(out, Cow::Borrowed(p) if p.as_ptr() == path.as_ptr()),
                "{path:?}"
            );
        }
    }

    #[test]
    fn edge_cases() {
        assert_eq!(norm("/."), "/");
        assert_eq!(norm("/.."), "/");
        assert_eq!(norm("/a/.."), "/");
        assert_eq!(norm("/a/b/.."), "/a/");
        // Not `/`-rooted: as sent.
        assert_eq!(norm(".."), "..");
        assert_eq!(norm("a/../b"), "a/../b");
        // Long paths: linear, and climbing never goes above the root.
        let long = "/a".repeat(20_000) + &"/..".repeat(30_000) + "/x";
        assert_eq!(norm(&long), "/x");
        let long = "/%2e".repeat(20_000) + "/x";
        assert_eq!(norm(&long), "/x");
        let kept = "/abc".repeat(20_000);
        assert_eq!(norm(&kept), kept);
    }
}
