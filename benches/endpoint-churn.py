#!/usr/bin/env python3
"""Endpoint changes at scale, from outside, in manifests mode: N Ingresses
(100 per namespace, one Service and one EndpointSlice each; a namespace's
EndpointSlices in a file of their own), each teapot binary given in turn.

Measures, per binary and size:
  - written -> served: one EndpointSlice file rewritten to point at another
    backend, until a request on that Ingress's host is answered by it
    (probing on fresh connections every 1 ms);
  - the CPU the proxy spent on that one change (no probing; process CPU over
    the second after the write, less the same window at rest);
  - one route change (an Ingress's host renamed in its namespace's file):
    written -> the new host served, and the compile its reload logged;
  - a burst of RATE changes/s over different namespaces for SECONDS: p99 of
    written -> served and the proxy's CPU share of one core;
  - the same stream again without probing: the proxy's CPU share alone and
    the p50/p99 of the in-place updates its log times (`update_ms`);
  - with --route-rate R: a stream of R route changes/s (hosts renamed, a
    different namespace each time) for SECONDS, probed (p50/p99 of written
    -> served), then again unprobed: the proxy's CPU share of one core and
    the compiles its log counts, which the compile's pace bounds.

With --tenants every namespace is a Tenant's (`tenant-ns<k>`, Tenant
`ns<k>` with its own node network 10.<k/256>.<k%256>.0/24 and the domain
ns<k>.bench.test), its EndpointSlices the syncer's, pointing into that
network: what a fleet of tenant clusters looks like, where every change
is also judged by the tenant check. A tenant's endpoint is never a
loopback address, so the script runs itself again in a network namespace
of its own (root: `unshare --net`) whose loopback device holds 10.0.0.0/8,
and the two backends listen on every address there.

With --rest-after S the proxy is also left alone S seconds after the load
and its CPU measured over the next minute: what a replica at rest spends
for good, once the watcher's safety-net poll has backed off.

Usage: endpoint-churn.py --sizes 10000,100000 [--route-rate 5] [--tenants] [--rest-after 120] --json out.json NAME=BINARY...
"""
import argparse, json, os, re, shutil, socket, subprocess, sys, tempfile, threading, time

PER_NS = 100
# How long CPU at rest is measured after --rest-after's wait.
REST_WINDOW = 60.0

# Whether the world is a Tenant per namespace (--tenants).
TENANTS = False
# The environment variable that says this run is the one inside the
# network namespace --tenants makes.
IN_NETNS = "TEAPOT_BENCH_IN_NETNS"


def namespace(k):
    return f"tenant-ns{k}" if TENANTS else f"ns{k}"


def node_net(k):
    """Tenant ns<k>'s node network, without its last octet."""
    return f"10.{k // 256}.{k % 256}"


def enter_netns():
    """Runs this script again in a network namespace of its own whose
    loopback device holds 10.0.0.0/8 (every 10.x address is then this
    host's), and exits with its status."""
    if os.environ.get(IN_NETNS):
        for cmd in (["ip", "link", "set", "lo", "up"], ["ip", "addr", "add", "10.0.0.0/8", "dev", "lo"]):
            subprocess.run(cmd, check=True)
        return
    env = dict(os.environ, **{IN_NETNS: "1"})
    sys.exit(subprocess.run(["unshare", "--net", sys.executable] + sys.argv, env=env).returncode)


def backend_server(port_holder, name):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # A tenant's endpoints are its node addresses (10.x, this host's in
    # the network namespace), never loopback.
    s.bind(("0.0.0.0" if TENANTS else "127.0.0.1", 0))
    s.listen(1024)
    port_holder.append(s.getsockname()[1])
    body = name.encode()
    resp = b"HTTP/1.1 200 OK\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)

    def serve(c):
        try:
            c.settimeout(5)
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = c.recv(4096)
                if not chunk:
                    return
                data += chunk
            c.sendall(resp)
        except OSError:
            pass
        finally:
            c.close()

    def loop():
        while True:
            c, _ = s.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()


def slice_doc(k, i, port):
    if TENANTS:
        # The syncer's slice, to a node of the namespace's Tenant.
        labels = f"kubernetes.io/service-name: s{i}, endpointslice.kubernetes.io/managed-by: sync.teapot.dev"
        address = f"{node_net(k)}.{1 + i}"
    else:
        labels, address = f"kubernetes.io/service-name: s{i}", "127.0.0.1"
    return (
        f"apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: s{i}-1, namespace: {namespace(k)}, "
        f"labels: {{{labels}}}}}\naddressType: IPv4\n"
        f"ports: [{{name: http, port: {port}}}]\nendpoints: [{{addresses: [\"{address}\"], conditions: {{ready: true}}}}]\n"
    )


def tenant_doc(k):
    """Tenant ns<k>: namespace tenant-ns<k>, hosts under ns<k>.bench.test,
    nodes in its own /24."""
    return (
        f"apiVersion: teapot.dev/v1alpha1\nkind: Tenant\nmetadata: {{name: ns{k}}}\n"
        f"spec: {{cluster: ns{k}, allowedDomains: [ns{k}.bench.test], nodeCIDRs: [\"{node_net(k)}.0/24\"]}}\n"
    )


def write_world(d, n, port):
    namespaces = n // PER_NS
    for k in range(namespaces):
        if TENANTS:
            write_whole(d, f"ns{k}-tenant.yaml", tenant_doc(k))
        write_routes(d, k)
        write_slices(d, k, port)
    return namespaces


# The Ingress a route change renames.
MOVED = 9


def route_docs(ns, label, moved=None):
    """The 100 Services and Ingresses of namespace `ns`, Ingress i<i> for
    host h<i>.<label>.bench.test; `moved`: Ingress i9's host instead (a
    route change)."""
    docs = []
    for i in range(PER_NS):
        host = moved if (moved and i == MOVED) else f"h{i}.{label}.bench.test"
        docs.append(
            f"apiVersion: v1\nkind: Service\nmetadata: {{name: s{i}, namespace: {ns}}}\nspec: {{ports: [{{name: http, port: 80}}]}}\n"
        )
        docs.append(
            f"apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {{name: i{i}, namespace: {ns}}}\n"
            f"spec:\n  ingressClassName: teapot\n  rules:\n  - host: {host}\n"
            f"    http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: s{i}, port: {{number: 80}}}}}}}}]}}\n"
        )
    return docs


def write_routes(d, k, moved=None):
    """Namespace k's Services and Ingresses ([`route_docs`])."""
    write_whole(d, f"ns{k}-routes.yaml", "---\n".join(route_docs(namespace(k), f"ns{k}", moved)))


def write_slices(d, k, port):
    """Every slice of namespace k to `port` (an int), or slice i to port[i]."""
    ports = port if isinstance(port, list) else [port] * PER_NS
    write_whole(d, f"ns{k}-slices.yaml", "---\n".join(slice_doc(k, i, ports[i]) for i in range(PER_NS)))


def write_whole(d, name, text):
    """`name` in `d`, written beside it and renamed into place, as a
    deployment tool writes: the watcher sees the file whole once."""
    stage = d + ".stage"
    os.makedirs(stage, exist_ok=True)
    tmp = os.path.join(stage, name)
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, os.path.join(d, name))


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def get(port, host, path="/", timeout=2.0):
    try:
        c = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        c.sendall(f"GET {path} HTTP/1.1\r\nhost: {host}\r\nconnection: close\r\n\r\n".encode())
        data = b""
        while True:
            chunk = c.recv(65536)
            if not chunk:
                break
            data += chunk
        c.close()
        return data
    except OSError:
        return b""


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def metric(admin, name):
    text = get(admin, "localhost", "/metrics").decode(errors="replace")
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


def logged_phases(log_path, since, phases):
    """Appends to `phases[name]` each `name=<ms>` the reloads logged on
    their `snapshot swapped in` lines after byte `since` of the log."""
    with open(log_path, errors="replace") as f:
        f.seek(since)
        text = re.sub(r"\x1b\[[0-9;]*m", "", f.read())
    for line in text.splitlines():
        if "snapshot swapped in" not in line:
            continue
        for phase in phases:
            m = re.search(rf"\b{phase}=([0-9.]+)", line)
            if m:
                phases[phase].append(float(m.group(1)))


def route_changes(log, log_path, namespaces, n, rename, served, phases):
    """Five route changes, each in another namespace `k`: `rename(k, host)`
    rewrites its file with one Ingress's host renamed, until `served(host,
    deadline)`; then what its reload logged goes into `phases` (see
    `logged_phases`) and `rename(k, None)` puts the file back. Returns each
    change's written -> served time in ms, sorted."""
    times = []
    for r in range(5):
        k = (r * 13 + 5) % namespaces
        host = f"moved{r}.ns{k}.bench.test"
        log.flush()
        logged_before = os.path.getsize(log_path)
        t = time.monotonic()
        rename(k, host)
        assert served(host, t + 120), host
        times.append(time.monotonic() - t)
        time.sleep(0.5 + n / 50000)
        log.flush()
        logged_phases(log_path, logged_before, phases)
        rename(k, None)
        time.sleep(0.5 + n / 20000)
    return sorted(round(x * 1e3, 1) for x in times)


def wait_served(http, host, want, deadline):
    """Until `host` is answered with a body ending in `want` (one suffix or
    a tuple of them)."""
    while time.monotonic() < deadline:
        if get(http, host).endswith(want):
            return True
        time.sleep(0.001)
    return False


def probe_served(http, host, want, t, limit, lat, lock):
    """A thread probing until `host` answers `want`; the time since `t`
    goes into `lat` (infinite when not within `limit` seconds)."""

    def wait():
        ok = wait_served(http, host, want, t + limit)
        with lock:
            lat.append(time.monotonic() - t if ok else float("inf"))

    th = threading.Thread(target=wait, daemon=True)
    th.start()
    return th


def run_one(binary, n, ports, rate, seconds, route_rate=0.0, rest_after=0.0):
    d = tempfile.mkdtemp(prefix="ep-churn-")
    manifests = os.path.join(d, "m")
    os.makedirs(manifests)
    namespaces = write_world(manifests, n, ports["a"])
    http, https, admin = free_port(), free_port(), free_port()
    log = open(os.path.join(d, "log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen(
        [binary, "proxy", "--manifests", manifests, "--http", f"127.0.0.1:{http}",
         "--https", f"127.0.0.1:{https}", "--admin", f"127.0.0.1:{admin}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    out = {"ingresses": n}
    try:
        if not wait_served(http, "h0.ns0.bench.test", b"a", time.monotonic() + 900):
            raise SystemExit(f"{binary}: not serving")
        out["loaded_s"] = round(time.monotonic() - t0, 1)
        time.sleep(3)
        out["rss_mib"] = round(rss_mib(p.pid))
        # At rest, over as long a window as each change's below: what
        # the proxy spends with nothing changing (the watcher's safety-net
        # poll) is taken off each change's figure.
        window = 1.0 + n / 20000
        c0 = cpu_seconds(p.pid)
        time.sleep(window)
        rest = cpu_seconds(p.pid) - c0
        out["rest_cpu_ms_per_s"] = round(rest * 1e3 / window, 2)
        if rest_after:
            # Long after the load, when nothing has changed for minutes:
            # the CPU a replica at rest spends for good.
            time.sleep(rest_after)
            c0 = cpu_seconds(p.pid)
            time.sleep(REST_WINDOW)
            out["rest_after_s"] = rest_after
            out["rest_settled_cpu_ms_per_s"] = round((cpu_seconds(p.pid) - c0) * 1e3 / REST_WINDOW, 2)
        # One change, CPU only: no probing.
        samples_cpu, samples_served = [], []
        flip = ["b", "a"]
        for r in range(5):
            k = (r * 7 + 1) % namespaces
            target = flip[r % 2]
            c0 = cpu_seconds(p.pid)
            write_slices(manifests, k, ports[target])
            time.sleep(window)
            samples_cpu.append(cpu_seconds(p.pid) - c0 - rest)
            assert wait_served(http, f"h5.ns{k}.bench.test", target.encode(), time.monotonic() + 30)
        # One change, written -> served.
        for r in range(5):
            k = (r * 11 + 3) % namespaces
            host = f"h7.ns{k}.bench.test"
            want = "b" if get(http, host).endswith(b"a") else "a"
            t = time.monotonic()
            write_slices(manifests, k, ports[want])
            assert wait_served(http, host, want.encode(), t + 60)
            samples_served.append(time.monotonic() - t)
            time.sleep(0.5 + n / 50000)
        out["one_change_cpu_ms"] = sorted(round(x * 1e3, 1) for x in samples_cpu)
        out["one_change_written_to_served_ms"] = sorted(round(x * 1e3, 1) for x in samples_served)
        # One route change: an Ingress's host renamed in its namespace's
        # file, until the new host is served; and the compile its reload
        # logged.
        # The reload's phases as it logged them (builds before load_ms,
        # admit_ms and reload_ms were logged give compile_ms alone; before
        # reload_cpu_ms, the reload thread's CPU time, no CPU figure).
        phases = {k: [] for k in ("load_ms", "admit_ms", "compile_ms", "reload_ms", "reload_cpu_ms")}
        out["route_change_written_to_served_ms"] = route_changes(
            log, os.path.join(d, "log"), namespaces, n,
            lambda k, host: write_routes(manifests, k, moved=host),
            lambda host, deadline: wait_served(http, host, (b"a", b"b"), deadline),
            phases,
        )
        for phase, v in phases.items():
            if v:
                out[f"route_change_{phase}"] = sorted(round(x, 1) for x in v)
        # A steady stream over different namespaces.
        if rate:
            lat, lock = [], threading.Lock()
            interval = 1.0 / rate
            c0 = cpu_seconds(p.pid)
            start = time.monotonic()
            waiters = []
            i = 0
            # Each change moves one Service (one slice) of a namespace, a
            # different one each time, so no later change undoes it.
            now = {}
            while time.monotonic() - start < seconds:
                k = i % namespaces
                j = (i // namespaces) % PER_NS
                host = f"h{j}.ns{k}.bench.test"
                targets = now.get(k)
                if targets is None:
                    first = get(http, f"h0.ns{k}.bench.test").decode(errors="replace")[-1:]
                    targets = now[k] = [first if first in "ab" else "a"] * PER_NS
                want = "b" if targets[j] == "a" else "a"
                targets[j] = want
                t = time.monotonic()
                write_slices(manifests, k, [ports[x] for x in targets])
                waiters.append(probe_served(http, host, want.encode(), t, 30, lat, lock))
                i += 1
                next_at = start + i * interval
                time.sleep(max(0.0, next_at - time.monotonic()))
            elapsed = time.monotonic() - start
            cpu = cpu_seconds(p.pid) - c0
            for th in waiters:
                th.join()
            lat.sort()
            out["stream"] = {
                "rate_per_s": rate,
                "changes": len(lat),
                "p50_ms": round(lat[len(lat) // 2] * 1e3, 1),
                "p99_ms": round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 1),
                "max_ms": round(lat[-1] * 1e3, 1),
                "cpu_share_of_a_core_incl_probes": round(cpu / elapsed, 3),
            }
            # The same stream without probing: the proxy's CPU alone, and
            # (from its log) how long each in-place update took inside it.
            time.sleep(1.0 + n / 50000)
            log.flush()
            logged_before = os.path.getsize(os.path.join(d, "log"))
            c0 = cpu_seconds(p.pid)
            start = time.monotonic()
            i = 0
            while time.monotonic() - start < seconds:
                # Each write moves one more Service than the probed stream
                # did in that namespace, so none rewrites what is there.
                k = i % namespaces
                targets = now.setdefault(k, ["a"] * PER_NS)
                j = (i // namespaces + 1) % PER_NS
                targets[j] = "b" if targets[j] == "a" else "a"
                write_slices(manifests, k, [ports[x] for x in targets])
                i += 1
                time.sleep(max(0.0, start + i * interval - time.monotonic()))
            elapsed = time.monotonic() - start
            cpu = cpu_seconds(p.pid) - c0
            time.sleep(1.0)
            with open(os.path.join(d, "log"), errors="replace") as f:
                f.seek(logged_before)
                updates = sorted(
                    float(m.group(1))
                    for m in re.finditer(
                        r"update_ms=([0-9.]+)", re.sub(r"\x1b\[[0-9;]*m", "", f.read())
                    )
                )
            out["stream_unprobed"] = {
                "changes": i,
                "cpu_share_of_a_core": round(cpu / elapsed, 3),
                "in_place_updates_logged": len(updates),
                "update_ms_p50": round(updates[len(updates) // 2], 2) if updates else None,
                "update_ms_p99": round(updates[min(len(updates) - 1, int(len(updates) * 0.99))], 2) if updates else None,
            }
        if route_rate:
            time.sleep(1.0 + n / 50000)
            out["route_stream"] = route_stream(
                http, manifests, d, log, p.pid, namespaces, route_rate, seconds
            )
        out["reloads_total"] = metric(admin, "teapot_reloads_total")
        out["endpoint_updates_total"] = metric(admin, "teapot_endpoint_updates_total")
    finally:
        p.terminate()
        p.wait()
        log.close()
        shutil.copy(os.path.join(d, "log"), f"/tmp/ep-churn-{os.path.basename(binary)}-{n}.log")
        shutil.rmtree(d, ignore_errors=True)
    return out


def route_stream(http, manifests, d, log, pid, namespaces, rate, seconds):
    """A stream of route changes, `rate` a second for `seconds`: probed for
    written -> served, then unprobed for the CPU and the compiles."""
    out = {"rate_per_s": rate}
    for probed in (True, False):
        lat, lock, waiters = [], threading.Lock(), []
        log.flush()
        logged_before = os.path.getsize(os.path.join(d, "log"))
        c0 = cpu_seconds(pid)
        start = time.monotonic()
        i = 0
        while time.monotonic() - start < seconds:
            k = (i * 17 + 7 + (0 if probed else 1)) % namespaces
            host = f"{'p' if probed else 'u'}{i}.ns{k}.bench.test"
            t = time.monotonic()
            write_routes(manifests, k, moved=host)
            if probed:
                waiters.append(probe_served(http, host, (b"a", b"b"), t, 60, lat, lock))
            i += 1
            time.sleep(max(0.0, start + i / rate - time.monotonic()))
        elapsed = time.monotonic() - start
        cpu = cpu_seconds(pid) - c0
        for th in waiters:
            th.join()
        time.sleep(2.0)
        # The log read covers the stream and the time since: a compile it
        # ran after the last change is counted against that time too.
        window = time.monotonic() - start
        log.flush()
        with open(os.path.join(d, "log"), errors="replace") as f:
            f.seek(logged_before)
            compiles = [
                float(m.group(1))
                for m in re.finditer(r"compile_ms=([0-9.]+)", re.sub(r"\x1b\[[0-9;]*m", "", f.read()))
            ]
        if probed:
            lat.sort()
            out["changes"] = len(lat)
            out["p50_ms"] = round(lat[len(lat) // 2] * 1e3, 1)
            out["p99_ms"] = round(lat[min(len(lat) - 1, int(len(lat) * 0.99))] * 1e3, 1)
            out["max_ms"] = round(lat[-1] * 1e3, 1)
            out["cpu_share_of_a_core_incl_probes"] = round(cpu / elapsed, 3)
        else:
            out["unprobed_changes"] = i
            out["cpu_share_of_a_core"] = round(cpu / elapsed, 3)
            out["compiles"] = len(compiles)
            out["compile_ms_sum"] = round(sum(compiles), 1)
            out["compile_share_of_the_window"] = round(sum(compiles) / 1e3 / window, 3)
    return out


def main():
    global TENANTS
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--rate", type=float, default=100)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--route-rate", type=float, default=0.0)
    ap.add_argument("--tenants", action="store_true")
    ap.add_argument("--rest-after", type=float, default=0.0)
    ap.add_argument("--json")
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    if a.tenants:
        TENANTS = True
        enter_netns()
    ports = {}
    for name in ["a", "b"]:
        holder = []
        backend_server(holder, name)
        ports[name] = holder[0]
    results = {"date": time.strftime("%Y-%m-%d"), "per_namespace": PER_NS, "tenants": TENANTS, "runs": []}
    for n in [int(x) for x in a.sizes.split(",")]:
        for spec in a.binaries:
            name, binary = spec.split("=", 1)
            r = run_one(binary, n, ports, a.rate, a.seconds, a.route_rate, a.rest_after)
            r["binary"] = name
            print(json.dumps(r), flush=True)
            results["runs"].append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
