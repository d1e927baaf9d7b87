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
