// The SDPO trainer's view of a batch against the rollout's: the
// log-probabilities the trainer computes from right-padded (context,
// response) rows must be the ones the rollout sampled with, or the
// importance ratios of docs/sdpo.md §5 would be off from the first step.
// Also the loop's option parsing, whose messages name the flag.
#include "runtime/sdpo_loop.h"

#include <gtest/gtest.h>

#include "runtime/rollout.h"
#include "runtime/sdpo_loop_internal.h"
#include "runtime/test_util.h"

namespace kp::runtime {
namespace {

TEST(SdpoLoopTest, TrainerLogProbsAreTheRolloutsOnPaddedRowsOfMixedLengths) {
  ModelSpec spec = TinyKimiSpec();
  spec.vocab = ByteTokenizer::kVocabSize + 40;  // ids past the tokenizer's exist and are masked
  ModelOptions opts;
  opts.kda_chunk = 4;
  auto built = BuildModel(spec, opts);
  ASSERT_TRUE(built.ok()) << built.status().message();
  std::shared_ptr<StageModelImpl> model = *built;
  const ByteTokenizer tok;
  const std::vector<std::vector<std::int64_t>> prompts = {tok.EncodePrompt("7+5="), tok.EncodePrompt("12+345="),
                                                          tok.EncodePrompt("3+4=")};
  SamplingOptions sampling;
  sampling.temperature = 0.7;
  sampling.samples = 2;
  sampling.max_new_tokens = 5;
  sampling.vocab_limit = ByteTokenizer::kVocabSize;
  RolloutEngine engine(model);
  auto samples = engine.Generate(prompts, sampling, 11);
  ASSERT_TRUE(samples.ok()) << samples.status().message();
  std::vector<std::vector<std::int64_t>> contexts, responses;
  for (const Sample& s : *samples) {
    contexts.push_back(prompts[s.prompt]);
    responses.push_back(s.response);
  }
  torch::NoGradGuard no_grad;
  const torch::Tensor logits = ResponseLogits(*model, contexts, responses, torch::kCPU) / sampling.temperature;
  ASSERT_EQ(logits.size(0), 6);
  for (std::size_t i = 0; i < samples->size(); ++i) {
    const Sample& s = (*samples)[i];
    ASSERT_FALSE(s.response.empty());
    for (std::size_t t = 0; t < s.response.size(); ++t) {
      const double trainer = TokenLogProbs(logits[i][t], torch::tensor(s.response[t])).item<double>();
      EXPECT_NEAR(trainer, s.logprobs[t], 1e-5) << "sample " << i << " token " << t;
    }
    // Masked ids carry no probability.
    EXPECT_TRUE(torch::isinf(logits[i][0].slice(0, ByteTokenizer::kVocabSize)).all().item<bool>());
  }
}

TEST(SdpoLoopTest, OptionsNameTheirFlag) {
  EXPECT_EQ(ParseLossMode("k1-opd").value(), LossMode::kK1Opd);
  EXPECT_NE(ParseLossMode("ppo").status().message().find("--loss"), std::string::npos);
  EXPECT_NE(ParsePlacement("remote").status().message().find("--placement"), std::string::npos);
  EXPECT_NE(ParseRepromptTemplate("short").status().message().find("--reprompt"), std::string::npos);
  SdpoConfig c;
  c.train.model = TinyKimiSpec();
  c.train.model.vocab = 300;
  EXPECT_TRUE(ValidateSdpoConfig(c).ok()) << ValidateSdpoConfig(c).message();
  c.placement = Placement::kSplit;
  c.rollout_ranks = 3;
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--prompts: 8 do not split evenly over 3"), std::string::npos);
  c.rollout_ranks = 2;
  c.sampling.temperature = 0;
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--temperature"), std::string::npos);
  c.sampling.temperature = 1;
  c.train.model.vocab = 128;
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--vocab"), std::string::npos);
}

}  // namespace
}  // namespace kp::runtime
