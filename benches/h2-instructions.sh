#!/usr/bin/env bash
# HTTP/2 cost per request, counted rather than timed, so it can be measured
# on a busy machine (issue 17, 4921c6a, 2026-11-24): teapot (this build), optionally
# a BASE teapot binary, HAProxy and nginx, each with ONE worker in front of
# one nginx HTTP/1.1 backend serving a 128-byte body, loaded by h2load as
# `http-report --only h2` loads them (one h2load thread, CLIENTS
# connections of STREAMS concurrent streams each, TLS 1.3 with ALPN h2;
# MODE=h2c for prior-knowledge HTTP/2 without TLS).
#
# Two phases per target, as benches/h1-instructions.sh:
#   native    `perf stat` counts the proxy's system calls and context
#             switches per request, /proc/PID/stat its user and system CPU
#             per request (a rough guide only on a shared machine);
#   callgrind the proxy runs under valgrind's callgrind; after a warm-up
#             h2load runs twice, 1 s and SECONDS, the counters zeroed
#             before and dumped after each: h2load connects anew for each
#             run, so both pay for CLIENTS TLS handshakes, and the
#             difference of the totals over the difference of the requests
#             is the user-space instructions per request without them
#             (exact, independent of the machine's load; the kernel's part
#             is not counted).
#
#   cargo build --release -p teapot --bin teapot
#   BASE=/work/bin/teapot-h2base benches/h2-instructions.sh [SECONDS]
#
# Environment: BASE=/path/to/teapot, TARGETS (default "teapot [teapot-base]
# haproxy nginx"), CLIENTS (10), STREAMS (10), BODY bytes (128), MODE (tls
# or h2c), PROFILE=NAME (target/NAME), KEEP=DIR (keep the callgrind dumps
# there, for callgrind_annotate), PHASES ("native callgrind"), DEBUG=1
# (keep the work directory: logs, configs, raw results).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-5}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
clients="${CLIENTS:-10}"
streams="${STREAMS:-10}"
body="${BODY:-128}"
mode="${MODE:-tls}"
phases="${PHASES:-native callgrind}"
for tool in h2load openssl nginx haproxy perf valgrind callgrind_control python3 curl; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; [ -n "${DEBUG:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend=$(port)
head -c "$body" /dev/zero | tr '\0' 'x' >"$work/body.txt"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
    -subj /CN=bench.example -addext subjectAltName=DNS:bench.example \
    -keyout "$work/key.pem" -out "$work/cert.pem" >/dev/null 2>&1
cat "$work/cert.pem" "$work/key.pem" >"$work/bundle.pem"
scheme=https
[ "$mode" = h2c ] && scheme=http
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
apiVersion: v1
kind: Secret
metadata: {name: bench-tls, namespace: bench}
type: kubernetes.io/tls
data:
  tls.crt: $(base64 -w0 "$work/cert.pem")
  tls.key: $(base64 -w0 "$work/key.pem")
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {name: bench, namespace: bench}
spec:
  ingressClassName: teapot
  tls: [{hosts: [bench.example], secretName: bench-tls}]
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
        local listen=(--http off --https "127.0.0.1:$p")
        [ "$mode" = h2c ] && listen=(--http "127.0.0.1:$p" --https off --h2c)
        # The allocator variables set, so teapot does not re-execute itself
        # (under valgrind the re-executed process would run natively).
        MIMALLOC_PURGE_DELAY=10000 MIMALLOC_ALLOW_THP=0 RUST_LOG=warn "$@" "$b" --threads 1 proxy --manifests "$work/manifests" \
            "${listen[@]}" --admin 127.0.0.1:0 >"$work/$t.log" 2>&1 &
        ;;
    haproxy)
        local bind="ssl crt $work/bundle.pem alpn h2,http/1.1"
        [ "$mode" = h2c ] && bind="proto h2"
        cat >"$work/haproxy.cfg" <<EOF
global
  nbthread 1
  maxconn 4000
  ssl-default-bind-options ssl-min-ver TLSv1.3 no-tls-tickets
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  option http-keep-alive
frontend f
  bind 127.0.0.1:$p $bind
  default_backend b
backend b
  http-reuse always
  server s1 127.0.0.1:$backend
EOF
        "$@" haproxy -f "$work/haproxy.cfg" -db >"$work/$t.log" 2>&1 &
        ;;
    nginx)
        local listen="listen 127.0.0.1:$p ssl http2; ssl_certificate $work/cert.pem; ssl_certificate_key $work/key.pem; ssl_protocols TLSv1.3; ssl_session_cache off; ssl_session_tickets off;"
        [ "$mode" = h2c ] && listen="listen 127.0.0.1:$p http2;"
        nginx_conf "server { $listen http2_max_requests 1000000; location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }" >"$work/proxy-$p.conf"
        "$@" nginx -c "$work/proxy-$p.conf" >"$work/$t.log" 2>&1 &
        ;;
    esac
    pids+=($!)
    echo $!
}
wait_answer() { # PORT
    local how=(--http2)
    [ "$mode" = h2c ] && how=(--http2-prior-knowledge)
    for _ in $(seq 240); do
        curl -sfk -m 5 "${how[@]}" --resolve "bench.example:$1:127.0.0.1" \
            "$scheme://bench.example:$1/body.txt" >/dev/null && return 0
        sleep 0.5
    done
    return 1
}
h2() { # PORT SECONDS: h2load as `http-report --only h2` runs it
    h2load -t 1 -D "$2" -c "$clients" -m "$streams" --connect-to="127.0.0.1:$1" \
        "$scheme://bench.example/body.txt"
}
answered() { # h2load output file -> 2xx responses
    awk '/^status codes:/ { print $3 }' "$1"
}
load() { # PORT SECONDS -> requests answered
    h2 "$1" "$2" >"$work/h2load.out"
    if ! grep -q -E '^status codes: [0-9]+ 2xx, 0 3xx, 0 4xx, 0 5xx' "$work/h2load.out" ||
        ! grep -q -E '^requests: .* 0 failed, 0 errored' "$work/h2load.out"; then
        echo "errors: $(grep -E '^(requests|status codes):' "$work/h2load.out")" >&2
    fi
    answered "$work/h2load.out"
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
        h2 "$p" "$seconds" >"$work/h2load.out" &
        w=$!
        perf stat -x, -e raw_syscalls:sys_enter,context-switches,task-clock -p "$pid" -o "$work/stat" -- sleep "$seconds" 2>/dev/null
        wait "$w"
        read -r u1 s1 < <(ticks "$pid")
        n=$(answered "$work/h2load.out")
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
        # Two counted runs, a short and a long one: each pays for its
        # CLIENTS handshakes, so the difference is the requests' cost only.
        for d in 1 "$seconds"; do
            callgrind_control -z "$pid" >/dev/null 2>&1
            n=$(load "$p" "$d")
            callgrind_control -d "$pid" >/dev/null 2>&1
            sleep 1
            dump=$(ls -t "$out".* | head -1)
            ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
            echo "$t callgrind-$d $n $ir" >>"$results"
        done
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
    runs = [v for k, v in r.items() if k.startswith("callgrind-")]
    if len(runs) == 2:
        (n1, i1), (n2, i2) = sorted(runs, key=lambda v: int(v[0]))
        ins = (int(i2) - int(i1)) / (int(n2) - int(n1))
    if "native" in r:
        n, s, c, ms, u, k = r["native"]
        n = int(n)
        sc, cs = int(s) / n, int(c) / n
        cpu = float(ms) * 1000 / n
        us, sy = int(u) / hz * 1e6 / n, int(k) / hz * 1e6 / n
        rps = n / seconds
    print(f"{t:<12}{ins:>15.0f}{sc:>14.2f}{cs:>12.3f}{cpu:>12.2f}{us:>13.2f}{sy:>12.2f}{rps:>10.0f}")
PY
