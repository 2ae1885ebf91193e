// Which part of the trace is the step: a ProfilerStep# range, or the whole trace.
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "models/error.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

std::vector<KinetoStep> profiler_steps(const std::vector<KinetoEvent>& events) {
  std::vector<KinetoStep> steps;
  for (const KinetoEvent& e : events) {
    if (is_profiler_step(e)) steps.push_back({std::string(e.name), e.ts, end_of(e), e.tid});
  }
  std::sort(steps.begin(), steps.end(),
            [](const KinetoStep& a, const KinetoStep& b) { return a.begin < b.begin; });
  return steps;
}

// The span of the CPU events. The step's thread is the busiest one that is not
// autograd's (which runs the backward ops and, under checkpointing, re-runs forwards).
KinetoStep whole_trace_step(const std::vector<KinetoEvent>& events, const std::string& file) {
  KinetoStep step{"whole trace", 1e300, -1e300, -1};
  std::map<int64_t, int64_t> ops_per_thread;
  std::set<int64_t> autograd_threads;
  for (const KinetoEvent& e : events) {
    if (e.ph != 'X' || is_gpu_activity(e) || is_runtime(e)) continue;
    step.begin = std::min(step.begin, e.ts);
    step.end = std::max(step.end, end_of(e));
    if (is_cpu_op(e) || e.cat == "python_function") ++ops_per_thread[e.tid];
    if (starts_with(e.name, kEvaluateFunction)) autograd_threads.insert(e.tid);
  }
  if (step.begin > step.end || ops_per_thread.empty()) {
    throw InputError(file, "traceEvents",
                     "no CPU ops (profile with ProfilerActivity.CPU as well as CUDA): the "
                     "step, the module order and the launches cannot be told");
  }
  int64_t most = -1;
  for (const bool skip_autograd : {true, false}) {
    for (const auto& [tid, n] : ops_per_thread) {
      if (skip_autograd && autograd_threads.count(tid) > 0) continue;
      if (n > most) {
        most = n;
        step.tid = tid;
      }
    }
    if (most >= 0) break;
  }
  return step;
}

KinetoStep named_step(const std::vector<KinetoStep>& steps, const std::string& wanted_step,
                      const std::string& file) {
  const std::string wanted =
      starts_with(wanted_step, "ProfilerStep#") ? wanted_step : "ProfilerStep#" + wanted_step;
  const auto it = std::find_if(steps.begin(), steps.end(),
                               [&](const KinetoStep& s) { return s.name == wanted; });
  if (it == steps.end()) {
    // A long profile has hundreds of steps: the first few name the pattern.
    constexpr std::size_t kNamesShown = 8;
    std::string names;
    for (std::size_t i = 0; i < steps.size() && i < kNamesShown; ++i)
      names += (i == 0 ? "" : ", ") + quote_input(steps[i].name, 40);
    if (steps.size() > kNamesShown) names += fmt::format(", … ({} steps)", steps.size());
    throw InputError(
        file, "--step",
        fmt::format("no step {} in the trace (it has {})", quote_input(wanted), names));
  }
  return *it;
}

}  // namespace

StepChoice choose_step(const std::vector<KinetoEvent>& events, const std::string& wanted,
                       const std::string& file) {
  StepChoice choice;
  const std::vector<KinetoStep> steps = profiler_steps(events);
  for (const KinetoStep& s : steps) choice.steps.push_back(s.name);
  if (steps.empty()) {
    choice.warnings.push_back(
        "no ProfilerStep# ranges (profile with a schedule and prof.step()): the whole trace "
        "is taken as one step");
    choice.step = whole_trace_step(events, file);
  } else if (wanted.empty()) {
    choice.step = steps.back();
  } else {
    choice.step = named_step(steps, wanted, file);
  }
  return choice;
}

}  // namespace shardplan::kineto
