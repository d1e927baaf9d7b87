#!/usr/bin/env bash
# Runs on a machine with two CUDA GPUs and PyTorch (nothing else needed):
# builds the runtime-only tree against that PyTorch's LibTorch, then runs the
# SDPO loop (kimi-plan-sdpo-bench, docs/benchmarks.md's CPU configuration as
# `kimi-plan sdpo --print-config` wrote it to bench/sdpo-*.json) on the GPUs: colocated SDPO on cuda:0, then the split placement over NCCL with
# the actor on cuda:0 and a rollout rank on cuda:1 (GRPO: no teacher rank,
# so two GPUs suffice), full weights and LoRA. Each run prints its reward
# curve, the medians of the systems' times and the `kimi-plan simulate loop`
# command that prices them. Logs under OUTDIR.
#
#   scripts/gpu_sdpo_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: JOBS (16), RUN_TIMEOUT_S (150), NODE (1: instead of the two
# split runs, bench/sdpo-node.json on eight GPUs, issue 35's run 3). The steps, the warm start and
# everything else the loop does are in the bench/sdpo-*.json files.
set -u -o pipefail
out=${1:?usage: gpu_sdpo_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
# NVLink multicast (NVLS) off: not every lent machine supports it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
JOBS=${JOBS:-16} RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-150}
{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
} 2>&1 | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" "$JOBS" kimi-plan-sdpo-bench || exit 1
bench=$build/kimi-plan-sdpo-bench
common=(--device cuda)

echo "== colocated SDPO on cuda:0"
timeout "$RUN_TIMEOUT_S" "$bench" "${common[@]}" --config "$root/bench/sdpo-colocated.json" 2>&1 |
  tee "$out/colocated_sdpo.txt"

split() {  # NAME CONFIG [WORLD]: rank r on cuda:r (the actor first, then the teacher and the rollouts)
  local name=$1 world=${3:-2} port=$((29600 + RANDOM % 1000)) pids=() rc=0 r
  shift
  echo "== split over NCCL: $name ($world ranks)"
  for ((r = 0; r < world; ++r)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout "$RUN_TIMEOUT_S" "$bench" "${common[@]}" --backend nccl --config "$root/bench/$1" \
      >"$out/$name.rank$r.txt" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$out/$name.rank0.txt"
  [ $rc -ne 0 ] && { echo "$name: a rank failed:"; tail -5 "$out/$name.rank1.txt"; }
  return 0
}
if [ "${NODE:-0}" = 1 ]; then
  # Issue 35's run 3: eight ranks, the actor's pp 4, the teacher, 3 rollouts.
  split node_sdpo sdpo-node.json 8
else
  split split_grpo sdpo-split-grpo.json
  split split_grpo_lora sdpo-split-grpo-lora.json
fi
echo "== done"
