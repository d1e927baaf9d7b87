// Generators of the named pipeline schedules as compute-only per-rank action
// lists (lower them with AddCommunication to get what a runtime executes).
// Each follows the published order of its source; the orders are written
// here from those descriptions, not copied:
//   gpipe             all forwards, then all full backwards (torch ScheduleGPipe).
//   1f1b              p - r forwards, then backward/forward pairs (torch Schedule1F1B,
//                     the same order as Megatron's p - r - 1 warm-up plus 1F1B).
//   interleaved-1f1b  stage s on rank s % p; warm-up min(2(p - r - 1) + (v - 1) p, M v)
//                     forward chunks, then forward/backward pairs, chunks taken in
//                     groups of p micro-batches (torch ScheduleInterleaved1F1B, Megatron).
//   zb-h1             Qi et al., "Zero Bubble Pipeline Parallelism" (ICLR 2024), fig. 3
//                     top: 1F1B with the backward split into I and W, rank r holding
//                     back its first r W's to fill the drain (torch
//                     ScheduleInterleavedZeroBubble with one stage per rank).
//   zb-h2             the same paper, fig. 3 bottom: 2(p - r) - 1 warm-up forwards and
//                     the first 2r W's held back, a parallelogram when F = I = W.
//   zbv               the paper's V schedule (arXiv v2 sec. 6; torch
//                     ScheduleZBVZeroBubble): rank r holds stages r and 2p - 1 - r.
//   dualpipev         DeepSeek's DualPipeV (github.com/deepseek-ai/DualPipe,
//                     torch ScheduleDualPipeV), V-shaped; its overlapped
//                     forward+backward pairs are listed as F then B.
//
// Thread-safety: pure functions.
#ifndef KIMI_PLAN_SCHEDULES_SCHEDULE_GENERATORS_H_
#define KIMI_PLAN_SCHEDULES_SCHEDULE_GENERATORS_H_

#include <cstdint>
#include <string>

#include "common/status.h"
#include "schedules/pipeline_schedule.h"
#include "specs/schedule_kind.h"

namespace kp {

/// Checks pp, vp and micro-batch count for `kind`; the error is one line
/// naming the flag and what is allowed:
///   pp >= 1 (>= 2 for the V-shaped schedules); vp == 1 except for
///   interleaved-1f1b (vp >= 1; with vp > 1 M must be a multiple of pp);
///   M >= 1; M >= 2 pp for zbv and dualpipev.
///   pp <= limits::kMaxPipelineRanks, and the step's work within
///   CheckPipelineWork's bound.
Status CheckScheduleShape(ScheduleKind kind, int pp, int vp, int microbatches);

/// The work one simulated step of `kind` asks for, checked before it is
/// made: pp x stages per rank x micro-batches x 3 (F, B, W) actions must be
/// at most limits::kMaxPipelineActions. The error names `flag`, the flag
/// that set the micro-batches ("--microbatches", or "--global-batch" when a
/// plan derives them).
Status CheckPipelineWork(ScheduleKind kind, int pp, int vp, std::int64_t microbatches, const std::string& flag);

/// The compute-only schedule of `kind` for `pp` ranks, `vp` stages per rank
/// (interleaved only) and `microbatches` micro-batches. Schedules that split
/// the backward (ScheduleSplitsW) list I and W; the others list B.
Result<PipelineSchedule> GenerateSchedule(ScheduleKind kind, int pp, int vp, int microbatches);

}  // namespace kp

#endif  // KIMI_PLAN_SCHEDULES_SCHEDULE_GENERATORS_H_
