#!/usr/bin/env bash
# Slurm Epilog (slurm.conf: Epilog=/usr/local/lib/rdzv/epilog.sh): stops
# this job's rdzv daemons on this host and leaves nothing of the job in
# RDZV_RUN_DIR. Slurm runs it on every host of the job when the job ends
# (normally, cancelled, past its time limit), also on hosts whose Prolog
# never ran or failed: each step tolerates what is not there.
#   1. each daemon (node, root) gets SIGTERM (it removes its socket and
#      lock), SIGKILL after 5 s;
#   2. their logs, RDZV_RUN_DIR/<job>.<daemon>.log, are appended to
#      RDZV_LOG_DIR/rdzvd.<host>.log under a line naming the job, host and
#      daemon (or sent to syslog with RDZV_LOG_DIR=syslog), then removed;
#      a log that cannot be filed stays (never lost);
#   3. every other RDZV_RUN_DIR/<job>.* file (the job's secret, socket,
#      lock, pid and port files) is removed.
# Settings as in prolog.sh ($RDZV_SETTINGS, default /etc/default/rdzv).
# With --logs-only it does step 2 alone (the Prolog's failure path).
set -uo pipefail
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
settings=${RDZV_SETTINGS:-/etc/default/rdzv}
# shellcheck source=/dev/null
[ -r "$settings" ] && . "$settings"
run=${RDZV_RUN_DIR:-/run/rdzv}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set}
me=${RDZV_HOSTNAME:-${SLURMD_NODENAME:-$(hostname -s)}}

# slurm.conf's SlurmdLogFile's directory, else /var/log/slurm.
default_log_dir() {
  local conf=${SLURM_CONF:-/etc/slurm/slurm.conf} f
  f=$(sed -n 's/^[[:space:]]*SlurmdLogFile[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip' \
    "$conf" 2>/dev/null | tail -n 1)
  if [ -n "$f" ]; then dirname "$f"; else echo /var/log/slurm; fi
}

file_logs() {
  local logdir=${RDZV_LOG_DIR:-$(default_log_dir)} name log
  for name in root node; do
    log="$run/$job.$name.log"
    [ -e "$log" ] || continue
    if [ "$logdir" = syslog ]; then
      logger -t "rdzvd" -f "$log" 2>/dev/null &&
        logger -t rdzvd "job $job, host $me: $name daemon log ends" &&
        rm -f "$log"
      continue
    fi
    mkdir -p "$logdir" 2>/dev/null
    {
      printf '==== rdzvd %s of job %s on host %s (filed %s)\n' "$name" "$job" \
        "$me" "$(date -u +%Y-%m-%dT%H:%M:%SZ)"
      cat "$log"
    } >>"$logdir/rdzvd.$me.log" 2>/dev/null && rm -f "$log"
  done
}

if [ "${1:-}" = --logs-only ]; then
  file_logs
  exit 0
fi
for name in node root; do
  pidfile="$run/$job.$name.pid"
  [ -r "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  # Only this job's daemon: a pid file may outlive its daemon, and the pid
  # be another process's by now.
  if ! tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null |
    grep -q -- "--job=$job "; then
    continue
  fi
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
done
file_logs
# The job's secret first: it is worth more than the rest (and the daemons
# that read it are gone).
rm -f "$run/$job.secret"
for f in "$run/$job".*; do
  [ -e "$f" ] || continue
  case "$f" in *.log) continue ;; esac # not filed: kept
  rm -f "$f"
done
exit 0
