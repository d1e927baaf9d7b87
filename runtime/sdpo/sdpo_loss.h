// The SDPO loop's losses as functions of logits and log-probability tensors,
// and the self-teacher's EMA update (formulas and sources: docs/sdpo.md; the
// § numbers below refer to it). Conventions, for every function here:
//  - `student` is the policy being trained (gradients flow into it); `teacher`
//    is the self-teacher, whose tensors are detached inside these functions;
//  - logits are [..., V] over the vocabulary, already divided by the sampling
//    temperature; per-token tensors are [...] with the same leading shape;
//  - log-probabilities of sampled tokens are log pi(y_t | context);
//  - masks are 0/1 (any dtype) with the per-token shape; a loss is the mean
//    over the masked tokens of the whole batch ("token-mean"), 0 when the mask
//    is empty.
// Shape mismatches are caller bugs and throw c10::Error (TORCH_CHECK);
// user-facing options are checked by ValidateSdpoOptions.
// Thread-safety: pure functions, except EmaUpdate which writes its first argument.
#ifndef KIMI_PLAN_RUNTIME_SDPO_SDPO_LOSS_H_
#define KIMI_PLAN_RUNTIME_SDPO_SDPO_LOSS_H_

#include <vector>

#include <torch/torch.h>

#include "common/status.h"
#include "runtime/sdpo/sdpo_options.h"

namespace kp::runtime {


/// §3: `topk_logp` [..., k] true log-probabilities of k tokens (summing to a
/// mass s <= 1) -> [..., k+1] with log(1 - s) appended; s is capped at
/// exp(-1e-7) so the tail stays finite.
torch::Tensor AddTailBucket(const torch::Tensor& topk_logp);

/// §4: the per-position divergence between two distributions given as
/// log-probabilities over the same support (last dim), summed over it:
/// alpha = 0: KL(q || p); alpha = 1: KL(p || q); else
/// (1 - alpha) KL(p || m) + alpha KL(q || m) with m = (1 - alpha) p + alpha q,
/// where p is `student_logp` and q is `teacher_logp` (detached). A term whose
/// weighting probability is 0 counts 0 (so -inf log-probabilities are safe).
torch::Tensor AlphaDivergence(const torch::Tensor& student_logp, const torch::Tensor& teacher_logp, double alpha);

/// §3-§4: per-token distillation loss [...] from full logits [..., V]: the
/// support is the student's top k (ties broken by torch::topk), the teacher's
/// log-probabilities are gathered at the same ids, then tail bucket or
/// renormalisation, then AlphaDivergence. top_k = 0 or >= V: the full vocabulary.
torch::Tensor TopKDistillation(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                               const DistillOptions& options);

/// §5: min(exp(clamp(logp - old_logp, -20, 20)), clip), detached; [...].
torch::Tensor ImportanceWeight(const torch::Tensor& logp, const torch::Tensor& old_logp, double clip);

/// Sum of loss * mask over everything divided by max(1, sum of mask).
torch::Tensor MaskedTokenMean(const torch::Tensor& per_token, const torch::Tensor& mask);

/// The SDPO loss (§6): token-mean over `mask` of TopKDistillation weighted
/// by ImportanceWeight(logp, old_logp, is_clip) (unless is_clip is 0).
/// `logp`/`old_logp` are the student's log-probabilities of the sampled
/// tokens now and at sampling time; `mask` already excludes responses without
/// a reprompt (TeacherContext::distill).
torch::Tensor SdpoLoss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                       const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& mask,
                       const DistillOptions& options);
/// SdpoLoss before the token-mean: the per-token terms [...], so that a
/// pipeline can sum a micro-batch's share of the batch's token-mean.
torch::Tensor SdpoTokenLoss(const torch::Tensor& student_logits, const torch::Tensor& teacher_logits,
                            const torch::Tensor& logp, const torch::Tensor& old_logp, const DistillOptions& options);

/// §7: GRPO outcome advantages, one per response. `rewards` [N] hold
/// contiguous groups of `group_size` siblings (N a multiple of it):
/// A_i = (r_i - mean_g) / (std_g + eps) with the unbiased (n - 1) std, or
/// r_i - mean_g when !normalize_std; a group of one has mean 0 and std 1.
/// A group of equal rewards gets exactly 0. Computed in double, returned in
/// rewards' dtype. eps = 1e-6 as in Verl.
torch::Tensor GrpoAdvantages(const torch::Tensor& rewards, int group_size, bool normalize_std = true,
                             double eps = 1e-6);

/// §7: per-token clipped policy-gradient loss [...] (Verl's "vanilla"):
/// with r = exp(clamp(logp - old_logp, -20, 20)),
/// l = max(-A r, -A clip(r, 1 - low, 1 + high)), and for A < 0 min(l, -A dual).
/// `advantages` broadcast against `logp` (a per-response A as [N, 1]).
torch::Tensor ClippedPolicyLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                                const torch::Tensor& advantages, const PolicyClip& clip);

/// §8: the k1 estimator of KL(student || teacher) per sampled token:
/// logp - teacher_logp (teacher detached). Can be negative.
torch::Tensor K1(const torch::Tensor& logp, const torch::Tensor& teacher_logp);

/// §8: Verl's on-policy distillation with the k1 policy-gradient loss: the
/// token-mean over `mask` of ClippedPolicyLoss with per-token advantage
/// -K1 (detached).
torch::Tensor K1OpdLoss(const torch::Tensor& logp, const torch::Tensor& old_logp, const torch::Tensor& teacher_logp,
                        const torch::Tensor& mask, const PolicyClip& clip);
/// K1OpdLoss before the token-mean: the per-token terms [...].
torch::Tensor K1OpdTokenLoss(const torch::Tensor& logp, const torch::Tensor& old_logp,
                             const torch::Tensor& teacher_logp, const PolicyClip& clip);

/// §9: teacher <- (1 - rate) teacher + rate student, in place, without
/// autograd, pairing the lists by position (the student's may live on another
/// device or dtype). InvalidArgument when the lists differ in length or a
/// pair in shape, or rate is outside [0, 1]; nothing is written then.
Status EmaUpdate(const std::vector<torch::Tensor>& teacher, const std::vector<torch::Tensor>& student, double rate);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_SDPO_SDPO_LOSS_H_
