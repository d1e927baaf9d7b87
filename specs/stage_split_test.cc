#include "specs/stage_split.h"

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

}  // namespace
}  // namespace kp
