#!/usr/bin/env bash
# Regenerates src/third_party/*.rs from the Gateway API CRDs with kopium
# (`cargo install kopium --version 0.24.1 --locked`). The CRDs come from
# ../shared/conformance-upstream/gateway-api/config/crd (see its SOURCE.txt
# for the upstream commit): the standard channel, and the experimental
# channel for HTTPRoute (sessionPersistence, the ExternalAuth filter) and
# the L4 routes. Run from the repository root; commit the result.
set -euo pipefail
cd "$(dirname "$0")"
crd=${GATEWAY_CRDS:-../../shared/conformance-upstream/gateway-api/config/crd}
kopium=${KOPIUM:-kopium}
out=src/third_party
mkdir -p "$out"
gen() { # channel plural module
    "$kopium" -f "$crd/$1/gateway.networking.k8s.io_$2.yaml" --docs > "$out/$3.rs"
    # The command line names the machine's path; keep it relative.
    sed -i "s|^// kopium command: .*|// kopium command: kopium -f config/crd/$1/gateway.networking.k8s.io_$2.yaml --docs|" "$out/$3.rs"
}
gen standard gatewayclasses gateway_classes
gen standard gateways gateways
gen standard listenersets listener_sets
gen experimental httproutes http_routes
gen standard grpcroutes grpc_routes
gen standard referencegrants reference_grants
gen standard backendtlspolicies backend_tls_policies
gen experimental tlsroutes tls_routes
gen experimental tcproutes tcp_routes
gen experimental udproutes udp_routes
rustfmt --edition 2024 "$out"/*.rs
echo "generated: $(ls "$out" | tr '\n' ' ')"
