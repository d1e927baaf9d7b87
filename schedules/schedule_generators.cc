#include "schedules/schedule_generators.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <string>
#include <utility>

#include "common/limits.h"
#include "common/range.h"

namespace kp {

namespace {

using T = ActionType;
using Row = std::vector<std::optional<PipelineAction>>;

std::string S(int v) { return std::to_string(v); }

// Appends actions to one rank's list, numbering each (stage, kind) stream of
// micro-batches in order and keeping split-off weight gradients in a FIFO,
// the way both the ZB and the DualPipe code hand out W's.
class RankBuilder {
 public:
  explicit RankBuilder(int stages) : next_f_(stages, 0), next_b_(stages, 0) {}

  void F(int stage) { Push(stage, T::kForward, next_f_[stage]++); }
  /// A full backward: input and weight gradients back to back.
  void B(int stage) { Push(stage, T::kFullBackward, next_b_[stage]++); }
  /// An input-gradient backward; its W waits in the FIFO.
  void I(int stage) {
    const int mb = next_b_[stage]++;
    Push(stage, T::kBackwardInput, mb);
    pending_w_.emplace_back(stage, mb);
  }
  /// The oldest held-back W, if any.
  void W() {
    if (pending_w_.empty()) return;
    const auto [stage, mb] = pending_w_.front();
    pending_w_.pop_front();
    Push(stage, T::kBackwardWeight, mb);
  }
  /// The oldest held-back W of `stage`, if any.
  void W(int stage) {
    auto it = std::find_if(pending_w_.begin(), pending_w_.end(), [&](const auto& e) { return e.first == stage; });
    if (it == pending_w_.end()) return;
    const int mb = it->second;
    pending_w_.erase(it);
    Push(stage, T::kBackwardWeight, mb);
  }
  void AllW() {
    while (!pending_w_.empty()) W();
  }
  void AllW(int stage) {
    while (std::any_of(pending_w_.begin(), pending_w_.end(), [&](const auto& e) { return e.first == stage; }))
      W(stage);
  }
  int forwards(int stage) const { return next_f_[stage]; }
  Row Take() { return std::move(row_); }

 private:
  void Push(int stage, ActionType t, int mb) { row_.emplace_back(PipelineAction{stage, t, mb}); }
  std::vector<int> next_f_, next_b_;
  std::deque<std::pair<int, int>> pending_w_;
  Row row_;
};

PipelineSchedule Skeleton(ScheduleKind kind, int pp, int stages, int m, bool v_shaped) {
  PipelineSchedule s;
  s.name = ScheduleName(kind);
  s.pp = pp;
  s.num_stages = stages;
  s.microbatches = m;
  s.stage_to_rank = *StageToRank(pp, stages, v_shaped ? "v" : "loop");
  return s;
}

Row GpipeRank(int r, int m) {
  RankBuilder b(r + 1);
  for (int i = 0; i < m; ++i) b.F(r);
  for (int i = 0; i < m; ++i) b.B(r);
  return b.Take();
}

// The one-stage-per-rank family: `warmup` forwards, then for every
// micro-batch its backward, a held-back W once `hold` backwards have run,
// and the next forward; the W's still held run at the end. 1F1B is the
// family without a split; ZB-H1 and ZB-H2 differ in warm-up and hold.
Row OneStageRank(int r, int m, int warmup, int hold, bool split) {
  RankBuilder b(r + 1);
  for (int i = 0; i < warmup; ++i) b.F(r);
  for (int k = 0; k < m; ++k) {
    if (split) {
      b.I(r);
      if (k >= hold) b.W();
    } else {
      b.B(r);
    }
    if (b.forwards(r) < m) b.F(r);
  }
  b.AllW();
  return b.Take();
}

// Megatron's / torch's interleaved order: forward chunk k of this rank is
// local stage (k / p) % v of micro-batch group k / (p v); backward chunks
// walk the local stages in reverse.
Row InterleavedRank(int r, int p, int v, int m) {
  const int total = m * v;
  const int warmup = std::min(2 * (p - r - 1) + (v - 1) * p, total);
  RankBuilder b(p * v);
  auto fwd = [&](int k) { b.F(((k / p) % v) * p + r); };
  auto bwd = [&](int k) { b.B((v - 1 - (k / p) % v) * p + r); };
  for (int k = 0; k < warmup; ++k) fwd(k);
  for (int k = 0; k < total - warmup; ++k) {
    fwd(warmup + k);
    bwd(k);
  }
  for (int k = total - warmup; k < total; ++k) bwd(k);
  return b.Take();
}

// The ZB paper's handcrafted V schedule (torch ScheduleZBVZeroBubble):
// down-leg stage r and up-leg stage 2p - 1 - r.
Row ZbvRank(int r, int p, int m) {
  const int down = r, up = 2 * p - 1 - r;
  RankBuilder b(2 * p);
  for (int i = 0; i < 2 * (p - r) - 1; ++i) b.F(down);
  for (int i = 0; i < r; ++i) {
    b.F(up);
    b.F(down);
  }
  for (int i = 0; i < p - r; ++i) {
    b.F(up);
    b.I(up);
    b.W();
  }
  while (b.forwards(up) < b.forwards(down) || b.forwards(down) < m) {
    if (b.forwards(down) < m) b.F(down);
    b.I(down);
    b.W();
    b.F(up);
    b.I(up);
    b.W();
  }
  // Drain: the backwards of both legs first, then the weights held back.
  for (int i = 0; i < r; ++i) {
    b.I(down);
    b.I(up);
  }
  for (int i = 0; i < p - r; ++i) {
    b.I(down);
    b.W(down);
  }
  b.AllW(up);
  b.AllW(down);
  return b.Take();
}

// DeepSeek's DualPipeV in its eight steps (dualpipev.py); the overlapped
// forward+backward chunk pairs run here as the forward then the backward.
Row DualPipeVRank(int r, int p, int m) {
  const int down = r, up = 2 * p - 1 - r;
  RankBuilder b(2 * p);
  for (int i = 0; i < 2 * (p - r - 1); ++i) b.F(down);  // 1: nF0
  for (int i = 0; i < r + 1; ++i) {                      // 2: nF0F1
    b.F(down);
    b.F(up);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // 3: nI1W1F1
    b.I(up);
    b.W();
    b.F(up);
  }
  for (int i = 0; i < m - 2 * p + r + 1; ++i) {  // 4: nF0B1F1B0
    b.F(down);
    b.B(up);
    b.F(up);
    b.B(down);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // 5: nB1F1B0
    b.B(up);
    b.F(up);
    b.B(down);
  }
  const int step6 = r + 1;  // 6: nB1B0, the second half splitting off W
  bool split = false;
  for (int i = 0; i < step6; ++i) {
    if (i == step6 / 2 && r % 2 == 1) split = true;
    split ? b.I(up) : b.B(up);
    if (i == step6 / 2 && r % 2 == 0) split = true;
    split ? b.I(down) : b.B(down);
  }
  for (int i = 0; i < p - r - 1; ++i) {  // 7: nWB0
    b.W();
    b.I(down);
  }
  b.AllW();  // 8: nW
  return b.Take();
}

Row RankOrder(ScheduleKind kind, int r, int p, int v, int m) {
  switch (kind) {
    case ScheduleKind::kGpipe: return GpipeRank(r, m);
    case ScheduleKind::k1F1B: return OneStageRank(r, m, std::min(p - r, m), 0, false);
    case ScheduleKind::kZbH1: return OneStageRank(r, m, std::min(p - r, m), r, true);
    case ScheduleKind::kZbH2: return OneStageRank(r, m, std::min(2 * (p - r) - 1, m), 2 * r, true);
    case ScheduleKind::kInterleaved1F1B: return InterleavedRank(r, p, v, m);
    case ScheduleKind::kZbv: return ZbvRank(r, p, m);
    case ScheduleKind::kDualPipeV: return DualPipeVRank(r, p, m);
  }
  return {};
}

}  // namespace

Status CheckScheduleShape(ScheduleKind kind, int pp, int vp, int m) {
  const std::string name = ScheduleName(kind);
  if (pp < 1) return Status::InvalidArgument("--pp: must be a positive integer, got " + S(pp));
  if (vp < 1) return Status::InvalidArgument("--vp: must be a positive integer, got " + S(vp));
  if (m < 1) return Status::InvalidArgument("--microbatches: must be a positive integer, got " + S(m));
  if (!ScheduleTakesVp(kind) && vp != 1)
    return Status::InvalidArgument(
        "--vp: " + name +
        (ScheduleIsVShaped(kind) ? " always places 2 stages on each rank (V-shaped); leave --vp at 1"
                                 : " has one stage per rank; use interleaved-1f1b for vp > 1"));
  if (ScheduleIsVShaped(kind) && pp < 2) return Status::InvalidArgument("--pp: " + name + " needs at least 2 ranks");
  if (ScheduleIsVShaped(kind) && m < 2 * pp)
    return Status::InvalidArgument("--microbatches: " + name + " needs at least 2 x pp = " + S(2 * pp) +
                                   " micro-batches, got " + S(m));
  if (pp > limits::kMaxPipelineRanks)
    return Status::InvalidArgument("--pp: must be at most " + std::to_string(limits::kMaxPipelineRanks) +
                                   " pipeline ranks, got " + S(pp));
  KP_RETURN_IF_ERROR(CheckPipelineWork(kind, pp, vp, m, "--microbatches"));
  if (ScheduleTakesVp(kind) && vp > 1 && m % pp != 0)
    return Status::InvalidArgument("--microbatches: " + name + " with vp > 1 needs a multiple of pp = " + S(pp) +
                                   " micro-batches, got " + S(m));
  return Status::Ok();
}

Status CheckPipelineWork(ScheduleKind kind, int pp, int vp, std::int64_t microbatches, const std::string& flag) {
  // Every stage of every rank runs F, B and W for every micro-batch.
  const double per_rank = ScheduleIsVShaped(kind) ? 2 : ScheduleTakesVp(kind) ? vp : 1;
  const double actions = 3.0 * pp * per_rank * double(microbatches);
  if (actions <= double(limits::kMaxPipelineActions)) return Status::Ok();
  return Status::InvalidArgument(flag + ": pp x stages per rank x micro-batches x 3 = " + std::to_string(pp) + " x " +
                                 ShowNumber(per_rank) + " x " + std::to_string(microbatches) + " x 3 actions, more than the " +
                                 std::to_string(limits::kMaxPipelineActions) +
                                 " one simulated step may hold (docs/limits.md)");
}

Result<PipelineSchedule> GenerateSchedule(ScheduleKind kind, int pp, int vp, int microbatches) {
  KP_RETURN_IF_ERROR(CheckScheduleShape(kind, pp, vp, microbatches));
  const bool v_shaped = ScheduleIsVShaped(kind);
  const int stages = pp * (v_shaped ? 2 : ScheduleTakesVp(kind) ? vp : 1);
  PipelineSchedule s = Skeleton(kind, pp, stages, microbatches, v_shaped);
  for (int r = 0; r < pp; ++r) s.ranks.push_back(RankOrder(kind, r, pp, vp, microbatches));
  // A generator bug must not reach the simulator as a plausible schedule.
  const Status valid = ValidateSchedule(s);
  if (!valid.ok()) return Status::Internal(std::string(ScheduleName(kind)) + " generator: " + valid.message());
  return s;
}

}  // namespace kp
