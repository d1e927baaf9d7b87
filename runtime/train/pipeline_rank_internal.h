// The inside of a PipelineRank (pipeline_runtime.h), shared by the two
// files that implement it: pipeline_runtime.cc (set-up, the step, the
// reductions) and pipeline_actions.cc (the routes read off the simulator's
// tables, and the F / B / SEND / RECV actions that move the payload).
// Only those two files include this header.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RANK_INTERNAL_H_
#define KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RANK_INTERNAL_H_

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "runtime/comm/communicator.h"
#include "runtime/comm/rank_groups.h"
#include "runtime/model/model.h"
#include "runtime/train/data_parallel.h"
#include "runtime/train/distributed_optimizer.h"
#include "runtime/train/multi_tensor_adamw.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "schedules/pipeline_schedule.h"

namespace kp::runtime {

namespace pipeline_internal {

using Entries = std::vector<int>;

// One stage's routing, by stack-entry index, read off the simulator's
// tables (AttnResStageRow) for the transport this run uses.
struct StageRoute {
  int stack_before = 0;  // entries of the stack the stage receives
  Entries wire_in;       // entries on the hop from stage - 1, in wire order
  Entries held;          // entries read from the rank store (cache on)
  Entries committed;     // entries this stage appends
  Entries deposits;      // gradients deposited in the rank store (cache on)
  std::vector<std::pair<int, Entries>> collects;  // (later stage, entries) this stage collects (cache on)
};

// What crosses a hop: the hidden state and the listed stack entries (or
// their gradients), each [b, T, D].
struct Payload {
  torch::Tensor hidden;
  std::vector<torch::Tensor> entries;
};

// The rank store of PR #4312, shared by the rank's stages: the stack
// entries of each in-flight micro-batch, and the gradient deposits of the
// stages that read them, until the stage that put them there collects them.
class RankStore {
 public:
  void Put(int mb, int entry, torch::Tensor t) { blocks_[mb][entry] = std::move(t); }

  Result<torch::Tensor> Get(int mb, int entry, int stage) const {
    auto m = blocks_.find(mb);
    if (m != blocks_.end()) {
      auto it = m->second.find(entry);
      if (it != m->second.end()) return it->second;
    }
    return Status::Internal("rank store: stage " + std::to_string(stage) + " reads entry " + std::to_string(entry) +
                            " of micro-batch " + std::to_string(mb) + ", which this rank does not hold");
  }

  void Release(int mb) { blocks_.erase(mb); }
  void Deposit(int mb, int from_stage, int entry, torch::Tensor g) { deposits_[mb][{from_stage, entry}] = std::move(g); }

  /// Removes and returns the deposit, or an undefined tensor.
  torch::Tensor Take(int mb, int from_stage, int entry) {
    auto m = deposits_.find(mb);
    if (m == deposits_.end()) return {};
    auto it = m->second.find({from_stage, entry});
    if (it == m->second.end()) return {};
    torch::Tensor g = std::move(it->second);
    m->second.erase(it);
    if (m->second.empty()) deposits_.erase(m);
    return g;
  }

  /// The deposits of `mb` nobody collected: (stage, entry) pairs.
  std::vector<std::pair<int, int>> Left(int mb) const {
    std::vector<std::pair<int, int>> out;
    auto m = deposits_.find(mb);
    if (m != deposits_.end())
      for (const auto& [key, g] : m->second) out.push_back(key);
    return out;
  }

  bool empty() const { return blocks_.empty() && deposits_.empty(); }
  void Clear() { blocks_.clear(), deposits_.clear(); }

 private:
  std::map<int, std::map<int, torch::Tensor>> blocks_;
  std::map<int, std::map<std::pair<int, int>, torch::Tensor>> deposits_;
};

// What a stage's backward needs of its forward.
struct ForwardState {
  torch::Tensor hidden_in;             // leaf (undefined on stage 0)
  std::vector<torch::Tensor> stack_in; // leaves, by entry
  ResidualStream out;                  // the stage's output (not on the last stage)
  torch::Tensor scaled_loss;           // the last stage: loss_m / M
};

using Key = std::pair<int, int>;  // (stage, micro-batch)

/// The routes of every stage of `schedule` (pipeline_actions.cc).
Result<std::vector<StageRoute>> Routes(const PipelineRankConfig& c, const PipelineSchedule& schedule);

}  // namespace pipeline_internal

struct PipelineRank::Impl {
  PipelineRankConfig config;
  Communicator* comm = nullptr;
  PipelineSchedule schedule;  // lowered: carries SEND/RECV
  std::vector<pipeline_internal::StageRoute> routes;
  std::map<int, std::shared_ptr<PipelineStageModule>> modules;  // by stage
  std::vector<torch::Tensor> params;  // this rank's, in stage order
  std::vector<int> slots;             // each param's index in the whole model's order
  int global_params = 0;
  std::unique_ptr<MultiTensorAdamW> optimizer;
  std::unique_ptr<ParameterShards> shards;  ///< with the distributed optimizer: what it updates
  torch::ScalarType act_dtype = torch::kFloat;
  torch::Device device{torch::kCPU};
  SplitParameters split;  // params as dense / expert, for the DP average
  std::vector<int> expert_at;  // indices into params of the sharded experts' banks
  std::map<int, TensorParallelSplit> tp_splits;  // by stage, with TP
  std::vector<int> tp_shard_at;  // indices into params of the TP shards
  int dp_rank = 0, dp_size = 1;
  int step = 0;

  // Per step.
  int seq_len = 0;                      // T of this step's rows
  MicroBatchLoss* step_loss = nullptr;  // null: the language-model loss
  torch::Tensor tokens;  // [batch, T + 1]
  std::vector<double> losses;
  pipeline_internal::RankStore store;
  std::map<pipeline_internal::Key, pipeline_internal::ForwardState> saved;
  std::map<pipeline_internal::Key, pipeline_internal::Payload> fwd_inbox, bwd_inbox, fwd_outbox, bwd_outbox;
  std::map<std::pair<int, bool>, PipelineTraffic> traffic;

  int rank() const { return comm->rank(); }
  int M() const { return config.microbatches; }
  int Tokens() const { return seq_len; }
  bool TensorParallel() const { return config.replicas.tp != nullptr && config.replicas.tp->size() > 1; }
  bool SequenceParallel() const { return TensorParallel() && config.replicas.sequence_parallel; }
  bool ContextParallel() const { return config.replicas.cp != nullptr && config.replicas.cp->size() > 1; }
  int CpSize() const { return ContextParallel() ? config.replicas.cp->size() : 1; }
  // The positions of a micro-batch this rank's stages hold between layers.
  int LocalTokens() const { return seq_len / CpSize() / (SequenceParallel() ? config.replicas.tp->size() : 1); }
  // This CP rank's tokens of rows x [rows, T] (context_parallel.h).
  torch::Tensor OwnTokens(const torch::Tensor& x) const {
    return ContextParallel() ? KeepContextShard(x, CpSize(), config.replicas.cp->rank(), 1) : x;
  }
  // The dense parameters' replicas: DP, or with CP DP x CP.
  Communicator* DenseReplicas() const { return ContextParallel() ? config.replicas.dp_cp : config.replicas.dp; }
  int DenseSize() const { return dp_size * CpSize(); }
  std::int64_t ReplicaRows() const { return config.train.batch / dp_size; }
  std::int64_t Rows() const { return ReplicaRows() / M(); }
  torch::TensorOptions OnDevice(torch::ScalarType t) const { return torch::TensorOptions().dtype(t).device(device); }
  int RankOf(int s) const { return schedule.stage_to_rank[s]; }
  bool IsLast(int s) const { return s == schedule.num_stages - 1; }
  int FirstLocal() const { return modules.begin()->first; }
  int LastLocal() const { return modules.rbegin()->first; }
  // Tags are per (sending stage, micro-batch, direction), so a message is
  // never matched to another hop's receive.
  int Tag(int from_stage, int m, bool forward) const { return (from_stage * M() + m) * 2 + (forward ? 0 : 1); }

  Status Setup(StageModuleFactory factory);
  Status EnableLora(const LoraOptions& lora, std::uint64_t seed);
  Status PlaceStages();
  void CollectParameters();
  void MakeOptimizer();
  Status BeginPhase(const TrainConfig& train);
  ReplicaGroups Replicas() const {
    const PipelineReplicas& r = config.replicas;
    return ReplicaGroups{DenseReplicas(), r.expert_shards != nullptr ? r.expert_dp : DenseReplicas(), r.expert_shards,
                         DenseSize()};
  }
  Status AverageOverReplicas();
  Status ReduceOverTensorParallel();
  Status ExchangeParameterLayout();
  Status RunActions(bool training);
  Status Forward(int s, int m, bool training);
  Status Backward(int s, int m);
  Status Collect(int s, int m, std::map<int, torch::Tensor>& grads);
  Status Deposit(int s, int m, const pipeline_internal::ForwardState& st);
  Status SendHop(int s, int m, bool forward);
  Status RecvHop(int s, int m, bool forward);
  void Deliver(int to_stage, int m, bool forward, pipeline_internal::Payload p);
  Status CheckDrained() const;
  void ResetStep();
  Status SetTokens(const std::vector<std::int64_t>& tokens);
  Result<double> ReduceLoss();
  Result<double> ReduceGradNorm();
  Result<std::vector<double>> GradientSquares() const;
  Status SumSquaresOver(Communicator* group, const std::vector<int>& at, std::vector<double>& squares) const;
  Result<PipelineStepResult> TrainStep(const std::vector<std::int64_t>& tokens, int seq_len, MicroBatchLoss* loss);
  Result<double> EvalStep(const std::vector<std::int64_t>& tokens);
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_RANK_INTERNAL_H_
