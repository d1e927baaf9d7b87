#include "planner/plan_request_builder.h"

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "planner/test_util.h"

namespace kp {
namespace {

// The seed's h200-full topology (presets/topologies/h200-full.json).
TopologySpec H200Full() {
  TopologySpec t;
  t.name = "h200-full";
  t.model = "kimi-k2.6";
  t.gpu = "h200";
  t.nodes = 16;
  t.gpus_per_node = 8;
  t.mode = "full";
  t.actor_tp = 8; t.actor_pp = 2; t.actor_ep = 8; t.actor_etp = 1; t.actor_cp = 1;
  t.rollout_tp = 8; t.rollout_ep = 8; t.rollout_n = 1;
  t.prompt_length = 2048;
  t.response_length = 2048;
  return t;
}

RequestInputs Kimi() {
  RequestInputs in;
  in.model = testing::Model("kimi-k2.6");
  in.gpu = testing::Gpu("h200");
  return in;
}

RequestInputs FromPreset(const TopologySpec& t) {
  RequestInputs in = Kimi();
  in.topology = t;
  in.topology_source = "--preset " + t.name + ": ";
  return in;
}

RequestInputs DenseGpt() {
  RequestInputs in;
  in.model = testing::Gpt(4, 1024, 16, 32000);
  in.gpu = testing::Gpu("h200");
  return in;
}

// Four H200 nodes, tp 4 x pp 2: a layout with dp 4.
RequestChoices FourNodes() {
  RequestChoices c;
  c.nodes = 4;
  c.tp = 4;
  c.pp = 2;
  return c;
}

PlanRequest Build(const RequestChoices& c, const RequestInputs& in = Kimi()) {
  Result<PlanRequest> r = BuildPlanRequest(c, in);
  EXPECT_TRUE(r.ok()) << r.status().message();
  return r.ok() ? *r : PlanRequest{};
}

std::string Refusal(const RequestChoices& c, const RequestInputs& in = Kimi()) {
  Result<PlanRequest> r = BuildPlanRequest(c, in);
  if (r.ok()) return "(built)";
  EXPECT_EQ(r.status().code(), Status::Code::kInvalidArgument);
  return r.status().message();
}

TEST(PlanRequestBuilderTest, TheTopologyIsTheRequest) {
  const PlanRequest r = Build({}, FromPreset(H200Full()));
  EXPECT_EQ(r.model.name, "kimi-k2.6");
  EXPECT_EQ(r.gpu.name, "h200");
  EXPECT_EQ(r.nodes, 16);
  EXPECT_EQ(r.gpus_per_node, 8);
  EXPECT_EQ(r.mode, TrainMode::kFull);
  EXPECT_EQ(r.prompt_length, 2048);
  EXPECT_EQ(r.response_length, 2048);
  EXPECT_EQ(r.rollout_n, 1);
  // dp = 128 GPUs / (tp 8 x pp 2 x cp 1); rollout dp: ep 8 = tp 8, so 1.
  EXPECT_EQ(r.plan, (ParallelPlan{8, 2, 1, 8, 1, 1, 8, 8, 8, 1}));
  EXPECT_EQ(r.layer_split.kind, LayerSplitKind::kEven);
  EXPECT_EQ(r.schedule, ScheduleKind::k1F1B);
  EXPECT_FALSE(r.send_mode.has_value());
}

TEST(PlanRequestBuilderTest, FlagsOverrideTheTopology) {
  RequestChoices c;
  c.nodes = 4;
  c.tp = 4;
  c.prompt_length = 1024;
  c.response_length = 512;
  c.rollout_n = 4;
  const PlanRequest r = Build(c, FromPreset(H200Full()));
  EXPECT_EQ(r.nodes, 4);
  EXPECT_EQ(r.plan.tp, 4);
  EXPECT_EQ(r.plan.pp, 2);  // the topology's
  EXPECT_EQ(r.plan.dp, 4);  // 32 GPUs / (4 x 2)
  EXPECT_EQ(r.prompt_length, 1024);
  EXPECT_EQ(r.response_length, 512);
  EXPECT_EQ(r.rollout_n, 4);
}

TEST(PlanRequestBuilderTest, ValueSourcesNameTheTopologyFieldNoFlagReplaced) {
  RequestChoices c;
  c.tp = 4;
  c.nodes = 4;
  const PlanRequest r = Build(c, FromPreset(H200Full()));
  EXPECT_EQ(r.value_sources.count("--tp"), 0u);
  EXPECT_EQ(r.value_sources.count("--nodes"), 0u);
  EXPECT_EQ(r.value_sources.at("--pp"), "--preset h200-full: actor.pp");
  EXPECT_EQ(r.value_sources.at("--gpus-per-node"), "--preset h200-full: gpus_per_node");
  EXPECT_EQ(r.value_sources.at("--rollout-ep"), "--preset h200-full: rollout.ep");
  EXPECT_EQ(r.value_sources.at("--prompt-length"), "--preset h200-full: lengths.prompt");
  EXPECT_EQ(r.value_sources.size(), 13u);

  EXPECT_TRUE(Build(FourNodes()).value_sources.empty());  // no topology, no sources
}

TEST(PlanRequestBuilderTest, AnErrorNamesTheTopologyFieldThatGaveTheValue) {
  TopologySpec t = H200Full();
  t.prompt_length = 0;
  EXPECT_EQ(Refusal({}, FromPreset(t)), "--preset h200-full: lengths.prompt: must be a positive integer, got 0");

  t = H200Full();
  t.actor_tp = 3;  // 3 x 2 does not divide 128
  EXPECT_EQ(Refusal({}, FromPreset(t)),
            "--preset h200-full: actor.dp: tp x pp x cp = 6 does not divide the 128 actor GPUs");
}

TEST(PlanRequestBuilderTest, WithoutATopologyTheGpuGivesTheNodeAndTheDefaultsStand) {
  const PlanRequest r = Build(FourNodes());
  EXPECT_EQ(r.gpus_per_node, 8);  // h200's
  EXPECT_EQ(r.world(), 32);
  EXPECT_EQ(r.plan.dp, 4);
  EXPECT_EQ(r.global_batch, 128);
  EXPECT_EQ(r.prompt_length, 2048);
  EXPECT_EQ(r.recompute, Recompute::kSelective);
  EXPECT_EQ(r.lora.alpha, 64);
  EXPECT_TRUE(r.efficiency.gemm_from_table);
  EXPECT_TRUE(r.efficiency.comm_from_table);
}

TEST(PlanRequestBuilderTest, DpIsTheActorGpusOverTpPpCp) {
  RequestChoices c = FourNodes();
  c.cp = 2;
  EXPECT_EQ(Build(c).plan.dp, 2);  // 32 / (4 x 2 x 2)

  c = FourNodes();
  c.placement = "split";
  c.rollout_gpus = 8;
  EXPECT_EQ(Build(c).plan.dp, 3);  // (32 - 8 rollout GPUs) / (4 x 2)

  c = FourNodes();
  c.dp = 2;
  EXPECT_EQ(Build(c).plan.dp, 2);  // given, not derived
}

TEST(PlanRequestBuilderTest, ADpThatDoesNotDivideIsRefusedUnlessSearching) {
  RequestChoices c = FourNodes();
  c.tp = 3;
  EXPECT_EQ(Refusal(c), "--dp: tp x pp x cp = 6 does not divide the 32 actor GPUs");
  c.search = true;
  EXPECT_EQ(Build(c).plan.dp, 0);
}

TEST(PlanRequestBuilderTest, RolloutDpIsRolloutEpOverRolloutTp) {
  RequestChoices c = FourNodes();
  c.rollout_tp = 2;
  c.rollout_ep = 8;
  EXPECT_EQ(Build(c).plan.rollout_dp, 4);
  c.rollout_tp = 8;
  EXPECT_EQ(Build(c).plan.rollout_dp, 1);  // ep = tp
  c.rollout_tp = 3;
  EXPECT_EQ(Build(c).plan.rollout_dp, 1);  // 3 does not divide 8
  c.rollout_tp = 2;
  c.rollout_dp = 2;
  EXPECT_EQ(Build(c).plan.rollout_dp, 2);  // given
}

TEST(PlanRequestBuilderTest, NumbersOverrideTheirFields) {
  RequestChoices c = FourNodes();
  c.mode = "lora";
  c.lora_rank = 16;
  EXPECT_EQ(Build(c).lora.alpha, 32);  // 2 x rank unless given
  c.lora_alpha = 8;
  EXPECT_EQ(Build(c).lora.alpha, 8);

  c = FourNodes();
  c.global_batch = 64;
  c.micro_batch = 2;
  c.grad_bucket_mib = 25;
  c.matmul_efficiency = 0.4;
  c.dp_overlap = 0.25;
  c.moe_imbalance = 1.5;
  c.gpu_memory_utilization = 0.7;
  const PlanRequest r = Build(c);
  EXPECT_EQ(r.global_batch, 64);
  EXPECT_EQ(r.micro_batch, 2);
  EXPECT_EQ(r.gradient_bucket.value(), 25.0 * (1 << 20));
  EXPECT_EQ(r.efficiency.matmul, 0.4);
  EXPECT_FALSE(r.efficiency.gemm_from_table);
  EXPECT_TRUE(r.efficiency.comm_from_table);
  EXPECT_EQ(r.efficiency.dp_overlap, 0.25);
  EXPECT_EQ(r.efficiency.moe_imbalance, 1.5);
  EXPECT_EQ(r.gpu_memory_utilization, 0.7);
}

TEST(PlanRequestBuilderTest, SeqLenIsAPromptWithoutResponse) {
  RequestChoices c = FourNodes();
  c.seq_len = 8192;
  const PlanRequest r = Build(c);
  EXPECT_EQ(r.prompt_length, 8192);
  EXPECT_EQ(r.response_length, 0);
}

TEST(PlanRequestBuilderTest, TheResolvedFilesPassThrough) {
  RequestInputs in = DenseGpt();
  auto table = std::make_shared<const CalibrationTable>();
  ActivationProfile profile;
  profile.model = "gpt";
  profile.seq_len = 4096;
  profile.layers.assign(4, 1000);
  in.calibration = table;
  in.activation_profile = std::make_shared<const ActivationProfile>(profile);
  RequestChoices c;
  c.tp = 2;
  const PlanRequest r = Build(c, in);
  EXPECT_EQ(r.calibration, table);
  EXPECT_EQ(r.activation_profile, in.activation_profile);

  // ValidateRequest holds the profile to the plan's sequence.
  c.seq_len = 1024;
  EXPECT_EQ(Refusal(c, in),
            "--activation-profile: measured on 4096-token sequences, the plan's are 1024 (profile at the plan's --seq-len)");
}

TEST(PlanRequestBuilderTest, EveryWordChoiceIsParsed) {
  RequestChoices c = FourNodes();
  c.mode = "lora";
  c.lora_experts = "per-expert";
  c.lora_targets = "dense,attention";
  c.lora_native_base = true;
  PlanRequest r = Build(c);
  EXPECT_EQ(r.mode, TrainMode::kLora);
  EXPECT_EQ(r.lora.experts, LoraExperts::kPerExpert);
  EXPECT_TRUE(r.lora.attention);
  EXPECT_TRUE(r.lora.dense_ffn);
  EXPECT_FALSE(r.lora.routed_experts);
  EXPECT_TRUE(r.lora.native_base);

  c = FourNodes();
  c.schedule = "zb-h1";
  c.optimizer_sync = "sync";
  c.p2p = "blocking";
  c.recompute = "full";
  c.recompute_method = "block";
  c.recompute_num_layers = 2;
  c.sequence_parallel = "off";
  c.distributed_optimizer = "off";
  c.flash_attention = "off";
  c.state_precision = "fp32";
  c.placement = "split";
  c.rollout_gpus = 8;
  r = Build(c);
  EXPECT_EQ(r.schedule, ScheduleKind::kZbH1);
  EXPECT_EQ(r.optimizer_sync, OptimizerSync::kSynchronised);
  EXPECT_EQ(r.send_mode, SendMode::kBlocking);
  EXPECT_EQ(r.recompute, Recompute::kFull);
  EXPECT_EQ(r.recompute_method, RecomputeMethod::kBlock);
  EXPECT_EQ(r.recompute_layers, 2);
  EXPECT_FALSE(r.sequence_parallel);
  EXPECT_FALSE(r.distributed_optimizer);
  EXPECT_FALSE(r.flash_attention);
  EXPECT_EQ(r.state_precision, StatePrecision::kFp32);
  EXPECT_EQ(r.placement, Placement::kSplit);
  EXPECT_EQ(r.rollout_gpus, 8);

  c = FourNodes();
  c.dtype = "fp8-blockwise";
  c.fp8_param_gather = "on";
  c.optimizer_moments = "bf16";
  c.grad_reduce_in_fp32 = "off";
  c.recompute_modules = "moe_act,layernorm";
  c.dispatcher = "deepep";
  c.cuda_graphs = "modules";
  c.a2a_overlap = "on";
  c.layer_split = "megatron+loss";
  r = Build(c);
  EXPECT_TRUE(r.bf16);
  EXPECT_EQ(r.recipe.fp8, Fp8Recipe::kBlockwise);
  EXPECT_TRUE(r.recipe.fp8_param_gather);
  EXPECT_EQ(r.recipe.moments, MomentsDtype::kBf16);
  EXPECT_FALSE(r.recipe.grad_reduce_in_fp32);
  EXPECT_EQ(r.recipe.recompute_modules,
            (std::vector<RecomputeModule>{RecomputeModule::kMoeAct, RecomputeModule::kLayernorm}));
  EXPECT_EQ(r.recipe.dispatcher, Dispatcher::kDeepEp);
  EXPECT_EQ(r.recipe.cuda_graphs, CudaGraphs::kModules);
  EXPECT_TRUE(r.recipe.a2a_overlap);
  EXPECT_EQ(r.layer_split.kind, LayerSplitKind::kMegatron);
  EXPECT_TRUE(r.layer_split.account_for_loss);

  c = FourNodes();
  c.dtype = "fp16";
  r = Build(c);
  EXPECT_FALSE(r.bf16);
  EXPECT_EQ(r.recipe.fp8, Fp8Recipe::kNone);
}

TEST(PlanRequestBuilderTest, EveryScheduleNameIsParsed) {
  const std::pair<const char*, ScheduleKind> names[] = {
      {"gpipe", ScheduleKind::kGpipe}, {"1f1b", ScheduleKind::k1F1B},
      {"interleaved-1f1b", ScheduleKind::kInterleaved1F1B}, {"zb-h1", ScheduleKind::kZbH1},
      {"zb-h2", ScheduleKind::kZbH2}, {"zbv", ScheduleKind::kZbv}, {"dualpipev", ScheduleKind::kDualPipeV}};
  for (const auto& [name, kind] : names) {
    RequestChoices c = FourNodes();
    c.schedule = name;
    EXPECT_EQ(Build(c).schedule, kind) << name;
  }
}

// Choices over FourNodes() and the refusal they must get.
struct BadValue {
  std::function<void(RequestChoices&)> give;
  std::string message;
};

std::string Refusal(const BadValue& bad) {
  RequestChoices c = FourNodes();
  bad.give(c);
  return Refusal(c);
}

TEST(PlanRequestBuilderTest, EveryBadWordIsRefusedWithOneLineNamingTheFlag) {
  const BadValue cases[] = {
      {[](RequestChoices& c) { c.mode = "x"; }, "--mode: must be full or lora, got \"x\""},
      {[](RequestChoices& c) { c.mode = "lora"; c.lora_experts = "both"; },
       "--lora-experts: must be shared-outer or per-expert, got \"both\""},
      {[](RequestChoices& c) { c.mode = "lora"; c.lora_targets = "attention,mlp"; },
       "--lora-targets: \"mlp\" is not one of attention, experts, dense"},
      {[](RequestChoices& c) { c.mode = "lora"; c.lora_targets = "attention,"; },
       "--lora-targets: \"attention,\" names an empty target; give one or more of attention, experts, dense"},
      {[](RequestChoices& c) { c.schedule = "2f2b"; },
       "--schedule: unknown schedule \"2f2b\" (allowed: gpipe, 1f1b, interleaved-1f1b, zb-h1, zb-h2, zbv, "
       "dualpipev)"},
      {[](RequestChoices& c) { c.optimizer_sync = "later"; },
       "--optimizer-sync: must be sync or post-validation, got \"later\""},
      {[](RequestChoices& c) { c.p2p = "sometimes"; }, "--p2p: must be async or blocking, got \"sometimes\""},
      {[](RequestChoices& c) { c.recompute = "most"; }, "--recompute: must be none, selective or full, got \"most\""},
      {[](RequestChoices& c) { c.recompute = "full"; c.recompute_method = "random"; },
       "--recompute-method: must be uniform or block, got \"random\""},
      {[](RequestChoices& c) { c.sequence_parallel = "yes"; }, "--sequence-parallel: must be on or off, got \"yes\""},
      {[](RequestChoices& c) { c.distributed_optimizer = "1"; },
       "--distributed-optimizer: must be on or off, got \"1\""},
      {[](RequestChoices& c) { c.flash_attention = "true"; }, "--flash-attention: must be on or off, got \"true\""},
      {[](RequestChoices& c) { c.dtype = "fp4"; },
       "--dtype: must be bf16, fp16, fp8-tensorwise, fp8-blockwise or mxfp8, got \"fp4\""},
      {[](RequestChoices& c) { c.dtype = "mxfp8"; },
       "--dtype: mxfp8 needs Blackwell (b200, b300, gb200, gb300); h200 is hopper (give fp8-tensorwise or "
       "fp8-blockwise)"},
      {[](RequestChoices& c) { c.dtype = "fp8-tensorwise"; c.fp8_param_gather = "maybe"; },
       "--fp8-param-gather: must be on or off, got \"maybe\""},
      {[](RequestChoices& c) { c.optimizer_moments = "fp8"; },
       "--optimizer-moments: must be one of fp32, bf16, got \"fp8\""},
      {[](RequestChoices& c) { c.recompute_modules = "attn"; },
       "--recompute-modules: must be one of core_attn, moe_act, layernorm, mla_up_proj, mlp, moe, shared_experts, "
       "got \"attn\""},
      {[](RequestChoices& c) { c.dispatcher = "nccl"; },
       "--dispatcher: must be one of alltoall, deepep, hybridep, got \"nccl\""},
      {[](RequestChoices& c) { c.a2a_overlap = "always"; }, "--a2a-overlap: must be on or off, got \"always\""},
      {[](RequestChoices& c) { c.cuda_graphs = "all"; }, "--cuda-graphs: must be one of none, modules, got \"all\""},
      {[](RequestChoices& c) { c.grad_reduce_in_fp32 = "no"; }, "--grad-reduce-in-fp32: must be on or off, got \"no\""},
      {[](RequestChoices& c) { c.state_precision = "fp16"; },
       "--state-precision: must be mixed or fp32, got \"fp16\""},
      {[](RequestChoices& c) { c.placement = "remote"; }, "--placement: must be colocated or split, got \"remote\""},
      {[](RequestChoices& c) { c.engine = "deepspeed"; }, "--engine: must be native or verl, got \"deepspeed\""},
  };
  for (const BadValue& bad : cases) EXPECT_EQ(Refusal(bad), bad.message);
}

TEST(PlanRequestBuilderTest, AFlagWithoutTheSettingItNeedsIsRefused) {
  const std::string idle = "; without it the flag does nothing";
  const BadValue cases[] = {
      {[](RequestChoices& c) { c.lora_rank = 16; }, "--lora-rank: needs --mode lora (the plan trains full weights)"},
      {[](RequestChoices& c) { c.lora_alpha = 8; }, "--lora-alpha: needs --mode lora (the plan trains full weights)"},
      {[](RequestChoices& c) { c.lora_experts = "per-expert"; },
       "--lora-experts: needs --mode lora (the plan trains full weights)"},
      {[](RequestChoices& c) { c.lora_targets = "attention"; },
       "--lora-targets: needs --mode lora (the plan trains full weights)"},
      {[](RequestChoices& c) { c.lora_native_base = true; },
       "--lora-native-base: needs --mode lora (the plan trains full weights)"},
      {[](RequestChoices& c) { c.rollout_gpus = 8; }, "--rollout-gpus: needs --placement split"},
      {[](RequestChoices& c) { c.placement = "split"; c.rollout_gpus = 8; c.gpu_memory_utilization = 0.6; },
       "--gpu-memory-utilization: needs --placement colocated"},
      {[](RequestChoices& c) { c.recompute = "full"; c.recompute_modules = "mlp"; },
       "--recompute-modules: needs --recompute selective"},
      {[](RequestChoices& c) { c.fp8_param_gather = "on"; },
       "--fp8-param-gather: needs an FP8 --dtype (fp8-tensorwise, fp8-blockwise, mxfp8)"},
      {[](RequestChoices& c) { c.state_precision = "fp32"; c.optimizer_moments = "bf16"; },
       "--optimizer-moments: needs full fine-tuning with --state-precision mixed"},
      {[](RequestChoices& c) { c.mode = "lora"; c.dtype = "fp8-tensorwise"; c.fp8_param_gather = "on"; },
       "--fp8-param-gather: needs full fine-tuning with --state-precision mixed"},
      {[](RequestChoices& c) { c.mode = "lora"; c.grad_reduce_in_fp32 = "on"; },
       "--grad-reduce-in-fp32: needs full fine-tuning with --state-precision mixed"},
      {[](RequestChoices& c) { c.dtype = "fp16"; c.grad_reduce_in_fp32 = "on"; },
       "--grad-reduce-in-fp32: needs --dtype bf16 or an FP8 recipe (fp16 gradients stay fp16)"},
  };
  for (const BadValue& bad : cases) EXPECT_EQ(Refusal(bad), bad.message + idle);
}

TEST(PlanRequestBuilderTest, MoeKnobsNeedAnMoeModel) {
  for (auto give : {+[](RequestChoices& c) { c.dispatcher = "deepep"; },
                    +[](RequestChoices& c) { c.a2a_overlap = "on"; },
                    +[](RequestChoices& c) { c.cuda_graphs = "modules"; }}) {
    RequestChoices c;
    c.tp = 2;
    give(c);
    const std::string message = Refusal(c, DenseGpt());
    EXPECT_NE(message.find(": needs an MoE model (gpt is dense); without it the flag does nothing"), std::string::npos)
        << message;
  }
}

TEST(PlanRequestBuilderTest, TheTopologysModeSatisfiesTheLoraFlags) {
  TopologySpec t = H200Full();
  t.name = "h200-lora";
  t.mode = "lora";
  t.lora_rank = 32;
  RequestChoices c;
  c.lora_rank = 8;
  c.lora_experts = "per-expert";
  const PlanRequest r = Build(c, FromPreset(t));
  EXPECT_EQ(r.mode, TrainMode::kLora);
  EXPECT_EQ(r.lora.rank, 8);
  EXPECT_EQ(r.lora.alpha, 16);
  EXPECT_EQ(r.value_sources.at("--mode"), "--preset h200-lora: mode");
  EXPECT_EQ(r.value_sources.count("--lora-rank"), 0u);

  c.mode = "full";  // a flag over the topology's mode
  EXPECT_EQ(Refusal(c, FromPreset(t)),
            "--lora-rank: needs --mode lora (the plan trains full weights); without it the flag does nothing");
}

TEST(PlanRequestBuilderTest, RecomputeMethodAndLayersNeedFullRecompute) {
  RequestChoices c = FourNodes();
  c.recompute_method = "block";
  EXPECT_EQ(Refusal(c), "--recompute-method: needs --recompute full");
  c = FourNodes();
  c.recompute = "selective";
  c.recompute_num_layers = 2;
  EXPECT_EQ(Refusal(c), "--recompute-num-layers: needs --recompute full");
}

TEST(PlanRequestBuilderTest, SeqLenExcludesPromptAndResponseLength) {
  RequestChoices c = FourNodes();
  c.seq_len = 4096;
  c.prompt_length = 1024;
  EXPECT_EQ(Refusal(c),
            "--prompt-length: give --seq-len (prompt only) or --prompt-length and --response-length, not both");
  c.prompt_length.reset();
  c.response_length = 0;
  EXPECT_EQ(Refusal(c),
            "--response-length: give --seq-len (prompt only) or --prompt-length and --response-length, not both");
}

TEST(PlanRequestBuilderTest, VirtualStagesWithoutAScheduleChooseInterleaved1F1B) {
  RequestChoices c = FourNodes();
  c.vp = 2;
  PlanRequest r = Build(c);
  EXPECT_EQ(r.schedule, ScheduleKind::kInterleaved1F1B);
  EXPECT_EQ(r.plan.vp, 2);

  c.vp = 1;
  EXPECT_EQ(Build(c).schedule, ScheduleKind::k1F1B);

  c.vp = 2;
  c.schedule = "1f1b";  // given: kept, and CheckPlan judges it
  EXPECT_EQ(Build(c).schedule, ScheduleKind::k1F1B);
}

TEST(PlanRequestBuilderTest, EngineVerlRunsMegatronsSendsAndExpertActivations) {
  RequestChoices c = FourNodes();
  c.engine = "verl";
  PlanRequest r = Build(c);
  EXPECT_EQ(r.send_mode, SendMode::kBlocking);  // 1f1b on Megatron-LM
  EXPECT_EQ(r.recipe.expert_activations, ExpertActivations::kMegatron);
  EXPECT_EQ(r.layer_split.kind, LayerSplitKind::kAuto);

  c.schedule = "zb-h1";
  EXPECT_EQ(Build(c).send_mode, SendMode::kAsync);  // Megatron-LM blocks under 1f1b and interleaved only

  c.schedule.reset();
  c.p2p = "async";  // given: kept
  EXPECT_EQ(Build(c).send_mode, SendMode::kAsync);

  c.p2p.reset();
  c.layer_split = "even";
  EXPECT_EQ(Build(c).layer_split.kind, LayerSplitKind::kEven);

  c = FourNodes();
  c.engine = "native";
  r = Build(c);
  EXPECT_FALSE(r.send_mode.has_value());
  EXPECT_EQ(r.recipe.expert_activations, ExpertActivations::kNative);
  EXPECT_EQ(r.layer_split.kind, LayerSplitKind::kEven);
}

}  // namespace
}  // namespace kp
