// A pipeline schedule as data: for every pipeline rank, the ordered list of
// actions it performs in one training step. The text form is exactly that of
// torch.distributed.pipelining (`_dump_csv` / `_load_csv`): one CSV row per
// rank, one action per cell, written `{stage}{type}{microbatch}` ("2F0",
// "0I3", "1W2", "3B1", "3SEND_F1", "1RECV_B0"); an empty cell is an idle
// slot. The simulator executes these lists and the runtime (a later issue)
// runs the same lists, so what is simulated is what runs.
//
// Thread-safety: plain values and pure functions.
#ifndef KIMI_PLAN_SCHEDULES_PIPELINE_SCHEDULE_H_
#define KIMI_PLAN_SCHEDULES_PIPELINE_SCHEDULE_H_

#include <optional>
#include <string>
#include <vector>

#include "common/status.h"

namespace kp {

/// What an action does, with torch's spelling in the comment.
enum class ActionType {
  kForward,         ///< "F"
  kBackwardInput,   ///< "I": gradient with respect to the stage's input (the ZB paper's B)
  kBackwardWeight,  ///< "W": gradient with respect to the stage's weights
  kFullBackward,    ///< "B": I and W back to back
  kSendF,           ///< "SEND_F": send stage s's output activation to stage s + 1
  kRecvF,           ///< "RECV_F": receive stage s's input activation from stage s - 1
  kSendB,           ///< "SEND_B": send stage s's input gradient to stage s - 1
  kRecvB,           ///< "RECV_B": receive stage s's output gradient from stage s + 1
};

/// torch's spelling: "F", "I", "W", "B", "SEND_F", "RECV_F", "SEND_B", "RECV_B".
const char* ActionTypeName(ActionType t);
/// F, I, W and B occupy the rank's compute stream; the others move data.
bool IsCompute(ActionType t);
/// I or B: the action that produces the gradient the previous stage waits for.
bool IsBackwardInput(ActionType t);

struct PipelineAction {
  int stage = 0;
  ActionType type = ActionType::kForward;
  int microbatch = 0;

  /// "2F0", "3SEND_F1".
  std::string ToString() const;
  bool operator==(const PipelineAction&) const = default;
};

/// Parses one cell such as "2F0" or "3SEND_F1" (surrounding blanks allowed).
/// The error is one line naming the text, e.g. `"3Q1" is not an action`.
Result<PipelineAction> ParseAction(const std::string& text);

struct PipelineSchedule {
  std::string name;
  int pp = 0;            ///< pipeline ranks
  int num_stages = 0;    ///< stages over all ranks
  int microbatches = 0;  ///< micro-batches per step
  /// stage_to_rank[s]: the rank that holds stage s.
  std::vector<int> stage_to_rank;
  /// ranks[r]: rank r's actions in the order it issues them; nullopt is an
  /// idle slot (an empty CSV cell), which the simulator skips.
  std::vector<std::vector<std::optional<PipelineAction>>> ranks;

  int StagesPerRank() const { return pp > 0 ? num_stages / pp : 0; }
};

/// The stage-to-rank placement of a named style: "loop" puts stage s on rank
/// s % pp (needs num_stages a multiple of pp); "v" gives rank r stages r and
/// 2 pp - 1 - r (needs num_stages == 2 pp). `field` prefixes the error.
Result<std::vector<int>> StageToRank(int pp, int num_stages, const std::string& style,
                                     const std::string& field = "--stage-to-rank");

/// torch's `_dump_csv`: one row per rank, cells separated by commas, idle
/// slots as empty cells, rows ended by "\n".
std::string ToCsv(const PipelineSchedule& schedule);

/// torch's `_load_csv`: one row per rank (pp = the number of rows). Checks
/// every cell (a known action, stage < num_stages, micro-batch <
/// microbatches, the stage placed on this row's rank) and then the whole
/// schedule (ValidateSchedule). Errors are one line starting
/// "--schedule-csv: ", e.g. `--schedule-csv: row 2, cell 5: "3Q1" is not an
/// action` (rows and cells counted from 1).
Result<PipelineSchedule> ParseCsv(const std::string& text, int num_stages, int microbatches,
                                  const std::string& stage_to_rank_style);

/// Whether any rank lists a SEND or RECV.
bool HasCommunication(const PipelineSchedule& schedule);

/// Checks that the schedule is complete and consistent: every action on the
/// rank that holds its stage; for every (stage, micro-batch) exactly one F
/// and either one B or one I and one W; and, where the schedule carries
/// communication, exactly one SEND and one RECV for every stage boundary
/// that crosses ranks and none for boundaries inside a rank. Does not look
/// for deadlocks (CheckDeadlockFree in schedule_graph.h does).
Status ValidateSchedule(const PipelineSchedule& schedule);

/// The lowering torch's `_add_send_recv` performs: from a compute-only
/// schedule, one where every boundary between stages on different ranks
/// carries its transfer — a SEND_F(s) right after F(s) and a RECV_F(s + 1)
/// right before F(s + 1); a SEND_B(s) right after the I or B of s and a
/// RECV_B(s - 1) right before the I or B of s - 1. Idle slots are dropped.
/// Unlike torch, which places each RECV where a lock-step replay of the
/// ranks happens to be, the RECV sits right before the action that consumes
/// it, so a rank never blocks on data it does not yet need. Rejects a
/// schedule that already carries communication or fails ValidateSchedule.
Result<PipelineSchedule> AddCommunication(const PipelineSchedule& compute_only);

}  // namespace kp

#endif  // KIMI_PLAN_SCHEDULES_PIPELINE_SCHEDULE_H_
