#!/usr/bin/env bash
# How much of teapot's HTTP/1.1 keep-alive cost is Pingora's own (issue #8).
#
# One nginx static backend; in front of it, each with ONE worker thread:
# bare Pingora (benches/examples/bare_pingora.rs: a fixed upstream and
# nothing else), teapot proxy, HAProxy and nginx as a reverse proxy. In
# interleaved rounds, wrk (1 thread, 50 connections) loads each; the
# proxy's CPU time over the middle of the run (perf stat task-clock) gives
# the CPU cost of one request, which is steadier than requests/s on a
# shared 2-core machine. Prints the medians.
#
#   cargo build --release -p teapot -p teapot-benches --bin teapot --example bare_pingora
#   benches/pingora-floor.sh [ROUNDS] [SECONDS]
# PROFILE=NAME uses target/NAME instead of target/release.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-5}"
seconds="${2:-5}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
for tool in wrk nginx haproxy perf; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend=$(port) teapot=$(port) bare=$(port) haproxy=$(port) ngproxy=$(port)
echo hello >"$work/hello.txt"
nginx_conf() { # $1: server block
    cat <<EOF
worker_processes 1;
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
nginx_conf "server { listen 127.0.0.1:$backend; root $work; location / { try_files /hello.txt =404; } }" >"$work/backend.conf"
nginx_conf "server { listen 127.0.0.1:$ngproxy; location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }" >"$work/proxy.conf"
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
  bind 127.0.0.1:$haproxy
  default_backend b
backend b
  http-reuse always
  server s1 127.0.0.1:$backend
EOF
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
nginx -c "$work/backend.conf" >/dev/null 2>&1 & pids+=($!)
nginx -c "$work/proxy.conf" >/dev/null 2>&1 & pids+=($!)
haproxy -f "$work/haproxy.cfg" -db >/dev/null 2>&1 & pids+=($!)
RUST_LOG=warn "$bin/teapot" --threads 1 proxy --manifests "$work/manifests" \
    --http "127.0.0.1:$teapot" --https off --admin 127.0.0.1:0 >/dev/null 2>&1 & pids+=($!)
"$bin/examples/bare_pingora" "127.0.0.1:$bare" "127.0.0.1:$backend" 1 >/dev/null 2>&1 & pids+=($!)
sleep 2
# The pid that does the proxying: nginx's and HAProxy's worker, not the master.
worker_of() { local p; p=$(pgrep -P "$1" | head -1); echo "${p:-$1}"; }
declare -A pid_of=(
    [pingora]=${pids[4]} [teapot]=${pids[3]}
    [haproxy]=$(worker_of "${pids[2]}") [nginx]=$(worker_of "${pids[1]}")
)
declare -A port_of=([pingora]=$bare [teapot]=$teapot [haproxy]=$haproxy [nginx]=$ngproxy)
for t in "${!port_of[@]}"; do
    curl -sf -H "Host: bench.example" "http://127.0.0.1:${port_of[$t]}/hello.txt" >/dev/null \
        || { echo "$t does not answer" >&2; exit 1; }
done
measure_for=$(python3 -c "print(max(1, $seconds - 2))")
results="$work/results"
for r in $(seq "$rounds"); do
    for t in pingora teapot haproxy nginx; do
        wrk -t1 -c50 -d"${seconds}s" -H "Host: bench.example" \
            "http://127.0.0.1:${port_of[$t]}/hello.txt" >"$work/wrk.out" &
        load=$!
        sleep 1
        ms=$(perf stat -x, -e task-clock -p "${pid_of[$t]}" -- sleep "$measure_for" 2>&1 | awk -F, '/task-clock/ { print $1 }')
        wait "$load"
        rps=$(awk '/Requests\/sec/ { print $2 }' "$work/wrk.out")
        echo "$r $t $rps $ms $measure_for" >>"$results"
        printf 'round %s %-8s %9.0f req/s  %6.1f us CPU/request\n' "$r" "$t" "$rps" \
            "$(python3 -c "print($ms * 1000 / ($rps * $measure_for))")"
    done
done
python3 - "$results" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
by = {}
for _, t, rps, ms, secs in rows:
    by.setdefault(t, []).append((float(rps), float(ms) * 1000 / (float(rps) * float(secs))))
med = {t: (statistics.median(r for r, _ in v), statistics.median(c for _, c in v)) for t, v in by.items()}
print(f"\n{'median':<9}{'req/s':>9}{'us CPU/req':>12}{'req/s vs haproxy':>18}")
for t in ("pingora", "teapot", "haproxy", "nginx"):
    rps, cpu = med[t]
    print(f"{t:<9}{rps:>9.0f}{cpu:>12.1f}{rps / med['haproxy'][0]:>18.2f}")
print(f"\nteapot over bare Pingora: {med['teapot'][1] / med['pingora'][1]:.2f}x the CPU per request")
PY
