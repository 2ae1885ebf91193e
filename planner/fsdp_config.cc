#include "planner/fsdp_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <utility>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"
#include "planner/internal/fsdp_units.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

constexpr NameTable<ShardingStrategy, 4> kStrategies = {{
    {ShardingStrategy::no_shard, "no_shard"},
    {ShardingStrategy::optim, "optim"},
    {ShardingStrategy::optim_grads, "optim_grads"},
    {ShardingStrategy::optim_grads_params, "optim_grads_params"},
}};
constexpr NameTable<OuterStrategy, 2> kOuter = {{
    {OuterStrategy::no_shard, "no_shard"},
    {OuterStrategy::optim, "optim"},
}};
constexpr NameTable<Fp8Recipe, 2> kRecipes = {{
    {Fp8Recipe::delayed, "delayed"},
    {Fp8Recipe::mxfp8, "mxfp8"},
}};
constexpr NameTable<Allocator, 2> kAllocators = {{
    {Allocator::pool, "pool"},
    {Allocator::caching, "caching"},
}};
constexpr NameTable<Optimizer, 2> kOptimizers = {{
    {Optimizer::adam, "adam"},
    {Optimizer::sgd, "sgd"},
}};

template <typename Enum, std::size_t N>
Enum parse_enum(const JsonReader& r, std::string_view key, const NameTable<Enum, N>& table,
                Enum fallback) {
  if (!r.has(key)) return fallback;
  const std::string text = r.string(key);
  if (auto value = value_of(table, text)) return *value;
  r.fail(key, unknown_name_message(std::string(key) + " value", text, names_of(table)));
}

DType dtype_field(const JsonReader& r, std::string_view key, DType fallback) {
  if (!r.has(key)) return fallback;
  return parse_dtype(r.string(key), r.file(), r.path_of(key));
}

}  // namespace

std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text) {
  return value_of(kStrategies, text);
}
std::optional<OuterStrategy> parse_outer_strategy(std::string_view text) {
  return value_of(kOuter, text);
}
std::optional<Allocator> parse_allocator(std::string_view text) {
  return value_of(kAllocators, text);
}
std::vector<std::string> sharding_strategy_names() {
  return names_of(kStrategies);
}
std::vector<std::string> outer_strategy_names() {
  return names_of(kOuter);
}
std::vector<std::string> allocator_names() {
  return names_of(kAllocators);
}

std::string_view sharding_strategy_name(ShardingStrategy s) {
  return name_of(kStrategies, s);
}
std::string_view outer_strategy_name(OuterStrategy s) {
  return name_of(kOuter, s);
}
std::string_view fp8_recipe_name(Fp8Recipe r) {
  return name_of(kRecipes, r);
}
std::string_view allocator_name(Allocator a) {
  return name_of(kAllocators, a);
}
std::string_view optimizer_name(Optimizer o) {
  return name_of(kOptimizers, o);
}

const std::vector<std::string>& fsdp_config_keys() {
  static const std::vector<std::string> keys = {"sharding_strategy",
                                                "dp_shard",
                                                "dp_outer",
                                                "outer_strategy",
                                                "unit_modules",
                                                "bucket_bytes",
                                                "forward_prefetch",
                                                "backward_prefetch",
                                                "async_reduce",
                                                "max_live_grad_buffers",
                                                "recompute",
                                                "micro_batch",
                                                "grad_accum",
                                                "seq_len",
                                                "param_dtype",
                                                "main_param_dtype",
                                                "main_grad_dtype",
                                                "grad_reduce_dtype",
                                                "fp8_param_gather",
                                                "fp8_recipe",
                                                "fine_grained_param_gather",
                                                "keep_fp8_transpose_cache",
                                                "double_buffer",
                                                "allocator",
                                                "optimizer"};
  return keys;
}

namespace {

// Deeper than the model has units is the same as all of them.
constexpr int64_t kMaxDepth = int64_t{1} << 20;

// The range of each whole-number field (the reader checks a file's values against these
// too, with their JSON types).
struct FieldRange {
  const char* key;
  int64_t FsdpConfig::*field;
  int64_t lo, hi;
};
constexpr FieldRange kRanges[] = {
    {"dp_shard", &FsdpConfig::dp_shard, 0, limits::kMaxGpus},  // 0: GPUs ÷ dp_outer
    {"dp_outer", &FsdpConfig::dp_outer, 1, limits::kMaxGpus},
    {"forward_prefetch", &FsdpConfig::forward_prefetch, 0, kMaxDepth},
    {"backward_prefetch", &FsdpConfig::backward_prefetch, 0, kMaxDepth},
    {"max_live_grad_buffers", &FsdpConfig::max_live_grad_buffers, 1, kMaxDepth},
    {"micro_batch", &FsdpConfig::micro_batch, 1, limits::kMaxTokensPerMicroBatch},
    {"grad_accum", &FsdpConfig::grad_accum, 1, limits::kMaxGradAccum},
    {"seq_len", &FsdpConfig::seq_len, 1, limits::kMaxTokensPerMicroBatch},
};

}  // namespace

void check_fsdp_config(const FsdpConfig& c, const std::string& label) {
  auto fail = [&](std::string_view key, const std::string& reason) {
    throw InputError(label, "/" + std::string(key), reason);
  };
  for (const FieldRange& range : kRanges) {
    if (auto reason = out_of_range_reason(c.*range.field, range.lo, range.hi))
      fail(range.key, *reason);
  }
  if (c.bucket_bytes) {
    if (auto reason = out_of_range_reason(*c.bucket_bytes, 1, limits::kMaxPoolBytes))
      fail("bucket_bytes", *reason);
  }
  if (c.micro_batch > limits::kMaxTokensPerMicroBatch / c.seq_len) {
    fail(c.micro_batch > 1 ? "micro_batch" : "seq_len",
         fmt::format("micro_batch × seq_len = {} × {} tokens exceeds {} (2^24) per micro-batch",
                     c.micro_batch, c.seq_len, limits::kMaxTokensPerMicroBatch));
  }
  // Combinations Megatron-FSDP does not support (seeds/002 README).
  const bool zero3 = sharding_traits(c).shard_params;
  if (c.fp8_param_gather && !zero3) {
    fail("fp8_param_gather", fmt::format("needs sharding_strategy optim_grads_params (only "
                                         "ZeRO-3 supports FP8 parameters), got {}",
                                         sharding_strategy_name(c.sharding_strategy)));
  }
  if (c.keep_fp8_transpose_cache && !c.fp8_param_gather) {
    fail("keep_fp8_transpose_cache", "only applies with fp8_param_gather: true");
  }
  if (c.fine_grained_param_gather && !zero3) {
    fail("fine_grained_param_gather",
         "needs sharding_strategy optim_grads_params (parameters are only gathered when "
         "they are sharded)");
  }
  if (c.outer_strategy == OuterStrategy::optim && !zero3) {
    fail("outer_strategy", "optim needs sharding_strategy optim_grads_params");
  }
  if (c.outer_strategy == OuterStrategy::optim && c.dp_outer == 1) {
    fail("outer_strategy", "optim shards over dp_outer, which is 1; set dp_outer > 1");
  }
  if (c.double_buffer && !sharding_traits(c).shard_grads) {
    fail("double_buffer",
         "needs optim_grads or optim_grads_params: other strategies have "
         "no transient unsharded buffers to double-buffer");
  }
  if (c.double_buffer && (c.forward_prefetch > 1 || c.backward_prefetch > 1)) {
    fail(c.forward_prefetch > 1 ? "forward_prefetch" : "backward_prefetch",
         "double_buffer holds two units at a time, so prefetch must be 0 or 1");
  }
  if (c.double_buffer && c.max_live_grad_buffers > 2) {
    fail("max_live_grad_buffers", "double_buffer holds two gradient buffers, so at most 2");
  }
}

FsdpConfig fsdp_config_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  r.expect_only(fsdp_config_keys());
  FsdpConfig c;
  c.sharding_strategy = parse_enum(r, "sharding_strategy", kStrategies, c.sharding_strategy);
  c.dp_shard = r.integer_in_or("dp_shard", 1, limits::kMaxGpus, 0);
  c.dp_outer = r.integer_in_or("dp_outer", 1, limits::kMaxGpus, 1);
  c.outer_strategy = parse_enum(r, "outer_strategy", kOuter, c.outer_strategy);
  if (r.has("unit_modules")) {
    c.unit_modules = r.strings("unit_modules");
    if (c.unit_modules.empty()) r.fail("unit_modules", "must name at least one pattern");
  }
  if (r.has("bucket_bytes"))
    c.bucket_bytes = r.integer_in("bucket_bytes", 1, limits::kMaxPoolBytes);
  c.forward_prefetch = r.integer_in_or("forward_prefetch", 0, kMaxDepth, c.forward_prefetch);
  c.backward_prefetch = r.integer_in_or("backward_prefetch", 0, kMaxDepth, c.backward_prefetch);
  c.async_reduce = r.boolean_or("async_reduce", c.async_reduce);
  c.max_live_grad_buffers =
      r.integer_in_or("max_live_grad_buffers", 1, kMaxDepth, c.max_live_grad_buffers);
  if (r.has("recompute")) {
    c.recompute = parse_recompute(r.string("recompute"), r.file(), r.path_of("recompute"));
  }
  c.micro_batch = r.integer_in_or("micro_batch", 1, limits::kMaxTokensPerMicroBatch, c.micro_batch);
  c.grad_accum = r.integer_in_or("grad_accum", 1, limits::kMaxGradAccum, c.grad_accum);
  c.seq_len = r.integer_in_or("seq_len", 1, limits::kMaxTokensPerMicroBatch, c.seq_len);
  c.param_dtype = dtype_field(r, "param_dtype", c.param_dtype);
  if (dtype_bytes(c.param_dtype) == 1) {
    r.fail("param_dtype",
           "FP8 parameters are kept in bf16/fp16 and gathered in FP8: set "
           "fp8_param_gather instead");
  }
  c.main_param_dtype = dtype_field(r, "main_param_dtype", c.main_param_dtype);
  // Main grads follow the parameter dtype unless set (grad_reduce_in_fp32=False), and
  // the reduction follows the main grads.
  c.main_grad_dtype = dtype_field(r, "main_grad_dtype", c.param_dtype);
  c.grad_reduce_dtype = dtype_field(r, "grad_reduce_dtype", c.main_grad_dtype);
  for (const char* key : {"main_param_dtype", "main_grad_dtype", "grad_reduce_dtype"}) {
    if (r.has(key) && dtype_bytes(parse_dtype(r.string(key), r.file(), r.path_of(key))) == 1) {
      r.fail(key, "must be fp32, bf16 or fp16");
    }
  }
  c.fp8_param_gather = r.boolean_or("fp8_param_gather", c.fp8_param_gather);
  c.fp8_recipe = parse_enum(r, "fp8_recipe", kRecipes, c.fp8_recipe);
  c.fine_grained_param_gather =
      r.boolean_or("fine_grained_param_gather", c.fine_grained_param_gather);
  c.keep_fp8_transpose_cache = r.boolean_or("keep_fp8_transpose_cache", c.keep_fp8_transpose_cache);
  c.double_buffer = r.boolean_or("double_buffer", c.double_buffer);
  c.allocator = parse_enum(r, "allocator", kAllocators, c.allocator);
  c.optimizer = parse_enum(r, "optimizer", kOptimizers, c.optimizer);

  // A JSON-level rule: the key was given where it has no effect.
  if (r.has("fp8_recipe") && !c.fp8_param_gather) {
    r.fail("fp8_recipe", "only applies with fp8_param_gather: true");
  }
  check_fsdp_config(c, label);
  return c;
}

nlohmann::json fsdp_config_to_json(const FsdpConfig& c) {
  nlohmann::json j;
  j["sharding_strategy"] = sharding_strategy_name(c.sharding_strategy);
  if (c.dp_shard > 0) j["dp_shard"] = c.dp_shard;
  j["dp_outer"] = c.dp_outer;
  j["outer_strategy"] = outer_strategy_name(c.outer_strategy);
  if (!c.unit_modules.empty()) j["unit_modules"] = c.unit_modules;
  if (c.bucket_bytes) j["bucket_bytes"] = *c.bucket_bytes;
  j["forward_prefetch"] = c.forward_prefetch;
  j["backward_prefetch"] = c.backward_prefetch;
  j["async_reduce"] = c.async_reduce;
  j["max_live_grad_buffers"] = c.max_live_grad_buffers;
  j["recompute"] = recompute_name(c.recompute);
  j["micro_batch"] = c.micro_batch;
  j["grad_accum"] = c.grad_accum;
  j["seq_len"] = c.seq_len;
  j["param_dtype"] = dtype_name(c.param_dtype);
  j["main_param_dtype"] = dtype_name(c.main_param_dtype);
  j["main_grad_dtype"] = dtype_name(c.main_grad_dtype);
  j["grad_reduce_dtype"] = dtype_name(c.grad_reduce_dtype);
  j["fp8_param_gather"] = c.fp8_param_gather;
  if (c.fp8_param_gather) j["fp8_recipe"] = fp8_recipe_name(c.fp8_recipe);
  j["fine_grained_param_gather"] = c.fine_grained_param_gather;
  j["keep_fp8_transpose_cache"] = c.keep_fp8_transpose_cache;
  j["double_buffer"] = c.double_buffer;
  j["allocator"] = allocator_name(c.allocator);
  j["optimizer"] = optimizer_name(c.optimizer);
  return j;
}

void apply_overrides(nlohmann::json& config, const std::vector<std::string>& assignments) {
  if (config.is_null()) config = nlohmann::json::object();
  // Found by the config fuzz target: a config that is a number or a list reached
  // operator[] with a string key (nlohmann's type_error 305, an internal error).
  if (!config.is_object() && !assignments.empty())
    throw InputError("--set", "", "the config the flags apply to is not a JSON object");
  for (const std::string& assignment : assignments) {
    const auto equals = assignment.find('=');
    if (equals == std::string::npos || equals == 0) {
      throw InputError("--set", assignment, "expected key=value");
    }
    const std::string key = assignment.substr(0, equals);
    const std::string text = assignment.substr(equals + 1);
    const auto& keys = fsdp_config_keys();
    if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
      throw InputError("--set", key, unknown_name_message("config key", key, keys));
    }
    nlohmann::json value = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      // A JSON string must be UTF-8: plans and configs that carry it are written as JSON.
      value = text;
      try {
        (void)value.dump();
      } catch (const nlohmann::json::type_error&) {
        throw InputError("--set", key, "the value is not valid UTF-8 text");
      }
    }
    config[key] = std::move(value);
  }
}

std::string fsdp_config_label(const std::string& file, const std::vector<std::string>& overrides) {
  std::string label = file.empty() ? "config" : file;
  if (!overrides.empty()) label += " (with flags)";
  return label;
}

FsdpConfig load_fsdp_config(const std::string& file, const std::vector<std::string>& overrides) {
  nlohmann::json json = file.empty() ? nlohmann::json::object() : read_json_file(file);
  if (!json.is_object()) throw InputError(file, "/", "expected a JSON object of config fields");
  apply_overrides(json, overrides);
  return fsdp_config_from_json(json, fsdp_config_label(file, overrides));
}

FsdpConfig resolve_fsdp_config(const FsdpConfig& config, const ModelSpec& model,
                               const ClusterSpec& cluster, const std::string& label) {
  FsdpConfig c = config;
  const int64_t gpus = cluster.num_gpus;
  if (c.dp_shard == 0) {
    if (gpus % c.dp_outer != 0) {
      throw InputError(
          label, "/dp_outer",
          fmt::format("{} GPUs cannot be split into dp_outer = {} groups", gpus, c.dp_outer));
    }
    c.dp_shard = gpus / c.dp_outer;
  }
  if (c.dp_shard * c.dp_outer != gpus) {
    throw InputError(
        label, "/dp_shard",
        fmt::format("dp_shard × dp_outer = {} × {} = {} must equal the GPU count "
                    "{} ({} on {})",
                    c.dp_shard, c.dp_outer, c.dp_shard * c.dp_outer, gpus,
                    cluster.nodes() == 1 ? "1 node" : fmt::format("{} nodes", cluster.nodes()),
                    cluster.name));
  }
  // Megatron-FSDP gathers MXFP8 weights module by module inside a unit (seeds/004, PR
  // #4181); the planner issues one all-gather per parameter group and cannot plan it.
  if (c.fine_grained_param_gather) {
    throw InputError(label, "/fine_grained_param_gather",
                     "per-module all-gathers inside a unit (Megatron-FSDP PR #4181, MXFP8) are "
                     "not modelled: shardplan plans one all-gather per parameter group of a "
                     "unit; set it to false (with finer units, unit_modules, for a similar "
                     "memory trade-off)");
  }
  if (c.fp8_param_gather && cluster.gpu.fp8_dense_flops <= 0) {
    throw InputError(label, "/fp8_param_gather",
                     fmt::format("{} has no FP8 tensor cores", cluster.gpu.name));
  }
  if (model.max_seq_len > 0 && c.seq_len > model.max_seq_len) {
    throw InputError(label, "/seq_len",
                     fmt::format("{} exceeds the {} positions {} was built with", c.seq_len,
                                 model.max_seq_len, model.name));
  }
  // The plan grows with units × micro-batches; refuse up front what would not fit in memory.
  const auto units = static_cast<int64_t>(find_fsdp_units(model, c.unit_modules, label).size());
  if (c.grad_accum > limits::kMaxUnitMicroBatches / std::max<int64_t>(units, 1)) {
    throw InputError(
        label, "/grad_accum",
        fmt::format("{} micro-batches of {} FSDP units would make a plan of {} unit passes, "
                    "more than the {} shardplan plans at once (about 2 GB); simulate fewer "
                    "micro-batches and scale: the step time grows about linearly with them",
                    c.grad_accum, units, c.grad_accum * units, limits::kMaxUnitMicroBatches));
  }
  return c;
}

}  // namespace shardplan
