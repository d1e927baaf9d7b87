#include "specs/stage_split.h"

#include <vector>

#include <gtest/gtest.h>

namespace kp {
namespace {

// The PR's pp2 x vp2 table: 2 blocks x 4 layers over 4 stages.
TEST(StageSplitTest, EvenSplitOfEightLayersMatchesThePrTable) {
  auto s = EvenSplit(8, 4);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "emb,0-1 | 2-4 | 5-6 | 7,head");
}

// The PR's pp4 x vp4 table: 16 layers over 16 stages.
TEST(StageSplitTest, EvenSplitOfSixteenLayersMatchesThePrTable) {
  auto s = EvenSplit(16, 16);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "emb,0 | 1-2 | 3 | 4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15 | head");
}

// 19 units over 16 stages: the first three get two units, so the second
// block (layer 4) opens inside stage 2, as in the PR's CI recipe.
TEST(StageSplitTest, SeventeenLayersOverSixteenStagesIsTheCiRecipe) {
  auto s = EvenSplit(17, 16);
  ASSERT_TRUE(s.ok());
  auto ci = ParseSplit("1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0", 17);
  ASSERT_TRUE(ci.ok());
  EXPECT_EQ(s->ToString(), ci->ToString());
}

TEST(StageSplitTest, TooManyStagesForTheUnits) {
  auto s = EvenSplit(4, 7);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(), "--pp/--vp: 7 stages exceed the 6 units (embedding + 4 layers + head)");
}

// The CI recipe's split: one layer per stage from layer 5 on, the head alone.
TEST(StageSplitTest, ExplicitSplitOfTheDebugModel) {
  auto s = ParseSplit("1,2,2,1,1,1,1,1,1,1,1,1,1,1,1,0", 17);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->num_stages(), 16);
  EXPECT_EQ(s->ToString(), "emb,0 | 1-2 | 3-4 | 5 | 6 | 7 | 8 | 9 | 10 | 11 | 12 | 13 | 14 | 15 | 16 | head");
  EXPECT_EQ(s->StageOfLayer(4), 2);
}

TEST(StageSplitTest, BadSplitsNameTheProblem) {
  EXPECT_EQ(ParseSplit("1,2", 4).status().message(), "--split: the counts sum to 3 layers, the model has 4");
  EXPECT_EQ(ParseSplit("1,x", 4).status().message(), "--split: \"x\" is not a layer count (a non-negative integer)");
  EXPECT_EQ(ParseSplit("2,0,2", 4).status().message(),
            "--split: stage 1 holds nothing (only the first and last stage may have no layer)");
  EXPECT_FALSE(EvenSplit(4, 7).ok());
}

TEST(StageSplitTest, OneStageHoldsEverything) {
  auto s = EvenSplit(61, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "emb,0-60,head");
}


// Megatron-LM's default: num_layers / pp on every rank, the embedding on the
// first stage and the head on the last. 128 layers over pp 64: two each.
TEST(MegatronSplitTest, DefaultPutsLayersOverPpOnEveryRank) {
  auto s = MegatronSplit(128, 64, 1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(LayerCounts(*s), std::vector<int>(64, 2));
  EXPECT_EQ(s->stages[0].first_layer, 0);
  EXPECT_TRUE(s->stages[0].embedding);
  EXPECT_FALSE(s->stages[0].head);
  EXPECT_TRUE(s->stages[63].head);
  EXPECT_EQ(s->stages[63].first_layer, 126);
}

// transformer_block.py's own example: 8 layers, 2 stages, 2 virtual stages
// gives stage 0 [0, 1] [4, 5] and stage 1 [2, 3] [6, 7]; with 4 virtual
// stages stage 0 holds [0] [2] [4] [6]. Virtual stage j of rank r is stage
// j * pp + r.
TEST(MegatronSplitTest, VirtualStagesInterleaveAsMegatronsComment) {
  auto two = MegatronSplit(8, 2, 2);
  ASSERT_TRUE(two.ok()) << two.status().message();
  EXPECT_EQ(two->ToString(), "emb,0-1 | 2-3 | 4-5 | 6-7,head");
  auto four = MegatronSplit(8, 2, 4);
  ASSERT_TRUE(four.ok()) << four.status().message();
  std::vector<int> rank0;
  for (int l = 0; l < 8; ++l)
    if (four->StageOfLayer(l) % 2 == 0) rank0.push_back(l);
  EXPECT_EQ(rank0, (std::vector<int>{0, 2, 4, 6}));
}

// Verl's Qwen3-235B example: 94 layers, pp 8, 11 on the first and the last
// rank, the other 72 over the six middle ranks.
TEST(MegatronSplitTest, UnevenEndsTakeTheirCountsAndTheMiddleSharesTheRest) {
  auto s = MegatronSplit(94, 8, 1, 11, 11);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(LayerCounts(*s), (std::vector<int>{11, 12, 12, 12, 12, 12, 12, 11}));
  auto first_only = MegatronSplit(9, 4, 1, 3);
  ASSERT_TRUE(first_only.ok()) << first_only.status().message();
  EXPECT_EQ(LayerCounts(*first_only), (std::vector<int>{3, 2, 2, 2}));
}

// 30 layers, pp 4, vp 2, 6 first, 4 last: the middle ranks get 10 each, so
// the chunks are 3, 5, 5, 2 per virtual stage. get_transformer_layer_offset:
// 15 layers per virtual stage; rank 3's first chunk starts at 3 + 2 x 5 = 13,
// rank 0's second at 15.
TEST(MegatronSplitTest, UnevenEndsWithVirtualStagesFollowTheOffsetFormula) {
  auto s = MegatronSplit(30, 4, 2, 6, 4);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(LayerCounts(*s), (std::vector<int>{3, 5, 5, 2, 3, 5, 5, 2}));
  EXPECT_EQ(s->stages[3].first_layer, 13);
  EXPECT_EQ(s->stages[4].first_layer, 15);
  EXPECT_TRUE(s->stages[7].head);
}

TEST(MegatronSplitTest, RefusesWhatMegatronAsserts) {
  EXPECT_EQ(MegatronSplit(61, 4, 1).status().message(),
            "--layer-split: Megatron-LM puts num_layers / pp on every rank, and pp 4 does not divide the 61 layers");
  EXPECT_EQ(MegatronSplit(8, 2, 3).status().message(),
            "--layer-split: Megatron-LM splits a rank's layers equally over its virtual stages, and vp 3 does not "
            "divide the 4 layers of rank 0");
  EXPECT_EQ(MegatronSplit(94, 8, 2, 11, 11).status().message(),
            "--layer-split: Megatron-LM needs num_layers_in_first_pipeline_stage = 11 divisible by vp 2");
  EXPECT_EQ(MegatronSplit(10, 4, 1, 0).status().message(),
            "--layer-split: Megatron-LM needs num_layers_in_first_pipeline_stage >= 1, got 0");
  EXPECT_EQ(MegatronSplit(11, 4, 1, 3, 3).status().message(),
            "--layer-split: Megatron-LM needs the 5 layers between the first and last stage to divide equally over "
            "the 2 middle ranks");
  EXPECT_FALSE(MegatronSplit(4, 2, 1, 4).ok());  // no layer left for the other rank
}

TEST(MegatronStageLayersTest, FindsTheFieldsThatRebuildTheSplit) {
  using Fields = MegatronStageLayers;
  auto fields = [](const Result<StageSplit>& s, int pp, int vp) { return MegatronStageLayersOf(*s, pp, vp); };
  EXPECT_EQ(*fields(MegatronSplit(128, 64, 1), 64, 1), Fields{});
  EXPECT_EQ(*fields(ParseSplit("11,12,12,12,12,12,12,11", 94), 8, 1), (Fields{11, 11, std::nullopt}));
  EXPECT_EQ(*fields(ParseSplit("3,2,2,2", 9), 4, 1), (Fields{3, std::nullopt, std::nullopt}));
  EXPECT_EQ(*fields(ParseSplit("3,5,5,2,3,5,5,2", 30), 4, 2), (Fields{6, 4, std::nullopt}));
  // torchtitan's even split of 61 layers over 4 stages is 15, 16, 16, 14.
  EXPECT_EQ(*fields(EvenSplit(61, 4), 4, 1), (Fields{15, 14, std::nullopt}));
  EXPECT_EQ(*fields(ParseSplit("5,3", 8), 2, 1), (Fields{5, std::nullopt, std::nullopt}));
}

TEST(MegatronStageLayersTest, TheUnevenFieldsRefuseWhatOnlyALayoutBuilds) {
  // torchtitan's 128 layers on pp 64: 2, 3, 2, ..., 2, 1.
  auto even = EvenSplit(128, 64);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(MegatronUnevenFieldsOf(*even, 64, 1).status().message(),
            "--layer-split: Megatron-LM gives every rank but the first and the last the same layers, and rank 1 has "
            "3, rank 2 2 (only a pipeline_model_parallel_layout can)");
  EXPECT_EQ(MegatronUnevenFieldsOf(*ParseSplit("2,2,1,3", 8), 2, 2).status().message(),
            "--layer-split: Megatron-LM gives every virtual stage of a rank the same layers, and rank 0 has 2 and 1");
  EXPECT_EQ(MegatronUnevenFieldsOf(*EvenSplit(5, 4), 4, 1).status().message(),  // 1, 2, 2, 0
            "--layer-split: Megatron-LM needs num_layers_in_last_pipeline_stage >= 1, got 0");
  EXPECT_EQ(MegatronStageLayersOf(*ParseSplit("3,3,3,3,3,3", 18), 2, 2).status().message(),
            "--layer-split: 6 stages, Megatron builds pp x vp = 4");
}

// What the uneven fields cannot give, a layout does: read back, it is the
// same split, stage for stage.
TEST(MegatronStageLayersTest, ALayoutBuildsWhatTheFieldsCannot) {
  auto layout_of = [](const Result<StageSplit>& s, int pp, int vp) {
    Result<MegatronStageLayers> m = MegatronStageLayersOf(*s, pp, vp);
    EXPECT_TRUE(m.ok() && m->layout && !m->first && !m->last);
    return m.ok() && m->layout ? *m->layout : std::string();
  };
  const Result<StageSplit> even = EvenSplit(128, 64);
  const std::string even_layout = layout_of(even, 64, 1);
  EXPECT_EQ(even_layout, "Ett|ttt|(tt|)*61tL");
  EXPECT_EQ(ParseMegatronLayout(even_layout, 128, 0, 64, 1)->ToString(), even->ToString());
  const Result<StageSplit> uneven = ParseSplit("2,2,1,3", 8);
  EXPECT_EQ(layout_of(uneven, 2, 2), "Ett|tt|t|tttL");
  // An MTP layer anywhere but the last stage needs the layout too.
  const Result<StageSplit> mtp = ParseMegatronLayout("Ett|ttm|L", 4, 1, 3, 1);
  ASSERT_TRUE(mtp.ok()) << mtp.status().message();
  EXPECT_EQ(layout_of(mtp, 3, 1), "Ett|ttm|L");
}

TEST(LayerSplitTest, ParsesTheRulesAndReadsThemBack) {
  for (const char* text : {"even", "megatron", "auto", "2,3,3,2", "megatron+embedding", "megatron+loss",
                           "megatron+embedding+loss"}) {
    auto r = ParseLayerSplit(text);
    ASSERT_TRUE(r.ok()) << text;
    EXPECT_EQ(r->ToString(), text);
  }
  EXPECT_EQ(ParseLayerSplit("2,3")->counts, (std::vector<int>{2, 3}));
  EXPECT_EQ(ParseLayerSplit("2,0,3").status().message(),
            "--layer-split: stage 1 has no layers (every stage needs at least one)");
  for (const char* bad : {"2,x", "", "2,,3", "2,3,", "uneven", "-1,3"})
    EXPECT_EQ(ParseLayerSplit(bad).status().message().rfind("--layer-split: ", 0), 0u) << bad;
}

TEST(LayerSplitTest, SplitLayersChecksAnExplicitList) {
  auto r = ParseLayerSplit("2,3,3,2");
  auto s = SplitLayers(*r, 10, 4, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->ToString(), "emb,0-1 | 2-4 | 5-7 | 8-9,head");
  EXPECT_EQ(SplitLayers(*r, 11, 4, 1).status().message(), "--layer-split: the counts sum to 10 layers, the model has 11");
  EXPECT_EQ(SplitLayers(*r, 10, 2, 1).status().message(),
            "--layer-split: 4 counts, the plan has 2 stages (pp 2 x 1 per rank)");
  EXPECT_EQ(SplitLayers(LayerSplit{LayerSplitKind::kMegatron, {}}, 10, 2, 1)->ToString(), "emb,0-4 | 5-9,head");
  // auto: even, megatron, megatron with both account-for flags, and (given
  // the model and the stages) the balanced layout.
  EXPECT_EQ(SplitCandidates(LayerSplit{LayerSplitKind::kAuto, {}}).size(), 3u);
  const std::vector<LayerSplit> all = SplitCandidates(LayerSplit{LayerSplitKind::kAuto, {}}, 61, 0, 16, 2);
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[2].ToString(), "megatron+embedding+loss");
  EXPECT_EQ(all[3].ToString(), "Et|(tt|)*30L");
}

// Megatron-LM's pipeline_model_parallel_layout, as its parser reads it
// (pipeline_parallel_layer_layout.py): DeepSeek-V3's 61 layers and one MTP
// layer over pp 16 x vp 2, the example of Megatron's documentation.
TEST(MegatronLayoutTest, ParsesTheDocumentedDeepSeekV3Layout) {
  auto s = ParseMegatronLayout("Et*3|(tt|)*29,m|L", 61, 1, 16, 2);
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->num_stages(), 32);
  EXPECT_EQ(s->stages[0].layer_count(), 3);
  EXPECT_TRUE(s->stages[0].embedding);
  for (int st = 1; st <= 29; ++st) EXPECT_EQ(s->stages[st].layer_count(), 2) << st;
  EXPECT_EQ(s->stages[30].mtp, 1);  // virtual stage 1 of rank 14
  EXPECT_EQ(s->stages[30].layer_count(), 0);
  EXPECT_TRUE(s->stages[31].head);
  EXPECT_EQ(s->stages[31].layer_count(), 0);  // a stage holding only the loss
  EXPECT_EQ(LayerCounts(*s).back(), 0);
  // Written back compressed, it reads back the same split.
  const std::string again = MegatronLayoutOf(*s);
  EXPECT_EQ(again, "Ettt|(tt|)*29m|L");
  EXPECT_EQ(ParseMegatronLayout(again, 61, 1, 16, 2)->ToString(), s->ToString());
  // The K2-style layout: the MTP layer beside the loss.
  auto k2 = ParseMegatronLayout("Et|(tt|)*30mL", 61, 1, 16, 2);
  ASSERT_TRUE(k2.ok()) << k2.status().message();
  EXPECT_EQ(k2->stages.back().mtp, 1);
  EXPECT_EQ(MegatronLayoutOf(*k2), "Et|(tt|)*30mL");
}

TEST(MegatronLayoutTest, RefusesWhatMegatronRefusesNamingWhy) {
  auto why = [](const std::string& layout, int layers = 4, int mtp = 0, int pp = 2, int vp = 1) {
    return ParseMegatronLayout(layout, layers, mtp, pp, vp).status().message();
  };
  EXPECT_EQ(why("Ett|ttL"), "");
  EXPECT_EQ(why("Ett|tt"), "--layer-split: the loss (L) must come last, in the last stage");
  EXPECT_EQ(why("tEt|ttL"), "--layer-split: the embedding (E) must come first, in stage 0");
  EXPECT_EQ(why("Ett|tL"), "--layer-split: the layout places 3 decoder layers (t), the model has 4");
  EXPECT_EQ(why("Ett|ttL", 4, 0, 4), "--layer-split: the layout has 2 stages, which pp 4 does not divide");
  EXPECT_EQ(why("Et|t|t|tL"), "--layer-split: the layout has 4 stages, 2 per pipeline rank; give --vp 2 (the plan has 1)");
  EXPECT_EQ(why("Ett|tmtL", 4, 1), "--layer-split: every decoder layer (t) must come before the MTP layers (m)");
  EXPECT_EQ(why("Ettm|ttL", 4, 1), "--layer-split: every decoder layer (t) must come before the MTP layers (m)");
  EXPECT_EQ(why("Ett|ttL", 4, 1), "--layer-split: the layout places 0 MTP layers (m), the model has 1");
  EXPECT_EQ(why("Ett|ttxL").rfind("--layer-split: 'x' is not a layer", 0), 0u);
  EXPECT_EQ(ParseLayerSplit("Et(t|tt").status().message(), "--layer-split: \"Et(t|tt\": a ( is never closed");
  EXPECT_EQ(ParseLayerSplit("megatorn").status().message().rfind("--layer-split: 'e' is not a layer", 0), 0u)
      << ParseLayerSplit("megatorn").status().message();
  EXPECT_EQ(ParseLayerSplit("Et|(tt|)*3L")->ToString(), "Et|(tt|)*3L");
}

// account_for_embedding/loss_in_pipeline_split: the embedding and the loss
// count as layers of an equal split (Qwen3-235B's 94 layers over pp 16).
TEST(MegatronLayoutTest, AccountForFlagsTakeALayerOffTheEnds) {
  auto rule = ParseLayerSplit("megatron+embedding+loss");
  ASSERT_TRUE(rule.ok());
  EXPECT_TRUE(rule->account_for_embedding && rule->account_for_loss);
  auto s = SplitLayers(*rule, 94, 16, 1);
  ASSERT_TRUE(s.ok()) << s.status().message();
  std::vector<int> expect(16, 6);
  expect.front() = expect.back() = 5;
  EXPECT_EQ(LayerCounts(*s), expect);
  EXPECT_EQ(SplitLayers(*ParseLayerSplit("megatron+loss"), 61, 2, 1)->ToString(), "emb,0-30 | 31-60,head");
  EXPECT_EQ(SplitLayers(*rule, 61, 16, 1).status().message(),
            "--layer-split: Megatron-LM with account_for_embedding and loss_in_pipeline_split splits the 63 layers "
            "(61 decoder layers + the embedding + the loss) equally over pp x vp = 16 stages, and 16 does not divide them");
  EXPECT_EQ(ParseLayerSplit("megatron+lost").status().message().rfind("--layer-split: \"lost\" is not embedding or loss", 0), 0u);
}

TEST(MegatronLayoutTest, TheBalancedSplitCountsTheEndsAsLayers) {
  auto s = BalancedSplit(61, 0, 16, 2);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(MegatronLayoutOf(*s), "Et|(tt|)*30L");
  auto mtp = BalancedSplit(61, 1, 16, 2);
  ASSERT_TRUE(mtp.ok());
  EXPECT_EQ(MegatronLayoutOf(*mtp), "Et|(tt|)*30mL");
  auto dense = BalancedSplit(4, 0, 2, 1);
  EXPECT_EQ(MegatronLayoutOf(*dense), "Ett|ttL");
}

}  // namespace
}  // namespace kp
