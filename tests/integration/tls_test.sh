#!/bin/bash
# TLS on rdzv's TCP links (rdzvd --tls-*, librdzv's RDZV_TLS_*): real
# daemons and ranks, certificates made by tools/tls-certs.sh, a relay that
# records every byte between a node and the root (tests/integration/BUILD
# says what is checked).
set -u
src=$PWD
rdzvd=$src/tools/rdzvd
ctl=$src/tools/rdzvctl
example=$src/tools/rdzv-example
certs=$src/tools/tls-certs.sh
work=$(mktemp -d /tmp/rdzv-tls-test-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# The port a daemon wrote to FILE, waited for.
port_of() {
  for _ in $(seq 1 400); do
    [ -s "$1" ] && { cat "$1"; return 0; }
    sleep 0.05
  done
  echo "no port in $1" >&2
  return 1
}
# A number from a daemon's statistics: tstat ADDR DOTTED.PATH (TLS env of
# the caller's).
tstat() {
  "$ctl" --addr "$1" stats 2>/dev/null |
    python3 -c "import json,sys
v=json.load(sys.stdin)
for k in sys.argv[1].split('.'): v=v[k]
print(int(v))" "$2" 2>/dev/null || echo -1
}
# Waits until FILE has a line matching PATTERN (grep -E).
wait_log() {
  for _ in $(seq 1 400); do
    grep -qE "$2" "$1" 2>/dev/null && return 0
    sleep 0.05
  done
  return 1
}

# Cluster A (the one everything below trusts), an expired certificate of
# A's CA, cluster C (another CA), and what a rank holds: A's CA only.
"$certs" "$work/a" >/dev/null || { echo "tls-certs.sh failed"; exit 1; }
"$certs" --ca-from "$work/a" --expired "$work/exp" >/dev/null || exit 1
"$certs" "$work/c" >/dev/null || exit 1
mkdir -p "$work/rank"
cp "$work/a/ca.crt" "$work/rank/ca.crt"

"$rdzvd" --role root --listen 127.0.0.1:0 --port-file "$work/root.port" \
  --tls-dir "$work/a" --name root --log-level 2 >"$work/root.log" 2>&1 &
pids+=($!)
rport=$(port_of "$work/root.port") || exit 1
R=127.0.0.1:$rport

# The capture: a relay between node n1 and the root that writes what it
# forwards, each direction to its own file.
cat >"$work/relay.py" <<'PY'
import socket, sys, threading
target, port_file, cap = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ls = socket.socket()
ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
ls.bind(("127.0.0.1", 0))
ls.listen(16)
open(port_file + ".tmp", "w").write(str(ls.getsockname()[1]))
import os; os.rename(port_file + ".tmp", port_file)
lock = threading.Lock()
def pipe(a, b, name):
    with open(cap + "." + name, "ab", buffering=0) as f:
        while True:
            try:
                d = a.recv(65536)
            except OSError:
                d = b""
            if not d:
                break
            with lock:
                f.write(d)
            try:
                b.sendall(d)
            except OSError:
                break
    for s in (a, b):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
while True:
    c, _ = ls.accept()
    u = socket.create_connection(("127.0.0.1", target))
    threading.Thread(target=pipe, args=(c, u, "up"), daemon=True).start()
    threading.Thread(target=pipe, args=(u, c, "down"), daemon=True).start()
PY
python3 "$work/relay.py" "$rport" "$work/relay.port" "$work/cap" &
pids+=($!)
relay=$(port_of "$work/relay.port") || exit 1

"$rdzvd" --role node --parent "127.0.0.1:$relay" --tls-dir "$work/a" \
  --unix "$work/n1.sock" --listen 127.0.0.1:0 --port-file "$work/n1.port" \
  --name n1 --log-level 2 >"$work/n1.log" 2>&1 &
pids+=($!)
"$rdzvd" --role node --parent "$R" --tls-dir "$work/a" \
  --unix "$work/n2.sock" --listen 127.0.0.1:0 --port-file "$work/n2.port" \
  --name n2 --log-level 2 >"$work/n2.log" 2>&1 &
pids+=($!)
N1=127.0.0.1:$(port_of "$work/n1.port") || exit 1
N2=127.0.0.1:$(port_of "$work/n2.port") || exit 1
[ -S "$work/n1.sock" ] || sleep 0.5

# 1. A rendezvous through the tree: host hA's ranks on n1's Unix socket
# (plain: it never leaves the host), host hB's on n2's TCP port over TLS
# with the CA only (a rank needs no certificate of its own).
rk=()
for l in 0 1; do
  RDZV_ADDR=unix:$work/n1.sock RDZV_JOB=tlsjob RDZV_HOST=hA LOCAL_RANK=$l \
    LOCAL_WORLD_SIZE=2 WORLD_SIZE=4 \
    "$example" --nccl none --timeout 60 >"$work/rankA$l.log" 2>&1 &
  rk+=($!)
  RDZV_ADDR=$N2 RDZV_TLS_DIR=$work/rank RDZV_JOB=tlsjob RDZV_HOST=hB \
    LOCAL_RANK=$l LOCAL_WORLD_SIZE=2 WORLD_SIZE=4 \
    "$example" --nccl none --timeout 60 >"$work/rankB$l.log" 2>&1 &
  rk+=($!)
done
rrc=0
for p in "${rk[@]}"; do wait "$p" || rrc=1; done
if [ "$rrc" = 0 ] && [ "$(cat "$work"/rank*.log | grep -c "^rank [0-3] of 4:")" = 4 ] &&
  grep -q "ids identical on all 4 ranks" "$work/rankA0.log"; then
  ok "a tree with TLS completes a rendezvous (4 of 4 ranks, 2 of them over TLS to their node)"
else
  fail "the rendezvous over TLS"
  tail -n 5 "$work"/rank*.log "$work/n1.log" "$work/n2.log" "$work/root.log"
fi

# Keys written through n1 (over the relay) and read through n2 (over TLS
# on both of its links).
RDZV_ADDR=unix:$work/n1.sock "$ctl" --job tlsjob set marker-key-7f3a marker-value-91c4 >/dev/null 2>&1
got=$(RDZV_TLS_DIR=$work/rank "$ctl" --addr "$N2" --job tlsjob get marker-key-7f3a 2>&1)
[ "$got" = marker-value-91c4 ] && ok "a key set through n1 reads back through n2's TLS port" ||
  fail "read back over TLS: $got"

# 2. The capture holds no key, value, job id or frame in clear.
up=$work/cap.up
down=$work/cap.down
first() { od -An -tx1 -N1 "$1" 2>/dev/null | tr -d ' '; }
if [ -s "$up" ] && [ -s "$down" ] && [ "$(first "$up")" = 16 ] && [ "$(first "$down")" = 16 ]; then
  ok "the relay saw TLS both ways ($(wc -c <"$up") and $(wc -c <"$down") bytes, each starting with a TLS handshake record)"
else
  fail "the capture: $(wc -c "$up" "$down" 2>&1 | tr '\n' ' ') first bytes $(first "$up") $(first "$down")"
fi
leaks=""
for s in marker-key-7f3a marker-value-91c4 tlsjob RDZV rdzv/world; do
  grep -qaF "$s" "$up" "$down" && leaks="$leaks $s"
done
[ -z "$leaks" ] && ok "no key, value, job id, frame magic or round key in clear on the wire" ||
  fail "in clear on the wire:$leaks"
# The control: the same relay between a plain node and a plain root sees
# the same key in clear (so the check above can fail).
"$rdzvd" --role root --listen 127.0.0.1:0 --port-file "$work/p.port" \
  --log-level 0 >"$work/p.log" 2>&1 &
pids+=($!)
python3 "$work/relay.py" "$(port_of "$work/p.port")" "$work/prelay.port" "$work/pcap" &
pids+=($!)
"$rdzvd" --role node --parent "127.0.0.1:$(port_of "$work/prelay.port")" \
  --unix "$work/pn.sock" --listen= --log-level 0 >"$work/pn.log" 2>&1 &
pids+=($!)
for _ in $(seq 1 100); do [ -S "$work/pn.sock" ] && break; sleep 0.05; done
RDZV_ADDR=unix:$work/pn.sock "$ctl" --job tlsjob set marker-key-7f3a marker-value-91c4 >/dev/null 2>&1
grep -qaF marker-value-91c4 "$work/pcap.up" 2>/dev/null &&
  ok "control: without TLS the relay sees the key and value in clear" ||
  fail "control: the plain capture lacks the value"

# Handshakes counted at the root (n1's link and n2's), none failed yet.
export RDZV_TLS_DIR=$work/rank
h=$(tstat "$R" tls.handshakes)
f=$(tstat "$R" tls.failed)
[ "$h" -ge 2 ] && [ "$f" = 0 ] && ok "root: $h TLS handshakes, none failed" ||
  fail "root's tls stats: handshakes $h failed $f"
unset RDZV_TLS_DIR

# 3. A plain client on a TLS port: refused in its own protocol.
out=$("$ctl" --addr "$N2" --job tlsjob get marker-key-7f3a 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "RDZV_ETLS" <<<"$out" && grep -q "takes TLS only" <<<"$out" &&
  ok "a plain client to a TLS port: RDZV_ETLS, 'takes TLS only'" ||
  fail "plain client to a TLS port (rc $rc): $out"
[ "$(RDZV_TLS_DIR=$work/rank tstat "$N2" tls.plain_refused)" -ge 1 ] &&
  ok "n2 counted the plain peer (tls.plain_refused)" || fail "tls.plain_refused at n2"

# 4. A client that trusts another CA refuses the daemon.
out=$(RDZV_TLS_CA=$work/c/ca.crt "$ctl" --addr "$N2" --job tlsjob get marker-key-7f3a 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "RDZV_ETLS" <<<"$out" && grep -q "certificate verify failed" <<<"$out" &&
  ok "a wrong CA: refused ('certificate verify failed')" ||
  fail "wrong CA (rc $rc): $out"

# 5. An expired certificate: a node showing one is refused by the root,
# and a client refuses that node.
"$rdzvd" --role node --parent "$R" --tls-dir "$work/exp" --listen 127.0.0.1:0 \
  --port-file "$work/n3.port" --name n3 --log-level 2 >"$work/n3.log" 2>&1 &
pids+=($!)
N3=127.0.0.1:$(port_of "$work/n3.port") || exit 1
RDZV_TLS_DIR=$work/rank "$ctl" --addr "$N3" --job tlsjob get marker-key-7f3a >"$work/exp.out" 2>&1
rc=$?
wait_log "$work/root.log" "TLS: .*the client's certificate: certificate has expired" &&
  wait_log "$work/n3.log" "parent .*TLS: .*certificate expired" &&
  ok "a node with an expired certificate: the root refuses it, both logs say why" ||
  { fail "expired certificate at the root"; tail -n 3 "$work/root.log" "$work/n3.log"; }
[ "$rc" != 0 ] && grep -q "certificate has expired" "$work/exp.out" &&
  ok "a client refuses a daemon whose certificate expired" ||
  fail "client to an expired daemon (rc $rc): $(cat "$work/exp.out")"

# 6. A certificate of another cluster (its own CA): each side refuses.
"$rdzvd" --role node --parent "$R" --tls-dir "$work/c" --listen 127.0.0.1:0 \
  --port-file "$work/n4.port" --name n4 --log-level 2 >"$work/n4.log" 2>&1 &
pids+=($!)
port_of "$work/n4.port" >/dev/null || exit 1
wait_log "$work/n4.log" "parent .*TLS: certificate verify failed" &&
  ok "a node of another cluster refuses the root ('certificate verify failed')" ||
  { fail "another cluster's node"; tail -n 3 "$work/n4.log"; }
out=$(RDZV_TLS_DIR=$work/c "$ctl" --addr "$R" --job tlsjob get marker-key-7f3a 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "RDZV_ETLS" <<<"$out" &&
  ok "a client of another cluster is refused by the root" ||
  fail "another cluster's client (rc $rc): $out"
f=$(RDZV_TLS_DIR=$work/rank tstat "$R" tls.failed)
[ "$f" -ge 2 ] && ok "the root counted the failed handshakes (tls.failed $f)" ||
  fail "root tls.failed $f"

# 7. A daemon needs a certificate; a CA alone does not start one.
out=$("$rdzvd" --role root --listen 127.0.0.1:0 --tls-ca "$work/a/ca.crt" 2>&1)
rc=$?
[ "$rc" != 0 ] && grep -q "no certificate" <<<"$out" &&
  ok "rdzvd with a CA and no certificate does not start: $(grep "no certificate" <<<"$out")" ||
  fail "rdzvd without a certificate (rc $rc): $out"

# 8. Between daemons authentication is mutual: a TLS peer without a
# certificate that says it is a node (or a probe) is refused; as a
# client it is admitted.
cat >"$work/hello.py" <<'PY'
import socket, ssl, struct, sys
port, ca, role = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
def items(xs):
    return struct.pack("<I", len(xs)) + b"".join(struct.pack("<I", len(x)) + x for x in xs)
body = struct.pack("<iqq", 0, role, 0) + items([b"tlsjob", b"hello.py"]) + items([])
s.sendall(struct.pack("<IBBHII", 0x565A4452, 1, 1, 0, 1, len(body)) + body)
hdr = b""
while len(hdr) < 16:
    d = s.recv(16 - len(hdr))
    if not d:
        sys.exit("closed before a reply")
    hdr += d
n = struct.unpack("<I", hdr[12:16])[0]
b = b""
while len(b) < n:
    b += s.recv(n - len(b))
status = struct.unpack("<i", b[:4])[0]
text = b""
if n >= 24:
    k = struct.unpack("<I", b[20:24])[0]
    if k > 0:
        ln = struct.unpack("<I", b[24:28])[0]
        text = b[28:28 + ln]
print(status, text.decode(errors="replace"))
PY
out=$(python3 "$work/hello.py" "${N2##*:}" "$work/a/ca.crt" 1 2>&1)
[ "${out%% *}" = -1049 ] && grep -q "a node must show a certificate" <<<"$out" &&
  ok "a node's hello without a certificate: refused (RDZV_ETLS: ${out#* })" ||
  fail "a node without a certificate: $out"
out=$(python3 "$work/hello.py" "${N2##*:}" "$work/a/ca.crt" 2 2>&1)
[ "${out%% *}" = -1049 ] && ok "a probe without a certificate: refused" ||
  fail "a probe without a certificate: $out"
out=$(python3 "$work/hello.py" "${N2##*:}" "$work/a/ca.crt" 0 2>&1)
[ "${out%% *}" = 0 ] && ok "a client's hello without a certificate: admitted" ||
  fail "a client without a certificate: $out"

# 9. A TLS client that pipelines 60 reads of an 8 MiB value, and one that
# ends its session (close_notify) right behind a request: the node seals
# its replies a bounded span at a time (its peak memory stays far below
# the 480 MiB of replies), and the request before the close_notify is
# applied.
cat >"$work/burst.py" <<'PY'
import socket, ssl, struct, sys, time
port, ca, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)))
def items(xs):
    return struct.pack("<I", len(xs)) + b"".join(struct.pack("<I", len(x)) + x for x in xs)
def frame(t, rid, a, keys, vals):
    body = struct.pack("<iqq", 0, a, 0) + items(keys) + items(vals)
    return struct.pack("<IBBHII", 0x565A4452, 1, t, 0, rid, len(body)) + body
def reply():
    hdr = b""
    while len(hdr) < 16:
        hdr += s.recv(16 - len(hdr))
    n = struct.unpack("<I", hdr[12:16])[0]
    b = b""
    while len(b) < n:
        b += s.recv(min(1 << 20, n - len(b)))
    return struct.unpack("<i", b[:4])[0]
s.sendall(frame(1, 1, 0, [b"tlsjob", b"burst.py"], []))
assert reply() == 0
if mode == "burst":
    s.sendall(frame(2, 2, 0, [b"big"], [b"x" * (8 << 20)]))  # SET
    assert reply() == 0
    s.sendall(b"".join(frame(3, 10 + i, 0, [b"big"], []) for i in range(60)))
    got = 0
    for i in range(60):
        assert reply() == 0
        got += 1
    print(got)
else:
    s.sendall(frame(2, 2, 0, [b"before-close"], [b"applied"]))
    s.unwrap()
    print("closed")
PY
pid2=$(pgrep -f -- "--port-file $work/n2.port" | head -n 1)
hwm0=$(awk '/VmHWM/ {print $2}' "/proc/$pid2/status")
out=$(python3 "$work/burst.py" "${N2##*:}" "$work/a/ca.crt" burst 2>&1)
hwm1=$(awk '/VmHWM/ {print $2}' "/proc/$pid2/status")
[ "$out" = 60 ] && [ $((hwm1 - hwm0)) -lt 262144 ] &&
  ok "60 pipelined reads of an 8 MiB value over TLS: all answered, n2's peak memory +$(((hwm1 - hwm0) / 1024)) MiB" ||
  fail "pipelined reads over TLS: [$out], n2's peak memory $hwm0 -> $hwm1 kB"
out=$(python3 "$work/burst.py" "${N2##*:}" "$work/a/ca.crt" close 2>&1)
got=$(RDZV_TLS_DIR=$work/rank "$ctl" --addr "$N2" --job tlsjob get before-close 2>&1)
[ "$got" = applied ] && ok "a request right before the client's close_notify is applied" ||
  fail "a request before close_notify: [$out] [$got]"

for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null || fail "process $p died"; done
echo "$fails failed"
[ "$fails" = 0 ]
