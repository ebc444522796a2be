#!/usr/bin/env bash
# HTTP/2 cost per request, counted rather than timed, so it can be measured
# on a busy machine (first run at 4921c6a, 2026-11-24): teapot (this build), optionally
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
# shellcheck source=instructions-lib.sh
. "$root/benches/instructions-lib.sh"
require h2load openssl nginx haproxy perf valgrind callgrind_control python3 curl
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
        local listen=(--http off --https "127.0.0.1:$p")
        [ "$mode" = h2c ] && listen=(--http "127.0.0.1:$p" --https off --h2c)
        run_teapot "$t" "$@" -- --manifests "$work/manifests" "${listen[@]}" --admin 127.0.0.1:0
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
ready() { # PORT
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
targets=(teapot)
[ -n "${BASE:-}" ] && targets+=(teapot-base)
targets+=(haproxy nginx)
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
for t in "${targets[@]}"; do
    if [[ " $phases " == *" native "* ]]; then measure_native "$t"; fi
    if [[ " $phases " == *" callgrind "* ]]; then
        start_callgrind "$t"
        load "$cg_port" 1 >/dev/null
        # Two counted runs, a short and a long one: each pays for its
        # CLIENTS handshakes, so the difference is the requests' cost only.
        for d in 1 "$seconds"; do
            count_callgrind "$t" "callgrind-$d" "$d"
        done
        stop "$cg_pid"
    fi
done
report req
