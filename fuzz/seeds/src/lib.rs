//! The seeds of each fuzz target, from the repository's own test data (so
//! the corpus is never a second copy to keep in step): the demo manifests,
//! the webhook's allow/deny corpus, and the HTTP/1 and routing cases below.
//! Used by `write-seeds` (the corpus `cargo fuzz run` starts from) and by
//! `fuzz/tests/seeds.rs` (the stable-Rust seed loop).

use std::io;
use std::path::{Path, PathBuf};

/// Every cargo-fuzz target in `fuzz/fuzz_targets/`.
pub const TARGETS: [&str; 7] = [
    "dns_query",
    "h1_forward",
    "h1_scan",
    "manifests",
    "route_match",
    "route_patterns",
    "webhook_validate",
];

const H1: &[&str] = &[
    "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
    "GET / HTTP/1.0\r\nX: a\r\n b\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
];

/// Whole exchanges for `h1_forward`: bodies in both framings, pipelined.
const H1_EXCHANGES: &[&str] = &[
    "POST /a HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhelloGET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /c HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n5;x=y\r\nhello\r\n0\r\nX-T: 1\r\n\r\nHEAD /d HTTP/1.0\r\n\r\n",
    "GET http://a.example/e HTTP/1.1\r\n\r\n\r\nGET /f HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    // Chunk lines by RFC 9112's grammar: BWS, token and quoted values,
    // quoted-pairs; then a quoted-string left open at the line's end
    // (the next request must not be read out of it), an escape at the
    // end, a name missing, a value missing.
    "POST /g HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3 ; a = b ;c= \"d\\\"e\"\r\nabc\r\n0;f=\"\\\\\"\r\nX-T: 1\r\n\r\nGET /h HTTP/1.1\r\nHost: a\r\n\r\n",
    "POST /i HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n0;a=\"\r\n\r\nGET /j HTTP/1.1\r\nHost: b\r\n\r\n\"\r\n\r\n",
    "POST /k HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1;a=\"b\\\r\nc\r\n0\r\n\r\nGET /l HTTP/1.1\r\nHost: b\r\n\r\n",
    "POST /m HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n1; =b\r\nc\r\n0;a=\r\n\r\nGET /n HTTP/1.1\r\nHost: b\r\n\r\n",
];

/// Authority and path, split at the NUL (see `teapot_fuzz::route_match`).
const ROUTES: &[&str] = &[
    "a.example\0/",
    "echo.localhost:8080\0/api/v1",
    "*.example\0//x/../y",
    "[::1]:80\0",
];

/// A tenant pattern, a newline, a path, a NUL and a header value (see
/// `teapot_fuzz::route_patterns`): the forms routes use, the patterns the
/// review found costly, classes Unicode and ASCII.
const PATTERNS: &[&str] = &[
    "/api/v[0-9]+/.*\n/api/v12/users\0v1",
    "/(?:[\\s\\S]*a[\\s\\S]{60})\n/aaaa\0a",
    "\\w+\n/caf\u{e9}\0\u{e9}t\u{e9}",
    "(?i)/[a-z0-9-]+/(users|orders)/[0-9]+\n/Shop/ORDERS/42\0x",
    "a|ab\nab\0a",
    "\\bfoo\\b\n/foo\0foo bar",
    "/[^/]+/Ping\n/echo.Echo/Ping\0",
    "(unclosed\n/\0",
    "\n\0",
];

/// A DNS query in wire format: id 0x1234, RD, one question of `qtype`,
/// with an OPT record offering `edns` bytes when given.
fn dns_query(name: &str, qtype: u16, edns: Option<u16>) -> Vec<u8> {
    let mut q = vec![
        0x12,
        0x34,
        0x01,
        0x00,
        0,
        1,
        0,
        0,
        0,
        0,
        0,
        u8::from(edns.is_some()),
    ];
    for label in name.split('.').filter(|l| !l.is_empty()) {
        q.push(label.len() as u8);
        q.extend_from_slice(label.as_bytes());
    }
    q.push(0);
    q.extend_from_slice(&qtype.to_be_bytes());
    q.extend_from_slice(&[0, 1]);
    if let Some(payload) = edns {
        q.extend_from_slice(&[0, 0, 41]);
        q.extend_from_slice(&payload.to_be_bytes());
        q.extend_from_slice(&[0, 0, 0, 0, 0, 0]);
    }
    q
}

/// Questions the server answers each way: A, AAAA, TXT, ANY, SOA, NS,
/// CAA, AXFR, a name outside the zone, one that routes nowhere, a large
/// answer with and without EDNS.
fn dns_seeds() -> Vec<Vec<u8>> {
    vec![
        dns_query("web.acme.lb.example.com", 1, None),
        dns_query("web.acme.lb.example.com", 28, Some(1232)),
        dns_query("_acme-challenge.acme.lb.example.com", 16, None),
        dns_query("web.acme.lb.example.com", 255, None),
        dns_query("lb.example.com", 6, None),
        dns_query("lb.example.com", 2, Some(4096)),
        dns_query("lb.example.com", 257, None),
        dns_query("lb.example.com", 252, None),
        dns_query("www.example.org", 1, None),
        dns_query("gone.acme.lb.example.com", 1, None),
        dns_query("big.lb.example.com", 1, None),
        dns_query("big.lb.example.com", 1, Some(512)),
    ]
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn with_path(path: &Path, e: io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The `.yaml` files under `dir` (relative to the repository), in a stable
/// order so seed numbers do not move between runs.
fn yaml_under(dir: &str) -> io::Result<Vec<Vec<u8>>> {
    let mut files = Vec::new();
    let mut stack = vec![repo_root().join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).map_err(|e| with_path(&d, e))? {
            let path = e.map_err(|e| with_path(&d, e))?.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|x| x == "yaml") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .iter()
        .map(|p| std::fs::read(p).map_err(|e| with_path(p, e)))
        .collect()
}

/// The seed inputs of `target` (one of [`TARGETS`]), the empty input last.
pub fn seeds(target: &str) -> io::Result<Vec<Vec<u8>>> {
    let mut out: Vec<Vec<u8>> = match target {
        "dns_query" => dns_seeds(),
        "h1_scan" => H1.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "h1_forward" => H1
            .iter()
            .chain(H1_EXCHANGES)
            .map(|s| s.as_bytes().to_vec())
            .collect(),
        "route_match" => ROUTES.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "route_patterns" => PATTERNS.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "manifests" => {
            let mut v = yaml_under("examples/demo")?;
            v.extend(yaml_under("webhook/tests/corpus/allow")?);
            v
        }
        "webhook_validate" => yaml_under("webhook/tests/corpus")?,
        other => {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("fuzz target {other:?} has no seeds"),
            ));
        }
    };
    out.push(Vec::new());
    Ok(out)
}

/// Writes `dir/<target>/seed-NNN` for every target; returns the number of
/// seeds per target.
pub fn write_corpus(dir: &Path) -> io::Result<Vec<(&'static str, usize)>> {
    let mut counts = Vec::new();
    for target in TARGETS {
        let target_dir = dir.join(target);
        std::fs::create_dir_all(&target_dir).map_err(|e| with_path(&target_dir, e))?;
        let seeds = seeds(target)?;
        for (i, seed) in seeds.iter().enumerate() {
            let file = target_dir.join(format!("seed-{i:03}"));
            std::fs::write(&file, seed).map_err(|e| with_path(&file, e))?;
        }
        counts.push((target, seeds.len()));
    }
    Ok(counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_target_has_seeds_beyond_the_empty_input() {
        for target in TARGETS {
            let seeds = seeds(target).expect("seeds");
            assert!(seeds.len() > 1, "{target}: only {} seeds", seeds.len());
        }
    }

    #[test]
    fn an_unknown_target_is_an_error_naming_it() {
        let e = seeds("nope").expect_err("unknown target");
        assert!(e.to_string().contains("\"nope\""), "{e}");
    }

    #[test]
    fn the_corpus_is_written_per_target() {
        let dir = std::env::temp_dir().join(format!("teapot-seeds-{}", std::process::id()));
        let counts = write_corpus(&dir).expect("write");
        for (target, n) in counts {
            let written = std::fs::read_dir(dir.join(target)).expect("dir").count();
            assert_eq!(written, n, "{target}");
        }
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
