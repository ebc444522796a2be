#!/usr/bin/env bash
# Every check teapot has: formatting, lints, unit, integration and
# conformance tests. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# A full disk shows up as a linker "Bus error"; say how much room there was.
df -h . | tail -1 | awk '{ print "disk: " $4 " free of " $2 }'
cargo fmt --all --check
# The fuzz crate is outside the workspace with its own lock file; CI builds
# it with --locked, so a workspace dependency added without refreshing that
# lock fails here in seconds rather than after the whole test run.
(cd fuzz && cargo metadata --locked --format-version 1 >/dev/null) ||
    { echo "test: fuzz/Cargo.lock is stale; refresh it with: (cd fuzz && cargo metadata --offline --format-version 1 >/dev/null)" >&2; exit 1; }
cargo clippy --workspace --all-targets --locked -- -D warnings
log=$(mktemp)
trap 'rm -f "$log"' EXIT
set +e
cargo test --workspace --locked --no-fail-fast 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line over every test binary (cargo's own last line is often a
# doc-test run with nothing in it).
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($i == "passed;") p += $(i-1); if ($i == "failed;") f += $(i-1) } }
     END { printf "tests: %d passed, %d failed\n", p, f }' "$log"
# A failing test's own output is far above the end of a long run; repeat
# each failure (its name, what it printed, its panic) where a reader of the
# last lines looks.
if [ "$status" -ne 0 ]; then
    awk '/^failures:$/ { on = 1 } on { print } /^test result: FAILED/ { on = 0 }' "$log" | tail -400
fi
exit "$status"
