#!/usr/bin/env python3
"""A route change in a fleet where every namespace is a Tenant's, from
outside, in manifests mode: N Ingresses (100 per namespace `tenant-ns<k>`,
one Service and one EndpointSlice each, the slices pointing into the
Tenant's `nodeCIDRs`), each teapot binary given in turn.

Measures, per binary: the first load (start -> served); one route change
(an Ingress's host renamed in its namespace's file, five times): written
-> the new host answered, and the reload's phases as it logged them
(`load_ms`, `admit_ms` (the tenant check), `compile_ms`, `reload_ms`).

The renamed Ingress's Service has no EndpointSlice, so the new host
answers 503 as soon as it is routed (404 before): no backend is needed,
and the slices' addresses (the tenants' nodes) are never dialled.

Usage: tenant-route-change.py --sizes 10000,100000 --json out.json NAME=BINARY...
"""
import argparse, json, importlib.util, os, shutil, subprocess, sys, tempfile, time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("churn", os.path.join(here, "endpoint-churn.py"))
churn = importlib.util.module_from_spec(spec)
spec.loader.exec_module(churn)
# Every namespace a Tenant's: the names and slices of endpoint-churn.py's
# --tenants world.
churn.TENANTS = True

PER_NS = churn.PER_NS
MOVED = churn.MOVED  # the Ingress renamed, whose Service has no slice


def write_namespace(d, k, moved=None):
    docs = [churn.tenant_doc(k)]
    docs += churn.route_docs(churn.namespace(k), f"ns{k}", moved)
    # The syncer's slices into the Tenant's nodes, in the namespace's one
    # file; the moved Ingress's Service has none.
    docs += [churn.slice_doc(k, i, 30080) for i in range(PER_NS) if i != MOVED]
    churn.write_whole(d, f"ns{k}.yaml", "---\n".join(docs))


def status(port, host):
    head = churn.get(port, host)[:12]
    return head[9:12]


def wait_status(port, host, want, deadline):
    while time.monotonic() < deadline:
        if status(port, host) == want:
            return True
        time.sleep(0.001)
    return False


def run_one(binary, n):
    d = tempfile.mkdtemp(prefix="tenant-route-")
    manifests = os.path.join(d, "m")
    os.makedirs(manifests)
    namespaces = n // PER_NS
    for k in range(namespaces):
        write_namespace(manifests, k)
    http, https, admin = churn.free_port(), churn.free_port(), churn.free_port()
    log = open(os.path.join(d, "log"), "w")
    t0 = time.monotonic()
    p = subprocess.Popen(
        [binary, "proxy", "--manifests", manifests, "--http", f"127.0.0.1:{http}",
         "--https", f"127.0.0.1:{https}", "--admin", f"127.0.0.1:{admin}"],
        stdout=log, stderr=subprocess.STDOUT,
    )
    out = {"ingresses": n, "tenants": namespaces}
    try:
        last = f"h{MOVED}.ns{namespaces - 1}.bench.test"
        if not wait_status(http, last, b"503", time.monotonic() + 900):
            raise SystemExit(f"{binary}: not serving")
        out["loaded_s"] = round(time.monotonic() - t0, 1)
        time.sleep(3)
        out["rss_mib"] = round(churn.rss_mib(p.pid))
        phases = {k: [] for k in ("load_ms", "admit_ms", "compile_ms", "reload_ms")}
        out["route_change_written_to_served_ms"] = churn.route_changes(
            log, os.path.join(d, "log"), namespaces, n,
            lambda k, host: write_namespace(manifests, k, moved=host),
            lambda host, deadline: wait_status(http, host, b"503", deadline),
            phases,
        )
        for phase, v in phases.items():
            out[f"route_change_{phase}"] = sorted(round(x, 1) for x in v)
    finally:
        p.terminate()
        p.wait()
        log.close()
        shutil.copy(os.path.join(d, "log"), f"/tmp/tenant-route-{os.path.basename(binary)}-{n}.log")
        shutil.rmtree(d, ignore_errors=True)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000")
    ap.add_argument("--json")
    ap.add_argument("binaries", nargs="+")
    a = ap.parse_args()
    results = []
    for n in [int(s) for s in a.sizes.split(",")]:
        for spec_ in a.binaries:
            name, binary = spec_.split("=", 1)
            r = run_one(binary, n)
            r["name"] = name
            print(json.dumps(r), flush=True)
            results.append(r)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
