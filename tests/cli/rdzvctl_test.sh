#!/bin/bash
# rdzvctl against a real root and one node: commands, output formats and
# exit statuses (docs/reference/rdzvctl.md). Every check prints what it ran on failure.
set -u
ctl_bin=$PWD/tools/rdzvctl
rdzvd=$PWD/tools/rdzvd
dir=$(mktemp -d /tmp/rdzvctl-test-XXXXXX)
fails=0
cleanup() {
  kill "${pids[@]}" 2>/dev/null
  wait 2>/dev/null
  rm -rf "$dir"
}
pids=()
trap cleanup EXIT

"$rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/root.port" \
  --unix="$dir/root.sock" --log-level=0 &
pids+=($!)
for _ in $(seq 100); do [ -s "$dir/root.port" ] && break; sleep 0.1; done
"$rdzvd" --role=node --parent="127.0.0.1:$(cat "$dir/root.port")" \
  --unix="$dir/node.sock" --log-level=0 &
pids+=($!)

ctl() { "$ctl_bin" --addr "unix:$dir/node.sock" --job cli --timeout 10 "$@"; }

# expect STATUS WANTED_STDOUT CMD...: the exit status and the exact stdout.
expect() {
  local want_rc=$1 want_out=$2
  shift 2
  local out rc
  out=$(ctl "$@" 2>"$dir/err")
  rc=$?
  if [ "$rc" != "$want_rc" ] || [ "$out" != "$want_out" ]; then
    echo "FAIL: rdzvctl $*: status $rc (want $want_rc), stdout [$out]" \
      "(want [$want_out]), stderr [$(cat "$dir/err")]"
    fails=$((fails + 1))
  else
    echo "ok: rdzvctl $*"
  fi
}

# --version as rdzvd's: the same release.
want_version="rdzvctl $("$rdzvd" --version | awk '{print $2}')"
got_version=$("$ctl_bin" --version)
if [ "$got_version" != "$want_version" ]; then
  echo "FAIL: rdzvctl --version [$got_version] (want [$want_version])"
  fails=$((fails + 1))
else
  echo "ok: rdzvctl --version"
fi

# A Unix socket that is not there: exit 4 naming it, after a short wait
# for a daemon being started (not the command's whole deadline).
"$ctl_bin" --addr "unix:$dir/absent.sock" --job cli get k 2>"$dir/err"
rc=$?
if [ "$rc" = 4 ] && grep -qF "unix:$dir/absent.sock: no such socket" "$dir/err"; then
  echo "ok: rdzvctl on a socket that does not exist"
else
  echo "FAIL: rdzvctl on a socket that does not exist: status $rc, stderr [$(cat "$dir/err")]"
  fails=$((fails + 1))
fi

# A path that is there but is no socket: exit 4 at once, saying so.
: >"$dir/plain-file"
"$ctl_bin" --addr "unix:$dir/plain-file" --job cli get k 2>"$dir/err"
rc=$?
if [ "$rc" = 4 ] && grep -qF "not a socket" "$dir/err"; then
  echo "ok: rdzvctl on a regular file"
else
  echo "FAIL: rdzvctl on a regular file: status $rc, stderr [$(cat "$dir/err")]"
  fails=$((fails + 1))
fi

expect 0 "" set k v1
expect 0 "v1" get k
expect 1 "" get nope
expect 0 "5" add n 5
expect 0 "3" add n -2
expect 2 "" add n x
expect 0 "" set once a --write-once
expect 1 "" set once b --write-once
expect 0 "3" num-keys
expect 2 "" frobnicate

# stderr_has TEXT: the last expect's stderr contains TEXT.
stderr_has() {
  if ! grep -qF -- "$1" "$dir/err"; then
    echo "FAIL: stderr [$(cat "$dir/err")] lacks [$1]"
    fails=$((fails + 1))
  fi
}
# A write-once key can be neither deleted nor appended to, and the message
# says so (not "holds another value").
expect 1 "" delete once
stderr_has "key is write-once: it cannot be changed or deleted"
expect 1 "" append once x
stderr_has "key is write-once: it cannot be changed or deleted"
expect 0 "a" get once
# Member ids are 0 .. COUNT-1: the message names the rule.
expect 2 "" barrier b 4 4
stderr_has "barrier: MEMBER must be < COUNT"
expect 2 "" gather g 7 2 data
stderr_has "gather: MEMBER must be < COUNT"
# A Unix socket path over sun_path's 107 bytes is refused, not cut short.
long=/tmp/$(printf 'y%.0s' $(seq 120))
out=$("$ctl_bin" --addr "unix:$long" --job cli get k 2>"$dir/err")
rc=$?
if [ "$rc" != 2 ] || ! grep -qF "a Unix socket path holds at most 107 bytes" "$dir/err"; then
  echo "FAIL: rdzvctl --addr unix:<125 bytes>: status $rc (want 2), stderr [$(cat "$dir/err")]"
  fails=$((fails + 1))
else
  echo "ok: rdzvctl --addr unix:<125 bytes> refused"
fi

# Options after the command, as getopt permutes them; "--" ends them so
# that a value may begin with "--"; an unknown "--NAME" is never stored.
out=$("$ctl_bin" get k --job cli --addr "unix:$dir/node.sock" 2>"$dir/err")
rc=$?
if [ "$rc" != 0 ] || [ "$out" != v1 ]; then
  echo "FAIL: rdzvctl get k --job --addr: status $rc, stdout [$out], stderr [$(cat "$dir/err")]"
  fails=$((fails + 1))
else
  echo "ok: options after the command"
fi
expect 0 "" set dashed -- --not-an-option
expect 0 "--not-an-option" get dashed
expect 0 "" set once2 --write-once x
expect 1 "" set once2 y
stderr_has "write-once"
expect 2 "" set k --bogus
stderr_has "unknown option '--bogus'"
stderr_has "put -- before an argument that begins with --"
expect 2 "" get k --write-once
stderr_has "--write-once is an option of set and mset only"
expect 0 "v1" get k --timeout 5
expect 2 "" get k --timeout 0

# stats needs no job id (it makes no job).
out=$(env -u RDZV_JOB "$ctl_bin" --addr "unix:$dir/node.sock" stats 2>"$dir/err")
rc=$?
if [ "$rc" != 0 ] || ! printf '%s' "$out" | grep -q '"role":"node"'; then
  echo "FAIL: rdzvctl stats without --job: status $rc, stdout [$out], stderr [$(cat "$dir/err")]"
  fails=$((fails + 1))
else
  echo "ok: rdzvctl stats without --job"
fi

# A barrier with members 1 and 2 of 4 present: both time out (status 3)
# and stderr names the missing members 0 and 3.
ctl --timeout 1 barrier b 1 4 2>"$dir/b1" &
ctl --timeout 1 barrier b 2 4 2>"$dir/b2"
rc2=$?
wait $!
rc1=$?
for f in b1 b2; do
  if ! grep -q "2 of 4 members missing: 0, 3" "$dir/$f"; then
    echo "FAIL: barrier stderr does not name 0 and 3: $(cat "$dir/$f")"
    fails=$((fails + 1))
  fi
done
[ "$rc1" = 3 ] && [ "$rc2" = 3 ] || {
  echo "FAIL: barrier statuses $rc1 $rc2 (want 3 3)"
  fails=$((fails + 1))
}
expect 0 "$(printf '2 4\n0\n3')" missing barrier b
expect 0 "0 0" missing gather b
expect 2 "" missing bogus b
# It failed for good when they gave up: a late member is told at once
# (status 3, with the root's reason) and does not count.
ctl barrier b 0 4 2>"$dir/late"
rc=$?
if [ "$rc" != 3 ] || ! grep -q "failed: member . gave up at its deadline" "$dir/late"; then
  echo "FAIL: late barrier member: status $rc, stderr [$(cat "$dir/late")]"
  fails=$((fails + 1))
else
  echo "ok: late barrier member refused: $(cat "$dir/late")"
fi
expect 0 "$(printf '2 4\n0\n3')" missing barrier b
# A barrier that completes: nobody is missing.
ctl barrier c 0 2 &
expect 0 "" barrier c 1 2
wait $! || {
  echo "FAIL: barrier c member 0"
  fails=$((fails + 1))
}
expect 0 "2 2" missing barrier c

# The host-list commands need no server: no --addr, --job or RDZV_*.
expect_local() {
  local want_rc=$1 want_out=$2
  shift 2
  local out rc
  out=$(env -u RDZV_ADDR -u RDZV_JOB "$ctl_bin" "$@" 2>"$dir/err")
  rc=$?
  if [ "$rc" != "$want_rc" ] || [ "$out" != "$want_out" ]; then
    echo "FAIL: rdzvctl $*: status $rc (want $want_rc), stdout [$out]" \
      "(want [$want_out]), stderr [$(cat "$dir/err")]"
    fails=$((fails + 1))
  else
    echo "ok: rdzvctl $*"
  fi
}

expect_local 0 "$(printf 'nodeA\nnodeB001\nnodeB003\nnodeC')" hostnames \
  'nodeA,nodeB[001,003],nodeC'
expect_local 0 "" hostnames ''
expect_local 0 "-x" hostnames -- -x
expect_local 2 "" hostnames 'n[1-3,,4]'
stderr_has "hostnames: bad host list at byte 6: range without a number:"
stderr_has "n[1-3,<HERE>,4]"
expect_local 2 "" hostnames
expect_local 2 "" hostnames a --fanout 2
stderr_has "unknown option '--fanout'"
expect_local 0 "17 n1 n0" tree-position 'n[0-20]' n17
expect_local 0 "17 n8 n3 n1 n0" tree-position --fanout 2 'n[0-20]' n17
expect_local 0 "17 n8 n3 n1 n0" tree-position 'n[0-20]' n17 --fanout=2
expect_local 0 "3 n2 n1 n0" tree-position --fanout 1 'n[0-3]' n3
expect_local 0 "0" tree-position 'n[0-20]' n0
expect_local 0 "3 nodeA" tree-position 'nodeA,nodeB[001,003],nodeC' nodeC
expect_local 1 "" tree-position 'n[0-20]' x1
stderr_has "host 'x1' is not in the host list 'n[0-20]'"
expect_local 1 "" tree-position "$(printf 'host%03d,' $(seq 100))" x1
stderr_has "host024,host025,...' (800 bytes)"
expect_local 2 "" tree-position --fanout 0 'n[0-3]' n1
stderr_has "--fanout '0' is not a positive integer"
expect_local 2 "" tree-position 'n[0-3' n1
stderr_has "bad host list at byte 1: '[' without ']'"
expect_local 2 "" tree-position 'n[0-3]'

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all rdzvctl checks passed"
