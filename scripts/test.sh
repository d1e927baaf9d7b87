#!/usr/bin/env bash
# The README's second command, and what CI runs: install what is missing,
# build, and run every test (unit tests and the end-to-end CLI tests) with ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
cd build
ctest --output-on-failure --parallel "$(nproc)" --timeout 600
