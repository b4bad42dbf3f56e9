#!/usr/bin/env bash
# Checks that every C source and header in the repository is laid out as
# .clang-format says (docs/style.md): clang-format 14 in dry-run mode,
# which prints each difference and fails on the first file that has one.
#
# Usage: tools/check-format.sh          (from anywhere in a checkout)
#        tools/check-format.sh --fix    (rewrites the files instead)
#
# Exit status 0: every file is formatted; 1: some are not (the lines are
# printed); 2: clang-format-14 or git is missing. tools/test.sh runs it.
set -uo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root" || exit 2
fmt=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$fmt" ]; then
  echo "check-format.sh: clang-format-14 not found (tools/install-deps.sh)" >&2
  exit 2
fi
mapfile -t files < <(git ls-files '*.c' '*.h')
if [ "${#files[@]}" -eq 0 ]; then
  echo "check-format.sh: no C files found (not a git checkout?)" >&2
  exit 2
fi
if [ "${1:-}" = "--fix" ]; then
  "$fmt" -i "${files[@]}"
  exit 0
fi
if ! "$fmt" --dry-run -Werror "${files[@]}"; then
  echo "check-format.sh: the files above differ from .clang-format's" \
    "layout; run tools/check-format.sh --fix" >&2
  exit 1
fi
echo "check-format.sh: ${#files[@]} files formatted"
