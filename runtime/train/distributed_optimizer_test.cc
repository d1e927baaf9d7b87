// ParameterShards' fp32 masters (Megatron's mixed precision), against the
// parameters and dtypes themselves: one rank owning everything; and the
// reduce-scatter and gather over three in-process ranks, against the
// ownership ranges worked out by hand, in one bucket and in several.
#include "runtime/train/distributed_optimizer.h"

#include <gtest/gtest.h>

#include "runtime/comm/in_process_communicator.h"

namespace kp::runtime {
namespace {

TEST(ParameterShardsTest, Bf16ParametersTrainThroughFp32MastersAndFp32AreTheirOwn) {
  torch::Tensor weight = torch::linspace(-1.0, 1.0, 12).reshape({3, 4}).to(torch::kBFloat16);
  torch::Tensor norm = torch::linspace(0.5, 1.5, 4);
  ParameterShards shards({{{weight, norm}, nullptr}});
  ASSERT_EQ(shards.slices().size(), 2u);
  const ParameterShards::Slice& w = shards.slices()[0];
  const ParameterShards::Slice& n = shards.slices()[1];
  EXPECT_EQ(w.values.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(w.values, weight.view({-1}).to(torch::kFloat)));
  EXPECT_TRUE(w.matrix);
  EXPECT_TRUE(n.values.is_same(n.stored));  // fp32: the parameter's own elements
  EXPECT_EQ(shards.master_elements(), 12);
  EXPECT_EQ(shards.owned_elements(), 16);

  // fp32 main gradients bind to the masters.
  weight.mutable_grad() = torch::full({3, 4}, 0.25);
  shards.BindGradients();
  EXPECT_EQ(w.values.grad().scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(w.values.grad(), torch::full({12}, 0.25)));

  // An update smaller than bf16 resolves: the master keeps it, the weight
  // gets its rounding.
  {
    torch::NoGradGuard no_grad;
    w.values.add_(1e-4);
    n.values.add_(1e-4);
  }
  shards.StoreMasters();
  const torch::Tensor want = (torch::linspace(-1.0, 1.0, 12) + 1e-4).to(torch::kBFloat16);
  EXPECT_TRUE(torch::equal(weight.view({-1}), want));
  EXPECT_FALSE(torch::equal(w.values, want.to(torch::kFloat)));  // the master is not rounded
  EXPECT_TRUE(torch::allclose(norm, torch::linspace(0.5, 1.5, 4) + 1e-4));
  shards.ReleaseGradients();
  EXPECT_FALSE(w.values.grad().defined());
}

// Two parameters of 5 and 4 elements over 3 ranks: ceil(9 / 3) = 3 each, so
// rank 0 owns p[0..3), rank 1 p[3..5) and q[0..1), rank 2 q[1..4).
TEST(ParameterShardsTest, ReduceScatterGivesEachOwnerTheMeanOfItsPartAndGatherRestoresTheWhole) {
  const std::vector<Status> statuses = RunRanks(3, [](Communicator& comm) -> Status {
    const double r = comm.rank();
    torch::Tensor p = torch::zeros({5}, torch::kDouble), q = torch::zeros({2, 2}, torch::kDouble);
    // Rank r's gradients: (r + 1) x base; the mean over ranks is 2 x base.
    const torch::Tensor base_p = torch::arange(1, 6, torch::kDouble), base_q = torch::arange(6, 10, torch::kDouble);
    p.mutable_grad() = base_p * (r + 1);
    q.mutable_grad() = base_q.reshape({2, 2}) * (r + 1);
    ParameterShards shards({{{p, q}, &comm}});
    EXPECT_TRUE(shards.sharded());
    KP_RETURN_IF_ERROR(shards.ReduceScatterGradients(3));
    const std::int64_t owned_p[3][2] = {{0, 3}, {3, 2}, {0, 0}}, owned_q[3][2] = {{0, 0}, {0, 1}, {1, 3}};
    const int me = comm.rank();
    const std::vector<torch::Tensor> owned = shards.OwnedGradients(0);
    if (owned.size() != 2u) return Status::Internal("OwnedGradients: " + std::to_string(owned.size()) + " of 2");
    const torch::Tensor gp = owned[0], gq = owned[1];
    EXPECT_EQ(gp.defined(), owned_p[me][1] > 0);
    EXPECT_EQ(gq.defined(), owned_q[me][1] > 0);
    if (gp.defined()) {
      EXPECT_TRUE(torch::equal(gp, 2 * base_p.narrow(0, owned_p[me][0], owned_p[me][1]))) << me;
    }
    if (gq.defined()) {
      EXPECT_TRUE(torch::equal(gq, 2 * base_q.narrow(0, owned_q[me][0], owned_q[me][1]))) << me;
    }
    // Each rank writes its rank + 1 into what it owns; the gather spreads it.
    for (const ParameterShards::Slice& s : shards.slices()) s.values.fill_(r + 1);
    KP_RETURN_IF_ERROR(shards.Gather());
    EXPECT_TRUE(torch::equal(p, torch::tensor({1.0, 1.0, 1.0, 2.0, 2.0}, torch::kDouble))) << me;
    EXPECT_TRUE(torch::equal(q.view({-1}), torch::tensor({2.0, 3.0, 3.0, 3.0}, torch::kDouble))) << me;
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.message();
}

// Buckets of at most 10 fp64 gradients over 3 ranks: p (5) and q (4) share
// bucket 0 (9 elements, parts of 3); w (7) does not fit beside them and is
// bucket 1, padded to 9 (parts of 3: rank 0 owns w[0..3), rank 1 w[3..6),
// rank 2 w[6..7) and two padding elements). Rank r's gradients are (r + 1) x
// base, whose mean over ranks is 2 x base; after the gather every rank holds
// each owner's rank + 1 in the elements it owned.
TEST(ParameterShardsTest, BucketsArePaddedToEqualPartsAndEachPartIsItsOwnersAlone) {
  const std::vector<Status> statuses = RunRanks(3, [](Communicator& comm) -> Status {
    const double r = comm.rank();
    const int me = comm.rank();
    torch::Tensor p = torch::zeros({5}, torch::kDouble), q = torch::zeros({4}, torch::kDouble),
                  w = torch::zeros({7}, torch::kDouble);
    const torch::Tensor base = torch::arange(1, 17, torch::kDouble);  // p, q, w end to end
    ParameterShards shards({{{p, q, w}, &comm}}, /*bucket_bytes=*/10 * 8);
    EXPECT_EQ(shards.buckets(0), 2);
    shards.PrepareGradients();
    // The backward accumulates into the buffer's views in place.
    p.mutable_grad().add_(base.narrow(0, 0, 5) * (r + 1));
    q.mutable_grad().add_(base.narrow(0, 5, 4) * (r + 1));
    w.mutable_grad().add_(base.narrow(0, 9, 7) * (r + 1));
    KP_RETURN_IF_ERROR(shards.ReduceScatterGradients(3));
    // Owned {offset, length} per rank of p, q and w, worked out by hand.
    const std::int64_t owned[3][3][2] = {{{0, 3}, {0, 0}, {0, 3}}, {{3, 2}, {0, 1}, {3, 3}}, {{0, 0}, {1, 3}, {6, 1}}};
    const std::int64_t first[3] = {0, 5, 9};
    const std::vector<torch::Tensor> grads = shards.OwnedGradients(0);
    if (grads.size() != 3u) return Status::Internal("OwnedGradients: " + std::to_string(grads.size()) + " of 3");
    std::int64_t expected_owned = 0;
    for (int i = 0; i < 3; ++i) {
      const std::int64_t offset = owned[me][i][0], n = owned[me][i][1];
      expected_owned += n;
      EXPECT_EQ(grads[i].defined(), n > 0) << me << " " << i;
      if (n > 0) {
        EXPECT_TRUE(torch::equal(grads[i], 2 * base.narrow(0, first[i] + offset, n))) << me << " " << i;
      }
    }
    EXPECT_EQ(shards.owned_elements(), expected_owned);
    for (const ParameterShards::Slice& s : shards.slices()) s.values.fill_(r + 1);
    KP_RETURN_IF_ERROR(shards.Gather());
    EXPECT_TRUE(torch::equal(p, torch::tensor({1.0, 1.0, 1.0, 2.0, 2.0}, torch::kDouble))) << me;
    EXPECT_TRUE(torch::equal(q, torch::tensor({2.0, 3.0, 3.0, 3.0}, torch::kDouble))) << me;
    EXPECT_TRUE(torch::equal(w, torch::tensor({1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 3.0}, torch::kDouble))) << me;
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.message();
}

// A change of dtype closes a bucket (one staging dtype per gather); bf16
// and fp32 parameters share the fp32 gradient buffer.
TEST(ParameterShardsTest, ADtypeChangeStartsABucketAndBf16GathersAsBf16) {
  const std::vector<Status> statuses = RunRanks(2, [](Communicator& comm) -> Status {
    torch::Tensor a = torch::zeros({2, 2}, torch::kBFloat16), b = torch::zeros({3}), c = torch::zeros({1});
    ParameterShards shards({{{a, b, c}, &comm}});
    EXPECT_EQ(shards.buckets(0), 2);  // {a}, {b, c}
    shards.PrepareGradients();
    EXPECT_EQ(a.grad().scalar_type(), torch::kFloat);
    EXPECT_EQ(a.grad().data_ptr<float>() + 4, b.grad().data_ptr<float>());  // a's 4 elements, no padding (2 | 4)
    for (const ParameterShards::Slice& s : shards.slices()) s.values.fill_(comm.rank() + 0.5);
    shards.StoreMasters();
    KP_RETURN_IF_ERROR(shards.Gather());
    EXPECT_TRUE(torch::equal(a.view({-1}), torch::tensor({0.5, 0.5, 1.5, 1.5}).to(torch::kBFloat16)));
    EXPECT_TRUE(torch::equal(b, torch::tensor({0.5, 0.5, 1.5})));
    EXPECT_TRUE(torch::equal(c, torch::tensor({1.5})));
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.message();
}

}  // namespace
}  // namespace kp::runtime
