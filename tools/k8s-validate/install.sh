#!/usr/bin/env bash
# Installs this validator's npm packages, exactly as package-lock.json pins
# them (`npm ci`, no install scripts), into DIR/node_modules; DIR defaults to
# what modules-dir.sh prints. Does nothing when DIR already holds them (the
# .complete mark, written last). Needs npm and the npm registry, or npm's
# cache holding the packages.
#
# Usage: tools/k8s-validate/install.sh [DIR]
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${1:-$("$here/modules-dir.sh")}"
if [ -f "$dest/.complete" ]; then
  echo "k8s-validate/install.sh: the packages are in $dest"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "k8s-validate/install.sh: npm not found" >&2
  exit 1
fi
mkdir -p "$(dirname "$dest")"
tmp="$(mktemp -d "$dest.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$here/package-lock.json" "$tmp/"
(cd "$tmp" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error)
touch "$tmp/.complete"
# Another install may have finished first: keep it.
if [ -f "$dest/.complete" ]; then
  echo "k8s-validate/install.sh: the packages are in $dest"
  exit 0
fi
rm -rf "$dest"
mv -T "$tmp" "$dest"
trap - EXIT
echo "k8s-validate/install.sh: installed the packages in $dest"
