#include "runtime/train/distributed_optimizer.h"

#include <algorithm>

namespace kp::runtime {

namespace {

int SizeOf(const Communicator* c) { return c == nullptr ? 1 : c->size(); }
int RankIn(const Communicator* c) { return c == nullptr ? 0 : c->rank(); }

// The elements of a parameter, flat, without autograd.
torch::Tensor Flat(const torch::Tensor& p) { return p.detach().view({-1}); }

}  // namespace

ParameterShards::ParameterShards(std::vector<ReplicatedParameters> groups) : groups_(std::move(groups)) {
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    std::vector<std::int64_t> starts;
    std::int64_t total = 0;
    for (const torch::Tensor& p : groups_[g].params) {
      TORCH_CHECK(p.is_contiguous(), "the distributed optimizer needs contiguous parameters");
      TORCH_CHECK(p.scalar_type() == torch::kFloat || p.scalar_type() == torch::kBFloat16 ||
                      p.scalar_type() == torch::kDouble,
                  "the optimizer's shards take fp32 (fp64 in tests) or bf16 parameters");
      starts.push_back(total);
      total += p.numel();
    }
    starts_.push_back(std::move(starts));
    totals_.push_back(total);
    const Range mine = Owned(static_cast<int>(g), RankIn(groups_[g].group));
    for (std::size_t i = 0; i < groups_[g].params.size(); ++i) {
      const torch::Tensor& p = groups_[g].params[i];
      const std::int64_t lo = std::max(mine.begin, starts_[g][i]), hi = std::min(mine.end, starts_[g][i] + p.numel());
      if (lo >= hi) continue;
      const torch::Tensor stored = Flat(p).narrow(0, lo - starts_[g][i], hi - lo);
      const torch::Tensor values = stored.scalar_type() == torch::kBFloat16 ? stored.to(torch::kFloat) : stored;
      slices_.push_back({values, stored, static_cast<int>(g), static_cast<int>(i), lo - starts_[g][i], p.dim() >= 2});
    }
  }
}

ParameterShards::Range ParameterShards::Owned(int group, int rank) const {
  const std::int64_t d = SizeOf(groups_[group].group), n = totals_[group];
  const std::int64_t per = (n + d - 1) / d;
  return {std::min(n, rank * per), std::min(n, (rank + 1) * per)};
}

std::int64_t ParameterShards::owned_elements() const {
  std::int64_t n = 0;
  for (const Slice& s : slices_) n += s.values.numel();
  return n;
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

template <typename F, typename Of>
Status ParameterShards::ForEachOwnedPart(int g, const Of& of, const F& f) const {
  const std::vector<torch::Tensor>& params = groups_[g].params;
  for (int r = 0; r < SizeOf(groups_[g].group); ++r) {
    const Range owned = Owned(g, r);
    for (std::size_t i = 0; i < params.size(); ++i) {
      const std::int64_t start = starts_[g][i];
      const std::int64_t lo = std::max(owned.begin, start), hi = std::min(owned.end, start + params[i].numel());
      if (lo >= hi) continue;
      KP_RETURN_IF_ERROR(f(r, static_cast<int>(i), Flat(of(params[i])).narrow(0, lo - start, hi - lo)));
    }
  }
  return Status::Ok();
}

bool ParameterShards::sharded() const {
  for (const ReplicatedParameters& g : groups_)
    if (SizeOf(g.group) > 1) return true;
  return false;
}

Status ParameterShards::ReduceScatterGradients(int divisor) {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    for (const torch::Tensor& p : groups_[g].params)
      if (!p.grad().defined()) const_cast<torch::Tensor&>(p).mutable_grad() = torch::zeros_like(p);
    Communicator* group = groups_[g].group;
    const int mine = RankIn(group);
    // Megatron's reduce-scatter, part by part: each owner receives the sum
    // of its part alone, as one all-reduce of the part would give it.
    KP_RETURN_IF_ERROR(ForEachOwnedPart(
        static_cast<int>(g), [](const torch::Tensor& p) { return p.grad(); },
        [&](int owner, int, torch::Tensor part) -> Status {
          if (SizeOf(group) > 1) KP_RETURN_IF_ERROR(group->ReduceSum(part, owner));
          if (owner == mine && divisor != 1) part.div_(divisor);
          return Status::Ok();
        }));
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

Status ParameterShards::Gather() {
  torch::NoGradGuard no_grad;
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    Communicator* group = groups_[g].group;
    if (SizeOf(group) == 1) continue;
    // Straight into the parameters, part by part: no buffer beside them
    // (the plan counts none), at one broadcast per part.
    KP_RETURN_IF_ERROR(ForEachOwnedPart(
        static_cast<int>(g), [](const torch::Tensor& p) { return p; },
        [&](int owner, int, torch::Tensor part) { return group->Broadcast(part, owner); }));
  }
  return Status::Ok();
}

}  // namespace kp::runtime
