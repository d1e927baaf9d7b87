#!/usr/bin/env bash
# End-to-end checks of `kimi-plan launch` as a user runs it: Slurm scripts
# and Modal apps for the three seed presets (which do not fit, hence
# --force, and which are refused without it), every script through
# `bash -n` and every app through `python3 -m py_compile` (the modal
# package is not needed), --submit through stand-in sbatch and modal
# commands, the local target starting the native runtime, and bad input
# refused with one line, exit code 2 and nothing written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
has() { grep -qF -- "$2" "$1"; }  # has FILE TEXT

declare -A nodes=([h200-full]=16 [b200-full]=8 [h200-lora]=2)
declare -A gpu=([h200-full]=H200 [b200-full]=B200 [h200-lora]=H200)
for p in h200-full b200-full h200-lora; do
  "$bin" launch --target slurm --preset "$p" > out.txt 2> err.txt
  check "$p: refused without --force, exit 2" test $? -eq 2
  check "$p: refusal is one line" test "$(wc -l < err.txt)" -eq 1
  check "$p: refusal names the preset and the first violation" \
    has err.txt "kimi-plan launch: --preset $p: the planner marks the plan infeasible (actor: needs"
  check "$p: refusal wrote nothing" test ! -e "launch/$p"

  # The native runtime runs a plan as planned or not at all: the full
  # seeds' mixed-precision states run as they are (passed on to run), and
  # the seeds planned with the fp32 states launch with those.
  if [ "$p" != h200-lora ]; then
    "$bin" launch --target slurm --preset "$p" --engine native --force --out "jobs/$p-mixed" > out.txt 2> err.txt
    check "$p native as is: exit 0" test $? -eq 0
    check "$p native as is: run keeps Megatron's mixed-precision states" grep -rq -- "--state-precision mixed" "jobs/$p-mixed"
  fi
  for engine in native verl; do
    teacher=0; [ "$engine" = verl ] && teacher=1
    want=$((nodes[$p] + teacher))
    dir="jobs/$p-$engine"
    states=(); [ "$engine" = native ] && states=(--distributed-optimizer off --state-precision fp32)
    # As is: with --engine verl the split is the best Megatron builds (for
    # h200-full's 61 layers over pp 2, 31 + 30).
    "$bin" launch --target slurm --preset "$p" --engine "$engine" "${states[@]}" --force --out "$dir" > out.txt 2> err.txt
    check "$p $engine slurm: exit 0" test $? -eq 0
    check "$p $engine slurm: says what it wrote" has out.txt "wrote     $dir/kimi-plan.sbatch"
    check "$p $engine slurm: says how to start it" has out.txt "start it  sbatch $dir/kimi-plan.sbatch"
    check "$p $engine slurm: bash -n" bash -n "$dir/kimi-plan.sbatch"
    check "$p $engine slurm: $want nodes of 8 GPUs" \
      bash -c "grep -qx '#SBATCH --nodes=$want' '$dir/kimi-plan.sbatch' && grep -qx '#SBATCH --gpus-per-node=8' '$dir/kimi-plan.sbatch'"
    check "$p $engine slurm: head node discovery" has "$dir/kimi-plan.sbatch" \
      'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n1)'
    check "$p $engine slurm: NCCL defaults" has "$dir/kimi-plan.sbatch" "export NCCL_SOCKET_IFNAME=\${NCCL_SOCKET_IFNAME:-'^lo,docker0'}"

    "$bin" launch --target modal --preset "$p" --engine "$engine" "${states[@]}" --force --out "$dir" > out.txt 2> err.txt
    check "$p $engine modal: exit 0" test $? -eq 0
    check "$p $engine modal: says how to start it" has out.txt "start it  modal run --detach $dir/kimi_plan_modal.py"
    check "$p $engine modal: py_compile" python3 -m py_compile "$dir/kimi_plan_modal.py"
    check "$p $engine modal: gpu and cluster" bash -c "grep -qF 'gpu=\"${gpu[$p]}:8\"' '$dir/kimi_plan_modal.py' &&
      grep -qF '@modal.experimental.clustered(size=$want, rdma=True)' '$dir/kimi_plan_modal.py'"
  done
done
check "modal is not installed here" python3 -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('modal') is not None)"
check "verl script waits for all 17 Ray nodes" has jobs/h200-full-verl/kimi-plan.sbatch "wait_for_ray_nodes 17"
check "verl script carries the plan's pp" has jobs/h200-full-verl/kimi-plan.sbatch \
  "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size=2"
check "verl script carries the even split's first stage" has jobs/h200-full-verl/kimi-plan.sbatch \
  "+actor_rollout_ref.actor.megatron.override_transformer_config.num_layers_in_first_pipeline_stage=31"
check "verl script: the last stage is Megatron's rest" bash -c \
  "! grep -q num_layers_in_last_pipeline_stage jobs/h200-full-verl/kimi-plan.sbatch"

# The split recorded with a plan is the one launched: the 1T GPT of
# Korthikanti et al., 128 layers over tp 8 x pp 64.
gpt1t=(--hidden 25600 --ffn-hidden 102400 --heads 160 --layers 128 --vocab 51200 --seq-len 2048 --gpu h200
       --nodes 64 --tp 8 --pp 64)
plan_of() { "$bin" plan "${gpt1t[@]}" "$@" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['id'])"; }
megatron_id=$(plan_of --engine verl)
"$bin" launch --target slurm --plan "$megatron_id" --engine verl --teacher-nodes 0 --force --out jobs/gpt-megatron > out.txt 2> err.txt
check "megatron plan under verl: exit 0" test $? -eq 0
check "megatron plan under verl: Megatron's default, no split keys" bash -c \
  "grep -q pipeline_model_parallel_size=64 jobs/gpt-megatron/kimi-plan.sbatch && ! grep -q num_layers_in_ jobs/gpt-megatron/kimi-plan.sbatch"
ends_id=$(plan_of --layer-split "1$(printf ',2%.0s' $(seq 62)),3")
"$bin" launch --target slurm --plan "$ends_id" --engine verl --teacher-nodes 0 --force --out jobs/gpt-ends > out.txt 2> err.txt
check "uneven ends under verl: exit 0" test $? -eq 0
check "uneven ends under verl: both end stages" bash -c \
  "grep -qF 'num_layers_in_first_pipeline_stage=1' jobs/gpt-ends/kimi-plan.sbatch && grep -qF 'num_layers_in_last_pipeline_stage=3' jobs/gpt-ends/kimi-plan.sbatch"
even_id=$(plan_of)

# A recorded plan, by id, into the default directory, as JSON.
native_states=(--distributed-optimizer off --state-precision fp32)  # what kimi-plan run executes
plan_id=$("$bin" plan --preset h200-lora "${native_states[@]}" --json | python3 -c "import json, sys; print(json.load(sys.stdin)['id'])")
"$bin" launch --target slurm --plan "$plan_id" --force --json > plan.json
check "--plan: exit 0" test $? -eq 0
check "--plan: default directory and JSON" python3 - plan.json "$plan_id" <<'PY'
import json, os, sys
d = json.load(open(sys.argv[1])); pid = sys.argv[2]
assert d["schema"] == "kimi-plan.launch/1" and d["plan_id"] == int(pid), d
assert d["files"] == [f"launch/{pid}/kimi-plan.sbatch"] and os.path.exists(d["files"][0]), d
assert d["start_command"] == ["sbatch", f"launch/{pid}/kimi-plan.sbatch"] and d["started"] is False
assert d["job_nodes"] == 2 and d["gpus"] == 16 and d["forced"] and not d["feasible"]
PY

# --submit through stand-ins that record their arguments.
mkdir -p fakebin
cat > fakebin/sbatch <<'SH'
#!/bin/sh
echo "$@" > "$FAKE_LOG"; echo "Submitted batch job 42"; exit "${FAKE_RC:-0}"
SH
cp fakebin/sbatch fakebin/modal
chmod +x fakebin/sbatch fakebin/modal
PATH="$PWD/fakebin:$PATH" FAKE_LOG=sbatch.log "$bin" launch --target slurm --preset b200-full "${native_states[@]}" --force --out sub --submit > out.txt
check "--submit slurm: exit 0" test $? -eq 0
check "--submit slurm: ran sbatch on the script" test "$(cat sbatch.log)" = "sub/kimi-plan.sbatch"
check "--submit slurm: says it started" has out.txt "started   sbatch sub/kimi-plan.sbatch"
PATH="$PWD/fakebin:$PATH" FAKE_LOG=modal.log "$bin" launch --target modal --preset b200-full "${native_states[@]}" --force --out sub --submit > /dev/null
check "--submit modal: ran modal run --detach" test "$(cat modal.log)" = "run --detach sub/kimi_plan_modal.py"
PATH="$PWD/fakebin:$PATH" FAKE_LOG=x.log FAKE_RC=1 "$bin" launch --target slurm --preset b200-full "${native_states[@]}" --force --out sub --submit > /dev/null 2> err.txt
check "--submit failing sbatch: exit 1" test $? -eq 1
check "--submit failing sbatch: names the command" has err.txt "--submit: \`sbatch sub/kimi-plan.sbatch\` exited with code 1"

# The local target starts the native runtime here with every rank of the plan.
local_plan=(--model kimi-k3-debug --gpu h100 --nodes 1 --pp 2 --global-batch 8 --seq-len 16 "${native_states[@]}")
"$bin" launch --target local "${local_plan[@]}" > out.txt 2> err.txt
rc=$?
check "local: ran kimi-plan run with 8 ranks" has out.txt "running   $bin run --nproc 8 --model kimi-k3-debug --mode full"
if "$bin" run --help > /dev/null 2>&1; then
  # The runtime ran: it trains, or refuses the layout in one line of its own
  # (a layout it does not execute yet, or a model it cannot build) and launch
  # exits 1 naming the command.
  check "local: the runtime ran and gave its verdict" bash -c \
    "test $rc -eq 0 || (test $rc -eq 1 && grep -q '^kimi-plan run: --' err.txt && grep -qF -- '--target local: \`$bin run --nproc 8' err.txt)"
else
  check "local: the missing runtime's own error" has err.txt "kimi-plan run: this build has no LibTorch: 'run' runs in kimi-plan-runtime"
  check "local: exit 1 naming the command" bash -c "test $rc -eq 1 && grep -qF -- '--target local: \`$bin run --nproc 8' err.txt"
fi

bad() {  # bad NAME EXPECTED-TEXT ARGS...
  local name=$1 text=$2; shift 2
  rm -rf launch
  "$bin" launch "$@" > out.txt 2> err.txt
  local rc=$?
  check "$name: exit 2" test $rc -eq 2
  check "$name: one line" test "$(wc -l < err.txt)" -eq 1
  check "$name: names the flag" has err.txt "$text"
  check "$name: nothing written" test ! -e launch
}
bad "no target" "--target: required" --preset h200-full --force
bad "unknown target" '--target: must be slurm, modal or local, got "k8s"' --target k8s --preset h200-full --force
bad "unknown engine" '--engine: must be native or verl, got "torchrun"' --target slurm --engine torchrun --preset h200-full --force
bad "unknown preset" '--preset: unknown preset "h300-full"' --target slurm --preset h300-full
bad "missing database" "--db: missing.db does not exist" --target slurm --plan 1 --db missing.db
check "missing database: not created" test ! -e missing.db
bad "unknown plan id" "--plan: no plan with id 999" --target slurm --plan 999
bad "plan and preset" "--plan: give --plan or --preset, not both" --target slurm --plan "$plan_id" --preset h200-full
"$bin" launch --target slurm --plan "$even_id" --engine verl --teacher-nodes 0 --force --out jobs/gpt-even > out.txt 2> err.txt
check "even plan under verl: exit 0" test $? -eq 0
check "even plan under verl: its layout" has jobs/gpt-even/kimi-plan.sbatch \
  "override_transformer_config.pipeline_model_parallel_layout='\\''Ett|ttt|(tt|)*61tL'\\''"
check "even plan under verl: no end-stage keys" bash -c "! grep -q num_layers_in_ jobs/gpt-even/kimi-plan.sbatch"
# Megatron's states run natively; fp16 does not.
fp16_id=$(plan_of --engine verl --dtype fp16)
bad "native on an fp16 plan" "--dtype: kimi-plan run does not execute fp16" \
  --target slurm --engine native --plan "$fp16_id" --force
# The native runtime builds any split it is given: the Megatron split runs as planned.
megatron_native_id=$(plan_of --layer-split megatron "${native_states[@]}")
"$bin" launch --target slurm --engine native --plan "$megatron_native_id" --force --out jobs/gpt-native > out.txt 2> err.txt
check "native on a megatron plan: exit 0" test $? -eq 0
check "native on a megatron plan: run is told the split" has jobs/gpt-native/kimi-plan.sbatch "  --layer-split megatron"
check "native: run gets only flags it executes" bash -c "! grep -qE -- '--(gpu|nodes|gpus-per-node|rollout-tp|placement|recompute-modules) ' jobs/gpt-native/kimi-plan.sbatch" 
bad "a split for a recorded plan" "--layer-split: a recorded plan keeps the split it was planned with" \
  --target slurm --plan "$even_id" --layer-split megatron --force
bad "larger than --max-nodes" "--max-nodes: the job needs 16 nodes (128 GPUs) but the modal target allows 8" \
  --target modal --preset h200-full "${native_states[@]}" --force --max-nodes 8
bad "larger than Modal's clusters" "--max-nodes: the job needs 64 nodes (512 GPUs) but the modal target allows 32" \
  --target modal --preset h200-full "${native_states[@]}" --force --nodes 64
bad "more than this machine" "--max-nodes: the job needs 2 nodes (16 GPUs) but the local target allows 1 (this machine)" \
  --target local --preset h200-lora "${native_states[@]}" --force
bad "verl here" "--engine: the local target runs the native runtime only, not verl" --target local --engine verl "${local_plan[@]}"
bad "files for local" "--out: the local target runs here and writes no files" --target local --out x "${local_plan[@]}"
bad "bad time" '--time: use minutes, HH:MM:SS or D-HH[:MM[:SS]] as sbatch does, got "1h"' --target slurm --preset h200-full "${native_states[@]}" --force --time 1h
bad "modal over 24 h" "--time: Modal functions run at most 1-00:00:00, got 2-00:00:00" --target modal --preset b200-full "${native_states[@]}" --force --time 2-00:00:00
bad "b300 on modal" '--gpu: Modal offers a100-80g, h100, h200 and b200, not "b300"' --target modal --preset b200-full --gpu b300 "${native_states[@]}" --force
bad "partition with a space" '--partition: letters, digits and _.,:@+- only, got "a b"' --target slurm --preset h200-full "${native_states[@]}" --force --partition "a b"
bad "teacher too small" "--teacher-nodes: a teacher replica takes rollout tp x dp = 16 GPUs" \
  --target slurm --engine verl --preset h200-lora --force --rollout-ep 16 --rollout-tp 8 --rollout-dp 2

check "help" bash -c "'$bin' launch --help | grep -q -- '--target'"
check "listed in kimi-plan --help" bash -c "'$bin' --help | grep -q '^  launch '"

finish cli_launch
