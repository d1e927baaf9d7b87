#!/usr/bin/env bash
# Issue 35's runs of every parallel dimension over NCCL. Builds
# kimi-plan-layout-bench (scripts/gpu_build.sh) and runs `kimi-plan run`'s
# training session on one GPU (the reference curve; REFERENCE=0 leaves it
# out, and the first layout's curve is the reference), then each layout on
# its ranks. For each: the median step, tokens/s, every rank's peak memory,
# and the largest gap of its loss curve from the reference; then the
# `kimi-plan plan` command of each, to price here (docs/benchmarks.md).
#
# Run 1 (two GPUs), the default LAYOUTS: tp 2 with sequence parallelism,
# cp 2, ep 2, etp 2, and pp 2 x vp 2 with the AttnRes cache on and off.
# Run 2 (eight GPUs), the predictions of docs/benchmarks.md's "Eight H200s":
#   REFERENCE=0 SHAPE=bench/kimi-node.json BATCH=64 SEQ=4096 LAYOUTS="8:--ep 8 --micro-batch 8;
#   8:--pp 4 --vp 2 --schedule interleaved-1f1b --ep 2 --micro-batch 1 --attnres-cache on;
#   8:--pp 4 --vp 2 --schedule interleaved-1f1b --ep 2 --micro-batch 1 --attnres-cache off;
#   8:--tp 2 --ep 8 --micro-batch 16" PLAN_EXTRA="--rollout-n 1 --distributed-optimizer off
#   --grad-bucket-mib 25 --activation-profile bench/profiles/kimi-node-h200-bf16.json"
#
#   scripts/gpu_parallel_dims.sh OUTDIR [DIR_WITH_nlohmann/json.hpp]
# Environment: SHAPE (bench/kimi-1b.json), BATCH (8), SEQ (1024), STEPS (20),
# WARMUP (2), DTYPE (bf16), DEVICE (cuda), BACKEND (nccl), JOBS (16),
# LAYOUTS (';'-separated, each "[WORLD:]ARGS", WORLD 2 when left out),
# REFERENCE (1), PLAN_EXTRA (flags added to the printed plan commands),
# BUILD (a directory that already holds kimi-plan-layout-bench: no build,
# e.g. build/ for a CPU dry run with DEVICE=cpu BACKEND=gloo and a small
# SHAPE).
set -u -o pipefail
out=${1:?usage: gpu_parallel_dims.sh OUTDIR [JSON_INCLUDE_DIR]}
json_inc=${2:-}
mkdir -p "$out"
root=$(cd "$(dirname "$0")/.." && pwd)
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
shape=${SHAPE:-$root/bench/kimi-1b.json}
LAYOUTS=${LAYOUTS:-"--tp 2 --sequence-parallel on;--cp 2;--ep 2;--etp 2;--pp 2 --vp 2 --schedule interleaved-1f1b --attnres-cache on;--pp 2 --vp 2 --schedule interleaved-1f1b --attnres-cache off"}

if [ -n "${BUILD:-}" ]; then
  build=$BUILD
else
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv 2>&1 | tee "$out/machine.txt"
  source "$root/scripts/gpu_build.sh"
  gpu_build "$out" "$json_inc" "${JOBS:-16}" kimi-plan-layout-bench || exit 1
fi
bench=$build/kimi-plan-layout-bench
common=(--shape "$shape" --device "${DEVICE:-cuda}" --backend "${BACKEND:-nccl}" --dtype "${DTYPE:-bf16}"
        --batch "${BATCH:-8}" --seq-len "${SEQ:-1024}" --steps "${STEPS:-20}" --warmup "${WARMUP:-2}" --json)

# NAME WORLD ARGS...: WORLD ranks, torchrun-style; rank 0's JSON to NAME.json.
launch() {
  local name=$1 world=$2 port=$((29500 + RANDOM % 1000)) pids=() rc=0 r
  shift 2
  for ((r = 0; r < world; ++r)); do
    RANK=$r LOCAL_RANK=$r WORLD_SIZE=$world LOCAL_WORLD_SIZE=$world MASTER_ADDR=127.0.0.1 MASTER_PORT=$port \
      timeout 300 "$bench" "$@" >"$out/$name.rank$r.txt" 2>"$out/$name.rank$r.err" &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  if [ $rc -ne 0 ]; then
    echo "$name: a rank failed:"
    tail -3 "$out/$name".rank*.err
    return 1
  fi
  cp "$out/$name.rank0.txt" "$out/$name.json"
}

if [ "${REFERENCE:-1}" = 1 ]; then
  echo "== one GPU (the reference curve)"
  launch one 1 "${common[@]}" || exit 1
fi
i=0
IFS=';' read -ra layouts <<<"$LAYOUTS"
for l in "${layouts[@]}"; do
  i=$((i + 1))
  world=2
  if [[ $l =~ ^[[:space:]]*([0-9]+):(.*)$ ]]; then world=${BASH_REMATCH[1]} l=${BASH_REMATCH[2]}; fi
  echo "== $world ranks: $l"
  read -ra extra <<<"$l"
  launch "layout$i" "$world" "${common[@]}" "${extra[@]}"
done

echo "== summary (${BATCH:-8} x ${SEQ:-1024} tokens a step, ${STEPS:-20} steps after ${WARMUP:-2})"
python3 - "$out" "${PLAN_EXTRA:-}" <<'PY'
import glob, json, os, sys
out, plan_extra = sys.argv[1], sys.argv[2]
runs = [p for p in [os.path.join(out, "one.json")] if os.path.exists(p)]
runs += sorted(glob.glob(os.path.join(out, "layout*.json")), key=lambda p: int(p.split("layout")[-1][:-5]))
ref = json.load(open(runs[0]))
def layout(d):
    keys = [k for k in ("tp", "cp", "ep", "etp", "pp", "vp", "dp") if d[k] > 1]
    s = " x ".join(f"{k} {d[k]}" for k in keys) or "one GPU"
    if d["pp"] > 1: s += " cache " + ("on" if d["attnres_cache"] else "off")
    return s
print("%-30s %12s %12s %22s %14s" % ("layout", "step ms", "tokens/s", "peak GB per rank", "max |dloss|"))
for path in runs:
    d = json.load(open(path))
    gap = max(abs(a - b) for a, b in zip(d["losses"], ref["losses"]))
    peaks = " ".join("%.2f" % (p / 1e9) for p in d["rank_peak_memory_bytes"])
    print("%-30s %12.2f %12.0f %22s %14.2e" % (layout(d), d["median_step_ms"], d["tokens_per_s"], peaks, gap))
# The plan of each layout, to price here (kimi-plan is not built on the GPU
# machine): the same model, batch, lengths, fp32 states and no recompute;
# one sequence a micro-batch with a pipeline, a replica's share without.
print("\nthe plans to set beside these (kimi-plan plan ... | grep actor):")
for path in runs:
    d = json.load(open(path))
    micro = d["micro_batch"] or (1 if d["pp"] > 1 else d["batch"] // d["dp"])
    dims = " ".join(f"--{k} {d[k]}" for k in ("tp", "cp", "ep", "etp", "pp", "vp", "dp"))
    sched = f" --schedule {d['schedule']}" if d["pp"] > 1 else ""
    print(f"  kimi-plan plan --model-file {d['shape']} --gpu h200 --nodes 1 --gpus-per-node {d['world']} --mode full "
          f"{dims}{sched} --seq-len {d['seq_len']} --global-batch {d['batch']} --micro-batch {micro} "
          f"--state-precision fp32 --recompute none {plan_extra}".rstrip())
PY
