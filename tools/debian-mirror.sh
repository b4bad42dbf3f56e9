#!/usr/bin/env bash
# Prints the Debian mirror to debootstrap from: $RDZV_DEBIAN_MIRROR, else
# the first non-security Debian mirror of this machine's apt sources
# (one-line .list files and deb822 .sources files), else
# http://deb.debian.org/debian. Used by tools/torch2-chroot.sh and
# tools/make-image.sh.
set -euo pipefail
host_mirror() {
  local f
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    awk '$1 == "deb" {
           i = 2
           if ($i ~ /^\[/) { while ($i !~ /\]$/) i++; i++ }
           if ($(i) ~ /\/debian\/?$/ && $(i + 1) !~ /-security/) {
             print $(i); exit
           }
         }' "$f"
  done
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    # deb822 paragraphs: Types, URIs, Suites; comments start with #.
    awk 'function flush() {
           if (types ~ /(^| )deb( |$)/ && suites !~ /-security/) {
             n = split(uris, u, " ")
             for (j = 1; j <= n; j++)
               if (u[j] ~ /\/debian\/?$/) { print u[j]; exit }
           }
           types = uris = suites = ""
         }
         /^#/ { next }
         /^[ \t]*$/ { flush(); next }
         tolower($1) == "types:" { $1 = ""; types = $0 }
         tolower($1) == "uris:" { $1 = ""; uris = $0 }
         tolower($1) == "suites:" { $1 = ""; suites = $0 }
         END { flush() }' "$f"
  done
}
mirror="${RDZV_DEBIAN_MIRROR:-$(host_mirror | head -n 1)}"
echo "${mirror:-http://deb.debian.org/debian}"
