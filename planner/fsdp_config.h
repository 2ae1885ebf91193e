#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "models/cluster_spec.h"
#include "models/dtype.h"
#include "models/model_spec.h"
#include "models/module_cost.h"
#include "models/parallel.h"

namespace shardplan {

// ZeRO stages as Megatron-FSDP names them (zero_dp_strategy 0..3).
enum class ShardingStrategy { no_shard, optim, optim_grads, optim_grads_params };
// HSDP: what is sharded across the outer (replica) dimension.
enum class OuterStrategy { no_shard, optim };
enum class Fp8Recipe { delayed, mxfp8 };
// pool: one traced static pool; caching: PyTorch's CUDA caching allocator; expandable: the
// same with expandable_segments:True (torchtitan's and Megatron's launch scripts set it).
enum class Allocator { pool, caching, expandable };
enum class Optimizer { adam, sgd };
// The kernel PyTorch's scaled_dot_product_attention runs on the torch stacks (Transformer
// Engine picks its own fused attention): FlashAttention-2, or cuDNN's attention.
enum class SdpaBackend { flash, cudnn };

// The default max/mean tokens per expert: 1 + MaxVio 0.52, the load a 3B-parameter MoE
// trained with an auxiliary balancing loss (Megatron's default, aux_loss) leaves (Wang et al.
// 2024, "Auxiliary-Loss-Free Load Balancing Strategy for Mixture-of-Experts", Table 2;
// loss-free balancing: 1.04). docs/model.md "Mixture of experts".
inline constexpr double kDefaultMoeImbalance = 1.52;

// Every knob of one FSDP run. Defaults follow Megatron-FSDP's `fully_shard` (seeds/002
// README): ZeRO-3, prefetch 1, async reduce, at most two live gradient buffers, bf16
// parameters with fp32 main weights (preserve_fp32_weights=True), main grads and their
// reduction in the parameter dtype (grad_reduce_in_fp32=False), Adam.
//
// The device mesh is dp_outer × dp_shard × cp × tp, tp innermost (Megatron's default
// order "tp-cp-ep-dp-pp", megatron/core/parallel_state.py): FSDP shards each
// tensor-parallel rank's weights over dp_shard × cp ranks (Megatron-FSDP's dp_shard_cp
// dimension), HSDP replicates over dp_outer.
struct FsdpConfig {
  ShardingStrategy sharding_strategy = ShardingStrategy::optim_grads_params;
  int64_t dp_shard = 0;  // data-parallel ranks a unit is sharded over; 0 = GPUs / (dp_outer·cp·tp)
  int64_t dp_outer = 1;  // HSDP replica groups
  int64_t tp = 1;        // tensor-parallel ranks
  // Sequence parallelism across the tp ranks; unset: on when tp > 1 (Megatron-FSDP's
  // examples always pass --sequence-parallel with TP). Read it with sequence_parallel().
  std::optional<bool> sequence_parallel;
  bool tp_comm_overlap = false;     // Transformer Engine's userbuffer overlap of TP collectives
  bool vocab_parallel_loss = true;  // false: logits all-gathered over tp before the loss
  bool vocab_parallel_embedding = true;  // false: the embedding replicated over tp ranks
  int64_t cp = 1;                        // context-parallel ranks each sequence is split over
  CpComm cp_comm = CpComm::p2p;
  // Mixture of experts (docs/model.md "Mixture of experts"). The expert mesh tiles the same
  // GPUs as etp × ep × expert-data-parallel, etp innermost (Megatron's expert order
  // "tp-ep-dp-pp", parallel_state.py): each rank holds num_experts / ep experts, each
  // split over etp ranks, and FSDP shards them over the GPUs ÷ (ep · etp) ranks that hold
  // the same ones. etp 0 = tp (Megatron's --expert-tensor-parallel-size default).
  int64_t ep = 1;
  int64_t etp = 0;
  // Megatron's default (--moe-token-dispatcher-type allgather, transformer_config.py).
  MoeDispatcher moe_dispatcher = MoeDispatcher::allgather;
  // Tokens an expert may take, × the mean (Megatron's --moe-expert-capacity-factor); the
  // rest are dropped. Unset: dropless.
  std::optional<double> moe_capacity_factor;
  // The busiest expert's tokens ÷ the mean per step (max/mean tokens per expert).
  double moe_imbalance = kDefaultMoeImbalance;
  OuterStrategy outer_strategy = OuterStrategy::no_shard;
  std::vector<std::string> unit_modules;  // module-name patterns; empty = the model's own
  std::optional<int64_t> bucket_bytes;    // split larger parameter groups; none = never
  int64_t forward_prefetch = 1;           // all-gathers issued ahead in forward
  int64_t backward_prefetch = 1;          // ... and in backward
  bool async_reduce = true;               // reduce-scatters on their own stream
  int64_t max_live_grad_buffers = 2;      // sliding drain of unreduced gradients
  Recompute recompute = Recompute::none;
  int64_t recompute_every = 2;  // sac_layer: checkpoint layers N, 2N, ... (torchtitan's "2")
  // selective on megatron-te: what it re-runs (Megatron's --recompute-modules; its default
  // core_attn alone).
  RecomputeModules recompute_modules;
  // megatron-te: what Megatron captures in CUDA graphs (--cuda-graph-impl and
  // --cuda-graph-modules; models/module_cost.h CudaGraphScope); none: eager.
  CudaGraphScopes cuda_graphs;
  int64_t micro_batch = 1;  // sequences per micro-batch
  int64_t grad_accum = 1;   // micro-batches per optimizer step
  int64_t seq_len = 8192;   // tokens per sequence
  DType param_dtype = DType::bf16;
  DType main_param_dtype = DType::fp32;
  DType main_grad_dtype = DType::bf16;
  DType grad_reduce_dtype = DType::bf16;
  // FP8 GEMMs (Megatron's --fp8-format with Transformer Engine, torchao Float8); unset:
  // on with fp8_param_gather. Read it with fp8_compute().
  std::optional<bool> fp8;
  bool fp8_param_gather = false;  // all-gather FP8 weights (1 byte per element)
  Fp8Recipe fp8_recipe = Fp8Recipe::delayed;
  bool fine_grained_param_gather = false;  // per-module all-gathers inside a unit
  bool keep_fp8_transpose_cache = false;
  bool double_buffer = false;  // two persistent unsharded buffers, sized for the largest unit
  Allocator allocator = Allocator::caching;
  Optimizer optimizer = Optimizer::adam;
  Stack stack = Stack::megatron_te;  // the software that runs it (models/module_cost.h)
  // Activation CPU offload (Megatron's cpu_offloading_num_layers, Transformer Engine's
  // get_cpu_offload_context): the saved activations of the first N layer units go to host
  // memory after their forward and come back one layer ahead of their backward. 0: off.
  int64_t offload_activations = 0;
  // torch stacks: which SDPA kernel runs attention (docs/model.md "Software stacks").
  SdpaBackend sdpa_backend = SdpaBackend::cudnn;
  // torch-eager: RMSNorm as recent PyTorch's one fused kernel, or aten's composite (earlier).
  bool fused_rms_norm = true;
  // torch stacks: gradient accumulation under FSDP2's set_requires_gradient_sync(False)
  // (FSDP1's no_sync()) on every micro-batch but the last: no reduce-scatter until then,
  // each unit's unsharded gradients summed on the GPU across micro-batches.
  bool no_sync = false;
  // torch stacks: how the cross entropy runs (models/module_cost.h); unset in a file:
  // compiled on torch-compile, upcast on torch-eager.
  LossKernel loss_kernel = LossKernel::upcast;
};

// Whether the config runs sequence parallelism: as set, else when tp > 1.
bool sequence_parallel(const FsdpConfig& config);
// Whether GEMMs run in FP8: as set, else with fp8_param_gather.
bool fp8_compute(const FsdpConfig& config);
// PyTorch FSDP's parameter layout (FSDP2's fully_shard; FSDP1's flat parameters alike):
// the sharded parameters are the main weights themselves (fp32 in torchtitan), with no
// param_dtype shard beside them; each all-gather casts the shard to param_dtype (FP8 with
// fp8_param_gather) into the gather; the sharded gradients, in the main weights' dtype,
// exist from a step's first reduction until zero_grad(set_to_none=True) after the
// optimizer. The torch stacks under optim_grads_params, except MXFP8 (its column-wise
// copies are Transformer Engine's).
bool torch_fsdp_layout(const FsdpConfig& config);
// The dtype of the optimizer's states: PyTorch's optimizers keep them in the dtype of the
// parameter they step (torch.optim.AdamW's zeros_like(p)), so the main weights' on the
// torch stacks; Megatron's distributed optimizer keeps fp32.
DType optimizer_state_dtype(const FsdpConfig& config);
// no_sync: the dtype a unit's unsharded gradients accumulate in across micro-batches.
// FSDP2 (FSDPParam.to_accumulated_grad_if_needed) upcasts them to reduce_dtype when that
// differs from param_dtype; otherwise autograd sums into the param_dtype .grad.
DType accumulated_grad_dtype(const FsdpConfig& config);
// The recompute mode for tables: its name, "sac_layer/N" with the layer stride.
std::string recompute_label(const FsdpConfig& config);
// The tensor, context and expert parallelism one rank of the config's mesh runs.
ModelParallel model_parallel(const FsdpConfig& config);
// The expert-tensor-parallel size: as set, else tp.
int64_t expert_tp(const FsdpConfig& config);
// Whether experts live on a mesh of their own: ep > 1 or etp ≠ tp. Otherwise every rank of a
// tensor-parallel group holds every expert split as the dense layers are, and FSDP shards
// them with the dense parameters.
bool expert_mesh(const FsdpConfig& config);
// The expert-data-parallel size of a resolved config, GPUs ÷ (ep · etp): the ranks FSDP
// shards each expert over.
int64_t expert_dp(const FsdpConfig& config);

std::string_view sharding_strategy_name(ShardingStrategy s);
std::string_view outer_strategy_name(OuterStrategy s);
std::string_view fp8_recipe_name(Fp8Recipe r);
std::string_view allocator_name(Allocator a);
std::string_view sdpa_backend_name(SdpaBackend b);
std::optional<ShardingStrategy> parse_sharding_strategy(std::string_view text);
std::optional<OuterStrategy> parse_outer_strategy(std::string_view text);
std::optional<Allocator> parse_allocator(std::string_view text);
std::vector<std::string> sharding_strategy_names();
std::vector<std::string> outer_strategy_names();
std::vector<std::string> allocator_names();
std::string_view optimizer_name(Optimizer o);

// The field names a config file may use, in documentation order.
const std::vector<std::string>& fsdp_config_keys();

// Reads a config object; unknown keys are rejected with the closest valid name, and
// each field is range-checked. `label` names the file in errors.
FsdpConfig fsdp_config_from_json(const nlohmann::json& json, const std::string& label);
nlohmann::json fsdp_config_to_json(const FsdpConfig& config);

// The rules across fields (seeds/002 README: FP8 gather needs ZeRO-3, double buffering
// holds two units, ...) and the tokens per micro-batch; each field must already be in
// its own range. The JSON reader applies them, and so does the sweep to every
// configuration it builds. Errors name `label` and the field to change.
void check_fsdp_config(const FsdpConfig& config, const std::string& label);

// Applies `key=value` overrides (the --set flag) to a config object before it is read.
// The value is read as JSON when it parses (8, true, ["layers.*"]) and as a string
// otherwise (full, bf16).
void apply_overrides(nlohmann::json& config, const std::vector<std::string>& assignments);

// How errors name a config: the file, "config" for the defaults, and " (with flags)"
// when overrides were applied.
std::string fsdp_config_label(const std::string& file, const std::vector<std::string>& overrides);

// Loads `file` (empty: the defaults), applies `overrides` and reads the result.
FsdpConfig load_fsdp_config(const std::string& file, const std::vector<std::string>& overrides);

// The mesh on the cluster's GPUs: tp × cp must divide them and dp_outer the rest;
// dp_shard 0 is inferred. The first step of resolve_fsdp_config, and the sweep's first
// check of a point (a mesh that does not tile is the cause to name, before any rule
// on the other knobs).
FsdpConfig tile_mesh(const FsdpConfig& config, const ClusterSpec& cluster,
                     const std::string& label);

// Checks the config against the job: dp_outer × dp_shard × cp × tp must equal the GPU
// count (dp_shard 0 is derived first), tp within one NVLink domain, tp dividing the
// model's heads, KV heads and FFN widths, strategy combinations Megatron-FSDP supports,
// FP8 on a GPU that has it, the sequence length the model accepts, unit patterns that
// match. Returns the resolved config (dp_shard, sequence_parallel and fp8 set).
FsdpConfig resolve_fsdp_config(const FsdpConfig& config, const ModelSpec& model,
                               const ClusterSpec& cluster, const std::string& label);

}  // namespace shardplan
