#include "runtime/model/context_parallel.h"

#include <limits>
#include <string>

#include "runtime/model/attention.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/tensor_parallel.h"

namespace kp::runtime {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Point-to-point tags of the CP exchanges (one communicator per CP group;
// each exchange's messages pair in the order they are sent).
constexpr int kForwardTag = 0x4350;   // "CP": tails and states in sequence order
constexpr int kBackwardTag = 0x4351;  // their gradients

void Send(Communicator& c, const torch::Tensor& t, int dst, int tag) {
  const Status s = c.Send(t.contiguous(), dst, tag);
  if (!s.ok()) throw CommunicationError(s);
}

torch::Tensor Recv(Communicator& c, const torch::Tensor& like, int src, int tag) {
  torch::Tensor t = torch::empty_like(like, torch::MemoryFormat::Contiguous);
  const Status s = c.Recv(t, src, tag);
  if (!s.ok()) throw CommunicationError(s);
  return t;
}

// A rank's two chunks along time (dim 1): 0 is chunk r, 1 is chunk 2cp-1-r.
torch::Tensor Part(const torch::Tensor& x, int i) {
  const std::int64_t half = x.size(1) / 2;
  return x.narrow(1, i * half, half);
}

// The last n inputs of the chunk before each of this rank's two chunks,
// [B, 2, n, C]: before chunk r, rank r - 1's first chunk (zeros at the
// start of the sequence); before chunk 2cp-1-r, rank r + 1's second chunk,
// or on the last rank its own first. The backward sends each halo's
// gradient back to the tail it came from.
struct HaloFunction : public torch::autograd::Function<HaloFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, std::int64_t n, std::int64_t comm) {
    Communicator& c = CommunicatorOf(comm);
    const int r = c.rank(), last = c.size() - 1;
    const std::int64_t half = x.size(1) / 2;
    const torch::Tensor tail_a = x.narrow(1, half - n, n), tail_b = x.narrow(1, 2 * half - n, n);
    if (r < last) Send(c, tail_a, r + 1, kForwardTag);
    if (r > 0) Send(c, tail_b, r - 1, kForwardTag);
    const torch::Tensor halo_a = r > 0 ? Recv(c, tail_a, r - 1, kForwardTag) : torch::zeros_like(tail_a);
    const torch::Tensor halo_b = r < last ? Recv(c, tail_b, r + 1, kForwardTag) : tail_a.clone();
    ctx->saved_data["n"] = n;
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["shape"] = x.sizes().vec();
    return torch::stack({halo_a, halo_b}, 1);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& c = CommunicatorOf(ctx->saved_data["comm"].toInt());
    const std::int64_t n = ctx->saved_data["n"].toInt();
    const int r = c.rank(), last = c.size() - 1;
    const torch::Tensor d_halo_a = grads[0].select(1, 0).contiguous(), d_halo_b = grads[0].select(1, 1).contiguous();
    if (r > 0) Send(c, d_halo_a, r - 1, kBackwardTag);
    if (r < last) Send(c, d_halo_b, r + 1, kBackwardTag);
    torch::Tensor dx = torch::zeros(ctx->saved_data["shape"].toIntVector(), grads[0].options());
    const std::int64_t half = dx.size(1) / 2;
    dx.narrow(1, half - n, n).add_(r < last ? Recv(c, d_halo_b, r + 1, kBackwardTag) : d_halo_b);
    if (r > 0) dx.narrow(1, 2 * half - n, n).add_(Recv(c, d_halo_a, r - 1, kBackwardTag));
    return {dx, torch::Tensor(), torch::Tensor()};
  }
};

// One chunk's recurrence with its incoming state, and its outgoing state.
struct ChunkRun {
  torch::Tensor out, final_state;
};

ChunkRun RunChunk(const variable_list& in, const torch::Tensor& state, std::int64_t chunk) {
  ChunkRun run;
  run.out = chunk > 0 ? KdaChunked(in[0], in[1], in[2], in[3], in[4], chunk, state, &run.final_state, /*fused=*/false)
                      : KdaRecurrent(in[0], in[1], in[2], in[3], in[4], state, &run.final_state);
  return run;
}

// KDA's scan over the CP ranks' chunks in sequence order (see the header).
// The forward keeps only the inputs and the incoming states; the backward
// remakes each chunk's graph, first the second chunk's (its state's
// gradient comes from rank r - 1, which ran the chunk after it), then the
// first's.
struct KdaScanFunction : public torch::autograd::Function<KdaScanFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor q, torch::Tensor k, torch::Tensor v,
                               torch::Tensor g, torch::Tensor beta, std::int64_t chunk, std::int64_t comm) {
    Communicator& c = CommunicatorOf(comm);
    const int r = c.rank(), last = c.size() - 1;
    const torch::Tensor zero = torch::zeros({q.size(0), q.size(2), q.size(3), v.size(3)}, q.options());
    const torch::Tensor state_a = r > 0 ? Recv(c, zero, r - 1, kForwardTag) : zero;
    const ChunkRun a = RunChunk(Parts({q, k, v, g, beta}, 0), state_a, chunk);
    if (r < last) Send(c, a.final_state, r + 1, kForwardTag);
    const torch::Tensor state_b = r < last ? Recv(c, zero, r + 1, kForwardTag) : a.final_state;
    const ChunkRun b = RunChunk(Parts({q, k, v, g, beta}, 1), state_b, chunk);
    if (r > 0) Send(c, b.final_state, r - 1, kForwardTag);
    ctx->save_for_backward({q, k, v, g, beta, state_a, state_b});
    ctx->saved_data["chunk"] = chunk;
    ctx->saved_data["comm"] = comm;
    return torch::cat({a.out, b.out}, 1);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& c = CommunicatorOf(ctx->saved_data["comm"].toInt());
    const std::int64_t chunk = ctx->saved_data["chunk"].toInt();
    const int r = c.rank(), last = c.size() - 1;
    const variable_list saved = ctx->get_saved_variables();
    const variable_list inputs(saved.begin(), saved.begin() + 5);
    const torch::Tensor d_out = grads[0];
    const torch::Tensor zero = torch::zeros_like(saved[5]);
    // The second chunk: its final state went to rank r - 1 (the whole
    // sequence's final state on rank 0: no gradient).
    const torch::Tensor d_final_b = r > 0 ? Recv(c, zero, r - 1, kBackwardTag) : zero;
    const variable_list db = ChunkGradients(Parts(inputs, 1), saved[6], Part(d_out, 1), d_final_b, chunk);
    // Its incoming state was rank r + 1's second chunk's final state, or on
    // the last rank this rank's first chunk's.
    torch::Tensor d_final_a = db[5];
    if (r < last) {
      Send(c, db[5], r + 1, kBackwardTag);
      d_final_a = Recv(c, zero, r + 1, kBackwardTag);
    }
    const variable_list da = ChunkGradients(Parts(inputs, 0), saved[5], Part(d_out, 0), d_final_a, chunk);
    if (r > 0) Send(c, da[5], r - 1, kBackwardTag);
    variable_list out;
    for (int i = 0; i < 5; ++i) out.push_back(torch::cat({da[i], db[i]}, 1));
    out.push_back(torch::Tensor());
    out.push_back(torch::Tensor());
    return out;
  }

  static variable_list Parts(const variable_list& xs, int i) {
    variable_list out;
    for (const torch::Tensor& x : xs) out.push_back(Part(x, i));
    return out;
  }

  // The chunk's input and incoming-state gradients (5 + 1) for its output's
  // and final state's gradients, by remaking its graph.
  static variable_list ChunkGradients(const variable_list& in, const torch::Tensor& state, const torch::Tensor& d_out,
                                      const torch::Tensor& d_final, std::int64_t chunk) {
    variable_list leaves;
    for (const torch::Tensor& x : in) leaves.push_back(x.detach().requires_grad_(true));
    leaves.push_back(state.detach().requires_grad_(true));
    ChunkRun run;
    {
      torch::AutoGradMode enable(true);
      run = RunChunk(leaves, leaves[5], chunk);
    }
    variable_list d = torch::autograd::grad({run.out, run.final_state}, leaves, {d_out.contiguous(), d_final},
                                            /*retain_graph=*/false, /*create_graph=*/false, /*allow_unused=*/true);
    for (std::size_t i = 0; i < d.size(); ++i)
      if (!d[i].defined()) d[i] = torch::zeros_like(leaves[i]);
    return d;
  }
};

}  // namespace

std::vector<std::int64_t> ContextPositions(int cp, int rank, std::int64_t seq_len) {
  const std::int64_t chunk = seq_len / (2 * cp);
  std::vector<std::int64_t> p;
  for (const std::int64_t c : {std::int64_t{rank}, std::int64_t{2 * cp - 1 - rank}})
    for (std::int64_t i = 0; i < chunk; ++i) p.push_back(c * chunk + i);
  return p;
}

std::int64_t KdaConvReach(const ModelSpec& m) {
  for (const AttentionKind k : m.attention)
    if (k == AttentionKind::kKda) return m.kda.conv_kernel - 1;
  return 0;
}

Status CheckContextSplit(int cp, std::int64_t seq_len, std::int64_t min_chunk) {
  if (cp <= 1) return Status::Ok();
  if (seq_len % (2 * cp) != 0)
    return Status::InvalidArgument("--cp: the sequence length " + std::to_string(seq_len) + " does not split into 2 x " +
                                   std::to_string(cp) + " = " + std::to_string(2 * cp) + " equal chunks");
  if (seq_len / (2 * cp) < min_chunk)
    return Status::InvalidArgument("--cp: chunks of " + std::to_string(seq_len / (2 * cp)) +
                                   " tokens are shorter than the " + std::to_string(min_chunk) +
                                   " a KDA convolution reaches back");
  return Status::Ok();
}

torch::Tensor ContextShard::Positions(std::int64_t local, const torch::TensorOptions& options) const {
  return torch::tensor(ContextPositions(size(), rank(), local * size()), torch::kLong).to(options);
}

torch::Tensor ContextShard::GatheredPositions(std::int64_t local, const torch::TensorOptions& options) const {
  std::vector<std::int64_t> all;
  for (int r = 0; r < size(); ++r) {
    const std::vector<std::int64_t> p = ContextPositions(size(), r, local * size());
    all.insert(all.end(), p.begin(), p.end());
  }
  return torch::tensor(all, torch::kLong).to(options);
}

torch::Tensor ContextShard::Gather(const torch::Tensor& x) const {
  return active() ? GatherSequence(*cp_, x, 1) : x;
}

torch::Tensor ContextShard::Conv(const torch::Tensor& x, const torch::Tensor& weight) const {
  const std::int64_t n = weight.size(1) - 1;
  if (!active() || n == 0) return CausalDepthwiseConv(x, weight);  // no reach into another chunk
  const torch::Tensor halos = HaloFunction::apply(x, n, CommunicatorHandle(*cp_));
  std::vector<torch::Tensor> out;
  for (int i = 0; i < 2; ++i) {
    const torch::Tensor y = CausalDepthwiseConv(torch::cat({halos.select(1, i), Part(x, i)}, 1), weight);
    out.push_back(y.narrow(1, n, y.size(1) - n));
  }
  return torch::cat(out, 1);
}

torch::Tensor ContextShard::Kda(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& g, const torch::Tensor& beta, std::int64_t chunk) const {
  if (!active()) return RunChunk({q, k, v, g, beta}, {}, chunk).out;
  return KdaScanFunction::apply(q, k, v, g, beta, chunk, CommunicatorHandle(*cp_));
}

torch::Tensor KeepContextShard(const torch::Tensor& x, int cp, int rank, std::int64_t dim) {
  if (cp == 1) return x;
  const std::int64_t chunk = x.size(dim) / (2 * cp);
  return torch::cat({x.narrow(dim, rank * chunk, chunk), x.narrow(dim, (2 * cp - 1 - rank) * chunk, chunk)}, dim);
}

torch::Tensor PositionCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      double scale, const torch::Tensor& q_pos, const torch::Tensor& k_pos) {
  const torch::Tensor scores = Upcast(torch::matmul(q, k.transpose(-1, -2))) * scale;
  const torch::Tensor future = k_pos.view({1, -1}) > q_pos.view({-1, 1});  // [T, S]
  const torch::Tensor p = torch::softmax(scores.masked_fill(future, -std::numeric_limits<double>::infinity()), -1);
  return torch::matmul(p.to(v.scalar_type()), v);
}

}  // namespace kp::runtime
