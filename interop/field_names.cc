// Where each config field comes from in a stack's config, so that an error the planner
// finds in a field read from it names what the user wrote.
#include <fmt/format.h>

#include <map>

#include "interop/internal/emit.h"
#include "interop/internal/megatron.h"
#include "interop/stack_job.h"

namespace shardplan {
namespace {

// Config field → Megatron's argument (dest).
const std::map<std::string, std::string, std::less<>>& megatron_dests() {
  static const std::map<std::string, std::string, std::less<>> table = {
      {"tp", "tensor_model_parallel_size"},
      {"cp", "context_parallel_size"},
      {"ep", "expert_model_parallel_size"},
      {"etp", "expert_tensor_parallel_size"},
      {"dp_outer", "num_distributed_optimizer_instances"},
      {"outer_strategy", "outer_dp_sharding_strategy"},
      {"sharding_strategy", "data_parallel_sharding_strategy"},
      {"sequence_parallel", "sequence_parallel"},
      {"tp_comm_overlap", "tp_comm_overlap"},
      {"cp_comm", "cp_comm_type"},
      {"moe_dispatcher", "moe_token_dispatcher_type"},
      {"moe_capacity_factor", "moe_expert_capacity_factor"},
      {"micro_batch", "micro_batch_size"},
      {"grad_accum", "global_batch_size"},
      {"seq_len", "seq_length"},
      {"recompute", "recompute_granularity"},
      {"recompute_modules", "recompute_modules"},
      {"cuda_graphs", "cuda_graph_modules"},
      {"fp8", "fp8"},
      {"fp8_recipe", "fp8_recipe"},
      {"fp8_param_gather", "fp8_param_gather"},
      {"double_buffer", "fsdp_double_buffer"},
      {"keep_fp8_transpose_cache", "keep_fp8_transpose_cache"},
      {"offload_activations", "cpu_offloading_num_layers"},
      {"param_dtype", "bf16"},
      {"main_param_dtype", "megatron_fsdp_main_params_dtype"},
      {"main_grad_dtype", "megatron_fsdp_main_grads_dtype"},
      {"grad_reduce_dtype", "megatron_fsdp_grad_comm_dtype"},
      {"optimizer", "optimizer"},
      {"async_reduce", "overlap_grad_reduce"},
      {"forward_prefetch", "overlap_param_gather"},
      {"backward_prefetch", "overlap_param_gather"},
  };
  return table;
}

const std::map<std::string, std::string, std::less<>>& torchtitan_keys() {
  static const std::map<std::string, std::string, std::less<>> table = {
      {"tp", "[parallelism] tensor_parallel_degree"},
      {"cp", "[parallelism] context_parallel_degree"},
      {"ep", "[parallelism] expert_parallel_degree"},
      {"etp", "[parallelism] expert_tensor_parallel_degree"},
      {"dp_shard", "[parallelism] data_parallel_shard_degree"},
      {"dp_outer", "[parallelism] data_parallel_replicate_degree"},
      {"sharding_strategy", "[parallelism] fsdp_reshard_after_forward"},
      {"tp_comm_overlap", "[parallelism] enable_async_tensor_parallel"},
      {"cp_comm", "[parallelism] context_parallel_rotate_method"},
      {"micro_batch", "[training] local_batch_size"},
      {"grad_accum", "[training] global_batch_size"},
      {"seq_len", "[training] seq_len"},
      {"main_param_dtype", "[training] dtype"},
      {"param_dtype", "[training] mixed_precision_param"},
      {"recompute", "[activation_checkpoint] mode"},
      {"recompute_every", "[activation_checkpoint] selective_ac_option"},
      {"stack", "[compile] enable"},
      {"fp8", "[model] converters"},
      {"fp8_param_gather", "[quantize.linear.float8] enable_fsdp_float8_all_gather"},
  };
  return table;
}

}  // namespace

std::string stack_field_name(StackFormat format, std::string_view field) {
  if (!field.empty() && field.front() == '/') field.remove_prefix(1);
  if (format == StackFormat::torchtitan) {
    const auto it = torchtitan_keys().find(field);
    return it == torchtitan_keys().end() ? "" : it->second;
  }
  const auto it = megatron_dests().find(field);
  if (it == megatron_dests().end()) return "";
  if (format == StackFormat::megatron_args) return megatron_flag_for(it->second);
  const std::vector<std::string> paths = bridge_paths(it->second);
  return paths.empty() ? "" : paths.front();
}

}  // namespace shardplan
