// The tensor-level pieces of the pipeline runtime (pipeline_runtime.h): what
// the executor needs of a stage's module, the adapter over the model's
// StageModelImpl, and the optimizer helpers that a pipeline rank and a
// single-process reference share so that both compute the same numbers.
//
// Thread-safety: modules are used from one thread; the helpers are pure
// (they read and write only the tensors passed in).
#ifndef KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_STAGE_H_
#define KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_STAGE_H_

#include <memory>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/model.h"
#include "runtime/train/trainer.h"

namespace kp::runtime {

/// One pipeline stage's computation. A stage is forward(hidden, stack) ->
/// (hidden, stack): the stack it receives is exactly the stack its layers
/// read, the committed entries are appended, and nothing about transport is
/// known here.
class PipelineStageModule {
 public:
  virtual ~PipelineStageModule() = default;
  /// Stage 0: tokens [b, T] (int64) -> the stream before layer 0.
  virtual ResidualStream Embed(const torch::Tensor& tokens) = 0;
  /// The stage's decoder layers; `record_load`: count routing for the
  /// router-bias update (training forwards).
  virtual ResidualStream RunLayers(ResidualStream in, bool record_load) = 0;
  /// The last stage: the head and the micro-batch's mean loss (fp32 scalar).
  virtual torch::Tensor Loss(const ResidualStream& in, const torch::Tensor& targets) = 0;
  /// The last stage: the head's fp32 logits [b, T, V], for a step with its
  /// own loss (MicroBatchLoss). Stand-ins without a head throw c10::Error.
  virtual torch::Tensor Logits(const ResidualStream& in);
  /// The trainable parameters in the whole model's parameter order.
  virtual std::vector<torch::Tensor> TrainableParameters() = 0;
  /// After each optimizer step (the router-bias update).
  virtual void AfterStep(double /*bias_update_rate*/) {}
};

/// A step's own loss in place of the language-model loss (the SDPO loop's
/// losses): the last stage hands it each micro-batch's logits. The shares of
/// the micro-batches must sum to the step's loss (a token-mean over the whole
/// batch divides each micro-batch's token sum by the batch's token count),
/// so the gradient is the one of the whole batch at once.
class MicroBatchLoss {
 public:
  virtual ~MicroBatchLoss() = default;
  /// `logits` [rows, T, V] of micro-batch `m` (MicroBatchRows(m) of this
  /// replica's rows) -> its share of the step's loss, an fp32 scalar.
  virtual torch::Tensor Share(const torch::Tensor& logits, int m) = 0;
};

/// The model's piece for `layers`, as the single-process model has it
/// (same parameter names and initial values).
Result<std::shared_ptr<PipelineStageModule>> MakeModelStage(const ModelSpec& spec, const ModelOptions& options,
                                                            const StageLayers& layers);
/// The StageModelImpl behind a module made by MakeModelStage, else null.
StageModelImpl* ModelOfStage(PipelineStageModule& module);


/// Each parameter's squared gradient norm, in the given order (0 where the
/// gradient is undefined): the norm reduced on the device in the gradient's
/// dtype, squared in fp64.
std::vector<double> GradSquares(const std::vector<torch::Tensor>& params);
/// GradSquares of the tensors themselves (0 where one is undefined).
std::vector<double> SquaredNorms(const std::vector<torch::Tensor>& tensors);
/// The fixed-order fp64 sum of GradSquares over the whole model's parameter
/// order: the pipeline reduces exactly this, so a single process and any
/// split get the same norm bit for bit.
double SumInOrder(const std::vector<double>& squares);
/// The factor torch's clip_grad_norm_ scales every gradient by, given the
/// norm: max_norm / (total_norm + 1e-6) when that is below 1, else 1.
double ClipScale(double total_norm, double max_norm);

/// Micro-batch `m` of `M` of a [batch, T + 1] token tensor: rows
/// [m * batch / M, (m + 1) * batch / M).
torch::Tensor MicroBatchRows(const torch::Tensor& tokens, int m, int M);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TRAIN_PIPELINE_STAGE_H_
