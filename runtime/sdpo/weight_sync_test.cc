// The weight sync over in-process ranks (threads) and real Gloo ranks
// (processes). Expected values are recomputed independently: the tensors'
// contents from a closed form, the bytes as the sum of numel * element size,
// the bucket count as ceil(elements / capacity) per run of one dtype.
#include "runtime/sdpo/weight_sync.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "runtime/comm/dist_test_util.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/model/test_util.h"
#include "weights/int4.h"

namespace kp::runtime {
namespace {

struct Spec {
  const char* name;
  std::vector<std::int64_t> shape;
  torch::ScalarType dtype;
};

// fp32 and bf16 in four runs: fp32 | bf16 bf16 | fp32 fp32 | bf16. The
// smallest tensor is b (3 bf16 = 6 bytes).
std::vector<Spec> MixedSpecs() {
  return {{"a", {7, 5}, torch::kFloat},     {"b", {3}, torch::kBFloat16},   {"c", {3, 4, 2}, torch::kBFloat16},
          {"d", {100}, torch::kFloat},      {"e", {2, 3}, torch::kFloat},   {"f", {9}, torch::kBFloat16}};
}

// Tensor i's values for a version: a closed form, so every rank knows them.
torch::Tensor Values(const Spec& s, int i, std::int64_t version) {
  std::int64_t numel = 1;
  for (std::int64_t d : s.shape) numel *= d;
  return (torch::sin(torch::arange(numel, torch::kDouble) * 0.7 + i + 0.1 * double(version)) * 10)
      .to(s.dtype)
      .reshape(s.shape);
}

// The root's tensors hold Values(version); a receiver's are zero.
std::vector<NamedTensor> MakeTensors(const std::vector<Spec>& specs, bool root, std::int64_t version) {
  std::vector<NamedTensor> out;
  for (std::size_t i = 0; i < specs.size(); ++i)
    out.push_back({specs[i].name, root ? Values(specs[i], int(i), version)
                                       : torch::zeros(specs[i].shape, torch::TensorOptions().dtype(specs[i].dtype))});
  return out;
}

std::int64_t ExpectedBytes(const std::vector<NamedTensor>& ts) {
  std::int64_t bytes = 0;
  for (const NamedTensor& t : ts) bytes += t.tensor.numel() * std::int64_t(t.tensor.element_size());
  return bytes;
}

// Per maximal run of consecutive same-dtype tensors, ceil(elements / capacity).
int ExpectedBuckets(const std::vector<NamedTensor>& ts, std::int64_t bucket_bytes) {
  int buckets = 0;
  for (std::size_t i = 0; i < ts.size();) {
    std::int64_t elements = 0;
    std::size_t j = i;
    for (; j < ts.size() && ts[j].tensor.scalar_type() == ts[i].tensor.scalar_type(); ++j)
      elements += ts[j].tensor.numel();
    const std::int64_t capacity = bucket_bytes / std::int64_t(ts[i].tensor.element_size());
    buckets += int((elements + capacity - 1) / capacity);
    i = j;
  }
  return buckets;
}

bool HoldsValues(const std::vector<NamedTensor>& ts, const std::vector<Spec>& specs, std::int64_t version) {
  for (std::size_t i = 0; i < specs.size(); ++i)
    if (!torch::equal(ts[i].tensor, Values(specs[i], int(i), version))) return false;
  return true;
}

bool AllZero(const std::vector<NamedTensor>& ts) {
  for (const NamedTensor& t : ts)
    if (!torch::equal(t.tensor, torch::zeros_like(t.tensor))) return false;
  return true;
}

// One sync: rank 0 sends `version`, the others receive with `min_version`
// (per rank); returns the stats, or the error, of this rank.
Result<SyncStats> Sync(Communicator& c, const std::vector<NamedTensor>& ts, std::int64_t version,
                       std::int64_t min_version, std::int64_t bucket_bytes) {
  WeightSyncOptions o;
  o.bucket_bytes = bucket_bytes;
  return c.rank() == 0 ? SendWeights(c, ts, version, o) : ReceiveWeights(c, ts, min_version, o);
}

// Bucket sizes below the smallest tensor (5 bytes: one fp32, two bf16 per
// bucket), in between, and above everything: bitwise copies, the bytes and
// the bucket count.
Status BucketSizesScenario(Communicator& c) {
  const std::vector<Spec> specs = MixedSpecs();
  std::int64_t version = 10;
  for (std::int64_t bucket : {5, 64, 1 << 20}) {
    std::vector<NamedTensor> ts = MakeTensors(specs, c.rank() == 0, ++version);
    KP_ASSIGN_OR_RETURN(SyncStats s, Sync(c, ts, version, 0, bucket));
    EXPECT_EQ(s.version, version);
    EXPECT_EQ(s.bytes, ExpectedBytes(ts)) << "bucket " << bucket;
    EXPECT_EQ(s.buckets, ExpectedBuckets(ts, bucket)) << "bucket " << bucket;
    EXPECT_GE(s.seconds, 0);
    EXPECT_TRUE(HoldsValues(ts, specs, version)) << "rank " << c.rank() << " bucket " << bucket;
  }
  // Hand-counted for the two ends: 5 bytes holds 1 fp32 or 2 bf16, so
  // a 35 | b+c 27 -> 14 | d+e 106 | f 9 -> 5; 1 MiB holds each run whole.
  std::vector<NamedTensor> ts = MakeTensors(specs, c.rank() == 0, 1);
  EXPECT_EQ(ExpectedBuckets(ts, 5), 35 + 14 + 106 + 5);
  EXPECT_EQ(ExpectedBuckets(ts, 1 << 20), 4);
  return Status::Ok();
}

// Rank 1 requires version 100 and refuses version 7 (nothing written) while
// rank 2 takes it; then version 101 reaches both over the same group.
Status StaleScenario(Communicator& c) {
  const std::vector<Spec> specs = MixedSpecs();
  std::vector<NamedTensor> ts = MakeTensors(specs, c.rank() == 0, 7);
  const std::int64_t min_version = c.rank() == 1 ? 100 : 0;
  Result<SyncStats> s = Sync(c, ts, 7, min_version, 16);
  if (c.rank() == 1) {
    EXPECT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), Status::Code::kInvalidArgument);
    EXPECT_EQ(s.status().message(), "stale weights: version 7 < required 100");
    EXPECT_TRUE(AllZero(ts));
  } else {
    KP_RETURN_IF_ERROR(s.status());
    EXPECT_TRUE(HoldsValues(ts, specs, 7));
  }
  std::vector<NamedTensor> next = MakeTensors(specs, c.rank() == 0, 101);
  KP_ASSIGN_OR_RETURN(SyncStats s2, Sync(c, next, 101, min_version, 16));
  EXPECT_EQ(s2.version, 101);
  EXPECT_TRUE(HoldsValues(next, specs, 101)) << "rank " << c.rank();
  return Status::Ok();
}

// Rank 1's tensor c has another shape: refused naming it, nothing written,
// rank 2 unaffected, and the group still syncs afterwards.
Status LayoutScenario(Communicator& c) {
  const std::vector<Spec> specs = MixedSpecs();
  std::vector<Spec> other = specs;
  other[2].shape = {3, 4, 3};
  std::vector<NamedTensor> ts = MakeTensors(c.rank() == 1 ? other : specs, c.rank() == 0, 4);
  Result<SyncStats> s = Sync(c, ts, 4, 0, 32);
  if (c.rank() == 1) {
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("at tensor 2: this rank has c [3, 4, 3] BFloat16"), std::string::npos)
        << s.status().message();
    EXPECT_TRUE(AllZero(ts));
  } else {
    KP_RETURN_IF_ERROR(s.status());
    EXPECT_TRUE(HoldsValues(ts, specs, 4));
  }
  std::vector<NamedTensor> next = MakeTensors(specs, c.rank() == 0, 5);
  KP_RETURN_IF_ERROR(Sync(c, next, 5, 0, 32).status());
  EXPECT_TRUE(HoldsValues(next, specs, 5)) << "rank " << c.rank();
  return Status::Ok();
}

Status AllScenarios(Communicator& c) {
  KP_RETURN_IF_ERROR(BucketSizesScenario(c));
  KP_RETURN_IF_ERROR(StaleScenario(c));
  return LayoutScenario(c);
}

TEST(WeightSync, ParsesTheMode) {
  EXPECT_EQ(*ParseSyncMode("full"), SyncMode::kFull);
  EXPECT_EQ(*ParseSyncMode("lora"), SyncMode::kLora);
  Result<SyncMode> bad = ParseSyncMode("delta");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message().rfind("--sync:", 0), 0u);
  EXPECT_STREQ(SyncModeName(SyncMode::kLora), "lora");
}

TEST(WeightSync, InProcessBucketSizesStaleAndLayout) {
  const Status s = FirstError(RunRanks(3, AllScenarios));
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(WeightSync, RejectsBadOptions) {
  std::vector<Status> st = RunRanks(1, [](Communicator& c) -> Status {
    std::vector<NamedTensor> ts = MakeTensors(MixedSpecs(), true, 1);
    WeightSyncOptions o;
    o.bucket_bytes = 0;
    EXPECT_EQ(SendWeights(c, ts, 1, o).status().code(), Status::Code::kInvalidArgument);
    o.bucket_bytes = 3;  // below one fp32 element
    EXPECT_NE(SendWeights(c, ts, 1, o).status().message().find("cannot hold one Float"), std::string::npos);
    o.root = 1;
    EXPECT_EQ(SendWeights(c, ts, 1, o).status().code(), Status::Code::kInvalidArgument);
    return Status::Ok();
  });
  EXPECT_TRUE(st[0].ok()) << st[0].message();
}

std::shared_ptr<StageModelImpl> TinyLora(std::uint64_t seed) {
  ModelOptions o;
  o.seed = seed;
  Result<std::shared_ptr<StageModelImpl>> m = BuildModel(TinyKimiSpec(), o);
  EXPECT_TRUE(m.ok()) << m.status().message();
  if (!m.ok()) return nullptr;
  (*m)->EnableLora(LoraOptions{2, 4.0, LoraExperts::kSharedOuter}, 3);
  return *m;
}

std::vector<std::string> RouterBiasNames(StageModelImpl& m) {
  std::vector<std::string> names;
  for (const auto& b : m.named_buffers())
    if (b.key().size() >= 12 && b.key().compare(b.key().size() - 12, 12, ".router.bias") == 0) names.push_back(b.key());
  return names;
}

// What each mode selects, by name, against the model's own lists.
TEST(WeightSync, SyncedTensorsOfAModel) {
  std::shared_ptr<StageModelImpl> m = TinyLora(1);
  ASSERT_NE(m, nullptr);
  const std::vector<std::string> biases = RouterBiasNames(*m);
  EXPECT_EQ(biases.size(), 4u);  // layers 1-4 are MoE
  std::set<std::string> full, lora;
  for (const NamedTensor& t : SyncedTensors(*m, SyncMode::kFull)) full.insert(t.name);
  for (const NamedTensor& t : SyncedTensors(*m, SyncMode::kLora)) lora.insert(t.name);
  std::set<std::string> want_full(biases.begin(), biases.end()), want_lora(biases.begin(), biases.end());
  for (const auto& p : m->named_parameters()) want_full.insert(p.key());
  for (const auto& [name, t] : m->LoraParameters()) want_lora.insert(name);
  EXPECT_EQ(full, want_full);
  EXPECT_EQ(lora, want_lora);
  EXPECT_EQ(SyncedTensors(*m, SyncMode::kFull).size(), want_full.size());
}

// A full sync into a rollout serving its routed experts as released INT4
// (--rollout-experts int4): the actor's float banks are quantised on the
// sender; the rollout holds the bits weights/int4.h's QuantizeInt4 gives the
// actor's values, and the bytes are the closed form: each expert weight of
// n values at n / 2 (packed) + n / 32 x 2 (bf16 scales), everything else at
// its element size.
TEST(WeightSync, AFullSyncIntoAnInt4RolloutMovesTheReleasedBits) {
  std::vector<Status> st = RunRanks(2, [](Communicator& c) -> Status {
    ModelOptions o;
    o.seed = c.rank() == 0 ? 1 : 2;
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> m, BuildModel(ScaledKimiK26Spec(224), o));
    if (c.rank() == 1) KP_RETURN_IF_ERROR(m->QuantizeExpertBase());
    std::int64_t want = 0;
    for (const NamedTensor& t : SyncedTensors(*m, SyncMode::kFull)) {
      const bool expert = t.name.find(".moe.experts.") != std::string::npos;
      want += expert ? t.tensor.numel() / 2 + t.tensor.numel() / 32 * 2 : t.tensor.numel() * t.tensor.element_size();
    }
    WeightSyncOptions opt;
    opt.bucket_bytes = 4096;
    const std::vector<NamedTensor> ts = SyncedTensors(*m, SyncMode::kFull, /*int4_experts=*/true);
    KP_ASSIGN_OR_RETURN(SyncStats s, c.rank() == 0 ? SendWeights(c, ts, 1, opt) : ReceiveWeights(c, ts, 1, opt));
    if (c.rank() == 0) {  // the receiver's own float weights are empty: the sender counts
      EXPECT_EQ(s.bytes, want);
      return Status::Ok();
    }
    ModelOptions sender;
    sender.seed = 1;
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> actor, BuildModel(ScaledKimiK26Spec(224), sender));
    const auto actor_params = actor->named_parameters();
    const auto got = m->named_buffers();
    int checked = 0;
    for (const char* w : {"gate", "up", "down"}) {
      const std::string bank = std::string("layers.2.moe.experts.") + w;
      const torch::Tensor values = actor_params[bank].detach();
      for (std::int64_t e = 0; e < values.size(0); ++e) {
        const torch::Tensor one = values[e].contiguous();
        KP_ASSIGN_OR_RETURN(const PackedInt4 ref,
                            QuantizeInt4(std::vector<float>(one.data_ptr<float>(), one.data_ptr<float>() + one.numel()),
                                         static_cast<int>(one.size(0)), static_cast<int>(one.size(1)), bank));
        const torch::Tensor packed = got[bank + "_packed"][e].contiguous(), scale = got[bank + "_scale"][e].contiguous();
        EXPECT_EQ(std::vector<std::int32_t>(packed.data_ptr<std::int32_t>(), packed.data_ptr<std::int32_t>() + packed.numel()),
                  ref.packed) << bank << " " << e;
        const auto* bits = reinterpret_cast<const std::uint16_t*>(scale.data_ptr());
        EXPECT_EQ(std::vector<std::uint16_t>(bits, bits + scale.numel()), ref.scales) << bank << " " << e;
        ++checked;
      }
    }
    EXPECT_EQ(checked, 3 * 4);
    EXPECT_TRUE(torch::equal(m->named_parameters()["layers.1.attention.q_a.weight"],
                             actor_params["layers.1.attention.q_a.weight"]));
    return Status::Ok();
  });
  for (const Status& s : st) EXPECT_TRUE(s.ok()) << s.message();
}

// LoRA mode between two models: the adapters and router biases the trainer
// changed arrive; a changed base weight does not; bytes are the adapters'
// and biases' numel * element size.
TEST(WeightSync, LoraModeMovesOnlyAdaptersAndRouterBiases) {
  std::vector<Status> st = RunRanks(2, [](Communicator& c) -> Status {
    std::shared_ptr<StageModelImpl> m = TinyLora(1);
    if (m == nullptr) return Status::Internal("no model");
    const torch::Tensor base = m->named_parameters()["embedding.weight"];
    const torch::Tensor base_before = base.detach().clone();
    std::int64_t want_bytes = 0;
    {
      torch::NoGradGuard no_grad;
      int i = 0;
      for (auto& [name, t] : m->LoraParameters()) {
        if (c.rank() == 0) t.copy_(torch::full_like(t, 0.25 * ++i));
        want_bytes += t.numel() * std::int64_t(t.element_size());
      }
      for (const std::string& name : RouterBiasNames(*m)) {
        torch::Tensor b = m->named_buffers()[name];
        if (c.rank() == 0) b.copy_(torch::arange(b.numel(), torch::kFloat) * 0.5 - 1);
        want_bytes += b.numel() * std::int64_t(b.element_size());
      }
      if (c.rank() == 0) base.add_(1.0);
    }
    WeightSyncOptions o;
    o.mode = SyncMode::kLora;
    o.bucket_bytes = 256;
    const std::vector<NamedTensor> ts = SyncedTensors(*m, SyncMode::kLora);
    KP_ASSIGN_OR_RETURN(SyncStats s, c.rank() == 0 ? SendWeights(c, ts, 2, o) : ReceiveWeights(c, ts, 2, o));
    EXPECT_EQ(s.bytes, want_bytes);
    if (c.rank() == 1) {
      int i = 0;
      for (auto& [name, t] : m->LoraParameters()) EXPECT_TRUE(torch::equal(t, torch::full_like(t, 0.25 * ++i))) << name;
      for (const std::string& name : RouterBiasNames(*m)) {
        torch::Tensor b = m->named_buffers()[name];
        EXPECT_TRUE(torch::equal(b, torch::arange(b.numel(), torch::kFloat) * 0.5 - 1)) << name;
      }
      EXPECT_TRUE(torch::equal(base, base_before));
    }
    return Status::Ok();
  });
  EXPECT_TRUE(FirstError(st).ok()) << FirstError(st).message();
}

// The same scenarios over real Gloo processes (StartBroadcast truly async).
TEST(WeightSyncRank, Gloo) {
  if (!testing::IsRankProcess()) GTEST_SKIP() << "a rank of WeightSync.GlooRanks";
  std::unique_ptr<Communicator> c = testing::ConnectThisRank();
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->backend(), "gloo");
  Status s = AllScenarios(*c);
  EXPECT_TRUE(s.ok()) << s.message();
}

TEST(WeightSync, GlooRanks) {
  if (testing::IsRankProcess()) GTEST_SKIP();
  EXPECT_EQ(testing::RunRanks("WeightSyncRank.Gloo", 3), (std::vector<int>{0, 0, 0}));
}

}  // namespace
}  // namespace kp::runtime
