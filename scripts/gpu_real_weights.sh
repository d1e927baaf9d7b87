#!/usr/bin/env bash
# Runs on the GPU machine: builds the runtime-only tree (scripts/gpu_build.sh)
# and runs issue 33's GPU checks and two benchmarks, within BUDGET_S seconds:
#   1. kp_kernel_tests: the kernels against their references, every entry's
#      input checks (issue 34), and the CudaCheckpoint tests: a scaled
#      kimi-k2.6 saved and resumed on CUDA, and LoRA on the INT4 base from a
#      released INT4 checkpoint (runtime/train/cuda_checkpoint_test.cc);
#   2. kimi-plan-int4-bench: the INT4 expert product against bf16 at K2.6's
#      expert shapes;
#   3. kimi-plan-decode-bench: the rollout's decoding of kimi-1b, 64 rows
#      (8 prompts x 8 samples) with the KV cache, sampled and greedy (issue
#      34's before / after table in docs/benchmarks.md).
# docs/benchmarks.md has the results.
#
#   scripts/gpu_real_weights.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
set -u -o pipefail
out=${1:?usage: gpu_real_weights.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0
BUDGET_S=${BUDGET_S:-560}
start=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - start))); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
targets=(kimi-plan-int4-bench kimi-plan-decode-bench)
[ -f "$root/.gpu-carry/googletest/CMakeLists.txt" ] && targets+=(kp_kernel_tests)
gpu_build "$out" "$json_inc" 16 "${targets[@]}"
if [ -x "$build/kp_kernel_tests" ] && [ "$(left)" -gt 60 ]; then
  echo "== kp_kernel_tests (the kernels, their input checks, CudaCheckpoint)"
  timeout 240 "$build/kp_kernel_tests" 2>&1 | tee "$out/kernel_tests.txt" |
    grep -E "^\[ +(FAILED|SKIPPED|PASSED) |^\[ +OK \] (CudaCheckpoint|KernelInputs)|Failure|Expected|Which is|actual|bitwise|apart" | head -40
fi
if [ -x "$build/kimi-plan-int4-bench" ] && [ "$(left)" -gt 90 ]; then
  echo "== INT4 against bf16"
  timeout 150 "$build/kimi-plan-int4-bench" --device cuda --tokens 128,512,2048,8192 --reps 30 --warmup 5 2>&1 |
    tee "$out/int4.txt"
fi
if [ -x "$build/kimi-plan-decode-bench" ] && [ "$(left)" -gt 60 ]; then
  echo "== decode, kimi-1b, 64 rows"
  timeout $(($(left) - 10)) "$build/kimi-plan-decode-bench" --shape "$root/bench/kimi-1b.json" --device cuda \
    --dtype bf16 --prompts 8 --samples 8 --prompt-len 128 --new-tokens 128 --reps 3 --warmup 1 2>&1 |
    tee "$out/decode.txt"
fi
echo "done in $((SECONDS - start)) s"
