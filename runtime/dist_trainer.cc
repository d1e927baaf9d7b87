#include "runtime/dist_trainer.h"

#include <cmath>

#include "common/clock.h"
#include "runtime/c10d_communicator.h"
#include "runtime/data.h"
#include "runtime/data_parallel.h"
#include "runtime/expert_parallel.h"
#include "runtime/model.h"
#include "runtime/pipeline_runtime.h"
#include "runtime/pipeline_stage.h"
#include "runtime/trainer_internal.h"

namespace kp::runtime {

namespace {

std::string Str(int v) { return std::to_string(v); }

}  // namespace

bool RunsPipeline() { return true; }

Status ValidateLayout(const ParallelLayout& l, int world, const TrainConfig& c) {
  if (l.pp < 1 || l.vp < 1 || l.dp < 1 || l.ep < 1)
    return Status::InvalidArgument("--pp/--vp/--dp/--ep: must be positive");
  if (l.world() != world)
    return Status::InvalidArgument("--nproc: " + Str(world) + " ranks, but the layout needs pp x dp = " + Str(l.pp) +
                                   " x " + Str(l.dp) + " = " + Str(l.world()));
  if (l.dp % l.ep != 0)
    return Status::InvalidArgument("--ep: " + Str(l.ep) + " must divide --dp " + Str(l.dp) +
                                   " (expert parallelism folds into data parallelism)");
  if (l.ep > 1 && c.model.moe.num_experts % l.ep != 0)
    return Status::InvalidArgument("--ep: " + Str(l.ep) + " does not divide the model's " +
                                   Str(c.model.moe.num_experts) + " routed experts");
  if (l.ep > 1 && c.model.moe.num_experts == 0)
    return Status::InvalidArgument("--ep: the model has no routed experts");
  if (l.ep > 1 && c.lora.enabled())
    return Status::InvalidArgument("--ep: expert parallelism with --lora-rank is not supported yet");
  if (c.batch % l.dp != 0)
    return Status::InvalidArgument("--batch: " + Str(c.batch) + " sequences do not split evenly over dp " + Str(l.dp));
  if ((l.pp > 1 || l.vp > 1) && (c.batch / l.dp) % l.pp != 0)
    return Status::InvalidArgument("--batch: " + Str(c.batch) + " sequences over dp " + Str(l.dp) + " give each replica " +
                                   Str(c.batch / l.dp) + " (one per micro-batch), which must be a multiple of pp " +
                                   Str(l.pp));
  return Status::Ok();
}

struct DistTrainSession::Impl {
  TrainConfig config;
  ParallelLayout layout;
  const FileSystem* fs = nullptr;
  torch::Device device{torch::kCPU};
  std::unique_ptr<Communicator> world;
  RankGroups groups;  // pipeline, DP, EP and expert-DP (data_parallel.h)
  std::shared_ptr<StageModelImpl> model;
  std::vector<torch::Tensor> trainable;
  SplitParameters split;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  std::unique_ptr<TokenSource> data;
  std::unique_ptr<PipelineRank> pipeline;  // pp > 1: this rank's stages, instead of `model`
  int step = 0;

  Status BuildPipeline();
  Result<DistStepMetrics> Step();
  Result<DistStepMetrics> PipelineStep();
};

// The simulator's action lists for this rank over its replica's pipeline
// group, one sequence per micro-batch of the replica's rows, the stages on
// this rank's device, their gradients averaged over the stage's DP group.
Status DistTrainSession::Impl::BuildPipeline() {
  PipelineRankConfig pc;
  pc.train = config;
  pc.train.device = device.str();
  KP_ASSIGN_OR_RETURN(pc.schedule, ParseSchedule(layout.schedule));
  pc.pp = layout.pp;
  pc.vp = layout.vp;
  pc.microbatches = config.batch / layout.dp;
  pc.attnres_cache = layout.attnres_cache;
  pc.replicas = PipelineReplicas{layout.dp > 1 ? groups.dp : nullptr, groups.expert_dp.get(), groups.ep.get()};
  if (groups.pipeline == nullptr) {  // pp 1 x vp > 1 with dp > 1: a pipeline of this rank alone
    KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> alone, world->Subgroup({world->rank()}));
    groups.pipeline = groups.owned.emplace_back(std::move(alone)).get();
  }
  KP_ASSIGN_OR_RETURN(pipeline, PipelineRank::Create(pc, *groups.pipeline));
  return Status::Ok();
}

// Every rank learns every stage's traffic of its replica (the replicas send
// alike): each fills the rows of its own stages and a sum over the pipeline
// group (one contributor per slot) completes them.
Result<DistStepMetrics> DistTrainSession::Impl::PipelineStep() {
  Stopwatch watch;
  const int t = config.seq_len;
  const std::vector<std::int64_t> tokens = data->Batch(step, config.batch, t + 1);
  KP_ASSIGN_OR_RETURN(PipelineStepResult r, pipeline->TrainStep(tokens));
  const int stages = layout.pp * layout.vp;
  torch::Tensor table = torch::zeros({stages, 2, 2}, torch::kDouble);
  for (const PipelineTraffic& x : r.traffic) {
    table[x.stage][x.forward ? 0 : 1][0] += static_cast<double>(x.entries);
    table[x.stage][x.forward ? 0 : 1][1] += static_cast<double>(x.entry_bytes + x.hidden_bytes);
  }
  table = table.to(device);
  KP_RETURN_IF_ERROR(groups.pipeline->AllReduceSum(table));
  table = table.cpu();
  DistStepMetrics out;
  for (int s = 0; s < stages; ++s)
    for (int d = 0; d < 2; ++d)
      if (table[s][d][1].item<double>() > 0)
        out.traffic.push_back(TrafficRow{s, d == 0 ? "forward" : "backward",
                                         static_cast<std::int64_t>(table[s][d][0].item<double>()),
                                         static_cast<std::int64_t>(table[s][d][1].item<double>())});
  ++step;
  StepMetrics& m = out.step;
  m.step = step;
  m.loss = r.loss;
  m.grad_norm = r.grad_norm;
  m.lr = r.lr;
  m.step_seconds = watch.Seconds();
  m.tokens_per_s = config.batch * t / std::max(m.step_seconds, 1e-9);
  m.peak_memory_bytes = PeakRssBytes(*fs);
  return out;
}

Result<DistStepMetrics> DistTrainSession::Impl::Step() {
  if (pipeline) return PipelineStep();
  Stopwatch watch;
  DistStepMetrics out;
  StepMetrics& m = out.step;
  const int t = config.seq_len, rows = config.batch / layout.dp, dp_rank = groups.dp_rank;
  Communicator* dp = groups.dp;
  // The whole batch is a pure function of (seed, step); each DP rank keeps its rows.
  std::vector<std::int64_t> tokens = data->Batch(step, config.batch, t + 1);
  const torch::Tensor batch = torch::from_blob(tokens.data(), {config.batch, t + 1}, torch::kLong)
                                  .narrow(0, dp_rank * rows, rows)
                                  .clone()
                                  .to(device);
  m.lr = LearningRate(config, step);
  for (auto& group : optimizer->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(m.lr);
  optimizer->zero_grad();
  ForwardContext ctx;
  ctx.record_router_load = true;
  const torch::Tensor logits = model->forward(batch.narrow(1, 0, t), ctx);
  const torch::Tensor loss = LanguageModelLoss(logits, batch.narrow(1, 1, t));
  loss.backward();
  const ReplicaGroups replicas = groups.Replicas();
  KP_RETURN_IF_ERROR(AverageGradients(split, replicas));
  torch::Tensor loss_sum = loss.detach().to(torch::kDouble).reshape({1}).clone();
  if (dp->size() > 1) KP_RETURN_IF_ERROR(dp->AllReduceSum(loss_sum));
  m.loss = loss_sum.item<double>() / layout.dp;
  KP_ASSIGN_OR_RETURN(m.grad_norm, ClipGradientNorm(trainable, split, replicas, config.grad_clip));
  if (!std::isfinite(m.loss) || !std::isfinite(m.grad_norm))
    return Status::Internal("step " + Str(step + 1) + ": the loss or the gradient became non-finite (loss " +
                            std::to_string(m.loss) + ", grad norm " + std::to_string(m.grad_norm) + "); lower --lr");
  optimizer->step();
  KP_RETURN_IF_ERROR(SumRouterLoads(*model, dp));
  if (config.bias_update_rate > 0) model->UpdateRouterBiases(config.bias_update_rate);
  ++step;
  m.step = step;
  m.step_seconds = watch.Seconds();
  m.tokens_per_s = config.batch * t / std::max(m.step_seconds, 1e-9);
  m.peak_memory_bytes = PeakRssBytes(*fs);
  return out;
}

DistTrainSession::DistTrainSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DistTrainSession::~DistTrainSession() = default;

Result<std::unique_ptr<DistTrainSession>> DistTrainSession::Create(const TrainConfig& config,
                                                                   const ParallelLayout& layout,
                                                                   const Rendezvous& rendezvous,
                                                                   const C10dOptions& c10d, const FileSystem& fs) {
  KP_RETURN_IF_ERROR(ValidateTrainConfig(config));
  KP_RETURN_IF_ERROR(ValidateForRuntime(config.model));
  KP_RETURN_IF_ERROR(ValidateLayout(layout, rendezvous.world_size, config));
  if (!config.resume.empty()) return Status::InvalidArgument("--resume: not supported by `run` yet");
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.options.seed = config.seed;
  impl->layout = layout;
  impl->fs = &fs;
  KP_ASSIGN_OR_RETURN(impl->device, ParseDevice(config.device));
  if (impl->device.is_cuda() && impl->device.index() < 0)
    impl->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rendezvous.local_rank));
  if (config.data.source == "synthetic") {
    impl->data = std::make_unique<SyntheticCorpus>(config.model.vocab, config.seed ^ kDataSalt);
  } else {
    KP_ASSIGN_OR_RETURN(auto file, TokenFile::Open(fs, config.data.source, config.data.token_bytes,
                                                   config.model.vocab, config.seq_len + 1, config.seed ^ kDataSalt));
    impl->data = std::move(file);
  }
  try {
    if (impl->device.is_cuda()) {
      setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
    }
    if (config.deterministic) UseDeterministicAlgorithms(impl->device);
    torch::manual_seed(config.seed);
    KP_ASSIGN_OR_RETURN(impl->world, ConnectC10d(rendezvous, c10d));
    KP_ASSIGN_OR_RETURN(impl->groups, MakeRankGroups(*impl->world, layout.pp, layout.dp, layout.ep));
    if (layout.pp > 1 || layout.vp > 1) {
      KP_RETURN_IF_ERROR(impl->BuildPipeline());
      return std::unique_ptr<DistTrainSession>(new DistTrainSession(std::move(impl)));
    }
    KP_ASSIGN_OR_RETURN(impl->model, BuildModel(config.model, impl->config.options));
    if (config.lora.enabled()) impl->model->EnableLora(config.lora, config.seed);
    KP_RETURN_IF_ERROR(ShardExperts(*impl->model, impl->groups.ep.get()));
    impl->model->to(impl->device);
    impl->model->train();
    impl->trainable = impl->model->TrainableParameters();
    impl->split = SplitByReplication(*impl->model, impl->trainable);
    impl->optimizer = std::make_unique<torch::optim::AdamW>(ParamGroups(impl->trainable, config),
                                                            torch::optim::AdamWOptions(config.lr));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up training: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<DistTrainSession>(new DistTrainSession(std::move(impl)));
}

Result<DistStepMetrics> DistTrainSession::Step() {
  try {
    return impl_->Step();
  } catch (const CommunicationError& e) {
    return Status::IoError(e.what());
  } catch (const c10::Error& e) {
    return Status::Internal("step " + Str(impl_->step + 1) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::IoError("step " + Str(impl_->step + 1) + ": " + e.what());
  }
}

int DistTrainSession::rank() const { return impl_->world->rank(); }
int DistTrainSession::world_size() const { return impl_->world->size(); }
int DistTrainSession::step() const { return impl_->step; }
std::string DistTrainSession::backend() const { return impl_->world->backend(); }
std::int64_t DistTrainSession::local_parameter_count() const {
  if (!impl_->pipeline) return CountElements(impl_->model->parameters());
  std::int64_t n = 0;
  for (int s : impl_->pipeline->stages()) n += CountElements(impl_->pipeline->stage_module(s).TrainableParameters());
  return n;
}
std::string DistTrainSession::data_description() const { return impl_->data->Describe(); }

}  // namespace kp::runtime
