#!/usr/bin/env bash
# The README's second command, and what CI runs: install what is missing,
# build, and run every test (unit tests and the end-to-end CLI tests) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
# The machine's CPUs: GNU nproc honours OMP_NUM_THREADS, which a run of the
# suite under OMP_NUM_THREADS=1 sets for the tests, not for ctest.
ctest --output-on-failure --parallel "$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)" --timeout 600
