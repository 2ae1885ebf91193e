// torchtitan's job config: the TOML schema of torchtitan v0.2.x
// (torchtitan/config/job_config.py @238fa99, the last commit before its configs became
// Python; v0.2.2 has the same file). Keys torchtitan would reject are listed as unknown.
#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <set>

#include "interop/internal/stack_text.h"
#include "interop/internal/torchtitan.h"
#include "interop/stack_job.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

constexpr TorchtitanFlavour kFlavours[] = {
    {"llama3", "debugmodel", "llama3-debugmodel"},  // not in the zoo: built below
    {"llama3", "8B", "llama3-8b"},
    {"llama3", "70B", "llama3-70b"},
    {"llama3", "405B", "llama3.1-405b"},
    {"llama3", "8B_flex", "llama3-8b"},
    {"llama3", "8B_varlen", "llama3-8b"},
    {"deepseek_v3", "16B", "deepseek-v3-16b"},
    {"deepseek_v3", "671B", "deepseek-v3"},
    {"qwen3", "30B-A3B", "qwen3-30b-a3b"},
};

// The fields of each section read or knowingly ignored (job_config.py @238fa99).
struct Section {
  std::string_view name;
  std::vector<std::string> keys;
};

const std::vector<Section>& sections() {
  static const std::vector<Section> table = {
      {"model",
       {"name", "flavor", "hf_assets_path", "tokenizer_path", "converters",
        "print_after_conversion"}},
      {"training",
       {"local_batch_size", "global_batch_size", "seq_len", "max_norm", "steps",
        "enable_cpu_offload", "dtype", "mixed_precision_param", "mixed_precision_reduce", "gc_freq",
        "gc_debug", "dataset", "dataset_path", "dataloader"}},
      {"parallelism",
       {"data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "fsdp_reshard_after_forward",
        "tensor_parallel_degree",
        "disable_loss_parallel",
        "enable_async_tensor_parallel",
        "pipeline_parallel_degree",
        "module_fqns_per_model_part",
        "pipeline_parallel_first_stage_less_layers",
        "pipeline_parallel_last_stage_less_layers",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_schedule",
        "pipeline_parallel_schedule_csv",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_expert_parallel_overlap",
        "context_parallel_degree",
        "context_parallel_load_balancer",
        "context_parallel_rotate_method",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "expert_parallel_comm_backend"}},
      {"activation_checkpoint",
       {"mode", "selective_ac_option", "per_op_sac_force_recompute_mm_shapes_by_fqns", "early_stop",
        "memory_budget", "visualize_memory_budget_pareto", "preserve_rng_state",
        "determinism_check", "debug"}},
      {"compile", {"enable", "components", "backend"}},
      {"optimizer",
       {"name", "lr", "beta1", "beta2", "eps", "weight_decay", "implementation",
        "early_step_in_backward"}},
  };
  return table;
}

// Sections with no bearing on memory or step time.
const std::vector<std::string>& ignored_sections() {
  static const std::vector<std::string> names = {
      "job",  "profiling",         "metrics",         "lr_scheduler", "checkpoint", "validation",
      "comm", "memory_estimation", "fault_tolerance", "experimental", "debug"};
  return names;
}

class TomlReader {
 public:
  TomlReader(const toml::table& root, std::string file) : root_(root), file_(std::move(file)) {}

  // Records the key as read, so the ones left can be listed (check_schema).
  const toml::node* find(std::string_view section, std::string_view key) const {
    const toml::table* table = root_[section].as_table();
    const toml::node* node = table == nullptr ? nullptr : table->get(key);
    if (node != nullptr) used_.insert(std::string(section) + "." + std::string(key));
    return node;
  }
  bool used(std::string_view section, std::string_view key) const {
    return used_.count(std::string(section) + "." + std::string(key)) > 0;
  }
  [[noreturn]] void fail(std::string_view section, std::string_view key,
                         const std::string& reason) const {
    throw InputError(file_, fmt::format("[{}] {}", section, key), reason);
  }
  std::optional<int64_t> integer(std::string_view section, std::string_view key) const {
    const toml::node* node = find(section, key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_integer()) fail(section, key, "expected an integer");
    return node->value<int64_t>();
  }
  std::optional<bool> boolean(std::string_view section, std::string_view key) const {
    const toml::node* node = find(section, key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_boolean()) fail(section, key, "expected true or false");
    return node->value<bool>();
  }
  std::optional<std::string> text(std::string_view section, std::string_view key) const {
    const toml::node* node = find(section, key);
    if (node == nullptr) return std::nullopt;
    if (!node->is_string()) fail(section, key, "expected a string");
    return node->value<std::string>();
  }
  std::vector<std::string> texts(std::string_view section, std::string_view key) const {
    const toml::node* node = find(section, key);
    std::vector<std::string> out;
    if (node == nullptr) return out;
    const toml::array* array = node->as_array();
    if (array == nullptr) fail(section, key, "expected a list of strings");
    for (const toml::node& item : *array) {
      if (!item.is_string()) fail(section, key, "expected a list of strings");
      out.push_back(*item.value<std::string>());
    }
    return out;
  }
  const toml::table& root() const { return root_; }
  const std::string& file() const { return file_; }

 private:
  const toml::table& root_;
  std::string file_;
  mutable std::set<std::string> used_;
};

int64_t positive(const TomlReader& t, std::string_view section, std::string_view key,
                 int64_t fallback) {
  const int64_t v = t.integer(section, key).value_or(fallback);
  if (v < 1) t.fail(section, key, fmt::format("must be positive, got {}", v));
  return v;
}

// A parallel degree: at least 1 and at most the GPUs a job may have (models/limits.h).
int64_t degree(const TomlReader& t, std::string_view section, std::string_view key) {
  const int64_t v = t.integer(section, key).value_or(1);
  if (const auto reason = out_of_range_reason(v, 1, limits::kMaxGpus))
    t.fail(section, key, *reason);
  return v;
}

// A setting torchtitan types as a Literal (job_config.py @238fa99): any other value is
// refused there, so it is here, with the values it takes.
std::string one_of(const TomlReader& t, std::string_view section, std::string_view key,
                   std::initializer_list<std::string_view> accepted, std::string_view fallback) {
  const std::string value = t.text(section, key).value_or(std::string(fallback));
  if (std::find(accepted.begin(), accepted.end(), value) == accepted.end()) {
    t.fail(section, key,
           fmt::format("{} is not one of torchtitan's values: {}", quote_input(value),
                       fmt::join(accepted, ", ")));
  }
  return value;
}

// After reading: sections and keys outside the schema (torchtitan raises on them) are
// listed as unknown; those in it that the plan does not depend on, as ignored.
void check_schema(const TomlReader& t, StackJob& job) {
  UnknownNames unknown;
  for (const auto& [name, node] : t.root()) {
    const std::string section(name.str());
    const auto known = std::find_if(sections().begin(), sections().end(),
                                    [&](const Section& s) { return s.name == section; });
    if (known == sections().end()) {
      const auto& skipped = ignored_sections();
      if (std::find(skipped.begin(), skipped.end(), section) != skipped.end()) {
        job.ignored.push_back("[" + section + "]");
      } else if (section != "quantize" && section != "float8" && section != "mx") {
        unknown.add("[" + section + "]");
      }
      continue;
    }
    if (!node.is_table()) t.fail(section, "", "expected a table");
    for (const auto& [key_name, value] : *node.as_table()) {
      const std::string key(key_name.str());
      if (std::find(known->keys.begin(), known->keys.end(), key) == known->keys.end()) {
        unknown.add(fmt::format("[{}] {}", section, key),
                    [&] { return closest_name(key, known->keys); });
      } else if (!t.used(section, key)) {
        job.ignored.push_back(fmt::format("[{}] {}", section, key));
      }
    }
  }
  unknown.append_to(job.unknown);
}

void read_model(const TomlReader& t, StackJob& job) {
  const std::string name = t.text("model", "name").value_or("llama3");
  const std::string flavor = t.text("model", "flavor").value_or("debugmodel");
  const auto flavour = torchtitan_flavour(name, flavor);
  if (!flavour) {
    t.fail("model", "flavor",
           fmt::format("{} flavour {} has no built-in shape in shardplan; known: {}",
                       quote_input(name), quote_input(flavor), torchtitan_flavour_list()));
  }
  if (flavour->zoo == "llama3-debugmodel") {
    // torchtitan's default flavour (models/llama3/__init__.py @238fa99): dim 256, 6 layers,
    // 16 heads, vocabulary 2048; the FFN 2·4·256/3 = 682 rounded up to multiple_of 256.
    job.model = {{"name", "llama3-debugmodel"},
                 {"family", "transformer"},
                 {"source",
                  "torchtitan's llama3 debugmodel flavour (torchtitan/models/llama3/"
                  "__init__.py @238fa99)"},
                 {"vocab_size", 2048},
                 {"hidden_size", 256},
                 {"num_layers", 6},
                 {"num_heads", 16},
                 {"ffn_hidden_size", 768},
                 {"mlp", "swiglu"},
                 {"norm", "rmsnorm"},
                 {"tie_embeddings", false},
                 {"bias", false},
                 {"position_embedding", "rope"}};
  } else {
    job.zoo_model = std::string(flavour->zoo);
  }
  if (flavor.find('_') != std::string::npos) {
    job.not_modelled.push_back(
        fmt::format("[model] flavor {}: its attention kernel is modelled as SDPA's", flavor));
  }
}

void read_parallelism(const TomlReader& t, StackJob& job) {
  nlohmann::json& c = job.config;
  const char* s = "parallelism";
  if (degree(t, s, "pipeline_parallel_degree") > 1) {
    t.fail(s, "pipeline_parallel_degree", "pipeline parallelism is not modelled by shardplan");
  }
  const int64_t replicate = degree(t, s, "data_parallel_replicate_degree");
  const int64_t shard = t.integer(s, "data_parallel_shard_degree").value_or(-1);
  if (shard != -1 && out_of_range_reason(shard, 1, limits::kMaxGpus)) {
    t.fail(
        s, "data_parallel_shard_degree",
        fmt::format("must be -1 (the GPUs left) or in [1, {}], got {}", limits::kMaxGpus, shard));
  }
  const int64_t tp = degree(t, s, "tensor_parallel_degree");
  const int64_t cp = degree(t, s, "context_parallel_degree");
  c["tp"] = tp;
  c["cp"] = cp;
  // FSDP is applied when dp_shard > 1 or cp > 1 (parallel_dims.py); otherwise the replicas
  // run DDP.
  if (shard == 1 && cp == 1) {
    c["sharding_strategy"] = "no_shard";
    c["dp_shard"] = replicate;
    job.not_modelled.push_back(
        "[parallelism] data_parallel_shard_degree 1: without FSDP torchtitan keeps the "
        "weights in [training] dtype under autocast; modelled as bf16 weights with fp32 "
        "main weights");
  } else {
    c["dp_outer"] = replicate;
    if (shard > 0) c["dp_shard"] = shard;
    const std::string reshard =
        one_of(t, s, "fsdp_reshard_after_forward", {"default", "always", "never"}, "default");
    if (reshard == "never") c["sharding_strategy"] = "optim_grads";
  }
  if (shard > 0) {
    // Each degree is at most 2^20; their product is checked against the same bound (four
    // of them could pass int64).
    int64_t gpus = replicate;
    for (const int64_t d : {shard, cp, tp}) {
      if (__builtin_mul_overflow(gpus, d, &gpus) || gpus > limits::kMaxGpus) {
        t.fail(s, "data_parallel_shard_degree",
               fmt::format("the degrees (replicate {} × shard {} × cp {} × tp {}) ask for more "
                           "than the {} GPUs a job may have",
                           replicate, shard, cp, tp, limits::kMaxGpus));
      }
    }
    job.gpus = gpus;
  }
  if (t.boolean(s, "disable_loss_parallel").value_or(false)) c["vocab_parallel_loss"] = false;
  if (t.boolean(s, "enable_async_tensor_parallel").value_or(false)) c["tp_comm_overlap"] = true;
  const std::string rotate =
      one_of(t, s, "context_parallel_rotate_method", {"allgather", "alltoall"}, "allgather");
  if (cp > 1) c["cp_comm"] = rotate == "alltoall" ? "a2a" : "all_gather";
  const int64_t ep = degree(t, s, "expert_parallel_degree");
  const int64_t etp = degree(t, s, "expert_tensor_parallel_degree");
  const std::string backend =
      one_of(t, s, "expert_parallel_comm_backend", {"standard", "deepep"}, "standard");
  if (ep > 1) {
    c["ep"] = ep;
    // torchtitan dispatches with all-to-all (or DeepEP); etp is 1 or tp.
    c["etp"] = etp;
    c["moe_dispatcher"] = backend == "deepep" ? "deepep" : "alltoall";
  }
}

void read_training(const TomlReader& t, StackJob& job) {
  nlohmann::json& c = job.config;
  const char* s = "training";
  c["micro_batch"] = positive(t, s, "local_batch_size", 8);
  c["seq_len"] = positive(t, s, "seq_len", 2048);
  // torchtitan's default -1: local_batch_size × the data-parallel ranks, one micro-batch.
  if (const auto global = t.integer(s, "global_batch_size"); global && *global != -1) {
    if (*global < 1) {
      t.fail(s, "global_batch_size", fmt::format("must be positive or -1, got {}", *global));
    }
    job.global_batch = *global;
  }
  if (one_of(t, s, "dtype", {"bfloat16", "float32"}, "float32") == "bfloat16") {
    c["main_param_dtype"] = "bf16";
  }
  if (one_of(t, s, "mixed_precision_param", {"bfloat16", "float32"}, "bfloat16") == "float32") {
    c["param_dtype"] = "fp32";
  }
  one_of(t, s, "mixed_precision_reduce", {"float32"}, "float32");
  if (t.boolean(s, "enable_cpu_offload").value_or(false)) {
    job.not_modelled.push_back(
        "[training] enable_cpu_offload: FSDP's CPU offload of "
        "parameters, gradients and optimizer states is not modelled");
  }
}

void read_checkpointing(const TomlReader& t, StackJob& job) {
  nlohmann::json& c = job.config;
  const char* s = "activation_checkpoint";
  // torchtitan's defaults: selective, every second layer.
  const std::string mode =
      one_of(t, s, "mode", {"selective", "full", "memory_budget", "none"}, "selective");
  if (mode == "none" || mode == "full") {
    c["recompute"] = mode;
  } else if (mode == "selective") {
    const std::string option = t.text(s, "selective_ac_option").value_or("2");
    if (option == "op") {
      c["recompute"] = "sac_op";
    } else if (!option.empty() && option.find_first_not_of("0123456789") == std::string::npos &&
               option.size() < 6 && std::stoll(option) > 0) {
      c["recompute"] = "sac_layer";
      c["recompute_every"] = std::stoll(option);
    } else {
      t.fail(s, "selective_ac_option",
             fmt::format("{} is not 'op' or a positive integer", quote_input(option)));
    }
  } else {  // memory_budget
    c["recompute"] = "sac_op";
    job.not_modelled.push_back(
        "[activation_checkpoint] mode memory_budget: modelled as the "
        "per-op policy (\"op\")");
  }
}

void read_compile(const TomlReader& t, StackJob& job) {
  nlohmann::json& c = job.config;
  const bool enabled = t.boolean("compile", "enable").value_or(false);
  std::vector<std::string> components = t.texts("compile", "components");
  if (t.find("compile", "components") == nullptr) components = {"model", "loss"};
  const auto has = [&](const char* name) {
    return std::find(components.begin(), components.end(), name) != components.end();
  };
  const bool model = enabled && has("model");
  c["stack"] = model ? "torch-compile" : "torch-eager";
  // The loss is compiled on torch-compile unless left out; eager upcasts the logits.
  if (model && !has("loss")) c["loss_kernel"] = "upcast";
  if (!model && enabled && has("loss")) c["loss_kernel"] = "compiled";
  // torchtitan's run_train.sh launches with PYTORCH_ALLOC_CONF="expandable_segments:True".
  c["allocator"] = "expandable";
}

void read_float8(const TomlReader& t, StackJob& job) {
  nlohmann::json& c = job.config;
  const std::vector<std::string> converters = t.texts("model", "converters");
  const auto has = [&](std::initializer_list<const char*> names) {
    return std::any_of(names.begin(), names.end(), [&](const char* n) {
      return std::find(converters.begin(), converters.end(), n) != converters.end();
    });
  };
  // The 405B TOML says "float8" while the registry at 238fa99 knows
  // "quantize.linear.float8" (parallelize.py tests the short name): both count.
  const bool float8 = has({"float8", "quantize.linear.float8"});
  const bool mx = has({"mx", "quantize.linear.mx"});
  for (const std::string& name : converters) {
    if (name != "float8" && name != "quantize.linear.float8" && name != "mx" &&
        name != "quantize.linear.mx") {
      job.not_modelled.push_back(
          fmt::format("[model] converters {}: not modelled", shown_input(name)));
    }
  }
  if (!float8 && !mx) {
    for (const char* section : {"quantize", "float8", "mx"}) {
      if (t.root()[section].is_table()) {
        job.ignored.push_back(fmt::format("[{}] (no [model] converters entry uses it)", section));
      }
    }
    return;
  }
  c["fp8"] = true;
  if (mx) {
    c["fp8_recipe"] = "mxfp8";
    return;
  }
  // [quantize.linear.float8] (v0.2.x) or the older [float8].
  const toml::node* section = t.root().at_path("quantize.linear.float8").node();
  const bool legacy = section == nullptr && t.root()["float8"].is_table();
  const std::string prefix = legacy ? "float8" : "quantize.linear.float8";
  const toml::table* table =
      legacy ? t.root()["float8"].as_table() : (section != nullptr ? section->as_table() : nullptr);
  if (table == nullptr) return;
  if (const auto* gather = table->get("enable_fsdp_float8_all_gather")) {
    if (!gather->is_boolean())
      t.fail(prefix, "enable_fsdp_float8_all_gather", "expected true or false");
    c["fp8_param_gather"] = *gather->value<bool>();
  }
  if (const auto* recipe = table->get("recipe_name")) {
    const std::optional<std::string> name = recipe->value<std::string>();
    constexpr std::string_view kRecipes[] = {"tensorwise", "rowwise", "rowwise_with_gw_hp"};
    if (!name || std::find(std::begin(kRecipes), std::end(kRecipes), *name) == std::end(kRecipes)) {
      t.fail(prefix, "recipe_name",
             fmt::format("{} is not one of torchtitan's values: {}",
                         name ? quote_input(*name) : "a non-string", fmt::join(kRecipes, ", ")));
    }
    if (*name != "tensorwise") {
      job.not_modelled.push_back(
          fmt::format("[{}] recipe_name {}: modelled as per-tensor scaling", prefix, *name));
    }
  }
}

void read_optimizer(const TomlReader& t, StackJob& job) {
  if (t.boolean("optimizer", "early_step_in_backward").value_or(false)) {
    job.not_modelled.push_back(
        "[optimizer] early_step_in_backward: stepping each parameter "
        "as its gradient arrives is not modelled");
  }
  const std::string name = t.text("optimizer", "name").value_or("AdamW");
  if (name != "AdamW" && name != "Adam") {
    job.not_modelled.push_back(fmt::format(
        "[optimizer] name {}: modelled as AdamW (two states per parameter)", shown_input(name)));
  }
}

}  // namespace

std::optional<TorchtitanFlavour> torchtitan_flavour(std::string_view name,
                                                    std::string_view flavor) {
  for (const TorchtitanFlavour& f : kFlavours) {
    if (f.name == name && f.flavor == flavor) return f;
  }
  return std::nullopt;
}

std::optional<TorchtitanFlavour> torchtitan_flavour_of(std::string_view zoo) {
  for (const TorchtitanFlavour& f : kFlavours) {
    if (f.zoo == zoo) return f;
  }
  return std::nullopt;
}

std::string torchtitan_flavour_list() {
  std::vector<std::string> names;
  for (const TorchtitanFlavour& f : kFlavours)
    names.push_back(fmt::format("{} {}", f.name, f.flavor));
  return fmt::format("{}", fmt::join(names, ", "));
}

StackJob read_torchtitan_toml(const std::string& file) {
  const std::string text = read_stack_file(file);
  toml::table root;
  try {
    root = toml::parse(text, file);
  } catch (const toml::parse_error& error) {
    const auto& where = error.source().begin;
    throw InputError(file, fmt::format("line {}, column {}", where.line, where.column),
                     std::string(error.description()));
  }
  if (root.empty()) {
    // torchtitan would train its debug model; an empty file is far likelier a mistake.
    throw InputError(file, "", "holds no settings (an empty TOML); nothing to read");
  }
  const TomlReader t(root, file);
  StackJob job;
  job.format = StackFormat::torchtitan;
  job.label = file;
  read_model(t, job);
  read_parallelism(t, job);
  read_training(t, job);
  read_checkpointing(t, job);
  read_compile(t, job);
  read_float8(t, job);
  read_optimizer(t, job);
  check_schema(t, job);
  tidy_stack_notes(job);
  return job;
}

}  // namespace shardplan
