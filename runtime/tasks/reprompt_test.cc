#include "runtime/tasks/reprompt.h"

#include <gtest/gtest.h>

namespace kp::runtime {
namespace {

TEST(RepromptTest, DefaultTemplateIsTheReferenceOne) {
  RepromptTemplate t;
  EXPECT_EQ(RepromptText("1+2=", std::string("3"), std::nullopt, t),
            "1+2=\nCorrect solution:\n\n3\n\nCorrectly solve the original question.");
  EXPECT_EQ(RepromptText("1+2=", std::nullopt, std::string("The answer is 3, not 4."), t),
            "1+2=\nThe following is feedback from your unsuccessful earlier attempt:\n\n"
            "The answer is 3, not 4.\n\nCorrectly solve the original question.");
  EXPECT_EQ(RepromptText("1+2=", std::nullopt, std::nullopt, t), "1+2=");
}

TEST(RepromptTest, SubstitutionIsOnePassAndKeepsUnknownBraces) {
  RepromptTemplate t{"[{prompt}|{solution}|{feedback}|{other}]", "S:{successful_previous_attempt}", "F:{feedback_raw}"};
  // A response that itself contains a placeholder is not expanded again.
  EXPECT_EQ(RepromptText("p{", std::string("{prompt}"), std::string("f"), t), "[p{|S:{prompt}|F:f|{other}]");
}

TEST(RepromptTest, DemonstrationIsTheFirstOtherSuccess) {
  RepromptOptions o;
  std::vector<double> rewards = {1, 0, 1, 0};
  EXPECT_EQ(PickDemonstration(rewards, 0, o), 2);
  EXPECT_EQ(PickDemonstration(rewards, 1, o), 0);
  EXPECT_EQ(PickDemonstration(rewards, 2, o), 0);
  o.exclude_self = false;
  EXPECT_EQ(PickDemonstration(rewards, 0, o), 0);
  std::vector<double> none = {0, 0.4};
  EXPECT_EQ(PickDemonstration(none, 0, RepromptOptions{}), std::nullopt);
}

TEST(RepromptTest, GroupContextsFollowTheReferenceRules) {
  ByteTokenizer tok;
  RepromptOptions o;
  o.text = RepromptTemplate{"{prompt}{solution}{feedback}", "|S:{successful_previous_attempt}", "|F:{feedback_raw}"};
  std::vector<std::string> responses = {"4", "3", "5"};
  std::vector<double> rewards = {0, 1, 0};
  std::vector<std::string> corrections = {"c0", "", "c2"};
  auto c = BuildTeacherContexts(tok, "1+2=", responses, rewards, corrections, o);
  ASSERT_EQ(c.size(), 3u);
  // Wrong responses get the successful sibling; feedback only without one.
  EXPECT_EQ(c[0].text, "1+2=|S:3");
  EXPECT_EQ(c[0].demonstration, 1);
  EXPECT_FALSE(c[0].used_feedback);
  EXPECT_TRUE(c[0].distill);
  // The only success has no other demonstration and no feedback: not distilled.
  EXPECT_EQ(c[1].text, "1+2=");
  EXPECT_FALSE(c[1].distill);
  EXPECT_EQ(c[1].prompt_ids, tok.EncodePrompt("1+2="));
  // With feedback allowed alongside the solution, both appear.
  o.feedback_only_without_solution = false;
  c = BuildTeacherContexts(tok, "1+2=", responses, rewards, corrections, o);
  EXPECT_EQ(c[2].text, "1+2=|S:3|F:c2");
  // No success in the group: the correction alone.
  o.feedback_only_without_solution = true;
  c = BuildTeacherContexts(tok, "1+2=", responses, {0, 0, 0}, {"c0", "c1", "c2"}, o);
  EXPECT_EQ(c[1].text, "1+2=|F:c1");
  EXPECT_TRUE(c[1].used_feedback);
  EXPECT_TRUE(c[1].distill);
  // Feedback switched off and no success: nothing to distil.
  o.include_feedback = false;
  c = BuildTeacherContexts(tok, "1+2=", responses, {0, 0, 0}, {"c0", "c1", "c2"}, o);
  EXPECT_FALSE(c[0].distill);
  EXPECT_EQ(c[0].text, "1+2=");
}

}  // namespace
}  // namespace kp::runtime
