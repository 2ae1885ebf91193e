// Kineto (PyTorch profiler) Chrome traces -> ImportedTrace.
//
// The CPU side says what ran for which module; the GPU side says when. They are joined by
// the runtime call that launched each GPU activity (args.correlation):
//
//   CPU main thread   |ProfilerStep#5 ....................................................|
//                     |nn.Module: Block_0 |nn.Module: Block_1 |          |Optimizer.step|
//                       aten::mm -launch-.
//   CPU autograd thrd                       |evaluate_function: MmBackward0 (seq 12)|
//   GPU stream 7              [gemm]            [gemm bwd]
//
// A forward kernel belongs to the innermost traced module range around its launch; a
// backward kernel to the autograd op around its launch, whose Sequence number (or fwdbwd
// flow) names the forward op, whose module range names the module.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>

#include "models/error.h"
#include "traces/kineto_passes.h"
#include "traces/trace_import.h"

namespace shardplan {
namespace {

using kineto::end_of;
using kineto::is_gpu_activity;
using kineto::kEvaluateFunction;
using kineto::lower;
using kineto::starts_with;

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

// Bytes per element of the dtype names PyTorch writes ("BFloat16", "Float", ...).
int64_t dtype_size(std::string_view dtype) {
  const std::string d = lower(dtype);
  if (d == "double" || d == "long" || d == "int64" || d == "float64") return 8;
  if (d == "float" || d == "int" || d == "float32" || d == "int32") return 4;
  if (d == "bfloat16" || d == "half" || d == "float16" || d == "short" || d == "bf16") return 2;
  if (d == "byte" || d == "char" || d == "bool" || starts_with(d, "float8") || d == "uint8")
    return 1;
  return 0;
}

std::string short_kernel_name(std::string_view name) {
  std::string n(starts_with(name, "void ") ? name.substr(5) : name);
  const std::size_t cut = n.find_first_of("(<");
  if (cut != std::string::npos && cut > 0) n = n.substr(0, cut);
  if (n.size() > 80) n = n.substr(0, 80);
  return n;
}

class KinetoAnalysis {
 public:
  KinetoAnalysis(const std::string& path, KinetoTrace trace, const ImportOptions& options)
      : trace_(std::move(trace)), options_(options) {
    out_.file = path;
    out_.format = "kineto";
  }

  ImportedTrace run() {
    if (trace_.events_without_time > 0) {
      warn(fmt::format("{} events without a time stamp ('ts') were left out",
                       trace_.events_without_time));
    }
    kineto::StepChoice choice = kineto::choose_step(events(), options_.step, out_.file);
    out_.steps = std::move(choice.steps);
    for (std::string& w : choice.warnings) warn(std::move(w));
    step_ = std::move(choice.step);
    out_.step = step_.name;
    cpu_ = kineto::index_cpu_events(events(), step_);
    const auto source = kineto::choose_module_source(events(), step_);
    kineto::ModuleOrder order = source->find_order(events(), step_, options_.depth);
    out_.module_source = order.source;
    for (std::string& w : order.warnings) warn(std::move(w));
    calls_.forward = kineto::number_forward_calls(std::move(order.forward_calls));
    calls_.backward = kineto::attribute_backward(events(), step_, cpu_, calls_.forward,
                                                 std::move(order.backward_windows));
    for (std::string& w : calls_.backward.warnings) warn(std::move(w));
    if (order.recompute_calls.empty())
      order.recompute_calls = source->recomputes_in_backward(events(), step_, calls_.backward.calls);
    calls_.recompute = kineto::number_recomputes(std::move(order.recompute_calls),
                                                 calls_.backward.calls.calls);
    kineto::StepEvents step_events = kineto::build_step_events(
        std::move(order.modules), calls_, order.final_callbacks, cpu_.optimizer_begin);
    out_.trace = std::move(step_events.trace);
    cpu_event_times_ = std::move(step_events.host_times);
    import_gpu_activity();
    import_memory();
    return std::move(out_);
  }

 private:
  const std::vector<KinetoEvent>& events() const { return trace_.events; }
  bool in_step(double t) const { return step_.contains(t); }
  void warn(std::string text) { out_.warnings.push_back(std::move(text)); }

  // What a GPU activity launched at (tid, t) was for: phase and traced module.
  std::pair<std::string, int64_t> attribute_launch(int64_t tid, double t) const {
    if (cpu_.optimizer.innermost(tid, t)) return {"optimizer_step", -1};
    if (const auto r = calls_.recompute.by_thread.innermost(tid, t))
      return {"recompute", calls_.recompute.calls[static_cast<std::size_t>(*r)].module};
    if (tid == step_.tid) {
      if (const auto call = calls_.forward.at(t)) return {"forward", call->module};
    }
    if (const auto op = cpu_.backward_ops.innermost(tid, t)) {
      if (const auto call = kineto::call_of_backward_op(events(), cpu_, calls_.forward, *op))
        return {"backward", call->module};
      return {"backward", -1};
    }
    if (calls_.backward.from_windows) {
      if (const auto c = calls_.backward.calls.at(t)) return {"backward", c->module};
    }
    if (cpu_.backward_threads.count(tid) > 0) return {"backward", -1};
    if (const auto phase = cpu_.phases.innermost(tid, t)) return {*phase == 0 ? "forward" : "backward", -1};
    return {"other", -1};
  }

  // Collective metadata: the kernel's own args, else the comm op around its launch.
  ImportedCollective collective_of(const KinetoEvent& kernel, int64_t launch_tid, double launch_ts) const {
    ImportedCollective c;
    const KinetoEvent* meta = kernel.collective.empty() ? nullptr : &kernel;
    if (meta == nullptr && launch_tid != kNoThread) {
      if (const auto op = cpu_.comm_ops.innermost(launch_tid, launch_ts)) meta = &events()[static_cast<std::size_t>(*op)];
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

  static std::string timeline_stream(const std::string& kind) {
    if (kind == "all_gather") return "ag";
    if (kind == "reduce_scatter" || kind == "all_reduce") return "rs";
    return "comm";
  }

  void import_gpu_activity() {
    Timeline& tl = out_.timeline;
    tl.source = "profiled";
    tl.allocator = "caching";
    // One GPU unless the trace says how many ranks ran (distributedInfo.world_size).
    tl.num_gpus = 1;
    if (const auto info = trace_.metadata.find("distributedInfo");
        info != trace_.metadata.end() && info->is_object()) {
      if (const auto w = info->find("world_size");
          w != info->end() && w->is_number_integer() && w->get<int64_t>() > 0)
        tl.num_gpus = w->get<int64_t>();
    }
    if (const auto props = trace_.metadata.find("deviceProperties");
        props != trace_.metadata.end() && props->is_array() && !props->empty() &&
        props->front().is_object()) {
      if (const auto name = props->front().find("name");
          name != props->front().end() && name->is_string())
        tl.cluster = name->get<std::string>();
    }
    out_.module_times.assign(out_.trace.modules.size(), ModuleTime{});

    struct Activity {
      const KinetoEvent* event;
      int64_t launch_tid;
      double launch_ts;
    };
    std::vector<Activity> activity;
    int64_t without_launch = 0;
    for (const KinetoEvent& e : events()) {
      if (!is_gpu_activity(e)) continue;
      const auto l = e.correlation >= 0 ? cpu_.launches.find(e.correlation) : cpu_.launches.end();
      if (l != cpu_.launches.end()) {
        const KinetoEvent& launch = events()[static_cast<std::size_t>(l->second)];
        if (in_step(launch.ts)) activity.push_back({&e, launch.tid, launch.ts});
      } else if (in_step(e.ts)) {
        ++without_launch;
        activity.push_back({&e, kNoThread, e.ts});
      }
    }
    if (activity.empty()) {
      throw InputError(out_.file, "traceEvents",
                       fmt::format("no GPU kernels, copies or sets in {} (was the profiler run "
                                   "with ProfilerActivity.CUDA?)", step_.name));
    }
    if (without_launch > 0) {
      warn(fmt::format("{} GPU activities have no launching runtime call (correlation): placed "
                       "by their own time and not attributed to modules", without_launch));
    }
    std::sort(activity.begin(), activity.end(), [](const Activity& a, const Activity& b) {
      return a.event->ts < b.event->ts;
    });
    origin_ = activity.front().event->ts;
    // Host time -> GPU time: the GPU start of the last activity launched by then (running
    // maximum over launch order), so a module boundary or an allocation lands where the
    // stream reaches it, as PyTorch's stream-ordered caching allocator sees it.
    for (const Activity& a : activity) {
      // Compute only: a queued collective starts when its peers are ready, not when the
      // stream the program waits on gets there.
      if (a.launch_tid != kNoThread && !is_communication_kernel(*a.event))
        host_to_gpu_.emplace_back(a.launch_ts, a.event->ts);
    }
    std::sort(host_to_gpu_.begin(), host_to_gpu_.end());
    for (std::size_t i = 1; i < host_to_gpu_.size(); ++i)
      host_to_gpu_[i].second = std::max(host_to_gpu_[i].second, host_to_gpu_[i - 1].second);
    double last = origin_;
    int64_t unsized = 0, unknown_dtype = 0;
    std::map<std::string, int64_t> unknown_kinds;
    double backward_seconds = 0, backward_unattributed = 0;
    for (const Activity& a : activity) {
      const KinetoEvent& e = *a.event;
      last = std::max(last, end_of(e));
      const auto [phase, module] = a.launch_tid == kNoThread ? std::pair<std::string, int64_t>{"other", -1}
                                                             : attribute_launch(a.launch_tid, a.launch_ts);
      const std::string module_name =
          module >= 0 ? out_.trace.modules[static_cast<std::size_t>(module)] : std::string();
      TimelineOp op{.op = static_cast<int64_t>(tl.ops.size()),
                    .start = (e.ts - origin_) * 1e-6,
                    .end = (end_of(e) - origin_) * 1e-6};
      if (is_kernel(e) && is_communication_kernel(e)) {
        ImportedCollective c = collective_of(e, a.launch_tid, a.launch_ts);
        c.start_seconds = op.start;
        c.duration_seconds = op.end - op.start;
        c.module = module_name;
        c.phase = phase;
        if (c.in_elements < 0 && c.out_elements < 0) {
          ++unsized;
        } else if (dtype_size(c.dtype) == 0) {
          ++unknown_dtype;
        }
        if (c.kind == "unknown") ++unknown_kinds[short_kernel_name(e.name)];
        const int64_t elements = std::max(c.in_elements, c.out_elements);
        op.bytes = elements > 0 ? static_cast<double>(elements * dtype_size(c.dtype)) : 0;
        op.kind = c.kind;
        op.stream = timeline_stream(c.kind);
        op.name = module_name.empty() ? c.kind : fmt::format("{} {}", c.kind, module_name);
        out_.collectives.push_back(std::move(c));
      } else {
        op.kind = phase;
        op.stream = "compute";
        op.name = module_name.empty() ? short_kernel_name(e.name)
                                      : fmt::format("{}: {}", module_name, short_kernel_name(e.name));
        if (phase == "backward") {
          backward_seconds += op.end - op.start;
          if (module < 0) backward_unattributed += op.end - op.start;
        }
        if (module >= 0) {
          ModuleTime& mt = out_.module_times[static_cast<std::size_t>(module)];
          const double d = op.end - op.start;
          (phase == "forward" ? mt.forward_seconds
           : phase == "backward" ? mt.backward_seconds
                                 : mt.recompute_seconds) += d;
          ++mt.kernels;
        }
      }
      tl.ops.push_back(std::move(op));
    }
    if (unsized > 0) {
      warn(fmt::format("{} of {} collectives carry no sizes (neither the NCCL kernel nor a "
                       "record_param_comms op around its launch has 'In msg nelems'): their "
                       "bytes are unknown, not guessed",
                       unsized, out_.collectives.size()));
    }
    if (unknown_dtype > 0) {
      warn(fmt::format("{} collectives have sizes but a dtype this importer does not know: "
                       "their bytes are left 0",
                       unknown_dtype));
    }
    if (backward_unattributed > 0.05 * backward_seconds && backward_seconds > 0) {
      warn(fmt::format("{:.1f} % of the backward GPU time belongs to no traced module "
                       "(gradient accumulation into .grad, DDP bucket copies, the loss, or ops "
                       "under a reentrant checkpoint)",
                       100.0 * backward_unattributed / backward_seconds));
    }
    for (const auto& [kernel, n] : unknown_kinds)
      warn(fmt::format("{} collective kernels '{}' of unknown kind", n, kernel));
    tl.summary.step_seconds = (last - origin_) * 1e-6;
    summarize_streams(tl);
    for (double t : cpu_event_times_) out_.event_seconds.push_back(gpu_seconds(t));
  }

  void import_memory() {
    Timeline& tl = out_.timeline;
    int64_t cpu_only = 0, without_totals = 0;
    std::vector<const KinetoEvent*> samples;  // files need not be in time order
    for (const KinetoEvent& e : events()) {
      if (e.name != "[memory]" || !in_step(e.ts)) continue;
      if (e.device_type != 1) {
        ++cpu_only;
        continue;
      }
      if (e.total_allocated < 0 || e.total_reserved < 0) {
        ++without_totals;
        continue;
      }
      samples.push_back(&e);
    }
    std::stable_sort(samples.begin(), samples.end(),
                     [](const KinetoEvent* a, const KinetoEvent* b) { return a->ts < b->ts; });
    for (const KinetoEvent* sample : samples) {
      const KinetoEvent& e = *sample;
      tl.memory.push_back({gpu_seconds(e.ts), e.total_allocated, e.total_reserved});
      tl.summary.peak_allocated_bytes = std::max(tl.summary.peak_allocated_bytes, e.total_allocated);
      tl.summary.peak_reserved_bytes = std::max(tl.summary.peak_reserved_bytes, e.total_reserved);
    }
    if (without_totals > 0) {
      warn(fmt::format("{} CUDA [memory] events carry no 'Total Allocated'/'Total Reserved' "
                       "(older PyTorch): left out of the memory curve",
                       without_totals));
    }
    if (tl.memory.empty() && without_totals == 0) {
      warn(cpu_only > 0 ? fmt::format("{} [memory] events, all for CPU memory: no GPU memory curve", cpu_only)
                        : std::string("no [memory] events (profile with profile_memory=True): no "
                                      "measured memory curve"));
    }
  }

  // Seconds from the step's first GPU activity at which the GPU reaches host time t.
  double gpu_seconds(double t) const {
    const auto it = std::upper_bound(host_to_gpu_.begin(), host_to_gpu_.end(), std::pair{t, 1e300});
    if (it == host_to_gpu_.begin()) return 0;
    return (std::prev(it)->second - origin_) * 1e-6;
  }

  static constexpr int64_t kNoThread = INT64_MIN;

  KinetoTrace trace_;
  ImportOptions options_;
  ImportedTrace out_;
  kineto::KinetoStep step_;
  kineto::CpuIndex cpu_;
  double origin_ = 0;
  std::vector<std::pair<double, double>> host_to_gpu_;  // (launch ts, GPU start), µs
  kineto::ModuleCalls calls_;
  std::vector<double> cpu_event_times_;
};

class KinetoImporter : public TraceImporter {
 public:
  std::string name() const override { return "kineto"; }
  ImportedTrace import(const std::string& path, const ImportOptions& options) const override {
    return KinetoAnalysis(path, read_kineto_trace(path), options).run();
  }
};

}  // namespace

std::unique_ptr<TraceImporter> make_kineto_importer() {
  return std::make_unique<KinetoImporter>();
}

}  // namespace shardplan
