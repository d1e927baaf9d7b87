#include "common/strict_json.h"

#include <limits>

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(StrictJsonTest, AKeyNamedTwiceIsRefusedWithItsPath) {
  EXPECT_EQ(ParseStrictJson(R"({"memory_gb": 141, "memory_gb": 999999})").status().message(),
            "memory_gb: the key is named twice (each field may appear once)");
  EXPECT_EQ(ParseStrictJson(R"({"actor": {"tp": 4, "pp": 1, "tp": 8}})").status().message(),
            "actor.tp: the key is named twice (each field may appear once)");
  // Equal keys in different objects, and in objects of a list, are fine.
  EXPECT_TRUE(ParseStrictJson(R"({"a": {"x": 1}, "b": {"x": 2}, "c": [{"x": 1}, {"x": 2}]})").ok());
  EXPECT_EQ(ParseStrictJson(R"({"c": [{"x": 1, "x": 2}]})").status().message(),
            "c.x: the key is named twice (each field may appear once)");
  EXPECT_EQ(ParseStrictJson("{\"a\": ").status().message(), "not valid JSON");
  EXPECT_EQ((*ParseStrictJson(R"({"a": 1} // a comment)"))["a"], 1);
  EXPECT_FALSE(ParseStrictJson(R"({"a": 1} // a comment)", /*allow_comments=*/false).ok());
}

TEST(StrictJsonTest, NonFiniteNumbersAreNamedByTheirPath) {
  nlohmann::json j = {{"step_time_s", 1.5}, {"ranks", {{{"peak", 2.0}}, {{"peak", 3.0}}}}};
  EXPECT_TRUE(CheckFiniteNumbers(j, "the plan").ok());
  j["ranks"][1]["peak"] = std::numeric_limits<double>::infinity();
  const Status s = CheckFiniteNumbers(j, "the plan");
  EXPECT_EQ(s.ExitCode(), 2);
  EXPECT_EQ(s.message().rfind("the plan: ranks[1].peak came out inf, not a finite number", 0), 0u) << s.message();
  EXPECT_NE(CheckFiniteNumbers(nlohmann::json(std::nan("")), "x").message().find("came out nan"), std::string::npos);
}

}  // namespace
}  // namespace kp
