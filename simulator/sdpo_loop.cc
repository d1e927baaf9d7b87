#include "simulator/sdpo_loop.h"

#include <algorithm>
#include <map>
#include <memory>
#include <sstream>

#include "common/limits.h"
#include "common/range.h"
#include "simulator/event_queue.h"

namespace kp {

const char* LoopSystemName(LoopSystem s) {
  switch (s) {
    case LoopSystem::kRollout: return "rollout";
    case LoopSystem::kFeedback: return "feedback";
    case LoopSystem::kTeacher: return "teacher";
    case LoopSystem::kTrain: return "train";
    case LoopSystem::kSync: return "sync";
  }
  return "?";
}

Seconds LoopCosts::of(LoopSystem s) const {
  switch (s) {
    case LoopSystem::kRollout: return rollout;
    case LoopSystem::kFeedback: return feedback;
    case LoopSystem::kTeacher: return teacher;
    case LoopSystem::kTrain: return train;
    case LoopSystem::kSync: return sync;
  }
  return Seconds(0);
}

namespace {

// A task of the loop's dependency graph: runs on one resource once every
// task it depends on has finished.
struct Task {
  LoopSystem system;
  int step;
  int resource;
  Nanoseconds duration;
  std::vector<int> dependents;
  int waiting = 0;
  Nanoseconds start{0}, end{0};
};

class LoopGraph {
 public:
  int AddResource(std::string name) {
    names_.push_back(std::move(name));
    return static_cast<int>(names_.size()) - 1;
  }
  int Add(LoopSystem s, int step, int resource, Seconds d, std::vector<int> deps) {
    const int id = static_cast<int>(tasks_.size());
    tasks_.push_back(Task{s, step, resource, ToNanoseconds(d), {}, 0, Nanoseconds(0), Nanoseconds(0)});
    for (int dep : deps) {
      if (dep < 0) continue;
      tasks_[dep].dependents.push_back(id);
      ++tasks_[id].waiting;
    }
    return id;
  }
  /// Runs every task; each resource serves ready tasks in the order they became ready.
  std::uint64_t Run() {
    EventQueue q;
    std::vector<std::unique_ptr<Stream>> streams;
    for (size_t i = 0; i < names_.size(); ++i) streams.push_back(std::make_unique<Stream>(q));
    std::function<void(int)> ready = [&](int id) {
      Task& t = tasks_[id];
      t.start = streams[t.resource]->Submit(t.duration, [&, id] {
        tasks_[id].end = q.now();
        for (int d : tasks_[id].dependents)
          if (--tasks_[d].waiting == 0) ready(d);
      });
    };
    for (size_t i = 0; i < tasks_.size(); ++i)
      if (tasks_[i].waiting == 0) q.At(Nanoseconds(0), [&, i] { ready(static_cast<int>(i)); });
    return q.Run();
  }
  const std::vector<Task>& tasks() const { return tasks_; }
  const std::string& name(int r) const { return names_[r]; }

 private:
  std::vector<std::string> names_;
  std::vector<Task> tasks_;
};

Status Validate(const LoopCosts& c, const LoopOptions& o) {
  for (int s = 0; s < kLoopSystems; ++s)
    if (c.of(LoopSystem(s)).value() < 0)
      return Status::InvalidArgument(std::string("--") + LoopSystemName(LoopSystem(s)) + "-s: must be >= 0");
  if (o.steps < 2) return Status::InvalidArgument("--steps: must be at least 2 to reach a steady state, got " + std::to_string(o.steps));
  // The loop ends no later than if every task ran one after another, so the
  // clock (integer nanoseconds) holds it when that sum does.
  double serial = 0;
  for (int s = 0; s < kLoopSystems; ++s) serial += c.of(LoopSystem(s)).value();
  if (!(serial * o.steps <= limits::kMaxSimulatedSeconds))
    return Status::InvalidArgument("--steps: " + std::to_string(o.steps) + " steps of up to " + ShowNumber(serial) +
                                   " s each may last beyond the simulator's clock of " +
                                   ShowNumber(limits::kMaxSimulatedSeconds) + " s (100 years); give fewer steps or smaller costs");
  if (o.actor_gpus <= 0) return Status::InvalidArgument("--actor-gpus: must be a positive integer");
  if (o.placement == LoopPlacement::kSplit && o.rollout_gpus <= 0)
    return Status::InvalidArgument("--rollout-gpus: a split placement needs a positive rollout pool");
  if (o.off_policy_overlap && o.placement != LoopPlacement::kSplit)
    return Status::InvalidArgument("--off-policy: overlap needs --placement split (a colocated pool cannot generate while it trains)");
  return Status::Ok();
}

}  // namespace

Result<LoopResult> SimulateLoop(const LoopCosts& c, const LoopOptions& o) {
  KP_RETURN_IF_ERROR(Validate(c, o));
  LoopGraph g;
  const bool split = o.placement == LoopPlacement::kSplit;
  const int actor = g.AddResource(split ? "actor GPUs" : "GPUs");
  const int rollout = split ? g.AddResource("rollout GPUs") : actor;
  const int cpu = g.AddResource("CPU workers");
  // Colocated, the weights are resharded between engines on the same GPUs;
  // split, they cross the network while both pools may keep computing.
  const int net = split ? g.AddResource("network") : actor;
  std::vector<int> sync_of_step;
  std::vector<int> train_of_step;
  for (int k = 0; k < o.steps; ++k) {
    const int lag = o.off_policy_overlap ? 2 : 1;
    const int weights = k - lag >= 0 ? sync_of_step[k - lag] : -1;
    const int r = g.Add(LoopSystem::kRollout, k, rollout, c.rollout, {weights});
    const int f = g.Add(LoopSystem::kFeedback, k, cpu, c.feedback, {r});
    const int t = g.Add(LoopSystem::kTeacher, k, actor, c.teacher, {f, k > 0 ? train_of_step[k - 1] : -1});
    const int a = g.Add(LoopSystem::kTrain, k, actor, c.train, {t});
    train_of_step.push_back(a);
    sync_of_step.push_back(g.Add(LoopSystem::kSync, k, net, c.sync, {a, k > 0 ? sync_of_step[k - 1] : -1}));
  }
  LoopResult out;
  out.events = g.Run();

  std::vector<Nanoseconds> step_end(o.steps, Nanoseconds(0));
  double gpu_busy = 0;
  const double actor_gpus = o.actor_gpus, rollout_gpus = split ? o.rollout_gpus : 0;
  for (const Task& t : g.tasks()) {
    out.timeline.push_back(LoopSpan{g.name(t.resource), t.system, t.step, t.start, t.end});
    step_end[t.step] = std::max(step_end[t.step], t.end);
    const double secs = ToSeconds(t.duration).value();
    if (t.system == LoopSystem::kRollout) gpu_busy += secs * (split ? rollout_gpus : actor_gpus);
    if (t.system == LoopSystem::kTeacher || t.system == LoopSystem::kTrain) gpu_busy += secs * actor_gpus;
  }
  out.makespan = ToSeconds(*std::max_element(step_end.begin(), step_end.end()));
  out.step_time = ToSeconds(step_end.back() - step_end.front()) / double(o.steps - 1);
  // A loop whose costs are all zero takes no time: nothing has a share of
  // it and nothing idles (rather than 0 / 0).
  for (int s = 0; s < kLoopSystems; ++s)
    out.share[s] = out.step_time.value() > 0 ? c.of(LoopSystem(s)) / out.step_time : 0.0;
  const double gpu_seconds = out.makespan.value() * (actor_gpus + rollout_gpus);
  out.gpu_idle_fraction = gpu_seconds > 0 ? 1 - gpu_busy / gpu_seconds : 0.0;
  return out;
}

std::string LoopTimelineSvg(const LoopResult& r) {
  static const char* kColours[kLoopSystems] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#b07aa1"};
  std::vector<std::string> rows;
  for (const LoopSpan& s : r.timeline)
    if (std::find(rows.begin(), rows.end(), s.resource) == rows.end()) rows.push_back(s.resource);
  const double width = 900, left = 110, row_h = 34, top = 30;
  const double scale = (width - left - 10) / std::max<double>(1, ToNanoseconds(r.makespan).value());
  std::ostringstream svg;
  svg << "<svg xmlns='http://www.w3.org/2000/svg' width='" << width << "' height='"
      << top + row_h * rows.size() + 40 << "' font-family='sans-serif' font-size='11'>\n";
  svg << "<text x='4' y='16' font-size='13'>SDPO loop: " << r.step_time.value() << " s per step (steady state)</text>\n";
  for (size_t i = 0; i < rows.size(); ++i)
    svg << "<text x='4' y='" << top + row_h * i + 21 << "'>" << rows[i] << "</text>\n";
  for (const LoopSpan& s : r.timeline) {
    const size_t row = std::find(rows.begin(), rows.end(), s.resource) - rows.begin();
    const double x = left + s.start.value() * scale, w = std::max(1.0, (s.end - s.start).value() * scale);
    svg << "<rect x='" << x << "' y='" << top + row_h * row + 4 << "' width='" << w << "' height='" << row_h - 8
        << "' fill='" << kColours[int(s.system)] << "' stroke='white'><title>" << LoopSystemName(s.system)
        << " step " << s.step << ": " << ToSeconds(s.end - s.start).value() << " s</title></rect>\n";
  }
  double lx = left;
  const double ly = top + row_h * rows.size() + 20;
  for (int s = 0; s < kLoopSystems; ++s) {
    svg << "<rect x='" << lx << "' y='" << ly - 10 << "' width='12' height='12' fill='" << kColours[s] << "'/>"
        << "<text x='" << lx + 16 << "' y='" << ly << "'>" << LoopSystemName(LoopSystem(s)) << "</text>\n";
    lx += 90;
  }
  svg << "</svg>\n";
  return svg.str();
}

}  // namespace kp
