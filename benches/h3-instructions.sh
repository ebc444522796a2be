#!/usr/bin/env bash
# HTTP/3 keep-alive cost per request, counted rather than timed, so it can
# be measured on a busy machine (first run 2026-11-29): teapot `--http3`
# (this build), optionally a BASE teapot binary, and floor-proxy
# (benches/examples/floor_h3.rs --upstream: quinn + h3 forwarding each GET
# over pooled HTTP/1.1 keep-alive, the floor of the "within 1.3x" goal),
# each with ONE worker in front of one nginx backend answering BODY bytes
# from memory, loaded by `h3-report`'s generator (benches/examples/h3_load.rs:
# CONNECTIONS QUIC connections x STREAMS request loops, TLS 1.3 verified
# against the bench's own certificate).
#
# Two phases per target, as benches/h2-instructions.sh:
#   native    `perf stat` counts the server's system calls and context
#             switches per request, /proc/PID/stat its user and system CPU
#             per request (a rough guide only on a shared machine);
#   callgrind the server runs under valgrind's callgrind; after a warm-up
#             the load runs twice, SHORT and SECONDS, the counters zeroed
#             before and dumped after each: the load connects anew for each
#             run, so both pay for CONNECTIONS QUIC handshakes, and the
#             difference of the totals over the difference of the requests
#             is the user-space instructions per request without them
#             (exact, independent of the machine's load; the kernel's part
#             is not counted).
#
#   CARGO_TARGET_DIR=/work/target-rel cargo build --release -p teapot -p teapot-benches \
#       --bin teapot --example floor_h3 --example h3_load
#   CARGO_TARGET_DIR=/work/target-rel BASE=/work/target-rel-base/release/teapot \
#       benches/h3-instructions.sh [SECONDS]
#
# Environment: BASE=/path/to/teapot, TARGETS (default "teapot [teapot-base]
# floor-proxy"), CONNECTIONS (16), STREAMS (8), SHORT seconds (4), BODY
# bytes (128), PROFILE=NAME (target/NAME), KEEP=DIR (keep the callgrind
# dumps there, for callgrind_annotate), PHASES ("native callgrind"),
# DEBUG=1 (keep the work directory: logs, configs, raw results).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-12}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
connections="${CONNECTIONS:-16}"
streams="${STREAMS:-8}"
short="${SHORT:-4}"
body="${BODY:-128}"
phases="${PHASES:-native callgrind}"
h3_load="$bin/examples/h3_load"
# shellcheck source=instructions-lib.sh
. "$root/benches/instructions-lib.sh"
require nginx perf valgrind callgrind_control python3 "$h3_load" "$bin/examples/floor_h3"
backend=$(port)
"$h3_load" setup "$work" "$backend"
cat >"$work/backend.conf" <<EOF
worker_processes 1;
master_process off;
daemon off;
pid $work/nginx-backend.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
  uwsgi_temp_path $work; scgi_temp_path $work;
  server { listen 127.0.0.1:$backend; location / { default_type text/plain; return 200 "$(head -c "$body" /dev/zero | tr '\0' 'x')"; } }
}
EOF
nginx -c "$work/backend.conf" >/dev/null 2>&1 &
pids+=($!)

# start TARGET PORT [WRAPPER...]: runs the target on (UDP) PORT, prints its pid.
start() {
    local t=$1 p=$2
    shift 2
    case $t in
    teapot | teapot-base)
        # Every client of the bench is 127.0.0.1: no per-client cap.
        run_teapot "$t" "$@" -- --manifests "$work/manifests" --http off --https "127.0.0.1:$p" \
            --admin 127.0.0.1:0 --http3 --max-connections-per-client 0
        ;;
    floor-proxy)
        "$@" "$bin/examples/floor_h3" "127.0.0.1:$p" "$work/cert.pem" "$work/key.pem" \
            --upstream "127.0.0.1:$backend" >"$work/$t.log" 2>&1 &
        ;;
    esac
    pids+=($!)
    echo $!
}
ready() { # PORT
    for _ in $(seq 240); do
        "$h3_load" get "127.0.0.1:$1" "$work" 2>/dev/null && return 0
        sleep 0.5
    done
    return 1
}
load() { # PORT SECONDS -> requests answered 2xx
    "$h3_load" load "127.0.0.1:$1" "$work" "$2" "$connections" "$streams"
}
targets=(teapot)
[ -n "${BASE:-}" ] && targets+=(teapot-base)
targets+=(floor-proxy)
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
for t in "${targets[@]}"; do
    if [[ " $phases " == *" native "* ]]; then measure_native "$t"; fi
    if [[ " $phases " == *" callgrind "* ]]; then
        start_callgrind "$t"
        load "$cg_port" 2 >/dev/null
        # Two counted runs, a short and a long one: each pays for its
        # CONNECTIONS handshakes, so the difference is the requests' cost only.
        for d in "$short" "$seconds"; do
            count_callgrind "$t" "callgrind-$d" "$d"
        done
        stop "$cg_pid"
    fi
done
report req
