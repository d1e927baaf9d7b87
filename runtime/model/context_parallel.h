// Context parallelism (CP): each sequence split over a CP group along time.
//
// The split (Megatron's load balance for causal attention): the sequence of
// S tokens is cut into 2 cp chunks of L = S / (2 cp); CP rank r holds chunks
// r and 2 cp - 1 - r, concatenated, as its T = S / cp local tokens, so every
// rank has the same share of the causal mask's work.
//
// What each token mixer needs of the other ranks' tokens:
//   * MLA and MHA: every earlier key. The rank's keys (MLA: the normalised
//     latent and the rotated shared key, which are narrower than the heads'
//     keys and values: 576 against 40960 values per token for K2.6) are
//     all-gathered over CP, and the queries attend with a mask from global
//     positions (Gather; backward: the reduce-scatter of their gradients).
//   * KDA: the state after every earlier token. The chunks run in sequence
//     order, each starting from the state its predecessor ended with, passed
//     point to point (chunk r from rank r - 1, chunk 2cp - 1 - r from rank
//     r + 1; rank cp - 1 passes its first chunk's state to its second), and
//     the backward passes the states' gradients the other way (Kda). The
//     short convolutions read the previous chunk's last K - 1 inputs the
//     same way (Conv).
//   * Everything else (norms, FFNs, experts, AttnRes depth reads, the loss)
//     works per token.
//
// Every exchange is an autograd node whose backward is the conjugate
// exchange; the backward's point-to-point order is the forward's reversed,
// so no rank waits on one that waits on it. A failed exchange throws
// CommunicationError (communicator.h). Thread-safety: as the model.
#ifndef KIMI_PLAN_RUNTIME_MODEL_CONTEXT_PARALLEL_H_
#define KIMI_PLAN_RUNTIME_MODEL_CONTEXT_PARALLEL_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "specs/model_spec.h"

namespace kp::runtime {

/// The global positions of CP rank `rank`'s tokens in a sequence of
/// `seq_len` split over `cp` ranks (2 cp divides seq_len).
std::vector<std::int64_t> ContextPositions(int cp, int rank, std::int64_t seq_len);

/// InvalidArgument naming --cp unless 2 cp divides `seq_len` (with a
/// chunk at least `min_chunk` long: KDA's convolution reaches back
/// conv_kernel - 1 tokens into the previous chunk only).
Status CheckContextSplit(int cp, std::int64_t seq_len, std::int64_t min_chunk);

/// How far back a KDA layer's short convolutions read (conv_kernel - 1; 0
/// without KDA): CheckContextSplit's min_chunk for the model.
std::int64_t KdaConvReach(const ModelSpec& m);

/// A layer's view of its CP group. Default-constructed (or over one rank)
/// it is inactive and a mixer runs as without CP.
class ContextShard {
 public:
  ContextShard() = default;
  explicit ContextShard(Communicator* cp) : cp_(cp) {}  ///< not owned; outlives the layer's use
  bool active() const { return cp_ != nullptr && cp_->size() > 1; }
  int size() const { return active() ? cp_->size() : 1; }
  int rank() const { return active() ? cp_->rank() : 0; }
  /// This rank's tokens' global positions, [local] as `options` (local: the
  /// rank's token count, S / cp).
  torch::Tensor Positions(std::int64_t local, const torch::TensorOptions& options) const;
  /// Every rank's positions in Gather's order, [S].
  torch::Tensor GatheredPositions(std::int64_t local, const torch::TensorOptions& options) const;
  /// Every rank's x [B, T, ...] concatenated along time in rank order.
  torch::Tensor Gather(const torch::Tensor& x) const;
  /// CausalDepthwiseConv over the whole sequence, this rank's outputs:
  /// x [B, T, C] its inputs, weight [C, K].
  torch::Tensor Conv(const torch::Tensor& x, const torch::Tensor& weight) const;
  /// KdaChunked over the whole sequence from a zero state, this rank's
  /// outputs [B, T, H, dv]; q, k, g [B, T, H, dk], v [B, T, H, dv], beta
  /// [B, T, H] this rank's inputs.
  torch::Tensor Kda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, const torch::Tensor& g,
                    const torch::Tensor& beta, std::int64_t chunk) const;

 private:
  Communicator* cp_ = nullptr;
};

/// This CP rank's tokens of x along `dim` (no autograd needed: inputs).
torch::Tensor KeepContextShard(const torch::Tensor& x, int cp, int rank, std::int64_t dim);

/// softmax(q k^T * scale, masked to keys at positions <= the query's) v, with
/// q [B, H, T, d], k [B, H, S, d], v [B, H, S, dv], q_pos [T] and k_pos [S]
/// the tokens' global positions; the softmax in fp32.
torch::Tensor PositionCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale, const torch::Tensor& q_pos, const torch::Tensor& k_pos);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_CONTEXT_PARALLEL_H_
