#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU and PyTorch: builds the runtime-only
# tree with the CUDA kernels (scripts/gpu_build.sh), runs their tests
# (kp_kernel_tests, when .gpu-carry/googletest is carried), times KDA alone
# (kimi-plan-kda-bench), then the actor's step with the kernels off and on
# (A-B-A), one profiled step, PyTorch eager on the same shape and, with the
# part "decode", the rollout's decode (kimi-plan-decode-bench). Logs under
# OUTDIR; docs/benchmarks.md has the results.
#
#   scripts/gpu_kernels_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: SHAPE (bench/kimi-1b.json), BATCH (16), SEQ (1024), CHUNK (64),
# STEPS (10), PARTS ("tests kda train eager"; also "fused", "scan" (with "fused" or "train": the
# step with KDA's scan in fp32 between two on tensor cores), "wide", "wide_k2", "curve" and "decode"), WIDE_BATCH (8), CURVE_BATCH (4), CURVE_REFERENCE, KDA_PROFILE (0: passes of
# KDA alone under the profiler), TEST_FILTER (the kernel tests', all by default), BUDGET_S (540), JOBS (16).
set -u -o pipefail
out=${1:?usage: gpu_kernels_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 PYTHONUNBUFFERED=1
B=${BATCH:-16} T=${SEQ:-1024} C=${CHUNK:-64} N=${STEPS:-10} JOBS=${JOBS:-16} BUDGET_S=${BUDGET_S:-540}
PARTS=${PARTS:-tests kda train eager}
shape=$root/${SHAPE:-bench/kimi-1b.json}
start=$SECONDS
left() { echo $((BUDGET_S - (SECONDS - start))); }
want() { [[ " $PARTS " == *" $1 "* ]]; }
field() { grep "^$3" "$1" 2>/dev/null | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader 2>&1 | tee "$out/machine.txt"
source "$root/scripts/gpu_build.sh"
targets=(kimi-plan-train-bench kimi-plan-kda-bench)
[ -f "$root/.gpu-carry/googletest/CMakeLists.txt" ] && targets+=(kp_kernel_tests)
want decode && targets+=(kimi-plan-decode-bench)
gpu_build "$out" "$json_inc" "$JOBS" "${targets[@]}" || exit 1
grep -E "CUDA kernels" "$out/build.log"

if want tests && [ -x "$build/kp_kernel_tests" ]; then
  echo "== kernel tests"
  timeout 300 "$build/kp_kernel_tests" --gtest_filter="${TEST_FILTER:-*}" 2>&1 | tee "$out/tests.txt" | grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) |Failure|error|Expected|Which is|actual" | head -60
fi
if want kda && [ "$(left)" -gt 120 ]; then
  echo "== KDA alone"
  timeout 240 "$build/kimi-plan-kda-bench" --batch "$B" --seq-len "$T" --profile "${KDA_PROFILE:-0}" 2>&1 |
    tee "$out/kda.txt"
fi
common=(--shape "$shape" --batch "$B" --seq-len "$T" --warmup 3 --steps "$N" --device cuda --dtype bf16)
peak=0
run_train() {  # name, extra flags...
  local name=$1; shift
  [ "$(left)" -gt 100 ] || { echo "skip $name: budget"; return; }
  echo "== C++ actor: $name"
  timeout 200 "$build/kimi-plan-train-bench" "${common[@]}" --peak-tflops "$peak" "$@" 2>&1 | tee "$out/$name.txt" |
    grep -vE "^step +[0-9]+ " 
  local p; p=$(field "$out/$name.txt" peak_tflops RESULT); [ -n "$p" ] && [ "$peak" = 0 ] && peak=$p
}
if want train || want fused; then  # "fused": the kernels-on runs only
  run_train fused_a --fused 1 --kda-chunk "$C"
  want train && run_train unfused --fused 0 --kda-chunk 16
  # "scan": KDA's chunk scan in fp32 between the two tensor-core runs (A-B-A)
  want scan && run_train scan_fp32 --fused 1 --kda-chunk "$C" --kda-math fp32
  run_train fused_b --fused 1 --kda-chunk "$C" --profile 2 --memory-trace 1
fi
if want wide; then  # hidden 4096, 64 experts: where GEMMs dominate
  run_train wide --shape "$root/bench/kimi-wide.json" --batch "${WIDE_BATCH:-8}" --fused 1 --kda-chunk "$C" --profile 1
fi
if want wide_k2; then  # the same with Kimi K2's expert width for its hidden size
  run_train wide_k2 --shape "$root/bench/kimi-wide-k2.json" --batch "${WIDE_BATCH:-8}" --fused 1 --kda-chunk "$C" \
    --profile 1
fi
if want curve; then  # 200 steps each, kernels on (chunk C) and off (chunk 16)
  # CURVE_REFERENCE: an earlier run's kernels-off curve, not run again.
  runs="1 0"
  [ -n "${CURVE_REFERENCE:-}" ] && { runs=1; cp "$CURVE_REFERENCE" "$out/curve_0.txt"; }
  for f in $runs; do
    [ "$(left)" -gt 100 ] || { echo "skip curve $f: budget"; continue; }
    chunk=$C; [ $f = 0 ] && chunk=16
    echo "== loss curve, fused $f"
    timeout $(( $(left) - 30 )) "$build/kimi-plan-train-bench" --shape "$shape" --batch "${CURVE_BATCH:-4}" \
      --seq-len "$T" --warmup 0 --steps 200 --device cuda --dtype bf16 --peak-tflops 1 --fused $f \
      --kda-chunk $chunk >"$out/curve_$f.txt" 2>&1
    tail -2 "$out/curve_$f.txt"
  done
  python3 - "$out/curve_1.txt" "$out/curve_0.txt" <<'PY'
import re, sys
curves = [[float(m.group(1)) for m in re.finditer(r"loss (\S+)", open(f).read())] for f in sys.argv[1:]]
a, b = curves
n = min(len(a), len(b))
print(f"loss curves: {len(a)} and {len(b)} steps")
if n:
    diff = [abs(x - y) for x, y in zip(a, b)]
    avg = lambda c, i: sum(c[i - 9:i + 1]) / 10
    print("step  fused  unfused  |diff|")
    for i in [0, 1, 9, 49, 99, 149, 199]:
        if i < n: print(f"{i + 1:4d} {a[i]:.4f} {b[i]:.4f} {diff[i]:.4f}")
    print(f"mean |diff| over {n} steps {sum(diff) / n:.4f}; max {max(diff):.4f}; "
          f"last-10 means {avg(a, n - 1):.4f} vs {avg(b, n - 1):.4f}")
PY
fi
# kimi-1b: 8 prompts x 8 samples, 128 + 128 tokens; the growing cache's
# eager steps, the CUDA graphs' replays, the growing cache's again (A-B-A).
for steps in growing graphs growing; do
  want decode && [ "$(left)" -gt 60 ] || break
  echo "== rollout decode, steps $steps"
  timeout 120 "$build/kimi-plan-decode-bench" --shape "$shape" --device cuda --dtype bf16 --prompts 8 --samples 8 \
    --prompt-len 128 --new-tokens 128 --reps 3 --warmup 1 --decode $steps 2>&1 | tee -a "$out/decode.txt"
done
flops=$(field "$out/fused_a.txt" flops_per_token RESULT)
if want eager && [ -n "$flops" ] && [ "$(left)" -gt 100 ]; then
  echo "== PyTorch eager"
  timeout 200 python3 "$root/bench/eager_reference.py" "${common[@]}" --flops-per-token "$flops" \
    --peak-tflops "$peak" 2>&1 | tee "$out/eager.txt" | grep -vE "^step +[0-9]+ "
fi
echo "== summary ($B x $T tokens per step)"
printf '%-10s %12s %12s %8s %9s\n' run step_ms tokens/s MFU peak_GB
for f in fused_a unfused scan_fp32 fused_b eager wide wide_k2; do
  ms=$(field "$out/$f.txt" median_step_ms RESULT); [ -n "$ms" ] || continue
  printf '%-10s %12s %12s %8s %9s\n' "$f" "$ms" "$(field "$out/$f.txt" tokens_per_s RESULT)" \
    "$(field "$out/$f.txt" mfu RESULT)" "$(field "$out/$f.txt" peak_gb RESULT)"
done
echo "elapsed $((SECONDS - start)) s"
