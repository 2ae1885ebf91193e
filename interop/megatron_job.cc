// What a Megatron-LM argument set means for shardplan: the model, the mesh and the
// Megatron-FSDP config, with every argument accounted for. Names and defaults are
// Megatron-LM's at d98e8a6 (megatron/training/arguments.py and the dataclasses it
// generates flags from); docs/user-guide.md "From your training script" lists the mapping.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "interop/internal/arg_reader.h"
#include "interop/internal/emit.h"
#include "interop/internal/megatron.h"
#include "interop/internal/megatron_model.h"
#include "interop/internal/stack_text.h"
#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/module_cost.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

// Arguments with no bearing on memory or step time: optimizer hyper-parameters, data,
// logging, checkpoints, initialisation, RNG (by dest prefix).
bool ignored_dest(const std::string& dest) {
  static const std::vector<std::string> prefixes = {"lr",
                                                    "min_lr",
                                                    "decoupled_",
                                                    "adam_",
                                                    "weight_decay",
                                                    "clip_grad",
                                                    "log_",
                                                    "logging_",
                                                    "save",
                                                    "load",
                                                    "eval_",
                                                    "data_",
                                                    "split",
                                                    "tokenizer_model",
                                                    "vocab_file",
                                                    "merge_file",
                                                    "tensorboard",
                                                    "wandb",
                                                    "seed",
                                                    "init_method",
                                                    "rotary_",
                                                    "train_iters",
                                                    "train_samples",
                                                    "exit_",
                                                    "distributed_timeout",
                                                    "mock_data",
                                                    "num_workers",
                                                    "tiktoken_",
                                                    "create_attention_mask",
                                                    "mmap_bin_files",
                                                    "check_for_nan",
                                                    "use_mcore_models",
                                                    "apply_layernorm_1p",
                                                    "layernorm_epsilon",
                                                    "norm_epsilon",
                                                    "layernorm_zero_centered_gamma",
                                                    "deprecated_",
                                                    "init_model_with_meta_device",
                                                    "fsdp_manual_registration",
                                                    "fp8_amax",
                                                    "fp8_margin",
                                                    "calculate_per_token_loss",
                                                    "distributed_backend",
                                                    "profile",
                                                    "record_memory_history",
                                                    "memory_snapshot",
                                                    "timing_log",
                                                    "finetune",
                                                    "no_load",
                                                    "override_opt_param_scheduler",
                                                    "use_checkpoint_opt_param_scheduler",
                                                    "start_weight_decay",
                                                    "end_weight_decay",
                                                    "sgd_momentum",
                                                    "initial_loss_scale",
                                                    "loss_scale",
                                                    "hysteresis",
                                                    "min_loss_scale",
                                                    "tokenizer_type",
                                                    "vocab_extra_ids",
                                                    "max_position_embeddings",
                                                    "manual_gc",
                                                    "ckpt",
                                                    "async_save",
                                                    "dist_ckpt",
                                                    "eod_mask_loss",
                                                    "reset_",
                                                    "object_storage",
                                                    "use_dist_ckpt",
                                                    "auto_detect_ckpt_format",
                                                    "rerun_",
                                                    "non_persistent"};
  return std::any_of(prefixes.begin(), prefixes.end(),
                     [&](const std::string& p) { return dest.rfind(p, 0) == 0; });
}

// A parallel size: at least 1 and at most the GPUs a job may have (models/limits.h), so
// products of sizes stay far inside int64.
int64_t degree(ArgReader& r, const std::string& dest) {
  const int64_t value = r.integer_or(dest, 1);
  if (const auto reason = out_of_range_reason(value, 1, limits::kMaxGpus)) r.fail(dest, *reason);
  return value;
}

// A count that must be positive (a batch, a sequence length); the planner bounds it
// further.
std::optional<int64_t> positive_count(ArgReader& r, const std::string& dest) {
  const std::optional<int64_t> value = r.integer(dest);
  if (value && *value < 1) r.fail(dest, fmt::format("must be positive, got {}", *value));
  return value;
}

void read_mesh(ArgReader& r, nlohmann::json& c, int64_t tp, bool moe) {
  if (degree(r, "pipeline_model_parallel_size") > 1) {
    r.fail("pipeline_model_parallel_size",
           "pipeline parallelism is not modelled by shardplan (set it to 1 to plan the FSDP "
           "part, or plan one stage's layers as its own model)");
  }
  c["tp"] = tp;
  const int64_t cp = degree(r, "context_parallel_size");
  c["cp"] = cp;
  // Megatron turns sequence parallelism off at tp 1 (validate_args); its default is off.
  const bool sp = r.flag("sequence_parallel");
  if (tp > 1) c["sequence_parallel"] = sp;
  c["tp_comm_overlap"] = r.flag("tp_comm_overlap") && tp > 1 && sp;
  const std::vector<std::string> cp_comm = r.texts("cp_comm_type");
  if (!cp_comm.empty() && cp > 1) {
    const std::string& kind = cp_comm.front();
    if (std::any_of(cp_comm.begin(), cp_comm.end(), [&](const auto& k) { return k != kind; })) {
      r.not_modelled("cp_comm_type",
                     "one kind per layer is not modelled; all layers use the first");
    }
    if (kind == "p2p" || kind == "a2a") {
      c["cp_comm"] = kind;
    } else if (kind == "allgather" || kind == "all_gather") {
      c["cp_comm"] = "all_gather";
    } else {
      c["cp_comm"] = "p2p";
      r.not_modelled("cp_comm_type", "hierarchical a2a+p2p is modelled as p2p");
    }
  }
  if (!moe) {
    // Megatron ignores the expert settings without experts; so does the plan.
    for (const char* dest :
         {"expert_model_parallel_size", "expert_tensor_parallel_size", "moe_token_dispatcher_type",
          "moe_flex_dispatcher_backend", "moe_expert_capacity_factor"}) {
      r.use(dest);
    }
    return;
  }
  c["ep"] = degree(r, "expert_model_parallel_size");
  if (r.has("expert_tensor_parallel_size")) c["etp"] = degree(r, "expert_tensor_parallel_size");
  if (const auto dispatcher = r.text("moe_token_dispatcher_type")) {
    if (*dispatcher == "flex") {
      const std::string backend = r.text("moe_flex_dispatcher_backend").value_or("deepep");
      if (backend != "deepep" && backend != "hybridep") {
        r.not_modelled("moe_flex_dispatcher_backend", "modelled as deepep");
      }
      c["moe_dispatcher"] = backend == "hybridep" ? "hybridep" : "deepep";
    } else if (*dispatcher == "allgather" || *dispatcher == "alltoall") {
      c["moe_dispatcher"] = *dispatcher;
    } else {
      r.fail("moe_token_dispatcher_type",
             fmt::format("{} is not allgather, alltoall or flex", quote_input(*dispatcher)));
    }
  }
  if (const auto capacity = r.number("moe_expert_capacity_factor")) {
    c["moe_capacity_factor"] = *capacity;
  }
}

void read_fsdp(ArgReader& r, nlohmann::json& c, bool bridge) {
  if (r.flag("use_megatron_fsdp")) {
    // The command line's default is optim_grads_params (arguments.py); a Bridge config
    // keeps DistributedDataParallelConfig's, no_shard.
    c["sharding_strategy"] = r.text("data_parallel_sharding_strategy")
                                 .value_or(bridge ? "no_shard" : "optim_grads_params");
    r.use("use_distributed_optimizer");  // forced on by Megatron-FSDP v1
  } else {
    if (r.flag("use_torch_fsdp2")) {
      c["sharding_strategy"] = "optim_grads_params";
      r.not_modelled("use_torch_fsdp2",
                     "modelled as Megatron-FSDP ZeRO-3 with Transformer Engine modules");
    } else {
      const bool distributed = r.flag("use_distributed_optimizer");
      c["sharding_strategy"] = distributed ? "optim" : "no_shard";
      r.not_modelled("use_megatron_fsdp",
                     std::string("absent: Megatron's DDP is modelled as Megatron-FSDP's ") +
                         (distributed ? "optim (distributed optimizer)" : "no_shard"));
    }
    r.use("data_parallel_sharding_strategy");
  }
  const int64_t instances = degree(r, "num_distributed_optimizer_instances");
  c["dp_outer"] = instances;
  if (const auto outer = r.text("outer_dp_sharding_strategy")) c["outer_strategy"] = *outer;
  // --use-nccl-ub turns on fsdp_double_buffer (validate_args).
  const bool double_buffer = r.flag("fsdp_double_buffer");
  const bool nccl_ub = r.flag("nccl_ub");
  c["double_buffer"] = double_buffer || nccl_ub;
  // Without overlap, Megatron-FSDP reduces after the backward and gathers on demand. Bridge's
  // CommOverlapConfig turns both on with data parallelism (comm_overlap.py), as its recipes do.
  c["async_reduce"] = r.flag("overlap_grad_reduce", bridge);
  if (!r.flag("overlap_param_gather", bridge)) {
    c["forward_prefetch"] = 0;
    c["backward_prefetch"] = 0;
  }
  c["fine_grained_param_gather"] = r.flag("megatron_fsdp_enable_fine_grained_param_gather");
  c["keep_fp8_transpose_cache"] = r.flag("keep_fp8_transpose_cache");
  if (r.has("suggested_communication_unit_size")) {
    r.not_modelled("suggested_communication_unit_size",
                   "Megatron-FSDP's grouping of small parameter groups into one collective is "
                   "not modelled (each FSDP unit is gathered on its own)");
  }
  if (const auto layers = r.integer("cpu_offloading_num_layers"); layers && *layers > 0) {
    c["offload_activations"] = *layers;
  }
  const std::string optimizer = r.text("optimizer").value_or("adam");
  if (optimizer == "adam" || optimizer == "sgd") {
    c["optimizer"] = optimizer;
  } else {
    c["optimizer"] = "adam";
    r.not_modelled("optimizer", "modelled as Adam (two states per parameter)");
  }
}

std::string dtype_option(ArgReader& r, const std::string& dest, const std::string& fallback,
                         const std::string& automatic) {
  const std::string value = r.text(dest).value_or(fallback);
  if (value == "auto") return automatic;
  if (value != "fp32" && value != "bf16" && value != "fp16") {
    r.fail(dest, fmt::format("{} is not fp32, bf16, fp16 or auto", quote_input(value)));
  }
  return value;
}

void read_precision(ArgReader& r, nlohmann::json& c, bool fsdp) {
  const std::string param = r.flag("bf16") ? "bf16" : r.flag("fp16") ? "fp16" : "fp32";
  c["param_dtype"] = param;
  if (fsdp) {
    // Megatron-FSDP's MixedPrecisionPolicy (mcore_fsdp_adapter.py): main weights fp32 by
    // default, main gradients "auto" = the parameters' dtype, the reduction in the main
    // gradients' dtype.
    c["main_param_dtype"] = dtype_option(r, "megatron_fsdp_main_params_dtype", "fp32", param);
    const std::string grads = dtype_option(r, "megatron_fsdp_main_grads_dtype", "auto", param);
    c["main_grad_dtype"] = grads;
    c["grad_reduce_dtype"] = dtype_option(r, "megatron_fsdp_grad_comm_dtype", "auto", grads);
    r.use("grad_reduce_in_bf16");
  } else {
    // DDP: bf16 training accumulates and reduces gradients in fp32 unless
    // --grad-reduce-in-bf16 (validate_args).
    const std::string grads = param == "bf16" && !r.flag("grad_reduce_in_bf16") ? "fp32" : param;
    if (r.has("main_grads_dtype")) {
      r.not_modelled("main_grads_dtype",
                     "DDP's gradient dtype is modelled from --bf16 and "
                     "--grad-reduce-in-bf16 only");
    }
    c["main_param_dtype"] = "fp32";
    c["main_grad_dtype"] = grads;
    c["grad_reduce_dtype"] = grads;
  }
  if (const auto format = r.text("fp8")) {  // --fp8-format
    if (*format != "e4m3" && *format != "hybrid") {
      r.fail("fp8", fmt::format("{} is not e4m3 or hybrid", quote_input(*format)));
    }
    c["fp8"] = true;
    // TransformerConfig.fp8_recipe's default is delayed scaling.
    const std::string recipe = r.text("fp8_recipe").value_or("delayed");
    if (recipe == "mxfp8") {
      c["fp8_recipe"] = "mxfp8";
    } else {
      c["fp8_recipe"] = "delayed";
      if (recipe != "delayed") {
        r.not_modelled("fp8_recipe",
                       "modelled as delayed scaling (per-tensor scales; the "
                       "same bytes, its own amax work not modelled)");
      }
    }
  }
  c["fp8_param_gather"] = r.flag("fp8_param_gather");
}

// --cuda-graph-impl with --cuda-graph-modules (Megatron-LM d98e8a6; the deprecated
// --cuda-graph-scope, --enable-cuda-graph and --external-cuda-graph, Bridge's
// cfg.model.cuda_graph_scope) as shardplan's cuda_graphs: "layer" for a per-layer
// implementation with no module list (the whole layer), "full_iteration" for the whole
// step; local and transformer_engine graphs cost the host alike.
void read_cuda_graphs(ArgReader& r, nlohmann::json& c) {
  std::string impl = r.text("cuda_graph_impl").value_or("none");
  if (r.flag("enable_cuda_graph")) impl = "local";
  if (r.flag("external_cuda_graph")) impl = "transformer_engine";
  std::vector<std::string> modules;
  std::string given;  // the dest the list came from, for errors
  for (const char* dest :
       {"cuda_graph_modules", "cuda_graph_scope", "cuda_graph_scope_deprecated"}) {
    if (!r.has(dest)) continue;
    given = dest;
    for (const std::string& text : r.texts(dest)) {
      // A comma-separated string (_parse_cuda_graph_modules_arg) or a list; a dumped config
      // may write the enum's repr.
      std::size_t start = 0;
      while (start <= text.size()) {
        const std::size_t comma = std::min(text.find(',', start), text.size());
        std::string name = text.substr(start, comma - start);
        if (const std::size_t dot = name.rfind('.'); dot != std::string::npos)
          name = name.substr(dot + 1);
        if (!name.empty()) modules.push_back(name);
        start = comma + 1;
      }
    }
  }
  if (impl != "none" && impl != "local" && impl != "transformer_engine" &&
      impl != "full_iteration") {
    r.fail("cuda_graph_impl",
           fmt::format("{} is not none, local, transformer_engine or full_iteration",
                       quote_input(impl)));
  }
  // "full_iteration" as a module is the deprecated spelling of the implementation, also
  // under impl none; Megatron refuses it beside transformer_engine or other modules
  // (cuda_graph_config.py). "full" is the whole layer.
  if (std::find(modules.begin(), modules.end(), "full_iteration") != modules.end()) {
    if (modules.size() > 1)
      r.fail(given, "full_iteration cannot be combined with other modules (Megatron asserts it)");
    if (impl == "transformer_engine") {
      r.fail(given,
             "full_iteration cannot be combined with --cuda-graph-impl transformer_engine "
             "(Megatron asserts it)");
    }
    impl = "full_iteration";
  }
  if (impl == "none") return;  // the module list has no effect (Megatron warns)
  // The local implementation does not tell the router's graph from the preprocessing's:
  // either captures both (transformer_config.py).
  if (impl == "local") {
    const auto listed = [&](const char* m) {
      return std::find(modules.begin(), modules.end(), m) != modules.end();
    };
    const bool router = listed("moe_router"), pre = listed("moe_preprocess");
    if (router && !pre) modules.push_back("moe_preprocess");
    if (pre && !router) modules.push_back("moe_router");
  }
  if (impl == "full_iteration") {
    if (!modules.empty() && modules != std::vector<std::string>{"full_iteration"}) {
      r.fail(given, "must be empty with --cuda-graph-impl full_iteration (Megatron asserts it)");
    }
    c["cuda_graphs"] = {"full_iteration"};
    return;
  }
  if (modules.empty() || modules == std::vector<std::string>{"full"}) {
    c["cuda_graphs"] = {"layer"};
    return;
  }
  if (std::find(modules.begin(), modules.end(), "mamba") != modules.end())
    r.fail(given, "mamba captures Mamba layers, which shardplan does not model");
  c["cuda_graphs"] = modules;
}

void read_recompute(ArgReader& r, nlohmann::json& c, int64_t num_layers) {
  std::optional<std::string> granularity = r.text("recompute_granularity");
  // --recompute-activations: the old spelling of selective (validate_args).
  if (!granularity && r.flag("recompute_activations")) granularity = "selective";
  if (!granularity) return;
  if (*granularity == "selective") {
    c["recompute"] = "selective";
    // Megatron's default list is core_attn alone (transformer_config.py); an explicit empty
    // list re-runs nothing.
    if (!r.has("recompute_modules")) return;
    const std::vector<std::string> modules = r.texts("recompute_modules");
    const std::vector<std::string> known = recompute_module_names();
    for (const std::string& m : modules) {
      if (std::find(known.begin(), known.end(), m) == known.end()) {
        r.fail("recompute_modules",
               fmt::format("{} is not a recompute module shardplan models ({})", quote_input(m),
                           fmt::join(known, ", ")));
      }
    }
    const bool delayed_fp8 =
        r.text("fp8").has_value() && r.text("fp8_recipe").value_or("delayed") == "delayed";
    for (const char* refused : {"layernorm", "moe_act"}) {
      if (delayed_fp8 && std::find(modules.begin(), modules.end(), refused) != modules.end()) {
        r.fail("recompute_modules",
               fmt::format("{} is refused under FP8 delayed scaling (\"Delayed scaling does not "
                           "support moe_act and layernorm recompute for fp8\", Megatron's "
                           "transformer_config.py)",
                           refused));
      }
    }
    c["recompute_modules"] = modules;
    return;
  }
  if (*granularity != "full") {
    r.fail("recompute_granularity",
           fmt::format("{} is not full or selective", quote_input(*granularity)));
  }
  c["recompute"] = "full";
  // Megatron reads the module list only under selective.
  if (r.has("recompute_modules")) r.use("recompute_modules");
  // TransformerConfig.__post_init__ raises without a method and a layer count.
  const std::optional<std::string> method_given = r.text("recompute_method");
  const std::optional<int64_t> layers_given = r.integer("recompute_num_layers");
  if (!method_given || !layers_given) {
    r.fail(method_given ? "recompute_num_layers" : "recompute_method",
           "is required with --recompute-granularity full (Megatron raises without it)");
  }
  const std::string& method = *method_given;
  const int64_t layers = *layers_given;
  if (method != "uniform" && method != "block") {
    r.fail("recompute_method", fmt::format("{} is not uniform or block", quote_input(method)));
  }
  if (method == "uniform" && layers != 1) {
    r.not_modelled("recompute_num_layers",
                   "uniform chunks of several layers are modelled as one checkpoint per layer");
  } else if (method == "block" && layers < num_layers) {
    r.not_modelled("recompute_num_layers",
                   "recomputing only the first layers is modelled as recomputing every layer");
  }
}

// The file's stem names the model; one that would not print cleanly (or inline text) does not.
std::string model_name(const std::string& label) {
  const std::string stem =
      label.rfind("--", 0) == 0 ? "" : std::filesystem::path(label).stem().string();
  const bool plain =
      !stem.empty() && stem.size() <= 64 && std::all_of(stem.begin(), stem.end(), [](char c) {
        return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7F;
      });
  return plain ? stem : "megatron-model";
}

bool is_megatron_dest(const std::string& dest) {
  static const std::set<std::string> dests = [] {
    std::set<std::string> out;
    for (const auto& [name, flag] : megatron_flags()) out.insert(flag.dest);
    return out;
  }();
  return dests.count(dest) > 0;
}

// A Bridge field that is no Megatron argument yet one or two letters from a field the plan
// reads is a typo: Python sets any attribute of a dataclass without a word, so Bridge
// would train with the default and the plan should not pretend otherwise.
class MisspeltBridgeFields {
 public:
  explicit MisspeltBridgeFields(const ArgReader& r) {
    for (const std::string& asked : r.asked()) {
      for (const std::string& field : bridge_paths(asked)) fields_.push_back(field);
    }
  }
  std::optional<std::string> nearest(const std::string& path, const std::string& dest) {
    // A ConfigContainer dump has a few hundred fields; past this many the rest are not
    // checked (each check is an edit distance against every field read).
    constexpr int kMaxChecked = 1000;
    if (is_megatron_dest(dest) || ++checked_ > kMaxChecked) return std::nullopt;
    return closest_name(path, fields_);
  }

 private:
  std::vector<std::string> fields_;
  int checked_ = 0;
};

// Every argument not read lands in one list: ignored (no bearing on memory or step
// time), not modelled, or (Bridge) unknown when it is a misspelt field.
void account_for_the_rest(const MegatronArgs& args, const ArgReader& r, bool bridge,
                          StackJob& job) {
  MisspeltBridgeFields fields(r);
  UnknownNames misspelt;
  for (const auto& [dest, value] : args.values) {
    if (r.used().count(dest) > 0 || value.value.is_null()) continue;
    if (bridge) {
      if (const auto near = fields.nearest(value.name, dest)) {
        misspelt.add(value.name, [&] { return near; });
        continue;
      }
    }
    // A Bridge field left false (a dump lists them all) changes nothing; a command line's
    // --no-X flag does.
    if (value.name.rfind("--", 0) != 0 && value.value.is_boolean() && !value.value.get<bool>()) {
      continue;
    }
    if (ignored_dest(dest)) {
      job.ignored.push_back(shown_input(value.name));
    } else {
      job.not_modelled.push_back(shown_input(value.name) + ": read, not modelled");
    }
  }
  misspelt.append_to(job.unknown);
}

}  // namespace

StackJob megatron_stack_job(const MegatronArgs& args, StackFormat format,
                            const std::string& label) {
  ArgReader r(args, label);
  StackJob job;
  job.format = format;
  job.label = label;
  job.gpus = args.gpus;
  job.ignored = args.ignored;
  job.unknown = args.unknown;
  job.not_modelled = args.not_modelled;
  const bool bridge = format == StackFormat::megatron_bridge;
  const int64_t tp = degree(r, "tensor_model_parallel_size");
  job.model = megatron_model_json(r, model_name(label), tp, bridge);
  nlohmann::json& c = job.config;
  c["stack"] = "megatron-te";
  const bool fsdp = r.has("use_megatron_fsdp") && r.flag("use_megatron_fsdp");
  read_mesh(r, c, tp, job.model["family"] == "moe");
  read_fsdp(r, c, bridge);
  read_precision(r, c, fsdp);
  read_recompute(r, c, job.model["num_layers"].get<int64_t>());
  read_cuda_graphs(r, c);
  const std::optional<int64_t> micro = positive_count(r, "micro_batch_size");
  if (!micro) r.fail("micro_batch_size", "is required (Megatron-LM asserts it)");
  c["micro_batch"] = *micro;
  job.global_batch = positive_count(r, "global_batch_size");
  std::optional<int64_t> seq = positive_count(r, "seq_length");
  if (!seq) seq = positive_count(r, "encoder_seq_length");
  if (!seq) r.fail("seq_length", "is required (or --encoder-seq-length)");
  c["seq_len"] = *seq;
  if (args.expandable_segments) c["allocator"] = "expandable";
  job.not_modelled.insert(job.not_modelled.end(), r.notes().begin(), r.notes().end());
  account_for_the_rest(args, r, bridge, job);
  return job;
}

}  // namespace shardplan
