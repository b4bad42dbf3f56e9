#!/usr/bin/env bash
# Makes a Debian package of rdzv: tools/install.sh --prefix /usr into a
# staging tree, a DEBIAN/control whose Depends are the Debian packages that
# hold the libraries the binaries need (their NEEDED entries, found with
# ldconfig and dpkg -S on this machine), then dpkg-deb --build.
#
#   tools/make-deb.sh [--out DIR] [--from DIR]
#
# --out: where rdzv_VERSION_ARCH.deb goes (default: the current
# directory); --from: as tools/install.sh's (built files; default: bazel
# build, then bazel-bin). Prints the package's path last. The package owns
# its files through dpkg, so install.sh's manifest is left out of it.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$PWD
from=
while [ $# -gt 0 ]; do
  case "$1" in
  --out | --from)
    [ $# -ge 2 ] || { echo "make-deb.sh: $1 needs a value" >&2; exit 2; }
    if [ "$1" = --out ]; then out=$2; else from=$2; fi
    shift 2
    ;;
  -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "make-deb.sh: unknown argument '$1' (try --help)" >&2; exit 2 ;;
  esac
done
stage=$(mktemp -d "${TMPDIR:-/tmp}/rdzv-deb.XXXXXX")
trap 'rm -rf "$stage"' EXIT
"$root/tools/install.sh" --prefix /usr --destdir "$stage" \
  ${from:+--from "$from"} >&2
rm -f "$stage/usr/share/rdzv/install-manifest"
version=$("$stage/usr/sbin/rdzvd" --version | awk '{print $2}')
arch=$(dpkg --print-architecture)

# The packages holding each shared library the binaries need.
deps=$(for f in "$stage/usr/sbin/rdzvd" "$stage/usr/bin/rdzvctl" \
  "$stage/usr/lib/librdzv.so.0"; do
  readelf -d "$f" | sed -n 's/.*Shared library: \[\(.*\)\]/\1/p'
done | sort -u | while IFS= read -r so; do
  path=$(ldconfig -p | awk -v so="$so" '$1 == so {print $NF; exit}')
  [ -n "$path" ] || { echo "make-deb.sh: $so not found by ldconfig" >&2; exit 1; }
  real=$(readlink -f "$path")
  # A library no package owns (installed by hand) cannot be a Depends:
  # fail rather than leave it out.
  dpkg -S "$path" 2>/dev/null || dpkg -S "$real" ||
    { echo "make-deb.sh: no Debian package owns $so ($real)" >&2; exit 1; }
done | cut -d: -f1 | sort -u | paste -sd, | sed 's/,/, /g')
size=$(du -sk "$stage/usr" | cut -f1)
chmod 0755 "$stage" # the package's ./ (mktemp made it 0700)
mkdir -p "$stage/DEBIAN"
cat >"$stage/DEBIAN/control" <<EOF
Package: rdzv
Version: $version
Architecture: $arch
Maintainer: rdzv developers <rdzv@localhost>
Section: net
Priority: optional
Installed-Size: $size
Depends: $deps
Description: rendezvous for large GPU jobs: a tree-shaped key-value store
 rdzv starts large GPU jobs: every rank finds the others, gets its rank,
 the NCCL unique ids and the topology through a tree of daemons (a node
 agent per host, a root), so the root sees messages from its children,
 not from every rank. Includes rdzvd, rdzvctl, librdzv.so.0 and librdzv.a
 with their headers and pkg-config file, man pages, the Slurm Prolog, Epilog and
 TaskProlog under /usr/share/rdzv/slurm, and rdzv-root.service.
EOF
mkdir -p "$out"
deb="$out/rdzv_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >&2
echo "$deb"
