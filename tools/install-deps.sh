#!/usr/bin/env bash
# Installs the Debian 12 packages that rdzv's build, tests and tools need.
#
# Usage: tools/install-deps.sh        (as root; idempotent)
#
# Asks dpkg-query first and calls apt-get only for what is missing, so a
# second run is fast and works offline. `apt-get update` runs only when an
# install fails without it (stale or empty package lists).
set -euo pipefail

packages=(
  bazel-bootstrap      # Bazel 4.2.3, the build (offline: see WORKSPACE)
  libuv1-dev           # the daemon's event loop
  libcmocka-dev        # unit and integration tests
  libjansson-dev       # statistics JSON
  libcurl4-openssl-dev # the etcd client (store/etcd)
  etcd-server          # //tests/etcd: throwaway etcd instances (3.4)
  openssl              # //tests/etcd: a CA and certificates for TLS
  uthash-dev           # hash tables
  clang                # tests/fuzz/run_fuzz.sh
  libclang-rt-14-dev   # libFuzzer and the sanitizer runtimes for clang
  python3              # scripts
  slurm-client         # scontrol: //tests/unit:hostlist_scontrol_test
  gnuplot-nox          # benchmark plots
  jq                   # scripts reading `rdzvctl stats`
  iproute2             # //tests/integration:netns_test (hosts as namespaces)
  python3-torch        # //tests/tcpstore: the real torch 1.13 TCPStore client
                       # and gloo against rdzvd --tcpstore-listen (run by
                       # /usr/bin/python3, not a pyenv python3)
)

# Packages of the list that dpkg does not report as installed ("ii").
missing=()
for p in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${db:Status-Abbrev}' "$p" 2>/dev/null || true)"
  if [[ "$status" != ii* ]]; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps.sh: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps.sh: missing: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root to install them" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
install_missing() {
  apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=300 "${missing[@]}"
}

if ! install_missing; then
  echo "install-deps.sh: install failed; running apt-get update, then" \
    "trying again" >&2
  apt-get update -q -o DPkg::Lock::Timeout=300
  install_missing
fi
echo "install-deps.sh: installed: ${missing[*]}"
