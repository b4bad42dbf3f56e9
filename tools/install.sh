#!/usr/bin/env bash
# Installs rdzv: the daemon and the CLI, the shared library with its
# headers and pkg-config file, the man pages, the Slurm scripts and a
# systemd unit for a root; or removes exactly what an install put there.
#
#   tools/install.sh [--prefix DIR] [--destdir DIR] [--from DIR]
#   tools/install.sh --uninstall [--prefix DIR] [--destdir DIR]
#
# --prefix: where rdzv lives when it runs (default /usr/local); --destdir:
# a staging root the files are written under (a package build; default
# none); --from: a tree holding the built files as bazel-bin does
# (tools/rdzvd, tools/rdzvctl, librdzv.so.0, librdzv.a); without it the script runs
# `bazel build` and takes them from bazel-bin. The sources' own files
# (headers, man pages, deploy/) come from the checkout this script is in,
# or from --from when they are there too (a test's runfiles).
#
# Under DESTDIR/PREFIX:
#   sbin/rdzvd, bin/rdzvctl
#   lib/librdzv.so.0, lib/librdzv.so -> librdzv.so.0, lib/librdzv.a,
#     lib/pkgconfig/rdzv.pc
#   include/rdzv/*.h
#   share/man/man8/rdzvd.8, share/man/man1/rdzvctl.1
#   share/rdzv/slurm/{prolog,epilog,task-prolog}.sh, rdzv.default,
#     example.sbatch
#   lib/systemd/system/rdzv-root.service (ExecStart names PREFIX/sbin)
#   share/rdzv/install-manifest: every file installed ("f PATH") and every
#     directory the install created ("d PATH"), one a line
# --uninstall removes the manifest's files, then the manifest, then the
# directories the install created when they are empty, and nothing else.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
prefix=/usr/local
destdir=
from=
mode=install
need() { # an option's value, or a usage error
  [ $# -ge 2 ] || { echo "install.sh: $1 needs a value (try --help)" >&2; exit 2; }
}
while [ $# -gt 0 ]; do
  case "$1" in
  --prefix) need "$@"; prefix=$2; shift 2 ;;
  --prefix=*) prefix=${1#*=}; shift ;;
  --destdir) need "$@"; destdir=$2; shift 2 ;;
  --destdir=*) destdir=${1#*=}; shift ;;
  --from) need "$@"; from=$2; shift 2 ;;
  --from=*) from=${1#*=}; shift ;;
  --uninstall) mode=uninstall; shift ;;
  -h | --help)
    sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'
    exit 0
    ;;
  *)
    echo "install.sh: unknown argument '$1' (try --help)" >&2
    exit 2
    ;;
  esac
done
case "$prefix" in
/*) ;;
*) echo "install.sh: --prefix must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
# The prefix goes into rdzv.pc and the unit's ExecStart, which take no
# quoting: letters, digits and . _ + - / only.
if [[ ! "$prefix" =~ ^[A-Za-z0-9._+/-]+$ ]]; then
  echo "install.sh: --prefix '$prefix' has a character rdzv.pc and the systemd" \
    "unit cannot carry (use letters, digits, '.', '_', '+', '-' and '/')" >&2
  exit 2
fi
while [ "${prefix%/}" != "$prefix" ] && [ "$prefix" != / ]; do
  prefix=${prefix%/}
done
top=$destdir$prefix
manifest=$top/share/rdzv/install-manifest

if [ "$mode" = uninstall ]; then
  if [ ! -f "$manifest" ]; then
    echo "install.sh: nothing installed at $top (no $manifest)" >&2
    exit 1
  fi
  dirs=()
  while read -r kind rel; do
    case "$kind" in
    f) rm -f -- "$top/$rel" ;;
    d) dirs+=("$rel") ;;
    esac
  done <"$manifest"
  rm -f -- "$manifest"
  # The directories it created, deepest first, when nothing else is there.
  printf '%s\n' "${dirs[@]}" | sort -r | while IFS= read -r d; do
    [ -n "$d" ] && rmdir -- "$top/$d" 2>/dev/null || true
  done
  echo "install.sh: removed rdzv from $top"
  exit 0
fi

if [ -z "$from" ]; then
  (cd "$root" && bazel build --noshow_progress //tools:rdzvd //tools:rdzvctl \
    //:librdzv.so.0 //:librdzv_a >&2)
  from=$root/bazel-bin
fi
# A source file: from --from when it holds it (runfiles), else the checkout.
srcfile() {
  if [ -e "$from/$1" ]; then echo "$from/$1"; else echo "$root/$1"; fi
}
version=$("$from/tools/rdzvd" --version | awk '{print $2}')

installed=()
created=()
# dirs_for REL: notes the directories above DESTDIR/PREFIX/REL that do not
# exist yet (the install creates them; --uninstall removes them).
dirs_for() {
  local d
  d=$(dirname "$top/$1")
  while [ "$d" != "$top" ] && [ ! -d "$d" ]; do
    created+=("${d#"$top"/}")
    d=$(dirname "$d")
  done
}
# put MODE SRC REL: installs SRC as DESTDIR/PREFIX/REL with MODE.
put() {
  dirs_for "$3"
  install -D -m "$1" "$2" "$top/$3"
  installed+=("$3")
}
put 0755 "$from/tools/rdzvd" sbin/rdzvd
put 0755 "$from/tools/rdzvctl" bin/rdzvctl
put 0644 "$from/librdzv.so.0" lib/librdzv.so.0
put 0644 "$from/librdzv.a" lib/librdzv.a
ln -sfn librdzv.so.0 "$top/lib/librdzv.so"
installed+=(lib/librdzv.so)
for h in "$(dirname "$(srcfile include/rdzv/rdzv.h)")"/*.h; do
  put 0644 "$h" "include/rdzv/$(basename "$h")"
done
dirs_for lib/pkgconfig/rdzv.pc
mkdir -p "$top/lib/pkgconfig"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" \
  "$(srcfile deploy/rdzv.pc.in)" >"$top/lib/pkgconfig/rdzv.pc"
installed+=(lib/pkgconfig/rdzv.pc)
put 0644 "$(srcfile docs/man/rdzvd.8)" share/man/man8/rdzvd.8
put 0644 "$(srcfile docs/man/rdzvctl.1)" share/man/man1/rdzvctl.1
for f in prolog.sh epilog.sh task-prolog.sh example.sbatch; do
  put 0755 "$(srcfile "deploy/slurm/$f")" "share/rdzv/slurm/$f"
done
for f in rdzv.default; do
  put 0644 "$(srcfile "deploy/slurm/$f")" "share/rdzv/slurm/$f"
done
dirs_for lib/systemd/system/rdzv-root.service
mkdir -p "$top/lib/systemd/system"
sed "s|@SBINDIR@|$prefix/sbin|" "$(srcfile deploy/systemd/rdzv-root.service)" \
  >"$top/lib/systemd/system/rdzv-root.service"
installed+=(lib/systemd/system/rdzv-root.service)
dirs_for share/rdzv/install-manifest
# An install over an earlier one keeps the directories that one created.
if [ -f "$manifest" ]; then
  while read -r kind rel; do
    [ "$kind" = d ] && created+=("$rel")
  done <"$manifest"
fi
mkdir -p "$(dirname "$manifest")"
{
  printf 'f %s\n' "${installed[@]}"
  [ "${#created[@]}" = 0 ] || printf 'd %s\n' "${created[@]}" | sort -u
} >"$manifest"
echo "install.sh: installed rdzv $version under $top (${#installed[@]} files;" \
  "the list: $manifest)"
