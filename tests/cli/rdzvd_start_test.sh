#!/bin/bash
# rdzvd's start-up errors: each refusal exits non-zero with a message that
# says what to fix, writes no --port-file and removes nothing it does not own.
set -u
rdzvd=$PWD/tools/rdzvd
dir=$(mktemp -d /tmp/rdzvd-start-XXXXXX)
fails=0
pid=
pids=()
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; kill "${pids[@]}" 2>/dev/null;
      wait 2>/dev/null; rm -rf "$dir"' EXIT

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# refuses MESSAGE ARGS...: rdzvd ARGS exits non-zero, stderr has MESSAGE.
refuses() {
  local want=$1
  shift
  timeout 5 "$rdzvd" --log-level=0 "$@" 2>"$dir/err"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "rdzvd $* started (status $rc)"
  elif ! grep -qF -- "$want" "$dir/err"; then
    fail "rdzvd $*: stderr [$(cat "$dir/err")] lacks [$want]"
  else
    echo "ok: rdzvd $* -> $want"
  fi
}

# no_port_file FILE: a failed start left no port file behind.
no_port_file() {
  if [ -e "$1" ]; then
    fail "a failed start wrote the port file $1 ($(cat "$1"))"
    rm -f "$1"
  fi
}

# wait_sock PATH: until PATH is a socket (10 s at most).
wait_sock() {
  for _ in $(seq 100); do [ -S "$1" ] && return 0; sleep 0.1; done
  return 1
}

refuses "--tcpstore-job and --tcpstore-port-file need --tcpstore-listen" \
  --role=root --tcpstore-job=J
refuses "--tcpstore-listen needs --tcpstore-job" \
  --role=root --tcpstore-listen=127.0.0.1:0
refuses "unix:$dir/no/such/dir/r.sock: its directory does not exist" \
  --role=root --unix="$dir/no/such/dir/r.sock"

# A failed Unix listen after a good TCP listen publishes no port.
refuses "its directory does not exist" --role=root --listen=127.0.0.1:0 \
  --port-file="$dir/p1.port" --unix="$dir/no/such/dir/r.sock"
no_port_file "$dir/p1.port"

"$rdzvd" --role=root --unix="$dir/live.sock" --log-level=0 &
pid=$!
wait_sock "$dir/live.sock" || fail "rdzvd on $dir/live.sock did not start"
refuses "unix:$dir/live.sock is in use by a live daemon" \
  --role=root --unix="$dir/live.sock"
refuses "unix:$dir/live.sock is in use by a live daemon" --role=root \
  --listen=127.0.0.1:0 --port-file="$dir/p2.port" --unix="$dir/live.sock"
no_port_file "$dir/p2.port"
[ -S "$dir/live.sock" ] || fail "a refused start removed the live socket"
refuses "--parent" --role=node --unix="$dir/n.sock" --parent="not an address"
# A node's liveness timeout must exceed its heartbeat; a root has no
# heartbeat of its own, so a short timeout alone is fine there.
refuses "--liveness-timeout-ms (1000) must exceed --heartbeat-ms (5000)" \
  --role=node --unix="$dir/n.sock" --parent=127.0.0.1:1 --heartbeat-ms=5000 \
  --liveness-timeout-ms=1000
"$rdzvd" --role=root --listen=127.0.0.1:0 --unix="$dir/short.sock" \
  --liveness-timeout-ms=300 --log-level=0 &
short=$!
if wait_sock "$dir/short.sock" && kill -0 "$short" 2>/dev/null; then
  echo "ok: a root with --liveness-timeout-ms 300 starts"
else
  fail "a root with --liveness-timeout-ms 300 did not start"
fi
kill "$short" 2>/dev/null
wait "$short" 2>/dev/null
# The ancestors after the parent are addresses too (at most 16).
refuses "ancestor 'bogus' is not unix:PATH" --role=node --unix="$dir/n.sock" \
  --parent="127.0.0.1:1,bogus"
kill $pid
wait $pid 2>/dev/null
pid=

# Only a stale socket may be replaced: a regular file or a directory at the
# path is refused and left as it was.
echo "precious" >"$dir/file.sock"
refuses "unix:$dir/file.sock exists and is not a socket" \
  --role=root --unix="$dir/file.sock"
[ "$(cat "$dir/file.sock" 2>/dev/null)" = precious ] ||
  fail "rdzvd replaced the regular file $dir/file.sock"
mkdir "$dir/dir.sock"
refuses "unix:$dir/dir.sock exists and is not a socket" \
  --role=root --unix="$dir/dir.sock"
[ -d "$dir/dir.sock" ] || fail "rdzvd removed the directory $dir/dir.sock"

# sun_path holds 107 bytes and a NUL: a longer path is refused, not cut.
long=$dir/$(printf 'x%.0s' $(seq $((108 - ${#dir} - 1))))
[ ${#long} -eq 108 ] || fail "test bug: long path is ${#long} bytes"
refuses "at most 107 bytes" --role=root --unix="$long"
[ -e "${long:0:107}" ] && fail "rdzvd bound the truncated path ${long:0:107}"
refuses "at most 107 bytes" --role=node --parent="unix:$long"
# ... and exactly 107 bytes work.
max=${long:0:107}
"$rdzvd" --role=root --unix="$max" --log-level=0 &
pid=$!
wait_sock "$max" || fail "rdzvd did not listen on a 107-byte path"
kill $pid
wait $pid 2>/dev/null
pid=

# Options that would refuse every client, or contradict each other.
refuses "--max-connections must be at least 1" --max-connections=0
refuses "--hello-timeout-ms must be at least 1" --hello-timeout-ms=0
refuses "--max-outstanding must be at least 1" --max-outstanding=0
refuses "--upstream-timeout-ms must be at least 1" --upstream-timeout-ms=0
refuses "--upstream-wait-max-ms must be at least 1" --upstream-wait-max-ms=0
refuses "--max-key-bytes must be at least 1" --max-key-bytes=0
refuses "--max-frame-bytes must be at least 64" --max-frame-bytes=10
refuses "--flush-ms (50) must not exceed --flush-max-ms (20)" --flush-ms=50
refuses "is its own --listen address" --role=node \
  --listen=127.0.0.1:29999 --parent=127.0.0.1:29999
refuses "is its own --listen address" --role=node \
  --listen=0.0.0.0:29999 --parent=tcp:localhost:29999
refuses "is its own --unix socket" --role=node \
  --unix="$dir/self.sock" --parent="unix:$dir/self.sock"

# The lock on PATH.lock comes before any look at PATH: while another
# process holds it, rdzvd refuses and leaves PATH alone, even a stale
# socket; once it is free, the stale socket is taken over.
"$rdzvd" --role=root --unix="$dir/held.sock" --log-level=0 &
pid=$!
wait_sock "$dir/held.sock" || fail "rdzvd on $dir/held.sock did not start"
kill -KILL $pid
wait $pid 2>/dev/null
pid=
[ -S "$dir/held.sock" ] || fail "test bug: no stale socket after kill -9"
# One process holds the lock (flock(1) would leave its child holding it).
# It waits for the lock (no -n): the probe below takes it for a moment.
(exec 9>>"$dir/held.sock.lock" && flock 9 && exec sleep 60) &
pid=$!
for _ in $(seq 100); do
  flock -n "$dir/held.sock.lock" true || break
  sleep 0.1
done
refuses "unix:$dir/held.sock is in use by a live daemon" \
  --role=root --listen=127.0.0.1:0 --port-file="$dir/p3.port" \
  --unix="$dir/held.sock"
no_port_file "$dir/p3.port"
[ -S "$dir/held.sock" ] || fail "rdzvd removed a socket whose lock is held"
kill $pid
wait $pid 2>/dev/null
"$rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/p3.port" \
  --unix="$dir/held.sock" --log-level=0 &
pid=$!
for _ in $(seq 100); do [ -s "$dir/p3.port" ] && break; sleep 0.1; done
[ -s "$dir/p3.port" ] || fail "rdzvd did not take over the stale socket"
kill $pid
wait $pid 2>/dev/null
pid=
[ -e "$dir/held.sock" ] && fail "the socket outlived its daemon"
[ -e "$dir/held.sock.lock" ] && fail "the lock file outlived its daemon"

# Several daemons started at once on one path: exactly one serves; the
# others say so, publish no port and leave its socket alone.
n=12
for round in 1 2 3 4 5; do
  pids=()
  for i in $(seq $n); do
    "$rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/race$i.port" \
      --unix="$dir/race.sock" --log-level=0 2>"$dir/race$i.err" &
    pids+=($!)
  done
  # Until one is left serving (3 s at most: two that both serve stay up).
  for _ in $(seq 30); do
    alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
    [ "$alive" -le 1 ] && [ -S "$dir/race.sock" ] && break
    sleep 0.1
  done
  sleep 0.2
  alive=0
  for i in $(seq $n); do
    if kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
      alive=$((alive + 1))
      [ -s "$dir/race$i.port" ] || fail "round $round: serving daemon $i wrote no port file"
    else
      grep -qF "in use by a live daemon" "$dir/race$i.err" ||
        fail "round $round: daemon $i: [$(cat "$dir/race$i.err")]"
      [ -e "$dir/race$i.port" ] && fail "round $round: refused daemon $i wrote its port file"
    fi
  done
  [ "$alive" -eq 1 ] || fail "round $round: $alive daemons serve $dir/race.sock (want 1)"
  [ -S "$dir/race.sock" ] || fail "round $round: $dir/race.sock is gone"
  kill "${pids[@]}" 2>/dev/null
  wait "${pids[@]}" 2>/dev/null
  pids=()
  rm -f "$dir"/race*.port
  [ -e "$dir/race.sock" ] && fail "round $round: the socket outlived its daemon"
  [ -e "$dir/race.sock.lock" ] && fail "round $round: the lock file outlived its daemon"
done
echo "ok: concurrent starts on one path: one serves"

# Dropped connections are logged at most 10 a second, and the next line
# says how many were left out (a peer breaking rules in a loop must not
# fill the disk); the daemon keeps serving.
"$rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/flood.port" \
  --log-level=1 2>"$dir/flood.log" &
fpid=$!
for _ in $(seq 100); do [ -s "$dir/flood.port" ] && break; sleep 0.1; done
fport=$(cat "$dir/flood.port")
for _ in $(seq 200); do
  (exec 3<>"/dev/tcp/127.0.0.1/$fport" && printf 'not a frame at all' >&3) \
    2>/dev/null
done
sleep 1.2
(exec 3<>"/dev/tcp/127.0.0.1/$fport" && printf 'not a frame at all' >&3) \
  2>/dev/null
sleep 0.3
kill "$fpid"
wait "$fpid" 2>/dev/null
logged=$(grep -c "dropped:" "$dir/flood.log")
if [ "$logged" -ge 100 ] || ! grep -q "more dropped connections not logged" "$dir/flood.log"; then
  echo "FAIL: 201 bad peers gave $logged log lines, or no 'not logged' count"
  fails=$((fails + 1))
else
  echo "ok: 201 bad peers, $logged log lines: $(grep 'not logged' "$dir/flood.log" | tail -1)"
fi

# Signals that end a process by default but mean nothing to a daemon are
# logged and ignored; a crash is said before the process dies of it.
"$rdzvd" --role=root --listen=127.0.0.1:0 --port-file="$dir/sig.port" \
  --log-level=1 2>"$dir/sig.log" &
spid=$!
for _ in $(seq 100); do [ -s "$dir/sig.port" ] && break; sleep 0.1; done
for s in HUP USR1 USR2 ALRM PROF VTALRM; do kill -"$s" "$spid"; done
sleep 0.5
if kill -0 "$spid" 2>/dev/null && [ "$(grep -c ': ignored' "$dir/sig.log")" -eq 6 ]; then
  echo "ok: SIGHUP, SIGUSR1, SIGUSR2, SIGALRM, SIGPROF, SIGVTALRM logged and ignored"
else
  echo "FAIL: an ignorable signal ended the daemon or went unlogged: [$(cat "$dir/sig.log")]"
  fails=$((fails + 1))
fi
kill -SEGV "$spid"
wait "$spid" 2>/dev/null
st=$?
if [ "$st" -eq 139 ] && grep -q "fatal signal 11" "$dir/sig.log"; then
  echo "ok: a fatal signal is logged (exit status $st)"
else
  echo "FAIL: SIGSEGV: exit status $st, log [$(tail -2 "$dir/sig.log")]"
  fails=$((fails + 1))
fi

# A failed start does not say "stopping" (it never started).
"$rdzvd" --role=root --listen=192.0.2.1:1 --log-level=1 >/dev/null 2>"$dir/fail.log"
[ -s "$dir/fail.log" ] || { echo "FAIL: a start that cannot bind said nothing"; fails=$((fails + 1)); }
if grep -q stopping "$dir/fail.log"; then
  echo "FAIL: a failed start said 'stopping': [$(cat "$dir/fail.log")]"
  fails=$((fails + 1))
else
  echo "ok: a failed start says only why"
fi

# A bad value from the environment names the variable.
out=$(RDZVD_MAX_CONNECTIONS=lots "$rdzvd" --role=root 2>&1)
st=$?
if [ "$st" -eq 2 ] && [[ "$out" == *"RDZVD_MAX_CONNECTIONS=lots"* ]]; then
  echo "ok: a bad environment value is named (exit 2): $out"
else
  echo "FAIL: RDZVD_MAX_CONNECTIONS=lots: exit $st: $out"
  fails=$((fails + 1))
fi

# --version and --help: stdout, exit status 0.
if v=$("$rdzvd" --version) && [ -n "$v" ] && "$rdzvd" --help | grep -q -- --job-linger-ms; then
  echo "ok: $v; --help lists the options"
else
  echo "FAIL: rdzvd --version or --help"
  fails=$((fails + 1))
fi

# A clean stop removes the port file it wrote (a script waiting for it
# must not read a stale port); the flood daemon above stopped with SIGTERM.
if [ -e "$dir/flood.port" ]; then
  echo "FAIL: the port file outlived a clean stop"
  fails=$((fails + 1))
else
  echo "ok: a clean stop removed its port file"
fi

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all rdzvd start-up checks passed"
