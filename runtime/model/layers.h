// The building blocks of the runtime's model, in LibTorch (initialised by
// init.h): linear maps with LoRA, RMSNorm, the Block Attention Residual depth read, the
// SwiGLU FFN and the mixture of experts with its auxiliary-loss-free router.
// Every formula is written out in docs/runtime.md; section numbers (§) below
// refer to it.
//
// Precision: parameters are fp32 (the master weights), or the weight
// matrices bf16 for a frozen LoRA base (ModelOptions::weight_dtype); a map
// casts its weight to the activation's dtype at use.
// Norms, softmaxes, the depth read and the router run in fp32.
// Thread-safety: modules are used from one thread.
#ifndef KIMI_PLAN_RUNTIME_MODEL_LAYERS_H_
#define KIMI_PLAN_RUNTIME_MODEL_LAYERS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/torch.h>

#include "runtime/model/int4_linear.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/init.h"
#include "runtime/model/runtime_config.h"
#include "runtime/model/tensor_parallel.h"

namespace kp::runtime {

class Communicator;

/// What a module whose maps take LoRA adapters implements (§8).
class LoraAdaptable {
 public:
  virtual ~LoraAdaptable() = default;
  /// Adds trainable adapters: A ~ N(0, 1/in), B = 0, so the model is
  /// unchanged until B trains. Call once, before Merge.
  virtual void AddLora(const LoraOptions& lora, Init& init) = 0;
  /// W += (alpha/rank) B A; the adapters stop being applied separately.
  virtual void Merge() = 0;
  /// W -= (alpha/rank) B A; undoes Merge up to fp32 rounding.
  virtual void Unmerge() = 0;
};

/// y = x W^T, W of shape [out, in]; with LoRA y += (alpha/rank) (x A^T) B^T.
/// `lora_target` says whether AddLora applies (the router, the KDA gates,
/// the latent projections and the LM head are never adapted).
class ProjImpl : public torch::nn::Module, public LoraAdaptable {
 public:
  ProjImpl(std::int64_t in, std::int64_t out, double init_std, Init& init, bool lora_target = true);
  torch::Tensor forward(const torch::Tensor& x);
  void AddLora(const LoraOptions& lora, Init& init) override;
  void Merge() override;
  void Unmerge() override;
  bool lora_target() const { return lora_target_; }
  bool has_lora() const { return lora_a_.defined(); }
  torch::Tensor& weight() { return weight_; }
  /// The [out, in] matrix forward applies, in `dtype`: W, plus (alpha/rank)
  /// B A while LoRA is on and unmerged.
  torch::Tensor EffectiveWeight(c10::ScalarType dtype) const;

 private:
  torch::Tensor weight_, lora_a_, lora_b_;
  double lora_scale_ = 0;
  bool merged_ = false;
  bool lora_target_;
};

/// The precision of reductions: bf16/fp16 become fp32; fp32 and fp64 stay
/// (fp64 is how the finite-difference tests run the model).
torch::Tensor Upcast(const torch::Tensor& x);

/// x / sqrt(mean(x^2) + eps), in fp32 (§1).
torch::Tensor RmsNormalize(const torch::Tensor& x, double eps);

/// RMSNorm with a learned scale (init 1); computes in fp32, returns x's dtype.
class RmsNormImpl : public torch::nn::Module {
 public:
  /// `fused`: the CUDA kernel where it applies (runtime/kernels/).
  RmsNormImpl(std::int64_t dim, double eps, bool fused = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor& weight() { return weight_; }

 private:
  torch::Tensor weight_;
  double eps_;
  bool fused_;
};

/// The Block Attention Residual depth read (§2): the values are the committed
/// blocks followed by `partial` (skipped when undefined); each is scored by
/// sum_d RMSNorm(v)[d] * norm_weight[d] * query[d], and the read is the
/// softmax-over-depth weighted sum of the raw values. fp32 inside; returns the
/// values' dtype. Every tensor is [..., D] of one shape.
torch::Tensor AttnResRead(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial,
                          const torch::Tensor& norm_weight, const torch::Tensor& query, double eps);

/// One depth read's parameters: the norm weight (init 1) and the query
/// (init 0, so an untrained read is the plain average over depth).
class AttnResImpl : public torch::nn::Module {
 public:
  /// `fused`: the CUDA kernel where it applies (runtime/kernels/).
  AttnResImpl(std::int64_t dim, double eps, bool fused = false);
  torch::Tensor forward(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial);
  torch::Tensor& norm_weight() { return norm_weight_; }
  torch::Tensor& query() { return query_; }

 private:
  torch::Tensor norm_weight_, query_;
  double eps_;
  bool fused_;
};

/// A feed-forward block; `record_load` asks a MoE to count its routing for
/// the bias update (set once per forward, never in a recomputation).
class ChannelMixer : public torch::nn::Module {
 public:
  virtual torch::Tensor Mix(const torch::Tensor& x, bool record_load) = 0;
};

/// w.to(dtype); fp32 to bf16 on a GPU by the cast kernel (runtime/kernels/),
/// bit for bit the same values at a fraction of torch's copy's time.
torch::Tensor CastWeight(const torch::Tensor& w, c10::ScalarType dtype);

/// silu(gate) * up; by the CUDA kernel (runtime/kernels/) when `fused` and it applies.
torch::Tensor SiluTimes(const torch::Tensor& gate, const torch::Tensor& up, bool fused);

/// down(silu(gate(x)) * up(x)) (§6), or down(gelu(up(x))) for GPT-style specs.
class SwiGluImpl : public ChannelMixer {
 public:
  /// `fused`: the product silu(gate) * up by the CUDA kernel where it applies.
  SwiGluImpl(std::int64_t dim, std::int64_t hidden, bool gated, double init_std, double out_std, Init& init,
             bool fused);
  torch::Tensor forward(const torch::Tensor& x);
  /// forward inside the layer's TP region (the identity unless sharded:
  /// tensor_parallel.h, ShardSwiGlu).
  torch::Tensor Mix(const torch::Tensor& x, bool) override { return region_.Exit(forward(region_.Enter(x))); }
  void SetTensorParallel(const TensorParallelRegion& region) { region_ = region; }
  ProjImpl* gate() { return gate_.get(); }  ///< null when not gated (GELU)
  ProjImpl& up() { return *up_; }
  ProjImpl& down() { return *down_; }

 private:
  std::shared_ptr<ProjImpl> gate_, up_, down_;
  bool fused_;
  TensorParallelRegion region_;
};

/// The number of routing slots per expert [num_experts] (int64) of the
/// expert ids `experts` (any shape), counted on their device.
torch::Tensor ExpertCounts(const torch::Tensor& experts, std::int64_t num_experts);

/// The routing of N tokens: expert ids [N, k] (int64) and weights [N, k] (fp32).
struct Routing {
  torch::Tensor experts;
  torch::Tensor weights;
};

/// §7: selection by top_k of (scores + bias); weights from the scores alone,
/// normalised over the selected k and multiplied by `scale`.
/// scores [N, E] in (0, 1), bias [E]. With groups > 1 (DeepSeek-V3's
/// group-limited routing) the E experts form `groups` equal groups, each
/// scored by the sum of its two largest (scores + bias), and experts outside
/// the `topk_groups` best groups cannot be chosen.
Routing RouteFromScores(const torch::Tensor& scores, const torch::Tensor& bias, int top_k, double scale,
                        int groups = 1, int topk_groups = 1);

/// The sigmoid router: weight [E, D] (trained), bias [E] (a buffer moved by
/// UpdateBias, never by gradients), load [E] (tokens routed since the last
/// update, a buffer).
class RouterImpl : public torch::nn::Module {
 public:
  /// Routes over moe.num_experts with moe's top_k, route_scale and groups.
  RouterImpl(std::int64_t dim, const MoeShape& moe, Init& init);
  /// x [N, D]; adds the selection counts to load() when `record_load`.
  Routing forward(const torch::Tensor& x, bool record_load);
  /// The auxiliary-loss-free update (§7): bias_e += rate * sign(mean load -
  /// load_e), then load = 0. Call after each optimizer step.
  void UpdateBias(double rate);
  torch::Tensor& bias() { return bias_; }
  torch::Tensor& load() { return load_; }
  torch::Tensor& weight() { return weight_; }

 private:
  torch::Tensor weight_, bias_, load_;
  MoeShape moe_;
};

/// E SwiGLU experts as stacked weights: gate, up [E, F, D] and down [E, D, F].
/// LoRA (§8): kSharedOuter shares gate/up A [r, D] and down B [D, r] across
/// the experts, with per-expert gate/up B [E, F, r] and down A [E, r, F];
/// kPerExpert gives every expert its own A and B.
class ExpertBankImpl : public torch::nn::Module, public LoraAdaptable {
 public:
  ExpertBankImpl(std::int64_t num_experts, std::int64_t dim, std::int64_t ffn, double init_std, double out_std,
                 Init& init);
  /// x_sorted [M, D]: rows grouped by expert, counts[e] rows for expert e.
  torch::Tensor forward(const torch::Tensor& x_sorted, const std::vector<std::int64_t>& counts);
  /// True when ForwardGrouped takes x_sorted: no unmerged LoRA, no INT4
  /// base, and in FP8 (set_fp8) the grouped FP8 kernels with D and F
  /// multiples of 128 (fp8_grouped_gemm.h), else a LibTorch with the
  /// grouped GEMM (2.8+) and bf16 on a Hopper or newer GPU.
  bool GroupedApplies(const torch::Tensor& x_sorted) const;
  /// forward's result with one grouped GEMM per projection for all experts;
  /// ends [E] int32 on x's device: expert e's rows are [ends[e-1], ends[e]).
  /// Keeps the gate and up projections for the backward, which recomputes
  /// their SwiGLU product.
  torch::Tensor ForwardGrouped(const torch::Tensor& x_sorted, const torch::Tensor& ends);
  void AddLora(const LoraOptions& lora, Init& init) override;
  void Merge() override;
  void Unmerge() override;
  /// Keeps experts [first, first + count) only (expert parallelism): the
  /// parameters keep their names and shrink to `count` experts in place.
  /// Requires no LoRA.
  void KeepExperts(std::int64_t first, std::int64_t count);
  /// Keeps FFN columns [first, first + count) of every expert (expert tensor
  /// parallelism): gate and up keep those output rows, down those inputs,
  /// so the bank's output is this shard's partial sum. Requires no LoRA.
  void KeepFfnShard(std::int64_t first, std::int64_t count);
  /// Keeps the frozen base as released INT4 (int4_linear.h): gate, up and
  /// down become the buffers NAME_packed and NAME_scale, the float
  /// parameters shrink to empty, and every product dequantizes inside
  /// Int4Linear. After sharding; the base is then frozen (LoRA may come
  /// before or after: an INT4 rollout takes its adapters later). Merge then
  /// throws: the packed base cannot take the adapters' update. An
  /// InvalidArgument when an input width is not a multiple of 32.
  Status QuantizeBase();
  bool int4_base() const { return gate_.int4.packed.defined(); }
  std::int64_t ffn() const { return int4_base() ? gate_.int4.packed.size(1) : gate_.weight.size(1); }
  std::int64_t num_experts() const { return num_experts_; }
  bool has_lora() const { return gate_.lora_a.defined(); }
  /// Megatron's moe_act: the loop frees each expert's SwiGLU product after
  /// the down projection and remakes it for the backward.
  void set_recompute_act(bool on) { recompute_act_ = on; }
  /// The base products in FP8 (fp8_linear.h's recipe): grouped, one launch
  /// per product for all experts, where GroupedApplies; else Fp8Linear
  /// through the loop over experts. LoRA's adapters stay in the activation
  /// dtype.
  void set_fp8(bool on) { fp8_ = on; }

 private:
  struct Matrix {
    torch::Tensor weight, lora_a, lora_b;  // lora_a [r, in] or [E, r, in]; lora_b [out, r] or [E, out, r]
    Int4Weight int4;                       // the INT4 base ([E, out, in / 8], [E, out, in / 32]) after QuantizeBase
  };
  // One matrix cast to the activation dtype and split per expert: unbind's
  // backward stacks the expert gradients in one allocation, where indexing
  // each expert would materialise a full-size gradient per expert.
  struct Views {
    std::vector<torch::Tensor> weight, lora_a, lora_b;  // one entry when shared
    std::vector<Int4Weight> int4;                        // per expert, with an INT4 base (then no weight)
  };
  Views Split(const Matrix& m, c10::ScalarType dtype) const;
  torch::Tensor Apply(const Views& m, std::int64_t expert, const torch::Tensor& x) const;
  void AddLoraTo(Matrix& m, const char* name, bool shared_a, bool shared_b, std::int64_t rank, Init& init);
  void MergeSign(double sign);
  Matrix gate_, up_, down_;
  std::int64_t num_experts_;
  double lora_scale_ = 0;
  bool merged_ = false;
  bool recompute_act_ = false;
  bool fp8_ = false;
};

/// The mixture of experts (§7): sigmoid router, top-k routed SwiGLU experts
/// (behind LatentMoE's down and up projections when latent_dim > 0), plus
/// the shared experts on every token.
class MoeImpl : public ChannelMixer {
 public:
  MoeImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init);
  torch::Tensor Mix(const torch::Tensor& x, bool record_load) override;
  RouterImpl& router() { return *router_; }
  ExpertBankImpl& experts() { return *experts_; }
  SwiGluImpl* shared() { return shared_.get(); }  ///< null without shared experts
  /// Routes through the expert groups (none: every expert local and whole,
  /// the default); the bank must already hold only this rank's shards
  /// (expert_parallel.h: ShardExperts does both).
  void SetExpertParallel(const ExpertGroups& groups) { expert_groups_ = groups; }
  bool experts_split() const { return expert_groups_.split(); }
  /// True when Mix on activations of this dtype and device runs every
  /// expert as one grouped GEMM: no read of the experts' counts on the host
  /// (so a CUDA graph can capture it).
  bool GroupedFor(const torch::TensorOptions& activations) const;
  std::int64_t num_experts() const { return num_experts_; }

 private:
  std::shared_ptr<RouterImpl> router_;
  std::shared_ptr<ExpertBankImpl> experts_;
  std::shared_ptr<SwiGluImpl> shared_;
  std::shared_ptr<ProjImpl> latent_down_, latent_up_;
  std::int64_t num_experts_;
  bool fused_;
  bool recompute_shared_;  // the shared experts keep only their input (MixRecomputed)
  ExpertGroups expert_groups_;  // not owned; they outlive the model's use
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_LAYERS_H_
