#include "interop/stack_job.h"

#include <fmt/format.h>

#include "interop/internal/embedded.h"
#include "interop/internal/emit.h"
#include "interop/internal/megatron.h"
#include "interop/internal/stack_text.h"
#include "models/embedded_files.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "models/transformer_builder.h"
#include "models/zoo.h"

namespace shardplan {
namespace {

constexpr NameTable<StackFormat, 3> kFormats = {{
    {StackFormat::megatron_args, "megatron-args"},
    {StackFormat::megatron_bridge, "megatron-bridge"},
    {StackFormat::torchtitan, "torchtitan"},
}};

}  // namespace

std::string_view stack_format_name(StackFormat format) {
  return name_of(kFormats, format);
}
std::optional<StackFormat> parse_stack_format(std::string_view text) {
  return value_of(kFormats, text);
}
std::vector<std::string> stack_format_names() {
  return names_of(kFormats);
}

const EmbeddedFile& interop_data_file(std::string_view stem) {
  for (const EmbeddedFile& f : interop_data_files()) {
    if (f.name == stem) return f;
  }
  throw std::logic_error(fmt::format("interop data file '{}' is not built in", stem));
}

StackJob read_megatron_args(const std::string& text_or_file) {
  // Inline text starts with a flag or holds several words; anything else names a file.
  const bool inline_text =
      text_or_file.rfind("--", 0) == 0 || text_or_file.find_first_of(" \t\n") != std::string::npos;
  const std::string label = inline_text ? "--from-megatron" : text_or_file;
  if (text_or_file.find_first_not_of(" \t\r\n") == std::string::npos) {
    throw InputError("--from-megatron", "",
                     "nothing to read: give a Megatron-LM command line or a file holding one");
  }
  std::string text;
  if (inline_text) {
    text = stack_text(text_or_file, label);
  } else {
    // One word that is no file and no path either: say both readings, not just that a
    // file did not open.
    try {
      text = read_stack_file(text_or_file);
    } catch (const InputError& error) {
      if (text_or_file.find_first_of("/.") != std::string::npos) throw;
      throw InputError("--from-megatron", "",
                       fmt::format("{} is neither a command line (it has no --flag) nor a file "
                                   "that can be read ({})",
                                   quote_input(text_or_file), error.reason()));
    }
  }
  if (text.find_first_not_of(" \t\n") == std::string::npos) {
    throw InputError(label, "", "the file is empty: nothing to read");
  }
  const MegatronArgs args = parse_megatron_script(text, label);
  StackJob job = megatron_stack_job(args, StackFormat::megatron_args, label);
  tidy_stack_notes(job);
  return job;
}

StackJob read_stack_config(StackFormat format, const std::string& input) {
  switch (format) {
    case StackFormat::megatron_args:
      return read_megatron_args(input);
    case StackFormat::megatron_bridge:
      return read_megatron_bridge(input);
    case StackFormat::torchtitan:
      return read_torchtitan_toml(input);
  }
  throw std::logic_error("unknown stack format");
}

ModelSpec stack_job_model(const StackJob& job) {
  if (!job.zoo_model.empty()) return load_model(job.zoo_model);
  ModelSpec model = model_from_json(job.model, job.label);
  if (model.arch == nullptr) return model;
  for (const EmbeddedFile& f : model_zoo_files()) {
    const std::string label = fmt::format("models/zoo/{}.json", f.name);
    const nlohmann::json zoo = parse_json_text(f.text, label);
    if (zoo.value("hidden_size", 0) != model.hidden_size ||
        zoo.value("num_layers", 0) != model.num_layers) {
      continue;
    }
    const std::string family = zoo.value("family", "");
    if (family != "transformer" && family != "moe") continue;
    const JsonReader reader(zoo, label);
    if (parse_transformer_arch(reader, family == "moe") == *model.arch) {
      return load_model(std::string(f.name));
    }
  }
  return model;
}

int64_t grad_accum_from_global_batch(const StackJob& job, int64_t global_batch, int64_t micro_batch,
                                     int64_t data_parallel) {
  // Each reader checks its own fields; this guards the division itself, whatever calls it.
  for (const auto& [name, value] :
       {std::pair{"global batch", global_batch}, std::pair{"micro-batch", micro_batch},
        std::pair{"data-parallel ranks", data_parallel}}) {
    if (value < 1)
      throw InputError(job.label, name, fmt::format("must be positive, got {}", value));
  }
  int64_t per_step = 0;
  const bool overflow = __builtin_mul_overflow(micro_batch, data_parallel, &per_step);
  if (overflow || global_batch % per_step != 0) {
    throw InputError(job.label, "global batch",
                     fmt::format("{} sequences is not a multiple of micro-batch {} × {} "
                                 "data-parallel ranks",
                                 global_batch, micro_batch, data_parallel) +
                         (overflow ? "" : fmt::format(" = {}", per_step)));
  }
  return global_batch / per_step;
}

nlohmann::json stack_job_notes_json(const StackJob& job) {
  return {{"format", stack_format_name(job.format)},
          {"input", printable_message(job.label, 512)},
          {"ignored", job.ignored},
          {"not_modelled", job.not_modelled},
          {"unknown", job.unknown}};
}

std::string stack_job_notes_text(const StackJob& job) {
  std::string out;
  const std::string label = printable_message(job.label, 512);
  if (!job.unknown.empty()) {
    out += fmt::format("shardplan: warning: {}: not {} arguments, left out: {}\n", label,
                       stack_format_name(job.format), fmt::join(job.unknown, "; "));
  }
  for (const std::string& note : job.not_modelled) {
    out += fmt::format("shardplan: note: {}: {}\n", label, note);
  }
  if (!job.ignored.empty()) {
    out += fmt::format(
        "shardplan: note: {}: {} argument(s) with no effect on memory or step "
        "time ignored ({})\n",
        label, job.ignored.size(), fmt::join(job.ignored, ", "));
  }
  return out;
}

std::string emit_stack_config(StackFormat format, const ModelSpec& model,
                              const ClusterSpec& cluster, const FsdpConfig& config) {
  if (model.arch == nullptr) {
    throw InputError(fmt::format("--emit {}", stack_format_name(format)), "model",
                     fmt::format("model '{}' is an explicit module tree; the training stacks "
                                 "build transformers from their dimensions",
                                 model.name));
  }
  const std::string header = fmt::format(
      "# shardplan: {} on {} GPUs of {}, {}, dp_shard {} x dp_outer {} x cp {} x tp {}, "
      "micro-batch {} x {} tokens\n",
      model.name, cluster.num_gpus, cluster.name, sharding_strategy_name(config.sharding_strategy),
      config.dp_shard, config.dp_outer, config.cp, config.tp, config.micro_batch, config.seq_len);
  switch (format) {
    case StackFormat::megatron_args:
      return emit_megatron_args(model, cluster, config, header);
    case StackFormat::megatron_bridge:
      return emit_megatron_bridge(model, cluster, config, header);
    case StackFormat::torchtitan:
      return emit_torchtitan(model, cluster, config, header);
  }
  throw std::logic_error("unknown stack format");
}

}  // namespace shardplan
