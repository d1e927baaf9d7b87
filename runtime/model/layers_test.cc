// The building blocks against independent references written here: the
// depth read, the router on hand-worked cases, the MoE against a per-token
// loop, KDA against the literal delta-rule recurrence, the short convolution.
#include <cmath>
#include <set>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "runtime/model/attention.h"
#include "runtime/model/layers.h"
#include "specs/rope.h"

namespace kp::runtime {
namespace {

torch::Tensor RandomDouble(at::IntArrayRef shape, std::uint64_t seed) {
  Init init(seed);
  return init.Normal(shape, 1.0).to(torch::kDouble);
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// ------------------------------------------------------------------ depth read

TEST(AttnResReadTest, MatchesAPerTokenLoopOverDepth) {
  const std::int64_t b = 2, t = 3, d = 5;
  std::vector<torch::Tensor> blocks = {RandomDouble({b, t, d}, 1), RandomDouble({b, t, d}, 2) * 3.0};
  const torch::Tensor partial = RandomDouble({b, t, d}, 3) * 0.5;
  const torch::Tensor nw = RandomDouble({d}, 4), q = RandomDouble({d}, 5);
  const double eps = 1e-6;
  const torch::Tensor got = AttnResRead(blocks, partial, nw, q, eps);
  std::vector<torch::Tensor> values = {blocks[0], blocks[1], partial};
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < t; ++j) {
      std::vector<double> score(values.size());
      for (std::size_t n = 0; n < values.size(); ++n) {
        auto v = values[n].accessor<double, 3>();
        double ms = 0;
        for (std::int64_t c = 0; c < d; ++c) ms += v[i][j][c] * v[i][j][c] / d;
        double s = 0;
        for (std::int64_t c = 0; c < d; ++c)
          s += v[i][j][c] / std::sqrt(ms + eps) * nw[c].item<double>() * q[c].item<double>();
        score[n] = s;
      }
      double z = 0;
      for (double s : score) z += std::exp(s);
      for (std::int64_t c = 0; c < d; ++c) {
        double want = 0;
        for (std::size_t n = 0; n < values.size(); ++n)
          want += std::exp(score[n]) / z * values[n].accessor<double, 3>()[i][j][c];
        EXPECT_NEAR(got[i][j][c].item<double>(), want, 1e-12);
      }
    }
  }
}

TEST(AttnResReadTest, AZeroQueryAveragesAndOneValueIsItself) {
  const torch::Tensor a = RandomDouble({1, 2, 4}, 7), c = RandomDouble({1, 2, 4}, 8);
  const torch::Tensor ones = torch::ones({4}, torch::kDouble), zeros = torch::zeros({4}, torch::kDouble);
  EXPECT_LT(MaxAbsDiff(AttnResRead({a}, c, ones, zeros, 1e-6), (a + c) / 2), 1e-15);
  EXPECT_TRUE(torch::equal(AttnResRead({a}, {}, ones, RandomDouble({4}, 9), 1e-6), a));
}

TEST(AttnResReadTest, Bf16ValuesAreReadInFp32AndReturnedInBf16) {
  const torch::Tensor a = RandomDouble({2, 4}, 10).to(torch::kBFloat16);
  const torch::Tensor b = RandomDouble({2, 4}, 11).to(torch::kBFloat16);
  const torch::Tensor nw = torch::ones({4}), q = torch::full({4}, 0.3);
  const torch::Tensor got = AttnResRead({a}, b, nw, q, 1e-6);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  const torch::Tensor want = AttnResRead({a.to(torch::kFloat)}, b.to(torch::kFloat), nw, q, 1e-6);
  EXPECT_TRUE(torch::equal(got, want.to(torch::kBFloat16)));
}

// ------------------------------------------------------------------ router

TEST(RouterTest, SelectsTopKAndNormalisesTheScores) {
  const torch::Tensor scores = torch::tensor({{0.9, 0.8, 0.1, 0.7}}, torch::kDouble);
  const Routing r = RouteFromScores(scores, torch::zeros({4}, torch::kDouble), 2, 2.5);
  EXPECT_EQ(r.experts[0][0].item<std::int64_t>(), 0);
  EXPECT_EQ(r.experts[0][1].item<std::int64_t>(), 1);
  EXPECT_NEAR(r.weights[0][0].item<double>(), 0.9 / 1.7 * 2.5, 1e-15);
  EXPECT_NEAR(r.weights[0][1].item<double>(), 0.8 / 1.7 * 2.5, 1e-15);
}

TEST(RouterTest, TheBiasChangesTheSelectionButNotTheWeights) {
  const torch::Tensor scores = torch::tensor({{0.9, 0.8, 0.1, 0.7}}, torch::kDouble);
  // 0.8 - 0.5 = 0.3 < 0.7: expert 3 replaces expert 1; its weight is its raw
  // score 0.7, normalised against 0.9, not 0.7 + bias.
  const torch::Tensor bias = torch::tensor({0.0, -0.5, 0.0, 0.0}, torch::kDouble);
  const Routing r = RouteFromScores(scores, bias, 2, 1.0);
  EXPECT_EQ(r.experts[0][0].item<std::int64_t>(), 0);
  EXPECT_EQ(r.experts[0][1].item<std::int64_t>(), 3);
  EXPECT_NEAR(r.weights[0][0].item<double>(), 0.9 / 1.6, 1e-15);
  EXPECT_NEAR(r.weights[0][1].item<double>(), 0.7 / 1.6, 1e-15);
  // A positive bias on expert 2 pulls it in, at its own small weight.
  const Routing r2 = RouteFromScores(scores, torch::tensor({0.0, 0.0, 0.85, 0.0}, torch::kDouble), 2, 1.0);
  EXPECT_EQ(r2.experts[0][0].item<std::int64_t>(), 2);
  EXPECT_EQ(r2.experts[0][1].item<std::int64_t>(), 0);
  EXPECT_NEAR(r2.weights[0][0].item<double>(), 0.1 / 1.0, 1e-15);
}

// DeepSeek-V3's group-limited routing, worked by hand: 8 experts in 4
// groups of 2, of which 2 groups may be chosen, top 3.
TEST(RouterTest, GroupLimitedRoutingChoosesOnlyInsideTheBestGroups) {
  const torch::Tensor scores = torch::tensor({{0.90, 0.05, 0.60, 0.55, 0.50, 0.50, 0.85, 0.10}}, torch::kDouble);
  // Group sums of the two best: {0.95, 1.15, 1.00, 0.95}: groups 1 and 2
  // are kept, so expert 0 (0.90) and expert 6 (0.85) cannot be chosen, and
  // the top 3 are 2, 3 and one of 4 / 5 (tie, lowest index first is not
  // promised; both weigh 0.5).
  const Routing r = RouteFromScores(scores, torch::zeros({8}, torch::kDouble), 3, 2.0, 4, 2);
  EXPECT_EQ(r.experts[0][0].item<std::int64_t>(), 2);
  EXPECT_EQ(r.experts[0][1].item<std::int64_t>(), 3);
  const std::int64_t third = r.experts[0][2].item<std::int64_t>();
  EXPECT_TRUE(third == 4 || third == 5) << third;
  EXPECT_NEAR(r.weights[0][0].item<double>(), 0.60 / 1.65 * 2.0, 1e-15);
  EXPECT_NEAR(r.weights[0][2].item<double>(), 0.50 / 1.65 * 2.0, 1e-15);
  // The bias decides the groups as it decides the experts: a bias of -0.3
  // on expert 2 drops group 1 (0.30 + 0.55 = 0.85) below group 0 and group 3.
  const torch::Tensor bias = torch::tensor({0.0, 0.0, -0.3, 0.0, 0.0, 0.0, 0.0, 0.0}, torch::kDouble);
  const Routing b = RouteFromScores(scores, bias, 3, 1.0, 4, 2);
  // Kept: group 2 (1.00) and groups 0 / 3 tie at 0.95: the top 3 take 0.90
  // or 0.85 first, then 0.50 from group 2.
  std::set<std::int64_t> chosen;
  for (int i = 0; i < 3; ++i) chosen.insert(b.experts[0][i].item<std::int64_t>());
  EXPECT_EQ(chosen.count(2), 0u);
  EXPECT_EQ(chosen.count(3), 0u);
  // One group: the plain top-k over all experts.
  const Routing all = RouteFromScores(scores, torch::zeros({8}, torch::kDouble), 3, 1.0, 1, 1);
  EXPECT_EQ(all.experts[0][0].item<std::int64_t>(), 0);
  EXPECT_EQ(all.experts[0][1].item<std::int64_t>(), 6);
  EXPECT_EQ(all.experts[0][2].item<std::int64_t>(), 2);
}

TEST(RouterTest, CountsLoadAndMovesTheBiasTowardTheUnderusedExpert) {
  Init init(1);
  MoeShape moe;
  moe.num_experts = 4;
  moe.top_k = 2;
  moe.route_scale = 1.0;
  RouterImpl router(4, moe, init);
  {
    torch::NoGradGuard no_grad;
    router.weight().copy_(torch::eye(4));  // scores = sigmoid(x)
  }
  // Sigmoid is monotone: token 0 picks {0, 1}, token 1 {1, 2}, token 2 {2, 0}.
  const torch::Tensor x = torch::tensor({{2.0, 1.0, -1.0, 0.0}, {0.0, 2.0, 1.0, -2.0}, {1.0, -1.0, 2.0, 0.0}});
  router.forward(x, /*record_load=*/false);
  EXPECT_EQ(router.load().sum().item<double>(), 0.0);
  const Routing r = router.forward(x, /*record_load=*/true);
  EXPECT_TRUE(torch::equal(router.load(), torch::tensor({2.0f, 2.0f, 2.0f, 0.0f})));
  // Mean load 1.5: experts 0-2 are over it (-rate), expert 3 under (+rate).
  router.UpdateBias(0.25);
  EXPECT_TRUE(torch::equal(router.bias(), torch::tensor({-0.25f, -0.25f, -0.25f, 0.25f})));
  EXPECT_EQ(router.load().sum().item<double>(), 0.0);
  // With bias (-.25, -.25, -.25, +.25) the biased scores are
  //   token 0: .631 .481 .019 .750 -> {3, 0}
  //   token 1: .250 .631 .481 .369 -> {1, 2}
  //   token 2: .481 .019 .631 .750 -> {3, 2}
  // and the weights normalise the raw sigmoid scores of the chosen experts.
  const Routing after = router.forward(x, /*record_load=*/true);
  const torch::Tensor scores = torch::sigmoid(x);
  const std::int64_t want[3][2] = {{3, 0}, {1, 2}, {3, 2}};
  for (int tok = 0; tok < 3; ++tok) {
    const double a = scores[tok][want[tok][0]].item<double>(), b = scores[tok][want[tok][1]].item<double>();
    for (int j = 0; j < 2; ++j) EXPECT_EQ(after.experts[tok][j].item<std::int64_t>(), want[tok][j]) << tok;
    EXPECT_NEAR(after.weights[tok][0].item<double>(), a / (a + b), 1e-6) << tok;
    EXPECT_NEAR(after.weights[tok][1].item<double>(), b / (a + b), 1e-6) << tok;
  }
  // Load (1, 1, 2, 2), mean 1.5: experts 0 and 1 gain, 2 and 3 lose.
  router.UpdateBias(0.25);
  EXPECT_TRUE(torch::equal(router.bias(), torch::tensor({0.0f, 0.0f, -0.5f, 0.0f})));
  EXPECT_TRUE(torch::equal(r.experts, std::get<1>(torch::topk(scores, 2))));
}

// ------------------------------------------------------------------ MoE

ModelSpec MoeSpec(int latent) {
  ModelSpec m;
  m.hidden = 12;
  m.moe.num_experts = 5;
  m.moe.top_k = 2;
  m.moe.expert_ffn = 7;
  m.moe.shared_experts = 2;
  m.moe.shared_ffn = 3;
  m.moe.latent_dim = latent;
  return m;
}

// out = shared(x) + up( sum_j w_j expert_{e_j}(down x) ), token by token.
TEST(MoeTest, MatchesAPerTokenLoopWithAndWithoutLatent) {
  for (int latent : {0, 6}) {
    Init init(3);
    ModelOptions opts;
    MoeImpl moe(MoeSpec(latent), opts, 0.3, 0.3, init);
    moe.to(torch::kDouble);
    const torch::Tensor x = RandomDouble({2, 5, 12}, 4);
    const torch::Tensor got = moe.Mix(x, false);
    auto params = moe.named_parameters();
    auto expert = [&](std::int64_t e, const torch::Tensor& v) {
      const torch::Tensor g = torch::matmul(params["experts.gate"][e], v);
      const torch::Tensor u = torch::matmul(params["experts.up"][e], v);
      return torch::matmul(params["experts.down"][e], torch::silu(g) * u);
    };
    const torch::Tensor xf = x.reshape({-1, 12});
    const Routing r = moe.router().forward(xf, false);
    for (std::int64_t n = 0; n < xf.size(0); ++n) {
      const torch::Tensor v = latent > 0 ? torch::matmul(params["latent_down.weight"], xf[n]) : xf[n];
      torch::Tensor routed = torch::zeros_like(v);
      for (int j = 0; j < 2; ++j) routed = routed + r.weights[n][j] * expert(r.experts[n][j].item<std::int64_t>(), v);
      if (latent > 0) routed = torch::matmul(params["latent_up.weight"], routed);
      const torch::Tensor shared = torch::matmul(
          params["shared.down.weight"],
          torch::silu(torch::matmul(params["shared.gate.weight"], xf[n])) * torch::matmul(params["shared.up.weight"], xf[n]));
      EXPECT_LT(MaxAbsDiff(got.reshape({-1, 12})[n], routed + shared), 1e-12) << "latent " << latent << " token " << n;
    }
  }
}

// ------------------------------------------------------------------ KDA

// The literal definition: S_t = (I - b k k^T) Diag(a) S_{t-1} + b k v^T,
// o_t = S_t^T q_t, one (batch, head) at a time with explicit matrices.
torch::Tensor NaiveKda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                       const torch::Tensor& beta, const torch::Tensor& s0, torch::Tensor* s_final) {
  const std::int64_t b = q.size(0), t_len = q.size(1), h = q.size(2), dk = q.size(3);
  torch::Tensor out = torch::zeros({b, t_len, h, v.size(3)}, torch::kDouble);
  *s_final = torch::zeros_like(s0);
  const torch::Tensor eye = torch::eye(dk, torch::kDouble);
  for (std::int64_t i = 0; i < b; ++i) {
    for (std::int64_t j = 0; j < h; ++j) {
      torch::Tensor s = s0[i][j].clone();
      for (std::int64_t t = 0; t < t_len; ++t) {
        const torch::Tensor kt = k[i][t][j], bt = beta[i][t][j];
        s = torch::matmul(eye - bt * torch::outer(kt, kt), torch::matmul(torch::diag(torch::exp(g[i][t][j])), s)) +
            bt * torch::outer(kt, v[i][t][j]);
        out[i][t][j] = torch::matmul(s.t(), q[i][t][j]);
      }
      (*s_final)[i][j] = s;
    }
  }
  return out;
}

struct KdaInputs {
  torch::Tensor q, k, v, g, beta, s0;
};

KdaInputs RandomKda(std::int64_t t, std::uint64_t seed) {
  const std::int64_t b = 2, h = 2, dk = 4, dv = 3;
  KdaInputs in;
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  in.q = unit(RandomDouble({b, t, h, dk}, seed)) * 0.5;
  in.k = unit(RandomDouble({b, t, h, dk}, seed + 1));
  in.v = RandomDouble({b, t, h, dv}, seed + 2);
  in.g = -torch::softplus(RandomDouble({b, t, h, dk}, seed + 3)) * 2.0;  // decays down to ~e^-8 per step
  in.beta = torch::sigmoid(RandomDouble({b, t, h}, seed + 4));
  in.s0 = RandomDouble({b, h, dk, dv}, seed + 5);
  return in;
}

TEST(KdaTest, RecurrentAndChunkedMatchTheLiteralRecurrence) {
  const KdaInputs in = RandomKda(13, 20);
  torch::Tensor want_state;
  const torch::Tensor want = NaiveKda(in.q, in.k, in.v, in.g, in.beta, in.s0, &want_state);
  torch::Tensor state;
  EXPECT_LT(MaxAbsDiff(KdaRecurrent(in.q, in.k, in.v, in.g, in.beta, in.s0, &state), want), 1e-12);
  EXPECT_LT(MaxAbsDiff(state, want_state), 1e-12);
  for (std::int64_t chunk : {1, 4, 5, 16}) {  // 13 tokens: a partial last chunk, or one short chunk
    EXPECT_LT(MaxAbsDiff(KdaChunked(in.q, in.k, in.v, in.g, in.beta, chunk, in.s0, &state), want), 1e-11) << chunk;
    EXPECT_LT(MaxAbsDiff(state, want_state), 1e-11) << chunk;
  }
}

TEST(KdaTest, ChunkedGradientsEqualRecurrentGradients) {
  KdaInputs in = RandomKda(9, 40);
  std::vector<torch::Tensor*> inputs = {&in.q, &in.k, &in.v, &in.g, &in.beta};
  auto grads = [&](bool chunked) {
    std::vector<torch::Tensor> leaves;
    for (torch::Tensor* x : inputs) leaves.push_back(x->detach().requires_grad_(true));
    const torch::Tensor o = chunked ? KdaChunked(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4], 4)
                                    : KdaRecurrent(leaves[0], leaves[1], leaves[2], leaves[3], leaves[4]);
    return torch::autograd::grad({(o * o).sum()}, leaves);
  };
  const auto a = grads(false), b = grads(true);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_LT(MaxAbsDiff(a[i], b[i]), 1e-10) << i;
}

TEST(KdaTest, StrongDecayDoesNotOverflowTheChunkedForm) {
  KdaInputs in = RandomKda(32, 60);
  in.g = in.g * 20.0;  // e^-160 per step: exp(-G) of a whole chunk would overflow
  torch::Tensor s;
  const torch::Tensor want = NaiveKda(in.q, in.k, in.v, in.g, in.beta, in.s0, &s);
  const torch::Tensor got = KdaChunked(in.q.to(torch::kFloat), in.k.to(torch::kFloat), in.v.to(torch::kFloat),
                                       in.g.to(torch::kFloat), in.beta.to(torch::kFloat), 16,
                                       in.s0.to(torch::kFloat));
  EXPECT_TRUE(torch::isfinite(got).all().item<bool>());
  EXPECT_LT(MaxAbsDiff(got, want), 1e-4);
}

TEST(ShortConvTest, IsCausalAndDepthwise) {
  const torch::Tensor x = RandomDouble({2, 6, 3}, 70), w = RandomDouble({3, 4}, 71);
  const torch::Tensor y = CausalDepthwiseConv(x, w);
  for (std::int64_t t = 0; t < 6; ++t)
    for (std::int64_t c = 0; c < 3; ++c) {
      double want = 0;
      for (std::int64_t j = 0; j < 4; ++j) {
        const std::int64_t src = t - 3 + j;
        if (src >= 0) want += w[c][j].item<double>() * x[1][src][c].item<double>();
      }
      EXPECT_NEAR(y[1][t][c].item<double>(), want, 1e-12);
    }
}

TEST(RopeTest, RotatesPairsByPositionAndKeepsNorms) {
  const torch::Tensor x = RandomDouble({1, 5, 2, 6}, 80);
  const torch::Tensor y = ApplyRope(x, RopeSpec{});
  EXPECT_TRUE(torch::equal(y.select(1, 0), x.select(1, 0)));  // position 0: no rotation
  EXPECT_LT(MaxAbsDiff(y.norm(2, -1), x.norm(2, -1)), 1e-12);
  // Pair (0, 3) at position 2 turns by 2 * theta^0 = 2 radians.
  const double a = x[0][2][1][0].item<double>(), b = x[0][2][1][3].item<double>();
  EXPECT_NEAR(y[0][2][1][0].item<double>(), a * std::cos(2.0) - b * std::sin(2.0), 1e-12);
  EXPECT_NEAR(y[0][2][1][3].item<double>(), b * std::cos(2.0) + a * std::sin(2.0), 1e-12);
}

// The released DeepSeek-V3 / Kimi K2 layout: pair (2, 3) is pair 1, turning
// by position x theta^(-2/6); and the result is HF's rotation of the
// de-interleaved channels, up to the same permutation of q and k, so every
// q.k product is HF's.
TEST(RopeTest, InterleavedPairsAreAdjacentChannels) {
  const torch::Tensor x = RandomDouble({1, 5, 2, 6}, 81);
  RopeSpec interleaved;
  interleaved.interleaved = true;
  const torch::Tensor y = ApplyRope(x, interleaved);
  const double angle = 3 * std::pow(10000.0, -2.0 / 6);
  const double a = x[0][3][0][2].item<double>(), b = x[0][3][0][3].item<double>();
  EXPECT_NEAR(y[0][3][0][2].item<double>(), a * std::cos(angle) - b * std::sin(angle), 1e-12);
  EXPECT_NEAR(y[0][3][0][3].item<double>(), b * std::cos(angle) + a * std::sin(angle), 1e-12);
  // De-interleave (evens, then odds) and rotate as halves: the same numbers.
  const torch::Tensor perm = torch::tensor({0, 2, 4, 1, 3, 5}, torch::kLong);
  const torch::Tensor halves = ApplyRope(x.index_select(-1, perm), RopeSpec{});
  EXPECT_LT(MaxAbsDiff(halves, y.index_select(-1, perm)), 1e-12);
}

// An attention module's table: made once, kept (the same storage) while the
// dtype and device stay, remade in another dtype; the values are
// RopeInverseFrequencies' (specs/rope.h), rounded once to the dtype.
TEST(RopeTest, AModulesFrequenciesAreMadeOnceAndKeptPerDtype) {
  RopeSpec rope;
  rope.theta = 50000;
  const RopeFrequencies table(rope, 8);
  const std::vector<double> want = RopeInverseFrequencies(rope, 8);
  const torch::Tensor f32 = table.On(torch::TensorOptions().dtype(torch::kFloat));
  EXPECT_EQ(table.On(torch::TensorOptions().dtype(torch::kFloat)).data_ptr(), f32.data_ptr());
  const torch::Tensor f64 = table.On(torch::TensorOptions().dtype(torch::kDouble));
  ASSERT_EQ(f64.numel(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(f64[i].item<double>(), want[i]);
    EXPECT_EQ(f32[i].item<float>(), static_cast<float>(want[i]));
  }
  // The module's table gives what the spec's own computation gives.
  const torch::Tensor x = RandomDouble({1, 5, 2, 8}, 82), positions = torch::arange(3, 8, torch::kLong);
  EXPECT_TRUE(torch::equal(ApplyRopeAt(x, table, positions), ApplyRopeAt(x, rope, positions)));
}

}  // namespace
}  // namespace kp::runtime
