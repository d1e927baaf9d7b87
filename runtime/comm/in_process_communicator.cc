#include "runtime/comm/in_process_communicator.h"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <tuple>

namespace kp::runtime {

namespace {
// The tail of an error caused by another rank's failure (FirstError skips it).
constexpr const char* kPeerFailed = " failed (the failure is that rank's)";
}  // namespace

class InProcessWorld {
 public:
  InProcessWorld(int n, std::chrono::milliseconds timeout) : n_(n), timeout_(timeout), failed_(n, false) {}

  int n() const { return n_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // Keys carry the group so that subgroups never see each other's messages.
  using Key = std::tuple<std::string, int, int, int>;  // group, src (global), dst (global), tag

  void Post(const Key& key, torch::Tensor t) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      mail_[key].push_back(std::move(t));
    }
    cv_.notify_all();
  }

  // Waits for the first message under `key`; `what` names the operation for
  // the error.
  Result<torch::Tensor> Take(const Key& key, const std::string& what) {
    std::unique_lock<std::mutex> lock(mu_);
    const int src = std::get<1>(key);
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    for (;;) {
      auto it = mail_.find(key);
      if (it != mail_.end() && !it->second.empty()) {
        torch::Tensor t = std::move(it->second.front());
        it->second.pop_front();
        if (it->second.empty()) mail_.erase(it);
        return t;
      }
      if (failed_[src]) return Status::Internal(what + ": peer rank " + std::to_string(src) + kPeerFailed);
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout) {
        std::ostringstream o;
        o << what << ": no message from rank " << src << " within " << timeout_.count() << " ms (timeout)";
        return Status::Internal(o.str());
      }
    }
  }

  void MarkFailed(int rank) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed_[rank] = true;
    }
    cv_.notify_all();
  }

 private:
  const int n_;
  const std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<bool> failed_;
  std::map<Key, std::deque<torch::Tensor>> mail_;
};

namespace {

// Collective messages use negative tags, one per collective call, so they
// never match a user's point-to-point tag (those are >= 0).
class InProcessCommunicator : public Communicator {
 public:
  InProcessCommunicator(std::shared_ptr<InProcessWorld> world, std::string group, std::vector<int> members, int rank)
      : world_(std::move(world)), group_(std::move(group)), members_(std::move(members)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return static_cast<int>(members_.size()); }
  std::string backend() const override { return "in-process"; }

  Status Send(const torch::Tensor& t, int dst, int tag) override {
    KP_RETURN_IF_ERROR(CheckPeer("Send", dst));
    if (tag < 0) return Status::InvalidArgument("Send: tag " + std::to_string(tag) + " is negative (reserved)");
    return Post(t, dst, tag);
  }

  Status Recv(torch::Tensor& t, int src, int tag) override {
    KP_RETURN_IF_ERROR(CheckPeer("Recv", src));
    if (tag < 0) return Status::InvalidArgument("Recv: tag " + std::to_string(tag) + " is negative (reserved)");
    return Fetch(t, src, tag, "Recv");
  }

  Status AllReduceSum(torch::Tensor& t) override {
    const int tag = NextCollectiveTag();
    if (rank_ == 0) {
      // Rank order, whatever order the messages arrived in.
      torch::Tensor sum = t.clone();
      for (int r = 1; r < size(); ++r) {
        torch::Tensor part = torch::empty_like(t);
        KP_RETURN_IF_ERROR(Fetch(part, r, tag, "AllReduceSum"));
        sum.add_(part);
      }
      for (int r = 1; r < size(); ++r) KP_RETURN_IF_ERROR(Post(sum, r, tag));
      t.copy_(sum);
      return Status::Ok();
    }
    KP_RETURN_IF_ERROR(Post(t, 0, tag));
    return Fetch(t, 0, tag, "AllReduceSum");
  }

  // Rank order at the root, as AllReduceSum sums: the same bits.
  Status ReduceSum(torch::Tensor& t, int root) override {
    if (root < 0 || root >= size())
      return Status::InvalidArgument("ReduceSum: root " + std::to_string(root) + " is not a rank of " +
                                     std::to_string(size()));
    const int tag = NextCollectiveTag();
    if (rank_ != root) return Post(t, root, tag);
    torch::Tensor sum;
    for (int r = 0; r < size(); ++r) {
      torch::Tensor part = t;
      if (r != root) {
        part = torch::empty_like(t);
        KP_RETURN_IF_ERROR(Fetch(part, r, tag, "ReduceSum"));
      }
      sum = r == 0 ? part.clone() : sum.add_(part);
    }
    t.copy_(sum);
    return Status::Ok();
  }

  Status Broadcast(torch::Tensor& t, int root) override {
    if (root < 0 || root >= size())
      return Status::InvalidArgument("Broadcast: root " + std::to_string(root) + " is not a rank of " +
                                     std::to_string(size()));
    const int tag = NextCollectiveTag();
    if (rank_ != root) return Fetch(t, root, tag, "Broadcast");
    for (int r = 0; r < size(); ++r)
      if (r != root) KP_RETURN_IF_ERROR(Post(t, r, tag));
    return Status::Ok();
  }

  Status AllToAll(const std::vector<torch::Tensor>& in, std::vector<torch::Tensor>& out) override {
    if (static_cast<int>(in.size()) != size() || static_cast<int>(out.size()) != size())
      return Status::InvalidArgument("AllToAll: expected " + std::to_string(size()) + " tensors in and out, got " +
                                     std::to_string(in.size()) + " and " + std::to_string(out.size()));
    const int tag = NextCollectiveTag();
    for (int r = 0; r < size(); ++r) KP_RETURN_IF_ERROR(Post(in[r], r, tag));
    for (int r = 0; r < size(); ++r) KP_RETURN_IF_ERROR(Fetch(out[r], r, tag, "AllToAll"));
    return Status::Ok();
  }

  Status Barrier() override {
    torch::Tensor one = torch::ones({1});
    return AllReduceSum(one);
  }

  Result<std::unique_ptr<Communicator>> Subgroup(const std::vector<int>& ranks) override {
    std::vector<int> members;
    int my_index = -1;
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      if (ranks[i] < 0 || ranks[i] >= size() || (i > 0 && ranks[i] <= ranks[i - 1]))
        return Status::InvalidArgument("Subgroup: ranks must be sorted, distinct group ranks below " +
                                       std::to_string(size()));
      if (ranks[i] == rank_) my_index = static_cast<int>(i);
      members.push_back(members_[ranks[i]]);
    }
    if (my_index < 0)
      return Status::InvalidArgument("Subgroup: rank " + std::to_string(rank_) + " is not in the list it called with");
    // Every member computes the same name from the same call history.
    std::ostringstream name;
    name << group_ << "/" << subgroups_++ << "[";
    for (int m : members) name << m << ",";
    name << "]";
    return std::unique_ptr<Communicator>(new InProcessCommunicator(world_, name.str(), members, my_index));
  }

 private:
  Status CheckPeer(const char* op, int peer) const {
    if (peer >= 0 && peer < size() && peer != rank_) return Status::Ok();
    return Status::InvalidArgument(std::string(op) + ": peer " + std::to_string(peer) + " is not another rank of " +
                                   std::to_string(size()));
  }

  int NextCollectiveTag() { return -1 - collectives_++; }

  Status Post(const torch::Tensor& t, int dst, int tag) {
    world_->Post({group_, members_[rank_], members_[dst], tag}, t.detach().contiguous().clone());
    return Status::Ok();
  }

  Status Fetch(torch::Tensor& t, int src, int tag, const char* op) {
    std::ostringstream what;
    what << "in-process " << op << " on rank " << rank_ << " (tag " << tag << ")";
    KP_ASSIGN_OR_RETURN(torch::Tensor msg, world_->Take({group_, members_[src], members_[rank_], tag}, what.str()));
    if (msg.sizes() != t.sizes() || msg.scalar_type() != t.scalar_type())
      return Status::Internal(what.str() + ": rank " + std::to_string(src) + " sent " + c10::str(msg.sizes()) + " " +
                              c10::toString(msg.scalar_type()) + ", expected " + c10::str(t.sizes()) + " " +
                              c10::toString(t.scalar_type()));
    torch::NoGradGuard no_grad;
    t.copy_(msg);
    return Status::Ok();
  }

  std::shared_ptr<InProcessWorld> world_;
  std::string group_;
  std::vector<int> members_;  // global rank of each group rank
  int rank_;
  int collectives_ = 0;
  int subgroups_ = 0;
};

}  // namespace

std::shared_ptr<InProcessWorld> MakeInProcessWorld(int n, std::chrono::milliseconds timeout) {
  return std::make_shared<InProcessWorld>(n, timeout);
}

std::unique_ptr<Communicator> MakeInProcessCommunicator(std::shared_ptr<InProcessWorld> world, int rank) {
  std::vector<int> members(world->n());
  for (int r = 0; r < world->n(); ++r) members[r] = r;
  return std::make_unique<InProcessCommunicator>(std::move(world), "world", std::move(members), rank);
}

void MarkRankFailed(InProcessWorld& world, int rank) { world.MarkFailed(rank); }

std::vector<Status> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                             std::chrono::milliseconds timeout) {
  auto world = MakeInProcessWorld(n, timeout);
  std::vector<Status> statuses(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<Communicator> comm = MakeInProcessCommunicator(world, r);
      try {
        statuses[r] = fn(*comm);
      } catch (const c10::Error& e) {
        statuses[r] = Status::Internal(e.what_without_backtrace());
      } catch (const std::exception& e) {
        statuses[r] = Status::Internal(e.what());
      }
      if (!statuses[r].ok()) world->MarkFailed(r);
    });
  for (std::thread& t : threads) t.join();
  return statuses;
}

Status FirstError(const std::vector<Status>& statuses) {
  const std::string induced = kPeerFailed;
  auto is_induced = [&](const Status& s) {
    const std::string& m = s.message();
    return m.size() >= induced.size() && m.compare(m.size() - induced.size(), induced.size(), induced) == 0;
  };
  for (int pass = 0; pass < 2; ++pass)
    for (std::size_t r = 0; r < statuses.size(); ++r)
      if (!statuses[r].ok() && (pass == 1 || !is_induced(statuses[r])))
        return statuses[r].WithContext("rank " + std::to_string(r));
  return Status::Ok();
}

}  // namespace kp::runtime
