#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/job.h"
#include "cli/options.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "models/model_summary.h"
#include "models/text_format.h"
#include "models/zoo.h"
#include "planner/communicators.h"
#include "planner/fsdp_config.h"
#include "planner/memory_estimate.h"

namespace shardplan {
namespace {

nlohmann::json summary_json(const ModelSummary& s) {
  nlohmann::json layers = nlohmann::json::array();
  for (const LayerActivations& l : s.layers) {
    layers.push_back({{"type", l.type},
                      {"count", l.count},
                      {"parameters", l.parameters},
                      {"activation_bytes",
                       {{"none", l.none_bytes},
                        {"selective", l.selective_bytes},
                        {"full", l.full_bytes},
                        {"full_peak", l.full_peak_bytes}}}});
    if (l.sac_op_bytes) layers.back()["activation_bytes"]["sac_op"] = *l.sac_op_bytes;
  }
  nlohmann::json recompute = {{"none", 0.0},
                              {"selective", s.recompute_flops_per_token_selective},
                              {"full", s.recompute_flops_per_token_full}};
  if (s.recompute_flops_per_token_sac_op) recompute["sac_op"] = *s.recompute_flops_per_token_sac_op;
  return {{"total_parameters", s.total_parameters},
          {"active_parameters", s.active_parameters},
          {"parameters_by_kind", s.parameters_by_kind},
          {"model_flops_per_token", s.model_flops_per_token},
          {"executed_flops_per_token", s.executed_flops_per_token},
          {"recompute_flops_per_token", recompute},
          {"layers", layers},
          {"other_activation_bytes", s.other_activation_bytes},
          {"total_activation_bytes_none", s.total_activation_bytes_none}};
}

void print_memory(const MemoryEstimate& e, const ClusterSpec& cluster, const FsdpConfig& c,
                  std::ostream& out) {
  out << fmt::format(
      "\nMemory per GPU — {} GPUs of {} ({} node{}), {}, dp_shard {} × dp_outer {}, "
      "recompute {}, micro_batch {} × seq_len {}:\n",
      e.num_gpus, cluster.name, cluster.nodes(), cluster.nodes() == 1 ? "" : "s",
      sharding_strategy_name(c.sharding_strategy), e.dp_shard, e.dp_outer, recompute_label(c),
      c.micro_batch, c.seq_len);
  std::vector<std::vector<std::string>> rows = {
      {"model weights", format_bytes(e.model_weights), "persistent"},
      {"main weights", format_bytes(e.main_weights), "persistent"},
      {"main grads", format_bytes(e.main_grads),
       e.main_grads_transient ? "first reduction to zero_grad" : "persistent"},
      {"optimizer states", format_bytes(e.optimizer_states), "persistent"},
  };
  if (e.double_buffers > 0)
    rows.push_back({"double buffers", format_bytes(e.double_buffers), "persistent"});
  rows.push_back({"unsharded weights", format_bytes(e.unsharded_weights), "transient peak"});
  rows.push_back({"unsharded grads", format_bytes(e.unsharded_grads), "transient peak"});
  if (e.comm_buffers > 0)
    rows.push_back({"tp/cp/ep buffers", format_bytes(e.comm_buffers), "transient peak"});
  rows.push_back({"activations", format_bytes(e.activations), "one micro-batch"});
  const DeviceOverhead overhead = device_overhead(c, cluster);
  rows.push_back({"non-tensor", format_bytes(e.non_tensor),
                  fmt::format("CUDA context and workspaces {}, NCCL {} ({} communicators)",
                              format_bytes(static_cast<double>(overhead.base)),
                              format_bytes(static_cast<double>(overhead.nccl)),
                              overhead.communicators.size())});
  rows.push_back({"total", format_bytes(e.total), ""});
  rows.push_back({"capacity", format_bytes(e.capacity), cluster.gpu.name});
  out << render_table({"term", "bytes", "note"}, rows, {1});
  if (e.fits) {
    out << fmt::format("fits: {} headroom\n", format_bytes(e.headroom));
  } else {
    out << fmt::format("does not fit by {} (largest term: {})\n", format_bytes(-e.headroom),
                       e.largest_term);
  }
  out << "(closed-form estimate: `shardplan plan` schedules the buffers exactly)\n";
}

}  // namespace

int run_describe(const DescribeParams& p, std::ostream& out) {
  std::vector<std::string> overrides;
  if (p.micro_batch) overrides.push_back(fmt::format("micro_batch={}", *p.micro_batch));
  if (p.seq_len) overrides.push_back(fmt::format("seq_len={}", *p.seq_len));
  if (!p.recompute.empty()) overrides.push_back("recompute=\"" + p.recompute + "\"");
  const Job job = load_job(p.job, overrides);
  const ModelSpec& model = job.model;
  const ClusterSpec& cluster = job.cluster;
  const FsdpConfig& resolved = job.config;

  const BatchShape shape{.micro_batch = resolved.micro_batch,
                         .seq_len = resolved.seq_len,
                         .activation_bytes = dtype_bytes(resolved.param_dtype),
                         .stack = resolved.stack};
  const ModelSummary summary = summarize_model(model, shape);
  const MemoryEstimate memory = estimate_memory(model, cluster, resolved);

  print_stack_notes(job, p.json);
  if (p.json) {
    nlohmann::json j{{"model",
                      {{"name", model.name},
                       {"family", model.family},
                       {"source", model.source},
                       {"hidden_size", model.hidden_size},
                       {"num_layers", model.num_layers},
                       {"vocab_size", model.vocab_size}}},
                     {"cluster",
                      {{"name", cluster.name},
                       {"gpu", cluster.gpu.name},
                       {"nodes", cluster.nodes()},
                       {"num_gpus", cluster.num_gpus}}},
                     {"config", fsdp_config_to_json(resolved)},
                     {"summary", summary_json(summary)},
                     {"memory", memory_estimate_to_json(memory)}};
    add_stack_notes(job, j);
    out << json_text(j, 2) << "\n";
    return 0;
  }

  out << fmt::format("{} ({}): {}\n", model.name, model.family, model.source);
  out << fmt::format("\nParameters: {} total",
                     format_count(static_cast<double>(summary.total_parameters)));
  if (summary.active_parameters < static_cast<double>(summary.total_parameters)) {
    out << fmt::format(", {} active per token", format_count(summary.active_parameters));
  }
  out << "\n";
  std::vector<std::vector<std::string>> kind_rows;
  for (const auto& [kind, count] : summary.parameters_by_kind) {
    kind_rows.push_back(
        {kind, format_count(static_cast<double>(count)),
         fmt::format("{:.1f} %", 100.0 * static_cast<double>(count) /
                                     static_cast<double>(summary.total_parameters))});
  }
  out << render_table({"kind", "parameters", "share"}, kind_rows, {1, 2});

  out << fmt::format("\nTraining FLOPs per token at seq_len {}:\n", resolved.seq_len);
  out << fmt::format("  model (PaLM convention, MFU):   {}FLOP\n",
                     format_si(summary.model_flops_per_token));
  out << fmt::format("  executed (causal, flash bwd):   {}FLOP\n",
                     format_si(summary.executed_flops_per_token));
  if (summary.recompute_flops_per_token_sac_op) {
    out << fmt::format("  + recompute selective / sac_op / full: {}FLOP / {}FLOP / {}FLOP\n",
                       format_si(summary.recompute_flops_per_token_selective),
                       format_si(*summary.recompute_flops_per_token_sac_op),
                       format_si(summary.recompute_flops_per_token_full));
  } else {
    out << fmt::format("  + recompute selective / full:   {}FLOP / {}FLOP\n",
                       format_si(summary.recompute_flops_per_token_selective),
                       format_si(summary.recompute_flops_per_token_full));
  }

  out << fmt::format("\nActivations saved for backward, one micro-batch ({} × {} tokens, {}):\n",
                     resolved.micro_batch, resolved.seq_len, dtype_name(resolved.param_dtype));
  // torchtitan's sac_op column where the model's layers are built (it counts their matmuls).
  const bool sac_op = summary.recompute_flops_per_token_sac_op.has_value();
  std::vector<std::vector<std::string>> layer_rows;
  for (const LayerActivations& l : summary.layers) {
    std::vector<std::string> row = {fmt::format("{} ×{}", l.type, l.count),
                                    format_count(static_cast<double>(l.parameters)),
                                    format_bytes(l.none_bytes), format_bytes(l.selective_bytes)};
    if (sac_op) row.push_back(format_bytes(l.sac_op_bytes.value_or(0)));
    row.push_back(format_bytes(l.full_bytes));
    layer_rows.push_back(std::move(row));
  }
  const std::string other = format_bytes(summary.other_activation_bytes);
  std::vector<std::string> outside = {"outside layers", "", other, other, other};
  if (sac_op) outside.push_back(other);
  layer_rows.push_back(std::move(outside));
  std::vector<std::string> header = {"per layer", "params", "none", "selective", "full"};
  if (sac_op) header.insert(header.begin() + 4, "sac_op");
  out << render_table(
      header, layer_rows,
      sac_op ? std::vector<std::size_t>{1, 2, 3, 4, 5} : std::vector<std::size_t>{1, 2, 3, 4});
  out << fmt::format("  whole model, recompute none: {}\n",
                     format_bytes(summary.total_activation_bytes_none));

  print_memory(memory, cluster, resolved, out);
  return 0;
}

Command add_describe_command(CLI::App& app) {
  auto params = std::make_shared<DescribeParams>();
  DescribeParams& p = *params;
  auto* describe = app.add_subcommand(
      "describe", "parameters, FLOPs and activations of a model, and its memory per GPU");
  add_job_options(*describe, p.job);
  describe->add_option("--micro-batch", p.micro_batch, "sequences per micro-batch")
      ->check(positive_whole_number());
  describe->add_option("--seq-len", p.seq_len, "tokens per sequence")
      ->check(positive_whole_number());
  describe->add_option("--recompute", p.recompute, "none | selective | full")
      ->check(CLI::IsMember({"none", "selective", "full"}));
  describe->add_flag("--json", p.json, "machine-readable output");

  return {describe, [params] { return run_describe(*params, std::cout); }};
}

}  // namespace shardplan
