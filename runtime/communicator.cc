#include "runtime/communicator.h"

namespace kp::runtime {

// One int64 per pair, through the interface's own AllToAll, so every
// backend gets it for free.
Result<std::vector<std::int64_t>> AllToAllSizes(Communicator& c, const std::vector<std::int64_t>& sizes_in) {
  if (static_cast<int>(sizes_in.size()) != c.size())
    return Status::InvalidArgument("AllToAllSizes: " + std::to_string(sizes_in.size()) + " sizes for a group of " +
                                   std::to_string(c.size()));
  std::vector<torch::Tensor> in, out;
  for (std::int64_t n : sizes_in) {
    in.push_back(torch::full({1}, n, torch::kLong));
    out.push_back(torch::empty({1}, torch::kLong));
  }
  KP_RETURN_IF_ERROR(c.AllToAll(in, out));
  std::vector<std::int64_t> sizes;
  for (const torch::Tensor& t : out) sizes.push_back(t.item<std::int64_t>());
  return sizes;
}

}  // namespace kp::runtime
