#!/usr/bin/env bash
# End-to-end checks of `kimi-plan simulate` as a user runs it: the PR's
# transport numbers, the seed's sync numbers, a loop priced from a recorded
# plan, one row per simulation, and bad input refused with one line, exit 2
# and nothing written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

"$bin" simulate attnres --layers 8 --block-size 4 --pp 2 --vp 2 --json > a.json
json_check "attnres pp2 x vp2: 5 -> 2" a.json "d['naive_entries'] == 5 and d['cached_entries'] == 2"
"$bin" simulate attnres --layers 16 --block-size 4 --pp 4 --vp 4 --json > b.json
json_check "attnres pp4 x vp4: 39 -> 12" b.json "d['naive_entries'] == 39 and d['cached_entries'] == 12 and len(d['stages']) == 16"
"$bin" simulate attnres --model kimi-k3 --pp 16 --vp 2 --json > c.json
json_check "attnres kimi-k3 pp16 x vp2" c.json "(d['option1_entries'], d['naive_entries'], d['cached_entries'], d['cached_peak_per_hop'], d['option2_peak_per_hop']) == (96, 136, 96, 4, 8)"
check "attnres table" bash -c "'$bin' simulate attnres --layers 8 --block-size 4 --pp 2 --vp 2 | grep -q 's2 (r0, v1)'"

"$bin" simulate sync --model kimi-k2.6 --mode full --json > s.json
json_check "sync full: 595.2 GB, 95.23 s TCP, 1.49 s RDMA within 2%" s.json \
  "abs(d['bytes'] / 595.2e9 - 1) < 0.02 and abs(d['tcp_s'] / 95.23 - 1) < 0.02 and abs(d['rdma_s'] / 1.49 - 1) < 0.02"
"$bin" simulate sync --model kimi-k2.6 --mode lora-shared-outer --json > so.json
json_check "sync shared-outer: 9.4 GB, 1.50 s, 23.5 ms within 2%" so.json \
  "abs(d['bytes'] / 9.4e9 - 1) < 0.02 and abs(d['tcp_s'] / 1.50 - 1) < 0.02 and abs(d['rdma_s'] / 0.0235 - 1) < 0.02"
"$bin" simulate sync --model kimi-k2.6 --mode lora-per-expert --json > pe.json
json_check "sync per-expert: 41.0 GB, 6.56 s, 102.5 ms within 2%" pe.json \
  "abs(d['bytes'] / 41.0e9 - 1) < 0.02 and abs(d['tcp_s'] / 6.56 - 1) < 0.02 and abs(d['rdma_s'] / 0.1025 - 1) < 0.02"

"$bin" plan --preset h200-lora --lora-native-base --recompute full --search --json > plan.json
plan_id=$(python3 -c "import json; print(json.load(open('plan.json'))['id'])")
"$bin" simulate loop --plan "$plan_id" --json --out figs > loop.json
json_check "loop from a recorded plan" loop.json \
  "d['plan_id'] == $plan_id and d['step_time_s'] > 0 and 0 <= d['gpu_idle_fraction'] < 1 and abs(sum(d['shares'].values()) - 1) < 1e-9"
check "loop timeline picture" grep -q "<svg" figs/loop.svg
"$bin" simulate loop --rollout-s 10 --feedback-s 2 --teacher-s 3 --train-s 5 --sync-s 1 --actor-gpus 8 --json > explicit.json
json_check "loop with explicit costs" explicit.json "d['step_time_s'] == 21"
# Pipeline: 1f1b's bubble is (p-1)(F+B+W) with free transfers; a hand-worked
# pp 2, M 2 run with F 1, B 2, W 0 and C 1 ends at 11 us.
"$bin" simulate pipeline --schedule 1f1b --pp 4 --microbatches 8 --f-us 10 --b-us 20 --w-us 5 --p2p-us 0 --json --out gantt > p.json
json_check "pipeline 1f1b closed form" p.json "d['makespan_us'] == 8 * 35 + 3 * 35 and d['peak_inflight'] == [4, 3, 2, 1]"
check "pipeline gantt written" bash -c "grep -q '<svg' gantt/pipeline.svg && grep -q '<svg' gantt/pipeline.html && test \$(wc -l < gantt/schedule.csv) -eq 4"
"$bin" simulate pipeline --schedule 1f1b --pp 4 --microbatches 8 --f-us 10 --b-us 20 --w-us 5 --p2p-us 0 --json --schedule-csv gantt/schedule.csv > pcsv.json
json_check "a dumped schedule runs the same" pcsv.json "d['makespan_us'] == 8 * 35 + 3 * 35"
"$bin" simulate pipeline --schedule 1f1b --pp 2 --microbatches 2 --f-us 1 --b-us 2 --w-us 0 --p2p-us 1 --json > hand.json
json_check "pipeline hand-worked with transfers" hand.json "d['makespan_us'] == 11 and d['critical_path_us'] == 11"
# zb-h2 on the ZB paper's profiled 6.2B costs (p 8, m 24): with its authors'
# post-validation a step is the longest rank span, M (F + B + W) + (p - 1)
# (F + B + 2C - 2W), the paper's bubble of 0.0698; synchronised, the
# makespan, which pays the last rank's fill (p - 1)(F + C): 0.1003.
zb=(simulate pipeline --schedule zb-h2 --pp 8 --microbatches 24 --f-us 29718 --b-us 29444 --w-us 19927 --p2p-us 527 --json)
"$bin" "${zb[@]}" > zbh2.json
json_check "zb-h2 post-validation reaches the paper" zbh2.json \
  "d['optimizer_sync'] == 'post-validation' and d['step_us'] == 2040670 and round(d['bubble_fraction'], 4) == 0.0698 and d['makespan_us'] == 2109851"
"$bin" "${zb[@]}" --optimizer-sync sync > zbh2_sync.json
json_check "zb-h2 synchronised pays the fill" zbh2_sync.json \
  "d['optimizer_sync'] == 'sync' and d['step_us'] == 2109851 and round(d['bubble_fraction'], 4) == 0.1003"
for c in on off; do
  "$bin" simulate pipeline --model kimi-k3 --gpu h200 --nodes 64 --tp 8 --pp 8 --vp 4 --ep 64 \
    --schedule interleaved-1f1b --global-batch 256 --attnres-cache $c --json > attn_$c.json
done
check "the rank cache shortens the plan's step" python3 -c "
import json; on = json.load(open('attn_on.json')); off = json.load(open('attn_off.json'))
assert on['makespan_us'] < off['makespan_us'], (on['makespan_us'], off['makespan_us'])"
check "every simulation recorded" test "$(count_rows simulations)" -eq 16
check "loop references its plan" test "$(sqlite3 kimi-plan.db "select plan_id from simulations where kind = 'loop' limit 1")" = "$plan_id"

refused "unknown simulation" simulations 'unknown simulation "weather"' simulate weather
refused "attnres block size" simulations "--block-size" simulate attnres --layers 8 --block-size 0 --pp 2 --vp 2
refused "attnres dense model" simulations "has no attention residuals" simulate attnres --model kimi-k2.6 --pp 2
refused "attnres split" simulations "--split: the counts sum to 7 layers" simulate attnres --layers 8 --block-size 4 --pp 2 --vp 2 --split 1,2,2,2
refused "sync mode" simulations "--mode" simulate sync --model kimi-k2.6 --mode half
refused "sync rank" simulations "--lora-rank: must be a positive integer" simulate sync --model kimi-k2.6 --mode lora-per-expert --lora-rank 0
refused "loop unknown plan" simulations "--plan: no plan with id 999" simulate loop --plan 999
refused "loop steps" simulations "--steps: must be at least 2" simulate loop --rollout-s 1 --feedback-s 1 --teacher-s 1 --train-s 1 --sync-s 1 --actor-gpus 8 --steps 1
refused "loop negative cost" simulations "--sync-s: must be >= 0" simulate loop --rollout-s 1 --feedback-s 1 --teacher-s 1 --train-s 1 --sync-s -1 --actor-gpus 8

refused "pipeline unknown schedule" simulations 'unknown schedule "2f2b"' simulate pipeline --schedule 2f2b --pp 2 --microbatches 4 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0
refused "pipeline vp on 1f1b" simulations "--vp: 1f1b has one stage per rank" simulate pipeline --schedule 1f1b --pp 2 --vp 2 --microbatches 4 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0
refused "pipeline microbatches" simulations "--microbatches" simulate pipeline --schedule interleaved-1f1b --pp 4 --vp 2 --microbatches 6 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0
refused "pipeline optimizer sync" simulations '--optimizer-sync: must be sync or post-validation, got "async"' simulate pipeline --schedule zb-h2 --pp 2 --microbatches 4 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0 --optimizer-sync async
refused "pipeline negative cost" simulations "--f-us: must be >= 0" simulate pipeline --schedule 1f1b --pp 2 --microbatches 4 --f-us -1 --b-us 1 --w-us 1 --p2p-us 0
printf '0F0,0F1,0B0,0B1\n1F0,1B0,5F1,1B1\n' > missing.csv
refused "pipeline csv names a missing stage" simulations "names stage 5" simulate pipeline --schedule 1f1b --pp 2 --microbatches 2 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0 --schedule-csv missing.csv
printf '0F0,0I0,0W0\n1I0,1W0,1F0\n' > dead.csv
refused "pipeline deadlock named" simulations "deadlock: rank 1 waits at 1I0 for 1F0" simulate pipeline --schedule 1f1b --pp 2 --microbatches 1 --f-us 1 --b-us 1 --w-us 1 --p2p-us 0 --schedule-csv dead.csv

finish "cli_simulate"
