#!/usr/bin/env bash
# Slurm TaskProlog: what it prints as "export NAME=value" lands in each
# task's environment, so ranks find their host's node and their job id
# (rdzv_rendezvous_opts_from_env reads RDZV_ADDR and RDZV_JOB; local rank
# and sizes come from SLURM_LOCALID / SLURM_NTASKS).
[ -r /etc/default/rdzv ] && . /etc/default/rdzv
echo "export RDZV_ADDR=unix:${RDZV_RUN_DIR:-/run/rdzv}/${SLURM_JOB_ID}.sock"
echo "export RDZV_JOB=${SLURM_JOB_ID}"
