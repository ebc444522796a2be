#!/usr/bin/env bash
# Bounded fuzz run, the last stage of CI (.ci/run, after
# scripts/test.sh; docs/edge.md, "Fuzzing"):
#   1. cargo-fuzz, installed with `cargo install --locked` when missing;
#   2. the seed corpus, written from the repository's own test data
#      (fuzz/seeds) into fuzz/corpus/<target>/, so the run starts from real
#      inputs;
#   3. one build of every target, on the default (stable) toolchain and
#      without a sanitizer (the code under test is safe Rust: a panic is the
#      finding, and an ASan build needs nightly), unoptimised with debug
#      assertions for CI because the build is most of the stage's time;
#   4. each target for FUZZ_SECONDS from its corpus.
# Exits non-zero when any target crashes (panic, per-input timeout, OOM),
# after running the others, and names each reproducer.
#
# FUZZ_SECONDS   per target (default 30); the documented long run is 600
# FUZZ_PROFILE   dev (default: fast to build, slow to run) or release
#                (optimised, still with debug assertions and overflow
#                checks; for long runs)
# FUZZ_TARGETS   space-separated subset (default: all seven)
# FUZZ_TIMEOUT   seconds one input may take before it counts as a hang
#                (default 60; 600 for long runs on a machine where
#                processes may be paused with SIGSTOP)
# FUZZ_TARGET_DIR where it builds (default $CARGO_TARGET_DIR/fuzz)
# FUZZ_SANITIZER none (default) or address, ... (those need nightly, so
#                the script then runs `cargo +nightly fuzz`)
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-30}"
timeout="${FUZZ_TIMEOUT:-60}"
sanitizer="${FUZZ_SANITIZER:-none}"
profile="${FUZZ_PROFILE:-dev}"
read -r -a targets <<<"${FUZZ_TARGETS:-dns_query h1_scan h1_forward manifests route_match route_patterns webhook_validate}"
target_dir="${FUZZ_TARGET_DIR:-${CARGO_TARGET_DIR:-$PWD/target}/fuzz}"
cargo_fuzz_version=0.13.2

cargo=(cargo)
[ "$sanitizer" = none ] || cargo=(cargo +nightly)
if ! "${cargo[@]}" fuzz --version >/dev/null 2>&1; then
    echo "fuzz: installing cargo-fuzz $cargo_fuzz_version" >&2
    cargo install --locked --version "$cargo_fuzz_version" cargo-fuzz
fi

# No dependencies: built and run in a second, unlike the fuzz crate.
cargo run -q --locked --manifest-path seeds/Cargo.toml --target-dir "$target_dir-seeds" -- corpus

build=(-s "$sanitizer" --target-dir "$target_dir")
case "$profile" in
    dev) build+=(--dev) ;;
    # cargo-fuzz's default is one codegen unit: its code can run up to ~3x
    # faster (sancov blocks ThinLTO imports across units), but the build
    # was already 22 min with 16 units on the shared 2-core machine.
    release) build+=(--codegen-units 16) ;;
    *) echo "fuzz: FUZZ_PROFILE must be dev or release, not '$profile'" >&2; exit 2 ;;
esac
start=$SECONDS
"${cargo[@]}" fuzz build "${build[@]}"
echo "fuzz: build took $((SECONDS - start)) s" >&2

log=$(mktemp)
trap 'rm -f "$log"' EXIT
failed=()
for t in "${targets[@]}"; do
    echo "== fuzz $t: ${seconds}s from corpus/$t ($(find "corpus/$t" -type f | wc -l) inputs)"
    set +e
    nice -n 19 "${cargo[@]}" fuzz run "${build[@]}" "$t" "corpus/$t" -- \
        -max_total_time="$seconds" -timeout="$timeout" -rss_limit_mb=4096 \
        -print_final_stats=1 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
    set -e
    if [ "$status" != 0 ]; then
        failed+=("$t")
        # libFuzzer names the input it saved (slow-unit-* are only slow,
        # not the failure); without one (a build error, a killed run) the
        # log above says what happened.
        artifacts=$(sed -n 's/.*Test unit written to //p' "$log" | grep -v '/slow-unit-' || true)
        for artifact in $artifacts; do
            echo "fuzz: $t crashed; reproduce with: (cd fuzz && ${cargo[*]} fuzz run ${build[*]} $t $artifact)" >&2
        done
    fi
done
if ((${#failed[@]})); then
    echo "fuzz: FAILED: ${failed[*]} (reproducers above; minimise with 'cargo fuzz tmin')" >&2
    exit 1
fi
echo "fuzz: ${#targets[@]} targets, ${seconds}s each, no crash"
