// The device a rank computes on: parsing its name, the process-wide
// determinism switches, and the peak memory a step reports.
// Thread-safety: UseDeterministicAlgorithms sets LibTorch's global flags;
// call it before any work on the device, from one thread.
#ifndef KIMI_PLAN_RUNTIME_COMM_DEVICE_H_
#define KIMI_PLAN_RUNTIME_COMM_DEVICE_H_

#include <string>

#include <torch/torch.h>

#include "common/file_system.h"
#include "common/status.h"

namespace kp::runtime {

/// "cpu", "cuda" or "cuda:N"; InvalidArgument naming --device.
Result<torch::Device> ParseDevice(const std::string& name);

/// Deterministic algorithms for this process (LibTorch's flags are global):
/// deterministic kernels and cuDNN, no cuDNN autotuning. On CUDA, cuBLAS
/// also needs CUBLAS_WORKSPACE_CONFIG before its first use, which the
/// caller's main sets (kDeterministicCublas, runtime/comm/environment.h).
void UseDeterministicAlgorithms();

/// The peak memory of this process on `device`: the CUDA caching
/// allocator's peak allocated bytes on a GPU; on the CPU the counted tensor
/// bytes' peak (cpu_memory.h) once the counter is installed, else the
/// resident set's high-water mark (VmHWM in /proc/self/status, read through
/// `fs`); 0 when unknown.
double PeakMemoryBytes(torch::Device device, const FileSystem& fs);

/// The major version of `device`'s CUDA compute capability (9: Hopper, 10:
/// Blackwell); 0 on the CPU or in a build without CUDA.
int ComputeCapabilityMajor(torch::Device device);

/// The bytes of live tensors on `device` now: the CUDA caching allocator's
/// allocated bytes on a GPU, the counted bytes on the CPU (cpu_memory.h; 0
/// until the counter is installed).
double AllocatedMemoryBytes(torch::Device device);

/// Waits for the work queued on `device` (a CUDA device); nothing on the CPU.
void Synchronize(torch::Device device);

/// Starts PeakMemoryBytes's peak afresh: the GPU's, or the CPU counter's
/// (the resident set's high-water mark cannot be reset).
void ResetPeakMemory(torch::Device device);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_DEVICE_H_
