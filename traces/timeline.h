#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace shardplan {

// timeline.json schema version (docs/formats.md).
inline constexpr int kTimelineVersion = 1;

// The longest step any timeline or trace may describe: a day. A step longer than that is
// not a training step but a unit error or corrupt times: Llama 3 405B's steps took about
// 6 s (16 M tokens per step at about 400 TFLOP/s on each of 16 384 H100s, Dubey et al.
// 2024), so a day is 10 000x the slowest published step, and times up to it stay exact
// to the nanosecond in a double.
inline constexpr double kMaxStepSeconds = 86400;

// One op of a step as it ran (measured) or would run (predicted), seconds from the step's
// start. Streams and kinds are the plan's names ("compute", "ag"; "forward", "all_gather").
struct TimelineOp {
  int64_t op = -1;  // the plan's op id
  std::string name;
  std::string stream;
  std::string kind;
  double start = 0;
  double end = 0;
  double bytes = 0;
  double flops = 0;
  std::string group;  // a collective's process group ("tp", "dp_shard_cp", ...); "" otherwise
};

// Device memory after an allocation or a free at `time`.
struct MemorySample {
  double time = 0;
  int64_t allocated = 0;  // bytes held by live tensors (and non-tensor memory)
  int64_t reserved = 0;   // bytes the allocator holds from the device
};

// Time on the critical path by what it was spent on (sums to the step time).
struct PathBreakdown {
  double compute = 0;  // forward, backward, recompute
  double all_gather = 0;
  double reduce_scatter = 0;  // the dp_shard reduce-scatters (all-reduces without sharding)
  double outer = 0;           // dp_outer collectives (HSDP)
  double optimizer = 0;
  double model_parallel = 0;  // tensor- and context-parallel collectives
  double offload = 0;         // activation offload's copies to and from host
  // Gaps where the path's next op started after the one before it ended: it waited for
  // the host to issue it (predicted only).
  double host = 0;
};

struct TimelineSummary {
  double step_seconds = 0;
  double tokens_per_second_per_gpu = 0;
  double tflops_per_gpu = 0;   // executed FLOPs (recompute included) per second, ÷ 1e12
  double mfu = 0;              // model FLOPs (no recompute) ÷ (step time × dense BF16 peak)
  double compute_seconds = 0;  // busy time of the compute stream
  // Time a collective of that kind is in flight while the compute stream is idle.
  double exposed_all_gather_seconds = 0;
  double exposed_reduce_scatter_seconds = 0;
  double exposed_outer_seconds = 0;
  // Tensor- and context-parallel collectives (tp, cp streams, and those blocking the
  // compute stream) while no compute runs.
  double exposed_model_parallel_seconds = 0;
  // Time the compute stream's ops waited for the CPU to issue them (predicted only:
  // docs/model.md "Host time").
  double host_wait_seconds = 0;
  int64_t peak_allocated_bytes = 0;
  int64_t peak_reserved_bytes = 0;
  int64_t capacity_bytes = 0;
  bool fits = false;
  PathBreakdown critical_path;
};

struct Timeline {
  // "predicted" (simulator), "measured" (executor: the plan's ops), or "profiled"
  // (imported from a profiler trace: GPU kernels, copies and collectives, not plan ops).
  std::string source;
  std::string model;
  std::string cluster;
  int64_t num_gpus = 0;
  std::string allocator;  // "pool", "caching" or "expandable"
  std::vector<TimelineOp> ops;
  std::vector<MemorySample> memory;
  std::vector<int64_t> critical_path;  // op ids, first to last
  TimelineSummary summary;
};

// Whether a process group (by name) is tensor, context or expert parallel: its
// collectives are the model's own, counted apart from FSDP's ("tp", "cp", "ep", "etp",
// "ep_etp").
bool is_model_parallel_group_name(std::string_view name);

// From the op times alone: the compute stream's busy time, the time each collective
// stream ("ag", "rs", "outer") is in flight while the compute stream is idle, and the
// executed TFLOP/s per GPU (compute ops' FLOPs over the step). Needs the step time set.
void summarize_streams(Timeline& timeline);

nlohmann::json timeline_to_json(const Timeline& timeline);
// Reads what timeline_to_json writes; `label` names the file in errors.
Timeline timeline_from_json(const nlohmann::json& json, const std::string& label);

// Chrome trace-event JSON (chrome://tracing, Perfetto): one track per stream with the ops
// as complete events ("X", microseconds) carrying bytes and FLOPs in args, and the memory
// as counter events ("C").
nlohmann::json chrome_trace(const Timeline& timeline);

}  // namespace shardplan
