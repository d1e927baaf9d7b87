#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU and PyTorch: builds the runtime-only
# tree (scripts/gpu_build.sh), then for each bench model times the native
# runtime's step (kimi-plan-train-bench) and measures its profile (bytes and
# seconds of each piece at B/2 and B sequences, `--memory-trace 2
# --profile-out`), so that the step `kimi-plan plan --activation-profile`
# prices at B sequences can be set beside the measured one
# (scripts/native_step_check.py; docs/benchmarks.md has the results).
#
#   scripts/gpu_native_step.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Writes OUTDIR/<model>-step-<batch>.txt, OUTDIR/<model>-h200-bf16.json and build.log.
set -u -o pipefail
out=${1:?usage: gpu_native_step.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" 16 kimi-plan-train-bench || exit 1
# model, sequences per step, sequence length, the bench's flags
runs=("kimi-1b 16 1024 --fused 1 --kda-chunk 32"
      "kimi-wide 16 1024 --fused 1 --kda-chunk 32"
      "dense-2b 8 2048 --fused 1")
for run in "${runs[@]}"; do
  read -r model batch seq flags <<<"$run"
  common=(--shape "$root/bench/$model.json" --seq-len "$seq" --device cuda --dtype bf16 $flags)
  # The step at B (the profile's larger pass) and at 3B/2 (beyond it: the
  # profile's per-token line extrapolated).
  for b in "$batch" $((batch * 3 / 2)); do
    echo "== $model: step at $b x $seq"
    timeout 240 "$build/kimi-plan-train-bench" "${common[@]}" --batch "$b" --warmup 3 --steps 10 \
      2>&1 | tee "$out/$model-step-$b.txt" | grep -E "RESULT"
  done
  echo "== $model: profile at $((batch / 2)) and $batch sequences"
  timeout 240 "$build/kimi-plan-train-bench" "${common[@]}" --batch $((batch / 2)) \
    --memory-trace 2 --profile-out "$out/$model-h200-bf16.json" >"$out/$model-profile.txt" 2>&1
  echo "profile rc $?"
done
