#include "runtime/sdpo/decode_graph.h"

#include <string>
#include <utility>

#include <torch/version.h>

#include "runtime/sdpo/rollout.h"

#if defined(KIMI_PLAN_TORCH_CUDA) && TORCH_VERSION_MAJOR >= 2
#define KIMI_PLAN_CUDA_GRAPHS 1
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace kp::runtime {

#ifdef KIMI_PLAN_CUDA_GRAPHS

struct DecodeGraph::Captured {
  at::cuda::CUDAGraph graph;
};

bool DecodeGraph::Available(const torch::Device& device) { return device.is_cuda(); }

Result<std::unique_ptr<DecodeGraph>> DecodeGraph::Capture(StageModelImpl& model, DecodeCache& cache,
                                                          const SamplingOptions& options, std::int64_t rows) {
  const torch::Tensor position = cache.position();
  if (!cache.fixed() || !position.is_cuda())
    return Status::InvalidArgument("decode graph: the cache must be fixed (DecodeCache::Fix) and on a GPU");
  std::unique_ptr<DecodeGraph> g(new DecodeGraph());
  const auto on = torch::TensorOptions().device(position.device());
  // The buffers the replays read and write, made before the capture so
  // that they live outside the graph's memory pool.
  g->ids_ = torch::zeros({rows}, on.dtype(torch::kLong));
  g->logprobs_ = torch::zeros({rows}, on.dtype(torch::kFloat));
  if (options.temperature > 0) g->uniforms_ = torch::zeros({rows}, on.dtype(torch::kDouble));
  g->captured_ = std::make_unique<Captured>();
  const c10::cuda::CUDAGuard device_guard(position.device());
  // Capture runs on a side stream (never the default one), after the
  // current stream's work: the cache must be what the eager steps left.
  c10::cuda::getCurrentCUDAStream().synchronize();
  const c10::cuda::CUDAStreamGuard stream_guard(c10::cuda::getStreamFromPool());
  at::cuda::CUDAGraph& graph = g->captured_->graph;
  // The pool's id is ours: a failed capture must hand it back itself.
  const auto pool = at::cuda::graph_pool_handle();
  graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
  std::string failed;
  try {
    const torch::Tensor logits = model.ForwardIncremental(g->ids_.unsqueeze(1), cache).select(1, 0);
    const SampledTokens drawn = SampleTokenAt(logits, options, g->uniforms_);
    g->ids_.copy_(drawn.ids);
    g->logprobs_.copy_(drawn.logprobs);
  } catch (const std::exception& e) {
    const auto* c10_error = dynamic_cast<const c10::Error*>(&e);
    failed = "a step's operation cannot be captured: " +
             std::string(c10_error ? c10_error->what_without_backtrace() : e.what());
  }
  try {
    graph.capture_end();
  } catch (const std::exception& e) {
    if (failed.empty()) failed = e.what();
    // capture_end stops at the invalidated capture before it hands the
    // allocator back: without this every later allocation on the device
    // would still be routed to, and held by, the graph's pool.
    const c10::DeviceIndex device = position.device().index();
    try {
      c10::cuda::CUDACachingAllocator::endAllocateToPool(device, pool);
    } catch (const std::exception&) {
      // capture_end had handed the allocator back before it failed.
    }
    try {
      c10::cuda::CUDACachingAllocator::releasePool(device, pool);
    } catch (const std::exception&) {
      // Released already: nothing of the pool is held.
    }
  }
  if (!failed.empty()) return Status::Internal("decode graph: " + failed);
  return g;
}

void DecodeGraph::Replay() { captured_->graph.replay(); }

#else  // no CUDA graphs in this build

struct DecodeGraph::Captured {};

bool DecodeGraph::Available(const torch::Device&) { return false; }

Result<std::unique_ptr<DecodeGraph>> DecodeGraph::Capture(StageModelImpl&, DecodeCache&, const SamplingOptions&,
                                                          std::int64_t) {
  return Status::InvalidArgument("decode graph: this build has no CUDA graphs (a CUDA LibTorch 2 is needed)");
}

void DecodeGraph::Replay() {}

#endif

DecodeGraph::~DecodeGraph() = default;

}  // namespace kp::runtime
