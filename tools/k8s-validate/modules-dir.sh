#!/usr/bin/env bash
# Prints the folder where install.sh puts this validator's npm packages and
# where //tests/k8s:manifests_test looks for them:
# /var/cache/rdzv/k8s-validate/<the first 16 hex digits of the sha256 of
# package.json and package-lock.json>, so that a changed lock file names
# another folder (installed anew) and checkouts with the same lock share one.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
sum="$(cat "$here/package.json" "$here/package-lock.json" | sha256sum | cut -c1-16)"
echo "/var/cache/rdzv/k8s-validate/$sum"
