#!/usr/bin/env bash
# HTTP/1.1 keep-alive cost per request, counted rather than timed, so it can
# be measured on a busy machine (first run at 4921c6a, 2026-11-24): teapot (this build),
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
# shellcheck source=instructions-lib.sh
. "$root/benches/instructions-lib.sh"
require wrk nginx haproxy perf valgrind callgrind_control python3 curl
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
        run_teapot "$t" "$@" -- --manifests "$work/manifests" --http "127.0.0.1:$p" --https off --admin 127.0.0.1:0
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
ready() { # PORT
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
targets=(teapot)
[ -n "${BASE:-}" ] && targets+=(teapot-base)
targets+=(haproxy nginx)
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
for t in "${targets[@]}"; do
    if [[ " $phases " == *" native "* ]]; then measure_native "$t"; fi
    if [[ " $phases " == *" callgrind "* ]]; then measure_callgrind "$t" 1; fi
done
report req
