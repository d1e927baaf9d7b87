#!/usr/bin/env bash
# End-to-end checks of `kimi-plan train` on a scaled-down kimi-k3-debug: a run
# logs every step and its configuration, checkpoints and resumes, trains from a
# token file, and bad input (a shape the model cannot take, a missing or
# truncated token file, a checkpoint of another shape) gets one line and exit 2.
# A run killed with SIGKILL keeps every step it logged, and `report` shows it
# as ended without a word.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
q() { sqlite3 kimi-plan.db "$1"; }
base=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 2 --seq-len 8)
small=("${base[@]}" --layers 3 --heads 2)

"$bin" train "${small[@]}" --steps 4 --checkpoint-dir ckpt --json > run1.json 2> run1.err
check "train exits 0" test $? -eq 0
check "the run is recorded as finished, by this host" test "$(q 'select status, host from runs where id = 1')" = "finished|$(hostname)"
check "progress on stderr" grep -q "^step     4/4  loss" run1.err
check "json summary" python3 - run1.json <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["first_step"] == 1 and d["last_step"] == 4, d
assert d["first_loss"] > 0 and d["last_loss"] > 0 and d["parameters"] == d["trainable_parameters"]
assert d["checkpoint"] == "ckpt/step-4.pt"
PY
check "four steps logged" test "$(q 'select count(*) from steps where run_id = 1')" = 4
check "run config recorded" bash -c "sqlite3 kimi-plan.db \"select config_json from runs where id = 1\" | grep -q '\"hidden\":32'"
check "checkpoint written" test -s ckpt/step-4.pt

"$bin" train "${small[@]}" --steps 6 --resume ckpt/step-4.pt --json > run2.json 2> run2.err
check "resume exits 0" test $? -eq 0
check "resume continues at step 5" python3 -c "
import json; d = json.load(open('run2.json')); assert d['first_step'] == 5 and d['last_step'] == 6, d"
check "resumed steps logged under a new run" test "$(q 'select group_concat(step) from steps where run_id = 2')" = "5,6"

python3 -c "
import struct, random
random.seed(1)
open('tokens.bin', 'wb').write(struct.pack('<400H', *[random.randrange(64) for _ in range(400)]))"
"$bin" train "${small[@]}" --steps 2 --data tokens.bin > file.txt 2>&1
check "trains from a uint16 token file" test $? -eq 0
"$bin" train "${small[@]}" --steps 2 --dtype bf16 --lora-rank 2 --save-adapters adapters.pt > lora.txt 2>&1
check "bf16 LoRA run saves its adapters" test -s adapters.pt

bad() {  # bad NAME EXPECTED ARGS...
  local name=$1 expected=$2; shift 2
  local before; before=$(q 'select count(*) from runs')
  "$bin" train "$@" > out.txt 2> err.txt
  local rc=$?
  check "$name: exit 2" test $rc -eq 2
  check "$name: one line" test "$(wc -l < err.txt)" -eq 1
  check "$name: says why" grep -q -- "$expected" err.txt
  check "$name: no run recorded" test "$(q 'select count(*) from runs')" = "$before"
}
bad "no steps" "--steps: required" "${small[@]}"
bad "zero heads" "--heads: must be >= 1" "${base[@]}" --steps 1 --heads 0
bad "top-k above experts" "moe.top_k: must be <= moe.num_experts (4)" "${small[@]}" --steps 1 --top-k 5
bad "too many layers" "--layers: at most the preset's 17" "${base[@]}" --steps 1 --layers 30
bad "bad dtype" "--dtype: must be fp32 or bf16" "${small[@]}" --steps 1 --dtype fp8
bad "bad fp8" "--fp8: must be none or experts, got \"all\"" "${small[@]}" --steps 1 --fp8 all
bad "bad kda math" "--kda-math: must be tensor-cores or fp32, got \"tf32\"" "${small[@]}" --steps 1 --kda-math tf32
"$bin" train "${small[@]}" --steps 1 --kda-math fp32 --db kda-math.db > kda-math.txt 2>&1
check "--kda-math fp32 trains" test $? -eq 0
check "--kda-math fp32 is recorded" bash -c "sqlite3 kda-math.db 'select config_json from runs' | grep -q '\"kda_math\":\"fp32\"'"
"$bin" profile --model-file "$here/../bench/dense-2b.json" --layers 2 --hidden 64 --heads 2 --vocab 64 --batch 1 \
  --seq-len 8 --fp8 experts --out dense-fp8.json > /dev/null 2> dense-fp8.err
check "profile --fp8 experts on a dense model: exit 2" test $? -eq 2
check "profile --fp8 experts on a dense model: says why" grep -q -- "--fp8: experts puts the routed experts in FP8; dense-2b-bench has none" dense-fp8.err
check "profile --fp8 experts on a dense model: no profile written" test ! -e dense-fp8.json
"$bin" train "${small[@]}" --steps 2 --fp8 experts --db fp8.db > fp8.txt 2>&1
check "FP8 experts train" test $? -eq 0
check "FP8 experts are recorded" bash -c "sqlite3 fp8.db 'select config_json from runs' | grep -q '\"fp8_experts\":\"blockwise\"'"
bad "missing token file" "--data: nope.bin: no such file" "${small[@]}" --steps 1 --data nope.bin
head -c 401 tokens.bin > odd.bin
bad "truncated token file" "--data: odd.bin is truncated" "${small[@]}" --steps 1 --data odd.bin
bad "checkpoint of another shape" "is a checkpoint of another shape (hidden: 32 vs 48" \
    --model kimi-k3-debug --layers 3 --hidden 48 --heads 2 --experts 4 --vocab 64 --steps 6 --resume ckpt/step-4.pt
bad "missing checkpoint" "--resume: nope.pt: no such file" "${small[@]}" --steps 6 --resume nope.pt

# Kill a long run once it has logged a few steps: what it logged stays.
"$bin" train "${small[@]}" --steps 100000 --db killed.db > /dev/null 2>&1 &
pid=$!
for _ in $(seq 1 600); do
  n=$(sqlite3 killed.db 'select count(*) from steps' 2>/dev/null || echo 0)
  [ "${n:-0}" -ge 5 ] && break
  sleep 0.1
done
kill -9 "$pid"
wait "$pid" 2>/dev/null
logged=$(sqlite3 killed.db 'select count(*) from steps')
check "killed run kept its steps" test "$logged" -ge 5
check "killed run's steps are 1..n" test "$(sqlite3 killed.db 'select max(step) from steps')" = "$logged"
"$bin" report --db killed.db --status ended --json > ended.json
check "killed run: report says it ended without a word, $logged of 100000 steps" python3 -c "
import json; d = json.load(open('ended.json'))
assert len(d['runs']) == 1 and d['runs'][0]['steps'] == $logged and d['runs'][0]['planned_steps'] == 100000, d"
check "killed run: not listed as running" bash -c "'$bin' report --db killed.db --status running --json | python3 -c 'import json,sys; assert json.load(sys.stdin)[\"runs\"] == []'"

# --init-from: a Hugging Face folder (the spec's independent writer, Kimi
# K2.6's names at hidden 32) whose shapes are not the model's is one line
# naming the shard and tensor, exit 2, and no store is written.
python3 "$here/safetensors_spec.py" write k26
"$bin" train --model kimi-k2.6 --layers 2 --hidden 64 --heads 2 --experts 2 --vocab 64 --steps 1 \
  --init-from k26 --db init.db > /dev/null 2> init.err
check "init-from: a checkpoint of another width exits 2" test $? -eq 2
check "init-from: one line naming the shard and tensor" grep -qxF \
  "kimi-plan train: --init-from: k26/model-00001-of-00002.safetensors: tensor model.embed_tokens.weight: shape [64, 32], the model's is [64, 64]" init.err
check "init-from: no store written" test ! -e init.db
"$bin" train --steps 1 --init-from nowhere --db init.db > /dev/null 2> none.err
check "init-from: a missing folder exits 2" test $? -eq 2

finish cli_train
