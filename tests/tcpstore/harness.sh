# Shared by tcpstore_test.sh and torch2_test.sh (sourced, after they set
# rdzvd, dir, job and test_name): failures, the last line, daemons.
fails=()
names=()
pids=()

fail() {
  echo "FAIL: $*"
  fails+=("$*")
}

# Prints every daemon's log and the last line "$test_name: PASS" or
# "$test_name: FAIL (...)"; removes $dir; exits 0 or 1.
finish() {
  for f in "$dir"/*.log; do
    [ -s "$f" ] || continue
    echo "---- $(basename "$f") ----"
    cat "$f"
  done
  if [ "${#fails[@]}" -eq 0 ]; then
    echo "$test_name: PASS"
    rm -rf "$dir"
    exit 0
  fi
  echo "$test_name: FAIL (${#fails[@]}: ${fails[*]})"
  rm -rf "$dir"
  exit 1
}

cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null; done
  wait 2>/dev/null
}
trap cleanup EXIT

# The TCPStore front end's options for daemon NAME (its port in
# $dir/NAME.tsport).
tsargs() {
  echo "--tcpstore-listen=127.0.0.1:0" "--tcpstore-job=$job" \
    "--tcpstore-port-file=$dir/$1.tsport"
}

# start NAME ROLE [ARGS...]: an rdzvd with its log in $dir/NAME.log; waits
# (10 s at most) for its port file, and its TCPStore port file when ARGS
# give one.
start() {
  local name=$1 role=$2 a
  shift 2
  "$rdzvd" --role="$role" --name="$name" --listen=127.0.0.1:0 \
    --port-file="$dir/$name.port" --unix="$dir/$name.sock" --log-level=0 \
    "$@" 2>"$dir/$name.log" &
  pids+=($!)
  names+=("$name")
  local want=("$dir/$name.port")
  for a in "$@"; do
    case "$a" in --tcpstore-port-file=*) want+=("${a#*=}") ;; esac
  done
  for _ in $(seq 1000); do
    local ok=1
    for f in "${want[@]}"; do [ -s "$f" ] || ok=0; done
    [ "$ok" = 1 ] && return 0
    if ! kill -0 "${pids[-1]}" 2>/dev/null; then
      wait "${pids[-1]}"
      fail "rdzvd $name exited $? at start"
      return 1
    fi
    sleep 0.01
  done
  fail "rdzvd $name wrote no port file in 10 s"
  return 1
}
