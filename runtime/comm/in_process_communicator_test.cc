// The in-process communicator: point-to-point matching, rank-ordered
// reductions, subgroups, and failures that end in a Status, not a hang.
#include "runtime/comm/in_process_communicator.h"

#include <gtest/gtest.h>

namespace kp::runtime {
namespace {

TEST(InProcessCommunicatorTest, SendRecvMatchesBySourceAndTag) {
  const auto statuses = RunRanks(3, [](Communicator& c) -> Status {
    if (c.rank() == 0) {
      KP_RETURN_IF_ERROR(c.Send(torch::full({2}, 7.0), 2, 5));
      return c.Send(torch::full({2}, 1.0), 2, 4);
    }
    if (c.rank() == 1) return c.Send(torch::full({2}, 3.0), 2, 5);
    torch::Tensor a = torch::empty({2}), b = torch::empty({2}), d = torch::empty({2});
    KP_RETURN_IF_ERROR(c.Recv(a, 0, 4));  // posted second, received first: tags differ
    KP_RETURN_IF_ERROR(c.Recv(b, 1, 5));
    KP_RETURN_IF_ERROR(c.Recv(d, 0, 5));
    if (a[0].item<double>() != 1 || b[0].item<double>() != 3 || d[0].item<double>() != 7)
      return Status::Internal("mismatched message");
    return Status::Ok();
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

TEST(InProcessCommunicatorTest, CollectivesAreRankOrderedAndExact) {
  const auto statuses = RunRanks(4, [](Communicator& c) -> Status {
    // 1e16 + 1 + (-1e16) + 1: rank order gives 2 only if summed in order 0..3 as (((a+b)+c)+d).
    const double parts[4] = {1e16, 1.0, -1e16, 1.0};
    torch::Tensor t = torch::full({1}, parts[c.rank()], torch::kDouble);
    KP_RETURN_IF_ERROR(c.AllReduceSum(t));
    const double want = ((1e16 + 1.0) + -1e16) + 1.0;
    if (t.item<double>() != want) return Status::Internal("sum " + std::to_string(t.item<double>()));
    torch::Tensor b = torch::full({1}, double(c.rank()));
    KP_RETURN_IF_ERROR(c.Broadcast(b, 2));
    if (b.item<double>() != 2) return Status::Internal("broadcast");
    std::vector<std::int64_t> sizes(4);
    for (int r = 0; r < 4; ++r) sizes[r] = 10 * c.rank() + r;
    KP_ASSIGN_OR_RETURN(auto got, AllToAllSizes(c, sizes));
    for (int r = 0; r < 4; ++r)
      if (got[r] != 10 * r + c.rank()) return Status::Internal("all-to-all sizes");
    KP_ASSIGN_OR_RETURN(auto sub, c.Subgroup(c.rank() % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3}));
    torch::Tensor s = torch::full({1}, double(c.rank()));
    KP_RETURN_IF_ERROR(sub->AllReduceSum(s));
    if (s.item<double>() != (c.rank() % 2 == 0 ? 2 : 4)) return Status::Internal("subgroup sum");
    return c.Barrier();
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << FirstError(statuses).message();
}

TEST(InProcessCommunicatorTest, MissingPeerTimesOutNamingPeerAndOp) {
  const auto statuses = RunRanks(
      2,
      [](Communicator& c) -> Status {
        if (c.rank() == 1) return Status::Ok();  // never sends
        torch::Tensor t = torch::empty({1});
        return c.Recv(t, 1, 0);
      },
      std::chrono::milliseconds(200));
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_NE(statuses[0].message().find("Recv"), std::string::npos) << statuses[0].message();
  EXPECT_NE(statuses[0].message().find("rank 1"), std::string::npos) << statuses[0].message();
  EXPECT_NE(statuses[0].message().find("timeout"), std::string::npos) << statuses[0].message();
}

TEST(InProcessCommunicatorTest, FailedPeerEndsWaitersAtOnce) {
  const auto statuses = RunRanks(2, [](Communicator& c) -> Status {
    if (c.rank() == 1) return Status::Internal("boom");
    torch::Tensor t = torch::empty({1});
    return c.AllReduceSum(t);
  });
  ASSERT_FALSE(statuses[0].ok());
  EXPECT_NE(statuses[0].message().find("peer rank 1 failed"), std::string::npos) << statuses[0].message();
  EXPECT_EQ(FirstError(statuses).message(), "rank 1: boom");  // the root cause, not its echo
}

TEST(InProcessCommunicatorTest, ShapeMismatchIsAnError) {
  const auto statuses = RunRanks(2, [](Communicator& c) -> Status {
    if (c.rank() == 0) return c.Send(torch::zeros({3}), 1, 0);
    torch::Tensor t = torch::empty({2});
    return c.Recv(t, 0, 0);
  });
  ASSERT_FALSE(statuses[1].ok());
  EXPECT_NE(statuses[1].message().find("expected"), std::string::npos) << statuses[1].message();
}

}  // namespace
}  // namespace kp::runtime
