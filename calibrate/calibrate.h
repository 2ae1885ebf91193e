#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "calibrate/nccl_tests_log.h"
#include "models/cluster_spec.h"
#include "planner/plan.h"
#include "traces/timeline.h"
#include "traces/trace_import.h"

namespace shardplan {

// One cluster constant as calibration found it: its value before and after, and how
// well the fitted model explains the points it was fitted to (r2 on the measured times;
// NaN with fewer than three points; rms_relative_error of (predicted − measured) ÷
// measured after the fit).
struct FittedConstant {
  std::string name;
  std::string unit;
  double before = 0;
  double after = 0;
  int64_t points = 0;
  double r2 = 0;
  double rms_relative_error = 0;
  bool fitted = true;  // false: kept (too few points, or not separable from another)
  std::string note;
};

// How far the model is from a set of measurements, before and after calibration.
struct FitCheck {
  std::string what;
  int64_t points = 0;
  double rms_before = 0;  // relative errors
  double rms_after = 0;
  double worst_before = 0;  // signed, the largest in magnitude
  double worst_after = 0;
};

struct CalibrationReport {
  std::vector<FittedConstant> constants;
  std::vector<FitCheck> checks;
};

// Collectives: each sample is assigned the regime (tier, algorithm, protocol) the
// model picks for it, and each regime's latency and bandwidth scales are fitted by least
// squares (Eigen) on relative errors: time = s_lat × latency + bus_bytes ÷ (s_bw × busbw),
// linear in s_lat and 1 ÷ s_bw. With the new scales the model may pick other regimes;
// assignment and fit repeat until the assignment holds. Edits
// cluster.collective_calibration (refining the scales it already has).
void fit_collectives(ClusterSpec& cluster, const std::vector<CollectiveSample>& samples,
                     CalibrationReport& report);

// Compute: per compute op of the plan, its measured duration (the timeline the executor
// wrote for this plan) against GEMM, attention, memory-bound and optimizer work at
// full efficiency; least squares gives 1 ÷ efficiency per kernel class and, where ops
// overlapped collectives, the overlap slowdown. Classes whose work is in the same
// proportion in every op cannot be told apart: they are scaled together and said so.
// Edits cluster.compute.
void fit_compute(ClusterSpec& cluster, const Plan& plan, const Timeline& measured,
                 const std::string& label, CalibrationReport& report);

// What `shardplan calibrate` reads: nccl-tests logs, probe files (`shardplan probe -o`),
// profiler traces, and timelines `shardplan execute` measured for one plan.
struct CalibrationInputs {
  std::vector<std::string> nccl_tests;
  // The NCCL_ALGO the logs ran with ("ring", "tree", "nvls"); empty: NCCL's own choice.
  std::string nccl_algorithm;
  std::vector<std::string> probes;
  // Profiler traces (trace import): the NCCL kernels of every step, with their sizes and
  // group sizes, as collective samples (they ran beside compute: contention included).
  std::vector<std::string> traces;
  std::string plan;  // plan.json the measured timelines ran; required with them
  std::vector<std::string> measured;
};

struct CalibrationResult {
  ClusterSpec cluster;
  nlohmann::json cluster_json;  // the input cluster file with the fitted constants
  CalibrationReport report;
};

// Fits the cluster named by `cluster_name_or_file` (a zoo name or a file) to the inputs
// and returns it as a cluster file every command accepts: the original file with its
// compute efficiencies replaced, its collective_calibration set, and a source for every
// fitted constant. Throws InputError for unreadable inputs or when there is nothing to fit.
CalibrationResult calibrate_cluster(const std::string& cluster_name_or_file,
                                    const CalibrationInputs& inputs);

// One kernel a CUDA probe timed on its GPU: a bf16 GEMM (m × n × k) or a device copy
// moving `bytes` (read and written in all).
struct ProbeKernel {
  bool gemm = true;
  int64_t m = 0, n = 0, k = 0;
  double bytes = 0;
  double seconds = 0;
};

// What `shardplan probe` wrote (docs/formats.md "Probe").
struct ProbeFile {
  std::string backend;  // "cpu" or "cuda"
  std::vector<CollectiveSample> collectives;
  std::vector<ProbeKernel> kernels;
};
ProbeFile read_probe_file(const std::string& path);

// What calibration takes from a profiler trace, every step of it: the collectives whose
// collective, size and group size are known, as samples (ranks fill nodes of
// `gpus_per_node` in order), and each step's compute kernel time by class.
struct TracedStep {
  std::string where;  // "rank0.json ProfilerStep#4"
  KernelClassSeconds kernels;
};
struct TraceMeasurements {
  std::vector<CollectiveSample> collectives;
  std::vector<TracedStep> steps;
  int64_t num_gpus = 0;  // the world size the trace names; 0 when it does not
};
TraceMeasurements read_trace_measurements(const std::string& path, int64_t gpus_per_node);

// Compute from profiler traces of the job `plan` describes: per step, the kernel time of
// each class (GEMM, FP8 GEMM, attention, elementwise with the device copies and sets,
// optimizer; classify_kernel) against
// the plan's step work of that class at full efficiency; each efficiency is the ratio of
// the summed work to the summed time (least squares on each class's per-step times, in
// seconds). The kernels' time includes any slowdown from overlapping communication.
// A trace with a world size other than the plan's is refused. Edits cluster.compute.
void fit_trace_compute(ClusterSpec& cluster, const Plan& plan, const std::vector<TracedStep>& steps,
                       const std::string& label, CalibrationReport& report);

// GEMM efficiency from the probe's GEMMs (FLOPs ÷ the power-limited BF16 peak) and
// elementwise efficiency from its copies (bytes ÷ the measured HBM bandwidth), each one
// least-squares scale on relative errors. Edits cluster.compute.
void fit_probe_kernels(ClusterSpec& cluster, const std::vector<ProbeKernel>& kernels,
                       const std::string& label, CalibrationReport& report);

}  // namespace shardplan
