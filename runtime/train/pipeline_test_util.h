// Test helpers shared by the pipeline executor's tests (in-process ranks in
// pipeline_runtime_test.cc and pipeline_dp_test.cc, Gloo processes in
// pipeline_dp_test.cc): the scaled kimi-k3-debug model, the configuration,
// the step batches, the single-process references and one composed rank
// (pipeline x DP x EP) over any world communicator.
// Thread-safety: Reference and EpReference are pure; ComposedRank writes
// `out` under `mu`, so several rank threads may share one RunResult.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_TEST_UTIL_H_
#define KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "common/file_system.h"
#include "runtime/train/data_parallel.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/model/runtime_config.h"
#include "runtime/train/trainer_internal.h"
#include "specs/presets.h"

namespace kp::runtime::testing {

// torch's clip_grad_norm_ with the norm given, on the gradients themselves
// (the runtime folds the same scale into its optimizer step instead).
inline void ClipInPlace(const std::vector<torch::Tensor>& params, double total_norm, double max_norm) {
  const double scale = ClipScale(total_norm, max_norm);
  if (scale == 1) return;
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : params)
    if (p.grad().defined()) p.grad().mul_(scale);
}

/// kimi-k3-debug (KDA/MLA pattern, MoE, blocks of 4) scaled to CPU-test size.
inline ModelSpec DebugSpec(int layers) {
  RealFileSystem fs;
  auto preset = PresetCatalog(fs, DefaultPresetDir()).Model("kimi-k3-debug");
  EXPECT_TRUE(preset.ok()) << preset.status().message();
  ScaleFlags flags;
  flags.layers = layers;
  flags.hidden = 32;
  flags.heads = 2;
  flags.experts = 4;
  flags.vocab = 64;
  auto spec = ScaleModel(*preset, flags);
  EXPECT_TRUE(spec.ok()) << spec.status().message();
  return *spec;
}

/// 4 sequences of 8 tokens per replica as 4 micro-batches; clipping active.
inline PipelineRankConfig Config(const ModelSpec& spec, ScheduleKind kind, int pp, int vp, bool cache, int dp = 1) {
  PipelineRankConfig c;
  c.train.model = spec;
  c.train.batch = 4 * dp;
  c.train.seq_len = 8;
  c.train.steps = 20;
  c.train.warmup = 2;
  c.train.lr = 1e-2;
  c.train.grad_clip = 0.5;  // active: the clip factor depends on the reduced norm
  c.train.seed = 7;
  c.schedule = kind;
  c.pp = pp;
  c.vp = vp;
  c.microbatches = 4;
  c.attnres_cache = cache;
  return c;
}

/// The step's whole batch, [batch, seq_len + 1], from its own generator.
inline std::vector<std::int64_t> Tokens(const PipelineRankConfig& c, int step) {
  std::mt19937_64 rng(1000 + step);
  std::vector<std::int64_t> t(std::size_t(c.train.batch) * (c.train.seq_len + 1));
  for (auto& x : t) x = static_cast<std::int64_t>(rng() % c.train.model.vocab);
  return t;
}

/// fp32's unit roundoff, 2^-24.
inline constexpr double kFp32Roundoff = 5.9604644775390625e-8;

/// The tolerance, relative, of a comparison between two fp32 runs of one
/// computation whose sums add the same terms in other orders (a GEMM split
/// over ranks into partial sums, a reduction over replicas): recursive
/// summation of n terms is within (n - 1) u of the exact sum relative to the
/// sum of the terms' magnitudes (Higham, Accuracy and Stability of Numerical
/// Algorithms, eq. 4.3), so two orders are within 2 (n - 1) u of each other,
/// and a chain of `depth` such sums within `depth` times that. n is the
/// longest sum of the step: the hidden size, an FFN's width, the vocabulary
/// (the head's gradient) or a micro-batch's tokens (a weight's gradient).
/// Derived from the operation count, not from one machine's BLAS, so it
/// holds for any x86-64 core type and thread count.
inline double ReorderedSumBound(const PipelineRankConfig& c) {
  const ModelSpec& m = c.train.model;
  const std::int64_t tokens = std::int64_t{c.train.batch} * c.train.seq_len / c.microbatches;
  const std::int64_t longest = std::max<std::int64_t>({std::int64_t{m.hidden}, std::int64_t{m.moe.expert_ffn}, std::int64_t{m.moe.shared_ffn}, std::int64_t{m.dense_ffn}, std::int64_t{m.vocab}, tokens});
  const int depth = m.layers + 2;  // the embedding, every layer, the head
  return 2.0 * depth * static_cast<double>(longest - 1) * kFp32Roundoff;
}

/// Gradients by parameter name; with dp > 1 by "d<dp rank>/name".
using Grads = std::map<std::string, torch::Tensor>;

inline std::string GradKey(int dp, int dp_rank, const std::string& name) {
  return dp == 1 ? name : "d" + std::to_string(dp_rank) + "/" + name;
}

struct RunResult {
  std::vector<double> losses, norms;
  Grads grads;                            // after step 1 (clipped as the optimizer saw them)
  std::vector<PipelineStepResult> step1;  // every rank's first step
};

/// One micro-batch's loss of `model` on rows `mb` ([b, T + 1]), router load recorded.
inline torch::Tensor MicroBatchLoss(StageModelImpl& model, const torch::Tensor& mb, int t) {
  ForwardContext ctx;
  ctx.record_router_load = true;
  return LanguageModelLoss(model.forward(mb.narrow(1, 0, t), ctx), mb.narrow(1, 1, t));
}

inline torch::Tensor BatchTensor(const PipelineRankConfig& c, int step) {
  return torch::tensor(Tokens(c, step), torch::kLong).reshape({c.train.batch, c.train.seq_len + 1});
}

/// Replica d's rows of the step batch, accumulated as the pipeline does
/// (loss_m / M, one backward per micro-batch, in order); returns the sum
/// of the micro-batch losses.
inline double AccumulateReplica(StageModelImpl& model, const PipelineRankConfig& c, const torch::Tensor& batch, int d,
                                int dp) {
  const std::int64_t rows = c.train.batch / dp;
  const torch::Tensor mine = batch.narrow(0, d * rows, rows);
  double sum = 0;
  for (int m = 0; m < c.microbatches; ++m) {
    const torch::Tensor loss = MicroBatchLoss(model, MicroBatchRows(mine, m, c.microbatches), c.train.seq_len);
    sum += loss.item<double>();
    loss.div(static_cast<double>(c.microbatches)).backward();
  }
  return sum;
}

/// The single-process reference: the whole model; each of `dp` replicas'
/// rows accumulated apart, the replicas' gradients summed in DP-rank order
/// and divided by dp (dp = 1: the plain accumulation), the loss the mean of
/// the replicas' means; the fixed-order fp64 norm, clip, AdamW, router biases.
inline RunResult Reference(const PipelineRankConfig& c, int steps, int dp = 1) {
  RunResult run;
  ModelOptions options = c.train.options;
  options.seed = c.train.seed;
  auto model = BuildModel(c.train.model, options);
  EXPECT_TRUE(model.ok());
  (*model)->train();
  const std::vector<torch::Tensor> params = (*model)->TrainableParameters();
  torch::optim::AdamW opt(ParamGroups(params, c.train), torch::optim::AdamWOptions(c.train.lr));
  for (int step = 0; step < steps; ++step) {
    const torch::Tensor batch = BatchTensor(c, step);
    for (auto& g : opt.param_groups())
      static_cast<torch::optim::AdamWOptions&>(g.options()).lr(LearningRate(c.train, step));
    std::vector<torch::Tensor> sum(params.size());
    double loss_sum = 0;
    for (int d = 0; d < dp; ++d) {
      for (const torch::Tensor& p : params) const_cast<torch::Tensor&>(p).mutable_grad() = torch::Tensor();
      const double replica = AccumulateReplica(**model, c, batch, d, dp) / c.microbatches;
      loss_sum = d == 0 ? replica : loss_sum + replica;
      for (std::size_t i = 0; i < params.size() && dp > 1; ++i) {
        const torch::Tensor g = params[i].grad().defined() ? params[i].grad() : torch::zeros_like(params[i]);
        sum[i] = d == 0 ? g.clone() : sum[i].add_(g);
      }
    }
    for (std::size_t i = 0; i < params.size() && dp > 1; ++i)
      const_cast<torch::Tensor&>(params[i]).mutable_grad() = sum[i].div_(dp);
    const double norm = std::sqrt(SumInOrder(GradSquares(params)));
    ClipInPlace(params, norm, c.train.grad_clip);
    if (step == 0)
      for (const auto& p : (*model)->named_parameters())
        if (p.value().grad().defined())
          for (int d = 0; d < dp; ++d) run.grads[GradKey(dp, d, p.key())] = p.value().grad().clone();
    opt.step();
    (*model)->UpdateRouterBiases(c.train.bias_update_rate);
    run.losses.push_back(dp == 1 ? loss_sum : loss_sum / dp);
    run.norms.push_back(norm);
  }
  return run;
}

/// The groups of a composed run besides the pipeline (the config's pp).
struct Parallel {
  int dp = 1, ep = 1, tp = 1, etp = 1;
  bool sequence_parallel = false;
  int cp = 1;
  int world(int pp) const { return pp * dp * cp * tp; }
};

/// The reference with experts sharded over EP (and ETP), without a pipeline: dp
/// in-process ranks, each the whole model with its experts (ShardExperts),
/// its replica's micro-batches accumulated as above (the experts see each
/// micro-batch's rows of the EP group together, as in the pipeline), then
/// AverageGradients. Clipping must be off (grad_clip large): the norm of a
/// bank summed over shards is not the single bank's bit for bit.
inline Result<RunResult> EpReference(const PipelineRankConfig& c, int steps, const Parallel& p) {
  const int dp = p.dp;
  RunResult run;
  std::mutex mu;
  const auto statuses = runtime::RunRanks(dp, [&](Communicator& world) -> Status {
    KP_ASSIGN_OR_RETURN(RankGroups groups, MakeRankGroups(world, GroupSizes{1, dp, 1, p.ep, p.etp}));
    ModelOptions options = c.train.options;
    options.seed = c.train.seed;
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildModel(c.train.model, options));
    KP_RETURN_IF_ERROR(ShardExperts(*model, ExpertGroups{groups.ep, groups.etp}));
    model->train();
    const std::vector<torch::Tensor> params = model->TrainableParameters();
    const SplitParameters split = SplitByReplication(*model, params);
    torch::optim::AdamW opt(ParamGroups(params, c.train), torch::optim::AdamWOptions(c.train.lr));
    for (int step = 0; step < steps; ++step) {
      for (auto& g : opt.param_groups())
        static_cast<torch::optim::AdamWOptions&>(g.options()).lr(LearningRate(c.train, step));
      opt.zero_grad();
      torch::Tensor loss = torch::full({1}, AccumulateReplica(*model, c, BatchTensor(c, step), groups.dp_rank, dp) /
                                                c.microbatches, torch::kDouble);
      KP_RETURN_IF_ERROR(AverageGradients(split, groups.Replicas()));
      KP_RETURN_IF_ERROR(groups.dp->AllReduceSum(loss));
      {
        std::lock_guard<std::mutex> lock(mu);  // not held across a collective
        if (world.rank() == 0) run.losses.push_back(loss.item<double>() / dp);
        if (step == 0)
          for (const auto& p : model->named_parameters())
            if (p.value().grad().defined()) run.grads[GradKey(dp, groups.dp_rank, p.key())] = p.value().grad().clone();
      }
      opt.step();
      KP_RETURN_IF_ERROR(SumRouterLoads(*model, groups.dp));
      model->UpdateRouterBiases(c.train.bias_update_rate);
    }
    return Status::Ok();
  });
  KP_RETURN_IF_ERROR(FirstError(statuses));
  return run;
}

/// One rank of the pipeline composed with DP, EP, ETP, CP and TP over `world`
/// (pp x dp x cp x tp ranks, MakeRankGroups' layout): `steps` steps, world rank
/// 0's losses and norms, every rank's first step and its stages' gradients
/// after step 1 (with cp > 1 keyed "c<cp rank>/", with tp > 1 "t<tp rank>/"
/// before the name inside GradKey).
inline Status ComposedRank(Communicator& world, PipelineRankConfig c, const Parallel& p, int steps,
                           const StageModuleFactory& factory, RunResult& out, std::mutex& mu) {
  KP_ASSIGN_OR_RETURN(RankGroups groups, MakeRankGroups(world, GroupSizes{c.pp, p.dp, p.tp, p.ep, p.etp, p.cp}));
  c.replicas = ReplicasOf(groups, p.sequence_parallel);
  if (groups.pipeline == nullptr)  // pp 1: a pipeline of this rank alone
    groups.pipeline = groups.owned.emplace_back(PipelineOfOne()).get();
  KP_ASSIGN_OR_RETURN(auto rank, PipelineRank::Create(c, *groups.pipeline, factory));
  const std::string tp_prefix = (p.cp > 1 ? "c" + std::to_string(groups.cp_rank) + "/" : "") +
                                (p.tp > 1 ? "t" + std::to_string(groups.tp_rank) + "/" : "");
  for (int step = 0; step < steps; ++step) {
    KP_ASSIGN_OR_RETURN(PipelineStepResult r, rank->TrainStep(Tokens(c, step)));
    std::lock_guard<std::mutex> lock(mu);
    if (world.rank() == 0) out.losses.push_back(r.loss), out.norms.push_back(r.grad_norm);
    if (step > 0) continue;
    out.step1.push_back(r);
    for (int s : rank->stages())
      if (StageModelImpl* model = ModelOfStage(rank->stage_module(s)))
        for (const auto& param : model->named_parameters())
          if (param.value().grad().defined())
            out.grads[GradKey(p.dp, groups.dp_rank, tp_prefix + param.key())] = param.value().grad().clone();
  }
  return Status::Ok();
}

/// The pipeline on pp x dp x tp in-process ranks.
inline Result<RunResult> Pipeline(const PipelineRankConfig& c, int steps, StageModuleFactory factory = {},
                                  const Parallel& p = {}) {
  RunResult run;
  std::mutex mu;
  const auto statuses = runtime::RunRanks(p.world(c.pp), [&](Communicator& comm) -> Status {
    return ComposedRank(comm, c, p, steps, factory, run, mu);
  });
  KP_RETURN_IF_ERROR(FirstError(statuses));
  return run;
}

/// `whole` (one process's gradients, GradKey(dp, d, name)) as DP rank d
/// (CP rank `cp_rank` of `cp`) holds it with the experts split over ep x
/// etp (tp 1, rank_groups.h): a bank whose shape in `got` differs takes the
/// rank's experts along dim 0 and its FFN slice along the other differing dim.
inline Grads AsExpertShards(const Grads& whole, const Grads& got, int dp, int ep, int etp, int cp = 1,
                            int cp_rank = 0) {
  Grads out;
  for (const auto& [key, g] : whole) {
    const int d = dp > 1 ? std::stoi(key.substr(1, key.find('/') - 1)) : 0;
    const int q = (d * cp + cp_rank) % (ep * etp), ep_rank = q / etp, etp_rank = q % etp;
    torch::Tensor want = g;
    if (const auto it = got.find(key); it != got.end())
      for (std::int64_t i = 0; i < g.dim(); ++i) {
        const std::int64_t n = it->second.size(i);
        if (n != g.size(i)) want = want.narrow(i, (i == 0 ? ep_rank : etp_rank) * n, n);
      }
    out[key] = want;
  }
  return out;
}

/// `whole` (one process's gradients, GradKey(dp, d, name)) as each of `tp`
/// ranks holds it: "t<r>/name", a TP shard (a parameter whose shape in
/// `got` differs from the whole's in one dimension) as rank r's equal slice.
inline Grads AsTensorParallel(const Grads& whole, const Grads& got, int dp, int tp) {
  Grads out;
  for (const auto& [key, g] : whole) {
    const std::size_t slash = dp > 1 ? key.find('/') + 1 : 0;
    for (int r = 0; r < tp; ++r) {
      const std::string mine = key.substr(0, slash) + "t" + std::to_string(r) + "/" + key.substr(slash);
      const auto it = got.find(mine);
      torch::Tensor want = g;
      if (it != got.end())
        for (std::int64_t d = 0; d < g.dim(); ++d)
          if (it->second.size(d) != g.size(d)) want = g.narrow(d, r * it->second.size(d), it->second.size(d));
      out[mine] = want;
    }
  }
  return out;
}

/// CP rank k's gradients of `got` (ComposedRank's keys), keyed as without CP.
inline Grads OfContextRank(const Grads& got, int k) {
  const std::string tag = "c" + std::to_string(k) + "/";
  Grads out;
  for (const auto& [key, g] : got) {
    const std::size_t at = key.rfind('d', 0) == 0 ? key.find('/') + 1 : 0;
    if (key.compare(at, tag.size(), tag) == 0) out[key.substr(0, at) + key.substr(at + tag.size())] = g;
  }
  return out;
}

/// Bitwise (tolerance 0) or within `tolerance` relative to each tensor's
/// largest entry: every gradient of `want` exists in `got`; `got` has no
/// other. With `only_got`, `want` may hold more (one process's stages).
inline void ExpectSameGrads(const Grads& want, const Grads& got, double tolerance, const std::string& what,
                            bool only_got = false) {
  if (!only_got) {
    ASSERT_EQ(want.size(), got.size()) << what;
  }
  int differing = 0;
  double worst = 0;
  for (const auto& [name, g] : only_got ? got : want) {
    const Grads& other = only_got ? want : got;
    auto it = other.find(name);
    ASSERT_NE(it, other.end()) << what << ": no gradient for " << name;
    if (!torch::equal(g, it->second)) {
      ++differing;
      const double scale = g.abs().max().item<double>() + 1e-30;
      worst = std::max(worst, (g - it->second).abs().max().item<double>() / scale);
    }
  }
  if (tolerance == 0) {
    EXPECT_EQ(differing, 0) << what << ": " << differing << " gradients differ, worst relative " << worst;
  } else {
    EXPECT_LE(worst, tolerance) << what << ": " << differing << " gradients differ";
  }
}

}  // namespace kp::runtime::testing

#endif  // KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_TEST_UTIL_H_
