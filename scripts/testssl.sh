#!/usr/bin/env bash
# testssl.sh against the proxy's HTTPS listener (docs/edge.md,
# "testssl"). Makes a test CA and an ECDSA P-256 certificate for
# secure.teapot.test (openssl), starts `teapot proxy` with one Ingress
# serving it, runs testssl for that name with the CA added to its trust
# store, and fails on any HIGH or CRITICAL finding except revocation
# information (a test CA publishes neither CRL nor OCSP).
#
# Needs testssl (Debian package `testssl.sh`), openssl and python3.
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
host=secure.teapot.test
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 90 \
    -subj "/CN=teapot testssl CA" -keyout "$work/ca.key" -out "$work/ca.pem" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$host" \
    -keyout "$work/tls.key" -out "$work/tls.csr" 2>/dev/null
openssl x509 -req -in "$work/tls.csr" -CA "$work/ca.pem" -CAkey "$work/ca.key" \
    -CAcreateserial -days 90 -out "$work/tls.crt" \
    -extfile <(printf 'subjectAltName=DNS:%s\nextendedKeyUsage=serverAuth\nkeyUsage=digitalSignature\n' "$host") 2>/dev/null
python3 - "$work" "$host" >"$work/manifests/testssl.yaml" <<'PY'
import base64, sys
work, host = sys.argv[1], sys.argv[2]
b64 = lambda f: base64.b64encode(open(f"{work}/{f}", "rb").read()).decode()
print(f"""apiVersion: networking.k8s.io/v1
kind: IngressClass
metadata: {{name: teapot}}
spec: {{controller: teapot.dev/ingress-controller}}
---
apiVersion: v1
kind: Secret
metadata: {{name: testssl-tls, namespace: testssl}}
type: kubernetes.io/tls
data: {{tls.crt: {b64("tls.crt")}, tls.key: {b64("tls.key")}}}
---
apiVersion: v1
kind: Service
metadata: {{name: web, namespace: testssl}}
spec: {{ports: [{{name: http, port: 80}}]}}
---
apiVersion: networking.k8s.io/v1
kind: Ingress
metadata: {{name: testssl, namespace: testssl}}
spec:
  ingressClassName: teapot
  tls: [{{hosts: [{host}], secretName: testssl-tls}}]
  rules: [{{host: {host}, http: {{paths: [{{path: /, pathType: Prefix, backend: {{service: {{name: web, port: {{name: http}}}}}}}}]}}}}]""")
PY
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')"
"$bin" proxy --manifests "$work/manifests" --http off --https "127.0.0.1:$port" \
    --admin 127.0.0.1:0 >"$work/proxy.out" 2>"$work/proxy.err" &
pid=$!
for _ in $(seq 50); do
    grep -q "https" "$work/proxy.out" 2>/dev/null && break
    sleep 0.2
done
testssl --quiet --color 0 --warnings off --jsonfile "$work/testssl.json" \
    --add-ca "$work/ca.pem" --ip 127.0.0.1 "https://$host:$port" >"$work/testssl.txt" || true
cp "$work/testssl.txt" "${TESTSSL_REPORT:-/tmp/teapot-testssl.txt}"
python3 - "$work/testssl.json" <<'PY'
import json, sys
findings = json.load(open(sys.argv[1]))
# A test CA publishes no revocation information; a public CA's
# certificate (ACME) carries it.
revocation = ("cert_crlDistributionPoints", "cert_ocspURL", "cert_revocation")
bad = [f for f in findings
       if f.get("severity") in ("HIGH", "CRITICAL") and not f["id"].startswith(revocation)]
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
print("OK: no high or critical findings (revocation information of the test CA excepted)")
PY
