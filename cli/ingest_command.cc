// `kimi-plan ingest FILE`: a Verl job's metrics file into the store as one
// run, linked to the plan it was launched from (--plan, else the job file
// beside it), its status from the job file. Without --follow the whole file
// is read and checked first and written in one transaction, so a bad line
// writes nothing; with --follow the file is tailed, each batch of complete
// lines written as it appears, until the job file says the trainer
// returned or the user stops it (Ctrl-C), and a bad line stops it there.
#include <chrono>
#include <filesystem>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/log.h"
#include "cli/options.h"
#include "common/limits.h"
#include "common/stop_signals.h"
#include "common/table.h"
#include "ingest/ingest.h"
#include "ingest/metrics_file.h"
#include "store/store.h"

namespace kp {

namespace {

using nlohmann::json;

po::options_description IngestOptions() {
  po::options_description desc(
      "kimi-plan ingest FILE [--plan ID] [--follow [--poll-ms MS]] [--db PATH] [--json]\n\n"
      "Reads a Verl metrics file (trainer.logger with \"file\"; `kimi-plan launch --engine verl` turns it on) into\n"
      "the store as one run: every step's metrics under Verl's names, linked to its plan, its status from the\n"
      "kimi-plan-job.json beside it. Ingesting the same file again adds nothing. Options");
  desc.add_options()("help,h", "this text")
      ("file", po::value<std::string>(), "the metrics file (also positional)")
      ("plan", Int64Flag(1, INT64_MAX), "the plan the run was launched from (default: the job file's)")
      ("follow", "tail a file still being written, adding steps as they appear, until the job ends or Ctrl-C")
      ("poll-ms", IntFlag(10, 60000), "with --follow: how often the file is read, in ms (default 200)");
  AddOutputOptions(desc);
  return desc;
}

// The job file beside `file`, when there is one.
Result<std::optional<JobFile>> ReadJob(const std::string& file, const CliEnv& env) {
  const std::string path = (std::filesystem::path(file).parent_path() / kJobFileName).string();
  if (!env.fs.Exists(path)) return std::optional<JobFile>();
  KP_ASSIGN_OR_RETURN(const std::string text, env.fs.ReadFile(path, limits::kMaxSpecFileBytes));
  KP_ASSIGN_OR_RETURN(JobFile job, ParseJobFile(text, path));
  return std::optional<JobFile>(job);
}

struct Ingested {
  std::int64_t run_id = 0;
  int steps = 0, rows_written = 0, last_step = -1;
  std::string status;
};

json ProgressJson(const IngestTarget& t, const Ingested& p) {
  return {{"schema", "kimi-plan.ingest/1"},
          {"source", t.source},
          {"run_id", p.run_id},
          {"plan_id", t.plan_id > 0 ? json(t.plan_id) : json(nullptr)},
          {"steps_read", p.steps},
          {"rows_written", p.rows_written},
          {"last_step", p.last_step >= 0 ? json(p.last_step) : json(nullptr)},
          {"status", p.status}};
}

std::string ProgressText(const IngestTarget& t, const Ingested& p) {
  Table table({"run", "plan", "steps read", "last step", "metric rows written", "status"});
  table.AddRow({std::to_string(p.run_id), t.plan_id > 0 ? std::to_string(t.plan_id) : "-", std::to_string(p.steps),
                p.last_step >= 0 ? std::to_string(p.last_step) : "-", std::to_string(p.rows_written), p.status});
  return "kimi-plan ingest: " + t.source + "\n" + table.Render();
}

// One pass: what was appended since `offset`, parsed and written.
struct Tail {
  std::uint64_t offset = 0;
  int next_line = 1, last_step = -1;
};

Result<MetricsChunk> ReadMore(const IngestTarget& t, const Tail& tail, const CliEnv& env) {
  Result<std::string> text = env.fs.ReadFileFrom(t.source, tail.offset, limits::kMaxMetricsFileBytes);
  if (!text.ok()) return text.status().WithContext("FILE");
  return ParseVerlMetrics(*text, t.source, tail.next_line, tail.last_step);
}

Status Write(Store& store, const IngestTarget& t, const MetricsChunk& c, Tail* tail, Ingested* p) {
  KP_ASSIGN_OR_RETURN(const ChunkResult r, IngestChunk(store, t, c.metrics));
  p->run_id = r.run_id;
  p->steps += c.steps;
  p->rows_written += r.rows_written;
  if (c.last_step >= 0) p->last_step = c.last_step;
  tail->offset += c.consumed;
  tail->next_line = c.next_line;
  tail->last_step = c.last_step;
  return Status::Ok();
}

Status Follow(Store& store, const IngestTarget& t, int poll_ms, const CliEnv& env, Ingested* p) {
  StopSignals stop;
  Tail tail;
  for (;;) {
    KP_ASSIGN_OR_RETURN(const MetricsChunk c, ReadMore(t, tail, env));
    if (c.steps > 0 || p->run_id == 0) {
      const int before = p->steps;
      KP_RETURN_IF_ERROR(Write(store, t, c, &tail, p));
      if (p->steps > before)
        Progress(env, "ingest: run " + std::to_string(p->run_id) + ": step " + std::to_string(p->last_step) + " (" +
                          std::to_string(p->steps) + " steps so far)");
    }
    if (!c.error.ok())
      return Status::InvalidArgument(c.error.message() + "; --follow stopped there, the " + std::to_string(p->steps) +
                                     " steps before it are in run " + std::to_string(p->run_id));
    KP_ASSIGN_OR_RETURN(const std::optional<JobFile> job, ReadJob(t.source, env));
    if (job && job->exit_code) {
      // The trainer returned: what it wrote before is complete; read it all.
      KP_ASSIGN_OR_RETURN(const MetricsChunk last, ReadMore(t, tail, env));
      KP_RETURN_IF_ERROR(last.error);
      KP_RETURN_IF_ERROR(Write(store, t, last, &tail, p));
      KP_ASSIGN_OR_RETURN(p->status, EndIngestedRun(store, p->run_id, job->exit_code));
      return Status::Ok();
    }
    if (*stop.flag() != 0) {
      p->status = "running";
      Progress(env, "ingest: stopped; run " + std::to_string(p->run_id) + " stays running, ingest again to go on");
      return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(poll_ms));
  }
}

}  // namespace

Status IngestCommand(const std::vector<std::string>& args, CliEnv& env) {
  const po::options_description desc = IngestOptions();
  po::variables_map vm;
  po::positional_options_description positional;
  positional.add("file", 1);
  KP_ASSIGN_OR_RETURN(const bool proceed, ParseCommand(args, desc, &vm, env.out, &positional));
  if (!proceed) return Status::Ok();
  if (!vm.count("file")) return Status::InvalidArgument("FILE: required (the Verl metrics file to ingest)");
  if (vm.count("poll-ms") && !vm.count("follow")) return Status::InvalidArgument("--poll-ms: only with --follow");
  const std::string given = vm["file"].as<std::string>();
  if (!env.fs.Exists(given)) return Status::InvalidArgument("FILE: " + given + ": no such file");
  IngestTarget t;
  t.source = env.fs.Canonical(given);
  KP_ASSIGN_OR_RETURN(const std::optional<JobFile> job, ReadJob(t.source, env));
  if (vm.count("plan")) {
    t.plan_id = vm["plan"].as<std::int64_t>();
    t.plan_flag = "--plan";
  } else if (job && job->plan_id > 0) {
    t.plan_id = job->plan_id;
    t.plan_flag = (std::filesystem::path(t.source).parent_path() / kJobFileName).string();
  }
  if (job) t.label = job->label;
  const bool follow = vm.count("follow") > 0;
  const std::string db = vm["db"].as<std::string>();
  KP_RETURN_IF_ERROR(Store::CheckPath(db));
  // Read (and, unless followed, checked whole) before the store is opened:
  // a file that cannot be read, or a bad one, writes nothing, not even a
  // new store.
  KP_ASSIGN_OR_RETURN(const MetricsChunk whole, ReadMore(t, Tail{}, env));
  if (!follow) KP_RETURN_IF_ERROR(whole.error);
  KP_ASSIGN_OR_RETURN(std::unique_ptr<Store> store, Store::Open(db, env.clock));
  KP_RETURN_IF_ERROR(CheckIngestTarget(*store, t));
  Ingested p;
  if (follow) {
    KP_RETURN_IF_ERROR(Follow(*store, t, vm.count("poll-ms") ? vm["poll-ms"].as<int>() : 200, env, &p));
  } else {
    Tail tail;
    KP_RETURN_IF_ERROR(Write(*store, t, whole, &tail, &p));
    KP_ASSIGN_OR_RETURN(p.status, EndIngestedRun(*store, p.run_id, job ? job->exit_code : std::nullopt));
  }
  if (vm.count("json")) env.out << ProgressJson(t, p).dump(2) << "\n";
  else env.out << ProgressText(t, p);
  return Status::Ok();
}

}  // namespace kp
