#include "runtime/tasks/reprompt.h"

#include <utility>

namespace kp::runtime {
namespace {

// Replaces each "{name}" of `t` whose name is in `values` in one left-to-right
// pass; unknown braces are kept verbatim, so user templates may contain JSON.
std::string Fill(std::string_view t, const std::vector<std::pair<std::string_view, std::string_view>>& values) {
  std::string out;
  std::size_t i = 0;
  while (i < t.size()) {
    bool replaced = false;
    if (t[i] == '{') {
      for (const auto& [name, value] : values) {
        if (t.substr(i + 1, name.size()) == name && t.substr(i + 1 + name.size(), 1) == "}") {
          out += value;
          i += name.size() + 2;
          replaced = true;
          break;
        }
      }
    }
    if (!replaced) out.push_back(t[i++]);
  }
  return out;
}

}  // namespace

std::string RepromptText(std::string_view prompt, const std::optional<std::string>& demonstration,
                         const std::optional<std::string>& feedback, const RepromptTemplate& t) {
  if (!demonstration && !feedback) return std::string(prompt);
  const std::string solution =
      demonstration ? Fill(t.solution, {{"successful_previous_attempt", *demonstration}}) : std::string();
  const std::string fb = feedback ? Fill(t.feedback, {{"feedback_raw", *feedback}}) : std::string();
  return Fill(t.reprompt, {{"prompt", prompt}, {"solution", solution}, {"feedback", fb}});
}

std::optional<int> PickDemonstration(const std::vector<double>& rewards, int self, const RepromptOptions& options) {
  for (int j = 0; j < static_cast<int>(rewards.size()); ++j) {
    if (options.exclude_self && j == self) continue;
    if (rewards[j] >= options.success_threshold) return j;
  }
  return std::nullopt;
}

std::vector<TeacherContext> BuildTeacherContexts(const ByteTokenizer& tokenizer, std::string_view prompt,
                                                 const std::vector<std::string>& responses,
                                                 const std::vector<double>& rewards,
                                                 const std::vector<std::string>& corrections,
                                                 const RepromptOptions& options) {
  std::vector<TeacherContext> out(responses.size());
  for (int i = 0; i < static_cast<int>(responses.size()); ++i) {
    TeacherContext& c = out[i];
    std::optional<std::string> demo, feedback;
    if (std::optional<int> j = PickDemonstration(rewards, i, options)) {
      c.demonstration = *j;
      demo = responses[*j];
    }
    c.used_feedback = options.include_feedback && !corrections[i].empty() &&
                      !(options.feedback_only_without_solution && demo);
    if (c.used_feedback) feedback = corrections[i];
    c.distill = demo.has_value() || c.used_feedback;
    c.text = RepromptText(prompt, demo, feedback, options.text);
    c.prompt_ids = tokenizer.EncodePrompt(c.text);
  }
  return out;
}

}  // namespace kp::runtime
