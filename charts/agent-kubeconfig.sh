#!/usr/bin/env bash
# Prints a kubeconfig for tenant CLUSTER's agent, run against the LB cluster
# (the current kubectl context, as its admin):
#
#   charts/agent-kubeconfig.sh CLUSTER [NAMESPACE] [DURATION] > CLUSTER-lb.kubeconfig
#
# The identity is ServiceAccount teapot-agent in the tenant's namespace
# (created by the teapot-lb chart from `tenants:`), with a Role there only.
# The token comes from the TokenRequest API (`kubectl create token`): it
# expires after DURATION (default 8760h, capped by the API server's
# --service-account-max-token-expiration) and dies with the ServiceAccount,
# and no token Secret is stored on the LB cluster. Rotate by running this
# again and replacing the agent's Secret (docs/install.md).
set -euo pipefail

cluster=${1:?usage: agent-kubeconfig.sh CLUSTER [NAMESPACE] [DURATION]}
namespace=${2:-tenant-$cluster}
duration=${3:-8760h}

kubectl get tenant "$cluster" >/dev/null
kubectl -n "$namespace" get serviceaccount teapot-agent >/dev/null
server=$(kubectl config view --minify -o jsonpath='{.clusters[0].cluster.server}')
ca=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority-data}')
if [ -z "$ca" ]; then
  ca_file=$(kubectl config view --minify --raw -o jsonpath='{.clusters[0].cluster.certificate-authority}')
  [ -n "$ca_file" ] || { echo "agent-kubeconfig.sh: the current context has no CA" >&2; exit 1; }
  ca=$(base64 -w0 < "$ca_file")
fi
token=$(kubectl -n "$namespace" create token teapot-agent --duration "$duration")

cat <<KUBECONFIG
apiVersion: v1
kind: Config
clusters:
  - name: teapot-lb
    cluster:
      server: $server
      certificate-authority-data: $ca
users:
  - name: teapot-agent-$cluster
    user:
      token: $token
contexts:
  - name: teapot-lb
    context:
      cluster: teapot-lb
      user: teapot-agent-$cluster
      namespace: $namespace
current-context: teapot-lb
KUBECONFIG
