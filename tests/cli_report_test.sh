#!/usr/bin/env bash
# End-to-end checks of `kimi-plan report` on a store built as a user builds
# one: a plan, pipeline / sync / loop simulations, a real `train` run when
# LibTorch is built, and hand-made runs inserted with sqlite3 whose values
# the checks below compute independently. Then the list, summary, compare,
# CSV, JSON and HTML views, the HTML rendered by headless Chromium when it
# is installed, and bad input refused with one line, exit 2, nothing written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
q() { sqlite3 kimi-plan.db "$1"; }

# ---------------------------------------------------------------- the store
"$bin" plan --model kimi-k3-debug --gpu h100 --nodes 1 --pp 2 --json > plan.json
plan_id=$(python3 -c "import json; print(json.load(open('plan.json'))['id'])")
"$bin" simulate pipeline --plan "$plan_id" --json > pipe_plan.json
"$bin" simulate loop --plan "$plan_id" --json > loop.json
"$bin" simulate pipeline --schedule 1f1b --pp 2 --microbatches 2 --f-us 1 --b-us 2 --w-us 0 --p2p-us 1 --json > pipe.json
"$bin" simulate sync --model kimi-k2.6 --mode full --json > sync_full.json
"$bin" simulate sync --model kimi-k2.6 --mode lora-shared-outer --json > sync_lora.json
check "store built: 1 plan, 5 simulations" test "$(count_rows plans),$(count_rows simulations)" = "1,5"

trained=0
if "$bin" --help | grep -q '^  train '; then
  start=$SECONDS
  "$bin" train --model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 2 --seq-len 8 --layers 3 --heads 2 \
    --steps 3 > train.txt 2>&1 && trained=1
  check "train run of 3 steps logged ($((SECONDS - start)) s)" test "$(q 'select count(*) from steps')" = 3
else
  echo "skipped: kimi-plan train (built without LibTorch)"
fi

# Hand-made runs: a reference A that names the plan, B computed by the same
# expressions (bitwise equal), C 1% above A's loss after step 1 and with
# grad norm 0.5% below from step 50.
q "insert into runs (created_at, kind, model, config_json) values
   ('2026-01-01T00:00:00Z', 'train', 'hand', '{\"plan_id\": $plan_id}'),
   ('2026-01-01T00:00:01Z', 'train', 'hand', '{}'),
   ('2026-01-01T00:00:02Z', 'train', 'hand', '{}')"
A=$((trained + 1)); B=$((trained + 2)); C=$((trained + 3))
for r in $A $B $C; do
  q "with recursive s(n) as (select 1 union all select n + 1 from s where n < 100)
     insert into steps select $r, n,
       case when $r = $C and n > 1 then (10.0 / n + 2) * 1.01 else 10.0 / n + 2 end,
       case when $r = $C and n >= 50 then (1 + 1.0 / n) * 0.995 else 1 + 1.0 / n end,
       0.001, 1000.0 + n, 0.5 + n * 0.001, 2e9 + n * 1e6, '2026-01-01T00:00:00Z' from s"
done

# ---------------------------------------------------------------- list
"$bin" report > list.txt
check "list: every run" bash -c "grep -cE '^ *[0-9]+ +train' list.txt | grep -qx $((trained + 3))"
check "list: store counts" grep -q "store: 0 calibrations, 0 loop_steps, 0 metrics, 0 pipeline_traffic, 1 plans, $((trained + 3)) runs, 5 simulations, $((300 + 3 * trained)) steps, 0 weight_syncs" list.txt
"$bin" report --json > list.json
json_check "list json: runs, last loss, plan" list.json \
  "len(d['runs']) == $((trained + 3)) and d['runs'][$A - 1]['last_loss'] == 10.0 / 100 + 2 and d['runs'][$A - 1]['plan_id'] == $plan_id and d['tables']['simulations'] == 5"

# ---------------------------------------------------------------- summary
"$bin" report "$A" > sum.txt
check "summary: steps" grep -q "^steps   100 (1 to 100)" sum.txt
check "summary: predicted against measured" grep -q "predicted against measured (plan $plan_id)" sum.txt
"$bin" report "$A" --json > sum.json
check "summary json: loss tenths, median tokens/s, peak, predictions" python3 - sum.json "$plan_id" <<'PY'
import json, sqlite3, statistics, sys
d = json.load(open(sys.argv[1])); plan_id = int(sys.argv[2])
loss = [10.0 / n + 2 for n in range(1, 101)]
m = d["metrics"]
assert abs(m["loss"]["first_tenth_mean"] - sum(loss[:10]) / 10) < 1e-12, m["loss"]
assert abs(m["loss"]["last_tenth_mean"] - sum(loss[-10:]) / 10) < 1e-12, m["loss"]
assert m["tokens_per_s"]["median"] == statistics.median([1000.0 + n for n in range(1, 101)])
assert m["peak_memory_bytes"]["max"] == 2e9 + 100 * 1e6
db = sqlite3.connect("kimi-plan.db")
step_time = db.execute("select step_time_s from plans where id = ?", (plan_id,)).fetchone()[0]
p = {r["what"]: r for r in d["predictions"]}
assert p["actor step time s"]["predicted"] == step_time, p
assert abs(p["actor step time s"]["measured"] - statistics.median([0.5 + n * 0.001 for n in range(1, 101)])) < 1e-12, p
plan = json.loads(db.execute("select result_json from plans where id = ?", (plan_id,)).fetchone()[0])
assert p["actor memory per GPU bytes"]["predicted"] == plan["memory"]["actor"]["total_bytes"], p
assert any(r["source"].endswith("(loop)") for r in d["predictions"]) and any(r["source"].endswith("(pipeline)") for r in d["predictions"])
PY
"$bin" report "$A" --csv steps.csv > /dev/null
check "summary csv: header and 100 steps" bash -c "head -1 steps.csv | grep -qx 'step,loss,grad_norm,lr,tokens_per_s,step_time_s,peak_memory_bytes' && test \$(wc -l < steps.csv) -eq 101"

# ---------------------------------------------------------------- compare
"$bin" report --compare "$B" "$C" --reference "$A" --steps 1,10,50,100 > cmp.txt
cat cmp.txt
check "compare: B identical in all 8 cells" bash -c "grep -A1 '^run $B (hand)' cmp.txt | tail -1 | grep -o identical | wc -l | grep -qx 8"
expected=$(python3 -c "
a = lambda n: 10.0 / n + 2; g = lambda n: 1 + 1.0 / n
loss = ['identical' if n == 1 else '%+.2f%%' % ((a(n) * 1.01 / a(n) - 1) * 100) for n in (1, 10, 50, 100)]
gn = ['%+.2f%%' % ((g(n) * 0.995 / g(n) - 1) * 100) if n >= 50 else 'identical' for n in (1, 10, 50, 100)]
print(' '.join(loss + gn))")
check "compare: C's changes are $expected" bash -c "grep -A1 '^run $C (hand)' cmp.txt | tail -1 | tr -s ' ' | sed 's/^ //' | grep -qx -- '$expected'"
check "compare: raw values" bash -c "grep '^run $A (hand), reference' cmp.txt | tr -s ' ' | grep -q '12.000000 3.000000 2.200000 2.100000 2.0000 1.1000 1.0200 1.0100'"
"$bin" report --compare "$B,$C" --reference "$A" --steps 1,10,50,100 --json --csv cmp.csv > cmp.json
check "compare csv: 3 runs x 2 metrics x 4 steps" test "$(wc -l < cmp.csv)" -eq 25
check "compare csv: exact values" grep -q "^$C,\"run $C (hand)\",0,loss,10,3.0300000000000002,3,+1.00%$" cmp.csv
json_check "compare json" cmp.json \
  "d['view'] == 'compare' and d['comparison']['reference'] == $A and [c['change'] for c in d['comparison']['rows'][2]['cells']][:2] == ['identical', '+1.00%']"

# ---------------------------------------------------------------- html
"$bin" report --compare "$B" "$C" --reference "$A" --html report.html > /dev/null
check "html: one page, no script, no external resource" python3 - report.html <<'PY'
import re, sys
page = open(sys.argv[1]).read()
assert page.startswith("<!DOCTYPE html>") and page.count("<html") == 1
assert "<script" not in page and "src=" not in page and "href=" not in page and "@import" not in page
# loss, grad norm, tokens/s, step time, peak memory, memory bars, gantt, sync
assert page.count("<svg") == 8, page.count("<svg")
for needle in ("<polyline", "Memory per GPU", "Pipeline: simulation", "rank 1", "Weight sync", "identical", "+1.00%",
               "tokens/s (every token of the step)", "step time", "peak memory per GPU", "h100: 80.0 GB"):
    assert needle in page, needle
PY
if [ -x /usr/bin/chromium ]; then
  profile=$(mktemp -d)
  timeout 120 /usr/bin/chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
    --disable-background-networking --disable-component-update --disable-sync --user-data-dir="$profile" \
    --screenshot="$work/shot.png" --window-size=1200,1600 "file://$work/report.html" > chromium.log 2>&1
  rm -rf "$profile"
  check "chromium renders the page, not blank" python3 - shot.png <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, width = 8, b"", 0
while pos < len(data):
    length, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + length]
    if kind == b"IHDR":
        width, height, depth, ctype = struct.unpack(">IIBB", body[:10])
        assert depth == 8 and ctype in (2, 6), (depth, ctype)
        bpp = 3 if ctype == 2 else 4
    elif kind == b"IDAT":
        idat += body
    pos += 12 + length
raw, stride, prev, colours, non_white = zlib.decompress(idat), width * bpp, None, set(), 0
for y in range(height):
    f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
    up = prev or bytearray(stride)
    for i in range(stride):   # undo the row filter (PNG spec 9.2)
        a = line[i - bpp] if i >= bpp else 0; b = up[i]; c = up[i - bpp] if i >= bpp else 0
        if f == 1: line[i] = (line[i] + a) & 255
        elif f == 2: line[i] = (line[i] + b) & 255
        elif f == 3: line[i] = (line[i] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + 3]); colours.add(px); non_white += px != b"\xff\xff\xff"
    prev = line
print(f"  {width}x{height}, {len(colours)} colours, {100 * non_white / (width * height):.1f}% not white")
assert len(colours) >= 20 and non_white > 0.02 * width * height
PY
else
  echo "skipped: chromium render check (/usr/bin/chromium not installed; scripts/install-deps.sh installs it)"
fi

# ---------------------------------------------------------------- status
# Runs as the store keeps them: one still going (this shell's pid), one
# whose process is gone (a child already reaped), one failed, one finished.
# The hand-made A, B, C above have no status (recorded "before schema 8").
sleep 0 & gone=$!; wait "$gone"
host=$(hostname)
q "insert into runs (created_at, kind, model, config_json, status, host, pid, error) values
   ('2026-01-02T00:00:00Z', 'train', 'alive', '{\"steps\": 50}', 'running', '$host', $$, null),
   ('2026-01-02T00:00:01Z', 'train', 'killed', '{\"steps\": 200}', 'running', '$host', $gone, null),
   ('2026-01-02T00:00:02Z', 'train', 'broken', '{}', 'failed', '$host', $gone, 'step 3: loss is nan'),
   ('2026-01-02T00:00:03Z', 'train', 'done', '{}', 'finished', '$host', $gone, null)"
"$bin" report --status ended > ended.txt
check "--status ended: only the killed run" bash -c "grep -c '^ *[0-9]' ended.txt | grep -qx 1 && grep -q 'killed .*ended .* 0 of 200' ended.txt"
"$bin" report --status running --json > running.json
json_check "--status running: the live run" running.json "[r['model'] for r in d['runs']] == ['alive'] and d['runs'][0]['planned_steps'] == 50"
"$bin" report --status failed --json > failed.json
json_check "--status failed: with its error" failed.json "[(r['model'], r['error']) for r in d['runs']] == [('broken', 'step 3: loss is nan')]"
"$bin" report --status unknown --json > unknown.json
json_check "--status unknown: the runs from before statuses" unknown.json "[r['model'] for r in d['runs']] == ['hand'] * 3"
killed=$(q "select id from runs where model = 'killed'")
"$bin" report "$killed" > killed.txt
check "summary: ended without a word" grep -q '^status  ended without a word' killed.txt
"$bin" report --csv all.csv > /dev/null
check "csv: status and planned steps" grep -q "^$killed,train,killed,.*,ended,200\$" all.csv

# ---------------------------------------------------------------- bad input
bad() {  # bad NAME EXPECTED ARGS...: refused, and neither the store nor the export files change
  local name=$1 expected=$2; shift 2
  refused "$name" runs "$expected" "$@" --csv bad.csv --html bad.html
  check "$name: no file written" test ! -e bad.csv -a ! -e bad.html
}
bad "unknown run" "RUN: no run with id 99" report 99
bad "unknown reference" "--reference: no run with id 99" report --compare "$B" --reference 99
bad "unknown compared run" "--compare: no run with id 98" report --compare "$B" 98 --reference "$A"
bad "malformed --steps" "--steps: \"1,x\" is not" report --compare "$B" --reference "$A" --steps 1,x
bad "--compare without --reference" "--reference: required with --compare" report --compare "$B"
bad "unknown metric" "--metric: no metric \"reward\"" report --compare "$B" --reference "$A" --metric loss,reward
bad "unknown --status" "--status: must be finished, failed, running, ended or unknown" report --status killed
bad "--status with a run" "--status: only when listing runs" report "$A" --status ended
bad "missing store" "--db: missing.db does not exist" report --db missing.db
check "missing store: not created" test ! -e missing.db

finish cli_report
