#include "runtime/model/attention.h"

#include <cmath>
#include <limits>
#include <utility>

#include <torch/version.h>

#include "runtime/kernels/kernels.h"
#include "runtime/model/recompute.h"
#include "specs/rope.h"

namespace kp::runtime {

namespace {

using torch::indexing::Slice;

torch::Tensor L2Normalize(const torch::Tensor& x, double eps) {
  return x * torch::rsqrt(x.pow(2).sum(-1, /*keepdim=*/true) + eps);
}

// [B, T, H, d] -> [B, H, n, C, d], zero-padded at the end of time to n * C.
torch::Tensor Chunked(const torch::Tensor& x, std::int64_t chunk, std::int64_t padded) {
  torch::Tensor y = x.transpose(1, 2);  // [B, H, T, d]
  const std::int64_t t = y.size(2);
  if (padded > t) {
    auto pad_shape = y.sizes().vec();
    pad_shape[2] = padded - t;
    y = torch::cat({y, torch::zeros(pad_shape, y.options())}, 2);
  }
  auto shape = y.sizes().vec();
  shape[2] = padded / chunk;
  shape.insert(shape.begin() + 3, chunk);
  return y.reshape(shape);
}

// KdaChunked's A (strict lower) and P (lower inclusive) from the chunked q,
// k and cumulative log decay [.., C, dk], through the decay tensor
// exp(G_t - G_s) [.., C, C, dk], masked to 0 above the diagonal before the
// exp so nothing overflows.
std::pair<torch::Tensor, torch::Tensor> IntraChunkProducts(const torch::Tensor& qc, const torch::Tensor& kc,
                                                           const torch::Tensor& cum) {
  const std::int64_t chunk = qc.size(-2);
  const torch::Tensor lower_incl = torch::ones({chunk, chunk}, qc.options().dtype(torch::kBool)).tril();
  const torch::Tensor diff = cum.unsqueeze(-2) - cum.unsqueeze(-3);           // [.., t, s, dk]
  const torch::Tensor decay = torch::exp(diff.masked_fill(lower_incl.logical_not().unsqueeze(-1),
                                                          -std::numeric_limits<double>::infinity()));
  const torch::Tensor kk = (kc.unsqueeze(-2) * kc.unsqueeze(-3) * decay).sum(-1);  // [.., t, s]
  const torch::Tensor qk = (qc.unsqueeze(-2) * kc.unsqueeze(-3) * decay).sum(-1);
  return {kk * torch::ones({chunk, chunk}, qc.options()).tril(-1), qk};
}

// KdaChunkedCore's elementwise products of the chunked inputs, with G_C
// each chunk's last row.
struct ChunkProducts {
  torch::Tensor q_decayed;       // Q e^G
  torch::Tensor k_beta_decayed;  // Diag(beta) K e^G
  torch::Tensor k_to_end;        // K e^{G_C - G}
  torch::Tensor v_beta;          // Diag(beta) V
  torch::Tensor chunk_decay;     // e^{G_C} [B, H, n, dk]
};

ChunkProducts Products(const torch::Tensor& qc, const torch::Tensor& kc, const torch::Tensor& vc,
                       const torch::Tensor& cum, const torch::Tensor& bc, bool fused) {
  if (fused && KdaChunkProductsKernelApplies(qc, vc)) {
    const std::vector<torch::Tensor> p = KdaChunkProductsKernel(qc, kc, vc, cum, bc);
    return {p[0], p[1], p[2], p[3], p[4]};
  }
  const torch::Tensor decayed = torch::exp(cum), last = cum.narrow(3, cum.size(3) - 1, 1);  // G_C [.., 1, dk]
  return {qc * decayed, bc * (kc * decayed), kc * torch::exp(last - cum), bc * vc, torch::exp(last).squeeze(-2)};
}

// The causal convolution of the new inputs x [B, T, C] continued from
// `state`, the K-1 inputs before them (zeros: the start of the sequence);
// `state` becomes the last K-1 of the prefix and x, overwritten in place
// (a fixed cache's buffers do not move).
torch::Tensor CausalDepthwiseConvStep(const torch::Tensor& x, const torch::Tensor& weight, torch::Tensor& state) {
  const std::int64_t c = weight.size(0), kernel = weight.size(1);
  if (!state.defined()) state = torch::zeros({x.size(0), kernel - 1, c}, x.options());
  const torch::Tensor full = torch::cat({state, x}, 1);
  state.copy_(full.narrow(1, full.size(1) - (kernel - 1), kernel - 1));
  const std::int64_t no_padding = 0;  // a literal 0 would also convert to the string overload
  return torch::conv1d(full.transpose(1, 2), weight.to(x.scalar_type()).unsqueeze(1), {}, /*stride=*/1, no_padding,
                       /*dilation=*/1, /*groups=*/c)
      .transpose(1, 2);
}

// The first `used` positions of `storage` followed by `fresh` along time
// (dim 1), written into `storage` and returned as a view of it. The
// storage's capacity doubles when full, so a decode of n tokens copies the
// cache O(log n) times, where a concatenation per token copied it n times
// (O(n^2) bytes: at 8k tokens, hundreds of MB a layer a step).
torch::Tensor AppendTime(torch::Tensor& storage, std::int64_t used, const torch::Tensor& fresh) {
  const std::int64_t need = used + fresh.size(1);
  if (!storage.defined() || storage.size(1) < need) {
    std::vector<std::int64_t> sizes = fresh.sizes().vec();
    sizes[1] = storage.defined() ? std::max(need, 2 * storage.size(1)) : need;
    torch::Tensor grown = torch::empty(sizes, fresh.options());
    if (used > 0) grown.narrow(1, 0, used).copy_(storage.narrow(1, 0, used));
    storage = grown;
  }
  storage.narrow(1, used, fresh.size(1)).copy_(fresh);
  return storage.narrow(1, 0, need);
}

// Under SP a mixer's input is a sequence shard; decoding appends whole
// positions to a cache, which a shard cannot.
void CheckDecodable(const TensorParallelRegion& region, const LayerCache* cache) {
  TORCH_CHECK(cache == nullptr || !region.sequence_parallel(),
              "incremental decoding runs without sequence parallelism");
}

// The new tokens' absolute positions [T]: the CP shard's, or after the
// cache's prefix (read on the device for a fixed cache).
torch::Tensor QueryPositions(const LayerCache* cache, const ContextShard& cp, std::int64_t t,
                             const torch::TensorOptions& longs) {
  if (cp.active()) return cp.Positions(t, longs);
  if (cache && cache->fixed()) return cache->position + torch::arange(t, longs);
  const std::int64_t offset = cache ? cache->length : 0;
  return torch::arange(offset, offset + t, longs);
}

// The cache's per-token storage with `fresh` [B, T, ...] at the new
// positions `q_pos`: appended (the view of the prefix grows), or written in
// place for a fixed cache (the whole capacity; LayerCache).
torch::Tensor CacheAlongTime(const LayerCache& cache, torch::Tensor& storage, const torch::Tensor& q_pos,
                             const torch::Tensor& fresh) {
  if (!cache.fixed()) return AppendTime(storage, cache.length, fresh);
  // Past the capacity the write would be a device-side fault; the host sees
  // it coming where it runs the steps (not in a graph's replays).
  TORCH_CHECK(cache.length + fresh.size(1) <= storage.size(1), "a fixed decode cache of ", storage.size(1),
              " positions cannot take ", fresh.size(1), " more after ", cache.length);
  storage.index_copy_(1, q_pos, fresh.to(storage.scalar_type()));
  return storage;
}

// [T, S]: true where key position s is after query position q_pos[t]. For
// S keys of which the queries are the last T, the future mask triu(S-T+1).
torch::Tensor KeysAfter(const torch::Tensor& q_pos, std::int64_t s) {
  return torch::arange(s, q_pos.options()).view({1, -1}) > q_pos.view({-1, 1});
}

}  // namespace

void LayerCache::Map(const std::function<torch::Tensor(const torch::Tensor&)>& f) {
  // `position` is the cache's, not a row's: kept as it is.
  for (const std::vector<torch::Tensor*>& kind : {States(), PerToken()})
    for (torch::Tensor* t : kind)
      if (t->defined()) *t = f(*t);
}

torch::Tensor KdaRecurrent(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const torch::Tensor& g, const torch::Tensor& beta, const torch::Tensor& initial_state,
                           torch::Tensor* final_state) {
  const std::int64_t b = q.size(0), t_len = q.size(1), h = q.size(2), dk = q.size(3), dv = v.size(3);
  torch::Tensor s = initial_state.defined() ? initial_state : torch::zeros({b, h, dk, dv}, q.options());
  std::vector<torch::Tensor> outs;
  outs.reserve(t_len);
  for (std::int64_t t = 0; t < t_len; ++t) {
    const torch::Tensor kt = k.select(1, t);                                    // [B, H, dk]
    s = s * torch::exp(g.select(1, t)).unsqueeze(-1);                          // Diag(alpha) S
    const torch::Tensor err = v.select(1, t) - torch::matmul(kt.unsqueeze(-2), s).squeeze(-2);  // v - S^T k
    s = s + beta.select(1, t).unsqueeze(-1).unsqueeze(-1) * kt.unsqueeze(-1) * err.unsqueeze(-2);
    outs.push_back(torch::matmul(q.select(1, t).unsqueeze(-2), s).squeeze(-2));  // S^T q
  }
  if (final_state) *final_state = s;
  return torch::stack(outs, 1);
}

torch::Tensor KdaChunked(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& g, const torch::Tensor& beta, std::int64_t chunk,
                         const torch::Tensor& initial_state, torch::Tensor* final_state, bool fused, KdaMath math) {
  const std::int64_t t_len = q.size(1), padded = (t_len + chunk - 1) / chunk * chunk;
  // Padding tokens have k = 0, beta = 0 and g = 0: they leave the state alone.
  const torch::Tensor cum = Chunked(g, chunk, padded).cumsum(3);  // G_t, inclusive
  return KdaChunkedCore(Chunked(q, chunk, padded), Chunked(k, chunk, padded), Chunked(v, chunk, padded), cum,
                        Chunked(beta.unsqueeze(-1), chunk, padded), t_len, initial_state, final_state, fused, math);
}

torch::Tensor KdaChunkedCore(const torch::Tensor& qc, const torch::Tensor& kc, const torch::Tensor& vc,
                             const torch::Tensor& cum, const torch::Tensor& bc, std::int64_t t_len,
                             const torch::Tensor& initial_state, torch::Tensor* final_state, bool fused,
                             KdaMath math) {
  const std::int64_t b = qc.size(0), h = qc.size(1), n = qc.size(2), chunk = qc.size(3), dk = qc.size(4),
                     dv = vc.size(4), padded = n * chunk;
  const auto [strict, qk] =
      fused && KdaIntraKernelApplies(qc) ? KdaIntraChunk(qc, kc, cum) : IntraChunkProducts(qc, kc, cum);
  const torch::Tensor eye = torch::eye(chunk, qc.options());
  const torch::Tensor tri = eye + bc * strict;  // I + Diag(beta) A, unit lower triangular
  torch::Tensor s = initial_state.defined() ? initial_state : torch::zeros({b, h, dk, dv}, qc.options());
  torch::Tensor w, y, inverse;
  if (fused) {
    // The UT transform: the inverse once per chunk (C columns), then two
    // batched products, instead of two solves of dv and dk columns; the
    // batched solve is the slow part on a GPU (a kernel per 64 columns).
    inverse = torch::linalg_solve_triangular(tri, eye.expand_as(tri), /*upper=*/false, /*left=*/true,
                                             /*unitriangular=*/true);
    if (KdaChunkCoreKernelApplies(qc, vc)) {
      const auto [out, last] = KdaChunkCoreKernel(qc, kc, vc, cum, bc, inverse, qk, s.expand({b, h, dk, dv}), math);
      if (final_state) *final_state = last;
      return out.reshape({b, h, padded, dv}).narrow(2, 0, t_len).transpose(1, 2);
    }
  }
  const ChunkProducts x = Products(qc, kc, vc, cum, bc, fused);
  if (fused) {
    w = torch::matmul(inverse, x.v_beta);
    y = torch::matmul(inverse, x.k_beta_decayed);
  } else {
    w = torch::linalg_solve_triangular(tri, x.v_beta, /*upper=*/false, /*left=*/true, /*unitriangular=*/true);
    y = torch::linalg_solve_triangular(tri, x.k_beta_decayed, false, true, true);
  }
  const torch::Tensor &q_decayed = x.q_decayed, &k_to_end = x.k_to_end;
  if (fused && KdaScanKernelApplies(w, y)) {
    // The sequential loop below as one kernel; the outputs of all chunks at
    // once from the states it leaves at the chunk starts.
    const KdaScanResult scan = KdaStateScan(w, y, k_to_end, x.chunk_decay, s.expand({b, h, dk, dv}), math);
    if (final_state) *final_state = scan.final_state;
    const torch::Tensor out = torch::matmul(q_decayed, scan.starts) + torch::matmul(qk, scan.u);  // [B, H, n, C, dv]
    return out.reshape({b, h, padded, dv}).narrow(2, 0, t_len).transpose(1, 2);
  }
  const torch::Tensor chunk_decay = x.chunk_decay.unsqueeze(-1);            // [.., dk, 1]
  std::vector<torch::Tensor> outs;
  outs.reserve(n);
  for (std::int64_t i = 0; i < n; ++i) {
    const torch::Tensor u = w.select(2, i) - torch::matmul(y.select(2, i), s);   // [B, H, C, dv]
    outs.push_back(torch::matmul(q_decayed.select(2, i), s) + torch::matmul(qk.select(2, i), u));
    s = chunk_decay.select(2, i) * s + torch::matmul(k_to_end.select(2, i).transpose(-1, -2), u);
  }
  if (final_state) *final_state = s;
  return torch::cat(outs, 2).narrow(2, 0, t_len).transpose(1, 2);  // [B, T, H, dv]
}

torch::Tensor CausalDepthwiseConv(const torch::Tensor& x, const torch::Tensor& weight) {
  const std::int64_t t = x.size(1), c = weight.size(0), kernel = weight.size(1);
  const torch::Tensor y = torch::conv1d(x.transpose(1, 2), weight.to(x.scalar_type()).unsqueeze(1), {},
                                        /*stride=*/1, /*padding=*/kernel - 1, /*dilation=*/1, /*groups=*/c);
  return y.narrow(2, 0, t).transpose(1, 2);
}

torch::Tensor ApplyRope(const torch::Tensor& x, const RopeSpec& rope, std::int64_t offset) {
  return ApplyRopeAt(x, rope, torch::arange(offset, offset + x.size(1), x.options().dtype(torch::kLong)));
}

torch::Tensor ApplyRopeAt(const torch::Tensor& x, const RopeSpec& rope, const torch::Tensor& positions) {
  return ApplyRopeAt(x, RopeFrequencies(rope, x.size(-1)), positions);
}

// The frequencies in double on the host, then in the activations' float
// type, as the reference computes them in fp32 from the same formula.
RopeFrequencies::RopeFrequencies(const RopeSpec& rope, std::int64_t d)
    : rope_(rope), host_(torch::tensor(RopeInverseFrequencies(rope, static_cast<int>(d)), torch::kDouble)) {}

torch::Tensor RopeFrequencies::On(const torch::TensorOptions& options) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!kept_.defined() || kept_.device() != options.device() || kept_.scalar_type() != options.dtype().toScalarType())
    kept_ = host_.to(options);
  return kept_;
}

torch::Tensor ApplyRopeAt(const torch::Tensor& x, const RopeFrequencies& freq, const torch::Tensor& positions) {
  const RopeSpec& rope = freq.spec();
  const std::int64_t t = x.size(1), d = x.size(-1), half = d / 2;
  const torch::Tensor xf = Upcast(x);
  const auto fopts = xf.options();
  const torch::Tensor inv_freq = freq.On(fopts);
  TORCH_CHECK(inv_freq.size(0) == half, "ApplyRopeAt: the table has ", inv_freq.size(0), " frequencies, x has ", half,
              " pairs");
  const torch::Tensor angles = torch::outer(positions.to(fopts), inv_freq).view({1, t, 1, half});
  const double scale = RopeCosSinScale(rope);
  const torch::Tensor cos = torch::cos(angles) * scale, sin = torch::sin(angles) * scale;
  if (rope.interleaved) {
    std::vector<std::int64_t> paired = xf.sizes().vec();
    paired.back() = half;
    paired.push_back(2);
    const torch::Tensor pairs = xf.reshape(paired);
    const torch::Tensor x1 = pairs.select(-1, 0), x2 = pairs.select(-1, 1);
    return torch::stack({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).flatten(-2).to(x.scalar_type());
  }
  const torch::Tensor x1 = xf.narrow(-1, 0, half), x2 = xf.narrow(-1, half, half);
  return torch::cat({x1 * cos - x2 * sin, x2 * cos + x1 * sin}, -1).to(x.scalar_type());
}

namespace {

// The keys each of t queries may not see when they are the last t of s
// positions: [t, s] bool, true above the shifted diagonal.
torch::Tensor FutureMask(std::int64_t t, std::int64_t s, const torch::TensorOptions& options) {
  return torch::ones({t, s}, options.dtype(torch::kBool)).triu(s - t + 1);
}

}  // namespace

torch::Tensor CausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              double scale) {
  const std::int64_t t = q.size(2), s = k.size(2);
#if TORCH_VERSION_MAJOR >= 2
  // On a GPU the fused kernel (flash or memory-efficient attention), the
  // kernel the planner prices; it never materialises the t x s scores. Only
  // for a full square: its causal mask is aligned top-left, which is the
  // decoder's mask only when t == s.
  if (q.is_cuda() && t == s)
    return at::scaled_dot_product_attention(q, k, v, {}, 0.0, /*is_causal=*/true, scale);
#endif
  const torch::Tensor scores = Upcast(torch::matmul(q, k.transpose(-1, -2))) * scale;
  const torch::Tensor future = FutureMask(t, s, q.options());
  const torch::Tensor p = torch::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(p.to(v.scalar_type()), v);
}

// Causal attention of q [B, T, H, d] over k, v [B, S, H, .], [B, T, H, dv]
// out: the keys are the queries' own sequence (S - T earlier ones cached
// first), with CP every CP rank's, masked by global positions, or with
// `keys_at_positions` a fixed cache's capacity, key s at position s.
torch::Tensor Attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, double scale,
                     const torch::Tensor& q_pos, const ContextShard& cp, std::int64_t t, bool keys_at_positions) {
  const torch::Tensor qt = q.transpose(1, 2), kt = k.transpose(1, 2), vt = v.transpose(1, 2);
  torch::Tensor o;
  if (cp.active())
    o = PositionCausalAttention(qt, kt, vt, scale, q_pos, cp.GatheredPositions(t, q_pos.options()));
  else if (keys_at_positions)
    o = PositionCausalAttention(qt, kt, vt, scale, q_pos, torch::arange(k.size(1), q_pos.options()));
  else
    o = CausalAttention(qt, kt, vt, scale);
  return o.transpose(1, 2);
}

// ------------------------------------------------------------------ KDA

KdaImpl::KdaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init)
    : heads_(spec.heads), dk_(spec.kda.head_dim_k), dv_(spec.kda.head_dim_v), chunk_(options.kda_chunk),
      eps_(spec.norm_eps), fused_(options.fused_kernels),
      math_(options.kda_tensor_cores ? KdaMath::kTensorCores : KdaMath::kFp32) {
  const std::int64_t d = spec.hidden, hk = heads_ * dk_, hv = heads_ * dv_, kernel = spec.kda.conv_kernel;
  auto proj = [&](const char* name, std::int64_t in, std::int64_t out, double std, bool lora) {
    return register_module(name, std::make_shared<ProjImpl>(in, out, std, init, lora));
  };
  q_proj_ = proj("q_proj", d, hk, init_std, true);
  k_proj_ = proj("k_proj", d, hk, init_std, true);
  v_proj_ = proj("v_proj", d, hv, init_std, true);
  const double conv_bound = 1.0 / std::sqrt(static_cast<double>(kernel));
  q_conv_ = register_parameter("q_conv", init.Uniform({hk, kernel}, -conv_bound, conv_bound));
  k_conv_ = register_parameter("k_conv", init.Uniform({hk, kernel}, -conv_bound, conv_bound));
  v_conv_ = register_parameter("v_conv", init.Uniform({hv, kernel}, -conv_bound, conv_bound));
  f_a_ = proj("f_a", d, dk_, init_std, false);
  f_b_ = proj("f_b", dk_, hk, init_std, false);
  // Kimi Linear's decay init: A in [1, 16] per head; dt in [1e-3, 0.1] per
  // channel stored through the inverse softplus.
  a_log_ = register_parameter("A_log", torch::log(init.Uniform({heads_}, 1.0, 16.0)));
  const torch::Tensor dt = torch::exp(init.Uniform({hk}, std::log(1e-3), std::log(0.1)));
  dt_bias_ = register_parameter("dt_bias", dt + torch::log(-torch::expm1(-dt)));
  b_proj_ = proj("b_proj", d, heads_, init_std, false);
  g_a_ = proj("g_a", d, dv_, init_std, false);
  g_b_ = proj("g_b", dv_, hv, init_std, false);
  o_norm_ = register_parameter("o_norm", torch::ones({dv_}));
  o_proj_ = proj("o_proj", hv, d, out_std, true);
}

torch::Tensor KdaImpl::Mix(const torch::Tensor& x) { return Run(x, nullptr); }

torch::Tensor KdaImpl::MixIncremental(const torch::Tensor& x, LayerCache& cache) { return Run(x, &cache); }

torch::Tensor KdaImpl::RunTorchForms(const torch::Tensor& qx, const torch::Tensor& kx, const torch::Tensor& vx,
                                     const torch::Tensor& fx, const torch::Tensor& beta, LayerCache* cache) {
  const std::int64_t b = qx.size(0), t = qx.size(1);
  // The convolutions, the recurrence and the gated norm run in fp32.
  auto conv = [&](const torch::Tensor& proj, const torch::Tensor& w, std::int64_t dim, torch::Tensor* state) {
    const torch::Tensor in = Upcast(proj);
    return torch::silu(state ? CausalDepthwiseConvStep(in, w, *state) : cp_.Conv(in, w)).view({b, t, heads_, dim});
  };
  const torch::Tensor q = L2Normalize(conv(qx, q_conv_, dk_, cache ? &cache->q_conv : nullptr), eps_) /
                          std::sqrt(static_cast<double>(dk_));
  const torch::Tensor k = L2Normalize(conv(kx, k_conv_, dk_, cache ? &cache->k_conv : nullptr), eps_);
  const torch::Tensor v = conv(vx, v_conv_, dv_, cache ? &cache->v_conv : nullptr);
  const torch::Tensor forget = Upcast(fx).view({b, t, heads_, dk_});
  const torch::Tensor g = -torch::exp(a_log_).view({1, 1, heads_, 1}) *
                          torch::softplus(forget + dt_bias_.view({heads_, dk_}));
  if (!cache && cp_.active()) return cp_.Kda(q, k, v, g, beta, chunk_);
  if (!cache) return chunk_ > 0 ? KdaChunked(q, k, v, g, beta, chunk_, {}, nullptr, fused_, math_) : KdaRecurrent(q, k, v, g, beta);
  // A decode step is one token: the recurrent form; a long prefill is chunked.
  const torch::Tensor s0 = cache->state;
  torch::Tensor o;
  torch::Tensor s1;
  if (chunk_ > 0 && t >= chunk_)
    o = KdaChunked(q, k, v, g, beta, chunk_, s0, &s1, fused_, math_);
  else if (fused_ && KdaRecurrentKernelApplies(q, v))
    o = KdaRecurrentKernel(q, k, v, g, beta, s0, &s1);
  else
    o = KdaRecurrent(q, k, v, g, beta, s0, &s1);
  if (cache->fixed())
    cache->state.copy_(s1);  // in place: a fixed cache's buffers do not move
  else
    cache->state = s1;
  cache->length += t;
  return o;
}

void KdaImpl::ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) {
  region_ = region;
  const std::int64_t local = heads_ / region.size(), h0 = region.rank() * local;
  const std::int64_t k0 = h0 * dk_, kn = local * dk_, v0 = h0 * dv_, vn = local * dv_;
  split->Keep("q_proj.weight", q_proj_->weight(), 0, k0, kn);
  split->Keep("k_proj.weight", k_proj_->weight(), 0, k0, kn);
  split->Keep("v_proj.weight", v_proj_->weight(), 0, v0, vn);
  split->Keep("q_conv", q_conv_, 0, k0, kn);
  split->Keep("k_conv", k_conv_, 0, k0, kn);
  split->Keep("v_conv", v_conv_, 0, v0, vn);
  split->Keep("f_b.weight", f_b_->weight(), 0, k0, kn);
  split->Keep("A_log", a_log_, 0, h0, local);
  split->Keep("dt_bias", dt_bias_, 0, k0, kn);
  split->Keep("b_proj.weight", b_proj_->weight(), 0, h0, local);
  split->Keep("g_b.weight", g_b_->weight(), 0, v0, vn);
  split->Keep("o_proj.weight", o_proj_->weight(), 1, v0, vn);
  split->partial.push_back("o_norm");  // every head's norm uses it
  heads_ = local;
}

torch::Tensor KdaImpl::Run(const torch::Tensor& x_in, LayerCache* cache) {
  CheckDecodable(region_, cache);
  // The low-rank gates' first maps run on what this rank holds; their
  // narrow outputs enter the region, as the input of the split maps does.
  const torch::Tensor x = region_.Enter(x_in);
  const std::int64_t b = x.size(0), t = x.size(1), width = q_conv_.size(1);
  const torch::Tensor qx = q_proj_->forward(x), kx = k_proj_->forward(x), vx = v_proj_->forward(x);
  const torch::Tensor fx = f_b_->forward(region_.Enter(f_a_->forward(x_in)));
  const torch::Tensor beta = torch::sigmoid(Upcast(b_proj_->forward(x)));
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(dk_));
  torch::Tensor o;
  if (!cache && !cp_.active() && chunk_ > 0 && fused_ && KdaPrepKernelsApply(qx, dk_, width) && KdaPrepKernelsApply(vx, dv_, width) &&
      KdaPrepKernelsApply(fx, dk_, 1)) {
    // The convolutions, norms and gate straight into the chunked layout,
    // recomputed in backward from the projections.
    const std::int64_t padded = (t + chunk_ - 1) / chunk_ * chunk_;
    o = KdaChunkedCore(KdaShortConvChunked(qx, q_conv_, heads_, chunk_, /*l2=*/true, q_scale, eps_),
                       KdaShortConvChunked(kx, k_conv_, heads_, chunk_, /*l2=*/true, 1.0, eps_),
                       KdaShortConvChunked(vx, v_conv_, heads_, chunk_, /*l2=*/false, 1.0, eps_),
                       KdaGateCumChunked(fx, a_log_, dt_bias_, heads_, chunk_),
                       Chunked(beta.unsqueeze(-1), chunk_, padded), t, {}, nullptr, /*fused=*/true, math_);
  } else {
    o = RunTorchForms(qx, kx, vx, fx, beta, cache);
  }
  const torch::Tensor gate_proj = g_b_->forward(region_.Enter(g_a_->forward(x_in)));
  torch::Tensor normed;
  if (fused_ && GatedRmsNormKernelApplies(o, gate_proj)) {
    normed = GatedRmsNormKernel(o, gate_proj, o_norm_, eps_);
  } else {
    const torch::Tensor gate = Upcast(gate_proj).view({b, t, heads_, dv_});
    const torch::Tensor rms = fused_ && RmsNormKernelApplies(o) ? RmsNormKernel(o, o_norm_, eps_)
                                                                 : RmsNormalize(o, eps_) * o_norm_;
    normed = (rms * torch::sigmoid(gate)).reshape({b, t, heads_ * dv_}).to(x.scalar_type());
  }
  return region_.Exit(o_proj_->forward(normed));
}

// ------------------------------------------------------------------ MLA

MlaImpl::MlaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init)
    : heads_(spec.heads), nope_(spec.mla.qk_nope_head_dim), rope_(spec.mla.qk_rope_head_dim),
      v_dim_(spec.mla.v_head_dim), kv_rank_(spec.mla.kv_lora_rank), rope_spec_(spec.rope),
      rope_freq_(rope_ > 0 ? std::make_shared<RopeFrequencies>(spec.rope, rope_) : nullptr),
      recompute_up_(options.recompute_mla_up_proj) {
  const std::int64_t d = spec.hidden, qk = nope_ + rope_, q_rank = spec.mla.q_lora_rank;
  auto proj = [&](const char* name, std::int64_t in, std::int64_t out, double std) {
    return register_module(name, std::make_shared<ProjImpl>(in, out, std, init, true));
  };
  if (q_rank > 0) {
    q_a_ = proj("q_a", d, q_rank, init_std);
    q_norm_ = register_module("q_norm", std::make_shared<RmsNormImpl>(q_rank, spec.norm_eps, options.fused_kernels));
    q_b_ = proj("q_b", q_rank, heads_ * qk, init_std);
  } else {
    q_ = proj("q", d, heads_ * qk, init_std);
  }
  kv_a_ = proj("kv_a", d, kv_rank_ + rope_, init_std);
  kv_norm_ = register_module("kv_norm", std::make_shared<RmsNormImpl>(kv_rank_, spec.norm_eps, options.fused_kernels));
  kv_b_ = proj("kv_b", kv_rank_, heads_ * (nope_ + v_dim_), init_std);
  if (spec.mla.output_gate) gate_ = proj("gate", d, heads_ * v_dim_, init_std);
  o_proj_ = proj("o_proj", heads_ * v_dim_, d, out_std);
}

torch::Tensor MlaImpl::Mix(const torch::Tensor& x) { return Run(x, nullptr); }

torch::Tensor MlaImpl::MixIncremental(const torch::Tensor& x, LayerCache& cache) { return Run(x, &cache); }

void MlaImpl::ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) {
  region_ = region;
  const std::int64_t local = heads_ / region.size(), h0 = region.rank() * local, qk = nope_ + rope_;
  split->Keep(q_ ? "q.weight" : "q_b.weight", (q_ ? q_ : q_b_)->weight(), 0, h0 * qk, local * qk);
  split->Keep("kv_b.weight", kv_b_->weight(), 0, h0 * (nope_ + v_dim_), local * (nope_ + v_dim_));
  if (gate_) split->Keep("gate.weight", gate_->weight(), 0, h0 * v_dim_, local * v_dim_);
  split->Keep("o_proj.weight", o_proj_->weight(), 1, h0 * v_dim_, local * v_dim_);
  heads_ = local;
}

std::vector<torch::Tensor> MlaImpl::UpProject(const std::vector<torch::Tensor>& in) const {
  const torch::Tensor& q_source = in[0];
  const torch::Tensor& latent = in[1];
  const torch::Tensor& q_pos = in.back();
  const std::int64_t b = q_source.size(0), t = q_source.size(1), s = latent.size(1);
  const torch::Tensor q = (q_ ? q_ : q_b_)->forward(q_source);
  const torch::Tensor kv_up = kv_b_->forward(latent);
  if (rope_ == 0) return {q, kv_up};
  const torch::Tensor q_heads = q.view({b, t, heads_, nope_ + rope_});
  const torch::Tensor q_full =
      torch::cat({q_heads.narrow(-1, 0, nope_), ApplyRopeAt(q_heads.narrow(-1, nope_, rope_), *rope_freq_, q_pos)}, -1);
  const torch::Tensor k_full = torch::cat({kv_up.view({b, s, heads_, nope_ + v_dim_}).narrow(-1, 0, nope_),
                                           in[2].unsqueeze(2).expand({b, s, heads_, rope_})},
                                          -1);
  return {q_full, kv_up, k_full};
}

torch::Tensor MlaImpl::Run(const torch::Tensor& x_in, LayerCache* cache) {
  CheckDecodable(region_, cache);
  // The down-projections and their norms run on what this rank holds; the
  // latents enter the region (narrower than x, so cheaper to gather).
  const torch::Tensor x = region_.Enter(x_in);
  const std::int64_t b = x.size(0), t = x.size(1);
  const torch::Tensor q_source = q_ ? x : region_.Enter(q_norm_->forward(q_a_->forward(x_in)));
  const torch::Tensor kv = kv_a_->forward(x_in);
  torch::Tensor latent = kv_norm_->forward(kv.narrow(-1, 0, kv_rank_));  // [B, T, r]
  torch::Tensor rope_in = rope_ > 0 ? kv.narrow(-1, kv_rank_, rope_) : torch::Tensor();
  if (region_.active()) {  // one collective for both
    const torch::Tensor both = region_.Enter(rope_ > 0 ? torch::cat({latent, rope_in}, -1) : latent);
    latent = both.narrow(-1, 0, kv_rank_);
    if (rope_ > 0) rope_in = both.narrow(-1, kv_rank_, rope_);
  }
  // With CP the rotary positions are the tokens' global ones, and the keys
  // (latent and rotated key, narrower than the heads' keys) are every CP
  // rank's, gathered.
  const torch::Tensor q_pos = QueryPositions(cache, cp_, t, x.options().dtype(torch::kLong));
  torch::Tensor k_rope;  // [B, T, rope]
  if (rope_ > 0) k_rope = ApplyRopeAt(rope_in.unsqueeze(2), *rope_freq_, q_pos).squeeze(2);
  if (cache) {
    latent = CacheAlongTime(*cache, cache->latent, q_pos, latent);
    if (rope_ > 0) k_rope = CacheAlongTime(*cache, cache->rope_key, q_pos, k_rope);
    cache->length += t;
  }
  if (cp_.active()) {
    const torch::Tensor both = cp_.Gather(rope_ > 0 ? torch::cat({latent, k_rope}, -1) : latent);
    latent = both.narrow(-1, 0, kv_rank_);
    if (rope_ > 0) k_rope = both.narrow(-1, kv_rank_, rope_);
  }
  const std::int64_t s = latent.size(1);  // key positions
  if (cache && !cp_.active() && MlaAbsorbs(t, s)) return Output(x, AttendAbsorbed(q_source, latent, k_rope, q_pos));
  std::vector<torch::Tensor> up_in{q_source, latent};
  if (rope_ > 0) up_in.push_back(k_rope);
  up_in.push_back(q_pos);
  // Megatron's mla_up_proj: the rotated queries, keys and values are freed
  // once the attention core has saved them, and remade for its backward.
  OutputRecompute up;
  std::vector<torch::Tensor> up_out;
  if (recompute_up_) {
    std::vector<torch::Tensor> params = TrainableOf(*(q_ ? q_ : q_b_));
    for (const torch::Tensor& p : TrainableOf(*kv_b_)) params.push_back(p);
    up_out = up.Run([this](const std::vector<torch::Tensor>& in) { return UpProject(in); }, up_in, params);
  } else {
    up_out = UpProject(up_in);
  }
  const torch::Tensor kv_up = up_out[1].view({b, s, heads_, nope_ + v_dim_});
  const torch::Tensor q_full = up_out[0].view({b, t, heads_, nope_ + rope_});
  const torch::Tensor k_full = rope_ > 0 ? up_out[2] : kv_up.narrow(-1, 0, nope_);
  const torch::Tensor v = kv_up.narrow(-1, nope_, v_dim_);
  const torch::Tensor o =
      Attend(q_full, k_full, v, SoftmaxScale(), q_pos, cp_, t, cache && cache->fixed()).reshape({b, t, heads_ * v_dim_});
  if (recompute_up_) up.DiscardOutputs(o);
  return Output(x, o);
}

torch::Tensor MlaImpl::Output(const torch::Tensor& x, const torch::Tensor& o) {
  const torch::Tensor gated = gate_ ? o * torch::sigmoid(Upcast(gate_->forward(x))).to(x.scalar_type()) : o;
  return region_.Exit(o_proj_->forward(gated));
}

double MlaImpl::SoftmaxScale() const {
  return RopeSoftmaxScale(rope_spec_) / std::sqrt(static_cast<double>(nope_ + rope_));
}

bool MlaImpl::MlaAbsorbs(std::int64_t t, std::int64_t s) const {
  const double r = static_cast<double>(kv_rank_), up = r * static_cast<double>(nope_ + v_dim_);
  const double absorbed = t * (2 * r + rope_) + static_cast<double>(t) / s * up;
  const double plain = up + t * static_cast<double>(nope_ + rope_ + v_dim_);
  return absorbed < plain;
}

// With W_uk = kv_b's key rows and W_uv its value rows of each head:
//   q_nope . (W_uk c_s) = (W_uk^T q_nope) . c_s  and  sum_s p_s W_uv c_s = W_uv (sum_s p_s c_s),
// so the scores and the weighted sum run over the latents c_s as cached.
// The heads share the latents: heads and queries fold into one dimension
// of a batched product per row, which reads the cache in place (a product
// broadcast over the heads would copy it once per head).
torch::Tensor MlaImpl::AttendAbsorbed(const torch::Tensor& q_source, const torch::Tensor& latent,
                                      const torch::Tensor& k_rope, const torch::Tensor& q_pos) const {
  const std::int64_t b = q_source.size(0), t = q_source.size(1), s = latent.size(1);
  const auto dt = q_source.scalar_type();
  const torch::Tensor q = (q_ ? q_ : q_b_)->forward(q_source).view({b, t, heads_, nope_ + rope_}).transpose(1, 2);
  const torch::Tensor w = kv_b_->EffectiveWeight(dt).view({heads_, nope_ + v_dim_, kv_rank_});
  // Per head over all rows' queries, [H, B T, nope] x [H, nope, r] (a
  // product broadcast over the rows would copy W once per row), then
  // [B, H T, r].
  const torch::Tensor q_nope = q.narrow(-1, 0, nope_).transpose(0, 1).reshape({heads_, b * t, nope_});
  const torch::Tensor q_latent = torch::bmm(q_nope, w.narrow(1, 0, nope_))
                                      .view({heads_, b, t, kv_rank_})
                                      .transpose(0, 1)
                                      .reshape({b, -1, kv_rank_});
  torch::Tensor scores = torch::bmm(q_latent, latent.transpose(1, 2));  // [B, H T, S]
  if (rope_ > 0) {
    const torch::Tensor q_rope = ApplyRopeAt(q.narrow(-1, nope_, rope_).transpose(1, 2), *rope_freq_, q_pos);
    scores = scores + torch::bmm(q_rope.transpose(1, 2).reshape({b, -1, rope_}), k_rope.transpose(1, 2));
  }
  const torch::Tensor future = KeysAfter(q_pos, s);
  const torch::Tensor scaled = Upcast(scores).view({b, heads_, t, s}) * SoftmaxScale();
  const torch::Tensor p = torch::softmax(scaled.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  const torch::Tensor o_latent = torch::bmm(p.to(dt).view({b, -1, s}), latent).view({b, heads_, t, kv_rank_});
  const torch::Tensor o = torch::bmm(o_latent.transpose(0, 1).reshape({heads_, b * t, kv_rank_}),
                                     w.narrow(1, nope_, v_dim_).transpose(1, 2));  // [H, B T, v]
  return o.view({heads_, b, t, v_dim_}).permute({1, 2, 0, 3}).reshape({b, t, heads_ * v_dim_});
}

// ------------------------------------------------------------------ MHA

MhaImpl::MhaImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init)
    : heads_(spec.heads), kv_heads_(spec.kv_heads), head_dim_(spec.head_dim),
      rope_freq_(std::make_shared<RopeFrequencies>(spec.rope, spec.head_dim)) {
  const std::int64_t d = spec.hidden;
  q_ = register_module("q", std::make_shared<ProjImpl>(d, heads_ * head_dim_, init_std, init));
  k_ = register_module("k", std::make_shared<ProjImpl>(d, kv_heads_ * head_dim_, init_std, init));
  v_ = register_module("v", std::make_shared<ProjImpl>(d, kv_heads_ * head_dim_, init_std, init));
  o_proj_ = register_module("o_proj", std::make_shared<ProjImpl>(heads_ * head_dim_, d, out_std, init));
}

torch::Tensor MhaImpl::Mix(const torch::Tensor& x) { return Run(x, nullptr); }

torch::Tensor MhaImpl::MixIncremental(const torch::Tensor& x, LayerCache& cache) { return Run(x, &cache); }

void MhaImpl::ShardHeads(const TensorParallelRegion& region, TensorParallelSplit* split) {
  region_ = region;
  const std::int64_t local = heads_ / region.size(), kv_local = kv_heads_ / region.size();
  const std::int64_t h0 = region.rank() * local, kv0 = region.rank() * kv_local;
  split->Keep("q.weight", q_->weight(), 0, h0 * head_dim_, local * head_dim_);
  split->Keep("k.weight", k_->weight(), 0, kv0 * head_dim_, kv_local * head_dim_);
  split->Keep("v.weight", v_->weight(), 0, kv0 * head_dim_, kv_local * head_dim_);
  split->Keep("o_proj.weight", o_proj_->weight(), 1, h0 * head_dim_, local * head_dim_);
  heads_ = local;
  kv_heads_ = kv_local;
}

torch::Tensor MhaImpl::Run(const torch::Tensor& x_in, LayerCache* cache) {
  CheckDecodable(region_, cache);
  const torch::Tensor x = region_.Enter(x_in);
  const std::int64_t b = x.size(0), t = x.size(1), groups = heads_ / kv_heads_;
  const torch::Tensor q_pos = QueryPositions(cache, cp_, t, x.options().dtype(torch::kLong));
  const torch::Tensor q = ApplyRopeAt(q_->forward(x).view({b, t, heads_, head_dim_}), *rope_freq_, q_pos);
  torch::Tensor k = ApplyRopeAt(k_->forward(x).view({b, t, kv_heads_, head_dim_}), *rope_freq_, q_pos);
  torch::Tensor v = v_->forward(x).view({b, t, kv_heads_, head_dim_});
  if (cache) {
    k = CacheAlongTime(*cache, cache->key, q_pos, k);
    v = CacheAlongTime(*cache, cache->value, q_pos, v);
    cache->length += t;
  }
  if (cp_.active()) {
    const torch::Tensor kv = cp_.Gather(torch::cat({k, v}, -1));
    k = kv.narrow(-1, 0, head_dim_);
    v = kv.narrow(-1, head_dim_, head_dim_);
  }
  if (groups > 1) {
    k = k.repeat_interleave(groups, 2);
    v = v.repeat_interleave(groups, 2);
  }
  const torch::Tensor o =
      Attend(q, k, v, 1.0 / std::sqrt(static_cast<double>(head_dim_)), q_pos, cp_, t, cache && cache->fixed());
  return region_.Exit(o_proj_->forward(o.reshape({b, t, heads_ * head_dim_})));
}

}  // namespace kp::runtime
