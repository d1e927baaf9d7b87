#!/usr/bin/env bash
# End-to-end checks of `kimi-plan plan` as a user runs it: JSON for the three
# seed presets, one row per plan in the store, and bad input refused with one
# line, exit code 2 and no row written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

check "version" bash -c "'$bin' --version | grep -qx 'kimi-plan [0-9.]*'"
check "help lists plan" bash -c "'$bin' --help | grep -q '^  plan '"

for p in h200-full b200-full h200-lora; do
  "$bin" plan --preset "$p" --json > "$p.json"
  check "$p exits 0" test $? -eq 0
  check "$p json schema" python3 - "$p.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
for k in ("feasible", "violations", "plan", "model", "memory", "step_time_s", "tokens_per_s_per_gpu", "mfu"):
    assert k in d, k
for k in ("tp", "pp", "vp", "ep", "etp", "cp", "dp", "rollout_tp", "rollout_ep", "rollout_dp"):
    assert isinstance(d["plan"][k], int), k
for role in ("actor", "reference", "rollout"):
    m = d["memory"][role]
    parts = sum(m[k] for k in ("weights_bytes", "grads_bytes", "optimizer_bytes", "activations_bytes", "other_bytes"))
    assert abs(parts - m["total_bytes"]) < 1e-3 * m["total_bytes"], role
assert d["feasible"] == (len(d["violations"]) == 0)
assert d["model"]["total_params"] > 1e12
PY
done
check "three plans recorded" test "$(count_rows plans)" = 3
check "h200-full verdict names the actor" bash -c "grep -q '\"actor: needs' h200-full.json"
check "h200-full nearest fit is larger" python3 -c "
import json; d = json.load(open('h200-full.json')); assert d['nearest_fit']['gpus'] > 128"

refused "unknown preset" plans '--preset: unknown preset "h300-full"' plan --preset h300-full
refused "zero tp" plans "--tp: must be a positive integer, got 0" plan --preset h200-full --tp 0
refused "negative nodes" plans "--nodes: must be a positive integer, got -1" plan --preset h200-full --nodes -1
refused "unknown schedule" plans '--schedule: unknown schedule "2f2b"' plan --preset h200-full --schedule 2f2b
refused "bad optimizer sync" plans '--optimizer-sync: must be sync or post-validation, got "lazy"' plan --preset h200-full --optimizer-sync lazy
refused "bad dtype" plans '--dtype: must be bf16, fp16, fp8-tensorwise, fp8-blockwise or mxfp8, got "fp8"' \
  plan --preset h200-full --dtype fp8
refused "unknown flag" plans "unrecognised option '--bogus'" plan --preset h200-full --bogus 1
refused "ep does not divide experts" plans "--ep: 7 does not divide the 384 experts" plan --preset h200-full --ep 7
refused "recompute method without full" plans "--recompute-method: needs --recompute full" \
  plan --preset h200-full --recompute-method block
refused "unknown recompute method" plans '--recompute-method: must be uniform or block, got "diagonal"' \
  plan --preset h200-full --recompute full --recompute-method diagonal
refused "recompute layers without full" plans "--recompute-num-layers: needs --recompute full" \
  plan --preset h200-full --recompute selective --recompute-num-layers 2
refused "zero recompute layers" plans "--recompute-num-layers: must be a positive integer, got 0" \
  plan --preset h200-full --recompute full --recompute-num-layers 0
refused "rollout rule" plans "--rollout-ep: with expert parallelism on" plan --preset h200-full --rollout-ep 16 --rollout-dp 1
echo '{"name": "m", "layers": 2,' > broken.json
refused "malformed model file" plans "broken.json: not valid JSON" plan --model-file broken.json --gpu h200
echo '{"name": "m", "layers": 0, "hidden": 8, "heads": 2, "vocab": 10, "dense_ffn": 16, "attention": {"pattern": ["mha"]}}' > zero.json
refused "zero layers" plans "layers: must be a positive integer, got 0" plan --model-file zero.json --gpu h200
refused "gpt flags missing vocab" plans "--vocab: required" plan --hidden 1024 --ffn-hidden 4096 --heads 16 --layers 4 --gpu h100

"$bin" plan --hidden 4096 --ffn-hidden 16384 --heads 32 --layers 32 --vocab 50257 --seq-len 2048 --gpu h100 --nodes 1 --tp 8 > gpt.txt
check "dense GPT by flags" grep -q "verdict" gpt.txt
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 3 --json > search.json
check "search reports counts" python3 -c "
import json; d = json.load(open('search.json')); s = d['search']
assert s['evaluated'] > 0 and 0 < s['feasible'] <= s['evaluated'] and len(s['top']) == 3 and d['feasible']"
check "table by default" bash -c "'$bin' plan --preset h200-lora | grep -q '^actor '"
# The search over every setting: counts that add up, settings per plan,
# the top list fastest first, both fronts.
json_check "search: considered = pruned + priced" search.json \
  "d['search']['considered'] == sum(d['search']['pruned'].values()) + d['search']['evaluated']"
json_check "search: top fastest first, with their settings" search.json \
  "[t['step_time_s'] for t in d['search']['top']] == sorted(t['step_time_s'] for t in d['search']['top']) and all(t['settings']['recompute'] in ('none', 'selective', 'full') for t in d['search']['top']) and all((t['settings']['recompute_method'] is None) == (t['settings']['recompute'] != 'full') for t in d['search']['top']) and d['step_time_s'] == d['search']['top'][0]['step_time_s']"
json_check "search: the GPU front, fewest GPUs first and faster each time" search.json \
  "len(d['search']['front_gpus']) > 0 and all(a['actor_gpus'] < b['actor_gpus'] and a['step_time_s'] > b['step_time_s'] for a, b in zip(d['search']['front_gpus'], d['search']['front_gpus'][1:]))"
json_check "search: the headroom front, fastest first and roomier each time" search.json \
  "len(d['search']['front_headroom']) > 0 and all(a['step_time_s'] < b['step_time_s'] and a['headroom_bytes'] < b['headroom_bytes'] for a, b in zip(d['search']['front_headroom'], d['search']['front_headroom'][1:]))"
# MoE: the exchange is searched (alltoall and DeepEP, overlapped or not),
# an overlapped plan only where Megatron allows it; a flag holds it.
json_check "search: every plan names its exchange, overlap only where Megatron runs it" search.json \
  "all(t['settings']['dispatcher'] in ('alltoall', 'deepep') for t in d['search']['top'] + d['search']['front_gpus']) and all(t['plan']['ep'] > 1 and (t['plan']['pp'] == 1 or t['settings']['schedule'] == 'interleaved-1f1b') and t['settings']['recompute'] != 'full' for t in d['search']['top'] + d['search']['front_gpus'] + d['search']['front_headroom'] if t['settings']['a2a_overlap'])"
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 20 --json > search_all.json
check "search: more than one exchange among the 20 fastest" python3 -c "
import json; d = json.load(open('search_all.json'))
assert len({(t['settings']['dispatcher'], t['settings']['a2a_overlap']) for t in d['search']['top']}) > 1"
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 20 --dispatcher alltoall --a2a-overlap off --json > search_held.json
json_check "search: --dispatcher and --a2a-overlap hold the exchange" search_held.json \
  "all(t['settings']['dispatcher'] == 'alltoall' and not t['settings']['a2a_overlap'] for t in d['search']['top'] + d['search']['front_gpus'] + d['search']['front_headroom']) and d['search']['considered'] * 4 == json.load(open('search_all.json'))['search']['considered']"
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 3 > search.txt
check "search table: the exchange column" grep -q "recompute  exchange" search.txt
# A seed topology that fits nothing on its cluster: the whole space on the
# fewest more nodes, and the preset's plan beside that best, term by term.
# Megatron's recompute counts: block 2 keeps more than full and recomputes
# less; the settings are in the JSON and the table.
"$bin" plan --preset h200-full --recompute full --json > full.json
"$bin" plan --preset h200-full --recompute full --recompute-method block --recompute-num-layers 2 --json > block.json
json_check "recompute block: method and layers in the JSON" block.json \
  "d['recompute'] == 'full' and d['recompute_method'] == 'block' and d['recompute_num_layers'] == 2"
json_check "recompute block: more activations, less step time than full" block.json \
  "d['memory']['actor']['activations_bytes'] > json.load(open('full.json'))['memory']['actor']['activations_bytes'] and d['step_time_s'] < json.load(open('full.json'))['step_time_s']"
json_check "recompute none: no method" h200-full.json "d['recompute_method'] is None and d['recompute_num_layers'] is None"
check "recompute block: the plan line names it" bash -c \
  "'$bin' plan --preset h200-full --recompute full --recompute-method block --recompute-num-layers 2 | grep -q 'recompute full block 2)'"
"$bin" plan --preset h200-lora --search --json > lora_search.json
json_check "h200-lora search: nearest on 3 nodes" lora_search.json \
  "d['search']['nearest']['nodes'] == 3 and d['nearest_fit']['nodes'] == 3 and d['search']['feasible'] == 0"
json_check "h200-lora search: the preset beside the best" lora_search.json \
  "d['search']['versus_preset']['preset'] == 'h200-lora' and {t['term']: t for t in d['search']['versus_preset']['terms']}['cluster GPUs']['best'] == 24 and {t['term']: t for t in d['search']['versus_preset']['terms']}['feasible']['preset'] == 'no'"
"$bin" plan --preset h200-lora --search > lora_search.txt
check "h200-lora search: the table of differing terms" grep -q "^why this beats the preset h200-lora" lora_search.txt
check "h200-lora search: a term that differs" grep -q "^memory: actor total" lora_search.txt

# The stage split: --layer-split and the engine's default, on the 1T GPT of
# Korthikanti et al. (128 layers) over tp 8 x pp 64.
gpt_shape=(--hidden 25600 --ffn-hidden 102400 --heads 160 --vocab 51200 --seq-len 2048 --gpu h200 --nodes 64 --tp 8 --pp 64)
gpt1t=("${gpt_shape[@]}" --layers 128)
last_split() { sqlite3 kimi-plan.db "select layer_split || ' ' || ifnull(layer_counts, '-') from plans order by id desc limit 1"; }
"$bin" plan "${gpt1t[@]}" --json > even.json
check "default split: exit 0" test $? -eq 0
json_check "default split is torchtitan's even one" even.json \
  "d['layer_split'] == 'even' and d['layer_counts'][:3] == [2, 3, 2] and d['memory']['actor']['pipeline_rank'] == 1"
"$bin" plan "${gpt1t[@]}" --layer-split megatron --json > megatron.json
check "--layer-split megatron: exit 0" test $? -eq 0
json_check "megatron: two layers on every stage, rank 0 the worst" megatron.json \
  "d['layer_split'] == 'megatron' and d['layer_counts'] == [2] * 64 and d['memory']['actor']['pipeline_rank'] == 0 and d['split'].startswith('emb,0-1 | 2-3 |')"
check "the plans table records the split" test "$(last_split)" = "megatron $(python3 -c "print(','.join(['2'] * 64))")"
"$bin" plan "${gpt1t[@]}" --engine verl --json > verl.json
json_check "--engine verl: megatron by default" verl.json "d['layer_split'] == 'megatron'"
ends="1$(printf ',2%.0s' $(seq 62)),3"
"$bin" plan "${gpt1t[@]}" --layer-split "$ends" --engine verl --json > ends.json
json_check "explicit counts" ends.json "d['layer_split'] == '$ends' and d['layer_counts'][0] == 1 and d['layer_counts'][63] == 3"
check "table shows the rule" bash -c "'$bin' plan ${gpt1t[*]} --layer-split megatron | grep -q '^split     megatron: emb,0-1 | 2-3'"
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 3 --layer-split auto --json > auto.json
json_check "--search --layer-split auto picks a rule per plan" auto.json \
  "all(t['layer_split'] in ('even', 'megatron') for t in d['search']['top']) and d['layer_split'] in ('even', 'megatron')"
check "auto records the rule it chose" bash -c "[ \"\$(sqlite3 kimi-plan.db 'select layer_split from plans order by id desc limit 1')\" != auto ]"

refused "split of too few stages" plans "--layer-split: 2 counts, the plan has 64 stages (pp 64 x 1 per rank)" \
  plan "${gpt1t[@]}" --layer-split 2,2
refused "split not covering the layers" plans "--layer-split: the counts sum to 127 layers, the model has 128" \
  plan "${gpt1t[@]}" --layer-split "1$(printf ',2%.0s' $(seq 62)),2"
refused "stage with no layers" plans "--layer-split: stage 1 has no layers (every stage needs at least one)" \
  plan "${gpt1t[@]}" --layer-split "3,0$(printf ',2%.0s' $(seq 62))"
refused "not a split" plans '--layer-split: "uneven" is not a layer count' plan "${gpt1t[@]}" --layer-split uneven
refused "megatron needs pp to divide the layers" plans \
  "--layer-split: Megatron-LM puts num_layers / pp on every rank, and pp 64 does not divide the 127 layers" \
  plan "${gpt_shape[@]}" --layers 127 --layer-split megatron
# Megatron builds any split: the even one, which the uneven-stage fields
# cannot give, as its pipeline_model_parallel_layout.
"$bin" plan "${gpt1t[@]}" --engine verl --layer-split even > verl-even.txt
check "verl builds the even split through a layout" \
  grep -qx 'megatron  pipeline_model_parallel_layout Ett|ttt|(tt|)\*61tL' verl-even.txt
refused "unknown engine" plans '--engine: must be native or verl, got "torchrun"' plan "${gpt1t[@]}" --engine torchrun

# Calibration tables (docs/presets.md): the plan is priced from the GPU's
# table; a broken table is refused naming --calibration-file and the field.
"$bin" plan --preset h200-lora --json > cal_on.json
"$bin" plan --preset h200-lora --calibration off --json > cal_off.json
json_check "calibration: the h200 table changes the step" cal_on.json \
  "d['step_time_s'] != json.load(open('cal_off.json'))['step_time_s']"
"$bin" plan --preset h200-lora --matmul-efficiency 0.55 --comm-efficiency 0.8 --json > cal_override.json
json_check "calibration: the constants override the table" cal_override.json \
  "abs(d['step_time_s'] - json.load(open('cal_off.json'))['step_time_s']) < 1e-12"
json_check "calibration: the step says what priced it" cal_on.json \
  "d['step']['pricing'] == 'h200 calibration table (products, memory passes, collectives)'"
json_check "calibration: the constants named when they price it" cal_override.json \
  "d['step']['pricing'] == 'matmul efficiency 0.55; comm efficiency 0.80'"
python3 - "$here/../presets/calibration/h200.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
missing = json.loads(json.dumps(t)); missing["gemm"]["bf16"] = t["gemm"]["bf16"][1:]
json.dump(missing, open("missing_shape.json", "w"))
negative = json.loads(json.dumps(t)); negative["gemm"]["bf16"][5][3] = -4.0
json.dump(negative, open("negative_time.json", "w"))
PY
refused "calibration: missing shape" plans "--calibration-file: missing_shape.json: gemm.bf16: shape m=128 n=128 k=128 is missing" \
  plan --preset h200-lora --calibration-file missing_shape.json
refused "calibration: negative time" plans "--calibration-file: negative_time.json: gemm.bf16\[5\]: time must be finite and > 0 microseconds" \
  plan --preset h200-lora --calibration-file negative_time.json
refused "calibration: unreadable" plans "--calibration-file: nope.json: no such file" \
  plan --preset h200-lora --calibration-file nope.json
refused "calibration: bad switch" plans '--calibration: must be on or off, got "maybe"' plan --preset h200-lora --calibration maybe

# validate: the planner against the published runs, mean and max errors.
"$bin" validate > validate.txt
check "validate: step-time summary" grep -q "^dense step time: 67 cases, mean |error|" validate.txt
check "validate: memory summary" grep -q "^dense memory:    48 cases, mean |error|" validate.txt
check "validate: MoE summary" grep -q "^MoE step time: 23 cases, mean |error|" validate.txt
check "validate: MoE verdicts" grep -q "^MoE verdicts:  0 refused, 0 judged not to fit, of 23 runs that ran" validate.txt
"$bin" validate --only korthikanti22 --json > validate.json
json_check "validate --json: Korthikanti's nine cases" validate.json "len(d['cases']) == 9 and d['dense']['step_time']['cases'] == 9 and d['moe']['step_time']['cases'] == 0"
refused "validate: unknown case prefix" plans '--only: no case id starts with "x"' validate --only x

# calibrate needs a CUDA GPU: refused here before anything is written.
if ! command -v nvidia-smi > /dev/null; then
  refused "calibrate: no GPU" plans "calibrate: " calibrate --out table.json
  check "calibrate: no file written" test ! -e table.json
fi

finish "cli_plan"
