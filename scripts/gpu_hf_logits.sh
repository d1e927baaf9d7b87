#!/usr/bin/env bash
# Runs on the GPU machine (PyTorch with transformers): builds kimi-plan-logits
# in the runtime-only tree (scripts/gpu_build.sh), then checks the runtime's
# forward of released-format checkpoints against transformers'
# DeepseekV3ForCausalLM (scripts/hf_logits_check.py), on the GPU in fp32 and
# bf16 and on the CPU in fp32. docs/benchmarks.md has the results.
#
#   scripts/gpu_hf_logits.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Writes OUTDIR/hf_logits_cuda.txt, OUTDIR/hf_logits_cpu.txt and build.log.
set -u -o pipefail
out=${1:?usage: gpu_hf_logits.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
nvidia-smi --query-gpu=name,driver_version --format=csv | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" 16 kimi-plan-logits || exit 1
python3 "$root/scripts/hf_logits_check.py" --runtime "$build/kimi-plan-logits" --runtime-args "--device cuda" \
  2>&1 | tee "$out/hf_logits_cuda.txt"
cuda_rc=$?
python3 "$root/scripts/hf_logits_check.py" --runtime "$build/kimi-plan-logits" --runtime-args "--device cpu" --no-bf16 \
  2>&1 | tee "$out/hf_logits_cpu.txt"
echo "cuda rc $cuda_rc, cpu rc $?"
