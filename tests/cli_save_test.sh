#!/usr/bin/env bash
# End-to-end checks of the layout-free save (issue 33): a pp 2 x dp 2 run
# of a scaled-down kimi-k2.6 saves at steps 10 and 20 (`--save`); resumed
# from step 10 on tp 2 x ep 2 its steps 11-20 continue the uninterrupted
# run within fp32 rounding, and on pp 2 x dp 2 bit for bit; `report
# --compare` sets the two beside each other; `checkpoint export` writes the
# save as a Hugging Face folder that `checkpoint inspect` reads under the
# released names; a save that never completed is not read; bad input is one
# line, exit 2, nothing written. A kimi-k3-debug run (KDA and AttnRes
# tensors, which keep their runtime names) saves on dp 2 and resumes on pp 2.
# LoRA on the INT4 base saves, resumes and exports (merged or not).
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
q() { sqlite3 sv.db "$1"; }
# continues DB FROM N: run 2's losses after step FROM (N of them) are run 1's within 1e-6.
continues() {
  python3 - "$@" <<'PY'
import sqlite3, sys
c = sqlite3.connect(sys.argv[1])
after, n = int(sys.argv[2]), int(sys.argv[3])
loss = lambda r: [l for (l,) in c.execute('select loss from steps where run_id = ? and step > ? order by step', (r, after))]
one, two = loss(1), loss(2)
assert len(one) == n and len(two) == n, (len(one), len(two))
assert all(abs(a - b) <= 1e-6 for a, b in zip(one, two)), list(zip(one, two))
PY
}
k26=(--model kimi-k2.6 --layers 3 --hidden 224 --heads 2 --experts 4 --vocab 128)
sv=("${k26[@]}" --batch 4 --seq-len 8 --steps 20 --db sv.db)

"$bin" run --nproc 4 --pp 2 --dp 2 "${sv[@]}" --save sv --save-every 10 --json > sv1.json 2> sv1.err
check "save: the run exits 0" test $? -eq 0
check "save: one file per rank at steps 10 and 20, each with its manifest" test \
  "$(cd sv && ls step-10 step-20 | tr '\n' ' ')" = \
  "step-10: manifest.json rank-0.safetensors rank-1.safetensors rank-2.safetensors rank-3.safetensors  step-20: manifest.json rank-0.safetensors rank-1.safetensors rank-2.safetensors rank-3.safetensors "
check "save: latest names step 20" test "$(cat sv/latest)" = step-20
json_check "save: the summary names the last save" sv1.json "d['save'] == 'sv/step-20'"

"$bin" run --nproc 4 --tp 2 --dp 2 --ep 2 "${sv[@]}" --resume sv/step-10 --json > sv2.json 2> sv2.err
check "resume on tp 2 x ep 2: exits 0" test $? -eq 0
json_check "resume on tp 2 x ep 2: steps 11 to 20" sv2.json "d['first_step'] == 11"
check "resume on tp 2 x ep 2: steps 11-20 continue the uninterrupted run within 1e-6" continues sv.db 10 10
"$bin" run --nproc 4 --pp 2 --dp 2 "${sv[@]}" --resume sv > sv3.out 2> sv3.err
check "resume from the save folder: its latest, step 20, is already done" grep -q "already at step 20" sv3.out
"$bin" run --nproc 4 --pp 2 --dp 2 "${sv[@]}" --resume sv/step-10 > /dev/null 2> sv4.err
check "resume on pp 2 x dp 2: exits 0" test $? -eq 0
check "resume on pp 2 x dp 2: steps 11-20 repeat the uninterrupted run bitwise" test \
  "$(q "select group_concat(printf('%.17g', loss)) from steps where run_id = (select max(id) from runs)")" = \
  "$(q "select group_concat(printf('%.17g', loss)) from steps where run_id = 1 and step > 10")"
"$bin" report --db sv.db --compare 2 --reference 1 --steps 11,20 > cmp.txt
check "report --compare sets the resumed tp 2 x ep 2 run beside the uninterrupted one" \
  bash -c "grep -q 'run 1 (kimi-k2.6), reference' cmp.txt && grep -q '^run 2' cmp.txt"

"$bin" checkpoint export sv --out hf --json > export.json 2> export.err
check "export: exits 0" test $? -eq 0
json_check "export: step 20, every tensor in one file" export.json "d['step'] == 20 and d['files'] == 1 and d['tensors'] > 20"
"$bin" checkpoint inspect hf --json > inspect.json
json_check "export: inspect reads the folder, bf16 weights under released names each with a runtime tensor" inspect.json \
  "len(d['tensors']) > 20 and all(t['runtime'] for t in d['tensors']) and any(t['name'] == 'model.embed_tokens.weight' and t['dtype'] == 'BF16' for t in d['tensors'])"
check "export: a DeepseekV3ForCausalLM config.json beside the weights, with the release's RoPE and route scale" \
  python3 -c "import json; c = json.load(open('hf/config.json')); assert c['architectures'] == ['DeepseekV3ForCausalLM'] and c['rope_scaling']['factor'] == 64 and c['routed_scaling_factor'] == 2.827 and c['torch_dtype'] == 'bfloat16' and c['num_hidden_layers'] == 3"
# The exported folder as a user gets it: its config.json is the model.
tokens=5,17,3,99,64,0,127,42
"$bin" logits --model-file hf/config.json --init-from hf --tokens $tokens --json > lg1.json 2> lg1.err
check "logits: the exported folder's config.json as the model, exit 0" test $? -eq 0
"$bin" logits "${k26[@]}" --init-from hf --tokens $tokens --json > lg2.json 2> lg2.err
check "logits: the same numbers as the preset scaled by flags" \
  python3 -c "import json; assert json.load(open('lg1.json'))['logits'] == json.load(open('lg2.json'))['logits']"
json_check "logits: [8][128] finite" lg1.json \
  "len(d['logits']) == 8 and all(len(r) == 128 for r in d['logits']) and all(abs(v) < 1e4 for r in d['logits'] for v in r)"
"$bin" logits --model-file hf/config.json --init-from hf --tokens $tokens > lg.txt
check "logits: a table, a row per token" test "$(grep -c '^ *[0-9]' lg.txt)" -ge 8
refused "logits of a token outside the vocabulary" steps \
  "^kimi-plan logits: --tokens: 128 is outside the vocabulary" \
  logits --model-file hf/config.json --init-from hf --tokens 1,128
refused "logits of a checkpoint of another architecture" steps \
  "^kimi-plan logits: --init-from: hf/config.json: the checkpoint's architecture is not the model's (moe.top_k: 4 vs 2; checkpoint vs model)$" \
  logits "${k26[@]}" --top-k 2 --init-from hf --tokens 1,2
"$bin" checkpoint export sv --out hf2 --dtype saved --max-shard-gib 0.001 --json > export2.json
json_check "export: fp32 as saved (twice bf16's bytes), in shards of at most 1 MiB with an index" export2.json \
  "d['files'] > 1 and d['bytes'] > 1.9 * $(python3 -c "import json; print(json.load(open('export.json'))['bytes'])")"
check "export: the index names every tensor" test \
  "$(python3 -c "import json; print(len(json.load(open('hf2/model.safetensors.index.json'))['weight_map']))")" = \
  "$(python3 -c "import json; print(json.load(open('export2.json'))['tensors'])")"

# A save that never completed: step 30's rank files without a manifest.
mkdir -p sv/step-30 && cp sv/step-20/rank-*.safetensors sv/step-30/ && echo step-30 > sv/latest
"$bin" run --nproc 4 --pp 2 --dp 2 "${k26[@]}" --batch 4 --seq-len 8 --steps 40 --db sv.db --resume sv > /dev/null 2> sv5.err
check "an incomplete save: exit 2" test $? -eq 2
check "an incomplete save: the ranks name it" grep -q \
  "^kimi-plan run: --resume: sv/step-30: no manifest.json (the save never completed)$" sv5.err
echo step-20 > sv/latest

k3=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --layers 4 --heads 2 --batch 4 --seq-len 8 --steps 4 --db k3.db)
"$bin" run --nproc 2 --dp 2 "${k3[@]}" --save k3 --save-every 2 > /dev/null 2> k3a.err
check "kimi-k3-debug: saved on dp 2" test -f k3/step-2/manifest.json
"$bin" run --nproc 2 --pp 2 "${k3[@]}" --resume k3/step-2 > /dev/null 2> k3b.err
check "kimi-k3-debug: resumed on pp 2, steps 3-4 within 1e-6 of dp 2's" continues k3.db 2 2

refused "--save-every without --save" steps "kimi-plan run: --save-every: needs --save" \
  run --nproc 2 --dp 2 "${sv[@]}" --save-every 5
# LoRA on the INT4 base, warm-started from the exported folder (bf16
# experts, quantised on load): saved on pp 2, resumed on dp 2; exported
# with the INT4 base as saved (adapters left out) and with the adapters
# folded in; the exported INT4 folder, read as released INT4 bytes, starts
# where the same folder dequantized does.
lq=("${k26[@]}" --batch 4 --seq-len 8 --steps 6 --lora-rank 4 --lora-native-base --db lq.db)
"$bin" run --nproc 2 --pp 2 "${lq[@]}" --init-from hf --save lq --save-every 3 > /dev/null 2> lq1.err
check "LoRA on the INT4 base: --init-from and --save on pp 2, exit 0" test $? -eq 0
check "LoRA on the INT4 base: the save holds the packed base and the adapters" python3 -c "
import json, struct
names = set()
for r in (0, 1):
    b = open('lq/step-6/rank-%d.safetensors' % r, 'rb').read()
    names |= set(json.loads(b[8:8 + struct.unpack('<Q', b[:8])[0]]))
assert 'model/model.layers.1.mlp.experts.0.gate_proj.weight_packed' in names, names
assert 'model/layers.1.moe.experts.gate_lora_a' in names and 'exp_avg/layers.0.attention.q_a.lora_b' in names, names"
"$bin" run --nproc 2 --dp 2 "${lq[@]}" --resume lq/step-3 > /dev/null 2> lq2.err
check "LoRA on the INT4 base: resumed on dp 2, steps 4-6 within 1e-6 of pp 2's" continues lq.db 3 3
"$bin" checkpoint export lq --out lq-int4 --json > lq-int4.json 2> lq-int4.err
json_check "export of the INT4 base: adapters left out, INT4 experts as saved" lq-int4.json \
  "d['adapters'] > 0 and d['merged'] == 0 and d['int4_experts']"
check "export of the INT4 base: config.json declares compressed-tensors pack-quantized INT4 in groups of 32" \
  python3 -c "import json; q = json.load(open('lq-int4/config.json'))['quantization_config']; assert q['format'] == 'pack-quantized' and q['config_groups']['group_0']['weights']['group_size'] == 32"
"$bin" checkpoint inspect lq-int4 --json > lq-inspect.json
json_check "export of the INT4 base: packed, scale and shape per expert, no adapter" lq-inspect.json \
  "sum(t['name'].endswith('_shape') and t['dtype'] == 'I32' for t in d['tensors']) == 2 * 4 * 3 and not any('lora' in t['name'] for t in d['tensors'])"
"$bin" checkpoint export lq --out lq-merged --merge-lora --json > lq-merged.json 2> lq-merged.err
json_check "export --merge-lora: every adapted weight folded, no INT4 left" lq-merged.json \
  "d['merged'] > 2 * 4 * 3 and not d['int4_experts']"
"$bin" logits --model-file lq-merged/config.json --init-from lq-merged --tokens $tokens --json > lm1.json 2> lm1.err
"$bin" logits --model-file lq-int4/config.json --init-from lq-int4 --tokens $tokens --json > lm2.json 2> lm2.err
check "export --merge-lora: the folded model serves, and its logits are not the base's" \
  python3 -c "import json; a, b = (json.load(open(f))['logits'] for f in ('lm1.json', 'lm2.json')); assert len(a) == 8 and max(abs(x - y) for r, s in zip(a, b) for x, y in zip(r, s)) > 1e-4"
one=(--nproc 1 "${k26[@]}" --batch 4 --seq-len 8 --steps 1 --lora-rank 4 --db one.db --json)
"$bin" run "${one[@]}" --init-from lq-int4 --lora-native-base --save n1 > n1.json 2> n1.err
"$bin" run "${one[@]}" --init-from lq-int4 > n2.json 2> n2.err
check "--init-from INT4 on the INT4 base: the released bytes kept bit for bit (the frozen base saved after a step)" \
  python3 -c "
import json, struct
def tensors(path):
    b = open(path, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]] for k, v in h.items() if k != '__metadata__'}
saved, released = tensors('n1/step-1/rank-0.safetensors'), tensors('lq-int4/model.safetensors')
keys = [k for k in released if k.endswith(('_packed', '_scale'))]
assert len(keys) == 2 * 2 * 4 * 3 and all(saved['model/' + k] == released[k] for k in keys), keys"
# fp32 sums in another order (a fresh dequantized matrix, not a view of the
# bank) move the loss by about 1e-6 of itself.
check "--init-from INT4 on the INT4 base: the first loss of the dequantized model within 1e-4 of itself" \
  python3 -c "import json; a, b = (json.load(open(f))['first_loss'] for f in ('n1.json', 'n2.json')); assert abs(a - b) <= 1e-4 * abs(b), (a, b)"
"$bin" run --nproc 2 --dp 2 --model kimi-k2.6 --layers 3 --hidden 256 --heads 2 --experts 4 --vocab 128 --batch 4 \
  --seq-len 8 --steps 20 --db other.db --resume sv/step-10 > /dev/null 2> wide.err
check "another width: exit 2" test $? -eq 2
check "another width: the ranks name the save and the field" grep -q "^kimi-plan run: --resume: sv/step-10 is a save of another shape (hidden: 224 vs 256; save vs this run)$" wide.err
"$bin" checkpoint export sv --out hf > /dev/null 2> again.err
check "export into a folder holding a checkpoint: exit 2" test $? -eq 2
check "export into a folder holding a checkpoint: one line" test "$(cat again.err)" = \
  "kimi-plan checkpoint: --out: hf already holds a checkpoint (choose an empty folder)"
"$bin" checkpoint export hf --out hf3 > /dev/null 2> notasave.err
check "export of a folder that is no save: exit 2" test $? -eq 2
check "export of a folder that is no save: one line, nothing written" \
  bash -c "test \"\$(wc -l < notasave.err)\" = 1 && grep -q 'neither manifest.json nor latest' notasave.err && test ! -e hf3"

finish cli_save
