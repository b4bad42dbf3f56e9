#!/bin/bash
# Who may reach a daemon, as its options say at start-up: --allow-uids
# refused naming the bad entry (and accepted as uids or user names, the
# socket's mode saying so); the TCPStore front end on loopback by default
# (the bound address read from /proc/net/tcp), a public address refused
# without --tcpstore-remote, and with it bound and warned about.
set -u
rdzvd=$PWD/tools/rdzvd
dir=$(mktemp -d /tmp/rdzv-access-XXXXXX)
fails=0
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

fail() {
  echo "FAIL: $*"
  fails=$((fails + 1))
}

# refuses MESSAGE ARGS...: rdzvd ARGS exits non-zero, stderr has MESSAGE,
# and no port file was written.
refuses() {
  local want=$1
  shift
  rm -f "$dir/ts.port"
  timeout 5 "$rdzvd" --log-level=0 "$@" 2>"$dir/err"
  local rc=$?
  if [ "$rc" -eq 0 ] || [ "$rc" -eq 124 ]; then
    fail "rdzvd $* started (status $rc)"
  elif ! grep -qF -- "$want" "$dir/err"; then
    fail "rdzvd $*: stderr [$(cat "$dir/err")] lacks [$want]"
  else
    echo "ok: rdzvd $* -> $want"
  fi
  [ -e "$dir/ts.port" ] && fail "a refused start wrote $dir/ts.port"
}

# wait_file PATH: until PATH exists, or the daemon started last ($pid)
# exited, or 120 s passed (a bound for a hung daemon, not a time asserted:
# a loaded machine once took over 10 s).
wait_file() {
  local end=$((SECONDS + 120))
  while [ "$SECONDS" -lt "$end" ]; do
    [ -e "$1" ] && return 0
    [ -n "${pid:-}" ] && ! kill -0 "$pid" 2>/dev/null && { [ -e "$1" ]; return; }
    sleep 0.1
  done
  return 1
}

# start ARGS...: rdzvd ARGS in the background (pid in $pid), its log in
# $dir/log.
start() {
  rm -f "$dir/ts.port"
  # Emptied here, not by the child's redirection: until the child runs,
  # the previous daemon's "listening on" would satisfy a wait for this
  # one's (a flake in a fresh-clone CI under ASan).
  : >"$dir/log"
  "$rdzvd" --role=root --listen=127.0.0.1:0 "$@" 2>>"$dir/log" &
  pid=$!
}

stop() {
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  pid=
}

# listening_addr PORT: the local IPv4 address of the TCP socket listening
# on PORT (from /proc/net/tcp, state 0A), dotted; empty if none.
listening_addr() {
  local want hex
  want=$(printf '%04X' "$1")
  hex=$(awk -v p="$want" '$4 == "0A" { split($2, a, ":"); if (a[2] == p) print a[1] }' \
    /proc/net/tcp | head -n 1)
  [ -n "$hex" ] || return 0
  # Little-endian on x86: 0100007F is 127.0.0.1.
  printf '%d.%d.%d.%d\n' "0x${hex:6:2}" "0x${hex:4:2}" "0x${hex:2:2}" "0x${hex:0:2}"
}

# ---- --allow-uids ------------------------------------------------------
refuses "--allow-uids 'root,,7': entry 2 is empty" \
  --role=root --allow-uids=root,,7
refuses "--allow-uids: 'no-such-user-rdzv' is neither a numeric uid nor a user name known to this host" \
  --role=root --allow-uids=0,no-such-user-rdzv
refuses "--allow-uids: '4294967295' is not a uid in 0..4294967294" \
  --role=root --allow-uids=4294967295
refuses "--allow-uids: '12x' is not a uid" --role=root --allow-uids=12x
RDZVD_ALLOW_UIDS=",1" timeout 5 "$rdzvd" --role=root 2>"$dir/err"
if [ $? -ne 2 ] || ! grep -qF "entry 1 is empty (from the environment: RDZVD_ALLOW_UIDS=,1)" "$dir/err"; then
  fail "RDZVD_ALLOW_UIDS=,1: [$(cat "$dir/err")]"
else
  echo "ok: RDZVD_ALLOW_UIDS=,1 refused, naming the variable"
fi

# Names and numbers: a socket other uids may reach is 0666 (the uid check
# does the work), one of this daemon's uid and root only 0600.
mkdir -p "$dir/a" "$dir/b"
start --unix="$dir/a/r.sock" --allow-uids=nobody,12345,root --log-level=1
if wait_file "$dir/a/r.sock" && sleep 0.2 && kill -0 "$pid" 2>/dev/null; then
  mode=$(stat -c %a "$dir/a/r.sock")
  dmode=$(stat -c %a "$dir/a")
  [ "$mode" = 666 ] || fail "--allow-uids=nobody,12345,root: socket mode $mode, not 666"
  [ "$dmode" = 711 ] || fail "--allow-uids=nobody,12345,root: directory mode $dmode, not 711"
  grep -qF "mode 0666, every peer's uid checked (--allow-uids nobody,12345,root" "$dir/log" ||
    fail "the log does not say the socket's mode: [$(cat "$dir/log")]"
  echo "ok: --allow-uids=nobody,12345,root: socket $mode, directory $dmode"
else
  fail "rdzvd --allow-uids=nobody,12345,root did not start: [$(cat "$dir/log")]"
fi
stop
RDZVD_ALLOW_UIDS="0,$(id -u)" start --unix="$dir/b/r.sock" --log-level=1
if wait_file "$dir/b/r.sock" && sleep 0.2 && kill -0 "$pid" 2>/dev/null; then
  mode=$(stat -c %a "$dir/b/r.sock")
  [ "$mode" = 600 ] || fail "RDZVD_ALLOW_UIDS=0,$(id -u): socket mode $mode, not 600"
  echo "ok: RDZVD_ALLOW_UIDS naming only root and this uid: socket $mode"
else
  fail "rdzvd with RDZVD_ALLOW_UIDS=0,$(id -u) did not start: [$(cat "$dir/log")]"
fi
stop

# The socket's directory: tightened only when it is this daemon's and
# meant for it. Beside another daemon's socket (a shared run directory,
# as the Slurm Prolog's) it stays reachable (0711) for that daemon's
# peers; a sticky directory, or one of another uid, is left alone.
# dir_mode_logged DIR MODE LOGLINE ARGS...: rdzvd ARGS (a Unix socket in
# DIR) leaves DIR at MODE and logs LOGLINE.
dir_mode_logged() {
  local d=$1 want=$2 line=$3
  shift 3
  start --log-level=1 "$@"
  local end=$((SECONDS + 120)) # see wait_file
  while [ "$SECONDS" -lt "$end" ] && ! grep -q "listening on" "$dir/log" &&
    kill -0 "$pid" 2>/dev/null; do
    sleep 0.1
  done
  local got
  got=$(stat -c %a "$d")
  if [ "$got" != "$want" ]; then
    fail "rdzvd $*: directory mode $got, not $want: [$(cat "$dir/log")]"
  elif ! grep -qF -- "$line" "$dir/log"; then
    fail "rdzvd $*: the log lacks [$line]: [$(cat "$dir/log")]"
  else
    echo "ok: rdzvd $* -> directory $got ($line)"
  fi
}
mkdir -p "$dir/shared"
chmod 0755 "$dir/shared"
# The first daemon logs to a file of its own: sharing the second one's,
# its writes at its own offset after the second start truncated the file
# left the second's lines unread once (a flake in a fresh-clone CI).
"$rdzvd" --role=root --listen=127.0.0.1:0 --unix="$dir/shared/job1.sock" \
  --allow-uids=nobody --log-level=1 2>"$dir/log.first" &
other=$!
wait_file "$dir/shared/job1.sock" || fail "the first daemon of $dir/shared did not start"
pid=
dir_mode_logged "$dir/shared" 711 "its directory $dir/shared: mode 0711 already (it holds other daemons' sockets)" \
  --unix="$dir/shared/job2.sock"
stop
kill "$other"
wait "$other" 2>/dev/null
mkdir -p "$dir/sticky" "$dir/theirs"
chmod 1777 "$dir/sticky"
dir_mode_logged "$dir/sticky" 1777 "its directory $dir/sticky (mode 1777) left as it is: a shared sticky directory" \
  --unix="$dir/sticky/r.sock"
stop
if [ "$(id -u)" -ne 0 ]; then
  echo "skipped: a directory of another uid (needs root to chown it)"
elif ! chown nobody "$dir/theirs"; then
  fail "cannot chown $dir/theirs to nobody as root"
else
  chmod 0777 "$dir/theirs"
  dir_mode_logged "$dir/theirs" 777 "its directory $dir/theirs (mode 0777) left as it is: owned by uid $(id -u nobody), not this daemon's ($(id -u))" \
    --unix="$dir/theirs/r.sock"
  stop
fi
mkdir -p "$dir/own"
chmod 0755 "$dir/own"
dir_mode_logged "$dir/own" 700 "its directory $dir/own: mode 0755 -> 0700" --unix="$dir/own/r.sock"
stop

# ---- the TCPStore front end ---------------------------------------------
refuses "--tcpstore-listen '0.0.0.0:0': 0.0.0.0 is not a loopback address" \
  --role=root --tcpstore-listen=0.0.0.0:0 --tcpstore-job=J \
  --tcpstore-port-file="$dir/ts.port"
refuses "give --tcpstore-remote to serve it there anyway" \
  --role=root --tcpstore-listen=[::]:0 --tcpstore-job=J \
  --tcpstore-port-file="$dir/ts.port"
refuses "--tcpstore-listen '10.0.0.1:0': 10.0.0.1 is not a loopback address" \
  --role=root --tcpstore-listen=10.0.0.1:0 --tcpstore-job=J \
  --tcpstore-remote=no --tcpstore-port-file="$dir/ts.port"
refuses "--tcpstore-remote needs --tcpstore-listen" --role=root --tcpstore-remote
refuses "--tcpstore-remote: 'maybe' is neither yes nor no" --role=root \
  --tcpstore-listen=0 --tcpstore-job=J --tcpstore-remote=maybe
refuses "--tcpstore-listen '127.0.0.1:5-9' is neither PORT nor HOST:PORT" \
  --role=root --tcpstore-listen=127.0.0.1:5-9 --tcpstore-job=J

# serves ADDR_WANT WARN(yes|no) ARGS...: rdzvd ARGS binds the front end at
# ADDR_WANT, and warns (or not) that the port is open to anyone.
serves() {
  local want=$1 warn=$2
  shift 2
  start --tcpstore-job=J --tcpstore-port-file="$dir/ts.port" "$@"
  if ! wait_file "$dir/ts.port"; then
    fail "rdzvd $*: no TCPStore port: [$(cat "$dir/log")]"
    stop
    return
  fi
  local port got
  port=$(cat "$dir/ts.port")
  got=$(listening_addr "$port")
  if [ "$got" != "$want" ]; then
    fail "rdzvd $*: the TCPStore port $port is bound to [$got], not $want"
  elif [ "$warn" = yes ] &&
    ! grep -qF "warning: the TCPStore front end listens on $want:$port, not a loopback address (--tcpstore-remote): PyTorch's TCPStore protocol has no authentication, so anyone who reaches that port can read and write job J's keys" "$dir/log"; then
    fail "rdzvd $*: no warning in [$(cat "$dir/log")]"
  elif [ "$warn" = no ] && grep -qF "warning:" "$dir/log"; then
    fail "rdzvd $*: a warning on loopback: [$(cat "$dir/log")]"
  else
    echo "ok: rdzvd $* -> bound to $got:$port (warned: $warn)"
  fi
  stop
}

serves 127.0.0.1 no --tcpstore-listen=0
serves 127.0.0.1 no --tcpstore-listen=localhost:0
serves 127.0.0.2 no --tcpstore-listen=127.0.0.2:0
serves 0.0.0.0 yes --tcpstore-listen=0.0.0.0:0 --tcpstore-remote
RDZVD_TCPSTORE_REMOTE=1 serves 0.0.0.0 yes --tcpstore-listen=0.0.0.0:0

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all passed"
