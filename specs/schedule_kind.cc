#include "specs/schedule_kind.h"

namespace kp {

namespace {
struct Entry { ScheduleKind kind; const char* name; };
constexpr Entry kSchedules[] = {
    {ScheduleKind::kGpipe, "gpipe"},          {ScheduleKind::k1F1B, "1f1b"},
    {ScheduleKind::kInterleaved1F1B, "interleaved-1f1b"},
    {ScheduleKind::kZbH1, "zb-h1"},           {ScheduleKind::kZbH2, "zb-h2"},
    {ScheduleKind::kZbv, "zbv"},              {ScheduleKind::kDualPipeV, "dualpipev"},
};
}  // namespace

const char* ScheduleName(ScheduleKind k) {
  for (const Entry& e : kSchedules)
    if (e.kind == k) return e.name;
  return "?";
}

std::vector<std::string> ScheduleNames() {
  std::vector<std::string> out;
  for (const Entry& e : kSchedules) out.push_back(e.name);
  return out;
}

Result<ScheduleKind> ParseSchedule(const std::string& name, const std::string& field) {
  for (const Entry& e : kSchedules)
    if (name == e.name) return e.kind;
  std::string known;
  for (const Entry& e : kSchedules) known += std::string(known.empty() ? "" : ", ") + e.name;
  return Status::InvalidArgument(field + ": unknown schedule \"" + name + "\" (allowed: " + known + ")");
}

bool ScheduleTakesVp(ScheduleKind k) { return k == ScheduleKind::kInterleaved1F1B; }
bool ScheduleIsVShaped(ScheduleKind k) { return k == ScheduleKind::kZbv || k == ScheduleKind::kDualPipeV; }
int StagesPerRank(ScheduleKind kind, int vp) {
  if (ScheduleTakesVp(kind)) return vp;
  if (ScheduleIsVShaped(kind)) return 2;
  return 1;
}
bool ScheduleSplitsW(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbH2 || k == ScheduleKind::kZbv ||
         k == ScheduleKind::kDualPipeV;
}

const char* OptimizerSyncName(OptimizerSync s) {
  return s == OptimizerSync::kPostValidation ? "post-validation" : "sync";
}

Result<OptimizerSync> ParseOptimizerSync(const std::string& name, const std::string& field) {
  if (name == "sync") return OptimizerSync::kSynchronised;
  if (name == "post-validation") return OptimizerSync::kPostValidation;
  return Status::InvalidArgument(field + ": must be sync or post-validation, got \"" + name + "\"");
}

OptimizerSync DefaultOptimizerSync(ScheduleKind k) {
  return k == ScheduleKind::kZbH1 || k == ScheduleKind::kZbH2 || k == ScheduleKind::kZbv
             ? OptimizerSync::kPostValidation
             : OptimizerSync::kSynchronised;
}

const char* SendModeName(SendMode m) { return m == SendMode::kBlocking ? "blocking" : "async"; }

Result<SendMode> ParseSendMode(const std::string& name, const std::string& field) {
  if (name == "async") return SendMode::kAsync;
  if (name == "blocking") return SendMode::kBlocking;
  return Status::InvalidArgument(field + ": must be async or blocking, got \"" + name + "\"");
}

SendMode DefaultSendMode(ScheduleKind k, bool megatron) {
  const bool megatron_schedule = k == ScheduleKind::k1F1B || k == ScheduleKind::kInterleaved1F1B;
  return megatron && megatron_schedule ? SendMode::kBlocking : SendMode::kAsync;
}

}  // namespace kp
