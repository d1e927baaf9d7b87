#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU and PyTorch: builds the runtime-only
# tree (scripts/gpu_build.sh), then times kimi-wide's training step at
# 4096-token sequences without recomputation and with the recomputation
# `kimi-plan run --recompute full [--recompute-method block]` executes
# (whole layers, each from its input; SETTING full, block:N or uniform:N)
# or --recompute selective --recompute-modules MODULES (SETTING the module
# names joined by +, e.g. moe+mlp or layernorm+mla_up_proj): the step time, tokens/s and peak
# memory of each, beside a batch that fits only with it; with the fp32
# states or Megatron's mixed precision (`--state-precision mixed`).
#
#   scripts/gpu_recompute_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp] [SETTING,BATCH,STATES ...]
# (default: the fp32 runs none,16 full,16 block:2,16 none,32 full,32);
# STEPS (default 5) timed steps after 2 warm-ups.
# Writes OUTDIR/recompute-<setting>-<batch>-<states>.txt and build.log.
set -u -o pipefail
out=${1:?usage: gpu_recompute_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
shift $(( $# < 2 ? $# : 2 ))
runs=("$@")
[ ${#runs[@]} -eq 0 ] && runs=("none,16,fp32" "full,16,fp32" "block:2,16,fp32" "none,32,fp32" "full,32,fp32")
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" 16 kimi-plan-train-bench || exit 1
for run in "${runs[@]}"; do
  IFS=, read -r setting batch states <<<"$run"
  name=${setting/:/}
  log="$out/recompute-${name//+/-}-$batch-$states.txt"
  echo "== kimi-wide, 4096-token sequences x $batch, recompute $setting, $states states"
  timeout 300 "$build/kimi-plan-train-bench" --shape "$root/bench/kimi-wide.json" --seq-len 4096 --batch "$batch" \
    --device cuda --dtype bf16 --fused 1 --kda-chunk 32 --warmup 2 --steps "${STEPS:-5}" --recompute "${setting//+/,}" \
    --states "$states" > "$log" 2>&1
  echo "rc $?"
  grep -E "RESULT|out of memory|CUDA error" "$log" | head -3
done
