#include "runtime/train/multi_tensor_adamw.h"

#include <cmath>
#include <map>
#include <sstream>
#include <string>
#include <type_traits>

#include <torch/version.h>

// PyTorch's fused AdamW kernel (at::_fused_adamw_) arrived in 2.1.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define KP_HAS_FUSED_ADAMW 1
#else
#define KP_HAS_FUSED_ADAMW 0
#endif

namespace kp::runtime {

namespace {

// The optimizer's state map is keyed by the TensorImpl address printed to a
// string (as LibTorch 1.13's c10::guts::to_string prints it) in older
// LibTorch and by the address itself in newer: whichever this is.
template <typename Map>
typename Map::key_type KeyOf(const torch::Tensor& p) {
  using Key = typename Map::key_type;
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream key;
    key << p.unsafeGetTensorImpl();
    return key.str();
  } else {
    return p.unsafeGetTensorImpl();
  }
}

template <typename Map>
typename Map::mapped_type& StateOf(Map& state, const torch::Tensor& p) {
  return state[KeyOf<Map>(p)];
}

// The tensors of one update: parameters whose state has the same step
// count (they share the bias corrections) and the same options.
struct Bucket {
  std::vector<torch::Tensor> params, grads, exp_avg, exp_avg_sq;
  std::int64_t elements = 0;
};

// One fused kernel over the bucket where it applies: every tensor fp32 on
// one GPU. Its arithmetic is Update's below in fp32 registers, without the
// eight passes over memory and the denominators' temporaries.
bool FusedApplies(const Bucket& b) {
#if KP_HAS_FUSED_ADAMW
  const torch::Tensor& first = b.params.front();
  if (!first.is_cuda()) return false;
  for (const auto* list : {&b.params, &b.grads, &b.exp_avg, &b.exp_avg_sq})
    for (const torch::Tensor& t : *list)
      if (t.scalar_type() != torch::kFloat || t.device() != first.device()) return false;
  return true;
#else
  (void)b;
  return false;
#endif
}

void UpdateFused(Bucket& b, const torch::optim::AdamWOptions& o, std::int64_t step, double grad_scale) {
#if KP_HAS_FUSED_ADAMW
  // The kernel reads each tensor's step count from the device; one shared
  // count serves the bucket, whose tensors all have this step.
  const std::vector<torch::Tensor> steps(
      b.params.size(), torch::scalar_tensor(static_cast<double>(step), b.params.front().options()));
  // The kernel divides each gradient by grad_scale (its AMP unscaling).
  torch::Tensor inverse_scale;
  if (grad_scale != 1) inverse_scale = torch::scalar_tensor(1.0 / grad_scale, b.params.front().options());
  at::_fused_adamw_(b.params, b.grads, b.exp_avg, b.exp_avg_sq, /*max_exp_avg_sqs=*/at::TensorList(), steps, o.lr(),
                    std::get<0>(o.betas()), std::get<1>(o.betas()), o.weight_decay(), o.eps(), /*amsgrad=*/false,
                    /*maximize=*/false, /*grad_scale=*/inverse_scale.defined() ? c10::optional<at::Tensor>(inverse_scale)
                                                                             : c10::optional<at::Tensor>(),
                    /*found_inf=*/c10::optional<at::Tensor>());
#else
  (void)o;
  (void)step;
  (void)grad_scale;
#endif
  b = Bucket{};
}

void Update(Bucket& b, const torch::optim::AdamWOptions& o, std::int64_t step, double grad_scale) {
  if (FusedApplies(b)) return UpdateFused(b, o, step, grad_scale);
  if (grad_scale != 1) at::_foreach_mul_(b.grads, grad_scale);
  const double beta1 = std::get<0>(o.betas()), beta2 = std::get<1>(o.betas());
  const double bias_correction1 = 1 - std::pow(beta1, static_cast<double>(step));
  const double bias_correction2 = 1 - std::pow(beta2, static_cast<double>(step));
  if (o.weight_decay() != 0) at::_foreach_mul_(b.params, 1 - o.lr() * o.weight_decay());
  at::_foreach_mul_(b.exp_avg, beta1);
  at::_foreach_add_(b.exp_avg, b.grads, 1 - beta1);
  at::_foreach_mul_(b.exp_avg_sq, beta2);
  at::_foreach_addcmul_(b.exp_avg_sq, b.grads, b.grads, 1 - beta2);
  // One tensor's denominator at a time: a list of them would hold a fourth
  // fp32 copy of the parameters at the step's peak. The same operations in
  // the same order as the list form, so the same bits.
  for (size_t i = 0; i < b.params.size(); ++i) {
    torch::Tensor denom = b.exp_avg_sq[i].sqrt();
    denom.div_(std::sqrt(bias_correction2));
    denom.add_(o.eps());
    b.params[i].addcdiv_(b.exp_avg[i], denom, -o.lr() / bias_correction1);
  }
  b = Bucket{};
}

}  // namespace

MultiTensorAdamW::MultiTensorAdamW(std::vector<torch::optim::OptimizerParamGroup> groups,
                                   torch::optim::AdamWOptions defaults, std::int64_t bucket_elements)
    : torch::optim::AdamW(std::move(groups), std::move(defaults)), bucket_elements_(bucket_elements) {}

const torch::optim::AdamWParamState* MultiTensorAdamW::StateOf(const torch::Tensor& p) const {
  const auto found = state_.find(KeyOf<decltype(state_)>(p));
  if (found == state_.end() || !found->second) return nullptr;
  return static_cast<const torch::optim::AdamWParamState*>(found->second.get());
}

void MultiTensorAdamW::SetState(const torch::Tensor& p, const torch::Tensor& exp_avg, const torch::Tensor& exp_avg_sq,
                                std::int64_t step) {
  auto& slot = kp::runtime::StateOf(state_, p);
  if (step == 0) {
    slot.reset();
    return;
  }
  auto state = std::make_unique<torch::optim::AdamWParamState>();
  state->step(step);
  state->exp_avg(exp_avg.detach().to(p.options()).reshape(p.sizes()).clone());
  state->exp_avg_sq(exp_avg_sq.detach().to(p.options()).reshape(p.sizes()).clone());
  slot = std::move(state);
}

torch::Tensor MultiTensorAdamW::step(LossClosure closure) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  for (auto& group : param_groups_) {
    const auto& options = static_cast<const torch::optim::AdamWOptions&>(group.options());
    TORCH_CHECK(!options.amsgrad(), "MultiTensorAdamW: AMSGrad is not supported");
    std::map<std::int64_t, Bucket> by_step;  // ordered: a fixed order of updates
    for (const torch::Tensor& p : group.params()) {
      if (!p.grad().defined()) continue;
      TORCH_CHECK(!p.grad().is_sparse(), "MultiTensorAdamW: sparse gradients are not supported");
      auto& slot = kp::runtime::StateOf(state_, p);
      if (!slot) {
        auto fresh = std::make_unique<torch::optim::AdamWParamState>();
        fresh->step(0);
        fresh->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        fresh->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
        slot = std::move(fresh);
      }
      auto& state = static_cast<torch::optim::AdamWParamState&>(*slot);
      state.step(state.step() + 1);
      Bucket& b = by_step[state.step()];
      // Flushed before it would outgrow the bound (the default, 2^26 fp32
      // elements, keeps the temporaries near 256 MB).
      if (b.elements > 0 && b.elements + p.numel() > bucket_elements_) Update(b, options, state.step(), grad_scale_);
      b.params.push_back(p);
      b.grads.push_back(p.grad());
      b.exp_avg.push_back(state.exp_avg());
      b.exp_avg_sq.push_back(state.exp_avg_sq());
      b.elements += p.numel();
    }
    for (auto& [step, b] : by_step)
      if (!b.params.empty()) Update(b, options, step, grad_scale_);
  }
  grad_scale_ = 1;
  return loss;
}

}  // namespace kp::runtime
