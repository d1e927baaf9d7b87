#!/usr/bin/env bash
# End-to-end checks of `kimi-plan sdpo` on a scaled-down kimi-k3-debug: the
# colocated loop logs every step (steps, loop_steps, weight_syncs) and shows
# the simulator's prediction beside the measured breakdown; the split loop
# runs the actor's ranks, the teacher and a rollout rank over c10d Gloo, one
# step off-policy, with LoRA syncs of the adapters alone, and its pipelined
# actor's first step is the colocated one's; bad input is one line, exit 2,
# nothing written; a killed rollout rank ends the actor with a line naming
# it and keeps every logged step.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
q() { sqlite3 kimi-plan.db "$1"; }
base=(--model kimi-k3-debug --layers 3 --hidden 64 --heads 2 --experts 4 --reprompt compact
      --min-digits 1 --max-digits 1 --prompts 4 --samples 4 --max-new-tokens 4)
small=("${base[@]}" --vocab 260 --task addition)

# --- the benchmarks' configurations: what `--print-config` prints, unchanged
mkdir -p cfg
bash "$here/../scripts/make_bench_configs.sh" "$bin" cfg
check "print-config: exits 0" test $? -eq 0
for f in sdpo-colocated sdpo-split-grpo sdpo-split-grpo-lora sdpo-node; do
  check "bench/$f.json is what scripts/make_bench_configs.sh writes" cmp -s "cfg/$f.json" "$here/../bench/$f.json"
done
json_check "print-config: the flags are in the configuration" cfg/sdpo-split-grpo-lora.json \
  "d['lora']['rank'] == 8 and d['placement'] == 'split' and d['loss'] == 'grpo' and d['deterministic'] == False and d['steps'] == 60 and d['sft_steps'] == 150 and d['hidden'] == 128"
check "print-config: runs nothing, records nothing" test ! -e kimi-plan.db

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
# --- colocated, the rollout serving its routed experts as released INT4
# (a scaled kimi-k2.6: whole groups of 32): every full sync moves them
# quantised, 0.5625 bytes a weight instead of 4.
k26=(--model kimi-k2.6 --layers 3 --hidden 224 --heads 2 --experts 4 --vocab 260 --task addition --reprompt compact
     --min-digits 1 --max-digits 1 --prompts 4 --samples 4 --max-new-tokens 4 --db int4.db)
"$bin" sdpo "${k26[@]}" --steps 2 > /dev/null 2> same.err
"$bin" sdpo "${k26[@]}" --steps 2 --rollout-experts int4 --json > int4.json 2> int4.err
check "INT4 rollout: exits 0" test $? -eq 0
json_check "INT4 rollout: the loop ran both steps" int4.json "d['steps'] == 2"
# The saving is the closed form: 2 MoE layers x 4 experts x 3 matrices of
# 64 x 224 weights, each at 4 - 0.5625 bytes less.
check "INT4 rollout: syncs 0 and 1 full, each smaller than the fp32 rollout's by the experts' 4 - 0.5625 bytes a weight" test \
  "$(sqlite3 int4.db "select group_concat(version || mode || ':' || ((select bytes from weight_syncs where run_id = 1 and version = 0) - bytes), ' ') from weight_syncs where run_id = 2")" = \
  "0full:$((2 * 4 * 3 * 64 * 224 * 55 / 16)) 1full:$((2 * 4 * 3 * 64 * 224 * 55 / 16))"
"$bin" sdpo "${k26[@]}" --steps 3 --placement split --pp 2 --microbatches 2 --lora-rank 4 --loss grpo --rollout-experts int4 \
  --timeout-s 60 > /dev/null 2> int4s.err
check "INT4 rollout, split over pp 2 with LoRA: the pipeline's parts make the colocated sync; then LoRA syncs" test \
  "$(sqlite3 int4.db "select group_concat(version || mode || ':' || bytes, ' ') from weight_syncs where run_id = 3")" = \
  "0full:$(sqlite3 int4.db "select bytes from weight_syncs where run_id = 2 and version = 0") 1lora:$(sqlite3 int4.db "select bytes from weight_syncs where run_id = 3 and version = 1")"
refused "INT4 rollout of experts narrower than a group" runs \
  "^kimi-plan sdpo: --rollout-experts: int4 groups of 32 need expert widths that are multiples of 32, got 24 and 48$" \
  sdpo --model kimi-k3-debug --layers 3 --hidden 48 --heads 2 --experts 4 --vocab 260 --task addition --steps 1 \
  --rollout-experts int4
"$bin" sdpo "${small[@]}" --steps 2 > colo.txt 2> /dev/null
check "colocated: table shows the simulated step" grep -q "s simulated (ratio" colo.txt
"$bin" report --run 1 > report.txt 2>&1
check "report: the run's reward row" grep -q "^reward " report.txt
check "report: peak memory measured" test "$(q "select min(peak_memory_bytes) > 0 from steps where run_id = 1")" = 1

# --- split: actor rank 0 and one rollout rank over Gloo, LoRA, GRPO (no teacher)
"$bin" sdpo "${small[@]}" --placement split --lora-rank 4 --loss grpo --steps 4 --timeout-s 60 --json > split.json 2> split.err
check "split: exits 0" test $? -eq 0
json_check "split: summary" split.json "d['steps'] == 4 and d['placement'] == 'split'"
check "split: one step off-policy: versions 0 0 1 2" test "$(q "select group_concat(weight_version, ' ') from loop_steps where run_id = 3")" = "0 0 1 2"
check "split: pg loss logged" test "$(q "select count(pg_loss), count(distill_loss) from loop_steps where run_id = 3")" = "4|0"
check "split: initial full sync then LoRA syncs 1 2" test "$(q "select group_concat(version || mode, ' ') from weight_syncs where run_id = 3")" = "0full 1lora 2lora"
check "split: LoRA syncs are much smaller than the full one" test "$(q "select (select bytes from weight_syncs where run_id = 3 and version = 1) * 5 < (select bytes from weight_syncs where run_id = 3 and version = 0)")" = 1

# --- split: a warm start several times longer than --timeout-s; the
# waiting rollout rank follows its heartbeat instead of timing out. The
# timeout leaves room for the actor's set-up before its first beat on a
# loaded 2-core machine (3 s did not, beside the other end-to-end tests).
# How long 60 SFT steps take depends on the machine (one BLAS thread or
# another core type runs them well under 16 s), so the warm start grows
# until it outlasts the timeout twice, which is what the check is about.
for sft in 60 240 960; do
  started=$SECONDS
  rm -f hb.db  # its own store: the attempts leave the run ids below unchanged
  "$bin" sdpo "${small[@]}" --placement split --loss grpo --sft-steps "$sft" --timeout-s 8 --steps 2 --db hb.db > hb.txt 2> hb.err
  hb_rc=$? hb_seconds=$((SECONDS - started))
  [ $hb_rc -ne 0 ] || [ $hb_seconds -ge 16 ] && break
done
check "split: a warm start longer than the timeout" test $hb_rc -eq 0
check "split: warm start reported" grep -qE "warm start +$sft/$sft" hb.err
[ $hb_rc -eq 0 ] || show_if_any hb.err
check "split: the run outlasted the timeout twice (else the check above proves nothing)" test "$hb_seconds" -ge 16

# --- split, a V-shaped schedule: the actor's stages 0 and 3 on rank 0, 1 and
# 2 on rank 1; every part of the sync finds its tensors (layout hash)
"$bin" sdpo "${small[@]}" --placement split --pp 2 --schedule zbv --microbatches 4 --loss grpo --steps 3 \
  > zbv.txt 2> zbv.err
check "split pp 2 zbv: exits 0" test $? -eq 0

# --- split, SDPO: the actor's pipeline on ranks 0 and 1 (4 micro-batches),
# the teacher on rank 2, the rollout on rank 3. Step 1 samples the same
# batch with the same weights as the colocated run's step 1, so its loss is
# that step's, computed by two pipeline stages in micro-batches.
"$bin" sdpo "${small[@]}" --placement split --pp 2 --microbatches 4 --steps 4 --min-lr-ratio 0.5 --timeout-s 60 \
  > pipe.txt 2> pipe.err
check "split pp 2: exits 0" test $? -eq 0
check "split pp 2: versions 0 0 1 2" test "$(q "select group_concat(weight_version, ' ') from loop_steps where run_id = 5")" = "0 0 1 2"
check "split pp 2: distillation loss logged" test "$(q "select count(distill_loss), count(pg_loss) from loop_steps where run_id = 5")" = "4|0"
check "split pp 2: syncs 0 1 2, both stages' weights" test "$(q "select group_concat(version || mode, ' ') from weight_syncs where run_id = 5")/$(q "select count(distinct bytes) from weight_syncs where run_id in (1, 5)")" = "0full 1full 2full/1"
check "split pp 2: step 1 is the colocated step 1" test "$(q "select abs(a.loss - b.loss) <= 1e-5 * abs(a.loss) and a.loss > 0 from steps a, steps b where a.run_id = 1 and b.run_id = 5 and a.step = 1 and b.step = 1")" = 1
# The cosine from 1e-3 to 5e-4 over 4 steps: step 4 (progress 3/4) at
# 5e-4 + 5e-4 (1 + cos(3 pi / 4)) / 2 = 5.7322e-4.
check "split pp 2: the learning rate decays to --min-lr-ratio" test "$(q "select abs(lr - 5.7322e-4) < 1e-8 from steps where run_id = 5 and step = 4")" = 1
check "split pp 2: teacher time measured" test "$(q "select min(teacher_s) > 0 from loop_steps where run_id = 5")" = 1

# --- bad input: one line, exit 2, nothing written
refused "unknown loss" runs "--loss: unknown loss" sdpo "${small[@]}" --loss ppo
refused "unknown placement" runs "--placement: unknown" sdpo "${small[@]}" --placement remote
refused "zero temperature" runs "--temperature" sdpo "${small[@]}" --temperature 0
refused "small vocabulary" runs "--vocab: the loop's byte tokenizer" sdpo "${base[@]}" --task addition --vocab 128
refused "min lr ratio above 1" runs "--min-lr-ratio: must be >= 0 and <= 1, got 2" sdpo "${small[@]}" --min-lr-ratio 2
refused "more stages than the layers split into" runs "--pp: 2 ranks x 3 stages do not split 3 layers" sdpo "${small[@]}" \
  --placement split --pp 2 --vp 3 --schedule interleaved-1f1b --microbatches 4
refused "microbatches that do not divide the rows" runs "--microbatches: 3 must be positive and divide the 16" sdpo \
  "${small[@]}" --placement split --pp 2 --microbatches 3
refused "uneven rollout split" runs "--prompts: 4 do not split evenly" sdpo "${small[@]}" --placement split --rollout-ranks 3
printf '{"prompt": "2+2=", "answer": "4", "verifer": "numeric"}\n' > bad.jsonl
refused "bad task file" runs "bad.jsonl:1" sdpo "${base[@]}" --vocab 260 --task bad.jsonl

# --- a rank that dies: the actor stops with a line naming it and keeps
# every logged step (rank 0 the actor, rank 1 the teacher, rank 2 the rollout)
rank() {  # rank R STORE: one rank of a 5000-step split run, replacing the shell
  RANK=$1 WORLD_SIZE=3 MASTER_ADDR=127.0.0.1 MASTER_PORT=29555 KIMI_PLAN_STORE_FILE=$2 \
    exec "$bin" sdpo "${small[@]}" --placement split --steps 5000 --timeout-s 20
}
killed() {  # killed NAME VICTIM_RANK EXPECTED: kill the victim after 2 logged steps
  local name=$1 victim=$2 expected=$3 before pids=() rc
  before=$(q "select count(*) from runs")
  rank 0 "$work/$name.store" > "$name.out" 2> "$name.err" &
  pids+=($!)
  for r in 1 2; do
    rank $r "$work/$name.store" > /dev/null 2>&1 &
    pids+=($!)
  done
  for _ in $(seq 1 600); do
    [ "$(q "select count(*) from loop_steps where run_id = $((before + 1))" 2>/dev/null || echo 0)" -ge 2 ] && break
    sleep 0.1
  done
  kill -9 "${pids[$victim]}"
  wait "${pids[0]}"
  rc=$?
  kill -9 "${pids[@]:1}" 2> /dev/null
  check "$name: the actor fails" test $rc -ne 0 -a $rc -ne 2
  check "$name: names the rank" grep -q "$expected" "$name.err"
  check "$name: the logged steps are kept" test "$(q "select count(*) from loop_steps where run_id = $((before + 1))")" -ge 2
}
killed "killed rollout" 2 "rollout rank.*2.* fell behind or died"
killed "killed teacher" 1 "teacher rank 1 fell behind or died"

finish cli_sdpo
