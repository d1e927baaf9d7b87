#include "runtime/train/dist_trainer.h"

#include <algorithm>

#include "runtime/comm/c10d_communicator.h"
#include "runtime/comm/device.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/context_parallel.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/train/trainer_internal.h"
#include "schedules/schedule_generators.h"
#include "specs/schedule_kind.h"

namespace kp::runtime {

namespace {

std::string Str(int v) { return std::to_string(v); }

// A given split must have the schedule's stages and the model's layers.
Status CheckLayoutSplit(const ParallelLayout& l, int layers) {
  if (l.split.stages.empty()) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(l.schedule));
  const int stages = l.pp * StagesPerRank(kind, ScheduleTakesVp(kind) ? l.vp : 1);
  if (l.split.num_stages() != stages)
    return Status::InvalidArgument("--layer-split: " + Str(l.split.num_stages()) + " stages, but pp " + Str(l.pp) +
                                   " under " + l.schedule + " runs " + Str(stages));
  int total = 0;
  for (const StageLayers& s : l.split.stages) total += s.layer_count();
  if (total != layers)
    return Status::InvalidArgument("--layer-split: the stages hold " + Str(total) + " layers, the model has " +
                                   Str(layers));
  return Status::Ok();
}

}  // namespace

int ParallelLayout::MicroBatches(int batch) const {
  const int rows = batch / std::max(1, dp);
  if (micro_batch > 0) return rows / micro_batch;
  return pp > 1 || vp > 1 ? rows : 1;
}

Status ValidateLayout(const ParallelLayout& l, int world, const TrainConfig& c) {
  if (l.pp < 1 || l.vp < 1 || l.dp < 1 || l.ep < 1 || l.etp < 1 || l.tp < 1 || l.cp < 1)
    return Status::InvalidArgument("--pp/--vp/--dp/--ep/--etp/--tp/--cp: must be positive");
  if (l.world() != world)
    return Status::InvalidArgument("--nproc: " + Str(world) + " ranks, but the layout needs pp x dp x cp x tp = " +
                                   Str(l.pp) + " x " + Str(l.dp) + " x " + Str(l.cp) + " x " + Str(l.tp) + " = " +
                                   Str(l.world()));
  if (l.cp > 1 && c.lora.enabled())
    return Status::InvalidArgument("--cp: context parallelism with --lora-rank is not supported yet");
  KP_RETURN_IF_ERROR(CheckContextSplit(l.cp, c.seq_len, KdaConvReach(c.model)));
  for (const auto& [flag, v] : {std::pair{"--ep", l.ep}, {"--etp", l.etp}}) {
    if (v == 1) continue;
    const std::string f = flag;
    if (l.tp > 1 && !l.sequence_parallel)
      return Status::InvalidArgument("--sequence-parallel: --tp with " + f +
                                     " needs it on (each TP rank must route its own tokens)");
    if (c.model.moe.num_experts == 0) return Status::InvalidArgument(f + ": the model has no routed experts");
    if (c.lora.enabled())
      return Status::InvalidArgument(f + ": splitting experts with --lora-rank is not supported yet");
  }
  if (l.tp > 1 && c.lora.enabled())
    return Status::InvalidArgument("--tp: tensor parallelism with --lora-rank is not supported yet");
  KP_RETURN_IF_ERROR(CheckTensorParallelSplit(c.model, l.tp, l.sequence_parallel, c.seq_len / l.cp));
  if ((l.tp * l.dp * l.cp) % (l.ep * l.etp) != 0)
    return Status::InvalidArgument(std::string(l.etp > 1 ? "--etp" : "--ep") + ": ep x etp = " + Str(l.ep) + " x " +
                                   Str(l.etp) + " must divide tp x dp x cp = " + Str(l.tp) + " x " + Str(l.dp) +
                                   " x " + Str(l.cp) + " (Megatron's MoE folding)");
  if (l.ep > 1 && c.model.moe.num_experts % l.ep != 0)
    return Status::InvalidArgument("--ep: " + Str(l.ep) + " does not divide the model's " +
                                   Str(c.model.moe.num_experts) + " routed experts");
  if (l.etp > 1 && c.model.moe.expert_ffn % l.etp != 0)
    return Status::InvalidArgument("--etp: " + Str(l.etp) + " does not divide the expert FFN width " +
                                   Str(c.model.moe.expert_ffn));
  if (c.model.mtp_layers > 0)
    return Status::InvalidArgument("--model: " + c.model.name + " has " + Str(c.model.mtp_layers) +
                                   " MTP layers; the native runtime builds none");
  KP_RETURN_IF_ERROR(CheckLayoutSplit(l, c.model.layers));
  if (c.batch % l.dp != 0)
    return Status::InvalidArgument("--batch: " + Str(c.batch) + " sequences do not split evenly over dp " + Str(l.dp));
  if (l.micro_batch < 0 || (l.micro_batch > 0 && (c.batch / l.dp) % l.micro_batch != 0))
    return Status::InvalidArgument("--micro-batch: " + Str(l.micro_batch) + " does not divide a replica's " +
                                   Str(c.batch / l.dp) + " sequences (batch " + Str(c.batch) + " over dp " +
                                   Str(l.dp) + ")");
  if ((l.pp > 1 || l.vp > 1) && l.MicroBatches(c.batch) % l.pp != 0)
    return Status::InvalidArgument("--batch: a pipeline replica runs " + Str(l.MicroBatches(c.batch)) +
                                   " micro-batches (batch " + Str(c.batch) + " over dp " + Str(l.dp) +
                                   (l.micro_batch > 0 ? ", micro-batch " + Str(l.micro_batch) : std::string()) +
                                   "), which must be a multiple of pp " + Str(l.pp));
  return Status::Ok();
}

Result<std::vector<std::int64_t>> ParametersPerPipelineRank(const ParallelLayout& l, const TrainConfig& c) {
  KP_ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(l.schedule));
  KP_ASSIGN_OR_RETURN(const PipelineSchedule schedule,
                      GenerateSchedule(kind, l.pp, ScheduleTakesVp(kind) ? l.vp : 1, l.pp));
  StageSplit split = l.split;
  if (split.stages.empty()) {
    KP_ASSIGN_OR_RETURN(split, EvenSplit(c.model.layers, schedule.num_stages));
  }
  split.stages.front().embedding = true;
  split.stages.back().head = true;
  // Rank 0 of each group stands for all: the shards are equal. Sharding
  // only asks a group its rank and size; nothing is sent.
  auto group = [](int n) { return n > 1 ? MakeInProcessCommunicator(MakeInProcessWorld(n), 0) : nullptr; };
  const std::unique_ptr<Communicator> tp = group(l.tp), ep = group(l.ep), etp = group(l.etp);
  ModelOptions options = c.options;
  options.deferred_init = true;
  std::vector<std::int64_t> counts(l.pp, 0);
  for (int s = 0; s < schedule.num_stages; ++s) {
    KP_ASSIGN_OR_RETURN(std::shared_ptr<StageModelImpl> model, BuildStage(c.model, options, split.stages[s]));
    KP_RETURN_IF_ERROR(ShardExperts(*model, ExpertGroups{ep.get(), etp.get()}));
    if (tp) KP_RETURN_IF_ERROR(ShardTensorParallel(*model, *tp, l.sequence_parallel, c.seq_len / l.cp).status());
    counts[schedule.stage_to_rank[s]] += CountElements(model->parameters());
  }
  return counts;
}

// The rank's stages run as a PipelineRank (the one step) over its
// replica's pipeline group; without a pipeline that group is this rank
// alone and the whole model is its one stage.
struct DistTrainSession::Impl {
  TrainConfig config;
  ParallelLayout layout;
  const FileSystem* fs = nullptr;
  torch::Device device{torch::kCPU};
  std::unique_ptr<Communicator> world;
  RankGroups groups;  // pipeline, DP, EP and expert-DP (rank_groups.h)
  std::unique_ptr<TokenSource> data;
  std::unique_ptr<PipelineRank> pipeline;

  bool Pipelined() const { return layout.pp > 1 || layout.vp > 1; }
  Status BuildPipeline();
  Result<std::vector<TrafficRow>> GatherTraffic(const std::vector<PipelineTraffic>& mine);
  Result<std::vector<double>> GatherPeaks(double mine);
  Result<DistStepMetrics> Step();
  double build_peak_bytes = 0;
};

// The simulator's action lists for this rank over its replica's pipeline
// group, one sequence per micro-batch of the replica's rows (the replica's
// rows at once without a pipeline), the stages on this rank's device,
// their gradients averaged over the stage's DP group.
Status DistTrainSession::Impl::BuildPipeline() {
  PipelineRankConfig pc;
  pc.train = config;
  pc.train.device = device.str();
  KP_ASSIGN_OR_RETURN(pc.schedule, ParseSchedule(layout.schedule));
  pc.pp = layout.pp;
  pc.vp = layout.vp;
  pc.microbatches = layout.MicroBatches(config.batch);
  pc.attnres_cache = layout.attnres_cache;
  pc.split = layout.split;
  pc.replicas = ReplicasOf(groups, layout.sequence_parallel);
  if (groups.pipeline == nullptr)  // pp 1 with dp > 1: a pipeline of this rank alone
    groups.pipeline = groups.owned.emplace_back(PipelineOfOne()).get();
  KP_ASSIGN_OR_RETURN(pipeline, PipelineRank::Create(pc, *groups.pipeline));
  return Status::Ok();
}

// Every rank learns every stage's traffic of its replica (the replicas send
// alike): each fills the rows of its own stages and a sum over the pipeline
// group (one contributor per slot) completes them.
Result<std::vector<TrafficRow>> DistTrainSession::Impl::GatherTraffic(const std::vector<PipelineTraffic>& mine) {
  std::vector<TrafficRow> rows;
  if (!Pipelined()) return rows;
  const int stages = layout.pp * layout.vp;
  torch::Tensor table = torch::zeros({stages, 2, 2}, torch::kDouble);
  for (const PipelineTraffic& x : mine) {
    table[x.stage][x.forward ? 0 : 1][0] += static_cast<double>(x.entries);
    table[x.stage][x.forward ? 0 : 1][1] += static_cast<double>(x.entry_bytes + x.hidden_bytes);
  }
  table = table.to(device);
  KP_RETURN_IF_ERROR(groups.pipeline->AllReduceSum(table));
  table = table.cpu();
  for (int s = 0; s < stages; ++s)
    for (int d = 0; d < 2; ++d)
      if (table[s][d][1].item<double>() > 0)
        rows.push_back(TrafficRow{s, d == 0 ? "forward" : "backward",
                                  static_cast<std::int64_t>(table[s][d][0].item<double>()),
                                  static_cast<std::int64_t>(table[s][d][1].item<double>())});
  return rows;
}

// Each rank fills its own slot; a sum over the world completes the row.
Result<std::vector<double>> DistTrainSession::Impl::GatherPeaks(double mine) {
  torch::Tensor peaks = torch::zeros({world->size()}, torch::kDouble);
  peaks[world->rank()] = mine;
  peaks = peaks.to(device);
  KP_RETURN_IF_ERROR(world->AllReduceSum(peaks));
  peaks = peaks.cpu().contiguous();
  const double* p = peaks.data_ptr<double>();
  return std::vector<double>(p, p + peaks.numel());
}

Result<DistStepMetrics> DistTrainSession::Impl::Step() {
  // The whole batch is a pure function of (seed, step); each DP replica keeps its rows.
  const std::vector<std::int64_t> tokens = data->Batch(pipeline->step(), config.batch, config.seq_len + 1);
  KP_ASSIGN_OR_RETURN(const PipelineStepResult r, pipeline->TrainStep(tokens));
  DistStepMetrics out;
  KP_ASSIGN_OR_RETURN(out.traffic, GatherTraffic(r.traffic));
  // Read after the traffic's exchange, so that every rank's peak covers the
  // same work.
  KP_ASSIGN_OR_RETURN(out.rank_peak_memory_bytes, GatherPeaks(PeakMemoryBytes(device, *fs)));
  KP_ASSIGN_OR_RETURN(out.rank_build_peak_memory_bytes, GatherPeaks(build_peak_bytes));
  out.step = StepMetricsOf(r, config,
                           *std::max_element(out.rank_peak_memory_bytes.begin(), out.rank_peak_memory_bytes.end()));
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
  KP_ASSIGN_OR_RETURN(impl->data, OpenTokenSource(config, fs));
  try {
    torch::manual_seed(config.seed);
    KP_ASSIGN_OR_RETURN(impl->world, ConnectC10d(rendezvous, c10d));
    KP_ASSIGN_OR_RETURN(impl->groups, MakeRankGroups(*impl->world, GroupSizes{layout.pp, layout.dp, layout.tp, layout.ep, layout.etp, layout.cp}));
    KP_RETURN_IF_ERROR(impl->BuildPipeline());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up training: ") + e.what_without_backtrace());
  }
  // The steps' peak is training's; building's (each shard made in fp32,
  // then stored) is kept apart, a transient the planner's figures leave out.
  impl->build_peak_bytes = PeakMemoryBytes(impl->device, *impl->fs);
  ResetPeakMemory(impl->device);
  return std::unique_ptr<DistTrainSession>(new DistTrainSession(std::move(impl)));
}

Result<DistStepMetrics> DistTrainSession::Step() {
  try {
    return impl_->Step();
  } catch (const CommunicationError& e) {
    return Status::IoError(e.what());
  } catch (const c10::Error& e) {
    return Status::Internal("step " + Str(impl_->pipeline->step() + 1) + ": " + e.what_without_backtrace());
  } catch (const std::exception& e) {
    return Status::IoError("step " + Str(impl_->pipeline->step() + 1) + ": " + e.what());
  }
}

int DistTrainSession::rank() const { return impl_->world->rank(); }
int DistTrainSession::world_size() const { return impl_->world->size(); }
int DistTrainSession::step() const { return impl_->pipeline->step(); }
std::string DistTrainSession::backend() const { return impl_->world->backend(); }
std::int64_t DistTrainSession::local_parameter_count() const {
  std::int64_t n = 0;
  for (int s : impl_->pipeline->stages()) n += CountElements(impl_->pipeline->stage_module(s).TrainableParameters());
  return n;
}
std::string DistTrainSession::data_description() const { return impl_->data->Describe(); }

}  // namespace kp::runtime
