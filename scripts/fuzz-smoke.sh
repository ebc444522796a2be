#!/usr/bin/env bash
# Bounded fuzz run (issue #9): writes the seed corpus from the repository's
# test data (fuzz/tests/seeds.rs), then runs each cargo-fuzz target for
# FUZZ_SECONDS (default 60) under `nice`. Not part of scripts/test.sh: the
# sanitizer build of the proxy and webhook alone takes far longer than the
# two minutes CI can spare (docs/edge.md, "Fuzzing"). The long run is
# FUZZ_SECONDS=600.
#
# Needs the nightly toolchain and cargo-fuzz (`cargo install cargo-fuzz`);
# without them, runs the stable seed loop instead.
# FUZZ_TARGETS: space-separated subset (default: all four).
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
read -r -a targets <<<"${FUZZ_TARGETS:-h1_scan manifests route_match webhook_validate}"
target_dir="${CARGO_TARGET_DIR:-$PWD/target}/fuzz"
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "cargo-fuzz or nightly missing: running the stable seed loop" >&2
    TEAPOT_FUZZ_ROUNDS="${TEAPOT_FUZZ_ROUNDS:-2000}" cargo test --release --target-dir "$target_dir-stable"
    exit
fi
# The seed corpus is written by a stable test, not kept in git.
cargo test -q --target-dir "$target_dir-stable" --test seeds seed_corpus_is_written
for t in "${targets[@]}"; do
    echo "== $t: ${seconds}s"
    nice -n 19 cargo +nightly fuzz run --target-dir "$target_dir" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1
done
