#!/bin/bash
# rdzvd's start-up errors: each refusal exits non-zero with a message that
# says what to fix.
set -u
rdzvd=$PWD/tools/rdzvd
dir=$(mktemp -d /tmp/rdzvd-start-XXXXXX)
fails=0
pid=
trap '[ -n "$pid" ] && kill $pid 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT

# refuses MESSAGE ARGS...: rdzvd ARGS exits non-zero, stderr has MESSAGE.
refuses() {
  local want=$1
  shift
  if timeout 20 "$rdzvd" --log-level=0 "$@" 2>"$dir/err"; then
    echo "FAIL: rdzvd $* started"
    fails=$((fails + 1))
  elif ! grep -qF -- "$want" "$dir/err"; then
    echo "FAIL: rdzvd $*: stderr [$(cat "$dir/err")] lacks [$want]"
    fails=$((fails + 1))
  else
    echo "ok: rdzvd $* -> $want"
  fi
}

refuses "unix:$dir/no/such/dir/r.sock: its directory does not exist" \
  --role=root --unix="$dir/no/such/dir/r.sock"
"$rdzvd" --role=root --unix="$dir/live.sock" --log-level=0 &
pid=$!
for _ in $(seq 100); do [ -S "$dir/live.sock" ] && break; sleep 0.1; done
refuses "unix:$dir/live.sock is in use by a live daemon" \
  --role=root --unix="$dir/live.sock"
refuses "--parent" --role=node --unix="$dir/n.sock" --parent="not an address"
kill $pid
wait $pid 2>/dev/null
pid=

if [ "$fails" -ne 0 ]; then
  echo "$fails check(s) failed"
  exit 1
fi
echo "all rdzvd start-up checks passed"
