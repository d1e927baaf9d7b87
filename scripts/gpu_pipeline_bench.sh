#!/usr/bin/env bash
# Runs on a machine with two CUDA GPUs and PyTorch (nothing else needed):
# builds the runtime-only tree (KIMI_PLAN_RUNTIME_ONLY) against that
# PyTorch's LibTorch, then runs kimi-plan-pipeline-bench as 2 ranks (pp 2,
# one GPU each through LOCAL_RANK -> cuda:N, NCCL) with PR #4312's AttnRes
# cache on and off, and for each the simulator's prediction from the measured
# per-stage costs when a kimi-plan binary is at hand (KIMI_PLAN). Writes logs
# under OUTDIR and ends with a summary table. docs/runtime.md describes it.
#
#   scripts/gpu_pipeline_bench.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: BATCH (8), SEQ (1024), MICRO (8), VP (2), WARMUP (2), STEPS (5),
# SHAPE (bench/kimi-1b.json), JOBS (16), CACHES ("on off"), KIMI_PLAN (a kimi-plan binary, for
# the simulator's prediction; optional).
set -u -o pipefail
out=${1:?usage: gpu_pipeline_bench.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
B=${BATCH:-8} T=${SEQ:-1024} M=${MICRO:-8} VP=${VP:-2} W=${WARMUP:-2} N=${STEPS:-5} JOBS=${JOBS:-16}
shape=$root/${SHAPE:-bench/kimi-1b.json}

{
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  nvidia-smi topo -m
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, torch.cuda.device_count(), "GPUs")'
} 2>&1 | tee "$out/machine.txt"

source "$root/scripts/gpu_build.sh"
gpu_build "$out" "$json_inc" "$JOBS" kimi-plan-pipeline-bench || exit 1

# Two ranks, torchrun-style; rank 0 writes the report, rank 1 only errors.
launch() {  # NAME ARGS...
  local name=$1 port=$((29500 + RANDOM % 1000)) pids=() rc=0
  shift
  for r in 0 1; do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$build/kimi-plan-pipeline-bench" "$@" >"$out/$name.rank$r.txt" 2>"$out/$name.rank$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  cat "$out/$name.rank0.txt"
  [ $rc -ne 0 ] && { echo "$name: a rank failed:"; tail -5 "$out/$name.rank0.err" "$out/$name.rank1.err"; }
  return $rc
}

common=(--shape "$shape" --device cuda --backend nccl --dtype bf16 --pp 2 --vp "$VP" --schedule interleaved-1f1b
        --microbatches "$M" --batch "$B" --seq-len "$T" --warmup "$W" --steps "$N")
for c in ${CACHES:-on off}; do
  echo "== pipeline bench, AttnRes cache $c"
  launch "cache_$c" "${common[@]}" --attnres-cache "$c" | tee "$out/cache_$c.txt"
  launch "cache_${c}_json" "${common[@]}" --attnres-cache "$c" --json > /dev/null
  cp "$out/cache_${c}_json.rank0.txt" "$out/cache_$c.json"
  if [ -n "${KIMI_PLAN:-}" ]; then
    cmd=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['simulate_command'])" "$out/cache_$c.json")
    echo "== the simulator's prediction: $cmd"
    (cd "$out" && eval "${KIMI_PLAN} ${cmd#kimi-plan } --db $out/sim.db" | tee "$out/sim_$c.txt")
  fi
done

echo "== summary ($B x $T tokens per step, $M micro-batches, pp 2 x vp $VP)"
printf '%-8s %14s %10s %10s %10s\n' cache measured_ms F_us B_us p2p_us
for c in ${CACHES:-on off}; do
  [ -f "$out/cache_$c.json" ] || continue
  python3 - "$out/cache_$c.json" "$c" <<'PY'
import json, sys
d = json.load(open(sys.argv[1])); s = d["simulate"]
print("%-8s %14.2f %10.1f %10.1f %10.1f" % (sys.argv[2], d["median_step_ms"], s["f_us"], s["b_us"], s["p2p_us"]))
PY
done
echo "the simulate command lines are in $out/cache_*.json (simulate_command); predictions in $out/sim_*.txt"
