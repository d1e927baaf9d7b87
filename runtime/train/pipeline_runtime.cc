// The pipeline rank: its stages built and placed, and a step run through
// its three parts in order: the schedule executor (schedule_executor.h), the
// gradient reducer (gradient_reducer.h) and the optimizer step
// (optimizer_step.h), over one shared PipelineContext.
#include "runtime/train/pipeline_runtime.h"

#include <cmath>
#include <map>

#include "common/clock.h"
#include "runtime/comm/device.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/train/gradient_reducer.h"
#include "runtime/train/optimizer_step.h"
#include "runtime/train/pipeline_context.h"
#include "runtime/train/schedule_executor.h"
#include "runtime/train/sharded_checkpoint.h"
#include "runtime/train/trainer_internal.h"
#include "schedules/schedule_generators.h"

namespace kp::runtime {

PipelineReplicas ReplicasOf(const RankGroups& g, bool sequence_parallel) {
  PipelineReplicas r;
  r.dp = g.dp != nullptr && g.dp->size() > 1 ? g.dp : nullptr;
  r.expert_dp = g.expert_dp;
  r.ep = g.ep;
  r.etp = g.etp;
  r.expert_shards = g.expert_shards;
  r.tp = g.tp;
  r.sequence_parallel = sequence_parallel;
  r.cp = g.cp;
  r.dp_cp = g.dp_cp;
  return r;
}

// ---------------------------------------------------------------- setup

namespace {

Status ValidateConfig(const PipelineRankConfig& c, const Communicator& comm) {
  if (c.pp < 1 || comm.size() != c.pp)
    return Status::InvalidArgument("--pp: " + std::to_string(c.pp) + " does not match the pipeline group's " +
                                   std::to_string(comm.size()) + " ranks");
  const int dp = c.replicas.dp != nullptr ? c.replicas.dp->size() : 1;
  if (c.train.batch % dp != 0)
    return Status::InvalidArgument("--batch: " + std::to_string(c.train.batch) + " sequences do not split evenly over dp " +
                                   std::to_string(dp));
  const int rows = c.train.batch / dp;
  if (c.microbatches < 1 || rows % c.microbatches != 0)
    return Status::InvalidArgument("--microbatches: " + std::to_string(c.microbatches) + " must be positive and divide " +
                                   "the " + std::to_string(rows) + " sequences of a replica (--batch " +
                                   std::to_string(c.train.batch) + " over dp " + std::to_string(dp) + ")");
  if (c.replicas.tp != nullptr && c.replicas.tp->size() > 1 && c.train.lora.enabled())
    return Status::InvalidArgument("--tp: tensor parallelism with LoRA adapters is not supported yet");
  for (const auto& [group, flag] : {std::pair{c.replicas.ep, "--ep"}, std::pair{c.replicas.etp, "--etp"}})
    if (group != nullptr && group->size() > 1 && c.train.lora.enabled())
      return Status::InvalidArgument(std::string(flag) + ": splitting experts with LoRA adapters is not supported yet");
  return ValidateTrainConfig(c.train);
}


}  // namespace

struct PipelineRank::Impl {
  PipelineContext ctx;
  std::unique_ptr<ScheduleExecutor> executor;
  GradientReducer reducer;
  OptimizerStep optimizer;
  int step = 0;

  PipelineRankConfig& config() { return ctx.config; }
  Status Setup(StageModuleFactory factory);
  Status EnableLora(const LoraOptions& lora, std::uint64_t seed);
  Status PlaceStages();
  Status BeginPhase(const TrainConfig& train);
  Result<torch::Tensor> ReplicaTokens(const std::vector<std::int64_t>& tokens) const;
  Status CheckStepShape(int seq_len, const MicroBatchLoss* loss) const;
  Result<PipelineStepResult> TrainStep(const std::vector<std::int64_t>& tokens, int seq_len, MicroBatchLoss* loss);
  Result<double> EvalStep(const std::vector<std::int64_t>& tokens);
  Status LoadHfWeights(const CheckpointDir& checkpoint);
};

Status PipelineRank::Impl::Setup(StageModuleFactory factory) {
  PipelineRankConfig& c = config();
  KP_RETURN_IF_ERROR(ValidateConfig(c, *ctx.comm));
  KP_RETURN_IF_ERROR(ValidateForRuntime(c.train.model));
  c.train.options.seed = c.train.seed;
  KP_ASSIGN_OR_RETURN(ctx.device, ParseDevice(c.train.device));
  if (c.replicas.dp != nullptr) ctx.dp_rank = c.replicas.dp->rank(), ctx.dp_size = c.replicas.dp->size();
  const int vp = ScheduleTakesVp(c.schedule) ? c.vp : 1;
  KP_ASSIGN_OR_RETURN(PipelineSchedule compute, GenerateSchedule(c.schedule, c.pp, vp, ctx.M()));
  KP_ASSIGN_OR_RETURN(ctx.schedule, AddCommunication(compute));
  if (c.split.stages.empty()) {
    KP_ASSIGN_OR_RETURN(c.split, EvenSplit(c.train.model.layers, ctx.schedule.num_stages));
  }
  if (c.split.num_stages() != ctx.schedule.num_stages)
    return Status::InvalidArgument("--split: " + std::to_string(c.split.num_stages()) + " stages, the " +
                                   ScheduleName(c.schedule) + " schedule has " +
                                   std::to_string(ctx.schedule.num_stages));
  // The split's ends are the embedding and the head, whatever the counts say.
  c.split.stages.front().embedding = true;
  c.split.stages.back().head = true;
  KP_ASSIGN_OR_RETURN(std::vector<pipeline_internal::StageRoute> routes, pipeline_internal::Routes(c, ctx.schedule));
  if (!factory)
    factory = [this](int, const StageLayers& layers) {
      // Sharded construction: PlaceStages cuts this rank's shards from the
      // deferred weights before any is made.
      ModelOptions options = config().train.options;
      options.deferred_init = true;
      return MakeModelStage(config().train.model, options, layers);
    };
  for (int s = 0; s < ctx.schedule.num_stages; ++s) {
    if (ctx.RankOf(s) != ctx.rank()) continue;
    KP_ASSIGN_OR_RETURN(ctx.modules[s], factory(s, c.split.stages[s]));
  }
  if (ctx.modules.empty())
    return Status::InvalidArgument("--schedule: rank " + std::to_string(ctx.rank()) + " holds no stage");
  ctx.act_dtype = c.train.options.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat;
  KP_RETURN_IF_ERROR(PlaceStages());
  executor = std::make_unique<ScheduleExecutor>(ctx, std::move(routes));
  KP_RETURN_IF_ERROR(reducer.Collect(ctx));
  optimizer.Reset(ctx, reducer);
  return Status::Ok();
}

// LoRA adapters on every stage, initialised by name so that every split gets
// the single-process model's; a stand-in stage cannot take them.
Status PipelineRank::Impl::EnableLora(const LoraOptions& lora, std::uint64_t seed) {
  for (auto& [s, module] : ctx.modules)
    if (ModelOfStage(*module) == nullptr)
      return Status::InvalidArgument("--lora-rank: stage " + std::to_string(s) + " is a stand-in");
  for (auto& [s, module] : ctx.modules) {
    StageModelImpl* model = ModelOfStage(*module);
    model->EnableLora(lora, seed);
    if (config().train.options.int4_expert_base) KP_RETURN_IF_ERROR(model->QuantizeExpertBase());
    model->to(ctx.device);
  }
  return Status::Ok();
}

// Each model stage's experts sharded over EP and ETP, the stage split over
// TP (while its weights are still deferred, so only this rank's shards are
// ever made), its mixers put on the CP group, its weights made, then the
// adapters a run starts with (never with a split: ValidateConfig), and the
// stage moved to the device.
Status PipelineRank::Impl::PlaceStages() {
  const PipelineRankConfig& c = config();
  for (auto& [s, module] : ctx.modules) {
    StageModelImpl* model = ModelOfStage(*module);
    if (model == nullptr) {
      if (ctx.TensorParallel()) return Status::InvalidArgument("--tp: stage " + std::to_string(s) + " is a stand-in");
      continue;
    }
    KP_RETURN_IF_ERROR(ShardExperts(*model, ExpertGroups{c.replicas.ep, c.replicas.etp}));
    if (ctx.TensorParallel()) {
      KP_ASSIGN_OR_RETURN(ctx.tp_splits[s], ShardTensorParallel(*model, *c.replicas.tp, c.replicas.sequence_parallel,
                                                                c.train.seq_len / ctx.CpSize()));
    }
    if (ctx.ContextParallel()) model->SetContextParallel(ContextShard(c.replicas.cp));
    KP_RETURN_IF_ERROR(model->Materialize());
  }
  if (c.train.lora.enabled()) KP_RETURN_IF_ERROR(EnableLora(c.train.lora, c.train.seed));
  for (auto& [s, module] : ctx.modules)
    if (StageModelImpl* model = ModelOfStage(*module)) model->to(ctx.device);
  return Status::Ok();
}

// LoRA goes on after a full-weight warm start, as a loaded checkpoint's
// would: the adapters are initialised by name, so every split gets the
// single-process model's.
Status PipelineRank::Impl::BeginPhase(const TrainConfig& next) {
  const TrainConfig& now = config().train;
  TrainConfig t = next;
  t.model = now.model;
  t.options = now.options;
  t.device = now.device;
  t.seed = now.seed;
  t.deterministic = now.deterministic;
  PipelineRankConfig c = config();
  c.train = t;
  KP_RETURN_IF_ERROR(ValidateConfig(c, *ctx.comm));
  const bool add_lora = t.lora.enabled() && !now.lora.enabled();
  if (!t.lora.enabled() && now.lora.enabled())
    return Status::InvalidArgument("--lora-rank: a phase cannot drop the LoRA adapters the last one trained");
  if (add_lora) KP_RETURN_IF_ERROR(EnableLora(t.lora, t.seed));
  // The last phase's gradients go: a frozen base would keep them resident.
  for (const torch::Tensor& p : reducer.params()) p.mutable_grad() = torch::Tensor();
  config().train = t;
  KP_RETURN_IF_ERROR(reducer.Collect(ctx));
  optimizer.Reset(ctx, reducer);
  step = 0;
  return Status::Ok();
}

// The optimizer restarts after the load: its masters (bf16 weights, the
// distributed optimizer) are copies of the weights it was built from.
Status PipelineRank::Impl::LoadHfWeights(const CheckpointDir& checkpoint) {
  for (auto& [s, module] : ctx.modules) {
    StageModelImpl* model = ModelOfStage(*module);
    if (model == nullptr) return Status::InvalidArgument("--init-from: stage " + std::to_string(s) + " is a stand-in");
    const Status loaded = LoadHfCheckpoint(*model, checkpoint, RankSlices(ctx, s));
    if (!loaded.ok()) return loaded.WithContext("--init-from");
  }
  optimizer.Reset(ctx, reducer);
  return Status::Ok();
}

// ---------------------------------------------------------------- step

// The step's whole batch [batch, T + 1], this DP replica's rows of it.
Result<torch::Tensor> PipelineRank::Impl::ReplicaTokens(const std::vector<std::int64_t>& t) const {
  const int batch = ctx.config.train.batch;
  const std::int64_t want = std::int64_t(batch) * (ctx.seq_len + 1);
  if (static_cast<std::int64_t>(t.size()) != want)
    return Status::InvalidArgument("tokens: " + std::to_string(t.size()) + " given, --batch x (--seq-len + 1) is " +
                                   std::to_string(want));
  return torch::tensor(t, torch::kLong)
      .reshape({batch, ctx.seq_len + 1})
      .narrow(0, ctx.dp_rank * ctx.ReplicaRows(), ctx.ReplicaRows())
      .to(ctx.device);
}

Status PipelineRank::Impl::CheckStepShape(int T, const MicroBatchLoss* loss) const {
  if (T < 1) return Status::InvalidArgument("seq_len: a step's rows need at least one token, got " + std::to_string(T));
  if (ctx.TensorParallel() && loss != nullptr)
    return Status::InvalidArgument("--tp: a step's own loss (SDPO) with tensor parallelism is not supported yet");
  if (ctx.ContextParallel()) KP_RETURN_IF_ERROR(CheckContextSplit(ctx.CpSize(), T, KdaConvReach(ctx.config.train.model)));
  const PipelineReplicas& r = ctx.config.replicas;
  if (ctx.SequenceParallel() && T / ctx.CpSize() % r.tp->size() != 0)
    return Status::InvalidArgument("--sequence-parallel: --tp " + std::to_string(r.tp->size()) +
                                   " does not divide the step's sequence length " + std::to_string(T) +
                                   (ctx.ContextParallel() ? " over cp " + std::to_string(ctx.CpSize()) : ""));
  return Status::Ok();
}

// The three parts in order: the actions (forwards and backwards), the
// reductions (gradients, norm, loss), the optimizer.
Result<PipelineStepResult> PipelineRank::Impl::TrainStep(const std::vector<std::int64_t>& t, int T,
                                                        MicroBatchLoss* loss) {
  Stopwatch watch;
  KP_RETURN_IF_ERROR(CheckStepShape(T, loss));
  ctx.seq_len = T;
  KP_ASSIGN_OR_RETURN(const torch::Tensor tokens, ReplicaTokens(t));
  PipelineStepResult r;
  r.lr = LearningRate(ctx.config.train, step);
  optimizer.Prepare(reducer.params(), r.lr);
  KP_RETURN_IF_ERROR(executor->Run(tokens, loss, /*training=*/true));
  KP_RETURN_IF_ERROR(reducer.Reduce(ctx, optimizer.shards()));
  KP_ASSIGN_OR_RETURN(r.grad_norm, reducer.GradNorm(ctx, optimizer.shards()));
  KP_ASSIGN_OR_RETURN(r.loss, reducer.Loss(ctx, executor->losses(), loss != nullptr));
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    return Status::Internal("step " + std::to_string(step + 1) + ": the loss or the gradient became non-finite (loss " +
                            std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) + "); lower --lr");
  KP_RETURN_IF_ERROR(optimizer.Apply(r.grad_norm, ctx.config.train.grad_clip));
  for (auto& [s, module] : ctx.modules) {
    if (StageModelImpl* model = ModelOfStage(*module)) KP_RETURN_IF_ERROR(SumRouterLoads(*model, ctx.DenseReplicas()));
    module->AfterStep(ctx.config.train.bias_update_rate);
  }
  r.step = ++step;
  r.traffic = executor->traffic();
  r.step_seconds = watch.Seconds();
  return r;
}

Result<double> PipelineRank::Impl::EvalStep(const std::vector<std::int64_t>& t) {
  ctx.seq_len = ctx.config.train.seq_len;
  KP_ASSIGN_OR_RETURN(const torch::Tensor tokens, ReplicaTokens(t));
  {
    torch::NoGradGuard no_grad;
    KP_RETURN_IF_ERROR(executor->Run(tokens, nullptr, /*training=*/false));
  }
  return reducer.Loss(ctx, executor->losses(), /*own_loss=*/false);
}

// ---------------------------------------------------------------- public

PipelineRank::PipelineRank(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PipelineRank::~PipelineRank() = default;

Result<std::unique_ptr<PipelineRank>> PipelineRank::Create(const PipelineRankConfig& config, Communicator& pp,
                                                           StageModuleFactory factory) {
  auto impl = std::make_unique<Impl>();
  impl->ctx.config = config;
  impl->ctx.comm = &pp;
  try {
    if (config.train.deterministic) UseDeterministicAlgorithms();
    KP_RETURN_IF_ERROR(impl->Setup(std::move(factory)));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up the pipeline rank: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<PipelineRank>(new PipelineRank(std::move(impl)));
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens) {
  return TrainStepWith(tokens, impl_->ctx.config.train.seq_len, nullptr);
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens, int seq_len,
                                                   MicroBatchLoss& loss) {
  return TrainStepWith(tokens, seq_len, &loss);
}

Status PipelineRank::BeginPhase(const TrainConfig& train) {
  try {
    return impl_->BeginPhase(train);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("starting a training phase: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("starting a training phase: ") + e.what_without_backtrace());
  }
}

Result<PipelineStepResult> PipelineRank::TrainStepWith(const std::vector<std::int64_t>& tokens, int seq_len,
                                                       MicroBatchLoss* loss) {
  // A loss's shares are indexed by the micro-batch alone (pipeline_stage.h):
  // a replica's rows would need their offset in the batch too.
  if (loss != nullptr && impl_->ctx.dp_size > 1)
    return Status::InvalidArgument("--dp: a step with its own loss runs on one pipeline replica, got dp " +
                                   std::to_string(impl_->ctx.dp_size));
  if (loss != nullptr && impl_->ctx.ContextParallel())
    return Status::InvalidArgument("--cp: a step's own loss (SDPO) with context parallelism is not supported yet");
  try {
    return impl_->TrainStep(tokens, seq_len, loss);
  } catch (const CommunicationError& e) {
    return Status::IoError("step " + std::to_string(impl_->step + 1) + ": " + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal("step " + std::to_string(impl_->step + 1) + ": " + e.what_without_backtrace());
  }
}

Result<double> PipelineRank::EvalStep(const std::vector<std::int64_t>& tokens) {
  try {
    return impl_->EvalStep(tokens);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("eval: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("eval: ") + e.what_without_backtrace());
  }
}

Status PipelineRank::LoadHfWeights(const CheckpointDir& checkpoint) {
  try {
    return impl_->LoadHfWeights(checkpoint);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("--init-from: ") + e.what_without_backtrace());
  }
}

Status PipelineRank::SavePieces(const FileSystem& fs, const std::string& path) const {
  try {
    return WriteRankPieces(impl_->ctx, impl_->reducer, impl_->optimizer, fs, path);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("--save: ") + e.what_without_backtrace());
  }
}

Status PipelineRank::LoadPieces(const ShardedSave& save) {
  try {
    KP_RETURN_IF_ERROR(ReadRankPieces(impl_->ctx, impl_->reducer, impl_->optimizer, save));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("--resume: ") + e.what_without_backtrace());
  }
  impl_->step = save.manifest().step;
  return Status::Ok();
}

int PipelineRank::step() const { return impl_->step; }

void PipelineRank::SaveOptimizer(torch::serialize::OutputArchive& archive) const { impl_->optimizer.Save(archive); }

Status PipelineRank::LoadOptimizer(torch::serialize::InputArchive& archive, int step) {
  KP_RETURN_IF_ERROR(impl_->optimizer.Load(archive));
  impl_->step = step;
  return Status::Ok();
}

std::vector<int> PipelineRank::stages() const {
  std::vector<int> out;
  for (const auto& [s, m] : impl_->ctx.modules) out.push_back(s);
  return out;
}

PipelineStageModule& PipelineRank::stage_module(int s) { return *impl_->ctx.modules.at(s); }

void InjectFaults(PipelineRank& rank, const ExecutorFaults& faults) { rank.impl_->executor->set_faults(faults); }

}  // namespace kp::runtime
