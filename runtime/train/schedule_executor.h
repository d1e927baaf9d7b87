// The schedule executor: one step's actions of this pipeline rank (F, I/B,
// W, SEND_F/RECV_F/SEND_B/RECV_B, pipeline_schedule.h), and the transfers
// they make: the hidden state and the Block Attention Residual payload of
// torchtitan PR #4312, the whole stack on every hop (naive) or, with the
// rank cache, only what the receiving rank lacks. What is sent, stored,
// deposited and collected is read off schedules/attnres_transport.h's
// routing tables (Routes). It runs the forwards and backwards; it neither
// reduces gradients nor steps the optimizer. Internal to runtime/train/.
// Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_SCHEDULE_EXECUTOR_H_
#define KIMI_PLAN_RUNTIME_TRAIN_SCHEDULE_EXECUTOR_H_

#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/train/pipeline_context.h"

namespace kp::runtime {

namespace pipeline_internal {

using Entries = std::vector<int>;

/// One stage's routing, by stack-entry index, read off the simulator's
/// tables (AttnResStageRow) for the transport this run uses.
struct StageRoute {
  int stack_before = 0;  ///< entries of the stack the stage receives
  Entries wire_in;       ///< entries on the hop from stage - 1, in wire order
  Entries held;          ///< entries read from the rank store (cache on)
  Entries committed;     ///< entries this stage appends
  Entries deposits;      ///< gradients deposited in the rank store (cache on)
  std::vector<std::pair<int, Entries>> collects;  ///< (later stage, entries) this stage collects (cache on)
};

/// What crosses a hop: the hidden state and the listed stack entries (or
/// their gradients), each [b, T, D].
struct Payload {
  torch::Tensor hidden;
  std::vector<torch::Tensor> entries;
};

/// The rank store of PR #4312, shared by the rank's stages: the stack
/// entries of each in-flight micro-batch, and the gradient deposits of the
/// stages that read them, until the stage that put them there collects them.
class RankStore {
 public:
  void Put(int mb, int entry, torch::Tensor t) { blocks_[mb][entry] = std::move(t); }
  Result<torch::Tensor> Get(int mb, int entry, int stage) const;
  void Release(int mb) { blocks_.erase(mb); }
  void Deposit(int mb, int from_stage, int entry, torch::Tensor g) { deposits_[mb][{from_stage, entry}] = std::move(g); }
  /// Removes and returns the deposit, or an undefined tensor.
  torch::Tensor Take(int mb, int from_stage, int entry);
  /// The deposits of `mb` nobody collected: (stage, entry) pairs.
  std::vector<std::pair<int, int>> Left(int mb) const;
  bool empty() const { return blocks_.empty() && deposits_.empty(); }
  void Clear() { blocks_.clear(), deposits_.clear(); }

 private:
  std::map<int, std::map<int, torch::Tensor>> blocks_;
  std::map<int, std::map<std::pair<int, int>, torch::Tensor>> deposits_;
};

/// What a stage's backward needs of its forward.
struct ForwardState {
  torch::Tensor hidden_in;              ///< leaf (undefined on stage 0)
  std::vector<torch::Tensor> stack_in;  ///< leaves, by entry
  ResidualStream out;                   ///< the stage's output (not on the last stage)
  torch::Tensor scaled_loss;            ///< the last stage: loss_m / M
};

using Key = std::pair<int, int>;  ///< (stage, micro-batch)

/// The routes of every stage of `schedule`. With the cache on, the
/// schedule's stage-to-rank map must be loop style (the simulator refuses
/// any other, naming the schedule and the first stage off it).
Result<std::vector<StageRoute>> Routes(const PipelineRankConfig& c, const PipelineSchedule& schedule);

}  // namespace pipeline_internal

/// Faults a test injects into the executor (never set in a run).
struct ExecutorFaults {
  /// The stage whose first deposit of micro-batch 0 is dropped (-1: none);
  /// the step must then fail with the deposit-count error.
  int drop_deposit_of_stage = -1;
};

class ScheduleExecutor {
 public:
  /// `context` must outlive the executor; its modules and schedule are read
  /// at every step.
  ScheduleExecutor(const PipelineContext& context, std::vector<pipeline_internal::StageRoute> routes);

  /// Runs this rank's action list once over `tokens` (the replica's rows
  /// [rows, context.seq_len + 1] on the device): forwards, and when
  /// `training` the backwards, which leave the gradients accumulated in the
  /// stages' parameters. `loss` (may be null: the language-model loss) is
  /// the step's own loss. Afterwards losses() holds the last stage's
  /// micro-batch losses, [M] fp64 on the step's device, never read by the
  /// host during the actions (zeros on other ranks), and traffic() this rank's
  /// sends. An action out of order, or a schedule that leaves anything
  /// behind, is Internal; a failed exchange IoError.
  Status Run(const torch::Tensor& tokens, MicroBatchLoss* loss, bool training);

  const torch::Tensor& losses() const { return losses_; }
  std::vector<PipelineTraffic> traffic() const;
  void set_faults(const ExecutorFaults& faults) { faults_ = faults; }

 private:
  Status RunActions(bool training);
  Status Forward(int s, int m, bool training);
  Status Backward(int s, int m);
  Status Collect(int s, int m, std::map<int, torch::Tensor>& grads);
  Status Deposit(int s, int m, const pipeline_internal::ForwardState& st);
  Status SendHop(int s, int m, bool forward);
  Status RecvHop(int s, int m, bool forward);
  void Deliver(int to_stage, int m, bool forward, pipeline_internal::Payload p);
  Status CheckDrained() const;
  void Reset();
  // Tags are per (sending stage, micro-batch, direction), so a message is
  // never matched to another hop's receive.
  int Tag(int from_stage, int m, bool forward) const { return (from_stage * ctx_.M() + m) * 2 + (forward ? 0 : 1); }

  const PipelineContext& ctx_;
  std::vector<pipeline_internal::StageRoute> routes_;
  ExecutorFaults faults_;
  // Per step.
  torch::Tensor tokens_;
  MicroBatchLoss* step_loss_ = nullptr;
  torch::Tensor losses_;  // [M] fp64 on the device: a host read would wait for the GPU mid-step
  pipeline_internal::RankStore store_;
  std::map<pipeline_internal::Key, pipeline_internal::ForwardState> saved_;
  std::map<pipeline_internal::Key, pipeline_internal::Payload> fwd_inbox_, bwd_inbox_, fwd_outbox_, bwd_outbox_;
  std::map<std::pair<int, bool>, PipelineTraffic> traffic_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_SCHEDULE_EXECUTOR_H_
