#include "runtime/train/sharded_checkpoint.h"

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace kp::runtime {

namespace {

int RankIn(const Communicator* g) { return g != nullptr ? g->rank() : 0; }
int SizeOf(const Communicator* g) { return g != nullptr ? g->size() : 1; }

Result<TensorDType> FileDType(const torch::Tensor& t, const std::string& key) {
  if (t.scalar_type() == torch::kFloat) return TensorDType::kF32;
  if (t.scalar_type() == torch::kBFloat16) return TensorDType::kBF16;
  if (t.scalar_type() == torch::kInt) return TensorDType::kI32;  // an INT4 base's packed words
  return Status::InvalidArgument(key + ": only fp32, bf16 and int32 tensors are saved");
}

torch::ScalarType TorchDType(TensorDType t) {
  return t == TensorDType::kBF16 ? torch::kBFloat16 : t == TensorDType::kI32 ? torch::kInt : torch::kFloat;
}

// The roles of one rank in writing a box, from the groups holding it.
struct Writer {
  bool box = false;    // the weights, and the whole state where it is not sharded
  bool owned = false;  // its owned part of a sharded parameter's state
};

Writer WriterOf(const PipelineContext& ctx, const ReleasedPiece& p, const ParameterShards* shards) {
  const ReplicaGroups replicas = ctx.Replicas();
  const bool tp_first = RankIn(ctx.config.replicas.tp) == 0;
  // A routed expert's shard is held by its expert-DP group alone; without
  // the expert block, the experts are replicated as the dense tensors are.
  const bool expert_block = p.expert && replicas.expert_shards != nullptr;
  const bool one_of_tp = expert_block || p.sliced || tp_first;
  Writer w;
  w.box = one_of_tp && RankIn(p.expert ? replicas.expert_dp : replicas.dp) == 0;
  w.owned = one_of_tp && shards != nullptr && shards->ShardsParameter(p.tensor);
  return w;
}

// The bytes of a tensor's elements, contiguous on the CPU, kept alive.
struct Held {
  std::vector<torch::Tensor> tensors;
  std::string_view Of(const torch::Tensor& t) {
    tensors.push_back(t.detach().cpu().contiguous());
    const torch::Tensor& c = tensors.back();
    return {static_cast<const char*>(c.data_ptr()), static_cast<std::size_t>(c.numel() * c.element_size())};
  }
};

PieceBox BoxOf(const ReleasedPiece& p, std::int64_t begin, std::int64_t end, std::int64_t step) {
  return PieceBox{p.whole, p.offset, p.local.sizes().vec(), begin, end, step};
}

// The optimizer's state of `p`'s box to write: the tensor the state is
// kept for, and the flat range of the box it covers.
struct StateRange {
  torch::Tensor values;  // the optimizer's tensor (a parameter or a shard's values)
  std::int64_t at = 0;   // the box's range starts at element `at` of it
  std::int64_t begin = 0, end = 0;
  bool bf16 = false;     // a bf16 parameter: its fp32 master is `values`
};

// With the shards, the owned slice's part of the box; without, the box in
// the parameter itself. Nothing when this rank holds no state of it.
bool StateOf(const ReleasedPiece& p, const ParameterShards* shards, StateRange& out) {
  const std::int64_t lo = p.first_element, hi = p.first_element + p.local.numel();
  if (shards == nullptr) {
    out = {p.tensor, p.first_element, 0, p.local.numel(), false};
    return true;
  }
  const ParameterShards::Slice* s = shards->SliceOf(p.tensor);
  if (s == nullptr) return false;
  const std::int64_t a = std::max(lo, s->offset), b = std::min(hi, s->offset + s->values.numel());
  if (a >= b) return false;
  out = {s->values, a - s->offset, a - lo, b - lo, p.tensor.scalar_type() == torch::kBFloat16};
  return true;
}

Status AddState(const ReleasedPiece& p, const StateRange& r, MultiTensorAdamW& adamw, Held& held,
                std::vector<PieceToWrite>& out) {
  const torch::optim::AdamWParamState* state = adamw.StateOf(r.values);
  const std::int64_t n = r.end - r.begin;
  auto flat = [&](const torch::Tensor& t) { return t.detach().reshape({-1}).narrow(0, r.at, n).to(torch::kFloat); };
  const std::int64_t step = state == nullptr ? 0 : state->step();
  if (r.bf16) out.push_back({"master/" + p.name, TensorDType::kF32, BoxOf(p, r.begin, r.end, step), held.Of(flat(r.values))});
  if (state == nullptr) return Status::Ok();  // before its first update: no moments yet
  out.push_back({"exp_avg/" + p.name, TensorDType::kF32, BoxOf(p, r.begin, r.end, step), held.Of(flat(state->exp_avg()))});
  out.push_back(
      {"exp_avg_sq/" + p.name, TensorDType::kF32, BoxOf(p, r.begin, r.end, step), held.Of(flat(state->exp_avg_sq()))});
  return Status::Ok();
}

std::set<const void*> Trainable(const GradientReducer& reducer) {
  std::set<const void*> out;
  for (const torch::Tensor& t : reducer.params()) out.insert(t.unsafeGetTensorImpl());
  return out;
}

Result<std::vector<ReleasedPiece>> PiecesOfStage(const PipelineContext& ctx, int s, const std::string& what) {
  StageModelImpl* model = ModelOfStage(*ctx.modules.at(s));
  if (model == nullptr) return Status::InvalidArgument(what + ": stage " + std::to_string(s) + " is a stand-in");
  return ReleasedPieces(*model, RankSlices(ctx, s), /*own_names=*/true, /*adapters=*/true);
}

}  // namespace

StageSlices RankSlices(const PipelineContext& ctx, int s) {
  const PipelineReplicas& r = ctx.config.replicas;
  const auto tp = ctx.tp_splits.find(s);
  return SlicesOfStage(*ModelOfStage(*ctx.modules.at(s)), tp == ctx.tp_splits.end() ? nullptr : &tp->second,
                       RankIn(r.ep), SizeOf(r.ep), RankIn(r.etp), SizeOf(r.etp));
}

Status WriteRankPieces(const PipelineContext& ctx, const GradientReducer& reducer, const OptimizerStep& optimizer,
                       const FileSystem& fs, const std::string& path) {
  const std::set<const void*> trainable = Trainable(reducer);
  const ParameterShards* shards = optimizer.shards();
  std::vector<PieceToWrite> out;
  Held held;
  for (const auto& [s, module] : ctx.modules) {
    KP_ASSIGN_OR_RETURN(const std::vector<ReleasedPiece> pieces, PiecesOfStage(ctx, s, "--save"));
    for (const ReleasedPiece& p : pieces) {
      const Writer w = WriterOf(ctx, p, shards);
      if (w.box) {
        KP_ASSIGN_OR_RETURN(const TensorDType dtype, FileDType(p.local, p.name));
        out.push_back({"model/" + p.name, dtype, BoxOf(p, 0, p.local.numel(), 0), held.Of(p.local)});
      }
      if (!trainable.count(p.tensor.unsafeGetTensorImpl()) || !(w.owned || w.box)) continue;
      StateRange r;
      if (StateOf(p, shards, r)) KP_RETURN_IF_ERROR(AddState(p, r, optimizer.adamw(), held, out));
    }
  }
  return WriteRankFile(fs, path, out);
}

namespace {

// A box of the save as a tensor of the stored dtype, or as fp32.
Result<std::pair<torch::Tensor, std::int64_t>> FillBox(const ShardedSave& save, const std::string& key,
                                                      const ReleasedPiece& p) {
  KP_ASSIGN_OR_RETURN(ShardedSave::Filled f, save.Fill(key, p.offset, p.local.sizes().vec()));
  if (f.dtype != TensorDType::kF32 && f.dtype != TensorDType::kBF16 && f.dtype != TensorDType::kI32)
    return Status::InvalidArgument(save.folder() + ": " + key + ": " + std::string(DTypeName(f.dtype)) +
                                   ", where F32, BF16 or I32 is read");
  torch::Tensor t = torch::from_blob(f.bytes.data(), p.local.sizes(), torch::TensorOptions().dtype(TorchDType(f.dtype)))
                        .clone();
  return std::make_pair(t, f.step);
}

// One optimizer tensor's state as read, over the whole parameter's elements.
struct ReadState {
  torch::Tensor master, exp_avg, exp_avg_sq;  // fp32, flat
  std::int64_t step = 0;
  bool moments = false;
};

}  // namespace

Status ReadRankPieces(const PipelineContext& ctx, const GradientReducer& reducer, OptimizerStep& optimizer,
                      const ShardedSave& save) {
  const std::set<const void*> trainable = Trainable(reducer);
  // Every box read first; the model changes only once all are.
  std::vector<std::pair<ReleasedPiece, torch::Tensor>> weights;
  std::map<const void*, ReadState> states;
  for (const auto& [s, module] : ctx.modules) {
    KP_ASSIGN_OR_RETURN(const std::vector<ReleasedPiece> pieces, PiecesOfStage(ctx, s, "--resume"));
    for (const ReleasedPiece& p : pieces) {
      KP_ASSIGN_OR_RETURN(auto model, FillBox(save, "model/" + p.name, p));
      weights.emplace_back(p, model.first);
      if (!trainable.count(p.tensor.unsafeGetTensorImpl())) continue;
      ReadState& st = states[p.tensor.unsafeGetTensorImpl()];
      if (p.tensor.scalar_type() == torch::kBFloat16) {
        // A save without masters (of fp32 weights) gives the weights themselves.
        if (!st.master.defined()) st.master = torch::zeros({p.tensor.numel()}, torch::kFloat);
        const std::string master_key = save.Has("master/" + p.name) ? "master/" : "model/";
        KP_ASSIGN_OR_RETURN(auto master, FillBox(save, master_key + p.name, p));
        st.master.narrow(0, p.first_element, p.local.numel()).copy_(master.first.reshape({-1}).to(torch::kFloat));
      }
      if (!save.Has("exp_avg/" + p.name)) continue;
      KP_ASSIGN_OR_RETURN(auto m, FillBox(save, "exp_avg/" + p.name, p));
      KP_ASSIGN_OR_RETURN(auto v, FillBox(save, "exp_avg_sq/" + p.name, p));
      if (!st.moments) {
        st.exp_avg = torch::zeros({p.tensor.numel()}, torch::kFloat);
        st.exp_avg_sq = torch::zeros({p.tensor.numel()}, torch::kFloat);
        st.moments = true;
      }
      st.exp_avg.narrow(0, p.first_element, p.local.numel()).copy_(m.first.reshape({-1}));
      st.exp_avg_sq.narrow(0, p.first_element, p.local.numel()).copy_(v.first.reshape({-1}));
      st.step = m.second;
    }
  }
  {
    torch::NoGradGuard no_grad;
    for (auto& [p, values] : weights) p.local.copy_(values.to(p.local.scalar_type()));
  }
  // The new optimizer's masters are copies of the (rounded) weights: the
  // saved fp32 masters replace them.
  optimizer.Reset(ctx, reducer);
  MultiTensorAdamW& adamw = optimizer.adamw();
  torch::NoGradGuard no_grad;
  auto device = [&](const torch::Tensor& t, const torch::Tensor& like) { return t.to(like.options()); };
  if (const ParameterShards* shards = optimizer.shards()) {
    for (const ParameterShards::Slice& s : shards->slices()) {
      const auto found = states.find(shards->ParameterOf(s).unsafeGetTensorImpl());
      if (found == states.end()) continue;
      const ReadState& st = found->second;
      const std::int64_t n = s.values.numel();
      // A bf16 parameter's master is its own fp32 copy; an fp32 one is the
      // parameter, already loaded.
      if (st.master.defined()) s.values.copy_(device(st.master.narrow(0, s.offset, n), s.values));
      if (st.moments)
        adamw.SetState(s.values, device(st.exp_avg.narrow(0, s.offset, n), s.values),
                       device(st.exp_avg_sq.narrow(0, s.offset, n), s.values), st.step);
    }
    return Status::Ok();
  }
  for (const torch::Tensor& p : reducer.params()) {
    const auto found = states.find(p.unsafeGetTensorImpl());
    if (found == states.end() || !found->second.moments) continue;
    adamw.SetState(p, device(found->second.exp_avg, p), device(found->second.exp_avg_sq, p), found->second.step);
  }
  return Status::Ok();
}

}  // namespace kp::runtime
