#!/usr/bin/env bash
# The benchmark programs read their numbers through the CLI's range-checked
# readers: a value that is not a number or is out of range is one line
# naming the option, exit 2, never an uncaught exception (issue 32).
#   tests/bench_args_test.sh BUILD_DIR
set -u
dir=$(realpath "$1")
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

# bench NAME EXPECTED PROGRAM ARGS...: refused with one line naming EXPECTED
bench() {
  local name=$1 expected=$2 program=$3; shift 3
  bin="$dir/$program" refused "$name" plans "$expected" "$@"
}
bench "plan bench: PP below 2" "PP: must be at least 2, got 1" kimi-plan-bench pipeline 1
bench "plan bench: NODES not a number" 'NODES: must be an integer from 1' kimi-plan-bench search abc
# The runtime's benchmarks exist only in a build with LibTorch.
if [ -x "$dir/kimi-plan-calibrate" ]; then
  bench "calibrate: tokens not a number" '\--tokens: must be a number >= 1 and <= 1000000000, got "x"' \
    kimi-plan-calibrate --tokens x --out t.json
  bench "sync: a bucket size not a number" '\--bucket-mib: must be a number > 0' kimi-plan-sync-bench --bucket-mib 4,x
  bench "sync: no repeats" '\--repeats: must be a positive integer, got 0' kimi-plan-sync-bench --repeats 0
  bench "sync: hidden below 4" '\--synth-hidden: must be at least 4, got 3' kimi-plan-sync-bench --synth-hidden 3
  bench "train: fused is 0 or 1" '\--fused: must be at most 1, got 2' kimi-plan-train-bench --shape a --fused 2
  bench "train: steps beyond 32 bits" '\--steps: must be at most 2147483647' kimi-plan-train-bench --shape a \
    --steps 99999999999
  bench "kda: negative batch" '\--batch: must be a positive integer, got -1' kimi-plan-kda-bench --batch -1
  bench "pipeline: pp 1" '\--pp: must be at least 2, got 1' kimi-plan-pipeline-bench --pp 1 --shape x
  bench "sdpo: a fractional timeout" '\--timeout-s: must be an integer from 1' kimi-plan-sdpo-bench --timeout-s 1.5
fi
finish bench_args
