// Hostile preset files: every shipped model, GPU, topology and calibration
// file truncated at many offsets, and every scalar field of each replaced by
// a wrong type, a huge, negative or non-finite number. Each must come back
// as an error Status, never a crash and never a parsed (wrong) value.
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "common/file_system.h"
#include "common/limits.h"
#include "specs/calibration.h"
#include "specs/presets.h"

namespace kp {
namespace {

using nlohmann::json;

struct Kind {
  const char* dir;
  std::function<Status(const std::string&)> parse;
};

std::vector<Kind> Kinds() {
  return {{"models", [](const std::string& t) { return ParseModelSpec(t).status(); }},
          {"gpus", [](const std::string& t) { return ParseGpuSpec(t).status(); }},
          {"topologies", [](const std::string& t) { return ParseTopologySpec(t).status(); }},
          {"calibration", [](const std::string& t) { return ParseCalibration(t).status(); }}};
}

// Calls `visit` with each scalar member of every object in `j` (objects in
// lists included), by reference so that it can be replaced and restored.
void ForEachScalarMember(json& j, const std::function<void(json&, const std::string&)>& visit,
                         const std::string& path = "") {
  if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      if (j[i].is_object()) ForEachScalarMember(j[i], visit, path + "[" + std::to_string(i) + "]");
    return;
  }
  if (!j.is_object()) return;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string at = path.empty() ? it.key() : path + "." + it.key();
    if (it->is_primitive()) visit(*it, at);
    else ForEachScalarMember(*it, visit, at);
  }
}

// Wrong for every scalar field of the format: no field is a string, a bool
// and a number at once, none accepts a negative value, and every number is
// bounded far below 4294969344 (common/limits.h).
std::vector<std::string> HostileValues(const json& original) {
  std::vector<std::string> v = {"null", "[]", "{}", "-1", "-4294967296", "4294969344", "18446744073709551615",
                                "9223372036854775808", "-9223372036854775809", "1e300", "-1e300", "1e400"};
  if (original.is_string()) v.insert(v.end(), {"1", "true"});
  else v.insert(v.end(), {"\"1\"", original.is_boolean() ? "1" : "true"});
  return v;
}

class PresetFuzzTest : public ::testing::Test {
 protected:
  std::vector<std::pair<std::string, std::string>> Files(const Kind& k) {
    std::vector<std::pair<std::string, std::string>> out;
    const std::string dir = DefaultPresetDir() + "/" + k.dir;
    for (const std::string& n : fs_.List(dir, ".json")) {
      Result<std::string> text = fs_.ReadFile(dir + "/" + n, limits::kMaxSpecFileBytes);
      EXPECT_TRUE(text.ok()) << n;
      if (text.ok()) out.push_back({std::string(k.dir) + "/" + n, *text});
    }
    EXPECT_FALSE(out.empty()) << k.dir;
    return out;
  }
  RealFileSystem fs_;
};

TEST_F(PresetFuzzTest, EveryShippedFileParses) {
  for (const Kind& k : Kinds())
    for (const auto& [name, text] : Files(k)) EXPECT_TRUE(k.parse(text).ok()) << name << ": " << k.parse(text).message();
}

TEST_F(PresetFuzzTest, TruncationsAreErrors) {
  for (const Kind& k : Kinds())
    for (const auto& [name, text] : Files(k)) {
      const size_t end = text.rfind('}');  // a cut at or after the closing brace is the whole object
      const size_t step = std::max<size_t>(1, end / 1500);
      for (size_t cut = 0; cut < end; cut += step) {
        const Status s = k.parse(text.substr(0, cut));
        EXPECT_FALSE(s.ok()) << name << " cut at " << cut;
        EXPECT_EQ(s.message().find('\n'), std::string::npos) << name << " cut at " << cut;
      }
    }
}

TEST_F(PresetFuzzTest, WrongTypesHugeNegativeAndNonFiniteValuesAreErrors) {
  int cases = 0;
  for (const Kind& k : Kinds())
    for (const auto& [name, text] : Files(k)) {
      json doc = json::parse(text, nullptr, true, /*ignore_comments=*/true);
      ForEachScalarMember(doc, [&](json& field, const std::string& at) {
        const json original = field;
        for (const std::string& hostile : HostileValues(original)) {
          // Spliced as text so that values nlohmann would not hold (1e400) reach the parser.
          field = "@@HOSTILE@@";
          std::string mutated = doc.dump();
          mutated.replace(mutated.find("\"@@HOSTILE@@\""), 13, hostile);
          const Status s = k.parse(mutated);
          EXPECT_FALSE(s.ok()) << name << ": " << at << " = " << hostile << " was accepted";
          ++cases;
        }
        field = original;
      });
    }
  EXPECT_GT(cases, 1000);
}

TEST(PresetFuzzMessages, HugeIntegersAreRefusedNotTruncated) {
  RealFileSystem fs;
  Result<std::string> text = fs.ReadFile(DefaultPresetDir() + "/models/kimi-k2.6.json", limits::kMaxSpecFileBytes);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text, nullptr, true, true);
  doc["vocab"] = 4294969344LL;  // 2^32 + 2048: read as a 32-bit int it was 2048
  EXPECT_EQ(ParseModelSpec(doc.dump()).status().message(), "vocab: must be at most 16777216, got 4294969344");
  doc["vocab"] = 1.5;
  EXPECT_EQ(ParseModelSpec(doc.dump()).status().message(), "vocab: must be an integer from 1 to 16777216");
  doc["vocab"] = 163840;
  doc["layers"] = -1;
  EXPECT_EQ(ParseModelSpec(doc.dump()).status().message(),
            "layers: must be a positive integer, got -1 (at most 100000)");
}

TEST(PresetFuzzMessages, NonFiniteAndHugeNumbersAreRefused) {
  RealFileSystem fs;
  Result<std::string> text = fs.ReadFile(DefaultPresetDir() + "/gpus/h200.json", limits::kMaxSpecFileBytes);
  ASSERT_TRUE(text.ok());
  json doc = json::parse(*text, nullptr, true, true);
  doc["memory_gb"] = 1e300;
  EXPECT_EQ(ParseGpuSpec(doc.dump()).status().message(), "memory_gb: must be >= 0 and <= 1000000, got 1e+300");
  std::string inf = doc.dump();
  inf.replace(inf.find("1e+300"), 6, "1e999");
  EXPECT_FALSE(ParseGpuSpec(inf).ok());
}

}  // namespace
}  // namespace kp
