#include "simulator/pipeline_sim.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "planner/schedule_model.h"
#include "simulator/schedule_generators.h"

namespace kp {
namespace {

using ns = Nanoseconds;

PipelineSimResult Simulate(ScheduleKind kind, int pp, int vp, int m, StageCosts c, const PipelineSimOptions& o = {}) {
  auto s = GenerateSchedule(kind, pp, vp, m);
  EXPECT_TRUE(s.ok()) << s.status().message();
  auto r = SimulatePipeline(*s, c, o);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : PipelineSimResult{};
}

// Makespan minus the compute every rank does: each rank's idle time.
std::int64_t Bubble(const PipelineSimResult& r, int m, const StageCosts& c) {
  return r.makespan.value() - m * (c.f + c.b + c.w).value();
}

std::int64_t MaxSpanIdle(const PipelineSimResult& r) {
  std::int64_t out = 0;
  for (ns x : r.span_idle_per_rank) out = std::max(out, x.value());
  return out;
}

std::string Timeline(const PipelineSimResult& r, int rank) {
  std::string out;
  for (const TimelineEntry& e : r.timeline)
    if (e.rank == rank)
      out += (out.empty() ? "" : " ") + e.action.ToString() + "[" + std::to_string(e.start.value()) + "," +
             std::to_string(e.end.value()) + "]";
  return out;
}

// The planner's closed form in nanoseconds.
double PlannerBubble(ScheduleKind kind, int pp, int vp, const StageCosts& c) {
  return BubbleTime(kind, pp, StagesPerRank(kind, vp), ToSeconds(c.f), ToSeconds(c.b), ToSeconds(c.w)).value() *
         1e9;
}

// ---------------------------------------------------------------- by hand

// pp 2, M 2, 1F1B, F 1, B 2, W 0, C 1:
//   rank 0: F0 [0,1], F1 [1,2], then waits for gradients;
//   rank 1: F0 [2,3] (activation lands at 2), B0 [3,5], F1 [5,6] (landed at
//           3), B1 [6,8];
//   rank 0: B0 [6,8] (gradient lands at 5 + 1), B1 [9,11] (lands at 8 + 1).
TEST(PipelineSimTest, HandWorkedOneFOneBWithTransfers) {
  const StageCosts c{ns(1), ns(2), ns(0), ns(1)};
  const PipelineSimResult r = Simulate(ScheduleKind::k1F1B, 2, 1, 2, c);
  EXPECT_EQ(Timeline(r, 0), "0F0[0,1] 0F1[1,2] 0B0[6,8] 0B1[9,11]");
  EXPECT_EQ(Timeline(r, 1), "1F0[2,3] 1B0[3,5] 1F1[5,6] 1B1[6,8]");
  EXPECT_EQ(r.makespan.value(), 11);
  EXPECT_EQ(r.idle_per_rank, (std::vector<ns>{ns(5), ns(5)}));
  EXPECT_EQ(r.span_idle_per_rank, (std::vector<ns>{ns(5), ns(0)}));
  EXPECT_DOUBLE_EQ(r.bubble_fraction, 5.0 / 11.0);
  EXPECT_EQ(r.peak_inflight, (std::vector<int>{2, 1}));
  // One event per compute action, plus one per RECV whose data was still on
  // the wire when its rank reached it (1RECV_F0, 0RECV_B0, 0RECV_B1).
  EXPECT_EQ(r.events, 8u + 3u);
}

// pp 2, M 2, GPipe, F 1, B 2, W 1 (a full B costs 3), C 1:
//   rank 0: F0 [0,1], F1 [1,2]; rank 1: F0 [2,3], F1 [3,4], B0 [4,7], B1 [7,10];
//   rank 0: B0 [8,11], B1 [11,14].
TEST(PipelineSimTest, HandWorkedGpipeRunsBAndWBackToBack) {
  const StageCosts c{ns(1), ns(2), ns(1), ns(1)};
  const PipelineSimResult r = Simulate(ScheduleKind::kGpipe, 2, 1, 2, c);
  EXPECT_EQ(Timeline(r, 0), "0F0[0,1] 0F1[1,2] 0B0[8,11] 0B1[11,14]");
  EXPECT_EQ(Timeline(r, 1), "1F0[2,3] 1F1[3,4] 1B0[4,7] 1B1[7,10]");
  EXPECT_EQ(r.makespan.value(), 14);
  EXPECT_EQ(r.peak_inflight, (std::vector<int>{2, 2}));
}

// pp 2, M 2, ZB-H1, F = B = W = 1, C 1. Lists: rank 0 F0 F1 I0 W0 I1 W1;
// rank 1 F0 I0 F1 I1 W0 W1 (rank 1 holds one W back).
//   rank 1: F0 [2,3], I0 [3,4], F1 [4,5], I1 [5,6], W0 [6,7], W1 [7,8];
//   rank 0: F0 [0,1], F1 [1,2], I0 [5,6], W0 [6,7], I1 [7,8], W1 [8,9].
// Bubble 9 - 2 x 3 = 3 = (p - 1)(F + B - W) + 2C.
TEST(PipelineSimTest, HandWorkedZbH1WithTransfers) {
  const StageCosts c{ns(1), ns(1), ns(1), ns(1)};
  const PipelineSimResult r = Simulate(ScheduleKind::kZbH1, 2, 1, 2, c);
  EXPECT_EQ(Timeline(r, 0), "0F0[0,1] 0F1[1,2] 0I0[5,6] 0W0[6,7] 0I1[7,8] 0W1[8,9]");
  EXPECT_EQ(Timeline(r, 1), "1F0[2,3] 1I0[3,4] 1F1[4,5] 1I1[5,6] 1W0[6,7] 1W1[7,8]");
  EXPECT_EQ(r.makespan.value(), 9);
}

// A per-hop transfer hook: forward hops 1, backward hops 3. pp 2, M 1,
// 1F1B, F = B = 1: F0 [0,1], F0 [2,3], B0 [3,4], B0 [7,8].
TEST(PipelineSimTest, TransferHookOverridesTheHopTime) {
  PipelineSimOptions o;
  o.transfer = [](int from, int to, int mb, bool backward) {
    EXPECT_EQ(backward, from > to);
    EXPECT_EQ(mb, 0);
    return ns(backward ? 3 : 1);
  };
  const PipelineSimResult r = Simulate(ScheduleKind::k1F1B, 2, 1, 1, {ns(1), ns(1), ns(0), ns(100)}, o);
  EXPECT_EQ(Timeline(r, 0), "0F0[0,1] 0B0[7,8]");
  EXPECT_EQ(r.makespan.value(), 8);
}

TEST(PipelineSimTest, RunsAUserCsvWithItsOwnCommunication) {
  // The lowered 1F1B of the first hand-worked case, as a user would write it.
  auto s = ParseCsv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n",
      2, 2, "loop");
  ASSERT_TRUE(s.ok()) << s.status().message();
  auto r = SimulatePipeline(*s, {ns(1), ns(2), ns(0), ns(1)});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->makespan.value(), 11);
  // A RECV blocks its rank where it is listed: receiving micro-batch 1's
  // activation before micro-batch 0's forward delays that forward to 3,
  // when the second activation lands, and the step to 12.
  auto early = ParseCsv(
      "0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n"
      "1RECV_F0,1RECV_F1,1F0,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n",
      2, 2, "loop");
  ASSERT_TRUE(early.ok()) << early.status().message();
  auto slow = SimulatePipeline(*early, {ns(1), ns(2), ns(0), ns(1)});
  ASSERT_TRUE(slow.ok());
  EXPECT_EQ(Timeline(*slow, 1), "1F0[3,4] 1B0[4,6] 1F1[6,7] 1B1[7,9]");
  EXPECT_EQ(slow->makespan.value(), 12);
}

TEST(PipelineSimTest, RejectsNegativeCosts) {
  auto s = GenerateSchedule(ScheduleKind::k1F1B, 2, 1, 2);
  EXPECT_EQ(SimulatePipeline(*s, {ns(-1), ns(1), ns(1), ns(0)}).status().message(),
            "--f-us: must not be negative, got -1 ns");
  EXPECT_EQ(SimulatePipeline(*s, {ns(1), ns(1), ns(1), ns(-5)}).status().message(),
            "--p2p-us: must not be negative, got -5 ns");
}

// ------------------------------------------------------- closed forms, C = 0

// GPipe and 1F1B: (p - 1)(F + B + W) for any costs (B and W run back to back
// as one full backward); every rank idles that long.
TEST(PipelineSimTest, GpipeAndOneFOneBBubbleIsPMinusOneFullSteps) {
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B})
    for (int p : {1, 2, 3, 4, 8})
      for (int m : {p, 2 * p, 3 * p + 1})
        for (StageCosts c : {StageCosts{ns(3), ns(5), ns(2), ns(0)}, StageCosts{ns(4), ns(4), ns(4), ns(0)},
                             StageCosts{ns(2), ns(6), ns(0), ns(0)}}) {
          const PipelineSimResult r = Simulate(k, p, 1, m, c);
          const std::int64_t want = (p - 1) * (c.f + c.b + c.w).value();
          EXPECT_EQ(Bubble(r, m, c), want) << ScheduleName(k) << " p" << p << " m" << m;
          EXPECT_EQ(MaxSpanIdle(r), want);
          for (ns idle : r.idle_per_rank) EXPECT_EQ(idle.value(), want);
          EXPECT_DOUBLE_EQ(PlannerBubble(k, p, 1, c), double(want));
        }
}

// Interleaved 1F1B (Narayanan et al. 2021, Megatron): (p - 1)(F + B + W) / v
// with M a multiple of p, any costs (F, B, W of a rank's v stages together).
TEST(PipelineSimTest, InterleavedBubbleShrinksByV) {
  for (int v : {2, 3, 4})
    for (int p : {2, 4, 8})
      for (int m : {p, 2 * p, 4 * p})
        for (StageCosts c : {StageCosts{ns(3 * v), ns(5 * v), ns(2 * v), ns(0)},
                             StageCosts{ns(4 * v), ns(8 * v), ns(0), ns(0)}}) {
          const PipelineSimResult r = Simulate(ScheduleKind::kInterleaved1F1B, p, v, m, c);
          const std::int64_t want = (p - 1) * (c.f + c.b + c.w).value() / v;
          EXPECT_EQ(Bubble(r, m, c), want) << "p" << p << " v" << v << " m" << m;
          EXPECT_EQ(MaxSpanIdle(r), want);
          EXPECT_DOUBLE_EQ(PlannerBubble(ScheduleKind::kInterleaved1F1B, p, v, c), double(want));
        }
}

// ZB-H1 (Qi et al., ICLR 2024, table 2): (p - 1)(F + B - W), B being the
// input-gradient pass. It holds whenever W <= B and W <= F (the paper's
// transformer estimate has T_W < T_F < T_B); a W longer than F cannot be
// hidden in the drain.
TEST(PipelineSimTest, ZbH1BubbleMatchesThePaper) {
  for (int p : {2, 3, 4, 8})
    for (int m : {p, 2 * p, 3 * p})
      for (StageCosts c : {StageCosts{ns(2), ns(2), ns(2), ns(0)}, StageCosts{ns(4), ns(6), ns(2), ns(0)},
                           StageCosts{ns(6), ns(4), ns(4), ns(0)}, StageCosts{ns(4), ns(8), ns(0), ns(0)}}) {
        const PipelineSimResult r = Simulate(ScheduleKind::kZbH1, p, 1, m, c);
        const std::int64_t want = (p - 1) * (c.f + c.b - c.w).value();
        EXPECT_EQ(Bubble(r, m, c), want) << "p" << p << " m" << m;
        EXPECT_EQ(MaxSpanIdle(r), want);
        EXPECT_DOUBLE_EQ(PlannerBubble(ScheduleKind::kZbH1, p, 1, c), double(want));
      }
  // With F = B = W the bubble is a third of 1F1B's (the paper's figure 3).
  const StageCosts eq{ns(5), ns(5), ns(5), ns(0)};
  EXPECT_EQ(3 * Bubble(Simulate(ScheduleKind::kZbH1, 4, 1, 8, eq), 8, eq), Bubble(Simulate(ScheduleKind::k1F1B, 4, 1, 8, eq), 8, eq));
}

// ZB-H2 (same paper, table 2): (p - 1)(F + B - 2W), counted as the paper
// counts it: idle time inside each rank's span, which the paper turns into
// step time by bypassing the optimizer-step synchronisation. Holds for
// W <= min(F, B); with F = B = W it is zero (the parallelogram). A step that
// synchronises still pays the last rank's fill, (p - 1) F: the makespan
// bubble is (p - 1) max(F, F + B - 2W), the planner's closed form.
TEST(PipelineSimTest, ZbH2BubbleMatchesThePaper) {
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 3 * p})
      for (StageCosts c : {StageCosts{ns(2), ns(2), ns(2), ns(0)}, StageCosts{ns(4), ns(6), ns(2), ns(0)},
                           StageCosts{ns(6), ns(4), ns(4), ns(0)}, StageCosts{ns(4), ns(8), ns(1), ns(0)}}) {
        const PipelineSimResult r = Simulate(ScheduleKind::kZbH2, p, 1, m, c);
        const std::int64_t paper = (p - 1) * (c.f + c.b - c.w - c.w).value();
        EXPECT_EQ(MaxSpanIdle(r), paper) << "p" << p << " m" << m;
        const std::int64_t sync = (p - 1) * std::max(c.f, c.f + c.b - c.w - c.w).value();
        EXPECT_EQ(Bubble(r, m, c), sync) << "p" << p << " m" << m;
        EXPECT_DOUBLE_EQ(PlannerBubble(ScheduleKind::kZbH2, p, 1, c), double(sync));
      }
  // F = B = W: zero inside every rank, a parallelogram.
  const PipelineSimResult r = Simulate(ScheduleKind::kZbH2, 4, 1, 8, {ns(2), ns(2), ns(2), ns(0)});
  EXPECT_EQ(r.span_idle_per_rank, (std::vector<ns>(4, ns(0))));
}

// ZB-V (Qi et al., arXiv v2 sec. 6; the repository's table assumes
// T_F = T_B = T_W): zero bubble inside every rank's span. Per chunk F, B
// and W are half a rank's. A synchronised step pays the last rank's fill,
// (p - 1) F / 2. For F <= B and W <= B the makespan bubble is
// (p - 1) max(B - W, B / 2) (derived from this schedule; the planner's
// form), which is the planner's former (p - 1)(F + B - 2W) / 2 only for
// F = B and 2W <= B.
TEST(PipelineSimTest, ZbvIsZeroBubbleWithEqualCosts) {
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 3 * p, 5 * p}) {
      const StageCosts eq{ns(6), ns(6), ns(6), ns(0)};
      const PipelineSimResult r = Simulate(ScheduleKind::kZbv, p, 1, m, eq);
      EXPECT_EQ(r.span_idle_per_rank, (std::vector<ns>(p, ns(0)))) << "p" << p << " m" << m;
      EXPECT_EQ(Bubble(r, m, eq), (p - 1) * 3);
      for (StageCosts c : {StageCosts{ns(6), ns(6), ns(2), ns(0)}, StageCosts{ns(2), ns(8), ns(4), ns(0)},
                           StageCosts{ns(4), ns(8), ns(2), ns(0)}, StageCosts{ns(4), ns(4), ns(0), ns(0)}}) {
        const std::int64_t want = (p - 1) * std::max((c.b - c.w).value(), c.b.value() / 2);
        EXPECT_EQ(Bubble(Simulate(ScheduleKind::kZbv, p, 1, m, c), m, c), want) << "p" << p << " m" << m;
        EXPECT_DOUBLE_EQ(PlannerBubble(ScheduleKind::kZbv, p, 1, c), double(want));
      }
    }
}

// DualPipeV (DeepSeek-V3 report, table 2; github.com/deepseek-ai/DualPipe):
// the table's (PP/2 - 1)(F&B + B - 3W), PP = 2p stages and per-chunk times,
// counts F&B, a forward overlapped with a backward, as one block. Torch's
// runtime, which these lists follow, runs an overlapped pair one action
// after the other, and then this schedule's bubble is, for F = B and W <= B,
// (p - 1)(B - W / 2) — which is the table's formula with F&B = the full
// backward chunk, i.e. with the forward wholly hidden — and (p - 1) F / 2
// with F = B = W, both inside rank 0's span and for the whole step.
TEST(PipelineSimTest, DualPipeVBubbleWithEqualForwardAndBackward) {
  for (int p : {2, 3, 4, 8})
    for (int m : {2 * p, 3 * p, 5 * p})
      for (StageCosts c : {StageCosts{ns(6), ns(6), ns(6), ns(0)}, StageCosts{ns(8), ns(8), ns(2), ns(0)},
                           StageCosts{ns(8), ns(8), ns(4), ns(0)}, StageCosts{ns(4), ns(4), ns(0), ns(0)}}) {
        const PipelineSimResult r = Simulate(ScheduleKind::kDualPipeV, p, 1, m, c);
        const std::int64_t want = (p - 1) * (c.b - c.w / 2).value();
        // The table's formula per chunk: F&B := B, B = (b + w) / 2, W = w / 2.
        const std::int64_t table = (p - 1) * ((c.b + c.w) / 2 + (c.b + c.w) / 2 - c.w * 3 / 2).value();
        EXPECT_EQ(want, table);
        EXPECT_EQ(Bubble(r, m, c), want) << "p" << p << " m" << m;
        EXPECT_EQ(MaxSpanIdle(r), want);
        EXPECT_DOUBLE_EQ(PlannerBubble(ScheduleKind::kDualPipeV, p, 1, c), double(want));
      }
}

// ------------------------------------------------------ closed forms, C > 0

// ZB-H2 with transfers: (p - 1)(F + B + 2C - 2W). Its warm-up of
// 2(p - r) - 1 forwards covers the round trip as long as 2C <= F + B; the
// makespan form needs 2W <= B as above.
TEST(PipelineSimTest, ZbH2BubbleWithTransfers) {
  for (int p : {2, 3, 4, 8})
    for (StageCosts c : {StageCosts{ns(4), ns(4), ns(1), ns(1)}, StageCosts{ns(4), ns(4), ns(1), ns(4)},
                         StageCosts{ns(6), ns(8), ns(2), ns(3)}, StageCosts{ns(2), ns(2), ns(2), ns(1)}}) {
      const int m = 3 * p;
      const PipelineSimResult r = Simulate(ScheduleKind::kZbH2, p, 1, m, c);
      const std::int64_t want = (p - 1) * (c.f + c.b + c.p2p + c.p2p - c.w - c.w).value();
      EXPECT_EQ(MaxSpanIdle(r), want) << "p" << p;
      if (2 * c.w.value() <= c.b.value()) {
        EXPECT_EQ(Bubble(r, m, c), want) << "p" << p;
      }
    }
}

// 1F1B pays a round trip of transfers in every steady-state step, not only
// in the fill: per micro-batch a rank waits 2C for the gradient it needs
// next, so the bubble grows with M. pp 2, F 1, B 2, C 1: rank 0's step is
// B(k) then F(k + 2), and B(k + 1) needs rank 1's B(k + 1), which needs
// F(k + 1)... the period is F + B + 2C = 5, not F + B = 3.
TEST(PipelineSimTest, OneFOneBSteadyStateIsLatencyBound) {
  const StageCosts c{ns(1), ns(2), ns(0), ns(1)};
  const std::int64_t m4 = Simulate(ScheduleKind::k1F1B, 2, 1, 4, c).makespan.value();
  const std::int64_t m5 = Simulate(ScheduleKind::k1F1B, 2, 1, 5, c).makespan.value();
  EXPECT_EQ(m5 - m4, 5);
}

// ------------------------------------------------------ memory

TEST(PipelineSimTest, OneFOneBHoldsPMinusRMicroBatches) {
  for (int p : {2, 4, 8})
    for (int m : {1, 3, p, 2 * p}) {
      const PipelineSimResult r = Simulate(ScheduleKind::k1F1B, p, 1, m, {ns(3), ns(5), ns(2), ns(1)});
      for (int rank = 0; rank < p; ++rank) EXPECT_EQ(r.peak_inflight[rank], std::min(p - rank, m)) << p << " " << m;
    }
}

// The planner sizes activation memory from PeakInflightChunks; the
// simulated lists must hold exactly that many chunks at their peak.
TEST(PipelineSimTest, PeakInflightMatchesThePlannerForEverySchedule) {
  for (ScheduleKind k : {ScheduleKind::kGpipe, ScheduleKind::k1F1B, ScheduleKind::kInterleaved1F1B,
                         ScheduleKind::kZbH1, ScheduleKind::kZbH2, ScheduleKind::kZbv, ScheduleKind::kDualPipeV})
    for (int p : {2, 3, 4, 8})
      for (int v : {1, 2, 3})
        for (int m : {2 * p, 2 * p + 2, 4 * p}) {
          if (!ScheduleTakesVp(k) && v > 1) continue;
          if (ScheduleTakesVp(k) && m % p != 0) continue;
          const PipelineSimResult r = Simulate(k, p, v, m, {ns(6), ns(6), ns(6), ns(1)});
          for (int rank = 0; rank < p; ++rank)
            EXPECT_EQ(r.peak_inflight[rank], PeakInflightChunks(k, p, v, m, rank))
                << ScheduleName(k) << " p" << p << " v" << v << " m" << m << " rank " << rank;
        }
}

TEST(PipelineSimTest, TimelineHoldsEveryComputeActionOnce) {
  const PipelineSimResult r = Simulate(ScheduleKind::kDualPipeV, 4, 1, 8, {ns(6), ns(6), ns(2), ns(1)});
  size_t f = 0;
  for (const TimelineEntry& e : r.timeline) {
    EXPECT_TRUE(IsCompute(e.action.type));
    EXPECT_LE(e.end, r.makespan);
    f += e.action.type == ActionType::kForward;
  }
  EXPECT_EQ(f, 8u * 8u);
  PipelineSimOptions quiet;
  quiet.record_timeline = false;
  const PipelineSimResult q = Simulate(ScheduleKind::kDualPipeV, 4, 1, 8, {ns(6), ns(6), ns(2), ns(1)}, quiet);
  EXPECT_TRUE(q.timeline.empty());
  EXPECT_EQ(q.makespan, r.makespan);
}

}  // namespace
}  // namespace kp
