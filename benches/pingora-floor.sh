#!/usr/bin/env bash
# How much of an HTTP/1.1 keep-alive request costs in bare Pingora 0.9
# (benches/examples/bare_pingora.rs: a fixed upstream and nothing else),
# next to teapot, HAProxy and nginx: h1-side-by-side.sh with the bare
# Pingora target.
#
#   cargo build --release -p teapot -p teapot-benches --bin teapot --example bare_pingora
#   benches/pingora-floor.sh [ROUNDS] [SECONDS]
PINGORA=1 exec "$(dirname "$0")/h1-side-by-side.sh" "$@"
