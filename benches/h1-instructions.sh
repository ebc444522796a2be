#!/usr/bin/env bash
# HTTP/1.1 keep-alive cost per request, counted rather than timed, so it can
# be measured on a busy machine (issue 17, 4921c6a, 2026-11-24): teapot (this build),
# optionally a BASE teapot binary, HAProxy and nginx, each with ONE worker
# in front of one nginx backend serving a 128-byte body, loaded by
# `wrk -t1 -c64`.
#
# Two phases per target:
#   native    the proxy runs as usual; `perf stat` counts its system calls
#             (raw_syscalls:sys_enter) and context switches per request,
#             and /proc/PID/stat its user and system CPU per request (the
#             timing is a rough guide only on a shared machine);
#   callgrind the proxy runs under valgrind's callgrind; its counters are
#             zeroed after a warm-up, wrk runs, and the dump's total is the
#             user-space instructions per request (exact, independent of
#             the machine's load; the kernel's part is not counted: the VM
#             has no PMU, so `perf stat -e instructions` is not supported
#             here, which is why the system calls stand in for it).
#
#   cargo build --release -p teapot --bin teapot
#   BASE=/work/bin/teapot-main benches/h1-instructions.sh [SECONDS]
#
# Environment: BASE=/path/to/teapot, TARGETS (default "teapot [teapot-base]
# haproxy nginx"; "floor" is benches/examples/floor_h1.rs, a bare tokio loop
# built with `cargo build --release -p teapot-benches --example floor_h1`), CONNS (64), BODY bytes (128), PROFILE=NAME (target/NAME),
# KEEP=DIR (keep the callgrind dumps there, for callgrind_annotate),
# PHASES ("native callgrind"), DEBUG=1 (keep the work directory: logs,
# configs, raw results), CLOSE=1 (every request with `Connection: close`:
# the cost of a new connection per request, accept to close).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-5}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
conns="${CONNS:-64}"
body="${BODY:-128}"
phases="${PHASES:-native callgrind}"
close=()
[ -n "${CLOSE:-}" ] && close=(-H "Connection: close")
for tool in wrk nginx haproxy perf valgrind callgrind_control python3 curl; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; [ -n "${DEBUG:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend=$(port)
head -c "$body" /dev/zero | tr '\0' 'x' >"$work/body.txt"
nginx_conf() { # $1: server block; no master process, so the pid is the worker
    cat <<EOF
worker_processes 1;
master_process off;
daemon off;
pid $work/nginx-$RANDOM.pid;
error_log $work/nginx-error.log;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  client_body_temp_path $work; proxy_temp_path $work; fastcgi_temp_path $work;
  uwsgi_temp_path $work; scgi_temp_path $work;
  upstream backend { server 127.0.0.1:$backend; keepalive 64; }
  $1
}
EOF
}
nginx_conf "server { listen 127.0.0.1:$backend; root $work; location / { try_files /body.txt =404; } }" >"$work/backend.conf"
nginx -c "$work/backend.conf" >/dev/null 2>&1 &
pids+=($!)
mkdir "$work/manifests"
cat >"$work/manifests/bench.yaml" <<EOF
apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {name: teapot}
spec: {controller: teapot.dev/ingress-controller}
---
apiVersion: v1
kind: Service
metadata: {name: static, namespace: bench}
spec: {ports: [{name: http, port: 80, targetPort: $backend}]}
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: static-1, namespace: bench, labels: {kubernetes.io/service-name: static}}
addressType: IPv4
ports: [{name: http, port: $backend, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"], conditions: {ready: true}}]
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bench, namespace: bench}
spec:
  ingressClassName: teapot
  rules: [{host: bench.example, http: {paths: [{path: /, pathType: Prefix, backend: {service: {name: static, port: {name: http}}}}]}}]
EOF

# start TARGET PORT [WRAPPER...]: runs the target on PORT, prints its pid.
start() {
    local t=$1 p=$2
    shift 2
    case $t in
    teapot | teapot-base)
        local b="$bin/teapot"
        [ "$t" = teapot-base ] && b="$BASE"
        # The allocator variables set, so teapot does not re-execute itself
        # (under valgrind the re-executed process would run natively).
        MIMALLOC_PURGE_DELAY=10000 MIMALLOC_ALLOW_THP=0 RUST_LOG=warn "$@" "$b" --threads 1 proxy --manifests "$work/manifests" \
            --http "127.0.0.1:$p" --https off --admin 127.0.0.1:0 >"$work/$t.log" 2>&1 &
        ;;
    haproxy)
        cat >"$work/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 4000
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend f
  bind 127.0.0.1:$p
  default_backend b
backend b
  http-reuse always
  server s1 127.0.0.1:$backend
EOF
        "$@" haproxy -f "$work/haproxy.cfg" -db >"$work/$t.log" 2>&1 &
        ;;
    floor) # benches/examples/floor_h1.rs: no routing, edits or timeouts
        "$@" "${CARGO_TARGET_DIR:-$root/target}/release/examples/floor_h1" "127.0.0.1:$p" "127.0.0.1:$backend" >"$work/$t.log" 2>&1 &
        ;;
    nginx)
        nginx_conf "server { listen 127.0.0.1:$p; location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }" >"$work/proxy-$p.conf"
        "$@" nginx -c "$work/proxy-$p.conf" >"$work/$t.log" 2>&1 &
        ;;
    esac
    pids+=($!)
    echo $!
}
wait_answer() { # PORT
    for _ in $(seq 240); do
        curl -sf -m 5 -H "Host: bench.example" "http://127.0.0.1:$1/body.txt" >/dev/null && return 0
        sleep 0.5
    done
    return 1
}
load() { # PORT SECONDS -> requests completed
    wrk -t1 -c"$conns" -d"$2s" -H "Host: bench.example" "${close[@]}" "http://127.0.0.1:$1/body.txt" >"$work/wrk.out"
    if grep -q -E 'Non-2xx|Socket errors' "$work/wrk.out"; then
        echo "errors: $(grep -E 'Non-2xx|Socket errors' "$work/wrk.out")" >&2
    fi
    awk '/requests in/ { print $1 }' "$work/wrk.out"
}
ticks() { # PID -> utime stime (clock ticks, all threads)
    awk '{ print $14, $15 }' "/proc/$1/stat"
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

targets=(teapot)
[ -n "${BASE:-}" ] && targets+=(teapot-base)
targets+=(haproxy nginx)
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
hz=$(getconf CLK_TCK)
results="$work/results"
for t in "${targets[@]}"; do
    if [[ " $phases " == *" native "* ]]; then
        p=$(port)
        pid=$(start "$t" "$p")
        wait_answer "$p" || { echo "$t does not answer" >&2; cat "$work/$t.log" >&2; exit 1; }
        load "$p" 1 >/dev/null # warm-up: pool, caches
        read -r u0 s0 < <(ticks "$pid")
        wrk -t1 -c"$conns" -d"${seconds}s" -H "Host: bench.example" "${close[@]}" "http://127.0.0.1:$p/body.txt" >"$work/wrk.out" &
        w=$!
        perf stat -x, -e raw_syscalls:sys_enter,context-switches,task-clock -p "$pid" -o "$work/stat" -- sleep "$seconds" 2>/dev/null
        wait "$w"
        read -r u1 s1 < <(ticks "$pid")
        n=$(awk '/requests in/ { print $1 }' "$work/wrk.out")
        sc=$(awk -F, '/raw_syscalls/ { print $1 }' "$work/stat")
        cs=$(awk -F, '/context-switches/ { print $1 }' "$work/stat")
        ms=$(awk -F, '/task-clock/ { print $1 }' "$work/stat")
        echo "$t native $n $sc $cs $ms $((u1 - u0)) $((s1 - s0))" >>"$results"
        stop "$pid"
    fi
    if [[ " $phases " == *" callgrind "* ]]; then
        p=$(port)
        out="$work/callgrind.$t"
        pid=$(start "$t" "$p" valgrind -q --tool=callgrind --callgrind-out-file="$out.%p" --dump-instr=no --compress-strings=no)
        wait_answer "$p" || { echo "$t does not answer under valgrind" >&2; cat "$work/$t.log" >&2; exit 1; }
        load "$p" 1 >/dev/null
        callgrind_control -z "$pid" >/dev/null 2>&1
        n=$(load "$p" "$seconds")
        callgrind_control -d "$pid" >/dev/null 2>&1
        sleep 1
        dump=$(ls -t "$out".* | head -1)
        ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
        echo "$t callgrind $n $ir" >>"$results"
        [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$dump" "$KEEP/callgrind.$t"
        stop "$pid"
    fi
done
python3 - "$results" "$seconds" "$hz" <<'PY'
import sys
path, seconds, hz = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
rows = {}
for line in open(path):
    f = line.split()
    rows.setdefault(f[0], {})[f[1]] = f[2:]
print(f"{'target':<12}{'user instr/req':>15}{'syscalls/req':>14}{'ctx sw/req':>12}"
      f"{'us CPU/req':>12}{'user us/req':>13}{'sys us/req':>12}{'req/s':>10}")
for t, r in rows.items():
    ins = sc = cs = cpu = us = sy = rps = float("nan")
    if "callgrind" in r:
        n, ir = r["callgrind"]
        ins = int(ir) / int(n)
    if "native" in r:
        n, s, c, ms, u, k = r["native"]
        n = int(n)
        sc, cs = int(s) / n, int(c) / n
        cpu = float(ms) * 1000 / n
        us, sy = int(u) / hz * 1e6 / n, int(k) / hz * 1e6 / n
        rps = n / seconds
    print(f"{t:<12}{ins:>15.0f}{sc:>14.2f}{cs:>12.3f}{cpu:>12.2f}{us:>13.2f}{sy:>12.2f}{rps:>10.0f}")
PY
