#!/usr/bin/env bash
# Installs the Debian packages kimi-plan builds and tests with, if any is
# missing. Idempotent: does nothing (and needs no network) when all are there.
set -euo pipefail
packages=(
  cmake ninja-build g++ ccache pkg-config python3
  libboost-program-options-dev libboost-graph-dev
  libsqlite3-dev sqlite3 nlohmann-json3-dev libspdlog-dev libgtest-dev
  # The runtime (optional at configure time). Debian's LibTorch links the
  # system libblas.so.3; OpenBLAS (OpenMP build, sharing LibTorch's threads)
  # makes it ~7x faster than the reference BLAS.
  libtorch-dev libgloo-dev libopenblas0-openmp
  # tests/cli_report_test.sh renders the HTML report headless (it skips that
  # check when chromium is absent).
  chromium
  # The launcher's Slurm job runs for real on a one-node Slurm in the tests.
  slurm-wlm munge
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
echo "installing: ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
