// The `shardplan` command: parses flags (CLI11), calls one library entry point per
// subcommand, and maps errors to exit codes (0 ok, 1 bad input, 2 unknown command,
// CLI11's codes for bad flags, 3 internal error).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "models/cluster_spec.h"
#include "models/error.h"
#include "models/suggest.h"
#include "models/zoo.h"

namespace {

// A whole-number flag of at least `min`. CLI11's PositiveNumber prints "Value 0 not in
// range 0.000000 to 1.79e308" and its NonNegativeNumber accepts fractions.
CLI::Validator whole_number_at_least(long long min) {
  return CLI::Validator(
      [min](std::string& text) -> std::string {
        try {
          std::size_t used = 0;
          const long long value = std::stoll(text, &used);
          if (used != text.size()) return "expected a whole number, got '" + text + "'";
          if (value < min) {
            return min == 1 ? "must be positive, got " + text
                            : "must be at least " + std::to_string(min) + ", got " + text;
          }
          return "";
        } catch (const std::exception&) {
          return "expected a whole number, got '" + text + "'";
        }
      },
      min == 1 ? "POSITIVE" : "INT>=" + std::to_string(min));
}
const CLI::Validator kPositive = whole_number_at_least(1);
const CLI::Validator kNonNegative = whole_number_at_least(0);

// An unknown first word would otherwise read "A subcommand is required".
std::optional<std::string> unknown_command(int argc, char** argv, const CLI::App& app) {
  if (argc < 2 || argv[1][0] == '-') return std::nullopt;
  std::vector<std::string> names;
  for (const CLI::App* command : app.get_subcommands({})) names.push_back(command->get_name());
  const std::string word = argv[1];
  if (std::find(names.begin(), names.end(), word) != names.end()) return std::nullopt;
  return shardplan::unknown_name_message("command", word, names);
}

void add_job_options(CLI::App& command, shardplan::JobParams& job) {
  job.model = shardplan::kDefaultModel;
  job.cluster = shardplan::kDefaultCluster;
  command.add_option("--model", job.model, "zoo model name or model JSON file")
      ->capture_default_str();
  command.add_option("--cluster", job.cluster, "zoo cluster name or cluster JSON file")
      ->capture_default_str();
  command.add_option("--nodes", job.nodes, "nodes in the job (default 1)")->check(kPositive);
  command.add_option("--gpus", job.gpus, "GPUs in the job, instead of --nodes")->check(kPositive);
  command.add_option("--config", job.config_file, "FSDP config JSON file")
      ->check(CLI::ExistingFile);
  command.add_option("--set", job.overrides, "override a config field: key=value (repeatable)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shardplan: plan, simulate and run FSDP training memory and communication"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("shardplan ") + SHARDPLAN_VERSION);

  shardplan::ZooParams models_params;
  auto* models = app.add_subcommand("models", "list the built-in models");
  models->add_flag("--json", models_params.json, "machine-readable output");

  shardplan::ZooParams clusters_params;
  auto* clusters = app.add_subcommand("clusters", "list the built-in clusters");
  clusters->add_flag("--json", clusters_params.json, "machine-readable output");

  shardplan::DescribeParams describe_params;
  auto* describe = app.add_subcommand(
      "describe", "parameters, FLOPs and activations of a model, and its memory per GPU");
  add_job_options(*describe, describe_params.job);
  describe->add_option("--micro-batch", describe_params.micro_batch, "sequences per micro-batch")
      ->check(kPositive);
  describe->add_option("--seq-len", describe_params.seq_len, "tokens per sequence")
      ->check(kPositive);
  describe->add_option("--recompute", describe_params.recompute, "none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  describe->add_flag("--json", describe_params.json, "machine-readable output");

  shardplan::PlanParams plan_params;
  auto* plan =
      app.add_subcommand("plan", "FSDP units, buffers, op schedule and pooled memory per GPU");
  add_job_options(*plan, plan_params.job);
  plan->add_option("-o,--output", plan_params.output, "write plan.json here");
  plan->add_flag("--json", plan_params.json, "machine-readable summary");

  shardplan::SimulateParams simulate_params;
  auto* simulate = app.add_subcommand(
      "simulate", "predict one step: op timeline, step time, MFU, exposed communication, memory");
  add_job_options(*simulate, simulate_params.job);
  simulate
      ->add_option("--plan", simulate_params.plan,
                   "simulate this plan.json (instead of planning --model on --cluster)")
      ->check(CLI::ExistingFile);
  simulate->add_option("--trace-out", simulate_params.trace_out,
                       "write a Chrome trace (Perfetto, chrome://tracing)");
  simulate->add_option("--timeline-out", simulate_params.timeline_out,
                       "write the predicted timeline.json");
  simulate->add_option("--report", simulate_params.report,
                       "write a self-contained HTML report (summary, memory, pool, streams)");
  simulate->add_flag("--json", simulate_params.json, "machine-readable summary");

  shardplan::SweepParams sweep_params;
  auto* sweep = app.add_subcommand(
      "sweep",
      "search sharding, prefetch, recompute and micro-batch for the fastest plan that fits");
  add_job_options(*sweep, sweep_params.job);
  sweep
      ->add_option("--space", sweep_params.space_file,
                   "search space JSON (default: the usual space)")
      ->check(CLI::ExistingFile);
  sweep->add_option("--strategies", sweep_params.strategies, "sharding strategies to try")
      ->delimiter(',');
  sweep->add_option("--dp-outer", sweep_params.dp_outer, "HSDP outer sizes to try")->delimiter(',');
  sweep->add_option("--prefetch", sweep_params.prefetch, "prefetch depths to try")->delimiter(',');
  sweep->add_option("--recompute", sweep_params.recompute, "recompute modes to try")
      ->delimiter(',');
  sweep->add_option("--micro-batch", sweep_params.micro_batch, "micro-batch sizes to try")
      ->delimiter(',');
  sweep->add_option("--global-batch", sweep_params.global_batch, "sequences per step, all GPUs")
      ->check(kPositive);
  sweep
      ->add_option("--global-batch-tokens", sweep_params.global_batch_tokens,
                   "tokens per step, all GPUs")
      ->check(kPositive);
  sweep->add_option("--mem-cap", sweep_params.mem_cap,
                    "peak memory allowed per GPU, e.g. 70GiB (default: GPU memory less 5 %)");
  sweep->add_option("-j,--jobs", sweep_params.threads, "threads (default: every core)");
  sweep->add_option("--top", sweep_params.top, "rows of the ranked table")->capture_default_str();
  sweep->add_flag("--no-prune", sweep_params.no_prune, "simulate even what cannot fit");
  sweep->add_option("--csv", sweep_params.csv, "write every configuration as CSV");
  sweep->add_option("--report", sweep_params.report, "write an HTML report with the Pareto chart");
  sweep->add_option("--emit-config", sweep_params.emit_config,
                    "write the winner as a config file for plan, simulate and execute");
  sweep->add_flag("--json", sweep_params.json, "machine-readable output");

  shardplan::ExecuteParams execute_params;
  auto* execute = app.add_subcommand(
      "execute", "replay a plan on CPUs with MPI (mpirun -np GPUS), checking it on real data");
  execute->add_option("--plan", execute_params.plan, "plan.json")
      ->required()
      ->check(CLI::ExistingFile);
  execute->add_option("--backend", execute_params.backend, "cpu | cuda")->capture_default_str();
  execute->add_option("--warmup", execute_params.warmup, "untimed steps first")
      ->capture_default_str();
  execute->add_option("--steps", execute_params.steps, "timed steps")->capture_default_str();
  execute
      ->add_option("--compute-scale", execute_params.compute_scale,
                   "fraction of each compute op's FLOPs run as a GEMM (cpu)")
      ->capture_default_str();
  execute
      ->add_option("--timeout", execute_params.timeout_seconds,
                   "seconds a rank may wait without progress before the job is ended")
      ->capture_default_str();
  execute->add_flag("--no-check", execute_params.no_check, "skip the integrity checks");
  execute->add_option("-o,--output", execute_params.output, "write the measured timeline.json");
  execute->add_flag("--json", execute_params.json, "machine-readable summary");

  shardplan::TraceImportParams trace_params;
  auto* trace = app.add_subcommand("trace", "read profiler traces (trace import)");
  trace->require_subcommand(1);
  auto* trace_import = trace->add_subcommand(
      "import", "a PyTorch profiler (Kineto) trace: module order, collectives, measured step");
  trace_import->add_option("trace", trace_params.input, "Chrome-trace JSON, gzipped or not")
      ->required()
      ->check(CLI::ExistingFile);
  trace_import->add_option("-o,--output", trace_params.output,
                           "write the imported step (step trace, module times, collectives)");
  trace_import->add_option("--timeline", trace_params.timeline,
                           "write the measured step as timeline.json (for compare)");
  trace_import->add_option("--step", trace_params.step,
                           "profiler step to import: K or ProfilerStep#K (default: the last)");
  trace_import
      ->add_option("--depth", trace_params.depth,
                   "module levels below the first branching level to trace")
      ->capture_default_str()
      ->check(kNonNegative);
  trace_import->add_option("--format", trace_params.format, "kineto | auto")->capture_default_str();
  trace_import->add_flag("--json", trace_params.json, "machine-readable output");

  shardplan::CompareParams compare_params;
  auto* compare = app.add_subcommand(
      "compare", "predicted against measured timeline: op time per kind and the step");
  compare->add_option("predicted", compare_params.predicted, "timeline.json from simulate")
      ->required()
      ->check(CLI::ExistingFile);
  compare
      ->add_option("measured", compare_params.measured,
                   "timeline.json from execute, or from trace import --timeline")
      ->required()
      ->check(CLI::ExistingFile);
  compare->add_flag("--json", compare_params.json, "machine-readable output");

  shardplan::PackParams pack_params;
  auto* pack =
      app.add_subcommand("pack", "place buffers at pool offsets (MiniMalloc CSV or plan.json)");
  pack->add_option("--input", pack_params.input,
                   "buffer table (id,lower,upper,size CSV) or plan.json")
      ->required()
      ->check(CLI::ExistingFile);
  pack->add_option("--algorithm", pack_params.algorithm, "slots | best-fit | exact | auto")
      ->capture_default_str();
  pack->add_option("--capacity", pack_params.capacity, "the pool may not exceed this many bytes")
      ->check(kPositive);
  pack->add_option("--time-limit", pack_params.time_limit_seconds, "seconds for the exact search")
      ->capture_default_str();
  pack->add_option("--alignment", pack_params.alignment, "offset alignment in bytes")
      ->capture_default_str()
      ->check(kPositive);
  pack->add_option("-o,--output", pack_params.output,
                   "write the placement (CSV with offsets, or plan.json)");
  pack->add_flag("--json", pack_params.json, "machine-readable output");

  shardplan::CollectiveParams collective_params;
  collective_params.cluster = shardplan::kDefaultCluster;
  auto* collective = app.add_subcommand(
      "collective", "predicted time, algbw and busbw of one NCCL collective (nccl-tests style)");
  collective
      ->add_option("--cluster", collective_params.cluster, "zoo cluster name or cluster JSON file")
      ->capture_default_str();
  collective->add_option("--nodes", collective_params.nodes, "nodes in the job (default 1)")
      ->check(kPositive);
  collective->add_option("--gpus", collective_params.gpus, "GPUs in the job, instead of --nodes")
      ->check(kPositive);
  collective->add_option("--op", collective_params.op, "all_gather | reduce_scatter | all_reduce")
      ->required();
  collective->add_option("--bytes", collective_params.bytes,
                         "size as nccl-tests counts it: 4096, 64K, 1GiB, 1GB");
  collective
      ->add_option("--ranks", collective_params.ranks, "ranks taking part (default: every GPU)")
      ->check(kPositive);
  collective->add_flag("--sweep", collective_params.sweep, "a table from 1 KiB to 8 GiB");
  collective->add_flag("--json", collective_params.json, "machine-readable output");

  bool version_json = false;
  auto* version = app.add_subcommand("version", "version and CUDA backend status");
  version->add_flag("--json", version_json, "machine-readable output");

  if (auto message = unknown_command(argc, argv, app)) {
    std::cerr << "shardplan: error: " << *message << "\n";
    return 2;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    // --help and --version are "errors" of code 0; the rest get one line, CLI11's code.
    if (error.get_exit_code() == 0) return app.exit(error);
    std::cerr << "shardplan: error: " << error.what() << " (see --help)\n";
    return error.get_exit_code();
  }

  try {
    if (*models) return shardplan::run_models(models_params, std::cout);
    if (*clusters) return shardplan::run_clusters(clusters_params, std::cout);
    if (*describe) return shardplan::run_describe(describe_params, std::cout);
    if (*plan) return shardplan::run_plan(plan_params, std::cout);
    if (*pack) return shardplan::run_pack(pack_params, std::cout);
    if (*sweep) return shardplan::run_sweep(sweep_params, std::cout, std::cerr);
    if (*execute) return shardplan::run_execute(execute_params, std::cout, std::cerr);
    if (*compare) return shardplan::run_compare(compare_params, std::cout);
    if (*trace_import) return shardplan::run_trace_import(trace_params, std::cout);
    if (*simulate) {
      simulate_params.cluster_given = simulate->count("--cluster") > 0;
      if (!simulate_params.plan.empty()) {
        for (const char* flag : {"--model", "--nodes", "--gpus", "--config", "--set"}) {
          if (simulate->count(flag) > 0) {
            throw shardplan::InputError("", flag,
                                        "cannot be combined with --plan (the plan fixes it)");
          }
        }
      }
      return shardplan::run_simulate(simulate_params, std::cout);
    }
    if (*collective) return shardplan::run_collective(collective_params, std::cout);
    if (*version) return shardplan::run_version(version_json, std::cout);
  } catch (const shardplan::InputError& error) {
    std::cerr << "shardplan: error: " << error.what() << "\n";
    return 1;
  } catch (const std::exception& error) {
    std::cerr << "shardplan: internal error: " << error.what() << "\n";
    return 3;
  }
  return 0;
}
