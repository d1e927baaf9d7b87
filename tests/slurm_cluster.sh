#!/usr/bin/env bash
# Starts (or stops) a one-node Slurm cluster on localhost for the tests:
# munged with a fresh key, slurmctld and slurmd, all state under DIR. Prints
# nothing on success; fails with the daemons' logs on error.
#   tests/slurm_cluster.sh start DIR   (SLURM_TEST_GPUS: GPUs the node advertises, default 2)
#   tests/slurm_cluster.sh stop DIR
set -euo pipefail
cmd=$1 dir=$2
conf="$dir/slurm.conf"
if [ "$cmd" = stop ]; then
  for p in slurmd slurmctld munged; do
    [ -f "$dir/$p.pid" ] && kill "$(cat "$dir/$p.pid")" 2>/dev/null || true
  done
  exit 0
fi
mkdir -p "$dir"/{spool,state,munge,log}
chmod 700 "$dir/munge"
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
chmod 400 "$dir/munge/munge.key"
munged --force --key-file="$dir/munge/munge.key" --socket="$dir/munge/socket" \
  --pid-file="$dir/munged.pid" --log-file="$dir/log/munged.log" --seed-file="$dir/munge/seed"
# The machine's CPUs, not OMP_NUM_THREADS's (GNU nproc honours it): a job step
# asking for more CPUs than the node has would stay pending.
cpus=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)
mem=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
port=$(( 20000 + RANDOM % 20000 ))
gpus=${SLURM_TEST_GPUS:-2}
cat > "$conf" <<CONF
ClusterName=kimiplan
SlurmctldHost=localhost
SlurmctldPort=$port
SlurmdPort=$((port + 1))
AuthType=auth/munge
AuthInfo=socket=$dir/munge/socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
ReturnToService=2
SchedulerType=sched/backfill
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
GresTypes=gpu
NodeName=localhost CPUs=$cpus RealMemory=$mem Gres=gpu:$gpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP
CONF
# The node advertises GPUs it does not have (no device files), so the
# launcher's `--gpus-per-node` requests schedule here; the ranks run on CPU.
mkdir -p "$dir/dev"
for i in $(seq 0 $((gpus - 1))); do touch "$dir/dev/gpu$i"; echo "Name=gpu File=$dir/dev/gpu$i"; done > "$dir/gres.conf"
export SLURM_CONF="$conf"
slurmctld -f "$conf"
slurmd -f "$conf"
for _ in $(seq 1 60); do
  if sinfo -h -o %T 2>/dev/null | grep -qE '^(idle|mixed|allocated)'; then exit 0; fi
  sleep 1
done
echo "slurm did not come up:" >&2
tail -n 20 "$dir"/log/*.log >&2
exit 1
