#!/bin/bash
# The documentation checked (tests/docs/BUILD says what). Needs python3,
# and /usr/bin/python3 with torch for the quick start's PyTorch block
# (tools/install-deps.sh installs Debian's python3-torch).
set -u
src=$PWD
check="python3 $src/tests/docs/docs_check.py"
fails=0

files=(README.md CHANGELOG.md)
while IFS= read -r f; do files+=("$f"); done < <(cd "$src" && find docs -name '*.md' | sort)
if $check links "$src" "${files[@]}"; then
  echo "ok: links"
else
  echo "FAIL: links"
  fails=$((fails + 1))
fi

# The references against the binaries: every rdzvd option documented once
# in docs/reference/rdzvd.md and none that --help lacks; every rdzvctl
# command named in docs/reference/rdzvctl.md.
helpdir=$(mktemp -d /tmp/rdzv-docs-help-XXXXXX)
"$src/tools/rdzvd" --help >"$helpdir/rdzvd.txt"
"$src/tools/rdzvctl" help >"$helpdir/rdzvctl.txt"
if $check options "$helpdir/rdzvd.txt" "$src/docs/reference/rdzvd.md"; then
  echo "ok: rdzvd --help and docs/reference/rdzvd.md agree"
else
  echo "FAIL: rdzvd --help and docs/reference/rdzvd.md"
  fails=$((fails + 1))
fi
if $check commands "$helpdir/rdzvctl.txt" "$src/docs/reference/rdzvctl.md"; then
  echo "ok: every rdzvctl command is in docs/reference/rdzvctl.md"
else
  echo "FAIL: rdzvctl help and docs/reference/rdzvctl.md"
  fails=$((fails + 1))
fi
rm -rf "$helpdir"
if $check statuses "$src/include/rdzv/error.h" "$src/docs/troubleshooting.md"; then
  echo "ok: every status of include/rdzv/error.h is in docs/troubleshooting.md"
else
  echo "FAIL: include/rdzv/error.h and docs/troubleshooting.md"
  fails=$((fails + 1))
fi

if $check libraries "$src/docs/getting-started.md" "$src/tools/install-deps.sh" \
  "$src/tools/rdzvd" "$src/tools/rdzvctl" "$src/librdzv.so.0"; then
  echo "ok: docs/getting-started.md's libraries are what the binaries need"
else
  echo "FAIL: docs/getting-started.md's table of libraries"
  fails=$((fails + 1))
fi

# The man pages: made from the binaries' help by tools/gen-man.py, so they
# cannot say other than --help; the committed ones must be today's.
mandir=$(mktemp -d /tmp/rdzv-docs-man-XXXXXX)
if python3 "$src/tools/gen-man.py" "$src/tools/rdzvd" "$src/tools/rdzvctl" "$mandir" &&
  diff -u "$src/docs/man/rdzvd.8" "$mandir/rdzvd.8" &&
  diff -u "$src/docs/man/rdzvctl.1" "$mandir/rdzvctl.1"; then
  echo "ok: docs/man is what tools/gen-man.py makes from the binaries"
else
  echo "FAIL: docs/man differs from the binaries' help: run" \
    "tools/gen-man.py bazel-bin/tools/rdzvd bazel-bin/tools/rdzvctl docs/man"
  fails=$((fails + 1))
fi
rm -rf "$mandir"

# The quick start, as a user runs it from the checkout after building:
# bazel-bin/tools/ holds the binaries.
work=$(mktemp -d /tmp/rdzv-docs-test-XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/bazel-bin"
ln -s "$src/tools" "$work/bazel-bin/tools"
$check blocks "$src/README.md" quickstart > "$work/quickstart.sh" || fails=$((fails + 1))
out=$(cd "$work" && timeout -k 5 300 bash -eu quickstart.sh 2>"$work/err")
rc=$?
echo "$out"
# What the README says the blocks print: the key read back through the
# other node, each rank's assignment and the ids' agreement, the PyTorch
# key read by torch and by rdzvctl.
want=("hello" "rank 0 of 4: local rank 0 of 2, node 0 of 2"
      "rank 3 of 4: local rank 1 of 2, node 1 of 2"
      "ids identical on all 4 ranks" "through the tree")
bad=$([ "$rc" = 0 ] && echo 0 || echo 1)
for w in "${want[@]}"; do
  grep -qF -- "$w" <<<"$out" || { echo "missing from the output: [$w]"; bad=1; }
done
if [ "$(grep -c '^through the tree$' <<<"$out")" != 2 ]; then
  echo "want 'through the tree' twice (torch, then rdzvctl)"
  bad=1
fi
if [ "$bad" = 0 ]; then
  echo "ok: the README's quick start"
else
  echo "FAIL: the README's quick start (status $rc); its stderr:"
  tail -n 40 "$work/err"
  fails=$((fails + 1))
fi
# Every other page's runnable blocks (marked "<!-- doctest: NAME -->"), as
# written: fixed ports, /run and /tmp paths, host names. Each group runs in
# its own pid, mount and network namespace (a fresh loopback, tmpfs over
# /run and /tmp, /etc/hosts naming root-host) so that it cannot meet the
# machine's other daemons or leave any behind: the namespace's processes
# end with its first. PATH has rdzvd and rdzvctl as the installed names.
# What each must print: lines (extended regular expressions, whole lines,
# "|" between them) that its output must hold.
declare -A expect=(
  [docs/reference/rdzvd.md:rdzvd]="v"
  [docs/security.md:security]="v|rdzvctl: could not connect .*authentication failed.*[[]RDZV_EAUTH[]].*|refused"
  [docs/security.md:tls]="v|rdzvctl: could not connect .*[[]RDZV_ETLS[]].*takes TLS only.*|refused"
  [docs/reference/c-api.md:c-api]="ids identical on all 4 ranks: .*"
)
marked=0
ns="${TEST_TMPDIR:-$work}/ns"
mkdir -p "$ns/bin"
ln -sf "$src/tools/rdzvd" "$src/tools/rdzvctl" "$ns/bin/"
printf '127.0.0.1 localhost root-host\n' >"$ns/hosts"
while IFS= read -r f; do
  for name in $(grep -o '<!-- doctest: [a-z0-9-]* -->' "$src/$f" | awk '{print $3}' | sort -u); do
    [ "$f:$name" = "README.md:quickstart" ] && continue
    marked=$((marked + 1))
    g="$ns/$name"
    mkdir -p "$g/bazel-bin"
    ln -sfn "$src/tools" "$g/bazel-bin/tools"
    # Scripts the blocks run as tools/NAME: copied, since $src may lie
    # under /tmp, which the namespace hides behind a tmpfs.
    mkdir -p "$g/tools"
    cp -L "$src/tools/tls-certs.sh" "$g/tools/"
    $check blocks "$src/$f" "$name" >"$g/block.sh" || { fails=$((fails + 1)); continue; }
    out=$(cd "$g" && timeout -k 5 120 unshare -f -p -m -n --mount-proc bash -c '
      ip link set lo up && mount -t tmpfs tmpfs /run && mount -t tmpfs tmpfs /tmp &&
      mount --bind "$1" /etc/hosts && PATH="$2:$PATH" exec bash -eu block.sh' \
      sh "$ns/hosts" "$ns/bin" 2>&1)
    rc=$?
    bad=$([ "$rc" = 0 ] && echo 0 || echo 1)
    exp="${expect[$f:$name]:-}"
    [ -n "$exp" ] || { echo "$f:$name: no expected output in docs_test.sh"; bad=1; }
    IFS='|' read -ra parts <<<"$exp"
    for w in "${parts[@]}"; do
      grep -qxE -- "$w" <<<"$out" || { echo "no output line matches: [$w]"; bad=1; }
    done
    if [ "$bad" = 0 ]; then
      echo "ok: $f's block \"$name\" runs as written"
    else
      echo "FAIL: $f's block \"$name\" (status $rc); its output:"
      tail -n 40 <<<"$out"
      fails=$((fails + 1))
    fi
  done
done < <(cd "$src" && find docs -name '*.md' | sort)
if [ "$marked" != "${#expect[@]}" ]; then
  echo "FAIL: $marked marked groups in docs/, ${#expect[@]} expected in docs_test.sh"
  fails=$((fails + 1))
fi

[ "$fails" = 0 ] && echo "docs_test: PASS" || echo "docs_test: FAIL"
[ "$fails" = 0 ]
