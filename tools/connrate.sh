#!/usr/bin/env bash
# Connections a second at one node, with and without a job secret and TLS:
# a root and a node of job "cr" (the node with --secret-file in the
# "secret" runs, --tls-dir in the "tls" runs, both in "tls+secret"; the
# root then the same), and rdzv-swarm's reconnect scenario: CLIENTS
# handles, each in turn connecting (TLS handshake; hello; challenge,
# proofs), reading a write-once key the node has cached, and closing, for
# SECONDS. Over TCP and over the node's Unix socket (which stays plain:
# the TLS modes run TCP only); RUNS runs of each, in turn. The
# certificates: tools/tls-certs.sh (ECDSA P-256, TLS 1.3), the clients
# with the CA only.
#
# Usage: tools/connrate.sh [SECONDS [CLIENTS [RUNS]]]   (default 5 8 3)
# Needs bazel-bin/tools/{rdzvd,rdzvctl,rdzv-swarm} (bazel build //tools:all).
# Prints one line per run and a summary (median, min, max) per setting.
set -euo pipefail
secs=${1:-5}
clients=${2:-8}
runs=${3:-3}
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin="$root/bazel-bin/tools"
for b in rdzvd rdzvctl rdzv-swarm; do
  [ -x "$bin/$b" ] || { echo "connrate.sh: build $bin/$b first (bazel build //tools:all)" >&2; exit 2; }
done
work=$(mktemp -d /tmp/rdzv-connrate.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$work/secret"
chmod 600 "$work/secret"
"$root/tools/tls-certs.sh" "$work/tls" >/dev/null
mkdir -p "$work/ca"
cp "$work/tls/ca.crt" "$work/ca/ca.crt"

wait_port() {
  for _ in $(seq 1 300); do
    [ -s "$1" ] && { cat "$1"; return 0; }
    sleep 0.05
  done
  echo "connrate.sh: no port file $1" >&2
  return 1
}

# start MODE: a root and a node; sets node_tcp and node_unix.
start() {
  local mode=$1 sec=()
  [[ "$mode" == *secret* ]] && sec=(--secret-file="$work/secret")
  [[ "$mode" == tls* ]] && sec+=(--tls-dir="$work/tls")
  rm -f "$work"/*.port "$work"/*.sock
  "$bin/rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$work/root.port" \
    --job=cr --name=root --log-level=0 "${sec[@]}" &
  pids+=($!)
  local rp; rp=$(wait_port "$work/root.port")
  "$bin/rdzvd" --role=node --parent="127.0.0.1:$rp" --listen=127.0.0.1:0 \
    --port-file="$work/node.port" --unix="$work/node.sock" --job=cr \
    --name=node --log-level=0 "${sec[@]}" &
  pids+=($!)
  node_tcp="127.0.0.1:$(wait_port "$work/node.port")"
  node_unix="unix:$work/node.sock"
  env_sec=()
  [[ "$mode" == *secret* ]] && env_sec=(RDZV_SECRET_FILE="$work/secret")
  [[ "$mode" == tls* ]] && env_sec+=(RDZV_TLS_DIR="$work/ca")
  env "${env_sec[@]}" "$bin/rdzvctl" --addr "$node_tcp" --job cr \
    set cr/key value --write-once >/dev/null
}

stop() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
}

declare -A results
for run in $(seq 1 "$runs"); do
  for mode in none secret tls tls+secret; do
    start "$mode"
    vias="tcp unix"
    [[ "$mode" == tls* ]] && vias=tcp
    for via in $vias; do
      addr=$node_tcp
      [ "$via" = unix ] && addr=$node_unix
      out=$(env "${env_sec[@]}" "$bin/rdzv-swarm" --addrs "$addr" --job cr \
        --clients "$clients" --timeout 60 reconnect "$secs" cr/key | tail -1)
      rate=$(echo "$out" | awk '$1 == "reconnect" {print $3}')
      [ -n "$rate" ] || { echo "connrate.sh: rdzv-swarm said: $out" >&2; exit 1; }
      printf 'run %d  %-10s %-4s %8s connections/s\n' "$run" "$mode" "$via" "$rate"
      results[$mode.$via]+="$rate "
    done
    # The node's own count: every connection of the secret runs was
    # challenged and accepted, none refused.
    if [ "$mode" != none ]; then
      env "${env_sec[@]}" "$bin/rdzvctl" --addr "$node_tcp" \
        --job cr stats | jq -c '{auth: .auth, tls: .tls}' |
        sed 's/^/        node: /'
    fi
    stop
  done
done
echo "summary (${clients} clients, ${secs} s a run, ${runs} runs; median [min-max] connections/s):"
for key in none.tcp secret.tcp tls.tcp tls+secret.tcp none.unix secret.unix; do
  sorted=$(tr ' ' '\n' <<<"${results[$key]}" | grep . | sort -n)
  n=$(wc -l <<<"$sorted")
  med=$(sed -n "$(((n + 1) / 2))p" <<<"$sorted")
  printf '  %-12s %8s  [%s-%s]\n' "$key" "$med" "$(head -1 <<<"$sorted")" "$(tail -1 <<<"$sorted")"
done
