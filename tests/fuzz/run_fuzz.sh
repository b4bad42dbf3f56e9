#!/usr/bin/env bash
# Fuzzes the wire decoder, the TCPStore codec, the etcd client's JSON
# codec, the Slurm host-list codec and the address syntax with
# libFuzzer, each for a bounded time.
#
# Usage: tests/fuzz/run_fuzz.sh [SECONDS]   (default 20)
#
# Builds tests/fuzz/wire_fuzz.c with clang -fsanitize=fuzzer,address,undefined
# directly (not through Bazel), then runs it over a scratch copy of
# tests/fuzz/corpus/ so the checked-in seeds never change. Exits non-zero on
# any crash, sanitizer report, leak or failed property; the crashing input is
# kept and its path printed. Environment: CC (default clang), FUZZ_JOBS is
# not used: one process keeps the run bounded and reproducible.
set -euo pipefail

secs="${1:-20}"
case "$secs" in
  '' | *[!0-9]*)
    echo "usage: $0 [SECONDS]" >&2
    exit 2
    ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cc="${CC:-clang}"
work="$(mktemp -d "${TMPDIR:-/tmp}/rdzv-wire-fuzz.XXXXXX")"

# fuzz NAME SOURCES... : builds tests/fuzz/NAME.c with the SOURCES and
# fuzzes a scratch copy of its corpus for $secs seconds.
fuzz() {
  local name=$1 corpus=$2 dict=$3
  shift 3
  "$cc" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
    -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter \
    -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
    -I"$root/include" -I"$root" \
    "$@" "$root/tests/fuzz/$name.c" -o "$work/$name"
  mkdir "$work/$name.corpus" "$work/$name.artifacts"
  cp "$root/tests/fuzz/$corpus"/* "$work/$name.corpus/"
  local rc=0 extra=()
  [ -n "$dict" ] && extra=(-dict="$root/tests/fuzz/$dict")
  ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" \
    UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
    "$work/$name" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -max_len=4096 -print_final_stats=1 "${extra[@]}" \
    -artifact_prefix="$work/$name.artifacts/" "$work/$name.corpus" || rc=$?
  if [ "$rc" -ne 0 ]; then
    echo "run_fuzz.sh: $name FAILED (exit $rc); inputs kept in $work/$name.artifacts" >&2
    exit "$rc"
  fi
  if [ -n "$(ls -A "$work/$name.artifacts")" ]; then
    echo "run_fuzz.sh: $name FAILED: artifacts in $work/$name.artifacts" >&2
    exit 1
  fi
  echo "run_fuzz.sh: $name OK, no crash in ${secs}s"
}

fuzz wire_fuzz corpus wire.dict "$root/store/wire/wire.c" "$root/store/wire/error.c" \
  "$root/rendezvous/members.c" "$root/rendezvous/topo.c" \
  "$root/rendezvous/join_wire.c" "$root/rendezvous/assign.c" \
  "$root/store/auth/auth.c" -lcrypto
fuzz tcpstore_fuzz tcpstore_corpus "" "$root/store/wire/tcpstore_wire.c" \
  "$root/store/wire/wire.c" "$root/store/wire/error.c"
fuzz etcd_json_fuzz etcd_json_corpus "" "$root/store/etcd/etcd_json.c" \
  "$root/store/etcd/etcd_json_build.c" \
  "$root/store/wire/error.c" -ljansson
fuzz hostlist_fuzz hostlist_corpus hostlist.dict "$root/tools/hostlist.c" \
  "$root/rendezvous/topo.c"
fuzz addr_fuzz addr_corpus "" "$root/store/wire/addr.c" \
  "$root/store/wire/error.c"
rm -rf "$work"
echo "run_fuzz.sh: OK"
