#include "runtime/model/init.h"

#include <ATen/Parallel.h>

#include <cmath>
#include <string>
#include <unordered_map>

#include "common/splitmix.h"

namespace kp::runtime {

namespace {

constexpr double kTwoPi = 6.283185307179586476925286766559;
constexpr double kTwoTo32 = 4294967296.0;

// Box-Muller over pairs of elements: elements 2p and 2p + 1 share one hash
// of (key, p), so a slice starting at an odd element still gets the values
// the whole tensor has there.
struct NormalPair {
  double cos_value, sin_value;
};

NormalPair PairAt(std::uint64_t key, std::uint64_t pair, double std) {
  const std::uint64_t h = Mix64(key ^ Mix64(pair));
  const double u1 = (static_cast<double>(h >> 32) + 0.5) / kTwoTo32;
  const double u2 = (static_cast<double>(h & 0xffffffffULL) + 0.5) / kTwoTo32;
  const double r = std * std::sqrt(-2.0 * std::log(u1)), angle = kTwoPi * u2;
  return {r * std::cos(angle), r * std::sin(angle)};
}

float NormalAt(std::uint64_t key, std::uint64_t flat, double std) {
  const NormalPair p = PairAt(key, flat >> 1, std);
  return static_cast<float>((flat & 1) ? p.sin_value : p.cos_value);
}

// Elements [first, first + count) of the whole tensor, in order.
void FillRun(float* out, std::uint64_t key, double std, std::uint64_t first, std::int64_t count) {
  std::uint64_t i = first;
  const std::uint64_t end = first + static_cast<std::uint64_t>(count);
  if (i < end && (i & 1)) *out++ = NormalAt(key, i++, std);
  for (; i + 1 < end; i += 2) {
    const NormalPair p = PairAt(key, i >> 1, std);
    *out++ = static_cast<float>(p.cos_value);
    *out++ = static_cast<float>(p.sin_value);
  }
  if (i < end) *out = NormalAt(key, i, std);
}

}  // namespace

Init::Init(std::uint64_t seed) : base_(Mix64(seed)) {}

Init::Init(std::uint64_t seed, std::uint64_t stream, bool deferred, torch::Dtype weights)
    : base_(Mix64(Mix64(seed) ^ Mix64(stream + 0x51ed))), deferred_(deferred), weights_(weights) {}

std::uint64_t Init::NextKey() { return Mix64(base_ ^ Mix64(0x1000 + calls_++)); }

torch::Tensor Init::Normal(at::IntArrayRef shape, double std) { return Normal(shape, std, weights_); }

torch::Tensor Init::Normal(at::IntArrayRef shape, double std, torch::Dtype dtype) {
  const std::uint64_t key = NextKey();
  torch::Tensor whole = torch::empty(shape, torch::TensorOptions().dtype(dtype).device(torch::kMeta));
  if (!deferred_) return NormalValuesAt(key, std, whole).to(dtype);
  made_.push_back(DeferredNormal{whole, key, std});
  return whole;
}

torch::Tensor Init::Uniform(at::IntArrayRef shape, double lo, double hi) {
  const std::uint64_t key = NextKey();
  torch::Tensor out = torch::empty(shape, torch::kFloat);
  float* data = out.data_ptr<float>();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    const std::uint64_t h = Mix64(key ^ Mix64(static_cast<std::uint64_t>(i)));
    const double u = (static_cast<double>(h >> 11) + 0.5) / 9007199254740992.0;  // 2^53
    data[i] = static_cast<float>(lo + (hi - lo) * u);
  }
  return out;
}

std::vector<DeferredNormal> Init::TakeDeferred() {
  std::vector<DeferredNormal> out;
  out.swap(made_);
  return out;
}

torch::Tensor NormalValuesAt(std::uint64_t key, double std, const torch::Tensor& view) {
  torch::Tensor out = torch::empty(view.sizes(), torch::kFloat);
  const std::int64_t n = view.numel();
  if (n == 0) return out;
  const std::int64_t dims = view.dim();
  const std::int64_t run = dims == 0 ? 1 : view.size(dims - 1);
  const std::int64_t run_stride = dims == 0 ? 1 : view.stride(dims - 1);
  const std::vector<std::int64_t> sizes(view.sizes().begin(), view.sizes().end());
  const std::vector<std::int64_t> strides(view.strides().begin(), view.strides().end());
  const std::int64_t offset = view.storage_offset();
  float* data = out.data_ptr<float>();
  // One task per run along the last dimension: where in the whole it starts
  // follows from the run's index over the outer dimensions.
  at::parallel_for(0, n / run, std::max<std::int64_t>(1, 4096 / run), [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      std::int64_t start = offset, rest = r;
      for (std::int64_t d = dims - 2; d >= 0; --d) {
        start += (rest % sizes[d]) * strides[d];
        rest /= sizes[d];
      }
      float* out_run = data + r * run;
      if (run_stride == 1) {
        FillRun(out_run, key, std, static_cast<std::uint64_t>(start), run);
      } else {
        for (std::int64_t j = 0; j < run; ++j)
          out_run[j] = NormalAt(key, static_cast<std::uint64_t>(start + j * run_stride), std);
      }
    }
  });
  return out;
}

torch::Tensor KeepSlice(const torch::Tensor& t, std::int64_t dim, std::int64_t first, std::int64_t count) {
  torch::Tensor slice = t.narrow(dim, first, count);
  return t.is_meta() ? slice : slice.clone();
}

Status Materialize(torch::nn::Module& module, const std::vector<DeferredNormal>& deferred) {
  std::unordered_map<const c10::StorageImpl*, const DeferredNormal*> by_storage;
  for (const DeferredNormal& d : deferred) by_storage[d.whole.storage().unsafeGetStorageImpl()] = &d;
  torch::NoGradGuard no_grad;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    const torch::Tensor& p = item.value();
    if (!p.is_meta()) continue;
    const auto it = by_storage.find(p.storage().unsafeGetStorageImpl());
    if (it == by_storage.end())
      return Status::InvalidArgument("materialising the model: parameter " + item.key() +
                                     " is a meta tensor that no initialiser made");
    const torch::Tensor values = NormalValuesAt(it->second->key, it->second->std, p).to(p.scalar_type());
    // set_data refuses to change a tensor's device type; the parameter object
    // (held by its module and by name) must stay, so its metadata is
    // replaced in place, keeping its autograd state.
    p.unsafeGetTensorImpl()->shallow_copy_from(values.getIntrusivePtr());
  }
  return Status::Ok();
}

}  // namespace kp::runtime
