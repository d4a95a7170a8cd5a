#!/usr/bin/env bash
# A real Slurm cluster of N nodes on this one machine (Debian's slurm-wlm is built with multiple-slurmd support):
# one slurmctld, N slurmd daemons (node1..nodeN, all on this host, each its own Slurm node), munge for auth.
#
#   bash scripts/local-slurm.sh install   # apt-get install slurm-wlm munge (root; ~30 s)
#   bash scripts/local-slurm.sh up        # install if missing, write the config, start; waits until N nodes are idle
#   bash scripts/local-slurm.sh status    # sinfo + squeue
#   bash scripts/local-slurm.sh down      # stop slurmctld, every slurmd and munged (only what `up` started)
#
# Environment: SLURM_LOCAL_NODES (default 3), SLURM_LOCAL_CPUS (CPUs per node, default: all cores),
# SLURM_LOCAL_STATE (default /var/lib/prime-rl-slurm: config, spool, logs, pid files).
# The config lives in $SLURM_LOCAL_STATE/slurm.conf, not /etc/slurm, and is exported to every command through
# SLURM_CONF: `source <(bash scripts/local-slurm.sh env)` before calling sbatch/squeue/sacct yourself.
# Job accounting goes to a text file (jobcomp/filetxt + accounting_storage/none); `sacct` reads it with
# SLURM_CONF set. Root only (slurmd must run as root).
set -euo pipefail

NODES=${SLURM_LOCAL_NODES:-3}
CPUS=${SLURM_LOCAL_CPUS:-$(nproc)}
STATE=${SLURM_LOCAL_STATE:-/var/lib/prime-rl-slurm}
CONF=$STATE/slurm.conf
HOST=$(hostname -s)
MEM_MB=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
PORT_BASE=${SLURM_LOCAL_PORT_BASE:-17001}
CTLD_PORT=${SLURM_LOCAL_CTLD_PORT:-16817}

log() { echo "[local-slurm] $*" >&2; }

need_root() {
  if [ "$(id -u)" != 0 ]; then log "must run as root (slurmd and munged need it)"; exit 2; fi
}

install() {
  need_root
  if command -v slurmctld >/dev/null && command -v slurmd >/dev/null && command -v munged >/dev/null; then
    return 0
  fi
  log "installing slurm-wlm and munge with apt-get"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq slurm-wlm munge >/dev/null
}

write_conf() {
  mkdir -p "$STATE"/{spool/ctld,log,run}
  for i in $(seq 1 "$NODES"); do mkdir -p "$STATE/spool/node$i"; done
  cat > "$CONF" <<EOF
# written by prime-rl scripts/local-slurm.sh: $NODES Slurm nodes on one host ($HOST)
ClusterName=prime-rl-local
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmdSpoolDir=$STATE/spool/%n
StateSaveLocation=$STATE/spool/ctld
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
JobCompType=jobcomp/filetxt
JobCompLoc=$STATE/log/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
ReturnToService=2
KillWait=60
InactiveLimit=0
MinJobAge=600
SlurmdTimeout=60
NodeName=node[1-$NODES] NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$PORT_BASE-$((PORT_BASE + NODES - 1)) CPUs=$CPUS RealMemory=$MEM_MB State=UNKNOWN
PartitionName=debug Nodes=node[1-$NODES] Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:4
EOF
}

start_munge() {
  if pgrep -x munged >/dev/null; then return 0; fi
  if [ ! -s /etc/munge/munge.key ]; then
    dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
  fi
  mkdir -p /var/log/munge /var/lib/munge /run/munge
  chown munge:munge /etc/munge/munge.key /var/log/munge /var/lib/munge /run/munge 2>/dev/null || true
  chmod 400 /etc/munge/munge.key
  chmod 700 /var/log/munge /var/lib/munge
  chmod 755 /run/munge
  if id munge >/dev/null 2>&1; then
    runuser -u munge -- munged --force 2>>"$STATE/log/munged.err" || munged --force 2>>"$STATE/log/munged.err"
  else
    munged --force 2>>"$STATE/log/munged.err"
  fi
  for _ in $(seq 1 20); do [ -s /run/munge/munged.pid ] && break; sleep 0.1; done
  cp /run/munge/munged.pid "$STATE/run/munged.started" 2>/dev/null || pgrep -x munged > "$STATE/run/munged.started"
}

export_env() {
  echo "export SLURM_CONF=$CONF"
}

wait_idle() {
  local deadline=$((SECONDS + ${1:-60}))
  while [ $SECONDS -lt $deadline ]; do
    local idle
    idle=$(SLURM_CONF=$CONF sinfo -h -N -o '%N %t' 2>/dev/null | awk '$2 == "idle" {n++} END {print n + 0}')
    if [ "$idle" -ge "$NODES" ]; then return 0; fi
    sleep 0.5
  done
  log "the cluster did not come up: $(SLURM_CONF=$CONF sinfo -N 2>&1 | tr '\n' ' ')"
  log "see $STATE/log/slurmctld.log and $STATE/log/slurmd-node*.log"
  return 1
}

up() {
  need_root
  install
  if running; then
    log "already up ($CONF)"; wait_idle 60; return 0
  fi
  write_conf
  start_munge
  export SLURM_CONF=$CONF
  slurmctld -f "$CONF"
  for i in $(seq 1 "$NODES"); do slurmd -f "$CONF" -N "node$i"; done
  if ! wait_idle 60; then down; exit 1; fi
  log "up: $NODES nodes, partition debug; SLURM_CONF=$CONF"
}

running() {
  [ -f "$STATE/run/slurmctld.pid" ] && kill -0 "$(cat "$STATE/run/slurmctld.pid")" 2>/dev/null
}

down() {
  need_root
  export SLURM_CONF=$CONF
  if [ -f "$CONF" ]; then
    scancel --user=root --full 2>/dev/null || true
    scontrol shutdown 2>/dev/null || true
  fi
  local pids=()
  [ -f "$STATE/run/slurmctld.pid" ] && pids+=("$(cat "$STATE/run/slurmctld.pid")")
  for f in "$STATE"/run/slurmd-*.pid; do [ -f "$f" ] && pids+=("$(cat "$f")"); done
  for _ in $(seq 1 40); do
    local alive=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break
    sleep 0.25
  done
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  rm -f "$STATE"/run/slurmctld.pid "$STATE"/run/slurmd-*.pid
  if [ -f "$STATE/run/munged.started" ]; then
    for p in $(cat "$STATE/run/munged.started"); do kill "$p" 2>/dev/null || true; done
    rm -f "$STATE/run/munged.started"
  fi
  log "down"
}

case "${1:-}" in
  install) install ;;
  up) up ;;
  down) down ;;
  env) export_env ;;
  status) export SLURM_CONF=$CONF; sinfo -N; squeue ;;
  *) echo "usage: $0 install|up|down|status|env" >&2; exit 2 ;;
esac
