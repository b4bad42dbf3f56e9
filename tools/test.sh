#!/usr/bin/env bash
# Runs every test of rdzv. This is the command CI (.ci/run) and the README
# give.
#
# Usage: tools/test.sh [TARGET_PATTERN...]      (default: //...)
#
# Steps, each run even when an earlier one failed:
#   1. tools/install-deps.sh (fast and offline when nothing is missing);
#   2. bazel test, plain;
#   3. bazel test --config=asan (ASan + UBSan), without targets tagged
#      noasan;
#   4. tests/fuzz/run_fuzz.sh 30, when that script exists;
#   5. tools/check-format.sh: the C sources' layout (docs/style.md).
# Every Bazel test target counts once per configuration (read from Bazel's
# build event file, so a target that fails to build counts as failed); the
# fuzz run and the format check count as one test each. The last line printed is "N passed, N
# failed". The exit status is 0 only when nothing failed.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2

targets=("$@")
if [ "${#targets[@]}" -eq 0 ]; then
  targets=(//...)
fi
work="$(mktemp -d "${TMPDIR:-/tmp}/rdzv-test.XXXXXX")" || exit 2
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
setup_failed=0
failures=() # "CONFIG LABEL STATUS" of each failed test

step() {
  printf '\n==== %s\n' "$*"
}

# Prints "LABEL<TAB>STATUS" for each test target of a build event file:
# the summary of every test that ran, and FAILED_TO_BUILD for a test target
# that failed to build (or whose build was cut short) unless it carries the
# tag $2, which the run's --test_tag_filters excluded.
test_results() {
  jq -rs --arg skip "$2" '
    (map(select(.id.targetConfigured != null and
                .configured.testSize != null))
     | map({key: .id.targetConfigured.label,
            value: (.configured.tag // [])})
     | from_entries) as $tests
    | (map(select(.id.testSummary != null))) as $sums
    | ($sums | map(.id.testSummary.label)) as $ran
    | ($sums[] | [.id.testSummary.label,
                  (.testSummary.overallStatus // "NO_STATUS")] | @tsv),
      (.[] | select(.id.targetCompleted != null)
       | .id.targetCompleted.label as $l
       | select($tests[$l] != null and .completed.success != true)
       | select(($ran | index($l)) == null)
       | select(($tests[$l] | index($skip)) == null)
       | [$l, "FAILED_TO_BUILD"] | @tsv)' "$1"
}

# save_log_tail NAME LABEL: keeps a failed test's FAIL and ERROR lines and
# the end of its log, to be printed just above the summary (CI shows only
# the end of the output, and the next configuration's run overwrites
# bazel-testlogs).
save_log_tail() {
  local path="${2#//}"
  local log
  log="$(bazel info bazel-testlogs 2>/dev/null)/${path/://}/test.log"
  {
    printf '\n---- %s %s (%s): its first 20 lines that say FAIL or ERROR\n' \
      "$1" "$2" "$log"
    grep -m 20 -E 'FAIL|ERROR|[Aa]ssert|error:' "$log" 2>/dev/null ||
      echo "(none)"
    # A randomized test prints "seed N" (its replay) and its plan; the
    # daemons' news (losses, reattachments) is how a rare failure is read.
    if grep -q -E '^seed [0-9]+' "$log" 2>/dev/null; then
      printf -- '---- its seed, plan and the daemons news (last 60 lines)\n'
      grep -E '^seed [0-9]+|^round [0-9]+:|lost the parent|reattaches|restarted|sent again|did not come back' \
        "$log" | tail -n 60
    fi
    printf -- '---- and its last 15 lines\n'
    tail -n 15 "$log" 2>/dev/null || echo "(no log)"
  } >>"$work/log-tails.txt"
}

# count_events NAME BEP_FILE BAZEL_EXIT SKIP_TAG: adds the run's test
# results to the totals. A failed Bazel run with no failed test in it
# (analysis error, bad flag, crash) counts as one failed test, so that it
# cannot pass unseen.
count_events() {
  local name="$1" bep="$2" rc="$3" label status n_fail=0
  if ! command -v jq >/dev/null; then
    failed=$((failed + 1))
    failures+=("$name: cannot read the results: jq is not installed")
    return
  fi
  while IFS=$'\t' read -r label status; do
    if [ "$status" = PASSED ] || [ "$status" = FLAKY ]; then
      passed=$((passed + 1))
    else
      failed=$((failed + 1))
      n_fail=$((n_fail + 1))
      failures+=("$name $label $status")
      save_log_tail "$name" "$label"
    fi
  done < <(test_results "$bep" "$4" 2>/dev/null)
  # 4: the build succeeded but there was no test to run.
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 4 ] && [ "$n_fail" -eq 0 ]; then
    failed=$((failed + 1))
    failures+=("$name: bazel exited with status $rc")
  fi
}

# bazel_tests NAME SKIP_TAG [OPTION...]: bazel test OPTION... on the
# targets, skipping those tagged SKIP_TAG (none if empty). Debian's
# /etc/bazel/bazelrc turns on --sandbox_debug, which buries the output
# under sandbox traces: turn it off.
bazel_tests() {
  local name="$1" skip="$2" rc=0
  local opts=(--keep_going --nosandbox_debug
    --build_event_json_file="$work/$name.json")
  shift 2
  if [ -n "$skip" ]; then
    opts+=(--test_tag_filters=-"$skip")
  fi
  step "bazel test $* ${opts[*]:3} ${targets[*]}"
  bazel test "${opts[@]}" "$@" -- "${targets[@]}" || rc=$?
  count_events "$name" "$work/$name.json" "$rc" "$skip"
}

step "tools/install-deps.sh"
if ! tools/install-deps.sh; then
  echo "test.sh: install-deps.sh failed; running the tests anyway" >&2
  setup_failed=1
fi

bazel_tests plain ""
bazel_tests asan noasan --config=asan

if [ -f tests/fuzz/run_fuzz.sh ]; then
  step "tests/fuzz/run_fuzz.sh 30"
  if bash tests/fuzz/run_fuzz.sh 30; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    failures+=("fuzz tests/fuzz/run_fuzz.sh FAILED")
  fi
fi

step "tools/check-format.sh"
if tools/check-format.sh; then
  passed=$((passed + 1))
else
  failed=$((failed + 1))
  failures+=("format tools/check-format.sh FAILED")
fi

if [ -s "$work/log-tails.txt" ]; then
  step "the failed tests' logs"
  cat "$work/log-tails.txt"
fi
echo
if [ "$setup_failed" -ne 0 ]; then
  echo "test.sh: tools/install-deps.sh failed (see above)"
fi
for f in ${failures[@]+"${failures[@]}"}; do
  echo "test.sh: failed: $f"
done
echo "$passed passed, $failed failed"
if [ "$failed" -ne 0 ] || [ "$setup_failed" -ne 0 ]; then
  exit 1
fi
exit 0
