#!/usr/bin/env bash
# The error contract under hostile input (docs/limits.md): every row of
# hostile_inputs.tsv is a command that must be refused before it does
# anything. For each row, run once beside an existing store and once in an
# empty directory, and check: the exit code the row gives (2), exactly one
# bounded line on stderr with no control character, naming the row's flag or
# field, every file byte-identical (or still absent) and no other file
# written. A row with exit code 0 instead checks that what it prints holds
# no "nan" or "inf".
#
# The input column makes the row's files (in the directory, before the
# command; removed after):
#   -                        nothing
#   DIR/NAME.json KEY=RAW    input.json: that preset (or ../tests/... file)
#                            with one dotted key set to a raw JSON value
#   @dup DIR/NAME.json KEY=RAW   the same, with KEY named a second time
#   @longfield DIR/NAME.json KEY BYTES   KEY set to a string of BYTES x's
#   @link NAME TARGET        NAME a symbolic link to TARGET (/dev/zero)
#   @fifo NAME               NAME a FIFO with no writer
#   @dir NAME                NAME a directory
#   @big NAME MIB            NAME a (sparse) file of MIB MiB
#   @longcell NAME BYTES     NAME a schedule CSV with a cell of BYTES x's
#   @prompt NAME BYTES       NAME a task file whose prompt is BYTES bytes
#   @sqlite NAME SQL         NAME an SQLite database another program made
#   @store NAME SQL          NAME a copy of a kimi-plan store, then SQL run on it
#   @corrupt NAME            NAME a kimi-plan store with page 2 overwritten
#   @env VAR=VALUE...        the command runs with these set (shell words: quote a VALUE with spaces)
#   @stdout-full             standard output is /dev/full
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
presets="$here/../presets"
source "$here/test_lib.sh"
scratch_dir

# input.json from "DIR/NAME.json KEY=VALUE": the preset with one (dotted) key
# set to a raw JSON value, spliced as text so that values a JSON library
# would not hold (1e999) reach the parser as written; with `dup`, the key is
# written twice, the raw value second.
make_input() {  # make_input set|dup|long FILE KEY=VALUE | KEY BYTES
  python3 - "$presets/$2" "$1" "${@:3}" > input.json <<'PY'
import json, sys
path, how = sys.argv[1], sys.argv[2]
doc = json.load(open(path))
if how == "long":
    key, value = sys.argv[3], json.dumps("x" * int(sys.argv[4]))
else:
    key, value = " ".join(sys.argv[3:]).split("=", 1)
obj = doc
parts = key.split(".")
for p in parts[:-1]:
    obj = obj[int(p)] if isinstance(obj, list) else obj[p]
last = parts[-1]
marker = '"@@HOSTILE@@"'
if how == "dup":
    obj["@@DUP@@"] = "@@HOSTILE@@"
    text = json.dumps(doc).replace('"@@DUP@@": ' + marker, json.dumps(last) + ": " + value)
else:
    obj[last] = "@@HOSTILE@@"
    text = json.dumps(doc).replace(marker, value)
print(text)
PY
}

# A kimi-plan store to copy (made once).
"$bin" plan --preset h200-lora --db "$work/good.db" --json > /dev/null || { echo "FAIL setup: store"; exit 1; }

make_fixture() {  # make_fixture KIND ARGS...: prints the names it made, one a line
  local kind=$1; shift
  case "$kind" in
    @dup) make_input dup "$@"; echo input.json ;;
    @longfield) make_input long "$@"; echo input.json ;;
    @link) ln -s "$2" "$1"; echo "$1" ;;
    @fifo) mkfifo "$1"; echo "$1" ;;
    @dir) mkdir "$1"; echo "$1" ;;
    @big) truncate -s "$(($2 * 1024 * 1024))" "$1"; echo "$1" ;;
    @longcell) python3 -c "import sys; print('0F0,' + 'x' * int(sys.argv[1]))" "$2" > "$1"; echo "$1" ;;
    @prompt) python3 -c "import json, sys; print(json.dumps({'prompt': 'x' * int(sys.argv[1]), 'answer': '1'}))" "$2" > "$1"; echo "$1" ;;
    @sqlite) local name=$1; shift; sqlite3 "$name" "$*"; echo "$name" ;;
    @store) local name=$1; shift; cp "$work/good.db" "$name"; sqlite3 "$name" "$*"; echo "$name" ;;
    @corrupt)
      cp "$work/good.db" "$1"
      python3 - "$1" <<'PY'
import sys
f = open(sys.argv[1], "r+b")
page = int.from_bytes(open(sys.argv[1], "rb").read(18)[16:18], "big")
f.seek(page)
f.write(b"\xa5" * page)
PY
      echo "$1" ;;
  esac
}

snapshot() {  # every file's path and hash (links and FIFOs by path only)
  find . -mindepth 1 | LC_ALL=C sort
  find . -type f | LC_ALL=C sort | xargs -r -d '\n' sha256sum
}

run_row() {  # run_row DIR NAME CODE FLAG ARGS...: uses $row_env, $row_stdout
  local dir=$1 name=$2 code=$3 flag=$4; shift 4
  ( cd "$dir" || exit 1
    local before after rc
    before=$(snapshot)
    env "${row_env[@]}" "$bin" "$@" > "$row_stdout" 2> ../err.txt
    rc=$?
    after=$(snapshot)
    check "$name: exit $code (got $rc)" test "$rc" -eq "$code"
    check "$name: no control character on stderr" bash -c "! LC_ALL=C grep -q \$'[\x01-\x09\x0b-\x1f\x7f]' ../err.txt"
    if [ "$code" -eq 0 ]; then
      check "$name: no nan or inf printed" bash -c "! grep -q -i -w -E 'nan|-?inf' $row_stdout ../err.txt"
    else
      check "$name: one line on stderr" test "$(wc -l < ../err.txt)" -eq 1
      check "$name: a bounded line" test "$(wc -c < ../err.txt)" -le 1200
      check "$name: names $flag" grep -q -F -- "$flag" ../err.txt
      check "$name: files and directory unchanged" test "$before" = "$after"
    fi
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
    train|run|sdpo|profile)
      if ! grep -qx "$command" <<< "$runtime_commands"; then
        echo "skipped: row $rows ($args): built without LibTorch"
        continue
      fi ;;
  esac
  for dir in with_store empty; do
    row_env=()
    row_stdout=../out.txt
    made=()
    case "$input" in
      -) ;;
      @env\ *) eval "row_env=(${input#@env })" ;;
      @stdout-full) row_stdout=/dev/full ;;
      @*) mapfile -t made < <(cd "$dir" && eval "make_fixture $input") ;;
      *) (cd "$dir" && make_input set "${input%% *}" "${input#* }"); made=(input.json) ;;
    esac
    eval "set -- $args"
    run_row "$dir" "row $rows ($dir): $args" "$code" "$flag" "$@"
    for m in "${made[@]}"; do rm -rf "${dir:?}/$m"; done
  done
done < "$here/hostile_inputs.tsv"
check "the table has rows" test "$rows" -gt 100
finish hostile_inputs
