// The traced calls once the module order is known: micro-batches, backward windows,
// recomputes, and the StepTrace events they make.
#include <algorithm>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

// Each forward call's backward: from its first autograd op to its last, per micro-batch.
std::vector<ModuleCall> autograd_spans(const std::vector<KinetoEvent>& events,
                                       const KinetoStep& step, const CpuIndex& cpu,
                                       const CallIndex& forward) {
  std::map<std::pair<int64_t, int64_t>, ModuleCall> spans;  // (module, mb)
  for (std::size_t i = 0; i < events.size(); ++i) {
    const KinetoEvent& e = events[i];
    if (e.ph != 'X' || !step.contains(e.ts) || !starts_with(e.name, kEvaluateFunction)) continue;
    const auto call = call_of_backward_op(events, cpu, forward, static_cast<int64_t>(i));
    if (!call) continue;
    auto [it, inserted] =
        spans.try_emplace({call->module, call->micro_batch},
                          ModuleCall{call->module, call->micro_batch, e.ts, end_of(e), e.tid});
    if (!inserted) {
      it->second.begin = std::min(it->second.begin, e.ts);
      it->second.end = std::max(it->second.end, end_of(e));
    }
  }
  std::vector<ModuleCall> calls;
  for (const auto& [key, call] : spans) calls.push_back(call);
  return calls;
}

// The micro-batch of the backward of the recomputed module that holds `r`, else of the
// last backward window that opened before it.
int64_t micro_batch_of_recompute(const ModuleCall& r, const std::vector<ModuleCall>& backward) {
  const ModuleCall* best = nullptr;
  for (const ModuleCall& b : backward) {
    if (b.module == r.module && b.begin <= r.begin && r.begin <= b.end) {
      best = &b;
      break;
    }
    if (b.begin <= r.begin && (best == nullptr || b.begin > best->begin)) best = &b;
  }
  return best != nullptr ? best->micro_batch : 0;
}

// Runs of one module in one micro-batch on one thread become one call.
std::vector<ModuleCall> merge_regions(const std::vector<ModuleCall>& recomputes) {
  std::vector<ModuleCall> merged;
  for (const ModuleCall& r : recomputes) {
    if (!merged.empty() && merged.back().module == r.module &&
        merged.back().micro_batch == r.micro_batch && merged.back().tid == r.tid) {
      merged.back().end = std::max(merged.back().end, r.end);
      continue;
    }
    merged.push_back(r);
  }
  return merged;
}

void set_step_shape(int64_t modules, const ModuleCalls& calls, StepTrace& trace) {
  trace.checkpointed.assign(static_cast<std::size_t>(modules), false);
  for (const ModuleCall& c : calls.recompute.calls)
    trace.checkpointed[static_cast<std::size_t>(c.module)] = true;
  trace.recompute = calls.recompute.calls.empty() ? Recompute::none : Recompute::full;
  int64_t micro_batches = 0;
  for (const ModuleCall& c : calls.forward.calls)
    micro_batches = std::max(micro_batches, c.micro_batch + 1);
  trace.grad_accum = std::max<int64_t>(1, micro_batches);
}

}  // namespace

std::optional<ModuleCall> CallIndex::at(double t) const {
  const auto c = by_time.innermost(t);
  if (!c) return std::nullopt;
  return calls[static_cast<std::size_t>(*c)];
}

CallIndex index_calls(std::vector<ModuleCall> calls) {
  CallIndex index{std::move(calls), {}};
  for (std::size_t c = 0; c < index.calls.size(); ++c)
    index.by_time.add(index.calls[c].begin, index.calls[c].end, static_cast<int64_t>(c));
  index.by_time.finish();
  return index;
}

std::vector<ModuleCall> number_passes(std::vector<ModuleCall> calls) {
  std::sort(calls.begin(), calls.end(),
            [](const ModuleCall& a, const ModuleCall& b) { return a.begin < b.begin; });
  int64_t pass = -1;
  for (ModuleCall& c : calls) {
    if (c.module == 0) ++pass;
    c.micro_batch = std::max<int64_t>(pass, 0);
  }
  return calls;
}

CallIndex number_forward_calls(std::vector<ModuleCall> forward_calls) {
  return index_calls(number_passes(std::move(forward_calls)));
}

std::optional<ModuleCall> call_of_backward_op(const std::vector<KinetoEvent>& events,
                                              const CpuIndex& cpu, const CallIndex& forward,
                                              int64_t op) {
  int64_t fwd = -1;
  if (const auto f = cpu.forward_of_backward.find(op); f != cpu.forward_of_backward.end()) {
    fwd = f->second;
  } else if (const int64_t seq = events[static_cast<std::size_t>(op)].sequence; seq >= 0) {
    if (const auto s = cpu.forward_op_by_sequence.find(seq); s != cpu.forward_op_by_sequence.end())
      fwd = s->second;
  }
  if (fwd < 0) return std::nullopt;
  return forward.at(events[static_cast<std::size_t>(fwd)].ts);
}

BackwardCalls attribute_backward(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                                 const CpuIndex& cpu, const CallIndex& forward,
                                 std::vector<ModuleCall> windows) {
  BackwardCalls backward;
  if (!windows.empty()) {
    backward.calls = index_calls(std::move(windows));
    backward.from_windows = true;
    return backward;
  }
  backward.calls = index_calls(autograd_spans(events, step, cpu, forward));
  if (cpu.backward_threads.empty() && !forward.calls.empty()) {
    backward.warnings.push_back(
        "no autograd evaluate_function ops in the step: backward not attributed to modules");
  }
  return backward;
}

Recomputes number_recomputes(std::vector<ModuleCall> recompute_calls,
                             const std::vector<ModuleCall>& backward_calls) {
  for (ModuleCall& r : recompute_calls) r.micro_batch = micro_batch_of_recompute(r, backward_calls);
  Recomputes recomputes{merge_regions(recompute_calls), {}};
  for (std::size_t c = 0; c < recomputes.calls.size(); ++c) {
    const ModuleCall& r = recomputes.calls[c];
    recomputes.by_thread.add(r.tid, r.begin, r.end, static_cast<int64_t>(c));
  }
  recomputes.by_thread.finish();
  return recomputes;
}

StepEvents build_step_events(std::vector<std::string> modules, const ModuleCalls& calls,
                             const std::vector<double>& final_callbacks,
                             std::optional<double> optimizer_begin) {
  StepEvents out;
  set_step_shape(static_cast<int64_t>(modules.size()), calls, out.trace);
  out.trace.modules = std::move(modules);
  // At one time: pre-forward and pre-backward first, then post-forward and recompute,
  // post-backward, the final callback, and the optimizer step last.
  struct Timed {
    double time;
    int order;
    StepEvent event;
  };
  std::vector<Timed> timed;
  for (const ModuleCall& c : calls.forward.calls) {
    timed.push_back({c.begin, 0, {StepEventKind::pre_forward, c.micro_batch, c.module}});
    timed.push_back({c.end, 1, {StepEventKind::post_forward, c.micro_batch, c.module}});
  }
  std::map<int64_t, double> backward_end;  // per micro-batch
  for (const ModuleCall& c : calls.backward.calls.calls) {
    timed.push_back({c.begin, 0, {StepEventKind::pre_backward, c.micro_batch, c.module}});
    timed.push_back({c.end, 2, {StepEventKind::post_backward, c.micro_batch, c.module}});
    backward_end[c.micro_batch] = std::max(backward_end[c.micro_batch], c.end);
  }
  for (const ModuleCall& c : calls.recompute.calls)
    timed.push_back({c.begin, 1, {StepEventKind::recompute_forward, c.micro_batch, c.module}});
  if (!final_callbacks.empty()) {
    int64_t mb = 0;
    for (double ts : final_callbacks)
      timed.push_back({ts, 3, {StepEventKind::final_callback, mb++, -1}});
  } else {
    for (const auto& [mb, end] : backward_end)
      timed.push_back({end, 3, {StepEventKind::final_callback, mb, -1}});
  }
  if (optimizer_begin)
    timed.push_back({*optimizer_begin, 4, {StepEventKind::optimizer_step, -1, -1}});
  std::stable_sort(timed.begin(), timed.end(), [](const Timed& a, const Timed& b) {
    return a.time != b.time ? a.time < b.time : a.order < b.order;
  });
  for (const Timed& x : timed) {
    out.trace.events.push_back(x.event);
    out.host_times.push_back(x.time);
  }
  return out;
}

}  // namespace shardplan::kineto
