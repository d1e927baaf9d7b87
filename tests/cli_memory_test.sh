#!/usr/bin/env bash
# The planner's memory per rank against what `kimi-plan run` allocates, on
# kimi-k3-debug (fp32 activations, bf16 under mixed states; 16-token
# sequences, one sequence per micro-batch)
# over Gloo processes: `kimi-plan profile` measures what each layer keeps for
# the backward on one process; `kimi-plan plan` prices every layout from it
# with the states the run keeps (fp32, or Megatron's mixed precision; the
# distributed optimizer off or on) and its 25 MiB gradient buckets; every
# rank's measured peak (the counting CPU allocator's, after the model is
# built) must be within
# 10% of the planner's figure for its pipeline rank less the CUDA/NCCL
# reserve, over PP, interleaved PP, TP with SP, EP, ETP, CP and their
# compositions up to 8 ranks, and with selective (the MoE block and MLP
# redone) and full recomputation. Bad profile input is one line and exit 2.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

model=(--model kimi-k3-debug --seq-len 16)
check "profile: one forward and backward measured" "$bin" profile "${model[@]}" --batch 1 --out profile.json
check "profile: a figure for each of the 17 layers" python3 -c "
import json; p = json.load(open('profile.json'))
assert len(p['layers']) == 17 and min(p['layers']) > 0 and p['tokens'] == 16, p
# With each layer's MoE block or MLP recomputed, every layer keeps less.
r = p['ffn_recomputed']
assert all(0 < k < w for k, w in zip(r['layers'], p['layers'])) and r['backward'] > 0, r"

# Megatron's mixed precision runs bf16 activations: their profile.
check "profile: bf16 activations measured" "$bin" profile "${model[@]}" --batch 1 --dtype bf16 --out profile-bf16.json

# layout: nproc schedule vp pp dp tp cp ep etp micro-batches-per-replica [distributed optimizer on|off]
# [states fp32|mixed] [recompute none|full|full:METHOD:N|selective:MODULES]
compare() {
  local name="$1" n="$2" sched="$3" vp="$4" pp="$5" dp="$6" tp="$7" cp="$8" ep="$9" etp="${10}" mb="${11}" opt="${12:-off}"
  local states="${13:-fp32}" recompute="${14:-none}" profile=profile.json dtype=fp32
  [ "$states" = mixed ] && profile=profile-bf16.json dtype=bf16
  local lay=(--schedule "$sched" --vp "$vp" --pp "$pp" --dp "$dp" --tp "$tp" --cp "$cp" --ep "$ep" --etp "$etp"
             --distributed-optimizer "$opt" --state-precision "$states" --recompute "${recompute%%:*}")
  [ "${recompute%%:*}" = selective ] && lay+=(--recompute-modules "${recompute#selective:}")
  if [ "${recompute%%:*}" = full ] && [ "$recompute" != full ]; then
    local method_layers=${recompute#full:}
    lay+=(--recompute-method "${method_layers%%:*}" --recompute-num-layers "${method_layers#*:}")
  fi
  local batch=$((dp * mb))
  "$bin" run --nproc "$n" "${lay[@]}" "${model[@]}" --dtype "$dtype" --batch "$batch" --steps 2 --db run.db --json > "run-$name.json" 2> "run-$name.err"
  "$bin" plan "${lay[@]}" "${model[@]}" --gpu h200 --nodes 1 --gpus-per-node "$n" --global-batch "$batch" \
    --micro-batch 1 --rollout-n 1 \
    --grad-bucket-mib 25 --activation-profile "$profile" --db plan.db --json > "plan-$name.json" 2> "plan-$name.err"
  check "memory $name: every rank's peak within 10% of the plan" python3 - "$name" "$((dp * tp * cp))" <<'PY'
import json, sys
name, per_stage = sys.argv[1], int(sys.argv[2])
measured = json.load(open(f"run-{name}.json"))["peak_memory_bytes_by_rank"]
plan = json.load(open(f"plan-{name}.json"))["memory"]
reserve = plan["actor"]["details"]["CUDA/NCCL reserve"]
predicted = [b - reserve for b in plan["actor_by_pipeline_rank_bytes"]]
for rank, got in enumerate(measured):
    want = predicted[rank // per_stage]  # rank = ((p dp + d) cp + c) tp + t
    ratio = got / want
    print(f"{name} rank {rank}: measured {got / 1e6:.1f} MB, planned {want / 1e6:.1f} MB, ratio {ratio:.3f}")
    assert 0.9 <= ratio <= 1.1, (rank, got, want)
PY
}

compare one       1 1f1b 1 1 1 1 1 1 1 1
compare pp2       2 1f1b 1 2 1 1 1 1 1 2
compare pp2-m4    2 1f1b 1 2 1 1 1 1 1 4
compare pp2-vp2   2 interleaved-1f1b 2 2 1 1 1 1 1 4
compare tp2       2 1f1b 1 1 1 2 1 1 1 1
compare ep2       2 1f1b 1 1 2 1 1 2 1 1
compare etp2      2 1f1b 1 1 2 1 1 1 2 1
compare cp2       2 1f1b 1 1 1 1 2 1 1 1
compare tp2-cp2   4 1f1b 1 1 1 2 2 1 1 1
compare pp2-tp2   4 1f1b 1 2 1 2 1 1 1 2
compare pp2-dp2-ep2 4 1f1b 1 2 2 1 1 2 1 2
compare dp4-ep2-etp2 4 1f1b 1 1 4 1 1 2 2 1
compare pp2-dp2-tp2 8 1f1b 1 2 2 2 1 1 1 2
# The distributed optimizer: the moments sharded over DP (and expert-DP).
compare dp4-distopt 4 1f1b 1 1 4 1 1 1 1 1 on
compare pp2-dp2-ep2-distopt 4 1f1b 1 2 2 1 1 2 1 2 on
# Megatron's mixed precision: bf16 weights, fp32 main gradients, fp32
# masters and moments (sharded with the distributed optimizer).
compare dp2-mixed 2 1f1b 1 1 2 1 1 1 1 1 off mixed
compare pp2-dp2-ep2-distopt-mixed 4 1f1b 1 2 2 1 1 2 1 2 on mixed
# Recomputation as planned: Megatron's selective modules (each layer's MoE
# block or MLP, which the profile measured redone) and full, with both.
compare pp2-dp2-ep2-distopt-mixed-selective 4 1f1b 1 2 2 1 1 2 1 2 on mixed selective:moe,mlp
compare pp2-dp2-ep2-distopt-mixed-full 4 1f1b 1 2 2 1 1 2 1 2 on mixed full
# Megatron's uniform groups: each stage keeps one input per group of 3 and
# redoes a whole group at a time.
compare pp2-dp2-ep2-distopt-mixed-uniform3 4 1f1b 1 2 2 1 1 2 1 2 on mixed full:uniform:3
# The modules whose outputs are freed after their consumer and remade.
compare pp2-dp2-ep2-distopt-mixed-outputs 4 1f1b 1 2 2 1 1 2 1 2 on mixed selective:layernorm,moe_act,mla_up_proj

# LoRA on the frozen base, held in bf16 and as released INT4
# (--lora-native-base: the model's storage format, here 4-bit routed
# experts in groups of 32, 0.5625 bytes a weight), bf16 activations, on
# kimi-k3-debug with 64 experts so that the experts are most of the weights.
python3 -c "
import json; m = json.load(open('$here/../presets/models/kimi-k3-debug.json'))
m['name'], m['moe']['num_experts'] = 'kimi-k3-debug-64', 64
m['storage'] = {'routed_expert_bits': 4, 'quant_group_size': 32}
json.dump(m, open('k3-64.json', 'w'))"
lora_model=(--model-file k3-64.json --seq-len 16)
one=(--schedule 1f1b --vp 1 --pp 1 --dp 1 --tp 1 --cp 1 --ep 1 --etp 1 --distributed-optimizer off
     --state-precision fp32 --recompute none)
check "profile: LoRA on the frozen base" "$bin" profile "${lora_model[@]}" --dtype bf16 --batch 1 --lora-rank 8 \
  --out profile-lora.json
compare_lora() {  # NAME [--lora-native-base]
  local name=$1; shift
  "$bin" run --nproc 1 "${one[@]}" "${lora_model[@]}" --dtype bf16 --lora-rank 8 "$@" --batch 1 --steps 4 --db run.db --json \
    > "run-$name.json" 2> "run-$name.err"
  "$bin" plan "${one[@]}" "${lora_model[@]}" --mode lora --lora-rank 8 "$@" --gpu h200 --nodes 1 --gpus-per-node 1 \
    --global-batch 1 --micro-batch 1 --rollout-n 1 --grad-bucket-mib 25 --activation-profile profile-lora.json \
    --db plan.db --json > "plan-$name.json" 2> "plan-$name.err"
  check "memory $name: the peak within 10% of the plan" python3 - "$name" <<'PY'
import json, sys
name = sys.argv[1]
got = json.load(open(f"run-{name}.json"))["peak_memory_bytes_by_rank"][0]
plan = json.load(open(f"plan-{name}.json"))["memory"]
want = plan["actor_by_pipeline_rank_bytes"][0] - plan["actor"]["details"]["CUDA/NCCL reserve"]
print(f"{name}: measured {got / 1e6:.1f} MB, planned {want / 1e6:.1f} MB, ratio {got / want:.3f}")
assert 0.9 <= got / want <= 1.1, (got, want)
PY
}
compare_lora lora-bf16-base
compare_lora lora-int4-base --lora-native-base
check "LoRA on the INT4 base trains: the loss falls over 4 steps" python3 -c "
import sqlite3; c = sqlite3.connect('run.db')
r = c.execute(\"select max(id) from runs\").fetchone()[0]
l = [x for (x,) in c.execute('select loss from steps where run_id = ? order by step', (r,))]
assert len(l) == 4 and l[-1] < l[0], l"
check "the INT4 base holds less than the bf16 base by the experts' bytes, as planned" python3 -c "
import json
run = lambda n: json.load(open(f'run-{n}.json'))['peak_memory_bytes_by_rank'][0]
plan = lambda n: json.load(open(f'plan-{n}.json'))['memory']['actor_by_pipeline_rank_bytes'][0]
saved, planned = run('lora-bf16-base') - run('lora-int4-base'), plan('lora-bf16-base') - plan('lora-int4-base')
print(f'saved {saved / 1e6:.1f} MB, planned {planned / 1e6:.1f} MB')
assert planned > 100e6 and abs(saved / planned - 1) < 0.1, (saved, planned)"
refused "--lora-native-base without LoRA" runs "^kimi-plan run: --lora-native-base: the native base is the frozen base of LoRA; give --lora-rank$" \
  run --nproc 1 "${lora_model[@]}" --lora-native-base --batch 1 --steps 1

# Bad input: one line naming the flag, exit 2.
echo '{"schema": "kimi-plan.activation-profile/1"}' > partial.json
refused "profile missing fields" plans "--activation-profile: partial.json: model: required field is missing" \
  plan "${model[@]}" --gpu h200 --nodes 1 --gpus-per-node 1 --activation-profile partial.json
refused "profile of another model" plans "--activation-profile: measured 17 layers of kimi-k3-debug, the model has 61" \
  plan --model deepseek-v3 --gpu h200 --nodes 1 --gpus-per-node 1 --activation-profile profile.json
refused "profile of another length" plans "--activation-profile: measured on 16-token sequences, the plan's are 32" \
  plan --model kimi-k3-debug --seq-len 32 --gpu h200 --nodes 1 --gpus-per-node 1 --activation-profile profile.json
refused "profile of full weights for LoRA" plans \
  "--activation-profile: measured training the full weights, the plan trains LoRA adapters (profile with --lora-rank)" \
  plan "${model[@]}" --gpu h200 --nodes 1 --gpus-per-node 1 --mode lora --lora-rank 8 --activation-profile profile.json
refused "state precision" plans "--state-precision: must be mixed or fp32" \
  plan "${model[@]}" --gpu h200 --nodes 1 --gpus-per-node 1 --state-precision fp8
refused "profile without --out" plans "--out: required" profile "${model[@]}"
finish cli_memory
