# Shared by the end-to-end test scripts: sourced, not run. Each script sets
# `bin` (the kimi-plan executable), works in a scratch directory
# (`scratch_dir`), and ends with `finish NAME`.
fails=0
passes=0
passed_lines=""
scratch_dir() {  # scratch_dir: cd into a new directory (`work`), removed when the script exits
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  cd "$work" || exit 1
}
# A FAIL line is printed at once, the ok lines at the end (finish), so that a
# failure leads the test's output in a CI log that keeps only its head.
check() {  # check NAME COMMAND...: one line ok/FAIL per check
  local name=$1; shift
  if "$@"; then
    passed_lines+="ok   $name"$'\n'; passes=$((passes + 1))
  else
    echo "FAIL $name"; fails=$((fails + 1))
  fi
}
show_if_any() {  # show_if_any FILE...: the first lines of each non-empty FILE, after a FAIL
  local f
  for f in "$@"; do [ -s "$f" ] && echo "  $f: $(head -c 400 "$f" | tr '\n' '|')"; done
  return 0
}
json_check() {  # json_check NAME FILE PYTHON-EXPRESSION-ON-d
  check "$1" python3 -c "import json,sys; d = json.load(open('$2')); assert $3, d"
}
count_rows() {  # count_rows TABLE: rows in the store's table, 0 without a store
  sqlite3 kimi-plan.db "select count(*) from $1" 2>/dev/null || echo 0
}
refused() {  # refused NAME TABLE EXPECTED ARGS...: bad input gets one line, exit 2, and writes nothing
  local name=$1 table=$2 expected=$3; shift 3
  local before; before=$(count_rows "$table")
  "$bin" "$@" > out.txt 2> err.txt
  local rc=$?
  check "$name: exit 2" test $rc -eq 2
  check "$name: one line" test "$(wc -l < err.txt)" -eq 1
  check "$name: says what" grep -q -- "$expected" err.txt
  check "$name: nothing written" test "$(count_rows "$table")" = "$before"
}
finish() {  # finish NAME: the summary, then the checks that passed
  echo "$1: $passes passed, $fails failed"
  printf '%s' "$passed_lines"
  exit $((fails > 0))
}
