// The pipeline schedules the project knows by name. Shared by the planner
// (closed forms), the simulator (generators) and the runtime (execution).
#ifndef KIMI_PLAN_SPECS_SCHEDULE_KIND_H_
#define KIMI_PLAN_SPECS_SCHEDULE_KIND_H_

#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

enum class ScheduleKind { kGpipe, k1F1B, kInterleaved1F1B, kZbH1, kZbH2, kZbv, kDualPipeV };

const char* ScheduleName(ScheduleKind k);
/// Parses "gpipe", "1f1b", "interleaved-1f1b", "zb-h1", "zb-h2", "zbv", "dualpipev".
Result<ScheduleKind> ParseSchedule(const std::string& name, const std::string& field = "--schedule");
std::vector<std::string> ScheduleNames();

/// Stages per rank the schedule puts on each rank: 1, or v for the
/// interleaved schedule, or exactly 2 for the V-shaped ones.
bool ScheduleTakesVp(ScheduleKind k);
bool ScheduleIsVShaped(ScheduleKind k);
/// Stages each rank holds under `kind`: vp for interleaved, 2 for the
/// V-shaped schedules, else 1.
int StagesPerRank(ScheduleKind kind, int vp);
/// Whether the schedule splits backward into B (inputs) and W (weights).
bool ScheduleSplitsW(ScheduleKind k);

/// How consecutive training steps meet at the optimizer step
/// (docs/simulator.md, "What a step costs"):
///   kSynchronised: the optimizer step waits for every pipeline rank (a
///     global gradient-norm clip, an inf/nan check), so step k + 1 starts on
///     every rank once the last rank has finished step k: a step costs its
///     schedule's makespan.
///   kPostValidation: the ZB paper's optimizer post-validation (Qi et al.,
///     ICLR 2024, sec. 4): each rank steps its optimizer as soon as its own
///     last action is done and goes on with step k + 1; the global check
///     follows and rolls back the rare step that needed it. In steady state
///     a step costs the longest rank's span, first action to last
///     (simulator/pipeline_sim.h proves it by running steps back to back).
enum class OptimizerSync { kSynchronised, kPostValidation };

/// "sync" or "post-validation".
const char* OptimizerSyncName(OptimizerSync s);
/// Parses "sync" or "post-validation"; the error names `field`.
Result<OptimizerSync> ParseOptimizerSync(const std::string& name, const std::string& field = "--optimizer-sync");
/// The accounting each schedule's authors run it with: post-validation for
/// the ZB paper's zb-h1, zb-h2 and zbv (its repository enables
/// --enable-optimizer-post-validation with every zero-bubble schedule,
/// examples/pretrain_zero_bubble.sh); synchronised for gpipe, 1f1b,
/// interleaved-1f1b (Megatron, torch) and dualpipev (DeepSeek's DualPipe).
OptimizerSync DefaultOptimizerSync(ScheduleKind k);

/// How a pipeline rank sends an activation or a gradient to its neighbour:
///   kAsync: the send is posted and the rank goes on computing; the data
///     lands one transfer later (kimi-plan's runtime, the ZB paper's
///     schedules, torch.distributed.pipelining).
///   kBlocking: the rank waits for its send (with the receive it is paired
///     with) before its next compute, so each hop costs the sender the
///     transfer time. Megatron-LM's 1F1B and interleaved 1F1B do this: every
///     steady-state step is a batched isend/irecv waited on at once
///     (p2p_communication.send_forward_recv_backward and friends; interleaving
///     overlaps only with overlap_p2p_comm, off by default).
enum class SendMode { kAsync, kBlocking };

/// "async" or "blocking".
const char* SendModeName(SendMode m);
/// Parses "async" or "blocking"; the error names `field`.
Result<SendMode> ParseSendMode(const std::string& name, const std::string& field = "--p2p");
/// What an engine's pipeline does for schedule `k`: blocking for 1f1b and
/// interleaved-1f1b on Megatron-LM (`megatron`), async otherwise.
SendMode DefaultSendMode(ScheduleKind k, bool megatron);

}  // namespace kp

#endif  // KIMI_PLAN_SPECS_SCHEDULE_KIND_H_
