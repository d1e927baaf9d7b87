// Context parallelism over the in-process communicator, in fp64: each piece
// (the positions, the convolution with its halos, KDA's scan over the
// ranks' chunks) and each token mixer (KDA, MLA with its output gate, the
// grouped-query MHA) over cp = 2 and 3 ranks against the same computation
// on the whole sequence: a rank's outputs and input gradients against the
// whole's at its positions, the parameters' gradients summed over the ranks
// against the whole's.
#include "runtime/model/context_parallel.h"

#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "runtime/comm/in_process_communicator.h"
#include "runtime/model/attention.h"
#include "runtime/model/test_util.h"

namespace kp::runtime {
namespace {

Status Expect(bool ok, const std::string& what) { return ok ? Status::Ok() : Status::Internal(what); }

double RelativeError(const torch::Tensor& got, const torch::Tensor& want) {
  if (got.sizes() != want.sizes()) return 1e300;
  return (got - want).abs().max().item<double>() / (want.abs().max().item<double>() + 1e-300);
}

torch::Tensor Normal(std::uint64_t seed, at::IntArrayRef shape) {
  return Init(seed, 0).Normal(shape, 1.0).to(torch::kDouble);
}

TEST(ContextParallelTest, PositionsAreTheLoadBalancedChunks) {
  EXPECT_EQ(ContextPositions(2, 0, 8), (std::vector<std::int64_t>{0, 1, 6, 7}));
  EXPECT_EQ(ContextPositions(2, 1, 8), (std::vector<std::int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(ContextPositions(3, 1, 12), (std::vector<std::int64_t>{2, 3, 8, 9}));
  EXPECT_EQ(CheckContextSplit(2, 10, 1).message(),
            "--cp: the sequence length 10 does not split into 2 x 2 = 4 equal chunks");
  EXPECT_EQ(CheckContextSplit(4, 8, 2).message(), "--cp: chunks of 1 tokens are shorter than the 2 a KDA convolution "
                                                  "reaches back");
  EXPECT_TRUE(CheckContextSplit(1, 9, 5).ok());
}

// f maps the rank's inputs (one or more [B, T, ...] tensors, time on dim 1)
// to its output; whole is f on the whole sequence. Each rank's output and
// inputs' gradients (for an upstream gradient seeded over the whole
// sequence) against the whole's at the rank's positions.
using Piece = std::function<torch::Tensor(const ContextShard&, const std::vector<torch::Tensor>&)>;

void ExpectPieceMatches(int cp, const std::vector<torch::Tensor>& whole_in, const Piece& f, double tol,
                        const std::string& what) {
  std::vector<torch::Tensor> leaves;
  for (const torch::Tensor& x : whole_in) leaves.push_back(x.clone().requires_grad_(true));
  const torch::Tensor whole = f(ContextShard(), leaves);
  const torch::Tensor upstream = Normal(99, whole.sizes());
  (whole * upstream).sum().backward();
  const auto statuses = RunRanks(cp, [&](Communicator& c) -> Status {
    std::vector<torch::Tensor> mine;
    for (const torch::Tensor& x : whole_in) mine.push_back(KeepContextShard(x, cp, c.rank(), 1).requires_grad_(true));
    const torch::Tensor y = f(ContextShard(&c), mine);
    (y * KeepContextShard(upstream, cp, c.rank(), 1)).sum().backward();
    KP_RETURN_IF_ERROR(Expect(RelativeError(y, KeepContextShard(whole, cp, c.rank(), 1)) <= tol, "output"));
    for (std::size_t i = 0; i < mine.size(); ++i)
      KP_RETURN_IF_ERROR(Expect(RelativeError(mine[i].grad(), KeepContextShard(leaves[i].grad(), cp, c.rank(), 1)) <= tol,
                                "gradient of input " + std::to_string(i)));
    return Status::Ok();
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << what << " cp " << cp << ": " << FirstError(statuses).message();
}

TEST(ContextParallelTest, ConvolutionReadsThePreviousChunksTail) {
  const torch::Tensor w = Normal(3, {5, 3}).requires_grad_(false);
  for (int cp : {2, 3})
    ExpectPieceMatches(cp, {Normal(1, {2, 12, 5})},
                       [&](const ContextShard& s, const std::vector<torch::Tensor>& in) { return s.Conv(in[0], w); },
                       1e-14, "conv");  // a tail's gradient adds its halo's in another order
}

TEST(ContextParallelTest, KdaScanPassesTheStateAlongTheChunks) {
  const std::int64_t b = 2, t = 12, h = 2, dk = 4, dv = 3;
  const torch::Tensor q = Normal(1, {b, t, h, dk}) * 0.5, k = torch::nn::functional::normalize(
                                                           Normal(2, {b, t, h, dk}),
                                                           torch::nn::functional::NormalizeFuncOptions().dim(-1));
  const torch::Tensor v = Normal(3, {b, t, h, dv}), g = -torch::rand({b, t, h, dk}, torch::kDouble) * 0.3;
  const torch::Tensor beta = torch::sigmoid(Normal(5, {b, t, h}));
  for (int cp : {2, 3})
    for (std::int64_t chunk : {0, 4})
      ExpectPieceMatches(cp, {q, k, v, g, beta},
                         [&](const ContextShard& s, const std::vector<torch::Tensor>& in) {
                           return s.Kda(in[0], in[1], in[2], in[3], in[4], chunk);
                         },
                         1e-12, "kda chunk " + std::to_string(chunk));
}

// A whole token mixer: the same initial weights on every rank and in the
// whole; its parameters' gradients summed over the ranks against the whole's.
void ExpectMixerMatches(const ModelSpec& spec, AttentionKind kind, int cp) {
  auto make = [&]() -> std::shared_ptr<TokenMixer> {
    Init init(17, 2);
    ModelOptions options;
    options.kda_chunk = 4;
    std::shared_ptr<TokenMixer> m;
    if (kind == AttentionKind::kKda) m = std::make_shared<KdaImpl>(spec, options, 0.2, 0.1, init);
    if (kind == AttentionKind::kMla) m = std::make_shared<MlaImpl>(spec, options, 0.2, 0.1, init);
    if (kind == AttentionKind::kMha) m = std::make_shared<MhaImpl>(spec, options, 0.2, 0.1, init);
    m->to(torch::kDouble);
    return m;
  };
  const std::int64_t seq = 12;
  const torch::Tensor x_all = Normal(7, {2, seq, spec.hidden}), up = Normal(8, {2, seq, spec.hidden});
  auto whole = make();
  const torch::Tensor x_ref = x_all.clone().requires_grad_(true);
  const torch::Tensor y_ref = whole->Mix(x_ref);
  (y_ref * up).sum().backward();
  const auto ref_params = whole->named_parameters();
  const auto statuses = RunRanks(cp, [&](Communicator& c) -> Status {
    auto mine = make();
    mine->SetContextParallel(ContextShard(&c));
    const torch::Tensor x = KeepContextShard(x_all, cp, c.rank(), 1).requires_grad_(true);
    const torch::Tensor y = mine->Mix(x);
    (y * KeepContextShard(up, cp, c.rank(), 1)).sum().backward();
    KP_RETURN_IF_ERROR(Expect(RelativeError(y, KeepContextShard(y_ref, cp, c.rank(), 1)) <= 1e-12, "output"));
    KP_RETURN_IF_ERROR(
        Expect(RelativeError(x.grad(), KeepContextShard(x_ref.grad(), cp, c.rank(), 1)) <= 1e-12, "input gradient"));
    for (const auto& p : mine->named_parameters()) {
      torch::Tensor g = p.value().grad().clone();
      KP_RETURN_IF_ERROR(c.AllReduceSum(g));
      KP_RETURN_IF_ERROR(Expect(RelativeError(g, ref_params[p.key()].grad()) <= 1e-11, "gradient of " + p.key()));
    }
    return Status::Ok();
  });
  EXPECT_TRUE(FirstError(statuses).ok()) << spec.name << " kind " << static_cast<int>(kind) << " cp " << cp << ": "
                                         << FirstError(statuses).message();
}

TEST(ContextParallelTest, EveryTokenMixerOverCpEqualsTheWholeSequence) {
  for (int cp : {2, 3}) {
    ExpectMixerMatches(TinyKimiSpec(), AttentionKind::kKda, cp);
    ExpectMixerMatches(TinyKimiSpec(), AttentionKind::kMla, cp);
    ExpectMixerMatches(TinyGptSpec(), AttentionKind::kMha, cp);
  }
}

}  // namespace
}  // namespace kp::runtime
