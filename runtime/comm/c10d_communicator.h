// The real Communicator: LibTorch's c10d. Ranks meet through a c10d store
// (TCPStore hosted by rank 0, or a FileStore on one host: rendezvous.h) and
// talk through ProcessGroupGloo on CPU or ProcessGroupNCCL on CUDA. The c10d
// headers stay in c10d_communicator.cc: this header only needs <torch/torch.h>.
//
// Reproducibility: Gloo's allreduce (ring, or bcube for some sizes) reduces
// every chunk along a path fixed by the group's size and ranks, never by
// arrival order, so the same inputs give bitwise the same sums run to run and
// on every rank. NCCL's ring/tree choice is fixed per communicator as well
// (NCCL_ALGO / NCCL_PROTO pin it across machines).
//
// Sends are buffered: Send copies the tensor and returns while the message
// is in flight (a Gloo send completes only when the peer posts the matching
// Recv, so two ranks that send to each other first would otherwise
// deadlock). In-flight sends are waited for before every collective, when
// 256 are outstanding, and at destruction; a failed one is reported there.
//
// Failures: every call waits at most the timeout; a peer that closed its
// connection (died) or did not answer in time becomes an IoError of one line,
// "<op> on <backend> group of N (rank r): <peer> ...: <c10d's reason>", where
// <peer> is the partner of a point-to-point call, the other rank of a
// two-rank group, or "a peer" otherwise (c10d does not say which).
#ifndef KIMI_PLAN_RUNTIME_COMM_C10D_COMMUNICATOR_H_
#define KIMI_PLAN_RUNTIME_COMM_C10D_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "common/status.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/rendezvous.h"

namespace kp::runtime {

/// Whether this build has each backend (Gloo needs KIMI_PLAN_C10D_GLOO, NCCL
/// KIMI_PLAN_C10D_NCCL at compile time).
bool C10dHasGloo();
bool C10dHasNccl();

/// Meets the other ranks of `r` and returns the world communicator (rank
/// r.rank of r.world_size). Blocks until every rank has joined or the
/// timeout passes. Errors: InvalidArgument naming --backend / --timeout-s for
/// a backend this build lacks or a bad timeout; IoError for a rendezvous that
/// fails or times out (naming MASTER_ADDR:MASTER_PORT or the store file).
Result<std::unique_ptr<Communicator>> ConnectC10d(const Rendezvous& r, const C10dOptions& options);

}  // namespace kp::runtime

#endif  // KIMI_PLAN_RUNTIME_COMM_C10D_COMMUNICATOR_H_
