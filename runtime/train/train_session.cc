#include "runtime/train/train_session.h"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "common/limits.h"
#include "runtime/comm/c10d_communicator.h"
#include "runtime/comm/device.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/context_parallel.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "runtime/train/trainer_internal.h"
#include "schedules/schedule_generators.h"
#include "specs/presets.h"
#include "specs/schedule_kind.h"
#include "weights/sharded_save.h"

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
struct TrainSession::Impl {
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
  Result<SessionStepMetrics> Step();
  Status Resume(const std::string& path);
  Status ResumePieces(const std::string& dir);
  Status SavePieces(const std::string& dir) const;
  Status InitFrom(const std::string& dir);
  Status Save(const std::string& path) const;
  std::string LayoutKey() const;
  double build_peak_bytes = 0;
  std::string shape_json;
};

// The simulator's action lists for this rank over its replica's pipeline
// group, one sequence per micro-batch of the replica's rows (the replica's
// rows at once without a pipeline), the stages on this rank's device,
// their gradients averaged over the stage's DP group.
Status TrainSession::Impl::BuildPipeline() {
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
Result<std::vector<TrafficRow>> TrainSession::Impl::GatherTraffic(const std::vector<PipelineTraffic>& mine) {
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
Result<std::vector<double>> TrainSession::Impl::GatherPeaks(double mine) {
  if (world->size() == 1) return std::vector<double>{mine};  // no exchange, no device sync
  torch::Tensor peaks = torch::zeros({world->size()}, torch::kDouble);
  peaks[world->rank()] = mine;
  peaks = peaks.to(device);
  KP_RETURN_IF_ERROR(world->AllReduceSum(peaks));
  peaks = peaks.cpu().contiguous();
  const double* p = peaks.data_ptr<double>();
  return std::vector<double>(p, p + peaks.numel());
}

Result<SessionStepMetrics> TrainSession::Impl::Step() {
  // The whole batch is a pure function of (seed, step); each DP replica keeps its rows.
  const std::vector<std::int64_t> tokens = data->Batch(pipeline->step(), config.batch, config.seq_len + 1);
  KP_ASSIGN_OR_RETURN(const PipelineStepResult r, pipeline->TrainStep(tokens));
  SessionStepMetrics out;
  KP_ASSIGN_OR_RETURN(out.traffic, GatherTraffic(r.traffic));
  // Read after the traffic's exchange, so that every rank's peak covers the
  // same work.
  KP_ASSIGN_OR_RETURN(out.rank_peak_memory_bytes, GatherPeaks(PeakMemoryBytes(device, *fs)));
  KP_ASSIGN_OR_RETURN(out.rank_build_peak_memory_bytes, GatherPeaks(build_peak_bytes));
  out.step = StepMetricsOf(r, config,
                           *std::max_element(out.rank_peak_memory_bytes.begin(), out.rank_peak_memory_bytes.end()));
  return out;
}

// ---------------------------------------------------------------- checkpoints

namespace {

std::string ShapeNames(const torch::nn::Module& m) {
  std::ostringstream o;
  for (const auto& p : m.named_parameters()) o << p.key() << c10::str(p.value().sizes()) << ";";
  return o.str();
}

std::string StageKey(int s) { return "stage-" + std::to_string(s); }

// A folder SaveShards wrote (a save folder or one of its step folders), as
// opposed to a file of SaveCheckpoint.
bool IsSave(const FileSystem& fs, const std::string& path) {
  return fs.Exists(path + "/manifest.json") || fs.Exists(path + "/latest");
}

}  // namespace

std::string RankCheckpointPath(const std::string& path, int rank, int world) {
  if (world <= 1) return path;
  const std::string suffix = "-rank-" + std::to_string(rank);
  const bool pt = path.size() > 3 && path.compare(path.size() - 3, 3, ".pt") == 0;
  return pt ? path.substr(0, path.size() - 3) + suffix + ".pt" : path + suffix;
}

// The layout a checkpoint was written by: its files are this layout's shards.
std::string TrainSession::Impl::LayoutKey() const {
  const ParallelLayout& l = layout;
  std::ostringstream o;
  o << "pp " << l.pp << " vp " << l.vp << " dp " << l.dp << " ep " << l.ep << " etp " << l.etp << " cp " << l.cp
    << " tp " << l.tp << (l.tp > 1 && l.sequence_parallel ? " sp" : "") << " " << l.schedule << " stages";
  for (const int n : LayerCounts(l.split)) o << " " << n;
  return o.str();
}

// Format 2: per rank, "stage-S" the model of each stage S it holds, the
// optimizer's state over its parameters, the step, the CPU generator's
// state, the model's shape and the layout; "config" for a reader.
Status TrainSession::Impl::Save(const std::string& base) const {
  const std::string path = RankCheckpointPath(base, world->rank(), world->size());
  try {
    torch::serialize::OutputArchive archive, optimizer_archive;
    archive.write("format", torch::tensor(std::int64_t{2}));
    for (const int s : pipeline->stages()) {
      torch::serialize::OutputArchive model_archive;
      ModelOfStage(pipeline->stage_module(s))->save(model_archive);
      archive.write(StageKey(s), model_archive);
    }
    pipeline->SaveOptimizer(optimizer_archive);
    archive.write("optimizer", optimizer_archive);
    archive.write("step", torch::tensor(static_cast<std::int64_t>(pipeline->step())));
    archive.write("rng", at::detail::getDefaultCPUGenerator().get_state());
    archive.write("shape", c10::IValue(shape_json));
    archive.write("layout", c10::IValue(LayoutKey()));
    archive.write("config", c10::IValue(TrainConfigJson(config)));
    // Written aside and renamed, so a run killed mid-save keeps the last
    // complete checkpoint.
    const std::string tmp = path + ".tmp";
    archive.save_to(tmp);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) return Status::IoError("--checkpoint-dir: cannot write " + path);
  } catch (const c10::Error& e) {
    return Status::IoError("--checkpoint-dir: cannot write " + path + ": " + e.what_without_backtrace());
  }
  return Status::Ok();
}

Status TrainSession::Impl::Resume(const std::string& base) {
  const std::string path = RankCheckpointPath(base, world->rank(), world->size());
  // Through the one bounded reader, so a FIFO or a device is refused before
  // LibTorch would read (or wait on) it.
  Result<std::string> bytes = fs->ReadFile(path, limits::kMaxCheckpointFileBytes);
  if (!bytes.ok()) return bytes.status().WithContext("--resume");
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(bytes->data(), bytes->size());
  } catch (const c10::Error&) {
    return Status::InvalidArgument("--resume: " + path + " is not a kimi-plan checkpoint (not a LibTorch archive)");
  }
  c10::IValue shape, saved_layout;
  if (!archive.try_read("shape", shape) || !shape.isString() || !archive.try_read("layout", saved_layout) ||
      !saved_layout.isString())
    return Status::InvalidArgument("--resume: " + path + " is not a kimi-plan checkpoint of this version");
  const std::string diff = FirstShapeDifference(shape.toStringRef(), shape_json);
  if (!diff.empty())
    return Status::InvalidArgument("--resume: " + path + " is a checkpoint of another shape (" + diff +
                                   "; checkpoint vs this run)");
  if (saved_layout.toStringRef() != LayoutKey())
    return Status::InvalidArgument("--resume: " + path + " was written by the layout \"" + saved_layout.toStringRef() +
                                   "\", this run is \"" + LayoutKey() + "\" (resume on the same layout)");
  int step = 0;
  torch::serialize::InputArchive optimizer_archive;
  try {
    for (const int s : pipeline->stages()) {
      StageModelImpl& m = *ModelOfStage(pipeline->stage_module(s));
      const std::string before = ShapeNames(m);
      torch::serialize::InputArchive model_archive;
      archive.read(StageKey(s), model_archive);
      m.load(model_archive);
      // load() replaces tensors wholesale; a changed shape would slip through.
      if (ShapeNames(m) != before)
        return Status::InvalidArgument("--resume: " + path + " holds parameters of other shapes than this model's");
      m.to(device);
    }
    archive.read("optimizer", optimizer_archive);
    torch::Tensor step_t, rng;
    archive.read("step", step_t);
    archive.read("rng", rng);
    step = static_cast<int>(step_t.item<std::int64_t>());
    torch::NoGradGuard no_grad;
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    gen.set_state(rng);
  } catch (const c10::Error& e) {
    return Status::InvalidArgument("--resume: " + path + " does not fit this model: " + e.what_without_backtrace());
  }
  const Status loaded = pipeline->LoadOptimizer(optimizer_archive, step);
  if (!loaded.ok()) return Status::InvalidArgument("--resume: " + path + ": " + loaded.message());
  if (step > config.steps)
    return Status::InvalidArgument("--steps: the checkpoint is already at step " + std::to_string(step) +
                                   ", beyond --steps " + std::to_string(config.steps));
  return Status::Ok();
}

// A save of any layout: every rank's file complete before rank 0's
// manifest names them, so a failed rank leaves the last good save current.
Status TrainSession::Impl::SavePieces(const std::string& dir) const {
  const int step = pipeline->step();
  const std::string folder = StepFolder(dir, step);
  const Status made = fs->CreateDirectories(folder);
  Status mine = made.ok() ? pipeline->SavePieces(*fs, folder + "/rank-" + std::to_string(world->rank()) + ".safetensors")
                          : made;
  torch::Tensor failed = torch::tensor({mine.ok() ? 0.0 : 1.0}, torch::kDouble).to(device);
  KP_RETURN_IF_ERROR(world->AllReduceSum(failed));
  if (!mine.ok()) return mine.WithContext("--save");
  if (failed.cpu().item<double>() > 0)
    return Status::IoError("--save: another rank could not write its file of " + folder + " (the save is not current)");
  if (world->rank() != 0) return Status::Ok();
  return CommitSave(*fs, dir, SaveManifest{step, world->size(), LayoutKey(), shape_json, ModelSpecToJson(config.model)})
      .WithContext("--save");
}

// The model's shape must match the save's; the layout may be any.
Status TrainSession::Impl::ResumePieces(const std::string& dir) {
  Result<ShardedSave> save = ShardedSave::Open(*fs, dir);
  if (!save.ok()) return save.status().WithContext("--resume");
  const std::string diff = FirstShapeDifference(save->manifest().shape, shape_json);
  if (!diff.empty())
    return Status::InvalidArgument("--resume: " + save->folder() + " is a save of another shape (" + diff +
                                   "; save vs this run)");
  if (save->manifest().step > config.steps)
    return Status::InvalidArgument("--steps: the save is already at step " + std::to_string(save->manifest().step) +
                                   ", beyond --steps " + std::to_string(config.steps));
  const Status loaded = pipeline->LoadPieces(*save);
  if (!loaded.ok() && loaded.message().rfind("--resume", 0) != 0) return loaded.WithContext("--resume");
  return loaded;
}

// Each rank maps the whole folder but reads only its own slices.
Status TrainSession::Impl::InitFrom(const std::string& dir) {
  KP_RETURN_IF_ERROR(CheckCheckpointArchitecture(*fs, dir, config.model).WithContext("--init-from"));
  Result<CheckpointDir> checkpoint = CheckpointDir::Open(*fs, dir);
  if (!checkpoint.ok()) return checkpoint.status().WithContext("--init-from");
  return pipeline->LoadHfWeights(*checkpoint);
}

TrainSession::TrainSession(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TrainSession::~TrainSession() = default;

// What both factories check and set before the world exists.
Result<std::unique_ptr<TrainSession::Impl>> TrainSession::NewImpl(const TrainConfig& config,
                                                                  const ParallelLayout& layout, int world_size,
                                                                  const FileSystem& fs) {
  KP_RETURN_IF_ERROR(ValidateTrainConfig(config));
  KP_RETURN_IF_ERROR(ValidateForRuntime(config.model));
  KP_RETURN_IF_ERROR(ValidateLayout(layout, world_size, config));
  auto impl = std::make_unique<TrainSession::Impl>();
  impl->config = config;
  impl->config.options.seed = config.seed;
  impl->layout = layout;
  impl->fs = &fs;
  KP_ASSIGN_OR_RETURN(impl->device, ParseDevice(config.device));
  KP_ASSIGN_OR_RETURN(impl->data, OpenTokenSource(config, fs));
  impl->shape_json = ModelShapeJson(config.model, config.lora);
  return impl;
}

Result<std::unique_ptr<TrainSession>> TrainSession::Create(const TrainConfig& config, const FileSystem& fs) {
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, NewImpl(config, ParallelLayout{}, 1, fs));
  impl->world = MakeInProcessCommunicator(MakeInProcessWorld(1), 0);
  return Start(std::move(impl));
}

Result<std::unique_ptr<TrainSession>> TrainSession::Create(const TrainConfig& config, const ParallelLayout& layout,
                                                          const Rendezvous& rendezvous, const C10dOptions& c10d,
                                                          const FileSystem& fs) {
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Impl> impl, NewImpl(config, layout, rendezvous.world_size, fs));
  if (impl->device.is_cuda() && impl->device.index() < 0)
    impl->device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(rendezvous.local_rank));
  try {
    KP_ASSIGN_OR_RETURN(impl->world, ConnectC10d(rendezvous, c10d));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("meeting the other ranks: ") + e.what_without_backtrace());
  }
  return Start(std::move(impl));
}

// The groups, this rank's stages and optimizer, then the checkpoint.
Result<std::unique_ptr<TrainSession>> TrainSession::Start(std::unique_ptr<Impl> impl) {
  const ParallelLayout& l = impl->layout;
  try {
    torch::manual_seed(impl->config.seed);
    KP_ASSIGN_OR_RETURN(impl->groups, MakeRankGroups(*impl->world, GroupSizes{l.pp, l.dp, l.tp, l.ep, l.etp, l.cp}));
    KP_RETURN_IF_ERROR(impl->BuildPipeline());
    if (!impl->config.init_from.empty()) KP_RETURN_IF_ERROR(impl->InitFrom(impl->config.init_from));
    const std::string& resume = impl->config.resume;
    if (!resume.empty())
      KP_RETURN_IF_ERROR(IsSave(*impl->fs, resume) ? impl->ResumePieces(resume) : impl->Resume(resume));
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("setting up training: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up training: ") + e.what_without_backtrace());
  }
  // The steps' peak is training's; building's (each shard made in fp32,
  // then stored) is kept apart, a transient the planner's figures leave out.
  impl->build_peak_bytes = PeakMemoryBytes(impl->device, *impl->fs);
  ResetPeakMemory(impl->device);
  return std::unique_ptr<TrainSession>(new TrainSession(std::move(impl)));
}

Result<SessionStepMetrics> TrainSession::Step() {
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

int TrainSession::rank() const { return impl_->world->rank(); }
int TrainSession::world_size() const { return impl_->world->size(); }
int TrainSession::step() const { return impl_->pipeline->step(); }
std::string TrainSession::backend() const { return impl_->world->backend(); }
namespace {

template <typename Parameters>
std::int64_t CountOnStages(PipelineRank& pipeline, Parameters parameters) {
  std::int64_t n = 0;
  for (int s : pipeline.stages()) n += CountElements(parameters(pipeline.stage_module(s)));
  return n;
}

}  // namespace

std::int64_t TrainSession::parameter_count() const {
  return CountOnStages(*impl_->pipeline, [](PipelineStageModule& m) { return ModelOfStage(m)->parameters(); });
}
std::int64_t TrainSession::trainable_count() const {
  return CountOnStages(*impl_->pipeline, [](PipelineStageModule& m) { return m.TrainableParameters(); });
}
Status TrainSession::SaveCheckpoint(const std::string& path) const { return impl_->Save(path); }
Status TrainSession::SaveShards(const std::string& dir) const {
  try {
    return impl_->SavePieces(dir);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("--save: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("--save: ") + e.what_without_backtrace());
  }
}
Status TrainSession::SaveAdapters(const std::string& path) const {
  const std::vector<int> stages = impl_->pipeline->stages();
  if (impl_->world->size() != 1 || stages.size() != 1)
    return Status::InvalidArgument("--save-adapters: needs a run of one process");
  return runtime::SaveAdapters(*ModelOfStage(impl_->pipeline->stage_module(stages[0])), path);
}
std::string TrainSession::data_description() const { return impl_->data->Describe(); }

}  // namespace kp::runtime
