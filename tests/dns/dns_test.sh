#!/bin/bash
# How a node finds its parent. DNS as Kubernetes serves it (field failures
# B04, B05, B34): a node finds
# its parent by a name that at first does not resolve, then resolves to an
# address that refuses and to one that drops SYNs, later flips between a
# dead old address and the new one, answers NXDOMAIN again after it had
# resolved, and names an old address where another job's daemon listens.
# The name lives in this test's own /etc/hosts: a private mount namespace
# binds a file the test rewrites in place (glibc's getaddrinfo reads
# /etc/hosts on every call, and rdzvd caches no answer).
# Then port ranges: a program that is not rdzvd on the range's first port
# (passed over), and a node whose parent's range holds its own port (it
# refuses itself).
#
# Invariants checked after each phase: the node joins (a write through it
# reaches the root) once the right address answers, within the phase's
# bound plus a normal join; every address returned was tried (the node's
# debug log names each: refused, no hello reply within
# --connect-timeout-ms, another job's daemon); a failed resolution is
# followed by another one (no negative caching). Prints "ok:"/"FAIL:" per
# check and a last line "dns_test: PASS" or "dns_test: FAIL (...)".
set -u
if [ "${RDZV_DNS_TEST_NS:-}" != 1 ]; then
  exec unshare --mount --propagation private \
    env RDZV_DNS_TEST_NS=1 /bin/bash "$0" "$@"
fi
rdzvd=$PWD/tools/rdzvd
ctl=$PWD/tools/rdzvctl
dir=$(mktemp -d /tmp/rdzv-dns-XXXXXX)
job=dns-$$
name=rdzv-root.train.svc
port=28411
fails=()
pids=()
fail() {
  echo "FAIL: $*"
  fails+=("$*")
}
ok() { echo "ok: $*"; }
finish() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  if [ "${#fails[@]}" -eq 0 ]; then
    echo "dns_test: PASS"
    rm -rf "$dir"
    exit 0
  fi
  for f in "$dir"/*.log; do
    echo "---- $(basename "$f") (last 40 lines) ----"
    tail -n 40 "$f"
  done
  echo "dns_test: FAIL (${#fails[@]}: ${fails[*]})"
  exit 1
}
trap finish EXIT

printf '127.0.0.1 localhost\n' >"$dir/hosts"
mount --bind "$dir/hosts" /etc/hosts || {
  fail "cannot bind a private /etc/hosts"
  exit 1
}
# hosts ADDR... : the name resolves to these addresses, in this order
# (none: NXDOMAIN). Rewritten in place: the bind mount keeps the inode.
hosts() {
  {
    echo "127.0.0.1 localhost"
    for a in "$@"; do echo "$a $name"; done
  } >"$dir/hosts"
}
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc; }

# A listener that drops every SYN: its accept queue (backlog 0) is full.
python3 - "$dir" <<'EOF' &
import socket, sys, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.3.8", 28411))
s.listen(0)
c = socket.socket()
c.connect(("127.0.3.8", 28411))  # fills the queue: later SYNs are dropped
open(sys.argv[1] + "/blackhole.up", "w").close()
time.sleep(3600)
EOF
pids+=($!)
for _ in $(seq 50); do [ -e "$dir/blackhole.up" ] && break; sleep 0.1; done

start_root() { # addr job log
  "$rdzvd" --role=root --listen="$1:$port" --job="$2" --name="root@$1" \
    --log-level=2 >>"$dir/$3.log" 2>&1 &
  pids+=($!)
  eval "$4=$!"
  for _ in $(seq 50); do
    "$ctl" --addr "$1:$port" --job "$2" --timeout 1 num-keys >/dev/null 2>&1 &&
      return 0
    sleep 0.1
  done
  fail "root at $1 did not start"
}

# through KEY VALUE SECONDS: a write through the node, then read at the
# root; prints the seconds it took.
through() {
  local t0
  t0=$(now)
  "$ctl" --addr "unix:$dir/node.sock" --job "$job" --timeout "$3" \
    set "$1" "$2" >>"$dir/ctl.log" 2>&1 || return 1
  since "$t0"
}

# ---- a: NXDOMAIN for 3 s, then a refusing address and a SYN-dropping one
# (listed first) for 2 s, then the right one after those.
hosts
start_root 127.0.3.1 "$job" root1 root1
"$rdzvd" --role=node --parent="$name:$port" --listen=127.0.0.1:0 \
  --unix="$dir/node.sock" --job="$job" --name=node --connect-timeout-ms=500 \
  --log-level=2 >"$dir/node.log" 2>&1 &
node=$!
pids+=($node)
t0=$(now)
( "$ctl" --addr "unix:$dir/node.sock" --job "$job" --timeout 60 set a 1 \
    >>"$dir/ctl.log" 2>&1; echo $? >"$dir/a.rc" ) &
sleep 3
resolves_nx=$(grep -c "resolve" "$dir/node.log")
hosts 127.0.3.8 127.0.3.9
sleep 2
hosts 127.0.3.8 127.0.3.9 127.0.3.1
for _ in $(seq 300); do [ -e "$dir/a.rc" ] && break; sleep 0.1; done
ta=$(since "$t0")
if [ "$(cat "$dir/a.rc" 2>/dev/null)" = 0 ] &&
  [ "$("$ctl" --addr 127.0.3.1:$port --job "$job" get a 2>&1)" = 1 ]; then
  ok "a: joined ${ta} s after start (NXDOMAIN 3 s, then 2 s of a dropping and a refusing address)"
else
  fail "a: the write through the node did not reach the root ($(cat "$dir/a.rc" 2>/dev/null))"
fi
[ "$resolves_nx" -ge 3 ] &&
  ok "a: resolved again after each failure while NXDOMAIN ($resolves_nx failed resolutions in 3 s)" ||
  fail "a: only $resolves_nx resolutions in 3 s of NXDOMAIN"
grep -q "127.0.3.8:$port" "$dir/node.log" &&
  grep -q "within 500 ms (--connect-timeout-ms" "$dir/node.log" &&
  ok "a: the SYN-dropping address was given up after --connect-timeout-ms" ||
  fail "a: no attempt at 127.0.3.8 given up after 500 ms in the log"
grep -q "connect to 127.0.3.9:$port" "$dir/node.log" &&
  ok "a: the refusing address was tried and passed over" ||
  fail "a: no attempt at 127.0.3.9 in the log"

# ---- c: the root pod is replaced: the old address is dead (refuses) for
# 1 s, then the name flips between old and new every 0.3 s for 4 s and
# answers NXDOMAIN for 1.5 s on the way.
hosts 127.0.3.1
kill -9 "$root1"
sleep 1 # the node retries the dead old address meanwhile
start_root 127.0.3.2 "$job" root2 root2
( for i in $(seq 13); do
    if [ $((i % 2)) = 0 ]; then hosts 127.0.3.1; else hosts 127.0.3.2; fi
    sleep 0.3
  done
  hosts
  sleep 1.5
  hosts 127.0.3.1 127.0.3.2 ) &
flip=$!
t0=$(now)
if tc=$(through c 3 60); then
  ok "c/d: after the root moved (old address dead, the name flipping, then NXDOMAIN), a write through the node reached the new root in ${tc} s"
else
  fail "c/d: no write through the node after the root moved"
fi
wait "$flip"
[ "$("$ctl" --addr 127.0.3.2:$port --job "$job" get c 2>&1)" = 3 ] ||
  fail "c/d: the new root lacks the key written through the node"
grep -q "connect to 127.0.3.1:$port" "$dir/node.log" &&
  ok "c: the dead old address was tried and passed over" ||
  fail "c: no attempt at the dead old address 127.0.3.1 in the log"
# d: NXDOMAIN again while the node must reconnect (its root restarts on
# the same address), for 2 s; then the name is back.
n_before=$(grep -c "resolve" "$dir/node.log")
hosts
kill -9 "$root2"
start_root 127.0.3.2 "$job" root2b root2
( sleep 2; hosts 127.0.3.2 ) &
back=$!
td=$(through d 4 60) && ok "d: NXDOMAIN after it had resolved, while reconnecting: a write in ${td} s" ||
  fail "d: no write after NXDOMAIN"
wait "$back"
n_after=$(grep -c "resolve" "$dir/node.log")
[ $((n_after - n_before)) -ge 2 ] &&
  ok "d: the NXDOMAIN answers were not cached ($((n_after - n_before)) failed resolutions, then it resolved)" ||
  fail "d: $((n_after - n_before)) resolutions during the NXDOMAIN spell"

# ---- e: the old address now has another job's daemon (a root of another
# job, the same port), listed first: the node skips it (EJOB_MISMATCH).
start_root 127.0.3.1 "other-$job" root3 root3
hosts 127.0.3.1 127.0.3.2
kill -9 "$root2"
start_root 127.0.3.2 "$job" root4 root4
te=$(through e 5 60) && ok "e: another job's daemon at the old address passed over; write in ${te} s" ||
  fail "e: no write with another job's daemon at the first address"
grep -q "another job's daemon at 127.0.3.1:$port" "$dir/node.log" &&
  ok "e: the node's log names the other job's daemon it skipped" ||
  fail "e: no 'another job's daemon' line in the node's log"
[ "$("$ctl" --addr 127.0.3.1:$port --job "other-$job" get e 2>&1)" != 5 ] ||
  fail "e: the key went to the other job's root"
kill -0 "$node" 2>/dev/null || fail "the node exited"

# ---- f: a port range whose first port holds a program that is not rdzvd
# (it sends garbage), the parent on the second: the node passes over it.
python3 - "$dir" <<'PYEOF' &
import os, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.3.5", 28420))
s.listen(16)
open(sys.argv[1] + "/garbage.up", "w").close()
while True:
    c, _ = s.accept()
    c.send(os.urandom(128))
PYEOF
pids+=($!)
for _ in $(seq 50); do [ -e "$dir/garbage.up" ] && break; sleep 0.1; done
"$rdzvd" --role=node --job="$job" --parent="127.0.3.2:$port" \
  --listen=127.0.3.5:28420-28423 --port-file="$dir/mid.port" --name=mid \
  >"$dir/mid.log" 2>&1 &
pids+=($!)
for _ in $(seq 50); do [ -s "$dir/mid.port" ] && break; sleep 0.1; done
"$rdzvd" --role=node --job="$job" --parent=127.0.3.5:28420-28423 \
  --listen=127.0.0.1:0 --unix="$dir/leaf.sock" --name=leaf --log-level=2 \
  >"$dir/leaf.log" 2>&1 &
pids+=($!)
if [ "$(cat "$dir/mid.port" 2>/dev/null)" = 28421 ] &&
  "$ctl" --addr "unix:$dir/leaf.sock" --job "$job" --timeout 30 set f 6 \
    >>"$dir/ctl.log" 2>&1 &&
  [ "$("$ctl" --addr 127.0.3.2:$port --job "$job" get f 2>&1)" = 6 ] &&
  grep -q "undecodable bytes (not rdzvd?) from 127.0.3.5:28420" \
    "$dir/leaf.log"; then
  ok "f: a non-rdzv program on the range's first port passed over; the parent on 28421 reached"
else
  fail "f: no write through a range whose first port sends garbage"
fi

# ---- g: a node whose range holds its own port refuses itself as parent.
"$rdzvd" --role=node --job="$job" --parent=127.0.3.6:28430-28431 \
  --listen=127.0.3.6:28430-28431 --unix="$dir/self.sock" --name=self \
  --upstream-timeout-ms=2000 --log-level=2 >"$dir/self.log" 2>&1 &
pids+=($!)
out=$("$ctl" --addr "unix:$dir/self.sock" --job "$job" --timeout 30 set g 7 2>&1)
if [ -n "$out" ] && grep -q "RDZV_EUNREACHABLE" <<<"$out" &&
  grep -q "is this node itself" "$dir/self.log"; then
  ok "g: a node reaching itself in its parent's range refuses itself and fails the request: $(tail -c 160 <<<"$out")"
else
  fail "g: self as parent: '$out'"
fi
