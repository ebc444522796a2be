#!/usr/bin/env bash
# Runs teapot on the embedded example (examples/demo) with built-in echo
# backends. Extra arguments go to `teapot demo` (see `teapot demo --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec cargo run --quiet -p teapot -- demo "$@"
