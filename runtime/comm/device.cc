#include "runtime/comm/device.h"

#ifdef KIMI_PLAN_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "common/proc_file.h"
#include "runtime/comm/cpu_memory.h"

namespace kp::runtime {

Result<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  if (name.rfind("cuda", 0) == 0) {
    if (!torch::cuda::is_available())
      return Status::InvalidArgument("--device: " + name + " requested, but this LibTorch sees no CUDA device");
    try {
      return torch::Device(name);
    } catch (const c10::Error&) {
    }
  }
  return Status::InvalidArgument("--device: must be cpu, cuda or cuda:N, got \"" + name + "\"");
}

void UseDeterministicAlgorithms() {
  at::globalContext().setDeterministicAlgorithms(true, /*warn_only=*/false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setBenchmarkCuDNN(false);
}

int ComputeCapabilityMajor(torch::Device device) {
#ifdef KIMI_PLAN_TORCH_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->major;
#endif
  (void)device;
  return 0;
}

void ResetPeakMemory(torch::Device device) {
#ifdef KIMI_PLAN_TORCH_CUDA
  if (device.is_cuda()) {
    c10::cuda::CUDACachingAllocator::resetPeakStats(device.index() < 0 ? 0 : device.index());
    return;
  }
#endif
  if (device.is_cpu()) ResetCpuPeakBytes();
}

#ifdef KIMI_PLAN_TORCH_CUDA
namespace {
// The caching allocator's allocated-bytes statistic of a GPU, all pools
// (its type's namespace differs between LibTorch versions).
auto AllocatedBytesStat(torch::Device device) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index() < 0 ? 0 : device.index()).allocated_bytes[0];
}
}  // namespace
#endif

double AllocatedMemoryBytes(torch::Device device) {
#ifdef KIMI_PLAN_TORCH_CUDA
  if (device.is_cuda()) return static_cast<double>(AllocatedBytesStat(device).current);
#endif
  return device.is_cpu() ? static_cast<double>(CpuAllocatedBytes()) : 0.0;
}

void Synchronize(torch::Device device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index() < 0 ? 0 : device.index());
}

double PeakMemoryBytes(torch::Device device, const FileSystem& fs) {
#ifdef KIMI_PLAN_TORCH_CUDA
  if (device.is_cuda()) return static_cast<double>(AllocatedBytesStat(device).peak);
#endif
  if (CpuMemoryCounterInstalled()) return static_cast<double>(CpuPeakBytes());
  return ProcKilobytes(fs, "/proc/self/status", "VmHWM").value_or(0.0);
}

}  // namespace kp::runtime
