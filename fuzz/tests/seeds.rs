//! Stable-Rust stand-in for the fuzzer: every target over its seed corpus
//! (`seeds/`) and `TEAPOT_FUZZ_ROUNDS` (default 200) deterministic
//! mutations of each seed. `cargo fuzz run` explores far more; this runs
//! the targets where libFuzzer cannot (another platform, a debugger).

use teapot_fuzz_seeds::seeds;

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
    b"\r\n",
    b"\n",
    b"\r",
    b"\0",
    b":",
    b" ",
    b"\t",
    b"\x0b",
    b",",
    b"chunked",
    b"-",
    b"0",
    b"99999999999999999999",
    b"\xff",
    b"{",
    b"[",
    b"'",
    b"\"",
    b"\\",
    b";a=\"",
    b"*",
    b"../",
    b"%00",
    b"[\\s\\S]*",
    b"{60}",
    b"\\w",
    b"(?i)",
    b"|",
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
    for seed in seeds(target).expect("seeds") {
        f(&seed);
        for _ in 0..rounds {
            f(&mutate(&seed, &mut rng));
        }
    }
}

#[test]
fn dns_query() {
    run("dns_query", teapot_fuzz::dns_query);
}

#[test]
fn h1_scan() {
    run("h1_scan", teapot_fuzz::h1_scan);
}

#[test]
fn h1_forward() {
    run("h1_forward", teapot_fuzz::h1_forward);
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
fn route_patterns() {
    run("route_patterns", teapot_fuzz::route_patterns);
}

#[test]
fn webhook_validate() {
    run("webhook_validate", teapot_fuzz::webhook_validate);
}
