#!/usr/bin/env bash
# A Debian trixie chroot with Debian's python3-torch (torch 2.6), the torch
# 2.x client that //tests/tcpstore:torch2_test runs against rdzvd's TCPStore
# front end. The host (Debian 12) ships torch 1.13 only.
#
# Usage (as root):
#   tools/torch2-chroot.sh [--dir DIR]          build it, or reuse it when it
#                                               is complete; prints DIR last
#   tools/torch2-chroot.sh [--dir DIR] --check  exit 0 if DIR is complete, 1
#                                               if not (builds nothing)
#   tools/torch2-chroot.sh [--dir DIR] --exec CMD [ARG...]
#                                               run CMD inside the chroot
#
# DIR defaults to $RDZV_TORCH2_CHROOT, else /var/cache/rdzv/trixie-torch.
# The mirror is $RDZV_DEBIAN_MIRROR, else the Debian mirror this machine's
# apt uses (the first non-security Debian entry of /etc/apt/sources.list
# and /etc/apt/sources.list.d/*.{list,sources}), else deb.debian.org.
#
# Complete means: the stamp file DIR/.rdzv-torch2-stamp exists and names
# this script's recipe ($recipe below). The stamp is written last, after
# torch imported inside the chroot; anything else at DIR (an interrupted
# build, an older recipe) is removed and built again from scratch. A lock
# (DIR.lock) keeps two callers from building at once. Measured on this
# 2-core machine: debootstrap about 50 s, python3-torch about 60 s, 1.6 GB.
#
# --exec runs CMD in a private mount namespace (unshare -m), so nothing
# stays mounted on the host: DIR/proc, DIR/sys and DIR/dev are bind mounts
# of the host's, DIR/dev/shm a fresh tmpfs, and DIR/tmp the host's /tmp
# (so a file under /tmp has the same path inside and out). The network
# namespace is the host's: a client inside reaches 127.0.0.1 outside. The
# environment is emptied but for PATH, HOME=/tmp and LANG: pass variables
# as `--exec /usr/bin/env NAME=VALUE CMD`.
set -euo pipefail

recipe="trixie minbase python3-torch v1"
suite=trixie
packages=(python3-torch)
dir="${RDZV_TORCH2_CHROOT:-/var/cache/rdzv/trixie-torch}"
mode=build
stamp_name=.rdzv-torch2-stamp

while [ $# -gt 0 ]; do
  case "$1" in
  --dir)
    dir="$2"
    shift 2
    ;;
  --dir=*)
    dir="${1#--dir=}"
    shift
    ;;
  --check)
    mode=check
    shift
    ;;
  --exec)
    mode=exec
    shift
    break
    ;;
  -h | --help)
    sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "torch2-chroot.sh: unknown argument '$1' (see --help)" >&2
    exit 2
    ;;
  esac
done
case "$dir" in
/*) ;;
*)
  echo "torch2-chroot.sh: --dir '$dir' is not an absolute path" >&2
  exit 2
  ;;
esac
dir="${dir%/}"
[ -n "$dir" ] && [ "$dir" != / ] || {
  echo "torch2-chroot.sh: refusing to use / as the chroot" >&2
  exit 2
}
stamp="$dir/$stamp_name"

complete() {
  [ -f "$stamp" ] && [ "$(head -n 1 "$stamp")" = "recipe: $recipe" ]
}

# in_chroot TMP CMD [ARG...]: runs CMD in the chroot, in a private mount
# namespace (the mounts live and die with it) with an emptied environment.
# TMP: host-tmp binds the host's /tmp onto DIR/tmp, own keeps the chroot's.
in_chroot() {
  local tmp=$1
  shift
  unshare --mount --propagation private /bin/sh -euc '
    d=$1 tmp=$2
    shift 2
    mount --bind /proc "$d/proc"
    mount --bind /sys "$d/sys"
    mount --bind /dev "$d/dev"
    mount -t tmpfs -o mode=1777,size=256m tmpfs "$d/dev/shm"
    [ "$tmp" = own ] || mount --bind /tmp "$d/tmp"
    exec chroot "$d" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
      HOME=/tmp LANG=C.UTF-8 "$@"
  ' torch2-chroot "$dir" "$tmp" "$@"
}

if [ "$mode" = check ]; then
  complete
  exit
fi

if [ "$mode" = exec ]; then
  if [ $# -eq 0 ]; then
    echo "torch2-chroot.sh: --exec needs a command" >&2
    exit 2
  fi
  if ! complete; then
    echo "torch2-chroot.sh: no complete chroot at $dir (build it:" \
      "tools/torch2-chroot.sh, or tools/install-deps.sh)" >&2
    exit 1
  fi
  in_chroot host-tmp "$@" && exit 0 || exit $?
fi

# ---- build ---------------------------------------------------------------

if [ "$(id -u)" -ne 0 ]; then
  echo "torch2-chroot.sh: run as root (debootstrap and chroot need it)" >&2
  exit 1
fi
for tool in debootstrap unshare chroot flock; do
  if ! command -v "$tool" >/dev/null; then
    echo "torch2-chroot.sh: $tool is missing (tools/install-deps.sh" \
      "installs debootstrap)" >&2
    exit 1
  fi
done

# The mirror: $RDZV_DEBIAN_MIRROR, else this machine's (tools/debian-mirror.sh).
mirror=$("$(dirname "$0")/debian-mirror.sh")

mkdir -p "$(dirname "$dir")"
exec 9>"$dir.lock"
if ! flock -w 1800 9; then
  echo "torch2-chroot.sh: $dir.lock held by another build for 30 min" >&2
  exit 1
fi

if complete; then
  echo "torch2-chroot.sh: reusing $dir ($(sed -n 's/^torch: //p' "$stamp"))"
  echo "$dir"
  exit 0
fi

if [ -e "$dir" ]; then
  # Only --exec mounts anything inside, and only in its own namespace; a
  # mount seen here is someone else's: never delete through it.
  if awk -v d="$dir" '$5 == d || index($5, d "/") == 1 { found = 1 }
                      END { exit !found }' /proc/self/mountinfo; then
    echo "torch2-chroot.sh: something is mounted under $dir; unmount it" \
      "first (not removing it)" >&2
    exit 1
  fi
  echo "torch2-chroot.sh: $dir is incomplete (no stamp, or another" \
    "recipe): removing it and building from scratch"
  rm -rf --one-file-system "$dir"
fi

t0=$(date +%s)
echo "torch2-chroot.sh: debootstrap --variant=minbase $suite $dir $mirror"
if ! debootstrap --variant=minbase "$suite" "$dir" "$mirror" \
  >"$dir.debootstrap.log" 2>&1; then
  tail -n 30 "$dir.debootstrap.log" >&2
  echo "torch2-chroot.sh: debootstrap failed (log: $dir.debootstrap.log)" >&2
  exit 1
fi
rm -f "$dir.debootstrap.log"
t1=$(date +%s)
cp /etc/resolv.conf "$dir/etc/resolv.conf"
cp /etc/hosts "$dir/etc/hosts"
# No daemons may start inside.
printf '#!/bin/sh\nexit 101\n' >"$dir/usr/sbin/policy-rc.d"
chmod 755 "$dir/usr/sbin/policy-rc.d"

echo "torch2-chroot.sh: apt-get install ${packages[*]} (in the chroot)"
if ! in_chroot own /usr/bin/env DEBIAN_FRONTEND=noninteractive /bin/sh -euc "
  apt-get update -q
  apt-get install -y -q --no-install-recommends ${packages[*]}
  apt-get clean
  rm -rf /var/lib/apt/lists/*" >"$dir.apt.log" 2>&1; then
  tail -n 30 "$dir.apt.log" >&2
  echo "torch2-chroot.sh: installing ${packages[*]} failed (log:" \
    "$dir.apt.log)" >&2
  exit 1
fi
rm -f "$dir.apt.log"
t2=$(date +%s)

# Complete only if torch.distributed imports inside.
if ! out=$(in_chroot own /usr/bin/python3 -c 'import torch
import torch.distributed as d
assert d.is_available(), "torch.distributed is not available"
print("torch-version", torch.__version__)' 2>&1) ||
  ! version=$(echo "$out" | sed -n 's/^torch-version //p') ||
  [ -z "$version" ]; then
  version=$out
  echo "torch2-chroot.sh: torch does not import in $dir: $version" >&2
  exit 1
fi
size=$(du -sh --one-file-system "$dir" | cut -f1)
{
  echo "recipe: $recipe"
  echo "torch: $version"
  echo "mirror: $mirror"
  echo "built: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "seconds: debootstrap $((t1 - t0)), packages $((t2 - t1))"
  echo "size: $size"
} >"$stamp.tmp"
mv "$stamp.tmp" "$stamp"
echo "torch2-chroot.sh: built $dir in $((t2 - t0)) s (debootstrap" \
  "$((t1 - t0)) s, packages $((t2 - t1)) s, $size): torch $version"
echo "$dir"
