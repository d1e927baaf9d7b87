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

// Small integer vectors exchanged: send[j] goes to rank j, and the result's
// [j] came from rank j (every vector of one length). They travel on `device`
// (NCCL moves device memory only).
std::vector<std::vector<std::int64_t>> AllToAllCounts(Communicator& c, const std::vector<std::vector<std::int64_t>>& send,
                                                      const torch::Device& device) {
  const auto opts = torch::TensorOptions().dtype(torch::kLong);
  std::vector<torch::Tensor> in, out;
  for (const std::vector<std::int64_t>& v : send) {
    in.push_back(torch::tensor(v, opts).to(device));
    out.push_back(torch::zeros({static_cast<std::int64_t>(v.size())}, opts.device(device)));
  }
  const Status s = c.AllToAll(in, out);
  if (!s.ok()) throw CommunicationError(s);
  std::vector<std::vector<std::int64_t>> recv;
  for (const torch::Tensor& t : out) {
    const torch::Tensor host = t.cpu();
    recv.emplace_back(host.data_ptr<std::int64_t>(), host.data_ptr<std::int64_t>() + host.numel());
  }
  return recv;
}

std::int64_t Sum(const std::vector<std::int64_t>& v) { return std::accumulate(v.begin(), v.end(), std::int64_t{0}); }

// The rows one rank holds for its experts: from[s][e] rows of local expert e
// from source s, source-major (each source's rows expert-major).
struct HeldRows {
  torch::Tensor x;
  std::vector<std::vector<std::int64_t>> from;
};

// Step 1 (EP): every rank's rows for this rank's experts; sources are EP ranks.
HeldRows DispatchOverEp(Communicator* ep, const torch::Tensor& x_sorted, const std::vector<std::int64_t>& counts,
                        std::int64_t local, std::vector<std::int64_t>& send_rows) {
  if (ep == nullptr) {
    send_rows = {x_sorted.size(0)};
    return {x_sorted, {counts}};
  }
  std::vector<std::vector<std::int64_t>> send;
  for (int j = 0; j < ep->size(); ++j) send.emplace_back(counts.begin() + j * local, counts.begin() + (j + 1) * local);
  HeldRows held{torch::Tensor(), AllToAllCounts(*ep, send, x_sorted.device())};
  send_rows.clear();
  std::vector<std::int64_t> recv_rows;
  for (int j = 0; j < ep->size(); ++j) send_rows.push_back(Sum(send[j])), recv_rows.push_back(Sum(held.from[j]));
  held.x = ExchangeRows(*ep, x_sorted, send_rows, recv_rows);
  return held;
}

// Step 2 (ETP): every ETP rank's held rows, ETP rank t's sources after
// t - 1's. Differentiable: each copy's gradient comes back and the copies'
// sum is the rows' gradient. rows_of[t]: the rows ETP rank t brought.
HeldRows GatherOverEtp(Communicator* etp, const HeldRows& held, std::vector<std::int64_t>& rows_of) {
  const std::int64_t mine = held.x.size(0);
  if (etp == nullptr) {
    rows_of = {mine};
    return held;
  }
  const int n = etp->size();
  std::vector<std::int64_t> flat;
  for (const auto& v : held.from) flat.insert(flat.end(), v.begin(), v.end());
  const std::vector<std::vector<std::int64_t>> all = AllToAllCounts(*etp, std::vector<std::vector<std::int64_t>>(n, flat), held.x.device());
  const std::size_t sources = held.from.size(), local = held.from[0].size();
  HeldRows gathered;
  rows_of.clear();
  for (int t = 0; t < n; ++t) {
    rows_of.push_back(Sum(all[t]));
    for (std::size_t s = 0; s < sources; ++s)
      gathered.from.emplace_back(all[t].begin() + s * local, all[t].begin() + (s + 1) * local);
  }
  gathered.x = ExchangeRows(*etp, held.x.repeat({n, 1}), std::vector<std::int64_t>(n, mine), rows_of);
  return gathered;
}

// The permutation taking source-major held rows (source order t * S + s)
// to expert-major, sources in block order (j * etp + t for EP source j):
// rows [perm[i]] are the experts' input; also each expert's total.
std::vector<std::int64_t> ExpertMajor(const HeldRows& held, int etp, std::vector<std::int64_t>& per_expert) {
  const std::size_t n = held.from.size(), sources_per_etp = n / etp, local = held.from[0].size();
  std::vector<std::int64_t> start(n, 0), perm;
  for (std::size_t i = 1; i < n; ++i) start[i] = start[i - 1] + Sum(held.from[i - 1]);
  per_expert.assign(local, 0);
  for (std::size_t e = 0; e < local; ++e) {
    for (std::size_t j = 0; j < sources_per_etp; ++j) {
      for (int t = 0; t < etp; ++t) {
        const std::size_t i = t * sources_per_etp + j;
        std::int64_t first = start[i];
        for (std::size_t f = 0; f < e; ++f) first += held.from[i][f];
        for (std::int64_t r = 0; r < held.from[i][e]; ++r) perm.push_back(first + r);
        per_expert[e] += held.from[i][e];
      }
    }
  }
  return perm;
}

}  // namespace

torch::Tensor ExchangeRows(Communicator& ep, const torch::Tensor& x, const std::vector<std::int64_t>& send_rows,
                           const std::vector<std::int64_t>& recv_rows) {
  return ExchangeFunction::apply(x, send_rows, recv_rows, CommunicatorHandle(ep));
}

torch::Tensor RunExpertsParallel(const ExpertGroups& groups, ExpertBankImpl& bank, const torch::Tensor& x_sorted,
                                 const std::vector<std::int64_t>& counts) {
  std::vector<std::int64_t> ep_send_rows, etp_rows;
  const HeldRows held = DispatchOverEp(groups.ep, x_sorted, counts, bank.num_experts(), ep_send_rows);
  const HeldRows all = GatherOverEtp(groups.etp, held, etp_rows);
  const int etp = groups.etp != nullptr ? groups.etp->size() : 1;
  std::vector<std::int64_t> per_expert;
  const std::vector<std::int64_t> perm = ExpertMajor(all, etp, per_expert);
  std::vector<std::int64_t> inverse(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i) inverse[perm[i]] = static_cast<std::int64_t>(i);
  const auto index = torch::TensorOptions().dtype(torch::kLong);
  const torch::Tensor perm_t = torch::tensor(perm, index).to(x_sorted.device());
  const torch::Tensor inverse_t = torch::tensor(inverse, index).to(x_sorted.device());
  torch::Tensor y = bank.forward(all.x.index_select(0, perm_t), per_expert).index_select(0, inverse_t);
  if (groups.etp != nullptr) {
    // Every ETP rank's partial sums of this rank's rows, added in rank order.
    const std::int64_t mine = held.x.size(0);
    y = ExchangeRows(*groups.etp, y, etp_rows, std::vector<std::int64_t>(etp, mine)).view({etp, mine, -1}).sum(0);
  }
  if (groups.ep == nullptr) return y;
  std::vector<std::int64_t> recv_rows;
  for (const auto& v : held.from) recv_rows.push_back(Sum(v));
  return ExchangeRows(*groups.ep, y, recv_rows, ep_send_rows);
}

Status ShardExperts(StageModelImpl& model, const ExpertGroups& groups) {
  if (!groups.split()) return Status::Ok();
  const int ep = groups.ep != nullptr ? groups.ep->size() : 1, etp = groups.etp != nullptr ? groups.etp->size() : 1;
  for (const auto& layer : model.layers()) {
    MoeImpl* moe = layer->moe();
    if (moe == nullptr) continue;
    ExpertBankImpl& bank = moe->experts();
    const std::int64_t e = moe->num_experts(), ffn = bank.ffn();
    if (e % ep != 0)
      return Status::InvalidArgument("--ep: " + std::to_string(ep) + " does not divide the " + std::to_string(e) +
                                     " routed experts");
    if (ffn % etp != 0)
      return Status::InvalidArgument("--etp: " + std::to_string(etp) + " does not divide the expert FFN width " +
                                     std::to_string(ffn));
    if (bank.has_lora())
      return Status::InvalidArgument(std::string(ep > 1 ? "--ep" : "--etp") +
                                     ": splitting experts with LoRA adapters is not supported yet");
    if (ep > 1) bank.KeepExperts(groups.ep->rank() * (e / ep), e / ep);
    if (etp > 1) bank.KeepFfnShard(groups.etp->rank() * (ffn / etp), ffn / etp);
    moe->SetExpertParallel(groups);
  }
  return Status::Ok();
}

}  // namespace kp::runtime
