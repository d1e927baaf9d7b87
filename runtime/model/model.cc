#include "runtime/model/model.h"

#include <cmath>

#include "runtime/kernels/kernels.h"
#include "runtime/model/recompute.h"

namespace kp::runtime {

namespace {

constexpr double kInitStd = 0.02;
constexpr std::uint64_t kHeadStream = 1'000'000;
constexpr std::uint64_t kLoraSalt = 0x10a10a10aULL;

torch::Dtype WeightDtype(const ModelOptions& options) {
  return options.weight_dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat;
}

// FNV-1a: a platform-independent string hash for per-module seeds.
std::uint64_t HashName(const std::string& s) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ULL;
  return h;
}

// Output projections start smaller with depth (GPT-2 / torchtitan style), so
// the partial sums do not grow with the layer count.
double OutputStd(const ModelSpec& spec) { return kInitStd / std::sqrt(2.0 * spec.layers); }

// ---------------------------------------------------------------- layer boundary

// What a layer's backward needs: the layer and how to unpack its inputs.
struct LayerBody : torch::CustomClassHolder {
  DecoderLayerImpl* layer = nullptr;
  bool has_partial = false;
  bool record_load = false;
  bool recompute = false;
};

torch::Tensor RunBody(const LayerBody& body, const std::vector<torch::Tensor>& inputs, bool record_load) {
  const std::size_t n_blocks = inputs.size() - (body.has_partial ? 1 : 0);
  const std::vector<torch::Tensor> blocks(inputs.begin(), inputs.begin() + n_blocks);
  return body.layer->Body(blocks, body.has_partial ? inputs.back() : torch::Tensor(), record_load);
}

// Every decoder layer is one autograd node whose backward differentiates the
// layer's own graph with torch::autograd::grad. With checkpointing the
// forward keeps only the inputs and the backward rebuilds that graph by
// running Body again; without, the forward keeps the graph. Either way the
// gradient of an input used by several layers is summed over layers by the
// outer graph in the same order, so checkpointing changes no bit of any
// gradient (CPU; recomputation is deterministic). The trainable parameters
// are explicit inputs, so their gradients flow even when no activation input
// requires grad (LoRA over a frozen embedding). A recomputation never
// records router load, so the bias update counts each token once.
class LayerBoundary : public torch::autograd::Function<LayerBoundary> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs, at::TensorList params,
                               c10::intrusive_ptr<LayerBody> body) {
    ctx->saved_data["body"] = c10::IValue::make_capsule(body);
    ctx->saved_data["params"] = params.vec();
    if (body->recompute) {
      ctx->save_for_backward(inputs.vec());
      return RunBody(*body, inputs.vec(), body->record_load);
    }
    torch::AutoGradMode enable(true);
    const std::vector<torch::Tensor> detached = DetachedInputs(inputs);
    const torch::Tensor out = RunBody(*body, detached, body->record_load);
    ctx->saved_data["inputs"] = detached;
    ctx->saved_data["out"] = out;
    return out.detach();
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto body = c10::static_intrusive_pointer_cast<LayerBody>(ctx->saved_data["body"].toCapsule());
    std::vector<torch::Tensor> inputs;
    torch::Tensor out;
    if (body->recompute) {
      inputs = DetachedInputs(ctx->get_saved_variables());
      torch::AutoGradMode enable(true);
      out = RunBody(*body, inputs, /*record_load=*/false);
    } else {
      inputs = ctx->saved_data["inputs"].toTensorVector();
      out = ctx->saved_data["out"].toTensor();
      ctx->saved_data.erase("out");
      ctx->saved_data.erase("inputs");
    }
    // One more slot, for the body.
    return BoundaryGradients({out}, grad_out, inputs, ctx->saved_data["params"].toTensorVector(), 1);
  }
};

// Megatron's uniform recomputation of N layers: a group of consecutive
// layers is one autograd node that keeps only the stream it starts from
// (the committed blocks and the first layer's partial sum) and runs every
// layer of the group again in the backward. Its outputs are the blocks the
// group commits, then its last layer's output, so the layers after it read
// the stack as they would without recomputation. The gradients equal the
// per-layer run's up to the order in which a block's gradient is summed
// over the layers that read it (within the group, then across groups).
struct GroupBody : torch::CustomClassHolder {
  std::vector<DecoderLayerImpl*> layers;
  bool has_partial = false;  // the first layer continues a block
  bool record_load = false;
};

// The group's layers on `inputs` (blocks..., [partial]) with no boundary of
// their own: the committed blocks, then the last output.
std::vector<torch::Tensor> RunGroup(const GroupBody& body, const std::vector<torch::Tensor>& inputs,
                                    bool record_load) {
  const std::size_t n_blocks = inputs.size() - (body.has_partial ? 1 : 0);
  ResidualStream s{torch::Tensor(), std::vector<torch::Tensor>(inputs.begin(), inputs.begin() + n_blocks)};
  s.hidden = body.layers.front()->Body(s.blocks, body.has_partial ? inputs.back() : torch::Tensor(), record_load);
  for (std::size_t i = 1; i < body.layers.size(); ++i) {
    const torch::Tensor partial = body.layers[i]->Commit(s);
    s.hidden = body.layers[i]->Body(s.blocks, partial, record_load);
  }
  std::vector<torch::Tensor> out(s.blocks.begin() + static_cast<std::ptrdiff_t>(n_blocks), s.blocks.end());
  out.push_back(s.hidden);
  return out;
}

class GroupBoundary : public torch::autograd::Function<GroupBoundary> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, at::TensorList inputs,
                                                at::TensorList params, c10::intrusive_ptr<GroupBody> body) {
    ctx->saved_data["body"] = c10::IValue::make_capsule(body);
    ctx->saved_data["params"] = params.vec();
    ctx->save_for_backward(inputs.vec());
    return RunGroup(*body, inputs.vec(), body->record_load);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto body = c10::static_intrusive_pointer_cast<GroupBody>(ctx->saved_data["body"].toCapsule());
    const std::vector<torch::Tensor> inputs = DetachedInputs(ctx->get_saved_variables());
    std::vector<torch::Tensor> outs;
    {
      torch::AutoGradMode enable(true);
      outs = RunGroup(*body, inputs, /*record_load=*/false);
    }
    // One more slot, for the body.
    return BoundaryGradients(outs, grad_out, inputs, ctx->saved_data["params"].toTensorVector(), 1);
  }
};

ResidualStream RunRecomputedGroup(std::vector<DecoderLayerImpl*> layers, ResidualStream in, bool record_load) {
  ResidualStream out = std::move(in);
  const torch::Tensor partial = layers.front()->Commit(out);
  std::vector<torch::Tensor> inputs = out.blocks;
  if (partial.defined()) inputs.push_back(partial);
  std::vector<torch::Tensor> params;
  for (DecoderLayerImpl* layer : layers) {
    const std::vector<torch::Tensor> own = TrainableOf(*layer);
    params.insert(params.end(), own.begin(), own.end());
  }
  auto body = c10::make_intrusive<GroupBody>();
  body->layers = std::move(layers);
  body->has_partial = partial.defined();
  body->record_load = record_load;
  const torch::autograd::variable_list results =
      GroupBoundary::apply(at::TensorList(inputs), at::TensorList(params), body);
  out.blocks.insert(out.blocks.end(), results.begin(), results.end() - 1);
  out.hidden = results.back();
  return out;
}

}  // namespace

// ---------------------------------------------------------------- layer

DecoderLayerImpl::DecoderLayerImpl(const ModelSpec& spec, const ModelOptions& options, int layer)
    : index_(layer),
      block_(spec.attn_res_block),
      checkpoint_(options.activation_checkpointing),
      recompute_ffn_(spec.is_moe_layer(layer) ? options.recompute_moe : options.recompute_mlp),
      recompute_norms_(options.recompute_layernorm) {
  Init init(options.seed, 1 + static_cast<std::uint64_t>(layer), options.deferred_init, WeightDtype(options));
  const std::int64_t d = spec.hidden;
  const double out_std = OutputStd(spec);
  // Layer 0's attention read would be over the embedding alone, which is the
  // identity; Kimi K3 has no parameters for it, nor do we.
  if (block_ > 0 && layer > 0) attn_res_ = register_module("attn_res", std::make_shared<AttnResImpl>(d, spec.norm_eps, options.fused_kernels));
  if (block_ > 0)
    ffn_res_ = register_module("ffn_res", std::make_shared<AttnResImpl>(d, spec.norm_eps, options.fused_kernels));
  attn_norm_ = register_module("attn_norm", std::make_shared<RmsNormImpl>(d, spec.norm_eps, options.fused_kernels));
  ffn_norm_ = register_module("ffn_norm", std::make_shared<RmsNormImpl>(d, spec.norm_eps, options.fused_kernels));
  switch (spec.attention[layer]) {
    case AttentionKind::kKda:
      attention_ = register_module("attention", std::make_shared<KdaImpl>(spec, options, kInitStd, out_std, init));
      break;
    case AttentionKind::kMla:
      attention_ = register_module("attention", std::make_shared<MlaImpl>(spec, options, kInitStd, out_std, init));
      break;
    case AttentionKind::kMha:
      attention_ = register_module("attention", std::make_shared<MhaImpl>(spec, options, kInitStd, out_std, init));
      break;
  }
  if (spec.is_moe_layer(layer)) {
    auto moe = std::make_shared<MoeImpl>(spec, options, kInitStd, out_std, init);
    moe_ = moe.get();
    ffn_ = register_module("moe", moe);
  } else {
    ffn_ = register_module("ffn", std::make_shared<SwiGluImpl>(d, spec.dense_ffn, spec.gated_ffn, kInitStd, out_std,
                                                               init, options.fused_kernels));
  }
  deferred_ = init.TakeDeferred();
}

torch::Tensor DecoderLayerImpl::Body(const std::vector<torch::Tensor>& blocks, const torch::Tensor& partial,
                                     bool record_load, LayerCache* cache) {
  // Plain residual (no blocks): partial is the residual stream itself.
  const torch::Tensor attn_in = attn_res_ ? attn_res_->forward(blocks, partial)
                                          : (partial.defined() ? partial : blocks.back());
  OutputRecompute attn_norm_output, ffn_norm_output;
  const torch::Tensor attn_normed = Norm(*attn_norm_, attn_in, attn_norm_output);
  const torch::Tensor attn_out = cache ? attention_->MixIncremental(attn_normed, *cache) : attention_->Mix(attn_normed);
  if (recompute_norms_) attn_norm_output.DiscardOutputs(attn_out);
  const torch::Tensor prefix = partial.defined() ? partial + attn_out : attn_out;
  const torch::Tensor ffn_in = ffn_res_ ? ffn_res_->forward(blocks, prefix) : prefix;
  const torch::Tensor ffn_out = MixChannels(Norm(*ffn_norm_, ffn_in, ffn_norm_output), record_load);
  if (recompute_norms_) ffn_norm_output.DiscardOutputs(ffn_out);
  return prefix + ffn_out;
}

torch::Tensor DecoderLayerImpl::Norm(RmsNormImpl& norm, const torch::Tensor& x, OutputRecompute& output) {
  if (!recompute_norms_) return norm.forward(x);
  return output.Run([&norm](const std::vector<torch::Tensor>& in) { return std::vector<torch::Tensor>{norm.forward(in[0])}; },
                    {x}, TrainableOf(norm))[0];
}

torch::Tensor DecoderLayerImpl::MixChannels(const torch::Tensor& x, bool record_load) {
  return recompute_ffn_ ? MixRecomputed(*ffn_, x, record_load) : ffn_->Mix(x, record_load);
}

torch::Tensor DecoderLayerImpl::Commit(ResidualStream& out) const {
  if (!commits_block()) return out.hidden;
  out.blocks.push_back(out.hidden);
  return {};
}

ResidualStream DecoderLayerImpl::ForwardIncremental(ResidualStream in, LayerCache& cache) {
  ResidualStream out = std::move(in);
  const torch::Tensor partial = Commit(out);
  out.hidden = Body(out.blocks, partial, /*record_load=*/false, &cache);
  return out;
}

ResidualStream DecoderLayerImpl::forward(ResidualStream in, const ForwardContext& ctx) {
  ResidualStream out = std::move(in);
  const torch::Tensor partial = Commit(out);
  if (!torch::GradMode::is_enabled()) {
    out.hidden = Body(out.blocks, partial, ctx.record_router_load);
    return out;
  }
  std::vector<torch::Tensor> inputs = out.blocks;
  if (partial.defined()) inputs.push_back(partial);
  const std::vector<torch::Tensor> params = TrainableOf(*this);
  auto body = c10::make_intrusive<LayerBody>();
  body->layer = this;
  body->has_partial = partial.defined();
  body->record_load = ctx.record_router_load;
  body->recompute = checkpoint_;
  out.hidden = LayerBoundary::apply(at::TensorList(inputs), at::TensorList(params), body);
  return out;
}

// ---------------------------------------------------------------- decode cache

void DecodeCache::Select(const torch::Tensor& index) {
  for (LayerCache& layer : layers)
    layer.Map([&](const torch::Tensor& t) { return t.index_select(0, index.to(t.device())); });
}

void DecodeCache::Repeat(std::int64_t n) {
  for (LayerCache& layer : layers) layer.Map([&](const torch::Tensor& t) { return t.repeat_interleave(n, 0); });
}

Status DecodeCache::Fix(std::int64_t capacity) {
  if (layers.empty()) return Status::InvalidArgument("decode cache: nothing to fix before the prefill");
  if (fixed()) return Status::InvalidArgument("decode cache: already fixed");
  const std::int64_t used = length();
  if (capacity < used)
    return Status::InvalidArgument("decode cache: capacity " + std::to_string(capacity) + " is below the " +
                                   std::to_string(used) + " tokens cached");
  torch::Tensor position;
  for (LayerCache& layer : layers) {
    for (torch::Tensor* t : layer.PerToken()) {
      if (!t->defined()) continue;
      std::vector<std::int64_t> sizes = t->sizes().vec();
      sizes[1] = capacity;
      // Zeros past the prefix: a masked key's weight is exactly 0, and 0
      // times an uninitialised NaN would not be.
      torch::Tensor storage = torch::zeros(sizes, t->options());
      storage.narrow(1, 0, used).copy_(t->narrow(1, 0, used));
      *t = storage;
    }
    for (torch::Tensor* t : layer.States())
      if (t->defined()) *t = t->clone(at::MemoryFormat::Contiguous);
    layer.Map([&](const torch::Tensor& t) {
      if (!position.defined()) position = torch::full({1}, used, t.options().dtype(torch::kLong));
      return t;
    });
    layer.position = position;
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- embedding, head

EmbeddingImpl::EmbeddingImpl(const ModelSpec& spec, const ModelOptions& options)
    : bf16_(options.dtype == DType::kBf16) {
  Init init(options.seed, 0, options.deferred_init, WeightDtype(options));
  weight_ = register_parameter("weight", init.Normal({spec.vocab, spec.hidden}, 1.0));
  deferred_ = init.TakeDeferred();
}

ResidualStream EmbeddingImpl::forward(const torch::Tensor& tokens) {
  const torch::Tensor e =
      region_.active() ? VocabParallelEmbedding(region_, weight_, tokens) : torch::embedding(weight_, tokens);
  // bf16 weights under fp32 activations: the stream starts in fp32.
  const bool up = !bf16_ && e.scalar_type() == torch::kBFloat16;
  return ResidualStream{bf16_ ? e.to(torch::kBFloat16) : up ? e.to(torch::kFloat) : e, {}};
}

void EmbeddingImpl::ShardVocab(const TensorParallelRegion& region, TensorParallelSplit* split) {
  split->KeepShare("weight", weight_, 0, region);
  region_ = region;
}

HeadImpl::HeadImpl(const ModelSpec& spec, const ModelOptions& options) {
  Init init(options.seed, kHeadStream, options.deferred_init, WeightDtype(options));
  if (spec.attn_res_block > 0)
    output_res_ = register_module("output_res", std::make_shared<AttnResImpl>(spec.hidden, spec.norm_eps,
                                                                                options.fused_kernels));
  norm_ = register_module("norm", std::make_shared<RmsNormImpl>(spec.hidden, spec.norm_eps, options.fused_kernels));
  lm_head_ = register_module("lm_head", std::make_shared<ProjImpl>(spec.hidden, spec.vocab,
                                                                   1.0 / std::sqrt(double(spec.hidden)), init, false));
  deferred_ = init.TakeDeferred();
}

torch::Tensor HeadImpl::Normed(const ResidualStream& in) {
  return norm_->forward(output_res_ ? output_res_->forward(in.blocks, in.hidden) : in.hidden);
}

torch::Tensor HeadImpl::Logits(const ResidualStream& in) {
  TORCH_CHECK(!region_.active(), "a head split by vocabulary gives the loss only");
  return lm_head_->forward(Normed(in));
}

void HeadImpl::ShardVocab(const TensorParallelRegion& region, TensorParallelSplit* split) {
  split->KeepShare("lm_head.weight", lm_head_->weight(), 0, region);
  region_ = region;
}

torch::Tensor HeadImpl::Loss(const ResidualStream& in, const torch::Tensor& targets, bool fused) {
  const torch::Tensor h = Normed(in);
  const torch::Tensor ids = targets.reshape({-1});
  if (region_.active()) {
    // torch's mean: over the targets that are not ignored.
    const torch::Tensor local = lm_head_->forward(region_.Enter(h));
    return VocabParallelCrossEntropy(region_.group(), local.reshape({-1, local.size(-1)}), ids).sum() /
           (ids != -100).sum();
  }
  const torch::Tensor rows = h.reshape({-1, h.size(-1)});
  if (fused && !lm_head_->has_lora() && LinearCrossEntropyKernelApplies(rows, lm_head_->weight()))
    return LinearCrossEntropyKernel(rows, lm_head_->weight(), ids) / (ids != -100).sum();
  return LanguageModelLoss(lm_head_->forward(h), targets, fused);
}

torch::Tensor HeadImpl::forward(const ResidualStream& in) { return Upcast(Logits(in)); }

// ---------------------------------------------------------------- stage

StageModelImpl::StageModelImpl(const ModelSpec& spec, const ModelOptions& options, const StageLayers& stage)
    : spec_(spec),
      stage_(stage),
      fused_kernels_(options.fused_kernels),
      group_layers_(std::max(1, options.checkpoint_group_layers)),
      bf16_activations_(options.dtype == DType::kBf16),
      grouped_(options.activation_checkpointing && options.checkpoint_first_layers == 0 && group_layers_ > 1) {
  if (stage.embedding) embedding_ = register_module("embedding", std::make_shared<EmbeddingImpl>(spec, options));
  layer_list_ = register_module("layers", std::make_shared<torch::nn::Module>("LayerList"));
  for (int l = stage.first_layer; l < stage.end_layer; ++l) {
    ModelOptions layer_options = options;
    layer_options.activation_checkpointing =
        options.activation_checkpointing && !grouped_ &&
        (options.checkpoint_first_layers == 0 || l - stage.first_layer < options.checkpoint_first_layers);
    layers_.push_back(std::make_shared<DecoderLayerImpl>(spec, layer_options, l));
    layer_list_->register_module(std::to_string(l), layers_.back());
  }
  if (stage.head) head_ = register_module("head", std::make_shared<HeadImpl>(spec, options));
  auto take = [&](std::vector<DeferredNormal> part) {
    deferred_.insert(deferred_.end(), std::make_move_iterator(part.begin()), std::make_move_iterator(part.end()));
  };
  if (embedding_) take(embedding_->TakeDeferred());
  for (const auto& layer : layers_) take(layer->TakeDeferred());
  if (head_) take(head_->TakeDeferred());
}

Status StageModelImpl::Materialize() {
  KP_RETURN_IF_ERROR(kp::runtime::Materialize(*this, deferred_));
  deferred_.clear();
  return Status::Ok();
}

ResidualStream StageModelImpl::Embed(const torch::Tensor& tokens) {
  TORCH_CHECK(embedding_, "this stage holds no embedding");
  return embedding_->forward(tokens);
}

ResidualStream StageModelImpl::RunLayers(ResidualStream in, const ForwardContext& ctx) {
  if (!grouped_ || !torch::GradMode::is_enabled()) {
    for (const auto& layer : layers_) in = layer->forward(std::move(in), ctx);
    return in;
  }
  // Megatron's uniform groups start at the stage's (chunk's) first layer;
  // the last may be shorter.
  for (std::size_t g = 0; g < layers_.size(); g += static_cast<std::size_t>(group_layers_)) {
    std::vector<DecoderLayerImpl*> group;
    for (std::size_t l = g; l < std::min(layers_.size(), g + group_layers_); ++l) group.push_back(layers_[l].get());
    in = RunRecomputedGroup(std::move(group), std::move(in), ctx.record_router_load);
  }
  return in;
}

torch::Tensor StageModelImpl::Head(const ResidualStream& in) {
  TORCH_CHECK(head_, "this stage holds no head");
  return head_->forward(in);
}

torch::Tensor StageModelImpl::HeadLoss(const ResidualStream& in, const torch::Tensor& targets) {
  TORCH_CHECK(head_, "this stage holds no head");
  return head_->Loss(in, targets, fused_kernels_);
}

torch::Tensor StageModelImpl::forward(const torch::Tensor& tokens, const ForwardContext& ctx) {
  return Head(RunLayers(Embed(tokens), ctx));
}

torch::Tensor StageModelImpl::ForwardIncremental(const torch::Tensor& tokens, DecodeCache& cache) {
  if (cache.layers.empty()) cache.layers.resize(layers_.size());
  TORCH_CHECK(cache.layers.size() == layers_.size(), "a decode cache of ", cache.layers.size(),
              " layers for a stage of ", layers_.size());
  ResidualStream stream = Embed(tokens);
  for (std::size_t i = 0; i < layers_.size(); ++i)
    stream = layers_[i]->ForwardIncremental(std::move(stream), cache.layers[i]);
  if (cache.fixed()) cache.position().add_(tokens.size(1));  // on the device: a graph's replays advance it
  return Head(stream);
}

bool StageModelImpl::DecodeStepStaysOnDevice(const torch::Device& device) {
  const auto activations =
      torch::TensorOptions().device(device).dtype(bf16_activations_ ? torch::kBFloat16 : torch::kFloat);
  for (const auto& layer : layers_)
    if (layer->moe() && !layer->moe()->GroupedFor(activations)) return false;
  return true;
}

void StageModelImpl::SetActivationCheckpointing(bool on) {
  grouped_ = on && group_layers_ > 1;
  for (const auto& layer : layers_) layer->set_checkpointing(on && !grouped_);
}

void StageModelImpl::UpdateRouterBiases(double rate) {
  for (const auto& layer : layers_)
    if (layer->moe()) layer->moe()->router().UpdateBias(rate);
}

void StageModelImpl::EnableLora(const LoraOptions& lora, std::uint64_t seed) {
  for (const auto& item : named_modules()) {
    auto* adaptable = dynamic_cast<LoraAdaptable*>(item.value().get());
    if (!adaptable) continue;
    Init init(seed ^ kLoraSalt, HashName(item.key()));
    adaptable->AddLora(lora, init);
  }
  for (auto& p : named_parameters()) p.value().set_requires_grad(p.key().find("lora_") != std::string::npos);
}

Status StageModelImpl::QuantizeExpertBase() {
  for (const auto& layer : layers_)
    if (layer->moe()) KP_RETURN_IF_ERROR(layer->moe()->experts().QuantizeBase());
  return Status::Ok();
}

void StageModelImpl::MergeLora() {
  for (const auto& m : modules())
    if (auto* a = dynamic_cast<LoraAdaptable*>(m.get())) a->Merge();
}

void StageModelImpl::UnmergeLora() {
  for (const auto& m : modules())
    if (auto* a = dynamic_cast<LoraAdaptable*>(m.get())) a->Unmerge();
}

std::vector<torch::Tensor> StageModelImpl::TrainableParameters() const {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> StageModelImpl::LoraParameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& p : named_parameters())
    if (p.key().find("lora_") != std::string::npos) out.emplace_back(p.key(), p.value());
  return out;
}

Result<std::shared_ptr<StageModelImpl>> BuildStage(const ModelSpec& spec, const ModelOptions& options,
                                                   const StageLayers& stage) {
  KP_RETURN_IF_ERROR(ValidateForRuntime(spec));
  if (stage.first_layer < 0 || stage.end_layer > spec.layers || stage.first_layer > stage.end_layer)
    return Status::InvalidArgument("stage: layers [" + std::to_string(stage.first_layer) + ", " +
                                   std::to_string(stage.end_layer) + ") are outside the model's " +
                                   std::to_string(spec.layers) + " layers");
  try {
    return std::make_shared<StageModelImpl>(spec, options, stage);
  } catch (const c10::Error& e) {
    return Status::Internal("building the model: " + std::string(e.what_without_backtrace()));
  }
}

Result<std::shared_ptr<StageModelImpl>> BuildModel(const ModelSpec& spec, const ModelOptions& options) {
  return BuildStage(spec, options, StageLayers{0, spec.layers, true, true});
}

torch::Tensor LanguageModelLoss(const torch::Tensor& logits, const torch::Tensor& targets, bool fused) {
  const torch::Tensor rows = logits.reshape({-1, logits.size(-1)}), ids = targets.reshape({-1});
  if (fused && CrossEntropyKernelApplies(rows)) {
    // torch's mean: over the targets that are not ignored.
    return CrossEntropyKernel(rows, ids).sum() / (ids != -100).sum();
  }
  return torch::nn::functional::cross_entropy(Upcast(rows), ids);
}

void StageModelImpl::SetContextParallel(const ContextShard& cp) {
  for (const auto& layer : layers_) layer->attention().SetContextParallel(cp);
}

Status SumRouterLoads(StageModelImpl& model, Communicator* group) {
  if (group == nullptr || group->size() == 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  for (const auto& layer : model.layers()) {
    if (layer->moe() == nullptr) continue;
    KP_RETURN_IF_ERROR(group->AllReduceSum(layer->moe()->router().load()));
  }
  return Status::Ok();
}

std::int64_t CountElements(const std::vector<torch::Tensor>& tensors) {
  std::int64_t n = 0;
  for (const torch::Tensor& t : tensors) n += t.numel();
  return n;
}

// ---------------------------------------------------------------- adapters

Status SaveAdapters(const StageModelImpl& model, const std::string& path) {
  const auto adapters = model.LoraParameters();
  if (adapters.empty()) return Status::InvalidArgument("--lora-rank: the model has no LoRA adapters to save");
  try {
    torch::serialize::OutputArchive archive;
    for (const auto& [name, tensor] : adapters) archive.write(name, tensor.detach().cpu());
    archive.save_to(path);
  } catch (const c10::Error& e) {
    return Status::IoError("saving adapters to " + path + ": " + e.what_without_backtrace());
  }
  return Status::Ok();
}

Status LoadAdapters(StageModelImpl& model, const std::string& path) {
  torch::serialize::InputArchive archive;
  try {
    archive.load_from(path);
  } catch (const c10::Error& e) {
    return Status::NotFound("adapters: cannot read " + path);
  }
  torch::NoGradGuard no_grad;
  for (auto& [name, tensor] : model.LoraParameters()) {
    torch::Tensor loaded;
    try {
      archive.read(name, loaded);
    } catch (const c10::Error&) {
      return Status::InvalidArgument("adapters: " + path + " has no adapter " + name);
    }
    if (loaded.sizes() != tensor.sizes())
      return Status::InvalidArgument("adapters: " + name + " in " + path + " has shape " +
                                     c10::str(loaded.sizes()) + ", the model's is " + c10::str(tensor.sizes()));
    tensor.copy_(loaded);
  }
  return Status::Ok();
}

}  // namespace kp::runtime
