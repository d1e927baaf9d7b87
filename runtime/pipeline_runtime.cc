#include "runtime/pipeline_runtime.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>

#include "common/clock.h"
#include "runtime/communicator.h"
#include "runtime/data_parallel.h"
#include "runtime/expert_parallel.h"
#include "runtime/pipeline_stage.h"
#include "runtime/trainer_internal.h"
#include "simulator/attnres_transport.h"
#include "simulator/pipeline_schedule.h"
#include "simulator/schedule_generators.h"

namespace kp::runtime {

namespace {

using Entries = std::vector<int>;

// One stage's routing, by stack-entry index, read off the simulator's
// tables (AttnResStageRow) for the transport this run uses.
struct StageRoute {
  int stack_before = 0;  // entries of the stack the stage receives
  Entries wire_in;       // entries on the hop from stage - 1, in wire order
  Entries held;          // entries read from the rank store (cache on)
  Entries committed;     // entries this stage appends
  Entries deposits;      // gradients deposited in the rank store (cache on)
  std::vector<std::pair<int, Entries>> collects;  // (later stage, entries) this stage collects (cache on)
};

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

// The routes of every stage. With the cache on, the schedule's own
// stage-to-rank map is checked for loop style (the simulator refuses any
// other, naming the schedule and the first stage off it).
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

// What crosses a hop: the hidden state and the listed stack entries (or
// their gradients), each [b, T, D].
struct Payload {
  torch::Tensor hidden;
  std::vector<torch::Tensor> entries;
};

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

// The rank store of PR #4312, shared by the rank's stages: the stack
// entries of each in-flight micro-batch, and the gradient deposits of the
// stages that read them, until the stage that put them there collects them.
class RankStore {
 public:
  void Put(int mb, int entry, torch::Tensor t) { blocks_[mb][entry] = std::move(t); }

  Result<torch::Tensor> Get(int mb, int entry, int stage) const {
    auto m = blocks_.find(mb);
    if (m != blocks_.end()) {
      auto it = m->second.find(entry);
      if (it != m->second.end()) return it->second;
    }
    return Status::Internal("rank store: stage " + std::to_string(stage) + " reads entry " + std::to_string(entry) +
                            " of micro-batch " + std::to_string(mb) + ", which this rank does not hold");
  }

  void Release(int mb) { blocks_.erase(mb); }
  void Deposit(int mb, int from_stage, int entry, torch::Tensor g) { deposits_[mb][{from_stage, entry}] = std::move(g); }

  /// Removes and returns the deposit, or an undefined tensor.
  torch::Tensor Take(int mb, int from_stage, int entry) {
    auto m = deposits_.find(mb);
    if (m == deposits_.end()) return {};
    auto it = m->second.find({from_stage, entry});
    if (it == m->second.end()) return {};
    torch::Tensor g = std::move(it->second);
    m->second.erase(it);
    if (m->second.empty()) deposits_.erase(m);
    return g;
  }

  /// The deposits of `mb` nobody collected: (stage, entry) pairs.
  std::vector<std::pair<int, int>> Left(int mb) const {
    std::vector<std::pair<int, int>> out;
    auto m = deposits_.find(mb);
    if (m != deposits_.end())
      for (const auto& [key, g] : m->second) out.push_back(key);
    return out;
  }

  bool empty() const { return blocks_.empty() && deposits_.empty(); }
  void Clear() { blocks_.clear(), deposits_.clear(); }

 private:
  std::map<int, std::map<int, torch::Tensor>> blocks_;
  std::map<int, std::map<std::pair<int, int>, torch::Tensor>> deposits_;
};

// What a stage's backward needs of its forward.
struct ForwardState {
  torch::Tensor hidden_in;             // leaf (undefined on stage 0)
  std::vector<torch::Tensor> stack_in; // leaves, by entry
  ResidualStream out;                  // the stage's output (not on the last stage)
  torch::Tensor scaled_loss;           // the last stage: loss_m / M
};

using Key = std::pair<int, int>;  // (stage, micro-batch)

std::string Where(int s, int m) { return "stage " + std::to_string(s) + " micro-batch " + std::to_string(m); }

}  // namespace

struct PipelineRank::Impl {
  PipelineRankConfig config;
  Communicator* comm = nullptr;
  PipelineSchedule schedule;  // lowered: carries SEND/RECV
  std::vector<StageRoute> routes;
  std::map<int, std::shared_ptr<PipelineStageModule>> modules;  // by stage
  std::vector<torch::Tensor> params;  // this rank's, in stage order
  std::vector<int> slots;             // each param's index in the whole model's order
  int global_params = 0;
  std::unique_ptr<torch::optim::AdamW> optimizer;
  torch::ScalarType act_dtype = torch::kFloat;
  torch::Device device{torch::kCPU};
  SplitParameters split;  // params as dense / expert, for the DP average
  std::vector<int> expert_at;  // indices into params of the sharded experts' banks
  int dp_rank = 0, dp_size = 1;
  int step = 0;

  // Per step.
  int seq_len = 0;                      // T of this step's rows
  MicroBatchLoss* step_loss = nullptr;  // null: the language-model loss
  torch::Tensor tokens;  // [batch, T + 1]
  std::vector<double> losses;
  RankStore store;
  std::map<Key, ForwardState> saved;
  std::map<Key, Payload> fwd_inbox, bwd_inbox, fwd_outbox, bwd_outbox;
  std::map<std::pair<int, bool>, PipelineTraffic> traffic;

  int rank() const { return comm->rank(); }
  int M() const { return config.microbatches; }
  int Tokens() const { return seq_len; }
  std::int64_t ReplicaRows() const { return config.train.batch / dp_size; }
  std::int64_t Rows() const { return ReplicaRows() / M(); }
  torch::TensorOptions OnDevice(torch::ScalarType t) const { return torch::TensorOptions().dtype(t).device(device); }
  int RankOf(int s) const { return schedule.stage_to_rank[s]; }
  bool IsLast(int s) const { return s == schedule.num_stages - 1; }
  int FirstLocal() const { return modules.begin()->first; }
  int LastLocal() const { return modules.rbegin()->first; }
  // Tags are per (sending stage, micro-batch, direction), so a message is
  // never matched to another hop's receive.
  int Tag(int from_stage, int m, bool forward) const { return (from_stage * M() + m) * 2 + (forward ? 0 : 1); }

  Status Setup(StageModuleFactory factory);
  Status PlaceStages();
  void CollectParameters();
  Status BeginPhase(const TrainConfig& train);
  ReplicaGroups Replicas() const {
    const PipelineReplicas& r = config.replicas;
    return ReplicaGroups{r.dp, r.ep != nullptr ? r.expert_dp : r.dp, r.ep, dp_size};
  }
  Status AverageOverReplicas();
  Status ExchangeParameterLayout();
  Status RunActions(bool training);
  Status Forward(int s, int m, bool training);
  Status Backward(int s, int m);
  Status Collect(int s, int m, std::map<int, torch::Tensor>& grads);
  Status Deposit(int s, int m, const ForwardState& st);
  Status SendHop(int s, int m, bool forward);
  Status RecvHop(int s, int m, bool forward);
  void Deliver(int to_stage, int m, bool forward, Payload p);
  Status CheckDrained() const;
  void ResetStep();
  Status SetTokens(const std::vector<std::int64_t>& tokens);
  Result<double> ReduceLoss();
  Result<double> ReduceGradNorm();
  Result<PipelineStepResult> TrainStep(const std::vector<std::int64_t>& tokens, int seq_len, MicroBatchLoss* loss);
  Result<double> EvalStep(const std::vector<std::int64_t>& tokens);
};

// ---------------------------------------------------------------- setup

namespace {

Status ValidateConfig(const PipelineRankConfig& c, const Communicator& comm) {
  if (c.pp < 1 || comm.size() != c.pp)
    return Status::InvalidArgument("--pp: " + std::to_string(c.pp) + " does not match the pipeline group's " +
                                   std::to_string(comm.size()) + " ranks");
  const int dp = c.replicas.dp != nullptr ? c.replicas.dp->size() : 1;
  if (c.train.batch % dp != 0)
    return Status::InvalidArgument("--batch: " + std::to_string(c.train.batch) + " sequences do not split evenly over dp " +
                                   std::to_string(dp));
  const int rows = c.train.batch / dp;
  if (c.microbatches < 1 || rows % c.microbatches != 0)
    return Status::InvalidArgument("--microbatches: " + std::to_string(c.microbatches) + " must be positive and divide " +
                                   "the " + std::to_string(rows) + " sequences of a replica (--batch " +
                                   std::to_string(c.train.batch) + " over dp " + std::to_string(dp) + ")");
  return ValidateTrainConfig(c.train);
}

}  // namespace

Status PipelineRank::Impl::Setup(StageModuleFactory factory) {
  KP_RETURN_IF_ERROR(ValidateConfig(config, *comm));
  KP_RETURN_IF_ERROR(ValidateForRuntime(config.train.model));
  config.train.options.seed = config.train.seed;
  KP_ASSIGN_OR_RETURN(device, ParseDevice(config.train.device));
  if (config.replicas.dp != nullptr) dp_rank = config.replicas.dp->rank(), dp_size = config.replicas.dp->size();
  const int vp = ScheduleTakesVp(config.schedule) ? config.vp : 1;
  KP_ASSIGN_OR_RETURN(PipelineSchedule compute, GenerateSchedule(config.schedule, config.pp, vp, M()));
  KP_ASSIGN_OR_RETURN(schedule, AddCommunication(compute));
  if (config.split.stages.empty()) {
    KP_ASSIGN_OR_RETURN(config.split, EvenSplit(config.train.model.layers, schedule.num_stages));
  }
  if (config.split.num_stages() != schedule.num_stages)
    return Status::InvalidArgument("--split: " + std::to_string(config.split.num_stages()) + " stages, the " +
                                   ScheduleName(config.schedule) + " schedule has " +
                                   std::to_string(schedule.num_stages));
  // The split's ends are the embedding and the head, whatever the counts say.
  config.split.stages.front().embedding = true;
  config.split.stages.back().head = true;
  KP_ASSIGN_OR_RETURN(routes, Routes(config, schedule));
  if (!factory)
    factory = [this](int, const StageLayers& layers) {
      return MakeModelStage(config.train.model, config.train.options, layers);
    };
  for (int s = 0; s < schedule.num_stages; ++s) {
    if (RankOf(s) != rank()) continue;
    KP_ASSIGN_OR_RETURN(modules[s], factory(s, config.split.stages[s]));
  }
  if (modules.empty()) return Status::InvalidArgument("--schedule: rank " + std::to_string(rank()) + " holds no stage");
  act_dtype = config.train.options.dtype == DType::kBf16 ? torch::kBFloat16 : torch::kFloat;
  KP_RETURN_IF_ERROR(PlaceStages());
  CollectParameters();
  KP_RETURN_IF_ERROR(ExchangeParameterLayout());
  optimizer = std::make_unique<torch::optim::AdamW>(ParamGroups(params, config.train),
                                                    torch::optim::AdamWOptions(config.train.lr));
  return Status::Ok();
}

// Shards each model stage's experts over EP and moves it to the device.
Status PipelineRank::Impl::PlaceStages() {
  for (auto& [s, module] : modules) {
    StageModelImpl* model = ModelOfStage(*module);
    if (model == nullptr) continue;
    KP_RETURN_IF_ERROR(ShardExperts(*model, config.replicas.ep));
    model->to(device);
  }
  return Status::Ok();
}

// The rank's trainable parameters (stage order), split into dense and
// expert ones for the DP average.
void PipelineRank::Impl::CollectParameters() {
  params.clear(), expert_at.clear(), slots.clear();
  split = SplitParameters{};
  for (auto& [s, module] : modules) {
    StageModelImpl* model = ModelOfStage(*module);
    const std::vector<torch::Tensor> mine = module->TrainableParameters();
    const SplitParameters part = model != nullptr ? SplitByReplication(*model, mine)
                                                  : SplitParameters{mine, {}, std::vector<bool>(mine.size(), false)};
    for (std::size_t i = 0; i < mine.size(); ++i) {
      if (part.is_expert[i] && config.replicas.ep != nullptr) expert_at.push_back(static_cast<int>(params.size()));
      params.push_back(mine[i]);
    }
    split.dense.insert(split.dense.end(), part.dense.begin(), part.dense.end());
    split.expert.insert(split.expert.end(), part.expert.begin(), part.expert.end());
    split.is_expert.insert(split.is_expert.end(), part.is_expert.begin(), part.is_expert.end());
  }
}

// LoRA goes on after a full-weight warm start, as TrainSession's would on a
// loaded checkpoint: the adapters are initialised by name, so every split
// gets the single-process model's.
Status PipelineRank::Impl::BeginPhase(const TrainConfig& next) {
  TrainConfig t = next;
  t.model = config.train.model;
  t.options = config.train.options;
  t.device = config.train.device;
  t.seed = config.train.seed;
  t.deterministic = config.train.deterministic;
  PipelineRankConfig c = config;
  c.train = t;
  KP_RETURN_IF_ERROR(ValidateConfig(c, *comm));
  const bool add_lora = t.lora.enabled() && !config.train.lora.enabled();
  if (!t.lora.enabled() && config.train.lora.enabled())
    return Status::InvalidArgument("--lora-rank: a phase cannot drop the LoRA adapters the last one trained");
  for (auto& [s, module] : modules)
    if (add_lora && ModelOfStage(*module) == nullptr)
      return Status::InvalidArgument("--lora-rank: stage " + std::to_string(s) + " is a stand-in");
  // The last phase's gradients go: a frozen base would keep them resident.
  for (const torch::Tensor& p : params) p.mutable_grad() = torch::Tensor();
  if (add_lora)
    for (auto& [s, module] : modules) {
      StageModelImpl* model = ModelOfStage(*module);
      model->EnableLora(t.lora, t.seed);
      model->to(device);
    }
  config.train = t;
  CollectParameters();
  KP_RETURN_IF_ERROR(ExchangeParameterLayout());
  optimizer = std::make_unique<torch::optim::AdamW>(ParamGroups(params, config.train),
                                                    torch::optim::AdamWOptions(config.train.lr));
  step = 0;
  return Status::Ok();
}

// Every rank learns how many parameters each stage has, so a parameter's
// place in the whole model's order (stage major) is known everywhere and the
// gradient norm can be summed in that order.
Status PipelineRank::Impl::ExchangeParameterLayout() {
  torch::Tensor host = torch::zeros({schedule.num_stages}, torch::kDouble);
  for (auto& [s, module] : modules) host[s] = static_cast<double>(module->TrainableParameters().size());
  torch::Tensor counts = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(counts));
  counts = counts.cpu();
  std::vector<int> offset(schedule.num_stages + 1, 0);
  for (int s = 0; s < schedule.num_stages; ++s) offset[s + 1] = offset[s] + static_cast<int>(counts[s].item<double>());
  global_params = offset.back();
  for (auto& [s, module] : modules) {
    const int n = static_cast<int>(module->TrainableParameters().size());
    for (int j = 0; j < n; ++j) slots.push_back(offset[s] + j);
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- actions

Status PipelineRank::Impl::RunActions(bool training) {
  for (const std::optional<PipelineAction>& a : schedule.ranks[rank()]) {
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
void PipelineRank::Impl::Deliver(int to_stage, int m, bool forward, Payload p) {
  const int from = forward ? to_stage - 1 : to_stage + 1;
  if (RankOf(to_stage) == rank()) {
    (forward ? fwd_inbox : bwd_inbox)[{to_stage, m}] = Clone(p);
  } else {
    (forward ? fwd_outbox : bwd_outbox)[{from, m}] = std::move(p);
  }
}

Status PipelineRank::Impl::SendHop(int s, int m, bool forward) {
  auto& outbox = forward ? fwd_outbox : bwd_outbox;
  auto it = outbox.find({s, m});
  if (it == outbox.end())
    return Status::Internal("SEND_" + std::string(forward ? "F" : "B") + " of " + Where(s, m) +
                            " before its compute action");
  const torch::Tensor buffer = Pack(it->second);
  PipelineTraffic& t = traffic[{s, forward}];
  t.stage = s, t.forward = forward;
  t.messages += 1;
  t.entries += static_cast<std::int64_t>(it->second.entries.size());
  const std::int64_t one = buffer[0].numel() * buffer.element_size();
  t.hidden_bytes += one;
  t.entry_bytes += one * static_cast<std::int64_t>(it->second.entries.size());
  outbox.erase(it);
  return comm->Send(buffer, RankOf(forward ? s + 1 : s - 1), Tag(s, m, forward));
}

// The receive buffer's shape comes from the tables: the entries on this hop
// plus the hidden state, each one micro-batch of [T, D].
Status PipelineRank::Impl::RecvHop(int s, int m, bool forward) {
  const int from = forward ? s - 1 : s + 1;
  const std::size_t entries = forward ? routes[s].wire_in.size() : routes[s + 1].wire_in.size();
  torch::Tensor buffer = torch::empty(
      {static_cast<std::int64_t>(1 + entries), Rows(), Tokens(), config.train.model.hidden}, OnDevice(act_dtype));
  KP_RETURN_IF_ERROR(comm->Recv(buffer, RankOf(from), Tag(from, m, forward)));
  (forward ? fwd_inbox : bwd_inbox)[{s, m}] = Unpack(buffer);
  return Status::Ok();
}

// ---------------------------------------------------------------- forward

// Assembles the stack the stage's layers expect from the received delta and
// the rank store, runs the stage, stores what it received and committed,
// and hands on only what the next stage's rank lacks.
Status PipelineRank::Impl::Forward(int s, int m, bool training) {
  PipelineStageModule& module = *modules.at(s);
  const StageRoute& r = routes[s];
  const bool cache = config.attnres_cache;
  const torch::Tensor mb = MicroBatchRows(tokens, m, M());
  ForwardState st;
  ResidualStream in;
  if (s == 0) {
    in = module.Embed(mb.narrow(1, 0, Tokens()));
  } else {
    auto it = fwd_inbox.find({s, m});
    if (it == fwd_inbox.end()) return Status::Internal("F of " + Where(s, m) + " before its input arrived");
    Payload p = std::move(it->second);
    fwd_inbox.erase(it);
    in.hidden = Leaf(p.hidden, training);
    in.blocks.resize(r.stack_before);
    for (std::size_t i = 0; i < r.wire_in.size(); ++i) {
      in.blocks[r.wire_in[i]] = Leaf(p.entries[i], training);
      if (cache) store.Put(m, r.wire_in[i], p.entries[i]);
    }
    for (int e : r.held) {
      KP_ASSIGN_OR_RETURN(torch::Tensor t, store.Get(m, e, s));
      in.blocks[e] = Leaf(t, training);
    }
    st.hidden_in = in.hidden;
    st.stack_in = in.blocks;
  }
  ResidualStream out = module.RunLayers(std::move(in), training);
  if (cache)
    for (int e : r.committed) store.Put(m, e, out.blocks.at(e).detach());
  if (cache && s == LastLocal()) store.Release(m);  // the rank's last forward for this micro-batch
  if (IsLast(s)) {
    const torch::Tensor loss =
        step_loss != nullptr ? step_loss->Share(module.Logits(out), m) : module.Loss(out, mb.narrow(1, 1, Tokens()));
    losses[m] = loss.item<double>();
    // A step's own loss is already its share of the batch.
    if (training) st.scaled_loss = step_loss != nullptr ? loss : loss.div(static_cast<double>(M()));
  } else {
    Payload p{out.hidden.detach(), {}};
    for (int e : routes[s + 1].wire_in) p.entries.push_back(out.blocks.at(e).detach());
    Deliver(s + 1, m, true, std::move(p));
    if (training) st.out = std::move(out);
  }
  if (training) saved[{s, m}] = std::move(st);
  return Status::Ok();
}

// ---------------------------------------------------------------- backward

// Folds the deposits of the later same-rank stages that read an entry this
// stage put on the rank into that entry's incoming gradient, later stages
// first, then the gradient from the wire. Counts are checked against the
// tables: a missing deposit fails here, an extra one at the rank's first
// stage.
Status PipelineRank::Impl::Collect(int s, int m, std::map<int, torch::Tensor>& grads) {
  std::map<int, torch::Tensor> folded;
  const auto& collects = routes[s].collects;
  for (auto it = collects.rbegin(); it != collects.rend(); ++it) {
    const auto& [from, entries] = *it;
    for (int e : entries) {
      torch::Tensor d = store.Take(m, from, e);
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
Status PipelineRank::Impl::Deposit(int s, int m, const ForwardState& st) {
  bool dropped = false;
  for (int e : routes[s].deposits) {
    if (config.drop_deposit_of_stage == s && m == 0 && !dropped) {
      dropped = true;  // the test hook
      continue;
    }
    store.Deposit(m, s, e, GradOrZeros(st.stack_in.at(e)));
  }
  return Status::Ok();
}

// The assembled stack is the stage's autograd leaf: received columns send
// their gradient back dense and in wire order, stored columns deposit theirs.
Status PipelineRank::Impl::Backward(int s, int m) {
  auto found = saved.find({s, m});
  if (found == saved.end()) return Status::Internal("backward of " + Where(s, m) + " before its forward");
  ForwardState st = std::move(found->second);
  saved.erase(found);
  std::vector<torch::Tensor> roots, grads;
  if (IsLast(s)) {
    roots.push_back(st.scaled_loss);
    grads.push_back(torch::ones_like(st.scaled_loss));
  } else {
    auto it = bwd_inbox.find({s, m});
    if (it == bwd_inbox.end()) return Status::Internal("backward of " + Where(s, m) + " before its gradient arrived");
    Payload g = std::move(it->second);
    bwd_inbox.erase(it);
    std::map<int, torch::Tensor> entry_grads;
    const Entries& wire_out = routes[s + 1].wire_in;
    for (std::size_t i = 0; i < wire_out.size(); ++i) entry_grads[wire_out[i]] = g.entries[i];
    if (config.attnres_cache) KP_RETURN_IF_ERROR(Collect(s, m, entry_grads));
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
  if (config.attnres_cache) KP_RETURN_IF_ERROR(Deposit(s, m, st));
  if (s > 0) {
    Payload p{GradOrZeros(st.hidden_in), {}};
    for (int e : routes[s].wire_in) p.entries.push_back(GradOrZeros(st.stack_in.at(e)));
    Deliver(s - 1, m, false, std::move(p));
  }
  if (config.attnres_cache && s == FirstLocal()) {
    const auto left = store.Left(m);
    if (!left.empty())
      return Status::Internal("deposit count: micro-batch " + std::to_string(m) + " on rank " +
                              std::to_string(rank()) + " has " + std::to_string(left.size()) +
                              " deposit(s) no stage collected (first: stage " + std::to_string(left[0].first) +
                              ", entry " + std::to_string(left[0].second) + ")");
  }
  return Status::Ok();
}

// ---------------------------------------------------------------- step

Status PipelineRank::Impl::CheckDrained() const {
  if (!saved.empty() || !fwd_inbox.empty() || !bwd_inbox.empty() || !fwd_outbox.empty() || !bwd_outbox.empty() ||
      !store.empty())
    return Status::Internal("pipeline rank " + std::to_string(rank()) +
                            ": the schedule left activations, messages or stored blocks behind");
  return Status::Ok();
}

void PipelineRank::Impl::ResetStep() {
  saved.clear(), fwd_inbox.clear(), bwd_inbox.clear(), fwd_outbox.clear(), bwd_outbox.clear();
  store.Clear();
  traffic.clear();
  losses.assign(M(), 0.0);
}

Status PipelineRank::Impl::SetTokens(const std::vector<std::int64_t>& t) {
  const std::int64_t want = std::int64_t(config.train.batch) * (Tokens() + 1);
  if (static_cast<std::int64_t>(t.size()) != want)
    return Status::InvalidArgument("tokens: " + std::to_string(t.size()) + " given, --batch x (--seq-len + 1) is " +
                                   std::to_string(want));
  tokens = torch::tensor(t, torch::kLong)
               .reshape({config.train.batch, Tokens() + 1})
               .narrow(0, dp_rank * ReplicaRows(), ReplicaRows())
               .to(device);
  return Status::Ok();
}

// Only the last stage's rank has the losses; the others add zeros, which
// is exact, and everyone sums the micro-batches in order; then the
// replicas' means are averaged over DP (in DP-rank order in-process).
Result<double> PipelineRank::Impl::ReduceLoss() {
  torch::Tensor host = torch::zeros({M()}, torch::kDouble);
  if (RankOf(schedule.num_stages - 1) == rank())
    for (int m = 0; m < M(); ++m) host[m] = losses[m];
  torch::Tensor l = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(l));
  l = l.cpu();
  double sum = 0;
  for (int m = 0; m < M(); ++m) sum += l[m].item<double>();
  const double mine = step_loss != nullptr ? sum : sum / M();
  if (dp_size == 1) return mine;
  torch::Tensor replica = torch::full({1}, mine, OnDevice(torch::kDouble));
  KP_RETURN_IF_ERROR(config.replicas.dp->AllReduceSum(replica));
  return replica.item<double>() / dp_size;
}

// The replicas' gradients averaged (the dense ones over DP, the experts'
// over expert-DP); every parameter has a gradient afterwards.
Status PipelineRank::Impl::AverageOverReplicas() {
  if (dp_size == 1) return Status::Ok();
  return AverageGradients(split, Replicas());
}

// Each parameter's square lands in its own slot of the whole model's order
// (one rank contributes to a slot, so the all-reduce is exact) and the sum
// runs over the slots in order: SumInOrder over the single model.
// A sharded expert bank's square is first summed over its EP group.
Result<double> PipelineRank::Impl::ReduceGradNorm() {
  std::vector<double> mine = GradSquares(params);
  if (!expert_at.empty()) {
    torch::Tensor host = torch::zeros({static_cast<std::int64_t>(expert_at.size())}, torch::kDouble);
    for (std::size_t i = 0; i < expert_at.size(); ++i) host[i] = mine[expert_at[i]];
    torch::Tensor banks = host.to(device);
    KP_RETURN_IF_ERROR(config.replicas.ep->AllReduceSum(banks));
    banks = banks.cpu();
    for (std::size_t i = 0; i < expert_at.size(); ++i) mine[expert_at[i]] = banks[i].item<double>();
  }
  torch::Tensor host = torch::zeros({global_params}, torch::kDouble);
  for (std::size_t i = 0; i < mine.size(); ++i) host[slots[i]] = mine[i];
  torch::Tensor squares = host.to(device);
  KP_RETURN_IF_ERROR(comm->AllReduceSum(squares));
  const torch::Tensor flat = squares.cpu().contiguous();
  const double* d = flat.data_ptr<double>();
  return std::sqrt(SumInOrder(std::vector<double>(d, d + global_params)));
}

Result<PipelineStepResult> PipelineRank::Impl::TrainStep(const std::vector<std::int64_t>& t, int T,
                                                        MicroBatchLoss* loss) {
  Stopwatch watch;
  if (T < 1) return Status::InvalidArgument("seq_len: a step's rows need at least one token, got " + std::to_string(T));
  seq_len = T;
  step_loss = loss;
  KP_RETURN_IF_ERROR(SetTokens(t));
  ResetStep();
  PipelineStepResult r;
  r.lr = LearningRate(config.train, step);
  for (auto& group : optimizer->param_groups())
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(r.lr);
  optimizer->zero_grad();
  KP_RETURN_IF_ERROR(RunActions(/*training=*/true));
  KP_RETURN_IF_ERROR(CheckDrained());
  KP_RETURN_IF_ERROR(AverageOverReplicas());
  KP_ASSIGN_OR_RETURN(r.grad_norm, ReduceGradNorm());
  KP_ASSIGN_OR_RETURN(r.loss, ReduceLoss());
  if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
    return Status::Internal("step " + std::to_string(step + 1) + ": the loss or the gradient became non-finite (loss " +
                            std::to_string(r.loss) + ", grad norm " + std::to_string(r.grad_norm) + "); lower --lr");
  ClipGradients(params, r.grad_norm, config.train.grad_clip);
  optimizer->step();
  for (auto& [s, module] : modules) {
    if (StageModelImpl* model = ModelOfStage(*module)) KP_RETURN_IF_ERROR(SumRouterLoads(*model, config.replicas.dp));
    module->AfterStep(config.train.bias_update_rate);
  }
  r.step = ++step;
  for (const auto& [key, traffic_row] : traffic) r.traffic.push_back(traffic_row);
  r.step_seconds = watch.Seconds();
  return r;
}

Result<double> PipelineRank::Impl::EvalStep(const std::vector<std::int64_t>& t) {
  seq_len = config.train.seq_len;
  step_loss = nullptr;
  KP_RETURN_IF_ERROR(SetTokens(t));
  ResetStep();
  {
    torch::NoGradGuard no_grad;
    KP_RETURN_IF_ERROR(RunActions(/*training=*/false));
  }
  KP_RETURN_IF_ERROR(CheckDrained());
  return ReduceLoss();
}

// ---------------------------------------------------------------- public

PipelineRank::PipelineRank(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PipelineRank::~PipelineRank() = default;

Result<std::unique_ptr<PipelineRank>> PipelineRank::Create(const PipelineRankConfig& config, Communicator& pp,
                                                           StageModuleFactory factory) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->comm = &pp;
  try {
    if (config.train.deterministic) {
      KP_ASSIGN_OR_RETURN(const torch::Device device, ParseDevice(config.train.device));
      UseDeterministicAlgorithms(device);
    }
    KP_RETURN_IF_ERROR(impl->Setup(std::move(factory)));
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("setting up the pipeline rank: ") + e.what_without_backtrace());
  }
  return std::unique_ptr<PipelineRank>(new PipelineRank(std::move(impl)));
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens) {
  return TrainStepWith(tokens, impl_->config.train.seq_len, nullptr);
}

Result<PipelineStepResult> PipelineRank::TrainStep(const std::vector<std::int64_t>& tokens, int seq_len,
                                                   MicroBatchLoss& loss) {
  return TrainStepWith(tokens, seq_len, &loss);
}

Status PipelineRank::BeginPhase(const TrainConfig& train) {
  try {
    return impl_->BeginPhase(train);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("starting a training phase: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("starting a training phase: ") + e.what_without_backtrace());
  }
}

Result<PipelineStepResult> PipelineRank::TrainStepWith(const std::vector<std::int64_t>& tokens, int seq_len,
                                                       MicroBatchLoss* loss) {
  // A loss's shares are indexed by the micro-batch alone (pipeline_stage.h):
  // a replica's rows would need their offset in the batch too.
  if (loss != nullptr && impl_->dp_size > 1)
    return Status::InvalidArgument("--dp: a step with its own loss runs on one pipeline replica, got dp " +
                                   std::to_string(impl_->dp_size));
  try {
    return impl_->TrainStep(tokens, seq_len, loss);
  } catch (const CommunicationError& e) {
    return Status::IoError("step " + std::to_string(impl_->step + 1) + ": " + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal("step " + std::to_string(impl_->step + 1) + ": " + e.what_without_backtrace());
  }
}

Result<double> PipelineRank::EvalStep(const std::vector<std::int64_t>& tokens) {
  try {
    return impl_->EvalStep(tokens);
  } catch (const CommunicationError& e) {
    return Status::IoError(std::string("eval: ") + e.what());
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("eval: ") + e.what_without_backtrace());
  }
}

int PipelineRank::step() const { return impl_->step; }

std::vector<int> PipelineRank::stages() const {
  std::vector<int> out;
  for (const auto& [s, m] : impl_->modules) out.push_back(s);
  return out;
}

PipelineStageModule& PipelineRank::stage_module(int s) { return *impl_->modules.at(s); }

}  // namespace kp::runtime
