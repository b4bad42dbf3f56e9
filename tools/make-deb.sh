#!/usr/bin/env bash
# Makes a Debian package of rdzv: tools/install.sh --prefix /usr into a
# staging tree, a DEBIAN/control whose Depends are the Debian packages that
# hold the libraries the binaries need (their NEEDED entries, found with
# ldconfig and dpkg -S on this machine), then dpkg-deb --build.
#
#   tools/make-deb.sh [--out DIR] [--from DIR] [--maintainer "NAME <MAIL>"]
#
# --out: where rdzv_VERSION_ARCH.deb goes (default: the current
# directory); --from: as tools/install.sh's (built files; default: bazel
# build, then bazel-bin); --maintainer: the control file's (a site that
# builds its own package names itself). Prints the package's path last.
# The package owns its files through dpkg, so install.sh's manifest is
# left out of it. lintian's remaining warnings are explained in
# deploy/debian/lintian-overrides, which the package carries.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=$PWD
from=
maintainer="rdzv developers <rdzv-devel@example.org>"
while [ $# -gt 0 ]; do
  case "$1" in
  --out | --from | --maintainer)
    [ $# -ge 2 ] || { echo "make-deb.sh: $1 needs a value" >&2; exit 2; }
    case "$1" in
    --out) out=$2 ;;
    --from) from=$2 ;;
    *) maintainer=$2 ;;
    esac
    shift 2
    ;;
  -h | --help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
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

# What Debian's policy asks of a binary package (lintian checks it: see
# //tests/install:deb_test): stripped objects (the static archive keeps its
# symbols, only its debugging sections go), compressed man pages, a
# copyright file and a changelog, md5sums, the shared library's shlibs
# and the ldconfig trigger.
strip --strip-unneeded --remove-section=.comment --remove-section=.note \
  "$stage/usr/sbin/rdzvd" "$stage/usr/bin/rdzvctl" "$stage/usr/lib/librdzv.so.0"
strip --strip-debug --remove-section=.comment --enable-deterministic-archives \
  "$stage/usr/lib/librdzv.a"
gzip -9n "$stage/usr/share/man/man8/rdzvd.8" "$stage/usr/share/man/man1/rdzvctl.1"
doc="$stage/usr/share/doc/rdzv"
mkdir -p "$doc"
# A native package's changelog in Debian's format: one entry for this
# version, pointing at the changelog by capability beside it.
when=$(date -R -d "@${SOURCE_DATE_EPOCH:-$(git -C "$root" log -1 --format=%ct 2>/dev/null || date +%s)}")
{
  echo "rdzv ($version) unstable; urgency=medium"
  echo
  echo "  * Release $version: see /usr/share/doc/rdzv/CHANGELOG.md.gz."
  echo
  echo " -- $maintainer  $when"
} | gzip -9n >"$doc/changelog.gz"
gzip -9nc "$root/CHANGELOG.md" >"$doc/CHANGELOG.md.gz"
cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: rdzv
Source: the rdzv repository this package was built from

Files: *
Copyright: 2026 the rdzv developers
License: no licence chosen yet
 The rdzv developers have not yet published a licence for this code;
 until they do, ask them before you redistribute this package.
EOF
# Lintian's remaining warnings, each explained where the package keeps it.
mkdir -p "$stage/usr/share/lintian/overrides"
cp "$root/deploy/debian/lintian-overrides" "$stage/usr/share/lintian/overrides/rdzv"
chmod 0644 "$doc"/* "$stage/usr/share/lintian/overrides/rdzv"

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
Maintainer: $maintainer
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
echo "librdzv 0 rdzv (>= $version)" >"$stage/DEBIAN/shlibs"
echo "activate-noawait ldconfig" >"$stage/DEBIAN/triggers"
(cd "$stage" && find usr -type f -printf '%P\0' | sort -z |
  (cd usr && xargs -0 md5sum) | sed 's|  |  usr/|') >"$stage/DEBIAN/md5sums"
chmod 0644 "$stage/DEBIAN/shlibs" "$stage/DEBIAN/triggers" "$stage/DEBIAN/md5sums"
mkdir -p "$out"
deb="$out/rdzv_${version}_${arch}.deb"
dpkg-deb --root-owner-group --build "$stage" "$deb" >&2
echo "$deb"
