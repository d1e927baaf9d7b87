// Feedback for the SDPO loop: verifiable tasks and their verifier. A task is
// a prompt and its answer; the verifier scores a response with a reward and,
// when it is wrong, a correction text the self-teacher is reprompted with
// (docs/sdpo.md §1). Tasks come from a built-in family (arithmetic, sorting)
// generated deterministically from (seed, index), or from a user's JSON Lines
// file. No LibTorch here.
//
// Built-in prompts and answers (digits d drawn uniformly in [min_digits,
// max_digits] per operand, no leading zeros):
//   addition        "123+456="   answer "579"
//   subtraction     "456-123="   answer "333"     (operands ordered so the answer is >= 0)
//   multiplication  "12*34="     answer "408"
//   sorting         "sort 31 4 17=" answer "4 17 31"  (list_min..list_max numbers of 1..max_digits digits)
//   arithmetic      one of addition, subtraction, multiplication per index
//
// Task file (JSON Lines, UTF-8): one object per non-blank line,
//   {"prompt": "2+2=", "answer": "4", "verifier": "numeric"}
// "prompt" and "answer" are required non-empty strings; "verifier" is
// optional, "exact" (the default) or "numeric" (the answer must then be a
// number). Any other field is an error, so a misspelt "verifier" is caught.
//
// Thread-safety: task sources are immutable after construction.
#ifndef KIMI_PLAN_RUNTIME_TASKS_TASKS_H_
#define KIMI_PLAN_RUNTIME_TASKS_TASKS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/file_system.h"
#include "common/status.h"

namespace kp::runtime {

enum class VerifierKind {
  kExact,    ///< the response, without leading/trailing ASCII whitespace, equals the answer byte for byte
  kNumeric,  ///< the response parses as a decimal number equal to the answer (|r - a| <= 1e-9 * max(1, |a|))
};

struct Task {
  std::string prompt;
  std::string answer;
  VerifierKind verifier = VerifierKind::kExact;
};

/// What the verifier says about one response.
struct Verdict {
  /// 1 when correct, 0 otherwise: no partial credit (SDPO and GRPO learn from
  /// binary outcomes; a near miss is reported through `correction` instead).
  double reward = 0;
  /// Empty when correct; otherwise one sentence, e.g.
  /// "The answer is 579, not 578." (a response longer than 40 bytes is cut
  /// to 40 and "..." appended; an empty one reads "not an empty response").
  std::string correction;
  bool correct() const { return reward == 1; }
};

/// Scores `response` (the decoded text before EOS) against `task`.
Verdict Verify(const Task& task, std::string_view response);

/// A deterministic, endless supply of tasks: At(i) is a pure function of i.
class TaskSource {
 public:
  virtual ~TaskSource() = default;
  /// The task for `index` (>= 0); a file source cycles through its lines.
  virtual Task At(std::int64_t index) const = 0;
  /// One line for logs, e.g. "arithmetic, 1-3 digits, seed 0".
  virtual std::string Describe() const = 0;
};

enum class TaskFamily { kArithmetic, kAddition, kSubtraction, kMultiplication, kSorting };

/// "arithmetic", "addition", "subtraction", "multiplication", "sorting";
/// InvalidArgument naming --task and the allowed names otherwise.
Result<TaskFamily> ParseTaskFamily(std::string_view name);

struct BuiltinTaskOptions {
  TaskFamily family = TaskFamily::kArithmetic;
  int min_digits = 1;  ///< per operand, >= 1
  int max_digits = 3;  ///< per operand, <= 9 (so every product fits in 64 bits)
  int list_min = 2;    ///< sorting: numbers per list, >= 2
  int list_max = 5;    ///< sorting: numbers per list, <= 16
  std::uint64_t seed = 0;
};

class BuiltinTasks : public TaskSource {
 public:
  /// InvalidArgument naming the flag (--min-digits, --max-digits,
  /// --list-min, --list-max) when an option is out of range.
  static Result<std::unique_ptr<BuiltinTasks>> Create(const BuiltinTaskOptions& options);
  Task At(std::int64_t index) const override;
  std::string Describe() const override;

 private:
  explicit BuiltinTasks(const BuiltinTaskOptions& o) : o_(o) {}
  BuiltinTaskOptions o_;
};

class TaskFile : public TaskSource {
 public:
  /// Parses JSON Lines `text` read from `path` (used only in messages).
  /// InvalidArgument with one line "PATH:LINE: FIELD: what is wrong", e.g.
  /// "tasks.jsonl:3: answer: missing", for: a line that is not a JSON object,
  /// a missing or empty prompt/answer, a field of the wrong type, an unknown
  /// field, a verifier other than "exact"/"numeric", a numeric task whose
  /// answer is not a number; and for a file with no tasks.
  static Result<std::unique_ptr<TaskFile>> Parse(std::string_view text, const std::string& path);
  /// Reads and parses `path`: NotFound naming --task when it is missing.
  static Result<std::unique_ptr<TaskFile>> Open(const FileSystem& fs, const std::string& path);
  /// Line (index mod size) of the file's tasks.
  Task At(std::int64_t index) const override;
  std::string Describe() const override;
  std::int64_t size() const { return static_cast<std::int64_t>(tasks_.size()); }

 private:
  TaskFile(std::string path, std::vector<Task> tasks) : path_(std::move(path)), tasks_(std::move(tasks)) {}
  std::string path_;
  std::vector<Task> tasks_;
};

/// The source `--task` names: a built-in family name, or else the path of a
/// task file (`options.family` is ignored then).
Result<std::unique_ptr<TaskSource>> MakeTaskSource(const FileSystem& fs, const std::string& task,
                                                   BuiltinTaskOptions options);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_TASKS_TASKS_H_
