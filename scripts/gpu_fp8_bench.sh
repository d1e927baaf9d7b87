#!/usr/bin/env bash
# Runs on the GPU machine: builds the runtime-only tree (scripts/gpu_build.sh)
# and runs issue 34's FP8 checks within BUDGET_S seconds:
#   1. kp_kernel_tests' FP8, INT4, sampler and input-check tests (the
#      quantisation kernel bit for bit against the LibTorch form, the
#      tensor-core products and Fp8Linear against fp64);
#   2. kimi-plan-fp8-bench: an expert's forward and both gradients, FP8 on
#      tensor cores against bf16, at K2.6's and the bench models' shapes;
#   3. kimi-plan-train-bench on SHAPE: bf16 experts, FP8 experts, bf16 again
#      (A-B-A), the same steps each;
#   4. with CURVE=N: N steps of SHAPE at batch 4, bf16 experts then FP8
#      experts, and the per-step loss gap between the two curves;
#   5. kimi-plan-int4-bench (the INT4 kernel's rerun), when time is left and INT4 is not 0.
# docs/benchmarks.md has the results.
#
#   scripts/gpu_fp8_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: SHAPE (bench/kimi-1b.json), BATCH (16), SEQ (1024), STEPS (6),
# BUDGET_S (560), PROBE (a Python file run first, e.g. scripts/gpu_fp8_probe.py), TEST_FILTER (the
# kernel tests run: the FP8, grouped experts, INT4, sampler and input-check ones by default),
# TEST_TIMEOUT (150 s), FP8_TOKENS (the product bench's tokens per expert, 512,2048,8192).
set -u -o pipefail
out=${1:?usage: gpu_fp8_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
BUDGET_S=${BUDGET_S:-560}
start=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - start))); }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader 2>&1 | tee "$out/machine.txt"
[ -n "${PROBE:-}" ] && timeout 90 python3 "$PROBE" 2>&1 | tee "$out/probe.txt"
source "$root/scripts/gpu_build.sh"
targets=(kimi-plan-fp8-bench kimi-plan-train-bench)
[ "${INT4:-1}" = 1 ] && targets+=(kimi-plan-int4-bench)
[ -f "$root/.gpu-carry/googletest/CMakeLists.txt" ] && targets+=(kp_kernel_tests)
gpu_build "$out" "$json_inc" 16 "${targets[@]}"
if [ -x "$build/kp_kernel_tests" ] && [ "$(left)" -gt 60 ]; then
  echo "== kernel tests"
  timeout "${TEST_TIMEOUT:-150}" "$build/kp_kernel_tests" --gtest_filter="${TEST_FILTER:-Fp8*:GroupedExperts*:Int4*:DeviceSampler*:KernelInputs*}" 2>&1 |
    tee "$out/tests.txt" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|error|Expected|Which is|actual|Value of" | head -40
fi
if [ -x "$build/kimi-plan-fp8-bench" ] && [ "$(left)" -gt 60 ]; then
  echo "== FP8 expert products"
  timeout 120 "$build/kimi-plan-fp8-bench" --device cuda --tokens "${FP8_TOKENS:-512,2048,8192}" --reps 10 --warmup 3 2>&1 |
    tee "$out/fp8_bench.txt"
fi
common=(--shape "$root/${SHAPE:-bench/kimi-1b.json}" --batch "${BATCH:-16}" --seq-len "${SEQ:-1024}" --warmup 2
        --steps "${STEPS:-6}" --device cuda --dtype bf16 --fused 1 --kda-chunk 64)
peak=0
for run in bf16_a:none fp8:experts bf16_b:none; do
  name=${run%%:*} fp8=${run##*:}
  [ -x "$build/kimi-plan-train-bench" ] && [ "$(left)" -gt 70 ] || { echo "skip $name: budget"; continue; }
  echo "== train step: $name (--fp8 $fp8)"
  timeout 100 "$build/kimi-plan-train-bench" "${common[@]}" --peak-tflops "$peak" --fp8 "$fp8" 2>&1 |
    tee "$out/train_$name.txt" | grep -E "RESULT|error|peak|median"
  p=$(grep -o "peak_tflops=[0-9.]*" "$out/train_$name.txt" | tail -1 | cut -d= -f2)
  [ -n "$p" ] && [ "$peak" = 0 ] && peak=$p
done
if [ -n "${CURVE:-}" ]; then
  for fp8 in none experts; do
    [ "$(left)" -gt 80 ] || { echo "skip curve $fp8: budget"; continue; }
    echo "== loss curve, --fp8 $fp8, $CURVE steps"
    timeout 150 "$build/kimi-plan-train-bench" "${common[@]}" --batch 4 --warmup 0 --steps "$CURVE" \
      --peak-tflops "$peak" --fp8 "$fp8" >"$out/curve_$fp8.txt" 2>&1
    grep RESULT "$out/curve_$fp8.txt"
  done
  python3 - "$out/curve_none.txt" "$out/curve_experts.txt" <<'PY'
import re, sys
a, b = ([float(m.group(1)) for m in re.finditer(r"loss (\S+)", open(f).read())] for f in sys.argv[1:])
n = min(len(a), len(b))
if n:
    gaps = [abs(x - y) for x, y in zip(a[:n], b[:n])]
    k = min(20, n)
    print(f"curve: {n} steps, max |bf16 - fp8| {max(gaps):.4f} nats, mean {sum(gaps)/n:.4f}; "
          f"last-{k} means {sum(a[n-k:n])/k:.4f} (bf16) vs {sum(b[n-k:n])/k:.4f} (fp8)")
PY
fi
if [ "${INT4:-1}" = 1 ] && [ -x "$build/kimi-plan-int4-bench" ] && [ "$(left)" -gt 60 ]; then
  echo "== INT4 expert products"
  timeout 90 "$build/kimi-plan-int4-bench" --device cuda --tokens 128,2048,8192 --reps 10 --warmup 3 2>&1 |
    tee "$out/int4_bench.txt"
fi
echo "done in $((SECONDS - start)) s"
