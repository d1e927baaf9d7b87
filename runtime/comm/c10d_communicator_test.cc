// The c10d communicator across real processes (Gloo on 127.0.0.1). Each
// C10d.X test spawns the ranks, which run C10dRank.X.
#include "runtime/comm/c10d_communicator.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <thread>

#include "runtime/comm/dist_test_util.h"

namespace kp::runtime {
namespace {

using testing::ConnectThisRank;
using testing::IsRankProcess;
using testing::RunRanks;

TEST(Rendezvous, ReadsTheTorchrunEnvironment) {
  std::map<std::string, std::string> env = {{"RANK", "2"}, {"WORLD_SIZE", "4"}, {"MASTER_PORT", "1234"}};
  auto get = [&](const char* n) { return env.count(n) ? env[n].c_str() : nullptr; };
  Result<Rendezvous> r = RendezvousFromEnvironment(get);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->rank, 2);
  EXPECT_EQ(r->local_rank, 2);
  EXPECT_EQ(r->local_world_size, 4);
  EXPECT_EQ(r->master_addr, "127.0.0.1");
  EXPECT_EQ(r->master_port, 1234);
  env["RANK"] = "4";
  EXPECT_EQ(RendezvousFromEnvironment(get).status().message().rfind("RANK:", 0), 0u);
  env.erase("WORLD_SIZE");
  EXPECT_EQ(RendezvousFromEnvironment(get).status().message().rfind("WORLD_SIZE:", 0), 0u);
}

// Three ranks: a ring of tagged sends, reproducible all-reduce, broadcast,
// all-to-all with uneven (and empty) pairs, and subgroups.
TEST(C10dRank, Collectives) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of C10d.Collectives";
  std::unique_ptr<Communicator> c = ConnectThisRank();
  ASSERT_NE(c, nullptr);
  const int r = c->rank(), n = c->size();
  ASSERT_EQ(n, 3);
  EXPECT_EQ(c->backend(), "gloo");

  // Send/Recv: two tagged messages to the next rank, received out of tag order.
  torch::Tensor a = torch::full({4}, float(r)), b = torch::arange(5, torch::kLong) + 10 * r;
  ASSERT_TRUE(c->Send(a, (r + 1) % n, 1).ok());
  ASSERT_TRUE(c->Send(b, (r + 1) % n, 2).ok());
  torch::Tensor ra = torch::empty({4}), rb = torch::empty({5}, torch::kLong);
  const int prev = (r + n - 1) % n;
  ASSERT_TRUE(c->Recv(rb, prev, 2).ok());
  ASSERT_TRUE(c->Recv(ra, prev, 1).ok());
  EXPECT_TRUE(torch::equal(ra, torch::full({4}, float(prev))));
  EXPECT_TRUE(torch::equal(rb, torch::arange(5, torch::kLong) + 10 * prev));

  // AllReduceSum: the same inputs give bitwise the same sum every time and on
  // every rank (rank 0's result is broadcast and compared).
  torch::manual_seed(100 + r);
  const torch::Tensor x = torch::randn({10007});
  std::vector<torch::Tensor> sums;
  for (int i = 0; i < 3; ++i) {
    torch::Tensor s = x.clone();
    ASSERT_TRUE(c->AllReduceSum(s).ok());
    sums.push_back(s);
  }
  EXPECT_TRUE(torch::equal(sums[0], sums[1]));
  EXPECT_TRUE(torch::equal(sums[0], sums[2]));
  torch::Tensor root = sums[0].clone();
  ASSERT_TRUE(c->Broadcast(root, 0).ok());
  EXPECT_TRUE(torch::equal(root, sums[0]));
  torch::Tensor expect = torch::zeros({10007});
  for (int q = 0; q < n; ++q) {
    torch::manual_seed(100 + q);
    expect += torch::randn({10007});
  }
  EXPECT_TRUE(torch::allclose(sums[0], expect, 1e-5, 1e-6));

  // ReduceScatterSum and AllGather, in place over 3 parts of 2: rank r's
  // part q is 10 q + r + {0, 1}, whose sum over ranks is 30 q + 3 + {0, 3};
  // then each rank's part becomes its rank, gathered everywhere.
  torch::Tensor parts =
      torch::arange(6, torch::kFloat).div(2, "floor") * 10 + r + torch::tensor({0.0f, 1.0f, 0.0f, 1.0f, 0.0f, 1.0f});
  ASSERT_TRUE(c->ReduceScatterSum(parts).ok());
  EXPECT_TRUE(torch::equal(parts.narrow(0, 2 * r, 2), torch::tensor({30.0f * r + 3, 30.0f * r + 6})));
  parts.narrow(0, 2 * r, 2).fill_(r);
  ASSERT_TRUE(c->AllGather(parts).ok());
  EXPECT_TRUE(torch::equal(parts, torch::tensor({0.0f, 0.0f, 1.0f, 1.0f, 2.0f, 2.0f})));
  torch::Tensor uneven = torch::zeros({4});
  EXPECT_FALSE(c->AllGather(uneven).ok());  // 4 is not 3 equal parts

  // AllToAll: rank s sends (s + d) rows of width 3 to rank d, each row
  // [s, d, row]; rank 1 sends nothing to rank 2.
  auto rows = [](int s, int d) { return (s == 1 && d == 2) ? 0 : s + d; };
  std::vector<torch::Tensor> in, out;
  std::vector<std::int64_t> send_sizes;
  for (int d = 0; d < n; ++d) {
    torch::Tensor t = torch::zeros({rows(r, d), 3});
    for (int i = 0; i < rows(r, d); ++i) t[i] = torch::tensor({float(r), float(d), float(i)});
    in.push_back(t);
    send_sizes.push_back(rows(r, d));
  }
  Result<std::vector<std::int64_t>> recv_sizes = AllToAllSizes(*c, send_sizes);
  ASSERT_TRUE(recv_sizes.ok()) << recv_sizes.status().message();
  for (int s = 0; s < n; ++s) {
    EXPECT_EQ((*recv_sizes)[s], rows(s, r));
    out.push_back(torch::full({(*recv_sizes)[s], 3}, -1.0f));
  }
  ASSERT_TRUE(c->AllToAll(in, out).ok());
  for (int s = 0; s < n; ++s)
    for (int i = 0; i < rows(s, r); ++i)
      EXPECT_TRUE(torch::equal(out[s][i], torch::tensor({float(s), float(r), float(i)})));

  // Subgroup {0, 2}, twice (each gets its own store prefix); rank 1 stays out.
  if (r != 1) {
    for (int round = 0; round < 2; ++round) {
      Result<std::unique_ptr<Communicator>> sub = c->Subgroup({0, 2});
      ASSERT_TRUE(sub.ok()) << sub.status().message();
      EXPECT_EQ((*sub)->size(), 2);
      EXPECT_EQ((*sub)->rank(), r / 2);
      torch::Tensor v = torch::full({2}, float(r + round));
      ASSERT_TRUE((*sub)->AllReduceSum(v).ok());
      EXPECT_TRUE(torch::equal(v, torch::full({2}, float(2 + 2 * round))));
    }
  }
  ASSERT_TRUE(c->Barrier().ok());
}

TEST(C10d, Collectives) {
  if (IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(RunRanks("C10dRank.Collectives", 3), (std::vector<int>{0, 0, 0}));
}

// Rank 1 dies (SIGKILL) after the rendezvous; rank 0's all-reduce must fail
// with one line naming rank 1 and the operation, well within the timeout.
TEST(C10dRank, KilledPeer) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of C10d.KilledPeerEndsTheOthers";
  std::unique_ptr<Communicator> c = ConnectThisRank();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Barrier().ok());
  if (c->rank() == 1) raise(SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor t = torch::ones({1000});
  Status s = c->AllReduceSum(t);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), Status::Code::kIoError);
  EXPECT_EQ(s.message().find('\n'), std::string::npos) << s.message();
  EXPECT_EQ(s.message().rfind("allreduce on gloo group of 2 (rank 0): rank 1 ", 0), 0u) << s.message();
  EXPECT_LT(waited, 5.0) << s.message();
  std::cerr << "rank 0 saw: " << s.message() << "\n";
}

TEST(C10d, KilledPeerEndsTheOthers) {
  if (IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(RunRanks("C10dRank.KilledPeer", 2, {"KIMI_PLAN_TEST_TIMEOUT_S=4"}),
            (std::vector<int>{0, 128 + SIGKILL}));
}

// Rank 1 hangs (never joins the all-reduce); rank 0 fails after the timeout.
TEST(C10dRank, HungPeer) {
  if (!IsRankProcess()) GTEST_SKIP() << "a rank of C10d.HungPeerTimesOut";
  std::unique_ptr<Communicator> c = ConnectThisRank();
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Barrier().ok());
  if (c->rank() == 1) {
    std::this_thread::sleep_for(std::chrono::seconds(4));
    _exit(0);
  }
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor t = torch::ones({10});
  Status s = c->AllReduceSum(t);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().rfind("allreduce on gloo group of 2 (rank 0): rank 1 ", 0), 0u) << s.message();
  EXPECT_GE(waited, 2.5);
  EXPECT_LT(waited, 3.9);
  std::cerr << "rank 0 saw: " << s.message() << "\n";
  _exit(::testing::Test::HasFailure() ? 1 : 0);  // not waiting for the hung peer's sockets
}

TEST(C10d, HungPeerTimesOut) {
  if (IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(RunRanks("C10dRank.HungPeer", 2, {"KIMI_PLAN_TEST_TIMEOUT_S=3"}), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace kp::runtime
