#include "runtime/tasks/tasks.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace kp::runtime {
namespace {

std::unique_ptr<BuiltinTasks> Builtin(TaskFamily f, int min_digits = 1, int max_digits = 3, std::uint64_t seed = 0) {
  BuiltinTaskOptions o;
  o.family = f;
  o.min_digits = min_digits;
  o.max_digits = max_digits;
  o.seed = seed;
  Result<std::unique_ptr<BuiltinTasks>> r = BuiltinTasks::Create(o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return std::move(r).value();
}

// Splits "12+34=" into 12, '+', 34 and checks the shape on the way.
void ParseBinary(const std::string& prompt, std::int64_t* a, char* op, std::int64_t* b) {
  ASSERT_EQ(prompt.back(), '=');
  const std::size_t at = prompt.find_first_of("+-*");
  ASSERT_NE(at, std::string::npos) << prompt;
  *a = std::stoll(prompt.substr(0, at));
  *op = prompt[at];
  *b = std::stoll(prompt.substr(at + 1, prompt.size() - at - 2));
}

TEST(VerifyTest, ExactAcceptsOnlyTheAnswerUpToSurroundingWhitespace) {
  Task t{"123+456=", "579", VerifierKind::kExact};
  EXPECT_EQ(Verify(t, "579").reward, 1.0);
  EXPECT_EQ(Verify(t, " 579\n").reward, 1.0);
  EXPECT_TRUE(Verify(t, "579").correction.empty());
  EXPECT_EQ(Verify(t, "0579").reward, 0.0);
  EXPECT_EQ(Verify(t, "57 9").reward, 0.0);
  EXPECT_EQ(Verify(t, "579.0").reward, 0.0);  // exact, not numeric
}

TEST(VerifyTest, CorrectionNamesTheAnswerAndTheResponse) {
  Task t{"123+456=", "579", VerifierKind::kExact};
  Verdict v = Verify(t, "578");
  EXPECT_EQ(v.reward, 0.0);
  EXPECT_FALSE(v.correct());
  EXPECT_EQ(v.correction, "The answer is 579, not 578.");
  EXPECT_EQ(Verify(t, "  ").correction, "The answer is 579, not an empty response.");
  EXPECT_EQ(Verify(t, std::string(50, '9')).correction, "The answer is 579, not " + std::string(40, '9') + "....");
}

TEST(VerifyTest, NumericComparesValues) {
  Task t{"half of 5?", "2.5", VerifierKind::kNumeric};
  EXPECT_EQ(Verify(t, "2.50").reward, 1.0);
  EXPECT_EQ(Verify(t, "+2.5").reward, 1.0);
  EXPECT_EQ(Verify(t, "2.4").reward, 0.0);
  EXPECT_EQ(Verify(t, "2.5x").reward, 0.0);
  EXPECT_EQ(Verify(t, "2.5e0").reward, 0.0);  // plain decimals only
  EXPECT_EQ(Verify(t, "").reward, 0.0);
  EXPECT_EQ(Verify(t, "2.4").correction, "The answer is 2.5, not 2.4.");
  Task n{"3-5=", "-2", VerifierKind::kNumeric};
  EXPECT_EQ(Verify(n, "-2.0").reward, 1.0);
  EXPECT_EQ(Verify(n, "2").reward, 0.0);
}

TEST(BuiltinTasksTest, SameSeedAndIndexGiveTheSameTaskOthersDiffer) {
  auto a = Builtin(TaskFamily::kArithmetic), b = Builtin(TaskFamily::kArithmetic);
  auto c = Builtin(TaskFamily::kArithmetic, 1, 3, /*seed=*/1);
  std::set<std::string> prompts;
  int same_as_other_seed = 0;
  for (int i = 0; i < 200; ++i) {
    EXPECT_EQ(a->At(i).prompt, b->At(i).prompt);
    EXPECT_EQ(a->At(i).answer, b->At(i).answer);
    same_as_other_seed += a->At(i).prompt == c->At(i).prompt;
    prompts.insert(a->At(i).prompt);
  }
  EXPECT_GT(prompts.size(), 150u);
  EXPECT_LT(same_as_other_seed, 20);
  // Order independence: asking for 150 first does not change it.
  auto d = Builtin(TaskFamily::kArithmetic);
  Task late = d->At(150);
  EXPECT_EQ(late.prompt, a->At(150).prompt);
}

TEST(BuiltinTasksTest, ArithmeticAnswersAreRightAndDigitsInRange) {
  auto tasks = Builtin(TaskFamily::kArithmetic, 2, 4);
  std::set<char> ops;
  for (int i = 0; i < 300; ++i) {
    Task t = tasks->At(i);
    std::int64_t a = 0, b = 0;
    char op = 0;
    ParseBinary(t.prompt, &a, &op, &b);
    ops.insert(op);
    for (std::int64_t x : {a, b}) {
      EXPECT_GE(x, 10) << t.prompt;
      EXPECT_LE(x, 9999) << t.prompt;
    }
    const std::int64_t want = op == '+' ? a + b : op == '-' ? a - b : a * b;
    EXPECT_EQ(t.answer, std::to_string(want)) << t.prompt;
    if (op == '-') {
      EXPECT_GE(want, 0) << t.prompt;
    }
    EXPECT_EQ(Verify(t, t.answer).reward, 1.0);
  }
  EXPECT_EQ(ops, (std::set<char>{'+', '-', '*'}));
}

TEST(BuiltinTasksTest, SingleFamiliesUseTheirOperator) {
  EXPECT_NE(Builtin(TaskFamily::kAddition)->At(7).prompt.find('+'), std::string::npos);
  EXPECT_NE(Builtin(TaskFamily::kSubtraction)->At(7).prompt.find('-'), std::string::npos);
  EXPECT_NE(Builtin(TaskFamily::kMultiplication)->At(7).prompt.find('*'), std::string::npos);
  EXPECT_EQ(Builtin(TaskFamily::kMultiplication, 9, 9)->At(3).answer.size() >= 17, true);  // 9x9 digits fits in 64 bits
}

TEST(BuiltinTasksTest, SortingAnswersAreTheSortedList) {
  auto tasks = Builtin(TaskFamily::kSorting, 1, 2);
  for (int i = 0; i < 100; ++i) {
    Task t = tasks->At(i);
    ASSERT_EQ(t.prompt.rfind("sort ", 0), 0u) << t.prompt;
    std::istringstream in(t.prompt.substr(5, t.prompt.size() - 6));
    std::vector<std::int64_t> xs;
    for (std::int64_t x; in >> x;) xs.push_back(x);
    EXPECT_GE(xs.size(), 2u);
    EXPECT_LE(xs.size(), 5u);
    std::sort(xs.begin(), xs.end());
    std::string want;
    for (std::size_t k = 0; k < xs.size(); ++k) want += (k ? " " : "") + std::to_string(xs[k]);
    EXPECT_EQ(t.answer, want) << t.prompt;
  }
}

TEST(BuiltinTasksTest, OptionsAreCheckedByFlag) {
  BuiltinTaskOptions o;
  o.min_digits = 0;
  EXPECT_NE(BuiltinTasks::Create(o).status().message().find("--min-digits"), std::string::npos);
  o = {};
  o.max_digits = 10;
  EXPECT_NE(BuiltinTasks::Create(o).status().message().find("--max-digits"), std::string::npos);
  o = {};
  o.list_min = 6;
  o.list_max = 5;
  EXPECT_NE(BuiltinTasks::Create(o).status().message().find("--list-max"), std::string::npos);
  EXPECT_EQ(ParseTaskFamily("sorting").value(), TaskFamily::kSorting);
  EXPECT_EQ(ParseTaskFamily("poetry").status().ExitCode(), 2);
}

TEST(TaskFileTest, ParsesLinesSkipsBlanksAndCycles) {
  auto r = TaskFile::Parse(
      "{\"prompt\": \"2+2=\", \"answer\": \"4\"}\n"
      "\n"
      "{\"prompt\": \"pi to 2 places\", \"answer\": \"3.14\", \"verifier\": \"numeric\"}\n",
      "t.jsonl");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const TaskFile& f = **r;
  EXPECT_EQ(f.size(), 2);
  EXPECT_EQ(f.At(0).prompt, "2+2=");
  EXPECT_EQ(f.At(0).verifier, VerifierKind::kExact);
  EXPECT_EQ(f.At(1).verifier, VerifierKind::kNumeric);
  EXPECT_EQ(f.At(2).prompt, "2+2=");
  EXPECT_EQ(Verify(f.At(1), "3.140").reward, 1.0);
}

// The message of parsing `text` as "t.jsonl", which must fail with exit code 2.
std::string FileError(const std::string& text) {
  auto r = TaskFile::Parse(text, "t.jsonl");
  EXPECT_FALSE(r.ok());
  if (r.ok()) return "";
  EXPECT_EQ(r.status().ExitCode(), 2);
  EXPECT_EQ(r.status().message().find('\n'), std::string::npos);  // one line
  return r.status().message();
}

TEST(TaskFileTest, ErrorsNameTheLineAndTheField) {
  const std::string ok = "{\"prompt\": \"a\", \"answer\": \"b\"}\n";
  EXPECT_EQ(FileError(ok + "{\"prompt\": \"a\"}\n"), "t.jsonl:2: answer: missing");
  EXPECT_EQ(FileError(ok + ok + "{\"answer\": \"b\"}"), "t.jsonl:3: prompt: missing");
  EXPECT_EQ(FileError("{\"prompt\": 5, \"answer\": \"b\"}"), "t.jsonl:1: prompt: must be a string");
  EXPECT_EQ(FileError("{\"prompt\": \"\", \"answer\": \"b\"}"), "t.jsonl:1: prompt: must not be empty");
  EXPECT_EQ(FileError(ok + "{\"prompt\": \"a\", \"answer\": \"b\""), "t.jsonl:2: not valid JSON");
  EXPECT_EQ(FileError("[1, 2]"), "t.jsonl:1: not a JSON object");
  EXPECT_EQ(FileError("{\"prompt\": \"a\", \"answer\": \"b\", \"prompt\": \"c\"}"),
            "t.jsonl:1: prompt: the key is named twice (each field may appear once)");
  EXPECT_EQ(FileError("{\"prompt\": \"a\", \"answer\": \"b\", \"verfier\": \"exact\"}"),
            "t.jsonl:1: verfier: unknown field (allowed: prompt, answer, verifier)");
  EXPECT_EQ(FileError("{\"prompt\": \"a\", \"answer\": \"b\", \"verifier\": \"fuzzy\"}"),
            "t.jsonl:1: verifier: must be \"exact\" or \"numeric\"");
  EXPECT_EQ(FileError("{\"prompt\": \"a\", \"answer\": \"four\", \"verifier\": \"numeric\"}"),
            "t.jsonl:1: answer: \"four\" is not a number, as the numeric verifier needs");
  EXPECT_EQ(FileError("\n  \n"), "t.jsonl: holds no tasks (one JSON object per line)");
}

TEST(TaskSourceTest, NamesPickBuiltinsPathsPickFiles) {
  FakeFileSystem fs;
  fs.Add("/data/t.jsonl", "{\"prompt\": \"1+1=\", \"answer\": \"2\"}\n");
  fs.Add("/data/bad.jsonl", "{\"prompt\": \"1+1=\"}\n");
  BuiltinTaskOptions o;
  auto builtin = MakeTaskSource(fs, "sorting", o);
  ASSERT_TRUE(builtin.ok());
  EXPECT_EQ((*builtin)->At(0).prompt.rfind("sort ", 0), 0u);
  auto file = MakeTaskSource(fs, "/data/t.jsonl", o);
  ASSERT_TRUE(file.ok());
  EXPECT_EQ((*file)->At(5).answer, "2");
  EXPECT_EQ(MakeTaskSource(fs, "/data/bad.jsonl", o).status().message(), "/data/bad.jsonl:1: answer: missing");
  auto missing = MakeTaskSource(fs, "/data/none.jsonl", o);
  EXPECT_EQ(missing.status().code(), Status::Code::kNotFound);
  EXPECT_EQ(missing.status().ExitCode(), 2);
  EXPECT_NE(MakeTaskSource(fs, "poetry", o).status().message().find("not a built-in task"), std::string::npos);
}

}  // namespace
}  // namespace kp::runtime
