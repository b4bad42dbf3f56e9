#!/bin/bash
# rdzvd's PyTorch TCPStore front end with the real torch 2.x client: a
# root and two nodes (A and B), all three with --tcpstore-listen
# 127.0.0.1:0 --tcpstore-job $job, then torch2_test.py inside the Debian
# trixie chroot of tools/torch2-chroot.sh (Debian's python3-torch 2.6; the
# host has torch 1.13 only), which reaches the daemons on 127.0.0.1 (the
# chroot shares the host's network namespace). What it checks: the header
# of torch2_test.py. Then, natively (rdzvctl), keys that the torch client
# wrote; every daemon must still be up and exit 0 on SIGTERM.
#
# Fails loudly when the chroot is missing: build it with
# tools/torch2-chroot.sh (tools/install-deps.sh calls it; it is cached at
# /var/cache/rdzv/trixie-torch, or $RDZV_TORCH2_CHROOT). Needs root
# (chroot, and the private mount namespace the chroot runs in).
# Prints a PASS or FAIL line per check and a last line "torch2_test: PASS"
# or "torch2_test: FAIL (...)".
set -u
rdzvd=$PWD/tools/rdzvd
ctl=$PWD/tools/rdzvctl
chroot_sh=$PWD/tools/torch2-chroot.sh
here=$PWD/tests/tcpstore
job=torch2-$$
dir=$(mktemp -d /tmp/torch2-test-XXXXXX) # under /tmp: seen inside the chroot
chmod 755 "$dir"
test_name=torch2_test
# shellcheck source=tests/tcpstore/harness.sh
. "$here/harness.sh"

croot="${RDZV_TORCH2_CHROOT:-/var/cache/rdzv/trixie-torch}"
if [ "$(id -u)" -ne 0 ]; then
  fail "not root: the torch 2.x client runs in a chroot (run the test as" \
    "root)"
  finish
fi
if ! "$chroot_sh" --dir "$croot" --check; then
  fail "no torch 2.x chroot at $croot (no complete build: its stamp" \
    "$croot/.rdzv-torch2-stamp is missing). Build it: tools/torch2-chroot.sh" \
    "--dir $croot (tools/install-deps.sh does; about 2 minutes, 1.2 GB)"
  finish
fi
echo "chroot $croot: $(tr '\n' ' ' <"$croot/.rdzv-torch2-stamp")"
if ! "$rdzvd" --help 2>&1 | grep -q -- --tcpstore-listen; then
  fail "rdzvd --help lists no --tcpstore-listen"
  finish
fi

# shellcheck disable=SC2046
start root root $(tsargs root) || finish
root=127.0.0.1:$(cat "$dir/root.port")
# shellcheck disable=SC2046
start a node --parent="$root" $(tsargs a) || finish
# shellcheck disable=SC2046
start b node --parent="$root" $(tsargs b) || finish
port_r=$(cat "$dir/root.tsport")
port_a=$(cat "$dir/a.tsport")
port_b=$(cat "$dir/b.tsport")
echo "root $root (TCPStore port $port_r); node A: $port_a, node B:" \
  "$port_b; job $job"

# What runs inside the chroot must be under /tmp (bound into it).
cp "$here/torch2_test.py" "$here/tcpstore_lib.py" "$dir/"
mkdir -p "$dir/shim"
cp "$here/torch2_shim/sitecustomize.py" "$dir/shim/"
chmod -R a+rX "$dir"

"$chroot_sh" --dir "$croot" --exec /usr/bin/env PYTHONPATH="$dir/shim" \
  TORCH_CPP_LOG_LEVEL=ERROR \
  GLOO_SOCKET_IFNAME=lo /usr/bin/python3 "$dir/torch2_test.py" \
  --port-root "$port_r" --port-a "$port_a" --port-b "$port_b" --tmp "$dir"
rc=$?
[ "$rc" = 0 ] || fail "torch2_test.py: failed checks (status $rc)"

# Natively: what the 2.x client wrote is ordinary keys of the job.
native() { # NODE KEY WANT
  local out
  out=$("$ctl" --addr "unix:$dir/$1.sock" --job "$job" --timeout 10 get \
    "$2" 2>&1)
  if [ "$out" = "$3" ]; then
    echo "PASS: rdzvctl via node ${1^^} get $2 = $3"
  else
    fail "rdzvctl via node ${1^^} get $2: [$out], want [$3]"
  fi
}
native a /nodeA/k v2
native b /root/k v2
native a /root/c -2
native b /nodeA/ap abcd
native a /bar/one 5

# PyTorch's own pattern through the two nodes (ids, multi_get, checks of
# an absent key, a one-root id): the root's wait/get/mget requests for it
# are a few per node and phase (copies of mutable keys at the nodes), not
# one per store and call (32 stores: 32 x 24 = 768 without the tree).
root_reads() {
  "$ctl" --addr "$root" --timeout 10 stats | /usr/bin/python3 -c '
import json, sys
o = json.load(sys.stdin)["ops"]
print(sum(o[k]["received"] for k in ("wait", "get", "mget")))'
}
before=$(root_reads)
"$chroot_sh" --dir "$croot" --exec /usr/bin/env PYTHONPATH="$dir/shim" \
  TORCH_CPP_LOG_LEVEL=ERROR /usr/bin/python3 "$dir/torch2_test.py" pattern \
  --port-a "$port_a" --port-b "$port_b" --stores 32
prc=$?
after=$(root_reads)
if [ "$prc" != 0 ]; then
  fail "pattern: torch stores failed (status $prc)"
elif [ -z "$before" ] || [ -z "$after" ]; then
  fail "pattern: no statistics from the root"
elif [ $((after - before)) -gt 24 ]; then
  # 2 nodes x 3 phases (ids, checks, one-root id) x 4
  fail "pattern: the root got $((after - before)) wait/get/mget requests" \
    "for 32 stores (want at most 24: 4 per node and phase)"
else
  echo "PASS: pattern: the root got $((after - before)) wait/get/mget" \
    "requests for 32 torch stores' ids, multi_gets, 640 checks and" \
    "one-root ids (at most 24; one per store and call would be 768)"
fi

# The daemons kept serving through every bad input above...
for i in "${!pids[@]}"; do
  if ! kill -0 "${pids[$i]}" 2>/dev/null; then
    wait "${pids[$i]}"
    fail "rdzvd ${names[$i]} died during the checks (status $?)"
  fi
done
# ...and each stops cleanly: nodes first, then the root.
for i in 2 1 0; do
  kill -TERM "${pids[$i]}" 2>/dev/null
  wait "${pids[$i]}"
  st=$?
  if [ "$st" != 0 ]; then
    fail "rdzvd ${names[$i]} exited $st on SIGTERM (want 0; log below)"
  else
    echo "PASS: rdzvd ${names[$i]} exited 0 on SIGTERM"
  fi
done
pids=()
finish
