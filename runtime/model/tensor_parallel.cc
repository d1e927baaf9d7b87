#include "runtime/model/tensor_parallel.h"

#include <set>
#include <string>
#include <vector>

#include "runtime/model/expert_parallel.h"
#include "runtime/model/layers.h"
#include "runtime/model/model.h"

namespace kp::runtime {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

torch::Tensor OrThrow(Result<torch::Tensor> r) {
  if (!r.ok()) throw CommunicationError(r.status());
  return std::move(r).value();
}

torch::Tensor SummedOrThrow(Communicator& c, const torch::Tensor& x) {
  torch::Tensor sum = x.contiguous().clone();
  if (const Status s = c.AllReduceSum(sum); !s.ok()) throw CommunicationError(s);
  return sum;
}

struct CopyFunction : public torch::autograd::Function<CopyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;  // autograd wraps a returned input as a new output
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {SummedOrThrow(CommunicatorOf(ctx->saved_data["comm"].toInt()), grads[0]), torch::Tensor()};
  }
};

struct ReduceFunction : public torch::autograd::Function<ReduceFunction> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, std::int64_t comm) {
    return SummedOrThrow(CommunicatorOf(comm), x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

// The collectives along a dimension; each one's backward is its conjugate.
enum class AlongDim : std::int64_t { kGather, kReduceScatter, kSplit };

AlongDim Conjugate(AlongDim op) { return op == AlongDim::kGather ? AlongDim::kReduceScatter : AlongDim::kGather; }

torch::Tensor RunAlongDim(AlongDim op, Communicator& c, const torch::Tensor& x, std::int64_t dim) {
  switch (op) {
    case AlongDim::kGather: return OrThrow(AllGather(c, x, dim));
    case AlongDim::kReduceScatter: return OrThrow(ReduceScatter(c, x, dim));
    case AlongDim::kSplit: break;
  }
  const std::int64_t shard = x.size(dim) / c.size();
  return x.narrow(dim, c.rank() * shard, shard).contiguous();
}

struct AlongDimFunction : public torch::autograd::Function<AlongDimFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm, std::int64_t dim,
                               std::int64_t op) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    ctx->saved_data["op"] = op;
    return RunAlongDim(static_cast<AlongDim>(op), CommunicatorOf(comm), x, dim);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto op = Conjugate(static_cast<AlongDim>(ctx->saved_data["op"].toInt()));
    return {RunAlongDim(op, CommunicatorOf(ctx->saved_data["comm"].toInt()), grads[0],
                        ctx->saved_data["dim"].toInt()),
            torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// Megatron's vocabulary-parallel cross entropy. The forward reduces three
// per-row quantities over the group; the gradient, softmax minus the
// target's one-hot restricted to this rank's columns, is local.
struct VocabCrossEntropyFunction : public torch::autograd::Function<VocabCrossEntropyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local, const torch::Tensor& targets,
                               std::int64_t comm) {
    Communicator& c = CommunicatorOf(comm);
    const torch::Tensor x = local.scalar_type() == torch::kDouble ? local : local.to(torch::kFloat);
    const std::int64_t width = x.size(1), first = c.rank() * width;
    // The row maxima of every rank, for a stable log-sum-exp (the
    // communicator sums only, so the maxima are gathered).
    const torch::Tensor maxima = OrThrow(AllGather(c, std::get<0>(x.max(1, /*keepdim=*/true)), 1));
    const torch::Tensor row_max = std::get<0>(maxima.max(1, /*keepdim=*/true));
    const torch::Tensor shifted_exp = torch::exp(x - row_max);
    const torch::Tensor sum_exp = SummedOrThrow(c, shifted_exp.sum(1, /*keepdim=*/true));
    const torch::Tensor ignored = targets == -100;
    const torch::Tensor mine = (targets >= first) & (targets < first + width);
    const torch::Tensor column = torch::where(mine, targets - first, torch::zeros_like(targets));
    const torch::Tensor target_logit =
        SummedOrThrow(c, torch::where(mine, x.gather(1, column.unsqueeze(1)).squeeze(1), torch::zeros_like(row_max.squeeze(1))));
    const torch::Tensor loss =
        torch::where(ignored, torch::zeros_like(target_logit), torch::log(sum_exp.squeeze(1)) + row_max.squeeze(1) - target_logit);
    ctx->save_for_backward({shifted_exp / sum_exp, column, mine, ignored});
    return loss;
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const variable_list saved = ctx->get_saved_variables();
    const torch::Tensor &softmax = saved[0], &column = saved[1], &mine = saved[2], &ignored = saved[3];
    const torch::Tensor onehot =
        torch::zeros_like(softmax).scatter_(1, column.unsqueeze(1), mine.unsqueeze(1).to(softmax.scalar_type()));
    const torch::Tensor dloss = torch::where(ignored, torch::zeros_like(grads[0]), grads[0]).unsqueeze(1);
    return {(softmax - onehot) * dloss, torch::Tensor(), torch::Tensor()};
  }
};

constexpr char kNoLoraWithTp[] = "--tp: tensor parallelism with LoRA adapters is not supported yet";

Status CheckDivides(const Communicator& c, const torch::Tensor& x, std::int64_t dim, const char* what) {
  if (x.size(dim) % c.size() != 0)
    return Status::InvalidArgument(std::string(what) + ": the group's " + std::to_string(c.size()) +
                                   " ranks do not divide dimension " + std::to_string(dim) + " of length " +
                                   std::to_string(x.size(dim)));
  return Status::Ok();
}

}  // namespace

Result<torch::Tensor> AllGather(Communicator& c, const torch::Tensor& x, std::int64_t dim) {
  // Over the all-to-all, every rank sending its x to each: the interface's
  // one collective with a tensor per peer.
  const torch::Tensor mine = x.contiguous();
  std::vector<torch::Tensor> in(c.size(), mine), out;
  for (int r = 0; r < c.size(); ++r) out.push_back(torch::empty_like(mine));
  KP_RETURN_IF_ERROR(c.AllToAll(in, out));
  return torch::cat(out, dim);
}

Result<torch::Tensor> ReduceScatter(Communicator& c, const torch::Tensor& x, std::int64_t dim) {
  KP_RETURN_IF_ERROR(CheckDivides(c, x, dim, "ReduceScatter"));
  const std::int64_t shard = x.size(dim) / c.size();
  std::vector<torch::Tensor> in, out;
  for (int r = 0; r < c.size(); ++r) {
    in.push_back(x.narrow(dim, r * shard, shard).contiguous());
    out.push_back(torch::empty_like(in.back()));
  }
  KP_RETURN_IF_ERROR(c.AllToAll(in, out));
  torch::Tensor sum = out[0];
  for (int r = 1; r < c.size(); ++r) sum = sum + out[r];  // rank order, as AllReduceSum
  return sum;
}

torch::Tensor CopyToTensorParallel(Communicator& tp, const torch::Tensor& x) {
  return CopyFunction::apply(x, CommunicatorHandle(tp));
}

torch::Tensor ReduceFromTensorParallel(Communicator& tp, const torch::Tensor& x) {
  return ReduceFunction::apply(x, CommunicatorHandle(tp));
}

torch::Tensor GatherSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  return AlongDimFunction::apply(x, CommunicatorHandle(tp), dim, static_cast<std::int64_t>(AlongDim::kGather));
}

torch::Tensor ScatterSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  if (const Status s = CheckDivides(tp, x, dim, "ScatterSequence"); !s.ok()) throw CommunicationError(s);
  return AlongDimFunction::apply(x, CommunicatorHandle(tp), dim, static_cast<std::int64_t>(AlongDim::kReduceScatter));
}

torch::Tensor SplitSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  if (const Status s = CheckDivides(tp, x, dim, "SplitSequence"); !s.ok()) throw CommunicationError(s);
  return AlongDimFunction::apply(x, CommunicatorHandle(tp), dim, static_cast<std::int64_t>(AlongDim::kSplit));
}

TensorParallelRegion::TensorParallelRegion(Communicator* tp, bool sequence_parallel)
    : tp_(tp), sequence_parallel_(sequence_parallel) {}

torch::Tensor TensorParallelRegion::Enter(const torch::Tensor& x) const {
  if (!active()) return x;
  return sequence_parallel_ ? GatherSequence(*tp_, x, 1) : CopyToTensorParallel(*tp_, x);
}

torch::Tensor TensorParallelRegion::Exit(const torch::Tensor& partial) const {
  if (!active()) return partial;
  return sequence_parallel_ ? ScatterSequence(*tp_, partial, 1) : ReduceFromTensorParallel(*tp_, partial);
}

void TensorParallelSplit::Keep(const std::string& name, torch::Tensor& param, std::int64_t dim, std::int64_t first,
                               std::int64_t count) {
  shards[name] = ParameterShard{dim, first, count, param.size(dim)};
  torch::NoGradGuard no_grad;
  // set_data keeps the registered parameter object, as KeepExperts does.
  param.set_data(KeepSlice(param, dim, first, count));
}

void TensorParallelSplit::KeepShare(const std::string& name, torch::Tensor& param, std::int64_t dim,
                                    const TensorParallelRegion& region) {
  const std::int64_t count = param.size(dim) / region.size();
  Keep(name, param, dim, region.rank() * count, count);
}

void TensorParallelSplit::Merge(const std::string& prefix, const TensorParallelSplit& part) {
  for (const auto& [name, shard] : part.shards) shards[prefix + name] = shard;
  for (const std::string& name : part.partial) partial.push_back(prefix + name);
}

torch::Tensor VocabParallelCrossEntropy(Communicator& tp, const torch::Tensor& local, const torch::Tensor& targets) {
  TORCH_CHECK(local.dim() == 2 && targets.dim() == 1 && targets.size(0) == local.size(0) &&
                  targets.scalar_type() == torch::kLong,
              "VocabParallelCrossEntropy: local logits [N, V / n] and int64 targets [N]");
  return VocabCrossEntropyFunction::apply(local, targets, CommunicatorHandle(tp));
}

torch::Tensor VocabParallelEmbedding(const TensorParallelRegion& region, const torch::Tensor& local_weight,
                                     const torch::Tensor& tokens) {
  const std::int64_t rows = local_weight.size(0), first = region.rank() * rows;
  const torch::Tensor mine = (tokens >= first) & (tokens < first + rows);
  const torch::Tensor index = torch::where(mine, tokens - first, torch::zeros_like(tokens));
  const torch::Tensor partial = torch::embedding(local_weight, index) * mine.unsqueeze(-1).to(local_weight.scalar_type());
  return region.Exit(partial);
}

Status ShardSwiGlu(SwiGluImpl& ffn, const TensorParallelRegion& region, TensorParallelSplit* split) {
  const int n = region.size();
  if (n == 1) return Status::Ok();
  const std::int64_t hidden = ffn.up().weight().size(0);
  if (hidden % n != 0)
    return Status::InvalidArgument("--tp: " + std::to_string(n) + " does not divide the FFN's " +
                                   std::to_string(hidden) + " hidden units");
  for (ProjImpl* p : {ffn.gate(), &ffn.up(), &ffn.down()})
    if (p != nullptr && p->has_lora()) return Status::InvalidArgument(kNoLoraWithTp);
  if (ffn.gate() != nullptr) split->KeepShare("gate.weight", ffn.gate()->weight(), 0, region);
  split->KeepShare("up.weight", ffn.up().weight(), 0, region);
  split->KeepShare("down.weight", ffn.down().weight(), 1, region);
  ffn.SetTensorParallel(region);
  return Status::Ok();
}

Status CheckTensorParallelSplit(const ModelSpec& spec, int tp, bool sequence_parallel, std::int64_t seq_len) {
  if (tp <= 1) return Status::Ok();
  const std::string n = std::to_string(tp);
  auto refuse = [&](std::int64_t count, const std::string& what) {
    const bool units = what == "FFN" || what == "shared experts";
    return Status::InvalidArgument("--tp: " + n + " does not divide the " + what + "'s " + std::to_string(count) +
                                   (what == "vocabulary" ? " tokens" : units ? " hidden units" : " heads"));
  };
  if (sequence_parallel && seq_len % tp != 0)
    return Status::InvalidArgument("--sequence-parallel: --tp " + n + " does not divide the sequence length " +
                                   std::to_string(seq_len));
  if (spec.vocab % tp != 0) return refuse(spec.vocab, "vocabulary");
  for (int layer = 0; layer < spec.layers; ++layer) {
    const AttentionKind kind = spec.attention[layer];
    const char* name = kind == AttentionKind::kKda ? "KDA layer" : kind == AttentionKind::kMla ? "MLA layer"
                                                                                                 : "attention layer";
    if (spec.heads % tp != 0) return refuse(spec.heads, name);
    if (kind == AttentionKind::kMha && spec.kv_heads % tp != 0)
      return refuse(spec.kv_heads, "attention layer's key-value");
    if (!spec.is_moe_layer(layer) && spec.dense_ffn % tp != 0) return refuse(spec.dense_ffn, "FFN");
    const std::int64_t shared = std::int64_t(spec.moe.shared_experts) * spec.moe.shared_ffn;
    if (spec.is_moe_layer(layer) && shared % tp != 0) return refuse(shared, "shared experts");
  }
  return Status::Ok();
}

Result<TensorParallelSplit> ShardTensorParallel(StageModelImpl& model, Communicator& tp, bool sequence_parallel,
                                                std::int64_t seq_len) {
  const TensorParallelRegion region(&tp, sequence_parallel);
  TensorParallelSplit split;
  if (!region.active()) return split;
  // Checked before anything is split, so a refusal leaves the model whole.
  KP_RETURN_IF_ERROR(CheckTensorParallelSplit(model.spec(), region.size(), sequence_parallel, seq_len));
  if (!model.LoraParameters().empty()) return Status::InvalidArgument(kNoLoraWithTp);
  for (const auto& layer : model.layers()) {
    const std::string prefix = "layers." + std::to_string(layer->index()) + ".";
    TensorParallelSplit part;
    layer->attention().ShardHeads(region, &part);
    split.Merge(prefix + "attention.", part);
    TensorParallelSplit ffn_part;
    if (auto* dense = dynamic_cast<SwiGluImpl*>(&layer->ffn())) {
      KP_RETURN_IF_ERROR(ShardSwiGlu(*dense, region, &ffn_part));
      split.Merge(prefix + "ffn.", ffn_part);
    } else if (layer->moe() != nullptr && layer->moe()->shared() != nullptr) {
      KP_RETURN_IF_ERROR(ShardSwiGlu(*layer->moe()->shared(), region, &ffn_part));
      split.Merge(prefix + "moe.shared.", ffn_part);
    }
  }
  if (model.embedding() != nullptr) {
    TensorParallelSplit part;
    model.embedding()->ShardVocab(region, &part);
    split.Merge("embedding.", part);
  }
  if (model.head() != nullptr) {
    TensorParallelSplit part;
    model.head()->ShardVocab(region, &part);
    split.Merge("head.", part);
  }
  if (region.sequence_parallel()) {
    // Everything left whole ran on this rank's tokens only, except the
    // routed experts split over expert groups (EP or ETP with TP): their
    // rows came from every rank of their block, TP ranks included, and
    // their gradients are summed over expert-DP instead.
    std::set<const c10::TensorImpl*> split_banks;
    for (const auto& layer : model.layers())
      if (layer->moe() != nullptr && layer->moe()->experts_split())
        for (const torch::Tensor& p : layer->moe()->experts().parameters()) split_banks.insert(p.unsafeGetTensorImpl());
    std::set<std::string> listed(split.partial.begin(), split.partial.end());
    for (const auto& p : model.named_parameters())
      if (split.shards.count(p.key()) == 0 && listed.count(p.key()) == 0 &&
          split_banks.count(p.value().unsafeGetTensorImpl()) == 0)
        split.partial.push_back(p.key());
  }
  return split;
}

Status ReduceTensorParallelGradients(Communicator& tp, StageModelImpl& model, const TensorParallelSplit& split,
                                     bool sequence_parallel) {
  if (tp.size() == 1) return Status::Ok();
  torch::NoGradGuard no_grad;
  const auto params = model.named_parameters();
  std::vector<torch::Tensor> grads;
  for (const std::string& name : split.partial) {
    const torch::Tensor* p = params.find(name);
    if (p != nullptr && p->grad().defined()) grads.push_back(p->grad());
  }
  // In buckets: one buffer of every partial gradient (the experts' too when
  // they are not split) would be a transient as large as they are.
  KP_RETURN_IF_ERROR(AllReduceSumBuckets(grads, &tp, /*divisor=*/1));
  return sequence_parallel ? SumRouterLoads(model, &tp) : Status::Ok();
}

}  // namespace kp::runtime
