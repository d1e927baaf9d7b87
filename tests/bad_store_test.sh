#!/usr/bin/env bash
# End-to-end checks of bad --db files and bad output paths (issue 13, causes
# 4 and 5): each is refused with exit 2 and one stderr line naming the flag,
# the database byte-identical (or not created) and no file written anywhere;
# a read-only store still reports; two writers and a reader hammering one
# store lose nothing and never fail on a lock; a write lock held longer than
# the busy timeout gives the one-line error.
set -u
bin="$1"
here=$(cd "$(dirname "$0")" && pwd)
source "$here/test_lib.sh"
scratch_dir

plan=(plan --preset h200-lora)
digest() { if [ -e "$1" ] && [ ! -d "$1" ]; then sha256sum < "$1"; else echo absent; fi; }
listing() { find . -path ./out.txt -prune -o -path ./err.txt -prune -o -print | LC_ALL=C sort | xargs -d '\n' ls -ld --time-style=+%s 2>/dev/null | awk '{print $1, $5, $7}'; }

# bad_db NAME FLAG DB WHAT ARGS...: `kimi-plan ARGS --db DB` exits 2 with one
# line naming FLAG and WHAT; DB and every other file are left as they were.
bad_db() {
  local name=$1 flag=$2 db=$3 what=$4; shift 4
  local before files
  before=$(digest "$db"); files=$(listing)
  "$bin" "$@" --db "$db" > out.txt 2> err.txt
  local rc=$?
  check "$name: exit 2" test $rc -eq 2
  check "$name: one line" test "$(wc -l < err.txt)" -eq 1
  check "$name: names $flag" grep -q -- "$flag" err.txt
  check "$name: says '$what'" grep -q -- "$what" err.txt
  check "$name: nothing on stdout" test ! -s out.txt
  check "$name: db unchanged" test "$(digest "$db")" = "$before"
  check "$name: no file written" test "$(listing)" = "$files"
}

"$bin" "${plan[@]}" --db good.db > /dev/null
check "a good store" test "$(sqlite3 good.db 'select count(*) from plans')" = 1

mkdir dir.db
head -c 8192 /dev/urandom > random.db
size=$(stat -c %s good.db)
head -c $((size / 2)) good.db > half.db
head -c 50 good.db > short.db
cp good.db ro.db && chmod 444 ro.db
python3 -c "import sqlite3; c = sqlite3.connect('newer.db'); c.execute('create table t (x)'); c.execute('pragma user_version = 99'); c.commit()"

for cmd in plan report; do
  if [ $cmd = plan ]; then args=("${plan[@]}"); else args=(report); fi
  bad_db "$cmd: missing directory" --db nodir/x.db "does not exist" "${args[@]}"
  check "$cmd: missing directory not created" test ! -e nodir
  bad_db "$cmd: a directory" --db dir.db "is a directory" "${args[@]}"
  bad_db "$cmd: random bytes" --db random.db "not a SQLite database" "${args[@]}"
  bad_db "$cmd: truncated" --db half.db "truncated" "${args[@]}"
  bad_db "$cmd: shorter than the header" --db short.db "truncated" "${args[@]}"
  bad_db "$cmd: newer schema" --db newer.db "schema version 99 is newer" "${args[@]}"
  bad_db "$cmd: empty path" --db "" "empty" "${args[@]}"
done
bad_db "plan: read-only file" --db ro.db "read-only" "${plan[@]}"
bad_db "simulate: read-only file" --db ro.db "read-only" simulate sync --model kimi-k2.6 --mode full
bad_db "simulate --plan: random bytes" --db random.db "not a SQLite database" simulate loop --plan 1

before=$(digest ro.db)
"$bin" report --db ro.db > ro.txt 2> ro.err
check "report: a read-only store works" test $? -eq 0
check "report: read-only store lists its plan" grep -q " 1 plans," ro.txt
check "report: read-only store unchanged" test "$(digest ro.db)" = "$before"

# ------------------------------------------------------ bad output paths
# Checked before any work: nothing recorded, nothing written.
echo x > afile
cp good.db out.db
sim=(simulate pipeline --schedule 1f1b --pp 2 --microbatches 2 --f-us 1 --b-us 2 --w-us 0 --p2p-us 1)
bad_db "report --csv: a directory" --csv out.db "is a directory" report --csv dir.db
bad_db "report --html: under a file" --html out.db "afile is not a directory" report --html afile/r.html
bad_db "report --csv: empty" --csv out.db "empty" report --csv ""
bad_db "simulate pipeline --out: a file" --out out.db "is a file" "${sim[@]}" --out afile
bad_db "simulate pipeline --out: under a file" --out out.db "afile is not a directory" "${sim[@]}" --out afile/x
bad_db "simulate loop --out: a file" --out out.db "is a file" simulate loop --preset h200-lora --out afile
bad_db "launch --out: a file" --out out.db "is a file" launch --target slurm --preset h200-lora --force --out afile
bad_db "calibrate --out: a directory" --out out.db "is a directory" calibrate --out dir.db
if "$bin" --help | grep -q '^  train '; then
  small=(train --model kimi-k3-debug --hidden 32 --experts 4 --vocab 64 --batch 2 --seq-len 8 --layers 3 --heads 2 --steps 2)
  bad_db "train --checkpoint-dir: a file" --checkpoint-dir out.db "is a file" "${small[@]}" --checkpoint-dir afile
  bad_db "train --save-adapters: missing directory" --save-adapters out.db "does not exist" \
    "${small[@]}" --lora-rank 2 --save-adapters nodir/a.pt
else
  echo "skipped: train's output paths (built without LibTorch)"
fi

# ------------------------------------------------- two writers and a reader
start=$SECONDS
writer() { for i in $(seq 30); do "$bin" "${plan[@]}" --db busy.db > /dev/null 2>> "writer$1.err" || echo "plan failed: $?" >> "writer$1.err"; done; }
writer 1 & w1=$!
writer 2 & w2=$!
( while kill -0 $w1 2>/dev/null || kill -0 $w2 2>/dev/null; do
    "$bin" report --db busy.db > /dev/null 2>> reader.err
  done ) & r=$!
wait $w1 $w2 $r
check "two writers: exactly 60 plans ($((SECONDS - start)) s)" test "$(sqlite3 busy.db 'select count(*) from plans')" = 60
check "two writers: no failure" test ! -s writer1.err -a ! -s writer2.err
check "reader: never locked" bash -c "! grep -q 'locked' reader.err"
check "reader: only 'does not exist' before the first plan" \
  bash -c "! grep -v 'does not exist' reader.err | grep -q ."
[ -s writer1.err ] || [ -s writer2.err ] || grep -v -q 'does not exist' reader.err && \
  show_if_any writer1.err writer2.err reader.err

# --------------------------------------------------- a lock held too long
# The holder keeps the lock until the blocked writer has given up (the file
# `release`), so the check does not depend on how loaded the machine is.
python3 - busy.db <<'PY' &
import os, sqlite3, sys, time
c = sqlite3.connect(sys.argv[1], isolation_level=None)
c.execute("BEGIN EXCLUSIVE")
open("held", "w").close()
deadline = time.time() + 60
while not os.path.exists("release") and time.time() < deadline:
    time.sleep(0.05)
c.execute("ROLLBACK")
PY
holder=$!
for _ in $(seq 100); do [ -e held ] && break; sleep 0.1; done
check "lock: held" test -e held
"$bin" report --db busy.db > /dev/null 2> held_report.err
check "lock: a reader still reads" test $? -eq 0
start=$SECONDS
"$bin" "${plan[@]}" --db busy.db > held.out 2> held.err
rc=$?
touch release
check "lock: exit 2 after the timeout ($((SECONDS - start)) s)" test $rc -eq 2
check "lock: one line" test "$(wc -l < held.err)" -eq 1
check "lock: says so" grep -q -- "--db: busy.db: locked by another writer for more than 5 s" held.err
[ $rc -eq 2 ] || show_if_any held_report.err held.err held.out
wait $holder
check "lock: nothing written" test "$(sqlite3 busy.db 'select count(*) from plans')" = 60

finish bad_store
