// The in-process fake of runtime/communicator.h: N ranks are threads of one
// process sharing a mailbox. Tests run the distributed runtime (pipeline,
// data and expert parallelism) on it without c10d.
//
// Semantics: Send copies the tensor into the mailbox and returns (buffered,
// so it never waits on the receiver); Recv waits for the message matched by
// (group, src, dst, tag), in send order for equal keys, and copies it into
// the caller's tensor, whose shape and dtype must match. Collectives are
// built on those messages with a per-communicator sequence number, so ranks
// must call them in the same order (the interface's contract).
// StartBroadcast is the interface's default: a Broadcast done before it returns.
// AllReduceSum sums on the group's rank 0 in rank order 0, 1, ..., n - 1
// and sends the result back: deterministic, bitwise reproducible.
// Failure: a wait longer than the world's timeout, or a peer that has
// finished with an error (RunRanks marks it), returns a Status naming the
// operation and the peer, never hangs.
// Thread-safety: the world is shared by all rank threads and is internally
// synchronised; each communicator is used by its own rank's thread only.
#ifndef KIMI_PLAN_RUNTIME_COMM_IN_PROCESS_COMMUNICATOR_H_
#define KIMI_PLAN_RUNTIME_COMM_IN_PROCESS_COMMUNICATOR_H_

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "common/status.h"
#include "runtime/comm/communicator.h"

namespace kp::runtime {

/// The shared state of N in-process ranks: mailbox, failure flags, timeout.
class InProcessWorld;

/// Makes a world of `n` ranks whose waits give up after `timeout`.
std::shared_ptr<InProcessWorld> MakeInProcessWorld(int n, std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// The world communicator of `rank` (group = all n ranks).
std::unique_ptr<Communicator> MakeInProcessCommunicator(std::shared_ptr<InProcessWorld> world, int rank);

/// Marks `rank` as finished with an error, so peers waiting on it fail at
/// once instead of at the timeout.
void MarkRankFailed(InProcessWorld& world, int rank);

/// Runs fn on n threads, one per rank, each with its world communicator, and
/// returns their statuses by rank. An exception escaping fn becomes an
/// Internal status; a rank returning an error is marked failed.
std::vector<Status> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                             std::chrono::milliseconds timeout = std::chrono::seconds(60));

/// The root cause among `statuses`, prefixed "rank r: ": the first error
/// that is not a wait ended by another rank's failure, else the first
/// error; Ok when all are ok.
Status FirstError(const std::vector<Status>& statuses);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_IN_PROCESS_COMMUNICATOR_H_
