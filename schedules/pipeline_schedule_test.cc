#include "schedules/pipeline_schedule.h"

#include <gtest/gtest.h>

#include "schedules/schedule_generators.h"

namespace kp {
namespace {

std::string Row(const PipelineSchedule& s, int rank) {
  std::string out;
  for (const auto& cell : s.ranks[rank]) out += (out.empty() ? "" : ",") + (cell ? cell->ToString() : "");
  return out;
}

PipelineSchedule Parse(const std::string& csv, int stages, int mbs, const std::string& style = "loop") {
  auto s = ParseCsv(csv, stages, mbs, style);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : PipelineSchedule{};
}

TEST(PipelineScheduleTest, ParsesEveryActionTypeInTorchSpelling) {
  const struct {
    const char* text;
    int stage;
    ActionType type;
    int mb;
  } cases[] = {
      {"2F0", 2, ActionType::kForward, 0},          {"0I3", 0, ActionType::kBackwardInput, 3},
      {"1W2", 1, ActionType::kBackwardWeight, 2},   {"3B1", 3, ActionType::kFullBackward, 1},
      {"3SEND_F1", 3, ActionType::kSendF, 1},       {"4RECV_F7", 4, ActionType::kRecvF, 7},
      {"0SEND_B12", 0, ActionType::kSendB, 12},     {"1RECV_B0", 1, ActionType::kRecvB, 0},
  };
  for (const auto& c : cases) {
    auto a = ParseAction(c.text);
    ASSERT_TRUE(a.ok()) << c.text << ": " << a.status().message();
    EXPECT_EQ(a->stage, c.stage);
    EXPECT_EQ(a->type, c.type);
    EXPECT_EQ(a->microbatch, c.mb);
    EXPECT_EQ(a->ToString(), c.text);
  }
  EXPECT_EQ(ParseAction(" 2F0 ")->ToString(), "2F0");  // csv cells may carry blanks
}

TEST(PipelineScheduleTest, RejectsTextThatIsNotAnAction) {
  for (const char* bad : {"3Q1", "F1", "1F", "1F1x", "-1F0", "1SEND1", "1send_f1", "12"}) {
    auto a = ParseAction(bad);
    ASSERT_FALSE(a.ok()) << bad;
    EXPECT_EQ(a.status().message().rfind("\"" + std::string(bad) + "\" is not an action", 0), 0u)
        << a.status().message();
  }
}

TEST(PipelineScheduleTest, PlacesStagesInLoopAndVStyle) {
  EXPECT_EQ(*StageToRank(4, 8, "loop"), (std::vector<int>{0, 1, 2, 3, 0, 1, 2, 3}));
  EXPECT_EQ(*StageToRank(4, 8, "v"), (std::vector<int>{0, 1, 2, 3, 3, 2, 1, 0}));
  EXPECT_EQ(StageToRank(4, 6, "loop").status().message(),
            "--stage-to-rank: loop placement needs the stage count to be a multiple of pp = 4, got 6 stages");
  EXPECT_EQ(StageToRank(4, 12, "v").status().message(),
            "--stage-to-rank: v placement needs exactly 2 x pp = 8 stages, got 12");
  EXPECT_EQ(StageToRank(4, 8, "zigzag").status().message(),
            "--stage-to-rank: unknown placement \"zigzag\" (allowed: loop, v)");
}

TEST(PipelineScheduleTest, WritesTorchCsvOneRowPerRank) {
  auto s = GenerateSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(ToCsv(*s), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
}

TEST(PipelineScheduleTest, IdleCellsSurviveARoundTrip) {
  const std::string csv = "0F0,,0B0\n,1F0,1B0\n";
  const PipelineSchedule s = Parse(csv, 2, 1);
  ASSERT_EQ(s.pp, 2);
  EXPECT_FALSE(s.ranks[0][1].has_value());
  EXPECT_FALSE(s.ranks[1][0].has_value());
  EXPECT_EQ(ToCsv(s), csv);
  // torch writes "\r\n"; both line ends read the same.
  EXPECT_EQ(ToCsv(Parse("0F0,,0B0\r\n,1F0,1B0\r\n", 2, 1)), csv);
}

TEST(PipelineScheduleTest, EveryGeneratedScheduleRoundTripsThroughCsv) {
  const struct {
    ScheduleKind kind;
    int pp, vp, m;
  } cases[] = {{ScheduleKind::kGpipe, 4, 1, 5},  {ScheduleKind::k1F1B, 4, 1, 8},
               {ScheduleKind::kInterleaved1F1B, 4, 2, 8}, {ScheduleKind::kZbH1, 3, 1, 7},
               {ScheduleKind::kZbH2, 4, 1, 9},  {ScheduleKind::kZbv, 4, 1, 8},
               {ScheduleKind::kDualPipeV, 3, 1, 10}};
  for (const auto& c : cases) {
    auto s = GenerateSchedule(c.kind, c.pp, c.vp, c.m);
    ASSERT_TRUE(s.ok()) << s.status().message();
    const std::string style = ScheduleIsVShaped(c.kind) ? "v" : "loop";
    auto back = ParseCsv(ToCsv(*s), s->num_stages, c.m, style);
    ASSERT_TRUE(back.ok()) << ScheduleName(c.kind) << ": " << back.status().message();
    EXPECT_EQ(back->pp, s->pp);
    EXPECT_EQ(back->stage_to_rank, s->stage_to_rank);
    EXPECT_EQ(back->ranks, s->ranks) << ScheduleName(c.kind);
    // The lowered lists, as a runtime would load them, round-trip too.
    auto lowered = AddCommunication(*s);
    ASSERT_TRUE(lowered.ok());
    auto lowered_back = ParseCsv(ToCsv(*lowered), s->num_stages, c.m, style);
    ASSERT_TRUE(lowered_back.ok()) << lowered_back.status().message();
    EXPECT_EQ(lowered_back->ranks, lowered->ranks) << ScheduleName(c.kind);
  }
}

TEST(PipelineScheduleTest, CsvErrorsNameRowCellAndWhatIsWrong) {
  const std::string ok_row0 = "0F0,0F1,0B0,0B1";
  EXPECT_EQ(ParseCsv(ok_row0 + "\n1F0,1B0,1F1,1B1,3Q1\n", 2, 2, "loop").status().message(),
            "--schedule-csv: row 2, cell 5: \"3Q1\" is not an action (expected "
            "{stage}{F|I|W|B|SEND_F|RECV_F|SEND_B|RECV_B}{micro-batch}, e.g. 2F0)");
  EXPECT_EQ(ParseCsv("0F0,0B0,9F0\n1F0,1B0\n", 2, 1, "loop").status().message(),
            "--schedule-csv: row 1, cell 3: \"9F0\" names stage 9, the schedule has 2 stages");
  EXPECT_EQ(ParseCsv("0F0,0B0,0F4\n1F0,1B0\n", 2, 1, "loop").status().message(),
            "--schedule-csv: row 1, cell 3: \"0F4\" names micro-batch 4, the schedule has 1 micro-batches");
  EXPECT_EQ(ParseCsv("0F0,0B0,1F0\n1B0\n", 2, 1, "loop").status().message(),
            "--schedule-csv: row 1, cell 3: \"1F0\" is on rank 0, but stage 1 is on rank 1 (loop placement)");
  // Well-formed cells, incomplete schedule.
  EXPECT_EQ(ParseCsv("0F0,0I0,0W0\n1F0,1I0\n", 2, 1, "loop").status().message(),
            "--schedule-csv: stage 1 micro-batch 0 has 0 B, 1 I and 0 W; needs one B, or one I and one W");
  EXPECT_EQ(ParseCsv("0F0,0B0\n1F0,1B0,1F0\n", 2, 1, "loop").status().message(),
            "--schedule-csv: stage 1 micro-batch 0 has 2 F, needs exactly one");
  EXPECT_EQ(ParseCsv("", 2, 1, "loop").status().message(),
            "--schedule-csv: no rows; expected one row of actions per rank");
}

TEST(PipelineScheduleTest, AddCommunicationSendsRightAfterAndReceivesRightBefore) {
  auto s = GenerateSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  ASSERT_TRUE(s.ok());
  auto lowered = AddCommunication(*s);
  ASSERT_TRUE(lowered.ok()) << lowered.status().message();
  EXPECT_EQ(Row(*lowered, 0), "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1");
  EXPECT_EQ(Row(*lowered, 1), "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1");
  EXPECT_TRUE(ValidateSchedule(*lowered).ok());
  EXPECT_TRUE(HasCommunication(*lowered));
  EXPECT_FALSE(HasCommunication(*s));
  EXPECT_EQ(AddCommunication(*lowered).status().message(),
            "schedule \"1f1b\" already carries SEND/RECV actions; lower only compute-only schedules");
}

TEST(PipelineScheduleTest, AddCommunicationSkipsBoundariesInsideARank) {
  // V placement on 2 ranks: stages 1 and 2 both live on rank 1.
  auto s = GenerateSchedule(ScheduleKind::kZbv, 2, 1, 4);
  ASSERT_TRUE(s.ok());
  auto lowered = AddCommunication(*s);
  ASSERT_TRUE(lowered.ok());
  int sends = 0, recvs = 0;
  for (const auto& row : lowered->ranks)
    for (const auto& a : row) {
      if (a->type == ActionType::kSendF || a->type == ActionType::kSendB) {
        ++sends;
        EXPECT_NE(a->stage, a->type == ActionType::kSendF ? 1 : 2) << a->ToString();
      }
      if (a->type == ActionType::kRecvF || a->type == ActionType::kRecvB) ++recvs;
    }
  // Boundaries 0|1 and 2|3 cross ranks; each carries, per micro-batch, one
  // activation forward and one gradient backward.
  EXPECT_EQ(sends, 2 * 2 * 4);
  EXPECT_EQ(recvs, 2 * 2 * 4);
}

TEST(PipelineScheduleTest, ValidationNamesMissingOrNeedlessCommunication) {
  auto missing = ParseCsv("0F0,0SEND_F0,0RECV_B0,0B0\n1F0,1B0,1SEND_B0\n", 2, 1, "loop");
  EXPECT_EQ(missing.status().message(),
            "--schedule-csv: missing 1RECV_F0 (stages 0 and 1 are on ranks 0 and 1)");
  auto inside = ParseCsv("0F0,0SEND_F0,1F0,1B0,0B0\n", 2, 1, "loop");
  EXPECT_EQ(inside.status().message(),
            "--schedule-csv: 0SEND_F0 moves no data: stages 0 and 1 are both on rank 0");
  auto past_end = ParseCsv("0F0,1F0,1SEND_F0,1B0,0B0\n", 2, 1, "loop");
  EXPECT_EQ(past_end.status().message(),
            "--schedule-csv: 1SEND_F0 moves no data: there is no stage on the other side");
}

}  // namespace
}  // namespace kp
