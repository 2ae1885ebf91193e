#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/dtype.h"
#include "models/parallel.h"

namespace shardplan {

// One tensor a leaf module owns.
struct Parameter {
  std::string name;            // local name within its module, e.g. "weight"
  std::vector<int64_t> shape;  // PyTorch layout, e.g. Linear weight [out, in]
  DType dtype = DType::bf16;   // dtype the model is written in; FsdpConfig may override
  bool requires_grad = true;

  int64_t numel() const;
};

// What sort of work a module's forward does, so the simulator can apply a per-kind
// efficiency (GEMM, attention, elementwise/norm).
enum class ComputeKind { none, gemm, attention, elementwise, embedding };

// Activation bytes split by what they scale with: `elements` are stored in the
// activation dtype (bf16 in mixed precision), `fixed_bytes` do not change with it
// (dropout masks: 1 byte; norm statistics and loss logits: fp32; token ids: int64).
struct Footprint {
  double elements = 0;
  double fixed_bytes = 0;

  double bytes(int64_t activation_bytes) const {
    return elements * static_cast<double>(activation_bytes) + fixed_bytes;
  }
  Footprint& operator+=(const Footprint& other) {
    elements += other.elements;
    fixed_bytes += other.fixed_bytes;
    return *this;
  }
};

// A collective a module runs on each micro-batch over a model-parallel axis, sized as
// nccl-tests counts it (all-gather: the gathered output; reduce-scatter: the input;
// all-reduce: the buffer; send/recv: what each rank sends; all-to-all: each rank's send
// buffer), per token of the micro-batch on this rank. `count` back-to-back repetitions
// (ring attention's cp − 1 steps). docs/model.md "Tensor and context parallelism".
struct ModuleComm {
  CommPhase phase = CommPhase::forward;
  CommKind kind = CommKind::all_gather;
  MeshAxis axis = MeshAxis::tp;
  Footprint per_token;
  int64_t count = 1;
  // A GEMM input (sequence-parallel gathers of the normed input and of the output
  // gradient): under FP8 Transformer Engine quantizes it before the all-gather, so it
  // moves 1-byte elements (layernorm_linear.py `with_quantized_all_gather = fp8`;
  // base.py grad_output_preprocess "FP8 case with gather"). Reductions stay in bf16.
  bool fp8_gemm_input = false;
};

// Megatron-Core's --recompute-modules, read under --recompute-granularity selective
// (transformer_config.py at Megatron-LM d98e8a6; docs/research/recompute_modules.md).
// core_attn is shardplan's selective recompute (selective_recompute below). layernorm,
// moe_act and mla_up_proj discard an output once its consumer has run and re-create it
// before the consumer's backward (CheckpointWithoutOutput); mlp, moe and shared_experts
// checkpoint their module whole and re-run its forward, collectives included.
enum class RecomputeModule : uint8_t {
  core_attn,
  layernorm,
  moe_act,
  mla_up_proj,
  mlp,
  moe,
  shared_experts
};

// A set of them; Megatron's default under selective is {core_attn}.
struct RecomputeModules {
  uint8_t bits = 1;  // core_attn

  bool has(RecomputeModule m) const { return (bits >> static_cast<int>(m)) & 1U; }
  void add(RecomputeModule m) { bits = static_cast<uint8_t>(bits | (1U << static_cast<int>(m))); }
  bool operator==(const RecomputeModules&) const = default;
};

// What one of those modules takes from this module's saved activations when it is
// listed: `dropped` stops being saved (it is re-created in backward, one layer at a
// time), and with `reruns` this module's forward (its FLOPs, its memory traffic and its
// forward collectives) runs again inside backward; `rerun_io_elements_per_token` is
// memory-bound work the re-run adds beyond that (MLA's RoPE and concatenations, which
// shardplan counts in core attention's traffic).
struct RecomputeDrop {
  RecomputeModule module = RecomputeModule::core_attn;
  Footprint dropped;
  bool reruns = false;
  double rerun_io_elements_per_token = 0;
  // It also takes the module's own FP8 copy of its input (fp8_own_copy_per_token).
  bool drops_fp8_copy = false;
};

// Cost of one module's own work, per token of the micro-batch. Terms marked "ctx" scale
// also with the sequence length (core attention), so they grow as b·s².
struct ModuleCost {
  ComputeKind kind = ComputeKind::none;
  double fwd_flops_per_token = 0;        // matmuls: 2·m·n·k per token
  double fwd_flops_per_token_ctx = 0;    // × seq_len; counted as if non-causal
  bool causal = false;                   // causal masking: executed ctx FLOPs are halved
  double bwd_flops_factor = 2.0;         // executed backward FLOPs ÷ forward FLOPs
  double fwd_io_elements_per_token = 0;  // activation elements read + written (memory-bound work)
  Footprint saved_per_token;             // saved for backward, recompute none
  // The part of saved_per_token that is this GEMM's input, which Transformer Engine keeps
  // quantized (1 byte and its scales) when the GEMM runs in FP8.
  Footprint saved_gemm_input_per_token;
  // A GEMM that reads the same input as a sibling which saves it in bf16, as a Transformer
  // Engine module of its own: under FP8 it saves its own quantized copy (MLA's key-value
  // down projection beside the query's; the shared experts' fc1 beside the router).
  Footprint fp8_own_copy_per_token;
  Footprint saved_per_token_ctx;               // × seq_len (attention probabilities without flash)
  bool selective_recompute = false;            // re-run under recompute: selective
  Footprint selective_kept_per_token;          // what stays saved when re-run selectively
  std::vector<RecomputeDrop> recompute_drops;  // under Megatron's other recompute_modules
  bool sac_op_recompute = false;               // re-run under sac_op (an even-numbered matmul)
  Footprint sac_op_kept_per_token;             // what stays saved under sac_op (0 outside a layer)
  Footprint output_per_token;                  // a matmul's output (sac_op keeps the odd ones')
  Footprint grad_output_per_token;        // its gradient as it arrives (a sequence-parallel shard)
  Footprint eager_extra_saved_per_token;  // what eager PyTorch keeps beyond fused kernels
  // Activation elements eager PyTorch's unfused kernels read and write beyond the fused
  // ones' fwd_io_elements_per_token (norms in fp32 pieces, RoPE through complex fp32,
  // SiLU and its product apart, residual adds on their own).
  double eager_extra_io_elements_per_token = 0;
  // The part of it a composite RMSNorm moves and a fused one (recent PyTorch) does not.
  double eager_composite_norm_io_elements_per_token = 0;
  Footprint workspace_per_token;          // held while it runs, beyond what it saves (fused)
  Footprint pytorch_workspace_per_token;  // the same on the PyTorch stacks
  // The cross entropy on the PyTorch stacks when the logits stay in the activation dtype
  // (loss_kernel native or compiled): what it saves, and what it holds instead of the two
  // above, eager and compiled.
  bool logits_loss = false;
  Footprint native_loss_saved_per_token;
  Footprint native_loss_workspace_per_token;
  Footprint compiled_loss_workspace_per_token;
  bool bf16_under_fp8 = false;    // a GEMM that stays in BF16 when the job runs FP8
  Footprint input_per_token;      // activation entering the module (full recompute keeps it)
  double token_fraction = 1.0;    // share of tokens this module sees (MoE expert: k/E)
  std::vector<ModuleComm> comms;  // tensor- and context-parallel collectives
  // Device-to-host synchronisations its forward makes on Megatron: a dropless MoE
  // dispatch needs the tokens per expert on the host (models/host_work.h).
  int64_t host_syncs = 0;
};

// A node of the module tree. Names are fully qualified ("layers.3.self_attn.q_proj");
// the root's name is empty.
struct Module {
  std::string name;
  std::string type;  // class-like name: "Linear", "RMSNorm", "DecoderLayer", ...
  std::vector<Parameter> parameters;
  // A grouped GEMM's weights (Megatron's TEGroupedMLP, torchtitan's GroupedExperts): each
  // parameter stacks this many experts along its first dimension, and each routed token
  // runs through one of them (its FLOPs per token are one expert's).
  int64_t stacked_experts = 1;
  ModuleCost cost;
  std::vector<Module> children;
};

struct TransformerArch;

struct ModelSpec {
  std::string name;    // "llama3-8b"
  std::string family;  // "transformer", "moe" or "explicit"
  std::string source;  // where the architecture is published
  Module root;
  // Module-name patterns wrapped as FSDP units unless the config says otherwise
  // (transformer families: every decoder layer).
  std::vector<std::string> default_unit_modules;
  // Headline dimensions for tables; 0 where the family has none (explicit models).
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_seq_len = 0;  // longest sequence the model accepts; 0 = no limit
  // The architecture a transformer or MoE model was built from, so it can be rebuilt
  // for one rank of a tensor- or context-parallel group; null for explicit models.
  std::shared_ptr<const TransformerArch> arch;
};

// Visits every module, parents before children, in forward execution order.
void for_each_module(const Module& root, const std::function<void(const Module&)>& visit);

// Parameters owned by `module` and all its descendants.
int64_t parameter_count(const Module& module);
// Parameters owned by the tree, counted without overflow (a shape's dimensions may
// multiply past int64): nullopt when they exceed `limit`.
std::optional<int64_t> parameter_count_within(const Module& module, int64_t limit);
// Parameters with requires_grad: the ones with gradients and optimizer state.
int64_t trainable_parameter_count(const Module& module);
// Parameters weighted by the share of tokens that use them: the MoE "active" count.
double active_parameter_count(const Module& module);

// Finds a module by fully-qualified name; nullptr when absent.
const Module* find_module(const Module& root, const std::string& name);

}  // namespace shardplan
