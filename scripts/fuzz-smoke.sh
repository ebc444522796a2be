#!/usr/bin/env bash
# Bounded fuzz run for CI (issue #9): each cargo-fuzz target for
# FUZZ_SECONDS (default 60) from its seed corpus. Needs a nightly toolchain
# and cargo-fuzz; without them, runs the stable seed loop instead.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
seconds="${FUZZ_SECONDS:-60}"
targets=(h1_scan manifests route_match webhook_validate)
if cargo +nightly fuzz --version >/dev/null 2>&1; then
    for t in "${targets[@]}"; do
        # A scratch copy of the corpus, so CI never commits what it found.
        work="$(mktemp -d)"
        cp -r "corpus/$t/." "$work/"
        cargo +nightly fuzz run "$t" "$work" -- -max_total_time="$seconds" -timeout=10
        rm -rf "$work"
    done
else
    echo "cargo-fuzz or nightly missing: running the stable seed loop" >&2
    TEAPOT_FUZZ_ROUNDS="${TEAPOT_FUZZ_ROUNDS:-2000}" cargo test --release
fi
