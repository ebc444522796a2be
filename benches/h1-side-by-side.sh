#!/usr/bin/env bash
# HTTP/1.1 keep-alive, side by side: teapot, HAProxy and nginx,
# each with ONE worker, in front of one nginx backend serving a 128-byte
# body, loaded by wrk in rotated rounds. Optional targets: a second teapot
# binary (BASE=path: the build before a change, so "before" and "after"
# share one run), bare Pingora (PINGORA=1; benches/examples/bare_pingora.rs)
# and a bare tokio loop with no routing or edits (FLOOR=1;
# benches/examples/floor_h1.rs, built in target/release).
#
# With PIN=1 (the default on 2+ CPUs) every proxy runs on CPU 1 and wrk
# and the backend on CPU 0, so the proxy under test has a core to itself.
# The proxy's CPU time over the middle of each run (perf stat task-clock)
# gives its CPU per request, which is steadier than requests/s.
#
#   cargo build --release -p teapot -p teapot-benches --bin teapot [--example bare_pingora] [--example floor_h1]
#   benches/h1-side-by-side.sh [ROUNDS] [SECONDS]
#
# BACKEND=file (the default) has the backend open and send a file per
# request, so on 2 CPUs wrk plus the backend saturate CPU 0 first and the
# proxies wait on them (the run measures the load side); BACKEND=inline
# answers from nginx's memory (`return 200`), which leaves the proxy's CPU
# the limit, so req/s and CPU per request are the proxy's own.
#
# Environment: BASE=/path/to/teapot, PINGORA=1, FLOOR=1, PIN=0|1, BACKEND, CONNS (64),
# BODY bytes (128), JSON=file (raw rounds), PROFILE=NAME (target/NAME),
# TEAPOT_ARGS (more flags for the teapot target, e.g. "--access-log all
# --access-log-file /tmp/access.log"; BASE runs without them).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
rounds="${1:-5}"
seconds="${2:-5}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
conns="${CONNS:-64}"
body="${BODY:-128}"
pin="${PIN:-$([ "$(nproc)" -ge 2 ] && echo 1 || echo 0)}"
backend_kind="${BACKEND:-file}"
for tool in wrk nginx haproxy perf taskset python3 curl; do
    command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
done
on_proxy_cpu=() on_load_cpu=()
if [ "$pin" = 1 ]; then on_proxy_cpu=(taskset -c 1) on_load_cpu=(taskset -c 0); fi
work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
backend=$(port)
head -c "$body" /dev/zero | tr '\0' 'x' >"$work/body.txt"
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
declare -A pid_of port_of
worker_of() { local p; p=$(pgrep -P "$1" | head -1); echo "${p:-$1}"; }
# utime and stime (clock ticks) of a process, all its threads.
proc_ticks() { awk '{ sub(/^.*\) /, ""); print $12, $13 }' "/proc/$1/stat"; }
case "$backend_kind" in
    file) serve='root '"$work"'; location / { try_files /body.txt =404; }' ;;
    inline) serve='location / { default_type text/plain; return 200 "'"$(cat "$work/body.txt")"'"; }' ;;
    *) echo "BACKEND must be file or inline, not '$backend_kind'" >&2; exit 2 ;;
esac
nginx_conf "server { listen 127.0.0.1:$backend; $serve }" >"$work/backend.conf"
"${on_load_cpu[@]}" nginx -c "$work/backend.conf" >/dev/null 2>&1 & pids+=($!)

targets=(teapot haproxy nginx)
port_of[nginx]=$(port)
nginx_conf "server { listen 127.0.0.1:${port_of[nginx]}; location / { proxy_pass http://backend; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }" >"$work/proxy.conf"
"${on_proxy_cpu[@]}" nginx -c "$work/proxy.conf" >/dev/null 2>&1 & pids+=($!)
nginx_master=$!
port_of[haproxy]=$(port)
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
  bind 127.0.0.1:${port_of[haproxy]}
  default_backend b
backend b
  http-reuse always
  server s1 127.0.0.1:$backend
EOF
"${on_proxy_cpu[@]}" haproxy -f "$work/haproxy.cfg" -db >/dev/null 2>&1 & pids+=($!)
haproxy_master=$!
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
start_teapot() { # $1: target name, $2: binary, then extra flags
    port_of[$1]=$(port)
    local name=$1 binary=$2
    shift 2
    RUST_LOG=warn "${on_proxy_cpu[@]}" "$binary" --threads 1 proxy --manifests "$work/manifests" \
        --http "127.0.0.1:${port_of[$name]}" --https off --admin 127.0.0.1:0 "$@" >/dev/null 2>&1 &
    pids+=($!)
    pid_of[$name]=$!
}
read -r -a teapot_args <<<"${TEAPOT_ARGS:-}"
start_teapot teapot "$bin/teapot" "${teapot_args[@]}"
if [ -n "${BASE:-}" ]; then
    start_teapot teapot-base "$BASE"
    targets=(teapot teapot-base haproxy nginx)
fi
if [ "${FLOOR:-0}" = 1 ]; then
    port_of[floor]=$(port)
    "${on_proxy_cpu[@]}" "${CARGO_TARGET_DIR:-$root/target}/release/examples/floor_h1" "127.0.0.1:${port_of[floor]}" "127.0.0.1:$backend" >/dev/null 2>&1 &
    pids+=($!)
    pid_of[floor]=$!
    targets+=(floor)
fi
if [ "${PINGORA:-0}" = 1 ]; then
    port_of[pingora]=$(port)
    "${on_proxy_cpu[@]}" "$bin/examples/bare_pingora" "127.0.0.1:${port_of[pingora]}" "127.0.0.1:$backend" 1 >/dev/null 2>&1 &
    pids+=($!)
    pid_of[pingora]=$!
    targets+=(pingora)
fi
sleep 2
pid_of[haproxy]=$(worker_of "$haproxy_master")
pid_of[nginx]=$(worker_of "$nginx_master")
for t in "${targets[@]}"; do
    curl -sf -H "Host: bench.example" "http://127.0.0.1:${port_of[$t]}/body.txt" >/dev/null \
        || { echo "$t does not answer" >&2; exit 1; }
done
measure_for=$(python3 -c "print(max(1, $seconds - 2))")
results="$work/results"
for r in $(seq "$rounds"); do
    # Rotated: each round starts with the next target, so no target always
    # runs right after the same one.
    n=${#targets[@]}
    for i in $(seq 0 $((n - 1))); do
        t=${targets[$(((i + r) % n))]}
        "${on_load_cpu[@]}" wrk -t1 -c"$conns" -d"${seconds}s" -H "Host: bench.example" \
            "http://127.0.0.1:${port_of[$t]}/body.txt" >"$work/wrk.out" &
        load=$!
        sleep 1
        # User and system ticks of the whole process around the window, so
        # a difference in CPU per request can be told user space or kernel.
        ticks_before=$(proc_ticks "${pid_of[$t]}")
        ms=$(perf stat -x, -e task-clock -p "${pid_of[$t]}" -- sleep "$measure_for" 2>&1 | awk -F, '/task-clock/ { print $1 }')
        ticks_after=$(proc_ticks "${pid_of[$t]}")
        wait "$load"
        rps=$(awk '/Requests\/sec/ { print $2 }' "$work/wrk.out")
        errors=$(awk '/Non-2xx|Socket errors/ { print }' "$work/wrk.out" | tr '\n' ' ')
        read -r user_before sys_before <<<"$ticks_before"
        read -r user_after sys_after <<<"$ticks_after"
        user=$((user_after - user_before))
        sys=$((sys_after - sys_before))
        echo "$r $t $rps $ms $measure_for $user $sys" >>"$results"
        printf 'round %s %-12s %9.0f req/s  %6.2f us CPU/request (user %s%%) %s\n' "$r" "$t" "$rps" \
            "$(python3 -c "print($ms * 1000 / ($rps * $measure_for))")" \
            "$(python3 -c "print(round(100 * $user / max(1, $user + $sys)))")" "$errors"
    done
done
python3 - "$results" "${JSON:-}" "$conns" "$body" "$pin" "$backend_kind" <<'PY'
import json, statistics, sys
path, out, conns, body, pin, backend = sys.argv[1:7]
rows = [l.split() for l in open(path)]
by = {}
for r, t, rps, ms, secs, user, sys_ in rows:
    cpu = float(ms) * 1000 / (float(rps) * float(secs))
    share = int(user) / max(1, int(user) + int(sys_))
    by.setdefault(t, []).append({"round": int(r), "req_s": float(rps), "us_cpu_per_request": cpu,
                                 "us_user_per_request": cpu * share, "us_system_per_request": cpu * (1 - share)})
med = {t: (statistics.median(x["req_s"] for x in v), statistics.median(x["us_cpu_per_request"] for x in v),
           statistics.median(x["us_user_per_request"] for x in v))
       for t, v in by.items()}
h_rps, h_cpu, _ = med["haproxy"]
n_rps, n_cpu, _ = med["nginx"]
print(f"\n{'median':<13}{'req/s':>9}{'us CPU/req':>12}{'of it user':>12}{'req/s vs HAProxy':>18}{'vs nginx':>10}"
      f"{'CPU vs HAProxy':>16}{'CPU vs nginx':>14}")
for t, (rps, cpu, user) in med.items():
    print(f"{t:<13}{rps:>9.0f}{cpu:>12.2f}{user:>12.2f}{rps / h_rps:>18.2f}{rps / n_rps:>10.2f}"
          f"{cpu / h_cpu:>16.2f}{cpu / n_cpu:>14.2f}")
if out:
    json.dump({"connections": int(conns), "body_bytes": int(body), "pinned": pin == "1", "backend": backend,
               "rounds": by, "medians": {t: {"req_s": m[0], "us_cpu_per_request": m[1], "us_user_per_request": m[2]}
                           for t, m in med.items()}},
              open(out, "w"), indent=1)
PY
