#include "schedules/schedule_generators.h"

#include <gtest/gtest.h>

#include <map>
#include <tuple>

#include "simulator/schedule_graph.h"

namespace kp {
namespace {

std::string Row(const PipelineSchedule& s, int rank) {
  std::string out;
  for (const auto& cell : s.ranks[rank]) out += (out.empty() ? "" : ",") + (cell ? cell->ToString() : "");
  return out;
}

PipelineSchedule Gen(ScheduleKind kind, int pp, int vp, int m) {
  auto s = GenerateSchedule(kind, pp, vp, m);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : PipelineSchedule{};
}

// 1F1B as torch's Schedule1F1B orders it: p - r forwards, then B/F pairs.
TEST(ScheduleGeneratorsTest, OneFOneBFollowsTorch) {
  const PipelineSchedule s = Gen(ScheduleKind::k1F1B, 4, 1, 8);
  EXPECT_EQ(Row(s, 0), "0F0,0F1,0F2,0F3,0B0,0F4,0B1,0F5,0B2,0F6,0B3,0F7,0B4,0B5,0B6,0B7");
  EXPECT_EQ(Row(s, 3), "3F0,3B0,3F1,3B1,3F2,3B2,3F3,3B3,3F4,3B4,3F5,3B5,3F6,3B6,3F7,3B7");
}

TEST(ScheduleGeneratorsTest, GpipeRunsAllForwardsThenAllBackwards) {
  EXPECT_EQ(Row(Gen(ScheduleKind::kGpipe, 2, 1, 3), 1), "1F0,1F1,1F2,1B0,1B1,1B2");
}

// Qi et al., ICLR 2024, figure 3 (p = 4, 8 micro-batches, 1-based there):
// ZB-H1 device 1 runs F1-F4, then B1 W1 F5 ... B8 W8; device 4 runs F/B
// pairs for 1-4, then W1 F5 B5 W2 ... F8 B8, then W5-W8.
TEST(ScheduleGeneratorsTest, ZbH1MatchesThePaperFigure) {
  const PipelineSchedule s = Gen(ScheduleKind::kZbH1, 4, 1, 8);
  EXPECT_EQ(Row(s, 0),
            "0F0,0F1,0F2,0F3,0I0,0W0,0F4,0I1,0W1,0F5,0I2,0W2,0F6,0I3,0W3,0F7,0I4,0W4,0I5,0W5,0I6,0W6,0I7,0W7");
  EXPECT_EQ(Row(s, 3),
            "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3W0,3F4,3I4,3W1,3F5,3I5,3W2,3F6,3I6,3W3,3F7,3I7,3W4,3W5,3W6,3W7");
}

// The same figure, bottom: ZB-H2 device 1 runs F1-F7, B1 W1 F8, then B/W
// pairs; device 4 runs F/B pairs for 1-7, then W1 F8 B8, then W2-W8.
TEST(ScheduleGeneratorsTest, ZbH2MatchesThePaperFigure) {
  const PipelineSchedule s = Gen(ScheduleKind::kZbH2, 4, 1, 8);
  EXPECT_EQ(Row(s, 0),
            "0F0,0F1,0F2,0F3,0F4,0F5,0F6,0I0,0W0,0F7,0I1,0W1,0I2,0W2,0I3,0W3,0I4,0W4,0I5,0W5,0I6,0W6,0I7,0W7");
  EXPECT_EQ(Row(s, 3),
            "3F0,3I0,3F1,3I1,3F2,3I2,3F3,3I3,3F4,3I4,3F5,3I5,3F6,3I6,3W0,3F7,3I7,3W1,3W2,3W3,3W4,3W5,3W6,3W7");
}

// Worked by hand from Megatron's rules for p = 2, v = 2, M = 4: rank 0
// warms up with 2 (p - 1) + (v - 1) p = 4 forward chunks, rank 1 with 2;
// forward chunk k is local stage (k / p) % v of micro-batch
// (k / (p v)) p + k % p, backward chunks walk the local stages in reverse.
TEST(ScheduleGeneratorsTest, InterleavedFollowsMegatronWarmup) {
  const PipelineSchedule s = Gen(ScheduleKind::kInterleaved1F1B, 2, 2, 4);
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(Row(s, 0), "0F0,0F1,2F0,2F1,0F2,2B0,0F3,2B1,2F2,0B0,2F3,0B1,2B2,2B3,0B2,0B3");
  EXPECT_EQ(Row(s, 1), "1F0,1F1,3F0,3B0,3F1,3B1,1F2,1B0,1F3,1B1,3F2,3B2,3F3,3B3,1B2,1B3");
}

// torch's ScheduleZBVZeroBubble worked by hand for p = 2, M = 4: rank r
// holds stages r and 3 - r; warm-up 2(p - r) - 1 down-leg forwards, r
// up/down pairs, p - r up-leg F I W triples; steady F I W on both legs;
// drain r I pairs, p - r down-leg I W, then the held W's (up leg first).
TEST(ScheduleGeneratorsTest, ZbvFollowsTheZbPaperVSchedule) {
  const PipelineSchedule s = Gen(ScheduleKind::kZbv, 2, 1, 4);
  EXPECT_EQ(s.stage_to_rank, (std::vector<int>{0, 1, 1, 0}));
  EXPECT_EQ(Row(s, 0), "0F0,0F1,0F2,3F0,3I0,3W0,3F1,3I1,3W1,0F3,0I0,0W0,3F2,3I2,3W2,0I1,0W1,3F3,3I3,3W3,0I2,0W2,0I3,0W3");
  EXPECT_EQ(Row(s, 1), "1F0,2F0,1F1,2F1,2I0,2W0,1F2,1I0,1W0,2F2,2I1,2W1,1F3,1I1,1W1,2F3,2I2,2W2,1I2,2I3,1I3,1W2,2W3,1W3");
}

// DeepSeek's DualPipeV steps worked by hand for p = 2, M = 4 (an overlapped
// F+B pair listed as F then B): rank 0 runs 2 F0; 1 F0F1; 1 I1W1F1;
// 1 F0B1F1B0; 1 B1F1B0; B1 then (split from here) I0; W I0; W.
TEST(ScheduleGeneratorsTest, DualPipeVFollowsDeepSeekSteps) {
  const PipelineSchedule s = Gen(ScheduleKind::kDualPipeV, 2, 1, 4);
  EXPECT_EQ(Row(s, 0), "0F0,0F1,0F2,3F0,3I0,3W0,3F1,0F3,3B1,3F2,0B0,3B2,3F3,0B1,3B3,0I2,0W2,0I3,0W3");
  EXPECT_EQ(Row(s, 1), "1F0,2F0,1F1,2F1,1F2,2B0,2F2,1B0,1F3,2B1,2F3,1B1,2B2,1B2,2I3,1I3,2W3,1W3");
}

struct Shape {
  ScheduleKind kind;
  int pp, vp, m;
};

std::vector<Shape> Sweep() {
  std::vector<Shape> out;
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kZbH1, ScheduleKind::kZbH2})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {1, 2, p, 2 * p + 1, 4 * p}) out.push_back({k, p, 1, m});
  for (int p : {1, 2, 3, 4, 8})
    for (int v : {1, 2, 3, 4})
      for (int m : {p, 2 * p, 5 * p}) out.push_back({ScheduleKind::kInterleaved1F1B, p, v, m});
  for (ScheduleKind k : {ScheduleKind::kZbv, ScheduleKind::kDualPipeV})
    for (int p : {2, 3, 4, 5, 8})
      for (int m : {2 * p, 2 * p + 1, 3 * p, 6 * p}) out.push_back({k, p, 1, m});
  return out;
}

// Counted here independently of ValidateSchedule: every (stage, micro-batch)
// gets one F and either one B or one I and one W, on the rank its stage
// lives on.
TEST(ScheduleGeneratorsTest, EveryScheduleDoesEachChunkOnceOnItsRank) {
  for (const Shape& sh : Sweep()) {
    const PipelineSchedule s = Gen(sh.kind, sh.pp, sh.vp, sh.m);
    const std::string where = std::string(ScheduleName(sh.kind)) + " pp" + std::to_string(sh.pp) + " vp" +
                              std::to_string(sh.vp) + " M" + std::to_string(sh.m);
    ASSERT_EQ(s.num_stages, sh.pp * (ScheduleIsVShaped(sh.kind) ? 2 : sh.vp)) << where;
    std::map<std::tuple<int, int, ActionType>, int> count;
    for (int r = 0; r < s.pp; ++r)
      for (const auto& a : s.ranks[r]) {
        ASSERT_TRUE(a.has_value()) << where;
        ASSERT_TRUE(a->stage >= 0 && a->stage < s.num_stages && a->microbatch >= 0 && a->microbatch < sh.m)
            << where << " " << a->ToString();
        EXPECT_TRUE(IsCompute(a->type)) << where << " " << a->ToString();
        EXPECT_EQ(s.stage_to_rank[a->stage], r) << where << " " << a->ToString();
        ++count[{a->stage, a->microbatch, a->type}];
      }
    for (int st = 0; st < s.num_stages; ++st)
      for (int mb = 0; mb < sh.m; ++mb) {
        auto n = [&](ActionType t) { return count[{st, mb, t}]; };
        EXPECT_EQ(n(ActionType::kForward), 1) << where << " stage " << st << " mb " << mb;
        const bool full = n(ActionType::kFullBackward) == 1 && n(ActionType::kBackwardInput) == 0 &&
                          n(ActionType::kBackwardWeight) == 0;
        const bool split = n(ActionType::kFullBackward) == 0 && n(ActionType::kBackwardInput) == 1 &&
                           n(ActionType::kBackwardWeight) == 1;
        EXPECT_TRUE(full || split) << where << " stage " << st << " mb " << mb;
        if (!ScheduleSplitsW(sh.kind)) {
          EXPECT_TRUE(full) << where;
        } else if (sh.kind != ScheduleKind::kDualPipeV) {
          EXPECT_TRUE(split) << where;
        }
      }
  }
}

TEST(ScheduleGeneratorsTest, EveryScheduleIsDeadlockFreeRawAndLowered) {
  for (const Shape& sh : Sweep()) {
    const PipelineSchedule s = Gen(sh.kind, sh.pp, sh.vp, sh.m);
    const std::string where = std::string(ScheduleName(sh.kind)) + " pp" + std::to_string(sh.pp) + " vp" +
                              std::to_string(sh.vp) + " M" + std::to_string(sh.m);
    EXPECT_TRUE(CheckDeadlockFree(s).ok()) << where << ": " << CheckDeadlockFree(s).message();
    auto lowered = AddCommunication(s);
    ASSERT_TRUE(lowered.ok()) << where;
    EXPECT_TRUE(CheckDeadlockFree(*lowered).ok()) << where << ": " << CheckDeadlockFree(*lowered).message();
  }
}

TEST(ScheduleGeneratorsTest, RejectsShapesTheScheduleCannotTake) {
  auto msg = [](ScheduleKind k, int pp, int vp, int m) { return GenerateSchedule(k, pp, vp, m).status().message(); };
  EXPECT_EQ(msg(ScheduleKind::k1F1B, 4, 2, 8), "--vp: 1f1b has one stage per rank; use interleaved-1f1b for vp > 1");
  EXPECT_EQ(msg(ScheduleKind::kZbH2, 4, 3, 8), "--vp: zb-h2 has one stage per rank; use interleaved-1f1b for vp > 1");
  EXPECT_EQ(msg(ScheduleKind::kZbv, 4, 2, 8),
            "--vp: zbv always places 2 stages on each rank (V-shaped); leave --vp at 1");
  EXPECT_EQ(msg(ScheduleKind::kInterleaved1F1B, 4, 2, 6),
            "--microbatches: interleaved-1f1b with vp > 1 needs a multiple of pp = 4 micro-batches, got 6");
  EXPECT_EQ(msg(ScheduleKind::kZbv, 4, 1, 7), "--microbatches: zbv needs at least 2 x pp = 8 micro-batches, got 7");
  EXPECT_EQ(msg(ScheduleKind::kDualPipeV, 3, 1, 5),
            "--microbatches: dualpipev needs at least 2 x pp = 6 micro-batches, got 5");
  EXPECT_EQ(msg(ScheduleKind::kDualPipeV, 1, 1, 4), "--pp: dualpipev needs at least 2 ranks");
  EXPECT_EQ(msg(ScheduleKind::kGpipe, 0, 1, 4), "--pp: must be a positive integer, got 0");
  EXPECT_EQ(msg(ScheduleKind::kGpipe, 2, 0, 4), "--vp: must be a positive integer, got 0");
  EXPECT_EQ(msg(ScheduleKind::k1F1B, 2, 1, 0), "--microbatches: must be a positive integer, got 0");
  // Interleaving with one stage per rank has no grouping to respect.
  EXPECT_TRUE(GenerateSchedule(ScheduleKind::kInterleaved1F1B, 4, 1, 6).ok());
}

}  // namespace
}  // namespace kp
