#!/usr/bin/env bash
# Full training of a model of about 0.5B parameters as a plan sizes it:
# kimi-k3-debug's pattern widened (tests/models/kimi-k3-half.json), 8 Gloo
# ranks as pp 2 x dp 4 x ep 4, Megatron's distributed optimizer and mixed
# precision, with selective recomputation (each layer's MoE block or MLP,
# --recompute-modules moe,mlp) and with full recomputation, 64-token
# sequences, 2 micro-batches a replica, 2 steps each. `kimi-plan profile`
# measures the model on one process first (with and without the mixers
# recomputed); every rank's peak must be within 10% of `kimi-plan plan` for
# its pipeline rank (less the CUDA/NCCL reserve). About 2.5 minutes and 16 GB
# on 2 cores: it lives beside the suite (docs/benchmarks.md records its
# run), not in .ci/run.
#   tests/full_training_memory_check.sh build/kimi-plan
set -u
bin=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

model=(--model-file "$here/models/kimi-k3-half.json" --seq-len 64)
check "profile: the model measured on one process" "$bin" profile "${model[@]}" --batch 1 --dtype bf16 --out profile.json

# recompute: selective:MODULES or full
train() {
  local name="$1" recompute="$2"
  local lay=(--pp 2 --dp 4 --ep 4 --distributed-optimizer on --state-precision mixed --recompute "${recompute%%:*}")
  [ "${recompute%%:*}" = selective ] && lay+=(--recompute-modules "${recompute#selective:}")
  "$bin" run --nproc 8 "${lay[@]}" "${model[@]}" --dtype bf16 --batch 8 --steps 2 --db run.db --json \
    > "run-$name.json" 2> "run-$name.err"
  check "run $name: 8 ranks train 2 steps" test -s "run-$name.json"
  show_if_any "run-$name.err"
  "$bin" plan "${lay[@]}" "${model[@]}" --gpu h200 --nodes 1 --gpus-per-node 8 --global-batch 8 --micro-batch 1 \
    --rollout-n 1 --grad-bucket-mib 25 --activation-profile profile.json --db plan.db --json \
    > "plan-$name.json" 2> "plan-$name.err"
  check "plan $name: the same layout priced" test -s "plan-$name.json"
  check "$name: every rank's peak within 10% of the plan" python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
run, plan = json.load(open(f"run-{name}.json")), json.load(open(f"plan-{name}.json"))
print(f"{name}: {plan['model']['total_params'] / 1e9:.3f}B parameters")
reserve = plan["memory"]["actor"]["details"]["CUDA/NCCL reserve"]
planned = [b - reserve for b in plan["memory"]["actor_by_pipeline_rank_bytes"]]
measured = run["peak_memory_bytes_by_rank"]
per_stage = len(measured) // len(planned)
ok = True
for rank, got in enumerate(measured):
    want = planned[rank // per_stage]
    ratio = got / want
    print(f"{name} rank {rank}: measured {got / 1e9:.3f} GB, planned {want / 1e9:.3f} GB, ratio {ratio:.3f}")
    ok &= 0.9 <= ratio <= 1.1
assert ok
PY
}

train selective selective:moe,mlp
train full full
finish full_training_memory
