#!/usr/bin/env bash
# A real Slurm 22.05 cluster on this machine, for tests: munged, slurmctld
# and N slurmd, each slurmd its own node (NodeName nI, its own loopback
# address 127.0.1.I and port), as slurm-k8s.md §1.3 verified.
#
# Usage: tests/slurm/cluster.sh up DIR N PROLOG EPILOG TASKPROLOG
#        tests/slurm/cluster.sh down DIR
#
# up writes DIR/slurm.conf (PrologFlags=Alloc; partition "ci"; CPUs=8 per
# node with config_overrides, so that two jobs of 4 tasks fit on each) and starts the
# daemons, then waits until every node is idle. Node names resolve only
# where DIR/hosts is /etc/hosts: run the caller in a private mount
# namespace that binds it (tests/slurm/slurm_test.sh does). down stops
# what up started, by the pids in DIR (and munged only if up started it).
# Needs root, slurm-wlm and munge (tools/install-deps.sh installs them).
set -euo pipefail

cmd=${1:?usage: cluster.sh up DIR N PROLOG EPILOG TASKPROLOG | down DIR}
D=${2:?DIR}
export SLURM_CONF=$D/slurm.conf

# Waits until pid $1 is gone (zombies count as gone: PID 1 reaps late
# here), at most 10 s.
wait_gone() {
  local i st
  for i in $(seq 100); do
    st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
    [ "$st" = Z ] && return 0
    sleep 0.1
  done
  return 1
}

stop_pidfile() {
  local f=$1 pid
  [ -s "$f" ] || return 0
  pid=$(cat "$f")
  kill "$pid" 2>/dev/null || true
  wait_gone "$pid" || kill -9 "$pid" 2>/dev/null || true
  rm -f "$f"
}

if [ "$cmd" = down ]; then
  for f in "$D"/slurmd.*.pid "$D/slurmctld.pid"; do
    [ -e "$f" ] && stop_pidfile "$f"
  done
  if [ -e "$D/munged.started" ]; then
    stop_pidfile /run/munge/munged.pid
    rm -f "$D/munged.started"
  fi
  exit 0
fi

[ "$cmd" = up ] || { echo "cluster.sh: unknown command $cmd" >&2; exit 2; }
N=${3:?N}
PROLOG=${4:?PROLOG}
EPILOG=${5:?EPILOG}
TASKPROLOG=${6:?TASKPROLOG}
for t in slurmctld slurmd munged munge; do
  command -v "$t" >/dev/null || [ -x "/usr/sbin/$t" ] || {
    echo "cluster.sh: $t is not installed (tools/install-deps.sh)" >&2
    exit 1
  }
done

mkdir -p "$D"
# munge: its key comes with the package; /run/munge has no tmpfiles here.
if [ ! -s /etc/munge/munge.key ]; then
  dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
  chown munge:munge /etc/munge/munge.key
  chmod 400 /etc/munge/munge.key
fi
install -d -o munge -g munge -m 0755 /run/munge
if ! munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; then
  runuser -u munge -- /usr/sbin/munged
  touch "$D/munged.started"
fi

mkdir -p "$D/state" "$D/log" "$D/out"
{
  echo "127.0.0.1 localhost"
  for i in $(seq "$N"); do echo "127.0.1.$i n$i"; done
} >"$D/hosts"
cat >"$SLURM_CONF" <<CONF
ClusterName=rdzvci
SlurmctldHost=localhost
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
MpiDefault=none
SlurmctldPort=26817
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd.%n.pid
SlurmctldLogFile=$D/log/slurmctld.log
SlurmdLogFile=$D/log/slurmd.%n.log
PrologFlags=Alloc
Prolog=$PROLOG
Epilog=$EPILOG
TaskProlog=$TASKPROLOG
KillWait=2
MinJobAge=300
NodeName=n[1-$N] NodeHostname=localhost NodeAddr=127.0.1.[1-$N] Port=[27001-$((27000 + N))] CPUs=8
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF
slurmctld -f "$SLURM_CONF"
for i in $(seq "$N"); do
  mkdir -p "$D/spool/n$i"
  slurmd -f "$SLURM_CONF" -N "n$i"
done
# Bounded by time, not by tries: a query of a slurmctld that died at start
# can itself hang (each sinfo gets 5 s).
deadline=$((SECONDS + 30))
while [ "$SECONDS" -lt "$deadline" ]; do
  pid=$(cat "$D/slurmctld.pid" 2>/dev/null || true)
  if [ -n "$pid" ] && ! kill -0 "$pid" 2>/dev/null; then
    echo "cluster.sh: slurmctld (pid $pid) died at start; its log:" >&2
    tail -n 20 "$D/log/slurmctld.log" >&2 || true
    exit 1
  fi
  if [ "$(timeout 5 sinfo -h -o '%D %T' 2>/dev/null)" = "$N idle" ]; then
    exit 0
  fi
  sleep 0.1
done
echo "cluster.sh: the cluster is not idle after 30 s:" >&2
timeout 5 sinfo -N >&2 || true
exit 1
