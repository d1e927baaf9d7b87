#include "runtime/train/distributed_optimizer.h"

#include <algorithm>

namespace kp::runtime {

namespace {

int SizeOf(const Communicator* c) { return c == nullptr ? 1 : c->size(); }
int RankIn(const Communicator* c) { return c == nullptr ? 0 : c->rank(); }

// The elements of a parameter, flat, without autograd.
torch::Tensor Flat(const torch::Tensor& p) { return p.detach().view({-1}); }

// A parameter's gradient dtype: Megatron's fp32 main gradient (fp64 tests
// keep fp64).
torch::ScalarType GradientType(const torch::Tensor& p) {
  return p.scalar_type() == torch::kDouble ? torch::kDouble : torch::kFloat;
}

}  // namespace

ParameterShards::ParameterShards(std::vector<ReplicatedParameters> groups, std::int64_t bucket_bytes)
    : groups_(std::move(groups)),
      starts_(groups_.size()),
      buckets_(groups_.size()),
      totals_(groups_.size()),
      gradients_(groups_.size()) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    LayOut(static_cast<int>(g), bucket_bytes);
    for (const Bucket& b : buckets_[g]) {
      const auto [lo_owned, hi_owned] = Owned(static_cast<int>(g), b);
      for (int i = b.first; i < b.last; ++i) {
        const torch::Tensor& p = groups_[g].params[i];
        const std::int64_t start = starts_[g][i];
        const std::int64_t lo = std::max(lo_owned, start), hi = std::min(hi_owned, start + p.numel());
        if (lo >= hi) continue;
        const torch::Tensor stored = Flat(p).narrow(0, lo - start, hi - lo);
        const torch::Tensor values = stored.scalar_type() == torch::kBFloat16 ? stored.to(torch::kFloat) : stored;
        slices_.push_back({values, stored, static_cast<int>(g), i, lo - start, p.dim() >= 2});
      }
    }
  }
}

// Buckets close at a change of dtype (one staging dtype for the gather) and
// before the bucket would pass `bucket_bytes` of fp32 gradient; each is
// padded to a multiple of D so that its D parts are equal, as NCCL's
// reduce-scatter and all-gather need.
void ParameterShards::LayOut(int g, std::int64_t bucket_bytes) {
  const std::vector<torch::Tensor>& params = groups_[g].params;
  const std::int64_t d = SizeOf(groups_[g].group);
  std::int64_t total = 0;
  Bucket open;
  std::int64_t filled = 0, bytes = 0;
  const auto close = [&](int last) {
    open.last = last;
    open.size = (filled + d - 1) / d * d;
    buckets_[g].push_back(open);
    total += open.size;
    open = Bucket{total, 0, last, last};
    filled = bytes = 0;
  };
  for (std::size_t i = 0; i < params.size(); ++i) {
    const torch::Tensor& p = params[i];
    TORCH_CHECK(p.is_contiguous(), "the distributed optimizer needs contiguous parameters");
    TORCH_CHECK(
        p.scalar_type() == torch::kFloat || p.scalar_type() == torch::kBFloat16 || p.scalar_type() == torch::kDouble,
        "the optimizer's shards take fp32 (fp64 in tests) or bf16 parameters");
    TORCH_CHECK(GradientType(p) == GradientType(params[0]), "the optimizer's shards: one gradient dtype per group");
    const std::int64_t grad_bytes = p.numel() * static_cast<std::int64_t>(torch::elementSize(GradientType(p)));
    const int at = static_cast<int>(i);
    if (filled > 0 && (p.scalar_type() != params[open.first].scalar_type() || bytes + grad_bytes > bucket_bytes))
      close(at);
    starts_[g].push_back(total + filled);
    filled += p.numel();
    bytes += grad_bytes;
  }
  if (filled > 0) close(static_cast<int>(params.size()));
  totals_[g] = total;
}

std::pair<std::int64_t, std::int64_t> ParameterShards::Owned(int g, const Bucket& b) const {
  const std::int64_t part = b.size / SizeOf(groups_[g].group);
  const std::int64_t lo = b.begin + RankIn(groups_[g].group) * part;
  return {lo, lo + part};
}

torch::Tensor ParameterShards::GradientView(int g, int i) const {
  const torch::Tensor& p = groups_[g].params[i];
  return gradients_[g].narrow(0, starts_[g][i], p.numel()).view(p.sizes());
}

const ParameterShards::Slice* ParameterShards::SliceOf(const torch::Tensor& param) const {
  for (const Slice& s : slices_)
    if (ParameterOf(s).is_same(param)) return &s;
  return nullptr;
}

bool ParameterShards::ShardsParameter(const torch::Tensor& param) const {
  for (const ReplicatedParameters& g : groups_)
    for (const torch::Tensor& p : g.params)
      if (p.is_same(param)) return SizeOf(g.group) > 1;
  return false;
}

std::int64_t ParameterShards::owned_elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices_) n += s.values.numel();
  return n;
}

void ParameterShards::EnsureGradientBuffer(int g) {
  const std::vector<torch::Tensor>& params = groups_[g].params;
  if (!gradients_[g].defined() && !params.empty())
    gradients_[g] = torch::zeros({totals_[g]}, params[0].options().dtype(GradientType(params[0])));
}

void ParameterShards::PrepareGradients() {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<torch::Tensor>& params = groups_[g].params;
    if (params.empty()) continue;
    EnsureGradientBuffer(static_cast<int>(g));
    gradients_[g].zero_();
    for (std::size_t i = 0; i < params.size(); ++i)
      const_cast<torch::Tensor&>(params[i]).mutable_grad() = GradientView(static_cast<int>(g), static_cast<int>(i));
  }
}

void ParameterShards::BindGradients() {
  for (Slice& s : slices_) {
    const torch::Tensor& p = groups_[s.group].params[s.param];
    s.values.mutable_grad() =
        p.grad().defined() ? Flat(p.grad()).narrow(0, s.offset, s.values.numel()) : torch::Tensor();
  }
}

void ParameterShards::ReleaseGradients() {
  for (Slice& s : slices_) s.values.mutable_grad() = torch::Tensor();
}

void ParameterShards::StoreMasters() {
  torch::NoGradGuard no_grad;
  for (Slice& s : slices_)
    if (!s.values.is_same(s.stored)) s.stored.copy_(s.values);
}

std::int64_t ParameterShards::master_elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices_)
    if (!s.values.is_same(s.stored)) n += s.values.numel();
  return n;
}

bool ParameterShards::sharded() const {
  for (const ReplicatedParameters& g : groups_)
    if (SizeOf(g.group) > 1) return true;
  return false;
}

Status ParameterShards::ReduceScatterGradients(int divisor) {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<torch::Tensor>& params = groups_[g].params;
    if (params.empty()) continue;
    EnsureGradientBuffer(static_cast<int>(g));
    // A gradient the backward made anew (none was there) or that someone
    // replaced is brought into the buffer, so the buckets see every one.
    for (std::size_t i = 0; i < params.size(); ++i) {
      torch::Tensor view = GradientView(static_cast<int>(g), static_cast<int>(i));
      const torch::Tensor& grad = params[i].grad();
      if (grad.defined() && grad.data_ptr() == view.data_ptr()) continue;
      if (grad.defined())
        view.copy_(grad);
      else
        view.zero_();
      const_cast<torch::Tensor&>(params[i]).mutable_grad() = view;
    }
    Communicator* group = groups_[g].group;
    for (const Bucket& b : buckets_[g]) {
      torch::Tensor bucket = gradients_[g].narrow(0, b.begin, b.size);
      if (SizeOf(group) > 1) KP_RETURN_IF_ERROR(group->ReduceScatterSum(bucket));
      const auto [lo, hi] = Owned(static_cast<int>(g), b);
      if (divisor != 1) gradients_[g].narrow(0, lo, hi - lo).div_(divisor);
    }
  }
  return Status::Ok();
}

std::vector<torch::Tensor> ParameterShards::OwnedGradients(int group) const {
  const std::vector<torch::Tensor>& params = groups_[group].params;
  std::vector<torch::Tensor> owned(params.size());
  for (const Slice& s : slices_) {
    if (s.group != group) continue;
    const torch::Tensor& p = params[s.param];
    if (p.grad().defined()) owned[s.param] = Flat(p.grad()).narrow(0, s.offset, s.values.numel());
  }
  return owned;
}

// Each bucket through one staging buffer in its parameters' dtype: the
// owned elements in, the all-gather, every parameter's elements out.
Status ParameterShards::Gather() {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Communicator* group = groups_[g].group;
    if (SizeOf(group) == 1) continue;
    const std::vector<torch::Tensor>& params = groups_[g].params;
    for (const Bucket& b : buckets_[g]) {
      torch::Tensor staging = torch::empty({b.size}, params[b.first].options());
      const auto [lo, hi] = Owned(static_cast<int>(g), b);
      for (int i = b.first; i < b.last; ++i) {
        const std::int64_t start = starts_[g][i], from = std::max(lo, start),
                           to = std::min(hi, start + params[i].numel());
        if (from < to)
          staging.narrow(0, from - b.begin, to - from).copy_(Flat(params[i]).narrow(0, from - start, to - from));
      }
      KP_RETURN_IF_ERROR(group->AllGather(staging));
      for (int i = b.first; i < b.last; ++i)
        Flat(params[i]).copy_(staging.narrow(0, starts_[g][i] - b.begin, params[i].numel()));
    }
  }
  return Status::Ok();
}

}  // namespace kp::runtime
