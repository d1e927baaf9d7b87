// The assembled model: Block Attention Residuals against a naive depth loop
// written here, stages that compose to the whole model, gradients against
// finite differences in fp64, activation checkpointing, LoRA, and the
// parameter count against the planner's independent count.
#include <cstdio>
#include <stdexcept>

#include <gtest/gtest.h>

#include <torch/torch.h>

#include "runtime/model/attention.h"
#include "runtime/model/model.h"
#include "runtime/model/test_util.h"
#include "specs/param_count.h"
#include "specs/presets.h"

namespace kp::runtime {
namespace {

std::shared_ptr<StageModelImpl> Build(const ModelSpec& spec, ModelOptions opts = {}) {
  auto m = BuildModel(spec, opts);
  EXPECT_TRUE(m.ok()) << m.status().message();
  return *m;
}

torch::Tensor Tokens(const ModelSpec& spec, std::int64_t b, std::int64_t t, std::uint64_t seed) {
  Init init(seed);
  return (init.Uniform({b, t}, 0, spec.vocab).floor().to(torch::kLong)).clamp(0, spec.vocab - 1);
}

// Gives every depth read a non-trivial query, so the softmax over depth is
// far from uniform and a mis-ordered stack would show.
void RandomiseDepthReads(StageModelImpl& model, std::uint64_t seed) {
  Init init(seed);
  torch::NoGradGuard no_grad;
  for (auto& p : model.named_parameters())
    if (p.key().find("_res.") != std::string::npos) p.value().copy_(init.Normal(p.value().sizes(), 1.0));
}

double MaxAbsDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kDouble) - b.to(torch::kDouble)).abs().max().item<double>();
}

// ------------------------------------------------------------------ naive depth loop

// softmax over depth of RMS-normalised values scored by norm_weight * query,
// one depth at a time.
torch::Tensor NaiveRead(const std::vector<torch::Tensor>& values, AttnResImpl& p) {
  std::vector<torch::Tensor> scores;
  for (const torch::Tensor& v : values) {
    const torch::Tensor rms = torch::sqrt(v.pow(2).mean(-1, true) + 1e-6);
    scores.push_back((v / rms * p.norm_weight() * p.query()).sum(-1, true));
  }
  torch::Tensor top = scores[0];
  for (const auto& s : scores) top = torch::maximum(top, s);
  torch::Tensor z = torch::zeros_like(top), out = torch::zeros_like(values[0]);
  for (const auto& s : scores) z = z + torch::exp(s - top);
  for (std::size_t i = 0; i < values.size(); ++i) out = out + torch::exp(scores[i] - top) / z * values[i];
  return out;
}

// The model recomputed from its sub-layers with every sub-layer output kept
// separately: stack entry 0 is the embedding, entry j the sum of the outputs
// of block j-1's layers; a layer reads the completed entries of earlier
// blocks plus the sum of its own block's outputs so far (none for a block's
// first layer before its attention); the head reads every completed entry
// plus the last block's sum.
torch::Tensor NaiveForward(StageModelImpl& model, const torch::Tensor& tokens) {
  const ModelSpec& spec = model.spec();
  const int block = spec.attn_res_block;
  const torch::Tensor e = model.embedding()->forward(tokens).hidden;
  std::vector<std::pair<int, torch::Tensor>> outputs;  // (layer, sub-layer output)
  auto block_sum = [&](int b) {
    torch::Tensor s = torch::zeros_like(e);
    for (const auto& [layer, y] : outputs)
      if (layer / block == b) s = s + y;
    return s;
  };
  auto completed = [&](int layer) {
    std::vector<torch::Tensor> entries = {e};
    for (int b = 0; b < layer / block; ++b) entries.push_back(block_sum(b));
    return entries;
  };
  for (auto& layer : model.layers()) {
    const int l = layer->index();
    std::vector<torch::Tensor> values = completed(l);
    if (l % block != 0) values.push_back(block_sum(l / block));
    const torch::Tensor h = NaiveRead(values, l == 0 ? *layer->ffn_res() : *layer->attn_res());
    outputs.emplace_back(l, layer->attention().Mix(layer->attn_norm().forward(h)));
    values = completed(l);
    values.push_back(block_sum(l / block));
    const torch::Tensor h2 = NaiveRead(values, *layer->ffn_res());
    outputs.emplace_back(l, layer->ffn().Mix(layer->ffn_norm().forward(h2), false));
  }
  std::vector<torch::Tensor> values = completed(spec.layers - 1);
  values.push_back(block_sum((spec.layers - 1) / block));
  HeadImpl& head = *model.head();
  return head.lm_head().forward(head.norm().forward(NaiveRead(values, *head.output_res())));
}

TEST(BlockAttnResTest, ModelForwardMatchesANaiveDepthLoop) {
  for (int block : {2, 3}) {  // 5 layers: blocks 2+2+1 or 3+2
    ModelSpec spec = TinyKimiSpec();
    spec.attn_res_block = block;
    auto model = Build(spec);
    model->to(torch::kDouble);
    RandomiseDepthReads(*model, 11);
    const torch::Tensor tokens = Tokens(spec, 2, 7, 12);
    EXPECT_LT(MaxAbsDiff(model->forward(tokens), NaiveForward(*model, tokens)), 1e-10) << "block " << block;
  }
}

TEST(BlockAttnResTest, TheStackHoldsTheEmbeddingAndEveryCompletedBlock) {
  auto model = Build(TinyKimiSpec());
  const ResidualStream out = model->RunLayers(model->Embed(Tokens(TinyKimiSpec(), 1, 4, 13)));
  // Blocks of 2 over 5 layers: e, block 0's sum, block 1's sum; block 2 (layer
  // 4 alone) is the partial sum the head reads.
  EXPECT_EQ(out.blocks.size(), 3u);
}

TEST(StageTest, StagesBuiltAloneComposeToTheWholeModel) {
  const ModelSpec spec = TinyKimiSpec();
  auto whole = Build(spec);
  const torch::Tensor tokens = Tokens(spec, 2, 6, 14);
  const torch::Tensor want = whole->forward(tokens);
  auto split = EvenSplit(spec.layers, 3);  // emb,0-1 | 2-3 | 4,head: a block boundary inside no stage
  ASSERT_TRUE(split.ok());
  ResidualStream stream;
  for (const StageLayers& s : split->stages) {
    auto stage = BuildStage(spec, ModelOptions{}, s);
    ASSERT_TRUE(stage.ok());
    if (s.embedding) stream = (*stage)->Embed(tokens);
    stream = (*stage)->RunLayers(std::move(stream));
    if (s.head) {
      EXPECT_TRUE(torch::equal((*stage)->Head(stream), want));
    }
  }
}

// ------------------------------------------------------------------ gradients

TEST(GradientTest, MatchesFiniteDifferencesInFp64) {
  ModelSpec spec = TinyKimiSpec();
  spec.layers = 3;
  spec.attention = {AttentionKind::kKda, AttentionKind::kMla, AttentionKind::kKda};
  spec.mla.q_lora_rank = 12;  // the low-rank q path
  ModelOptions opts;
  opts.kda_chunk = 4;         // 6 tokens: one full chunk and a partial one
  auto model = Build(spec, opts);
  model->to(torch::kDouble);
  RandomiseDepthReads(*model, 21);
  const torch::Tensor tokens = Tokens(spec, 2, 7, 22);
  const torch::Tensor in = tokens.narrow(1, 0, 6), target = tokens.narrow(1, 1, 6);
  auto loss = [&] { return LanguageModelLoss(model->forward(in), target); };
  loss().backward();
  Init pick(23);
  int checked = 0;
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    torch::Tensor w = p.value().view({-1});
    const torch::Tensor grad = p.value().grad().view({-1});
    for (int i = 0; i < 2; ++i) {
      const std::int64_t at = static_cast<std::int64_t>(pick.Uniform({1}, 0, w.numel()).item<double>());
      const double saved = w[at].item<double>(), h = 1e-6;
      w[at].fill_(saved + h);
      const double up = loss().item<double>();
      w[at].fill_(saved - h);
      const double down = loss().item<double>();
      w[at].fill_(saved);
      const double fd = (up - down) / (2 * h), an = grad[at].item<double>();
      EXPECT_NEAR(an, fd, 1e-7 + 1e-5 * std::abs(fd)) << p.key() << "[" << at << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 80);
}

// Gradients of every parameter after one forward/backward.
std::vector<torch::Tensor> Grads(StageModelImpl& model, const torch::Tensor& tokens) {
  model.zero_grad();
  ForwardContext ctx;
  ctx.record_router_load = true;
  LanguageModelLoss(model.forward(tokens.narrow(1, 0, 7), ctx), tokens.narrow(1, 1, 7)).backward();
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : model.parameters())
    out.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return out;
}

// Expects `got` to match `want` parameter for parameter: bit for bit when
// `rel` is 0, else within `rel` of the tensor's largest magnitude; returns
// how many parameters had gradients.
int ExpectGradsMatch(const std::vector<torch::Tensor>& want, const std::vector<torch::Tensor>& got,
                     const std::string& what, double rel = 0) {
  EXPECT_EQ(want.size(), got.size()) << what;
  int compared = 0;
  for (std::size_t i = 0; i < std::min(want.size(), got.size()); ++i) {
    EXPECT_EQ(want[i].defined(), got[i].defined()) << what << ", parameter " << i;
    if (!want[i].defined() || !got[i].defined()) continue;
    if (rel == 0) {
      EXPECT_TRUE(torch::equal(want[i], got[i])) << what << ", parameter " << i;
    } else {
      const double scale = want[i].abs().max().item<double>();
      EXPECT_LE(MaxAbsDiff(want[i], got[i]), rel * (1 + scale)) << what << ", parameter " << i;
    }
    ++compared;
  }
  return compared;
}

TEST(CheckpointingTest, GivesBitwiseIdenticalGradientsAndCountsRoutingOnce) {
  for (bool lora : {false, true}) {
    const ModelSpec spec = TinyKimiSpec();
    auto model = Build(spec);
    if (lora) {
      model->EnableLora(LoraOptions{4, 8.0, LoraExperts::kSharedOuter}, 5);
      Init init(6);
      torch::NoGradGuard no_grad;
      for (auto& [name, t] : model->LoraParameters()) t.copy_(init.Normal(t.sizes(), 0.1));
    }
    const torch::Tensor tokens = Tokens(spec, 2, 8, 31);
    const auto plain = Grads(*model, tokens);
    std::vector<torch::Tensor> plain_load;
    for (auto& layer : model->layers())
      if (layer->moe()) plain_load.push_back(layer->moe()->router().load().clone());
    model->UpdateRouterBiases(0.0);  // clears the counts
    model->SetActivationCheckpointing(true);
    const auto recomputed = Grads(*model, tokens);
    EXPECT_GT(ExpectGradsMatch(plain, recomputed, lora ? "LoRA" : "full"), lora ? 20 : 60);
    std::size_t j = 0;
    for (auto& layer : model->layers())
      if (layer->moe()) {
        EXPECT_TRUE(torch::equal(layer->moe()->router().load(), plain_load[j++]));
      }
    EXPECT_EQ(plain_load.front().sum().item<double>(), 2 * 7 * 2);  // tokens x top_k, once
  }
}

// Megatron's --recompute-modules moe and mlp: layer 0's dense MLP and the
// MoE blocks keep only their inputs and run again in the backward.
TEST(CheckpointingTest, RecomputedMoeAndMlpModulesGiveBitwiseIdenticalGradientsAndCountRoutingOnce) {
  const ModelSpec spec = TinyKimiSpec();
  ASSERT_EQ(spec.dense_layers, 1);
  auto plain = Build(spec);
  ModelOptions options;
  options.recompute_moe = options.recompute_mlp = true;
  auto recomputing = Build(spec, options);
  const torch::Tensor tokens = Tokens(spec, 2, 8, 41);
  EXPECT_GT(ExpectGradsMatch(Grads(*plain, tokens), Grads(*recomputing, tokens), "recomputed modules"), 60);
  for (std::size_t l = 0; l < plain->layers().size(); ++l)
    if (plain->layers()[l]->moe()) {
      const torch::Tensor load = recomputing->layers()[l]->moe()->router().load();
      EXPECT_TRUE(torch::equal(load, plain->layers()[l]->moe()->router().load())) << l;
      EXPECT_EQ(load.sum().item<double>(), 2 * 7 * 2);  // tokens x top_k, once
    }
}

// Megatron's uniform recomputation of N layers at a time: groups of 2 keep
// every commit outside a group (blocks of 2 layers), groups of 3 commit
// inside one and hand the block on as an output. In fp64 the gradients are
// the per-layer run's up to the order of a block's sum over its readers.
TEST(CheckpointingTest, UniformGroupsGiveThePerLayerGradientsAndCountRoutingOnce) {
  const ModelSpec spec = TinyKimiSpec();
  ASSERT_EQ(spec.layers, 5);
  ASSERT_EQ(spec.attn_res_block, 2);
  auto plain = Build(spec);
  plain->to(torch::kDouble);
  RandomiseDepthReads(*plain, 3);
  const torch::Tensor tokens = Tokens(spec, 2, 8, 43);
  const auto want = Grads(*plain, tokens);
  for (int group : {2, 3}) {
    ModelOptions options;
    options.activation_checkpointing = true;
    options.checkpoint_group_layers = group;
    auto grouped = Build(spec, options);
    grouped->to(torch::kDouble);
    RandomiseDepthReads(*grouped, 3);
    EXPECT_GT(ExpectGradsMatch(want, Grads(*grouped, tokens), "groups of " + std::to_string(group), 1e-12), 60);
    for (auto& layer : grouped->layers())
      if (layer->moe()) {
        EXPECT_EQ(layer->moe()->router().load().sum().item<double>(), 2 * 7 * 2);  // tokens x top_k, once
      }
    // Off again, the model runs every layer plainly.
    grouped->SetActivationCheckpointing(false);
    ExpectGradsMatch(want, Grads(*grouped, tokens), "groups off");
  }
}

// Megatron's --recompute-modules shared_experts (the shared experts keep
// their input and run again), and layernorm, moe_act and mla_up_proj (their
// outputs are freed after their consumer and remade), one at a time and all
// together, with MLA's rotary part and without. The expert loop runs here,
// where moe_act applies. A module whose input has one reader gives the
// gradients bit for bit; the norms' inputs are also read by the depth reads
// and the residual, whose gradients the boundary then sums in another
// order: equal to 1e-12 in fp64.
TEST(CheckpointingTest, RecomputedModulesGiveThePlainGradients) {
  struct Case {
    const char* name;
    bool bitwise;
    void (*set)(ModelOptions&);
  };
  const Case cases[] = {
      {"shared_experts", true, [](ModelOptions& o) { o.recompute_shared_experts = true; }},
      {"moe_act", true, [](ModelOptions& o) { o.recompute_moe_act = true; }},
      {"mla_up_proj", true, [](ModelOptions& o) { o.recompute_mla_up_proj = true; }},
      {"layernorm", false, [](ModelOptions& o) { o.recompute_layernorm = true; }},
      {"all", false, [](ModelOptions& o) {
         o.recompute_shared_experts = o.recompute_layernorm = o.recompute_moe_act = o.recompute_mla_up_proj = true;
       }},
  };
  for (int rope : {4, 0}) {
    ModelSpec spec = TinyKimiSpec();
    ASSERT_GT(spec.moe.shared_experts, 0);
    spec.mla.qk_rope_head_dim = rope;
    auto plain = Build(spec);
    plain->to(torch::kDouble);
    const torch::Tensor tokens = Tokens(spec, 2, 8, 47);
    const auto want = Grads(*plain, tokens);
    for (const Case& c : cases) {
      ModelOptions options;
      c.set(options);
      auto recomputing = Build(spec, options);
      recomputing->to(torch::kDouble);
      const std::string what = std::string(c.name) + ", rope " + std::to_string(rope);
      EXPECT_GT(ExpectGradsMatch(want, Grads(*recomputing, tokens), what, c.bitwise ? 0 : 1e-12), 60);
    }
  }
}

// ------------------------------------------------------------------ LoRA

TEST(LoraTest, MergedEqualsUnmergedWithinFp32RoundingForBothExpertModes) {
  for (LoraExperts mode : {LoraExperts::kSharedOuter, LoraExperts::kPerExpert}) {
    const ModelSpec spec = TinyKimiSpec();
    auto model = Build(spec);
    model->EnableLora(LoraOptions{4, 8.0, mode}, 7);
    Init init(8);
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, t] : model->LoraParameters()) t.copy_(init.Normal(t.sizes(), 0.2));
    }
    std::vector<torch::Tensor> base;
    for (auto& p : model->named_parameters())
      if (p.key().find("lora_") == std::string::npos) base.push_back(p.value().detach().clone());
    const torch::Tensor tokens = Tokens(spec, 2, 6, 9);
    torch::NoGradGuard no_grad;
    const torch::Tensor unmerged = model->forward(tokens);
    model->MergeLora();
    const torch::Tensor merged = model->forward(tokens);
    // Not bitwise: W x + s B (A x) and (W + s B A) x round differently.
    EXPECT_LT(MaxAbsDiff(merged, unmerged), 1e-4 * unmerged.abs().max().item<double>());
    EXPECT_GT(MaxAbsDiff(merged, torch::zeros_like(merged)), 0.0);
    model->UnmergeLora();
    EXPECT_TRUE(torch::equal(model->forward(tokens), unmerged) ||
                MaxAbsDiff(model->forward(tokens), unmerged) < 1e-5);
    std::size_t i = 0;
    for (auto& p : model->named_parameters())
      if (p.key().find("lora_") == std::string::npos) {
        EXPECT_LT(MaxAbsDiff(p.value(), base[i++]), 1e-6) << p.key();
      }
  }
}

TEST(LoraTest, AdaptersCoverAttentionFfnAndExpertsAndOnlyTheyTrain) {
  const ModelSpec spec = TinyKimiSpec();
  auto model = Build(spec);
  model->EnableLora(LoraOptions{2, 4.0, LoraExperts::kSharedOuter}, 3);
  std::map<std::string, torch::Tensor> lora;
  for (auto& [name, t] : model->LoraParameters()) lora[name] = t;
  EXPECT_TRUE(lora.count("layers.0.attention.q_proj.lora_a"));   // KDA
  EXPECT_TRUE(lora.count("layers.2.attention.kv_b.lora_b"));     // MLA
  EXPECT_TRUE(lora.count("layers.0.ffn.down.lora_a"));           // dense FFN
  EXPECT_TRUE(lora.count("layers.1.moe.shared.up.lora_b"));      // shared expert
  EXPECT_FALSE(lora.count("layers.1.moe.router.lora_a"));
  EXPECT_FALSE(lora.count("head.lm_head.lora_a"));
  // Shared-outer: gate/up A and down B shared, the inner sides per expert.
  EXPECT_EQ(lora["layers.1.moe.experts.gate_lora_a"].sizes(), (std::vector<std::int64_t>{2, 16}));
  EXPECT_EQ(lora["layers.1.moe.experts.gate_lora_b"].sizes(), (std::vector<std::int64_t>{4, 16, 2}));
  EXPECT_EQ(lora["layers.1.moe.experts.down_lora_a"].sizes(), (std::vector<std::int64_t>{4, 2, 16}));
  EXPECT_EQ(lora["layers.1.moe.experts.down_lora_b"].sizes(), (std::vector<std::int64_t>{16, 2}));
  const auto trainable = model->TrainableParameters();
  EXPECT_EQ(trainable.size(), lora.size());

  std::vector<torch::Tensor> frozen;
  for (const torch::Tensor& p : model->parameters())
    if (!p.requires_grad()) frozen.push_back(p.detach().clone());
  torch::optim::AdamW opt(trainable, torch::optim::AdamWOptions(1e-2));
  const torch::Tensor tokens = Tokens(spec, 2, 7, 4);
  for (int step = 0; step < 2; ++step) {
    opt.zero_grad();
    LanguageModelLoss(model->forward(tokens.narrow(1, 0, 6)), tokens.narrow(1, 1, 6)).backward();
    opt.step();
  }
  std::size_t i = 0;
  for (const torch::Tensor& p : model->parameters())
    if (!p.requires_grad()) {
      EXPECT_TRUE(torch::equal(p, frozen[i++]));
    }
  EXPECT_GT(lora["layers.1.moe.experts.down_lora_b"].abs().sum().item<double>(), 0.0);
}

TEST(LoraTest, AdaptersSaveAloneAndLoadIntoAFreshModel) {
  const ModelSpec spec = TinyKimiSpec();
  auto a = Build(spec);
  a->EnableLora(LoraOptions{2, 4.0, LoraExperts::kPerExpert}, 1);
  {
    Init init(2);
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : a->LoraParameters()) t.copy_(init.Normal(t.sizes(), 0.1));
  }
  const std::string path = ::testing::TempDir() + "/adapters.pt";
  ASSERT_TRUE(SaveAdapters(*a, path).ok());
  auto b = Build(spec);
  b->EnableLora(LoraOptions{2, 4.0, LoraExperts::kPerExpert}, 99);  // other initial adapters
  ASSERT_TRUE(LoadAdapters(*b, path).ok());
  const torch::Tensor tokens = Tokens(spec, 1, 5, 3);
  torch::NoGradGuard no_grad;
  EXPECT_TRUE(torch::equal(a->forward(tokens), b->forward(tokens)));
  auto c = Build(spec);
  c->EnableLora(LoraOptions{3, 4.0, LoraExperts::kPerExpert}, 1);
  const Status wrong = LoadAdapters(*c, path);
  EXPECT_EQ(wrong.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(wrong.message().find("shape"), std::string::npos) << wrong.message();
  EXPECT_EQ(LoadAdapters(*b, path + ".missing").code(), Status::Code::kNotFound);
  std::remove(path.c_str());
}

// ------------------------------------------------------------------ shapes and precision

// The planner counts the same model from the spec alone (specs/param_count.cc);
// the runtime differs from it only by the router bias, a buffer here (moved
// by the bias update, never by gradients), not a parameter.
TEST(ShapeTest, ParameterCountMatchesThePlannerUpToTheRouterBias) {
  RealFileSystem fs;
  auto spec = PresetCatalog(fs, DefaultPresetDir()).Model("kimi-k3-debug");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  auto model = Build(*spec);
  const double planner = CountParams(*spec).total;
  const ModelSpec& m = *spec;
  ASSERT_TRUE(m.mla.output_gate);  // the debug flavour's gate is counted on both sides
  const double router_bias = m.moe_layer_count() * double(m.moe.num_experts);
  EXPECT_EQ(double(CountElements(model->parameters())), planner - router_bias);
  // Without the gate (DeepSeek-V3's MLA, Kimi K2.6) both lose the same maps.
  ModelSpec ungated = m;
  ungated.mla.output_gate = false;
  EXPECT_EQ(double(CountElements(Build(ungated)->parameters())), CountParams(ungated).total - router_bias);
  EXPECT_EQ(planner - CountParams(ungated).total,
            m.count(AttentionKind::kMla) * double(m.hidden) * m.heads * m.mla.v_head_dim);
}

TEST(ShapeTest, Bf16KeepsFp32MasterWeightsAndTracksFp32) {
  const ModelSpec spec = TinyKimiSpec();
  ModelOptions bf16;
  bf16.dtype = DType::kBf16;
  auto a = Build(spec), b = Build(spec, bf16);
  for (const torch::Tensor& p : b->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
  const torch::Tensor tokens = Tokens(spec, 2, 6, 5);
  const torch::Tensor la = LanguageModelLoss(a->forward(tokens), tokens), lb = LanguageModelLoss(b->forward(tokens), tokens);
  EXPECT_EQ(lb.scalar_type(), torch::kFloat);
  EXPECT_NEAR(la.item<double>(), lb.item<double>(), 0.05);
  lb.backward();
  for (const torch::Tensor& p : b->parameters())
    if (p.grad().defined()) {
      EXPECT_EQ(p.grad().scalar_type(), torch::kFloat);
    }
}

TEST(ShapeTest, PlainResidualAndMhaBuildForGptStyleSpecs) {
  ModelSpec m = TinyGptSpec();
  auto model = Build(m);
  const torch::Tensor logits = model->forward(Tokens(m, 1, 5, 1));
  EXPECT_EQ(logits.sizes(), (std::vector<std::int64_t>{1, 5, 20}));
  m.tied_embeddings = true;
  EXPECT_EQ(BuildModel(m, {}).status().code(), Status::Code::kInvalidArgument);
}

// ------------------------------------------------------------------ incremental decoding

// KDA + MLA with blocks (the rotary key, low-rank q or not), the plain
// residual MHA model; chunked KDA so that a long prefill takes the chunked
// path and a step the recurrent one.
std::vector<std::pair<ModelSpec, ModelOptions>> DecodeSpecs() {
  ModelOptions chunked;
  chunked.kda_chunk = 4;
  ModelSpec low_rank_q = TinyKimiSpec();
  low_rank_q.mla.q_lora_rank = 12;
  low_rank_q.attn_res_block = 3;
  return {{TinyKimiSpec(), chunked}, {low_rank_q, ModelOptions{}}, {TinyGptSpec(), ModelOptions{}}};
}

std::shared_ptr<StageModelImpl> BuildFp64(const ModelSpec& spec, const ModelOptions& opts) {
  auto model = Build(spec, opts);
  model->to(torch::kDouble);
  if (spec.attn_res_block > 0) RandomiseDepthReads(*model, 31);
  return model;
}

// Logits of `tokens` [B, T]: a prefill of the first `prefill` tokens, then
// one token per step.
torch::Tensor DecodeStepwise(StageModelImpl& model, const torch::Tensor& tokens, std::int64_t prefill) {
  DecodeCache cache;
  std::vector<torch::Tensor> logits = {model.ForwardIncremental(tokens.narrow(1, 0, prefill), cache)};
  for (std::int64_t t = prefill; t < tokens.size(1); ++t) {
    logits.push_back(model.ForwardIncremental(tokens.narrow(1, t, 1), cache));
    EXPECT_EQ(cache.length(), t + 1);
  }
  return torch::cat(logits, 1);
}

TEST(DecodeTest, PrefillAndStepsEqualTheFullForward) {
  torch::NoGradGuard no_grad;
  for (const auto& [spec, opts] : DecodeSpecs()) {
    auto model = BuildFp64(spec, opts);
    const torch::Tensor tokens = Tokens(spec, 2, 11, 32);
    const torch::Tensor full = model->forward(tokens);
    for (std::int64_t prefill : {1, 3, 6}) {
      const torch::Tensor stepwise = DecodeStepwise(*model, tokens, prefill);
      ASSERT_EQ(stepwise.sizes(), full.sizes());
      EXPECT_LT(MaxAbsDiff(stepwise, full), 1e-9) << spec.name << " prefill " << prefill;
    }
  }
}

TEST(DecodeTest, APrefillInTwoChunksEqualsOneChunk) {
  torch::NoGradGuard no_grad;
  for (const auto& [spec, opts] : DecodeSpecs()) {
    auto model = BuildFp64(spec, opts);
    const torch::Tensor tokens = Tokens(spec, 2, 9, 33);
    DecodeCache one, two;
    const torch::Tensor whole = model->ForwardIncremental(tokens, one);
    const torch::Tensor first = model->ForwardIncremental(tokens.narrow(1, 0, 5), two);
    const torch::Tensor second = model->ForwardIncremental(tokens.narrow(1, 5, 4), two);
    EXPECT_LT(MaxAbsDiff(torch::cat({first, second}, 1), whole), 1e-9) << spec.name;
    // The caches continue alike.
    const torch::Tensor next = Tokens(spec, 2, 1, 34);
    EXPECT_LT(MaxAbsDiff(model->ForwardIncremental(next, one), model->ForwardIncremental(next, two)), 1e-9);
  }
}

// The per-token caches are storage whose capacity doubles when full: a
// prefill of 3 then one token a step holds 3, 6, 12, 24 positions, so 13
// steps reallocate three times, not thirteen (and the values are the full
// forward's, PrefillAndStepsEqualTheFullForward).
TEST(DecodeTest, TheCacheGrowsByDoublingNotEveryToken) {
  torch::NoGradGuard no_grad;
  for (const auto& [spec, opts] : DecodeSpecs()) {
    auto model = BuildFp64(spec, opts);
    const torch::Tensor tokens = Tokens(spec, 2, 16, 37);
    DecodeCache cache;
    model->ForwardIncremental(tokens.narrow(1, 0, 3), cache);
    auto per_token = [&]() -> const torch::Tensor& {  // the first layer's per-token storage
      for (const LayerCache& layer : cache.layers) {
        if (layer.latent.defined()) return layer.latent;
        if (layer.key.defined()) return layer.key;
      }
      throw std::logic_error("no attention layer with a per-token cache");
    };
    std::vector<std::int64_t> capacities = {per_token().size(1)};
    int reallocations = 0;
    for (std::int64_t t = 3; t < 16; ++t) {
      const void* before = per_token().data_ptr();
      model->ForwardIncremental(tokens.narrow(1, t, 1), cache);
      reallocations += per_token().data_ptr() != before;
      capacities.push_back(per_token().size(1));
    }
    const std::vector<std::int64_t> want = {3, 6, 6, 6, 12, 12, 12, 12, 12, 12, 24, 24, 24, 24};
    EXPECT_EQ(capacities, want) << spec.name;
    EXPECT_EQ(reallocations, 3) << spec.name;
  }
}

// A decode step of MLA takes the absorbed form: the rule picks it for one
// query over a prefix (the tiny spec's and K2.6's shapes) and not for a
// long prefill of K2.6; with LoRA on kv_b (unmerged, non-zero) the absorbed
// steps still equal the full forward, so the adapters are absorbed too.
TEST(DecodeTest, MlaStepsAreAbsorbedAndKeepLora) {
  ModelSpec k26 = TinyKimiSpec();
  k26.heads = 64;
  k26.mla.kv_lora_rank = 512;
  k26.mla.qk_nope_head_dim = 128;
  k26.mla.qk_rope_head_dim = 64;
  k26.mla.v_head_dim = 128;
  for (const ModelSpec& spec : {TinyKimiSpec(), k26}) {
    Init init(1);
    const MlaImpl mla(spec, ModelOptions{}, 0.02, 0.02, init);
    EXPECT_TRUE(mla.MlaAbsorbs(1, 2)) << spec.heads;
    EXPECT_TRUE(mla.MlaAbsorbs(1, 4096)) << spec.heads;
  }
  Init init(1);
  // K2.6: r (nope + v) = 131072 against t (2 r - nope - v) = 768 t: a
  // prefill of 1024 is cheaper up-projected, a step of 8 over 4096 absorbed.
  EXPECT_FALSE(MlaImpl(k26, ModelOptions{}, 0.02, 0.02, init).MlaAbsorbs(1024, 1024));
  EXPECT_TRUE(MlaImpl(k26, ModelOptions{}, 0.02, 0.02, init).MlaAbsorbs(8, 4096));

  torch::NoGradGuard no_grad;
  const ModelSpec spec = TinyKimiSpec();
  auto model = BuildFp64(spec, ModelOptions{});
  model->EnableLora(LoraOptions{4, 8.0, LoraExperts::kSharedOuter}, 7);
  Init lora_init(8);
  for (auto& [name, t] : model->LoraParameters()) t.copy_(lora_init.Normal(t.sizes(), 0.2).to(t.dtype()));
  const torch::Tensor tokens = Tokens(spec, 2, 9, 38);
  EXPECT_LT(MaxAbsDiff(DecodeStepwise(*model, tokens, 2), model->forward(tokens)), 1e-9);
}

TEST(DecodeTest, RepeatedAndSelectedRowsContinueTheirOwnSequences) {
  torch::NoGradGuard no_grad;
  for (const auto& [spec, opts] : DecodeSpecs()) {
    auto model = BuildFp64(spec, opts);
    const torch::Tensor prompt = Tokens(spec, 1, 5, 35);
    const torch::Tensor continuations = Tokens(spec, 3, 3, 36);  // one per sample row
    DecodeCache cache;
    model->ForwardIncremental(prompt, cache);
    cache.Repeat(3);
    model->ForwardIncremental(continuations.narrow(1, 0, 2), cache);
    // Drop row 1; rows 2 and 0 continue, in that order.
    const torch::Tensor keep = torch::tensor(std::vector<std::int64_t>{2, 0}, torch::kLong);
    cache.Select(keep);
    const torch::Tensor last = model->ForwardIncremental(continuations.index_select(0, keep).narrow(1, 2, 1), cache);
    for (std::int64_t i = 0; i < 2; ++i) {
      const std::int64_t row = keep[i].item<std::int64_t>();
      const torch::Tensor sequence = torch::cat({prompt, continuations.narrow(0, row, 1)}, 1);
      const torch::Tensor want = model->forward(sequence).select(1, 7);
      EXPECT_LT(MaxAbsDiff(last.select(0, i).select(0, 0), want.select(0, 0)), 1e-9) << spec.name << " row " << row;
    }
  }
}

// A fixed cache (DecodeCache::Fix, for CUDA graphs) decodes as the growing
// one: after a prefill of 3 and two samples a prompt, a step of 8 tokens and
// steps of one over the whole capacity (masked by position) give the full forward's
// logits, the buffers never move, the position counts on the device, and a
// Select keeps the cache fixed and the rows' own sequences.
TEST(DecodeTest, AFixedCacheDecodesAsTheGrowingOneInPlace) {
  torch::NoGradGuard no_grad;
  for (const auto& [spec, opts] : DecodeSpecs()) {
    auto model = BuildFp64(spec, opts);
    const torch::Tensor prompt = Tokens(spec, 1, 3, 39);
    const torch::Tensor continuations = Tokens(spec, 2, 12, 40);  // one per sample row
    DecodeCache cache;
    model->ForwardIncremental(prompt, cache);
    cache.Repeat(2);
    EXPECT_EQ(cache.Fix(2).code(), Status::Code::kInvalidArgument) << "below the 3 cached";
    ASSERT_TRUE(cache.Fix(16).ok());
    EXPECT_EQ(cache.Fix(16).code(), Status::Code::kInvalidArgument) << "fixed twice";
    ASSERT_TRUE(cache.fixed());
    std::vector<const void*> buffers;
    auto each_buffer = [&](const std::function<void(const torch::Tensor&)>& f) {
      for (LayerCache& layer : cache.layers) layer.Map([&](const torch::Tensor& t) { f(t); return t; });
    };
    each_buffer([&](const torch::Tensor& t) { buffers.push_back(t.data_ptr()); });
    // A step of 8 tokens (KDA's chunked form from the fixed state, MLA's
    // up-projected form over the capacity), then three of one token.
    std::vector<torch::Tensor> logits = {model->ForwardIncremental(continuations.narrow(1, 0, 8), cache)};
    for (std::int64_t t = 8; t < 11; ++t) logits.push_back(model->ForwardIncremental(continuations.narrow(1, t, 1), cache));
    EXPECT_EQ(cache.position().item<std::int64_t>(), 14);
    std::size_t i = 0;
    each_buffer([&](const torch::Tensor& t) { EXPECT_EQ(t.data_ptr(), buffers[i++]) << spec.name << " buffer moved"; });
    const torch::Tensor stepwise = torch::cat(logits, 1);  // [2, 11, V]
    // Each row's whole sequence, prompt and continuation, by the full forward: [2, 15, V].
    const torch::Tensor want = model->forward(torch::cat({prompt.expand({2, -1}), continuations}, 1));
    for (std::int64_t row = 0; row < 2; ++row)
      for (std::int64_t t = 0; t < 11; ++t)
        EXPECT_LT(MaxAbsDiff(stepwise.select(0, row).select(0, t), want.select(0, row).select(0, 3 + t)), 1e-9)
            << spec.name << " row " << row << " token " << t;
    const torch::Tensor keep = torch::tensor(std::vector<std::int64_t>{1}, torch::kLong);
    cache.Select(keep);
    ASSERT_TRUE(cache.fixed());
    const torch::Tensor last = model->ForwardIncremental(continuations.narrow(0, 1, 1).narrow(1, 11, 1), cache);
    EXPECT_LT(MaxAbsDiff(last.select(1, 0).select(0, 0), want.select(0, 1).select(0, 14)), 1e-9) << spec.name;
  }
}

}  // namespace
}  // namespace kp::runtime
