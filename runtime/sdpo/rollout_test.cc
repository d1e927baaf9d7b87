// The rollout engine against references written here: greedy decoding
// against a loop that re-runs the full forward for every token, log-probs
// against log_softmax of full-forward logits, the nucleus and the vocabulary
// mask on hand-worked distributions, and temperature sampling against the
// softmax by a chi-square statistic.
#include "runtime/sdpo/rollout.h"

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "runtime/model/test_util.h"

namespace kp::runtime {
namespace {

std::shared_ptr<StageModelImpl> TinyModel(bool fp64) {
  ModelOptions opts;
  opts.kda_chunk = 4;
  auto model = BuildModel(TinyKimiSpec(), opts);
  EXPECT_TRUE(model.ok()) << model.status().message();
  if (fp64) (*model)->to(torch::kDouble);
  return *model;
}

std::vector<std::vector<std::int64_t>> Prompts(const std::vector<int>& lengths, std::int64_t vocab) {
  std::vector<std::vector<std::int64_t>> out;
  for (std::size_t i = 0; i < lengths.size(); ++i) {
    std::vector<std::int64_t> p;
    for (int t = 0; t < lengths[i]; ++t) p.push_back(static_cast<std::int64_t>((7 * i + 5 * t + 3) % vocab));
    out.push_back(p);
  }
  return out;
}

// Logits of every position of `ids`, by the full forward (no cache).
torch::Tensor FullLogits(StageModelImpl& model, const std::vector<std::int64_t>& ids) {
  torch::NoGradGuard no_grad;
  return model.forward(torch::tensor(ids, torch::kLong).unsqueeze(0)).squeeze(0);
}

// Greedy decoding that re-runs the whole sequence for every token.
std::vector<std::int64_t> NaiveGreedy(StageModelImpl& model, std::vector<std::int64_t> ids, int max_new,
                                      const std::vector<std::int64_t>& stop_ids) {
  std::vector<std::int64_t> response;
  for (int i = 0; i < max_new; ++i) {
    const std::int64_t next = FullLogits(model, ids)[-1].argmax().item<std::int64_t>();
    response.push_back(next);
    ids.push_back(next);
    if (std::find(stop_ids.begin(), stop_ids.end(), next) != stop_ids.end()) break;
  }
  return response;
}

SamplingOptions Greedy(int max_new) {
  SamplingOptions o;
  o.temperature = 0;
  o.max_new_tokens = max_new;
  o.stop_ids = {};
  return o;
}

// ------------------------------------------------------------------ options

TEST(SamplingOptionsTest, MessagesNameTheFlag) {
  EXPECT_TRUE(ValidateSamplingOptions({}).ok());
  SamplingOptions o;
  o.temperature = -1;
  EXPECT_NE(ValidateSamplingOptions(o).message().find("--temperature"), std::string::npos);
  o = {};
  o.top_p = 0;
  EXPECT_NE(ValidateSamplingOptions(o).message().find("--top-p"), std::string::npos);
  o.top_p = 1.5;
  EXPECT_NE(ValidateSamplingOptions(o).message().find("--top-p"), std::string::npos);
  o = {};
  o.max_new_tokens = 0;
  EXPECT_NE(ValidateSamplingOptions(o).message().find("--max-new-tokens"), std::string::npos);
  o = {};
  o.samples = 0;
  EXPECT_NE(ValidateSamplingOptions(o).message().find("--samples"), std::string::npos);
}

// ------------------------------------------------------------------ SampleToken on fixed logits

// Draws `n` tokens from one row of logits; returns the count of each id.
std::vector<std::int64_t> Counts(const std::vector<double>& logits, const SamplingOptions& o, std::int64_t n,
                                 std::uint64_t seed, torch::Tensor* logprobs = nullptr) {
  const std::int64_t v = static_cast<std::int64_t>(logits.size());
  const torch::Tensor rows = torch::tensor(logits, torch::kDouble).unsqueeze(0).expand({n, v});
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const SampledTokens s = SampleToken(rows, o, gen);
  if (logprobs) *logprobs = torch::zeros({v}, torch::kDouble).index_copy(0, s.ids, s.logprobs);
  std::vector<std::int64_t> counts(v, 0);
  const auto ids = s.ids.accessor<std::int64_t, 1>();
  for (std::int64_t i = 0; i < n; ++i) ++counts[ids[i]];
  return counts;
}

TEST(SampleTokenTest, TopPKeepsExactlyTheNucleus) {
  // Probabilities 0.05, 0.5, 0.15, 0.3 (ids 0..3): sorted 0.5, 0.3, 0.15, 0.05
  // with cumulative mass 0.5, 0.8, 0.95, 1.
  const std::vector<double> p = {0.05, 0.5, 0.15, 0.3};
  std::vector<double> logits;
  for (double x : p) logits.push_back(std::log(x));
  SamplingOptions o;
  struct Case {
    double top_p;
    std::set<std::int64_t> nucleus;
  };
  for (const Case& c : {Case{0.4, {1}}, Case{0.75, {1, 3}}, Case{0.9, {1, 2, 3}}, Case{1.0, {0, 1, 2, 3}}}) {
    o.top_p = c.top_p;
    torch::Tensor logprobs;
    const auto counts = Counts(logits, o, 4000, 41, &logprobs);
    double nucleus_mass = 0;
    for (std::int64_t id : c.nucleus) nucleus_mass += p[id];
    for (std::int64_t id = 0; id < 4; ++id) {
      EXPECT_EQ(counts[id] > 0, c.nucleus.count(id) == 1) << "top_p " << c.top_p << " id " << id;
      if (counts[id] == 0) continue;
      // Renormalised inside the nucleus (4000 draws: within 5 standard deviations).
      const double q = p[id] / nucleus_mass, sd = std::sqrt(q * (1 - q) / 4000);
      EXPECT_NEAR(counts[id] / 4000.0, q, 5 * sd + 1e-12) << "top_p " << c.top_p << " id " << id;
      // The log-prob is the one before renormalisation.
      EXPECT_NEAR(logprobs[id].item<double>(), std::log(p[id]), 1e-12);
    }
  }
}

TEST(SampleTokenTest, VocabLimitMasksSampledAndGreedyIds) {
  const std::vector<double> logits = {0.1, 0.3, -0.2, 5.0, 4.0};  // the two likeliest are ids 3, 4
  SamplingOptions o;
  o.vocab_limit = 3;
  const auto counts = Counts(logits, o, 3000, 42);
  EXPECT_EQ(counts[3] + counts[4], 0);
  EXPECT_EQ(counts[0] + counts[1] + counts[2], 3000);
  o.temperature = 0;
  torch::Tensor logprobs;
  const auto greedy = Counts(logits, o, 2, 42, &logprobs);
  EXPECT_EQ(greedy[1], 2);  // the best id below the limit
  const double z = std::exp(0.1) + std::exp(0.3) + std::exp(-0.2);
  EXPECT_NEAR(logprobs[1].item<double>(), 0.3 - std::log(z), 1e-12);  // over the allowed ids
}

// The draw is the inverse CDF at the generator's uniforms: the same ids as
// a host loop over each row's softmax in fp64, with the uniforms a second
// generator of the same seed gives.
TEST(SampleTokenTest, TheDrawIsTheInverseCdfAtTheGeneratorsUniforms) {
  const torch::Tensor logits = torch::tensor({1.0, 0.0, -0.5, 0.7, -2.0, 0.2, 3.0, -1.0}, torch::kDouble).reshape({2, 4});
  const torch::Tensor rows = logits.repeat({50, 1});  // 100 rows
  SamplingOptions o;
  o.temperature = 0.8;
  at::Generator gen = at::detail::createCPUGenerator(9);
  const SampledTokens s = SampleToken(rows, o, gen);
  at::Generator again = at::detail::createCPUGenerator(9);
  const torch::Tensor u = torch::rand({rows.size(0), 1}, again, torch::TensorOptions().dtype(torch::kDouble));
  for (std::int64_t r = 0; r < rows.size(0); ++r) {
    std::vector<double> p(4);
    double total = 0;
    for (int i = 0; i < 4; ++i) total += p[i] = std::exp(rows[r][i].item<double>() / 0.8);
    double cumulative = 0;
    std::int64_t want = 3;
    for (int i = 0; i < 4; ++i) {
      cumulative += p[i] / total;
      if (cumulative > u[r][0].item<double>()) {
        want = i;
        break;
      }
    }
    EXPECT_EQ(s.ids[r].item<std::int64_t>(), want) << "row " << r;
  }
}

TEST(SampleTokenTest, TemperatureSamplingFollowsTheSoftmax) {
  const std::vector<double> logits = {1.0, 0.0, -0.5, 0.7, -2.0, 0.2};
  const double temperature = 0.7;
  SamplingOptions o;
  o.temperature = temperature;
  const std::int64_t n = 60000;
  const auto counts = Counts(logits, o, n, 43);
  double z = 0;
  for (double l : logits) z += std::exp(l / temperature);
  double chi2 = 0;
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double expected = n * std::exp(logits[i] / temperature) / z;
    chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  // 5 degrees of freedom: P(chi2 > 20.5) = 0.001.
  EXPECT_LT(chi2, 20.5);
  // A wrong temperature (1 instead of 0.7) is rejected by the same statistic.
  double z1 = 0, chi2_wrong = 0;
  for (double l : logits) z1 += std::exp(l);
  for (std::size_t i = 0; i < logits.size(); ++i) {
    const double expected = n * std::exp(logits[i]) / z1;
    chi2_wrong += (counts[i] - expected) * (counts[i] - expected) / expected;
  }
  EXPECT_GT(chi2_wrong, 100.0);
}

// ------------------------------------------------------------------ the engine

TEST(RolloutTest, GreedyEqualsAFullForwardLoopInPromptOrder) {
  auto model = TinyModel(/*fp64=*/true);
  RolloutEngine engine(model);
  const auto prompts = Prompts({5, 3, 5, 4}, TinyKimiSpec().vocab);
  SamplingOptions o = Greedy(6);
  o.samples = 2;
  auto out = engine.Generate(prompts, o, 1);
  ASSERT_TRUE(out.ok()) << out.status().message();
  ASSERT_EQ(out->size(), 8u);
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    const auto want = NaiveGreedy(*model, prompts[i], 6, {});
    for (int j = 0; j < 2; ++j) {
      const Sample& s = (*out)[i * 2 + j];
      EXPECT_EQ(s.prompt, static_cast<int>(i));
      EXPECT_EQ(s.response, want) << "prompt " << i << " sample " << j;
      EXPECT_FALSE(s.stopped);
    }
  }
  // Three length groups: one prefill and 5 steps each, and one read of the
  // tokens each (6 steps, fewer than kStopCheckEvery).
  EXPECT_EQ(engine.last_stats().forward_calls, 3 * 6);
  EXPECT_EQ(engine.last_stats().generated_tokens, 8 * 6);
  EXPECT_EQ(engine.last_stats().host_reads, 3);
}

TEST(RolloutTest, StopIdsEndRowsAndAreKept) {
  auto model = TinyModel(/*fp64=*/true);
  const auto prompts = Prompts({6, 6}, TinyKimiSpec().vocab);
  const auto free_run = NaiveGreedy(*model, prompts[0], 8, {});
  // Stop on prompt 0's third token: its response ends there, the stop kept.
  SamplingOptions o = Greedy(8);
  o.stop_ids = {free_run[2], 47};
  const auto want0 = NaiveGreedy(*model, prompts[0], 8, o.stop_ids);
  const auto want1 = NaiveGreedy(*model, prompts[1], 8, o.stop_ids);
  ASSERT_LE(want0.size(), 3u);
  RolloutEngine engine(model);
  auto out = engine.Generate(prompts, o, 1);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*out)[0].response, want0);
  EXPECT_TRUE((*out)[0].stopped);
  EXPECT_EQ((*out)[1].response, want1);
  EXPECT_EQ((*out)[1].stopped, want1.size() < 8u);
  EXPECT_EQ(engine.last_stats().generated_tokens, static_cast<std::int64_t>(want0.size() + want1.size()));
}

// Rows that stop between the host's reads (every kStopCheckEvery steps) end
// at their stop, the tokens computed after it dropped; the others go on.
TEST(RolloutTest, RowsThatStopBetweenReadsEndAtTheirStop) {
  auto model = TinyModel(/*fp64=*/true);
  const auto prompts = Prompts({6, 6}, TinyKimiSpec().vocab);
  const int steps = 2 * RolloutEngine::kStopCheckEvery + 3;
  const auto free_run = NaiveGreedy(*model, prompts[0], steps, {});
  SamplingOptions o = Greedy(steps);
  o.stop_ids = {free_run[RolloutEngine::kStopCheckEvery + 2]};  // inside the second read's steps
  const auto want0 = NaiveGreedy(*model, prompts[0], steps, o.stop_ids);
  const auto want1 = NaiveGreedy(*model, prompts[1], steps, o.stop_ids);
  ASSERT_LE(want0.size(), std::size_t(RolloutEngine::kStopCheckEvery + 3));
  RolloutEngine engine(model);
  auto out = engine.Generate(prompts, o, 1);
  ASSERT_TRUE(out.ok()) << out.status().message();
  EXPECT_EQ((*out)[0].response, want0);
  EXPECT_TRUE((*out)[0].stopped);
  EXPECT_EQ((*out)[0].logprobs.size(), want0.size());
  EXPECT_EQ((*out)[1].response, want1);
  EXPECT_EQ(engine.last_stats().generated_tokens, static_cast<std::int64_t>(want0.size() + want1.size()));
  // The host waited once per kStopCheckEvery tokens, never once a token:
  // at steps 8 and 16, and at the last (19) unless every row had stopped.
  EXPECT_EQ(engine.last_stats().host_reads, want1.size() > std::size_t(2 * RolloutEngine::kStopCheckEvery) ? 3 : 2);
}

// The largest |reference - logprob| over every sampled id of every sample,
// less `float_rounding` * |reference| (Sample keeps floats), where the
// reference is log_softmax(full-forward logits / T), ids >= vocab_limit masked.
double MaxLogprobError(StageModelImpl& model, const std::vector<std::vector<std::int64_t>>& prompts,
                       const std::vector<Sample>& samples, const SamplingOptions& o, double float_rounding) {
  double worst = 0;
  for (const Sample& s : samples) {
    std::vector<std::int64_t> ids = prompts[s.prompt];
    const std::size_t start = ids.size();
    ids.insert(ids.end(), s.response.begin(), s.response.end() - 1);
    torch::Tensor logits = FullLogits(model, ids).to(torch::kDouble).narrow(0, start - 1, s.response.size());
    if (o.vocab_limit > 0) logits.narrow(1, o.vocab_limit, logits.size(1) - o.vocab_limit).fill_(-INFINITY);
    const torch::Tensor logp = torch::log_softmax(logits / o.temperature, -1);
    for (std::size_t t = 0; t < s.response.size(); ++t) {
      const double want = logp[t][s.response[t]].item<double>();
      worst = std::max(worst, std::abs(want - s.logprobs[t]) - float_rounding * std::abs(want));
    }
  }
  return worst;
}

TEST(RolloutTest, LogprobsAreTheFullForwardsLogSoftmaxAtTheSampledIds) {
  const auto prompts = Prompts({4, 6, 4}, TinyKimiSpec().vocab);
  SamplingOptions o;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.samples = 3;
  o.max_new_tokens = 7;
  o.stop_ids = {5, 9};
  for (bool fp64 : {false, true}) {
    auto model = TinyModel(fp64);
    o.vocab_limit = fp64 ? 40 : 0;
    RolloutEngine engine(model);
    auto out = engine.Generate(prompts, o, 7);
    ASSERT_TRUE(out.ok()) << out.status().message();
    // Sample keeps floats: beyond their rounding (2^-24 relative), fp64 agrees within 1e-9.
    const double rounding = fp64 ? std::ldexp(1.0, -24) : 0.0;
    EXPECT_LT(MaxLogprobError(*model, prompts, *out, o, rounding), fp64 ? 1e-9 : 1e-5) << (fp64 ? "fp64" : "fp32");
    for (const Sample& s : *out)
      for (std::int64_t id : s.response) EXPECT_LT(id, fp64 ? 40 : TinyKimiSpec().vocab);
  }
}

TEST(RolloutTest, TheSeedDecidesTheSamples) {
  auto model = TinyModel(/*fp64=*/false);
  RolloutEngine engine(model);
  const auto prompts = Prompts({5, 4}, TinyKimiSpec().vocab);
  SamplingOptions o;
  o.samples = 3;
  o.max_new_tokens = 8;
  auto responses = [&](std::uint64_t seed) {
    auto out = engine.Generate(prompts, o, seed);
    EXPECT_TRUE(out.ok());
    std::vector<std::vector<std::int64_t>> r;
    for (const Sample& s : *out) r.push_back(s.response);
    return r;
  };
  const auto a = responses(11);
  EXPECT_EQ(responses(11), a);
  EXPECT_NE(responses(12), a);
}

// Decoding over a fixed cache (kFixed: the graphs' form, run eagerly)
// samples what the growing cache samples: fp64, temperature and top-p,
// prompts of two lengths and stop ids that drop rows (so the fixed cache is
// selected too). Graphs are refused on the CPU by name.
TEST(RolloutTest, AFixedCacheSamplesAsTheGrowingOne) {
  auto model = TinyModel(/*fp64=*/true);
  const auto prompts = Prompts({4, 6, 4}, TinyKimiSpec().vocab);
  SamplingOptions o;
  o.temperature = 0.8;
  o.top_p = 0.9;
  o.samples = 3;
  o.max_new_tokens = 2 * RolloutEngine::kStopCheckEvery + 1;
  o.stop_ids = {5, 9};
  RolloutEngine engine(model);
  EXPECT_EQ(engine.decode_steps(), DecodeSteps::kGrowing);
  const Status graphs = engine.set_decode_steps(DecodeSteps::kGraphs);
  EXPECT_EQ(graphs.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(graphs.message().find("CUDA graphs"), std::string::npos) << graphs.message();
  auto growing = engine.Generate(prompts, o, 21);
  ASSERT_TRUE(growing.ok()) << growing.status().message();
  ASSERT_TRUE(engine.set_decode_steps(DecodeSteps::kFixed).ok());
  auto fixed = engine.Generate(prompts, o, 21);
  ASSERT_TRUE(fixed.ok()) << fixed.status().message();
  for (std::size_t i = 0; i < growing->size(); ++i) {
    EXPECT_EQ((*fixed)[i].response, (*growing)[i].response) << "sample " << i;
    ASSERT_EQ((*fixed)[i].logprobs.size(), (*growing)[i].logprobs.size());
    for (std::size_t t = 0; t < (*fixed)[i].logprobs.size(); ++t)
      EXPECT_NEAR((*fixed)[i].logprobs[t], (*growing)[i].logprobs[t], 1e-6) << "sample " << i << " token " << t;
  }
  // The fixed cache was selected: in some length group a row stopped before
  // the last read while another went on past it.
  const std::size_t last_read = 2 * RolloutEngine::kStopCheckEvery;
  bool selected = false;
  for (const std::vector<int>& group : {std::vector<int>{0, 2}, std::vector<int>{1}}) {
    bool early = false, late = false;
    for (const Sample& s : *fixed) {
      if (std::find(group.begin(), group.end(), s.prompt) == group.end()) continue;
      early |= s.stopped && s.response.size() <= last_read;
      late |= s.response.size() > last_read;
    }
    selected |= early && late;
  }
  EXPECT_TRUE(selected) << "no rows were dropped while others went on";
  EXPECT_EQ(engine.last_stats().graph_replays, 0);
}

TEST(RolloutTest, BadPromptsAreRefused) {
  RolloutEngine engine(TinyModel(/*fp64=*/false));
  EXPECT_EQ(engine.Generate({{1, 2}, {}}, {}, 0).status().code(), Status::Code::kInvalidArgument);
  auto out = engine.Generate({{1, 48}}, {}, 0);
  EXPECT_EQ(out.status().code(), Status::Code::kInvalidArgument);
  EXPECT_NE(out.status().message().find("id 48"), std::string::npos);
  SamplingOptions o;
  o.samples = 0;
  EXPECT_NE(engine.Generate({{1}}, o, 0).status().message().find("--samples"), std::string::npos);
}

}  // namespace
}  // namespace kp::runtime
