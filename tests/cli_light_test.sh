#!/usr/bin/env bash
# The light CLI: `kimi-plan` links no LibTorch; the commands that train are
# handed to kimi-plan-runtime beside it, and without it they are refused
# with one line and exit 2 while plan, simulate, launch and report still run.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
bin=$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")
scratch_dir

check "--version" bash -c "'$bin' --version | grep -q '^kimi-plan '"
if command -v ldd > /dev/null; then
  check "kimi-plan links no LibTorch" bash -c "! ldd '$bin' | grep -q -e libtorch -e libc10"
fi

# kimi-plan alone in a directory: a machine without LibTorch.
mkdir alone
cp "$bin" alone/kimi-plan
(cd alone && ./kimi-plan plan --preset h200-lora > plan.txt)
check "alone: plan runs" grep -q "verdict" alone/plan.txt
(cd alone && ./kimi-plan simulate pipeline --schedule 1f1b --pp 4 --microbatches 8 --f-us 10 --b-us 20 --w-us 5 --p2p-us 0 > sim.txt)
check "alone: simulate runs" test -s alone/sim.txt
(cd alone && ./kimi-plan launch --target slurm --preset h200-lora --force --out job > launch.txt)
check "alone: launch writes the job" test -n "$(ls alone/job 2> /dev/null)"
(cd alone && ./kimi-plan report > report.txt)
check "alone: report runs" test -s alone/report.txt
check "alone: usage lists no train" bash -c "! alone/kimi-plan --help | grep -q '^  train '"
for command in train run sdpo; do
  (cd alone && ./kimi-plan "$command" --steps 1 > out.txt 2> err.txt; echo $? > rc)
  check "alone: $command exit 2" test "$(cat alone/rc)" -eq 2
  check "alone: $command one line" test "$(wc -l < alone/err.txt)" -eq 1
  check "alone: $command names kimi-plan-runtime" grep -q "kimi-plan-runtime" alone/err.txt
done

# Beside kimi-plan-runtime (a build with LibTorch): the commands are listed
# and reach it, the global --log-level with them.
if [ -x "$(dirname "$bin")/kimi-plan-runtime" ]; then
  check "usage lists train" bash -c "'$bin' --help | grep -q '^  train '"
  "$bin" --log-level warn train --help > help.txt
  check "train --help through kimi-plan-runtime" grep -q "kimi-plan train" help.txt
  "$bin" train --steps 0 > out.txt 2> err.txt
  check "train's own error, exit 2" test $? -eq 2
  check "train's own error names --steps" grep -q -- "--steps" err.txt
fi
finish cli_light
