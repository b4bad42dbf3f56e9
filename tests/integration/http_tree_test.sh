#!/bin/bash
# A three-level tree watched as an operator watches it (tests/integration/
# BUILD says what is checked): a root, a mid node and a leaf node under it
# (started with --parent mid only), each with --http-listen, scraped by a
# real Prometheus server this test starts; curl as the probes.
set -u
src=$PWD
rdzvd=$src/tools/rdzvd
ctl=$src/tools/rdzvctl
work=$(mktemp -d /tmp/rdzv-http-tree-XXXXXX)
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
command -v prometheus >/dev/null ||
  { echo "FAIL: prometheus is not installed (tools/install-deps.sh installs it)"; exit 1; }
free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
wait_file() {
  for _ in $(seq 1 200); do [ -s "$1" ] && return 0; sleep 0.05; done
  echo "no $1" >&2
  return 1
}
# status of GET URL, its body in $work/body.
get() { curl -s -o "$work/body" -w '%{http_code}' --max-time 20 "$1"; }
# GET URL until its status is WANT and its body matches the regex RE (300
# tries 0.1 s apart); the last status.
until_ready() {
  local url=$1 want=$2 re=$3 code=000
  for _ in $(seq 1 600); do
    code=$(get "$url")
    [ "$code" = "$want" ] && grep -q -- "$re" "$work/body" && break
    sleep 0.1
  done
  echo "$code"
}

rport=$(free_port)
mport=$(free_port)
start_root() {
  "$rdzvd" --role root --listen "127.0.0.1:$rport" --name root \
    --http-listen "127.0.0.1:$rhport" >>"$work/root.log" 2>&1 &
  rootpid=$!
  pids+=("$rootpid")
}
rhport=$(free_port)
start_root
"$rdzvd" --role node --parent "127.0.0.1:$rport" --listen "127.0.0.1:$mport" --name mid \
  --heartbeat-ms 100 --liveness-timeout-ms 600 \
  --http-listen 127.0.0.1:0 --http-port-file "$work/mid.http" >"$work/mid.log" 2>&1 &
pids+=($!)
"$rdzvd" --role node --parent "127.0.0.1:$mport" --unix "$work/leaf.sock" --name leaf \
  --heartbeat-ms 100 --liveness-timeout-ms 600 --session-grace-ms 8000 \
  --http-listen 127.0.0.1:0 --http-port-file "$work/leaf.http" >"$work/leaf.log" 2>&1 &
leafpid=$!
pids+=("$leafpid")
wait_file "$work/mid.http" && wait_file "$work/leaf.http" || exit 1
R=http://127.0.0.1:$rhport
M=http://127.0.0.1:$(cat "$work/mid.http")
L=http://127.0.0.1:$(cat "$work/leaf.http")
export RDZV_JOB=tree

# Prometheus scrapes the three every second.
pport=$(free_port)
cat >"$work/prometheus.yml" <<EOF
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: rdzv
    static_configs:
      - targets: ['127.0.0.1:$rhport', '${M#http://}', '${L#http://}']
EOF
promtool check config "$work/prometheus.yml" >"$work/promtool.txt" 2>&1 ||
  fail "promtool check config: $(cat "$work/promtool.txt")"
prometheus --config.file="$work/prometheus.yml" --storage.tsdb.path="$work/tsdb" \
  --web.listen-address="127.0.0.1:$pport" --log.level=warn >"$work/prometheus.log" 2>&1 &
pids+=($!)
P=http://127.0.0.1:$pport
# The value of an instant query's series, one line each: "INSTANCE VALUE"
# (sorted); nothing while Prometheus has no answer.
pq() {
  curl -s --max-time 10 --data-urlencode "query=$1" "$P/api/v1/query" |
    python3 -c 'import json, sys
try:
    d = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
for r in sorted(d.get("data", {}).get("result", []), key=lambda r: r["metric"].get("instance", "")):
    print(r["metric"].get("instance", "-"), r["value"][1])'
}
# pq until its output matches the regex RE (600 tries 0.1 s apart): the
# last output.
pq_until() {
  local out=
  for _ in $(seq 1 600); do
    out=$(pq "$1")
    grep -qE -- "$2" <<<"$out" && break
    sleep 0.1
  done
  echo "$out"
}

# A rendezvous: 2 ranks through the leaf (host hA), 2 through mid (hB).
rk=()
for i in 0 1 2 3; do
  if [ "$i" -lt 2 ]; then addr=unix:$work/leaf.sock; host=hA; else addr=127.0.0.1:$mport; host=hB; fi
  RDZV_ADDR=$addr RDZV_HOST=$host LOCAL_RANK=$((i % 2)) LOCAL_WORLD_SIZE=2 WORLD_SIZE=4 \
    "$src/tools/rdzv-example" --nccl none --timeout 120 >"$work/rank$i.log" 2>&1 &
  rk+=($!)
done
rrc=0
for p in "${rk[@]}"; do wait "$p" || rrc=1; done
[ "$rrc" = 0 ] && ok "4 ranks completed a rendezvous through leaf and mid" ||
  fail "ranks: $(cat "$work"/rank*.log)"

# What Prometheus holds after it: every target up, the roles, the tree's
# saving (4 ranks' joins reach the root in fewer requests), the round.
out=$(pq_until 'sum(rdzv_round_duration_seconds_count) * count(up == 1)' ' 3$')
[ "${out##* }" = 3 ] && ok "Prometheus scraped 3 targets, up, after the round" ||
  fail "Prometheus: round count x targets up: '$out' ($(cat "$work/prometheus.log"))"
out=$(pq 'rdzv_build_info')
roles=$(pq 'count by (role) (rdzv_build_info)' | awk '{print $2}' | tr '\n' ' ')
echo "rdzv_build_info: $out"
nroot=$(pq 'count(rdzv_build_info{role="root"})' | awk '{print $2}')
nnode=$(pq 'count(rdzv_build_info{role="node"})' | awk '{print $2}')
[ "$nroot" = 1 ] && [ "$nnode" = 2 ] && ok "rdzv_build_info: 1 root and 2 nodes" ||
  fail "rdzv_build_info roles: root $nroot, node $nnode ($roles)"
# The joins as each level counted them: what mid sent up is what the root
# received (how many the tree combined depends on when the ranks came).
rj=$(pq "rdzv_requests_total{op=\"join\",result=\"ok\",instance=\"127.0.0.1:$rhport\"}" | awk '{print $2}')
mj=$(pq "rdzv_upstream_requests_total{op=\"join\",instance=\"${M#http://}\"}" | awk '{print $2}')
lj=$(pq "rdzv_requests_total{op=\"join\",result=\"ok\",instance=\"${L#http://}\"}" | awk '{print $2}')
echo "join requests: at the leaf $lj, sent up by mid $mj, at the root $rj"
[ "$lj" = 2 ] && [ -n "$rj" ] && [ "$rj" = "$mj" ] && [ "$rj" -ge 1 ] && [ "$rj" -le 4 ] &&
  ok "Prometheus: 2 joins at the leaf; mid sent up $mj, the root received $rj, for 4 ranks" ||
  fail "join requests: leaf '$lj', mid up '$mj', root '$rj'"
out=$(pq 'min(rdzv_ready)')
[ "${out##* }" = 1 ] && ok "Prometheus: every check of every daemon passes (min(rdzv_ready) 1)" ||
  fail "min(rdzv_ready): $out"

# The root killed: mid's parent check fails; the leaf's parent (mid)
# stays attached, but its root_reachable fails, naming mid.
kill -9 "$rootpid"
wait "$rootpid" 2>/dev/null
"$ctl" --addr "unix:$work/leaf.sock" --timeout 1 get nokey >/dev/null 2>&1
code=$(until_ready "$L/readyz?verbose" 503 '^\[-\]root_reachable failed')
echo "leaf /readyz ($code):"; cat "$work/body"
if [ "$code" = 503 ] && grep -qx '\[+\]parent ok' "$work/body" &&
  grep -q "^\[-\]root_reachable failed: node leaf: job tree: parent 127.0.0.1:$mport is attached but says its own link toward the root is down" "$work/body"; then
  ok "root killed: the leaf's parent is attached, root_reachable fails naming mid"
else
  fail "root killed: leaf /readyz"
fi
code=$(until_ready "$M/readyz?verbose" 503 '^\[-\]parent failed')
grep -q "^\[-\]parent failed: node mid: job tree: parent 127.0.0.1:$rport" "$work/body" &&
  ok "root killed: mid's parent check fails naming the root" || fail "mid /readyz ($code): $(cat "$work/body")"
out=$(pq_until "rdzv_ready{check=\"root_reachable\",instance=\"${L#http://}\"}" ' 0$')
[ "${out##* }" = 0 ] && ok "Prometheus: the leaf's rdzv_ready{check=\"root_reachable\"} 0" ||
  fail "Prometheus root_reachable: '$out'"
out=$(pq_until "up{instance=\"127.0.0.1:$rhport\"}" ' 0$')
[ "${out##* }" = 0 ] && ok "Prometheus: the root's target is down" || fail "Prometheus up: '$out'"

# The root back on its port: both ready again.
start_root
code=$(until_ready "$L/readyz?verbose" 200 '^\[+\]root_reachable ok')
[ "$code" = 200 ] && ok "root back: the leaf is ready, root reachable" ||
  fail "root back: leaf /readyz $code: $(cat "$work/body")"
code=$(until_ready "$M/readyz" 200 ok)
[ "$code" = 200 ] && ok "root back: mid is ready" || fail "root back: mid /readyz $code: $(cat "$work/body")"

# The leaf stopped past mid's --liveness-timeout-ms: mid declares it lost
# and closes it. Continued, the leaf is fenced for its --session-grace-ms
# (8 s) and until mid answers it again; then ready, with no request of
# its own (an idle node does not stay fenced).
"$ctl" --addr "unix:$work/leaf.sock" set before-stop 1 >/dev/null || fail "rdzvctl set through the leaf"
silent0=$(curl -s "$M/metrics" | awk '$1 == "rdzv_children_silent_total" {print $2}')
kill -STOP "$leafpid"
silent=$silent0
for _ in $(seq 1 300); do
  silent=$(curl -s "$M/metrics" | awk '$1 == "rdzv_children_silent_total" {print $2}')
  [ "$silent" -gt "$silent0" ] && break
  sleep 0.1
done
kill -CONT "$leafpid"
[ "$silent" -gt "$silent0" ] && ok "mid declared the stopped leaf lost (children_silent $silent0 -> $silent)" ||
  fail "mid never declared the leaf lost"
code=$(until_ready "$L/readyz?verbose" 503 '^\[-\]not_fenced failed')
echo "leaf /readyz ($code):"; cat "$work/body"
grep -q "^\[-\]not_fenced failed: node leaf: job tree: declared lost by 127.0.0.1:$mport: daemon mid heard nothing from leaf for [0-9]* ms: declared lost [0-9]* ms ago (held --session-grace-ms 8000, " "$work/body" &&
  ok "the continued leaf: not_fenced fails, naming mid and why" || fail "leaf not_fenced ($code)"
fenced=$(curl -s "$L/metrics" | awk '$1 == "rdzv_fenced_by_parent_total" {print $2}')
[ "${fenced:-0}" -ge 1 ] && ok "rdzv_fenced_by_parent_total $fenced at the leaf" || fail "fenced metric '$fenced'"
out=$(pq_until "rdzv_ready{check=\"not_fenced\",instance=\"${L#http://}\"}" ' 0$')
[ "${out##* }" = 0 ] && ok "Prometheus: the leaf's rdzv_ready{check=\"not_fenced\"} 0" ||
  fail "Prometheus not_fenced: '$out'"
code=$(until_ready "$L/readyz?verbose" 200 '^\[+\]not_fenced ok')
[ "$code" = 200 ] && ok "past the grace, mid answering it: the leaf is ready again, idle" ||
  fail "after the fence: leaf /readyz $code: $(cat "$work/body")"
[ "$("$ctl" --addr "unix:$work/leaf.sock" get before-stop 2>&1)" = 1 ] &&
  ok "what was set before the stop is read through the leaf" || fail "get before-stop"

[ "$fails" = 0 ] && echo "http_tree_test: PASS" || echo "http_tree_test: FAIL"
[ "$fails" = 0 ]
