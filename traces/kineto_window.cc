// Which of the file's events the import keeps: all of a trace that fits in memory, else
// the chosen step's (a first read finds the steps and the launches, the second keeps
// what the step needs), so a trace of any size costs one step of memory.
#include <fmt/format.h>

#include <algorithm>

#include "models/error.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

// What the second read needs to know of the whole file.
class Outline {
 public:
  void add(const KinetoEvent& e) {
    if (is_profiler_step(e)) {
      KinetoEvent step = e;
      step.name = steps_.intern(e.name);
      step.cat = steps_.intern(e.cat);
      step.collective = step.dtype = {};
      steps_.events.push_back(step);
    }
    // As index_cpu_events reads launches: every runtime call with a correlation.
    if (is_runtime(e) && e.correlation >= 0) launches_.push_back({e.correlation, e.ts});
  }

  // Sorted by correlation; of calls sharing one, the last in the file counts, as in
  // index_cpu_events.
  void finish() {
    std::stable_sort(launches_.begin(), launches_.end(), [](const Launch& a, const Launch& b) {
      return a.correlation < b.correlation;
    });
    std::vector<Launch> last;
    for (std::size_t i = 0; i < launches_.size(); ++i) {
      if (i + 1 < launches_.size() && launches_[i + 1].correlation == launches_[i].correlation)
        continue;
      last.push_back(launches_[i]);
    }
    launches_ = std::move(last);
  }

  const std::vector<KinetoEvent>& steps() const { return steps_.events; }

  // When the runtime call with this correlation ran, if the file has one.
  std::optional<double> launch_time(int64_t correlation) const {
    const auto it = std::lower_bound(launches_.begin(), launches_.end(), correlation,
                                     [](const Launch& l, int64_t c) { return l.correlation < c; });
    if (it == launches_.end() || it->correlation != correlation) return std::nullopt;
    return it->ts;
  }

 private:
  struct Launch {
    int64_t correlation;
    double ts;
  };
  KinetoTrace steps_;  // the step ranges, with their own strings
  std::vector<Launch> launches_;
};

// Whether the passes read `e` when they import `step` (each pass looks only at events in
// the step's time; a GPU activity counts by its launch's time, or its own without one).
bool needed_for(const KinetoEvent& e, const KinetoStep& step, const Outline& outline) {
  if (is_profiler_step(e)) return true;  // the list of steps
  if (is_gpu_activity(e) && e.correlation >= 0) {
    if (const auto launched = outline.launch_time(e.correlation)) return step.contains(*launched);
  }
  return step.contains(e.ts);
}

}  // namespace

KinetoTrace read_step_events(const std::string& path, const std::string& wanted,
                             std::size_t keep_all_events) {
  const bool rereadable = can_read_twice(path);
  Outline outline;
  std::size_t kept = 0;
  bool too_many = false;
  KinetoTrace whole = read_kineto_trace(path, {.keep = [&](const KinetoEvent& e) {
                                          outline.add(e);
                                          if (too_many || kept == keep_all_events) {
                                            too_many = true;
                                            return false;
                                          }
                                          ++kept;
                                          return true;
                                        }});
  if (!too_many) return whole;
  whole = KinetoTrace();
  if (!rereadable) {
    throw InputError(path, "",
                     fmt::format("more than {} events, which are read in two passes, and this "
                                 "input (a pipe or a device) can be read only once: save the "
                                 "trace to a file and import that",
                                 keep_all_events));
  }
  outline.finish();
  // Without profiler steps the whole trace is the step.
  if (outline.steps().empty()) return read_kineto_trace(path);
  const KinetoStep step = choose_step(outline.steps(), wanted, path).step;
  return read_kineto_trace(
      path, {.keep = [&](const KinetoEvent& e) { return needed_for(e, step, outline); }});
}

}  // namespace shardplan::kineto
