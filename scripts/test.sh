#!/usr/bin/env bash
# Every check teapot has: formatting, lints, unit, integration and
# conformance tests. This is what CI runs.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
cargo fmt --all --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
