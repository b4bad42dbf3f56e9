#!/bin/bash
# tools/make-deb.sh (tests/install/BUILD says what is checked).
set -u
src=$PWD
work=$(mktemp -d /tmp/rdzv-deb-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

deb=$("$src/tools/make-deb.sh" --out "$work" --from "$src" 2>"$work/err" | tail -n 1)
if [ ! -f "$deb" ]; then
  cat "$work/err"
  fail "make-deb.sh made no package"
  exit 1
fi
want=$("$src/tools/rdzvd" --version | awk '{print $2}')
info=$(dpkg-deb --field "$deb" Package Version Depends)
grep -qx "Package: rdzv" <<<"$info" && grep -qx "Version: $want" <<<"$info" &&
  ok "control: rdzv $want" || fail "control: $info"
deps=$(dpkg-deb --field "$deb" Depends)
for p in libc6 libuv1 libjansson4 libcurl4 libssl3; do
  grep -qw "$p" <<<"$deps" || fail "Depends lacks $p: $deps"
done
ok "Depends: $deps"
files=$(dpkg-deb -c "$deb" | awk '{print $6}')
for f in ./usr/sbin/rdzvd ./usr/bin/rdzvctl ./usr/lib/librdzv.so.0 ./usr/lib/librdzv.so ./usr/lib/librdzv.a \
  ./usr/include/rdzv/rdzv.h ./usr/lib/pkgconfig/rdzv.pc ./usr/share/man/man8/rdzvd.8.gz \
  ./usr/share/man/man1/rdzvctl.1.gz ./usr/share/rdzv/slurm/prolog.sh \
  ./usr/lib/systemd/system/rdzv-root.service ./usr/share/doc/rdzv/copyright \
  ./usr/share/doc/rdzv/changelog.gz ./usr/share/lintian/overrides/rdzv; do
  grep -qx -- "$f" <<<"$files" || fail "not in the package: $f"
done
grep -q install-manifest <<<"$files" && fail "the install manifest is in the package"
ok "contents: $(grep -vc '/$' <<<"$files") files"

# Debian's policy checks: lintian finds nothing (errors, warnings or
# information) but what deploy/debian/lintian-overrides explains.
if ! command -v lintian >/dev/null; then
  fail "lintian is not installed (tools/install-deps.sh installs it)"
elif lintian --info --fail-on error,warning,info "$deb" >"$work/lintian.log" 2>&1; then
  ok "lintian: nothing but the explained overrides" \
    "($(grep -c '^rdzv:' "$src/deploy/debian/lintian-overrides") of them)"
else
  grep -v 'root privileges' "$work/lintian.log"
  fail "lintian on $deb"
fi
# The shared library's shlibs and the ldconfig trigger.
mkdir -p "$work/ctl" && dpkg-deb -e "$deb" "$work/ctl"
grep -qx "librdzv 0 rdzv (>= $want)" "$work/ctl/shlibs" &&
  grep -qx "activate-noawait ldconfig" "$work/ctl/triggers" &&
  (cd "$work" && mkdir -p x && dpkg-deb -x "$deb" x && cd x && md5sum --quiet -c "$work/ctl/md5sums") &&
  ok "shlibs, the ldconfig trigger and md5sums" || fail "control files: $(ls "$work/ctl")"

# dpkg into a scratch root: installed, runs, removed.
r=$work/root
mkdir -p "$r/var/lib/dpkg/updates" "$r/var/lib/dpkg/info"
touch "$r/var/lib/dpkg/status"
if dpkg --root="$r" --force-depends --force-not-root -i "$deb" >"$work/dpkg.log" 2>&1 &&
  "$r/usr/sbin/rdzvd" --version | grep -qx "rdzvd $want (wire protocol [0-9]*)" &&
  grep -q "ExecStart=/usr/sbin/rdzvd" "$r/usr/lib/systemd/system/rdzv-root.service"; then
  ok "dpkg -i into a scratch root: rdzvd runs from it"
else
  cat "$work/dpkg.log"
  fail "dpkg -i into $r"
fi
dpkg --root="$r" --force-not-root -r rdzv >>"$work/dpkg.log" 2>&1
left=$(find "$r/usr" -type f 2>/dev/null | head -5)
[ -z "$left" ] && ok "dpkg -r removed every file" || fail "after dpkg -r: $left"

[ "$fails" = 0 ] && echo "deb_test: PASS" || echo "deb_test: FAIL"
[ "$fails" = 0 ]
