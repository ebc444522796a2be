# Shared by h1-instructions.sh, h2-instructions.sh and l4-instructions.sh
# (sourced, not run): the two phases that count a proxy's cost per unit of
# work, and the table that reports them.
#
# Sourcing it makes the work directory (`work`, removed on exit unless
# DEBUG is set; `pids` are killed on exit) and the `results` file in it. The
# sourcing script sets `seconds` and defines:
#   start TARGET PORT [WRAPPER...]  starts the proxy (teapot through
#                                   run_teapot), prints its pid
#   ready PORT                      returns once it serves on PORT
#   load PORT SECONDS               runs the load, prints the units done

work="$(mktemp -d)"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; [ -n "${DEBUG:-}" ] || rm -rf "$work"; }
trap cleanup EXIT
results="$work/results"

require() { # TOOL...: stops the run when one is missing
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "missing: $tool" >&2; exit 2; }
    done
}
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# Starts the teapot build TARGET names (teapot: $bin/teapot, teapot-base:
# $BASE) as `teapot --threads 1 proxy PROXY_ARGS...` in the background,
# under the WRAPPER words (valgrind's), logging to $work/TARGET.log. The
# allocator variables are set so that teapot does not re-execute itself
# (under valgrind the re-executed process would run natively).
run_teapot() { # TARGET [WRAPPER...] -- PROXY_ARGS...
    local t=$1 b="$bin/teapot" wrapper=()
    shift
    [ "$t" = teapot-base ] && b="$BASE"
    while [ "$1" != -- ]; do
        wrapper+=("$1")
        shift
    done
    shift
    MIMALLOC_PURGE_DELAY=10000 MIMALLOC_ALLOW_THP=0 RUST_LOG=warn "${wrapper[@]}" "$b" --threads 1 proxy "$@" >"$work/$t.log" 2>&1 &
}
ticks() { # PID -> utime stime (clock ticks, all threads)
    awk '{ print $14, $15 }' "/proc/$1/stat"
}
stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

# The proxy runs as usual; `perf stat` counts its system calls and context
# switches and /proc/PID/stat its CPU over the load. Appends
# "TARGET native UNITS SYSCALLS SWITCHES TASK_MS UTICKS STICKS".
measure_native() { # TARGET
    local t=$1 p pid u0 s0 u1 s1 w n sc cs ms
    p=$(port)
    pid=$(start "$t" "$p")
    ready "$p" || { echo "$t does not answer" >&2; cat "$work/$t.log" >&2; exit 1; }
    load "$p" 1 >/dev/null # warm-up: pools, caches
    read -r u0 s0 < <(ticks "$pid")
    load "$p" "$seconds" >"$work/units" &
    w=$!
    perf stat -x, -e raw_syscalls:sys_enter,context-switches,task-clock -p "$pid" -o "$work/stat" -- sleep "$seconds" 2>/dev/null
    wait "$w"
    read -r u1 s1 < <(ticks "$pid")
    n=$(cat "$work/units")
    sc=$(awk -F, '/raw_syscalls/ { print $1 }' "$work/stat")
    cs=$(awk -F, '/context-switches/ { print $1 }' "$work/stat")
    ms=$(awk -F, '/task-clock/ { print $1 }' "$work/stat")
    echo "$t native $n $sc $cs $ms $((u1 - u0)) $((s1 - s0))" >>"$results"
    stop "$pid"
}

# Starts TARGET under callgrind and waits for it: sets `cg_pid` and
# `cg_out` (the dump files' prefix).
start_callgrind() { # TARGET
    local t=$1 p
    p=$(port)
    cg_out="$work/callgrind.$t"
    cg_pid=$(start "$t" "$p" valgrind -q --tool=callgrind --callgrind-out-file="$cg_out.%p" --dump-instr=no --compress-strings=no)
    cg_port=$p
    ready "$p" || { echo "$t does not answer under valgrind" >&2; cat "$work/$t.log" >&2; exit 1; }
}

# One counted load on the proxy `start_callgrind` started: zeroes the
# counters, loads for SECONDS, dumps. Appends "TARGET LABEL UNITS INSTR".
count_callgrind() { # TARGET LABEL SECONDS
    local n dump ir
    callgrind_control -z "$cg_pid" >/dev/null 2>&1
    n=$(load "$cg_port" "$3")
    callgrind_control -d "$cg_pid" >/dev/null 2>&1
    sleep 1
    dump=$(ls -t "$cg_out".* | head -1)
    ir=$(awk '/^(summary|totals):/ { print $2; exit }' "$dump")
    echo "$1 $2 $n $ir" >>"$results"
    [ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$dump" "$KEEP/callgrind.$1"
    return 0
}

# The proxy runs under callgrind; after a warm-up, one counted load: the
# dump's total over the units is the user-space instructions per unit.
measure_callgrind() { # TARGET WARMUP_SECONDS
    start_callgrind "$1"
    load "$cg_port" "$2" >/dev/null
    count_callgrind "$1" callgrind "$seconds"
    stop "$cg_pid"
}

# The table, per UNIT ("req", "conn"). Instructions per unit come from the
# "callgrind" row, or from the difference of two rows "callgrind-*" (a
# short and a long run, which cancels what every run pays once).
report() { # UNIT
    python3 - "$results" "$seconds" "$(getconf CLK_TCK)" "$1" <<'PY'
import sys
path, seconds, hz, unit = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
rows = {}
for line in open(path):
    f = line.split()
    rows.setdefault(f[0], {})[f[1]] = f[2:]
print(f"{'target':<12}{'user instr/' + unit:>16}{'syscalls/' + unit:>15}{'ctx sw/' + unit:>13}"
      f"{'us CPU/' + unit:>13}{'user us/' + unit:>14}{'sys us/' + unit:>13}{unit + '/s':>10}")
for t, r in rows.items():
    ins = sc = cs = cpu = us = sy = rate = float("nan")
    runs = [v for k, v in r.items() if k.startswith("callgrind-")]
    if "callgrind" in r:
        n, ir = r["callgrind"]
        ins = int(ir) / int(n)
    elif len(runs) == 2:
        (n1, i1), (n2, i2) = sorted(runs, key=lambda v: int(v[0]))
        ins = (int(i2) - int(i1)) / (int(n2) - int(n1))
    if "native" in r:
        n, s, c, ms, u, k = r["native"]
        n = int(n)
        sc, cs = int(s) / n, int(c) / n
        cpu = float(ms) * 1000 / n
        us, sy = int(u) / hz * 1e6 / n, int(k) / hz * 1e6 / n
        rate = n / seconds
    print(f"{t:<12}{ins:>16.0f}{sc:>15.2f}{cs:>13.3f}{cpu:>13.2f}{us:>14.2f}{sy:>13.2f}{rate:>10.0f}")
PY
}
