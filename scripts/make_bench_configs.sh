#!/usr/bin/env bash
# Writes the SDPO loop configurations kimi-plan-sdpo-bench runs
# (bench/sdpo-*.json) with `kimi-plan sdpo --print-config`: docs/benchmarks.md's
# CPU configuration (kimi-k3-debug scaled to 5 layers, hidden 128, 2 heads,
# 4 experts and the byte tokenizer's 260 ids; one-digit addition, 8 prompts x
# 8 samples, at most 4 new tokens, the compact reprompt, a 150-step warm
# start with 90% of its examples in the teacher's format), 60 steps, with
# the GPU benchmarks' non-deterministic kernels. ctest cli_sdpo checks that
# the committed files are what this writes.
#
#   scripts/make_bench_configs.sh KIMI_PLAN_BINARY [OUTDIR (default bench)]
set -euo pipefail
bin=${1:?usage: make_bench_configs.sh KIMI_PLAN_BINARY [OUTDIR]}
out=${2:-$(cd "$(dirname "$0")/.." && pwd)/bench}
common=(--model kimi-k3-debug --layers 5 --hidden 128 --heads 2 --experts 4 --vocab 260 --reprompt compact
        --task addition --min-digits 1 --max-digits 1 --samples 8 --max-new-tokens 4 --sft-steps 150
        --sft-context-share 0.9 --steps 60 --deterministic off --print-config)
"$bin" sdpo "${common[@]}" --prompts 8 --lr 1e-3 --loss sdpo > "$out/sdpo-colocated.json"
"$bin" sdpo "${common[@]}" --prompts 8 --lr 1e-3 --loss grpo --placement split > "$out/sdpo-split-grpo.json"
"$bin" sdpo "${common[@]}" --prompts 8 --lr 3e-3 --loss grpo --placement split --lora-rank 8 > "$out/sdpo-split-grpo-lora.json"
# Issue 35's run 3, the loop split over a node of eight GPUs: the actor's
# pipeline on four, the self-teacher on one, three rollouts (12 prompts, so
# they split evenly).
"$bin" sdpo "${common[@]}" --lr 1e-3 --loss sdpo --placement split --pp 4 --microbatches 4 --rollout-ranks 3 \
  --prompts 12 > "$out/sdpo-node.json"
