// The runtime tests' main: the environment LibTorch reads at first use
// (runtime/comm/environment.h) as a deterministic CLI run has it (the tests
// pin bits), then GoogleTest.
#include <cstdlib>

#include <gtest/gtest.h>

#include "runtime/comm/environment.h"

int main(int argc, char** argv) {
  for (const kp::runtime::EnvironmentDefault& d : kp::runtime::kEnvironmentDefaults)
    setenv(d.name, d.value, /*overwrite=*/0);
  setenv(kp::runtime::kDeterministicCublas.name, kp::runtime::kDeterministicCublas.value, /*overwrite=*/0);
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
