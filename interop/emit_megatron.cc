// A resolved job as Megatron-LM flags or Megatron-Bridge overrides. Both list the same
// settings by Megatron's argument name (dest); reading the text back through
// read_megatron_args / read_megatron_bridge gives the same model and config.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "interop/internal/emit.h"
#include "interop/internal/megatron.h"
#include "models/transformer_builder.h"

namespace shardplan {
namespace {

struct Setting {
  std::string dest;  // empty: a comment on its own
  nlohmann::json value;
  std::string comment;
};

class Settings {
 public:
  void set(std::string dest, nlohmann::json value, std::string comment = "") {
    list_.push_back({std::move(dest), std::move(value), std::move(comment)});
  }
  void comment(std::string text) { list_.push_back({"", nullptr, std::move(text)}); }
  const std::vector<Setting>& list() const { return list_; }

 private:
  std::vector<Setting> list_;
};

// "([0]*3+[1]*58)": Megatron's --moe-layer-freq pattern, run-length encoded.
std::string layer_pattern(const std::vector<bool>& moe) {
  std::vector<std::string> runs;
  for (std::size_t i = 0; i < moe.size();) {
    std::size_t j = i;
    while (j < moe.size() && moe[j] == moe[i]) ++j;
    runs.push_back(fmt::format("[{}]*{}", moe[i] ? 1 : 0, j - i));
    i = j;
  }
  return fmt::format("({})", fmt::join(runs, "+"));
}

void model_settings(const TransformerArch& a, const FsdpConfig& c, Settings& s) {
  s.set("num_layers", a.num_layers);
  s.set("hidden_size", a.hidden_size);
  s.set("ffn_hidden_size", a.ffn_hidden_size > 0 ? a.ffn_hidden_size : a.moe_ffn_hidden_size);
  s.set("num_attention_heads", a.num_heads);
  if (a.mla()) {
    s.set("multi_latent_attention", true);
    if (a.q_lora_rank > 0) s.set("q_lora_rank", a.q_lora_rank);
    s.set("kv_lora_rank", a.kv_lora_rank);
    s.set("qk_head_dim", a.qk_nope_head_dim);
    s.set("qk_pos_emb_head_dim", a.qk_rope_head_dim);
    s.set("v_head_dim", a.v_head_dim);
  } else {
    if (a.num_kv_heads != 0 && a.num_kv_heads != a.num_heads) {
      s.set("group_query_attention", true);
      s.set("num_query_groups", a.num_kv_heads);
    }
    if (a.head_dim != 0) s.set("kv_channels", a.head_dim);
  }
  if (a.mlp == MlpKind::swiglu) s.set("swiglu", true);
  s.set("normalization", a.norm == NormKind::rmsnorm ? "RMSNorm" : "LayerNorm");
  if (!a.tie_embeddings) s.set("untie_embeddings_and_output_weights", true);
  if (!a.bias) s.set("add_bias_linear", false);
  if (a.qkv_bias && !a.bias) s.set("add_qkv_bias", true);
  if (a.position_embedding == PositionEmbedding::rope) {
    s.set("position_embedding_type", "rope");
    s.set("max_position_embeddings", std::max(c.seq_len, a.max_position_embeddings));
  } else {
    s.set("position_embedding_type", "learned_absolute");
    s.set("max_position_embeddings", a.max_position_embeddings);
  }
  if (!a.dropout) {
    s.set("attention_dropout", 0.0);
    s.set("hidden_dropout", 0.0);
  }
  if (!a.flash_attention) s.set("attention_backend", "unfused");
  s.set("tokenizer_type", "NullTokenizer",
        "the plan needs only the vocabulary's size; your --tokenizer-type after these wins");
  const int64_t padded = (a.vocab_size + 127) / 128 * 128;
  s.set(
      "vocab_size", a.vocab_size,
      padded != a.vocab_size
          ? fmt::format("Megatron pads it to {} rows (--make-vocab-size-divisible-by 128)", padded)
          : "");
  if (a.num_experts > 0) {
    s.set("num_experts", a.num_experts);
    s.set("moe_router_topk", a.experts_per_token);
    s.set("moe_ffn_hidden_size", a.moe_ffn_hidden_size);
    if (a.num_shared_experts > 0) {
      s.set("moe_shared_expert_intermediate_size", a.num_shared_experts * a.moe_ffn_hidden_size);
    }
    if (std::find(a.moe_layers.begin(), a.moe_layers.end(), false) != a.moe_layers.end()) {
      s.set("moe_layer_freq", layer_pattern(a.moe_layers));
    }
    s.set("moe_grouped_gemm", true);
  }
}

void mesh_settings(const ModelSpec& model, const FsdpConfig& c, Settings& s) {
  s.set("tensor_model_parallel_size", c.tp);
  if (c.tp > 1 && sequence_parallel(c)) s.set("sequence_parallel", true);
  if (c.tp_comm_overlap) s.set("tp_comm_overlap", true);
  s.set("context_parallel_size", c.cp);
  if (c.cp > 1) {
    s.set("cp_comm_type", c.cp_comm == CpComm::a2a          ? "a2a"
                          : c.cp_comm == CpComm::all_gather ? "allgather"
                                                            : "p2p");
  }
  if (model.arch != nullptr && model.arch->num_experts > 0) {
    s.set("expert_model_parallel_size", c.ep);
    if (c.etp > 0) s.set("expert_tensor_parallel_size", c.etp);
    switch (c.moe_dispatcher) {
      case MoeDispatcher::allgather:
      case MoeDispatcher::alltoall:
        s.set("moe_token_dispatcher_type",
              c.moe_dispatcher == MoeDispatcher::allgather ? "allgather" : "alltoall");
        break;
      case MoeDispatcher::deepep:
      case MoeDispatcher::hybridep:
        s.set("moe_token_dispatcher_type", "flex");
        s.set("moe_flex_dispatcher_backend",
              c.moe_dispatcher == MoeDispatcher::deepep ? "deepep" : "hybridep");
        break;
    }
    if (c.moe_capacity_factor) s.set("moe_expert_capacity_factor", *c.moe_capacity_factor);
    if (c.moe_imbalance != kDefaultMoeImbalance) {
      s.comment(
          fmt::format("moe_imbalance {:g}: the router's load, not a setting (planned with it)",
                      c.moe_imbalance));
    }
  }
}

void fsdp_settings(const FsdpConfig& c, Settings& s) {
  s.set("use_megatron_fsdp", true);
  s.set("data_parallel_sharding_strategy",
        std::string(sharding_strategy_name(c.sharding_strategy)));
  s.set("use_distributed_optimizer", true, "Megatron-FSDP v1 requires it");
  s.set("ckpt_format", "fsdp_dtensor", "Megatron-FSDP requires it");
  if (c.dp_outer > 1) {
    s.set("num_distributed_optimizer_instances", c.dp_outer);
    s.set("outer_dp_sharding_strategy", std::string(outer_strategy_name(c.outer_strategy)));
  }
  // Megatron asserts --overlap-param-gather needs --overlap-grad-reduce (validate_args).
  const bool prefetch = c.forward_prefetch > 0 || c.backward_prefetch > 0;
  s.set("overlap_grad_reduce", c.async_reduce);
  s.set("overlap_param_gather", prefetch && c.async_reduce);
  if (prefetch && !c.async_reduce) {
    s.comment(
        "prefetch without async_reduce: Megatron overlaps gathers only with "
        "--overlap-grad-reduce; both off here");
  }
  if (prefetch && (c.forward_prefetch != 1 || c.backward_prefetch != 1)) {
    s.comment(
        fmt::format("prefetch {}/{}: Megatron-FSDP has no flag for the depth (it "
                    "prefetches by --suggested-communication-unit-size)",
                    c.forward_prefetch, c.backward_prefetch));
  }
  if (c.double_buffer) s.set("fsdp_double_buffer", true);
  if (c.fine_grained_param_gather) s.set("megatron_fsdp_enable_fine_grained_param_gather", true);
  if (c.keep_fp8_transpose_cache) s.set("keep_fp8_transpose_cache", true);
  if (c.bucket_bytes) s.comment(fmt::format("bucket_bytes {}: no Megatron flag", *c.bucket_bytes));
  if (c.max_live_grad_buffers != 2) {
    s.comment(fmt::format("max_live_grad_buffers {}: no Megatron flag", c.max_live_grad_buffers));
  }
  if (!c.unit_modules.empty()) {
    s.comment(fmt::format("unit_modules {}: Megatron-FSDP wraps each decoder layer",
                          fmt::join(c.unit_modules, ", ")));
  }
}

}  // namespace

std::pair<int64_t, int64_t> launch_shape(const ClusterSpec& cluster) {
  if (cluster.num_gpus % cluster.gpus_per_node == 0) {
    return {cluster.gpus_per_node, cluster.num_gpus / cluster.gpus_per_node};
  }
  return {cluster.num_gpus, 1};  // fewer than a node's GPUs, or not whole nodes
}

// The Bridge path for a Megatron dest (its ConfigContainer sections, config.py @067f987).
std::vector<std::string> bridge_paths(const std::string& dest) {
  static const std::vector<std::string> ddp = {"use_megatron_fsdp",
                                               "data_parallel_sharding_strategy",
                                               "use_distributed_optimizer",
                                               "num_distributed_optimizer_instances",
                                               "outer_dp_sharding_strategy",
                                               "overlap_grad_reduce",
                                               "overlap_param_gather",
                                               "fsdp_double_buffer",
                                               "keep_fp8_transpose_cache",
                                               "megatron_fsdp_main_params_dtype",
                                               "megatron_fsdp_main_grads_dtype",
                                               "megatron_fsdp_grad_comm_dtype",
                                               "megatron_fsdp_enable_fine_grained_param_gather"};
  if (std::find(ddp.begin(), ddp.end(), dest) != ddp.end()) return {"ddp." + dest};
  if (dest == "micro_batch_size" || dest == "global_batch_size") return {"train." + dest};
  if (dest == "seq_length") return {"model.seq_length", "dataset.seq_length"};
  // The model's vocabulary, used as given (should_pad_vocab is False); the recipe's
  // tokenizer stays.
  if (dest == "vocab_size") return {"model.vocab_size"};
  if (dest == "tokenizer_type") return {};
  // Read from Bridge under these names (bridge_config.cc), never written.
  if (dest == "tokenizer_vocab_size") return {"tokenizer.vocab_size"};
  if (dest == "pad_vocab_size") return {"model.should_pad_vocab"};
  if (dest == "use_torch_fsdp2") return {"dist.use_torch_fsdp2"};
  if (dest == "nccl_ub") return {"ddp.nccl_ub"};
  if (dest == "optimizer") return {"optimizer.optimizer"};
  if (dest == "ckpt_format") return {"checkpoint.ckpt_format"};
  if (dest == "num_experts") return {"model.num_moe_experts"};
  if (dest == "swiglu") return {"model.gated_linear_unit"};
  if (dest == "untie_embeddings_and_output_weights") {
    return {"model.share_embeddings_and_output_weights"};
  }
  if (dest == "group_query_attention") return {};  // implied by num_query_groups
  return {"model." + dest};
}

namespace {

std::string dtype_arg(DType d) {
  return std::string(dtype_name(d));
}

// shardplan's delayed recipe stands for every per-tensor one. Megatron refuses layernorm
// and moe_act recompute under delayed scaling, not under tensorwise current scaling (the
// same bytes): such a config is written as tensorwise.
bool per_tensor_as_tensorwise(const FsdpConfig& c) {
  return fp8_compute(c) && c.fp8_recipe == Fp8Recipe::delayed &&
         c.recompute == Recompute::selective &&
         (c.recompute_modules.has(RecomputeModule::layernorm) ||
          c.recompute_modules.has(RecomputeModule::moe_act));
}

void precision_settings(const FsdpConfig& c, Settings& s) {
  if (c.param_dtype == DType::bf16) s.set("bf16", true);
  if (c.param_dtype == DType::fp16) s.set("fp16", true);
  if (c.main_param_dtype != DType::fp32) {
    s.set("megatron_fsdp_main_params_dtype", dtype_arg(c.main_param_dtype));
  }
  if (c.main_grad_dtype != c.param_dtype) {
    s.set("megatron_fsdp_main_grads_dtype", dtype_arg(c.main_grad_dtype));
  }
  if (c.grad_reduce_dtype != c.main_grad_dtype) {
    s.set("megatron_fsdp_grad_comm_dtype", dtype_arg(c.grad_reduce_dtype));
  }
  if (fp8_compute(c)) {
    s.set("fp8", c.fp8_recipe == Fp8Recipe::mxfp8 ? "e4m3" : "hybrid");
    if (per_tensor_as_tensorwise(c)) {
      s.set("fp8_recipe", "tensorwise",
            "per-tensor scales; Megatron refuses layernorm/moe_act recompute under delayed");
    } else {
      s.set("fp8_recipe", std::string(fp8_recipe_name(c.fp8_recipe)));
    }
  }
  if (c.fp8_param_gather) s.set("fp8_param_gather", true);
}

void step_settings(const FsdpConfig& c, Settings& s) {
  switch (c.recompute) {
    case Recompute::none:
      break;
    case Recompute::full:
      s.set("recompute_granularity", "full");
      s.set("recompute_method", "uniform");
      s.set("recompute_num_layers", 1);
      break;
    case Recompute::selective:
      // An empty list re-runs nothing, as no recompute does; Megatron's command line
      // cannot write one (--recompute-modules takes one or more values).
      if (c.recompute_modules == RecomputeModules{.bits = 0}) {
        s.comment(
            "recompute selective with recompute_modules []: nothing re-runs, as without "
            "recompute");
        break;
      }
      s.set("recompute_granularity", "selective");
      if (c.recompute_modules != RecomputeModules{})
        s.set("recompute_modules", recompute_module_list(c.recompute_modules));
      break;
    case Recompute::sac_op:
    case Recompute::sac_layer:
      s.comment(
          fmt::format("recompute {}: torchtitan's policy, no Megatron equivalent (nearest: "
                      "--recompute-granularity selective)",
                      recompute_label(c)));
      break;
  }
  if (c.offload_activations > 0) s.set("cpu_offloading_num_layers", c.offload_activations);
  if (c.cuda_graphs.has(CudaGraphScope::full_iteration)) {
    s.set("cuda_graph_impl", "full_iteration");
  } else if (c.cuda_graphs.any()) {
    s.set("cuda_graph_impl", "transformer_engine");
    // No module list: the whole layer.
    if (!c.cuda_graphs.has(CudaGraphScope::layer))
      s.set("cuda_graph_modules", cuda_graph_scope_list(c.cuda_graphs));
  }
  s.set("micro_batch_size", c.micro_batch);
  s.set("global_batch_size", c.micro_batch * c.grad_accum * c.dp_shard * c.dp_outer,
        fmt::format("{} micro-batch(es) per step", c.grad_accum));
  s.set("seq_length", c.seq_len);
  s.set("optimizer", std::string(optimizer_name(c.optimizer)));
}

void unexpressed(const FsdpConfig& c, Settings& s) {
  if (c.stack != Stack::megatron_te) {
    s.comment(
        fmt::format("planned on stack {}; Megatron runs Transformer Engine (simulate with "
                    "--set stack=megatron-te to compare)",
                    stack_name(c.stack)));
  }
  if (c.allocator == Allocator::pool) {
    s.comment(
        "allocator pool: shardplan's own executor; Megatron runs PyTorch's caching allocator");
  }
  if (!c.vocab_parallel_loss || !c.vocab_parallel_embedding) {
    s.comment("a replicated embedding or loss: Megatron's are always vocab-parallel");
  }
  if (c.no_sync)
    s.comment(
        "no_sync: PyTorch FSDP's gradient accumulation; Megatron-FSDP reduces each micro-batch");
}

Settings megatron_settings(const ModelSpec& model, const FsdpConfig& c) {
  Settings s;
  model_settings(*model.arch, c, s);
  mesh_settings(model, c, s);
  fsdp_settings(c, s);
  precision_settings(c, s);
  step_settings(c, s);
  unexpressed(c, s);
  return s;
}

// 0.0, not 0: the reader of a float argument sees a float.
std::string float_text(double x) {
  std::string text = fmt::format("{}", x);
  if (text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

std::string shell_value(const nlohmann::json& v) {
  if (v.is_array()) {  // nargs '+': the words one after another
    std::vector<std::string> words;
    for (const nlohmann::json& e : v) words.push_back(shell_value(e));
    return fmt::format("{}", fmt::join(words, " "));
  }
  if (v.is_string()) {
    const std::string text = v.get<std::string>();
    return text.find_first_of("()[]*+ ") == std::string::npos ? text : "'" + text + "'";
  }
  if (v.is_number_float()) return float_text(v.get<double>());
  return v.dump();
}

std::string python_value(const nlohmann::json& v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_number_float()) return float_text(v.get<double>());
  return v.dump();
}

// Bridge's mixed-precision preset for the precision settings, if one matches.
std::string precision_preset(const FsdpConfig& c) {
  if (c.param_dtype == DType::fp16 && !fp8_compute(c)) return "fp16_mixed";
  if (c.param_dtype != DType::bf16) return "";
  if (!fp8_compute(c)) return "bf16_mixed";
  if (c.fp8_recipe == Fp8Recipe::mxfp8 && c.fp8_param_gather) return "bf16_with_mxfp8_mixed";
  if (c.fp8_recipe == Fp8Recipe::delayed && c.fp8_param_gather && !per_tensor_as_tensorwise(c)) {
    return "bf16_with_fp8_delayed_scaling_mixed";
  }
  return "";
}

}  // namespace

std::string emit_megatron_args(const ModelSpec& model, const ClusterSpec& cluster,
                               const FsdpConfig& c, const std::string& header) {
  const Settings settings = megatron_settings(model, c);
  std::string out = header;
  if (c.allocator == Allocator::expandable)
    out += "export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True\n";
  const auto [per_node, nodes] = launch_shape(cluster);
  out += fmt::format(
      "# Run: \"${{SHARDPLAN_LAUNCH[@]}}\" \"${{SHARDPLAN_ARGS[@]}}\" <your data, optimizer and "
      "logging flags>\nSHARDPLAN_LAUNCH=( torchrun --nproc-per-node {} --nnodes {} pretrain_gpt.py "
      ")\n"
      "SHARDPLAN_ARGS=(\n",
      per_node, nodes);
  for (const Setting& s : settings.list()) {
    if (s.dest.empty()) {
      out += "  # " + s.comment + "\n";
      continue;
    }
    std::string line;
    const std::string flag = megatron_flag_for(s.dest);
    const auto& flags = megatron_flags();
    const auto it = flags.find(flag);
    if (it != flags.end() && it->second.arity == "none") {
      // A store_true / store_false flag states its value by being there.
      if (s.value != nlohmann::json(it->second.action != "store_false")) continue;
      line = flag;
    } else {
      line = flag + " " + shell_value(s.value);
    }
    out += "  " + line + (s.comment.empty() ? "" : "  # " + s.comment) + "\n";
  }
  out += ")\n";
  return out;
}

std::string emit_megatron_bridge(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& c, const std::string& header) {
  const Settings settings = megatron_settings(model, c);
  std::string out = header;
  const auto [per_node, nodes] = launch_shape(cluster);
  out += fmt::format(
      "# Megatron-Bridge overrides: apply after your recipe (cfg = <model>_pretrain_config()).\n"
      "# Launch on {} GPUs: torchrun --nproc-per-node {} --nnodes {} <your script>\n",
      cluster.num_gpus, per_node, nodes);
  if (c.allocator == Allocator::expandable) {
    out +=
        "os.environ[\"PYTORCH_CUDA_ALLOC_CONF\"] = \"expandable_segments:True\"  # before "
        "CUDA starts\n";
  }
  const std::string preset = precision_preset(c);
  static const std::vector<std::string> precision = {"bf16", "fp16", "fp8", "fp8_recipe",
                                                     "fp8_param_gather"};
  if (!preset.empty()) out += fmt::format("cfg.mixed_precision = \"{}\"\n", preset);
  for (const Setting& s : settings.list()) {
    if (s.dest.empty()) {
      out += "# " + s.comment + "\n";
      continue;
    }
    const bool is_precision =
        std::find(precision.begin(), precision.end(), s.dest) != precision.end();
    if (is_precision && !preset.empty()) continue;
    nlohmann::json value = s.value;
    if (s.dest == "untie_embeddings_and_output_weights") value = !value.get<bool>();
    // MCore takes moe_layer_freq as an int or a list: the pattern as a Python expression.
    const std::string text =
        s.dest == "moe_layer_freq" ? value.get<std::string>() : python_value(value);
    const std::string comment = s.dest == "vocab_size" ? "" : s.comment;
    for (const std::string& path : is_precision
                                       ? std::vector<std::string>{"mixed_precision." + s.dest}
                                       : bridge_paths(s.dest)) {
      out += fmt::format("cfg.{} = {}{}\n", path, text, comment.empty() ? "" : "  # " + comment);
    }
  }
  if (preset.empty() && c.param_dtype != DType::fp32) {
    out +=
        "# no Bridge preset holds this precision: cfg.mixed_precision must be a "
        "MixedPrecisionConfig with the fields above\n";
  }
  return out;
}

}  // namespace shardplan
