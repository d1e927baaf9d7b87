// The CUDA kernels of KDA's gated delta rule (docs/runtime.md §5): the
// intra-chunk products of the chunked form, forward and backward, and the
// recurrent steps of a decode. Plain pointers and a stream, no LibTorch:
// kda.cc wraps them as tensors and autograd.
//
// Every kernel is deterministic (no atomics; each sum in a fixed order), all
// arithmetic is fp32, and every exponential is of a difference of cumulative
// log decays taken in the direction that makes it <= 0, so no gate, however
// strong, overflows.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KDA_CUDA_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KDA_CUDA_H_

#include <cstdint>

#include <cuda_runtime_api.h>

namespace kp::runtime::cuda {

/// `chunks` independent chunks of `chunk` rows, each row `dk` fp32 channels,
/// stored [chunks, chunk, dk] contiguous (KdaChunked's [B, H, n, C, dk]).
struct KdaChunks {
  std::int64_t chunks = 0;
  int chunk = 0;
  int dk = 0;
};

/// True for the shapes the intra-chunk kernels take: chunk 16, 32 or 64 and
/// dk a multiple of 32.
bool KdaIntraSupports(int chunk, int dk);

/// With G the inclusive cumulative log decay inside each chunk (so G is
/// non-increasing along rows), writes [chunks, C, C]:
///   a[i][j] = sum_c k[i][c] k[j][c] exp(G[i][c] - G[j][c])  for j <  i, else 0
///   p[i][j] = sum_c q[i][c] k[j][c] exp(G[i][c] - G[j][c])  for j <= i, else 0
cudaError_t KdaIntraForward(const KdaChunks& shape, const float* q, const float* k, const float* g_cum, float* a,
                            float* p, cudaStream_t stream);

/// The gradients of KdaIntraForward's outputs with respect to q, k and G,
/// given da and dp [chunks, C, C]; entries of da on or above the diagonal and
/// of dp above it are ignored (those outputs are constant zeros).
cudaError_t KdaIntraBackward(const KdaChunks& shape, const float* q, const float* k, const float* g_cum,
                             const float* da, const float* dp, float* dq, float* dk, float* dg_cum,
                             cudaStream_t stream);

/// The state carried across chunks, as one scan of `chunks` chunks per
/// (batch, head): x [BH, n, C, dv], b and c [BH, n, C, dk], d [BH, n, dk],
/// e [BH, n, dk, dv] (may be null: zeros), state [BH, dk, dv]. Per chunk i,
/// taken in order (or last to first with `reverse`), from S = `initial`:
///   starts_i = S;   x_i = a_i + sign_bs * b_i S;   S <- Diag(d_i) S + sign_cx * c_i^T x_i + e_i
/// and `final_state` = S at the end. KDA's forward is (a, b, c, d) = (W, Y,
/// K_to_end, e^Gamma) with signs (-1, +1): x = U, starts = the chunk-start
/// states. Its backward runs the same recurrence in reverse on the
/// gradients: (a, b, c, d, e) = (dU, K_to_end, Y, e^Gamma, dstarts), signs
/// (+1, -1), from dS_final.
///
/// With `tensor_cores` the two products of each chunk (b S and c^T x) run
/// as TF32 mma.sync with fp32 accumulation: the state stays fp32 in
/// registers and is rounded to TF32 (10 mantissa bits) only as an operand,
/// as are b, c and x; the additions of a, e and the decay are fp32. The
/// tiles of the next chunk are copied in while this one is multiplied.
/// Deterministic as the fp32 form is, but not equal to it.
struct KdaScan {
  std::int64_t batch_heads = 0;
  int chunks = 0;
  int chunk = 0;
  int dk = 0;
  int dv = 0;
  bool tensor_cores = false;
  /// With `tensor_cores` only: `starts` (and `dot_with`) are bf16, rounded
  /// from the fp32 state as they are written; the state itself stays fp32.
  bool states_bf16 = false;
};

/// True for chunk 16, 32 or 64, dk 64 or 128 and dv a multiple of 32.
bool KdaScanSupports(int chunk, int dk, int dv);

/// True where the tensor-core form takes the shape and the inputs it copies
/// 16 bytes at a time: KdaScanSupports, dv a multiple of 64, and a, b, c
/// and d 16-byte aligned.
bool KdaScanTensorCoresTake(int chunk, int dk, int dv, const float* a, const float* b, const float* c,
                            const float* d);

/// `starts` is fp32, or bf16 with `states_bf16`. With `tensor_cores`,
/// `dot_with` [BH, n, dk, dv] (starts' type) may be given (then also
/// `dot_out` [BH, n, dk, dv / 64] fp32): per chunk and row k, the sums over
/// each 64 columns v of starts_i[k][v] * dot_with_i[k][v] (the fp32 state,
/// not its rounding), which the caller adds up over the last dimension.
/// KDA's backward passes the forward's chunk-start states: the decays'
/// gradient, without a [.., dk, dv] product in memory.
cudaError_t KdaChunkScan(const KdaScan& shape, bool reverse, float sign_bs, float sign_cx, const float* a,
                         const float* b, const float* c, const float* d, const float* e, const float* initial,
                         float* x, void* starts, float* final_state, cudaStream_t stream,
                         const void* dot_with = nullptr, float* dot_out = nullptr);

/// `batch` x `steps` x `heads` tokens of the recurrence, q/k/g [B, T, H, dk],
/// v [B, T, H, dv], beta [B, T, H], states [B, H, dk, dv].
struct KdaTokens {
  std::int64_t batch = 0;
  std::int64_t steps = 0;
  int heads = 0;
  int dk = 0;
  int dv = 0;
};

/// True for dk 64 or 128 and dv a multiple of 32.
bool KdaRecurrentSupports(int dk, int dv);

/// Runs the recurrence token by token from `initial_state` (null: zeros):
///   S <- Diag(exp g) S;  S <- S + beta k (v - S^T k)^T;  o = S^T q
/// writing o [B, T, H, dv] and the final state. `initial_state` and
/// `final_state` may be the same buffer.
cudaError_t KdaRecurrentForward(const KdaTokens& shape, const float* q, const float* k, const float* v,
                                const float* g, const float* beta, const float* initial_state, float* o,
                                float* final_state, cudaStream_t stream);

}  // namespace kp::runtime::cuda

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KDA_CUDA_H_
