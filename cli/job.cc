#include "cli/job.h"

#include <iostream>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/suggest.h"
#include "models/zoo.h"

namespace shardplan {
namespace {

std::optional<StackJob> read_stack(const JobParams& p) {
  std::vector<std::pair<const char*, StackFormat>> given;
  if (!p.from_megatron.empty()) given.push_back({"--from-megatron", StackFormat::megatron_args});
  if (!p.from_megatron_bridge.empty()) {
    given.push_back({"--from-megatron-bridge", StackFormat::megatron_bridge});
  }
  if (!p.from_torchtitan.empty()) given.push_back({"--from-torchtitan", StackFormat::torchtitan});
  if (given.empty()) return std::nullopt;
  if (given.size() > 1) {
    throw InputError("", given[1].first, std::string("cannot be combined with ") + given[0].first);
  }
  const char* flag = given[0].first;
  if (!p.model.empty() || !p.model_json.is_null()) {
    throw InputError(
        "", "--model",
        std::string("cannot be combined with ") + flag + " (the stack's config gives the model)");
  }
  if (!p.config_file.empty() || !p.config_json.is_null()) {
    throw InputError(
        "", "--config",
        std::string("cannot be combined with ") + flag + " (use --set to change a field)");
  }
  const std::string& input = !p.from_megatron.empty()          ? p.from_megatron
                             : !p.from_megatron_bridge.empty() ? p.from_megatron_bridge
                                                               : p.from_torchtitan;
  return read_stack_config(given[0].second, input);
}

}  // namespace

Job load_job(const JobParams& p, const std::vector<std::string>& extra_overrides) {
  std::optional<StackJob> stack = read_stack(p);
  ModelSpec model = stack ? stack_job_model(*stack)
                    : !p.model_json.is_null()
                        ? model_from_json(p.model_json, "model")
                        : load_model(p.model.empty() ? kDefaultModel : p.model);
  std::optional<int64_t> gpus = p.gpus;
  if (stack && !gpus && !p.nodes) gpus = stack->gpus;
  ClusterSpec cluster =
      load_cluster(p.cluster.empty() ? kDefaultCluster : p.cluster, p.nodes, gpus);
  std::vector<std::string> overrides = p.overrides;
  overrides.insert(overrides.end(), extra_overrides.begin(), extra_overrides.end());
  nlohmann::json fields = stack                      ? stack->config
                          : !p.config_json.is_null() ? p.config_json
                          : p.config_file.empty()    ? nlohmann::json::object()
                                                     : read_json_file(p.config_file);
  const std::string file = stack                      ? stack->label
                           : !p.config_json.is_null() ? "config"
                                                      : p.config_file;
  if (!fields.is_object()) throw InputError(file, "/", "expected a JSON object of config fields");
  if (stack && stack->global_batch && !fields.contains("grad_accum")) {
    // Megatron's and torchtitan's data-parallel size: the GPUs over tp × cp.
    const int64_t tp = fields.value("tp", int64_t{1});
    const int64_t cp = fields.value("cp", int64_t{1});
    if (tp > 0 && cp > 0 && cluster.num_gpus % (tp * cp) == 0) {
      fields["grad_accum"] = grad_accum_from_global_batch(*stack, *stack->global_batch,
                                                          fields.value("micro_batch", int64_t{1}),
                                                          cluster.num_gpus / (tp * cp));
    }
  }
  apply_overrides(fields, overrides);
  const std::string label = fsdp_config_label(file, overrides);
  try {
    const FsdpConfig config = fsdp_config_from_json(fields, label);
    FsdpConfig resolved = resolve_fsdp_config(config, model, cluster, label);
    return Job{std::move(model), std::move(cluster), std::move(resolved), std::move(stack)};
  } catch (const InputError& error) {
    // A field read from the stack's config: name it as the user wrote it.
    const std::string name = stack ? stack_field_name(stack->format, error.field()) : "";
    if (name.empty()) throw;
    throw InputError(error.file(), name + " (" + error.field() + ")", error.reason());
  }
}

void print_stack_notes(const Job& job, bool json) {
  if (job.stack && !json) std::cerr << stack_job_notes_text(*job.stack);
}

void add_stack_notes(const Job& job, nlohmann::json& out) {
  if (job.stack) out["stack_input"] = stack_job_notes_json(*job.stack);
}

std::string emit_text(const std::string& format, const ModelSpec& model, const ClusterSpec& cluster,
                      const FsdpConfig& config) {
  const std::optional<StackFormat> parsed = parse_stack_format(format);
  if (!parsed) {
    throw InputError("", "--emit", unknown_name_message("format", format, stack_format_names()));
  }
  return emit_stack_config(*parsed, model, cluster, config);
}

}  // namespace shardplan
