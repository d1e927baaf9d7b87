#!/usr/bin/env bash
# The launcher's Slurm job run for real: a one-node Slurm (munged, slurmctld
# and slurmd on localhost, tests/slurm_cluster.sh) takes the sbatch script
# `kimi-plan launch --target slurm` wrote for a recorded plan; its srun starts
# two ranks of the native runtime (`kimi-plan run`, c10d Gloo) that train and
# log to SQLite. Needs root (the daemons) and Debian's slurm-wlm.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
cluster="$work/cluster"
trap 'bash "$here/slurm_cluster.sh" stop "$cluster"; rm -rf "$work"' EXIT
cd "$work"
source "$here/test_lib.sh"

"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 1 \
  --rollout-tp 1 --rollout-ep 2 --global-batch 4 --seq-len 8 --state-precision fp32 --json > plan.json
plan_id=$(python3 -c "import json; print(json.load(open('plan.json'))['id'])")
"$bin" launch --target slurm --plan "$plan_id" --out job > launch.txt
check "launch wrote the sbatch script" test -f job/kimi-plan.sbatch
check "the script parses" bash -n job/kimi-plan.sbatch
check "it asks for the plan's node and GPUs" grep -q -- "--gpus-per-node=2" job/kimi-plan.sbatch

check "a one-node Slurm starts" bash "$here/slurm_cluster.sh" start "$cluster"
export SLURM_CONF="$cluster/slurm.conf"
export KIMI_PLAN="$bin" MASTER_PORT=$((30000 + RANDOM % 20000))
timeout 300 sbatch --wait -o job.out job/kimi-plan.sbatch \
  --steps 2 --hidden 32 --experts 4 --vocab 64 --layers 3 --heads 2 --db "$work/runs.db" > sbatch.txt
code=$?
check "the job finishes" test $code -eq 0
if [ $code -ne 0 ]; then  # why: the job's state and reason, the node's, the daemons' last words
  { cat sbatch.txt; squeue -h -o '%i %T %r'; sinfo -h -o '%N %T %E'
    tail -n 15 "$cluster"/log/slurmctld.log "$cluster"/log/slurmd.log; } >&2
fi
check "srun started two ranks" grep -q "on 2 ranks (gloo, pp 1 dp 2 ep 1 etp 1 cp 1 tp 1)" job.out
check "both steps are in the store" test "$(sqlite3 runs.db "select count(*) from steps")" = 2
check "as a run of the native runtime" test "$(sqlite3 runs.db "select kind from runs")" = run
finish slurm_launch
