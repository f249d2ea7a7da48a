#!/usr/bin/env bash
# Install and start a one-node SLURM (slurmctld + slurmd, with munge) on THIS machine, without
# systemd -- for testing the dask-jobqueue recipe against a real batch system (the pytest marker
# `slurm`, tests/pipeline/test_slurm.py) and for trying the recipe on a workstation. Debian/Ubuntu only.
#
#   sudo bash cluster/hpc/local-slurm.sh           # install if needed, configure, start; idempotent
#   sudo bash cluster/hpc/local-slurm.sh --status  # print sinfo/squeue, exit 0 if the node is up
#   sudo bash cluster/hpc/local-slurm.sh --stop    # stop slurmd, slurmctld and munged
#
# What it does: apt-get install slurm-wlm munge (22.05 on Debian bookworm); start munged as user
# munge with the key the package created; write /etc/slurm/slurm.conf for one node named after
# this host at 127.0.0.1 (ClusterName=qplocal, SlurmUser=root, proctrack/pgid, task/none,
# select/cons_tres with CR_Core_Memory, no accounting, partition `debug`), with the CPUs and
# memory `slurmd -C` reports (memory: 90 %, so that the node registers); start slurmctld and
# slurmd; wait until `sinfo` shows the node idle. Environment overrides: QP_SLURM_CPUS,
# QP_SLURM_MEMORY_MB. A slurm.conf not written by this script is never overwritten (refused).
# Logs: /var/log/slurm/{slurmctld,slurmd}.log, /var/log/munge/munged.log.
# Exit status: 0 up, 1 failed to start (the log tail is printed), 2 refused (not root, no apt).
set -euo pipefail

MARK="# written by quantile-propagation cluster/hpc/local-slurm.sh"
CONF=/etc/slurm/slurm.conf

die() { echo "local-slurm.sh: error: $1" >&2; exit "${2:-1}"; }
say() { echo "local-slurm.sh: $*" >&2; }

node_state() { sinfo -h -N -o '%T' 2>/dev/null | head -n1; }

status() {
    sinfo -N -l 2>&1 || true
    squeue 2>&1 || true
    case "$(node_state)" in
        idle*|mixed*|allocated*|completing*) return 0 ;;
        *) return 1 ;;
    esac
}

stop() {
    local name
    for name in slurmd slurmctld munged; do
        if pgrep -x "$name" >/dev/null; then
            say "stopping $name"
            pkill -TERM -x "$name" || true
        fi
    done
    for _ in $(seq 1 50); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || pgrep -x munged \
            >/dev/null || return 0
        sleep 0.2
    done
    say "some daemons are still running"
    return 1
}

case "${1:-}" in
    --stop) [ "$(id -u)" -eq 0 ] || die "--stop needs root" 2; stop; exit $? ;;
    --status) status; exit $? ;;
    ""|--start) ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) die "unknown option ${1} (use --start, --status, --stop)" 2 ;;
esac

[ "$(id -u)" -eq 0 ] || die "must run as root (it installs packages and starts daemons): \
sudo bash $0" 2

# -- 1. install ------------------------------------------------------------------------------
if ! command -v slurmctld >/dev/null || ! command -v slurmd >/dev/null \
        || ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || die "slurmctld/slurmd/munged are not installed and \
apt-get is not available (this script knows Debian/Ubuntu only); install slurm-wlm and munge \
with your package manager and re-run" 2
    say "installing slurm-wlm and munge with apt-get (a minute)"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq || die "apt-get update failed (no network or no apt sources?)" 2
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null \
        || die "apt-get install slurm-wlm munge failed" 2
fi

# -- 2. munge --------------------------------------------------------------------------------
id munge >/dev/null 2>&1 || die "user munge missing (munge package incomplete?)"
if [ ! -s /etc/munge/munge.key ]; then
    say "creating /etc/munge/munge.key"
    if command -v mungekey >/dev/null; then
        mungekey --create --force --keyfile=/etc/munge/munge.key
    else
        dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
fi
install -d -o munge -g munge -m 0755 /run/munge
install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge /etc/munge
chown munge:munge /etc/munge/munge.key
chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    say "starting munged"
    runuser -u munge -- /usr/sbin/munged || die "munged did not start: \
$(tail -n 5 /var/log/munge/munged.log 2>/dev/null)"
    for _ in $(seq 1 50); do
        munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break
        sleep 0.1
    done
    munge -n | unmunge >/dev/null || die "munge credentials do not round-trip"
fi

# -- 3. slurm.conf ---------------------------------------------------------------------------
node=$(hostname -s)
read -r cpus sockets cores threads mem < <(slurmd -C | awk '/^NodeName/ {
    for (i = 1; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
    print v["CPUs"], v["SocketsPerBoard"] * v["Boards"], v["CoresPerSocket"],
          v["ThreadsPerCore"], v["RealMemory"] }')
[ -n "${mem:-}" ] || die "could not read this machine's CPUs/memory from slurmd -C"
if [ -n "${QP_SLURM_CPUS:-}" ]; then
    cpus=$QP_SLURM_CPUS; sockets=1; cores=$QP_SLURM_CPUS; threads=1
fi
mem=${QP_SLURM_MEMORY_MB:-$((mem * 9 / 10))}
if [ -e "$CONF" ] && ! grep -qF "$MARK" "$CONF"; then
    die "$CONF exists and was not written by this script; not overwriting it" 2
fi
install -d -m 0755 /etc/slurm /var/log/slurm /var/spool/slurmctld /var/spool/slurmd /run/slurm
new=$(mktemp)
cat >"$new" <<EOF
$MARK
# one node, this machine; see the script for how to stop it
ClusterName=qplocal
SlurmctldHost=${node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
MpiDefault=none
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
ReturnToService=2
SlurmctldPidFile=/run/slurm/slurmctld.pid
SlurmdPidFile=/run/slurm/slurmd.pid
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=60
NodeName=${node} NodeAddr=127.0.0.1 CPUs=${cpus} Sockets=${sockets} CoresPerSocket=${cores} ThreadsPerCore=${threads} RealMemory=${mem} State=UNKNOWN
PartitionName=debug Nodes=${node} Default=YES MaxTime=INFINITE State=UP
EOF
changed=1
if [ -e "$CONF" ] && cmp -s "$new" "$CONF"; then changed=0; fi
if [ "$changed" = 1 ]; then
    say "writing $CONF (node $node: CPUs=$cpus, RealMemory=${mem} MB)"
    install -m 0644 "$new" "$CONF"
fi
rm -f "$new"
# no cgroup.conf: slurmd 22.05 autodetects cgroup v1/v2 (it has no "disabled" plugin); with
# proctrack/pgid and task/none nothing is confined by cgroups

# -- 4. daemons ------------------------------------------------------------------------------
if [ "$changed" = 1 ] && pgrep -x slurmctld >/dev/null; then
    say "configuration changed: restarting slurmd and slurmctld"
    pkill -TERM -x slurmd || true
    pkill -TERM -x slurmctld || true
    for _ in $(seq 1 50); do
        pgrep -x slurmd >/dev/null || pgrep -x slurmctld >/dev/null || break
        sleep 0.2
    done
fi
if ! pgrep -x slurmctld >/dev/null; then
    say "starting slurmctld"
    slurmctld || die "slurmctld did not start: $(tail -n 20 /var/log/slurm/slurmctld.log)"
fi
for _ in $(seq 1 100); do
    scontrol ping 2>/dev/null | grep -q UP && break
    sleep 0.2
done
scontrol ping | grep -q UP || die "slurmctld is not answering: \
$(tail -n 20 /var/log/slurm/slurmctld.log)"
if ! pgrep -x slurmd >/dev/null; then
    say "starting slurmd"
    slurmd || die "slurmd did not start: $(tail -n 20 /var/log/slurm/slurmd.log)"
fi
state=""
for _ in $(seq 1 150); do
    state=$(node_state)
    case "$state" in
        idle*|mixed*|allocated*|completing*) break ;;
        down*|drain*|fail*)
            # a node that left a previous run down/drained: give it back to the scheduler
            scontrol update nodename="$node" state=resume >/dev/null 2>&1 || true ;;
    esac
    sleep 0.2
done
case "$state" in
    idle*|mixed*|allocated*|completing*) ;;
    *) sinfo -N -l >&2 || true
       die "node $node is '$state', not idle: $(tail -n 20 /var/log/slurm/slurmd.log)" ;;
esac
say "SLURM is up: node $node ($state), partition debug, $cpus CPUs, ${mem} MB"
sinfo -N -l
