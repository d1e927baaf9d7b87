#!/usr/bin/env bash
# The error contract under hostile input (docs/limits.md): every row of
# hostile_inputs.tsv is a command that must be refused before it does
# anything. For each row, run once beside an existing store and once in an
# empty directory, and check: the exit code the row gives (2), exactly one
# line on stderr naming the row's flag or field, the store byte-identical
# (or still absent), and no other file written.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
presets="$here/../presets"
source "$here/test_lib.sh"
scratch_dir

# input.json from a spec "DIR/NAME.json KEY=VALUE": the preset with one
# (dotted) key set to a raw JSON value, spliced as text so that values a
# JSON library would not hold (1e999) reach the parser as written.
make_input() {
  python3 - "$presets/$1" "$2" > input.json <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
key, value = sys.argv[2].split("=", 1)
obj = doc
parts = key.split(".")
for p in parts[:-1]:
    obj = obj[p]
obj[parts[-1]] = "@@HOSTILE@@"
print(json.dumps(doc).replace('"@@HOSTILE@@"', value))
PY
}

snapshot() {  # the store's hash (or "absent") and every file's path
  { if [ -e kimi-plan.db ]; then sha256sum kimi-plan.db; else echo "absent"; fi
    find . -mindepth 1 | sort; }
}

run_row() {  # run_row DIR NAME CODE FLAG ARGS...
  local dir=$1 name=$2 code=$3 flag=$4; shift 4
  ( cd "$dir" || exit 1
    local before after rc
    before=$(snapshot)
    "$bin" "$@" > ../out.txt 2> ../err.txt
    rc=$?
    after=$(snapshot)
    check "$name: exit $code (got $rc)" test "$rc" -eq "$code"
    check "$name: one line on stderr" test "$(wc -l < ../err.txt)" -eq 1
    check "$name: names $flag" grep -q -F -- "$flag" ../err.txt
    check "$name: store and directory unchanged" test "$before" = "$after"
    echo "passes=$passes fails=$fails" > ../counts )
  source ./counts
}

# A real store to keep byte-identical.
mkdir -p with_store empty
(cd with_store && "$bin" plan --preset h200-lora --json > /dev/null) || { echo "FAIL setup: plan"; exit 1; }
test -s with_store/kimi-plan.db || { echo "FAIL setup: no store"; exit 1; }

# The runtime's commands exist only in a build with LibTorch.
runtime_commands=$("$bin" --help | awk '$1 == "train" || $1 == "run" || $1 == "sdpo" {print $1}')

rows=0
while IFS=$'\t' read -r code flag input args; do
  case "$code" in ''|'#'*) continue ;; esac
  rows=$((rows + 1))
  command=${args%% *}
  case "$command" in
    train|run|sdpo)
      if ! grep -qx "$command" <<< "$runtime_commands"; then
        echo "skipped: row $rows ($args): built without LibTorch"
        continue
      fi ;;
  esac
  for dir in with_store empty; do
    rm -f "$dir/input.json"
    if [ "$input" != "-" ]; then (cd "$dir" && make_input ${input% *} ${input#* }); fi
    eval "set -- $args"
    run_row "$dir" "row $rows ($dir): $args" "$code" "$flag" "$@"
  done
done < "$here/hostile_inputs.tsv"
check "the table has rows" test "$rows" -gt 30
finish hostile_inputs
