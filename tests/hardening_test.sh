#!/usr/bin/env bash
# Hardening II (issue 28), the causes a table row cannot show:
# - a generated sbatch script runs under stub srun/scontrol and does nothing
#   but launch the job, whatever a model's name holds (names that pass the
#   name check but are full of shell syntax; a line break is refused);
# - the same name in the Modal app is only text of a valid Python module;
# - a read-only store (file and directory) is reported with nothing created;
# - SIGTERM, SIGINT and SIGKILL to `run --nproc 2`'s launcher end both ranks,
#   mark the run ended and leave no rendezvous file (with LibTorch only).
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

# ------------------------------------------------ the sbatch script, stubbed
# A name with every shell metacharacter a name may hold (printable ASCII).
name='x; touch pwned-a #$(touch pwned-b) `touch pwned-c` "q" '"'"'s'"'"' | touch pwned-d & \'
python3 - "$here/../presets/models/kimi-k3-debug.json" "$name" > model.json <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["name"] = sys.argv[2]
print(json.dumps(doc))
PY
"$bin" launch --target slurm --model-file model.json --gpu h100 --nodes 1 --gpus-per-node 2 --tp 1 --pp 1 \
  --rollout-tp 1 --rollout-ep 2 --state-precision fp32 --force --out job > launch.out 2> launch.err
check "launch of a name full of shell syntax: exit 0" test $? -eq 0
check "the script parses" bash -n job/kimi-plan.sbatch
mkdir stubs
# srun runs its command as task 0 of one (after its own --options);
# scontrol names one host; the "kimi-plan" a rank runs records each argument
# on a line of its own.
cat > stubs/srun <<'SH'
#!/usr/bin/env bash
echo "srun" >> srun.calls
while [ "${1#--}" != "$1" ]; do shift; done
SLURM_PROCID=0 SLURM_LOCALID=0 SLURM_NTASKS_PER_NODE=1 "$@"
SH
cat > stubs/scontrol <<'SH'
#!/usr/bin/env bash
echo node-0
SH
cat > stubs/kimi-plan <<'SH'
#!/usr/bin/env bash
printf '%s\n' "$@" > rank.args
SH
chmod +x stubs/srun stubs/scontrol stubs/kimi-plan
( cd job && PATH="$work/stubs:$PATH" SLURM_JOB_NODELIST=node-0 SLURM_NTASKS=2 SLURM_JOB_NUM_NODES=1 \
    KIMI_PLAN="$work/stubs/kimi-plan" bash kimi-plan.sbatch > ../job.out 2> ../job.err )
check "the job script ran to its end" test $? -eq 0
check "nothing but the job ran: no file the name asked for" bash -c '! ls pwned-* job/pwned-* 2>/dev/null | grep -q .'
check "srun was called once" test "$(grep -c '^srun$' job/srun.calls 2>/dev/null)" = 1
check "the rank got the model's name as one argument, unchanged" grep -qxF -- "$name" job/rank.args
check "the rank was told to run" test "$(head -n 1 job/rank.args 2>/dev/null)" = run
show_if_any job.err

# A line break in the name is refused before a script exists.
python3 - "$here/../presets/models/kimi-k3-debug.json" > newline.json <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["name"] = "x\ntouch pwned-e\n#"
print(json.dumps(doc))
PY
"$bin" launch --target slurm --model-file newline.json --gpu h200 --nodes 1 --force --out job2 > nl.out 2> nl.err
check "a line break in a name: exit 2" test $? -eq 2
check "a line break in a name: names the field" grep -q -- "--model-file newline.json: name: must be 1 to 128 printable ASCII" nl.err
check "a line break in a name: no script" test ! -e job2

# The Modal app holds the name only as text: it compiles, and the name's
# words are nowhere but inside string literals.
"$bin" launch --target modal --model-file model.json --gpu h100 --nodes 1 --tp 1 --pp 1 \
  --rollout-tp 1 --rollout-ep 8 --state-precision fp32 --force --out modal > modal.out 2> modal.err
check "launch --target modal of the name: exit 0" test $? -eq 0
check "the Modal app is valid Python; the name is one string of RUN_ARGS, unchanged" \
  python3 - modal/kimi_plan_modal.py "$name" <<'PY'
import ast, sys
tree = ast.parse(open(sys.argv[1]).read())
for node in ast.walk(tree):
    if isinstance(node, ast.Name) and node.id in ("touch", "pwned"):
        raise SystemExit("name became code: " + node.id)
args = [ast.literal_eval(n.value) for n in tree.body
        if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RUN_ARGS"]
assert args and sys.argv[2] in args[0], args
PY

# ------------------------------------------------- a read-only store
"$bin" plan --preset h200-lora --db ro/kimi-plan.db > /dev/null 2>&1 || { mkdir ro; "$bin" plan --preset h200-lora --db ro/kimi-plan.db > /dev/null; }
chmod 444 ro/kimi-plan.db
chmod 555 ro
before=$(ls -a ro | tr '\n' ' ')
"$bin" report --db ro/kimi-plan.db > ro.out 2> ro.err
check "report of a store in a read-only directory: exit 0" test $? -eq 0
check "report of a store in a read-only directory: lists its plan" grep -q " 1 plans," ro.out
check "report of a store in a read-only directory: nothing created" test "$(ls -a ro | tr '\n' ' ')" = "$before"
chmod 755 ro
# A writable store a reader opens: no -wal or -shm is left beside it.
"$bin" plan --preset h200-lora --db rw.db > /dev/null
"$bin" report --db rw.db > /dev/null
check "report leaves no -wal or -shm beside a store" test ! -e rw.db-wal -a ! -e rw.db-shm
sqlite3 rw.db "PRAGMA user_version = 99" > /dev/null
"$bin" report --db rw.db > /dev/null 2> future.err
check "report of a future store: exit 2" test $? -eq 2
check "report of a future store: no -wal or -shm left" test ! -e rw.db-wal -a ! -e rw.db-shm

# ------------------------------------------------ signals to the launcher
if ! "$bin" --help | grep -q '^  run '; then
  echo "skipped: the launcher's signals (built without LibTorch)"
  finish hardening
fi
export TMPDIR="$work/tmp"
mkdir -p "$TMPDIR"
small=(--model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 4 --seq-len 8 --layers 3 --heads 2)

# stop_launcher NAME SIGNAL: a two-rank run is signalled once rank 0 logs a
# step; its ranks must be gone, its run no longer running, and no
# rendezvous file left.
stop_launcher() {
  local name=$1 signal=$2 db="$work/$1.db"
  "$bin" run --nproc 2 "${small[@]}" --steps 1000000 --log-every 1 --db "$db" > "$name.out" 2> "$name.err" &
  local launcher=$!
  for _ in $(seq 300); do grep -q "step     2/" "$name.err" 2>/dev/null && break; sleep 0.1; done
  local ranks; ranks=$(pgrep -P $launcher | tr '\n' ' ')
  check "$name: two ranks were running" test "$(echo $ranks | wc -w)" = 2
  kill -s "$signal" $launcher
  wait $launcher
  local rc=$?
  # The ranks end by the launcher's SIGTERM or, after SIGKILL, by their own
  # parent-death signal: give them the time a step takes.
  local alive=""
  for _ in $(seq 100); do
    alive=""
    for r in $ranks; do kill -0 "$r" 2>/dev/null && alive="$alive $r"; done
    [ -z "$alive" ] && break
    sleep 0.1
  done
  check "$name: the launcher ended (rc $rc)" test $rc -ne 0
  check "$name: no rank left running" test -z "$alive"
  check "$name: no rendezvous file left" bash -c "! ls '$TMPDIR' | grep -q kimi-plan-run"
  if [ "$signal" != KILL ]; then
    check "$name: the run is marked failed, stopped by $signal" \
      test "$(sqlite3 "$db" "select status || ': ' || error from runs")" = "failed: stopped by SIG$signal: the launcher ended its 2 ranks"
    check "$name: the launcher says so in one line" grep -q "^kimi-plan run: stopped by SIG$signal" "$name.err"
  else
    # Nothing can run in a killed launcher: the run's process (rank 0) is
    # gone, which report shows as ended.
    "$bin" report --db "$db" --json > "$name.report.json"
    json_check "$name: report shows the run ended" "$name.report.json" "d['runs'][0]['status'] == 'ended'"
  fi
  for r in $alive; do kill -9 "$r" 2>/dev/null; done
}
stop_launcher sigterm TERM
stop_launcher sigint INT
stop_launcher sigkill KILL
finish hardening
