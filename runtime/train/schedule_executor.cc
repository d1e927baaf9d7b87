// The schedule executor (schedule_executor.h): the routes_ read off the
// simulator's AttnRes tables, and F, B, SEND and RECV, which move the hidden
// state and the block stack between stages and through the rank store_.
#include "runtime/train/schedule_executor.h"

#include <algorithm>
#include <map>
#include <string>

#include "schedules/attnres_transport.h"
#include "specs/schedule_kind.h"

namespace kp::runtime {

namespace pipeline_internal {

namespace {

// "e" -> 0, "x8" -> 8 / block, with an optional gradient prefix "d".
Result<int> EntryIndex(std::string name, int block) {
  if (!name.empty() && name[0] == 'd') name.erase(0, 1);
  if (name == "e") return 0;
  if (name.size() > 1 && name[0] == 'x') return std::stoi(name.substr(1)) / block;
  return Status::Internal("routing tables: \"" + name + "\" is not a stack entry");
}

Result<Entries> Indices(const std::vector<std::string>& names, int block) {
  Entries out;
  for (const std::string& n : names) {
    KP_ASSIGN_OR_RETURN(int e, EntryIndex(n, block));
    out.push_back(e);
  }
  return out;
}

Result<StageRoute> RouteOf(const AttnResStageRow& row, int block, bool cache) {
  StageRoute r;
  r.stack_before = static_cast<int>(row.naive_fwd.size());
  KP_ASSIGN_OR_RETURN(r.wire_in, Indices(cache ? row.cached_fwd : row.naive_fwd, block));
  KP_ASSIGN_OR_RETURN(r.committed, Indices(row.committed, block));
  if (!cache) return r;
  KP_ASSIGN_OR_RETURN(r.held, Indices(row.held_before, block));
  KP_ASSIGN_OR_RETURN(r.deposits, Indices(row.deposits, block));
  for (const auto& [from, names] : row.collects) {
    KP_ASSIGN_OR_RETURN(Entries e, Indices(names, block));
    r.collects.push_back({from, e});
  }
  if (static_cast<int>(r.held.size() + r.wire_in.size()) != r.stack_before)
    return Status::Internal("routing tables: stage " + std::to_string(row.stage) +
                            " neither holds nor receives every stack entry");
  return r;
}

}  // namespace

Result<std::vector<StageRoute>> Routes(const PipelineRankConfig& c, const PipelineSchedule& schedule) {
  const int n = c.split.num_stages();
  const int block = c.train.model.attn_res_block;
  if (block <= 0) return std::vector<StageRoute>(n);  // no block stack: only the hidden state travels
  Result<AttnResTransport> t =
      c.attnres_cache
          ? ComputeAttnResTransport(c.train.model.layers, block, c.split, c.pp,
                                    StageRankMap{ScheduleName(c.schedule), schedule.stage_to_rank})
          : ComputeAttnResTransport(c.train.model.layers, block, c.split, c.pp);
  if (!t.ok()) return t.status();
  std::vector<StageRoute> routes;
  for (const AttnResStageRow& row : t->stages) {
    KP_ASSIGN_OR_RETURN(StageRoute r, RouteOf(row, block, c.attnres_cache));
    routes.push_back(std::move(r));
  }
  return routes;
}

Result<torch::Tensor> RankStore::Get(int mb, int entry, int stage) const {
  auto m = blocks_.find(mb);
  if (m != blocks_.end()) {
    auto it = m->second.find(entry);
    if (it != m->second.end()) return it->second;
  }
  return Status::Internal("rank store: stage " + std::to_string(stage) + " reads entry " + std::to_string(entry) +
                          " of micro-batch " + std::to_string(mb) + ", which this rank does not hold");
}

torch::Tensor RankStore::Take(int mb, int from_stage, int entry) {
  auto m = deposits_.find(mb);
  if (m == deposits_.end()) return {};
  auto it = m->second.find({from_stage, entry});
  if (it == m->second.end()) return {};
  torch::Tensor g = std::move(it->second);
  m->second.erase(it);
  if (m->second.empty()) deposits_.erase(m);
  return g;
}

std::vector<std::pair<int, int>> RankStore::Left(int mb) const {
  std::vector<std::pair<int, int>> out;
  auto m = deposits_.find(mb);
  if (m != deposits_.end())
    for (const auto& [key, g] : m->second) out.push_back(key);
  return out;
}

}  // namespace pipeline_internal

using namespace pipeline_internal;

namespace {

// One dense, contiguous buffer per hop (PR #4312's P2P finding), whose shape
// the receiver derives from the tables: [1 + entries, b, T, D].
torch::Tensor Pack(const Payload& p) {
  std::vector<torch::Tensor> parts{p.hidden.detach()};
  for (const torch::Tensor& e : p.entries) parts.push_back(e.detach());
  return torch::stack(parts).contiguous();
}

Payload Unpack(const torch::Tensor& buffer) {
  Payload p;
  p.hidden = buffer[0];
  for (std::int64_t i = 1; i < buffer.size(0); ++i) p.entries.push_back(buffer[i]);
  return p;
}

Payload Clone(const Payload& p) { return Unpack(Pack(p).clone()); }

torch::Tensor GradOrZeros(const torch::Tensor& leaf) {
  return leaf.grad().defined() ? leaf.grad() : torch::zeros_like(leaf);
}

torch::Tensor Leaf(const torch::Tensor& t, bool requires_grad) { return t.detach().requires_grad_(requires_grad); }

std::string Where(int s, int m) { return "stage " + std::to_string(s) + " micro-batch " + std::to_string(m); }

}  // namespace

// ---------------------------------------------------------------- a step

ScheduleExecutor::ScheduleExecutor(const PipelineContext& context, std::vector<StageRoute> routes)
    : ctx_(context), routes_(std::move(routes)) {}

Status ScheduleExecutor::Run(const torch::Tensor& tokens, MicroBatchLoss* loss, bool training) {
  tokens_ = tokens;
  step_loss_ = loss;
  Reset();
  KP_RETURN_IF_ERROR(RunActions(training));
  return CheckDrained();
}

std::vector<PipelineTraffic> ScheduleExecutor::traffic() const {
  std::vector<PipelineTraffic> out;
  for (const auto& [key, row] : traffic_) out.push_back(row);
  return out;
}

Status ScheduleExecutor::CheckDrained() const {
  if (!saved_.empty() || !fwd_inbox_.empty() || !bwd_inbox_.empty() || !fwd_outbox_.empty() || !bwd_outbox_.empty() ||
      !store_.empty())
    return Status::Internal("pipeline rank " + std::to_string(ctx_.rank()) +
                            ": the schedule left activations, messages or stored blocks behind");
  return Status::Ok();
}

void ScheduleExecutor::Reset() {
  saved_.clear(), fwd_inbox_.clear(), bwd_inbox_.clear(), fwd_outbox_.clear(), bwd_outbox_.clear();
  store_.Clear();
  traffic_.clear();
  losses_ = torch::zeros({ctx_.M()}, ctx_.OnDevice(torch::kDouble));
}

// ---------------------------------------------------------------- actions

Status ScheduleExecutor::RunActions(bool training) {
  for (const std::optional<PipelineAction>& a : ctx_.schedule.ranks[ctx_.rank()]) {
    if (!a) continue;
    const int s = a->stage, m = a->microbatch;
    switch (a->type) {
      case ActionType::kForward: KP_RETURN_IF_ERROR(Forward(s, m, training)); break;
      case ActionType::kSendF: KP_RETURN_IF_ERROR(SendHop(s, m, true)); break;
      case ActionType::kRecvF: KP_RETURN_IF_ERROR(RecvHop(s, m, true)); break;
      // I computes input and weight gradients in one pass; W has nothing left.
      case ActionType::kBackwardInput:
      case ActionType::kFullBackward:
        if (training) KP_RETURN_IF_ERROR(Backward(s, m));
        break;
      case ActionType::kBackwardWeight: break;
      case ActionType::kSendB:
        if (training) KP_RETURN_IF_ERROR(SendHop(s, m, false));
        break;
      case ActionType::kRecvB:
        if (training) KP_RETURN_IF_ERROR(RecvHop(s, m, false));
        break;
    }
  }
  return Status::Ok();
}

// A hop to a stage on this rank is handed over in memory (a copy, as the
// wire would make); one to another rank waits for its SEND action.
void ScheduleExecutor::Deliver(int to_stage, int m, bool forward, Payload p) {
  const int from = forward ? to_stage - 1 : to_stage + 1;
  if (ctx_.RankOf(to_stage) == ctx_.rank()) {
    (forward ? fwd_inbox_ : bwd_inbox_)[{to_stage, m}] = Clone(p);
  } else {
    (forward ? fwd_outbox_ : bwd_outbox_)[{from, m}] = std::move(p);
  }
}

Status ScheduleExecutor::SendHop(int s, int m, bool forward) {
  auto& outbox = forward ? fwd_outbox_ : bwd_outbox_;
  auto it = outbox.find({s, m});
  if (it == outbox.end())
    return Status::Internal("SEND_" + std::string(forward ? "F" : "B") + " of " + Where(s, m) +
                            " before its compute action");
  const torch::Tensor buffer = Pack(it->second);
  PipelineTraffic& t = traffic_[{s, forward}];
  t.stage = s, t.forward = forward;
  t.messages += 1;
  t.entries += static_cast<std::int64_t>(it->second.entries.size());
  const std::int64_t one = buffer[0].numel() * buffer.element_size();
  t.hidden_bytes += one;
  t.entry_bytes += one * static_cast<std::int64_t>(it->second.entries.size());
  outbox.erase(it);
  return ctx_.comm->Send(buffer, ctx_.RankOf(forward ? s + 1 : s - 1), Tag(s, m, forward));
}

// The receive buffer's shape comes from the tables: the entries on this hop
// plus the hidden state, each one micro-batch of [T, D] (with SP, this
// rank's T / tp positions).
Status ScheduleExecutor::RecvHop(int s, int m, bool forward) {
  const int from = forward ? s - 1 : s + 1;
  const std::size_t entries = forward ? routes_[s].wire_in.size() : routes_[s + 1].wire_in.size();
  torch::Tensor buffer = torch::empty(
      {static_cast<std::int64_t>(1 + entries), ctx_.Rows(), ctx_.LocalTokens(), ctx_.config.train.model.hidden}, ctx_.OnDevice(ctx_.act_dtype));
  KP_RETURN_IF_ERROR(ctx_.comm->Recv(buffer, ctx_.RankOf(from), Tag(from, m, forward)));
  (forward ? fwd_inbox_ : bwd_inbox_)[{s, m}] = Unpack(buffer);
  return Status::Ok();
}

// ---------------------------------------------------------------- forward

// Assembles the stack the stage's layers expect from the received delta and
// the rank store, runs the stage, stores what it received and committed,
// and hands on only what the next stage's rank lacks.
Status ScheduleExecutor::Forward(int s, int m, bool training) {
  PipelineStageModule& module = *ctx_.modules.at(s);
  const StageRoute& r = routes_[s];
  const bool cache = ctx_.config.attnres_cache;
  const torch::Tensor mb = MicroBatchRows(tokens_, m, ctx_.M());
  ForwardState st;
  ResidualStream in;
  if (s == 0) {
    in = module.Embed(ctx_.OwnTokens(mb.narrow(1, 0, ctx_.seq_len)));
  } else {
    auto it = fwd_inbox_.find({s, m});
    if (it == fwd_inbox_.end()) return Status::Internal("F of " + Where(s, m) + " before its input arrived");
    Payload p = std::move(it->second);
    fwd_inbox_.erase(it);
    in.hidden = Leaf(p.hidden, training);
    in.blocks.resize(r.stack_before);
    for (std::size_t i = 0; i < r.wire_in.size(); ++i) {
      in.blocks[r.wire_in[i]] = Leaf(p.entries[i], training);
      if (cache) store_.Put(m, r.wire_in[i], p.entries[i]);
    }
    for (int e : r.held) {
      KP_ASSIGN_OR_RETURN(torch::Tensor t, store_.Get(m, e, s));
      in.blocks[e] = Leaf(t, training);
    }
    st.hidden_in = in.hidden;
    st.stack_in = in.blocks;
  }
  ResidualStream out = module.RunLayers(std::move(in), training);
  if (cache)
    for (int e : r.committed) store_.Put(m, e, out.blocks.at(e).detach());
  if (cache && s == ctx_.LastLocal()) store_.Release(m);  // the rank's last forward for this micro-batch
  if (ctx_.IsLast(s)) {
    const torch::Tensor loss =
        step_loss_ != nullptr ? step_loss_->Share(module.Logits(out), m) : module.Loss(out, ctx_.OwnTokens(mb.narrow(1, 1, ctx_.seq_len)));
    losses_.select(0, m).copy_(loss.detach());
    // A step's own loss is already its share of the batch.
    if (training) st.scaled_loss = step_loss_ != nullptr ? loss : loss.div(static_cast<double>(ctx_.M()));
  } else {
    Payload p{out.hidden.detach(), {}};
    for (int e : routes_[s + 1].wire_in) p.entries.push_back(out.blocks.at(e).detach());
    Deliver(s + 1, m, true, std::move(p));
    if (training) st.out = std::move(out);
  }
  if (training) saved_[{s, m}] = std::move(st);
  return Status::Ok();
}

// ---------------------------------------------------------------- backward

// Folds the deposits of the later same-rank stages that read an entry this
// stage put on the rank into that entry's incoming gradient, later stages
// first, then the gradient from the wire. Counts are checked against the
// tables: a missing deposit fails here, an extra one at the rank's first
// stage.
Status ScheduleExecutor::Collect(int s, int m, std::map<int, torch::Tensor>& grads) {
  std::map<int, torch::Tensor> folded;
  const auto& collects = routes_[s].collects;
  for (auto it = collects.rbegin(); it != collects.rend(); ++it) {
    const auto& [from, entries] = *it;
    for (int e : entries) {
      torch::Tensor d = store_.Take(m, from, e);
      if (!d.defined())
        return Status::Internal("deposit count: " + Where(s, m) + " expected " + std::to_string(entries.size()) +
                                " deposit(s) from stage " + std::to_string(from) + " (the routing tables), entry " +
                                std::to_string(e) + " is missing");
      folded[e] = folded[e].defined() ? folded[e] + d : d;
    }
  }
  for (auto& [e, g] : folded) {
    auto wire = grads.find(e);
    grads[e] = wire != grads.end() ? g + wire->second : g;
  }
  return Status::Ok();
}

// The gradients of the stored columns go into the rank store, for the
// stage that put them on the rank.
Status ScheduleExecutor::Deposit(int s, int m, const ForwardState& st) {
  bool dropped = false;
  for (int e : routes_[s].deposits) {
    if (faults_.drop_deposit_of_stage == s && m == 0 && !dropped) {
      dropped = true;  // the test hook
      continue;
    }
    store_.Deposit(m, s, e, GradOrZeros(st.stack_in.at(e)));
  }
  return Status::Ok();
}

// The assembled stack is the stage's autograd leaf: received columns send
// their gradient back dense and in wire order, stored columns deposit theirs.
Status ScheduleExecutor::Backward(int s, int m) {
  auto found = saved_.find({s, m});
  if (found == saved_.end()) return Status::Internal("backward of " + Where(s, m) + " before its forward");
  ForwardState st = std::move(found->second);
  saved_.erase(found);
  std::vector<torch::Tensor> roots, grads;
  if (ctx_.IsLast(s)) {
    roots.push_back(st.scaled_loss);
    grads.push_back(torch::ones_like(st.scaled_loss));
  } else {
    auto it = bwd_inbox_.find({s, m});
    if (it == bwd_inbox_.end()) return Status::Internal("backward of " + Where(s, m) + " before its gradient arrived");
    Payload g = std::move(it->second);
    bwd_inbox_.erase(it);
    std::map<int, torch::Tensor> entry_grads;
    const Entries& wire_out = routes_[s + 1].wire_in;
    for (std::size_t i = 0; i < wire_out.size(); ++i) entry_grads[wire_out[i]] = g.entries[i];
    if (ctx_.config.attnres_cache) KP_RETURN_IF_ERROR(Collect(s, m, entry_grads));
    roots.push_back(st.out.hidden);
    grads.push_back(g.hidden);
    for (auto& [e, grad] : entry_grads) {
      roots.push_back(st.out.blocks.at(e));
      grads.push_back(grad);
    }
  }
  std::vector<torch::Tensor> live_roots, live_grads;
  for (std::size_t i = 0; i < roots.size(); ++i)
    if (roots[i].requires_grad()) live_roots.push_back(roots[i]), live_grads.push_back(grads[i]);
  if (!live_roots.empty()) torch::autograd::backward(live_roots, live_grads);
  if (ctx_.config.attnres_cache) KP_RETURN_IF_ERROR(Deposit(s, m, st));
  if (s > 0) {
    Payload p{GradOrZeros(st.hidden_in), {}};
    for (int e : routes_[s].wire_in) p.entries.push_back(GradOrZeros(st.stack_in.at(e)));
    Deliver(s - 1, m, false, std::move(p));
  }
  if (ctx_.config.attnres_cache && s == ctx_.FirstLocal()) {
    const auto left = store_.Left(m);
    if (!left.empty())
      return Status::Internal("deposit count: micro-batch " + std::to_string(m) + " on rank " +
                              std::to_string(ctx_.rank()) + " has " + std::to_string(left.size()) +
                              " deposit(s) no stage collected (first: stage " + std::to_string(left[0].first) +
                              ", entry " + std::to_string(left[0].second) + ")");
  }
  return Status::Ok();
}

}  // namespace kp::runtime
