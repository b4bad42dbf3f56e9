#!/usr/bin/env bash
# Regenerates tests/fuzz/etcd_json_corpus/ from a real etcd (the `etcd`
# binary on PATH, a throwaway member on loopback): each seed is the fuzz
# target's selector byte (see etcd_json_fuzz.c) followed by a body the
# gateway actually sent.
#
# Usage: tests/fuzz/etcd_json_capture.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
out="$root/tests/fuzz/etcd_json_corpus"
dir="$(mktemp -d /dev/shm/rdzv-etcd.XXXXXX)"
cp=$((20000 + RANDOM % 20000))
pp=$((cp + 1))
E="http://127.0.0.1:$cp"
etcd --name t --data-dir "$dir/data" \
  --listen-client-urls "$E" --advertise-client-urls "$E" \
  --listen-peer-urls "http://127.0.0.1:$pp" \
  --initial-advertise-peer-urls "http://127.0.0.1:$pp" \
  --initial-cluster "t=http://127.0.0.1:$pp" \
  --heartbeat-interval 10 --election-timeout 100 --logger zap \
  --log-level error --max-txn-ops 8 \
  --experimental-watch-progress-notify-interval 1s >"$dir/log" 2>&1 &
pid=$!
trap 'kill $pid; wait $pid 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 500); do
  curl -s "$E/health" 2>/dev/null | grep -q '"health":"true"' && break
  sleep 0.02
done

b64() { printf %s "$1" | base64 -w0; }
# seed NAME SELECTOR(hex) PATH BODY [curl options]
seed() {
  local name=$1 sel=$2 path=$3 body=$4
  shift 4
  { printf "\\x$sel"; curl -s -X POST "$@" "$E$path" -d "$body"; } >"$out/$name"
}
# kinds: put 0 range 1 delete 2 txn 3 grant 4 keepalive 5 revoke 6 ttl 7
# auth 8 compact 9 watch 10; HTTP index << 4: 200 0 400 1 401 2 403 3
# 404 4 412 5 429 6 503 7
rm -f "$out"/*
seed put 00 /v3/kv/put "{\"key\":\"$(b64 foo)\",\"value\":\"$(b64 bar)\"}"
seed put2 00 /v3/kv/put "{\"key\":\"$(b64 a/1)\",\"value\":\"$(b64 x)\"}"
curl -s -X POST "$E/v3/kv/put" -d "{\"key\":\"$(b64 a/2)\"}" >/dev/null
seed range 01 /v3/kv/range "{\"key\":\"$(b64 foo)\"}"
seed range_prefix 01 /v3/kv/range "{\"key\":\"$(b64 a/)\",\"range_end\":\"$(b64 a0)\",\"limit\":1}"
seed range_missing 01 /v3/kv/range "{\"key\":\"$(b64 nope)\"}"
seed range_count 01 /v3/kv/range "{\"key\":\"$(b64 a/)\",\"range_end\":\"$(b64 a0)\",\"count_only\":true}"
seed range_future 11 /v3/kv/range "{\"key\":\"$(b64 foo)\",\"revision\":1000}"
seed delete 02 /v3/kv/deleterange "{\"key\":\"$(b64 a/)\",\"range_end\":\"$(b64 a0)\"}"
K=$(b64 lock)
T="{\"compare\":[{\"key\":\"$K\",\"target\":\"CREATE\",\"result\":\"EQUAL\",\"create_revision\":\"0\"}],\"success\":[{\"request_put\":{\"key\":\"$K\",\"value\":\"$(b64 o1)\"}}],\"failure\":[{\"request_range\":{\"key\":\"$K\"}}]}"
seed txn_ok 03 /v3/kv/txn "$T"
seed txn_else 03 /v3/kv/txn "$T"
seed txn_nested 03 /v3/kv/txn "{\"success\":[{\"request_txn\":{\"success\":[{\"request_range\":{\"key\":\"$K\"}},{\"request_delete_range\":{\"key\":\"$K\"}}]}}]}"
ops=""
for i in 1 2 3 4 5 6 7 8 9; do ops="$ops${ops:+,}{\"request_put\":{\"key\":\"$(b64 k$i)\"}}"; done
seed txn_too_many 13 /v3/kv/txn "{\"success\":[$ops]}"
seed txn_dup 13 /v3/kv/txn "{\"success\":[{\"request_put\":{\"key\":\"$K\"}},{\"request_put\":{\"key\":\"$K\"}}]}"
seed grant 04 /v3/lease/grant '{"TTL":30}'
ID=$(curl -s -X POST "$E/v3/lease/grant" -d '{"TTL":30}' | sed 's/.*"ID":"\([0-9]*\)".*/\1/')
seed keepalive 05 /v3/lease/keepalive "{\"ID\":\"$ID\"}"
seed ttl 07 /v3/lease/timetolive "{\"ID\":\"$ID\",\"keys\":true}"
seed revoke 06 /v3/lease/revoke "{\"ID\":\"$ID\"}"
seed keepalive_lost 05 /v3/lease/keepalive "{\"ID\":\"$ID\"}"
seed ttl_lost 07 /v3/lease/timetolive "{\"ID\":\"$ID\"}"
seed revoke_unknown 46 /v3/lease/revoke "{\"ID\":\"$ID\"}"
seed grant_dup 54 /v3/lease/grant '{"TTL":30,"ID":"77"}'
seed grant_dup 54 /v3/lease/grant '{"TTL":30,"ID":"77"}'
seed bad_base64 10 /v3/kv/put '{"key":"!!"}'
seed not_found 40 /v3/kv/nothing '{}'
REV=$(curl -s -X POST "$E/v3/kv/put" -d "{\"key\":\"$(b64 c)\"}" | sed 's/.*"revision":"\([0-9]*\)".*/\1/')
seed compact 09 /v3/kv/compaction "{\"revision\":\"$REV\",\"physical\":true}"
seed compacted_range 11 /v3/kv/range "{\"key\":\"$(b64 c)\",\"revision\":1}"
seed compacted_again 19 /v3/kv/compaction "{\"revision\":\"1\"}"
# watch streams: history with prev_kv, a compacted start, progress
curl -s -X POST "$E/v3/kv/put" -d "{\"key\":\"$(b64 w/a)\",\"value\":\"$(b64 1)\"}" >/dev/null
curl -s -X POST "$E/v3/kv/put" -d "{\"key\":\"$(b64 w/a)\",\"value\":\"$(b64 2)\"}" >/dev/null
curl -s -X POST "$E/v3/kv/deleterange" -d "{\"key\":\"$(b64 w/a)\"}" >/dev/null
{ printf '\x83'; curl -s -N -m 1.5 -H 'Grpc-Metadata-hasleader: true' -X POST "$E/v3/watch" \
  -d "{\"create_request\":{\"key\":\"$(b64 w/)\",\"range_end\":\"$(b64 w0)\",\"start_revision\":\"$REV\",\"prev_kv\":true,\"progress_notify\":true}}" || true; } >"$out/watch_events"
{ printf '\x80'; curl -s -N -m 1 -X POST "$E/v3/watch" \
  -d "{\"create_request\":{\"key\":\"$(b64 w/)\",\"start_revision\":\"1\"}}" || true; } >"$out/watch_compacted"
{ printf '\x86'; curl -s -N -m 1 -X POST "$E/v3/watch" -d 'junk' || true; } >"$out/watch_bad_first"
printf '\x81{"error":{"grpc_code":14,"http_code":503,"message":"etcdserver: no leader","http_status":"Service Unavailable"}}' >"$out/watch_error"
# auth
curl -s -X POST "$E/v3/auth/user/add" -d '{"name":"root","password":"rootpw"}' >/dev/null
curl -s -X POST "$E/v3/auth/role/add" -d '{"name":"root"}' >/dev/null
curl -s -X POST "$E/v3/auth/user/grant" -d '{"user":"root","role":"root"}' >/dev/null
curl -s -X POST "$E/v3/auth/enable" -d '{}' >/dev/null
seed auth 08 /v3/auth/authenticate '{"name":"root","password":"rootpw"}'
seed auth_bad 18 /v3/auth/authenticate '{"name":"root","password":"no"}'
seed no_token 10 /v3/kv/put "{\"key\":\"$(b64 x)\"}"
seed bad_token 20 /v3/kv/put "{\"key\":\"$(b64 x)\"}" -H 'Authorization: bad.1'
{ printf '\x82'; curl -s -N -m 1 -X POST "$E/v3/watch" -d "{\"create_request\":{\"key\":\"$(b64 x)\"}}" || true; } >"$out/watch_no_token"
ls "$out" | wc -l
