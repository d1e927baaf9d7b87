// The check every kernel entry makes before a launch: each input's sizes,
// dtype and device against what the kernel reads, refused with one message
// naming the kernel and the input, so that no kernel ever runs over a
// tensor of a shape it assumed. Apart from kernel_support.h (CUDA builds
// only), so the rule is tested without a GPU. Thread-safety: pure functions.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KERNEL_INPUTS_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KERNEL_INPUTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace kp::runtime {

/// A size KernelInput::sizes takes whatever it is.
inline constexpr std::int64_t kAnySize = -1;

/// One input of a kernel entry and what the kernel reads of it.
struct KernelInput {
  const char* name;
  const torch::Tensor* tensor;
  std::vector<std::int64_t> sizes;      ///< kAnySize where any size is read; empty: any shape
  std::vector<c10::ScalarType> dtypes;  ///< the dtypes read
  bool optional = false;                ///< may be undefined (then nothing else is checked)
};

/// "" when every input is defined (unless optional), has `sizes` and one of
/// `dtypes`, and lies on the first input's device; else "KERNEL: NAME: ..."
/// for the first input that does not, saying what it has and what is read.
std::string KernelInputError(const std::string& kernel, const std::vector<KernelInput>& inputs);

/// Throws c10::Error with KernelInputError's message unless it is "".
void CheckKernelInputs(const std::string& kernel, const std::vector<KernelInput>& inputs);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KERNEL_INPUTS_H_
