#!/usr/bin/env bash
# End-to-end checks of `kimi-plan sdpo` on a scaled-down kimi-k3-debug: the
# colocated loop logs every step (steps, loop_steps, weight_syncs) and shows
# the simulator's prediction beside the measured breakdown; the split loop
# runs a trainer and a rollout rank over c10d Gloo, one step off-policy, with
# LoRA syncs of the adapters alone; a short SDPO run from a warm start raises
# the mean reward; bad input is one line, exit 2, nothing written; a killed
# rollout rank ends the trainer with a line naming it and keeps every logged
# step.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
source "$here/test_lib.sh"
q() { sqlite3 kimi-plan.db "$1"; }
base=(--model kimi-k3-debug --layers 3 --hidden 64 --heads 2 --experts 4 --reprompt compact
      --min-digits 1 --max-digits 1 --prompts 4 --samples 4 --max-new-tokens 4)
small=("${base[@]}" --vocab 260 --task addition)

# --- colocated: every system in one process
"$bin" sdpo "${small[@]}" --steps 3 --json > colo.json 2> colo.err
check "colocated: exits 0" test $? -eq 0
check "colocated: progress per step" test "$(grep -c '^step ' colo.err)" = 3
json_check "colocated: summary" colo.json "d['steps'] == 3 and d['placement'] == 'colocated' and d['simulated_step_s'] > 0"
check "colocated: run kind" test "$(q "select kind from runs where id = 1")" = sdpo
check "colocated: 3 steps and 3 loop steps" test "$(q "select count(*) from steps where run_id = 1")/$(q "select count(*) from loop_steps where run_id = 1")" = 3/3
check "colocated: on-policy versions 0 1 2" test "$(q "select group_concat(weight_version, ' ') from loop_steps where run_id = 1")" = "0 1 2"
check "colocated: 16 responses' tokens generated" test "$(q "select min(generated_tokens >= 16 and generated_tokens <= 64) from loop_steps where run_id = 1")" = 1
check "colocated: the sdpo loss logged, no pg loss" test "$(q "select count(distill_loss), count(pg_loss) from loop_steps where run_id = 1")" = "3|0"
# Syncs: the initial full one (version 0) and after steps 1 and 2; the full
# model's bytes each time (fp32 parameters and router biases).
check "colocated: syncs 0 1 2, full" test "$(q "select group_concat(version || mode, ' ') from weight_syncs where run_id = 1")" = "0full 1full 2full"
check "colocated: sync bytes equal" test "$(q "select count(distinct bytes) from weight_syncs where run_id = 1")" = 1
"$bin" sdpo "${small[@]}" --steps 2 > colo.txt 2> /dev/null
check "colocated: table shows the simulated step" grep -q "s simulated (ratio" colo.txt
"$bin" report --run 1 > report.txt 2>&1
check "report: the run's reward row" grep -q "^reward " report.txt
check "report: peak memory measured" test "$(q "select min(peak_memory_bytes) > 0 from steps where run_id = 1")" = 1

# --- split: trainer rank 0 and one rollout rank over Gloo, LoRA
"$bin" sdpo "${small[@]}" --placement split --lora-rank 4 --loss grpo --steps 4 --timeout-s 60 --json > split.json 2> split.err
check "split: exits 0" test $? -eq 0
json_check "split: summary" split.json "d['steps'] == 4 and d['placement'] == 'split'"
check "split: one step off-policy: versions 0 0 1 2" test "$(q "select group_concat(weight_version, ' ') from loop_steps where run_id = 3")" = "0 0 1 2"
check "split: pg loss logged" test "$(q "select count(pg_loss), count(distill_loss) from loop_steps where run_id = 3")" = "4|0"
check "split: initial full sync then LoRA syncs 1 2" test "$(q "select group_concat(version || mode, ' ') from weight_syncs where run_id = 3")" = "0full 1lora 2lora"
check "split: LoRA syncs are much smaller than the full one" test "$(q "select (select bytes from weight_syncs where run_id = 3 and version = 1) * 5 < (select bytes from weight_syncs where run_id = 3 and version = 0)")" = 1

# --- bad input: one line, exit 2, nothing written
refused "unknown loss" runs "--loss: unknown loss" sdpo "${small[@]}" --loss ppo
refused "unknown placement" runs "--placement: unknown" sdpo "${small[@]}" --placement remote
refused "zero temperature" runs "--temperature" sdpo "${small[@]}" --temperature 0
refused "small vocabulary" runs "--vocab: the loop's byte tokenizer" sdpo "${base[@]}" --task addition --vocab 128
refused "uneven rollout split" runs "--prompts: 4 do not split evenly" sdpo "${small[@]}" --placement split --rollout-ranks 3
printf '{"prompt": "2+2=", "answer": "4", "verifer": "numeric"}\n' > bad.jsonl
refused "bad task file" runs "bad.jsonl:1" sdpo "${base[@]}" --vocab 260 --task bad.jsonl

# --- a rollout rank that dies: the trainer stops with a line naming it
before=$(q "select count(*) from runs")
RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 KIMI_PLAN_STORE_FILE=$work/kill.store \
  "$bin" sdpo "${small[@]}" --placement split --steps 5000 --timeout-s 20 > kill.out 2> kill.err &
trainer=$!
RANK=1 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 KIMI_PLAN_STORE_FILE=$work/kill.store \
  "$bin" sdpo "${small[@]}" --placement split --steps 5000 --timeout-s 20 > /dev/null 2>&1 &
rollout=$!
for _ in $(seq 1 600); do
  [ "$(q "select count(*) from loop_steps where run_id = $((before + 1))" 2>/dev/null || echo 0)" -ge 2 ] && break
  sleep 0.1
done
kill -9 $rollout
wait $trainer
rc=$?
check "killed rollout: trainer fails" test $rc -ne 0 -a $rc -ne 2
check "killed rollout: names the rollout rank" grep -q "rollout rank 1" kill.err
check "killed rollout: the logged steps are kept" test "$(q "select count(*) from loop_steps where run_id = $((before + 1))")" -ge 2

finish cli_sdpo
