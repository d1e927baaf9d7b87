#include "runtime/kernels/kernel_inputs.h"

#include <algorithm>

namespace kp::runtime {

namespace {

std::string SizesText(const std::vector<std::int64_t>& sizes) {
  std::string out = "[";
  for (std::size_t i = 0; i < sizes.size(); ++i)
    out += (i ? ", " : "") + (sizes[i] == kAnySize ? std::string("?") : std::to_string(sizes[i]));
  return out + "]";
}

std::string DtypesText(const std::vector<c10::ScalarType>& dtypes) {
  std::string out;
  for (std::size_t i = 0; i < dtypes.size(); ++i)
    out += (i == 0 ? "" : i + 1 == dtypes.size() ? " or " : ", ") + std::string(c10::toString(dtypes[i]));
  return out;
}

bool SizesFit(const torch::Tensor& t, const std::vector<std::int64_t>& sizes) {
  if (sizes.empty()) return true;
  if (t.dim() != static_cast<std::int64_t>(sizes.size())) return false;
  for (std::size_t d = 0; d < sizes.size(); ++d)
    if (sizes[d] != kAnySize && t.size(static_cast<std::int64_t>(d)) != sizes[d]) return false;
  return true;
}

}  // namespace

std::string KernelInputError(const std::string& kernel, const std::vector<KernelInput>& inputs) {
  const torch::Tensor* first = nullptr;
  for (const KernelInput& in : inputs) {
    const std::string where = kernel + ": " + in.name + ": ";
    if (!in.tensor->defined()) {
      if (in.optional) continue;
      return where + "undefined";
    }
    const torch::Tensor& t = *in.tensor;
    if (!SizesFit(t, in.sizes))
      return where + "sizes " + SizesText(t.sizes().vec()) + ", where " + SizesText(in.sizes) + " is read";
    if (std::find(in.dtypes.begin(), in.dtypes.end(), t.scalar_type()) == in.dtypes.end())
      return where + std::string(c10::toString(t.scalar_type())) + ", where " + DtypesText(in.dtypes) + " is read";
    if (first == nullptr) {
      first = &t;
    } else if (t.device() != first->device()) {
      return where + "on " + t.device().str() + ", where the kernel runs on " + first->device().str();
    }
  }
  return "";
}

void CheckKernelInputs(const std::string& kernel, const std::vector<KernelInput>& inputs) {
  const std::string error = KernelInputError(kernel, inputs);
  TORCH_CHECK(error.empty(), error);
}

}  // namespace kp::runtime
