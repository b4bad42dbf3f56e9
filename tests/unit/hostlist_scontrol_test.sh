#!/bin/bash
# Differential test: `rdzvctl hostnames LIST` against Slurm's
# `scontrol show hostnames LIST` over generated lists, most of them valid,
# the rest broken by one edit. Where both accept a list, the outputs must
# be byte for byte equal; where scontrol rejects one (it exits 0, so
# "rejects" means it printed anything on stderr, or died), rdzvctl must
# exit 2. rdzvctl may also reject a list that scontrol accepts, but only
# for the reasons hostlist.h lists as stricter than scontrol (scontrol
# then prints names that are not in the list, or drops hosts); they are
# counted and shown.
#
# Needs scontrol (Debian: slurm-client, in tools/install-deps.sh) and
# fails when it is missing. HOSTLIST_DIFF_SEED and HOSTLIST_DIFF_COUNT
# (default 42 and 500) pick other lists.
set -u
export LC_ALL=C
ctl=$PWD/tools/rdzvctl
seed=${HOSTLIST_DIFF_SEED:-42}
count=${HOSTLIST_DIFF_COUNT:-500}

if ! command -v scontrol >/dev/null; then
  echo "FAIL: scontrol not found in PATH ($PATH): this test compares" \
    "against Slurm's own expansion; install slurm-client" \
    "(tools/install-deps.sh)" >&2
  exit 1
fi
dir=$(mktemp -d "${TEST_TMPDIR:-/tmp}/hostlist-diff.XXXXXX")
trap 'rm -rf "$dir"' EXIT
printf 'ClusterName=x\nSlurmctldHost=localhost\n' >"$dir/slurm.conf"
export SLURM_CONF=$dir/slurm.conf

# One list per line: names of literal parts and bracket groups with a few
# ranges, sometimes zero-padded, blank- or '+'-prefixed, wide or reversed;
# 40% get one random edit (a bracket, comma, dash, blank, 'x' or digit
# inserted, or a byte deleted or replaced). An LCG, so that a seed gives
# the same lists with every awk (Park-Miller: exact in doubles).
generate() {
  awk -v seed="$seed" -v count="$count" '
    function rnd(n) { seed = (seed * 16807) % 2147483647
                      return int(seed / 64) % n }
    # num(), piece(), group() and token() leave their value or host count
    # in numv, pc, gc and tc: a list stays under 5000 hosts before its
    # edit, so that both tools stay fast.
    function num(  s) {
      numv = rnd(16) == 0 ? 65530 + rnd(8) : rnd(13)
      s = sprintf("%0" (1 + rnd(3)) "d", numv)
      if (rnd(12) == 0) s = " " s
      if (rnd(20) == 0) s = "+" s
      return s }
    function piece(  lo, lov, s, hiv) {
      lo = num(); lov = numv; s = lo; hiv = lov
      if (rnd(2)) {
        if (rnd(10) == 0) { s = s "-" num(); hiv = numv }
        else { hiv = lov + rnd(4); s = s "-" sprintf("%0" length(lo) "d", hiv) }
      }
      if (rnd(30) == 0) s = s "-"
      pc = hiv >= lov ? hiv - lov + 1 : 0
      return s }
    function group(  s, k, n) {
      n = 1 + rnd(3); s = "["; gc = 0
      for (k = 0; k < n; k++) { s = s (k ? "," : "") piece(); gc += pc }
      return s "]" }
    function token(  s, k, n) {
      s = lit[1 + rnd(nlit)]
      n = rnd(4); tc = 1
      if (n == 0) return s (rnd(3) ? num() : "")
      for (k = 0; k < n; k++) {
        s = s group(); tc *= gc
        if (k + 1 < n) s = s mid[1 + rnd(nmid)]
      }
      return s }
    function edit(s,  at, c) {
      at = 1 + rnd(length(s) + 1); c = substr(ops, 1 + rnd(length(ops)), 1)
      if (rnd(3) == 0) return substr(s, 1, at - 1) substr(s, at + 1)
      if (rnd(2)) return substr(s, 1, at - 1) c substr(s, at + 1)
      return substr(s, 1, at - 1) c substr(s, at) }
    BEGIN {
      seed = seed % 2147483647; if (seed <= 0) seed += 2147483646
      nlit = split("n gpu- rack node cpn-m11- a x.y b0 - n0 é", lit, " ")
      nmid = split("_blade - . x b 0", mid, " ")
      nsep = 4; sep[1] = ","; sep[2] = ",,"; sep[3] = " "; sep[4] = ", "
      ops = "[],- x+y09"
      for (i = 0; i < count; i++) {
        do {
          n = 1 + rnd(4); s = ""; hosts = 0
          for (k = 0; k < n; k++) {
            s = s (k ? sep[1 + rnd(nsep)] : "") token(); hosts += tc
          }
          if (rnd(40) == 0) { s = s "\t" token(); hosts += tc }
        } while (hosts > 5000)
        if (rnd(10) < 4) s = edit(s)
        print s
      }
    }'
}

generate >"$dir/lists"
fails=0 same=0 both_rejected=0 stricter=0 skipped=0
stricter_reasons="'\\[' without '\\]'|'\\]' without '\\['|'\\[' inside brackets"
stricter_reasons+="|control character|number too large"
stricter_reasons+="|group before the last expands"
: >"$dir/stricter"
while IFS= read -r list; do
  "$ctl" hostnames -- "$list" >"$dir/ours" 2>"$dir/ours.err"
  orc=$?
  # An edit can make a list huge ("6553-65536" from "65533-65536"), and
  # scontrol takes seconds for 10^5 hosts and minutes for 10^6 (the golden
  # vectors hold large lists): skip those.
  if { [ "$orc" -eq 0 ] && [ "$(wc -l <"$dir/ours")" -gt 20000 ]; } ||
    { [ "$orc" -eq 2 ] &&
      grep -q 'host list has more than' "$dir/ours.err"; }; then
    skipped=$((skipped + 1))
    continue
  fi
  # "hostnames=LIST": scontrol's getopt would take a leading '-' for an
  # option. A crash (it has SIGSEGVs on some lists) counts as a rejection.
  (scontrol show "hostnames=$list" >"$dir/theirs" 2>"$dir/theirs.err") \
    2>/dev/null
  src=$?
  theirs_rejected=0
  if [ "$src" -ne 0 ] || [ -s "$dir/theirs.err" ]; then
    theirs_rejected=1
  fi
  if [ "$orc" -ne 0 ] && [ "$orc" -ne 2 ]; then
    echo "FAIL: [$list]: rdzvctl exit $orc: $(cat "$dir/ours.err")"
    fails=$((fails + 1))
  elif [ "$orc" -eq 0 ] && [ "$theirs_rejected" -eq 0 ]; then
    if cmp -s "$dir/ours" "$dir/theirs"; then
      same=$((same + 1))
    else
      echo "FAIL: [$list]: outputs differ:"
      diff "$dir/theirs" "$dir/ours" | head -10
      fails=$((fails + 1))
    fi
  elif [ "$orc" -eq 0 ]; then
    echo "FAIL: [$list]: scontrol rejects it (exit $src:" \
      "$(head -2 "$dir/theirs.err")), rdzvctl printed $(wc -l <"$dir/ours")" \
      "names"
    fails=$((fails + 1))
  elif [ "$theirs_rejected" -eq 1 ]; then
    both_rejected=$((both_rejected + 1))
  elif grep -qE "$stricter_reasons" "$dir/ours.err"; then
    stricter=$((stricter + 1))
    printf '  [%s]: scontrol printed %s name(s), first [%s]; %s\n' "$list" \
      "$(wc -l <"$dir/theirs")" "$(head -1 "$dir/theirs")" \
      "$(cat "$dir/ours.err")" >>"$dir/stricter"
  else
    echo "FAIL: [$list]: scontrol accepts it ($(wc -l <"$dir/theirs")" \
      "names, first [$(head -1 "$dir/theirs")]), rdzvctl:" \
      "$(cat "$dir/ours.err")"
    fails=$((fails + 1))
  fi
done <"$dir/lists"

total=$(wc -l <"$dir/lists")
echo "hostlist_scontrol_test: seed $seed: $total lists: $same expanded" \
  "identically, $both_rejected rejected by both, $stricter rejected only" \
  "by rdzvctl (stricter), $skipped skipped (over 20000 hosts), $fails failed"
if [ "$stricter" -gt 0 ]; then
  echo "rejected only by rdzvctl (first 10):"
  head -10 "$dir/stricter"
fi
# A generator or a data path gone wrong must not pass quietly.
if [ "$total" -ne "$count" ] || [ "$same" -lt $((count / 3)) ] ||
  [ "$skipped" -gt $((count / 20)) ] ||
  [ "$both_rejected" -lt $((count / 10)) ]; then
  echo "FAIL: too few lists of each kind ($total lists)"
  fails=$((fails + 1))
fi
[ "$fails" -eq 0 ]
