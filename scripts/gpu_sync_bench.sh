#!/usr/bin/env bash
# Runs on a machine with two (or NPROC) CUDA GPUs and PyTorch (nothing else
# needed): builds the runtime-only tree (KIMI_PLAN_RUNTIME_ONLY) against that
# PyTorch's LibTorch, then runs kimi-plan-sync-bench as NPROC ranks, one per
# GPU, over NCCL (torchrun-style environment, rank 0 the trainer): the raw
# broadcast peak, the synthetic model per bucket size and the runtime model's
# full and LoRA sync. Writes logs, the table (sync.txt) and the JSON
# (sync.json) under OUTDIR. docs/weight-sync.md, "The runtime's sync".
#
#   scripts/gpu_sync_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: NPROC (2), RAW_MIB (1024), SYNTH_GB (6), SYNTH_HIDDEN (4096),
# BUCKETS_MIB (4,16,64,256,1024), SHAPE (bench/kimi-1b.json), LORA_RANK (16),
# MODEL_BUCKET_MIB (256), WARMUP (2), REPEATS (5), JOBS (16), PORT (29531),
# RUN_TIMEOUT_S (420).
set -u -o pipefail
out=${1:?usage: gpu_sync_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
out=$(cd "$out" && pwd)
root=$(cd "$(dirname "$0")/.." && pwd)
# NVLink multicast (NVLS) off: not every lent machine supports it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
NPROC=${NPROC:-2} JOBS=${JOBS:-16} PORT=${PORT:-29531} RUN_TIMEOUT_S=${RUN_TIMEOUT_S:-420}
args=(--device cuda --backend nccl --raw-mib "${RAW_MIB:-1024}" --synth-gb "${SYNTH_GB:-6}"
      --synth-hidden "${SYNTH_HIDDEN:-4096}" --bucket-mib "${BUCKETS_MIB:-4,16,64,256,1024}"
      --shape "$root/${SHAPE:-bench/kimi-1b.json}" --lora-rank "${LORA_RANK:-16}"
      --model-bucket-mib "${MODEL_BUCKET_MIB:-256}" --warmup "${WARMUP:-2}" --repeats "${REPEATS:-5}"
      --json-file "$out/sync.json")

{
  nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "nccl", torch.cuda.nccl.version())'
  nproc
} 2>&1 | tee "$out/machine.txt"

source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" "$JOBS" kimi-plan-sync-bench || exit $build_rc

echo "== $NPROC ranks over NCCL: ${args[*]}"
pids=()
for ((r = 0; r < NPROC; r++)); do
  RANK=$r WORLD_SIZE=$NPROC LOCAL_RANK=$r LOCAL_WORLD_SIZE=$NPROC MASTER_ADDR=127.0.0.1 MASTER_PORT=$PORT \
    timeout "$RUN_TIMEOUT_S" "$build/kimi-plan-sync-bench" "${args[@]}" >"$out/rank$r.log" 2>&1 &
  pids+=($!)
done
rc=0
for ((r = 0; r < NPROC; r++)); do
  wait "${pids[$r]}" || { echo "rank $r exited with $?"; rc=1; }
done
tee "$out/sync.txt" <"$out/rank0.log"
for ((r = 1; r < NPROC; r++)); do
  [ -s "$out/rank$r.log" ] && { echo "-- rank $r:"; tail -5 "$out/rank$r.log"; }
done
exit $rc
