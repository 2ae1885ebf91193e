// Megatron-Bridge's ConfigContainer fields (src/megatron/bridge/training/config.py
// @067f987): a recipe's `cfg.model.*` is Megatron-Core's TransformerConfig, `cfg.ddp.*` its
// DistributedDataParallelConfig, so most fields carry Megatron's own names and are read as
// Megatron's arguments (megatron_job.cc); the rest are renamed here.
#include <fmt/format.h>

#include <algorithm>
#include <sstream>

#include "interop/internal/megatron.h"
#include "interop/internal/stack_text.h"
#include "interop/stack_job.h"
#include "models/error.h"
#include "models/json_reader.h"

namespace shardplan {
namespace {

// Bridge paths whose Megatron argument has another name, or the opposite sense.
struct Renamed {
  std::string_view path;
  std::string_view dest;
  bool inverted = false;
};
constexpr Renamed kRenamed[] = {
    {"model.num_moe_experts", "num_experts"},
    {"model.gated_linear_unit", "swiglu"},
    {"model.share_embeddings_and_output_weights", "untie_embeddings_and_output_weights", true},
    {"model.should_pad_vocab", "pad_vocab_size"},
    {"model.vocab_size", "vocab_size"},
    {"model.seq_length", "seq_length"},
    {"dataset.seq_length", "seq_length"},
    {"dataset.sequence_length", "seq_length"},
    // The model's vocabulary wins where both are given (Bridge's setup).
    {"tokenizer.vocab_size", "tokenizer_vocab_size"},
    {"tokenizer.tokenizer_type", "tokenizer_type"},
    {"train.micro_batch_size", "micro_batch_size"},
    {"train.global_batch_size", "global_batch_size"},
    {"optimizer.optimizer", "optimizer"},
    {"comm_overlap.overlap_grad_reduce", "overlap_grad_reduce"},
    {"comm_overlap.overlap_param_gather", "overlap_param_gather"},
    {"ddp.nccl_ub", "nccl_ub"},
    {"comm_overlap.tp_comm_overlap", "tp_comm_overlap"},
    {"dist.use_megatron_fsdp", "use_megatron_fsdp"},
    {"dist.use_torch_fsdp2", "use_torch_fsdp2"},
};

// Megatron-Bridge's mixed-precision presets (training/mixed_precision.py @067f987): the
// arguments each sets that the plan depends on.
nlohmann::json preset(const std::string& name) {
  std::string key = name;
  std::replace(key.begin(), key.end(), '-', '_');
  if (key == "bf16_mixed") return {{"bf16", true}};
  if (key == "fp16_mixed") return {{"fp16", true}};
  if (key == "bf16_with_fp8_delayed_scaling_mixed") {
    return {
        {"bf16", true}, {"fp8", "hybrid"}, {"fp8_recipe", "delayed"}, {"fp8_param_gather", true}};
  }
  if (key == "bf16_with_mxfp8_mixed") {
    return {{"bf16", true}, {"fp8", "e4m3"}, {"fp8_recipe", "mxfp8"}, {"fp8_param_gather", true}};
  }
  if (key == "bf16_with_fp8_current_scaling_mixed") {
    return {{"bf16", true},
            {"fp8", "hybrid"},
            {"fp8_recipe", "tensorwise"},
            {"fp8_param_gather", true}};
  }
  if (key == "bf16_with_fp8_subchannel_scaling_mixed") {
    return {{"bf16", true}, {"fp8", "hybrid"}, {"fp8_recipe", "blockwise"}};
  }
  return nullptr;
}

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names = {"bf16_mixed",
                                                 "fp16_mixed",
                                                 "bf16_with_fp8_delayed_scaling_mixed",
                                                 "bf16_with_mxfp8_mixed",
                                                 "bf16_with_fp8_current_scaling_mixed",
                                                 "bf16_with_fp8_subchannel_scaling_mixed"};
  return names;
}

// A JSON value inside a message: short, printable.
std::string shown_json(const nlohmann::json& value) {
  return quote_input(value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

std::string kind_of(const nlohmann::json& value) {
  if (value.is_array()) return fmt::format("a list of {} items", value.size());
  if (value.is_string()) return "a string " + quote_input(value.get<std::string>());
  if (value.is_null()) return "None";
  return value.is_boolean() ? "a bool" : "a number";
}

// Sections with no bearing on memory or step time.
bool ignored_section(std::string_view section) {
  for (std::string_view s : {"checkpoint", "logger", "scheduler", "rng", "profiling", "ft",
                             "straggler", "nvrx_straggler", "rerun_state_machine", "validation",
                             "env_vars", "inprocess_restart", "tensor_inspect", "peft"}) {
    if (section == s) return true;
  }
  return false;
}

// The ConfigContainer's sections that hold fields (config.py @067f987), the ignored
// ones included.
bool is_section(std::string_view section) {
  for (std::string_view s : {"model", "ddp", "dist", "train", "optimizer", "dataset", "tokenizer",
                             "comm_overlap", "mixed_precision_config"}) {
    if (section == s) return true;
  }
  return ignored_section(section);
}

class BridgeReader {
 public:
  explicit BridgeReader(std::string label) : label_(std::move(label)) {}

  void add(std::string path, const nlohmann::json& value) {
    // Bridge's docs name the sections by their variables: ddp_config.use_megatron_fsdp
    // (docs/training/megatron-fsdp.md, seeds/003).
    for (const char* section :
         {"ddp", "dist", "model", "train", "optimizer", "dataset", "tokenizer", "checkpoint"}) {
      const std::string alias = std::string(section) + "_config.";
      if (path.rfind(alias, 0) == 0) path = std::string(section) + "." + path.substr(alias.size());
    }
    if (path.rfind("training_config.", 0) == 0) path = "train." + path.substr(16);
    if (path.empty() || path.find("_target_") != std::string::npos ||
        path.find("_call_") != std::string::npos) {
      return;
    }
    // A field holds a value or a list of values; anything nested is refused before it is
    // copied (copying a list nested a million deep would recurse as deep).
    if (value.is_array() && std::any_of(value.begin(), value.end(), [](const nlohmann::json& v) {
          return !v.is_primitive();
        })) {
      throw InputError(label_, path, "expected a value or a list of values, got nested lists");
    }
    const std::string section = path.substr(0, path.find('.'));
    const std::string field =
        path.find('.') == std::string::npos ? "" : path.substr(path.find('.') + 1);
    if (field.empty() && is_section(section)) {
      throw InputError(label_, path,
                       fmt::format("is a section of fields, so it must be an object "
                                   "({{\"{}\": {{...}}}} or cfg.{}.<field> = ...), got {}",
                                   section, section, kind_of(value)));
    }
    if (path == "mixed_precision" || section == "mixed_precision") {
      add_precision(path, field, value);
      return;
    }
    for (const Renamed& r : kRenamed) {
      if (r.path == path) {
        nlohmann::json v = value;
        if (r.inverted) {
          if (!v.is_boolean()) throw InputError(label_, path, "expected True or False");
          v = !v.get<bool>();
        }
        set(std::string(r.dest), v, path);
        return;
      }
    }
    if ((section == "model" || section == "ddp" || section == "train") &&
        field.find('.') == std::string::npos) {
      // Megatron's own names: TransformerConfig, DistributedDataParallelConfig fields.
      set(field, value, path);
      return;
    }
    if (ignored_section(section) || section == "dataset" || section == "tokenizer" ||
        section == "optimizer" || section == "dist" || section == "comm_overlap") {
      args_.ignored.push_back(path);
      return;
    }
    args_.unknown.push_back(path);
  }

  void expandable_segments() { args_.expandable_segments = true; }
  MegatronArgs take() { return std::move(args_); }

 private:
  void set(const std::string& dest, const nlohmann::json& value, const std::string& path) {
    const auto it = args_.values.find(dest);
    if (it != args_.values.end() && it->second.value != value && !value.is_null()) {
      throw InputError(label_, path,
                       fmt::format("{} disagrees with {} ({}): give one value", shown_json(value),
                                   it->second.name, shown_json(it->second.value)));
    }
    if (dest == "num_query_groups" && !value.is_null()) {
      args_.values["group_query_attention"] = MegatronValue{true, path};
    }
    args_.values[dest] = MegatronValue{value, path};
  }

  void add_precision(const std::string& path, const std::string& field,
                     const nlohmann::json& value) {
    if (path == "mixed_precision") {
      if (!value.is_string()) throw InputError(label_, path, "expected a preset name");
      const nlohmann::json fields = preset(value.get<std::string>());
      if (fields.is_null()) {
        throw InputError(
            label_, path,
            fmt::format("preset {} is not modelled; known: {}",
                        quote_input(value.get<std::string>()), fmt::join(preset_names(), ", ")));
      }
      for (const auto& [dest, v] : fields.items()) args_.values[dest] = MegatronValue{v, path};
      return;
    }
    // A MixedPrecisionConfig's fields carry Megatron's names (fp8, fp8_recipe, ...).
    if (field == "bf16" || field == "fp8" || field == "fp16" || field == "fp8_recipe" ||
        field == "fp8_param_gather" || field == "grad_reduce_in_fp32") {
      args_.values[field == "grad_reduce_in_fp32" ? "grad_reduce_in_bf16" : field] = MegatronValue{
          field == "grad_reduce_in_fp32" && value.is_boolean() ? nlohmann::json(!value.get<bool>())
                                                               : value,
          path};
    } else {
      args_.ignored.push_back(path);
    }
  }

  std::string label_;
  MegatronArgs args_;
};

// Sections are a few levels deep; deeper input is refused rather than recursed into.
void flatten(const nlohmann::json& value, const std::string& path, BridgeReader& reader,
             const std::string& label, int depth = 0) {
  constexpr int kMaxDepth = 8;
  if (value.is_object() && !value.contains("_call_")) {
    if (depth >= kMaxDepth) throw InputError(label, path, "nested deeper than a ConfigContainer");
    for (const auto& [key, item] : value.items()) {
      flatten(item, path.empty() ? key : path + "." + key, reader, label, depth + 1);
    }
    return;
  }
  reader.add(path, value);
}

std::string trim(std::string text) {
  const auto first = text.find_first_not_of(" \t\r");
  if (first == std::string::npos) return "";
  const auto last = text.find_last_not_of(" \t\r");
  return text.substr(first, last - first + 1);
}

// A Python list or number as JSON: ' as ", True/False/None as true/false/null, in one pass
// (a replace per occurrence would be quadratic in a long list).
std::string python_to_json(std::string_view text) {
  std::string json;
  json.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const std::string_view rest = text.substr(i);
    bool replaced = false;
    for (const auto& [from, to] : {std::pair<std::string_view, std::string_view>{"True", "true"},
                                   {"False", "false"},
                                   {"None", "null"}}) {
      if (rest.substr(0, from.size()) == from) {
        json += to;
        i += from.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) json += text[i] == '\'' ? '"' : text[i];
  }
  return json;
}

// A Python or Hydra literal: True/False/None, numbers, quoted strings, lists of them; an
// unquoted word is a string (Hydra's).
nlohmann::json literal(const std::string& text, const std::string& label, int line) {
  if (text == "True" || text == "true") return true;
  if (text == "False" || text == "false") return false;
  if (text == "None" || text == "null") return nullptr;
  if (text.size() >= 2 && (text.front() == '\'' || text.front() == '"') &&
      text.back() == text.front()) {
    return text.substr(1, text.size() - 2);
  }
  // A Python list expression, as moe_layer_freq's [0]*3+[1]*58: kept as text.
  if (text.find_first_of("*+") != std::string::npos &&
      text.find_first_not_of("0123456789[]()*+, ") == std::string::npos) {
    return text;
  }
  if (!text.empty() && (text.front() == '[' || text.front() == '-' ||
                        std::isdigit(static_cast<unsigned char>(text.front())) != 0)) {
    // parse_json_text also refuses a list nested past any config's depth (copying one
    // nested 100 000 deep overflowed the stack).
    try {
      return parse_json_text(python_to_json(text), label);
    } catch (const InputError& error) {
      throw InputError(label, fmt::format("line {}", line),
                       fmt::format("cannot read value {}: {}", quote_input(text), error.reason()));
    }
  }
  if (text.empty() || text.find_first_of("()[]{} ") != std::string::npos) {
    throw InputError(
        label, fmt::format("line {}", line),
        fmt::format("cannot read value {} (a literal is expected)", quote_input(text)));
  }
  return text;
}

void read_override_lines(const std::string& text, const std::string& label, BridgeReader& reader) {
  std::istringstream in(text);
  std::string raw;
  int number = 0;
  while (std::getline(in, raw)) {
    ++number;
    std::string line = raw;
    // A comment after a value: only outside quotes matters for the fields written here.
    if (const auto hash = line.find(" #"); hash != std::string::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty() || line[0] == '#') continue;
    const auto eq = line.find('=');
    if (eq == std::string::npos) {
      throw InputError(
          label, fmt::format("line {}", number),
          fmt::format("expected 'cfg.section.field = value', got {}", quote_input(line)));
    }
    std::string path = trim(line.substr(0, eq));
    const std::string value = trim(line.substr(eq + 1));
    if (!path.empty() &&
        std::string_view("+-*/|&<>!").find(path.back()) != std::string_view::npos) {
      throw InputError(label, fmt::format("line {}", number),
                       fmt::format("only assignments are read, not '{}='", path.back()));
    }
    if (path.rfind("os.environ[", 0) == 0) {  // the allocator, set before CUDA starts
      if (path.find("ALLOC_CONF") != std::string::npos &&
          value.find("expandable_segments:True") != std::string::npos) {
        reader.expandable_segments();
      }
      continue;
    }
    if (path == "cfg") continue;  // cfg = a_recipe_config(): its own fields are not read
    if (path.rfind("cfg.", 0) == 0) path = path.substr(4);
    if (path.rfind('+', 0) == 0) path = path.substr(1);  // Hydra's "+field=value"
    reader.add(path, literal(value, label, number));
  }
}

}  // namespace

StackJob read_megatron_bridge(const std::string& file) {
  const std::string text = read_stack_file(file);
  BridgeReader reader(file);
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string::npos)
    throw InputError(file, "", "the file is empty: no fields to read");
  if (text[first] == '{') {
    flatten(parse_json_text(text, file), "", reader, file);
  } else if (text[first] == '[') {
    throw InputError(file, "", "a JSON list; expected an object of sections ({\"model\": {...}})");
  } else {
    read_override_lines(text, file, reader);
  }
  // Every field absent here takes Megatron-LM's command-line default, as --from-megatron.
  MegatronArgs args = reader.take();
  if (args.values.empty() && args.ignored.empty() && args.unknown.empty()) {
    throw InputError(file, "", "holds no fields (only comments)");
  }
  StackJob job = megatron_stack_job(args, StackFormat::megatron_bridge, file);
  tidy_stack_notes(job);
  return job;
}

}  // namespace shardplan
