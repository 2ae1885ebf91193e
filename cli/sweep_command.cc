#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <tuple>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/mpi_session.h"
#include "cli/mpi_sweep.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/sweep.h"
#include "simulator/predict_step.h"
#include "simulator/sweep_report.h"

namespace shardplan {
namespace {

// Where the sweep's global batch came from, for an error about it.
std::string global_batch_source(const SweepParams& p, const Job& job) {
  if (p.global_batch) return "--global-batch";
  if (p.global_batch_tokens) return "--global-batch-tokens";
  if (job.stack && job.stack->global_batch) return job.stack->label + ": global batch";
  if (!p.space_file.empty()) return p.space_file + ": global batch";
  return "sweep: the default global batch (4 sequences per GPU)";
}

SearchSpace build_space(const SweepParams& p, const Job& job) {
  SearchSpace space = default_search_space(job.model, job.cluster, job.config);
  if (!p.space_file.empty())
    space = search_space_from_json(read_json_file(p.space_file), p.space_file, space);
  // Flags replace single lists of the space; they go through the same reader, and its
  // errors name the flag that gave the field.
  struct FlagField {
    const char* key;
    const char* flag;
  };
  static constexpr FlagField kFlagFields[] = {{"tp", "--tp"},
                                              {"cp", "--cp"},
                                              {"sharding_strategy", "--strategies"},
                                              {"dp_outer", "--dp-outer"},
                                              {"prefetch", "--prefetch"},
                                              {"recompute", "--recompute"},
                                              {"micro_batch", "--micro-batch"},
                                              {"fp8", "--fp8"},
                                              {"global_batch_sequences", "--global-batch"},
                                              {"global_batch_tokens", "--global-batch-tokens"}};
  nlohmann::json flags = nlohmann::json::object();
  if (!p.tp.empty()) flags["tp"] = p.tp;
  if (!p.cp.empty()) flags["cp"] = p.cp;
  if (!p.strategies.empty()) flags["sharding_strategy"] = p.strategies;
  if (!p.dp_outer.empty()) flags["dp_outer"] = p.dp_outer;
  if (!p.prefetch.empty()) flags["prefetch"] = p.prefetch;
  if (!p.recompute.empty()) flags["recompute"] = p.recompute;
  if (!p.micro_batch.empty()) flags["micro_batch"] = p.micro_batch;
  if (p.fp8) flags["fp8"] = {false, true};
  // The stack config's global batch holds unless a flag gives another.
  std::optional<int64_t> global_batch = p.global_batch;
  if (!global_batch && !p.global_batch_tokens && job.stack) global_batch = job.stack->global_batch;
  if (global_batch) flags["global_batch_sequences"] = *global_batch;
  if (p.global_batch_tokens) flags["global_batch_tokens"] = *p.global_batch_tokens;
  if (p.global_batch && p.global_batch_tokens)
    throw InputError("", "--global-batch-tokens", "give --global-batch or --global-batch-tokens");
  if (!flags.empty()) {
    if (global_batch || p.global_batch_tokens) space.global_batch_sequences = 0;
    try {
      space = search_space_from_json(flags, "flags", space);
    } catch (const InputError& error) {
      std::string flag = error.field();
      for (const FlagField& f : kFlagFields) {
        if (error.field().starts_with("/" + std::string(f.key))) flag = f.flag;
      }
      // A batch the stack config gave is named as its file.
      const bool from_stack = flag == "--global-batch" && !p.global_batch && job.stack;
      throw InputError(from_stack ? job.stack->label : "", from_stack ? "global batch" : flag,
                       error.reason());
    }
  }
  for (int64_t outer : space.dp_outer) {
    if (job.cluster.num_gpus % outer != 0) {
      throw InputError(p.space_file.empty() ? "" : p.space_file, "dp_outer",
                       fmt::format("{} does not divide the {} GPUs", outer, job.cluster.num_gpus));
    }
  }
  return space;
}

nlohmann::json point_json(const SweepPoint& p) {
  nlohmann::json j = {{"config", fsdp_config_to_json(p.config)},
                      {"label", describe_config(p.config)},
                      {"state", p.state == PointState::evaluated ? "evaluated"
                                : p.state == PointState::pruned  ? "pruned"
                                                                 : "invalid"}};
  if (!p.reason.empty()) j["reason"] = p.reason;
  if (p.memory_lower_bound > 0) j["memory_lower_bound_bytes"] = p.memory_lower_bound;
  if (p.step_lower_bound > 0) j["step_lower_bound_seconds"] = p.step_lower_bound;
  if (p.state == PointState::evaluated) {
    const TimelineSummary& s = p.summary;
    j["step_seconds"] = s.step_seconds;
    j["tokens_per_second_per_gpu"] = s.tokens_per_second_per_gpu;
    j["mfu"] = s.mfu;
    j["peak_reserved_bytes"] = s.peak_reserved_bytes;
    j["peak_allocated_bytes"] = s.peak_allocated_bytes;
    j["exposed_all_gather_seconds"] = s.exposed_all_gather_seconds;
    j["exposed_reduce_scatter_seconds"] = s.exposed_reduce_scatter_seconds;
    j["exposed_outer_seconds"] = s.exposed_outer_seconds;
    j["exposed_model_parallel_seconds"] = s.exposed_model_parallel_seconds;
    j["host_wait_seconds"] = s.host_wait_seconds;
    j["critical_path"] = {{"compute", s.critical_path.compute},
                          {"all_gather", s.critical_path.all_gather},
                          {"reduce_scatter", s.critical_path.reduce_scatter},
                          {"outer", s.critical_path.outer},
                          {"model_parallel", s.critical_path.model_parallel},
                          {"offload", s.critical_path.offload},
                          {"host", s.critical_path.host},
                          {"optimizer", s.critical_path.optimizer}};
    j["fits"] = p.fits;
    j["pareto"] = p.pareto;
  }
  return j;
}

std::string csv_text(const SweepResult& r) {
  std::string out =
      "index,label,sharding_strategy,tp,cp,dp_shard,dp_outer,outer_strategy,bucket_bytes,"
      "prefetch,recompute,micro_batch,grad_accum,fp8,fp8_param_gather,double_buffer,allocator,"
      "no_sync,ep,etp,moe_dispatcher,state,step_seconds,tokens_per_second_per_gpu,mfu,"
      "peak_reserved_bytes,fits,pareto,"
      "memory_lower_bound_bytes,step_lower_bound_seconds\n";
  for (std::size_t i = 0; i < r.points.size(); ++i) {
    const SweepPoint& p = r.points[i];
    const FsdpConfig& c = p.config;
    const bool ok = p.state == PointState::evaluated;
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}"
        "\n",
        i, describe_config(c), sharding_strategy_name(c.sharding_strategy), c.tp, c.cp, c.dp_shard,
        c.dp_outer, outer_strategy_name(c.outer_strategy),
        c.bucket_bytes ? std::to_string(*c.bucket_bytes) : "", c.forward_prefetch,
        recompute_label(c), c.micro_batch, c.grad_accum, fp8_compute(c), c.fp8_param_gather,
        c.double_buffer, allocator_name(c.allocator), c.no_sync, c.ep, expert_tp(c),
        moe_dispatcher_name(c.moe_dispatcher),
        ok                              ? "evaluated"
        : p.state == PointState::pruned ? "pruned"
                                        : "invalid",
        ok ? fmt::format("{:.9g}", p.summary.step_seconds) : "",
        ok ? fmt::format("{:.6g}", p.summary.tokens_per_second_per_gpu) : "",
        ok ? fmt::format("{:.6g}", p.summary.mfu) : "",
        ok ? std::to_string(p.summary.peak_reserved_bytes) : "", ok && p.fits, p.pareto,
        p.memory_lower_bound > 0 ? fmt::format("{:.0f}", p.memory_lower_bound) : "",
        p.step_lower_bound > 0 ? fmt::format("{:.9g}", p.step_lower_bound) : "");
  }
  return out;
}

// Nothing fits: the advice as text.
std::string no_fit_text(const SweepResult& r, const NoFitAdvice& advice) {
  std::string text = fmt::format("Nothing fits under the {} cap.\n",
                                 format_bytes(static_cast<double>(r.memory_cap)));
  if (advice.lowest) {
    const SweepPoint& lowest = r.points[*advice.lowest];
    text += fmt::format(
        "The least memory: {} peaks at {} ({} over).\n", describe_config(lowest.config),
        format_bytes(static_cast<double>(lowest.summary.peak_reserved_bytes)),
        format_bytes(static_cast<double>(lowest.summary.peak_reserved_bytes - r.memory_cap)));
  } else if (advice.lowest_bound) {
    const SweepPoint& smallest = r.points[*advice.lowest_bound];
    text += fmt::format(
        "Every configuration was pruned: even {} needs at least {} for persistent state and "
        "saved activations.\n",
        describe_config(smallest.config), format_bytes(smallest.memory_lower_bound));
  }
  if (advice.try_full_recompute) text += "Try recompute full (not in the searched space).\n";
  if (advice.try_micro_batch_one) text += "Try micro-batch 1 (not in the searched space).\n";
  if (!advice.grown) return text;
  const std::string grown = describe_config(r.points[*advice.grown].config);
  if (advice.fits_on_nodes > 0) {
    return text + fmt::format("{} fits on {} GPUs ({} nodes): {} per GPU.\n", grown,
                              advice.fits_on_gpus, advice.fits_on_nodes,
                              format_bytes(static_cast<double>(advice.fits_peak_reserved_bytes)));
  }
  return text + fmt::format("{} does not fit even on 64 times the GPUs.\n", grown);
}

// The --json document: the job, the counts, the ranking (top rows), the front, every point.
nlohmann::json sweep_json(const SweepParams& p, const Job& job, const SweepResult& result,
                          int64_t cap, double seconds, const std::string& advice) {
  nlohmann::json ranking = nlohmann::json::array(), pareto = nlohmann::json::array(),
                 points = nlohmann::json::array();
  for (std::size_t k = 0; k < result.ranking.size() && k < static_cast<std::size_t>(p.top); ++k)
    ranking.push_back(point_json(result.points[result.ranking[k]]));
  for (const SweepPoint& pt : result.points) {
    if (pt.pareto) pareto.push_back(point_json(pt));
    points.push_back(point_json(pt));
  }
  nlohmann::json j = {{"model", job.model.name},
                      {"cluster", job.cluster.name},
                      {"num_gpus", job.cluster.num_gpus},
                      {"memory_cap_bytes", cap},
                      {"configurations", result.points.size()},
                      {"evaluated", result.evaluated},
                      {"pruned", result.pruned},
                      {"pruned_by_time", result.pruned_by_time},
                      {"invalid", result.invalid},
                      {"fitting", result.ranking.size()},
                      {"seconds", seconds},
                      {"ranking", ranking},
                      {"pareto", pareto},
                      {"points", points}};
  if (!advice.empty()) j["advice"] = advice;
  return j;
}

// The table a person reads: counts, the ranking, why #1 beats #2, the Pareto front.
void print_sweep(const SweepParams& p, const SweepResult& result, const std::string& title,
                 int64_t cap, double seconds, int threads, int ranks, const std::string& advice,
                 std::ostream& out) {
  out << fmt::format("{}, memory cap {}\n", title, format_bytes(static_cast<double>(cap)));
  out << fmt::format(
      "{} configurations: {} simulated; {} pruned by the memory bound, {} by the step-time bound; "
      "{} invalid. {} fit. {:.2f} s on {}{} thread{}.\n\n",
      result.points.size(), result.evaluated, result.pruned - result.pruned_by_time,
      result.pruned_by_time, result.invalid, result.ranking.size(), seconds,
      ranks > 1 ? fmt::format("{} MPI ranks × ", ranks) : "", threads, threads == 1 ? "" : "s");
  if (result.ranking.empty()) {
    out << advice;
    return;
  }
  std::vector<std::vector<std::string>> rows;
  for (std::size_t k = 0; k < result.ranking.size() && k < static_cast<std::size_t>(p.top); ++k) {
    const SweepPoint& pt = result.points[result.ranking[k]];
    const TimelineSummary& s = pt.summary;
    rows.push_back(
        {std::to_string(k + 1), describe_config(pt.config), format_seconds(s.step_seconds),
         fmt::format("{:.0f}", s.tokens_per_second_per_gpu), fmt::format("{:.1f} %", 100 * s.mfu),
         format_bytes(static_cast<double>(s.peak_reserved_bytes)),
         format_bytes(static_cast<double>(cap - s.peak_reserved_bytes))});
  }
  out << render_table({"rank", "configuration", "step", "tok/s/GPU", "MFU", "peak", "headroom"},
                      rows, {0, 2, 3, 4, 5, 6});
  const SweepPoint& best = result.points[result.ranking.front()];
  if (result.ranking.size() > 1) {
    const SweepPoint& second = result.points[result.ranking[1]];
    const TimelineSummary &a = best.summary, &b = second.summary;
    auto row = [&](const char* name, double x, double y) {
      return std::vector<std::string>{name, format_seconds(x), format_seconds(y),
                                      format_seconds(y - x)};
    };
    out << fmt::format("\nWhy #1 wins over #2 ({:.2f} % faster), critical path:\n",
                       100 * (b.step_seconds / a.step_seconds - 1));
    out << render_table(
        {"", "#1", "#2", "#2 − #1"},
        {row("compute", a.critical_path.compute, b.critical_path.compute),
         row("all-gather (exposed)", a.critical_path.all_gather, b.critical_path.all_gather),
         row("reduce-scatter (exposed)", a.critical_path.reduce_scatter,
             b.critical_path.reduce_scatter),
         row("outer (HSDP)", a.critical_path.outer, b.critical_path.outer),
         row("tp/cp/ep", a.critical_path.model_parallel, b.critical_path.model_parallel),
         row("optimizer", a.critical_path.optimizer, b.critical_path.optimizer),
         row("waiting for the host", a.critical_path.host, b.critical_path.host),
         row("step", a.step_seconds, b.step_seconds)},
        {1, 2, 3});
  }
  int64_t front = 0;
  for (const SweepPoint& pt : result.points) front += pt.pareto ? 1 : 0;
  if (result.pareto) {
    out << fmt::format("\nPareto front (peak memory vs step time): {} points{}.\n", front,
                       p.csv.empty() && p.report.empty() ? " (--csv, --report)" : "");
  } else {
    out << "\nPareto front (peak memory vs step time): not computed; --pareto (or --csv, "
           "--report, --json) simulates what it needs.\n";
  }
  for (const std::string* path : {&p.csv, &p.report}) {
    if (!path->empty()) out << "wrote " << *path << "\n";
  }
  if (!p.emit_config.empty()) out << "wrote " << p.emit_config << " (the winner)\n";
}

}  // namespace

int run_sweep(const SweepParams& p, std::ostream& out, std::ostream& progress) {
  check_distinct_outputs(
      {{"--csv", p.csv}, {"--report", p.report}, {"--emit-config", p.emit_config}});
  const Job job = load_job(p.job);
  const SearchSpace space = build_space(p, job);
  // The cap is compared with one GPU's memory: at most the largest HBM a cluster file may
  // give (16 TiB).
  const int64_t cap = p.mem_cap.empty()
                          ? default_memory_cap(job.cluster)
                          : static_cast<int64_t>(parse_size(p.mem_cap, "--mem-cap", 0x1p44));
  // More threads than candidates or cores only costs memory; 1024 covers any machine.
  constexpr int kMaxThreads = 1024;
  if (auto reason = out_of_range_reason(p.threads, 0, kMaxThreads))
    throw InputError("", "--jobs", *reason);
  if (p.top <= 0) throw InputError("", "--top", "must be positive");
  std::vector<FsdpConfig> configs;
  try {
    configs = enumerate_configs(space, job.config, job.cluster.num_gpus);
  } catch (const InputError& error) {
    // Tokens that are not whole sequences: named as the user gave them.
    if (error.field() != "global_batch_tokens") throw;
    throw InputError(global_batch_source(p, job), "", error.reason());
  }
  const Evaluator evaluate = [&](const FsdpConfig& c, const ClusterSpec& cluster) {
    return predict_step(job.model, cluster, c);
  };
  SweepOptions options{
      .memory_cap = cap,
      .threads = p.threads > 0
                     ? p.threads
                     : static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
      .prune = !p.no_prune,
      .step_lower_bound =
          [&](const FsdpConfig& c) {
            return compute_stream_seconds_per_micro_batch(job.model, job.cluster, c);
          },
      .keep = p.top,
      // The front is exact wherever it is shown; the text table alone needs the ranking.
      .pareto = p.pareto || p.json || !p.csv.empty() || !p.report.empty()};
  // Under mpirun every rank enumerates and bounds the same configurations and simulates
  // its share of each batch; rank 0 reports. (A second sweep in one process, from Python,
  // finds MPI finalized and runs alone.)
  std::optional<MpiSession> mpi;
  int rank = 0, ranks = 1;
  if (launched_by_mpi() && !mpi_finalized()) {
    mpi.emplace();
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  }
  if (ranks > 1) {
    if (p.threads == 0) options.threads = threads_per_rank();
    options.batch_evaluator = mpi_batch_evaluator(rank, ranks);
  }
  // A progress bar only for a person watching.
  const bool terminal = rank == 0 && &progress == &std::cerr && isatty(STDERR_FILENO) != 0;
  std::size_t shown = 0;
  if (terminal) {
    options.progress = [&](std::size_t done, std::size_t total) {
      if (done < shown + total / 200 + 1 && done != total) return;
      shown = done;
      const std::size_t width = 40;
      const std::size_t filled = total == 0 ? width : done * width / total;
      progress << "\r[" << std::string(filled, '#') << std::string(width - filled, ' ') << "] "
               << done << "/" << total << (done == total ? "\n" : "") << std::flush;
    };
  }
  const auto start = std::chrono::steady_clock::now();
  const SweepResult result = sweep_configs(job.model, job.cluster, configs, evaluate, options);
  // Nothing to rank because of the input, not of memory: rank 0 says what was wrong with
  // it; the other ranks exit as it does.
  const bool all_invalid =
      result.invalid == static_cast<int64_t>(result.points.size()) && !result.points.empty();
  if (rank != 0) return all_invalid ? 1 : 0;
  if (all_invalid) {
    const SweepPoint& first = result.points.front();
    // The first point's mesh tiles the GPUs but does not split the batch: the message
    // names where the batch came from, as what to change.
    const bool batch = first.config.grad_accum == 0 && first.config.dp_shard > 0;
    throw InputError(
        batch ? global_batch_source(p, job) : "sweep", "",
        fmt::format("all {} configurations are invalid; the first ({}): {}", result.points.size(),
                    describe_config(first.config), first.reason));
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string title = fmt::format("Sweep: {} on {} GPUs of {}", job.model.name,
                                        job.cluster.num_gpus, job.cluster.name);
  std::string advice;
  if (result.ranking.empty()) {
    advice = no_fit_text(result, advise_no_fit(result, space, job.model, job.cluster, evaluate));
  }

  // Everything is computed before anything is written.
  if (!p.csv.empty()) write_file_atomically(p.csv, csv_text(result));
  if (!p.report.empty()) write_file_atomically(p.report, sweep_report_html(result, title, p.top));
  std::string emitted;
  if (!p.emit.empty() && !result.ranking.empty()) {
    emitted =
        emit_text(p.emit, job.model, job.cluster, result.points[result.ranking.front()].config);
  }
  if (!p.emit_config.empty() && !result.ranking.empty()) {
    write_file_atomically(
        p.emit_config,
        json_text(fsdp_config_to_json(result.points[result.ranking.front()].config), 2) + "\n");
  }
  print_stack_notes(job, p.json);
  if (p.json) {
    nlohmann::json j = sweep_json(p, job, result, cap, seconds, advice);
    add_stack_notes(job, j);
    if (!p.emit.empty()) j["emit"] = {{"format", p.emit}, {"text", emitted}};
    out << json_text(j, 2) << "\n";
    return 0;
  }
  if (!p.emit.empty() && !result.ranking.empty()) {
    out << emitted;
    return 0;
  }
  print_sweep(p, result, title, cap, seconds, options.threads, ranks, advice, out);
  return 0;
}

Command add_sweep_command(CLI::App& app) {
  auto params = std::make_shared<SweepParams>();
  SweepParams& p = *params;
  auto* sweep = app.add_subcommand(
      "sweep",
      "search sharding, prefetch, recompute and micro-batch for the fastest plan that fits");
  add_job_options(*sweep, p.job);
  sweep->add_option("--space", p.space_file, "search space JSON (default: the usual space)")
      ->check(CLI::ExistingFile);
  sweep->add_option("--tp", p.tp, "tensor-parallel sizes to try")->delimiter(',');
  sweep->add_option("--cp", p.cp, "context-parallel sizes to try")->delimiter(',');
  sweep->add_option("--strategies", p.strategies, "sharding strategies to try")->delimiter(',');
  sweep->add_option("--dp-outer", p.dp_outer, "HSDP outer sizes to try")->delimiter(',');
  sweep->add_option("--prefetch", p.prefetch, "prefetch depths to try")->delimiter(',');
  sweep->add_option("--recompute", p.recompute, "recompute modes to try")->delimiter(',');
  sweep->add_option("--micro-batch", p.micro_batch, "micro-batch sizes to try")->delimiter(',');
  sweep->add_flag("--fp8", p.fp8,
                  "try FP8 GEMMs too (FP8 weight gathers under ZeRO-3); changes numerics");
  sweep->add_option("--global-batch", p.global_batch, "sequences per step, all GPUs")
      ->check(positive_whole_number());
  sweep->add_option("--global-batch-tokens", p.global_batch_tokens, "tokens per step, all GPUs")
      ->check(positive_whole_number());
  sweep->add_option("--mem-cap", p.mem_cap,
                    "peak memory allowed per GPU, e.g. 70GiB (default: GPU memory less 5 %)");
  sweep->add_option("-j,--jobs", p.threads, "threads (default: every core)");
  sweep->add_option("--top", p.top, "rows of the ranked table")->capture_default_str();
  sweep->add_flag("--no-prune", p.no_prune, "simulate even what cannot fit");
  sweep->add_flag("--pareto", p.pareto,
                  "compute the exact Pareto front of memory vs step time (more simulations)");
  sweep->add_option("--csv", p.csv, "write every configuration as CSV");
  sweep->add_option("--report", p.report, "write an HTML report with the Pareto chart");
  sweep->add_option("--emit-config", p.emit_config,
                    "write the winner as a config file for plan, simulate and execute");
  sweep->add_option("--emit", p.emit,
                    "print the winner as megatron-args, megatron-bridge or torchtitan text to "
                    "paste (instead of the table)");
  sweep->add_flag("--json", p.json, "machine-readable output");

  return {sweep, [params] { return run_sweep(*params, std::cout, std::cerr); }};
}

}  // namespace shardplan
