#!/bin/bash
# tools/install.sh (tests/install/BUILD says what is checked).
set -u
src=$PWD
work=$(mktemp -d /tmp/rdzv-install-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
inst=$src/tools/install.sh

# 1. Into a prefix.
p=$work/prefix
mkdir -p "$p/share"
echo keep >"$p/share/not-ours"
"$inst" --prefix "$p" --from "$src" || fail "install.sh --prefix $p"
for f in sbin/rdzvd bin/rdzvctl lib/librdzv.so.0 lib/librdzv.a include/rdzv/rdzv.h \
  include/rdzv/rendezvous.h lib/pkgconfig/rdzv.pc share/man/man8/rdzvd.8 \
  share/man/man1/rdzvctl.1 share/rdzv/slurm/prolog.sh \
  share/rdzv/slurm/task-prolog.sh share/rdzv/slurm/rdzv.default \
  lib/systemd/system/rdzv-root.service; do
  [ -f "$p/$f" ] || fail "not installed: $f"
done
[ "$(readlink "$p/lib/librdzv.so")" = librdzv.so.0 ] && ok "librdzv.so -> librdzv.so.0" ||
  fail "librdzv.so link: $(readlink "$p/lib/librdzv.so")"
grep -qx "ExecStart=$p/sbin/rdzvd --role root --port-file /run/rdzv-root/port" \
  "$p/lib/systemd/system/rdzv-root.service" && ok "the unit's ExecStart names the prefix" ||
  fail "the unit's ExecStart: $(grep ExecStart "$p/lib/systemd/system/rdzv-root.service")"
"$p/sbin/rdzvd" --version | grep -q "^rdzvd " && "$p/bin/rdzvctl" --version | grep -q "^rdzvctl " &&
  ok "the installed binaries run" || fail "the installed binaries"

# 2. A program built against the installed library through pkg-config.
cat >"$work/v.c" <<'C'
#include <stdio.h>
#include <string.h>
#include "rdzv/rdzv.h"
int main(void) {
  printf("%s %s\n", rdzv_version(), rdzv_err_name(RDZV_EDEADLINE));
  return strcmp(rdzv_version(), RDZV_VERSION_STRING) != 0;
}
C
flags=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --cflags --libs rdzv) ||
  fail "pkg-config --cflags --libs rdzv"
ver=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --modversion rdzv)
want=$("$src/tools/rdzvd" --version | awk '{print $2}')
[ "$ver" = "$want" ] && ok "rdzv.pc's version $ver" || fail "rdzv.pc's version [$ver] (want $want)"
# shellcheck disable=SC2086
if cc -std=c11 "$work/v.c" -o "$work/v" $flags -Wl,-rpath,"$p/lib" &&
  out=$("$work/v") && [ "$out" = "$want RDZV_EDEADLINE" ] &&
  ldd "$work/v" | grep -q "librdzv.so.0 => $p/lib/librdzv.so.0"; then
  ok "a program built with pkg-config runs against $p/lib/librdzv.so.0: $out"
else
  fail "a program built with pkg-config ($flags): [${out:-}]"
fi

# 2b. The same program linked with the static archive: no librdzv.so at
# run time, and every symbol the shared library exports is in the archive.
sflags=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --cflags --static --libs-only-other \
  --libs-only-L rdzv) && priv=$(PKG_CONFIG_PATH=$p/lib/pkgconfig pkg-config --static \
  --libs-only-l rdzv | sed 's/-lrdzv//') || fail "pkg-config --static rdzv"
# shellcheck disable=SC2086
if cc -std=c11 "$work/v.c" -o "$work/vs" $sflags "$p/lib/librdzv.a" $priv &&
  out=$("$work/vs") && [ "$out" = "$want RDZV_EDEADLINE" ] &&
  ! ldd "$work/vs" | grep -q librdzv; then
  ok "a program linked with $p/lib/librdzv.a ($priv) runs without librdzv.so: $out"
else
  fail "a program linked with librdzv.a: [${out:-}]"
fi
missing=$(comm -13 <(nm -g --defined-only "$p/lib/librdzv.a" 2>/dev/null |
  awk 'NF == 3 {print $3}' | sort -u) <(nm -D --defined-only "$p/lib/librdzv.so.0" |
  awk '{sub(/@.*/, "", $3); print $3}' | grep '^rdzv_' | sort -u))
[ -z "$missing" ] && ok "librdzv.a defines every symbol librdzv.so.0 exports" ||
  fail "librdzv.a lacks: $missing"

# 3. Uninstall: nothing of ours left, the stranger's file kept.
"$inst" --uninstall --prefix "$p" || fail "install.sh --uninstall"
left=$(cd "$p" && find . -mindepth 1 | sort | tr '\n' ' ')
[ "$left" = "./share ./share/not-ours " ] && ok "uninstall left only what was there before" ||
  fail "after uninstall: $left"

# 4. A staged install (a package build): everything under DESTDIR/PREFIX,
# the unit naming PREFIX, not the staging directory.
d=$work/stage
"$inst" --prefix /usr/local --destdir "$d" --from "$src" >/dev/null ||
  fail "install.sh --destdir"
[ -x "$d/usr/local/sbin/rdzvd" ] && grep -q "^prefix=/usr/local$" \
  "$d/usr/local/lib/pkgconfig/rdzv.pc" && grep -q "ExecStart=/usr/local/sbin/rdzvd" \
  "$d/usr/local/lib/systemd/system/rdzv-root.service" &&
  ok "--destdir: staged under it, paths name the prefix" || fail "--destdir layout"
"$inst" --uninstall --prefix /usr/local --destdir "$d" >/dev/null
[ -z "$(find "$d/usr/local" -mindepth 1 2>/dev/null)" ] &&
  ok "--destdir uninstall left nothing" || fail "--destdir uninstall left: $(find "$d")"

[ "$fails" = 0 ] && echo "install_test: PASS" || echo "install_test: FAIL"
[ "$fails" = 0 ]
