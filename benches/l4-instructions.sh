#!/usr/bin/env bash
# L4 TCP cost per connection, counted rather than timed, so it can be
# measured on a busy machine: teapot (this build), optionally a BASE teapot
# binary, and HAProxy (mode tcp), each with ONE thread in front of one echo
# backend, loaded by client threads that each connect, send one byte, read
# its echo and close with a reset (the loop of `l4-report`'s connection
# rate).
#
# Two phases per target:
#   native    the proxy runs as usual; `perf stat` counts its system calls
#             (raw_syscalls:sys_enter) and context switches per connection,
#             and /proc/PID/stat its CPU per connection (the timing is a
#             rough guide only on a shared machine);
#   callgrind the proxy runs under valgrind's callgrind; its counters are
#             zeroed after a warm-up, the clients run, and the dump's total
#             is the user-space instructions per connection (exact,
#             independent of the machine's load; the kernel's part is not
#             counted, see h1-instructions.sh).
#
#   cargo build --release -p teapot --bin teapot
#   BASE=/work/bin/teapot-main benches/l4-instructions.sh [SECONDS]
#
# Environment: BASE=/path/to/teapot, TARGETS (default "teapot [teapot-base]
# haproxy"), CLIENTS (client threads, 8), PROFILE=NAME (target/NAME),
# KEEP=DIR (keep the callgrind dumps there, for callgrind_annotate),
# PHASES ("native callgrind"), DEBUG=1 (keep the work directory).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
seconds="${1:-5}"
bin="${CARGO_TARGET_DIR:-$root/target}/${PROFILE:-release}"
clients="${CLIENTS:-8}"
phases="${PHASES:-native callgrind}"
# shellcheck source=instructions-lib.sh
. "$root/benches/instructions-lib.sh"
require haproxy perf valgrind callgrind_control python3 ss

# The echo backend and the client loops: Python threads. Under callgrind
# the proxy is the slow part; natively they share the machine with it, as
# l4-report's do.
cat >"$work/echo.py" <<'EOF'
import socket, sys, threading
def serve(c):
    with c:
        while True:
            try:
                b = c.recv(64)
            except OSError:
                return
            if not b:
                return
            c.sendall(b)
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(("127.0.0.1", int(sys.argv[1])))
l.listen(4096)
while True:
    c, _ = l.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
EOF
cat >"$work/load.py" <<'EOF'
# load.py PORT SECONDS CLIENTS -> connections completed
import socket, struct, sys, threading, time
port, seconds, clients = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
done = [0] * clients
stop = time.monotonic() + seconds
reset = struct.pack("ii", 1, 0)
def loop(i):
    while time.monotonic() < stop:
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.sendall(b"x")
        if s.recv(1) != b"x":
            sys.exit("no echo")
        # A reset, not a FIN: client TIME_WAITs would fill the port range.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, reset)
        s.close()
        done[i] += 1
threads = [threading.Thread(target=loop, args=(i,)) for i in range(clients)]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(sum(done))
EOF
backend=$(port)
python3 "$work/echo.py" "$backend" &
pids+=($!)

start() { # TARGET PORT [WRAPPER...] -> pid
    local t=$1 p=$2
    shift 2
    case $t in
    teapot | teapot-base)
        mkdir -p "$work/manifests-$p"
        cat >"$work/manifests-$p/bench.yaml" <<EOF
apiVersion: v1
kind: Service
metadata: {name: bench, namespace: bench}
spec:
  type: LoadBalancer
  loadBalancerClass: teapot.dev/lb
  ports: [{name: echo, port: $p, protocol: TCP}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata: {name: bench-1, namespace: bench, labels: {kubernetes.io/service-name: bench}}
addressType: IPv4
ports: [{name: echo, port: $backend, protocol: TCP}]
endpoints: [{addresses: ["127.0.0.1"]}]
EOF
        run_teapot "$t" "$@" -- --manifests "$work/manifests-$p" --http 127.0.0.1:0 --https 127.0.0.1:0 \
            --admin 127.0.0.1:0 --l4-pool default=127.0.0.1 --l4-state off
        ;;
    haproxy)
        cat >"$work/haproxy-$p.cfg" <<EOF
global
  nbthread 1
  maxconn 4500
defaults
  mode tcp
  timeout connect 3s
  timeout client 1h
  timeout server 1h
frontend f
  bind 127.0.0.1:$p
  default_backend b
backend b
  server s1 127.0.0.1:$backend
EOF
        "$@" haproxy -db -f "$work/haproxy-$p.cfg" >"$work/$t.log" 2>&1 &
        ;;
    esac
    pids+=($!)
    echo $!
}
ready() { # PORT
    for _ in $(seq 240); do
        ss -ltn "sport = :$1" | grep -q LISTEN && return 0
        sleep 0.5
    done
    return 1
}
load() { python3 "$work/load.py" "$1" "$2" "$clients"; }

targets=(teapot)
[ -n "${BASE:-}" ] && targets+=(teapot-base)
targets+=(haproxy)
[ -n "${TARGETS:-}" ] && read -r -a targets <<<"$TARGETS"
for t in "${targets[@]}"; do
    if [[ " $phases " == *" native "* ]]; then measure_native "$t"; fi
    if [[ " $phases " == *" callgrind "* ]]; then measure_callgrind "$t" 2; fi
done
report conn
