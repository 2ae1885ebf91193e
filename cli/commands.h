#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace shardplan {

// Flags shared by every command that looks at a model on a cluster.
struct JobParams {
  std::string model;    // zoo name or file
  std::string cluster;  // zoo name or file
  std::optional<int64_t> nodes;
  std::optional<int64_t> gpus;
  std::string config_file;             // FsdpConfig JSON; empty = defaults
  std::vector<std::string> overrides;  // --set key=value
  // A training stack's own config instead of --model and --config (interop/stack_job.h):
  // a Megatron-LM command line (inline or a file), a Megatron-Bridge fields file, a
  // torchtitan TOML. At most one.
  std::string from_megatron;
  std::string from_megatron_bridge;
  std::string from_torchtitan;
  // The Python module's inline forms of --model and --config (null: not given).
  nlohmann::json model_json;
  nlohmann::json config_json;
};

struct ZooParams {
  bool json = false;
};

struct DescribeParams {
  JobParams job;
  std::optional<int64_t> micro_batch;
  std::optional<int64_t> seq_len;
  std::string recompute;  // empty = from the config
  bool json = false;
};

struct PlanParams {
  JobParams job;
  std::string emit;        // megatron-args | megatron-bridge | torchtitan; empty = none
  std::string output;      // plan.json path; empty = do not write
  std::string step_trace;  // follow this step (trace import -o); empty = the model's order
  bool json = false;
};

struct PackParams {
  std::string input;               // MiniMalloc CSV or plan.json
  std::string algorithm = "auto";  // slots | best-fit | exact | auto
  std::optional<int64_t> capacity;
  double time_limit_seconds = 10.0;
  int64_t alignment = 256;
  std::string output;  // CSV with offsets, or plan.json; empty = do not write
  bool json = false;
};

struct CollectiveParams {
  std::string cluster;
  std::optional<int64_t> nodes;
  std::optional<int64_t> gpus;
  std::string op;                // all_gather | reduce_scatter | all_reduce
  std::string bytes;             // "1GiB", "64M", "4096"
  std::optional<int64_t> ranks;  // default: every GPU of the job
  bool sweep = false;            // 1 KiB .. 8 GiB
  bool json = false;
};

struct SimulateParams {
  JobParams job;               // used unless `plan` is given
  std::string plan;            // plan.json; empty = plan from the job
  bool cluster_given = false;  // --cluster on the command line (with --plan: override)
  std::string trace_out;       // Chrome trace JSON
  std::string timeline_out;    // timeline.json (the simulator/executor schema)
  std::string report;          // self-contained HTML page
  bool json = false;
};

struct SweepParams {
  JobParams job;            // model, cluster, GPUs and the base config
  std::string space_file;   // search space JSON; empty = the default space
  std::vector<int64_t> tp;  // override lists (each replaces the space's)
  std::vector<int64_t> cp;
  std::vector<std::string> strategies;
  std::vector<int64_t> dp_outer;
  std::vector<int64_t> prefetch;
  std::vector<std::string> recompute;
  std::vector<int64_t> micro_batch;
  bool fp8 = false;                            // try FP8 beside the base precision
  std::optional<int64_t> global_batch;         // sequences per step
  std::optional<int64_t> global_batch_tokens;  // or tokens per step
  std::string mem_cap;                         // "70GiB"; empty = GPU memory less 5 %
  int threads = 0;                             // 0 = every core
  int top = 10;
  bool no_prune = false;
  bool pareto = false;  // compute the exact front (also with --json, --csv, --report)
  bool json = false;
  std::string csv;          // every point, with the Pareto flag
  std::string report;       // HTML page
  std::string emit_config;  // the winner as a config file
  std::string emit;         // the winner as a stack's config (see PlanParams)
};

struct ExecuteParams {
  std::string plan;             // plan.json
  std::string backend = "cpu";  // cpu | cuda
  int warmup = 1;
  int steps = 2;
  double compute_scale = 1e-6;
  double timeout_seconds = 600;  // ReplayOptions::timeout_seconds
  bool no_check = false;
  std::string output;  // measured timeline.json (rank 0)
  bool json = false;
};

struct CompareParams {
  std::string predicted;  // timeline.json from simulate
  std::string measured;   // timeline.json from execute
  bool json = false;
};

struct CalibrateParams {
  std::string cluster;                  // zoo name or file to calibrate
  std::vector<std::string> nccl_tests;  // nccl-tests logs
  std::string nccl_algorithm;           // the NCCL_ALGO they ran with; empty = NCCL's choice
  std::vector<std::string> probes;      // probe.json files
  std::vector<std::string> traces;      // profiler traces (trace import)
  std::string plan;                     // plan.json of the measured timelines
  std::vector<std::string> measured;    // timeline.json from execute
  std::string output;                   // calibrated cluster file; empty = report only
  bool json = false;
};

struct ProbeParams {
  std::string backend = "cpu";
  std::string plan;       // cuda: GEMM shapes from this plan.json; empty = squares
  std::string output;     // probe.json; empty = print it
  std::string max_bytes;  // empty: 64 MiB on cpu, 4 GiB on cuda
  int iterations = 5;
};

struct TraceImportParams {
  std::string input;     // Kineto Chrome trace, .json or .json.gz
  std::string output;    // the imported step (StepTrace, collectives, module times)
  std::string timeline;  // the measured step as timeline.json (for compare)
  std::string step;      // "ProfilerStep#K" or "K"; empty = the last
  int64_t depth = 0;
  std::string format = "auto";
  bool json = false;
};

// Each command writes its result to `out` and returns the process exit code; bad input
// throws InputError, which main() reports.
int run_models(const ZooParams& params, std::ostream& out);
int run_clusters(const ZooParams& params, std::ostream& out);
int run_describe(const DescribeParams& params, std::ostream& out);
int run_plan(const PlanParams& params, std::ostream& out);
int run_pack(const PackParams& params, std::ostream& out);
int run_collective(const CollectiveParams& params, std::ostream& out);
int run_simulate(const SimulateParams& params, std::ostream& out);
int run_compare(const CompareParams& params, std::ostream& out);
int run_calibrate(const CalibrateParams& params, std::ostream& out);
int run_probe(const ProbeParams& params, std::ostream& out, std::ostream& err);
int run_trace_import(const TraceImportParams& params, std::ostream& out);
// Initialises and finalises MPI itself; run it under mpirun with the plan's GPU count.
int run_execute(const ExecuteParams& params, std::ostream& out, std::ostream& err);
int run_sweep(const SweepParams& params, std::ostream& out, std::ostream& progress);
int run_version(bool json, std::ostream& out);

}  // namespace shardplan
