// The split placement of the SDPO loop (sdpo_loop.h): the actor's pipeline,
// the teacher and the rollouts as processes over c10d.
//
// Groups (world ranks, SplitRanks): `pipeline` the actor's ranks; `learners`
// the actor's ranks and the teacher, which see every batch; per pipeline
// rank p, `to_teacher[p]` = {p, teacher} and `to_rollout[p]` = {p, rollouts}:
// the syncs of the tensors of p's stages. Every rank makes the groups it is
// in in this order (learners, to_teacher by p, to_rollout by p), so the
// groups' meetings never wait on each other in a cycle.
//
// Before step 1 the actor's warm start beats over the world once a step
// (ActorRank::WarmStart), the teacher and the rollouts waiting on it; then
// the initial full syncs. Step s, in each rank's order:
//   rollouts: receive the weights of step s - 2 (s >= 3) from every
//             to_rollout[p] in p order, sample their share of batch s, send
//             it to rank 0;
//   rank 0:   (batch s was gathered the step before) broadcast it over
//             learners; after the step gather batch s + 1 before syncing
//             (c10d's Gloo would finish the rollout's send first);
//   actor p:  feedback, the teacher's logits (broadcast from the teacher),
//             the pipeline step, then sync to the teacher (s < S) and to the
//             rollouts (s + 2 <= S);
//   teacher:  feedback, score, broadcast the logits, then receive every
//             to_teacher[p] and update its EMA.
// Wire tensors live on the run's device (NCCL moves device memory only).
#include <algorithm>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/clock.h"
#include "runtime/comm/c10d_communicator.h"
#include "runtime/comm/device.h"
#include "runtime/sdpo/sdpo_loop.h"
#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/weight_sync.h"

namespace kp::runtime {

namespace {

// ---- A batch on the wire: three tensors. ----
// header int64 [kHeaderLength]: samples, response tokens, weight version, forward calls, host reads;
// ints int64 [2 x samples + tokens]: (prompt, length) per sample, then ids;
// reals float64 [1 + tokens]: generation seconds, then log-probabilities.
constexpr int kTagsPerStep = 3;
constexpr std::int64_t kHeaderLength = 5;

struct WireBatch {
  torch::Tensor header, ints, reals;
};

WireBatch Encode(const RolloutBatch& b, torch::Device device) {
  std::int64_t tokens = 0;
  for (const Sample& s : b.samples) tokens += static_cast<std::int64_t>(s.response.size());
  const auto n = static_cast<std::int64_t>(b.samples.size());
  std::vector<std::int64_t> ints;
  std::vector<double> reals = {b.stats.seconds};
  for (const Sample& s : b.samples) {
    ints.push_back(s.prompt);
    ints.push_back(static_cast<std::int64_t>(s.response.size()));
  }
  for (const Sample& s : b.samples) {
    ints.insert(ints.end(), s.response.begin(), s.response.end());
    reals.insert(reals.end(), s.logprobs.begin(), s.logprobs.end());
  }
  return {torch::tensor({n, tokens, b.weight_version, b.stats.forward_calls, b.stats.host_reads}, torch::kLong).to(device),
          torch::tensor(ints, torch::kLong).to(device), torch::tensor(reals, torch::kDouble).to(device)};
}

// The buffers for a batch whose header has arrived.
WireBatch Buffers(const torch::Tensor& header, torch::Device device) {
  const torch::Tensor h = header.cpu();
  const std::int64_t n = h[0].item<std::int64_t>(), tokens = h[1].item<std::int64_t>();
  return {header, torch::zeros({2 * n + tokens}, torch::dtype(torch::kLong).device(device)),
          torch::zeros({1 + tokens}, torch::dtype(torch::kDouble).device(device))};
}

RolloutBatch Decode(const WireBatch& w, std::int64_t first_task) {
  const torch::Tensor header = w.header.cpu(), ints = w.ints.cpu().contiguous(), reals = w.reals.cpu().contiguous();
  const std::int64_t n = header[0].item<std::int64_t>();
  RolloutBatch b;
  b.first_task = first_task;
  b.weight_version = header[2].item<std::int64_t>();
  b.stats.forward_calls = header[3].item<std::int64_t>();
  b.stats.host_reads = header[4].item<std::int64_t>();
  b.stats.generated_tokens = header[1].item<std::int64_t>();
  const auto* iv = ints.data_ptr<std::int64_t>();
  const auto* rv = reals.data_ptr<double>();
  b.stats.seconds = rv[0];
  std::int64_t at = 2 * n, lp = 1;
  for (std::int64_t i = 0; i < n; ++i) {
    Sample s;
    s.prompt = static_cast<int>(iv[2 * i]);
    const std::int64_t len = iv[2 * i + 1];
    s.response.assign(iv + at, iv + at + len);
    s.logprobs.assign(rv + lp, rv + lp + len);
    s.stopped = len > 0 && s.response.back() == ByteTokenizer::kEos;
    at += len;
    lp += len;
    b.samples.push_back(std::move(s));
  }
  return b;
}

Status SendBatch(Communicator& world, const RolloutBatch& b, int step, torch::Device device) {
  const WireBatch w = Encode(b, device);
  const int tag = step * kTagsPerStep;
  KP_RETURN_IF_ERROR(world.Send(w.header, 0, tag));
  KP_RETURN_IF_ERROR(world.Send(w.ints, 0, tag + 1));
  return world.Send(w.reals, 0, tag + 2);
}

Result<RolloutBatch> RecvBatch(Communicator& world, int src, int step, torch::Device device) {
  const int tag = step * kTagsPerStep;
  torch::Tensor header = torch::zeros({kHeaderLength}, torch::dtype(torch::kLong).device(device));
  KP_RETURN_IF_ERROR(world.Recv(header, src, tag));
  WireBatch w = Buffers(header, device);
  KP_RETURN_IF_ERROR(world.Recv(w.ints, src, tag + 1));
  KP_RETURN_IF_ERROR(world.Recv(w.reals, src, tag + 2));
  return Decode(w, 0);
}

// Gathers step `step`'s batch from every rollout rank, in rank order.
Result<RolloutBatch> GatherBatch(Communicator& world, const SdpoConfig& c, int step, torch::Device device) {
  const SplitRanks ranks = SplitRanksOf(c);
  RolloutBatch all;
  all.first_task = FirstTask(c, step);
  const int per_rank = c.prompts / c.rollout_ranks;
  for (int i = 0; i < c.rollout_ranks; ++i) {
    const int r = ranks.first_rollout + i;
    Result<RolloutBatch> part = RecvBatch(world, r, step, device);
    if (!part.ok())
      return Status::IoError("rollout rank " + std::to_string(r) + " fell behind or died: no batch for step " +
                             std::to_string(step) + ": " + part.status().message());
    all.weight_version = part->weight_version;
    all.stats.seconds = std::max(all.stats.seconds, part->stats.seconds);
    all.stats.generated_tokens += part->stats.generated_tokens;
    all.stats.forward_calls += part->stats.forward_calls;
    all.stats.host_reads += part->stats.host_reads;
    for (Sample& s : part.value().samples) {
      s.prompt += i * per_rank;
      all.samples.push_back(std::move(s));
    }
  }
  return all;
}

// Rank 0's batch to every learner (a group of one has nothing to do).
Result<RolloutBatch> ShareBatch(Communicator* learners, const RolloutBatch* mine, std::int64_t first_task,
                                torch::Device device) {
  if (learners == nullptr) return *mine;
  WireBatch w;
  if (learners->rank() == 0) {
    w = Encode(*mine, device);
  } else {
    w.header = torch::zeros({kHeaderLength}, torch::dtype(torch::kLong).device(device));
  }
  KP_RETURN_IF_ERROR(learners->Broadcast(w.header, 0));
  if (learners->rank() != 0) w = Buffers(w.header, device);
  KP_RETURN_IF_ERROR(learners->Broadcast(w.ints, 0));
  KP_RETURN_IF_ERROR(learners->Broadcast(w.reals, 0));
  if (learners->rank() == 0) return *mine;
  return Decode(w, first_task);
}

// The teacher's logits [N, L, V] from the teacher (the learners' last member).
Result<torch::Tensor> ShareTeacherLogits(Communicator& learners, torch::Tensor logits, const Feedback& f,
                                         const SdpoConfig& c, torch::Device device) {
  const int root = learners.size() - 1;
  if (learners.rank() != root) {
    std::int64_t longest = 1;
    for (const auto& r : f.responses) longest = std::max<std::int64_t>(longest, r.size());
    logits = torch::empty({static_cast<std::int64_t>(f.responses.size()), longest, c.train.model.vocab},
                          torch::dtype(torch::kFloat).device(device));
  } else {
    logits = logits.to(torch::kFloat).contiguous();
  }
  KP_RETURN_IF_ERROR(learners.Broadcast(logits, root));
  return logits;
}

WeightSyncOptions SyncOptions(const SdpoConfig& c, SyncMode mode) {
  WeightSyncOptions o;
  o.mode = mode;
  o.bucket_bytes = c.sync_bucket_bytes;
  o.root = 0;
  return o;
}

// Which stage holds a tensor of the whole model, by its name: the
// embedding the first, "layers.<l>." the stage of layer l, the rest (the
// head) the last.
int StageOfTensor(const std::string& name, const StageSplit& split) {
  if (name.rfind("embedding.", 0) == 0) return 0;
  if (name.rfind("layers.", 0) == 0) {
    const int layer = std::stoi(name.substr(7));
    for (int s = 0; s < split.num_stages(); ++s)
      if (layer >= split.stages[s].first_layer && layer < split.stages[s].end_layer) return s;
  }
  return split.num_stages() - 1;
}

// A whole model's synced tensors by the pipeline rank that sends them, each
// in the order that rank sends them (its stages in order, as ActorRank::Synced).
Result<std::vector<std::vector<NamedTensor>>> ByPipelineRank(const std::vector<NamedTensor>& whole,
                                                             const SdpoConfig& c) {
  KP_ASSIGN_OR_RETURN(const ActorStages stages, ActorStagesOf(c));
  std::vector<std::vector<NamedTensor>> out(c.actor.pp);
  for (const NamedTensor& t : whole) out[stages.stage_to_rank[StageOfTensor(t.name, stages.split)]].push_back(t);
  return out;
}

// One sync from every pipeline rank, in p order, each into its part of the
// receiver's whole model (ByPipelineRank); returns the version received.
Result<std::int64_t> ReceiveParts(const std::vector<std::unique_ptr<Communicator>>& from_pipeline,
                                  const std::vector<std::vector<NamedTensor>>& parts, std::int64_t required,
                                  const WeightSyncOptions& options) {
  std::int64_t version = 0;
  for (std::size_t p = 0; p < parts.size(); ++p) {
    KP_ASSIGN_OR_RETURN(const SyncStats s, ReceiveWeights(*from_pipeline[p], parts[p], required, options));
    version = s.version;
  }
  return version;
}

// A sync's tensors cloned, to receive the student's weights beside the
// teacher's own.
std::vector<NamedTensor> Scratch(const std::vector<NamedTensor>& like) {
  std::vector<NamedTensor> out;
  for (const NamedTensor& t : like) out.push_back({t.name, t.tensor.detach().clone()});
  return out;
}

// The groups of the split placement (the header's order).
struct SplitGroups {
  std::unique_ptr<Communicator> pipeline, learners;
  std::vector<std::unique_ptr<Communicator>> to_teacher, to_rollout;  // by pipeline rank; null if not a member
};

Result<SplitGroups> MakeGroups(Communicator& world, const SplitRanks& r) {
  SplitGroups g;
  const int me = world.rank();
  std::vector<int> pipeline, learners, rollouts;
  for (int p = 0; p < r.actor; ++p) pipeline.push_back(p);
  learners = pipeline;
  if (r.teacher >= 0) learners.push_back(r.teacher);
  for (int q = r.first_rollout; q < r.world; ++q) rollouts.push_back(q);
  const bool actor = me < r.actor, teacher = me == r.teacher;
  if (actor) {
    KP_ASSIGN_OR_RETURN(g.pipeline, world.Subgroup(pipeline));
  }
  if ((actor || teacher) && learners.size() > 1) {
    KP_ASSIGN_OR_RETURN(g.learners, world.Subgroup(learners));
  }
  g.to_teacher.resize(r.actor);
  g.to_rollout.resize(r.actor);
  for (int p = 0; p < r.actor && r.teacher >= 0; ++p)
    if (me == p || teacher) {
      KP_ASSIGN_OR_RETURN(g.to_teacher[p], world.Subgroup({p, r.teacher}));
    }
  for (int p = 0; p < r.actor; ++p)
    if (me == p || me >= r.first_rollout) {
      std::vector<int> members = {p};
      members.insert(members.end(), rollouts.begin(), rollouts.end());
      KP_ASSIGN_OR_RETURN(g.to_rollout[p], world.Subgroup(members));
    }
  return g;
}

// The sync of the rollouts after a step, summed over the pipeline's ranks
// (their syncs run one after another on the rollouts' side).
Result<SyncStats> SumOverPipeline(Communicator& pipeline, const SyncStats& mine, torch::Device device) {
  if (pipeline.size() == 1) return mine;
  torch::Tensor t =
      torch::tensor({double(mine.bytes), double(mine.buckets), mine.seconds}, torch::kDouble).to(device);
  KP_RETURN_IF_ERROR(pipeline.AllReduceSum(t));
  t = t.cpu();
  SyncStats s = mine;
  s.bytes = static_cast<std::int64_t>(t[0].item<double>());
  s.buckets = static_cast<int>(t[1].item<double>());
  s.seconds = t[2].item<double>();
  return s;
}

// ---------------------------------------------------------------- actor ranks

// What a failed exchange with the teacher says: the learners' broadcasts
// also include the other actor ranks, the {p, teacher} syncs only the teacher.
std::string TeacherLost(const SplitRanks& ranks, int step, bool learners) {
  return "teacher rank " + std::to_string(ranks.teacher) + (learners && ranks.actor > 1 ? " or an actor rank" : "") +
         " fell behind or died at step " + std::to_string(step);
}

std::string RolloutLost(const SplitRanks& ranks, int step) {
  return "a rollout rank (" + std::to_string(ranks.first_rollout) + ".." + std::to_string(ranks.world - 1) +
         ") fell behind or died in the sync after step " + std::to_string(step);
}

Status RunActorRank(const SdpoConfig& c, Communicator& world, SplitGroups& g, const FileSystem& fs,
                    LoopObserver& observer) {
  const SplitRanks ranks = SplitRanksOf(c);
  const int p = world.rank();
  KP_ASSIGN_OR_RETURN(auto actor, ActorRank::Create(c, *g.pipeline, fs));
  const torch::Device device = actor->device();
  KP_ASSIGN_OR_RETURN(const auto counts, actor->CountParameters());
  KP_RETURN_IF_ERROR(observer.OnStart(counts.first, counts.second, actor->tasks().Describe()));
  KP_RETURN_IF_ERROR(actor->WarmStart(observer, &world));
  // The teacher and the rollouts start from the warm-started weights: full syncs.
  if (ranks.teacher >= 0)
    KP_RETURN_IF_ERROR(
        SendWeights(*g.to_teacher[p], actor->Synced(SyncMode::kFull), 0, SyncOptions(c, SyncMode::kFull)).status());
  KP_ASSIGN_OR_RETURN(SyncStats first, SendWeights(*g.to_rollout[p], actor->Synced(SyncMode::kFull, c.rollout_int4_experts), 0,
                                                   SyncOptions(c, SyncMode::kFull)));
  KP_ASSIGN_OR_RETURN(first, SumOverPipeline(*g.pipeline, first, device));
  LoopStepMetrics initial;
  RecordSync(first, SyncMode::kFull, initial);
  KP_RETURN_IF_ERROR(observer.OnInitialSync(initial));
  KP_RETURN_IF_ERROR(actor->BeginLoop());
  const SyncMode mode = LoopSyncMode(c);
  RolloutBatch next;
  double waited = 0;
  if (p == 0) {
    Stopwatch wait;
    KP_ASSIGN_OR_RETURN(next, GatherBatch(world, c, 1, device));
    waited = wait.Seconds();
  }
  for (int step = 1; step <= c.train.steps; ++step) {
    Stopwatch cycle;
    Result<RolloutBatch> shared = ShareBatch(g.learners.get(), &next, FirstTask(c, step), device);
    if (!shared.ok())
      return shared.status().WithContext(ranks.teacher >= 0 ? TeacherLost(ranks, step, true)
                                                             : "an actor rank fell behind or died at step " +
                                                                   std::to_string(step));
    const RolloutBatch& batch = *shared;
    const Feedback feedback = RunFeedback(c, actor->tasks(), batch);
    torch::Tensor teacher_logits;
    Stopwatch teacher_wait;
    if (ranks.teacher >= 0) {
      Result<torch::Tensor> logits = ShareTeacherLogits(*g.learners, {}, feedback, c, device);
      if (!logits.ok()) return logits.status().WithContext(TeacherLost(ranks, step, true));
      teacher_logits = *logits;
    }
    const double teacher_s = teacher_wait.Seconds();
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch, feedback, teacher_logits));
    m.wait_s = waited;
    if (p == 0 && step < c.train.steps) {
      Stopwatch wait;
      KP_ASSIGN_OR_RETURN(next, GatherBatch(world, c, step + 1, device));
      waited = wait.Seconds();
    }
    if (ranks.teacher >= 0 && step < c.train.steps)
      KP_RETURN_IF_ERROR(SendWeights(*g.to_teacher[p], actor->Synced(mode), step, SyncOptions(c, mode))
                             .status()
                             .WithContext(TeacherLost(ranks, step, false)));
    // Batch s + 2 is the next to need these weights (one step off-policy).
    if (step + 2 <= c.train.steps) {
      Result<SyncStats> sent =
          SendWeights(*g.to_rollout[p], actor->Synced(mode, c.rollout_int4_experts), step, SyncOptions(c, mode));
      if (!sent.ok()) return sent.status().WithContext(RolloutLost(ranks, step));
      SyncStats s = *sent;
      KP_ASSIGN_OR_RETURN(s, SumOverPipeline(*g.pipeline, s, device));
      RecordSync(s, mode, m);
    }
    RecordBatch(batch, feedback, teacher_s, cycle.Seconds() + m.wait_s, m);
    KP_RETURN_IF_ERROR(observer.OnStep(m));
  }
  return world.Barrier();
}

// ---------------------------------------------------------------- teacher

Status RunTeacherRank(const SdpoConfig& c, Communicator& world, SplitGroups& g, const FileSystem& fs) {
  KP_ASSIGN_OR_RETURN(auto teacher, Teacher::Create(c));
  KP_ASSIGN_OR_RETURN(auto tasks, MakeTaskSource(fs, c.task, c.task_options));
  KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(c.train.device));
  KP_RETURN_IF_ERROR(AwaitWarmStart(world, device));
  // The initial full weights go straight into the teacher: teacher = student.
  KP_ASSIGN_OR_RETURN(auto initial, ByPipelineRank(teacher->Synced(SyncMode::kFull), c));
  KP_RETURN_IF_ERROR(ReceiveParts(g.to_teacher, initial, 0, SyncOptions(c, SyncMode::kFull)).status());
  teacher->BeginLoop();
  const SyncMode mode = LoopSyncMode(c);
  const std::vector<NamedTensor> student = Scratch(teacher->Synced(mode));
  KP_ASSIGN_OR_RETURN(auto parts, ByPipelineRank(student, c));
  for (int step = 1; step <= c.train.steps; ++step) {
    KP_ASSIGN_OR_RETURN(const RolloutBatch batch, ShareBatch(g.learners.get(), nullptr, FirstTask(c, step), device));
    const Feedback feedback = RunFeedback(c, *tasks, batch);
    KP_RETURN_IF_ERROR(ShareTeacherLogits(*g.learners, teacher->Score(feedback), feedback, c, device).status());
    if (step == c.train.steps) break;
    KP_RETURN_IF_ERROR(ReceiveParts(g.to_teacher, parts, step, SyncOptions(c, mode)).status());
    KP_RETURN_IF_ERROR(teacher->Update(student));
  }
  return world.Barrier();
}

// ---------------------------------------------------------------- rollouts

Status RunRolloutRank(const SdpoConfig& c, Communicator& world, SplitGroups& g, const FileSystem& fs) {
  const SplitRanks ranks = SplitRanksOf(c);
  KP_ASSIGN_OR_RETURN(auto rollout, Rollout::Create(c, fs));
  KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(c.train.device));
  KP_RETURN_IF_ERROR(AwaitWarmStart(world, device));
  KP_ASSIGN_OR_RETURN(auto initial, ByPipelineRank(rollout->Synced(SyncMode::kFull), c));
  KP_RETURN_IF_ERROR(ReceiveParts(g.to_rollout, initial, 0, SyncOptions(c, SyncMode::kFull)).status());
  rollout->BeginLoop();
  const SyncMode mode = LoopSyncMode(c);
  KP_ASSIGN_OR_RETURN(auto parts, ByPipelineRank(rollout->Synced(mode), c));
  const int per_rank = c.prompts / c.rollout_ranks;
  const int index = world.rank() - ranks.first_rollout;
  std::int64_t version = 0;
  for (int step = 1; step <= c.train.steps; ++step) {
    if (step >= 3) {
      // Batch s needs the weights of step s - 2 or newer; older ones are refused.
      KP_ASSIGN_OR_RETURN(version, ReceiveParts(g.to_rollout, parts, step - 2, SyncOptions(c, mode)));
    }
    // Seeded by the rollout's index: one rollout rank samples what the
    // colocated placement's rollout samples.
    KP_ASSIGN_OR_RETURN(RolloutBatch b,
                        rollout->Generate(step, FirstTask(c, step) + index * per_rank, per_rank, version, index));
    KP_RETURN_IF_ERROR(SendBatch(world, b, step, device));
  }
  return world.Barrier();
}

}  // namespace

Status RunSplitLoopRank(const SdpoConfig& given, const Rendezvous& rendezvous, const C10dOptions& c10d,
                        const FileSystem& fs, LoopObserver& observer) {
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(given));
  // --device cuda: each rank on its own GPU, cuda:LOCAL_RANK (NCCL refuses
  // two ranks of a group on one device).
  SdpoConfig config = given;
  if (config.train.device == "cuda") config.train.device = "cuda:" + std::to_string(rendezvous.local_rank);
  const SplitRanks ranks = SplitRanksOf(config);
  if (rendezvous.world_size != ranks.world)
    return Status::InvalidArgument(
        "--rollout-ranks: the split loop needs " + std::to_string(ranks.actor) + " actor rank(s) (--pp)" +
        (ranks.teacher >= 0 ? " + 1 teacher rank" : "") + " + " + std::to_string(config.rollout_ranks) +
        " rollout rank(s), but WORLD_SIZE is " + std::to_string(rendezvous.world_size));
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> world, ConnectC10d(rendezvous, c10d));
  KP_ASSIGN_OR_RETURN(SplitGroups groups, MakeGroups(*world, ranks));
  try {
    if (world->rank() < ranks.actor) return RunActorRank(config, *world, groups, fs, observer);
    if (world->rank() == ranks.teacher) return RunTeacherRank(config, *world, groups, fs);
    return RunRolloutRank(config, *world, groups, fs);
  } catch (const c10::Error& e) {
    return Status::Internal("rank " + std::to_string(world->rank()) + ": " + e.what_without_backtrace());
  }
}

}  // namespace kp::runtime
