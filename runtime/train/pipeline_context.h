// What the parts of a pipeline rank's step share, read-only while a step
// runs: the configuration, the pipeline group, the lowered schedule, this
// rank's stage modules and where they live, and the replica groups' sizes.
// The parts are the schedule executor (schedule_executor.h: the actions and
// the transfers), the gradient reducer (gradient_reducer.h: TP partial sums,
// the replicas' averages, the norm, the loss) and the optimizer step
// (optimizer_step.h: clip, AdamW, the shards). PipelineRank
// (pipeline_runtime.cc) owns a context and the three, builds the stages and
// runs a step through them in that order. Internal to runtime/train/.
// Thread-safety: one thread, as the PipelineRank.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_CONTEXT_H_
#define KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_CONTEXT_H_

#include <map>
#include <memory>

#include <torch/torch.h>

#include "runtime/comm/communicator.h"
#include "runtime/model/context_parallel.h"
#include "runtime/model/model.h"
#include "runtime/model/tensor_parallel.h"
#include "runtime/train/data_parallel.h"
#include "runtime/train/pipeline_runtime.h"
#include "runtime/train/pipeline_stage.h"
#include "schedules/pipeline_schedule.h"

namespace kp::runtime {

struct PipelineContext {
  PipelineRankConfig config;
  Communicator* comm = nullptr;  ///< the pipeline group
  PipelineSchedule schedule;     ///< lowered: carries SEND/RECV
  std::map<int, std::shared_ptr<PipelineStageModule>> modules;  ///< by stage, this rank's
  std::map<int, TensorParallelSplit> tp_splits;                 ///< by stage, with TP
  torch::ScalarType act_dtype = torch::kFloat;
  torch::Device device{torch::kCPU};
  int dp_rank = 0, dp_size = 1;
  int seq_len = 0;  ///< T of the running step's rows

  int rank() const { return comm->rank(); }
  int M() const { return config.microbatches; }
  bool TensorParallel() const { return config.replicas.tp != nullptr && config.replicas.tp->size() > 1; }
  bool SequenceParallel() const { return TensorParallel() && config.replicas.sequence_parallel; }
  bool ContextParallel() const { return config.replicas.cp != nullptr && config.replicas.cp->size() > 1; }
  int CpSize() const { return ContextParallel() ? config.replicas.cp->size() : 1; }
  /// The positions of a micro-batch this rank's stages hold between layers.
  int LocalTokens() const { return seq_len / CpSize() / (SequenceParallel() ? config.replicas.tp->size() : 1); }
  /// This CP rank's tokens of rows x [rows, T] (context_parallel.h).
  torch::Tensor OwnTokens(const torch::Tensor& x) const {
    return ContextParallel() ? KeepContextShard(x, CpSize(), config.replicas.cp->rank(), 1) : x;
  }
  /// The dense parameters' replicas: DP, or with CP DP x CP.
  Communicator* DenseReplicas() const { return ContextParallel() ? config.replicas.dp_cp : config.replicas.dp; }
  int DenseSize() const { return dp_size * CpSize(); }
  ReplicaGroups Replicas() const {
    const PipelineReplicas& r = config.replicas;
    return ReplicaGroups{DenseReplicas(), r.expert_shards != nullptr ? r.expert_dp : DenseReplicas(), r.expert_shards,
                         DenseSize()};
  }
  std::int64_t ReplicaRows() const { return config.train.batch / dp_size; }
  std::int64_t Rows() const { return ReplicaRows() / M(); }
  torch::TensorOptions OnDevice(torch::ScalarType t) const { return torch::TensorOptions().dtype(t).device(device); }
  int RankOf(int s) const { return schedule.stage_to_rank[s]; }
  bool IsLast(int s) const { return s == schedule.num_stages - 1; }
  int FirstLocal() const { return modules.begin()->first; }
  int LastLocal() const { return modules.rbegin()->first; }
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_CONTEXT_H_
