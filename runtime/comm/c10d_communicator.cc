#include "runtime/comm/c10d_communicator.h"

#include <chrono>
#include <cstdlib>
#include <map>
#include <sstream>

#include <torch/version.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef KIMI_PLAN_C10D_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif
#ifdef KIMI_PLAN_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "runtime/comm/device_check.h"
#include "runtime/comm/device.h"

namespace kp::runtime {

namespace {

// PyTorch 2 split the backends (Gloo, NCCL) from the ProcessGroup facade;
// the operations we call have the same signatures on both bases.
#if TORCH_VERSION_MAJOR >= 2
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

using Millis = std::chrono::milliseconds;

std::string Join(const std::vector<int>& v) {
  std::ostringstream o;
  for (std::size_t i = 0; i < v.size(); ++i) o << (i ? "," : "") << v[i];
  return o.str();
}

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// One process group plus what it needs to make subgroups and to name peers
// in errors (the world ranks of its members).
struct Group {
  c10::intrusive_ptr<c10d::Store> store;
  c10::intrusive_ptr<Backend> pg;
  std::string backend;
  std::vector<int> world_ranks;
  int rank = 0;
  Millis timeout{0};
  std::string gloo_host;       // the address Gloo's pairs bind to
  std::string gloo_interface;  // else this interface, when set
};

Result<c10::intrusive_ptr<Backend>> MakeBackend(const Group& g) {
  const int size = static_cast<int>(g.world_ranks.size());
#ifdef KIMI_PLAN_C10D_GLOO
  if (g.backend == "gloo") {
    auto opts = c10d::ProcessGroupGloo::Options::create(g.timeout);
    // A loopback master means one host: bind Gloo's pairs to 127.0.0.1 so
    // nothing listens beyond it. Otherwise the interface the options name,
    // else the address the host name resolves to.
    if (IsLoopback(g.gloo_host)) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else if (!g.gloo_interface.empty()) {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(g.gloo_interface));
    } else {
      opts->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    opts->threads = 2;
    return c10::intrusive_ptr<Backend>(c10::make_intrusive<c10d::ProcessGroupGloo>(g.store, g.rank, size, opts));
  }
#endif
#ifdef KIMI_PLAN_C10D_NCCL
  if (g.backend == "nccl") {
    // Timeouts throw from wait() under TORCH_NCCL_BLOCKING_WAIT, which main
    // sets (runtime/comm/environment.h).
    auto opts = c10d::ProcessGroupNCCL::Options::create();
    opts->timeout = g.timeout;
    return c10::intrusive_ptr<Backend>(c10::make_intrusive<c10d::ProcessGroupNCCL>(g.store, g.rank, size, opts));
  }
#endif
  return Status::InvalidArgument("--backend: this build has no c10d " + g.backend + " backend");
}

// "<prefix><the first line of why>" as an IoError.
Status FailureLine(const std::string& prefix, std::string why) {
  const std::size_t nl = why.find('\n');
  if (nl != std::string::npos) why.resize(nl);
  return Status::IoError(prefix + why);
}
Status FailureLine(const std::string& prefix, const std::exception& e) {
  if (const auto* c = dynamic_cast<const c10::Error*>(&e)) return FailureLine(prefix, c->what_without_backtrace());
  return FailureLine(prefix, std::string(e.what()));
}

// Waits for c10d's work; c10d reports a closed connection or a timeout by
// throwing, which becomes one line: `prefix` names who and what.
Status WaitWork(c10d::Work& work, Millis timeout, const std::string& prefix) {
  try {
    work.wait(timeout);
    return Status::Ok();
  } catch (const std::exception& e) {
    return FailureLine(prefix, e);
  }
}

// A collective left in flight (StartBroadcast). It holds c10d's work, which
// keeps the tensors alive; destroying it unwaited waits (the interface's rule).
class C10dPendingOp : public PendingOp {
 public:
  C10dPendingOp(c10::intrusive_ptr<c10d::Work> work, Millis timeout, std::string failure_prefix)
      : work_(std::move(work)), timeout_(timeout), prefix_(std::move(failure_prefix)) {}
  ~C10dPendingOp() override {
    if (work_) (void)Wait();
  }
  Status Wait() override {
    if (!work_) return Status::Internal("broadcast: Wait called twice");
    Status s = WaitWork(*work_, timeout_, prefix_);
    work_.reset();
    return s;
  }

 private:
  c10::intrusive_ptr<c10d::Work> work_;
  Millis timeout_;
  std::string prefix_;
};

class C10dCommunicator : public Communicator {
 public:
  explicit C10dCommunicator(Group g) : g_(std::move(g)) {}

  int rank() const override { return g_.rank; }
  int size() const override { return static_cast<int>(g_.world_ranks.size()); }
  std::string backend() const override { return g_.backend; }

  // A Gloo send completes only once the peer has posted the matching recv,
  // so a blocking Send would deadlock two ranks that send to each other
  // first (a 1F1B steady state does). The message is copied and the send
  // left in flight; it is waited for (and its failure reported) before the
  // next collective, when too many are in flight, and at destruction.
  Status Send(const torch::Tensor& t, int dst, int tag) override {
    KP_RETURN_IF_ERROR(CheckPeer("send", dst));
    if (pending_.size() >= kMaxPendingSends) KP_RETURN_IF_ERROR(WaitSends(pending_.size() / 2));
    PendingSend p{{t.contiguous().clone()}, dst, {}};
    try {
      p.work = g_.pg->send(p.buffer, dst, tag);
    } catch (const std::exception& e) {
      return Failure("send", PeerName(dst), e.what());
    }
    pending_.push_back(std::move(p));
    return Status::Ok();
  }

  ~C10dCommunicator() override { (void)WaitSends(pending_.size()); }

  Status Recv(torch::Tensor& t, int src, int tag) override {
    KP_RETURN_IF_ERROR(CheckPeer("recv", src));
    std::vector<at::Tensor> v{t};
    return Wait("recv", PeerName(src), [&] { return g_.pg->recv(v, src, tag); });
  }

  Status AllReduceSum(torch::Tensor& t) override {
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = g_.timeout;
    return Wait("allreduce", AnyPeer(), [&] { return g_.pg->allreduce(v, opts); });
  }

  Status ReduceSum(torch::Tensor& t, int root) override {
    KP_RETURN_IF_ERROR(CheckPeer("reduce", root, /*self_ok=*/true));
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    std::vector<at::Tensor> v{t};
    c10d::ReduceOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.rootRank = root;
    opts.timeout = g_.timeout;
    return Wait("reduce", AnyPeer(), [&] { return g_.pg->reduce(v, opts); });
  }

  // NCCL's own collectives, in place (this rank's part of `t` is the
  // output, as NCCL allows); Gloo takes the default's reductions and
  // broadcasts.
  Status ReduceScatterSum(torch::Tensor& t) override {
    if (g_.backend != "nccl" || size() == 1) return Communicator::ReduceScatterSum(t);
    KP_ASSIGN_OR_RETURN(at::Tensor out, PartOf(*this, t, rank(), "reduce-scatter"));
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    c10d::ReduceScatterOptions opts;
    opts.reduceOp = c10d::ReduceOp::SUM;
    opts.timeout = g_.timeout;
    return Wait("reduce-scatter", AnyPeer(), [&] { return g_.pg->_reduce_scatter_base(out, t, opts); });
  }

  Status AllGather(torch::Tensor& t) override {
    if (g_.backend != "nccl" || size() == 1) return Communicator::AllGather(t);
    KP_ASSIGN_OR_RETURN(at::Tensor in, PartOf(*this, t, rank(), "all-gather"));
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    c10d::AllgatherOptions opts;
    opts.timeout = g_.timeout;
    return Wait("all-gather", AnyPeer(), [&] { return g_.pg->_allgather_base(t, in, opts); });
  }

  Status Broadcast(torch::Tensor& t, int root) override {
    KP_ASSIGN_OR_RETURN(std::unique_ptr<PendingOp> op, StartBroadcast(t, root));
    return op->Wait();
  }

  // Broadcast without the wait: on Gloo the broadcast runs on Gloo's
  // threads, on NCCL it is queued on NCCL's stream (after the work already
  // queued on the current stream, so a buffer packed there is ready).
  Result<std::unique_ptr<PendingOp>> StartBroadcast(torch::Tensor& t, int root) override {
    KP_RETURN_IF_ERROR(CheckPeer("broadcast", root, /*self_ok=*/true));
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    // Gloo has neither bf16 nor int16; a broadcast copies bits, so it moves
    // them as bytes.
    std::vector<at::Tensor> v{t.scalar_type() == torch::kBFloat16 ? t.view(torch::kByte) : t};
    c10d::BroadcastOptions opts;
    opts.rootRank = root;
    opts.timeout = g_.timeout;
    const std::string prefix = FailurePrefix("broadcast", AnyPeer());
    try {
      return std::unique_ptr<PendingOp>(new C10dPendingOp(g_.pg->broadcast(v, opts), g_.timeout, prefix));
    } catch (const std::exception& e) {
      return FailureLine(prefix, e);
    }
  }

  Status AllToAll(const std::vector<torch::Tensor>& in, std::vector<torch::Tensor>& out) override;

  Status Barrier() override {
    KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
    c10d::BarrierOptions opts;
    opts.timeout = g_.timeout;
    return Wait("barrier", AnyPeer(), [&] { return g_.pg->barrier(opts); });
  }

  Result<std::unique_ptr<Communicator>> Subgroup(const std::vector<int>& ranks) override;

 private:
  struct PendingSend {
    std::vector<at::Tensor> buffer;  // the copy in flight
    int peer;
    c10::intrusive_ptr<c10d::Work> work;
  };
  static constexpr std::size_t kMaxPendingSends = 256;

  // Waits for the oldest `n` sends in flight.
  Status WaitSends(std::size_t n) {
    Status first;
    for (std::size_t i = 0; i < n && i < pending_.size(); ++i) {
      PendingSend& p = pending_[i];
      Status s = Wait("send", PeerName(p.peer), [&] { return p.work; });
      if (first.ok()) first = s;
    }
    pending_.erase(pending_.begin(), pending_.begin() + std::min(n, pending_.size()));
    return first;
  }

  Status CheckPeer(const char* op, int peer, bool self_ok = false) const {
    if (peer >= 0 && peer < size() && (self_ok || peer != rank())) return Status::Ok();
    return Status::Internal(std::string(op) + ": peer " + std::to_string(peer) + " is not another rank of a group of " +
                            std::to_string(size()));
  }
  std::string PeerName(int group_rank) const {
    return "rank " + std::to_string(g_.world_ranks[group_rank]);
  }
  // c10d does not say which member of a collective failed; with two members
  // it can only be the other one.
  std::string AnyPeer() const {
    if (size() == 2) return PeerName(1 - rank());
    return "a peer among ranks " + Join(g_.world_ranks);
  }
  // Starts an operation and waits for it; c10d reports a closed connection
  // or a timeout by throwing, which becomes one line naming who and what.
  template <typename Start>
  Status Wait(const char* op, const std::string& peer, Start start) {
    try {
      c10::intrusive_ptr<c10d::Work> work = start();
      work->wait(g_.timeout);
      return Status::Ok();
    } catch (const std::exception& e) {
      return FailureLine(FailurePrefix(op, peer), e);
    }
  }
  Status Failure(const char* op, const std::string& peer, const std::string& why) const {
    return FailureLine(FailurePrefix(op, peer), why);
  }
  std::string FailurePrefix(const char* op, const std::string& peer) const {
    std::ostringstream o;
    o << op << " on " << g_.backend << " group of " << size() << " (rank " << g_.world_ranks[g_.rank] << "): " << peer
      << " died or did not answer within " << g_.timeout.count() / 1000.0 << " s: ";
    return o.str();
  }

  Group g_;
  // How many subgroups over each member list were made, so the k-th one
  // gets the same store prefix on every member.
  std::map<std::vector<int>, int> subgroups_made_;
  std::vector<PendingSend> pending_;
};

Status C10dCommunicator::AllToAll(const std::vector<torch::Tensor>& in, std::vector<torch::Tensor>& out) {
  const int n = size();
  if (static_cast<int>(in.size()) != n || static_cast<int>(out.size()) != n)
    return Status::Internal("alltoall: needs one input and one output tensor per rank (" + std::to_string(n) + ")");
  KP_RETURN_IF_ERROR(WaitSends(pending_.size()));
  try {
    // One flat exchange: rows of every pair concatenated, split sizes in rows.
    std::vector<std::int64_t> in_split(n), out_split(n);
    for (int r = 0; r < n; ++r) {
      in_split[r] = in[r].size(0);
      out_split[r] = out[r].size(0);
    }
    at::Tensor input = torch::cat(in, 0).contiguous();
    at::Tensor output = torch::cat(out, 0).contiguous();
    c10d::AllToAllOptions opts;
    opts.timeout = g_.timeout;
    // c10d may move the split vectors into its work object: give it copies.
    std::vector<std::int64_t> out_arg = out_split, in_arg = in_split;
    // A pure data movement: bf16 (which Gloo lacks) goes as its bytes, the
    // rows staying rows.
    const bool bits = input.scalar_type() == torch::kBFloat16 && input.dim() > 0;
    at::Tensor send = bits ? input.view(torch::kByte) : input, recv = bits ? output.view(torch::kByte) : output;
    KP_RETURN_IF_ERROR(Wait("alltoall", AnyPeer(),
                            [&] { return g_.pg->alltoall_base(recv, send, out_arg, in_arg, opts); }));
    std::int64_t offset = 0;
    for (int r = 0; r < n; ++r) {
      out[r].copy_(output.narrow(0, offset, out_split[r]));
      offset += out_split[r];
    }
  } catch (const c10::Error& e) {
    return Status::Internal(std::string("alltoall: ") + e.what_without_backtrace());
  }
  return Status::Ok();
}

Result<std::unique_ptr<Communicator>> C10dCommunicator::Subgroup(const std::vector<int>& ranks) {
  Group sub;
  sub.backend = g_.backend;
  sub.timeout = g_.timeout;
  sub.gloo_host = g_.gloo_host;
  sub.gloo_interface = g_.gloo_interface;
  sub.rank = -1;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1]))
      return Status::Internal("subgroup: ranks must be sorted, distinct members of the group, got " + Join(ranks));
    if (ranks[i] == rank()) sub.rank = static_cast<int>(i);
    sub.world_ranks.push_back(g_.world_ranks[ranks[i]]);
  }
  if (sub.rank < 0) return Status::Internal("subgroup: rank " + std::to_string(rank()) + " is not in " + Join(ranks));
  const int nth = ++subgroups_made_[ranks];
  try {
    sub.store = c10::make_intrusive<c10d::PrefixStore>("sub/" + Join(ranks) + "/" + std::to_string(nth), g_.store);
    KP_ASSIGN_OR_RETURN(sub.pg, MakeBackend(sub));
  } catch (const std::exception& e) {
    return Status::IoError("subgroup " + Join(sub.world_ranks) + ": " + e.what());
  }
  return std::unique_ptr<Communicator>(new C10dCommunicator(std::move(sub)));
}

Result<std::string> ResolveBackend(const C10dOptions& o) {
  const bool cuda = o.device.rfind("cuda", 0) == 0;
  const std::string b = o.backend == "auto" ? (cuda ? "nccl" : "gloo") : o.backend;
  if (b != "gloo" && b != "nccl")
    return Status::InvalidArgument("--backend: must be auto, gloo or nccl, got \"" + o.backend + "\"");
  if ((b == "gloo" && !C10dHasGloo()) || (b == "nccl" && !C10dHasNccl()))
    return Status::InvalidArgument("--backend: this build of LibTorch has no c10d " + b + " backend");
  if (b == "nccl" && !cuda) return Status::InvalidArgument("--backend: nccl needs --device cuda");
  return b;
}

c10::intrusive_ptr<c10d::Store> OpenStore(const Rendezvous& r, Millis timeout) {
  if (!r.store_file.empty()) {
    auto store = c10::make_intrusive<c10d::FileStore>(r.store_file, r.world_size);
    store->setTimeout(timeout);
    return store;
  }
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<std::uint16_t>(r.master_port);
  opts.isServer = r.rank == 0;
  opts.numWorkers = r.world_size;
  opts.waitWorkers = true;
  opts.timeout = timeout;
  return c10::make_intrusive<c10d::TCPStore>(r.master_addr, opts);
}

}  // namespace

bool C10dHasGloo() {
#ifdef KIMI_PLAN_C10D_GLOO
  return true;
#else
  return false;
#endif
}

bool C10dHasNccl() {
#ifdef KIMI_PLAN_C10D_NCCL
  return true;
#else
  return false;
#endif
}

Result<std::unique_ptr<Communicator>> ConnectC10d(const Rendezvous& r, const C10dOptions& options) {
  if (options.timeout_s <= 0)
    return Status::InvalidArgument("--timeout-s: must be positive, got " + std::to_string(options.timeout_s));
  Group g;
  KP_ASSIGN_OR_RETURN(g.backend, ResolveBackend(options));
  g.timeout = Millis(std::int64_t(options.timeout_s) * 1000);
  g.rank = r.rank;
  g.gloo_host = r.master_addr;
  g.gloo_interface = options.gloo_interface;
  for (int i = 0; i < r.world_size; ++i) g.world_ranks.push_back(i);
  const std::string where = r.store_file.empty()
                                ? "MASTER_ADDR:MASTER_PORT " + r.master_addr + ":" + std::to_string(r.master_port)
                                : std::string(kStoreFileVariable) + " " + r.store_file;
  try {
    g.store = c10::make_intrusive<c10d::PrefixStore>("kimi-plan", OpenStore(r, g.timeout));
    KP_ASSIGN_OR_RETURN(g.pg, MakeBackend(g));
  } catch (const c10::Error& e) {
    std::string why = e.what_without_backtrace();
    why.resize(std::min(why.size(), why.find('\n')));
    return Status::IoError("rendezvous at " + where + " (rank " + std::to_string(r.rank) + " of " +
                           std::to_string(r.world_size) + "): " + why);
  } catch (const std::exception& e) {
    return Status::IoError("rendezvous at " + where + " (rank " + std::to_string(r.rank) + "): " + e.what());
  }
  return std::unique_ptr<Communicator>(new C10dCommunicator(std::move(g)));
}

Status CheckDeviceAndBackend(const C10dOptions& options) {
  KP_RETURN_IF_ERROR(ParseDevice(options.device).status());
  return ResolveBackend(options).status();
}

}  // namespace kp::runtime
