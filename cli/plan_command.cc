#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/options.h"
#include "models/atomic_file.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/text_format.h"
#include "planner/communicators.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/plan_memory.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

nlohmann::json plan_summary_json(const Plan& plan, const PlanMemory& memory,
                                 const std::string& output) {
  int64_t transient = 0;
  for (const PlanBuffer& b : plan.buffers) transient += b.persistent ? 0 : 1;
  return {{"model", plan.model},
          {"cluster", plan.cluster},
          {"num_gpus", plan.num_gpus},
          {"config", fsdp_config_to_json(plan.config)},
          {"units", plan.units.size()},
          {"groups", plan.groups.size()},
          {"ops", plan.ops.size()},
          {"buffers", plan.buffers.size()},
          {"transient_buffers", transient},
          {"pool",
           {{"algorithm", plan.pool.algorithm},
            {"size_bytes", plan.pool.size_bytes},
            {"lower_bound_bytes", plan.pool.lower_bound_bytes}}},
          {"memory", plan_memory_to_json(memory)},
          {"output", output}};
}

void print_plan(const Plan& plan, const PlanMemory& m, const ClusterSpec& cluster,
                std::ostream& out) {
  const FsdpConfig& c = plan.config;
  out << fmt::format(
      "Plan: {} on {} GPUs of {}, {}, dp_shard {} × dp_outer {}{}, prefetch {}/{}, recompute {}, "
      "micro_batch {} × seq_len {} × grad_accum {}\n",
      plan.model, plan.num_gpus, plan.cluster, sharding_strategy_name(c.sharding_strategy),
      c.dp_shard, c.dp_outer,
      c.dp_outer > 1 ? fmt::format(" (outer {})", outer_strategy_name(c.outer_strategy)) : "",
      c.forward_prefetch, c.backward_prefetch, recompute_label(c), c.micro_batch, c.seq_len,
      c.grad_accum);
  out << fmt::format("{} units, {} parameter groups, {} ops, {} buffers\n\n", plan.units.size(),
                     plan.groups.size(), plan.ops.size(), plan.buffers.size());
  std::vector<std::vector<std::string>> rows = {
      {"model weights", format_bytes(m.model_weights), "persistent"},
      {"main weights", format_bytes(m.main_weights), "persistent"},
      {"main grads", format_bytes(m.main_grads),
       m.main_grads_transient ? "first reduction to zero_grad, in the pool" : "persistent"},
      {"optimizer states", format_bytes(m.optimizer_states), "persistent"},
  };
  if (m.double_buffers > 0)
    rows.push_back({"double buffers", format_bytes(m.double_buffers), "persistent"});
  rows.push_back({"unsharded weights", format_bytes(m.unsharded_weights), "transient, peak"});
  rows.push_back({"unsharded grads", format_bytes(m.unsharded_grads), "transient, peak"});
  rows.push_back({"activations", format_bytes(m.activations), "transient, peak"});
  if (m.comm_buffers > 0) {
    rows.push_back({"tp/cp/ep buffers", format_bytes(m.comm_buffers), "transient, peak"});
  }
  if (m.fp8_transpose_cache > 0) {
    rows.push_back({"fp8 transpose cache", format_bytes(m.fp8_transpose_cache), "transient, peak"});
  }
  const double gap =
      m.pool_lower_bound_bytes > 0 ? 100.0 * (m.pool_bytes / m.pool_lower_bound_bytes - 1.0) : 0.0;
  rows.push_back({"pool", format_bytes(m.pool_bytes),
                  fmt::format("{}; lower bound {} (+{:.1f} %)", plan.pool.algorithm,
                              format_bytes(m.pool_lower_bound_bytes), gap)});
  rows.push_back({"non-tensor", format_bytes(m.non_tensor), describe_non_tensor(plan, cluster)});
  rows.push_back({"peak allocated", format_bytes(m.peak_allocated),
                  "persistent + most transient bytes live at once + non-tensor"});
  rows.push_back({"total", format_bytes(m.total),
                  c.allocator == Allocator::pool
                      ? "peak reserved: persistent + pool + non-tensor"
                      : fmt::format("peak reserved by the {} allocator, replayed (as simulate)",
                                    allocator_name(c.allocator))});
  rows.push_back({"capacity", format_bytes(m.capacity), ""});
  out << render_table({"per GPU", "bytes", "note"}, rows, {1});
  if (m.fits) {
    out << fmt::format("fits: {} headroom\n", format_bytes(m.headroom));
    if (m.cache_releases > 0) {
      out << fmt::format(
          "  only by returning cached memory to the GPU {} time{} in the step (PyTorch's "
          "num_alloc_retries; each synchronizes the device)\n",
          m.cache_releases, m.cache_releases == 1 ? "" : "s");
    }
  } else {
    out << fmt::format("does not fit by {} (largest term: {})\n", format_bytes(-m.headroom),
                       m.largest_term);
  }
}

}  // namespace

int run_plan(const PlanParams& p, std::ostream& out) {
  const Job job = load_job(p.job);
  const Plan plan =
      p.step_trace.empty()
          ? build_plan(job.model, job.cluster, job.config)
          : build_plan(job.model, job.cluster, job.config,
                       step_trace_from_json(read_json_file(p.step_trace), p.step_trace),
                       p.step_trace);
  if (const auto error = validate_plan(plan)) {
    // A job no GPU could hold (a buffer or a rank's memory past plan_limits) is the
    // input's; any other inconsistency is the planner's.
    if (error->kind == PlanErrorKind::out_of_range) {
      throw InputError("", "plan",
                       error->message +
                           ": the job is beyond any GPU; more GPUs (dp_shard, tp, "
                           "cp, ep) or a smaller micro-batch shrink it");
    }
    throw std::logic_error("the planner built an invalid plan (" +
                           std::string(plan_error_kind_name(error->kind)) + "): " + error->message);
  }
  const std::string emitted =
      p.emit.empty() ? "" : emit_text(p.emit, job.model, job.cluster, job.config);
  if (!p.output.empty()) write_file_atomically(p.output, json_text(plan_to_json(plan), 1) + "\n");
  const PlanMemory memory = plan_memory(plan);
  print_stack_notes(job, p.json);
  if (p.json) {
    nlohmann::json j = plan_summary_json(plan, memory, p.output);
    add_stack_notes(job, j);
    j["device_memory"] = device_overhead_to_json(plan, job.cluster);
    if (!p.emit.empty()) j["emit"] = {{"format", p.emit}, {"text", emitted}};
    out << json_text(j, 2) << "\n";
  } else if (!p.emit.empty()) {
    out << emitted;
  } else {
    print_plan(plan, memory, job.cluster, out);
    if (!p.output.empty()) out << "wrote " << p.output << "\n";
  }
  return 0;
}

Command add_plan_command(CLI::App& app) {
  auto params = std::make_shared<PlanParams>();
  PlanParams& p = *params;
  auto* plan =
      app.add_subcommand("plan", "FSDP units, buffers, op schedule and pooled memory per GPU");
  add_job_options(*plan, p.job);
  plan->add_option("-o,--output", p.output, "write plan.json here");
  plan->add_option("--step-trace", p.step_trace,
                   "follow this step's module order and recompute placement (trace import -o, "
                   "or a captured step)")
      ->check(CLI::ExistingFile);
  plan->add_option("--emit", p.emit,
                   "print the config as megatron-args, megatron-bridge or torchtitan text to "
                   "paste (instead of the table)");
  plan->add_flag("--json", p.json, "machine-readable summary");

  return {plan, [params] { return run_plan(*params, std::cout); }};
}

}  // namespace shardplan
