#!/usr/bin/env bash
# Slurm Epilog: stops this job's rdzv daemons on this host (SIGTERM: a
# clean stop) and removes their socket, lock, pid and port files (a daemon
# removes its socket and lock itself on SIGTERM; not after SIGKILL). Logs
# stay.
set -uo pipefail
[ -r /etc/default/rdzv ] && . /etc/default/rdzv
run=${RDZV_RUN_DIR:-/run/rdzv}
job=${SLURM_JOB_ID:?SLURM_JOB_ID is not set}
for name in node root; do
  pidfile="$run/$job.$name.pid"
  [ -r "$pidfile" ] || continue
  pid=$(cat "$pidfile")
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null
  rm -f "$pidfile" "$run/$job.$name.port"
done
rm -f "$run/$job.sock" "$run/$job.sock.lock" "$run/$job.tcpstore.port"
exit 0
