#!/usr/bin/env bash
# End-to-end checks of `kimi-plan run` on a scaled-down kimi-k3-debug over
# c10d Gloo on 127.0.0.1: the local launcher starts 2 ranks (dp 2, and dp 2
# with ep 2) that train and log to the store; dp 2's first loss is the
# single-process `train` loss up to fp32 rounding; bad input is one line and
# exit 2 before any rank starts; pipelines (pp 2, pp 2 x vp 2, composed
# with dp 2 and ep 2) run and match the single process's step-1 loss; tensor
# parallelism (with and without SP, inside pipelines and with DP) matches the
# single process's 20 steps, as do expert tensor parallelism (alone, with
# EP, inside a pipeline) and context parallelism (alone, with TP, inside a
# pipeline, with EP); a rank killed under srun-style start ends
# its peer with a one-line error naming it, within --timeout-s; the launcher
# names a rank that was killed and stops the others.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
q() { sqlite3 kimi-plan.db "$1"; }
tiny=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --layers 3 --heads 2)
small=("${tiny[@]}" --batch 4 --seq-len 8)

"$bin" run --nproc 2 --dp 2 "${small[@]}" --steps 3 --json > dp.json 2> dp.err
check "dp 2: exits 0" test $? -eq 0
check "dp 2: rank 0's progress, tagged with its rank" grep -q "^\[rank 0\] step     3/3  loss" dp.err
check "dp 2: every progress line names its rank" test "$(grep -c '^step ' dp.err)" = 0
json_check "dp 2: json summary" dp.json "d['world'] == 2 and d['layout']['dp'] == 2 and d['backend'] == 'gloo'"
check "dp 2: three steps logged" test "$(q "select count(*) from steps where run_id = 1")" = 3
check "dp 2: run kind" test "$(q "select kind from runs where id = 1")" = run
check "dp 2: no pipeline traffic at pp 1" test "$(q "select count(*) from pipeline_traffic")" = 0

"$bin" --log-level warn run --nproc 2 --dp 2 "${small[@]}" --steps 2 --db quiet.db --json > quiet.json 2> quiet.err
check "--log-level warn: the ranks run" test $? -eq 0
check "--log-level warn: no progress from any rank" test "$(grep -cE 'step |run #' quiet.err)" = 0
"$bin" run --log-level loud --nproc 2 "${small[@]}" --steps 1 > /dev/null 2> loud.err
check "--log-level loud: exit 2" test $? -eq 2
check "--log-level loud: names the allowed levels" grep -q "^kimi-plan: --log-level: must be trace, debug, info, warn, error or off, got \"loud\"" loud.err

"$bin" train "${small[@]}" --steps 1 --json > one.json 2> one.err
check "dp 2's step-1 loss is the single process's" python3 - <<'PY'
import json, sqlite3
one = json.load(open("one.json"))["first_loss"]
dp = sqlite3.connect("kimi-plan.db").execute("select loss from steps where run_id = 1 and step = 1").fetchone()[0]
assert abs(one - dp) <= 1e-5 * abs(one), (one, dp)
PY

"$bin" run --nproc 2 --dp 2 --ep 2 "${small[@]}" --steps 2 --json > ep.json 2> ep.err
check "ep 2: exits 0" test $? -eq 0
json_check "ep 2: layout recorded" ep.json "d['layout']['ep'] == 2"
check "ep 2: two steps logged" test "$(q "select count(*) from steps where run_id = 3")" = 2
check "ep 2: the step-1 loss is dp 2's, bitwise" test "$(q "select printf('%.17g', loss) from steps where run_id = 3 and step = 1")" = "$(q "select printf('%.17g', loss) from steps where run_id = 1 and step = 1")"
check "ep 2: config names the layout" bash -c "sqlite3 kimi-plan.db \"select config_json from runs where id = 3\" | grep -q '\"ep\":2'"

# dp 4 with ep 2: two EP groups, expert banks averaged over expert-DP pairs.
"$bin" run --nproc 4 --ep 2 "${small[@]}" --steps 2 --json > dp4.json 2> dp4.err
check "dp 4 x ep 2: exits 0" test $? -eq 0
json_check "dp 4 x ep 2: layout" dp4.json "d['layout']['dp'] == 4 and d['layout']['ep'] == 2 and d['world'] == 4"

# --plan: the layout, batch and lengths of a recorded plan (dp 2, ep 2,
# 4 sequences of 8 tokens, micro-batches of 2), the model still small.
native_states=(--distributed-optimizer off --state-precision fp32)  # the states run executes
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 1 --ep 2 --global-batch 4 --seq-len 8 --micro-batch 2 "${native_states[@]}" > /dev/null
"$bin" run --nproc 2 --plan 1 "${tiny[@]}" --steps 1 --json > plan.json 2> plan.err
check "--plan: exits 0" test $? -eq 0
json_check "--plan: takes the plan's layout and micro-batch" plan.json "d['layout']['ep'] == 2 and d['layout']['dp'] == 2 and d['layout']['schedule'] == '1f1b' and d['layout']['micro_batch'] == 2"
check "--plan: the run records its plan for the report" bash -c "sqlite3 kimi-plan.db \"select config_json from runs order by id desc limit 1\" | grep -q '\"plan_id\":1'"
check "--plan: the report sets the plan's prediction beside the run" bash -c "'$bin' report \$(sqlite3 kimi-plan.db 'select max(id) from runs') | grep -qi 'predicted'"
refused "unknown plan" steps "--plan: " run --nproc 2 --plan 99 "${tiny[@]}" --steps 1
refused "--plan beside a flag it sets" steps "--tp: --plan 1 sets it" run --nproc 2 --plan 1 --tp 2 "${tiny[@]}" --steps 1
refused "--plan beside --batch" steps "--batch: --plan 1 sets it" run --nproc 2 --plan 1 "${small[@]}" --steps 1
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 1 --ep 2 --global-batch 4 --seq-len 8 > /dev/null
# --max-params is each rank's share (sharded construction): kimi-k3-debug's
# 27.5M parameters run as pp 2 under 2e7, and 1e7 names the rank over it.
"$bin" run --nproc 2 --pp 2 --model kimi-k3-debug --batch 2 --seq-len 8 --max-params 2e7 --steps 1 --json > shares.json 2> shares.err
check "--max-params: a model over it runs when every rank's share is under it" test $? -eq 0
json_check "--max-params: each rank reports its build peak" shares.json "len(d['build_peak_memory_bytes_by_rank']) == 2 and min(d['build_peak_memory_bytes_by_rank']) > 0"
refused "--max-params below a rank's share" steps "--max-params: pipeline rank 0 builds" run --nproc 2 --pp 2 --model kimi-k3-debug --batch 2 --seq-len 8 --max-params 1e7 --steps 1
"$bin" run --nproc 2 --plan 2 "${tiny[@]}" --steps 2 --json > mixed-plan.json 2> mixed-plan.err
check "--plan with Megatron's states (mixed precision) runs them" test $? -eq 0
check "--plan with Megatron's states: bf16 weights and activations recorded" bash -c "sqlite3 kimi-plan.db \"select config_json from runs order by id desc limit 1\" | grep -q '\"weight_dtype\":\"bf16\"'"

# Any split the planner gives runs as given: a Megatron split (embedding
# counted as a layer: 1 + 2 layers on pp 2) from a plan, explicit counts,
# a layout with a stage of the embedding alone. A split moves layers
# between ranks, not what they compute: every step-1 loss is the even
# split's, bitwise.
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 2 --global-batch 4 --seq-len 8 --layer-split megatron+embedding "${native_states[@]}" > /dev/null
"$bin" run --nproc 2 --plan 3 "${tiny[@]}" --dtype fp32 --steps 1 --json > megatron.json 2> megatron.err
check "--plan of a Megatron split: exits 0" test $? -eq 0
json_check "--plan of a Megatron split: its stages" megatron.json "d['layout']['stage_layers'] == [1, 2]"
"$bin" run --nproc 2 --pp 2 --global-batch 4 --seq-len 8 "${tiny[@]}" --steps 1 --json > even.json 2> even.err
json_check "the even split: its stages" even.json "d['layout']['stage_layers'] == [2, 1]"
"$bin" run --nproc 2 --pp 2 --global-batch 4 --seq-len 8 --layer-split 1,2 "${tiny[@]}" --steps 1 --json > counts.json 2> counts.err
"$bin" run --nproc 2 --pp 2 --global-batch 4 --seq-len 8 --layer-split 'E|t*3L' "${tiny[@]}" --steps 1 --json > layout.json 2> layout.err
check "every split's step-1 loss is the even split's, bitwise" python3 - <<'PY'
import json
runs = {f: json.load(open(f + ".json")) for f in ("megatron", "even", "counts", "layout")}
assert runs["counts"]["layout"]["stage_layers"] == [1, 2] and runs["layout"]["layout"]["stage_layers"] == [0, 3], runs
assert len({r["first_loss"] for r in runs.values()}) == 1, {f: r["first_loss"] for f, r in runs.items()}
PY
# FP8 (issue 34): a plan's FP8 recipe covers every linear layer, which the
# runtime does not execute; --fp8 experts (the routed experts alone) runs
# beside a bf16 plan and is recorded.
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 1 --ep 2 --global-batch 4 --seq-len 8 --micro-batch 2 "${native_states[@]}" --dtype fp8-blockwise > /dev/null
refused "--plan in fp8-blockwise" steps "on every linear layer (its --fp8 experts is the routed experts' alone)" run --nproc 2 --plan "$(q 'select max(id) from plans')" "${tiny[@]}" --steps 1
"$bin" run --nproc 2 --plan 1 "${tiny[@]}" --fp8 experts --steps 1 > /dev/null 2> fp8.err
check "--plan with --fp8 experts: exits 0" test $? -eq 0
check "--fp8 experts: recorded" bash -c "sqlite3 kimi-plan.db \"select config_json from runs order by id desc limit 1\" | grep -q '\"fp8_experts\":\"blockwise\"'"
refused "--layer-split auto is the planner's choice" steps "--layer-split: auto is the planner's choice" run --nproc 2 --pp 2 --layer-split auto "${small[@]}" --steps 1
refused "--layer-split counts that miss a layer" steps "--layer-split: " run --nproc 2 --pp 2 --layer-split 1,1 "${small[@]}" --steps 1

# The planner's flags run executes: the batch by its names (prompts x
# samples, prompt + response tokens) and micro-batches; the rest refused.
"$bin" run --nproc 2 "${tiny[@]}" --global-batch 2 --rollout-n 2 --prompt-length 6 --response-length 2 --micro-batch 1 --steps 1 --json > names.json 2> names.err
check "--global-batch x --rollout-n, --prompt-length + --response-length: exits 0" test $? -eq 0
check "the planner's names run the same step as --batch 4 --seq-len 8 (micro-batches of 1)" python3 - <<'PY'
import json
a = json.load(open("names.json"))["first_loss"]
b = json.load(open("dp.json"))["first_loss"]
assert abs(a - b) <= 1e-6 * abs(b), (a, b)
PY
# The distributed optimizer: gradients reduce-scattered, AdamW's moments
# sharded over the replicas, the updated parameters gathered. The same
# losses and norms as the whole optimizer within 1e-6 relative (the norm
# adds the owned parts' squares: a rounding apart) over 20 steps on dp 2
# and on pp 2 x dp 2 x ep 2; the ranks keep less.
for opt in off on; do
  "$bin" run --nproc 2 --dp 2 "${small[@]}" --steps 20 --distributed-optimizer "$opt" --json > "distopt_dp_$opt.json" 2> /dev/null
  "$bin" run --nproc 4 --pp 2 --dp 2 --ep 2 "${tiny[@]}" --batch 8 --seq-len 8 --steps 20 --distributed-optimizer "$opt" --json > "distopt_pp_$opt.json" 2> /dev/null
done
check "distributed optimizer: every step's loss and norm the whole optimizer's within 1e-6; smaller peaks" python3 - <<'PY'
import json, sqlite3
db = sqlite3.connect("kimi-plan.db")
for layout in ("dp", "pp"):
    off, on = (json.load(open(f"distopt_{layout}_{o}.json")) for o in ("off", "on"))
    steps = [db.execute("select loss, grad_norm from steps where run_id = ? order by step", (r["run_id"],)).fetchall() for r in (off, on)]
    assert len(steps[0]) == 20 and len(steps[1]) == 20, (layout, steps)
    worst = max(abs(a - b) / abs(a) for x, y in zip(*steps) for a, b in zip(x, y))
    print(f"{layout}: worst relative difference of a loss or norm, distributed optimizer on against off: {worst:.1e}")
    assert worst <= 1e-6, (layout, steps)
    assert max(on["peak_memory_bytes_by_rank"]) < max(off["peak_memory_bytes_by_rank"]), (layout, off, on)
PY

# Megatron's mixed precision (--state-precision mixed): bf16 weight
# matrices, fp32 main gradients, fp32 masters and moments. With the
# distributed optimizer on or off the masters update element by element and
# the norm is a rounding apart, as in fp32 above (1e-6); but a master one
# fp32 rounding apart may round to the other bf16 weight, 2^-8 away, and
# from that step the runs part like any two bf16 runs: every step's loss
# and norm within 0.5% (measured 1e-9 until the first such step, then up
# to 6e-4). Against the fp32 states, every step's loss within 1% over 20
# steps (measured 0.08%), side by side in `report --compare`.
for states in fp32 mixed-off mixed-on; do
  precision=${states%%-*}; opt=${states#*-}; [ "$states" = fp32 ] && opt=off
  "$bin" run --nproc 2 --dp 2 "${small[@]}" --dtype bf16 --steps 20 --state-precision "$precision" \
    --distributed-optimizer "$opt" --json > "states_dp_$states.json" 2> /dev/null
  "$bin" run --nproc 4 --pp 2 --dp 2 --ep 2 "${tiny[@]}" --batch 8 --seq-len 8 --dtype bf16 --steps 20 \
    --state-precision "$precision" --distributed-optimizer "$opt" --json > "states_pp_$states.json" 2> /dev/null
done
check "mixed precision: optimizer sharded or not within 0.5%; within 1% of the fp32 states' losses" python3 - <<'PY'
import json, sqlite3
db = sqlite3.connect("kimi-plan.db")
for layout in ("dp", "pp"):
    runs = [json.load(open(f"states_{layout}_{s}.json")) for s in ("fp32", "mixed-off", "mixed-on")]
    fp32, off, on = (db.execute("select loss, grad_norm from steps where run_id = ? order by step",
                                (r["run_id"],)).fetchall() for r in runs)
    assert len(off) == 20 and len(on) == 20, (layout, off, on)
    parted = max(abs(a - b) / abs(a) for x, y in zip(off, on) for a, b in zip(x, y))
    print(f"{layout}: worst relative difference of a loss or norm, mixed states, distributed optimizer on against off: {parted:.1e}")
    assert parted <= 5e-3, (layout, off, on)
    worst = max(abs(a[0] - b[0]) / a[0] for a, b in zip(fp32, off))
    print(f"{layout}: worst relative loss difference, mixed against fp32 states: {worst:.2e}")
    assert 0 < worst < 1e-2, (layout, worst)
    assert max(runs[1]["peak_memory_bytes_by_rank"]) > max(runs[2]["peak_memory_bytes_by_rank"]), layout
PY
fp32_run=$(python3 -c "import json; print(json.load(open('states_dp_fp32.json'))['run_id'])")
mixed_run=$(python3 -c "import json; print(json.load(open('states_dp_mixed-off.json'))['run_id'])")
"$bin" report --compare "$mixed_run" --reference "$fp32_run" --steps 1,10,20 > states_compare.txt 2>&1
check "mixed precision: report --compare sets its losses beside the fp32 states'" grep -q "loss" states_compare.txt
refused "mixed states without bf16 activations" steps "--state-precision: mixed keeps bf16 weights for bf16 activations" run --nproc 2 "${small[@]}" --state-precision mixed --steps 1

# Recomputation as planned: every layer (full), or each stage's first N
# (block N), each recomputed from its input, groups of N layers (uniform N),
# or Megatron's modules (the MoE blocks and the dense MLP, the shared
# experts; the norms, the experts' activation and MLA's up-projections, whose
# outputs are freed and remade): the losses are the run's without it, bitwise except for groups,
# and the first stage's peak is lower.
for rc in none full block modules shared outputs groups; do
  case $rc in none) flags=();; full) flags=(--recompute full);; block) flags=(--recompute full --recompute-method block --recompute-num-layers 1);;
    modules) flags=(--recompute selective --recompute-modules moe,mlp);;
    shared) flags=(--recompute selective --recompute-modules shared_experts);;
    outputs) flags=(--recompute selective --recompute-modules layernorm,moe_act,mla_up_proj);;
    groups) flags=(--recompute full --recompute-method uniform --recompute-num-layers 2);; esac
  "$bin" run --nproc 2 --pp 2 "${small[@]}" --steps 3 "${flags[@]}" --json > "recompute_$rc.json" 2> /dev/null
done
check "recomputation: the losses are the run's without it, bitwise; the first stage keeps less" python3 - <<'PY'
import json
r = {k: json.load(open(f"recompute_{k}.json")) for k in ("none", "full", "block", "modules", "shared", "outputs", "groups")}
bitwise = [k for k in r if k != "groups"]
assert len({(r[k]["first_loss"], r[k]["last_loss"]) for k in bitwise}) == 1, r
# A uniform group sums a block's gradient over its layers inside the group
# before adding the other layers' parts: the same forward, the same
# gradients up to that order.
g, n = r["groups"], r["none"]
assert g["first_loss"] == n["first_loss"], (g, n)
assert abs(g["last_loss"] - n["last_loss"]) <= 1e-5 * abs(n["last_loss"]), (g, n)
peak = {k: x["peak_memory_bytes_by_rank"][0] for k, x in r.items()}
assert peak["full"] < peak["block"] < peak["none"] and peak["modules"] < peak["none"], peak
assert peak["groups"] < peak["none"] and peak["shared"] < peak["none"] and peak["outputs"] < peak["none"], peak
PY
# Megatron's default selective recomputation (the attention core) keeps
# nothing a fused attention holds: it runs, as the planner prices it, as none.
"$bin" run --nproc 2 "${small[@]}" --recompute selective --steps 1 --json > selective.json 2> selective.err
check "selective recomputation of the attention core runs" test $? -eq 0
refused "a recompute method without full" steps "--recompute-method: needs --recompute full" run --nproc 2 "${small[@]}" --recompute-method block --steps 1
refused "--batch and --global-batch" steps "--batch: give --batch (sequences) or --global-batch" run --nproc 2 "${small[@]}" --global-batch 4 --steps 1
refused "a micro-batch that does not divide a replica's rows" steps "--micro-batch: 3 does not divide a replica's 2 sequences" run --nproc 2 "${small[@]}" --micro-batch 3 --steps 1
refused "recompute modules without selective" steps "--recompute-modules: needs --recompute selective" run --nproc 2 "${small[@]}" --recompute-modules moe --steps 1
for flag in "--global-batch=64 --moe-imbalance 1.2" "--grad-bucket-mib 25" "--placement split" "--gpu h100" "--flash-attention off"; do
  name=${flag%% *}; name=${name%%=*}
  [ "$name" = --global-batch ] && name=--moe-imbalance
  refused "a planner flag run does not execute: $flag" steps "$name: a planner setting kimi-plan run does not execute" run --nproc 2 "${tiny[@]}" $flag --steps 1
done

refused "world is not pp x dp" steps "--nproc: 3 ranks, but the layout needs pp x dp x cp x tp = 1 x 2 x 1 x 1" run --nproc 3 --dp 2 "${small[@]}" --steps 1
refused "ep must divide dp" steps "--ep: ep x etp = 3 x 1 must divide tp x dp x cp = 1 x 2 x 1" run --nproc 2 --ep 3 "${small[@]}" --steps 1
refused "a pipeline replica's batch below pp" steps "--batch: a pipeline replica runs 2 micro-batches (batch 4 over dp 2), which must be a multiple of pp 4" run --nproc 8 --pp 4 --dp 2 "${small[@]}" --steps 1
refused "a cp whose 2 x cp chunks do not tile the sequence" steps "--cp: the sequence length 8 does not split into 2 x 3 = 6 equal chunks" \
  run --nproc 3 --cp 3 "${small[@]}" --steps 1
refused "cp with lora" steps "--cp: context parallelism with --lora-rank is not supported yet" run --nproc 2 --cp 2 --lora-rank 4 "${small[@]}" --steps 1
refused "a tp that does not divide the heads" steps "--tp: 4 does not divide the KDA layer's 2 heads" run --nproc 4 --tp 4 "${small[@]}" --steps 1
refused "sp with a sequence tp does not split" steps "--sequence-parallel: --tp 2 does not divide the sequence length 9" \
  run --nproc 2 --tp 2 --model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 9 --layers 3 --heads 2 --steps 1
refused "etp that does not divide the expert FFN" steps "--etp: 3 does not divide the expert FFN width 32" \
  run --nproc 3 --etp 3 --model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 6 --seq-len 8 --layers 3 --heads 2 --steps 1
refused "ep x etp must divide dp" steps "--etp: ep x etp = 2 x 2 must divide tp x dp x cp = 1 x 2 x 1" run --nproc 2 --ep 2 --etp 2 "${small[@]}" --steps 1
refused "tp with etp without sp" steps "--sequence-parallel: --tp with --etp needs it on (each TP rank must route its own tokens)" \
  run --nproc 4 --tp 2 --etp 2 --sequence-parallel off "${small[@]}" --steps 1
refused "etp with lora" steps "--etp: splitting experts with --lora-rank is not supported yet" run --nproc 2 --etp 2 --lora-rank 4 "${small[@]}" --steps 1
refused "tp with ep without sp" steps "--sequence-parallel: --tp with --ep needs it on (each TP rank must route its own tokens)" \
  run --nproc 4 --tp 2 --ep 2 --sequence-parallel off "${small[@]}" --steps 1
refused "world is not pp x dp x tp" steps "--nproc: 3 ranks, but the layout needs pp x dp x cp x tp = 1 x 1 x 1 x 2" run --nproc 3 --dp 1 --tp 2 "${small[@]}" --steps 1
refused "bad steps" steps "--steps: must be a positive integer, got 0" run --nproc 2 "${small[@]}" --steps 0
refused "a rank's share too large to build" steps "--max-params: pipeline rank 0 builds 1.03e+12 parameters of kimi-k2.6" run --nproc 2 --model kimi-k2.6 --steps 1
refused "no rank, no nproc" steps "--nproc: required unless RANK is set" run "${small[@]}" --steps 1
refused "bad dtype" steps "--dtype:" run --nproc 2 "${small[@]}" --steps 1 --dtype fp16

# killed_peer NAME TAG ARGS...: two ranks started srun-style (each by hand)
# with ARGS; rank 1 is killed after step 1 and rank 0 must stop within the
# timeout with one line naming rank 1 and the collective.
killed_peer() {
  local name=$1 tag=$2; shift 2
  export WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 KIMI_PLAN_STORE_FILE="$work/store_$tag"
  RANK=0 "$bin" run "$@" --steps 100000 --log-every 1 --timeout-s 5 > "${tag}0.out" 2> "${tag}0.err" &
  local r0=$!
  RANK=1 "$bin" run "$@" --steps 100000 --timeout-s 5 > "${tag}1.out" 2> "${tag}1.err" &
  local r1=$!
  for _ in $(seq 200); do grep -q "^\[rank 0\] step     2/" "${tag}0.err" 2>/dev/null && break; sleep 0.1; done
  kill -9 $r1 2>/dev/null
  wait $r1 2>/dev/null
  local start; start=$(date +%s)
  wait $r0
  local rc=$?
  local elapsed=$(( $(date +%s) - start ))
  unset WORLD_SIZE MASTER_ADDR KIMI_PLAN_STORE_FILE
  check "$name: rank 0 exits 1" test $rc -eq 1
  check "$name: within the timeout" test $elapsed -le 6
  check "$name: one line naming rank 1 and the operation" \
    grep -qE "^kimi-plan run: (step [0-9]+: )?(allreduce|alltoall|broadcast|barrier|send|recv) on gloo group of 2 \(rank 0\): rank 1 " "${tag}0.err"
  echo "     rank 0 said: $(tail -n 1 "${tag}0.err")"
}
killed_peer "killed peer" r "${small[@]}"
check "killed peer: the steps so far are kept" test "$(q "select count(*) >= 2 from steps where run_id = (select max(id) from runs)")" = 1
# Inside a TP group (tp 2 is the whole world) the collectives run inside
# forward and backward; the failure ends rank 0 the same way.
killed_peer "killed TP peer" t --tp 2 "${small[@]}" --db tp_kill.db
# Inside an ETP group the rows are gathered and the partial sums scattered
# inside forward and backward too.
killed_peer "killed ETP peer" e --etp 2 "${small[@]}" --db etp_kill.db
# Inside a CP group the keys are gathered and KDA's states passed point to
# point inside forward and backward.
killed_peer "killed CP peer" c --cp 2 --model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 16 \
  --layers 3 --heads 2 --db cp_kill.db

# The launcher: a rank killed from outside is named, the other one stopped.
"$bin" run --nproc 2 "${small[@]}" --steps 100000 --log-every 1 --timeout-s 30 > l.out 2> l.err &
launcher=$!
for _ in $(seq 200); do grep -q "^\[rank 0\] step     2/" l.err 2>/dev/null && break; sleep 0.1; done
victim=$(pgrep -P $launcher | tail -n 1)
kill -9 "$victim"
wait $launcher
rc=$?
check "launcher: exits 1" test $rc -eq 1
check "launcher: names the killed rank" grep -q "rank 1 of 2 was killed by signal 9 (SIGKILL); the other ranks were stopped" l.err
echo "     the launcher said: $(tail -n 1 l.err)"
check "launcher: no rank left behind" test -z "$(pgrep -P $launcher)"

# Pipelines over Gloo: the simulator's action lists on separate processes,
# with and without PR #4312's rank cache, on 2 blocks of 4 layers.
pipe=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 8 --layers 8 --heads 2)
pq() { sqlite3 pipe.db "$1"; }
"$bin" train "${pipe[@]}" --steps 1 --db pipe.db > /dev/null 2>&1
for c in on off; do
  "$bin" run --nproc 2 --pp 2 "${pipe[@]}" --steps 2 --attnres-cache $c --db pipe.db > /dev/null 2> pp2_$c.err
  check "pp 2, cache $c: exits 0" test $? -eq 0
done
check "pp 2: cache on and off give the same step-1 loss, bitwise" \
  test "$(pq "select printf('%.17g', loss) from steps where run_id = 2 and step = 1")" = "$(pq "select printf('%.17g', loss) from steps where run_id = 3 and step = 1")"
check "pp 2: the step-1 loss is the single process's" python3 -c "
import sqlite3; c = sqlite3.connect('pipe.db')
one, pp = [c.execute('select loss from steps where run_id = %d and step = 1' % r).fetchone()[0] for r in (1, 2)]
assert abs(one - pp) <= 1e-6 * abs(one), (one, pp)"
for c in on off; do
  "$bin" run --nproc 2 --pp 2 --vp 2 --schedule interleaved-1f1b "${pipe[@]}" --steps 1 --attnres-cache $c --db pipe.db > /dev/null 2> vp_$c.err
  check "pp 2 x vp 2, cache $c: exits 0" test $? -eq 0
done
# 4 micro-batches of one sequence: PR #4312's 5 entries per micro-batch
# without the cache and 2 with it, forward and backward.
for dir in forward backward; do
  check "pp 2 x vp 2 $dir: 2 entries per micro-batch with the cache" test "$(pq "select sum(entries) from pipeline_traffic where run_id = 4 and direction = '$dir'")" = 8
  check "pp 2 x vp 2 $dir: 5 entries per micro-batch without" test "$(pq "select sum(entries) from pipeline_traffic where run_id = 5 and direction = '$dir'")" = 20
done
"$bin" simulate attnres --layers 8 --block-size 4 --pp 2 --vp 2 --json --db pipe.db > sim.json
json_check "the simulator's table says the same" sim.json "d['cached_entries'] == 2 and d['naive_entries'] == 5"

# The pipeline composed with DP (pp 2 x dp 2: 4 ranks, 2 sequences each)
# and with DP and EP (the experts of each stage split over its 2 replicas).
"$bin" run --nproc 4 --pp 2 --dp 2 "${pipe[@]}" --steps 2 --db pipe.db --json > ppdp.json 2> ppdp.err
check "pp 2 x dp 2: exits 0" test $? -eq 0
json_check "pp 2 x dp 2: layout" ppdp.json "d['world'] == 4 and d['layout']['pp'] == 2 and d['layout']['dp'] == 2"
"$bin" run --nproc 4 --pp 2 --dp 2 --ep 2 "${pipe[@]}" --steps 2 --db pipe.db --json > ppep.json 2> ppep.err
check "pp 2 x dp 2 x ep 2: exits 0" test $? -eq 0
check "pp 2 x dp 2 (x ep 2): the step-1 loss is the single process's" python3 -c "
import json; one = [r for r in [__import__('sqlite3').connect('pipe.db').execute('select loss from steps where run_id = 1 and step = 1').fetchone()[0]]][0]
for f in ('ppdp.json', 'ppep.json'):
    l = json.load(open(f))['first_loss']; assert abs(one - l) <= 1e-5 * abs(one), (f, one, l)"

# within_rounding DB RUN...: each RUN's 20 steps against run 1 of DB (one
# process): every loss within 1e-5 and grad norm within 1e-4 relative.
within_rounding() {
  python3 - "$@" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
rows = lambda r: c.execute('select loss, grad_norm from steps where run_id = %d order by step' % r).fetchall()
one = rows(1)
assert len(one) == 20, len(one)
for r in map(int, sys.argv[2:]):
    got = rows(r); assert len(got) == 20, (r, len(got))
    for (l1, n1), (l, n) in zip(one, got):
        assert abs(l - l1) <= 1e-5 * abs(l1) and abs(n - n1) <= 1e-4 * abs(n1), (r, l1, l, n1, n)
PY
}

# Tensor parallelism (issue 16): tp 2 with sequence parallelism inside a
# pp 2 pipeline, tp 2 without SP, and pp 2 x dp 2 x tp 2 (8 ranks), 20 steps
# each, against one process: every step's loss and grad norm agree to fp32
# rounding (the TP all-reduces add partial sums in another order), and
# report --compare sets the runs beside the single process.
tp=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 8 --layers 4 --heads 2 --steps 20 --db tp.db)
"$bin" run --nproc 1 "${tp[@]}" > /dev/null 2> tp1.err
check "tp: the single process exits 0" test $? -eq 0
"$bin" run --nproc 4 --tp 2 --pp 2 "${tp[@]}" --json > tp_pp.json 2> tp_pp.err
check "tp 2 x pp 2: exits 0" test $? -eq 0
json_check "tp 2 x pp 2: layout" tp_pp.json "d['world'] == 4 and d['layout']['tp'] == 2 and d['layout']['sequence_parallel']"
check "tp 2 x pp 2: the progress line names the layout" grep -q "pp 2 dp 1 ep 1 etp 1 cp 1 tp 2 with SP" tp_pp.err
"$bin" run --nproc 2 --tp 2 --sequence-parallel off "${tp[@]}" --json > tp_nosp.json 2> tp_nosp.err
check "tp 2 without SP: exits 0" test $? -eq 0
json_check "tp 2 without SP: layout" tp_nosp.json "d['layout']['tp'] == 2 and not d['layout']['sequence_parallel']"
"$bin" run --nproc 8 --tp 2 --pp 2 --dp 2 "${tp[@]}" > /dev/null 2> tp_8.err
check "tp 2 x pp 2 x dp 2: exits 0" test $? -eq 0
check "tp: 20 steps of each run within fp32 rounding of the single process" within_rounding tp.db 2 3 4
"$bin" report --db tp.db --compare 2 3 4 --reference 1 --steps 1,20 > tp_cmp.txt
check "tp: report --compare sets the three runs beside the single process" \
  bash -c "grep -q 'run 1 (kimi-k3-debug), reference' tp_cmp.txt && grep -q '^run 2' tp_cmp.txt && grep -q '^run 4' tp_cmp.txt"

# Expert tensor parallelism (issue 16): each expert's FFN split over 2 ranks
# with its rows gathered and partial sums scattered, alone (dp 2), with EP
# (ep 2 x etp 2: 4 ranks) and inside a pp 2 pipeline, 20 steps each against
# the single process of tp.db (run 1): fp32 rounding apart, as TP.
"$bin" run --nproc 2 --etp 2 "${tp[@]}" --json > etp.json 2> etp.err
check "etp 2: exits 0" test $? -eq 0
json_check "etp 2: layout" etp.json "d['layout']['etp'] == 2 and d['layout']['dp'] == 2"
"$bin" run --nproc 4 --ep 2 --etp 2 "${tp[@]}" > /dev/null 2> ep_etp.err
check "ep 2 x etp 2: exits 0" test $? -eq 0
check "ep 2 x etp 2: the progress line names the layout" grep -q "pp 1 dp 4 ep 2 etp 2 cp 1 tp 1" ep_etp.err
"$bin" run --nproc 4 --pp 2 --dp 2 --etp 2 "${tp[@]}" > /dev/null 2> pp_etp.err
check "pp 2 x dp 2 x etp 2: exits 0" test $? -eq 0
check "etp: 20 steps of each run within fp32 rounding of the single process" within_rounding tp.db 5 6 7

# TP with EP and ETP (Megatron's MoE folding, sequence parallelism on): the
# experts split over a stage's tp x dp ranks, each TP rank routing its own
# sequence shard: tp 2 x ep 2 (dp 2), tp 2 x pp 2 x ep 2 (EP over the TP
# pair) and tp 2 x pp 2 x dp 2 with ep 2 x etp 2 (8 ranks), 20 steps each.
"$bin" run --nproc 4 --tp 2 --ep 2 "${tp[@]}" > /dev/null 2> tp_ep.err
check "tp 2 x dp 2 x ep 2: exits 0" test $? -eq 0
"$bin" run --nproc 4 --tp 2 --pp 2 --ep 2 "${tp[@]}" > /dev/null 2> tp_pp_ep.err
check "tp 2 x pp 2 x ep 2: exits 0" test $? -eq 0
"$bin" run --nproc 8 --tp 2 --pp 2 --dp 2 --ep 2 --etp 2 "${tp[@]}" > /dev/null 2> tp_ep_etp.err
check "tp 2 x pp 2 x dp 2 with ep 2 x etp 2: exits 0" test $? -eq 0
check "tp with ep: 20 steps of each run within fp32 rounding of the single process" within_rounding tp.db 8 9 10

# Context parallelism (issue 16): each sequence of 16 split into 2 x cp
# chunks (MLA's keys gathered, KDA's state and convolution halos passed
# along), alone, with TP and SP (4 processes), inside a pp 2 pipeline and
# with EP over the CP ranks, 20 steps each against the single process:
# fp32 rounding apart; report --compare sets tp 2 x cp 2 beside it.
cp=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 16 --layers 4 --heads 2 --steps 20 --db cp.db)
"$bin" run --nproc 1 "${cp[@]}" > /dev/null 2> cp1.err
check "cp: the single process exits 0" test $? -eq 0
"$bin" run --nproc 2 --cp 2 "${cp[@]}" --json > cp2.json 2> cp2.err
check "cp 2: exits 0" test $? -eq 0
json_check "cp 2: layout" cp2.json "d['layout']['cp'] == 2 and d['layout']['dp'] == 1 and d['world'] == 2"
"$bin" run --nproc 4 --tp 2 --cp 2 "${cp[@]}" > /dev/null 2> cp_tp.err
check "tp 2 x cp 2: exits 0" test $? -eq 0
check "tp 2 x cp 2: the progress line names the layout" grep -q "pp 1 dp 1 ep 1 etp 1 cp 2 tp 2 with SP" cp_tp.err
"$bin" run --nproc 4 --pp 2 --cp 2 "${cp[@]}" > /dev/null 2> cp_pp.err
check "pp 2 x cp 2: exits 0" test $? -eq 0
"$bin" run --nproc 4 --cp 2 --ep 2 "${cp[@]}" > /dev/null 2> cp_ep.err
check "cp 2 x dp 2 x ep 2: exits 0" test $? -eq 0
check "cp: 20 steps of each run within fp32 rounding of the single process" within_rounding cp.db 2 3 4 5
"$bin" report --db cp.db --compare 3 --reference 1 --steps 1,20 > cp_cmp.txt
check "cp: report --compare sets tp 2 x cp 2 beside the single process" \
  bash -c "grep -q 'run 1 (kimi-k3-debug), reference' cp_cmp.txt && grep -q '^run 3' cp_cmp.txt"

# One training session for `train` and `run`: a pp 2 x dp 2 run writes a
# checkpoint per rank at step 2 and 4; resumed from step 2 on the same
# layout, steps 3 and 4 repeat the uninterrupted run's losses bitwise
# (fp32, one machine); another layout is refused naming both.
ck=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --layers 4 --heads 2 --batch 4 --seq-len 8 --steps 4 --db ck.db)
"$bin" run --nproc 4 --pp 2 --dp 2 "${ck[@]}" --checkpoint-dir ck --checkpoint-every 2 --json > ck1.json 2> ck1.err
check "checkpoints: the run exits 0" test $? -eq 0
check "checkpoints: one file per rank at steps 2 and 4" test "$(ls ck | sort | tr '\n' ' ')" = "step-2-rank-0.pt step-2-rank-1.pt step-2-rank-2.pt step-2-rank-3.pt step-4-rank-0.pt step-4-rank-1.pt step-4-rank-2.pt step-4-rank-3.pt "
json_check "checkpoints: the summary names the last" ck1.json "d['checkpoint'] == 'ck/step-4.pt'"
"$bin" run --nproc 4 --pp 2 --dp 2 "${ck[@]}" --resume ck/step-2.pt --json > ck2.json 2> ck2.err
check "resume: exits 0" test $? -eq 0
check "resume: continues at step 3" grep -q "resumed at step 2 from ck/step-2.pt" ck2.err
json_check "resume: steps 3 and 4" ck2.json "d['first_step'] == 3"
check "resume: steps 3 and 4 repeat the uninterrupted run's losses bitwise" test \
  "$(sqlite3 ck.db "select group_concat(printf('%.17g', loss)) from steps where run_id = 2")" = \
  "$(sqlite3 ck.db "select group_concat(printf('%.17g', loss)) from steps where run_id = 1 and step > 2")"
"$bin" run --nproc 2 --pp 2 "${ck[@]}" --resume ck/step-2.pt > /dev/null 2> ck3.err
check "resume on another layout: exit 2" test $? -eq 2
check "resume on another layout: names both layouts" grep -q 'was written by the layout "pp 2 vp 1 dp 2' ck3.err
"$bin" run --nproc 2 --dp 2 "${ck[@]}" --resume ck/nope.pt > /dev/null 2> ck4.err
check "resume from a missing checkpoint: exit 2" test $? -eq 2
check "resume from a missing checkpoint: names the rank's file" grep -qE -- "--resume: ck/nope-rank-[01].pt" ck4.err

finish cli_run
