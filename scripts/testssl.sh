#!/usr/bin/env bash
# testssl.sh against the proxy's HTTPS listener (issue #9; docs/edge.md,
# "testssl"). Starts `teapot proxy` from an empty manifests directory (the
# listener then serves its built-in ECDSA P-256 certificate), runs testssl
# and fails on any HIGH or CRITICAL finding except the certificate-trust
# ones a self-signed test certificate always has.
#
# Needs testssl (Debian package `testssl.sh`) and python3.
# TEAPOT_BIN: the binary (default: builds target/debug/teapot).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bin="${TEAPOT_BIN:-}"
if [[ -z "$bin" ]]; then
    cargo build -q -p teapot --manifest-path "$root/Cargo.toml"
    bin="${CARGO_TARGET_DIR:-$root/target}/debug/teapot"
fi
command -v testssl >/dev/null || { echo "testssl missing: apt-get install testssl.sh" >&2; exit 2; }
work="$(mktemp -d)"
trap 'kill "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir "$work/manifests"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" proxy --manifests "$work/manifests" --http off --https "127.0.0.1:$port" \
    --admin 127.0.0.1:0 >"$work/proxy.out" 2>"$work/proxy.err" &
pid=$!
for _ in $(seq 50); do
    grep -q "https" "$work/proxy.out" 2>/dev/null && break
    sleep 0.2
done
testssl --quiet --color 0 --warnings off --jsonfile "$work/testssl.json" \
    "127.0.0.1:$port" >"$work/testssl.txt" || true
cp "$work/testssl.txt" "${TESTSSL_REPORT:-/tmp/teapot-testssl.txt}"
python3 - "$work/testssl.json" <<'PY'
import json, sys
findings = json.load(open(sys.argv[1]))
# A self-signed certificate for a name nobody asked for is what a test
# listener serves; trust is the operator's certificates' business.
trust = ("cert_chain_of_trust", "cert_trust", "cert_caIssuers")
bad = [f for f in findings
       if f.get("severity") in ("HIGH", "CRITICAL") and not f["id"].startswith(trust)]
counts = {}
for f in findings:
    counts[f.get("severity")] = counts.get(f.get("severity"), 0) + 1
print("testssl severities:", dict(sorted(counts.items())))
for f in findings:
    if f.get("severity") in ("MEDIUM", "HIGH", "CRITICAL"):
        print(f"  {f['severity']:8} {f['id']}: {f['finding']}")
if bad:
    print("FAIL: high/critical findings above", file=sys.stderr)
    sys.exit(1)
print("OK: no high or critical findings (certificate trust excepted)")
PY
