# Sourced by scripts/gpu_*_bench.sh: configures the runtime-only tree
# (KIMI_PLAN_RUNTIME_ONLY) against the machine's PyTorch LibTorch in
# /tmp/kp-build-rt and builds the given targets. Sets `build` (the build
# directory) and `build_rc`; the log goes to OUT/build.log, and on failure
# its error lines are printed.
#
#   gpu_build OUT JSON_INCLUDE_DIR JOBS TARGET...   (JSON_INCLUDE_DIR may be "")
gpu_build() {
  local out=$1 json_inc=$2 jobs=$3 root t0 prefix
  shift 3
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
  prefix=$(python3 -c 'import torch; print(torch.utils.cmake_prefix_path)')
  build=/tmp/kp-build-rt
  local cfg=(-G Ninja -DKIMI_PLAN_RUNTIME_ONLY=ON -DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$prefix")
  [ -n "$json_inc" ] && cfg+=("-DKIMI_PLAN_JSON_INCLUDE=$json_inc")
  # GoogleTest's sources (Debian's /usr/src/googletest), carried in
  # .gpu-carry/googletest, give this tree the kernels' tests.
  [ -f "$root/.gpu-carry/googletest/CMakeLists.txt" ] && cfg+=("-DKIMI_PLAN_GTEST_SOURCE=$root/.gpu-carry/googletest")
  command -v nvcc >/dev/null && cfg+=("-DCMAKE_CUDA_COMPILER=$(command -v nvcc)")
  echo "== configure and build (ninja -j$jobs): $*"
  t0=$SECONDS
  cmake -S "$root" -B "$build" "${cfg[@]}" >"$out/build.log" 2>&1 &&
    ninja -C "$build" -j"$jobs" -k 0 "$@" >>"$out/build.log" 2>&1
  build_rc=$?
  echo "build rc $build_rc in $((SECONDS - t0)) s"
  [ $build_rc -ne 0 ] && grep -E "error|Error|CMake" "$out/build.log" | head -40
  return $build_rc
}
