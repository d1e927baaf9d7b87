#!/usr/bin/env bash
# The README's first command: install what is missing, build, and plan the
# seed's rank-32 LoRA pilot (h200-lora) into the embedded SQLite store.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
scripts/build.sh
build/kimi-plan plan --preset h200-lora
