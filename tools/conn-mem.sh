#!/usr/bin/env bash
# Memory a root holds per idle connection (a measurement, not a test).
#
#   tools/conn-mem.sh [NATIVE] [TCPSTORE] [VALUE_BYTES]
#                     (defaults 16384, 9000 and 100000)
#
# Native: a root (its own process) holds a write-once key of VALUE_BYTES;
# NATIVE clients (rdzv-swarm, one process) connect, all read the key at
# once, and stay connected, idle. TCPStore: another root with the TCPStore
# front end; TCPSTORE raw TCPStore connections (python3, one process) set
# nothing, send their GET of the key all at once, read the whole value,
# and stay connected, idle. For each it prints the root's RSS before the
# clients came (the key already set), with them idle, its peak (VmHWM),
# and (RSS idle - RSS before) / connections, and the root's stats
# counters of bytes sent by reference and copied. Either count may be 0
# (skipped). Builds what it needs with Bazel.
set -euo pipefail
cd "$(dirname "$0")/.."
native=${1:-16384}
tcpstore=${2:-9000}
vbytes=${3:-100000}
# CONNMEM_BIN: a folder with rdzvd, rdzvctl and rdzv-swarm to use instead
# (e.g. another build's, to compare); then nothing is built.
bin=${CONNMEM_BIN:-}
if [ -z "$bin" ]; then
  bazel build //tools:rdzvd //tools:rdzvctl //tools:rdzv-swarm >/dev/null 2>&1
  bin=bazel-bin/tools
fi
dir=$(mktemp -d /tmp/conn-mem-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$dir"
}
trap cleanup EXIT

kib() { awk -v k="$2:" '$1 == k { print $2 }' "/proc/$1/status"; }

# start_root NAME EXTRA_ARGS...: sets $root_pid and $root_port.
start_root() {
  local name=$1
  shift
  "$bin/rdzvd" --role=root --listen=127.0.0.1:0 \
    --port-file="$dir/$name.port" --log-level=0 --name="$name" \
    --max-connections=$((native > tcpstore ? native + 64 : tcpstore + 64)) \
    "$@" &
  root_pid=$!
  pids+=("$root_pid")
  for _ in $(seq 1000); do [ -s "$dir/$name.port" ] && break; sleep 0.01; done
  root_port=$(cat "$dir/$name.port")
}

counters() {
  "$bin/rdzvctl" --addr "127.0.0.1:$1" stats | python3 -c '
import json, sys
s = json.load(sys.stdin)
b = s["bytes"]
print("bytes out %d, of them written from shared buffers %d; large values "
      "copied %d" % (b["out"], b.get("shared", 0), b.get("copied_large", 0)))'
}

report() { # WHAT N RSS0 RSS1 HWM
  echo "$1: $2 connections idle after a get of a $vbytes-byte key:" \
    "root RSS $(($3 / 1024)) MiB before, $(($4 / 1024)) MiB idle," \
    "peak $(($5 / 1024)) MiB; $((($4 - $3) * 1024 / $2)) bytes per connection"
}

value=$(head -c $((vbytes * 3 / 4 + 3)) /dev/urandom | base64 -w0 | head -c "$vbytes")

if [ "$native" -gt 0 ]; then
  start_root native
  "$bin/rdzvctl" --addr "127.0.0.1:$root_port" --job conn-mem set uid \
    "$value" --write-once
  sleep 0.2
  rss0=$(kib "$root_pid" VmRSS)
  coproc SW { "$bin/rdzv-swarm" --addrs "127.0.0.1:$root_port" \
    --job conn-mem --clients "$native" --timeout 120 --hold get uid; }
  while read -r line <&"${SW[0]}"; do
    case $line in "get ok"*) break ;; esac
  done
  echo "native: swarm says: $line"
  sleep 1
  rss1=$(kib "$root_pid" VmRSS)
  hwm=$(kib "$root_pid" VmHWM)
  report native "$native" "$rss0" "$rss1" "$hwm"
  echo "native: $(counters "$root_port")"
  echo >&"${SW[1]}"
  wait "$SW_PID" || true
fi

if [ "$tcpstore" -gt 0 ]; then
  start_root ts --tcpstore-listen=127.0.0.1:0 \
    --tcpstore-port-file="$dir/ts.tsport" --tcpstore-job=conn-mem
  for _ in $(seq 1000); do [ -s "$dir/ts.tsport" ] && break; sleep 0.01; done
  tsport=$(cat "$dir/ts.tsport")
  rss_file=$dir/rss
  CONNMEM_PID=$root_pid CONNMEM_PORT=$tsport CONNMEM_N=$tcpstore \
  CONNMEM_VALUE=$value python3 - <<'EOF' >"$dir/ts.out"
import os, socket, struct, sys, time

pid = os.environ["CONNMEM_PID"]
port = int(os.environ["CONNMEM_PORT"])
n = int(os.environ["CONNMEM_N"])
value = os.environ["CONNMEM_VALUE"].encode()
MAGIC = b"\xce\xf7\x85\x3c"
SET, GET = 1, 3


def blob(b):
    return struct.pack("<Q", len(b)) + b


def rss(key):
    for line in open("/proc/%s/status" % pid):
        if line.startswith(key + ":"):
            return int(line.split()[1])


def connect():
    for _ in range(200):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=60)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"\x00" + MAGIC)
            return s
        except OSError:
            time.sleep(0.05)
    raise SystemExit("cannot connect")


def recv_exact(s, k):
    buf = bytearray(k)
    view, got = memoryview(buf), 0
    while got < k:
        r = s.recv_into(view[got:])
        if r == 0:
            raise SystemExit("closed")
        got += r
    return bytes(buf)


w = connect()
w.sendall(bytes([SET]) + blob(b"/uid") + blob(value))
w.sendall(bytes([GET]) + blob(b"/uid"))  # the SET is done once this answers
ln = struct.unpack("<Q", recv_exact(w, 8))[0]
assert recv_exact(w, ln) == value
time.sleep(0.2)
rss0 = rss("VmRSS")
conns = [connect() for _ in range(n)]
for s in conns:
    s.sendall(bytes([GET]) + blob(b"/uid"))
for s in conns:
    ln = struct.unpack("<Q", recv_exact(s, 8))[0]
    if recv_exact(s, ln) != value:
        raise SystemExit("a connection got other bytes")
time.sleep(1)
print(rss0, rss("VmRSS"), rss("VmHWM"))
sys.stdout.flush()
for s in conns:
    s.close()
w.close()
EOF
  read -r rss0 rss1 hwm <"$dir/ts.out"
  report tcpstore "$tcpstore" "$rss0" "$rss1" "$hwm"
  echo "tcpstore: $(counters "$root_port")"
fi
