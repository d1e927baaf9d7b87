// The SDPO trainer's view of a batch against the rollout's: the
// log-probabilities the trainer computes from right-padded (context,
// response) rows must be the ones the rollout sampled with, or the
// importance ratios of docs/sdpo.md §5 would be off from the first step.
// The pipelined actor's step against a single process computing the
// batch-level losses of sdpo_loss.h directly. Also the loop's option
// parsing, whose messages name the flag.
#include "runtime/sdpo/sdpo_loop.h"

#include <map>
#include <mutex>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "runtime/comm/in_process_communicator.h"
#include "runtime/train/pipeline_test_util.h"
#include "runtime/sdpo/rollout.h"
#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/sdpo_loss.h"
#include "runtime/model/test_util.h"
#include "runtime/train/trainer_internal.h"
#include "specs/presets.h"

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

// ---- The pipelined actor against the single-process step. ----

SdpoConfig ActorTestConfig(LossMode loss, int pp, int microbatches, int lora_rank) {
  SdpoConfig c;
  c.train.model = testing::DebugSpec(4);
  c.train.model.vocab = ByteTokenizer::kVocabSize + 4;  // ids past the tokenizer's are masked
  c.train.options.kda_chunk = 4;
  c.train.lr = 3e-3;
  c.train.warmup = 0;
  c.train.min_lr_ratio = 1.0;
  c.train.grad_clip = 1e-4;  // active: the clip is part of the step
  c.train.bias_update_rate = 0;
  c.train.steps = 4;
  c.train.lora.rank = lora_rank;
  c.train.lora.alpha = 2.0 * lora_rank;
  c.task = "addition";
  c.prompts = 2;
  c.sampling.samples = 4;
  c.sampling.temperature = 0.8;
  c.loss = loss;
  c.distill.top_k = 20;
  c.placement = pp > 1 ? Placement::kSplit : Placement::kColocated;
  c.actor.pp = pp;
  c.actor.microbatches = microbatches;
  c.sft_batch = 8;
  return c;
}

// Per group, one correct response (the answer and EOS), the others 1 to 4
// ids (some ending in EOS, some spelling digits), with made-up sampling
// log-probabilities.
RolloutBatch SyntheticBatch(const SdpoConfig& c) {
  RealFileSystem fs;
  const auto tasks = MakeTaskSource(fs, c.task, c.task_options).value();
  torch::manual_seed(5);
  RolloutBatch b;
  const int n = c.prompts * c.sampling.samples;
  for (int i = 0; i < n; ++i) {
    Sample s;
    s.prompt = i / c.sampling.samples;
    if (i % c.sampling.samples == 1) {
      s.response = ByteTokenizer().Encode(tasks->At(s.prompt).answer);
      s.response.push_back(ByteTokenizer::kEos);
    } else {
      const int len = 1 + i % 4;
      for (int t = 0; t < len; ++t)
        s.response.push_back(t + 1 == len && i % 2 == 0 ? ByteTokenizer::kEos : '0' + (i * 7 + t * 3) % 10);
    }
    for (std::size_t t = 0; t < s.response.size(); ++t)
      s.logprobs.push_back(-0.5f - 2.5f * torch::rand({1}).item<float>());
    b.samples.push_back(std::move(s));
  }
  return b;
}

struct StepOutcome {
  double loss = 0, grad_norm = 0;
  std::map<std::string, torch::Tensor> weights;  // after the step, by name
};

// The reference: the whole model, the batch-level loss of sdpo_loss.h on
// ResponseLogits, one backward, torch's clip_grad_norm_ and AdamW.
StepOutcome ReferenceStep(const SdpoConfig& c, const Feedback& f, const RolloutBatch& batch,
                          const torch::Tensor& teacher) {
  auto model = BuildPolicy(c, torch::kCPU).value();
  if (c.train.lora.enabled()) model->EnableLora(c.train.lora, c.train.seed);
  model->train();
  TrainConfig loop = c.train;
  loop.batch = c.prompts * c.sampling.samples;
  torch::optim::AdamW opt(ParamGroups(model->TrainableParameters(), loop), torch::optim::AdamWOptions(loop.lr));
  const torch::Tensor logits = ResponseLogits(*model, f.prompts, f.responses, torch::kCPU) / c.sampling.temperature;
  auto [ids, mask] = PadResponses(f.responses, torch::kCPU);
  torch::Tensor old = torch::zeros_like(mask);
  for (std::size_t i = 0; i < batch.samples.size(); ++i)
    for (std::size_t t = 0; t < batch.samples[i].logprobs.size(); ++t) old[i][t] = batch.samples[i].logprobs[t];
  const torch::Tensor logp = TokenLogProbs(logits, ids);
  const torch::Tensor distill_mask = mask * torch::tensor(f.distill_rows).unsqueeze(1);
  torch::Tensor loss;
  if (c.loss == LossMode::kSdpo) loss = SdpoLoss(logits, teacher, logp, old, distill_mask, c.distill);
  if (c.loss == LossMode::kK1Opd) loss = K1OpdLoss(logp, old, TokenLogProbs(teacher, ids), distill_mask, c.clip);
  if (c.loss == LossMode::kGrpo) {
    const torch::Tensor adv = GrpoAdvantages(torch::tensor(f.rewards, torch::kDouble), c.sampling.samples);
    loss = MaskedTokenMean(ClippedPolicyLoss(logp, old, adv.to(torch::kFloat).unsqueeze(1), c.clip), mask);
  }
  loss.backward();
  StepOutcome out;
  out.loss = loss.item<double>();
  out.grad_norm = torch::nn::utils::clip_grad_norm_(model->TrainableParameters(), c.train.grad_clip);
  opt.step();
  for (const NamedTensor& t : SyncedTensors(*model, SyncMode::kFull)) out.weights[t.name] = t.tensor.detach().clone();
  return out;
}

// The actor on c.actor.pp in-process ranks: BeginLoop, then one Learn.
StepOutcome ActorStep(const SdpoConfig& c, const RolloutBatch& batch, const torch::Tensor& teacher) {
  StepOutcome out;
  std::mutex mu;
  RealFileSystem fs;
  const auto statuses = RunRanks(c.actor.pp, [&](Communicator& comm) -> Status {
    KP_ASSIGN_OR_RETURN(auto actor, ActorRank::Create(c, comm, fs));
    KP_RETURN_IF_ERROR(actor->BeginLoop());
    const Feedback f = RunFeedback(c, actor->tasks(), batch);
    KP_ASSIGN_OR_RETURN(LoopStepMetrics m, actor->Learn(batch, f, teacher));
    std::lock_guard<std::mutex> lock(mu);
    out.loss = m.train.loss;
    out.grad_norm = m.train.grad_norm;
    for (const NamedTensor& t : actor->Synced(SyncMode::kFull)) out.weights[t.name] = t.tensor.detach().clone();
    return Status::Ok();
  });
  for (const Status& s : statuses) EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

void ExpectActorMatchesReference(LossMode loss, int pp, int microbatches, int lora_rank) {
  const SdpoConfig c = ActorTestConfig(loss, pp, microbatches, lora_rank);
  ASSERT_TRUE(ValidateSdpoConfig(c).ok()) << ValidateSdpoConfig(c).message();
  const RolloutBatch batch = SyntheticBatch(c);
  RealFileSystem fs;
  const Feedback f = RunFeedback(c, *MakeTaskSource(fs, c.task, c.task_options).value(), batch);
  ASSERT_GT(std::accumulate(f.distill_rows.begin(), f.distill_rows.end(), 0.f), 0.f) << "nothing to distill";
  std::int64_t longest = 0;
  for (const auto& r : f.responses) longest = std::max<std::int64_t>(longest, r.size());
  const torch::Tensor teacher = torch::randn({8, longest, c.train.model.vocab}) * 2;
  const StepOutcome want = ReferenceStep(c, f, batch, teacher);
  const StepOutcome got = ActorStep(c, batch, teacher);
  EXPECT_NEAR(got.loss, want.loss, 1e-6 * std::abs(want.loss) + 1e-7);
  EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-5 * want.grad_norm);
  ASSERT_GT(want.grad_norm, c.train.grad_clip) << "the clip should be active";
  ASSERT_EQ(got.weights.size(), want.weights.size());
  double worst = 0;
  for (const auto& [name, w] : want.weights) {
    ASSERT_EQ(got.weights.count(name), 1u) << name;
    worst = std::max(worst, (got.weights.at(name) - w).abs().max().item<double>());
  }
  // An AdamW step moves a weight by about lr = 3e-3: 1e-6 is a thousandth of it.
  EXPECT_LE(worst, 1e-6);
}

TEST(SdpoActorTest, SdpoStepOnTwoPipelineRanksIsTheSingleProcessStep) {
  ExpectActorMatchesReference(LossMode::kSdpo, 2, 4, 0);
}
TEST(SdpoActorTest, OnePipelineRankIsTheSingleProcessStep) { ExpectActorMatchesReference(LossMode::kSdpo, 1, 1, 0); }
TEST(SdpoActorTest, GrpoStepOnTwoPipelineRanks) { ExpectActorMatchesReference(LossMode::kGrpo, 2, 2, 0); }
TEST(SdpoActorTest, K1OpdStepOnTwoPipelineRanks) { ExpectActorMatchesReference(LossMode::kK1Opd, 2, 8, 0); }
TEST(SdpoActorTest, LoraStepOnTwoPipelineRanksTrainsTheSameAdapters) {
  ExpectActorMatchesReference(LossMode::kSdpo, 2, 4, 4);
}

TEST(SdpoActorTest, MicroBatchSharesSumToTheTokenMean) {
  const SdpoConfig c = ActorTestConfig(LossMode::kSdpo, 1, 1, 0);
  const RolloutBatch batch = SyntheticBatch(c);
  RealFileSystem fs;
  const Feedback f = RunFeedback(c, *MakeTaskSource(fs, c.task, c.task_options).value(), batch);
  const ResponseRows rows = MakeResponseRows(f.prompts, f.responses, torch::kCPU);
  const torch::Tensor teacher = torch::randn({8, rows.where.size(1), c.train.model.vocab}, torch::kDouble);
  const ResponseObjective objective = LoopObjective(c, f, batch, teacher, torch::kCPU);
  const torch::Tensor logits = torch::randn({8, rows.input.size(1), c.train.model.vocab}, torch::kDouble);
  const torch::Tensor whole = MaskedTokenMean(objective.terms(PickResponseLogits(logits, rows.where), 0, 8),
                                              objective.mask.to(torch::kDouble));
  PipelineObjective shares(objective, rows.where, 4);
  double sum = 0;
  for (int m = 0; m < 4; ++m) sum += shares.Share(logits.narrow(0, 2 * m, 2), m).item<double>();
  EXPECT_NEAR(sum, whole.item<double>(), 1e-12);
  EXPECT_GT(std::abs(sum), 1e-3);
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
  c.train.model.vocab = 300;
  c.actor.pp = 2;
  c.sampling.samples = 8;
  c.actor.microbatches = 3;
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--microbatches: 3 must be positive and divide the 64 responses"),
            std::string::npos);
  c.actor.microbatches = 4;
  c.actor.schedule = "zb-v";
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--schedule"), std::string::npos);
  c.actor.schedule = "interleaved-1f1b";
  c.actor.vp = 2;
  EXPECT_TRUE(ValidateSdpoConfig(c).ok()) << ValidateSdpoConfig(c).message();
  c.placement = Placement::kColocated;
  EXPECT_NE(ValidateSdpoConfig(c).message().find("--pp: the colocated placement"), std::string::npos);
}

TEST(SdpoLoopTest, SplitRanksPlaceActorTeacherAndRollouts) {
  SdpoConfig c;
  c.actor.pp = 3;
  c.rollout_ranks = 2;
  const SplitRanks sdpo = SplitRanksOf(c);
  EXPECT_EQ(sdpo.actor, 3);
  EXPECT_EQ(sdpo.teacher, 3);
  EXPECT_EQ(sdpo.first_rollout, 4);
  EXPECT_EQ(sdpo.world, 6);
  c.loss = LossMode::kGrpo;  // no teacher
  const SplitRanks grpo = SplitRanksOf(c);
  EXPECT_EQ(grpo.teacher, -1);
  EXPECT_EQ(grpo.first_rollout, 3);
  EXPECT_EQ(grpo.world, 5);
}

// ---- The recorded configuration, read back (what the benchmarks run). ----

SdpoConfig RecordedConfig() {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  ScaleFlags scale;
  scale.layers = 3, scale.hidden = 32, scale.heads = 2, scale.experts = 4, scale.vocab = 260;
  SdpoConfig c;
  c.train.model = ScaleModel(*catalog.Model("kimi-k3-debug"), scale).value();
  c.train.options.dtype = DType::kBf16;
  c.train.options.kda_chunk = 8;
  c.train.steps = 7;
  c.train.lr = 2.5e-3;
  c.train.min_lr_ratio = 1.0;
  c.train.deterministic = false;
  c.train.seed = 12345;
  c.train.lora.rank = 4;
  c.train.lora.alpha = 8;
  c.task = "addition";
  c.task_options.max_digits = 2;
  c.prompts = 4;
  c.sampling.samples = 2;
  c.sampling.temperature = 0.7;
  c.loss = LossMode::kGrpo;
  c.clip.low = c.clip.high = 0.3;
  c.reprompt.text = ParseRepromptTemplate("compact").value();
  c.sft_steps = 9;
  c.placement = Placement::kSplit;
  c.rollout_ranks = 2;
  c.actor.pp = 2;
  c.actor.microbatches = 2;
  c.sync_bucket_bytes = 1 << 20;
  return c;
}

TEST(SdpoConfigJsonTest, ReadsBackWhatTheRunRecordsFieldForField) {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  const SdpoConfig c = RecordedConfig();
  ASSERT_TRUE(ValidateSdpoConfig(c).ok()) << ValidateSdpoConfig(c).message();
  const std::string recorded = SdpoConfigJson(c);
  Result<SdpoConfig> back = SdpoConfigFromJson(recorded, catalog);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(SdpoConfigJson(*back), recorded);
  EXPECT_EQ(back->train.model.hidden, 32);
  EXPECT_EQ(back->train.model.attention, c.train.model.attention);
  EXPECT_EQ(back->train.lora.rank, 4);
  EXPECT_EQ(back->train.seed, 12345u);
  EXPECT_EQ(back->task_options.seed, 12345u);  // as the command seeds the task
  EXPECT_EQ(back->clip.high, 0.3);
  EXPECT_EQ(back->reprompt.text.reprompt, c.reprompt.text.reprompt);
  EXPECT_FALSE(back->train.deterministic);
}

// --rollout-experts int4 is recorded (only when on) and read back; it needs
// expert widths of whole INT4 groups: kimi-k3-debug's LatentMoE width 16 is
// not, a scaled kimi-k2.6's 224 and 64 are.
TEST(SdpoConfigJsonTest, TheInt4RolloutIsRecordedAndCheckedAgainstTheExpertWidths) {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  SdpoConfig c = RecordedConfig();
  EXPECT_EQ(SdpoConfigJson(c).find("rollout_experts"), std::string::npos);
  c.rollout_int4_experts = true;
  EXPECT_EQ(ValidateSdpoConfig(c).message(),
            "--rollout-experts: int4 groups of 32 need expert widths that are multiples of 32, got 16 and 32");
  ScaleFlags k26;
  k26.layers = 3, k26.hidden = 224, k26.heads = 2, k26.experts = 4, k26.vocab = 260;
  c.train.model = ScaleModel(*catalog.Model("kimi-k2.6"), k26).value();
  ASSERT_TRUE(ValidateSdpoConfig(c).ok()) << ValidateSdpoConfig(c).message();
  const std::string recorded = SdpoConfigJson(c);
  EXPECT_NE(recorded.find("\"rollout_experts\":\"int4\""), std::string::npos);
  Result<SdpoConfig> back = SdpoConfigFromJson(recorded, catalog);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->rollout_int4_experts);
  EXPECT_EQ(SdpoConfigJson(*back), recorded);
}

TEST(SdpoConfigJsonTest, Fp8ExpertsAreRecordedAndReadBack) {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  SdpoConfig c = RecordedConfig();
  EXPECT_EQ(SdpoConfigJson(c).find("fp8_experts"), std::string::npos);
  c.train.options.fp8_experts = true;
  const std::string recorded = SdpoConfigJson(c);
  EXPECT_NE(recorded.find("\"fp8_experts\":\"blockwise\""), std::string::npos);
  Result<SdpoConfig> back = SdpoConfigFromJson(recorded, catalog);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_TRUE(back->train.options.fp8_experts);
  nlohmann::json bad = nlohmann::json::parse(recorded);
  bad["fp8_experts"] = "tensorwise";
  const Status s = SdpoConfigFromJson(bad.dump(), catalog).status();
  EXPECT_NE(s.message().find("fp8_experts: must be blockwise, got \"tensorwise\""), std::string::npos) << s.message();
}

TEST(SdpoConfigJsonTest, RefusesAFileThatIsNotARecordedConfigNamingTheField) {
  RealFileSystem fs;
  const PresetCatalog catalog(fs, DefaultPresetDir());
  const nlohmann::json good = nlohmann::json::parse(SdpoConfigJson(RecordedConfig()));
  auto refused = [&](nlohmann::json j, const std::string& what) {
    const Status s = SdpoConfigFromJson(j.dump(), catalog).status();
    EXPECT_EQ(s.ExitCode(), 2) << what;
    EXPECT_NE(s.message().find(what), std::string::npos) << s.message();
  };
  nlohmann::json j = good;
  j["extra"] = 1;
  refused(j, "config.extra: unknown field");
  j = good;
  j.erase("sft_lr");
  refused(j, "config.sft_lr: required field is missing");
  j = good;
  j["lr"] = "fast";
  refused(j, "config.lr: must be a number");
  j = good;
  j["head_dim"] = 7;  // no scaling of the preset gives it
  refused(j, "head_dim: 7 vs");
  j = good;
  j["model_name"] = "no-such-model";
  refused(j, "no-such-model");
  j = good;
  j["sync"] = "full";  // the LoRA rank says adapters
  refused(j, "config.sync");
  j = good;
  j["prompts"] = 3;  // two rollout ranks: the command's own check
  refused(j, "--prompts");
  EXPECT_EQ(SdpoConfigFromJson("[1]", catalog).status().ExitCode(), 2);
}

}  // namespace
}  // namespace kp::runtime
