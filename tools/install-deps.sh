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
  gnuplot-nox          # benchmark plots
  jq                   # scripts reading `rdzvctl stats`
  iproute2             # //tests/integration:netns_test (hosts as namespaces)
  python3-torch        # //tests/tcpstore: the real torch 1.13 TCPStore client
                       # and gloo against rdzvd --tcpstore-listen (run by
                       # /usr/bin/python3, not a pyenv python3)
  debootstrap          # tools/torch2-chroot.sh (the torch 2.x chroot below)
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
else
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
fi

# ---- The torch 2.x client of //tests/tcpstore:torch2_test -----------------
# Debian 12 ships torch 1.13 only. tools/torch2-chroot.sh builds a Debian
# trixie chroot with python3-torch 2.6 (debootstrap from this machine's
# Debian mirror) at /var/cache/rdzv/trixie-torch, or $RDZV_TORCH2_CHROOT,
# and reuses it when it is complete (its stamp file, written last): then
# this is fast and offline. The first build takes about 2 minutes and
# 1.2 GB. RDZV_SKIP_TORCH2_CHROOT=1 skips it (torch2_test then fails,
# naming the command).
torch2_chroot="$(dirname "${BASH_SOURCE[0]}")/torch2-chroot.sh"
if [ "${RDZV_SKIP_TORCH2_CHROOT:-0}" = 1 ]; then
  echo "install-deps.sh: RDZV_SKIP_TORCH2_CHROOT=1: no torch 2.x chroot"
elif "$torch2_chroot" --check; then
  echo "install-deps.sh: the torch 2.x chroot is complete"
elif [ "$(id -u)" -ne 0 ]; then
  echo "install-deps.sh: run as root to build the torch 2.x chroot" >&2
  exit 1
else
  "$torch2_chroot"
fi
