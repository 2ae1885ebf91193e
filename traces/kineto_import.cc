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
//
// The passes are declared in traces/kineto_passes.h and defined in the kineto_*.cc files
// named for what they find; import_kineto below runs them.
#include <fmt/format.h>

#include "traces/kineto_passes.h"
#include "traces/trace_import.h"

namespace shardplan {
namespace kineto {
namespace {

void append(std::vector<std::string>& warnings, std::vector<std::string> more) {
  for (std::string& w : more) warnings.push_back(std::move(w));
}

}  // namespace

// The passes in order; each takes what the earlier ones found, so the order is fixed by
// what each needs:
//  1. step choice: every later pass looks only inside the step's time, and the step's
//     thread tells forward ops from autograd's.
//  2. CPU event index: launches, autograd ops and their forward ops, optimizer, phase and
//     comm ranges, looked up by everything after.
//  3. module order (FSDP2 ranges, else nn.Module ranges): the modules, numbered as first
//     seen, and their forward calls; FSDP2 also gives the backward windows.
//  4. forward micro-batches: a backward span is keyed by (module, micro-batch) of the
//     forward call its autograd ops differentiate, so 4 comes before 5.
//  5. backward calls: the source's windows, else spans of autograd ops (needs 2 and 4).
//  6. recomputes: some show only inside a backward window, and each takes the
//     micro-batch of the backward around it (needs 5).
//  7. StepTrace events: all calls, time-ordered (needs 4-6).
//  8. GPU activity: each launch attributed to a phase and module (needs 2 and 4-6); it
//     gives the host -> GPU clock that places the events of 7 and the memory of 9.
//  9. memory curve.
ImportedTrace import_kineto(const std::string& path, const KinetoTrace& trace,
                            const ImportOptions& options) {
  const std::vector<KinetoEvent>& events = trace.events;
  ImportedTrace out{.file = path, .format = "kineto"};
  if (trace.events_without_time.count > 0) {
    out.warnings.push_back(
        fmt::format("{} events without a time stamp ('ts') or with a time no profiler writes "
                    "(not finite, a negative duration, longer than a day) were left out "
                    "(the first: {})",
                    trace.events_without_time.count, trace.events_without_time.first));
  }
  if (trace.values_out_of_range.count > 0) {
    out.warnings.push_back(
        fmt::format("{} sizes, counts or ids were not whole numbers in their physical range "
                    "and were read as absent (the first: {})",
                    trace.values_out_of_range.count, trace.values_out_of_range.first));
  }
  StepChoice choice = choose_step(events, options.step, path);
  const KinetoStep& step = choice.step;
  out.steps = std::move(choice.steps);
  out.step = step.name;
  append(out.warnings, std::move(choice.warnings));
  const CpuIndex cpu = index_cpu_events(events, step);

  const std::unique_ptr<ModuleSource> source = choose_module_source(events, step);
  ModuleOrder order = source->find_order(events, step, options.depth);
  out.module_source = order.source;
  append(out.warnings, std::move(order.warnings));
  ModuleCalls calls;
  calls.forward = number_forward_calls(std::move(order.forward_calls));
  calls.backward =
      attribute_backward(events, step, cpu, calls.forward, std::move(order.backward_windows));
  append(out.warnings, std::move(calls.backward.warnings));
  if (order.recompute_calls.empty())
    order.recompute_calls = source->recomputes_in_backward(events, step, calls.backward.calls);
  calls.recompute = number_recomputes(std::move(order.recompute_calls), calls.backward.calls.calls);
  StepEvents step_events = build_step_events(std::move(order.modules), calls, order.final_callbacks,
                                             cpu.optimizer_begin);
  out.trace = std::move(step_events.trace);

  GpuActivity gpu = import_gpu_activity(trace, step, cpu, calls, out.trace.modules, path);
  out.timeline = std::move(gpu.timeline);
  out.module_times = std::move(gpu.module_times);
  out.collectives = std::move(gpu.collectives);
  out.kernel_seconds = gpu.kernel_seconds;
  append(out.warnings, std::move(gpu.warnings));
  for (double t : step_events.host_times) out.event_seconds.push_back(gpu.clock.seconds_at(t));

  MemoryCurve memory = import_memory(events, step, gpu.clock);
  out.timeline.memory = std::move(memory.samples);
  out.timeline.summary.peak_allocated_bytes = memory.peak_allocated_bytes;
  out.timeline.summary.peak_reserved_bytes = memory.peak_reserved_bytes;
  append(out.warnings, std::move(memory.warnings));
  return out;
}

namespace {

class KinetoImporter : public TraceImporter {
 public:
  std::string name() const override { return "kineto"; }
  ImportedTrace import(const std::string& path, const ImportOptions& options) const override {
    return import_kineto(path, read_step_events(path, options.step), options);
  }
};

}  // namespace
}  // namespace kineto

std::unique_ptr<TraceImporter> make_kineto_importer() {
  return std::make_unique<kineto::KinetoImporter>();
}

}  // namespace shardplan
