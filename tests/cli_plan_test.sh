#!/usr/bin/env bash
# End-to-end checks of `kimi-plan plan` as a user runs it: JSON for the three
# seed presets, one row per plan in the store, and bad input refused with one
# line, exit code 2 and no row written.
set -u
bin="$1"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
fails=0
check() {  # check NAME CONDITION...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; else echo "FAIL $name"; fails=$((fails + 1)); fi
}
rows() { sqlite3 kimi-plan.db 'select count(*) from plans'; }

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
check "three plans recorded" test "$(rows)" = 3
check "h200-full verdict names the actor" bash -c "grep -q '\"actor: needs' h200-full.json"
check "h200-full nearest fit is larger" python3 -c "
import json; d = json.load(open('h200-full.json')); assert d['nearest_fit']['gpus'] > 128"

bad() {  # bad NAME EXPECTED-PREFIX ARGS...
  local name=$1 prefix=$2; shift 2
  local before; before=$(rows)
  "$bin" plan "$@" > out.txt 2> err.txt
  local rc=$?
  check "$name: exit 2" test $rc -eq 2
  check "$name: one line" test "$(wc -l < err.txt)" -eq 1
  check "$name: names the field" grep -q -- "$prefix" err.txt
  check "$name: no row written" test "$(rows)" = "$before"
}
bad "unknown preset" '--preset: unknown preset "h300-full"' --preset h300-full
bad "zero tp" "--tp: must be a positive integer, got 0" --preset h200-full --tp 0
bad "negative nodes" "--nodes: must be a positive integer, got -1" --preset h200-full --nodes -1
bad "unknown schedule" '--schedule: unknown schedule "2f2b"' --preset h200-full --schedule 2f2b
bad "bad dtype" "--dtype: must be bf16 or fp16" --preset h200-full --dtype fp8
bad "unknown flag" "unrecognised option '--bogus'" --preset h200-full --bogus 1
bad "ep does not divide experts" "--ep: 7 does not divide the 384 experts" --preset h200-full --ep 7
bad "rollout rule" "--rollout-ep: with expert parallelism on" --preset h200-full --rollout-ep 16 --rollout-dp 1
echo '{"name": "m", "layers": 2,' > broken.json
bad "malformed model file" "broken.json: not valid JSON" --model-file broken.json --gpu h200
echo '{"name": "m", "layers": 0, "hidden": 8, "heads": 2, "vocab": 10, "dense_ffn": 16, "attention": {"pattern": ["mha"]}}' > zero.json
bad "zero layers" "layers: must be a positive integer, got 0" --model-file zero.json --gpu h200
bad "gpt flags missing vocab" "--vocab: required" --hidden 1024 --ffn-hidden 4096 --heads 16 --layers 4 --gpu h100

"$bin" plan --hidden 4096 --ffn-hidden 16384 --heads 32 --layers 32 --vocab 50257 --seq-len 2048 --gpu h100 --nodes 1 --tp 8 > gpt.txt
check "dense GPT by flags" grep -q "verdict" gpt.txt
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --search --top 3 --json > search.json
check "search reports counts" python3 -c "
import json; d = json.load(open('search.json')); s = d['search']
assert s['evaluated'] > 0 and 0 < s['feasible'] <= s['evaluated'] and len(s['top']) == 3 and d['feasible']"
check "table by default" bash -c "'$bin' plan --preset h200-lora | grep -q '^actor '"

echo "cli_plan: $((fails == 0 ? 1 : 0)) passed, $fails failed"
exit $((fails > 0))
