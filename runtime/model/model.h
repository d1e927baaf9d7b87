// The runtime's model, built from a ModelSpec as pieces a pipeline stage can
// own: the token embedding, the decoder layers, and the head (the final
// attention-residual aggregation, the final norm and the LM head). The
// Block Attention Residual stack travels explicitly between pieces in a
// ResidualStream, so a stage is forward(hidden, stack) -> (hidden, stack).
// Formulas: docs/runtime.md (§ numbers below refer to it). Incremental
// decoding (§16) runs the same pieces over new tokens only, with a
// DecodeCache holding each layer's attention state; the depth reads and FFNs
// are per position and need no cache.
//
// Thread-safety: a model is used from one thread.
#ifndef KIMI_PLAN_RUNTIME_MODEL_MODEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_MODEL_H_

#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/model/attention.h"
#include "runtime/model/layers.h"
#include "runtime/model/recompute.h"
#include "runtime/model/runtime_config.h"
#include "specs/stage_split.h"

namespace kp::runtime {

/// What flows between pieces (§2). `hidden` [B, T, D] is the running partial
/// sum of the current attention-residual block (with attn_res_block == 0, the
/// plain residual stream). `blocks` are the committed stack entries, oldest
/// first: blocks[0] is the embedding, blocks[i] the sum of block i's layer
/// outputs. A block's first layer commits `hidden` before it reads.
struct ResidualStream {
  torch::Tensor hidden;
  std::vector<torch::Tensor> blocks;
};

/// The decode state of a whole stage (§16): one LayerCache per decoder
/// layer, in order. Default-constructed it is the empty prefix;
/// StageModelImpl::ForwardIncremental sizes it on first use.
struct DecodeCache {
  std::vector<LayerCache> layers;
  /// Tokens cached (every layer holds the same prefix). For a fixed cache,
  /// those the host's steps added (a graph's replays count in position()).
  std::int64_t length() const { return layers.empty() ? 0 : layers.front().length; }
  /// Keeps batch rows `index` (int64 [R]) in that order; an index may repeat.
  /// A fixed cache stays fixed, in new buffers.
  void Select(const torch::Tensor& index);
  /// Row r becomes rows r*n .. r*n+n-1 (n samples sharing one prefill).
  void Repeat(std::int64_t n);
  /// Fixes the cache (LayerCache: every buffer stays where it is) for
  /// `capacity` positions in all: each per-token tensor becomes zeroed
  /// storage of that capacity holding the prefix, each state its own
  /// contiguous buffer, and the next position the device tensor position().
  /// An error where capacity < length() or the cache is already fixed;
  /// nothing changes then.
  Status Fix(std::int64_t capacity);
  bool fixed() const { return !layers.empty() && layers.front().fixed(); }
  /// A fixed cache's next position, long [1] on its device (undefined when not fixed).
  torch::Tensor position() const { return layers.empty() ? torch::Tensor() : layers.front().position; }
};

struct ForwardContext {
  /// Count routing decisions for the router-bias update (training forwards).
  bool record_router_load = false;
};

/// One decoder layer (§2, §9): [commit] -> depth read -> norm -> attention ->
/// partial sum -> depth read -> norm -> FFN or MoE -> partial sum.
class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelSpec& spec, const ModelOptions& options, int layer);
  /// Commits `in.hidden` to the stack when this layer opens a block, then
  /// runs Body, recomputed in backward when checkpointing is on.
  ResidualStream forward(ResidualStream in, const ForwardContext& ctx);
  /// forward over tokens after `cache`'s prefix (§16): the attention runs
  /// MixIncremental; no autograd boundary, no router load.
  ResidualStream ForwardIncremental(ResidualStream in, LayerCache& cache);
  /// The layer after the commit: `partial` is undefined for a block's first
  /// layer (its partial sum is already blocks.back()); returns the new
  /// partial sum. With `cache` the attention runs incrementally over it.
  torch::Tensor Body(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial, bool record_load,
                     LayerCache* cache = nullptr);
  /// The initialiser's deferred weights (ModelOptions::deferred_init), for
  /// the stage to materialise; this piece forgets them.
  std::vector<DeferredNormal> TakeDeferred() { return std::move(deferred_); }
  /// Pushes `out.hidden` to the stack when this layer opens a block;
  /// returns the partial sum Body reads (undefined then).
  torch::Tensor Commit(ResidualStream& out) const;
  int index() const { return index_; }
  bool commits_block() const { return block_ > 0 && index_ % block_ == 0; }
  void set_checkpointing(bool on) { checkpoint_ = on; }
  /// The MoE of this layer, or nullptr for a dense layer.
  MoeImpl* moe() { return moe_; }
  // The sub-layers, for tests that recompute the layer independently.
  TokenMixer& attention() { return *attention_; }
  ChannelMixer& ffn() { return *ffn_; }
  RmsNormImpl& attn_norm() { return *attn_norm_; }
  RmsNormImpl& ffn_norm() { return *ffn_norm_; }
  AttnResImpl* attn_res() { return attn_res_.get(); }  ///< null for layer 0 and without blocks
  AttnResImpl* ffn_res() { return ffn_res_.get(); }    ///< null without blocks

 private:
  int index_, block_;
  bool checkpoint_;
  bool recompute_ffn_;    ///< the channel mixer keeps only its input (recompute_moe / recompute_mlp)
  bool recompute_norms_;  ///< the norms' outputs are freed and remade (recompute_layernorm)
  std::shared_ptr<AttnResImpl> attn_res_, ffn_res_;
  std::shared_ptr<RmsNormImpl> attn_norm_, ffn_norm_;
  std::shared_ptr<TokenMixer> attention_;
  std::shared_ptr<ChannelMixer> ffn_;
  MoeImpl* moe_ = nullptr;
  std::vector<DeferredNormal> deferred_;
  // The channel mixer on the normed FFN input, recomputed in backward when
  // recompute_ffn_ and autograd records.
  torch::Tensor MixChannels(const torch::Tensor& x, bool record_load);
  // norm(x); with recompute_norms_ through `output`, whose outputs the
  // caller discards once the norm's consumer has run.
  torch::Tensor Norm(RmsNormImpl& norm, const torch::Tensor& x, OutputRecompute& output);
};

/// tokens [B, T] (int64) -> ResidualStream{embedding in the activation dtype, {}}.
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(const ModelSpec& spec, const ModelOptions& options);
  /// With SP (tensor_parallel.h) the stream starts as this rank's sequence
  /// shard [B, T / n, D].
  ResidualStream forward(const torch::Tensor& tokens);
  /// Keeps the region's rank's rows of the table, [r V / n, (r + 1) V / n),
  /// and looks tokens up through the region from now on
  /// (VocabParallelEmbedding). Requires n to divide V.
  void ShardVocab(const TensorParallelRegion& region, TensorParallelSplit* split);
  /// The initialiser's deferred weights (ModelOptions::deferred_init), for
  /// the stage to materialise; this piece forgets them.
  std::vector<DeferredNormal> TakeDeferred() { return std::move(deferred_); }

 private:
  TensorParallelRegion region_;
  torch::Tensor weight_;
  bool bf16_;  // otherwise the activations keep the weights' dtype (fp32, or fp64 in tests)
  std::vector<DeferredNormal> deferred_;
};

/// The head (§2, last paragraph): one more depth read over the whole stack
/// plus the partial sum (output_res), the final RMSNorm and the LM head.
/// Returns fp32 logits [B, T, V]. Split by vocabulary over TP (ShardVocab),
/// it gives the loss only.
class HeadImpl : public torch::nn::Module {
 public:
  HeadImpl(const ModelSpec& spec, const ModelOptions& options);
  /// fp32 logits [B, T, V].
  torch::Tensor forward(const ResidualStream& in);
  /// The logits in the activations' dtype (forward before its upcast).
  torch::Tensor Logits(const ResidualStream& in);
  /// LanguageModelLoss of Logits(in). `fused`: where the CUDA kernels apply,
  /// by LinearCrossEntropyKernel (runtime/kernels/cross_entropy.h), which never holds all the
  /// logits; otherwise from Logits with LanguageModelLoss's `fused`.
  /// Under TP: the vocabulary-parallel cross entropy of this rank's logits,
  /// the same on every rank (targets: the whole [B, T] on every rank).
  torch::Tensor Loss(const ResidualStream& in, const torch::Tensor& targets, bool fused);
  /// Keeps the region's rank's rows of the LM head, [r V / n, (r + 1) V / n),
  /// and computes the loss through the region from now on. Requires n to
  /// divide V.
  void ShardVocab(const TensorParallelRegion& region, TensorParallelSplit* split);
  AttnResImpl* output_res() { return output_res_.get(); }  ///< null without blocks
  RmsNormImpl& norm() { return *norm_; }
  ProjImpl& lm_head() { return *lm_head_; }
  /// The initialiser's deferred weights (ModelOptions::deferred_init), for
  /// the stage to materialise; this piece forgets them.
  std::vector<DeferredNormal> TakeDeferred() { return std::move(deferred_); }

 private:
  std::shared_ptr<AttnResImpl> output_res_;
  std::shared_ptr<RmsNormImpl> norm_;
  std::shared_ptr<ProjImpl> lm_head_;
  TensorParallelRegion region_;
  std::vector<DeferredNormal> deferred_;
  torch::Tensor Normed(const ResidualStream& in);  // the final norm's output, before the LM head
};

/// A contiguous piece of the model: the embedding if stage.embedding, decoder
/// layers [stage.first_layer, stage.end_layer), the head if stage.head. The
/// whole model is the stage that holds everything. Parameter names use global
/// layer indices ("layers.5.attention.q_proj.weight") and every piece is
/// initialised from (seed, piece), so any split of a model has exactly the
/// whole model's parameters.
class StageModelImpl : public torch::nn::Module {
 public:
  StageModelImpl(const ModelSpec& spec, const ModelOptions& options, const StageLayers& stage);

  const StageLayers& stage() const { return stage_; }
  const ModelSpec& spec() const { return spec_; }
  /// Requires stage().embedding.
  ResidualStream Embed(const torch::Tensor& tokens);
  /// Runs this stage's decoder layers in order.
  ResidualStream RunLayers(ResidualStream in, const ForwardContext& ctx = {});
  /// Requires stage().head.
  torch::Tensor Head(const ResidualStream& in);
  /// The head's Loss with the options' fused kernels: where they apply, the
  /// logits are made and used a chunk of rows at a time. Requires stage().head.
  torch::Tensor HeadLoss(const ResidualStream& in, const torch::Tensor& targets);
  /// tokens -> fp32 logits; requires a stage holding embedding and head.
  torch::Tensor forward(const torch::Tensor& tokens, const ForwardContext& ctx = {});
  /// Incremental decoding (§16): tokens [B, T] (T >= 1; a prefill is the
  /// same call) follow `cache`'s prefix; appends them to `cache` and returns
  /// their fp32 logits [B, T, V], equal to forward's logits at those
  /// positions up to rounding. Requires a stage holding embedding and head;
  /// meant for inference under torch::NoGradGuard.
  torch::Tensor ForwardIncremental(const torch::Tensor& tokens, DecodeCache& cache);
  /// True when a decode step on `device` reads nothing back to the host:
  /// every MoE layer's experts run grouped (MoeImpl::GroupedFor) on this
  /// model's activations, so a CUDA graph can capture the step.
  bool DecodeStepStaysOnDevice(const torch::Device& device);

  const std::vector<std::shared_ptr<DecoderLayerImpl>>& layers() const { return layers_; }
  EmbeddingImpl* embedding() { return embedding_.get(); }  ///< null unless stage().embedding
  HeadImpl* head() { return head_.get(); }                 ///< null unless stage().head
  /// Recomputation on or off for every layer: each layer from its input, or
  /// with ModelOptions::checkpoint_group_layers N > 1 each group of N.
  void SetActivationCheckpointing(bool on);
  /// Built with ModelOptions::deferred_init, the large weights are meta
  /// tensors until this call: shard them first (views, init.h KeepSlice),
  /// then Materialize gives each what the whole model holds there. A no-op
  /// for a model built whole.
  Status Materialize();
  /// Every layer's token mixer runs over `cp`'s sequence (context_parallel.h).
  void SetContextParallel(const ContextShard& cp);
  /// The auxiliary-loss-free bias update of every router (§7); call after
  /// each optimizer step.
  void UpdateRouterBiases(double rate);

  /// Adds LoRA adapters to every adaptable map (§8) and freezes every other
  /// parameter. Adapter initialisation depends on (seed, module name) only.
  void EnableLora(const LoraOptions& lora, std::uint64_t seed);
  /// Every routed-expert bank's frozen base as released INT4
  /// (ExpertBankImpl::QuantizeBase); before or after EnableLora.
  Status QuantizeExpertBase();
  void MergeLora();
  void UnmergeLora();
  /// The parameters that train: all of them, or only the adapters with LoRA.
  std::vector<torch::Tensor> TrainableParameters() const;
  /// The adapters by name, in registration order.
  std::vector<std::pair<std::string, torch::Tensor>> LoraParameters() const;

 private:
  ModelSpec spec_;
  StageLayers stage_;
  std::shared_ptr<EmbeddingImpl> embedding_;
  std::shared_ptr<torch::nn::Module> layer_list_;
  std::vector<std::shared_ptr<DecoderLayerImpl>> layers_;
  std::shared_ptr<HeadImpl> head_;
  bool fused_kernels_;
  int group_layers_;  ///< ModelOptions::checkpoint_group_layers, at least 1
  bool bf16_activations_;  ///< ModelOptions::dtype is bf16
  bool grouped_;      ///< recompute groups of group_layers_ layers (RunLayers)
  std::vector<DeferredNormal> deferred_;
};

/// Validates the spec for the runtime and builds the stage; LibTorch errors
/// come back as Internal.
Result<std::shared_ptr<StageModelImpl>> BuildStage(const ModelSpec& spec, const ModelOptions& options,
                                                   const StageLayers& stage);
/// The whole model: one stage with the embedding, every layer and the head.
Result<std::shared_ptr<StageModelImpl>> BuildModel(const ModelSpec& spec, const ModelOptions& options);

/// Mean next-token cross entropy in fp32: logits [B, T, V], targets [B, T].
/// `fused`: by the CUDA loss kernel (runtime/kernels/) where it applies, which
/// reads bf16 logits without an fp32 copy; the same value within rounding.
torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets, bool fused = false);

/// Writes only the LoRA adapters (and their rank and alpha) to `path`.
Status SaveAdapters(const StageModelImpl& model, const std::string& path);
/// Reads adapters written by SaveAdapters into a model with the same adapters;
/// a missing file, a missing adapter or a shape mismatch is an error naming it.
Status LoadAdapters(StageModelImpl& model, const std::string& path);

/// Sums every router's load over `group` (DP, or TP with sequence
/// parallelism: any ranks that routed different tokens) so the bias update
/// sees the whole batch's routing, identically on every rank. Null or one
/// rank: nothing to do.
Status SumRouterLoads(StageModelImpl& model, Communicator* group);

/// Total element count of `tensors`.
std::int64_t CountElements(const std::vector<torch::Tensor>& tensors);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_MODEL_H_
