// The colocated placement: actor, teacher and rollout in one process, the
// weights moved by a copy per tensor.
#include "runtime/sdpo/sdpo_loop.h"

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "common/clock.h"
#include "runtime/comm/in_process_communicator.h"
#include "runtime/sdpo/rollout.h"
#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/sdpo_loss.h"
#include "runtime/sdpo/weight_sync.h"

namespace kp::runtime {

// ---------------------------------------------------------------- colocated

namespace {

// The colocated placement's sync: the models live in one process, so the
// weights move by a copy per tensor (the resharding a hybrid engine does),
// measured like the c10d sync.
SyncStats CopyWeights(const std::vector<NamedTensor>& from, const std::vector<NamedTensor>& to,
                      std::int64_t version) {
  Stopwatch watch;
  torch::NoGradGuard no_grad;
  TORCH_CHECK(from.size() == to.size(), "CopyWeights: ", from.size(), " tensors into ", to.size());
  for (std::size_t i = 0; i < from.size(); ++i) {
    TORCH_CHECK(from[i].name == to[i].name, "CopyWeights: ", from[i].name, " into ", to[i].name);
    to[i].tensor.copy_(from[i].tensor);
  }
  SyncStats s;
  s.version = version;
  s.bytes = PayloadBytes(from);
  s.buckets = static_cast<int>(from.size());
  s.seconds = watch.Seconds();
  return s;
}

Status RunColocated(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer) {
  std::unique_ptr<Communicator> alone = MakeInProcessCommunicator(MakeInProcessWorld(1), 0);
  KP_ASSIGN_OR_RETURN(auto actor, ActorRank::Create(config, *alone, fs));
  std::unique_ptr<Teacher> teacher;
  if (config.loss != LossMode::kGrpo) {
    KP_ASSIGN_OR_RETURN(teacher, Teacher::Create(config));
  }
  KP_ASSIGN_OR_RETURN(auto rollout, Rollout::Create(config, fs));
  KP_ASSIGN_OR_RETURN(const auto counts, actor->CountParameters());
  KP_RETURN_IF_ERROR(observer.OnStart(counts.first, counts.second, actor->tasks().Describe()));
  KP_RETURN_IF_ERROR(actor->WarmStart(observer));
  LoopStepMetrics initial;
  const bool int4 = config.rollout_int4_experts;
  RecordSync(CopyWeights(actor->Synced(SyncMode::kFull, int4), rollout->Synced(SyncMode::kFull), 0), SyncMode::kFull,
             initial);
  if (teacher) KP_RETURN_IF_ERROR(teacher->Assign(actor->Synced(SyncMode::kFull)));
  KP_RETURN_IF_ERROR(observer.OnInitialSync(initial));
  KP_RETURN_IF_ERROR(actor->BeginLoop());
  if (teacher) teacher->BeginLoop();
  rollout->BeginLoop();
  const SyncMode mode = LoopSyncMode(config);
  for (int step = 1; step <= config.train.steps; ++step) {
    Stopwatch watch;
    KP_ASSIGN_OR_RETURN(RolloutBatch batch,
                        rollout->Generate(step, FirstTask(config, step), config.prompts, step - 1, 0));
    const Feedback feedback = RunFeedback(config, actor->tasks(), batch);
    torch::Tensor teacher_logits;
    double teacher_s = 0;
    if (teacher) {
      Stopwatch teacher_watch;
      teacher_logits = teacher->Score(feedback);
      teacher_s = teacher_watch.Seconds();
    }
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch, feedback, teacher_logits));
    if (teacher) KP_RETURN_IF_ERROR(teacher->Update(actor->Synced(mode)));
    if (step < config.train.steps)
      RecordSync(CopyWeights(actor->Synced(mode, int4), rollout->Synced(mode), step), mode, m);
    RecordBatch(batch, feedback, teacher_s, watch.Seconds(), m);
    KP_RETURN_IF_ERROR(observer.OnStep(m));
  }
  return Status::Ok();
}

}  // namespace

Status RunColocatedLoop(const SdpoConfig& config, const FileSystem& fs, LoopObserver& observer) {
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(config));
  try {
    return RunColocated(config, fs, observer);
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("the SDPO loop: ") + e.what_without_backtrace());
  }
}

}  // namespace kp::runtime
