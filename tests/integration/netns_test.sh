#!/bin/bash
# Two hosts as network namespaces joined by a veth pair: host A runs the
# root (on A's loopback) and a node whose parent is that loopback address;
# host B runs a node under A's node (over 10.77.x). A's node must not give
# B its loopback ancestor ("127.0.0.1:P" on B would name B's own daemons),
# while a node on A itself still gets it. Needs root (ip netns).
set -u
rdzvd=$PWD/tools/rdzvd
ctl=$PWD/tools/rdzvctl
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null; then
  echo "netns_test: needs root and ip(8)" >&2
  exit 1
fi
dir=$(mktemp -d /tmp/rdzv-netns-XXXXXX)
a=rdzvA$$
b=rdzvB$$
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  ip netns del "$a" 2>/dev/null
  ip netns del "$b" 2>/dev/null
  rm -rf "$dir"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*"
  exit 1
}
ip netns add "$a" && ip netns add "$b" || fail "ip netns add"
ip link add "va$$" type veth peer name "vb$$" || fail "veth"
ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" || fail "veth netns"
ip -n "$a" addr add 10.77.0.1/24 dev "va$$"
ip -n "$b" addr add 10.77.0.2/24 dev "vb$$"
for n in "$a" "$b"; do
  ip -n "$n" link set lo up
done
ip -n "$a" link set "va$$" up
ip -n "$b" link set "vb$$" up

waitfile() {
  for _ in $(seq 100); do [ -s "$1" ] && return 0; sleep 0.1; done
  return 1
}
ip netns exec "$a" "$rdzvd" --role=root --listen=127.0.0.1:0 \
  --port-file="$dir/root.port" --name=root --log-level=0 &
pids+=($!)
waitfile "$dir/root.port" || fail "root did not start"
rport=$(cat "$dir/root.port")
ip netns exec "$a" "$rdzvd" --role=node --listen=10.77.0.1:0 \
  --port-file="$dir/a.port" --unix="$dir/a.sock" \
  --parent="127.0.0.1:$rport" --name=nodeA --log-level=0 &
pids+=($!)
waitfile "$dir/a.port" || fail "node A did not start"
aport=$(cat "$dir/a.port")
# A second node on host A (a loopback child) and the node on host B.
ip netns exec "$a" "$rdzvd" --role=node --listen=127.0.0.1:0 \
  --port-file="$dir/a2.port" --unix="$dir/a2.sock" \
  --parent="10.77.0.1:$aport" --name=nodeA2 --log-level=0 &
pids+=($!)
ip netns exec "$b" "$rdzvd" --role=node --listen=10.77.0.2:0 \
  --port-file="$dir/b.port" --unix="$dir/b.sock" \
  --parent="10.77.0.1:$aport" --name=nodeB --log-level=0 &
pids+=($!)
waitfile "$dir/a2.port" || fail "node A2 did not start"
waitfile "$dir/b.port" || fail "node B did not start"
# A request through each makes it say hello to node A.
ip netns exec "$b" "$ctl" --addr "unix:$dir/b.sock" --job nj set kb vb ||
  fail "set through node B"
ip netns exec "$a" "$ctl" --addr "unix:$dir/a2.sock" --job nj set ka va ||
  fail "set through node A2"
sb=$(ip netns exec "$b" "$ctl" --addr "unix:$dir/b.sock" stats)
sa=$(ip netns exec "$a" "$ctl" --addr "unix:$dir/a2.sock" stats)
echo "node B: $sb" | grep -o '"ancestors":\[[^]]*\]'
echo "node A2: $sa" | grep -o '"ancestors":\[[^]]*\]'
printf '%s' "$sb" | grep -q '"ancestors":\[\]' ||
  fail "node B (another host) was given a loopback ancestor: $sb"
printf '%s' "$sa" | grep -q "\"ancestors\":\[\"127.0.0.1:$rport\"\]" ||
  fail "node A2 (same host) lacks the loopback ancestor 127.0.0.1:$rport: $sa"
# And B still reaches the root's data through A.
v=$(ip netns exec "$b" "$ctl" --addr "unix:$dir/b.sock" --job nj get ka) ||
  fail "get through node B"
[ "$v" = va ] || fail "node B read '$v', not va"
echo "netns_test: passed"
