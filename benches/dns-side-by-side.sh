#!/usr/bin/env bash
# teapot's authoritative DNS listener (`teapot proxy --dns-listen`, docs/dns.md)
# against Debian's NSD, Knot and BIND serving the same zone, one after the
# other, each pinned to one core (DNS_SERVER_CPU) with dnsperf on another
# (DNS_CLIENT_CPU): queries per second per core and server CPU per query.
# Then the amplification check: a flood of ANY and NS (with glue) queries
# from one address against teapot with its default rate limit, bytes out
# over bytes in. Then, against the same teapot, abuse from one prefix
# (dns/examples/abuse-report.rs): another client's TCP answer time while one
# client holds all the connections it can, and amplification under rotated
# query types and names. Last, the zone's memory at 100k names
# (dns/examples/zone-report.rs).
#
#   nice -n 10 benches/dns-side-by-side.sh [OUT.json]
#
# DNS_NAMES    hostnames in the zone (default 10000; each INGRESS.acme.lb.example.com)
# DNS_SECONDS  dnsperf run per server (default 10)
# TEAPOT       the binary (default target/release/teapot, built if missing)
# TEAPOT_BEFORE  another teapot binary (e.g. an earlier commit's release build)
#              run first under the same conditions, as the row "teapot-before"
# DNS_SERVERS  which servers run (default "teapot nsd knot bind")
# DNS_ROUNDS   how many times the servers run, one after the other (default 1;
#              more rounds interleave them, so a load change on a shared
#              machine strikes all of them alike)
# DNS_EXTRAS   0: only the side-by-side runs (no amplification, abuse, zone)
# Needs: dnsperf nsd knot bind9 (scripts/setup.sh dnsperf nsd knot bind9), python3.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-}"
names="${DNS_NAMES:-10000}"
seconds="${DNS_SECONDS:-10}"
server_cpu="${DNS_SERVER_CPU:-1}"
client_cpu="${DNS_CLIENT_CPU:-0}"
target="${CARGO_TARGET_DIR:-target}"
teapot="${TEAPOT:-$target/release/teapot}"
[ -x "$teapot" ] || cargo build --release -p teapot --bin teapot
servers="${DNS_SERVERS:-teapot nsd knot bind}"
rounds="${DNS_ROUNDS:-1}"
extras="${DNS_EXTRAS:-1}"
teapot_before="${TEAPOT_BEFORE:-}"
for tool in dnsperf nsd knotd named python3; do
  command -v "$tool" >/dev/null || { echo "dns bench: $tool missing (scripts/setup.sh dnsperf nsd knot bind9)" >&2; exit 1; }
done

work=$(mktemp -d /tmp/tpdns-bench.XXXXXX)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT

zone=lb.example.com
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# The same names for everyone: teapot gets Ingresses of the tenant acme
# (their assigned hostnames), the others a zone file.
mkdir -p "$work/manifests"
python3 - "$names" "$work" <<'PY'
import sys
n, work = int(sys.argv[1]), sys.argv[2]
with open(f"{work}/manifests/tenant.yaml", "w") as f:
    f.write("apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {name: acme}\nspec: {cluster: acme, nodeCIDRs: [10.1.0.0/24]}\n---\n")
    f.write("apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: tenant-acme}\nspec: {ports: [{port: 80}]}\n")
    for i in range(n):
        f.write(f"---\napiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: w{i}, namespace: tenant-acme}}\n"
                "spec: {ingressClassName: teapot, defaultBackend: {service: {name: web, port: {number: 80}}}}\n")
with open(f"{work}/zone.db", "w") as f:
    f.write("$ORIGIN lb.example.com.\n$TTL 5\n")
    f.write("@ 3600 IN SOA ns1.lb.example.com. hostmaster.lb.example.com. 1 3600 600 86400 5\n")
    f.write("@ 3600 IN NS ns1.lb.example.com.\nns1 IN A 192.0.2.1\nacme IN A 192.0.2.1\n")
    for i in range(n):
        f.write(f"w{i}.acme IN A 192.0.2.1\n")
with open(f"{work}/queries.txt", "w") as f:
    # Hits on every name, one miss in ten (NXDOMAIN), in a fixed order.
    for i in range(n):
        f.write(f"w{(i * 7919) % n}.acme.lb.example.com A\n")
        if i % 10 == 0:
            f.write(f"miss{i}.acme.lb.example.com A\n")
PY

# utime + stime of a server and its children (NSD forks its server
# processes).
cpu_ticks() {
  local total=0 p
  for p in "$1" $(pgrep -P "$1" || true); do
    total=$((total + $(awk '{print $14 + $15}' "/proc/$p/stat" 2>/dev/null || echo 0)))
  done
  echo "$total"
}
wait_answers() {
  for _ in $(seq 1 600); do
    dig +short +tries=1 +time=1 -p "$1" @127.0.0.1 "w0.acme.$zone" A 2>/dev/null | grep -q 192.0.2.1 && return 0
    sleep 0.1
  done
  echo "dns bench: $2 does not answer on $1" >&2; return 1
}
results=()
run() { # NAME PORT PID
  local name=$1 p=$2 pid=$3 before after qps queries
  wait_answers "$p" "$name"
  before=$(cpu_ticks "$pid")
  taskset -c "$client_cpu" dnsperf -s 127.0.0.1 -p "$p" -d "$work/queries.txt" -l "$seconds" -c 4 -q 200 >"$work/$name.perf" 2>&1
  after=$(cpu_ticks "$pid")
  qps=$(awk '/Queries per second/ {print $4}' "$work/$name.perf")
  queries=$(awk '/Queries completed/ {print $3}' "$work/$name.perf")
  lost=$(awk '/Queries lost/ {print $3}' "$work/$name.perf")
  cpu_s=$(python3 -c "print(($after - $before) / $(getconf CLK_TCK))")
  us=$(python3 -c "print(round($cpu_s * 1e6 / max($queries, 1), 2))")
  echo "$name: $qps q/s, $queries answered, $lost lost, server CPU ${cpu_s}s, ${us} us/query" >&2
  results+=("{\"server\":\"$name\",\"qps\":$qps,\"queries\":$queries,\"lost\":$lost,\"cpu_s\":$cpu_s,\"cpu_us_per_query\":$us}")
  kill "$pid"; wait "$pid" 2>/dev/null || true
}

# teapot: one runtime thread, no rate limit (dnsperf is one address).
run_teapot() { # NAME BINARY
  local p
  p=$(port)
  taskset -c "$server_cpu" "$2" --threads 1 proxy --manifests "$work/manifests" \
    --http 127.0.0.1:0 --https off --admin 127.0.0.1:0 --domain example.com \
    --dns-listen "127.0.0.1:$p" --dns-address 192.0.2.1 --dns-rate-limit 0 \
    >"$work/$1.out" 2>"$work/$1.err" &
  pids+=($!); run "$1" "$p" $!
}

# NSD, one server process.
run_nsd() {
  local p
  p=$(port)
  cat >"$work/nsd.conf" <<CONF
server:
  ip-address: 127.0.0.1@$p
  server-count: 1
  # Debian builds NSD with response rate limiting on (200/s): off, as
  # for the others.
  rrl-ratelimit: 0
  username: ""
  zonesdir: "$work"
  database: ""
  pidfile: "$work/nsd.pid"
  xfrdfile: "$work/xfrd.state"
  zonelistfile: "$work/zone.list"
  logfile: "$work/nsd.log"
remote-control:
  control-enable: no
zone:
  name: $zone
  zonefile: zone.db
CONF
  taskset -c "$server_cpu" nsd -d -c "$work/nsd.conf" &
  pids+=($!); run nsd "$p" $!
}

# Knot, one UDP and one TCP thread.
run_knot() {
  local p
  p=$(port)
  rm -rf "$work/knot"; mkdir -p "$work/knot"
  cat >"$work/knot.conf" <<CONF
server:
  rundir: "$work/knot"
  listen: 127.0.0.1@$p
  udp-workers: 1
  tcp-workers: 1
  background-workers: 1
database:
  storage: "$work/knot"
log:
  - target: stderr
    any: error
zone:
  - domain: $zone
    file: "$work/zone.db"
    journal-content: none
    zonefile-sync: -1
CONF
  taskset -c "$server_cpu" knotd -c "$work/knot.conf" &
  pids+=($!); run knot "$p" $!
}

# BIND, one thread (-n 1).
run_bind() {
  local p
  p=$(port)
  cat >"$work/named.conf" <<CONF
options {
  directory "$work";
  listen-on port $p { 127.0.0.1; };
  listen-on-v6 { none; };
  pid-file "$work/named.pid";
  recursion no;
  rate-limit { responses-per-second 0; };
};
zone "$zone" { type primary; file "$work/zone.db"; };
CONF
  taskset -c "$server_cpu" named -g -n 1 -c "$work/named.conf" >"$work/named.log" 2>&1 &
  pids+=($!); run bind "$p" $!
}

for _ in $(seq 1 "$rounds"); do
  [ -z "$teapot_before" ] || run_teapot teapot-before "$teapot_before"
  for server in $servers; do
    case $server in
      teapot) run_teapot teapot "$teapot" ;;
      nsd) run_nsd ;;
      knot) run_knot ;;
      bind) run_bind ;;
      *) echo "dns bench: unknown server $server" >&2; exit 1 ;;
    esac
  done
done

if [ "$extras" = 0 ]; then
  json="{\"date\":\"$(date -u +%F)\",\"commit\":\"$(git rev-parse --short HEAD)\",\"names\":$names,\"seconds\":$seconds,\"servers\":[$(IFS=,; echo "${results[*]}")]}"
  echo "$json"
  [ -z "$out" ] || echo "$json" >"$out"
  exit 0
fi

# Amplification: teapot with its defaults (20 responses/s per /24 and
# name, slip 2), a flood of ANY and NS queries from 127.0.0.1.
p=$(port)
"$teapot" --threads 1 proxy --manifests "$work/manifests" \
  --http 127.0.0.1:0 --https off --admin 127.0.0.1:0 --domain example.com \
  --dns-listen "127.0.0.1:$p" --dns-address 192.0.2.1 \
  --dns-nameserver ns1.lb.example.com --dns-nameserver ns2.lb.example.com \
  >"$work/teapot2.out" 2>"$work/teapot2.err" &
pids+=($!)
flood_pid=$!
wait_answers "$p" teapot
amp=$(python3 - "$p" <<'PY'
import socket, struct, sys, time, json
port = int(sys.argv[1])
def query(i, name, qtype):
    q = struct.pack(">HHHHHH", i & 0xffff, 0x0100, 1, 0, 0, 1)
    for label in name.split("."):
        q += bytes([len(label)]) + label.encode()
    q += b"\0" + struct.pack(">HH", qtype, 1)
    # OPT: 4096 bytes offered, as amplifiers ask.
    return q + b"\0" + struct.pack(">HHIH", 41, 4096, 0, 0)
qs = [query(i, "w0.acme.lb.example.com", 255) for i in range(0, 50000, 2)]
qs += [query(i, "lb.example.com", 2) for i in range(1, 50000, 2)]
qs = [q for pair in zip(qs[:25000], qs[25000:]) for q in pair]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
s.setblocking(False)
sent = received = answers = 0
start = time.time()
for q in qs:
    s.sendto(q, ("127.0.0.1", port)); sent += len(q)
    while True:
        try:
            data = s.recv(65535); received += len(data); answers += 1
        except BlockingIOError:
            break
    time.sleep(0.00005)
deadline = time.time() + 2
s.settimeout(0.2)
while time.time() < deadline:
    try:
        data = s.recv(65535); received += len(data); answers += 1
    except socket.timeout:
        break
print(json.dumps({"queries": len(qs), "bytes_in": sent, "responses": answers,
                  "bytes_out": received, "ratio": round(received / sent, 3),
                  "seconds": round(time.time() - start, 1)}))
PY
)
echo "amplification (ANY + NS with glue, one address): $amp" >&2

# Abuse from one prefix against the same teapot (its defaults): a TCP
# holder beside another client, rotated types and names over UDP.
abuse=$(cargo run --release -q -p teapot-dns --example abuse-report -- "127.0.0.1:$p")
echo "abuse: $abuse" >&2
kill "$flood_pid"; wait "$flood_pid" 2>/dev/null || true

# The zone's memory and build time at 100k names, and the query path
# alone on one core (dns/examples/zone-report.rs).
zone_report=$(taskset -c "$server_cpu" cargo run --release -q -p teapot-dns --example zone-report -- 100000)
echo "zone: $zone_report" >&2

json="{\"date\":\"$(date -u +%F)\",\"commit\":\"$(git rev-parse --short HEAD)\",\"names\":$names,\"seconds\":$seconds,\"servers\":[$(IFS=,; echo "${results[*]}")],\"amplification\":$amp,\"abuse\":$abuse,\"zone\":$zone_report}"
echo "$json"
[ -z "$out" ] || echo "$json" >"$out"
