#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "models/zoo.h"
#include "planner/communicators.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "simulator/report.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

// The cluster a plan file was made for: --cluster if given, else its zoo name.
ClusterSpec plan_cluster(const Plan& plan, const SimulateParams& p) {
  const auto names = cluster_zoo_names();
  if (!p.cluster_given && std::find(names.begin(), names.end(), plan.cluster) == names.end()) {
    throw InputError(p.plan, "cluster",
                     fmt::format("the plan was made for cluster {}, which is not built in; give "
                                 "its file with --cluster",
                                 quote_input(plan.cluster)));
  }
  ClusterSpec cluster =
      load_cluster(p.cluster_given ? p.job.cluster : plan.cluster, std::nullopt, plan.num_gpus);
  if (cluster.gpus_per_node != plan.gpus_per_node) {
    throw InputError(p.plan, "gpus_per_node",
                     fmt::format("the plan has {} GPUs per node, cluster '{}' has {}",
                                 plan.gpus_per_node, cluster.name, cluster.gpus_per_node));
  }
  return cluster;
}

void print_summary(const Plan& plan, const Timeline& t, const ClusterSpec& cluster,
                   std::ostream& out) {
  const TimelineSummary& s = t.summary;
  const PathBreakdown& p = s.critical_path;
  const double step = std::max(s.step_seconds, 1e-30);
  auto share = [&](double x) { return fmt::format("{:.1f} %", 100.0 * x / step); };
  const int64_t non_tensor = plan.non_tensor_bytes;
  const std::string non_tensor_note = describe_non_tensor(plan, cluster);
  out << fmt::format("Predicted step: {} on {} GPUs of {} ({} allocator)\n\n", plan.model,
                     plan.num_gpus, plan.cluster, t.allocator);
  const std::vector<std::vector<std::string>> rows = {
      {"step time", format_seconds(s.step_seconds), ""},
      {"tokens/s per GPU", fmt::format("{:.0f}", s.tokens_per_second_per_gpu),
       fmt::format("{:g} tokens per GPU per step", plan.tokens_per_gpu)},
      {"TFLOP/s per GPU", fmt::format("{:.1f}", s.tflops_per_gpu), "executed, recompute included"},
      {"MFU", fmt::format("{:.1f} %", 100.0 * s.mfu), "model FLOPs ÷ dense BF16 peak"},
      {"compute", format_seconds(s.compute_seconds),
       share(s.compute_seconds) + " of the step busy"},
      {"exposed all-gather", format_seconds(s.exposed_all_gather_seconds),
       share(s.exposed_all_gather_seconds)},
      {"exposed reduce-scatter", format_seconds(s.exposed_reduce_scatter_seconds),
       share(s.exposed_reduce_scatter_seconds)},
      {"exposed outer (HSDP)", format_seconds(s.exposed_outer_seconds),
       share(s.exposed_outer_seconds)},
      {"exposed tp/cp/ep", format_seconds(s.exposed_model_parallel_seconds),
       share(s.exposed_model_parallel_seconds)},
      {"waiting for the host", format_seconds(s.host_wait_seconds),
       share(s.host_wait_seconds) + " (CPU issuing kernels, MoE syncs)"},
      {"peak allocated", format_bytes(static_cast<double>(s.peak_allocated_bytes - non_tensor)),
       "tensors (torch.cuda.max_memory_allocated)"},
      {"peak reserved", format_bytes(static_cast<double>(s.peak_reserved_bytes - non_tensor)),
       "the allocator's segments (torch.cuda.max_memory_reserved)"},
      {"non-tensor", format_bytes(static_cast<double>(non_tensor)), non_tensor_note},
      {"device used", format_bytes(static_cast<double>(s.peak_reserved_bytes)),
       fmt::format("as nvidia-smi shows it; of {}: {}",
                   format_bytes(static_cast<double>(s.capacity_bytes)),
                   s.fits ? "fits" : "does NOT fit")},
  };
  out << render_table({"", "predicted", "note"}, rows, {1});
  out << fmt::format(
      "\ncritical path ({} ops): compute {}, all-gather {}, reduce-scatter {}, outer {}, "
      "tp/cp/ep {}, optimizer {}{}{}\n",
      t.critical_path.size(), format_seconds(p.compute), format_seconds(p.all_gather),
      format_seconds(p.reduce_scatter), format_seconds(p.outer), format_seconds(p.model_parallel),
      format_seconds(p.optimizer),
      p.offload > 0 ? fmt::format(", offload copies {}", format_seconds(p.offload)) : "",
      p.host > 0 ? fmt::format(", waiting for the host {}", format_seconds(p.host)) : "");
}

}  // namespace

int run_simulate(const SimulateParams& p, std::ostream& out) {
  check_distinct_outputs(
      {{"--trace-out", p.trace_out}, {"--timeline-out", p.timeline_out}, {"--report", p.report}});
  Plan plan;
  ClusterSpec cluster;
  nlohmann::json stack_notes = nlohmann::json::object();
  if (!p.plan.empty()) {
    plan = read_plan_file(p.plan);
    cluster = plan_cluster(plan, p);
  } else {
    const Job job = load_job(p.job);
    plan = build_plan(job.model, job.cluster, job.config);
    cluster = job.cluster;
    print_stack_notes(job, p.json);
    add_stack_notes(job, stack_notes);
  }
  const Timeline timeline = simulate(plan, cluster);
  // A predicted step longer than a timeline may hold (a config no one trains with: a 405B
  // model on one GPU, grad_accum in the thousands) is printed, but not written as a
  // timeline that compare and calibrate would then refuse to read.
  if (!p.timeline_out.empty() && timeline.summary.step_seconds > kMaxStepSeconds) {
    throw InputError("", "--timeline-out",
                     fmt::format("the predicted step lasts {:.3g} s, longer than the day a "
                                 "timeline may hold (not a training step: more GPUs or fewer "
                                 "micro-batches); simulate without --timeline-out prints it",
                                 timeline.summary.step_seconds));
  }
  // Everything is computed before anything is written.
  if (!p.trace_out.empty())
    write_file_atomically(p.trace_out, json_text(chrome_trace(timeline)) + "\n");
  if (!p.timeline_out.empty())
    write_file_atomically(p.timeline_out, json_text(timeline_to_json(timeline), 1) + "\n");
  if (!p.report.empty()) write_file_atomically(p.report, html_report(plan, timeline));
  if (p.json) {
    nlohmann::json j = timeline_to_json(timeline);
    j.erase("ops");
    j.erase("memory");
    j.erase("critical_path");
    j["config"] = fsdp_config_to_json(plan.config);
    j.update(stack_notes);
    j["device_memory"] = device_overhead_to_json(plan, cluster);
    out << json_text(j, 2) << "\n";
    return 0;
  }
  print_summary(plan, timeline, cluster, out);
  for (const std::string* path : {&p.trace_out, &p.timeline_out, &p.report}) {
    if (!path->empty()) out << "wrote " << *path << "\n";
  }
  return 0;
}

Command add_simulate_command(CLI::App& app) {
  auto params = std::make_shared<SimulateParams>();
  SimulateParams& p = *params;
  auto* simulate = app.add_subcommand(
      "simulate", "predict one step: op timeline, step time, MFU, exposed communication, memory");
  add_job_options(*simulate, p.job);
  simulate
      ->add_option("--plan", p.plan,
                   "simulate this plan.json (instead of planning --model on --cluster)")
      ->check(CLI::ExistingFile);
  simulate->add_option("--trace-out", p.trace_out,
                       "write a Chrome trace (Perfetto, chrome://tracing)");
  simulate->add_option("--timeline-out", p.timeline_out, "write the predicted timeline.json");
  simulate->add_option("--report", p.report,
                       "write a self-contained HTML report (summary, memory, pool, streams)");
  simulate->add_flag("--json", p.json, "machine-readable summary");

  return {simulate, [params, simulate] {
            params->cluster_given = simulate->count("--cluster") > 0;
            if (!params->plan.empty()) {
              for (const char* flag :
                   {"--model", "--nodes", "--gpus", "--config", "--set", "--from-megatron",
                    "--from-megatron-bridge", "--from-torchtitan"}) {
                if (simulate->count(flag) > 0) {
                  throw InputError("", flag, "cannot be combined with --plan (the plan fixes it)");
                }
              }
            }
            return run_simulate(*params, std::cout);
          }};
}

}  // namespace shardplan
