// What a kernel's entry point does in a build without the CUDA kernels
// (no KIMI_PLAN_CUDA_KERNELS): its *Applies test says false, so no caller
// reaches it; one that does anyway gets this error. Internal to
// runtime/kernels/.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_NO_KERNELS_H_
#define KIMI_PLAN_RUNTIME_KERNELS_NO_KERNELS_H_

#include <stdexcept>
#include <string>

namespace kp::runtime::kernel_support {

/// Throws std::logic_error "KERNEL: this build has no CUDA kernels".
[[noreturn]] inline void NoCudaKernels(const char* kernel) {
  throw std::logic_error(std::string(kernel) + ": this build has no CUDA kernels");
}

}  // namespace kp::runtime::kernel_support

#endif  // KIMI_PLAN_RUNTIME_KERNELS_NO_KERNELS_H_
