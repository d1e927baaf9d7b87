// Multi-process tests: a test spawns N copies of this test binary, each
// running one "rank" test (skipped unless started this way) with the
// torchrun-style environment. Ranks meet through a c10d FileStore in a fresh
// temporary path and talk over Gloo bound to 127.0.0.1, so nothing listens
// beyond loopback and no port has to be guessed.
#ifndef KIMI_PLAN_RUNTIME_COMM_DIST_TEST_UTIL_H_
#define KIMI_PLAN_RUNTIME_COMM_DIST_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "common/process_launcher.h"
#include "common/thread_share.h"
#include "runtime/comm/c10d_communicator.h"
#include "runtime/comm/rendezvous.h"

namespace kp::runtime::testing {

inline constexpr const char* kRankTestVariable = "KIMI_PLAN_TEST_RANK";

/// Whether this process is a rank started by RunRanks.
inline bool IsRankProcess() { return std::getenv(kRankTestVariable) != nullptr; }

/// Starts `world` copies of this binary running only `test` ("Suite.Name"),
/// rank i with RANK=i and its share of the cores (common/thread_share.h),
/// plus `env` ("NAME=VALUE"); waits for all and returns
/// their exit codes in rank order (128 + signal for a killed rank).
inline std::vector<int> RunRanks(const std::string& test, int world, const std::vector<std::string>& env = {}) {
  static int runs = 0;
  const std::string store = (std::filesystem::temp_directory_path() /
                             ("kimi-plan-store-" + std::to_string(getpid()) + "-" + std::to_string(++runs)))
                                .string();
  std::filesystem::remove(store);
  RealProcessLauncher launcher;
  std::vector<int> ids(world), codes(world, -1);
  for (int r = 0; r < world; ++r) {
    // Built by appending: GCC 12 warns falsely (-Warray-bounds) on chains
    // of operator+ over temporaries once this is inlined into some tests.
    const auto var = [](const char* name, const std::string& value) {
      std::string out(name);
      out.append("=").append(value);
      return out;
    };
    std::vector<std::string> e = {var(kRankTestVariable, "1"), var("RANK", std::to_string(r)),
                                  var("WORLD_SIZE", std::to_string(world)), var("LOCAL_RANK", std::to_string(r)),
                                  var("MASTER_ADDR", "127.0.0.1"), var(kStoreFileVariable, store),
                                  ThreadsPerLocalRankVariable(world, static_cast<int>(std::thread::hardware_concurrency()),
                                                              std::getenv(kThreadsVariable))};
    e.insert(e.end(), env.begin(), env.end());
    Result<int> id = launcher.Start({"/proc/self/exe", "--gtest_filter=" + test, "--gtest_brief=1"}, e);
    if (!id.ok()) {
      ADD_FAILURE() << id.status().message();
      return codes;
    }
    ids[r] = *id;
  }
  for (int done = 0; done < world; ++done) {
    Result<std::pair<int, int>> ended = launcher.WaitAny();
    if (!ended.ok()) break;
    for (int r = 0; r < world; ++r)
      if (ids[r] == ended->first) codes[r] = ended->second;
  }
  std::filesystem::remove(store);
  return codes;
}

/// This rank's world communicator over Gloo (the timeout from
/// KIMI_PLAN_TEST_TIMEOUT_S, default 30 s).
inline std::unique_ptr<Communicator> ConnectThisRank() {
  Result<Rendezvous> r = RendezvousFromEnvironment([](const char* n) { return std::getenv(n); });
  EXPECT_TRUE(r.ok()) << r.status().message();
  C10dOptions o;
  o.backend = "gloo";
  const char* t = std::getenv("KIMI_PLAN_TEST_TIMEOUT_S");
  o.timeout_s = t ? std::atoi(t) : 30;
  Result<std::unique_ptr<Communicator>> c = ConnectC10d(*r, o);
  EXPECT_TRUE(c.ok()) << c.status().message();
  if (!c.ok()) return nullptr;
  return std::move(c).value();
}

}  // namespace kp::runtime::testing

#endif  // KIMI_PLAN_RUNTIME_COMM_DIST_TEST_UTIL_H_
