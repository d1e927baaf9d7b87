// What every kernel family's LibTorch face shares (only in a build with the
// CUDA kernels, KIMI_PLAN_CUDA_KERNELS): the error check after a launch,
// where the kernels run, the inputs' check before it (kernel_inputs.h) and
// the raw fp32 pointers they take. Internal to
// runtime/kernels/.
#ifndef KIMI_PLAN_RUNTIME_KERNELS_KERNEL_SUPPORT_H_
#define KIMI_PLAN_RUNTIME_KERNELS_KERNEL_SUPPORT_H_

#include <cstdint>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/torch.h>

#include "runtime/comm/device.h"
#include "runtime/kernels/kernel_inputs.h"

namespace kp::runtime::kernel_support {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

/// A launch's error as LibTorch's: `what` and CUDA's text.
inline void Check(cudaError_t err, const char* what) {
  TORCH_CHECK(err == cudaSuccess, what, ": ", cudaGetErrorString(err));
}

/// The kernels are built for sm_90 (with its PTX, which newer GPUs
/// compile): Hopper or newer only.
inline bool OnKernelGpu(const torch::Tensor& t) { return t.is_cuda() && ComputeCapabilityMajor(t.device()) >= 9; }

inline bool OnCudaInFp32(const torch::Tensor& t) { return OnKernelGpu(t) && t.scalar_type() == torch::kFloat; }

inline bool FloatOrBf16OnCuda(const torch::Tensor& t) {
  return OnKernelGpu(t) && (t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16);
}

/// The dtypes a kernel reads (CheckKernelInputs).
inline const std::vector<c10::ScalarType> kFp32 = {torch::kFloat};
inline const std::vector<c10::ScalarType> kFloats = {torch::kFloat, torch::kBFloat16};

inline const float* In(const torch::Tensor& t) { return t.data_ptr<float>(); }
inline float* Out(torch::Tensor& t) { return t.data_ptr<float>(); }
inline const float* InOrNull(const torch::Tensor& t) { return t.defined() ? In(t) : nullptr; }
/// A byte tensor's data (FP8 values), read or written.
inline const std::uint8_t* InBytes(const torch::Tensor& t) { return static_cast<const std::uint8_t*>(t.data_ptr()); }
inline std::uint8_t* OutBytes(torch::Tensor& t) { return static_cast<std::uint8_t*>(t.data_ptr()); }

}  // namespace kp::runtime::kernel_support

#endif  // KIMI_PLAN_RUNTIME_KERNELS_KERNEL_SUPPORT_H_
