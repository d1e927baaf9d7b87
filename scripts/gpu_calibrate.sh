#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU and PyTorch (nothing else needed):
# builds kimi-plan-calibrate and kimi-plan-train-bench in the runtime-only
# tree, measures the GPU's calibration table (presets/calibration/ format:
# bf16, fp8 and, with PyTorch 2.8 on, bf16 grouped products; the copy)
# with a check of its interpolation on SHAPE's exact products, then times a
# training step of SHAPE so that `kimi-plan plan` priced from the table can
# be set beside it (docs/benchmarks.md, "Calibration"). Writes under OUTDIR.
#
#   scripts/gpu_calibrate.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: GPU_NAME (h200), SHAPE (bench/dense-2b.json), BATCH (8), SEQ (2048),
# WARMUP (3), STEPS (10), JOBS (16).
set -u -o pipefail
out=${1:?usage: gpu_calibrate.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
B=${BATCH:-8} T=${SEQ:-2048} W=${WARMUP:-3} N=${STEPS:-10} JOBS=${JOBS:-16}
shape=$root/${SHAPE:-bench/dense-2b.json}
{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
} 2>&1 | tee "$out/machine.txt"

source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" "$JOBS" kimi-plan-calibrate kimi-plan-train-bench || exit 1

echo "== calibrate (table + interpolation check on $(basename "$shape") at $((B * T)) tokens)"
timeout 300 "$build/kimi-plan-calibrate" --out "$out/${GPU_NAME:-h200}.json" --gpu-name "${GPU_NAME:-h200}" \
  --shape "$shape" --tokens $((B * T)) 2>"$out/calibrate.err" | tee "$out/calibrate.txt" | grep RESULT
tail -3 "$out/calibrate.err"

echo "== training step of $(basename "$shape"): batch $B x $T, bf16"
timeout 200 "$build/kimi-plan-train-bench" --shape "$shape" --batch "$B" --seq-len "$T" --warmup "$W" \
  --steps "$N" --device cuda --dtype bf16 2>&1 | tee "$out/train.txt" | tail -4
