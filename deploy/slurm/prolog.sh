#!/usr/bin/env bash
# Slurm Prolog (slurm.conf: Prolog=/usr/local/lib/rdzv/prolog.sh, with
# PrologFlags=Alloc): starts this job's rdzv node agent on this host, and
# on the job's first host also the root. Runs as root on every host of the
# job when it is allocated, before any task.
#
# It calls no Slurm command and waits on no other host: the host list is
# expanded in-process (rdzvctl tree-position, the same expansion as
# `scontrol show hostnames`), the tree is a pure function of it (host i, in
# that order, hangs off host (i-1)/F; host 0 off the root, which runs
# beside it), and a node finds its parent later, by itself. It takes a
# fraction of a second on a healthy host (the daemons' start).
#
# Settings: the file $RDZV_SETTINGS (default /etc/default/rdzv), a shell
# fragment sourced here, in the Epilog and in the TaskProlog. slurmd's own
# environment does not reach a Prolog (Slurm 22.05 gives it only the job's
# SLURM_* variables), so the file is the place. Variables, all optional:
#   RDZV_BIN           rdzvd                     (/usr/local/bin/rdzvd)
#   RDZVCTL_BIN        rdzvctl                   (rdzvctl beside RDZV_BIN)
#   RDZV_RUN_DIR       sockets, pid and port files of running jobs
#                                                (/run/rdzv)
#   RDZV_LOG_DIR       where the daemons' logs go when the job ends: one
#                      file per host, rdzvd.<host>.log (default: the
#                      directory of slurm.conf's SlurmdLogFile, else
#                      /var/log/slurm); RDZV_LOG_DIR=syslog: to syslog
#                      (logger -t rdzvd)
#   RDZV_HOSTNAME      this host's name in the job's host list
#                      (default $SLURMD_NODENAME, which slurmd sets: the
#                      Slurm node name, right also where it differs from
#                      the host name, e.g. several slurmd on one host)
#   RDZV_FANOUT        tree fan-out              (16)
#   RDZV_PORT_BASE     first port of the nodes' range (28000)
#   RDZV_PORT_RANGE    job ids spread over this many ports (1000)
#   RDZV_PORT_TRIES    ports tried per job, at most 64 (16)
#   RDZV_LISTEN_ADDR   address the node listens on (0.0.0.0); the file may
#                      compute it, e.g. from $SLURMD_NODENAME
#   RDZV_START_TIMEOUT seconds to wait for each daemon to listen (10)
#   RDZV_TCPSTORE      1: the node also serves PyTorch's TCPStore protocol
#                      on 127.0.0.1 (port in RDZV_RUN_DIR/<job>.tcpstore.port;
#                      task-prolog.sh points MASTER_ADDR/MASTER_PORT at it)
#   RDZV_HTTP_ADDR     an address (127.0.0.1, or one your Prometheus
#                      reaches): the node also serves operators' HTTP
#                      there (/metrics, /livez, /readyz), on a port of the
#                      kernel's choice written to RDZV_RUN_DIR/<job>.http.port
#                      (jobs share hosts); empty: none (the default)
#   RDZV_HEALTH_CMD    a command the node runs before it admits a host's
#                      ranks (rdzvd --health-cmd; exit 0 admits; a failing
#                      host is quarantined for the job); none by default
#   RDZV_HEALTH_TIMEOUT_MS  its deadline (30000)
#   RDZV_AUTH          required: every hello proves the job's secret (the
#                      default); off: the daemons run without one, and
#                      anyone who reaches their ports may act as the job
#                      (the Prolog says so in slurmd's log)
#   RDZV_SITE_KEY      the site key every job's secret derives from
#                      (/etc/rdzv/site.key): the same file on every host,
#                      root's, mode 0400, as munge's key; made once with
#                      `rdzvctl site-key --out /etc/rdzv/site.key`
#   RDZV_TLS_DIR       a directory of tls.crt, tls.key and ca.crt (the
#                      cluster's certificate, its key, its CA; root's, the
#                      key mode 0400): the job's root and node then speak
#                      TLS on every TCP link (rdzvd --tls-dir); the ranks
#                      use the node's Unix socket, which stays plain.
#                      Empty: plain TCP (the default)
#
# The job's secret. Each host's Prolog derives it from the site key
# (rdzvctl job-secret: HMAC-SHA256 of the job id under the site key, so
# every host makes the same secret without talking to another, and one
# job's secret opens no other job) and writes it to
# RDZV_RUN_DIR/<job>.secret, the job's user's, mode 0400: the daemons run
# as root and read it, the tasks run as the user and read it (the
# TaskProlog exports RDZV_SECRET_FILE), other users cannot. Root and node
# get --secret-file: a hello without the secret is refused. The Epilog
# removes the file. A missing or unreadable site key fails the Prolog.
#
# Ports. A node's children on other hosts must find its port without
# asking anyone, and jobs share hosts. A job's node listens on the first
# free port of BASE + (job id mod RANGE) + 0 .. TRIES-1, and passes
# --job, so that it refuses another job's children; a child tries those
# ports of its parent's host in turn, skipping what refuses or serves
# another job (rdzvd --parent HOST:FIRST-LAST). So up to TRIES jobs whose
# ranges overlap can share a host. The defaults, 28000 .. 29014, lie below
# PyTorch's customary ports (29400: torchrun's rendezvous; 29500:
# MASTER_PORT) and below Linux's ephemeral range (32768 and up), where an
# outgoing connection could hold one; keep other services off them. The
# root serves only the node beside it: it binds 127.0.0.1 port 0 and
# publishes the kernel's choice in RDZV_RUN_DIR/<job>.root.port.
#
# Failure. Each daemon writes RDZV_RUN_DIR/<job>.<root|node>.port once it
# listens. If one exits or does not listen within RDZV_START_TIMEOUT, the
# Prolog stops what it started, says why (with the end of the daemon's
# log) and exits 1: Slurm then drains this host and requeues (sbatch) or
# fails (srun) the job, and the tasks never run against a dead daemon. The
# reason goes to slurmd's log (it logs a failed Prolog's output), to the
# job's output file (sbatch, slurm.conf PrologFlags=Alloc gives its name)
# and, for a job without one (srun, salloc), to
# SLURM_JOB_WORK_DIR/rdzv-prolog.<job>.<host>.err, both written as the
# job's user (the paths are the user's to choose), never as root.
# Ranks reach their node through the Unix socket RDZV_RUN_DIR/<job>.sock
# (task-prolog.sh exports RDZV_ADDR).
set -uo pipefail
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
settings=${RDZV_SETTINGS:-/etc/default/rdzv}
# shellcheck source=/dev/null
[ -r "$settings" ] && . "$settings"
bin=${RDZV_BIN:-/usr/local/bin/rdzvd}
ctl=${RDZVCTL_BIN:-$(dirname "$bin")/rdzvctl}
run=${RDZV_RUN_DIR:-/run/rdzv}
fanout=${RDZV_FANOUT:-16}
base=${RDZV_PORT_BASE:-28000}
range=${RDZV_PORT_RANGE:-1000}
tries=${RDZV_PORT_TRIES:-16}
listen=${RDZV_LISTEN_ADDR:-0.0.0.0}
start_timeout=${RDZV_START_TIMEOUT:-10}
auth_mode=${RDZV_AUTH:-required}
site_key=${RDZV_SITE_KEY:-/etc/rdzv/site.key}
job=${SLURM_JOB_ID:-}
me=${RDZV_HOSTNAME:-${SLURMD_NODENAME:-$(hostname -s)}}
# Slurm 22.05 gives the node Prolog SLURM_NODELIST, later ones also
# SLURM_JOB_NODELIST.
nodelist=${SLURM_JOB_NODELIST:-${SLURM_NODELIST:-}}
started=() # names of the daemons started here, for stop_started
secret_made="" # the job's secret file, once this Prolog wrote it

# The job's output file, from SLURM_JOB_STDOUT (PrologFlags=Alloc, batch
# jobs), whose patterns Slurm 22.05 leaves unexpanded: %j, %J, %u and %N
# (the batch host: the job's first) are expanded here; a name with any
# other pattern (%x, %A, ...) is not used. Prints nothing if there is none.
job_output() {
  local f=${SLURM_JOB_STDOUT:-} first
  [ -n "$f" ] || return 0
  first=$("$ctl" hostnames "$nodelist" 2>/dev/null | head -n 1)
  f=${f//%%/$'\001'}
  f=${f//%j/$job}
  f=${f//%J/$job}
  f=${f//%u/${SLURM_JOB_USER:-}}
  f=${f//%N/$first}
  case "$f" in *%*) return 0 ;; esac
  f=${f//$'\001'/%}
  case "$f" in /*) ;; *) f="${SLURM_JOB_WORK_DIR:-/}/$f" ;; esac
  printf '%s\n' "$f"
}

# fail LINES...: the Prolog fails. The lines go to stderr (slurmd's log)
# and to the user; then this Prolog's daemons are stopped, exit 1.
fail() {
  local msg out
  msg=$(printf 'rdzv prolog: job %s, host %s: %s\n' "$job" "$me" "$1"
    shift
    for l in "$@"; do printf 'rdzv prolog:   %s\n' "$l"; done)
  printf '%s\n' "$msg" >&2
  out=$(job_output)
  if [ -z "$out" ] && [ -n "${SLURM_JOB_WORK_DIR:-}" ]; then
    out="$SLURM_JOB_WORK_DIR/rdzv-prolog.$job.$me.err"
  fi
  # Written as the job's user, never as root: the path is the user's to
  # choose (a link, a directory only root may write).
  if [ -n "$out" ] && [[ "${SLURM_JOB_UID:-}" =~ ^[0-9]+$ ]] &&
    [[ "${SLURM_JOB_GID:-}" =~ ^[0-9]+$ ]]; then
    setpriv --reuid="$SLURM_JOB_UID" --regid="$SLURM_JOB_GID" --clear-groups \
      -- /bin/sh -c 'printf "%s\n" "$1" >>"$2"' sh "$msg" "$out" 2>/dev/null
  fi
  stop_started
  # A secret this Prolog wrote goes with its daemons (one a rerun finds
  # was never this run's: it exits before writing).
  [ -n "$secret_made" ] && rm -f "$secret_made"
  exit 1
}

# Starts a daemon in its own session with no terminal and fds 0-2
# redirected, so that slurmd neither waits for it nor kills it with the
# Prolog's process group; its pid goes to a file for the Epilog.
start() { # name args...
  local name=$1
  shift
  rm -f "$run/$job.$name.port"
  setsid "$bin" "$@" --port-file="$run/$job.$name.port" --log-level=1 \
    </dev/null >>"$run/$job.$name.log" 2>&1 &
  echo $! >"$run/$job.$name.pid"
  started+=("$name")
}

# Stops the daemons started here (a failed Prolog leaves none behind) and
# files their logs like the Epilog does; the socket too, if this Prolog's
# node made it.
stop_started() {
  [ "${#started[@]}" -gt 0 ] || return 0
  local name pid
  for name in "${started[@]}"; do
    pid=$(cat "$run/$job.$name.pid" 2>/dev/null) || continue
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    rm -f "$run/$job.$name.pid" "$run/$job.$name.port"
  done
  rm -f "$run/$job.sock" "$run/$job.sock.lock" "$run/$job.tcpstore.port"
  "$(dirname "${BASH_SOURCE[0]}")/epilog.sh" --logs-only || true
}

# Waits until daemon NAME listens (its port file appears); its port goes
# to $bound. If it exits or does not listen in time, the Prolog fails.
wait_started() { # name what-it-binds
  local name=$1 what=$2 why pid hint=""
  local log="$run/$job.$name.log" pf="$run/$job.$name.port"
  pid=$(cat "$run/$job.$name.pid")
  for ((t = 0; ; t++)); do
    if [ -s "$pf" ]; then
      bound=$(cat "$pf")
      return 0
    fi
    if ! kill -0 "$pid" 2>/dev/null; then
      why="it exited"
      break
    fi
    if [ "$t" -ge $((start_timeout * 10)) ]; then
      why="it was not listening after ${start_timeout} s"
      break
    fi
    sleep 0.1
  done
  if grep -qi "address already in use" "$log" 2>/dev/null; then
    hint="$what: every port is in use (other jobs on this host, or other \
programs); raise RDZV_PORT_TRIES or move RDZV_PORT_BASE in $settings"
  fi
  local tail_lines=()
  mapfile -t tail_lines < <(tail -n 5 "$log" 2>/dev/null)
  [ "${#tail_lines[@]}" -gt 0 ] || tail_lines=("(its log $log is empty)")
  fail "the rdzv $name daemon did not start ($why)." ${hint:+"$hint"} \
    "the end of its log:" "${tail_lines[@]}"
}

[[ "$job" =~ ^[0-9]+$ ]] || fail "SLURM_JOB_ID is '${job}', not a job id (not run by slurmd?)"
for v in FANOUT:fanout PORT_BASE:base PORT_RANGE:range PORT_TRIES:tries \
  START_TIMEOUT:start_timeout; do
  val=${v#*:}
  [[ "${!val}" =~ ^[0-9]+$ ]] ||
    fail "a setting in $settings is not a number: RDZV_${v%%:*}=${!val}"
done
[ "$fanout" -ge 1 ] && [ "$range" -ge 1 ] && [ "$tries" -ge 1 ] &&
  [ "$tries" -le 64 ] && [ "$base" -ge 1 ] &&
  [ $((base + range + tries - 1)) -le 65536 ] ||
  fail "settings in $settings out of range: RDZV_FANOUT=$fanout and RDZV_PORT_RANGE=$range must be >= 1, RDZV_PORT_TRIES=$tries 1..64, and RDZV_PORT_BASE=$base + RANGE + TRIES - 1 <= 65536"
case "$auth_mode" in
  required | off) ;;
  *) fail "RDZV_AUTH in $settings is '$auth_mode': it must be 'required' (the default) or 'off'" ;;
esac
[ -n "$nodelist" ] || fail "neither SLURM_JOB_NODELIST nor SLURM_NODELIST is set"
[ -x "$bin" ] || fail "rdzvd is not at $bin (RDZV_BIN in $settings)"
[ -x "$ctl" ] || fail "rdzvctl is not at $ctl (RDZVCTL_BIN in $settings)"
# PrologFlags=Alloc, read from slurm.conf (not asked of Slurm): without it
# this Prolog runs only on a step's hosts when the step starts, and a job
# whose first step uses fewer hosts than the job splits into trees.
conf=${SLURM_CONF:-/etc/slurm/slurm.conf}
if [ -r "$conf" ]; then
  flags=$(sed -n 's/^[[:space:]]*PrologFlags[[:space:]]*=[[:space:]]*\([^[:space:]#]*\).*/\1/Ip' \
    "$conf" | tail -n 1 | tr -d '"'"'")
  # Contain implies Alloc, X11 implies both (slurm.conf(5)).
  if ! grep -Eqi '(^|,)(alloc|contain|x11)(,|$)' <<<"$flags" &&
    { [ -n "$flags" ] || ! grep -qi '^[[:space:]]*include[[:space:]]' "$conf"; }; then
    fail "slurm.conf ($conf) lacks PrologFlags=Alloc (PrologFlags=${flags:-none})." \
      "rdzv's Prolog must run on every host of a job at allocation: add" \
      "PrologFlags=Alloc and restart slurmd (docs/slurm.md)."
  fi
fi
if ! pos=$("$ctl" tree-position --fanout "$fanout" "$nodelist" "$me" 2>&1); then
  fail "cannot place this host in the job's tree: $pos" \
    "(RDZV_HOSTNAME, default \$SLURMD_NODENAME, names this host in the list)"
fi
read -r index ancestors <<<"$pos"
# Host i's child nodes are hosts F*i+1 .. F*i+F that exist: told to the
# node (--children), it forwards the joins of its subtree the moment they
# are all in instead of after its quiet interval.
nhosts=$("$ctl" hostnames "$nodelist" | wc -l)
children=$((nhosts - fanout * index - 1))
[ "$children" -lt 0 ] && children=0
[ "$children" -gt "$fanout" ] && children=$fanout
# rdzvd takes at most 16 ancestors: the nearest 15 and the top (host 0's
# node) where a deeper tree (a small fan-out) has more.
read -r -a chain <<<"$ancestors"
if [ "${#chain[@]}" -gt 16 ]; then
  ancestors="${chain[*]:0:15} ${chain[${#chain[@]}-1]}"
fi
first_port=$((base + job % range))
last_port=$((first_port + tries - 1))
ports="$first_port-$last_port"
mkdir -p "$run" || fail "cannot create $run (RDZV_RUN_DIR)"
# Run again for a job whose node already runs here (slurmd retried): that
# node serves; nothing of it is touched.
if pid=$(cat "$run/$job.node.pid" 2>/dev/null) &&
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- "--job=$job "; then
  echo "rdzv prolog: job $job, host $me: its node already runs (pid $pid)" >&2
  exit 0
fi

# The job's secret, before any daemon: both are started with it.
auth=()
if [ "$auth_mode" = off ]; then
  echo "rdzv prolog: job $job, host $me: RDZV_AUTH=off in $settings: the job's daemons run without a secret; anyone who reaches their ports can act as this job" >&2
else
  secret="$run/$job.secret"
  if ! why=$("$ctl" job-secret --site-key "$site_key" --job "$job" \
    --out "$secret" 2>&1); then
    fail "cannot make the job's secret from the site key $site_key (RDZV_SITE_KEY): ${why#rdzvctl: }" \
      "make a site key once, as root: rdzvctl site-key --out $site_key" \
      "and copy it to every host, root's with mode 0400, as munge's key is;" \
      "or set RDZV_AUTH=off in $settings to run without secrets"
  fi
  secret_made=$secret
  # The tasks run as the job's user and read it; the daemons, as root,
  # read it whoever owns it.
  if [[ "${SLURM_JOB_UID:-}" =~ ^[0-9]+$ ]]; then
    chown "$SLURM_JOB_UID${SLURM_JOB_GID:+:$SLURM_JOB_GID}" "$secret" ||
      fail "cannot give the job's secret $secret to the job's user (uid $SLURM_JOB_UID)"
  fi
  auth=(--secret-file="$secret")
fi

# TLS between the job's daemons, when the site gives certificates.
if [ -n "${RDZV_TLS_DIR:-}" ]; then
  for f in tls.crt tls.key ca.crt; do
    [ -r "$RDZV_TLS_DIR/$f" ] ||
      fail "RDZV_TLS_DIR in $settings: $RDZV_TLS_DIR/$f is missing or unreadable" \
        "give every host the cluster's tls.crt, tls.key and ca.crt there" \
        "(tools/tls-certs.sh makes a test cluster's), or leave RDZV_TLS_DIR empty"
  done
  auth+=(--tls-dir="$RDZV_TLS_DIR")
fi

if [ "$index" -eq 0 ]; then
  start root --role=root --listen=127.0.0.1:0 --job="$job" \
    --name="root-$job" "${auth[@]}"
  wait_started root "a TCP port on 127.0.0.1"
  parent="127.0.0.1:$bound"
else
  # The parent, then its ancestors up to the first host's node, nearest
  # first: where this node reattaches if its parent is lost (the first
  # host's node is the top; its root listens on a port only it knows).
  parent=""
  for h in $ancestors; do
    parent="$parent,$h:$ports"
  done
  parent="${parent#,}"
fi
http=()
if [ -n "${RDZV_HTTP_ADDR:-}" ]; then
  rm -f "$run/$job.http.port"
  http=(--http-listen="$RDZV_HTTP_ADDR:0" --http-port-file="$run/$job.http.port")
fi
tcpstore=()
if [ "${RDZV_TCPSTORE:-0}" = 1 ]; then
  rm -f "$run/$job.tcpstore.port"
  tcpstore=(--tcpstore-listen=127.0.0.1:0 --tcpstore-job="$job"
    --tcpstore-port-file="$run/$job.tcpstore.port")
fi
health=()
if [ -n "${RDZV_HEALTH_CMD:-}" ]; then
  health=(--health-cmd="$RDZV_HEALTH_CMD"
    --health-timeout-ms="${RDZV_HEALTH_TIMEOUT_MS:-30000}")
fi
start node --role=node --job="$job" --parent="$parent" \
  --listen="$listen:$ports" --unix="$run/$job.sock" --name="$me" \
  --allow-uids="${SLURM_JOB_UID:-}" --children="$children" \
  "${auth[@]}" "${tcpstore[@]}" "${http[@]}" "${health[@]}"
wait_started node "ports $ports on $listen"
# The tasks run as the job's user, and connecting to a Unix socket needs
# write permission on it: the socket is the job user's alone (and root's).
if [[ "${SLURM_JOB_UID:-}" =~ ^[0-9]+$ ]]; then
  chown "$SLURM_JOB_UID${SLURM_JOB_GID:+:$SLURM_JOB_GID}" "$run/$job.sock" &&
    chmod 0600 "$run/$job.sock" ||
    fail "cannot give the node's socket $run/$job.sock to the job's user (uid $SLURM_JOB_UID)"
fi
exit 0
