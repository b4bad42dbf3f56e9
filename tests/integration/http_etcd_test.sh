#!/bin/bash
# rdzvd --http-listen on an etcd-backed root (tests/integration/BUILD says
# what is checked). A real etcd member, stopped and continued.
set -u
src=$PWD
rdzvd=$src/tools/rdzvd
work=$(mktemp -d /tmp/rdzv-http-etcd-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -CONT "$p" 2>/dev/null; kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
command -v etcd >/dev/null || { echo "FAIL: etcd is not installed (tools/install-deps.sh)"; exit 1; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
cport=$(free_port)
pport=$(free_port)
etcd --name e0 --data-dir "$work/etcd" --listen-client-urls "http://127.0.0.1:$cport" \
  --advertise-client-urls "http://127.0.0.1:$cport" \
  --listen-peer-urls "http://127.0.0.1:$pport" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
  --initial-cluster "e0=http://127.0.0.1:$pport" --logger zap --log-level error \
  >"$work/etcd.log" 2>&1 &
etcdpid=$!
pids+=("$etcdpid")
"$rdzvd" --role root --listen 127.0.0.1:0 --name r1 --etcd "http://127.0.0.1:$cport" \
  --etcd-lease-ttl-s 3 --etcd-timeout-ms 500 --port-file "$work/root.port" \
  --http-listen 127.0.0.1:0 --http-port-file "$work/http.port" >"$work/root.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [ -s "$work/http.port" ] && [ -s "$work/root.port" ] && break; sleep 0.05; done
H=http://127.0.0.1:$(cat "$work/http.port")
# A node under it, with a job's link up once the root leads.
"$rdzvd" --role node --parent "127.0.0.1:$(cat "$work/root.port")" --unix "$work/n.sock" --name n1 \
  --heartbeat-ms 100 --liveness-timeout-ms 600 \
  --http-listen 127.0.0.1:0 --http-port-file "$work/n.http.port" >"$work/node.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do [ -s "$work/n.http.port" ] && break; sleep 0.05; done
NH=http://127.0.0.1:$(cat "$work/n.http.port")
# readyz?verbose until it passes or N tries.
until_code() {
  local want=$1 code=000
  for _ in $(seq 1 300); do
    code=$(curl -s -o "$work/body" -w '%{http_code}' --max-time 5 "$H/readyz?verbose")
    [ "$code" = "$want" ] && return 0
    sleep 0.1
  done
  return 1
}
if until_code 200 && grep -qx '\[+\]leader_or_standby ok' "$work/body" &&
  grep -qx '\[+\]etcd ok' "$work/body"; then
  ok "leader: /readyz 200 with leader_or_standby and etcd"
else
  fail "leader /readyz: $(cat "$work/body"; tail -5 "$work/root.log")"
fi
m=$(curl -s "$H/metrics")
n=$(awk '$1 == "rdzv_etcd_request_duration_seconds_count" {print $2}' <<<"$m")
inf=$(awk '$1 == "rdzv_etcd_request_duration_seconds_bucket{le=\"+Inf\"}" {print $2}' <<<"$m")
[ "${n:-0}" -ge 1 ] && [ "$inf" = "$n" ] && ok "etcd request latency: $n requests in the histogram" ||
  fail "etcd latency histogram: count $n, +Inf $inf"
grep -qx 'rdzv_etcd_leader 1' <<<"$m" && grep -qx 'rdzv_etcd_role{role="leader"} 1' <<<"$m" &&
  ok "rdzv_etcd_leader 1" || fail "etcd leader metrics: $(grep etcd_ <<<"$m")"
promtool check metrics <<<"$m" >/dev/null 2>&1 && ok "promtool accepts an etcd root's metrics" ||
  fail "promtool on the etcd root's metrics: $(promtool check metrics <<<"$m" 2>&1)"
# etcd stopped (once a keepalive was answered): keepalives fail, the
# lease (3 s) runs out, the root stands down; /readyz says so, /livez
# does not care.
for _ in $(seq 1 100); do
  s=$(curl -s "$H/metrics" | awk '$1 == "rdzv_etcd_lease_renewals_total" {print $2}')
  [ "${s:-0}" -ge 1 ] && break
  sleep 0.1
done
kill -STOP "$etcdpid"
if until_code 503 && grep -q '^\[-\]' "$work/body"; then
  ok "etcd stopped: /readyz 503: $(grep '^\[-\]' "$work/body" | tr '\n' ' ')"
else
  fail "etcd stopped: /readyz $(cat "$work/body")"
fi
[ "$(curl -s -o /dev/null -w '%{http_code}' "$H/livez")" = 200 ] && ok "/livez 200 meanwhile" ||
  fail "/livez while etcd is stopped"
# The node's parent check gives the standing-down root's own words: no
# leader known, and what etcd did.
code=000
for _ in $(seq 1 300); do
  "$src/tools/rdzvctl" --addr "unix:$work/n.sock" --job web --timeout 1 get k >/dev/null 2>&1
  code=$(curl -s -o "$work/nbody" -w '%{http_code}' --max-time 5 "$NH/readyz?verbose")
  [ "$code" = 503 ] && grep -q "no leader known; etcd: " "$work/nbody" && break
  sleep 0.1
done
if [ "$code" = 503 ] && grep -q "^\[-\]parent failed: node n1: job web: parent .* refused by a standby root: root r1 (.*) is not the leader of .*: no leader known; etcd: " "$work/nbody"; then
  ok "etcd stopped: the node's /readyz gives the root's reason: $(grep '^\[-\]parent' "$work/nbody")"
else
  fail "the node's /readyz while etcd is stopped ($code): $(cat "$work/nbody")"
fi
m=$(curl -s "$H/metrics")
f=$(awk '$1 == "rdzv_etcd_lease_renewal_failures_total" {print $2}' <<<"$m")
s=$(awk '$1 == "rdzv_etcd_lease_renewals_total" {print $2}' <<<"$m")
echo "lease renewals $s, failures $f"
[ "${f:-0}" -ge 1 ] && [ "${s:-0}" -ge 1 ] && ok "lease renewals and failures counted" ||
  fail "lease counters: renewals $s, failures $f"
kill -CONT "$etcdpid"
if until_code 200; then
  ok "etcd back: the root leads again, /readyz 200"
else
  fail "etcd back: /readyz $(cat "$work/body")"
fi
[ "$fails" = 0 ] && echo "http_etcd_test: PASS" || echo "http_etcd_test: FAIL"
[ "$fails" = 0 ]
