#include "runtime/comm/cpu_memory.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include <c10/core/Allocator.h>
#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>
#include <torch/version.h>

namespace kp::runtime {
namespace {

// Each block carries its size in a header as wide as c10's alignment, so the
// data stays aligned, the data pointer is its own deleter context (which
// Allocator::raw_allocate requires) and freeing needs no lookup table.
constexpr std::size_t kHeader = 64;

std::atomic<std::int64_t> g_live{0};
std::atomic<std::int64_t> g_peak{0};
std::atomic<bool> g_installed{false};

void RaisePeak(std::int64_t live) {
  std::int64_t peak = g_peak.load(std::memory_order_relaxed);
  while (live > peak && !g_peak.compare_exchange_weak(peak, live, std::memory_order_relaxed)) {
  }
}

void FreeCounted(void* data) {
  if (data == nullptr) return;
  char* block = static_cast<char*>(data) - kHeader;
  std::size_t bytes;
  std::memcpy(&bytes, block, sizeof(bytes));
  g_live.fetch_sub(static_cast<std::int64_t>(bytes), std::memory_order_relaxed);
  c10::free_cpu(block);
}

// LibTorch 2.3 made allocate() non-const and added copy_data().
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define KP_ALLOCATE_CONST
#else
#define KP_ALLOCATE_CONST const
#endif

class CountingCpuAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(std::size_t bytes) KP_ALLOCATE_CONST override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (bytes == 0) return {nullptr, nullptr, &FreeCounted, cpu};
    char* block = static_cast<char*>(c10::alloc_cpu(bytes + kHeader));
    std::memcpy(block, &bytes, sizeof(bytes));
    RaisePeak(g_live.fetch_add(static_cast<std::int64_t>(bytes), std::memory_order_relaxed) +
              static_cast<std::int64_t>(bytes));
    void* data = block + kHeader;
    return {data, data, &FreeCounted, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeCounted; }
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
#endif
};

}  // namespace

void InstallCpuMemoryCounter() {
  static CountingCpuAllocator allocator;
  if (g_installed.exchange(true)) return;
  // Above the default's priority 0, so a later default registration cannot displace it.
  c10::SetCPUAllocator(&allocator, /*priority=*/1);
}

bool CpuMemoryCounterInstalled() { return g_installed.load(); }

std::int64_t CpuAllocatedBytes() { return g_live.load(std::memory_order_relaxed); }

std::int64_t CpuPeakBytes() { return std::max(g_peak.load(std::memory_order_relaxed), CpuAllocatedBytes()); }

void ResetCpuPeakBytes() { g_peak.store(g_live.load(std::memory_order_relaxed), std::memory_order_relaxed); }

}  // namespace kp::runtime
