#include "schedules/attnres_transport.h"

#include <gtest/gtest.h>

#include "common/file_system.h"
#include "specs/presets.h"

namespace kp {
namespace {

using Cells = std::vector<std::vector<std::string>>;

/// A table transcribed from PR #4312's text, one string per row, the PR's
/// tab-separated cells written with " | " between them.
Cells Transcribed(const std::vector<std::string>& rows) {
  Cells out;
  for (const std::string& row : rows) {
    std::vector<std::string> cells;
    size_t start = 0;
    for (size_t bar; (bar = row.find(" | ", start)) != std::string::npos; start = bar + 3)
      cells.push_back(row.substr(start, bar - start));
    cells.push_back(row.substr(start));
    out.push_back(cells);
  }
  return out;
}

void ExpectSameRows(const Cells& got, const Cells& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(got[i], want[i]) << "row " << i;
}

AttnResTransport Transport(int layers, int block_size, const Result<StageSplit>& split, int pp) {
  EXPECT_TRUE(split.ok()) << split.status().message();
  auto t = ComputeAttnResTransport(layers, block_size, *split, pp);
  EXPECT_TRUE(t.ok()) << t.status().message();
  return *t;
}

ModelSpec Preset(const std::string& name) {
  RealFileSystem fs;
  auto m = PresetCatalog(fs, DefaultPresetDir()).Model(name);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

// ---------------------------------------------------------------- 2 blocks x 4 layers, pp2 x vp2

// The PR's reply to the review: 2 blocks x 4 layers with pp2 x vp2 under
// Interleaved1F1B and the split core generates (EvenSplit(8, 4)).
TEST(AttnResTransportTest, TwoBlocksPp2Vp2ForwardTableIsThePrs) {
  const AttnResTransport t = Transport(8, 4, EvenSplit(8, 4), 2);
  ExpectSameRows(ForwardTableCells(t), Transcribed({
      "s0 (r0, v0) | emb, 0-1 | e | - | - | -",
      "s1 (r1, v0) | 2-4 | x4 | s0 -> [e] | s0 -> [e] | -",
      "s2 (r0, v1) | 5-6 | - | s1 -> [e, x4] | s1 -> [x4] | [e]",
      "s3 (r1, v1) | 7, head | - | s2 -> [e, x4] | s2 -> [] (empty payload) | [e, x4]",
  }));
  // "Stack entries sent per micro-batch in forward: 5 with the cache off, 2 with it on."
  EXPECT_EQ(t.naive_entries, 5);
  EXPECT_EQ(t.cached_entries, 2);
}

TEST(AttnResTransportTest, TwoBlocksPp2Vp2BackwardTableIsThePrs) {
  const AttnResTransport t = Transport(8, 4, EvenSplit(8, 4), 2);
  ExpectSameRows(BackwardTableCells(t), Transcribed({
      "s3 (r1, v1) | - | - | [de, dx4] | -",
      "s2 (r0, v1) | s3 -> [de, dx4] | no op (empty payload) | [de] | -",
      "s1 (r1, v0) | s2 -> [de, dx4] | s2 -> [dx4] | - | s3 stored: [de, dx4]",
      "s0 (r0, v0) | s1 -> [de] | s1 -> [de] | - | s2 stored: [de]",
  }));
  // "Gradient entries sent per micro-batch in backward: 5 with the cache off, 2 with it on."
  EXPECT_EQ(t.naive_bwd_entries, 5);
  EXPECT_EQ(t.cached_bwd_entries, 2);
}

// The same rows as data, not through the cell rendering.
TEST(AttnResTransportTest, TwoBlocksPp2Vp2RowsAsData) {
  const AttnResTransport t = Transport(8, 4, EvenSplit(8, 4), 2);
  ASSERT_EQ(t.stages.size(), 4u);
  using V = std::vector<std::string>;
  using Collects = std::vector<std::pair<int, V>>;
  const AttnResStageRow& s1 = t.stages[1];
  EXPECT_EQ(s1.rank, 1);
  EXPECT_EQ(s1.virtual_stage, 0);
  EXPECT_EQ(s1.committed, V{"x4"});
  EXPECT_EQ(s1.cached_fwd, V{"e"});
  EXPECT_EQ(s1.cached_bwd, V{"dx4"});
  EXPECT_EQ(s1.collects, (Collects{{3, {"de", "dx4"}}}));
  const AttnResStageRow& s3 = t.stages[3];
  EXPECT_EQ(s3.held_before, (V{"e", "x4"}));
  EXPECT_TRUE(s3.cached_fwd.empty());
  EXPECT_TRUE(s3.naive_bwd.empty());
  EXPECT_EQ(s3.deposits, (V{"de", "dx4"}));
  EXPECT_EQ(t.stages[0].collects, (Collects{{2, {"de"}}}));
  EXPECT_EQ(t.stack_entries, 2);
  EXPECT_EQ(t.cached_peak_per_hop, 1);
  EXPECT_EQ(t.option2_peak_per_hop, 2);
}

// ---------------------------------------------------------------- 4 blocks x 4 layers, pp4 x vp4

// The PR's second example: 16 layers in blocks of 4 over 16 stages,
// EvenSplit(16, 16), stage s on rank s % 4.
TEST(AttnResTransportTest, FourBlocksPp4Vp4ForwardTableIsThePrs) {
  const AttnResTransport t = Transport(16, 4, EvenSplit(16, 16), 4);
  ExpectSameRows(ForwardTableCells(t), Transcribed({
      "s0 (r0, v0) | emb, 0 | e | - | - | -",
      "s1 (r1, v0) | 1-2 | - | s0 -> [e] | s0 -> [e] | -",
      "s2 (r2, v0) | 3 | - | s1 -> [e] | s1 -> [e] | -",
      "s3 (r3, v0) | 4 | x4 | s2 -> [e] | s2 -> [e] | -",
      "s4 (r0, v1) | 5 | - | s3 -> [e, x4] | s3 -> [x4] | [e]",
      "s5 (r1, v1) | 6 | - | s4 -> [e, x4] | s4 -> [x4] | [e]",
      "s6 (r2, v1) | 7 | - | s5 -> [e, x4] | s5 -> [x4] | [e]",
      "s7 (r3, v1) | 8 | x8 | s6 -> [e, x4] | s6 -> [] (empty payload) | [e, x4]",
      "s8 (r0, v2) | 9 | - | s7 -> [e, x4, x8] | s7 -> [x8] | [e, x4]",
      "s9 (r1, v2) | 10 | - | s8 -> [e, x4, x8] | s8 -> [x8] | [e, x4]",
      "s10 (r2, v2) | 11 | - | s9 -> [e, x4, x8] | s9 -> [x8] | [e, x4]",
      "s11 (r3, v2) | 12 | x12 | s10 -> [e, x4, x8] | s10 -> [] (empty payload) | [e, x4, x8]",
      "s12 (r0, v3) | 13 | - | s11 -> [e, x4, x8, x12] | s11 -> [x12] | [e, x4, x8]",
      "s13 (r1, v3) | 14 | - | s12 -> [e, x4, x8, x12] | s12 -> [x12] | [e, x4, x8]",
      "s14 (r2, v3) | 15 | - | s13 -> [e, x4, x8, x12] | s13 -> [x12] | [e, x4, x8]",
      "s15 (r3, v3) | head | - | s14 -> [e, x4, x8, x12] | s14 -> [] (empty payload) | [e, x4, x8, x12]",
  }));
  // "Stack entries sent per micro-batch in forward: 39 with the cache off, 12 with it on."
  EXPECT_EQ(t.naive_entries, 39);
  EXPECT_EQ(t.cached_entries, 12);
}

// The head-only last stage reads every entry in the aggregation, so it
// deposits all four (the PR's s15 row), although it has no layer.
TEST(AttnResTransportTest, FourBlocksPp4Vp4BackwardTableIsThePrs) {
  const AttnResTransport t = Transport(16, 4, EvenSplit(16, 16), 4);
  ExpectSameRows(BackwardTableCells(t), Transcribed({
      "s15 (r3, v3) | - | - | [de, dx4, dx8, dx12] | -",
      "s14 (r2, v3) | s15 -> [de, dx4, dx8, dx12] | no op (empty payload) | [de, dx4, dx8] | -",
      "s13 (r1, v3) | s14 -> [de, dx4, dx8, dx12] | s14 -> [dx12] | [de, dx4, dx8] | -",
      "s12 (r0, v3) | s13 -> [de, dx4, dx8, dx12] | s13 -> [dx12] | [de, dx4, dx8] | -",
      "s11 (r3, v2) | s12 -> [de, dx4, dx8, dx12] | s12 -> [dx12] | [de, dx4, dx8] | s15 stored: [dx12]",
      "s10 (r2, v2) | s11 -> [de, dx4, dx8] | no op (empty payload) | [de, dx4] | s14 stored: [dx8]",
      "s9 (r1, v2) | s10 -> [de, dx4, dx8] | s10 -> [dx8] | [de, dx4] | s13 stored: [dx8]",
      "s8 (r0, v2) | s9 -> [de, dx4, dx8] | s9 -> [dx8] | [de, dx4] | s12 stored: [dx8]",
      "s7 (r3, v1) | s8 -> [de, dx4, dx8] | s8 -> [dx8] | [de, dx4] | s11 stored: [dx8], s15 stored: [dx8]",
      "s6 (r2, v1) | s7 -> [de, dx4] | no op (empty payload) | [de] | s10 stored: [dx4], s14 stored: [dx4]",
      "s5 (r1, v1) | s6 -> [de, dx4] | s6 -> [dx4] | [de] | s9 stored: [dx4], s13 stored: [dx4]",
      "s4 (r0, v1) | s5 -> [de, dx4] | s5 -> [dx4] | [de] | s8 stored: [dx4], s12 stored: [dx4]",
      "s3 (r3, v0) | s4 -> [de, dx4] | s4 -> [dx4] | - | s7 stored: [de, dx4], s11 stored: [de, dx4], s15 stored: [de, dx4]",
      "s2 (r2, v0) | s3 -> [de] | s3 -> [de] | - | s6 stored: [de], s10 stored: [de], s14 stored: [de]",
      "s1 (r1, v0) | s2 -> [de] | s2 -> [de] | - | s5 stored: [de], s9 stored: [de], s13 stored: [de]",
      "s0 (r0, v0) | s1 -> [de] | s1 -> [de] | - | s4 stored: [de], s8 stored: [de], s12 stored: [de]",
  }));
  // "Gradient entries sent per micro-batch in backward: 39 with the cache off, 12 with it on."
  EXPECT_EQ(t.naive_bwd_entries, 39);
  EXPECT_EQ(t.cached_bwd_entries, 12);
}

// ---------------------------------------------------------------- the 93-layer Kimi K3

struct K3Shape {
  int pp, vp;
  int option1, option2, cached, cached_peak, option2_peak;
};

// The PR's table "on the real 93-layer shape: 8 blocks, one message = one
// block, per micro-batch". The PR does not state the split; torchtitan's
// even split of the 95 units over pp * vp stages (EvenSplit(93, pp * vp),
// what core generates when no split is spelled out) reproduces every cell.
// Its "option 2" column is the naive total (whole stack on every hop).
TEST(AttnResTransportTest, KimiK3ShapesMatchThePrsTable) {
  const ModelSpec k3 = Preset("kimi-k3");
  ASSERT_EQ(k3.layers, 93);
  ASSERT_EQ(k3.attn_res_block, 12);
  const std::vector<K3Shape> shapes = {
      {8, 1, 28, 28, 28, 7, 7},  {4, 2, 18, 28, 18, 3, 7},  {2, 4, 7, 28, 7, 1, 7},
      {8, 4, 52, 136, 52, 2, 8}, {4, 8, 24, 136, 24, 1, 8}, {16, 2, 96, 136, 96, 4, 8},
  };
  for (const K3Shape& s : shapes) {
    SCOPED_TRACE("pp" + std::to_string(s.pp) + " x vp" + std::to_string(s.vp));
    const AttnResTransport t = Transport(k3.layers, k3.attn_res_block, EvenSplit(k3.layers, s.pp * s.vp), s.pp);
    EXPECT_EQ(t.stack_entries, 8);
    EXPECT_EQ(t.option1_entries, s.option1);
    EXPECT_EQ(t.naive_entries, s.option2);
    EXPECT_EQ(t.cached_entries, s.cached);
    EXPECT_EQ(t.cached_peak_per_hop, s.cached_peak);
    EXPECT_EQ(t.option2_peak_per_hop, s.option2_peak);
    EXPECT_EQ(t.naive_bwd_entries, t.naive_entries);
    EXPECT_EQ(t.cached_bwd_entries, t.cached_entries);
  }
}

// ---------------------------------------------------------------- the debug model on the CI recipe's split

// kimi_k3_debugmodel_pp4_vp4: 17 layers in blocks of 4 (four full blocks and
// a partial one), sixteen stages, one layer per stage from layer 5 on, the
// head alone on the last. Not in the PR's tables; the numbers below are
// worked by hand: commits at s0 (e), s2 (x4), s6 (x8), s10 (x12), s14 (x16);
// the naive stack is 1,1,2,2,2,2,3,3,3,3,4,4,4,4,5 on the 15 hops (43); with
// the cache each entry rides min(3, 15 - producer) hops (3+3+3+3+1 = 13).
TEST(AttnResTransportTest, DebugModelOnTheCiSplitIsConsistent) {
  const ModelSpec debug = Preset("kimi-k3-debug");
  ASSERT_EQ(debug.layers, 17);
  ASSERT_EQ(debug.attn_res_block, 4);
  const AttnResTransport t =
      Transport(debug.layers, debug.attn_res_block, ParseSplit("1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0", 17), 4);
  using V = std::vector<std::string>;
  EXPECT_EQ(t.stack_entries, 5);
  EXPECT_EQ(t.stages[2].committed, V{"x4"});  // the second block opens inside stage 2 (layers 3-4)
  EXPECT_EQ(t.stages[14].committed, V{"x16"});
  EXPECT_EQ(t.naive_entries, 43);
  EXPECT_EQ(t.cached_entries, 13);
  EXPECT_EQ(t.option1_entries, 13);
  EXPECT_EQ(t.cached_peak_per_hop, 2);
  EXPECT_EQ(t.option2_peak_per_hop, 5);
  EXPECT_EQ(t.stages[15].deposits, (V{"de", "dx4", "dx8", "dx12"}));  // head only
  int deposits = 0, collects = 0;
  for (const AttnResStageRow& r : t.stages) {
    EXPECT_LE(r.cached_fwd.size(), r.naive_fwd.size()) << "s" << r.stage;
    EXPECT_EQ(r.cached_bwd.size(), r.stage + 1 < 16 ? t.stages[r.stage + 1].cached_fwd.size() : 0u);
    deposits += static_cast<int>(r.deposits.size());
    for (const auto& [from, entries] : r.collects) {
      EXPECT_GT(from, r.stage);
      EXPECT_EQ(from % 4, r.rank);
      collects += static_cast<int>(entries.size());
    }
  }
  EXPECT_EQ(deposits, 30);  // stages 4-5 one each, 6-9 two, 10-13 three, 14-15 four
  EXPECT_EQ(collects, deposits);
  EXPECT_LE(t.cached_entries, t.naive_entries);
}

// ---------------------------------------------------------------- stages without a layer

// The PR's deposit-count check assumes every stage reading cached blocks has
// a layer (the reviewer's remark). A middle stage with neither layer nor head
// only relays: it holds e but reads nothing, so it deposits nothing and its
// rank's owner of e collects nothing from it; the head-only stage after it
// deposits everything it holds.
TEST(AttnResTransportTest, EmptyRelayStageDepositsNothing) {
  StageSplit split;
  split.stages = {{0, 4, true, false}, {4, 8, false, false}, {8, 8, false, false}, {8, 8, false, true}};
  const AttnResTransport t = Transport(8, 4, split, 2);
  using V = std::vector<std::string>;
  using Collects = std::vector<std::pair<int, V>>;
  EXPECT_EQ(t.stages[0].committed, V{"e"});
  EXPECT_EQ(t.stages[1].committed, V{"x4"});
  EXPECT_EQ(t.stages[2].held_before, V{"e"});
  EXPECT_TRUE(t.stages[2].deposits.empty());
  EXPECT_TRUE(t.stages[0].collects.empty());
  EXPECT_EQ(t.stages[3].deposits, (V{"de", "dx4"}));
  EXPECT_EQ(t.stages[1].collects, (Collects{{3, {"de", "dx4"}}}));
  // The relay still receives x4, which its rank lacks, though nothing on
  // rank 0 reads it; option 1 sends only to readers: e to rank 1, x4 nowhere.
  EXPECT_EQ(t.stages[2].cached_fwd, V{"x4"});
  EXPECT_EQ(t.cached_entries, 2);
  EXPECT_EQ(t.option1_entries, 1);
}

// ---------------------------------------------------------------- hop bytes and outputs

TEST(AttnResTransportTest, HopBytesAreTheHiddenStatePlusTheEntries) {
  const AttnResTransport t = Transport(8, 4, EvenSplit(8, 4), 2);
  const Bytes hidden(1000), entry(1000);
  EXPECT_EQ(HopBytes(t, 1, false, hidden, entry), Bytes(3000));  // [e, x4]
  EXPECT_EQ(HopBytes(t, 1, true, hidden, entry), Bytes(2000));   // [x4]
  EXPECT_EQ(HopBytes(t, 2, true, hidden, entry), Bytes(1000));   // [] still carries the hidden state
  EXPECT_EQ(HopBytes(t, 3, true, hidden, entry), Bytes(0));      // the last stage sends nothing on
  EXPECT_EQ(HopEntries(t, 0, true), 1);
  EXPECT_EQ(HopEntries(t, -1, true), 0);
}

TEST(AttnResTransportTest, JsonHoldsTheTotalsAndOneObjectPerStage) {
  const AttnResTransport t = Transport(16, 4, EvenSplit(16, 16), 4);
  const nlohmann::json j = ToJson(t);
  EXPECT_EQ(j.at("naive_entries"), 39);
  EXPECT_EQ(j.at("cached_entries"), 12);
  EXPECT_EQ(j.at("cached_peak_per_hop"), 1);
  EXPECT_EQ(j.at("option1_entries"), 12);
  EXPECT_EQ(j.at("option2_peak_per_hop"), 4);
  ASSERT_EQ(j.at("stages").size(), 16u);
  const nlohmann::json& s7 = j.at("stages").at(7);
  EXPECT_EQ(s7.at("rank"), 3);
  EXPECT_EQ(s7.at("virtual_stage"), 1);
  EXPECT_EQ(s7.at("committed"), nlohmann::json({"x8"}));
  EXPECT_EQ(s7.at("collects"), nlohmann::json::parse(R"([{"stage": 11, "entries": ["dx8"]},
                                                          {"stage": 15, "entries": ["dx8"]}])"));
}

TEST(AttnResTransportTest, RenderedTablesCarryTheTotals) {
  const std::string text = RenderTables(Transport(8, 4, EvenSplit(8, 4), 2));
  EXPECT_NE(text.find("PP Comm, fwd (cache)"), std::string::npos);
  EXPECT_NE(text.find("s2 -> [] (empty payload)"), std::string::npos);
  EXPECT_NE(text.find("collects from the rank cache"), std::string::npos);
  EXPECT_NE(text.find("forward: 5 with the cache off, 2 with it on"), std::string::npos);
  EXPECT_NE(text.find("backward: 5 with the cache off, 2 with it on"), std::string::npos);
}

// ---------------------------------------------------------------- refusals

std::string Refusal(const Result<AttnResTransport>& t) {
  EXPECT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(t.status().message().find('\n'), std::string::npos);
  return t.status().message();
}

TEST(AttnResTransportTest, RefusesBadInputNamingTheField) {
  const StageSplit eight = *EvenSplit(8, 4);
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 0, eight, 2)), "--block-size: 0 is not a block size (at least 1 layer)");
  EXPECT_EQ(Refusal(ComputeAttnResTransport(17, 4, *EvenSplit(16, 16), 4)),
            "--split: the split holds 16 layers, the model has 17");
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, eight, 3)), "--pp: 3 does not divide the 4 stages of the split");
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, eight, 0)), "--pp: 0 is not a pipeline degree (at least 1)");
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, StageSplit{}, 1)), "--split: the split has no stages");
  StageSplit gap = eight;
  gap.stages[2].first_layer = 6;
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, gap, 2)),
            "--split: stage 2 holds layers [6, 7), expected to start at layer 5");
}

// With the cache on the PR refuses a schedule whose stage-to-rank map is not
// loop style, naming the schedule and the first stage off it.
TEST(AttnResTransportTest, RefusesAScheduleThatIsNotLoopStyle) {
  const StageSplit eight = *EvenSplit(8, 4);
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, eight, 2, {"ScheduleZBVZeroBubble", {0, 1, 1, 0}})),
            "--schedule: ScheduleZBVZeroBubble puts stage 2 on rank 1; the attention-residual rank cache needs "
            "stage s on rank s % 2 (rank 0)");
  EXPECT_EQ(Refusal(ComputeAttnResTransport(8, 4, eight, 2, {"ScheduleInterleaved1F1B", {0, 1, 0}})),
            "--schedule: ScheduleInterleaved1F1B places 3 stages, the split has 4");
  auto loop = ComputeAttnResTransport(8, 4, eight, 2, {"ScheduleInterleaved1F1B", {0, 1, 0, 1}});
  ASSERT_TRUE(loop.ok()) << loop.status().message();
  EXPECT_EQ(loop->cached_entries, 2);
}

}  // namespace
}  // namespace kp
