#!/usr/bin/env bash
# The OCI image of rdzv that deploy/k8s names (rdzv:VERSION): Debian 12's
# minimal base (debootstrap --variant=minbase, with the libraries the
# package depends on), the Debian package of tools/make-deb.sh installed
# with dpkg, rdzv-example (job.yaml's trainer; not in the package), a user
# rdzv (65532:65532, the manifests' runAsUser), PATH holding rdzvd,
# rdzvctl and rdzv-example, and /bin/sh. Built offline with buildah from
# that root: no registry is reached; only debootstrap reads the Debian
# mirror (tools/debian-mirror.sh), once: the base is kept in
# /var/cache/rdzv/image-base (RDZV_IMAGE_BASE) and made again only when
# the package's dependencies change.
#
#   tools/make-image.sh [--from DIR] [--out DIR] [--tag NAME:TAG]
#
# --from: built files as bazel-bin holds them (as tools/install.sh takes
# them; default: bazel build); --out: where rdzv-VERSION.oci.tar goes (an
# oci-archive, for `skopeo copy` or `podman load`; default: the checkout);
# --tag: the image's name in buildah's local storage (default rdzv:VERSION).
# Prints the archive's path. Needs root, debootstrap and buildah
# (tools/install-deps.sh installs them); buildah keeps its storage in
# /var/lib/containers (the vfs driver: no overlay mounts needed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
from="" out=$root tag=""
while [ $# -gt 0 ]; do
  case $1 in
  --from) from=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --tag) tag=$2; shift 2 ;;
  *) echo "usage: $0 [--from DIR] [--out DIR] [--tag NAME:TAG]" >&2; exit 2 ;;
  esac
done
die() { echo "make-image.sh: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (debootstrap, chroot and buildah's storage need it)"
for t in debootstrap buildah chroot flock dpkg-deb; do
  command -v "$t" >/dev/null || die "$t is missing (tools/install-deps.sh installs it)"
done
bah() { buildah --storage-driver vfs "$@"; }

work=$(mktemp -d /tmp/rdzv-image-XXXXXX)
ctr=""
cleanup() {
  [ -n "$ctr" ] && bah rm "$ctr" >/dev/null 2>&1
  rm -rf "$work"
}
trap cleanup EXIT

# 1. The package.
"$root/tools/make-deb.sh" --out "$work" ${from:+--from "$from"} >/dev/null
deb=$(ls "$work"/rdzv_*.deb)
version=$(dpkg-deb --field "$deb" Version)
tag=${tag:-rdzv:$version}
# Its Depends, without versions: the base holds them, so dpkg installs the
# package without a network.
deps=$(dpkg-deb --field "$deb" Depends | tr ',' '\n' |
  sed 's/([^)]*)//; s/|.*//; s/[[:space:]]//g' | grep -v '^$' | sort -u |
  paste -sd, -)

# 2. The base (made once, under a lock: concurrent builds wait).
base=${RDZV_IMAGE_BASE:-/var/cache/rdzv/image-base}
mkdir -p "$(dirname "$base")"
exec 9>"$base.lock"
flock 9
if [ ! -f "$base/.rdzv-complete" ] || [ "$(cat "$base/.rdzv-complete")" != "$deps" ]; then
  rm -rf "$base"
  mirror=$("$root/tools/debian-mirror.sh")
  echo "make-image.sh: debootstrap --variant=minbase --include=$deps bookworm $base $mirror" >&2
  debootstrap --variant=minbase --include="$deps" bookworm "$base" "$mirror" \
    >"$work/debootstrap.log" 2>&1 || {
    tail -20 "$work/debootstrap.log" >&2
    die "debootstrap failed (RDZV_DEBIAN_MIRROR names another mirror)"
  }
  echo "$deps" >"$base/.rdzv-complete"
fi
flock -u 9

# 3. The image's root: the base, the package, the user; no apt lists,
# caches, documentation or locales.
rootfs=$work/rootfs
mkdir "$rootfs"
cp -a "$base/." "$rootfs/"
rm -f "$rootfs/.rdzv-complete"
cp "$deb" "$rootfs/tmp/rdzv.deb"
chroot "$rootfs" /usr/bin/dpkg -i /tmp/rdzv.deb >"$work/dpkg.log" 2>&1 || {
  cat "$work/dpkg.log" >&2
  die "dpkg -i of the package failed in the image's root"
}
rm -f "$rootfs/tmp/rdzv.deb"
example=${from:-$root/bazel-bin}/tools/rdzv-example
[ -x "$example" ] || (cd "$root" && bazel build --noshow_progress //tools:rdzv-example >&2)
install -m 0755 "$example" "$rootfs/usr/bin/rdzv-example"
grep -q '^rdzv:' "$rootfs/etc/passwd" ||
  echo "rdzv:x:65532:65532:rdzv:/nonexistent:/usr/sbin/nologin" >>"$rootfs/etc/passwd"
grep -q '^rdzv:' "$rootfs/etc/group" || echo "rdzv:x:65532:" >>"$rootfs/etc/group"
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/* \
  "$rootfs"/var/cache/debconf/*-old "$rootfs"/var/log/* "$rootfs"/usr/share/doc/* \
  "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/* "$rootfs"/tmp/*
find "$rootfs/usr/share/man" -mindepth 1 -maxdepth 1 ! -name man1 ! -name man8 \
  -exec rm -rf {} + 2>/dev/null || true

# 4. The image: one layer from that root, its config.
ctr=$(bah from scratch)
mnt=$(bah mount "$ctr")
cp -a "$rootfs/." "$mnt/"
bah umount "$ctr" >/dev/null
bah config --user 65532:65532 --workingdir / \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd '["rdzvd", "--help"]' --port 29400/tcp --port 29401/tcp \
  --label org.opencontainers.image.title=rdzv \
  --label org.opencontainers.image.version="$version" \
  --label org.opencontainers.image.description="rdzv: rdzvd, rdzvctl and librdzv on Debian 12" \
  "$ctr"
bah commit --quiet --rm "$ctr" "$tag" >/dev/null
ctr=""
# The image this tag named before, now nameless: dropped (each is a full
# copy of the root with the vfs driver).
bah rmi --prune >/dev/null 2>&1 || true
mkdir -p "$out"
archive=$out/rdzv-$version.oci.tar
rm -f "$archive"
bah push --quiet "$tag" "oci-archive:$archive:$tag"
echo "$archive"
