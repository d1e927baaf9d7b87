#!/usr/bin/env bash
# `cmake --install` gives a relocatable tool (issue 32): the commands in
# PREFIX/bin and their data (presets, the Verl key list, the validation
# cases) in PREFIX/share/kimi-plan, found beside the binary. The installed
# tree is then moved to another prefix and run from another directory: a
# plan of a seed preset, validate's default cases and a Verl launch (which
# reads the key list) all work there, and the installed binary names no
# file of the source tree in what it prints.
#   tests/install_test.sh BUILD_DIR SOURCE_DIR
set -u
build=$(realpath "$1")
source_dir=$(realpath "$2")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
has() { grep -qF -- "$2" "$1"; }

cmake --install "$build" --prefix "$work/first" > install.txt 2>&1
check "install: exit 0" test $? -eq 0
check "install: the command" test -x "$work/first/bin/kimi-plan"
check "install: the presets" test -f "$work/first/share/kimi-plan/presets/topologies/h200-lora.json"
check "install: the Verl key list" test -f "$work/first/share/kimi-plan/verl_keys.txt"
check "install: the validation cases" test -f "$work/first/share/kimi-plan/validation/megatron_runs.json"
mv "$work/first" "$work/moved"
mkdir elsewhere && cd elsewhere || exit 1
bin="$work/moved/bin/kimi-plan"

"$bin" plan --preset h200-lora --db plans.db > plan.txt 2> plan.err
check "moved: plan --preset h200-lora: exit 0" test $? -eq 0
check "moved: plan --preset h200-lora: a verdict" grep -qiE "fits|does not fit" plan.txt
"$bin" validate > validate.txt 2> validate.err
check "moved: validate: exit 0" test $? -eq 0
check "moved: validate: the dense runs" grep -q "^dense step time: 67 cases" validate.txt
"$bin" launch --target slurm --preset h200-lora --engine verl --force --out job --db plans.db > launch.txt 2> launch.err
check "moved: launch --engine verl: exit 0" test $? -eq 0
check "moved: launch --engine verl: the script" test -s job/kimi-plan.sbatch
check "moved: nothing printed names the source tree" \
  bash -c "! grep -rqF -- '$source_dir' plan.txt plan.err validate.txt validate.err launch.txt launch.err job"
finish install
