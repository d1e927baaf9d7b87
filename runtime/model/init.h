// Parameter initialisation by counter (docs/runtime.md §9): every initial
// value is a pure function of (seed, stream, the call's place in its Init,
// the element's flat index in the whole parameter). Any slice of a parameter
// can therefore be made without the rest of it, which is what lets a rank
// build only what it owns (sharded construction): the model is built with its
// large weights deferred, as meta tensors of the whole shape; the shards are
// cut from them as views (KeepSlice); Materialize then fills each view with
// exactly the values the whole parameter holds there. A split model thus has,
// bit for bit, the whole model's weights, and nothing whole is allocated.
//
// Thread-safety: an Init is used from one thread. NormalValuesAt and
// Materialize fill in parallel; their values do not depend on the thread
// count or the order of work.
#ifndef KIMI_PLAN_RUNTIME_MODEL_INIT_H_
#define KIMI_PLAN_RUNTIME_MODEL_INIT_H_

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "common/status.h"

namespace kp::runtime {

/// A deferred N(0, std^2) tensor: `whole` is a meta tensor of the whole
/// parameter's shape; views of it (its storage) stand for slices of it.
struct DeferredNormal {
  torch::Tensor whole;
  std::uint64_t key = 0;
  double std = 0;
};

/// A parameter initialiser whose draws depend only on (seed, stream) and the
/// order of its own calls, so a module's initial weights do not depend on
/// what was built before it: a pipeline stage built alone gets the same
/// weights as the whole model.
class Init {
 public:
  explicit Init(std::uint64_t seed);
  /// `weights`: the dtype Normal stores its draws in (made in fp32, then
  /// rounded: bf16 weights are the fp32 ones rounded).
  Init(std::uint64_t seed, std::uint64_t stream, bool deferred = false, torch::Dtype weights = torch::kFloat);
  /// N(0, std^2) in the Init's weight dtype. Deferred: a meta tensor of
  /// `shape`, recorded for Materialize; otherwise the values on the CPU.
  torch::Tensor Normal(at::IntArrayRef shape, double std);
  /// The same in `dtype`, whatever the Init's (a router kept in fp32).
  torch::Tensor Normal(at::IntArrayRef shape, double std, torch::Dtype dtype);
  /// fp32 U(lo, hi) on the CPU, never deferred (used for small parameters).
  torch::Tensor Uniform(at::IntArrayRef shape, double lo, double hi);
  bool deferred() const { return deferred_; }
  /// The deferred tensors made so far; the Init forgets them.
  std::vector<DeferredNormal> TakeDeferred();

 private:
  std::uint64_t NextKey();
  std::uint64_t base_, calls_ = 0;
  bool deferred_ = false;
  torch::Dtype weights_ = torch::kFloat;
  std::vector<DeferredNormal> made_;
};

/// The values of `key`'s N(0, std^2) parameter at the elements `view`
/// addresses in it (its sizes, strides and storage offset taken as positions
/// in the whole, row-major, contiguous tensor): a contiguous fp32 CPU tensor
/// of view's shape. `view` may be a meta tensor; its data are never read.
torch::Tensor NormalValuesAt(std::uint64_t key, double std, const torch::Tensor& view);

/// `t.narrow(dim, first, count)`: a copy of the slice, or for a deferred
/// (meta) tensor the view itself, which keeps its place in the whole for
/// Materialize.
torch::Tensor KeepSlice(const torch::Tensor& t, std::int64_t dim, std::int64_t first, std::int64_t count);

/// Turns every meta parameter of `module` (recursively) into the CPU values
/// of the view it is of one of `deferred`'s tensors, in its dtype, in place: the parameter
/// objects, their names and requires_grad stay. InvalidArgument names a meta
/// parameter none of `deferred` made.
Status Materialize(torch::nn::Module& module, const std::vector<DeferredNormal>& deferred);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_MODEL_INIT_H_
