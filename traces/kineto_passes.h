#pragma once

// The passes of the Kineto importer (traces/kineto_import.cc runs them in order and says
// why that order). Internal to traces/: each is a function of plain data, declared here
// so that a test can run one pass on a hand-built event list.

#include <cctype>
#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "traces/interval_index.h"
#include "traces/kineto_reader.h"

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

// The profiler step imported: every later pass looks only inside its time.
struct KinetoStep {
  std::string name;
  double begin = 0, end = 0;  // µs, both inside the step
  int64_t tid = -1;           // the thread that runs the step's forward
  bool contains(double t) const { return t >= begin && t <= end; }
};

struct StepChoice {
  std::vector<std::string> steps;  // the ProfilerStep# ranges, in time order
  KinetoStep step;
  std::vector<std::string> warnings;
};

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

}  // namespace shardplan::kineto
