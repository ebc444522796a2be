//! Route table benchmarks: compiling a synthetic store, and looking
//! requests up in the compiled table.
//!
//! `cargo bench -p teapot-benches --bench routing [-- FILTER]`
//!
//! - `compile/{1k,10k,100k}`: a recompile of N Ingresses as on a reload:
//!   the endpoint registry is warm and the previous snapshot is still live.
//!   Only `compile` is timed; dropping the new snapshot is not.
//! - `lookup/{exact-host-hit,wildcard-hit,deep-prefix,miss}`: one lookup in
//!   the table of 100k Ingresses (260k hosts, 930k routes), cycling through
//!   4096 requests spread over the whole table (packed in one buffer, so
//!   only the table's cache misses are timed, not the samples').
//!
//! Fixtures are built lazily, so a filter that skips the 100k benches does
//! not pay for the 100k store. Run as a test (`cargo test --benches`), every
//! bench runs once on 1k Ingresses.

use std::cell::OnceCell;
use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{Criterion, SamplingMode};
use teapot_benches::{PackedRequests, RequestClass, compile_store, samples, synthetic_store};
use teapot_model::store::Store;
use teapot_proxy::compile::snapshot::Snapshot;
use teapot_proxy::live::endpoints::EndpointRegistry;

/// Table the lookup benches use.
const LOOKUP_INGRESSES: usize = 100_000;
/// Requests per lookup bench; a power of two.
const LOOKUP_SAMPLES: usize = 4096;

/// A store and the snapshot currently "serving" from it.
struct Fixture {
    store: Store,
    registry: EndpointRegistry,
    live: Snapshot,
}

impl Fixture {
    fn new(ingresses: usize) -> Fixture {
        let store = synthetic_store(ingresses);
        let registry = EndpointRegistry::default();
        let live = compile_store(&store, &registry, 1);
        Fixture {
            store,
            registry,
            live,
        }
    }
}

/// Fixtures, built on first use.
struct Fixtures {
    /// Run as a test (`cargo test --benches`: no `--bench` argument), where
    /// Criterion runs each bench once: every size is cut to 1k so that a
    /// debug build does not spend minutes on the 100k store.
    test_mode: bool,
    small: OnceCell<Fixture>,
    medium: OnceCell<Fixture>,
    large: OnceCell<Fixture>,
}

impl Fixtures {
    fn new() -> Fixtures {
        Fixtures {
            test_mode: !std::env::args().any(|a| a == "--bench"),
            small: OnceCell::new(),
            medium: OnceCell::new(),
            large: OnceCell::new(),
        }
    }

    /// The size actually used for a bench of `ingresses`.
    fn ingresses(&self, ingresses: usize) -> usize {
        if self.test_mode {
            ingresses.min(1_000)
        } else {
            ingresses
        }
    }

    fn get(&self, ingresses: usize) -> &Fixture {
        let ingresses = self.ingresses(ingresses);
        let cell = match ingresses {
            1_000 => &self.small,
            10_000 => &self.medium,
            LOOKUP_INGRESSES => &self.large,
            _ => unreachable!("no fixture for {ingresses} Ingresses"),
        };
        cell.get_or_init(|| Fixture::new(ingresses))
    }
}

fn compile_benches(c: &mut Criterion, fixtures: &Fixtures) {
    let mut group = c.benchmark_group("compile");
    group.warm_up_time(Duration::from_secs(1));
    for (label, ingresses, samples, seconds) in [
        ("1k", 1_000, 30, 4),
        ("10k", 10_000, 10, 6),
        ("100k", 100_000, 10, 15),
    ] {
        group.sample_size(samples);
        group.measurement_time(Duration::from_secs(seconds));
        // Flat: the same iteration count per sample, so slow compiles are
        // run 10 times rather than 55.
        group.sampling_mode(if ingresses >= 10_000 {
            SamplingMode::Flat
        } else {
            SamplingMode::Auto
        });
        group.bench_function(label, |b| {
            let f = fixtures.get(ingresses);
            black_box(&f.live);
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for generation in 0..iters {
                    let started = Instant::now();
                    let next = black_box(compile_store(&f.store, &f.registry, 2 + generation));
                    total += started.elapsed();
                    drop(next);
                }
                total
            });
        });
    }
    group.finish();
}

fn lookup_benches(c: &mut Criterion, fixtures: &Fixtures) {
    let mut group = c.benchmark_group("lookup");
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(3));
    for class in RequestClass::ALL {
        group.bench_function(class.name(), |b| {
            let routes = &fixtures.get(LOOKUP_INGRESSES).live.routes;
            let ingresses = fixtures.ingresses(LOOKUP_INGRESSES);
            let requests = samples(ingresses, class, LOOKUP_SAMPLES);
            let packed = PackedRequests::new(&requests);
            let pairs = packed.pairs();
            let mask = pairs.len() - 1;
            let mut next = 0usize;
            b.iter(|| {
                let (host, path) = pairs[next & mask];
                next = next.wrapping_add(1);
                routes.lookup(black_box(host), black_box(path)).is_some()
            });
        });
    }
    group.finish();
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let fixtures = Fixtures::new();
    compile_benches(&mut c, &fixtures);
    lookup_benches(&mut c, &fixtures);
    c.final_summary();
}
