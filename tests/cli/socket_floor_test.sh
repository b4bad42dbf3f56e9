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

# verdict STATUS WHAT DETAIL: "ok: WHAT" when STATUS is 0, else
# "FAIL: WHAT: DETAIL" and the test fails.
verdict() {
  if [ "$1" -eq 0 ]; then
    echo "ok: $2"
  else
    echo "FAIL: $2: $3"
    fail=1
  fi
}

check() { # HOSTS FANOUT PROCS TABLE RPH
  local out want got
  out=$("$bin" --hosts "$1" --fanout "$2" --procs "$3" --table-bytes "$4" \
        --ranks-per-host "$5" 2>&1)
  local rc=$?
  want=$(expected "$1" "$2" "$4" "$5")
  got=$(sed -n 's/.*, \([0-9]*\) frames, \([0-9]*\) bytes$/\1 \2/p' <<<"$out")
  [ "$rc" -eq 0 ] && [ "$got" = "$want" ]
  verdict $? "hosts $1 fan-out $2 procs $3 table $4 rph $5" \
    "rc $rc, got '$got', want '$want': $out"
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
[ "$rc" -eq 0 ] && grep -q '^usage: rdzv-socket-floor' <<<"$out" &&
  grep -q 'procs 1-64' <<<"$out"
verdict $? "--help" "rc $rc: $out"

# The TCP floor: every rank's 5 round trips answered (the server counts
# them and exits 0 only then; the clients likewise).
out=$("$bin" --tcp-ranks 200 2>&1)
rc=$?
[ "$rc" -eq 0 ] &&
  grep -q '^tcp floor: 200 ranks, 5 round trips each: wall ' <<<"$out"
verdict $? "--tcp-ranks 200" "rc $rc: $out"

for bad in "--tcp-ranks 18001" "--tcp-ranks 0" "--tcp-ranks 5 --procs 2" \
           "--hosts 12abc" "--hosts ''" "--hosts -3" "--hosts 1000001" \
           "--hosts 0" "--fanout 1" "--procs 65" "--table-bytes x" \
           "--nope 1" "--hosts"; do
  # shellcheck disable=SC2086
  err=$("$bin" $bad 2>&1 >/dev/null)
  rc=$?
  [ "$rc" -eq 2 ] && grep -q '^rdzv-socket-floor: ' <<<"$err"
  verdict $? "'$bad' refused" "exited $rc, want 2 and a reason: $err"
done
exit "$fail"
