#pragma once

// The passes of the Kineto importer (traces/kineto_import.cc runs them in order and says
// why that order). Internal to traces/: each is a function of plain data, declared here
// so that a test can run one pass on a hand-built event list.

#include <cctype>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/interval_index.h"
#include "traces/kineto_reader.h"
#include "traces/step_trace.h"
#include "traces/timeline.h"
#include "traces/trace_import.h"

namespace shardplan::kineto {

// The autograd engine's range around each backward node it runs.
inline constexpr std::string_view kEvaluateFunction = "autograd::engine::evaluate_function:";

inline bool starts_with(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

inline std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

inline double end_of(const KinetoEvent& e) {
  return e.ts + e.dur;
}

inline bool is_gpu_activity(const KinetoEvent& e) {
  return e.ph == 'X' && (e.cat == "kernel" || e.cat == "gpu_memcpy" || e.cat == "gpu_memset" ||
                         e.cat == "Kernel" || e.cat == "Memcpy" || e.cat == "Memset");
}

inline bool is_runtime(const KinetoEvent& e) {
  return e.cat == "cuda_runtime" || e.cat == "cuda_driver" || e.cat == "Runtime" ||
         e.cat == "Driver";
}

// Operators: "cpu_op" since PyTorch 1.10 or so, "Operator" before.
inline bool is_cpu_op(const KinetoEvent& e) {
  return e.cat == "cpu_op" || e.cat == "Operator";
}

// A ProfilerStep#k range of the CPU side (the GPU side repeats it as gpu_user_annotation).
inline bool is_profiler_step(const KinetoEvent& e) {
  return e.ph == 'X' && e.cat != "gpu_user_annotation" && starts_with(e.name, "ProfilerStep#");
}

// The profiler step imported: every later pass looks only inside its time.
struct KinetoStep {
  std::string name;
  double begin = 0, end = 0;  // µs; closed: a time equal to either end is inside
  int64_t tid = -1;           // the thread that runs the step's forward
  bool contains(double t) const { return t >= begin && t <= end; }
};

struct StepChoice {
  std::vector<std::string> steps;  // the ProfilerStep# ranges, in time order
  KinetoStep step;
  std::vector<std::string> warnings;
};

// Events kept in one read of a trace: 2^18 KinetoEvents (50 MB), the events of about 90 MB
// of JSON (the real traces keep one event per 350 bytes, more with with_stack's Python
// frames, which are not kept). A trace with more is read twice, keeping only its step.
inline constexpr std::size_t kKeepAllEvents = std::size_t{1} << 18;

// The events the import needs for the step `wanted` ("K", "ProfilerStep#K"; empty: the
// last). A trace of up to `keep_all_events` events is read once and kept whole. A larger
// one is read twice: the first read notes the ProfilerStep# ranges and when each
// correlation's runtime call ran; the second keeps the step ranges, the events inside the
// chosen step and the GPU activities launched in it (or, unlaunched, starting in it), so
// memory holds one step and not the file. The passes below give the same result on
// either. Larger than that and not a regular file (a pipe): InputError naming `path`.
KinetoTrace read_step_events(const std::string& path, const std::string& wanted,
                             std::size_t keep_all_events = kKeepAllEvents);

// The step named by `wanted` ("K" or "ProfilerStep#K"; empty: the last one), or the whole
// trace when it has no ProfilerStep# ranges. Unknown step, or no CPU ops: InputError
// naming `file`.
StepChoice choose_step(const std::vector<KinetoEvent>& events, const std::string& wanted,
                       const std::string& file);

// What the later passes look up about the step's CPU side. Values are indexes into the
// event list.
struct CpuIndex {
  std::unordered_map<int64_t, int64_t> launches;  // correlation -> runtime call
  ThreadIndex backward_ops;                       // autograd evaluate_function ranges
  std::set<int64_t> backward_threads;             // the threads that run them
  // Autograd sequence number -> the forward op on the step's thread that made the node.
  std::unordered_map<int64_t, int64_t> forward_op_by_sequence;
  std::unordered_map<int64_t, int64_t> forward_of_backward;  // backward op -> forward op
  ThreadIndex optimizer;                  // Optimizer.step and "## optimizer ##" ranges
  std::optional<double> optimizer_begin;  // the step's first Optimizer.step range
  ThreadIndex phases;                     // user phase ranges: 0 forward, 1 backward
  ThreadIndex comm_ops;                   // record_param_comms, nccl:, c10d:: ranges
};

CpuIndex index_cpu_events(const std::vector<KinetoEvent>& events, const KinetoStep& step);

// One forward call of a traced module, or one backward / recompute of it.
struct ModuleCall {
  int64_t module = -1;
  int64_t micro_batch = 0;
  double begin = 0, end = 0;  // µs
  int64_t tid = -1;           // the thread it ran on
};

// Traced module names, numbered in the order they are first seen.
struct ModuleNames {
  std::vector<std::string> names;
  std::map<std::string, int64_t> ids;
  int64_t id_of(const std::string& name);
};

// A module range on one thread, with the ranges nested in it.
struct RangeNode {
  std::string name;
  double begin = 0, end = 0;
  std::vector<std::size_t> children;
};

// The step's "nn.Module: Class_k" ranges (profiles taken with with_stack=True) by
// thread, named Class_k. The reader keeps no other Python ranges.
std::map<int64_t, std::vector<RangeNode>> module_ranges(const std::vector<KinetoEvent>& events,
                                                        const KinetoStep& step);

// Nests ranges by containment (sorting them); returns the top-level ones in time order.
std::vector<std::size_t> nest(std::vector<RangeNode>& nodes);

// Calls in a fixed order, with an index of their intervals.
struct CallIndex {
  std::vector<ModuleCall> calls;
  IntervalIndex by_time;  // values index `calls`
  // The innermost call holding t.
  std::optional<ModuleCall> at(double t) const;
};

CallIndex index_calls(std::vector<ModuleCall> calls);

// Sorts calls by time and numbers their micro-batches: a pass begins with each call of
// module 0, the first traced module.
std::vector<ModuleCall> number_passes(std::vector<ModuleCall> calls);

// What a module source reads from the step's ranges.
struct ModuleOrder {
  std::string source;                        // what gave the order (ImportedTrace::module_source)
  std::vector<std::string> modules;          // the traced modules, numbered as first seen
  std::vector<ModuleCall> forward_calls;     // on the step's thread; micro-batches not numbered
  std::vector<ModuleCall> recompute_calls;   // forwards re-run in backward; not numbered
  std::vector<ModuleCall> backward_windows;  // numbered; none: autograd ops span them later
  std::vector<double> final_callbacks;       // µs; none: each backward's end stands in
  std::vector<std::string> warnings;
};

// Where the module order comes from: FSDP2's record_function ranges (units) or nn.Module
// ranges (with_stack=True). Everything after the order is the same for both.
class ModuleSource {
 public:
  virtual ~ModuleSource() = default;
  virtual ModuleOrder find_order(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                                 int64_t depth) const = 0;
  // Recomputes that show only once the backward calls are known; asked when find_order
  // found none.
  virtual std::vector<ModuleCall> recomputes_in_backward(const std::vector<KinetoEvent>&,
                                                         const KinetoStep&,
                                                         const CallIndex& /*backward*/) const {
    return {};
  }
};

std::unique_ptr<ModuleSource> make_fsdp2_source();
std::unique_ptr<ModuleSource> make_nn_module_source();
// Whether the step has FSDP2 unit ranges (a pre_forward or pre_backward of some unit).
bool has_fsdp2_units(const std::vector<KinetoEvent>& events, const KinetoStep& step);
// FSDP2's ranges where the step has units, else nn.Module ranges.
std::unique_ptr<ModuleSource> choose_module_source(const std::vector<KinetoEvent>& events,
                                                   const KinetoStep& step);

// Forward calls in time order, numbered by micro-batch: a pass starts with each call of
// the first traced module (the root unit under FSDP2, the first module otherwise), so a
// module called twice in one pass (a shared layer) stays in its pass.
CallIndex number_forward_calls(std::vector<ModuleCall> forward_calls);

// The forward call whose op the autograd backward op `op` differentiates: by fwdbwd
// flow, else by sequence number.
std::optional<ModuleCall> call_of_backward_op(const std::vector<KinetoEvent>& events,
                                              const CpuIndex& cpu, const CallIndex& forward,
                                              int64_t op);

struct BackwardCalls {
  CallIndex calls;
  bool from_windows = false;  // the source's windows, not spans of autograd ops
  std::vector<std::string> warnings;
};

// Backward windows: the source's, or spanned by each forward call's autograd ops.
BackwardCalls attribute_backward(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                                 const CpuIndex& cpu, const CallIndex& forward,
                                 std::vector<ModuleCall> windows);

struct Recomputes {
  std::vector<ModuleCall> calls;  // one per checkpointed region re-run
  ThreadIndex by_thread;          // values index `calls`
};

// A recompute belongs to the micro-batch whose backward of that module holds it, else to
// that of the last backward window that opened before it. Ranges of one module in one
// micro-batch on one thread are one checkpointed region re-run (its sibling modules).
Recomputes number_recomputes(std::vector<ModuleCall> recompute_calls,
                             const std::vector<ModuleCall>& backward_calls);

// The step's traced calls, numbered and indexed for attribution.
struct ModuleCalls {
  CallIndex forward;
  BackwardCalls backward;
  Recomputes recompute;
};

struct StepEvents {
  StepTrace trace;
  std::vector<double> host_times;  // µs, when each trace event ran on the host
};

// The calls as StepTrace events in time order, with when each ran on the host.
StepEvents build_step_events(std::vector<std::string> modules, const ModuleCalls& calls,
                             const std::vector<double>& final_callbacks,
                             std::optional<double> optimizer_begin);

// What a GPU activity launched at some host time was for.
struct Attribution {
  std::string phase;  // forward, backward, recompute, optimizer_step, other
  int64_t module = -1;
};

// The first of these around the launch (thread `tid`, host time t): an optimizer range;
// a recompute on that thread; a forward call, if on the step's thread; an autograd op
// (through the forward op it differentiates); a backward window of the source; a
// backward thread; a user phase range. Else "other".
Attribution attribute_launch(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                             const CpuIndex& cpu, const ModuleCalls& calls, int64_t tid, double t);

// Host time -> GPU time: the GPU start of the last activity launched by then (running
// maximum over launch order), so a module boundary or an allocation lands where the
// stream reaches it, as PyTorch's stream-ordered caching allocator sees it.
struct GpuClock {
  double origin = 0;                                   // µs, the step's first GPU activity
  std::vector<std::pair<double, double>> host_to_gpu;  // (launch ts, GPU start), µs
  // Seconds from the step's first GPU activity at which the GPU reaches host time t.
  double seconds_at(double t) const;
};

struct GpuActivity {
  Timeline timeline;  // "profiled": the step's kernels, copies and sets; no memory curve
  std::vector<ModuleTime> module_times;  // per traced module
  std::vector<ImportedCollective> collectives;
  KernelClassSeconds kernel_seconds;
  GpuClock clock;
  std::vector<std::string> warnings;
};

// The GPU activities launched inside the step (or, with no launch, starting in it), each
// attributed to a phase and module. None: InputError naming `file`.
GpuActivity import_gpu_activity(const KinetoTrace& trace, const KinetoStep& step,
                                const CpuIndex& cpu, const ModuleCalls& calls,
                                const std::vector<std::string>& modules, const std::string& file);

struct MemoryCurve {
  std::vector<MemorySample> samples;  // on the GPU clock, in time order
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  std::vector<std::string> warnings;
};

// The step's CUDA [memory] events that carry the allocator's totals.
MemoryCurve import_memory(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                          const GpuClock& clock);

// All the passes in order (traces/kineto_import.cc): the trace's events -> the import.
ImportedTrace import_kineto(const std::string& path, const KinetoTrace& trace,
                            const ImportOptions& options);

}  // namespace shardplan::kineto
