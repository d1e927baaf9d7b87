#!/usr/bin/env bash
# `kimi-plan checkpoint inspect` against an independent reader and writer of
# the safetensors format (tests/safetensors_spec.py, standard library only):
# a two-shard checkpoint with Kimi K2.6's Hugging Face names (BF16 weights,
# an F32 router bias, INT4 experts as compressed-tensors packs them) is
# listed exactly as the spec's reader sees it, each with the runtime
# tensor it loads into; each way of breaking it is
# one line naming the file and tensor, exit 2.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir
spec="$here/safetensors_spec.py"

python3 "$spec" write k26
"$bin" checkpoint inspect k26 --json > k26.json 2> k26.err
check "inspect: exits 0" test $? -eq 0
check "inspect: every tensor's dtype, shape, bytes and shard as the spec's reader sees them" python3 "$spec" check k26 k26.json
json_check "inspect: INT4 experts listed as packed" k26.json \
  "[t['shape'] for t in d['tensors'] if t['name'] == 'model.layers.1.mlp.experts.0.gate_proj.weight_packed'] == [[64, 4]]"
json_check "inspect: an INT4 scale loads into its expert's slice of the bank" k26.json \
  "[t['runtime'] for t in d['tensors'] if t['name'] == 'model.layers.1.mlp.experts.1.up_proj.weight_scale'] == ['layers.1.moe.experts.up[1] (INT4 scale)']"
"$bin" checkpoint inspect k26/model-00001-of-00002.safetensors > one.txt
check "inspect: one shard as a table" grep -q "model.layers.0.self_attn.q_a_proj.weight  *BF16  *\[16, 32\]" one.txt

broken() {  # broken KIND EXPECTED: a fresh copy broken one way is refused naming it
  local kind=$1 expected=$2
  rm -rf "b_$kind" && python3 "$spec" write "b_$kind" && python3 "$spec" corrupt "b_$kind" "$kind"
  "$bin" checkpoint inspect "b_$kind" > /dev/null 2> "b_$kind.err"
  check "$kind: exit 2" test $? -eq 2
  check "$kind: one line" test "$(wc -l < "b_$kind.err")" -eq 1
  check "$kind: names the file and tensor" grep -qF -- "$expected" "b_$kind.err"
}
broken truncate "b_truncate/model-00002-of-00002.safetensors: truncated: the header indexes"
broken offsets "b_offsets/model-00001-of-00002.safetensors: tensor model.layers.0.self_attn.q_a_proj.weight: data_offsets"
broken shape "b_shape/model-00001-of-00002.safetensors: tensor model.layers.0.self_attn.q_a_proj.weight: data_offsets [4224, 5248] do not hold its BF16 shape [16,33] (1056 bytes)"
broken shard "b_shard/model-00002-of-00002.safetensors: no such file (a shard model.safetensors.index.json names)"
broken index "b_index/model.safetensors.index.json: model.layers.7.mlp.gate.weight: model-00001-of-00002.safetensors holds no such tensor"

"$bin" checkpoint inspect nowhere > /dev/null 2> none.err
check "a missing path: exit 2" test $? -eq 2
"$bin" checkpoint list k26 > /dev/null 2> action.err
check "an unknown action: exit 2 naming it" grep -q 'the action must be inspect or export, got "list"' action.err

finish checkpoint
