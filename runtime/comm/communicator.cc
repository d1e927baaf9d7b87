#include "runtime/comm/communicator.h"

namespace kp::runtime {

namespace {
// An operation that finished before it was returned.
class DoneOp : public PendingOp {
 public:
  Status Wait() override { return Status::Ok(); }
};
}  // namespace

Result<std::unique_ptr<PendingOp>> Communicator::StartBroadcast(torch::Tensor& t, int root) {
  KP_RETURN_IF_ERROR(Broadcast(t, root));
  return std::unique_ptr<PendingOp>(new DoneOp());
}

Result<torch::Tensor> PartOf(const Communicator& c, const torch::Tensor& t, int r, const char* op) {
  if (t.dim() != 1 || t.numel() % c.size() != 0)
    return Status::Internal(std::string(op) + ": needs a 1-D tensor of " + std::to_string(c.size()) +
                            " equal parts, got " + std::to_string(t.numel()) + " elements");
  const std::int64_t k = t.numel() / c.size();
  return t.narrow(0, r * k, k);
}

Status Communicator::ReduceScatterSum(torch::Tensor& t) {
  for (int r = 0; r < size(); ++r) {
    KP_ASSIGN_OR_RETURN(torch::Tensor part, PartOf(*this, t, r, "reduce-scatter"));
    KP_RETURN_IF_ERROR(ReduceSum(part, r));
  }
  return Status::Ok();
}

Status Communicator::AllGather(torch::Tensor& t) {
  for (int r = 0; r < size(); ++r) {
    KP_ASSIGN_OR_RETURN(torch::Tensor part, PartOf(*this, t, r, "all-gather"));
    KP_RETURN_IF_ERROR(Broadcast(part, r));
  }
  return Status::Ok();
}

Status AllReduceSumBuckets(const std::vector<torch::Tensor>& tensors, Communicator* c, int divisor,
                           std::int64_t bucket_bytes) {
  std::size_t i = 0;
  while (i < tensors.size()) {
    std::vector<torch::Tensor> bucket;
    std::int64_t bytes = 0;
    const auto dtype = tensors[i].scalar_type();
    while (i < tensors.size() && tensors[i].scalar_type() == dtype &&
           (bucket.empty() || bytes + static_cast<std::int64_t>(tensors[i].nbytes()) <= bucket_bytes)) {
      bucket.push_back(tensors[i]);
      bytes += static_cast<std::int64_t>(tensors[i].nbytes());
      ++i;
    }
    std::vector<torch::Tensor> flat;
    for (const torch::Tensor& t : bucket) flat.push_back(t.reshape(-1));
    torch::Tensor buffer = torch::cat(flat);
    if (c != nullptr && c->size() > 1) KP_RETURN_IF_ERROR(c->AllReduceSum(buffer));
    if (divisor != 1) buffer.div_(divisor);
    std::int64_t offset = 0;
    for (torch::Tensor& t : bucket) {
      t.copy_(buffer.narrow(0, offset, t.numel()).view_as(t));
      offset += t.numel();
    }
  }
  return Status::Ok();
}

// The sizes travel as an AllToAll of one int64 per pair, so every
// Communicator (c10d, the in-process fake) gets this for free.
Result<std::vector<std::int64_t>> AllToAllSizes(Communicator& c, const std::vector<std::int64_t>& sizes_in) {
  const int n = c.size();
  if (static_cast<int>(sizes_in.size()) != n)
    return Status::Internal("alltoall sizes: needs one size per rank (" + std::to_string(n) + ")");
  // One int64 per pair, on the device the backend wants (NCCL: CUDA).
  const auto device = c.backend() == "nccl" ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
  std::vector<torch::Tensor> in, out;
  for (int r = 0; r < n; ++r) {
    in.push_back(torch::full({1}, sizes_in[r], torch::TensorOptions().dtype(torch::kLong).device(device)));
    out.push_back(torch::zeros({1}, torch::TensorOptions().dtype(torch::kLong).device(device)));
  }
  KP_RETURN_IF_ERROR(c.AllToAll(in, out));
  std::vector<std::int64_t> sizes(n);
  for (int r = 0; r < n; ++r) sizes[r] = out[r].cpu().item<std::int64_t>();
  return sizes;
}

}  // namespace kp::runtime
