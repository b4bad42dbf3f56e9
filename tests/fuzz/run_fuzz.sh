#!/usr/bin/env bash
# Fuzzes the wire decoder with libFuzzer for a bounded time.
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

"$cc" -std=c11 -D_GNU_SOURCE -g -O1 -fno-omit-frame-pointer \
  -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wno-unused-parameter \
  -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
  -I"$root/include" -I"$root" \
  "$root/store/wire.c" "$root/store/error.c" "$root/tests/fuzz/wire_fuzz.c" \
  -o "$work/wire_fuzz"

mkdir "$work/corpus" "$work/artifacts"
cp "$root"/tests/fuzz/corpus/* "$work/corpus/"

rc=0
ASAN_OPTIONS="detect_leaks=1:abort_on_error=0" \
  UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1" \
  "$work/wire_fuzz" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
  -max_len=4096 -print_final_stats=1 -dict="$root/tests/fuzz/wire.dict" \
  -artifact_prefix="$work/artifacts/" "$work/corpus" || rc=$?

if [ "$rc" -ne 0 ]; then
  echo "run_fuzz.sh: FAILED (exit $rc); inputs kept in $work/artifacts" >&2
  exit "$rc"
fi
if [ -n "$(ls -A "$work/artifacts")" ]; then
  echo "run_fuzz.sh: FAILED: artifacts in $work/artifacts" >&2
  exit 1
fi
rm -rf "$work"
echo "run_fuzz.sh: OK, no crash in ${secs}s"
