// Verl's metrics file as FileLogger writes it (metrics_file.h cites the
// source): complete lines only, NaN (null) skipped, every error naming the
// file and line; and the job file beside it.
#include "ingest/metrics_file.h"

#include <gtest/gtest.h>

namespace kp {
namespace {

TEST(VerlMetricsTest, ReadsCompleteLinesAndLeavesTheOneBeingWritten) {
  const std::string text =
      "{\"step\":0,\"data\":{\"val-core/acc\":0.25}}\n"
      "\n"
      "{\"step\":1,\"data\":{\"timing_s/step\":12.5,\"critic/vf_explained_var\":null},\"elapsed_seconds\":13.0}\n"
      "{\"step\":2,\"data\":{\"timing_s/st";
  const MetricsChunk c = ParseVerlMetrics(text, "m.jsonl", 1, -1);
  ASSERT_TRUE(c.error.ok()) << c.error.message();
  EXPECT_EQ(c.steps, 2);
  EXPECT_EQ(c.last_step, 1);
  EXPECT_EQ(c.next_line, 4);
  EXPECT_EQ(c.consumed, text.find("{\"step\":2"));
  ASSERT_EQ(c.metrics.size(), 3u);
  EXPECT_EQ(c.metrics[0].name, "val-core/acc");
  EXPECT_EQ(c.metrics[1].name, "timing_s/step");
  EXPECT_EQ(c.metrics[1].value, 12.5);
  EXPECT_EQ(c.metrics[2].name, "elapsed_seconds");
  EXPECT_EQ(c.metrics[2].step, 1);
  // The rest, once written, continues from there.
  const MetricsChunk rest = ParseVerlMetrics("{\"step\":2,\"data\":{\"timing_s/step\":11}}\n", "m.jsonl", 4, 1);
  ASSERT_TRUE(rest.error.ok());
  EXPECT_EQ(rest.last_step, 2);
}

TEST(VerlMetricsTest, ABadLineStopsTheReadNamingFileAndLine) {
  struct Case {
    const char* second_line;
    const char* error;
  };
  const Case cases[] = {
      {"not json", "m.jsonl:2: not a JSON object"},
      {"[1, 2]", "m.jsonl:2: not a JSON object"},
      {"{\"data\":{}}", "m.jsonl:2: \"step\" must be an integer from 0 to 2^30"},
      {"{\"step\":1.5,\"data\":{}}", "m.jsonl:2: \"step\" must be an integer"},
      {"{\"step\":1,\"data\":{}}", "m.jsonl:2: step 1 does not come after step 1 (steps must increase)"},
      {"{\"step\":2}", "m.jsonl:2: \"data\" must be an object of metrics"},
      {"{\"step\":2,\"data\":{\"x\":\"1\"}}", "m.jsonl:2: metric \"x\" is string, not a number"},
      {"{\"step\":2,\"data\":{\"x\":true}}", "m.jsonl:2: metric \"x\" is boolean, not a number"},
      {"{\"step\":2,\"data\":{\"x\":1,\"x\":2}}", "m.jsonl:2: not a JSON object"},
  };
  for (const Case& c : cases) {
    const std::string text = std::string("{\"step\":1,\"data\":{\"x\":1}}\n") + c.second_line + "\n{\"step\":9,\"data\":{}}\n";
    const MetricsChunk got = ParseVerlMetrics(text, "m.jsonl", 1, -1);
    EXPECT_EQ(got.error.message().rfind(c.error, 0), 0u) << c.second_line << ": " << got.error.message();
    EXPECT_EQ(got.error.ExitCode(), 2);
    EXPECT_EQ(got.steps, 1) << c.second_line;  // the good line before it
    EXPECT_EQ(got.next_line, 2);
  }
}

TEST(JobFileTest, RoundTripsAndRefusesWhatIsNotOne) {
  const std::string text = JobFileJson(7, "h200-full", "verl");
  const Result<JobFile> started = ParseJobFile(text, "j.json");
  ASSERT_TRUE(started.ok()) << started.status().message();
  EXPECT_EQ(started->plan_id, 7);
  EXPECT_EQ(started->label, "h200-full");
  EXPECT_FALSE(started->exit_code.has_value());
  std::string ended = text;
  ended.replace(ended.find("\"exit_code\":null"), 16, "\"exit_code\":1");
  EXPECT_EQ(ParseJobFile(ended, "j.json")->exit_code, 1);
  EXPECT_EQ(ParseJobFile(JobFileJson(0, "x", "verl"), "j.json")->plan_id, 0);
  EXPECT_EQ(ParseJobFile("{}", "j.json").status().message(), "j.json: \"schema\" must be \"kimi-plan.job/1\"");
  EXPECT_EQ(ParseJobFile("{\"schema\":\"kimi-plan.job/1\",\"plan_id\":-3}", "j.json").status().message(),
            "j.json: \"plan_id\" must be a positive integer or null");
}

}  // namespace
}  // namespace kp
