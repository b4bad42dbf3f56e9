#!/usr/bin/env bash
# tools/bench/rdzv-socket-floor at a small size: every link carries the
# frames and the bytes its rounds define (checked against the tree's shape,
# computed here), for several shapes; bad options are refused with status 2.
set -uo pipefail
bin="${TEST_SRCDIR:-.}/${TEST_WORKSPACE:-rdzv}/tools/bench/rdzv-socket-floor"
[ -x "$bin" ] || bin=bazel-bin/tools/bench/rdzv-socket-floor
fail=0

# expected HOSTS FANOUT TABLE RPH: "FRAMES BYTES" of a run. Each host's link
# carries 4 frames each way (8-byte headers); the join's frames carry
# (48 + 32) * RPH bytes for every host below the link, itself included,
# and the other rounds 64 * 3 up and TABLE + 128 + 64 down.
expected() {
  awk -v n="$1" -v f="$2" -v t="$3" -v r="$4" 'BEGIN {
    below = 0
    for (h = 0; h < n; h++) { d = 1; x = h; while (x > 0) { x = int((x - 1) / f); d++ }; below += d }
    printf "%d %d\n", 8 * n, 64 * n + 80 * r * below + n * (t + 384)
  }'
}

check() { # HOSTS FANOUT PROCS TABLE RPH
  local out want got
  out=$("$bin" --hosts "$1" --fanout "$2" --procs "$3" --table-bytes "$4" \
        --ranks-per-host "$5" 2>&1)
  local rc=$?
  want=$(expected "$1" "$2" "$4" "$5")
  got=$(sed -n 's/.*, \([0-9]*\) frames, \([0-9]*\) bytes$/\1 \2/p' <<<"$out")
  if [ "$rc" -ne 0 ] || [ "$got" != "$want" ]; then
    echo "FAIL: hosts $1 fan-out $2 procs $3 table $4 rph $5: rc $rc," \
         "got '$got', want '$want': $out"
    fail=1
  else
    echo "ok: $out"
  fi
}

check 1 16 1 100 8
check 17 16 2 1000 8
check 300 16 4 5000 8
check 500 4 7 136 2
check 2000 16 16 106352 8
# Host 0 with 4,999 children: more than a listen backlog (4,096) holds, so
# the processes connect while they take each other's links.
check 5000 5000 4 136 1

# --help: the usage and the limits on stdout, exit 0.
out=$("$bin" --help 2>/dev/null)
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '^usage: rdzv-socket-floor' <<<"$out" ||
   ! grep -q 'procs 1-64' <<<"$out"; then
  echo "FAIL: --help: rc $rc: $out"
  fail=1
fi

# The TCP floor: every rank's 5 round trips answered (the server counts
# them and exits 0 only then; the clients likewise).
out=$("$bin" --tcp-ranks 200 2>&1)
rc=$?
if [ "$rc" -ne 0 ] || ! grep -q '^tcp floor: 200 ranks, 5 round trips each: wall ' <<<"$out"; then
  echo "FAIL: --tcp-ranks 200: rc $rc: $out"
  fail=1
else
  echo "ok: $out"
fi

for bad in "--tcp-ranks 18001" "--tcp-ranks 0" "--tcp-ranks 5 --procs 2" \
           "--hosts 12abc" "--hosts ''" "--hosts -3" "--hosts 1000001" \
           "--hosts 0" "--fanout 1" "--procs 65" "--table-bytes x" \
           "--nope 1" "--hosts"; do
  # shellcheck disable=SC2086
  err=$("$bin" $bad 2>&1 >/dev/null)
  rc=$?
  if [ "$rc" -ne 2 ] || ! grep -q '^rdzv-socket-floor: ' <<<"$err"; then
    echo "FAIL: '$bad' exited $rc, want 2 and a reason: $err"
    fail=1
  fi
done
exit "$fail"
