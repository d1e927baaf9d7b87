#include "runtime/model/tensor_parallel.h"

#include <string>
#include <vector>

#include "runtime/model/expert_parallel.h"
#include "runtime/model/layers.h"

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

Communicator& CommOf(AutogradContext* ctx) { return *reinterpret_cast<Communicator*>(ctx->saved_data["comm"].toInt()); }

// The communicator travels as an integer because saved_data holds IValues
// (as ExchangeFunction's in expert_parallel.cc); the caller keeps it alive.
std::int64_t Handle(Communicator& c) { return reinterpret_cast<std::int64_t>(&c); }

struct CopyFunction : public torch::autograd::Function<CopyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm) {
    ctx->saved_data["comm"] = comm;
    return x;  // autograd wraps a returned input as a new output
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {SummedOrThrow(CommOf(ctx), grads[0]), torch::Tensor()};
  }
};

struct ReduceFunction : public torch::autograd::Function<ReduceFunction> {
  static torch::Tensor forward(AutogradContext*, const torch::Tensor& x, std::int64_t comm) {
    return SummedOrThrow(*reinterpret_cast<Communicator*>(comm), x);
  }
  static variable_list backward(AutogradContext*, variable_list grads) { return {grads[0], torch::Tensor()}; }
};

struct GatherFunction : public torch::autograd::Function<GatherFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm, std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return OrThrow(AllGather(*reinterpret_cast<Communicator*>(comm), x, dim));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {OrThrow(ReduceScatter(CommOf(ctx), grads[0], ctx->saved_data["dim"].toInt())), torch::Tensor(),
            torch::Tensor()};
  }
};

struct ScatterFunction : public torch::autograd::Function<ScatterFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm, std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    return OrThrow(ReduceScatter(*reinterpret_cast<Communicator*>(comm), x, dim));
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {OrThrow(AllGather(CommOf(ctx), grads[0], ctx->saved_data["dim"].toInt())), torch::Tensor(),
            torch::Tensor()};
  }
};

struct SplitFunction : public torch::autograd::Function<SplitFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, std::int64_t comm, std::int64_t dim) {
    ctx->saved_data["comm"] = comm;
    ctx->saved_data["dim"] = dim;
    const Communicator& c = *reinterpret_cast<Communicator*>(comm);
    const std::int64_t shard = x.size(dim) / c.size();
    return x.narrow(dim, c.rank() * shard, shard).contiguous();
  }
  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    return {OrThrow(AllGather(CommOf(ctx), grads[0], ctx->saved_data["dim"].toInt())), torch::Tensor(),
            torch::Tensor()};
  }
};

// Megatron's vocabulary-parallel cross entropy. The forward reduces three
// per-row quantities over the group; the gradient, softmax minus the
// target's one-hot restricted to this rank's columns, is local.
struct VocabCrossEntropyFunction : public torch::autograd::Function<VocabCrossEntropyFunction> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& local, const torch::Tensor& targets,
                               std::int64_t comm) {
    Communicator& c = *reinterpret_cast<Communicator*>(comm);
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
  return CopyFunction::apply(x, Handle(tp));
}

torch::Tensor ReduceFromTensorParallel(Communicator& tp, const torch::Tensor& x) {
  return ReduceFunction::apply(x, Handle(tp));
}

torch::Tensor GatherSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  return GatherFunction::apply(x, Handle(tp), dim);
}

torch::Tensor ScatterSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  if (const Status s = CheckDivides(tp, x, dim, "ScatterSequence"); !s.ok()) throw CommunicationError(s);
  return ScatterFunction::apply(x, Handle(tp), dim);
}

torch::Tensor SplitSequence(Communicator& tp, const torch::Tensor& x, std::int64_t dim) {
  if (const Status s = CheckDivides(tp, x, dim, "SplitSequence"); !s.ok()) throw CommunicationError(s);
  return SplitFunction::apply(x, Handle(tp), dim);
}

torch::Tensor VocabParallelCrossEntropy(Communicator& tp, const torch::Tensor& local, const torch::Tensor& targets) {
  TORCH_CHECK(local.dim() == 2 && targets.dim() == 1 && targets.size(0) == local.size(0) &&
                  targets.scalar_type() == torch::kLong,
              "VocabParallelCrossEntropy: local logits [N, V / n] and int64 targets [N]");
  return VocabCrossEntropyFunction::apply(local, targets, Handle(tp));
}

torch::Tensor VocabParallelEmbedding(Communicator& tp, const torch::Tensor& local_weight, const torch::Tensor& tokens) {
  const std::int64_t rows = local_weight.size(0), first = tp.rank() * rows;
  const torch::Tensor mine = (tokens >= first) & (tokens < first + rows);
  const torch::Tensor index = torch::where(mine, tokens - first, torch::zeros_like(tokens));
  const torch::Tensor partial = torch::embedding(local_weight, index) * mine.unsqueeze(-1).to(local_weight.scalar_type());
  return ReduceFromTensorParallel(tp, partial);
}

Status ShardSwiGlu(SwiGluImpl& ffn, const Communicator& tp) {
  const int n = tp.size();
  if (n == 1) return Status::Ok();
  const std::int64_t hidden = ffn.up().weight().size(0);
  if (hidden % n != 0)
    return Status::InvalidArgument("--tp: " + std::to_string(n) + " does not divide the FFN's " +
                                   std::to_string(hidden) + " hidden units");
  for (ProjImpl* p : {ffn.gate(), &ffn.up(), &ffn.down()})
    if (p != nullptr && p->has_lora())
      return Status::InvalidArgument("--tp: tensor parallelism with LoRA adapters is not supported yet");
  const std::int64_t local = hidden / n, first = tp.rank() * local;
  if (ffn.gate() != nullptr) ffn.gate()->KeepSlice(0, first, local);
  ffn.up().KeepSlice(0, first, local);
  ffn.down().KeepSlice(1, first, local);
  return Status::Ok();
}

torch::Tensor TensorParallelSwiGlu(Communicator& tp, SwiGluImpl& ffn, const torch::Tensor& x) {
  return ReduceFromTensorParallel(tp, ffn.forward(CopyToTensorParallel(tp, x)));
}

}  // namespace kp::runtime
