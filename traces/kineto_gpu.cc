// The step's GPU side: each kernel, copy and set, attributed through the runtime call that
// launched it, as a profiled Timeline with collectives and per-module GPU time.
#include <fmt/format.h>

#include <algorithm>
#include <climits>

#include "models/error.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

constexpr int64_t kNoThread = INT64_MIN;

// How far before its launching runtime call an activity may start. CPU and GPU time
// stamps come from two clocks that Kineto aligns, and real traces show kernels a few µs
// before their launch (pytorch/kineto#1380: NCCL kernels launched back to back; 8-9 µs
// measured between CUPTI and host clocks in tile-ai/TileOPs#1838). 1 ms is 100x that;
// an activity further ahead of its launch has a time no alignment explains, and left in
// it would stretch the step back to it.
constexpr double kLaunchSkewMicroseconds = 1000;

bool is_kernel(const KinetoEvent& e) {
  return e.cat == "kernel" || e.cat == "Kernel";
}

bool is_communication_kernel(const KinetoEvent& e) {
  const std::string n = lower(e.name);
  return n.find("nccl") != std::string::npos || n.find("rccl") != std::string::npos;
}

// c10d / record_param_comms names -> the plan's collective names.
std::string collective_kind(std::string_view name) {
  const std::string n = lower(name);
  auto has = [&](std::string_view s) { return n.find(s) != std::string::npos; };
  if (has("reduce_scatter") || has("reducescatter")) return "reduce_scatter";
  if (has("allgather") || has("all_gather")) return "all_gather";
  if (has("allreduce") || has("all_reduce")) return "all_reduce";
  if (has("broadcast")) return "broadcast";
  if (has("alltoall") || has("all_to_all")) return "all_to_all";
  if (has("sendrecv") || has("send") || has("recv")) return "send_recv";
  if (has("reduce")) return "reduce";
  if (has("barrier")) return "barrier";
  return "";
}

std::string short_kernel_name(std::string_view name) {
  std::string n(starts_with(name, "void ") ? name.substr(5) : name);
  const std::size_t cut = n.find_first_of("(<");
  if (cut != std::string::npos && cut > 0) n = n.substr(0, cut);
  if (n.size() > 80) n = n.substr(0, 80);
  return n;
}

std::string timeline_stream(const std::string& kind) {
  if (kind == "all_gather") return "ag";
  if (kind == "reduce_scatter" || kind == "all_reduce") return "rs";
  return "comm";
}

// A GPU activity of the step and the runtime call that launched it (kNoThread and its
// own start when the trace has no launch for it).
struct Activity {
  const KinetoEvent* event;
  int64_t launch_tid;
  double launch_ts;
};

struct StepActivity {
  std::vector<Activity> activity;  // by GPU start
  int64_t without_launch = 0;
  SetAside before_launch;  // left out: starts further before its launch than any skew
};

// One GPU unless the trace says how many ranks ran (distributedInfo.world_size).
Timeline profiled_timeline(const nlohmann::json& metadata) {
  Timeline tl;
  tl.source = "profiled";
  tl.allocator = "caching";
  tl.num_gpus = 1;
  if (const auto info = metadata.find("distributedInfo");
      info != metadata.end() && info->is_object()) {
    if (const auto w = info->find("world_size");
        w != info->end() && w->is_number_integer() && w->get<int64_t>() > 0)
      tl.num_gpus = w->get<int64_t>();
  }
  if (const auto props = metadata.find("deviceProperties"); props != metadata.end() &&
                                                            props->is_array() && !props->empty() &&
                                                            props->front().is_object()) {
    if (const auto name = props->front().find("name");
        name != props->front().end() && name->is_string())
      tl.cluster = name->get<std::string>();
  }
  return tl;
}

// Activities launched inside the step; without a launch, those that start inside it.
StepActivity step_activity(const std::vector<KinetoEvent>& events,
                           const std::unordered_map<int64_t, int64_t>& launches,
                           const KinetoStep& step) {
  StepActivity found;
  for (const KinetoEvent& e : events) {
    if (!is_gpu_activity(e)) continue;
    const auto l = e.correlation >= 0 ? launches.find(e.correlation) : launches.end();
    if (l != launches.end()) {
      const KinetoEvent& launch = events[static_cast<std::size_t>(l->second)];
      if (!step.contains(launch.ts)) continue;
      if (e.ts < launch.ts - kLaunchSkewMicroseconds) {
        if (found.before_launch.count++ == 0) {
          found.before_launch.first =
              fmt::format("{} starts at {:.3f} µs, {:.3f} µs before its launch {}",
                          quote_input(short_kernel_name(e.name), 40), e.ts, launch.ts - e.ts,
                          quote_input(launch.name, 40));
        }
        continue;
      }
      found.activity.push_back({&e, launch.tid, launch.ts});
    } else if (step.contains(e.ts)) {
      ++found.without_launch;
      found.activity.push_back({&e, kNoThread, e.ts});
    }
  }
  std::sort(found.activity.begin(), found.activity.end(),
            [](const Activity& a, const Activity& b) { return a.event->ts < b.event->ts; });
  return found;
}

GpuClock gpu_clock(const std::vector<Activity>& activity) {
  GpuClock clock;
  clock.origin = activity.front().event->ts;
  for (const Activity& a : activity) {
    // Compute only: a queued collective starts when its peers are ready, not when the
    // stream the program waits on gets there.
    if (a.launch_tid != kNoThread && !is_communication_kernel(*a.event))
      clock.host_to_gpu.emplace_back(a.launch_ts, a.event->ts);
  }
  auto& points = clock.host_to_gpu;
  std::sort(points.begin(), points.end());
  for (std::size_t i = 1; i < points.size(); ++i)
    points[i].second = std::max(points[i].second, points[i - 1].second);
  return clock;
}

// Collective metadata: the kernel's own args, else the comm op around its launch.
ImportedCollective collective_of(const std::vector<KinetoEvent>& events,
                                 const ThreadIndex& comm_ops, const Activity& a) {
  const KinetoEvent& kernel = *a.event;
  ImportedCollective c;
  const KinetoEvent* meta = kernel.collective.empty() ? nullptr : &kernel;
  if (meta == nullptr && a.launch_tid != kNoThread) {
    if (const auto op = comm_ops.innermost(a.launch_tid, a.launch_ts))
      meta = &events[static_cast<std::size_t>(*op)];
  }
  if (meta != nullptr) {
    c.kind = collective_kind(meta->collective.empty() ? meta->name : meta->collective);
    c.in_elements = meta->in_elements;
    c.out_elements = meta->out_elements;
    c.group_size = meta->group_size;
    c.dtype = std::string(meta->dtype);
  }
  if (c.kind.empty()) c.kind = collective_kind(kernel.name);
  if (c.kind.empty()) c.kind = "unknown";
  c.stream = kernel.stream >= 0 ? kernel.stream : kernel.tid;
  return c;
}

// What the activities lack, for the warnings.
struct ActivityTally {
  int64_t unsized = 0, unknown_dtype = 0;
  std::map<std::string, int64_t> unknown_kinds;  // kernel name -> collectives
  double backward_seconds = 0, backward_unattributed = 0;
};

// Sizes `op` by the collective's elements and names it by kind and module.
void describe_collective_op(ImportedCollective& c, const KinetoEvent& kernel, TimelineOp& op,
                            ActivityTally& tally) {
  if (c.in_elements < 0 && c.out_elements < 0) {
    ++tally.unsized;
  } else if (dtype_size(c.dtype) == 0) {
    ++tally.unknown_dtype;
  }
  if (c.kind == "unknown") ++tally.unknown_kinds[short_kernel_name(kernel.name)];
  const int64_t elements = std::max(c.in_elements, c.out_elements);
  c.bytes = elements > 0 ? static_cast<double>(elements * dtype_size(c.dtype)) : 0;
  op.bytes = c.bytes;
  op.kind = c.kind;
  op.stream = timeline_stream(c.kind);
  op.name = c.module.empty() ? c.kind : fmt::format("{} {}", c.kind, c.module);
}

void describe_compute_op(const KinetoEvent& kernel, const Attribution& owner,
                         const std::string& module_name, TimelineOp& op, ActivityTally& tally) {
  op.kind = owner.phase;
  op.stream = "compute";
  op.name = module_name.empty()
                ? short_kernel_name(kernel.name)
                : fmt::format("{}: {}", module_name, short_kernel_name(kernel.name));
  if (owner.phase == "backward") {
    tally.backward_seconds += op.end - op.start;
    if (owner.module < 0) tally.backward_unattributed += op.end - op.start;
  }
}

void add_module_time(const TimelineOp& op, const std::string& phase, ModuleTime& mt) {
  const double d = op.end - op.start;
  (phase == "forward"    ? mt.forward_seconds
   : phase == "backward" ? mt.backward_seconds
                         : mt.recompute_seconds) += d;
  ++mt.kernels;
}

std::vector<std::string> tally_warnings(const ActivityTally& tally, std::size_t collectives) {
  std::vector<std::string> warnings;
  if (tally.unsized > 0) {
    warnings.push_back(
        fmt::format("{} of {} collectives carry no sizes (neither the NCCL kernel nor a "
                    "record_param_comms op around its launch has a usable 'In msg nelems'): their "
                    "bytes are unknown, not guessed",
                    tally.unsized, collectives));
  }
  if (tally.unknown_dtype > 0) {
    warnings.push_back(
        fmt::format("{} collectives have sizes but a dtype this importer does not know: "
                    "their bytes are left 0",
                    tally.unknown_dtype));
  }
  if (tally.backward_unattributed > 0.05 * tally.backward_seconds && tally.backward_seconds > 0) {
    warnings.push_back(
        fmt::format("{:.1f} % of the backward GPU time belongs to no traced module "
                    "(gradient accumulation into .grad, DDP bucket copies, the loss, or ops "
                    "under a reentrant checkpoint)",
                    100.0 * tally.backward_unattributed / tally.backward_seconds));
  }
  for (const auto& [kernel, n] : tally.unknown_kinds)
    warnings.push_back(
        fmt::format("{} collective kernels {} of unknown kind", n, quote_input(kernel)));
  return warnings;
}

}  // namespace

Attribution attribute_launch(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                             const CpuIndex& cpu, const ModuleCalls& calls, int64_t tid, double t) {
  if (cpu.optimizer.innermost(tid, t)) return {"optimizer_step", -1};
  if (const auto r = calls.recompute.by_thread.innermost(tid, t))
    return {"recompute", calls.recompute.calls[static_cast<std::size_t>(*r)].module};
  if (tid == step.tid) {
    if (const auto call = calls.forward.at(t)) return {"forward", call->module};
  }
  if (const auto op = cpu.backward_ops.innermost(tid, t)) {
    if (const auto call = call_of_backward_op(events, cpu, calls.forward, *op))
      return {"backward", call->module};
    return {"backward", -1};
  }
  if (calls.backward.from_windows) {
    if (const auto c = calls.backward.calls.at(t)) return {"backward", c->module};
  }
  if (cpu.backward_threads.count(tid) > 0) return {"backward", -1};
  if (const auto phase = cpu.phases.innermost(tid, t))
    return {*phase == 0 ? "forward" : "backward", -1};
  return {"other", -1};
}

double GpuClock::seconds_at(double t) const {
  const auto it = std::upper_bound(host_to_gpu.begin(), host_to_gpu.end(), std::pair{t, 1e300});
  if (it == host_to_gpu.begin()) return 0;
  return (std::prev(it)->second - origin) * 1e-6;
}

GpuActivity import_gpu_activity(const KinetoTrace& trace, const KinetoStep& step,
                                const CpuIndex& cpu, const ModuleCalls& calls,
                                const std::vector<std::string>& modules, const std::string& file) {
  const StepActivity found = step_activity(trace.events, cpu.launches, step);
  const std::string before_launch =
      found.before_launch.count == 0
          ? std::string()
          : fmt::format(
                "{} GPU activities start more than {} µs before the runtime call that "
                "launched them, further than the CPU and GPU clocks drift apart (a "
                "corrupt trace?), and were left out (the first: {})",
                found.before_launch.count, kLaunchSkewMicroseconds, found.before_launch.first);
  if (found.activity.empty()) {
    throw InputError(file, "traceEvents",
                     fmt::format("no GPU kernels, copies or sets in {} (was the profiler run "
                                 "with ProfilerActivity.CUDA?){}",
                                 step.name, before_launch.empty() ? "" : "; " + before_launch));
  }
  GpuActivity out{.timeline = profiled_timeline(trace.metadata),
                  .module_times = std::vector<ModuleTime>(modules.size())};
  if (!before_launch.empty()) out.warnings.push_back(before_launch);
  if (found.without_launch > 0) {
    out.warnings.push_back(
        fmt::format("{} GPU activities have no launching runtime call (correlation): placed "
                    "by their own time and not attributed to modules",
                    found.without_launch));
  }
  out.clock = gpu_clock(found.activity);
  const double origin = out.clock.origin;
  double last = origin;
  ActivityTally tally;
  for (const Activity& a : found.activity) {
    const KinetoEvent& e = *a.event;
    last = std::max(last, end_of(e));
    const Attribution owner =
        a.launch_tid == kNoThread
            ? Attribution{"other", -1}
            : attribute_launch(trace.events, step, cpu, calls, a.launch_tid, a.launch_ts);
    const std::string module_name =
        owner.module >= 0 ? modules[static_cast<std::size_t>(owner.module)] : std::string();
    TimelineOp op{.op = static_cast<int64_t>(out.timeline.ops.size()),
                  .start = (e.ts - origin) * 1e-6,
                  .end = (end_of(e) - origin) * 1e-6};
    if (is_kernel(e) && is_communication_kernel(e)) {
      ImportedCollective c = collective_of(trace.events, cpu.comm_ops, a);
      c.start_seconds = op.start;
      c.duration_seconds = op.end - op.start;
      c.module = module_name;
      c.phase = owner.phase;
      describe_collective_op(c, e, op, tally);
      out.collectives.push_back(std::move(c));
    } else {
      describe_compute_op(e, owner, module_name, op, tally);
      const double seconds = op.end - op.start;
      KernelClassSeconds& k = out.kernel_seconds;
      if (!is_kernel(e)) {
        k.copies += seconds;
      } else {
        k.of(owner.phase == "optimizer_step" ? KernelClass::optimizer : classify_kernel(e.name)) +=
            seconds;
      }
      if (owner.module >= 0)
        add_module_time(op, owner.phase, out.module_times[static_cast<std::size_t>(owner.module)]);
    }
    out.timeline.ops.push_back(std::move(op));
  }
  for (std::string& w : tally_warnings(tally, out.collectives.size()))
    out.warnings.push_back(std::move(w));
  out.timeline.summary.step_seconds = (last - origin) * 1e-6;
  // Each time is bounded on read, but a step's GPU work can still spread over days (work
  // launched in the step queued long after it): no training step is that long, and the
  // timeline written would not read back (timeline_from_json's bound).
  if (out.timeline.summary.step_seconds > kMaxStepSeconds) {
    throw InputError(file, "traceEvents",
                     fmt::format("the GPU work of {} spans {:.6g} s, longer than a day (the "
                                 "longest step shardplan reads, docs/formats.md Limits): not "
                                 "one training step, or a trace with corrupt times",
                                 step.name, out.timeline.summary.step_seconds));
  }
  summarize_streams(out.timeline);
  return out;
}

}  // namespace shardplan::kineto
