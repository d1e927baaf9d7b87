// The bytes of CPU tensor storage a process holds, counted by an allocator
// that LibTorch's CPU tensors are made with once it is installed: the CPU's
// counterpart of the CUDA caching allocator's allocated-bytes statistic, so
// that a rank's peak on the CPU means what it means on a GPU (tensor bytes,
// not the resident set with LibTorch's code and heap in it).
//
// State: LibTorch keeps one CPU allocator per process (c10::SetCPUAllocator),
// so the counter is process-wide. Storage made before InstallCpuMemoryCounter
// keeps the default allocator and is never counted.
// Thread-safety: every function may be called from any thread; the counts
// are atomics.
#ifndef KIMI_PLAN_RUNTIME_COMM_CPU_MEMORY_H_
#define KIMI_PLAN_RUNTIME_COMM_CPU_MEMORY_H_

#include <cstdint>

namespace kp::runtime {

/// Makes the counting allocator LibTorch's CPU allocator (idempotent). Call
/// it before the tensors to be counted are made.
void InstallCpuMemoryCounter();
/// Whether InstallCpuMemoryCounter has run in this process.
bool CpuMemoryCounterInstalled();

/// Bytes of CPU storage live now, made since the install.
std::int64_t CpuAllocatedBytes();
/// The most CpuAllocatedBytes has been since the install or the last
/// ResetCpuPeakBytes.
std::int64_t CpuPeakBytes();
/// Starts the peak afresh from the bytes live now.
void ResetCpuPeakBytes();

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_CPU_MEMORY_H_
