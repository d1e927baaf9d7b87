#!/usr/bin/env bash
# The acceptance run of the SDPO loop, short: from a 150-step warm start
# (docs/sdpo.md §11), 40 SDPO steps on one-digit addition, in the split
# placement (the actor's pipeline on two processes, the teacher and the
# rollout on one each, over Gloo), raise the mean verifier reward of the last
# tenth of the steps clearly above the first tenth's. The long runs and their
# curves are in docs/benchmarks.md.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

"$bin" sdpo --model kimi-k3-debug --layers 5 --hidden 128 --heads 2 --experts 4 --vocab 260 --reprompt compact \
  --task addition --min-digits 1 --max-digits 1 --prompts 8 --samples 8 --max-new-tokens 4 \
  --sft-steps 150 --sft-context-share 0.9 --lr 1e-3 --loss sdpo --steps 40 --log-every 10 \
  --placement split --pp 2 --microbatches 4 --json > r.json 2> r.err
check "sdpo: exits 0" test $? -eq 0
json_check "sdpo: the reward rises by more than 0.15 (first tenth -> last tenth)" r.json \
  "d['last_tenth_reward'] - d['first_tenth_reward'] > 0.15"
python3 -c "import json; d = json.load(open('r.json')); print('reward', d['first_tenth_reward'], '->', d['last_tenth_reward'], d['reward_curve'])"
check "sdpo: 40 steps logged" test "$(sqlite3 kimi-plan.db 'select count(*) from loop_steps')" = 40
finish sdpo_reward
