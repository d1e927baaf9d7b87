#!/usr/bin/env bash
# `kimi-plan ingest` end to end: a plan and its loop simulation; the Verl
# job `launch --engine verl` writes (Slurm and Modal) turning the file logger
# on with the plan id; a 60-step metrics file written as Verl's FileLogger
# writes one (tests/fixtures/verl_file_logger.py cites the source) ingested
# twice (nothing added the second time) and one being appended to
# (--follow picks the new steps up within a second); `report` and
# `report --compare` set each phase beside its prediction with the ratio,
# computed here independently from the file; `report --html` plots them on
# round ticks with the GPU's capacity on the memory bars; bad input is one
# line naming the file and line, exit 2, nothing written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
logger="$here/fixtures/verl_file_logger.py"

# ---------------------------------------------------------------- the plan
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --pp 2 --json > plan.json
plan_id=$(python3 -c "import json; print(json.load(open('plan.json'))['id'])")
"$bin" simulate loop --plan "$plan_id" --json > loop.json
read -r gen train sync tokens gpus mfu memory_gib < <(python3 - <<'PY'
import json
loop, plan = json.load(open("loop.json")), json.load(open("plan.json"))
c = loop["costs_s"]
actor = plan["memory"]["actor"]
allocated = actor["total_bytes"] - actor["details"]["CUDA/NCCL reserve"]
print(c["rollout"], c["train"], c["sync"], plan["step"]["tokens_per_step"], plan["cluster"]["actor_gpus"],
      plan["mfu"], allocated / 2**30)
PY
)
fixture() {  # fixture FILE FACTOR [more flags]: Verl's file, every phase FACTOR x the prediction
  local file=$1 factor=$2; shift 2
  python3 "$logger" "$file" --gen-s "$gen" --train-s "$train" --sync-s "$sync" --tokens "$tokens" --gpus "$gpus" \
    --mfu "$mfu" --memory-gib "$memory_gib" --factor "$factor" "$@"
}
job_file() {  # job_file DIR PLAN EXIT: the job file the launched job writes
  printf '{"schema":"kimi-plan.job/1","plan_id":%s,"engine":"verl","label":"t","metrics":"verl-metrics.jsonl","exit_code":%s}\n' \
    "$2" "$3" > "$1/kimi-plan-job.json"
}

# ---------------------------------------------------------------- launch
"$bin" launch --engine verl --target slurm --plan "$plan_id" --out job-slurm > launch_slurm.txt 2>&1
check "launch verl (Slurm): written" test -f job-slurm/kimi-plan.sbatch
check "launch verl (Slurm): the file logger on" grep -qF "'trainer.logger=[\"console\",\"file\"]'" job-slurm/kimi-plan.sbatch
check "launch verl (Slurm): its path in the job's folder" grep -qF 'VERL_FILE_LOGGER_PATH=${VERL_FILE_LOGGER_PATH:-"$KIMI_PLAN_JOB_DIR/verl-metrics.jsonl"}' job-slurm/kimi-plan.sbatch
check "launch verl (Slurm): the job folder" grep -qF 'KIMI_PLAN_JOB_DIR=${KIMI_PLAN_JOB_DIR:-"$SLURM_SUBMIT_DIR"/job-slurm}' job-slurm/kimi-plan.sbatch
check "launch verl (Slurm): the plan id in the job file" grep -qF "\"plan_id\":$plan_id," job-slurm/kimi-plan.sbatch
check "launch verl (Slurm): the exit code written after the trainer" grep -qF '|| rc=$?' job-slurm/kimi-plan.sbatch
# The job's last lines, run with a trainer that fails: the job file says so.
sed -n '/^# Verl.s file logger/,$p' job-slurm/kimi-plan.sbatch | sed 's/^python3 -m .*|| rc=\$?$/(exit 3) || rc=$?/' > tail.sh
(set -euo pipefail; SLURM_SUBMIT_DIR=$PWD/submit bash tail.sh) > /dev/null 2>&1
check "Slurm job file: the trainer's exit code" python3 -c "
import json; j = json.load(open('submit/job-slurm/kimi-plan-job.json')); assert j['exit_code'] == 3 and j['plan_id'] == $plan_id, j"
"$bin" launch --engine verl --target modal --plan "$plan_id" --out job-modal > launch_modal.txt 2>&1
check "launch verl (Modal): the file logger on" grep -qF '"trainer.logger=[\"console\",\"file\"]"' job-modal/kimi_plan_modal.py
check "launch verl (Modal): its path on the metrics volume" grep -qF '"VERL_FILE_LOGGER_PATH": os.path.join(METRICS_DIR, METRICS_FILE)' job-modal/kimi_plan_modal.py
check "launch verl (Modal): the volume mounted" grep -qF '"/metrics": metrics' job-modal/kimi_plan_modal.py
check "launch verl (Modal): the plan id in the job file" grep -qF "\\\"plan_id\\\":$plan_id," job-modal/kimi_plan_modal.py
check "Modal app: valid Python" python3 -m py_compile job-modal/kimi_plan_modal.py

# ---------------------------------------------------------------- ingest twice
mkdir -p a b
fixture a/verl-metrics.jsonl 1.25 --steps 60
job_file a "$plan_id" 0
check "fixture: 60 lines" test "$(wc -l < a/verl-metrics.jsonl)" -eq 60
"$bin" ingest a/verl-metrics.jsonl --json > ingest1.json
metrics_rows=$(count_rows metrics)
json_check "ingest: a run of 60 steps, finished, linked to the plan" ingest1.json \
  "d['steps_read'] == 60 and d['last_step'] == 60 and d['status'] == 'finished' and d['plan_id'] == $plan_id and d['rows_written'] == $metrics_rows"
expected_rows=$(python3 -c "
import json
print(sum(sum(v is not None for v in json.loads(l)['data'].values()) for l in open('a/verl-metrics.jsonl')))")
check "ingest: every non-null metric of every line, unknown names kept" test "$metrics_rows" = "$expected_rows"
check "ingest: Verl's names as they are" test "$(sqlite3 kimi-plan.db "select count(distinct name) from metrics where name in ('training/epoch', 'timing_s/update_weights', 'perf/throughput')")" = 3
"$bin" ingest a/verl-metrics.jsonl --json > ingest2.json
json_check "ingest again: the same run, nothing written" ingest2.json "d['rows_written'] == 0 and d['run_id'] == 1"
check "ingest again: no duplicate rows, one run" test "$(count_rows metrics),$(count_rows runs)" = "$metrics_rows,1"
run_a=1
fixture b/verl-metrics.jsonl 1.10 --steps 60
"$bin" ingest b/verl-metrics.jsonl --plan "$plan_id" --json > ingest_b.json
run_b=$(python3 -c "import json; print(json.load(open('ingest_b.json'))['run_id'])")
json_check "ingest without a job file: --plan links it, the run stays running" ingest_b.json "d['status'] == 'running' and d['plan_id'] == $plan_id"

# ---------------------------------------------------------------- report
"$bin" report "$run_a" --json > report_a.json
check "report: each phase against its prediction, with the ratio computed here" python3 - a/verl-metrics.jsonl "$plan_id" <<'PY'
import json, statistics, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
def median(name):  # after the first step, as the report takes it
    return statistics.median(l["data"][name] for l in lines[1:] if l["data"].get(name) is not None)
loop, plan = json.load(open("loop.json")), json.load(open("plan.json"))
c = loop["costs_s"]
actor = plan["memory"]["actor"]
tokens_per_gpu_s = plan["step"]["tokens_per_step"] / (loop["step_time_s"] * plan["cluster"]["actor_gpus"])
peak = max(l["data"]["perf/max_memory_allocated_gb"] for l in lines) * 2**30
want = {
    ("loop step s", "simulation"): (loop["step_time_s"], median("timing_s/step")),
    ("generation s", "simulation"): (c["rollout"], median("timing_s/gen")),
    ("training s", "simulation"): (c["train"], median("timing_s/update_actor")),
    ("weight sync s", "simulation"): (c["sync"], median("timing_s/update_weights")),
    ("throughput tokens/s per GPU", "simulation"): (tokens_per_gpu_s, median("perf/throughput")),
    ("training s", "plan"): (plan["step_time_s"], median("timing_s/update_actor")),
    ("MFU", "plan"): (plan["mfu"], median("perf/mfu/actor")),
    ("actor memory per GPU bytes (allocated)", "plan"): (actor["total_bytes"] - actor["details"]["CUDA/NCCL reserve"], peak),
}
got = {(p["what"], p["source"].split()[0]): p for p in json.load(open("report_a.json"))["predictions"]}
assert set(got) == set(want), (sorted(got), sorted(want))
for key, (predicted, measured) in want.items():
    p = got[key]
    assert abs(p["predicted"] - predicted) <= 1e-9 * abs(predicted), (key, p, predicted)
    assert abs(p["measured"] - measured) <= 1e-9 * abs(measured), (key, p, measured)
    assert abs(p["ratio"] - measured / predicted) <= 1e-9 * measured / predicted, (key, p)
# The phases the fixture made 1.25 x their prediction read so.
for key in [("generation s", "simulation"), ("training s", "simulation"), ("weight sync s", "simulation"),
            ("training s", "plan"), ("MFU", "plan"), ("actor memory per GPU bytes (allocated)", "plan")]:
    assert abs(got[key]["ratio"] - 1.25) < 1e-9, (key, got[key])
print("ratios:", {k[0]: round(v["ratio"], 4) for k, v in got.items()})
PY
"$bin" report --compare "$run_b" --reference "$run_a" --metric timing_s/step,timing_s/gen --steps 1,30,60 > compare.txt
check "report --compare: the phases at steps 1, 30, 60" grep -q "timing_s/gen, step 1" compare.txt
check "report --compare: run b's generation against its plan, ratio 1.100" grep -Eq "^ +$run_b +generation s +simulation 1 \(loop\) .* 1\.100$" compare.txt
check "report --compare: run a's, ratio 1.250" grep -Eq "^ +$run_a +generation s +simulation 1 \(loop\) .* 1\.250$" compare.txt
"$bin" report --compare "$run_b" --reference "$run_a" --metric timing_s/gen --json > compare.json
json_check "report --compare --json: predictions with ratios" compare.json \
  "len(d['predictions']) == 2 and all(p['ratio'] is not None for r in d['predictions'] for p in r['predictions'])"
"$bin" report "$run_a" --csv steps_a.csv > /dev/null
check "report --csv: Verl's metrics by name, 60 steps" python3 -c "
import csv; rows = list(csv.DictReader(open('steps_a.csv'))); assert len(rows) == 60 and 'timing_s/gen' in rows[0], rows[0].keys()"
"$bin" report "$run_a" --predictions-csv predictions.csv > /dev/null
check "report --predictions-csv: the rows and ratios of --json" python3 - <<'PY'
import csv, json
rows = list(csv.DictReader(open("predictions.csv")))
want = json.load(open("report_a.json"))["predictions"]
assert [(r["predicted"], r["by"]) for r in rows] == [(p["what"], p["source"]) for p in want], rows
for r, p in zip(rows, want):
    assert float(r["predicted_value"]) == p["predicted"] and float(r["ratio"]) == p["ratio"], (r, p)
PY
"$bin" report --compare "$run_b" --reference "$run_a" --metric timing_s/gen --html page.html > /dev/null
check "report --html: the phases plotted with their predictions" grep -q "gen (predicted)" page.html
check "report --html: which simulation predicted them" grep -q "dashed: the prediction of simulation 1 (loop)" page.html
for title in "tokens/s (every token of the step)" "step time" "peak memory per GPU" "Verl&#39;s phases\|Verl's phases"; do
  check "report --html: a plot of $title" grep -q "$title" page.html
done
check "report --html: the GPU's capacity on the memory bars" grep -q "h100: 80.0 GB" page.html
check "report --html: every tick round (1, 2 or 5 times a power of ten)" python3 - <<'PY'
import re
page = open("page.html").read()
ticks = [float(t) for t in re.findall(r'text-anchor="(?:end|middle)">([-0-9.e+]+)</text>', page)]
assert len(ticks) > 40, len(ticks)
def round_tick(v, steps):
    return any(abs(v / s - round(v / s)) < 1e-6 for s in steps)
# Each axis's ticks are multiples of one step; checked here per value: a
# multiple of some 1-2-5 step no finer than a thousandth of the value.
for v in ticks:
    if v == 0: continue
    steps = [m * 10.0 ** e for e in range(-8, 9) for m in (1, 2, 5) if m * 10.0 ** e >= abs(v) / 1000]
    assert round_tick(v, steps), v
raw = ["8.176", "6.784", "5.393"]
assert not any(r in page for r in raw)
PY

# ---------------------------------------------------------------- follow
mkdir -p live
fixture live/verl-metrics.jsonl 1.0 --steps 20
job_file live "$plan_id" null
"$bin" ingest live/verl-metrics.jsonl --follow --poll-ms 50 --json > follow.json 2> follow.err &
follower=$!
steps_of_live() { sqlite3 kimi-plan.db "select count(distinct m.step) from metrics m join runs r on r.id = m.run_id where r.source like '%/live/verl-metrics.jsonl'" 2>/dev/null || echo 0; }
for _ in $(seq 200); do [ "$(steps_of_live)" = 20 ] && break; sleep 0.05; done
check "follow: the 20 steps written so far" test "$(steps_of_live)" = 20
fixture live/verl-metrics.jsonl 1.0 --steps 5 --first-step 21 --append
appended=$(date +%s.%N)
for _ in $(seq 200); do [ "$(steps_of_live)" = 25 ] && break; sleep 0.02; done
seen=$(date +%s.%N)
check "follow: 5 appended steps in the store within a second" python3 -c "
assert $(steps_of_live) == 25; d = $seen - $appended; print(f'picked up in {d:.2f} s'); assert d < 1.0"
check "follow: still following while the job runs" kill -0 $follower
job_file live "$plan_id" 0
for _ in $(seq 100); do kill -0 $follower 2> /dev/null || break; sleep 0.05; done
wait $follower
check "follow: stops when the job file says the trainer returned" test $? -eq 0
json_check "follow: 25 steps, finished" follow.json "d['steps_read'] == 25 and d['status'] == 'finished'"
check "follow: progress on stderr" grep -q "step 25" follow.err
# Ctrl-C: the run stays running, what was read stays.
mkdir -p cut
fixture cut/verl-metrics.jsonl 1.0 --steps 3
job_file cut "$plan_id" null
"$bin" ingest cut/verl-metrics.jsonl --follow --poll-ms 50 --json > cut.json 2> cut.err &
follower=$!
sleep 1
kill -INT $follower
wait $follower
check "follow, Ctrl-C: exit 0" test $? -eq 0
json_check "follow, Ctrl-C: the run stays running with its steps" cut.json "d['status'] == 'running' and d['steps_read'] == 3"

# ---------------------------------------------------------------- bad input
mkdir -p bad
bad() {  # bad NAME EXPECTED CONTENT...: a metrics file with these lines is refused whole
  local name=$1 expected=$2; shift 2
  printf '%s\n' "$@" > bad/verl-metrics.jsonl
  refused "$name" metrics "$expected" ingest bad/verl-metrics.jsonl
  check "$name: no run made" test "$(count_rows runs)" = "$(sqlite3 kimi-plan.db 'select count(*) from runs')"
}
good='{"step":1,"data":{"timing_s/step":1.5}}'
runs_before=$(count_rows runs)
bad "not JSON lines" "bad/verl-metrics.jsonl:2: not a JSON object" "$good" 'step 2 took 1.4 s'
bad "a non-numeric metric" 'bad/verl-metrics.jsonl:2: metric "timing_s/step" is string, not a number' "$good" '{"step":2,"data":{"timing_s/step":"1.4"}}'
bad "a step going backwards" "bad/verl-metrics.jsonl:3: step 1 does not come after step 2" "$good" '{"step":2,"data":{}}' "$good"
bad "no step" 'bad/verl-metrics.jsonl:1: "step" must be an integer' '{"data":{"x":1}}'
check "bad files: no run added" test "$(count_rows runs)" = "$runs_before"
printf '%s\n' "$good" > bad/verl-metrics.jsonl
refused "a plan id that does not exist" metrics "--plan: no plan with id 99 in the store" ingest bad/verl-metrics.jsonl --plan 99
other_plan=$("$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --json | python3 -c "import json, sys; print(json.load(sys.stdin)['id'])")
refused "another plan for an ingested file" metrics "was ingested as run $run_a with plan $plan_id, not plan $other_plan" ingest a/verl-metrics.jsonl --plan "$other_plan"
refused "a missing file" metrics "FILE: nope.jsonl: no such file" ingest nope.jsonl
refused "--poll-ms without --follow" metrics "--poll-ms: only with --follow" ingest a/verl-metrics.jsonl --poll-ms 100
# --follow stops at the first bad line, keeping the good ones before it.
mkdir -p halfbad
printf '%s\n' "$good" '{"step":2,"data":{"timing_s/step":2.5}}' '{"step":3,"data":{"timing_s/step":[1]}}' > halfbad/verl-metrics.jsonl
"$bin" ingest halfbad/verl-metrics.jsonl --follow --poll-ms 50 > halfbad.out 2> halfbad.err
check "follow, a bad line: exit 2" test $? -eq 2
check "follow, a bad line: says where and what was kept" grep -q "halfbad/verl-metrics.jsonl:3: metric \"timing_s/step\" is array, not a number; --follow stopped there, the 2 steps before it are in run" halfbad.err
finish cli_ingest
