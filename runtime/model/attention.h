// The token mixers of the runtime's decoder layers: Kimi Delta Attention
// (§5), multi-head latent attention with its optional output gate (§4), and plain
// multi-head attention with RoPE for GPT-style specs (§3). Section numbers
// refer to docs/runtime.md. Each mixer runs either over a whole sequence
// (Mix, training) or incrementally over new tokens after a LayerCache's
// prefix (MixIncremental, decoding, §16); the two agree up to rounding.
//
// Thread-safety: modules and caches are used from one thread.
#ifndef KIMI_PLAN_RUNTIME_MODEL_ATTENTION_H_
#define KIMI_PLAN_RUNTIME_MODEL_ATTENTION_H_

#include <cstdint>
#include <functional>
#include <memory>

#include <mutex>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/kernels/kda.h"
#include "runtime/model/context_parallel.h"
#include "runtime/model/layers.h"
#include "runtime/model/tensor_parallel.h"

namespace kp::runtime {

/// One layer's decode state (§16): what its token mixer must keep of the
/// tokens it has seen. Dim 0 of every tensor is the batch row; a mixer uses
/// only its own kind's fields and creates them on first use (an empty cache
/// is the empty prefix). The per-token tensors (MLA's, MHA's) are storage
/// along time (dim 1) of some capacity >= length, of which the first
/// `length` positions are the prefix; the capacity doubles when full.
///
/// A fixed cache (`position` defined, DecodeCache::Fix) keeps every buffer
/// where it is: its per-token storage has its final capacity and zeros past
/// the prefix, a step writes its positions in place and attends over the
/// whole capacity masked by position, and the states are overwritten in
/// place. The position of the next token is then the device tensor
/// `position` (shared by every layer; the model advances it); `length`
/// counts only the steps the host runs (a CUDA graph's replays advance
/// `position` alone). A step's work and buffers are then the same for every
/// token, which a CUDA graph's replays need.
struct LayerCache {
  std::int64_t length = 0;               ///< tokens appended so far: the absolute position of the next one
  torch::Tensor position;                ///< a fixed cache's next position, long [1] on the cache's device
  torch::Tensor q_conv, k_conv, v_conv;  ///< KDA: the last K-1 inputs of each short convolution [B, K-1, C]
  torch::Tensor state;                   ///< KDA: the delta-rule state S [B, H, dk, dv]
  torch::Tensor latent;                  ///< MLA: RMSNorm(c), the normalised latent [B, capacity, kv_lora_rank]
  torch::Tensor rope_key;                ///< MLA: RoPE(k_rope) [B, capacity, qk_rope_head_dim]; undefined when 0
  torch::Tensor key, value;              ///< MHA: RoPE(k) and v [B, capacity, kv_heads, head_dim]
  /// The per-token tensors (time along dim 1) and the states, defined or not.
  std::vector<torch::Tensor*> PerToken() { return {&latent, &rope_key, &key, &value}; }
  std::vector<torch::Tensor*> States() { return {&q_conv, &k_conv, &v_conv, &state}; }
  /// Replaces every defined per-row tensor t by f(t) (not `position`).
  void Map(const std::function<torch::Tensor(const torch::Tensor&)>& f);
  bool fixed() const { return position.defined(); }
};

/// Attention of some kind: [B, T, D] -> [B, T, D], causal.
class TokenMixer : public torch::nn::Module {
 public:
  virtual torch::Tensor Mix(const torch::Tensor& x) = 0;
  /// x [B, T, D] (T >= 1) are the tokens after `cache`'s prefix; returns
  /// their outputs, equal to Mix's over the prefix and x up to rounding, and
  /// appends them to `cache` (length += T). For inference (no autograd use).
  virtual torch::Tensor MixIncremental(const torch::Tensor& x, LayerCache& cache) = 0;
  /// Keeps the region's rank's heads (tensor_parallel.h: which maps split
  /// and which stay whole), records each kept slice and each partial
  /// parameter in `split` by its name in this module, and runs through
  /// `region` from now on. Requires the region's size to divide the heads
  /// (CheckTensorParallelSplit) and no LoRA. Incremental decoding then needs a region without SP.
  virtual void ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) = 0;
  /// Mix takes this CP rank's tokens of each sequence and mixes them with
  /// the whole sequence's over `cp`'s group (context_parallel.h) from now
  /// on; not for incremental decoding.
  void SetContextParallel(const ContextShard& cp) { cp_ = cp; }

 protected:
  TensorParallelRegion region_;
  ContextShard cp_;
};

/// The gated delta rule (§5), token by token: with S_0 = initial_state (zeros
/// when undefined) and for t = 1..T, per batch row and head,
///   S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,
///   o_t = S_t^T q_t.
/// q, k, g: [B, T, H, dk]; v: [B, T, H, dv]; beta: [B, T, H]; g <= 0 is the
/// per-channel log forget gate. Returns o [B, T, H, dv] in the inputs' dtype;
/// `final_state`, when given, receives S_T [B, H, dk, dv].
torch::Tensor KdaRecurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta,
                           const torch::Tensor& initial_state = {}, torch::Tensor* final_state = nullptr);

/// The same recurrence in chunks of `chunk` tokens (§5): within a chunk the
/// delta-rule updates are one unit-lower-triangular solve, across chunks the
/// state is carried. Equal to KdaRecurrent up to rounding; about `chunk`
/// times fewer sequential steps. T need not be a multiple of `chunk`.
/// With `fused` and where the CUDA kernel applies (runtime/kernels/kda.h: fp32 on a
/// GPU, chunk 16/32/64), the intra-chunk products come from the kernel
/// instead of a [.., C, C, dk] decay tensor, and the solve becomes the
/// explicit inverse of the unit-lower-triangular matrix (C columns) times
/// the right-hand sides; the rest is the same torch code. `math` is the
/// chunk scan kernel's (runtime/kernels/kda.h).
torch::Tensor KdaChunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& g, const torch::Tensor& beta, std::int64_t chunk,
                         const torch::Tensor& initial_state = {}, torch::Tensor* final_state = nullptr,
                         bool fused = true, KdaMath math = KdaMath::kFp32);

/// KdaChunked after its inputs are chunked: q, k, v and the in-chunk
/// inclusive cumulative log decay `cum` as [B, H, n, C, d] (the tail padded
/// by zero rows of q, k, v and g), beta as [B, H, n, C, 1], for `tokens`
/// tokens; returns [B, tokens, H, dv]. KdaChunked is the chunking then this.
torch::Tensor KdaChunkedCore(const torch::Tensor& qc, const torch::Tensor& kc, const torch::Tensor& vc,
                             const torch::Tensor& cum, const torch::Tensor& bc, std::int64_t tokens,
                             const torch::Tensor& initial_state, torch::Tensor* final_state, bool fused,
                             KdaMath math = KdaMath::kFp32);

/// A depthwise causal convolution over time: x [B, T, C], weight [C, K];
/// y[t] = sum_j weight[:, j] * x[t - K + 1 + j] (zeros before the start).
torch::Tensor CausalDepthwiseConv(const torch::Tensor& x, const torch::Tensor& weight);

/// Rotary position embedding on the last dimension d (even) of x [B, T, H,
/// d] at positions offset..offset+T-1 along dim 1: channel pair i turns by
/// position x RopeInverseFrequencies(rope, d)[i] (specs/rope.h), times
/// RopeCosSinScale. The pairs are (i, i + d/2) (half-split), or (2i, 2i+1)
/// when rope.interleaved, which is the released DeepSeek-V3 / Kimi K2
/// weights' layout (the output stays in the input's channel order: q and k
/// are permuted alike, so their products are those of HF's de-interleaving).
torch::Tensor ApplyRope(const torch::Tensor& x, const RopeSpec& rope, std::int64_t offset = 0);
/// ApplyRope at the given positions [T] (long) along dim 1 instead.
torch::Tensor ApplyRopeAt(const torch::Tensor& x, const RopeSpec& rope, const torch::Tensor& positions);

/// A rotary embedding's inverse frequencies, RopeInverseFrequencies(rope,
/// d), made once on the host (in double) and kept on the device and in the
/// dtype last asked for: an attention module's table, so that no call
/// computes it on the host and copies it over again. Thread-safe.
class RopeFrequencies {
 public:
  RopeFrequencies(const RopeSpec& rope, std::int64_t d);
  const RopeSpec& spec() const { return rope_; }
  /// [d / 2] with `options`' device and dtype.
  torch::Tensor On(const torch::TensorOptions& options) const;

 private:
  RopeSpec rope_;
  torch::Tensor host_;  // double, on the CPU
  mutable std::mutex mu_;
  mutable torch::Tensor kept_;  // host_ on the device and in the dtype last asked for
};

/// ApplyRopeAt with the module's table.
torch::Tensor ApplyRopeAt(const torch::Tensor& x, const RopeFrequencies& freq, const torch::Tensor& positions);

/// softmax(q k^T * scale + causal mask) v with q [B, H, T, d], k [B, H, S, d],
/// v [B, H, S, dv], S >= T: the queries are the last T of the S positions
/// (query i sees keys 0..S-T+i). The softmax in fp32; on a CUDA device with
/// LibTorch 2 and S == T, PyTorch's fused scaled-dot-product attention
/// (flash or memory-efficient: the softmax inside the kernel, fp32 statistics).
torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale);

/// Kimi Delta Attention (Kimi Linear): q/k/v projections, short causal
/// convolutions with SiLU, L2-normalised q and k, the low-rank per-channel
/// forget gate g = -exp(A_log) softplus(f_b f_a x + dt_bias), beta =
/// sigmoid(b x), the gated delta rule, and a gated RMSNorm before o_proj.
class KdaImpl : public TokenMixer {
 public:
  KdaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init);
  torch::Tensor Mix(const torch::Tensor& x) override;
  torch::Tensor MixIncremental(const torch::Tensor& x, LayerCache& cache) override;
  void ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) override;

 private:
  torch::Tensor Run(const torch::Tensor& x, LayerCache* cache);  // cache null: the whole sequence
  // q, k, v, the gate and the recurrence by torch operations, from the
  // projections qx, kx, vx (convolution inputs) and fx (forget gate).
  torch::Tensor RunTorchForms(const torch::Tensor& qx, const torch::Tensor& kx, const torch::Tensor& vx,
                              const torch::Tensor& fx, const torch::Tensor& beta, LayerCache* cache);
  std::shared_ptr<ProjImpl> q_proj_, k_proj_, v_proj_, f_a_, f_b_, b_proj_, g_a_, g_b_, o_proj_;
  torch::Tensor q_conv_, k_conv_, v_conv_, a_log_, dt_bias_, o_norm_;
  std::int64_t heads_, dk_, dv_, chunk_;
  double eps_;
  bool fused_;
  KdaMath math_;
};

/// Multi-head latent attention (DeepSeek-V3 shapes): low-rank q (or full
/// rank when q_lora_rank is 0), a latent kv of kv_lora_rank plus one shared
/// rotary key, RMSNorm on the latents, and with mla.output_gate a sigmoid
/// output gate.
class MlaImpl : public TokenMixer {
 public:
  MlaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init);
  torch::Tensor Mix(const torch::Tensor& x) override;
  /// Caches the normalised latent and the rotated key (§16). Where
  /// MlaAbsorbs(t, s) (a decode step), kv_b is absorbed: the queries move
  /// into the latent space and attend over the cached latents themselves,
  /// and only the t outputs are projected up, where the plain form
  /// re-applies kv_b to all s cached latents each step.
  torch::Tensor MixIncremental(const torch::Tensor& x, LayerCache& cache) override;
  void ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) override;
  /// True when t queries over s keys cost fewer FLOPs absorbed than
  /// through the up-projected keys and values: per head and key,
  /// t (2 r + rope) + (t / s) r (nope + v) against r (nope + v) + t (nope +
  /// rope + v), r the latent's width.
  bool MlaAbsorbs(std::int64_t t, std::int64_t s) const;

 private:
  torch::Tensor Run(const torch::Tensor& x, LayerCache* cache);
  // Attention of the queries' source over the cached latent [B, S, r] and
  // rotated key [B, S, rope] with kv_b absorbed: [B, T, H * v].
  torch::Tensor AttendAbsorbed(const torch::Tensor& q_source, const torch::Tensor& latent,
                               const torch::Tensor& k_rope, const torch::Tensor& q_pos) const;
  // The gate and the output projection of the heads' outputs [B, T, H * v].
  torch::Tensor Output(const torch::Tensor& x, const torch::Tensor& o);
  // The scores' scale: YaRN's factor (RopeSoftmaxScale) over sqrt(nope + rope).
  double SoftmaxScale() const;
  std::shared_ptr<ProjImpl> q_, q_a_, q_b_, kv_a_, kv_b_, gate_, o_proj_;
  std::shared_ptr<RmsNormImpl> q_norm_, kv_norm_;
  std::int64_t heads_, nope_, rope_, v_dim_, kv_rank_;
  RopeSpec rope_spec_;
  std::shared_ptr<RopeFrequencies> rope_freq_;  // null without rotary dimensions
  bool recompute_up_;  // Megatron's mla_up_proj (ModelOptions::recompute_mla_up_proj)
  // The up-projections and the rotary embedding: (the queries' source, the
  // latent, the rotated key, the positions) -> rotated queries [B, T, H,
  // qk], keys [B, S, H, qk], and the whole kv up-projection [B, S, H, nope
  // + v] whose tail is the values.
  std::vector<torch::Tensor> UpProject(const std::vector<torch::Tensor>& in) const;
};

/// Multi-head (grouped-query) attention with RoPE, for GPT-style specs.
class MhaImpl : public TokenMixer {
 public:
  MhaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init);
  torch::Tensor Mix(const torch::Tensor& x) override;
  torch::Tensor MixIncremental(const torch::Tensor& x, LayerCache& cache) override;
  void ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) override;

 private:
  torch::Tensor Run(const torch::Tensor& x, LayerCache* cache);
  std::shared_ptr<ProjImpl> q_, k_, v_, o_proj_;
  std::int64_t heads_, kv_heads_, head_dim_;
  std::shared_ptr<RopeFrequencies> rope_freq_;
};

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_ATTENTION_H_
