#include "schedules/pipeline_schedule.h"

#include <array>
#include <cctype>
#include <cstdint>

#include "common/text.h"

namespace kp {

namespace {

struct TypeName {
  ActionType type;
  const char* name;
};
constexpr std::array<TypeName, 8> kTypeNames = {{
    {ActionType::kSendF, "SEND_F"},
    {ActionType::kRecvF, "RECV_F"},
    {ActionType::kSendB, "SEND_B"},
    {ActionType::kRecvB, "RECV_B"},
    {ActionType::kForward, "F"},
    {ActionType::kBackwardInput, "I"},
    {ActionType::kBackwardWeight, "W"},
    {ActionType::kFullBackward, "B"},
}};
constexpr int kTypeCount = 8;

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

// Reads a run of at most nine digits at `pos`; -1 when there is none.
int ReadNumber(const std::string& s, size_t& pos) {
  const size_t start = pos;
  long long v = 0;
  while (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])) && pos - start < 9)
    v = v * 10 + (s[pos++] - '0');
  if (pos == start || (pos < s.size() && std::isdigit(static_cast<unsigned char>(s[pos])))) return -1;
  return static_cast<int>(v);
}

std::string Quoted(const std::string& s) { return "\"" + QuoteBounded(s) + "\""; }

// Counts of each (type, stage, micro-batch), for the completeness checks.
class ActionCounts {
 public:
  ActionCounts(int stages, int microbatches)
      : stages_(stages), microbatches_(microbatches),
        counts_(static_cast<size_t>(kTypeCount) * stages * microbatches, 0) {}
  void Add(const PipelineAction& a) {
    std::uint16_t& c = counts_[Index(a.type, a.stage, a.microbatch)];
    if (c < 0xffff) ++c;
  }
  int Get(ActionType t, int stage, int mb) const { return counts_[Index(t, stage, mb)]; }

 private:
  size_t Index(ActionType t, int stage, int mb) const {
    return (static_cast<size_t>(t) * stages_ + stage) * microbatches_ + mb;
  }
  int stages_;
  int microbatches_;
  std::vector<std::uint16_t> counts_;
};

std::string StageMb(int s, int m) { return "stage " + std::to_string(s) + " micro-batch " + std::to_string(m); }

Status CheckShape(const PipelineSchedule& s) {
  if (s.pp < 1) return Status::InvalidArgument("pp: must be at least 1, got " + std::to_string(s.pp));
  if (s.microbatches < 1)
    return Status::InvalidArgument("microbatches: must be at least 1, got " + std::to_string(s.microbatches));
  if (static_cast<int>(s.ranks.size()) != s.pp)
    return Status::InvalidArgument("the schedule lists " + std::to_string(s.ranks.size()) + " ranks, pp is " +
                                   std::to_string(s.pp));
  if (s.num_stages < s.pp || static_cast<int>(s.stage_to_rank.size()) != s.num_stages)
    return Status::InvalidArgument("stage_to_rank: needs one rank for each of the " + std::to_string(s.num_stages) +
                                   " stages (at least pp = " + std::to_string(s.pp) + ")");
  for (int st = 0; st < s.num_stages; ++st)
    if (s.stage_to_rank[st] < 0 || s.stage_to_rank[st] >= s.pp)
      return Status::InvalidArgument("stage_to_rank: stage " + std::to_string(st) + " is on rank " +
                                     std::to_string(s.stage_to_rank[st]) + ", outside 0.." + std::to_string(s.pp - 1));
  return Status::Ok();
}

Status CheckPlacement(const PipelineSchedule& s) {
  for (int r = 0; r < s.pp; ++r)
    for (const auto& cell : s.ranks[r]) {
      if (!cell) continue;
      const PipelineAction& a = *cell;
      if (a.stage < 0 || a.stage >= s.num_stages)
        return Status::InvalidArgument("rank " + std::to_string(r) + " lists " + a.ToString() + ", which names stage " +
                                       std::to_string(a.stage) + ", the schedule has " +
                                       std::to_string(s.num_stages) + " stages");
      if (a.microbatch < 0 || a.microbatch >= s.microbatches)
        return Status::InvalidArgument("rank " + std::to_string(r) + " lists " + a.ToString() +
                                       ", which names micro-batch " + std::to_string(a.microbatch) +
                                       ", the schedule has " + std::to_string(s.microbatches) + " micro-batches");
      if (s.stage_to_rank[a.stage] != r)
        return Status::InvalidArgument("rank " + std::to_string(r) + " lists " + a.ToString() + ", but stage " +
                                       std::to_string(a.stage) + " is on rank " +
                                       std::to_string(s.stage_to_rank[a.stage]));
    }
  return Status::Ok();
}

Status CheckCompute(const ActionCounts& c, int stages, int mbs) {
  using T = ActionType;
  for (int st = 0; st < stages; ++st)
    for (int m = 0; m < mbs; ++m) {
      const int f = c.Get(T::kForward, st, m), b = c.Get(T::kFullBackward, st, m);
      const int i = c.Get(T::kBackwardInput, st, m), w = c.Get(T::kBackwardWeight, st, m);
      if (f != 1)
        return Status::InvalidArgument(StageMb(st, m) + " has " + std::to_string(f) + " F, needs exactly one");
      const bool full = b == 1 && i == 0 && w == 0;
      const bool split = b == 0 && i == 1 && w == 1;
      if (!full && !split)
        return Status::InvalidArgument(StageMb(st, m) + " has " + std::to_string(b) + " B, " + std::to_string(i) +
                                       " I and " + std::to_string(w) + " W; needs one B, or one I and one W");
    }
  return Status::Ok();
}

// One expected count of a communication action; `crossing` says whether the
// boundary it serves joins stages on different ranks.
Status CheckOneComm(const ActionCounts& c, const PipelineSchedule& s, ActionType t, int st, int m, int from, int to) {
  const bool crossing = from >= 0 && to < s.num_stages && s.stage_to_rank[from] != s.stage_to_rank[to];
  const int n = c.Get(t, st, m);
  const std::string name = PipelineAction{st, t, m}.ToString();
  if (crossing && n != 1)
    return Status::InvalidArgument(n == 0 ? "missing " + name + " (stages " + std::to_string(from) + " and " +
                                                std::to_string(to) + " are on ranks " +
                                                std::to_string(s.stage_to_rank[from]) + " and " +
                                                std::to_string(s.stage_to_rank[to]) + ")"
                                          : name + " is listed " + std::to_string(n) + " times");
  if (!crossing && n != 0)
    return Status::InvalidArgument(name + " moves no data: " +
                                   (from < 0 || to >= s.num_stages
                                        ? std::string("there is no stage on the other side")
                                        : "stages " + std::to_string(from) + " and " + std::to_string(to) +
                                              " are both on rank " + std::to_string(s.stage_to_rank[from])));
  return Status::Ok();
}

Status CheckComm(const ActionCounts& c, const PipelineSchedule& s) {
  using T = ActionType;
  for (int st = 0; st < s.num_stages; ++st)
    for (int m = 0; m < s.microbatches; ++m) {
      KP_RETURN_IF_ERROR(CheckOneComm(c, s, T::kSendF, st, m, st, st + 1));
      KP_RETURN_IF_ERROR(CheckOneComm(c, s, T::kRecvF, st, m, st - 1, st));
      KP_RETURN_IF_ERROR(CheckOneComm(c, s, T::kSendB, st, m, st - 1, st));
      KP_RETURN_IF_ERROR(CheckOneComm(c, s, T::kRecvB, st, m, st, st + 1));
    }
  return Status::Ok();
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  std::string cur;
  for (char ch : text) {
    if (ch == '\n') {
      lines.push_back(cur);
      cur.clear();
    } else if (ch != '\r') {
      cur += ch;
    }
  }
  if (!cur.empty()) lines.push_back(cur);
  return lines;
}

std::vector<std::string> SplitCells(const std::string& line) {
  std::vector<std::string> cells;
  if (Trim(line).empty()) return cells;  // csv.reader reads an empty line as no cells
  std::string cur;
  for (char ch : line) {
    if (ch == ',') {
      cells.push_back(cur);
      cur.clear();
    } else if (ch != '"') {  // csv quoting never changes an action's text
      cur += ch;
    }
  }
  cells.push_back(cur);
  return cells;
}

bool Crosses(const PipelineSchedule& s, int a, int b) {
  return a >= 0 && b < s.num_stages && s.stage_to_rank[a] != s.stage_to_rank[b];
}

}  // namespace

const char* ActionTypeName(ActionType t) {
  for (const TypeName& n : kTypeNames)
    if (n.type == t) return n.name;
  return "?";
}

bool IsCompute(ActionType t) {
  return t == ActionType::kForward || t == ActionType::kBackwardInput || t == ActionType::kBackwardWeight ||
         t == ActionType::kFullBackward;
}

bool IsBackwardInput(ActionType t) { return t == ActionType::kBackwardInput || t == ActionType::kFullBackward; }

std::string PipelineAction::ToString() const {
  return std::to_string(stage) + ActionTypeName(type) + std::to_string(microbatch);
}

Result<PipelineAction> ParseAction(const std::string& text) {
  const std::string s = Trim(text);
  const Status bad = Status::InvalidArgument(
      Quoted(s) + " is not an action (expected {stage}{F|I|W|B|SEND_F|RECV_F|SEND_B|RECV_B}{micro-batch}, e.g. 2F0)");
  size_t pos = 0;
  PipelineAction a;
  a.stage = ReadNumber(s, pos);
  if (a.stage < 0) return bad;
  bool typed = false;
  for (const TypeName& n : kTypeNames) {
    const std::string name = n.name;
    if (s.compare(pos, name.size(), name) == 0) {
      a.type = n.type;
      pos += name.size();
      typed = true;
      break;
    }
  }
  if (!typed) return bad;
  a.microbatch = ReadNumber(s, pos);
  if (a.microbatch < 0 || pos != s.size()) return bad;
  return a;
}

Result<std::vector<int>> StageToRank(int pp, int num_stages, const std::string& style, const std::string& field) {
  if (pp < 1) return Status::InvalidArgument("--pp: must be at least 1, got " + std::to_string(pp));
  std::vector<int> placement(num_stages > 0 ? num_stages : 0);
  if (style == "loop") {
    if (num_stages < pp || num_stages % pp != 0)
      return Status::InvalidArgument(field + ": loop placement needs the stage count to be a multiple of pp = " +
                                     std::to_string(pp) + ", got " + std::to_string(num_stages) + " stages");
    for (int s = 0; s < num_stages; ++s) placement[s] = s % pp;
    return placement;
  }
  if (style == "v") {
    if (num_stages != 2 * pp)
      return Status::InvalidArgument(field + ": v placement needs exactly 2 x pp = " + std::to_string(2 * pp) +
                                     " stages, got " + std::to_string(num_stages));
    for (int s = 0; s < num_stages; ++s) placement[s] = s < pp ? s : 2 * pp - 1 - s;
    return placement;
  }
  return Status::InvalidArgument(field + ": unknown placement " + Quoted(style) + " (allowed: loop, v)");
}

std::string ToCsv(const PipelineSchedule& schedule) {
  std::string out;
  for (const auto& row : schedule.ranks) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (i > 0) out += ',';
      if (row[i]) out += row[i]->ToString();
    }
    out += '\n';
  }
  return out;
}

Result<PipelineSchedule> ParseCsv(const std::string& text, int num_stages, int microbatches,
                                  const std::string& stage_to_rank_style) {
  const std::string field = "--schedule-csv";
  const std::vector<std::string> lines = SplitLines(text);
  if (lines.empty()) return Status::InvalidArgument(field + ": no rows; expected one row of actions per rank");
  if (microbatches < 1)
    return Status::InvalidArgument("--microbatches: must be at least 1, got " + std::to_string(microbatches));
  PipelineSchedule s;
  s.name = "csv";
  s.pp = static_cast<int>(lines.size());
  s.num_stages = num_stages;
  s.microbatches = microbatches;
  KP_ASSIGN_OR_RETURN(s.stage_to_rank, StageToRank(s.pp, num_stages, stage_to_rank_style));
  for (int r = 0; r < s.pp; ++r) {
    std::vector<std::optional<PipelineAction>> row;
    const std::vector<std::string> cells = SplitCells(lines[r]);
    for (size_t c = 0; c < cells.size(); ++c) {
      const std::string where = field + ": row " + std::to_string(r + 1) + ", cell " + std::to_string(c + 1) + ": ";
      const std::string cell = Trim(cells[c]);
      if (cell.empty()) {
        row.emplace_back(std::nullopt);
        continue;
      }
      Result<PipelineAction> a = ParseAction(cell);
      if (!a.ok()) return Status::InvalidArgument(where + a.status().message());
      if (a->stage >= num_stages)
        return Status::InvalidArgument(where + Quoted(cell) + " names stage " + std::to_string(a->stage) +
                                       ", the schedule has " + std::to_string(num_stages) + " stages");
      if (a->microbatch >= microbatches)
        return Status::InvalidArgument(where + Quoted(cell) + " names micro-batch " + std::to_string(a->microbatch) +
                                       ", the schedule has " + std::to_string(microbatches) + " micro-batches");
      if (s.stage_to_rank[a->stage] != r)
        return Status::InvalidArgument(where + Quoted(cell) + " is on rank " + std::to_string(r) + ", but stage " +
                                       std::to_string(a->stage) + " is on rank " +
                                       std::to_string(s.stage_to_rank[a->stage]) + " (" + stage_to_rank_style +
                                       " placement)");
      row.emplace_back(*a);
    }
    s.ranks.push_back(std::move(row));
  }
  KP_RETURN_IF_ERROR(ValidateSchedule(s).WithContext(field));
  return s;
}

bool HasCommunication(const PipelineSchedule& schedule) {
  for (const auto& row : schedule.ranks)
    for (const auto& cell : row)
      if (cell && !IsCompute(cell->type)) return true;
  return false;
}

Status ValidateSchedule(const PipelineSchedule& schedule) {
  KP_RETURN_IF_ERROR(CheckShape(schedule));
  KP_RETURN_IF_ERROR(CheckPlacement(schedule));
  ActionCounts counts(schedule.num_stages, schedule.microbatches);
  for (const auto& row : schedule.ranks)
    for (const auto& cell : row)
      if (cell) counts.Add(*cell);
  KP_RETURN_IF_ERROR(CheckCompute(counts, schedule.num_stages, schedule.microbatches));
  return HasCommunication(schedule) ? CheckComm(counts, schedule) : Status::Ok();
}

Result<PipelineSchedule> AddCommunication(const PipelineSchedule& compute_only) {
  if (HasCommunication(compute_only))
    return Status::InvalidArgument("schedule \"" + compute_only.name +
                                   "\" already carries SEND/RECV actions; lower only compute-only schedules");
  KP_RETURN_IF_ERROR(ValidateSchedule(compute_only));
  using T = ActionType;
  PipelineSchedule out = compute_only;
  for (int r = 0; r < out.pp; ++r) {
    std::vector<std::optional<PipelineAction>> row;
    row.reserve(compute_only.ranks[r].size() * 2);
    for (const auto& cell : compute_only.ranks[r]) {
      if (!cell) continue;
      const int s = cell->stage, m = cell->microbatch;
      const bool fwd = cell->type == T::kForward, bwd = IsBackwardInput(cell->type);
      if (fwd && Crosses(out, s - 1, s)) row.push_back(PipelineAction{s, T::kRecvF, m});
      if (bwd && Crosses(out, s, s + 1)) row.push_back(PipelineAction{s, T::kRecvB, m});
      row.push_back(*cell);
      if (fwd && Crosses(out, s, s + 1)) row.push_back(PipelineAction{s, T::kSendF, m});
      if (bwd && Crosses(out, s - 1, s)) row.push_back(PipelineAction{s, T::kSendB, m});
    }
    out.ranks[r] = std::move(row);
  }
  return out;
}

}  // namespace kp
