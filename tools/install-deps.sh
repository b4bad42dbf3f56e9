#!/usr/bin/env bash
# Installs the Debian 12 packages that rdzv's build, tests and tools need,
# then (the last block) the npm packages of the Kubernetes manifest check.
#
# Usage: tools/install-deps.sh        (as root; idempotent)
#
# Asks dpkg-query first and calls apt-get only for what is missing, so a
# second run is fast and works offline. `apt-get update` runs only when an
# install fails without it (stale or empty package lists).
set -euo pipefail

packages=(
  bazel-bootstrap      # Bazel 4.2.3, the build (offline: see WORKSPACE)
  libc6-dev            # glibc's headers (gcc brings them; named for the
                       # library table of docs/getting-started.md)
  libuv1-dev           # the daemon's event loop
  libcmocka-dev        # unit and integration tests
  libjansson-dev       # statistics JSON
  libcurl4-openssl-dev # the etcd client (store/etcd)
  libssl-dev           # libcrypto: the hello's HMAC-SHA256 (store/auth)
  libmicrohttpd-dev    # rdzvd --http-listen: /metrics, /readyz (store/daemon/http)
  curl                 # //tests/integration:http_test: the operator's probe
  prometheus           # promtool: //tests/integration:http_test checks /metrics
  etcd-server          # //tests/etcd: throwaway etcd instances (3.4)
  openssl              # //tests/etcd: a CA and certificates for TLS
  uthash-dev           # hash tables
  clang                # tests/fuzz/run_fuzz.sh
  clang-format-14      # tools/check-format.sh: the C sources' one layout
  libclang-rt-14-dev   # libFuzzer and the sanitizer runtimes for clang
  python3              # scripts
  python3-pip          # //tests/python: pip installs python/ offline
  python3-setuptools   # ... its build backend
  python3-wheel        # ... and bdist_wheel
  pkg-config           # //tests/install: a program built against rdzv.pc
  binutils             # //tests/abi: nm, objdump and readelf on librdzv.so.0
  slurm-client         # scontrol: //tests/unit:hostlist_scontrol_test
  gnuplot-nox          # benchmark plots
  jq                   # scripts reading `rdzvctl stats`
  iproute2             # //tests/integration:netns_test (hosts as namespaces)
  slurm-wlm            # //tests/slurm: a real Slurm 22.05 (slurmctld, slurmd)
  munge                # //tests/slurm: Slurm's authentication
  util-linux           # unshare, mount: the Slurm and DNS tests' private
                       # mount namespaces
  bc                   # //tests/slurm, //tests/dns: times
  python3-torch        # //tests/tcpstore: the real torch 1.13 TCPStore client
                       # and gloo against rdzvd --tcpstore-listen (run by
                       # /usr/bin/python3, not a pyenv python3)
  yamllint             # //tests/k8s: deploy/k8s's YAML
  nodejs               # //tests/k8s: tools/k8s-validate (node >= 14). Not
                       # "npm": this machine's nodejs (NodeSource's build)
                       # ships npm and conflicts with Debian's npm package;
                       # the npm block at the end installs Debian's npm
                       # only where no npm is found (Debian's nodejs)
  debootstrap          # tools/torch2-chroot.sh (the torch 2.x chroot below)
                       # and tools/make-image.sh (the image's base)
  buildah              # tools/make-image.sh: the OCI image, offline
  umoci                # //tests/install:image_test unpacks the image
  lintian              # //tests/install:deb_test checks the package
  podman               # //tests/install:image_test runs the image ...
  runc                 # ... with runc (crun fails here: cgroups hybrid mode)
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

# ---------------------------------------------------------------------------
# npm: the Kubernetes manifest validator's packages (//tests/k8s).
# tools/k8s-validate/install.sh runs `npm ci` (the versions package-lock.json
# pins, no install scripts) into the folder tools/k8s-validate/modules-dir.sh
# names, /var/cache/rdzv/k8s-validate/<hash of the lock>/, where
# //tests/k8s:manifests_test finds them; nothing when they are already there.
# This is the only step that needs the npm registry.
# ---------------------------------------------------------------------------
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if ! command -v npm >/dev/null; then
  echo "install-deps.sh: no npm (Debian's nodejs has none): installing npm"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends \
    -o DPkg::Lock::Timeout=300 npm
fi
"$here/k8s-validate/install.sh"

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
