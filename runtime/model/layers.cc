#include "runtime/model/layers.h"

#include <cmath>
#include <limits>
#include <stdexcept>

#include <torch/version.h>

#include "runtime/comm/device.h"
#include "runtime/kernels/kernels.h"
#include "runtime/model/expert_parallel.h"
#include "runtime/model/fp8_linear.h"
#include "runtime/model/recompute.h"

// at::_grouped_mm (bf16, sm90+, with autograd) arrived in PyTorch 2.8.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 8)
#define KP_HAS_GROUPED_MM 1
#else
#define KP_HAS_GROUPED_MM 0
#endif

namespace kp::runtime {

namespace F = torch::nn::functional;

// ------------------------------------------------------------------ Proj

namespace {

// Adapters train in fp32 on a bf16 base, in the base's dtype otherwise.
torch::TensorOptions AdapterOptions(const torch::Tensor& base) {
  return base.options().dtype(base.scalar_type() == torch::kBFloat16 ? torch::kFloat : base.scalar_type());
}

}  // namespace

torch::Tensor CastWeight(const torch::Tensor& w, c10::ScalarType dtype) {
  if (w.scalar_type() != dtype && CastKernelApplies(w, dtype)) return CastKernel(w, dtype);
  return w.to(dtype);
}

ProjImpl::ProjImpl(std::int64_t in, std::int64_t out, double init_std, Init& init, bool lora_target)
    : lora_target_(lora_target) {
  weight_ = register_parameter("weight", init.Normal({out, in}, init_std));
}

torch::Tensor ProjImpl::forward(const torch::Tensor& x) {
  const auto dt = x.scalar_type();
  torch::Tensor y = torch::linear(x, CastWeight(weight_, dt));
  if (has_lora() && !merged_)
    y = y + torch::linear(torch::linear(x, lora_a_.to(dt)), lora_b_.to(dt)) * lora_scale_;
  return y;
}

torch::Tensor ProjImpl::EffectiveWeight(c10::ScalarType dtype) const {
  const torch::Tensor w = CastWeight(weight_, dtype);
  if (!has_lora() || merged_) return w;
  return w + torch::matmul(lora_b_.to(dtype), lora_a_.to(dtype)) * lora_scale_;
}

void ProjImpl::AddLora(const LoraOptions& lora, Init& init) {
  if (!lora_target_ || has_lora()) return;
  const std::int64_t in = weight_.size(1), out = weight_.size(0);
  lora_a_ = register_parameter("lora_a", init.Normal({lora.rank, in}, 1.0 / std::sqrt(double(in))).to(weight_.device()));
  lora_b_ = register_parameter("lora_b", torch::zeros({out, lora.rank}, AdapterOptions(weight_)));
  lora_scale_ = lora.alpha / lora.rank;
}

void ProjImpl::Merge() {
  if (!has_lora() || merged_) return;
  torch::NoGradGuard no_grad;
  weight_.add_(torch::matmul(lora_b_, lora_a_), lora_scale_);
  merged_ = true;
}

void ProjImpl::Unmerge() {
  if (!has_lora() || !merged_) return;
  torch::NoGradGuard no_grad;
  weight_.sub_(torch::matmul(lora_b_, lora_a_), lora_scale_);
  merged_ = false;
}

// ------------------------------------------------------------------ norms

torch::Tensor Upcast(const torch::Tensor& x) {
  const auto t = x.scalar_type();
  return t == torch::kBFloat16 || t == torch::kHalf ? x.to(torch::kFloat) : x;
}

torch::Tensor RmsNormalize(const torch::Tensor& x, double eps) {
  const torch::Tensor xf = Upcast(x);
  return xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
}

RmsNormImpl::RmsNormImpl(std::int64_t dim, double eps, bool fused) : eps_(eps), fused_(fused) {
  weight_ = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  if (fused_ && RmsNormKernelApplies(x)) return RmsNormKernel(x, weight_, eps_);
  return (RmsNormalize(x, eps_) * weight_).to(x.scalar_type());
}

// ------------------------------------------------------------------ AttnRes

torch::Tensor AttnResRead(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial,
                          const torch::Tensor& norm_weight, const torch::Tensor& query, double eps) {
  std::vector<torch::Tensor> values;
  values.reserve(blocks.size() + 1);
  for (const torch::Tensor& b : blocks) values.push_back(Upcast(b));
  if (partial.defined()) values.push_back(Upcast(partial));
  const auto dtype = partial.defined() ? partial.scalar_type() : blocks.front().scalar_type();
  const torch::Tensor v = torch::stack(values, /*dim=*/-2);                    // [..., N, D]
  const torch::Tensor scores = (RmsNormalize(v, eps) * (norm_weight * query)).sum(-1);  // [..., N]
  const torch::Tensor p = torch::softmax(scores, -1).unsqueeze(-2);            // [..., 1, N]
  return torch::matmul(p, v).squeeze(-2).to(dtype);
}

AttnResImpl::AttnResImpl(std::int64_t dim, double eps, bool fused) : eps_(eps), fused_(fused) {
  norm_weight_ = register_parameter("norm", torch::ones({dim}));
  query_ = register_parameter("proj", torch::zeros({dim}));
}

torch::Tensor AttnResImpl::forward(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial) {
  if (fused_) {
    std::vector<torch::Tensor> values = blocks;
    if (partial.defined()) values.push_back(partial);
    if (AttnResKernelApplies(values)) return AttnResReadKernel(values, norm_weight_, query_, eps_);
  }
  return AttnResRead(blocks, partial, norm_weight_, query_, eps_);
}

// ------------------------------------------------------------------ SwiGLU

torch::Tensor SiluTimes(const torch::Tensor& gate, const torch::Tensor& up, bool fused) {
  if (fused && SwiGluKernelApplies(gate, up)) return SwiGluKernel(gate, up);
  return torch::silu(gate) * up;
}

SwiGluImpl::SwiGluImpl(std::int64_t dim, std::int64_t hidden, bool gated, double init_std, double out_std,
                       Init& init, bool fused)
    : fused_(fused) {
  if (gated) gate_ = register_module("gate", std::make_shared<ProjImpl>(dim, hidden, init_std, init));
  up_ = register_module("up", std::make_shared<ProjImpl>(dim, hidden, init_std, init));
  down_ = register_module("down", std::make_shared<ProjImpl>(hidden, dim, out_std, init));
}

torch::Tensor SwiGluImpl::forward(const torch::Tensor& x) {
  if (!gate_) return down_->forward(torch::gelu(up_->forward(x)));
  return down_->forward(SiluTimes(gate_->forward(x), up_->forward(x), fused_));
}

// ------------------------------------------------------------------ router

torch::Tensor ExpertCounts(const torch::Tensor& experts, std::int64_t num_experts) {
  // A comparison against every id rather than bincount, which on a GPU
  // reads the largest id back to the host: this stays on the device.
  const torch::Tensor ids = torch::arange(num_experts, experts.options());
  return (experts.reshape({-1, 1}) == ids).sum(0);
}

Routing RouteFromScores(const torch::Tensor& scores, const torch::Tensor& bias, int top_k, double scale,
                        int groups, int topk_groups) {
  Routing r;
  torch::Tensor choice = scores + bias;
  if (groups > 1) {
    const std::int64_t n = choice.size(0), e = choice.size(1);
    const torch::Tensor grouped = choice.view({n, groups, e / groups});
    const torch::Tensor group_score = std::get<0>(grouped.topk(2, -1)).sum(-1);
    const torch::Tensor kept = std::get<1>(group_score.topk(topk_groups, -1));
    const torch::Tensor in_kept =
        torch::zeros({n, groups}, choice.options().dtype(torch::kBool)).scatter_(1, kept, true);
    // -inf, not 0: a biased score may be negative, and a dropped group's
    // expert must never win over a kept one.
    choice = choice.masked_fill(~in_kept.unsqueeze(-1).expand({n, groups, e / groups}).reshape({n, e}),
                                -std::numeric_limits<double>::infinity());
  }
  r.experts = std::get<1>(torch::topk(choice, top_k, /*dim=*/-1, /*largest=*/true, /*sorted=*/true));
  const torch::Tensor picked = scores.gather(-1, r.experts);
  r.weights = picked / picked.sum(-1, /*keepdim=*/true) * scale;
  return r;
}

RouterImpl::RouterImpl(std::int64_t dim, const MoeShape& moe, Init& init) : moe_(moe) {
  weight_ = register_parameter("weight", init.Normal({moe.num_experts, dim}, 0.02, torch::kFloat));
  bias_ = register_buffer("bias", torch::zeros({moe.num_experts}));
  load_ = register_buffer("load", torch::zeros({moe.num_experts}));
}

Routing RouterImpl::forward(const torch::Tensor& x, bool record_load) {
  const torch::Tensor scores = torch::sigmoid(torch::linear(Upcast(x), weight_));
  Routing r = RouteFromScores(scores, bias_, moe_.top_k, moe_.route_scale, moe_.groups, moe_.topk_groups);
  if (record_load) {
    torch::NoGradGuard no_grad;
    load_.add_(ExpertCounts(r.experts, load_.size(0)).to(load_.scalar_type()));
  }
  return r;
}

void RouterImpl::UpdateBias(double rate) {
  torch::NoGradGuard no_grad;
  bias_.add_(torch::sign(load_.mean() - load_), rate);
  load_.zero_();
}

// ------------------------------------------------------------------ experts

ExpertBankImpl::ExpertBankImpl(std::int64_t num_experts, std::int64_t dim, std::int64_t ffn, double init_std,
                               double out_std, Init& init)
    : num_experts_(num_experts) {
  gate_.weight = register_parameter("gate", init.Normal({num_experts, ffn, dim}, init_std));
  up_.weight = register_parameter("up", init.Normal({num_experts, ffn, dim}, init_std));
  down_.weight = register_parameter("down", init.Normal({num_experts, dim, ffn}, out_std));
}

ExpertBankImpl::Views ExpertBankImpl::Split(const Matrix& m, c10::ScalarType dtype) const {
  auto split = [&](const torch::Tensor& t) {
    if (t.dim() == 3) return CastWeight(t, dtype).unbind(0);
    return std::vector<torch::Tensor>{CastWeight(t, dtype)};
  };
  Views v;
  if (m.int4.packed.defined()) {
    for (std::int64_t e = 0; e < num_experts_; ++e) v.int4.push_back({m.int4.packed[e], m.int4.scales[e]});
  } else {
    v.weight = split(m.weight);
  }
  if (m.lora_a.defined() && !merged_) {
    v.lora_a = split(m.lora_a);
    v.lora_b = split(m.lora_b);
  }
  return v;
}

torch::Tensor ExpertBankImpl::Apply(const Views& m, std::int64_t e, const torch::Tensor& x) const {
  torch::Tensor y = !m.int4.empty() ? Int4Linear(x, m.int4[e])
                   : fp8_          ? Fp8Linear(x, m.weight[e])
                                   : torch::linear(x, m.weight[e]);
  if (!m.lora_a.empty()) {
    const torch::Tensor& a = m.lora_a.size() == 1 ? m.lora_a[0] : m.lora_a[e];
    const torch::Tensor& b = m.lora_b.size() == 1 ? m.lora_b[0] : m.lora_b[e];
    y = y + torch::linear(torch::linear(x, a), b) * lora_scale_;
  }
  return y;
}

torch::Tensor ExpertBankImpl::forward(const torch::Tensor& x_sorted, const std::vector<std::int64_t>& counts) {
  const auto dt = x_sorted.scalar_type();
  const Views gate = Split(gate_, dt), up = Split(up_, dt), down = Split(down_, dt);
  std::vector<torch::Tensor> outs;
  std::int64_t offset = 0;
  for (std::int64_t e = 0; e < num_experts_; ++e) {
    const std::int64_t c = counts[e];
    if (c == 0) continue;
    const torch::Tensor xe = x_sorted.narrow(0, offset, c);
    const torch::Tensor g = Apply(gate, e, xe), u = Apply(up, e, xe);
    if (!recompute_act_) {
      outs.push_back(Apply(down, e, torch::silu(g) * u));
    } else {
      OutputRecompute act;
      const torch::Tensor h = act.Run([](const std::vector<torch::Tensor>& in) {
        return std::vector<torch::Tensor>{torch::silu(in[0]) * in[1]};
      }, {g, u}, {})[0];
      outs.push_back(Apply(down, e, h));
      act.DiscardOutputs(outs.back());
    }
    offset += c;
  }
  if (outs.empty()) return torch::zeros_like(x_sorted);
  return torch::cat(outs, 0);
}

bool ExpertBankImpl::GroupedApplies(const torch::Tensor& x_sorted) const {
  // An unmerged LoRA or an INT4 base keeps the loop.
  if ((gate_.lora_a.defined() && !merged_) || int4_base()) return false;
  // FP8: this project's grouped kernels, whose tiles want both widths in
  // whole 128s.
  if (fp8_)
    return Fp8GroupedGemmApplies(x_sorted) && gate_.weight.size(1) % kFp8Block == 0 &&
           gate_.weight.size(2) % kFp8Block == 0;
#if KP_HAS_GROUPED_MM
  // The grouped GEMM takes bf16 on a Hopper or newer GPU.
  return x_sorted.is_cuda() && x_sorted.scalar_type() == torch::kBFloat16 &&
         ComputeCapabilityMajor(x_sorted.device()) >= 9;
#else
  return false;
#endif
}

namespace {

// The experts' SwiGLU, down(silu(x gate^T) * (x up^T)), every product an
// FP8 grouped GEMM (fp8_grouped_gemm.h) in the recipe of Fp8Linear:
// forward and dgrad in 1 x 128 tiles against the weights' 128 x 128
// blocks, wgrad in 1 x 128 tiles along each expert's tokens. What the
// backward needs is kept in the form it reads: x and the SwiGLU product as
// their transposed FP8 tiles (one byte a value, each quantised once, x's
// shared by the gate's and the up's weight gradients), gate and up in the
// activation dtype (the SwiGLU's backward and the product's recomputation).
class GroupedFp8SwiGluFunction : public torch::autograd::Function<GroupedFp8SwiGluFunction> {
 public:
  // x [M, D]; gate, up [E, F, D]; down [E, D, F]; ends [E] int32;
  // `training`: a backward may follow (else nothing is kept for one).
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& gate_w, const torch::Tensor& up_w,
                                                const torch::Tensor& down_w, const torch::Tensor& ends,
                                                bool training) {
    const auto dt = x.scalar_type();
    const Fp8Operand qx = QuantizeFp8(x, /*blocks=*/false);
    const torch::Tensor gate = Fp8GroupedMatmul(qx, QuantizeFp8Experts(gate_w, false), ends, dt);
    const torch::Tensor up = Fp8GroupedMatmul(qx, QuantizeFp8Experts(up_w, false), ends, dt);
    const torch::Tensor h = SiluTimes(gate, up, /*fused=*/true);
    const torch::Tensor y = Fp8GroupedMatmul(QuantizeFp8(h, false), QuantizeFp8Experts(down_w, false), ends, dt);
    if (training) {
      const Fp8Operand x_t = QuantizeFp8GroupedTransposed(x, ends), h_t = QuantizeFp8GroupedTransposed(h, ends);
      ctx->save_for_backward({gate, up, gate_w, up_w, down_w, ends, x_t.values, x_t.scales, h_t.values, h_t.scales});
    }
    return {y};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list s = ctx->get_saved_variables();
    const torch::Tensor &gate_w = s[2], &up_w = s[3], &down_w = s[4], &ends = s[5];
    const Fp8Operand x_t{s[6], s[7], false}, h_t{s[8], s[9], false};
    const auto dt = s[0].scalar_type();
    const torch::Tensor dy = grads[0].to(dt).contiguous();
    const torch::Tensor gate = s[0].detach().requires_grad_(true), up = s[1].detach().requires_grad_(true);
    torch::Tensor h;
    {
      torch::AutoGradMode enable(true);
      h = SiluTimes(gate, up, /*fused=*/true);
    }
    const torch::Tensor dh = Fp8GroupedMatmul(QuantizeFp8(dy, false), QuantizeFp8Experts(down_w, true), ends, dt);
    const torch::Tensor d_down =
        Fp8GroupedWeightGrad(QuantizeFp8GroupedTransposed(dy, ends), h_t, ends, down_w.scalar_type());
    const torch::autograd::variable_list d = torch::autograd::grad({h}, {gate, up}, {dh});
    const torch::Tensor dgate = d[0].contiguous(), dup = d[1].contiguous();
    const torch::Tensor dx =
        Fp8GroupedMatmul(QuantizeFp8(dgate, false), QuantizeFp8Experts(gate_w, true), ends, dt) +
        Fp8GroupedMatmul(QuantizeFp8(dup, false), QuantizeFp8Experts(up_w, true), ends, dt);
    const torch::Tensor d_gate = Fp8GroupedWeightGrad(QuantizeFp8GroupedTransposed(dgate, ends), x_t, ends,
                                                      gate_w.scalar_type());
    const torch::Tensor d_up =
        Fp8GroupedWeightGrad(QuantizeFp8GroupedTransposed(dup, ends), x_t, ends, up_w.scalar_type());
    return {dx, d_gate, d_up, d_down, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

#if KP_HAS_GROUPED_MM
namespace {

// down(silu(gate) * up) with the down projection a grouped GEMM, keeping gate
// and up but not their product: the backward recomputes it (one elementwise
// pass) rather than holding an [M, ffn] tensor per layer until then. The
// gradients are _grouped_mm's own rules, so they equal the composition's.
class GroupedSwiGluDownFunction : public torch::autograd::Function<GroupedSwiGluDownFunction> {
 public:
  // down_t [E, ffn, D]: each expert's down weight transposed.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& gate,
                                                const torch::Tensor& up, const torch::Tensor& down_t,
                                                const torch::Tensor& ends) {
    ctx->save_for_backward({gate, up, down_t, ends});
    return {at::_grouped_mm(SiluTimes(gate, up, /*fused=*/true), down_t, ends)};
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::autograd::variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &down_t = saved[2], &ends = saved[3];
    const torch::Tensor dy = grads[0].contiguous();
    const torch::Tensor gate = saved[0].detach().requires_grad_(true), up = saved[1].detach().requires_grad_(true);
    torch::Tensor h;
    {
      torch::AutoGradMode enable(true);
      h = SiluTimes(gate, up, /*fused=*/true);
    }
    const torch::Tensor d_down_t = at::_grouped_mm(h.detach().t(), dy, ends);  // [E, ffn, D]
    const torch::Tensor dh = at::_grouped_mm(dy, down_t.transpose(1, 2), ends);
    const torch::autograd::variable_list d = torch::autograd::grad({h}, {gate, up}, {dh});
    return {d[0], d[1], d_down_t, torch::Tensor()};
  }
};

}  // namespace
#endif

torch::Tensor ExpertBankImpl::ForwardGrouped(const torch::Tensor& x_sorted, const torch::Tensor& ends) {
  const auto dt = x_sorted.scalar_type();
  if (fp8_) {
    // Under no_grad (the rollout) the inputs may still carry requires_grad
    // (a parameter not cast): grad mode decides whether to keep anything.
    const bool training = torch::GradMode::is_enabled() &&
                          (x_sorted.requires_grad() || gate_.weight.requires_grad() ||
                           up_.weight.requires_grad() || down_.weight.requires_grad());
    return GroupedFp8SwiGluFunction::apply(x_sorted.contiguous(), CastWeight(gate_.weight, dt),
                                           CastWeight(up_.weight, dt), CastWeight(down_.weight, dt), ends,
                                           training)[0];
  }
#if KP_HAS_GROUPED_MM
  // [M, in] x [E, in, out] with expert e's rows ending at ends[e]: one GEMM
  // launch per projection for every expert, sizes read on the device.
  auto weight_t = [&](const Matrix& m) { return CastWeight(m.weight, dt).transpose(1, 2); };
  const torch::Tensor gate = at::_grouped_mm(x_sorted, weight_t(gate_), ends);
  const torch::Tensor up = at::_grouped_mm(x_sorted, weight_t(up_), ends);
  return GroupedSwiGluDownFunction::apply(gate, up, weight_t(down_), ends)[0];
#else
  throw std::logic_error("ExpertBankImpl::ForwardGrouped: this LibTorch has no grouped GEMM");
#endif
}

void ExpertBankImpl::KeepExperts(std::int64_t first, std::int64_t count) {
  torch::NoGradGuard no_grad;
  // set_data keeps the registered parameter objects, so names, the module
  // tree and anything holding the tensors stay valid.
  for (Matrix* m : {&gate_, &up_, &down_}) m->weight.set_data(KeepSlice(m->weight, 0, first, count));
  num_experts_ = count;
}

void ExpertBankImpl::KeepFfnShard(std::int64_t first, std::int64_t count) {
  torch::NoGradGuard no_grad;
  gate_.weight.set_data(KeepSlice(gate_.weight, 1, first, count));
  up_.weight.set_data(KeepSlice(up_.weight, 1, first, count));
  down_.weight.set_data(KeepSlice(down_.weight, 2, first, count));
}

void ExpertBankImpl::AddLoraTo(Matrix& m, const char* name, bool shared_a, bool shared_b, std::int64_t rank,
                               Init& init) {
  // On an INT4 base the shape is the packed words' (eight weights a column).
  const bool int4 = m.int4.packed.defined();
  const std::int64_t out = int4 ? m.int4.packed.size(1) : m.weight.size(1);
  const std::int64_t in = int4 ? m.int4.packed.size(2) * 8 : m.weight.size(2);
  const auto opts = AdapterOptions(m.weight);
  torch::Tensor a = shared_a ? init.Normal({rank, in}, 1.0 / std::sqrt(double(in)))
                             : init.Normal({num_experts_, rank, in}, 1.0 / std::sqrt(double(in)));
  m.lora_a = register_parameter(std::string(name) + "_lora_a", a.to(m.weight.device()));
  m.lora_b = register_parameter(std::string(name) + "_lora_b",
                                shared_b ? torch::zeros({out, rank}, opts) : torch::zeros({num_experts_, out, rank}, opts));
}

void ExpertBankImpl::AddLora(const LoraOptions& lora, Init& init) {
  if (gate_.lora_a.defined()) return;
  const bool shared = lora.experts == LoraExperts::kSharedOuter;
  AddLoraTo(gate_, "gate", shared, false, lora.rank, init);
  AddLoraTo(up_, "up", shared, false, lora.rank, init);
  AddLoraTo(down_, "down", false, shared, lora.rank, init);
  lora_scale_ = lora.alpha / lora.rank;
}

void ExpertBankImpl::MergeSign(double sign) {
  torch::NoGradGuard no_grad;
  for (Matrix* m : {&gate_, &up_, &down_}) {
    for (std::int64_t e = 0; e < num_experts_; ++e) {
      const torch::Tensor a = m->lora_a.dim() == 3 ? m->lora_a[e] : m->lora_a;
      const torch::Tensor b = m->lora_b.dim() == 3 ? m->lora_b[e] : m->lora_b;
      m->weight[e].add_(torch::matmul(b, a), sign * lora_scale_);
    }
  }
}

Status ExpertBankImpl::QuantizeBase() {
  for (Matrix* m : {&gate_, &up_, &down_})
    if (m->weight.size(2) % 32 != 0)
      return Status::InvalidArgument("--lora-native-base: INT4 groups of 32 need expert input widths that are multiples "
                                     "of 32, got " + std::to_string(m->weight.size(2)));
  torch::NoGradGuard no_grad;
  const std::pair<Matrix*, const char*> matrices[] = {{&gate_, "gate"}, {&up_, "up"}, {&down_, "down"}};
  for (const auto& [m, name] : matrices) {
    const Int4Weight q = QuantizeInt4Weight(m->weight);
    m->int4.packed = register_buffer(std::string(name) + "_packed", q.packed);
    m->int4.scales = register_buffer(std::string(name) + "_scale", q.scales);
    // set_data keeps the parameter object (and its name) but frees its bytes.
    m->weight.set_data(torch::empty({0}, m->weight.options()));
  }
  return Status::Ok();
}

void ExpertBankImpl::Merge() {
  if (int4_base()) throw std::invalid_argument("ExpertBankImpl::Merge: an INT4 base cannot take merged adapters");
  if (!gate_.lora_a.defined() || merged_) return;
  MergeSign(1.0);
  merged_ = true;
}

void ExpertBankImpl::Unmerge() {
  if (!gate_.lora_a.defined() || !merged_) return;
  MergeSign(-1.0);
  merged_ = false;
}

// ------------------------------------------------------------------ MoE

MoeImpl::MoeImpl(const ModelSpec& spec, const ModelOptions& options, double init_std, double out_std, Init& init)
    : num_experts_(spec.moe.num_experts),
      fused_(options.fused_kernels),
      // Inside a recomputed MoE block the shared experts are redone anyway.
      recompute_shared_(options.recompute_shared_experts && !options.recompute_moe) {
  const std::int64_t d = spec.hidden, latent = spec.moe.latent_dim;
  router_ = register_module("router", std::make_shared<RouterImpl>(d, spec.moe, init));
  experts_ = register_module("experts", std::make_shared<ExpertBankImpl>(num_experts_, latent > 0 ? latent : d,
                                                                         spec.moe.expert_ffn, init_std, out_std, init));
  experts_->set_recompute_act(options.recompute_moe_act && !options.recompute_moe);
  experts_->set_fp8(options.fp8_experts);
  if (latent > 0) {
    latent_down_ = register_module("latent_down", std::make_shared<ProjImpl>(d, latent, init_std, init, false));
    latent_up_ = register_module("latent_up", std::make_shared<ProjImpl>(latent, d, out_std, init, false));
  }
  if (spec.moe.shared_experts > 0)
    shared_ = register_module("shared", std::make_shared<SwiGluImpl>(d, std::int64_t(spec.moe.shared_experts) *
                                                                            spec.moe.shared_ffn,
                                                                        true, init_std, out_std, init,
                                                                        options.fused_kernels));
}

bool MoeImpl::GroupedFor(const torch::TensorOptions& activations) const {
  return !expert_groups_.split() && fused_ && experts_->GroupedApplies(torch::empty({0}, activations));
}

torch::Tensor MoeImpl::Mix(const torch::Tensor& x, bool record_load) {
  const auto shape = x.sizes().vec();
  const torch::Tensor xf = x.reshape({-1, shape.back()});
  const Routing r = router_->forward(xf, record_load);
  const std::int64_t n = xf.size(0), k = r.experts.size(1);
  // Group the (token, slot) pairs by expert with a stable sort, so the order
  // inside an expert, and with it every sum, is fixed.
  const torch::Tensor flat = r.experts.reshape(-1);
  const auto [sorted_ids, order] = torch::sort(flat, /*stable=*/true, /*dim=*/0, /*descending=*/false);
  const torch::Tensor token_of = order.div(k, "floor");
  const torch::Tensor routed_in = latent_down_ ? latent_down_->forward(xf) : xf;
  const torch::Tensor x_sorted = routed_in.index({token_of});
  // Expert e's rows end where the sorted ids pass e, found on the device.
  const torch::Tensor ends = torch::searchsorted(sorted_ids, torch::arange(1, num_experts_ + 1, flat.options()),
                                                 /*out_int32=*/true);
  torch::Tensor y_sorted;
  if (GroupedFor(x_sorted.options())) {
    y_sorted = experts_->ForwardGrouped(x_sorted, ends);  // no host sync
  } else {
    // The loop over experts (and the all-to-all's sizes) need the counts on
    // the host: one sync per layer.
    const torch::Tensor ends_host = ends.cpu();
    const std::int32_t* end = ends_host.data_ptr<std::int32_t>();
    std::vector<std::int64_t> counts(num_experts_);
    for (std::int64_t e = 0; e < num_experts_; ++e) counts[e] = end[e] - (e > 0 ? end[e - 1] : 0);
    y_sorted = expert_groups_.split() ? RunExpertsParallel(expert_groups_, *experts_, x_sorted, counts)
                                      : experts_->forward(x_sorted, counts);
  }
  torch::Tensor y;
  if (fused_ && MoeCombineKernelApplies(y_sorted, k)) {
    // Slot s's row in expert order: the inverse of the sort's permutation.
    const torch::Tensor row_of = torch::empty_like(order).scatter_(0, order, torch::arange(order.numel(), order.options()));
    y = MoeCombineKernel(y_sorted, row_of, r.weights.to(torch::kFloat)).to(x.scalar_type());
  } else {
    const torch::Tensor y_slots = torch::zeros_like(y_sorted).index_copy(0, order, y_sorted);
    // The weighted combination is a reduction: fp32.
    y = (Upcast(y_slots).view({n, k, -1}) * r.weights.unsqueeze(-1)).sum(1).to(x.scalar_type());
  }
  if (latent_up_) y = latent_up_->forward(y);
  // The shared experts on the unflattened x: split over TP they enter and
  // leave their region along the sequence (SwiGluImpl::Mix).
  if (!shared_) return y.view(shape);
  return y.view(shape) + (recompute_shared_ ? MixRecomputed(*shared_, x, false) : shared_->Mix(x, false));
}

}  // namespace kp::runtime
