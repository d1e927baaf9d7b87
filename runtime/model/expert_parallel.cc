#include "runtime/model/expert_parallel.h"

#include <cstdint>
#include <numeric>

#include "runtime/model/layers.h"
#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The all-to-all itself: rows of `x` split by `send`, received split by `recv`.
torch::Tensor AllToAllRows(Communicator& ep, const torch::Tensor& x, const std::vector<std::int64_t>& send,
                           const std::vector<std::int64_t>& recv) {
  const int n = ep.size();
  std::vector<torch::Tensor> in, out;
  std::vector<std::int64_t> shape = x.sizes().vec();
  std::int64_t offset = 0;
  for (int j = 0; j < n; ++j) {
    in.push_back(x.narrow(0, offset, send[j]).contiguous());
    offset += send[j];
    shape[0] = recv[j];
    out.push_back(torch::empty(shape, x.options()));
  }
  const Status s = ep.AllToAll(in, out);
  if (!s.ok()) throw CommunicationError(s);
  return torch::cat(out, 0);
}

// The exchange as an autograd node: the gradient of a received row goes back
// to the rank that sent it, so backward is the same exchange with the splits
// swapped.
struct ExchangeFunction : public torch::autograd::Function<ExchangeFunction> {
  static torch::Tensor forward(AutogradContext* ctx, torch::Tensor x, std::vector<std::int64_t> send,
                               std::vector<std::int64_t> recv, std::int64_t comm) {
    ctx->saved_data["send"] = send;
    ctx->saved_data["recv"] = recv;
    ctx->saved_data["comm"] = comm;
    return AllToAllRows(CommunicatorOf(comm), x, send, recv);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    Communicator& comm = CommunicatorOf(ctx->saved_data["comm"].toInt());
    const std::vector<std::int64_t> send = ctx->saved_data["send"].toIntVector();
    const std::vector<std::int64_t> recv = ctx->saved_data["recv"].toIntVector();
    return {AllToAllRows(comm, grads[0].contiguous(), recv, send), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Per-pair expert counts: sent[j] is this rank's counts for rank j's local
// experts; returns recv[j][e], the rows rank j will send for local expert e.
// The counts travel on `device` (NCCL moves device memory only).
std::vector<std::vector<std::int64_t>> ExchangeCounts(Communicator& ep, const std::vector<std::int64_t>& counts,
                                                      std::int64_t local, const torch::Device& device) {
  const int n = ep.size();
  std::vector<torch::Tensor> in, out;
  for (int j = 0; j < n; ++j) {
    in.push_back(torch::tensor(std::vector<std::int64_t>(counts.begin() + j * local, counts.begin() + (j + 1) * local),
                               torch::kLong)
                     .to(device));
    out.push_back(torch::zeros({local}, torch::TensorOptions().dtype(torch::kLong).device(device)));
  }
  const Status s = ep.AllToAll(in, out);
  if (!s.ok()) throw CommunicationError(s);
  std::vector<std::vector<std::int64_t>> recv(n);
  for (int j = 0; j < n; ++j) {
    const torch::Tensor host = out[j].cpu();
    recv[j] = std::vector<std::int64_t>(host.data_ptr<std::int64_t>(), host.data_ptr<std::int64_t>() + local);
  }
  return recv;
}

}  // namespace

torch::Tensor ExchangeRows(Communicator& ep, const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                           const std::vector<std::int64_t>& recv_rows) {
  return ExchangeFunction::apply(x, send_rows, recv_rows, CommunicatorHandle(ep));
}

torch::Tensor RunExpertsParallel(Communicator& ep, ExpertBankImpl& bank, const torch::Tensor& x_sorted,
                                 const std::vector<std::int64_t>& counts) {
  const int n = ep.size();
  const std::int64_t local = bank.num_experts();
  const std::vector<std::vector<std::int64_t>> recv = ExchangeCounts(ep, counts, local, x_sorted.device());
  std::vector<std::int64_t> send_rows(n), recv_rows(n);
  for (int j = 0; j < n; ++j) {
    send_rows[j] = std::accumulate(counts.begin() + j * local, counts.begin() + (j + 1) * local, std::int64_t{0});
    recv_rows[j] = std::accumulate(recv[j].begin(), recv[j].end(), std::int64_t{0});
  }
  const torch::Tensor received = ExchangeRows(ep, x_sorted, send_rows, recv_rows);  // source-major
  // Regroup source-major (source, expert) rows expert-major (expert, source),
  // the order the single-process reference uses.
  std::vector<std::int64_t> start(n, 0), perm, local_counts(local, 0);
  for (int j = 1; j < n; ++j) start[j] = start[j - 1] + recv_rows[j - 1];
  for (std::int64_t e = 0; e < local; ++e) {
    for (int j = 0; j < n; ++j) {
      std::int64_t first = start[j];
      for (std::int64_t f = 0; f < e; ++f) first += recv[j][f];
      for (std::int64_t i = 0; i < recv[j][e]; ++i) perm.push_back(first + i);
      local_counts[e] += recv[j][e];
    }
  }
  const torch::Tensor perm_t = torch::tensor(perm, torch::TensorOptions().dtype(torch::kLong)).to(x_sorted.device());
  std::vector<std::int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<std::int64_t>(i);
  const torch::Tensor inverse_t =
      torch::tensor(inverse, torch::TensorOptions().dtype(torch::kLong)).to(x_sorted.device());
  const torch::Tensor y_local = bank.forward(received.index_select(0, perm_t), local_counts);
  return ExchangeRows(ep, y_local.index_select(0, inverse_t), recv_rows, send_rows);
}

Status ShardExperts(StageModelImpl& model, Communicator* ep) {
  if (ep == nullptr || ep->size() == 1) return Status::Ok();
  for (const auto& layer : model.layers()) {
    MoeImpl* moe = layer->moe();
    if (moe == nullptr) continue;
    const std::int64_t e = moe->num_experts();
    if (e % ep->size() != 0)
      return Status::InvalidArgument("--ep: " + std::to_string(ep->size()) + " does not divide the " +
                                     std::to_string(e) + " routed experts");
    if (moe->experts().has_lora())
      return Status::InvalidArgument("--ep: expert parallelism with LoRA adapters is not supported yet");
    const std::int64_t local = e / ep->size();
    moe->experts().KeepExperts(ep->rank() * local, local);
    moe->SetExpertParallel(ep);
  }
  return Status::Ok();
}

}  // namespace kp::runtime
