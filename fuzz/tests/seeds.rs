//! Stable-Rust stand-in for the fuzzer: every target over its seed corpus
//! and `TEAPOT_FUZZ_ROUNDS` (default 200) deterministic mutations of each
//! seed. `cargo +nightly fuzz run` explores far more; this keeps the
//! targets compiling and the seeds passing in CI.

use std::path::Path;

/// The seeds of each target, from the repository's own test data (so the
/// corpus is never a second copy to keep in step): the demo manifests, the
/// webhook's allow/deny corpus, and the HTTP/1 and routing cases below.
fn seeds(target: &str) -> Vec<Vec<u8>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let yaml_under = |dir: &str| -> Vec<Vec<u8>> {
        let mut files = Vec::new();
        let mut stack = vec![root.join(dir)];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
                let path = e.expect("entry").path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|x| x == "yaml") {
                    files.push(path);
                }
            }
        }
        files.sort();
        files.iter().map(|p| std::fs::read(p).expect("seed")).collect()
    };
    let mut out: Vec<Vec<u8>> = match target {
        "h1_scan" => H1.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "route_match" => ROUTES.iter().map(|s| s.as_bytes().to_vec()).collect(),
        "manifests" => {
            let mut v = yaml_under("examples/demo");
            v.extend(yaml_under("webhook/tests/corpus/allow"));
            v
        }
        "webhook_validate" => yaml_under("webhook/tests/corpus"),
        other => panic!("no seeds for {other}"),
    };
    out.push(Vec::new());
    out
}

const H1: &[&str] = &[
    "GET / HTTP/1.1\r\nHost: a.example\r\n\r\n",
    "GET / HTTP/1.0\r\nX: a\r\n b\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n",
    "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n",
    "POST / HTTP/1.1\r\nContent-Length: 4\r\nTransfer-Encoding: chunked, identity\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    "GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n",
];

/// Authority and path, split at the NUL (see `teapot_fuzz::route_match`).
const ROUTES: &[&str] = &[
    "a.example\0/",
    "echo.localhost:8080\0/api/v1",
    "*.example\0//x/../y",
    "[::1]:80\0",
];

const TARGETS: [&str; 4] = ["h1_scan", "manifests", "route_match", "webhook_validate"];

/// Writes `corpus/<target>/` for `cargo fuzz run` (scripts/fuzz-smoke.sh
/// runs this first); libFuzzer keeps adding to these directories.
#[test]
fn seed_corpus_is_written() {
    for target in TARGETS {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus").join(target);
        std::fs::create_dir_all(&dir).expect("corpus dir");
        for (i, seed) in seeds(target).iter().enumerate() {
            std::fs::write(dir.join(format!("seed-{i:03}")), seed).expect("seed file");
        }
    }
}

/// xorshift64: reproducible without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const INTERESTING: &[&[u8]] = &[
    b"\r\n", b"\n", b"\r", b"\0", b":", b" ", b"\t", b"\x0b", b",", b"chunked", b"-", b"0",
    b"99999999999999999999", b"\xff", b"{", b"[", b"'", b"\"", b"*", b"../", b"%00",
];

fn mutate(seed: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..=rng.below(4) {
        let at = rng.below(v.len() + 1);
        match rng.below(4) {
            0 => {
                let piece = INTERESTING[rng.below(INTERESTING.len())];
                v.splice(at..at, piece.iter().copied());
            }
            1 if at < v.len() => {
                let end = (at + rng.below(16)).min(v.len());
                v.drain(at..end);
            }
            2 if at < v.len() => v[at] = rng.next() as u8,
            _ => {
                let len = rng.below(32).min(v.len().saturating_sub(at));
                let copy = v[at..at + len].to_vec();
                v.splice(at..at, copy);
            }
        }
    }
    v
}

fn run(target: &str, f: fn(&[u8])) {
    let rounds: usize = std::env::var("TEAPOT_FUZZ_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(200);
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for seed in seeds(target) {
        f(&seed);
        for _ in 0..rounds {
            f(&mutate(&seed, &mut rng));
        }
    }
}

#[test]
fn h1_scan() {
    run("h1_scan", teapot_fuzz::h1_scan);
}

#[test]
fn manifests() {
    run("manifests", teapot_fuzz::manifests);
}

#[test]
fn route_match() {
    run("route_match", teapot_fuzz::route_match);
}

#[test]
fn webhook_validate() {
    run("webhook_validate", teapot_fuzz::webhook_validate);
}
