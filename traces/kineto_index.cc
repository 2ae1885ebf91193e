// The step's CPU side, indexed for attribution: launches by correlation, autograd ops,
// forward ops by sequence number and fwdbwd flow, optimizer, phase and comm ranges.
#include <map>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

// Phase ranges users and wrappers record: "## forward ##" style labels (a common
// record_function convention, e.g. HolisticTraceAnalysis' samples) and DDP's forward.
// 0 forward, 1 backward, -1 neither.
int64_t phase_of_range(std::string_view name) {
  const std::string n = lower(name);
  if (n == "## forward ##" || n == "distributeddataparallel.forward") return 0;
  if (n == "## backward ##") return 1;
  return -1;
}

void index_ranges(const std::vector<KinetoEvent>& events, const KinetoStep& step, CpuIndex& index) {
  for (std::size_t i = 0; i < events.size(); ++i) {
    const KinetoEvent& e = events[i];
    const auto id = static_cast<int64_t>(i);
    if (is_runtime(e) && e.correlation >= 0) index.launches[e.correlation] = id;
    if (e.ph != 'X' || is_gpu_activity(e) || !step.contains(e.ts)) continue;
    if (starts_with(e.name, kEvaluateFunction)) {
      index.backward_ops.add(e.tid, e.ts, end_of(e), id);
      index.backward_threads.insert(e.tid);
    } else if (e.sequence >= 0 && e.tid == step.tid) {
      // Nested ops (aten::linear around aten::addmm) can share a number; the innermost,
      // latest-starting one made the autograd node.
      auto [it, inserted] = index.forward_op_by_sequence.emplace(e.sequence, id);
      if (!inserted && events[static_cast<std::size_t>(it->second)].ts <= e.ts) it->second = id;
    }
    if (starts_with(e.name, "Optimizer.step") || e.name == "## optimizer ##")
      index.optimizer.add(e.tid, e.ts, end_of(e), id);
    if (starts_with(e.name, "Optimizer.step"))
      index.optimizer_begin = std::min(index.optimizer_begin.value_or(e.ts), e.ts);
    if (const int64_t phase = phase_of_range(e.name); phase >= 0)
      index.phases.add(e.tid, e.ts, end_of(e), phase);
    if (e.name == "record_param_comms" || starts_with(e.name, "nccl:") ||
        starts_with(e.name, "c10d::")) {
      index.comm_ops.add(e.tid, e.ts, end_of(e), id);
    }
  }
}

// fwdbwd flows: the start sits on the forward op, the end on the backward op. Only the
// step's: both ends sit on ops of the step, and an id reused in another step must not
// replace this step's flow.
std::unordered_map<int64_t, int64_t> link_fwdbwd_flows(const std::vector<KinetoEvent>& events,
                                                       const KinetoStep& step) {
  std::map<int64_t, std::pair<const KinetoEvent*, const KinetoEvent*>> flows;
  for (const KinetoEvent& e : events) {
    if (e.cat != "fwdbwd" || e.flow_id < 0 || !step.contains(e.ts)) continue;
    (e.ph == 's' ? flows[e.flow_id].first : flows[e.flow_id].second) = &e;
  }
  std::map<std::pair<int64_t, double>, int64_t> op_at;  // (tid, ts) -> cpu op
  for (std::size_t i = 0; i < events.size(); ++i) {
    const KinetoEvent& e = events[i];
    if (e.ph == 'X' && is_cpu_op(e) && step.contains(e.ts))
      op_at.emplace(std::pair{e.tid, e.ts}, static_cast<int64_t>(i));
  }
  std::unordered_map<int64_t, int64_t> forward_of_backward;
  for (const auto& [id, ends] : flows) {
    if (ends.first == nullptr || ends.second == nullptr) continue;
    const auto fwd = op_at.find({ends.first->tid, ends.first->ts});
    const auto bwd = op_at.find({ends.second->tid, ends.second->ts});
    if (fwd != op_at.end() && bwd != op_at.end()) forward_of_backward[bwd->second] = fwd->second;
  }
  return forward_of_backward;
}

}  // namespace

CpuIndex index_cpu_events(const std::vector<KinetoEvent>& events, const KinetoStep& step) {
  CpuIndex index;
  index_ranges(events, step, index);
  index.forward_of_backward = link_fwdbwd_flows(events, step);
  index.optimizer.finish();
  index.phases.finish();
  index.backward_ops.finish();
  index.comm_ops.finish();
  return index;
}

}  // namespace shardplan::kineto
