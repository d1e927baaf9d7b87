#include "runtime/tasks/tasks.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <optional>

#include <nlohmann/json.hpp>

#include "common/limits.h"
#include "common/strict_json.h"

namespace kp::runtime {
namespace {

using nlohmann::json;

// splitmix64, as in runtime/train/data.cc; repeated here because kp_tasks must build
// without LibTorch and data.cc lives in kp_runtime.
std::uint64_t Mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// A stream of draws for one task: every index is independent of the others,
// so At(i) never depends on which tasks were generated before.
class Draws {
 public:
  Draws(std::uint64_t seed, std::int64_t index) : s_(Mix(Mix(seed ^ 0x7a5c5eedULL) ^ static_cast<std::uint64_t>(index))) {}
  // Uniform in [lo, hi]; the modulo bias is below 1e-9 for these ranges.
  std::int64_t Uniform(std::int64_t lo, std::int64_t hi) {
    s_ = Mix(s_);
    return lo + static_cast<std::int64_t>(s_ % static_cast<std::uint64_t>(hi - lo + 1));
  }
  // A number of exactly `digits` digits (no leading zero; 1 digit includes 0).
  std::int64_t Number(int digits) {
    std::int64_t lo = 1;
    for (int i = 1; i < digits; ++i) lo *= 10;
    return Uniform(digits == 1 ? 0 : lo, lo * 10 - 1);
  }

 private:
  std::uint64_t s_;
};

Task Arithmetic(char op, std::int64_t a, std::int64_t b) {
  if (op == '-' && a < b) std::swap(a, b);
  const std::int64_t r = op == '+' ? a + b : op == '-' ? a - b : a * b;
  return Task{std::to_string(a) + op + std::to_string(b) + "=", std::to_string(r), VerifierKind::kExact};
}

Task Sorting(std::vector<std::int64_t> xs) {
  std::string prompt = "sort";
  for (std::int64_t x : xs) prompt += " " + std::to_string(x);
  std::sort(xs.begin(), xs.end());
  std::string answer;
  for (std::size_t i = 0; i < xs.size(); ++i) answer += (i ? " " : "") + std::to_string(xs[i]);
  return Task{prompt + "=", answer, VerifierKind::kExact};
}

std::string_view TrimAscii(std::string_view s) {
  auto space = [](char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

// A plain decimal: optional sign, digits, optional fraction; no exponent, no
// "inf"/"nan", nothing around it. from_chars alone would accept a prefix.
std::optional<double> ParseDecimal(std::string_view s) {
  std::size_t i = (!s.empty() && (s[0] == '-' || s[0] == '+')) ? 1 : 0;
  std::size_t digits = 0, dots = 0;
  for (std::size_t j = i; j < s.size(); ++j) {
    if (s[j] >= '0' && s[j] <= '9') ++digits;
    else if (s[j] == '.') ++dots;
    else return std::nullopt;
  }
  if (digits == 0 || dots > 1) return std::nullopt;
  if (s[0] == '+') s.remove_prefix(1);  // from_chars rejects a leading '+'
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

bool NumericEqual(double r, double a) { return std::fabs(r - a) <= 1e-9 * std::max(1.0, std::fabs(a)); }

std::string Correction(const std::string& answer, std::string_view response) {
  if (response.empty()) return "The answer is " + answer + ", not an empty response.";
  constexpr std::size_t kShown = 40;
  std::string shown(response.substr(0, kShown));
  if (response.size() > kShown) shown += "...";
  return "The answer is " + answer + ", not " + shown + ".";
}

std::string FamilyName(TaskFamily f) {
  switch (f) {
    case TaskFamily::kArithmetic: return "arithmetic";
    case TaskFamily::kAddition: return "addition";
    case TaskFamily::kSubtraction: return "subtraction";
    case TaskFamily::kMultiplication: return "multiplication";
    case TaskFamily::kSorting: return "sorting";
  }
  return "?";
}

Status LineError(const std::string& path, int line, const std::string& what) {
  return Status::InvalidArgument(path + ":" + std::to_string(line) + ": " + what);
}

// One parsed line of a task file, or the line's one error.
Result<Task> ParseTaskLine(std::string_view text, const std::string& path, int line) {
  Result<json> parsed = ParseStrictJson(text, /*allow_comments=*/false);
  if (!parsed.ok()) return LineError(path, line, parsed.status().message());
  const json& j = *parsed;
  if (!j.is_object()) return LineError(path, line, "not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "prompt" && it.key() != "answer" && it.key() != "verifier")
      return LineError(path, line, it.key() + ": unknown field (allowed: prompt, answer, verifier)");
  Task task;
  for (const char* field : {"prompt", "answer"}) {
    if (!j.contains(field)) return LineError(path, line, std::string(field) + ": missing");
    if (!j[field].is_string()) return LineError(path, line, std::string(field) + ": must be a string");
    std::string value = j[field].get<std::string>();
    if (value.empty()) return LineError(path, line, std::string(field) + ": must not be empty");
    (std::string_view(field) == "prompt" ? task.prompt : task.answer) = std::move(value);
  }
  if (j.contains("verifier")) {
    const json& v = j["verifier"];
    if (!v.is_string() || (v != "exact" && v != "numeric"))
      return LineError(path, line, "verifier: must be \"exact\" or \"numeric\"");
    task.verifier = v == "numeric" ? VerifierKind::kNumeric : VerifierKind::kExact;
  }
  if (task.verifier == VerifierKind::kNumeric && !ParseDecimal(TrimAscii(task.answer)))
    return LineError(path, line, "answer: \"" + task.answer + "\" is not a number, as the numeric verifier needs");
  return task;
}

}  // namespace

Verdict Verify(const Task& task, std::string_view response) {
  const std::string_view r = TrimAscii(response);
  bool correct = false;
  if (task.verifier == VerifierKind::kExact) {
    correct = r == TrimAscii(task.answer);
  } else {
    std::optional<double> got = ParseDecimal(r), want = ParseDecimal(TrimAscii(task.answer));
    correct = got && want && NumericEqual(*got, *want);
  }
  if (correct) return Verdict{1.0, ""};
  return Verdict{0.0, Correction(task.answer, r)};
}

Result<TaskFamily> ParseTaskFamily(std::string_view name) {
  for (TaskFamily f : {TaskFamily::kArithmetic, TaskFamily::kAddition, TaskFamily::kSubtraction,
                       TaskFamily::kMultiplication, TaskFamily::kSorting})
    if (name == FamilyName(f)) return f;
  return Status::InvalidArgument("--task: \"" + std::string(name) +
                                 "\" is not a built-in task (arithmetic, addition, subtraction, "
                                 "multiplication, sorting) or a .jsonl task file");
}

Result<std::unique_ptr<BuiltinTasks>> BuiltinTasks::Create(const BuiltinTaskOptions& o) {
  if (o.min_digits < 1 || o.min_digits > 9) return Status::InvalidArgument("--min-digits: must be in 1..9");
  if (o.max_digits < o.min_digits || o.max_digits > 9)
    return Status::InvalidArgument("--max-digits: must be in --min-digits..9");
  if (o.list_min < 2 || o.list_min > 16) return Status::InvalidArgument("--list-min: must be in 2..16");
  if (o.list_max < o.list_min || o.list_max > 16)
    return Status::InvalidArgument("--list-max: must be in --list-min..16");
  return std::unique_ptr<BuiltinTasks>(new BuiltinTasks(o));
}

Task BuiltinTasks::At(std::int64_t index) const {
  Draws d(o_.seed, index);
  TaskFamily f = o_.family;
  if (f == TaskFamily::kArithmetic) {
    static constexpr TaskFamily kOps[] = {TaskFamily::kAddition, TaskFamily::kSubtraction,
                                          TaskFamily::kMultiplication};
    f = kOps[d.Uniform(0, 2)];
  }
  if (f == TaskFamily::kSorting) {
    std::vector<std::int64_t> xs(static_cast<std::size_t>(d.Uniform(o_.list_min, o_.list_max)));
    for (auto& x : xs) x = d.Number(static_cast<int>(d.Uniform(1, o_.max_digits)));
    return Sorting(std::move(xs));
  }
  const std::int64_t a = d.Number(static_cast<int>(d.Uniform(o_.min_digits, o_.max_digits)));
  const std::int64_t b = d.Number(static_cast<int>(d.Uniform(o_.min_digits, o_.max_digits)));
  const char op = f == TaskFamily::kAddition ? '+' : f == TaskFamily::kSubtraction ? '-' : '*';
  return Arithmetic(op, a, b);
}

std::string BuiltinTasks::Describe() const {
  std::string s = FamilyName(o_.family) + ", " + std::to_string(o_.min_digits) + "-" +
                  std::to_string(o_.max_digits) + " digits";
  if (o_.family == TaskFamily::kSorting)
    s = "sorting, lists of " + std::to_string(o_.list_min) + "-" + std::to_string(o_.list_max) + " numbers of 1-" +
        std::to_string(o_.max_digits) + " digits";
  return s + ", seed " + std::to_string(o_.seed);
}

Result<std::unique_ptr<TaskFile>> TaskFile::Parse(std::string_view text, const std::string& path) {
  std::vector<Task> tasks;
  int line = 0;
  while (!text.empty()) {
    ++line;
    const std::size_t nl = text.find('\n');
    std::string_view row = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (TrimAscii(row).empty()) continue;
    KP_ASSIGN_OR_RETURN(Task task, ParseTaskLine(row, path, line));
    tasks.push_back(std::move(task));
  }
  if (tasks.empty()) return Status::InvalidArgument(path + ": holds no tasks (one JSON object per line)");
  return std::unique_ptr<TaskFile>(new TaskFile(path, std::move(tasks)));
}

Result<std::unique_ptr<TaskFile>> TaskFile::Open(const FileSystem& fs, const std::string& path) {
  Result<std::string> text = fs.ReadFile(path, limits::kMaxTaskFileBytes);
  if (!text.ok()) return text.status().WithContext("--task");
  return Parse(*text, path);
}

Task TaskFile::At(std::int64_t index) const {
  const std::int64_t n = size();
  return tasks_[static_cast<std::size_t>(((index % n) + n) % n)];
}

std::string TaskFile::Describe() const {
  return "task file " + path_ + " (" + std::to_string(tasks_.size()) + " tasks)";
}

Result<std::unique_ptr<TaskSource>> MakeTaskSource(const FileSystem& fs, const std::string& task,
                                                   BuiltinTaskOptions options) {
  Result<TaskFamily> family = ParseTaskFamily(task);
  if (family.ok()) {
    options.family = *family;
    KP_ASSIGN_OR_RETURN(auto builtin, BuiltinTasks::Create(options));
    return std::unique_ptr<TaskSource>(std::move(builtin));
  }
  // Not a family name: a path, unless it neither exists nor looks like one.
  if (!fs.Exists(task) && task.find('/') == std::string::npos && task.find(".jsonl") == std::string::npos)
    return family.status();
  KP_ASSIGN_OR_RETURN(auto file, TaskFile::Open(fs, task));
  return std::unique_ptr<TaskSource>(std::move(file));
}

}  // namespace kp::runtime
