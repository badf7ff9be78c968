#!/usr/bin/env bash
# A one-host Slurm cluster on this machine for the multi-node tests (Debian's slurm-wlm + munge).
# Idempotent: installs what is missing, writes slurm.conf for this host's real name, CPUs and
# memory, starts munged, slurmctld and slurmd if they are not running, and waits until `sinfo`
# shows the node idle. Needs root (CI containers run as root). Prints the config path.
set -euo pipefail

if ! command -v sbatch >/dev/null || ! command -v munged >/dev/null; then
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc --all)  # the machine's CPUs (plain nproc obeys OMP_NUM_THREADS, which the tests set)
mem_mb=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
conf_dir=/etc/slurm
state_dir=/var/lib/trainwiz-slurm
mkdir -p "$conf_dir" "$state_dir/ctld" "$state_dir/d" /var/log/slurm /run/munge
conf="$conf_dir/slurm.conf"
want=$(cat <<CONF
# written by trainwiz scripts/ci-slurm.sh: a one-host cluster for tests
ClusterName=trainwiz-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
StateSaveLocation=$state_dir/ctld
SlurmdSpoolDir=$state_dir/d
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
ReturnToService=2
MinJobAge=600
KillWait=10
SlurmdTimeout=60
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=ci Nodes=$host Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
)
changed=0
if [ ! -f "$conf" ] || [ "$(cat "$conf")" != "$want" ]; then
    printf '%s\n' "$want" > "$conf"
    changed=1
fi

if [ ! -s /etc/munge/munge.key ]; then
    mkdir -p /etc/munge
    dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
fi
chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge 2>/dev/null || true
chmod 0700 /etc/munge
chmod 0400 /etc/munge/munge.key

running() { pgrep -x "$1" >/dev/null; }
if ! running munged; then
    runuser -u munge -- /usr/sbin/munged </dev/null >/dev/null 2>&1
fi
if [ "$changed" = 1 ]; then  # a new config: restart what runs with the old one
    for daemon in slurmd slurmctld; do
        if [ -f "/run/$daemon.pid" ]; then kill "$(cat "/run/$daemon.pid")" 2>/dev/null || true; fi
    done
    for _ in $(seq 1 150); do  # until they are gone: one still saving its state counts as running
        running slurmd || running slurmctld || break
        sleep 0.2
    done
fi
# The daemons never hold the caller's stdout/stderr: a caller that reads them to the end (a test
# fixture's subprocess.run) would otherwise wait for as long as the daemons live.
running slurmctld || /usr/sbin/slurmctld </dev/null >/dev/null 2>&1
running slurmd || /usr/sbin/slurmd </dev/null >/dev/null 2>&1

for _ in $(seq 1 60); do
    state=$(sinfo -h -N -n "$host" -o '%T' 2>/dev/null || true)
    case "$state" in
        idle*|mixed*|allocated*) echo "$conf"; exit 0 ;;
        down*|drain*) scontrol update NodeName="$host" State=RESUME 2>/dev/null || true ;;
    esac
    sleep 1
done
echo "slurm did not come up: sinfo says '${state:-nothing}'; see /var/log/slurm/" >&2
exit 1
