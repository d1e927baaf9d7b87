// The device sampler on a GPU against a host loop in fp64 written from its
// contract (rollout.h): softmax(z / T), the nucleus in descending order
// (ties by lower id) while the mass before a token is < top_p, renormalised,
// and the first id whose cumulative mass exceeds u; and the rollout's
// decode steps as CUDA graph replays. Skipped without a GPU.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "runtime/model/test_util.h"
#include "runtime/sdpo/rollout.h"

namespace kp::runtime {
namespace {

struct Drawn {
  std::int64_t id;
  double logprob;
  double margin;  // u's distance to the nearest cumulative boundary
};

Drawn ReferenceDraw(const std::vector<double>& z, double temperature, double top_p, double u) {
  const std::size_t v = z.size();
  const double top = *std::max_element(z.begin(), z.end());
  std::vector<double> p(v);
  double sum = 0;
  for (std::size_t i = 0; i < v; ++i) sum += p[i] = std::exp((z[i] - top) / temperature);
  for (double& x : p) x /= sum;
  std::vector<std::size_t> order(v);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return p[a] > p[b]; });
  std::vector<bool> keep(v, false);
  double before = 0;
  for (std::size_t i : order) {
    if (before >= top_p) break;
    keep[i] = true;
    before += p[i];
  }
  double kept = 0;
  for (std::size_t i = 0; i < v; ++i) kept += keep[i] ? p[i] : 0;
  double cumulative = 0, margin = 1;
  std::int64_t id = -1;
  for (std::size_t i = 0; i < v; ++i) {
    if (!keep[i]) continue;
    cumulative += p[i] / kept;
    margin = std::min(margin, std::fabs(cumulative - u));
    if (id < 0 && cumulative > u) id = static_cast<std::int64_t>(i);
  }
  return {id, std::log(p[static_cast<std::size_t>(id)]), margin};
}

TEST(DeviceSamplerTest, TheDrawOnTheGpuIsTheInverseCdfOfTheNucleusInFp64) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::manual_seed(21);
  const std::int64_t rows = 64, v = 1000;
  const torch::Tensor logits = torch::randn({rows, v}) * 3;
  const torch::Tensor u = torch::rand({rows}, torch::kDouble);
  for (const double top_p : {1.0, 0.9, 0.5}) {
    SamplingOptions o;
    o.temperature = 0.8;
    o.top_p = top_p;
    const SampledTokens s = SampleTokenAt(logits.cuda(), o, u.cuda());
    ASSERT_TRUE(s.ids.is_cuda());
    const torch::Tensor ids = s.ids.cpu(), logprobs = s.logprobs.cpu().to(torch::kDouble);
    int close = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      const torch::Tensor row = logits[r].to(torch::kDouble).contiguous();
      const std::vector<double> z(row.data_ptr<double>(), row.data_ptr<double>() + v);
      const Drawn want = ReferenceDraw(z, o.temperature, top_p, u[r].item<double>());
      // fp32 probabilities move a boundary by ~1e-7: a u that close may
      // fall either side of it.
      if (want.margin < 1e-5) {
        ++close;
        continue;
      }
      EXPECT_EQ(ids[r].item<std::int64_t>(), want.id) << "top-p " << top_p << " row " << r;
      EXPECT_NEAR(logprobs[r].item<double>(), want.logprob, 1e-5) << "top-p " << top_p << " row " << r;
    }
    EXPECT_LE(close, 2) << "top-p " << top_p;
  }
}

TEST(DeviceSamplerTest, GreedyOnTheGpuIsTheArgmaxLowestIdFirst) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  torch::Tensor logits = torch::randn({8, 300});
  logits[3][7] = 50, logits[3][9] = 50;  // a tie: the lower id
  SamplingOptions o;
  o.temperature = 0;
  const SampledTokens s = SampleTokenAt(logits.cuda(), o, torch::Tensor());
  EXPECT_TRUE(torch::equal(s.ids.cpu(), logits.argmax(-1)));
  EXPECT_EQ(s.ids[3].item<std::int64_t>(), 7);
}

// The decode steps as CUDA graph replays sample exactly what the same
// steps run eagerly over the fixed cache sample: bf16 (the grouped experts,
// so no step waits for the host), temperature and top-p, two prompt lengths
// (a graph each) and stop ids that drop rows (the cache is selected and the
// graph captured again).
TEST(DecodeGraphTest, ReplaysSampleAsTheEagerStepsOnTheGpu) {
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a GPU";
  if (!DecodeGraph::Available(torch::Device(torch::kCUDA))) GTEST_SKIP() << "this build has no CUDA graphs";
  ModelOptions opts;
  opts.dtype = opts.weight_dtype = DType::kBf16;
  opts.kda_chunk = 4;
  Result<std::shared_ptr<StageModelImpl>> model = BuildModel(TinyKimiSpec(), opts);
  ASSERT_TRUE(model.ok()) << model.status().message();
  (*model)->to(torch::kCUDA);
  RolloutEngine engine(*model);
  EXPECT_EQ(engine.decode_steps(), DecodeSteps::kGraphs);
  std::vector<std::vector<std::int64_t>> prompts = {{1, 7, 12, 30}, {2, 8, 19, 40, 3, 11}, {4, 9, 22, 33}};
  SamplingOptions o;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.samples = 3;
  o.max_new_tokens = 2 * RolloutEngine::kStopCheckEvery + 1;
  o.stop_ids = {5, 9};
  ASSERT_TRUE(engine.set_decode_steps(DecodeSteps::kFixed).ok());
  auto eager = engine.Generate(prompts, o, 23);
  ASSERT_TRUE(eager.ok()) << eager.status().message();
  ASSERT_TRUE(engine.set_decode_steps(DecodeSteps::kGraphs).ok());
  auto graphs = engine.Generate(prompts, o, 23);
  ASSERT_TRUE(graphs.ok()) << graphs.status().message();
  const GenerationStats& stats = engine.last_stats();
  EXPECT_EQ(stats.graph_error, "");
  EXPECT_GE(stats.graph_captures, 2) << "one a prompt length at least";
  EXPECT_GT(stats.graph_replays, 0);
  for (std::size_t i = 0; i < eager->size(); ++i) {
    EXPECT_EQ((*graphs)[i].response, (*eager)[i].response) << "sample " << i;
    EXPECT_EQ((*graphs)[i].logprobs, (*eager)[i].logprobs) << "sample " << i;
  }
}

}  // namespace
}  // namespace kp::runtime
