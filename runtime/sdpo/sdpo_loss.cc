#include "runtime/sdpo/sdpo_loss.h"

#include <cmath>
#include <limits>
#include <string>

namespace kp::runtime {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// sum over the last dim of exp(a) * (a - b): KL(exp a || exp b). Where
// exp(a) is 0 the term is 0 (0 log 0 = 0). Computed as written it would be
// 0 * inf = NaN for a = -inf, and the NaN would leak into the gradient even
// through a where(); so such entries are replaced by 0 before the arithmetic.
torch::Tensor Kl(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor empty = a == -kInf;
  const torch::Tensor a_safe = a.masked_fill(empty, 0.0);
  const torch::Tensor b_safe = b.masked_fill(empty, 0.0);
  return (a_safe.exp() * (a_safe - b_safe)).masked_fill(empty, 0.0).sum(-1);
}

}  // namespace

Status ValidateSdpoOptions(const DistillOptions& d, const PolicyClip& p) {
  if (d.top_k < 0) return Status::InvalidArgument("--top-k: must be >= 0 (0: the full vocabulary)");
  if (!(d.alpha >= 0 && d.alpha <= 1)) return Status::InvalidArgument("--alpha: must be in [0, 1]");
  if (!(d.is_clip == 0 || d.is_clip >= 1))
    return Status::InvalidArgument("--is-clip: must be 0 (off) or >= 1");
  if (!(p.low > 0 && p.low < 1)) return Status::InvalidArgument("--clip-low: must be in (0, 1)");
  if (!(p.high > 0)) return Status::InvalidArgument("--clip-high: must be > 0");
  if (!(p.dual > 1)) return Status::InvalidArgument("--clip-dual: must be > 1");
  return Status::Ok();
}

torch::Tensor AddTailBucket(const torch::Tensor& topk_logp) {
  // log(1 - s) as log(-expm1(log s)): accurate when s is close to 1, where
  // 1 - exp(log s) would cancel. The cap keeps the tail's log finite.
  torch::Tensor log_s = torch::logsumexp(topk_logp, {-1}, /*keepdim=*/true).clamp_max(-1e-7);
  return torch::cat({topk_logp, torch::log(-torch::expm1(log_s))}, -1);
}

torch::Tensor AlphaDivergence(const torch::Tensor& student_logp, const torch::Tensor& teacher_logp, double alpha) {
  TORCH_CHECK(student_logp.sizes() == teacher_logp.sizes(), "AlphaDivergence: student and teacher shapes differ");
  const torch::Tensor q = teacher_logp.detach();
  const torch::Tensor& p = student_logp;
  if (alpha == 0) return Kl(q, p);
  if (alpha == 1) return Kl(p, q);
  // log m = logsumexp(log p + log(1 - alpha), log q + log alpha), stable for
  // tiny p, q. Where both are 0 (e.g. a vocabulary masked to -inf in both)
  // m's value is unused, but logsumexp's backward of (-inf, -inf) is NaN:
  // such entries enter as 0.
  const torch::Tensor both_empty = (p == -kInf).logical_and(q == -kInf);
  const torch::Tensor log_m = torch::logsumexp(
      torch::stack({p.masked_fill(both_empty, 0.0) + std::log1p(-alpha), q.masked_fill(both_empty, 0.0) + std::log(alpha)}),
      {0});
  return (1 - alpha) * Kl(p, log_m) + alpha * Kl(q, log_m);
}

torch::Tensor TopKDistillation(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                               const DistillOptions& options) {
  TORCH_CHECK(student_logits.sizes() == teacher_logits.sizes(), "TopKDistillation: logits shapes differ");
  torch::Tensor p = torch::log_softmax(student_logits, -1);
  torch::Tensor q = torch::log_softmax(teacher_logits.detach(), -1);
  const int64_t vocab = student_logits.size(-1);
  if (options.top_k > 0 && options.top_k < vocab) {
    // The support is the student's: the tokens it would sample (reference
    // dp_actor.py gathers the teacher at the student's top-k ids).
    torch::Tensor ids = std::get<1>(torch::topk(student_logits.detach(), options.top_k, -1));
    p = p.gather(-1, ids);
    q = q.gather(-1, ids);
    if (options.add_tail) {
      p = AddTailBucket(p);
      q = AddTailBucket(q);
    } else {
      p = p - torch::logsumexp(p, {-1}, true);
      q = q - torch::logsumexp(q, {-1}, true);
    }
  }
  return AlphaDivergence(p, q, options.alpha);
}

torch::Tensor ImportanceWeight(const torch::Tensor& logp, const torch::Tensor& old_logp, double clip) {
  return torch::exp((logp.detach() - old_logp.detach()).clamp(-20.0, 20.0)).clamp_max(clip);
}

torch::Tensor MaskedTokenMean(const torch::Tensor& per_token, const torch::Tensor& mask) {
  TORCH_CHECK(per_token.sizes() == mask.sizes(), "MaskedTokenMean: loss and mask shapes differ");
  const torch::Tensor m = mask.to(per_token.dtype());
  return (per_token * m).sum() / m.sum().clamp_min(1.0);
}

torch::Tensor SdpoLoss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                       const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& mask,
                       const DistillOptions& options) {
  return MaskedTokenMean(SdpoTokenLoss(student_logits, teacher_logits, logp, old_logp, options), mask);
}

torch::Tensor SdpoTokenLoss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                            const torch::Tensor& logp, const torch::Tensor& old_logp, const DistillOptions& options) {
  torch::Tensor per_token = TopKDistillation(student_logits, teacher_logits, options);
  if (options.is_clip > 0) per_token = per_token * ImportanceWeight(logp, old_logp, options.is_clip);
  return per_token;
}

torch::Tensor GrpoAdvantages(const torch::Tensor& rewards, int group_size, bool normalize_std, double eps) {
  TORCH_CHECK(rewards.dim() == 1, "GrpoAdvantages: rewards must be [N]");
  TORCH_CHECK(group_size > 0 && rewards.size(0) % group_size == 0,
              "GrpoAdvantages: ", rewards.size(0), " rewards are not whole groups of ", group_size);
  const torch::Tensor r = rewards.detach().to(torch::kDouble).view({-1, group_size});
  // Verl's convention for a lone response: nothing to compare with, so the
  // reward itself (mean 0, std 1) is the advantage.
  torch::Tensor mean = group_size > 1 ? r.mean(1, true) : torch::zeros_like(r);
  torch::Tensor a = r - mean;
  if (normalize_std) {
    torch::Tensor std = group_size > 1 ? r.std(1, /*unbiased=*/true, true) : torch::ones_like(r);
    a = a / (std + eps);
  }
  return a.view({-1}).to(rewards.dtype());
}

torch::Tensor ClippedPolicyLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                                const torch::Tensor& advantages, const PolicyClip& clip) {
  const torch::Tensor a = advantages.detach();
  const torch::Tensor ratio = torch::exp((logp - old_logp.detach()).clamp(-20.0, 20.0));
  const torch::Tensor unclipped = -a * ratio;
  const torch::Tensor clipped = -a * ratio.clamp(1 - clip.low, 1 + clip.high);
  const torch::Tensor loss = torch::max(unclipped, clipped);
  // Dual clip: a negative advantage with a huge ratio would otherwise give an
  // unbounded loss; it is capped at -A * dual.
  return torch::where(a < 0, torch::min(loss, -a * clip.dual), loss);
}

torch::Tensor K1(const torch::Tensor& logp, const torch::Tensor& teacher_logp) { return logp - teacher_logp.detach(); }

torch::Tensor K1OpdLoss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& teacher_logp,
                        const torch::Tensor& mask, const PolicyClip& clip) {
  return MaskedTokenMean(K1OpdTokenLoss(logp, old_logp, teacher_logp, clip), mask);
}

torch::Tensor K1OpdTokenLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                             const torch::Tensor& teacher_logp, const PolicyClip& clip) {
  const torch::Tensor advantage = -K1(logp, teacher_logp).detach();
  return ClippedPolicyLoss(logp, old_logp, advantage, clip);
}

Status EmaUpdate(const std::vector<torch::Tensor>& teacher, const std::vector<torch::Tensor>& student, double rate) {
  if (!(rate >= 0 && rate <= 1)) return Status::InvalidArgument("--teacher-ema: must be in [0, 1]");
  if (teacher.size() != student.size())
    return Status::InvalidArgument("EMA teacher: " + std::to_string(teacher.size()) + " tensors against the student's " +
                                   std::to_string(student.size()));
  for (std::size_t i = 0; i < teacher.size(); ++i)
    if (teacher[i].sizes() != student[i].sizes())
      return Status::InvalidArgument("EMA teacher: tensor " + std::to_string(i) + " differs in shape from the student's");
  torch::NoGradGuard no_grad;
  for (std::size_t i = 0; i < teacher.size(); ++i) {
    const torch::Tensor s = student[i].detach().to(teacher[i].device(), teacher[i].scalar_type());
    teacher[i].mul_(1 - rate).add_(s, rate);
  }
  return Status::Ok();
}

}  // namespace kp::runtime
