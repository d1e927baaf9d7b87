// The self-teacher's context (docs/sdpo.md §2): for each sampled response, the
// prompt rewritten with a successful sibling response as a demonstration
// and/or the verifier's correction, as in the SDPO reference implementation
// (lasgroup/SDPO, verl/trainer/ppo/ray_trainer.py,
// _maybe_build_self_distillation_batch). The teacher then scores the very same
// response tokens after this context. No LibTorch here.
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_RUNTIME_TASKS_REPROMPT_H_
#define KIMI_PLAN_RUNTIME_TASKS_REPROMPT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/tasks/tokenizer.h"

namespace kp::runtime {

/// Text templates with the reference's placeholder names. Substitution is one
/// pass: text substituted in (a response, a correction) is never rescanned.
/// Defaults are the reference's (verl/trainer/config/actor/actor.yaml).
struct RepromptTemplate {
  /// {prompt}, {solution} (the filled `solution` or ""), {feedback} (the filled `feedback` or "").
  std::string reprompt = "{prompt}{solution}{feedback}\n\nCorrectly solve the original question.";
  /// {successful_previous_attempt}: a sibling response that succeeded.
  std::string solution = "\nCorrect solution:\n\n{successful_previous_attempt}";
  /// {feedback_raw}: the verifier's correction of this response.
  std::string feedback = "\nThe following is feedback from your unsuccessful earlier attempt:\n\n{feedback_raw}";
};

/// Which context each response gets; defaults as the reference's actor.yaml.
struct RepromptOptions {
  RepromptTemplate text;
  double success_threshold = 0.5;            ///< a response with reward >= this is a demonstration
  bool exclude_self = true;                  ///< a response is never its own demonstration
  bool include_feedback = true;              ///< use the correction text at all
  bool feedback_only_without_solution = true;///< the correction only when no demonstration exists
};

/// The teacher's context for one response of a group.
struct TeacherContext {
  std::vector<std::int64_t> prompt_ids;  ///< BOS, the reprompt text, SEP (ByteTokenizer::EncodePrompt)
  std::string text;                      ///< the reprompt text itself, for logs
  int demonstration = -1;                ///< index in the group of the demonstration, -1: none
  bool used_feedback = false;
  /// Whether the response takes part in the distillation loss: it got a
  /// demonstration or feedback. Without either the teacher sees the plain
  /// prompt and the reference masks the response out (self_distillation_mask).
  bool distill = false;
};

/// Fills the template: prompt, optional demonstration, optional feedback. With
/// neither, the plain prompt (the reference does not reprompt then).
std::string RepromptText(std::string_view prompt, const std::optional<std::string>& demonstration,
                         const std::optional<std::string>& feedback, const RepromptTemplate& t);

/// The first response of the group (in order) with reward >= threshold,
/// skipping `self` when options.exclude_self; nullopt when there is none.
std::optional<int> PickDemonstration(const std::vector<double>& rewards, int self, const RepromptOptions& options);

/// One context per response of a group of siblings answering `prompt`.
/// `responses`, `rewards` and `corrections` are parallel (an empty correction
/// means no feedback, as for a correct response). Requires equal sizes.
std::vector<TeacherContext> BuildTeacherContexts(const ByteTokenizer& tokenizer, std::string_view prompt,
                                                 const std::vector<std::string>& responses,
                                                 const std::vector<double>& rewards,
                                                 const std::vector<std::string>& corrections,
                                                 const RepromptOptions& options);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TASKS_REPROMPT_H_
