// The SDPO loop's configuration: parsing the named choices, validating a
// whole SdpoConfig, the actor's stages and ranks, and the JSON a run records.
#include "runtime/sdpo/sdpo_loop.h"

#include <limits>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include "runtime/sdpo/sdpo_loop_internal.h"
#include "runtime/sdpo/sdpo_loss.h"
#include "schedules/schedule_generators.h"
#include "specs/json_fields.h"
#include "specs/presets.h"
#include "specs/schedule_kind.h"

namespace kp::runtime {

Result<LossMode> ParseLossMode(std::string_view name) {
  if (name == "sdpo") return LossMode::kSdpo;
  if (name == "grpo") return LossMode::kGrpo;
  if (name == "k1-opd") return LossMode::kK1Opd;
  return Status::InvalidArgument("--loss: unknown loss '" + std::string(name) + "' (allowed: sdpo, grpo, k1-opd)");
}

const char* LossModeName(LossMode m) {
  switch (m) {
    case LossMode::kSdpo: return "sdpo";
    case LossMode::kGrpo: return "grpo";
    case LossMode::kK1Opd: return "k1-opd";
  }
  return "?";
}

Result<Placement> ParsePlacement(std::string_view name) {
  if (name == "colocated") return Placement::kColocated;
  if (name == "split") return Placement::kSplit;
  return Status::InvalidArgument("--placement: unknown placement '" + std::string(name) +
                                 "' (allowed: colocated, split)");
}

const char* PlacementName(Placement p) { return p == Placement::kSplit ? "split" : "colocated"; }

Result<RepromptTemplate> ParseRepromptTemplate(std::string_view name) {
  if (name == "reference") return RepromptTemplate{};
  if (name == "compact") {
    RepromptTemplate t;
    t.reprompt = "{prompt}{solution}{feedback}\nSolve:";
    t.solution = "\nCorrect: {successful_previous_attempt}";
    t.feedback = "\nFeedback: {feedback_raw}";
    return t;
  }
  return Status::InvalidArgument("--reprompt: unknown template '" + std::string(name) +
                                 "' (allowed: reference, compact)");
}

namespace {

// The actor's pipeline is checked here, before any rank starts, with the
// schedule generator the ranks will use.
Status ValidateActorPipeline(const SdpoConfig& c) {
  const SdpoConfig::ActorPipeline& a = c.actor;
  if (a.pp < 1) return Status::InvalidArgument("--pp: must be at least 1");
  if (a.vp < 1) return Status::InvalidArgument("--vp: must be at least 1");
  if (c.placement == Placement::kColocated && (a.pp > 1 || a.vp > 1))
    return Status::InvalidArgument("--pp: the colocated placement runs the actor in one process (pp 1, vp 1); "
                                   "take --placement split for a pipeline");
  const int rows = c.prompts * c.sampling.samples;
  if (a.microbatches < 1 || rows % a.microbatches != 0)
    return Status::InvalidArgument("--microbatches: " + std::to_string(a.microbatches) +
                                   " must be positive and divide the " + std::to_string(rows) +
                                   " responses of a step (--prompts x --samples)");
  if (c.sft_steps > 0 && c.sft_batch % a.microbatches != 0)
    return Status::InvalidArgument("--sft-batch: " + std::to_string(c.sft_batch) +
                                   " warm-start examples do not split into --microbatches " +
                                   std::to_string(a.microbatches));
  return ActorStagesOf(c).status();
}

}  // namespace

Result<ActorStages> ActorStagesOf(const SdpoConfig& c) {
  const SdpoConfig::ActorPipeline& a = c.actor;
  KP_ASSIGN_OR_RETURN(const ScheduleKind kind, ParseSchedule(a.schedule));
  KP_ASSIGN_OR_RETURN(const PipelineSchedule schedule,
                      GenerateSchedule(kind, a.pp, ScheduleTakesVp(kind) ? a.vp : 1, a.microbatches));
  Result<StageSplit> split = EvenSplit(c.train.model.layers, schedule.num_stages);
  if (!split.ok())
    return Status::InvalidArgument("--pp: " + std::to_string(a.pp) + " ranks x " +
                                   std::to_string(schedule.StagesPerRank()) + " stages do not split " +
                                   std::to_string(c.train.model.layers) + " layers: " + split.status().message());
  return ActorStages{schedule.stage_to_rank, *split};
}

Status ValidateSdpoConfig(const SdpoConfig& c) {
  KP_RETURN_IF_ERROR(ValidateTrainConfig(c.train));
  KP_RETURN_IF_ERROR(ValidateSamplingOptions(c.sampling));
  KP_RETURN_IF_ERROR(ValidateSdpoOptions(c.distill, c.clip));
  if (c.train.model.vocab < ByteTokenizer::kVocabSize)
    return Status::InvalidArgument("--vocab: the loop's byte tokenizer needs at least " +
                                   std::to_string(ByteTokenizer::kVocabSize) + " ids, got " +
                                   std::to_string(c.train.model.vocab));
  if (c.sampling.temperature <= 0)
    return Status::InvalidArgument("--temperature: the loop trains on sampled responses and needs > 0");
  if (c.prompts < 1) return Status::InvalidArgument("--prompts: must be at least 1");
  if (!(c.teacher_ema >= 0 && c.teacher_ema <= 1)) return Status::InvalidArgument("--teacher-ema: must be in [0, 1]");
  if (c.sft_steps < 0) return Status::InvalidArgument("--sft-steps: must be >= 0");
  if (c.sft_batch < 1) return Status::InvalidArgument("--sft-batch: must be at least 1");
  if (!(c.sft_lr > 0)) return Status::InvalidArgument("--sft-lr: must be positive");
  if (!(c.sft_context_share >= 0 && c.sft_context_share <= 1))
    return Status::InvalidArgument("--sft-context-share: must be in [0, 1]");
  if (c.sync_bucket_bytes < 1) return Status::InvalidArgument("--sync-bucket-mb: must be positive");
  if (c.rollout_int4_experts) {
    const MoeShape& moe = c.train.model.moe;
    const std::int64_t in = moe.latent_dim > 0 ? moe.latent_dim : c.train.model.hidden;
    if (moe.num_experts == 0)
      return Status::InvalidArgument("--rollout-experts: int4 needs routed experts; " + c.train.model.name + " has none");
    if (in % 32 != 0 || moe.expert_ffn % 32 != 0)
      return Status::InvalidArgument("--rollout-experts: int4 groups of 32 need expert widths that are multiples of 32, "
                                     "got " + std::to_string(in) + " and " + std::to_string(moe.expert_ffn));
  }
  KP_RETURN_IF_ERROR(ValidateActorPipeline(c));
  if (c.placement == Placement::kSplit) {
    if (c.rollout_ranks < 1) return Status::InvalidArgument("--rollout-ranks: must be at least 1");
    if (c.prompts % c.rollout_ranks != 0)
      return Status::InvalidArgument("--prompts: " + std::to_string(c.prompts) + " do not split evenly over " +
                                     std::to_string(c.rollout_ranks) + " rollout ranks");
  }
  return Status::Ok();
}

Status CheckTaskContexts(const SdpoConfig& c, const FileSystem& fs) {
  if (ParseTaskFamily(c.task).ok()) return Status::Ok();
  KP_ASSIGN_OR_RETURN(const std::unique_ptr<TaskFile> file, TaskFile::Open(fs, c.task));
  const ByteTokenizer tokenizer;
  const int longest_response = c.sampling.max_new_tokens;
  const std::string response(static_cast<std::size_t>(longest_response), 'x');
  for (std::int64_t i = 0; i < file->size(); ++i) {
    const Task task = file->At(i);
    // The teacher's context at its longest: a sibling's response of full
    // length as the demonstration, and the verifier's correction of one.
    const Verdict v = Verify(task, response);
    const std::optional<std::string> correction =
        v.correction.empty() ? std::nullopt : std::optional<std::string>(v.correction);
    const std::size_t context =
        tokenizer.EncodePrompt(RepromptText(task.prompt, response, correction, c.reprompt.text)).size() +
        static_cast<std::size_t>(longest_response);
    if (context > static_cast<std::size_t>(c.max_context))
      return Status::InvalidArgument("--task: " + c.task + ": task " + std::to_string(i + 1) + " (a prompt of " +
                                     std::to_string(task.prompt.size()) + " bytes) can make a teacher context and "
                                     "response of " + std::to_string(context) + " tokens, more than --max-context " +
                                     std::to_string(c.max_context) + "; shorten the prompt or raise --max-context");
  }
  return Status::Ok();
}

SplitRanks SplitRanksOf(const SdpoConfig& c) {
  SplitRanks r;
  r.actor = c.actor.pp;
  r.teacher = c.loss == LossMode::kGrpo ? -1 : r.actor;
  r.first_rollout = r.actor + (r.teacher >= 0 ? 1 : 0);
  r.world = r.first_rollout + c.rollout_ranks;
  return r;
}

std::string SdpoConfigJson(const SdpoConfig& c) {
  nlohmann::ordered_json j = nlohmann::ordered_json::parse(TrainConfigJson(c.train));
  j["task"] = c.task;
  j["min_digits"] = c.task_options.min_digits;
  j["max_digits"] = c.task_options.max_digits;
  j["prompts"] = c.prompts;
  j["max_context"] = c.max_context;
  j["samples"] = c.sampling.samples;
  j["temperature"] = c.sampling.temperature;
  j["top_p"] = c.sampling.top_p;
  j["max_new_tokens"] = c.sampling.max_new_tokens;
  j["loss"] = LossModeName(c.loss);
  j["top_k"] = c.distill.top_k;
  j["alpha"] = c.distill.alpha;
  j["is_clip"] = c.distill.is_clip;
  j["teacher_ema"] = c.teacher_ema;
  j["sft_steps"] = c.sft_steps;
  j["sft_batch"] = c.sft_batch;
  j["sft_lr"] = c.sft_lr;
  j["sft_context_share"] = c.sft_context_share;
  j["placement"] = PlacementName(c.placement);
  j["rollout_ranks"] = c.rollout_ranks;
  j["pp"] = c.actor.pp;
  j["vp"] = c.actor.vp;
  j["microbatches"] = c.actor.microbatches;
  j["schedule"] = c.actor.schedule;
  j["attnres_cache"] = c.actor.attnres_cache;
  j["sync_bucket_bytes"] = c.sync_bucket_bytes;
  if (c.rollout_int4_experts) j["rollout_experts"] = "int4";  // written only when set: older records read alike
  j["sync"] = c.train.lora.enabled() ? "lora" : "full";
  j["clip_ratio"] = c.clip.low;
  j["reprompt"] = {{"reprompt", c.reprompt.text.reprompt},
                   {"solution", c.reprompt.text.solution},
                   {"feedback", c.reprompt.text.feedback}};
  return j.dump();
}

namespace {

constexpr int kMaxInt = std::numeric_limits<int>::max();

Status ReadLoopFields(Fields& f, SdpoConfig* c) {
  KP_RETURN_IF_ERROR(f.String("task", &c->task));
  KP_RETURN_IF_ERROR(f.Int("min_digits", &c->task_options.min_digits, 1, 9));
  KP_RETURN_IF_ERROR(f.Int("max_digits", &c->task_options.max_digits, 1, 9));
  c->task_options.seed = c->train.seed;
  KP_RETURN_IF_ERROR(f.Int("prompts", &c->prompts, 1, kMaxInt));
  // Absent from configs recorded before it existed: the default.
  KP_RETURN_IF_ERROR(f.Int("max_context", &c->max_context, 1, kMaxInt, /*required=*/false));
  KP_RETURN_IF_ERROR(f.Int("samples", &c->sampling.samples, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.Number("temperature", &c->sampling.temperature, 0, 1e6));
  KP_RETURN_IF_ERROR(f.Number("top_p", &c->sampling.top_p, 0, 1));
  KP_RETURN_IF_ERROR(f.Int("max_new_tokens", &c->sampling.max_new_tokens, 1, kMaxInt));
  std::string name;
  KP_RETURN_IF_ERROR(f.String("loss", &name));
  KP_ASSIGN_OR_RETURN(c->loss, ParseLossMode(name));
  KP_RETURN_IF_ERROR(f.Int("top_k", &c->distill.top_k, 0, kMaxInt));
  KP_RETURN_IF_ERROR(f.Number("alpha", &c->distill.alpha, 0, 1));
  KP_RETURN_IF_ERROR(f.Number("is_clip", &c->distill.is_clip, 0, 1e6));
  KP_RETURN_IF_ERROR(f.Number("clip_ratio", &c->clip.low, 0, 1));
  c->clip.high = c->clip.low;
  KP_RETURN_IF_ERROR(f.Number("teacher_ema", &c->teacher_ema, 0, 1));
  KP_RETURN_IF_ERROR(f.Int("sft_steps", &c->sft_steps, 0, kMaxInt));
  KP_RETURN_IF_ERROR(f.Int("sft_batch", &c->sft_batch, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.Number("sft_lr", &c->sft_lr, 0, 1e6));
  KP_RETURN_IF_ERROR(f.Number("sft_context_share", &c->sft_context_share, 0, 1));
  KP_RETURN_IF_ERROR(f.String("placement", &name));
  KP_ASSIGN_OR_RETURN(c->placement, ParsePlacement(name));
  KP_RETURN_IF_ERROR(f.Int("rollout_ranks", &c->rollout_ranks, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.Int("pp", &c->actor.pp, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.Int("vp", &c->actor.vp, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.Int("microbatches", &c->actor.microbatches, 1, kMaxInt));
  KP_RETURN_IF_ERROR(f.String("schedule", &c->actor.schedule));
  KP_RETURN_IF_ERROR(f.Bool("attnres_cache", &c->actor.attnres_cache));
  KP_RETURN_IF_ERROR(
      f.Int("sync_bucket_bytes", &c->sync_bucket_bytes, 1, std::numeric_limits<std::int64_t>::max()));
  std::string rollout_experts = "same";
  KP_RETURN_IF_ERROR(f.String("rollout_experts", &rollout_experts, /*required=*/false));
  if (rollout_experts != "same" && rollout_experts != "int4")
    return Status::InvalidArgument(f.Name("rollout_experts") + ": must be same or int4, got \"" + rollout_experts + "\"");
  c->rollout_int4_experts = rollout_experts == "int4";
  KP_RETURN_IF_ERROR(f.String("sync", &name));
  if (name != (c->train.lora.enabled() ? "lora" : "full"))
    return Status::InvalidArgument(f.Name("sync") + ": \"" + name + "\" does not match lora.rank " +
                                   std::to_string(c->train.lora.rank));
  KP_ASSIGN_OR_RETURN(const nlohmann::json* reprompt, f.Object("reprompt", /*required=*/true));
  Fields r(*reprompt, f.Name("reprompt"));
  KP_RETURN_IF_ERROR(r.String("reprompt", &c->reprompt.text.reprompt));
  KP_RETURN_IF_ERROR(r.String("solution", &c->reprompt.text.solution));
  KP_RETURN_IF_ERROR(r.String("feedback", &c->reprompt.text.feedback));
  return r.NoUnknownKeys();
}

}  // namespace

Result<SdpoConfig> SdpoConfigFromJson(const std::string& json, const PresetCatalog& catalog) {
  Result<nlohmann::json> j = ParseObject(json);
  if (!j.ok()) return j.status().WithContext("config");
  Fields f(*j, "config");
  SdpoConfig c;
  KP_RETURN_IF_ERROR(ReadTrainConfig(f, catalog, &c.train));
  KP_RETURN_IF_ERROR(ReadLoopFields(f, &c));
  KP_RETURN_IF_ERROR(f.NoUnknownKeys());
  KP_RETURN_IF_ERROR(ValidateSdpoConfig(c));
  return c;
}

}  // namespace kp::runtime
