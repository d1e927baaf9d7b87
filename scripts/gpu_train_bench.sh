#!/usr/bin/env bash
# Runs on a machine with one CUDA GPU and PyTorch (nothing else needed): builds
# the runtime-only tree (KIMI_PLAN_RUNTIME_ONLY) against that PyTorch's
# LibTorch, then times the C++ actor (kimi-plan-train-bench) and the same model
# in PyTorch eager Python (bench/eager_reference.py) back to back on the same
# GPU, then the C++ actor once more (A-B-A, so drift shows). Writes logs under
# OUTDIR and ends with a summary table. docs/benchmarks.md has the results.
#
#   scripts/gpu_train_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: BATCH (16), SEQ (1024), WARMUP (3), STEPS (10), SHAPE
# (bench/kimi-1b.json), JOBS (16), BUDGET_S (540: optional runs are skipped
# past it).
set -u -o pipefail
out=${1:?usage: gpu_train_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
B=${BATCH:-16} T=${SEQ:-1024} W=${WARMUP:-3} N=${STEPS:-10} JOBS=${JOBS:-16} BUDGET_S=${BUDGET_S:-540}
shape=$root/${SHAPE:-bench/kimi-1b.json}
start=$SECONDS
common=(--shape "$shape" --batch "$B" --seq-len "$T" --warmup "$W" --steps "$N" --device cuda --dtype bf16)

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm,power.limit --format=csv
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.get_device_name())'
  nvcc --version | tail -1
  nproc
} 2>&1 | tee "$out/machine.txt"

source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" "$JOBS" kimi-plan-train-bench

field() { grep '^RESULT' "$1" 2>/dev/null | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }

flops=1.755300e+09  # kimi-1b at seq 1024, from the planner's formula (used only if the C++ run fails)
peak=0
if [ $build_rc -eq 0 ]; then
  echo "== C++ actor (run 1)"
  timeout 200 "$build/kimi-plan-train-bench" "${common[@]}" 2>&1 | tee "$out/cpp.txt"
  f=$(field "$out/cpp.txt" flops_per_token); p=$(field "$out/cpp.txt" peak_tflops)
  [ -n "$f" ] && flops=$f
  [ -n "$p" ] && peak=$p
fi

echo "== Python eager (PyTorch's default AdamW: foreach on CUDA)"
timeout 200 python3 "$root/bench/eager_reference.py" "${common[@]}" --flops-per-token "$flops" --peak-tflops "$peak" \
  2>&1 | tee "$out/python.txt"

if [ $build_rc -eq 0 ] && [ $((SECONDS - start)) -lt $((BUDGET_S - 90)) ]; then
  echo "== C++ actor (run 2)"
  timeout 150 "$build/kimi-plan-train-bench" "${common[@]}" --peak-tflops "$peak" 2>&1 | tee "$out/cpp2.txt"
fi
if [ $((SECONDS - start)) -lt $((BUDGET_S - 90)) ]; then
  echo "== Python eager, single-tensor AdamW (the C++ optimizer's form)"
  timeout 150 python3 "$root/bench/eager_reference.py" "${common[@]}" --flops-per-token "$flops" --peak-tflops "$peak" \
    --adamw single 2>&1 | tee "$out/python_single.txt"
fi

if [ $((SECONDS - start)) -lt $((BUDGET_S - 60)) ]; then
  echo "== Python eager, one more step under torch.profiler"
  timeout 120 python3 "$root/bench/eager_reference.py" "${common[@]}" --warmup 2 --steps 1 \
    --flops-per-token "$flops" --peak-tflops "$peak" --profile "$out/profile_python.txt" 2>&1 | tail -2
fi

echo "== summary (median step over $N timed steps after $W warm-up; $B x $T tokens per step)"
printf '%-34s %12s %12s %8s\n' run step_ms tokens/s MFU
for f in cpp cpp2 python python_single; do
  [ -f "$out/$f.txt" ] || continue
  ms=$(field "$out/$f.txt" median_step_ms); tps=$(field "$out/$f.txt" tokens_per_s); mfu=$(field "$out/$f.txt" mfu)
  [ -n "$ms" ] && printf '%-34s %12s %12s %8s\n' "$f" "$ms" "$tps" "$mfu"
done
c=$(field "$out/cpp.txt" tokens_per_s); p=$(field "$out/python.txt" tokens_per_s)
[ -n "$c" ] && [ -n "$p" ] && python3 -c "print('C++ / Python eager tokens/s ratio: %.3f' % ($c / $p))"
echo "peak bf16 matmul (measured): $peak TFLOP/s; model FLOPs per token: $flops; elapsed $((SECONDS - start)) s"
