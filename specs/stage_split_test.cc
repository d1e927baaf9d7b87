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
  EXPECT_EQ(*fields(ParseSplit("11,12,12,12,12,12,12,11", 94), 8, 1), (Fields{11, 11}));
  EXPECT_EQ(*fields(ParseSplit("3,2,2,2", 9), 4, 1), (Fields{3, std::nullopt}));
  EXPECT_EQ(*fields(ParseSplit("3,5,5,2,3,5,5,2", 30), 4, 2), (Fields{6, 4}));
  // torchtitan's even split of 61 layers over 4 stages is 15, 16, 16, 14.
  EXPECT_EQ(*fields(EvenSplit(61, 4), 4, 1), (Fields{15, 14}));
  EXPECT_EQ(*fields(ParseSplit("5,3", 8), 2, 1), (Fields{5, std::nullopt}));
}

TEST(MegatronStageLayersTest, RefusesSplitsMegatronCannotBuild) {
  // torchtitan's 128 layers on pp 64: 2, 3, 2, ..., 2, 1.
  auto even = EvenSplit(128, 64);
  ASSERT_TRUE(even.ok());
  EXPECT_EQ(MegatronStageLayersOf(*even, 64, 1).status().message(),
            "--layer-split: Megatron-LM gives every rank but the first and the last the same layers, and rank 1 has "
            "3, rank 2 2 (only a pipeline_model_parallel_layout could, which kimi-plan does not emit)");
  EXPECT_EQ(MegatronStageLayersOf(*ParseSplit("2,2,1,3", 8), 2, 2).status().message(),
            "--layer-split: Megatron-LM gives every virtual stage of a rank the same layers, and rank 0 has 2 and 1");
  EXPECT_EQ(MegatronStageLayersOf(*EvenSplit(5, 4), 4, 1).status().message(),  // 1, 2, 2, 0
            "--layer-split: Megatron-LM needs num_layers_in_last_pipeline_stage >= 1, got 0");
  EXPECT_EQ(MegatronStageLayersOf(*ParseSplit("3,3,3,3,3,3", 18), 2, 2).status().message(),
            "--layer-split: 6 stages, Megatron builds pp x vp = 4");
}

TEST(LayerSplitTest, ParsesTheRulesAndReadsThemBack) {
  for (const char* text : {"even", "megatron", "auto", "2,3,3,2"}) {
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
  EXPECT_EQ(SplitCandidates(LayerSplit{LayerSplitKind::kAuto, {}}).size(), 2u);
}

}  // namespace
}  // namespace kp
