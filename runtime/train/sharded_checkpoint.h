// A pipeline rank's part of the layout-free save (weights/sharded_save.h):
// its stages' boxes of the released tensors (hf_checkpoint.h's
// ReleasedPieces), with the optimizer's state of them, written as pieces;
// and read back on any layout, each box filled from every piece that
// overlaps it.
//
// One rank writes each element once. A box's weights: rank 0 of the group
// holding the same box (expert-DP for routed experts, DP x CP for the
// rest), and of a tensor TP does not split, TP rank 0 alone. Its optimizer
// state: the same rank, the whole box; or, where the distributed optimizer
// shards the parameter, each rank of that group the part of the box it owns
// (ParameterShards), again TP rank 0 alone where TP does not split it.
// Training consumes no random numbers after the model is built, so the
// weights, the fp32 masters, AdamW's moments and update counts and the step
// are the whole state: a resume on another layout continues the run. LoRA
// adapters are saved whole under their runtime names with their state; an
// INT4 base as its packed words and scales (never re-quantised).
// Internal to runtime/train/. Thread-safety: one thread.
#ifndef KIMI_PLAN_RUNTIME_TRAIN_SHARDED_CHECKPOINT_H_
#define KIMI_PLAN_RUNTIME_TRAIN_SHARDED_CHECKPOINT_H_

#include <string>

#include "common/file_system.h"
#include "common/status.h"
#include "runtime/model/hf_checkpoint.h"
#include "runtime/train/gradient_reducer.h"
#include "runtime/train/optimizer_step.h"
#include "runtime/train/pipeline_context.h"
#include "weights/sharded_save.h"

namespace kp::runtime {

/// Where stage `s`'s parameters lie in the released tensors on this rank:
/// its TP shards, its EP experts, its ETP columns.
StageSlices RankSlices(const PipelineContext& ctx, int s);

/// Writes this rank's file `path` of the save (WriteRankFile): the pieces
/// it is the writer of. InvalidArgument for a stand-in stage.
Status WriteRankPieces(const PipelineContext& ctx, const GradientReducer& reducer, const OptimizerStep& optimizer,
                       const FileSystem& fs, const std::string& path);

/// Fills this rank's weights from `save`, restarts the optimizer and sets
/// the fp32 masters, moments and update counts of what it owns.
/// InvalidArgument naming the save and the piece when a box cannot be
/// filled exactly (a tensor of another shape, an element missing).
Status ReadRankPieces(const PipelineContext& ctx, const GradientReducer& reducer, OptimizerStep& optimizer,
                      const ShardedSave& save);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_SHARDED_CHECKPOINT_H_
