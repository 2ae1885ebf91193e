#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "models/model_spec.h"

namespace shardplan {

// Activation recomputation: none; selective re-runs the core attention in backward
// (Korthikanti et al. 2022, Megatron's --recompute-granularity selective); full keeps only
// each checkpointed module's input. torchtitan's policies (torchtitan/distributed/
// activation_checkpoint.py): sac_op saves the outputs of attention and of every other
// matmul of a layer, counted in forward order from its first, and re-runs the rest
// (selective_ac_option "op"); sac_layer checkpoints every recompute_every-th layer whole
// and keeps the others' activations (selective_ac_option "N").
enum class Recompute { none, selective, full, sac_op, sac_layer };

std::string_view recompute_name(Recompute recompute);
// Whether `recompute` re-runs whole checkpointed modules (full, sac_layer).
bool recomputes_whole_modules(Recompute recompute);
Recompute parse_recompute(std::string_view text, const std::string& file, const std::string& field);

// Megatron's recompute module names ("core_attn", "layernorm", ...), in Megatron's order.
std::vector<std::string> recompute_module_names();
// A list of names as a set; an unknown name or a module Megatron has and shardplan does
// not model (gdn_norm_out, mhc, ...) is refused at file/field.
RecomputeModules parse_recompute_modules(const std::vector<std::string>& names,
                                         const std::string& file, const std::string& field);
// The set's names in Megatron's order.
std::vector<std::string> recompute_module_list(RecomputeModules modules);

// The software that runs the model, as far as it changes what a kernel keeps, holds or
// reaches: megatron-te, Megatron with Transformer Engine's fused kernels (fused SwiGLU,
// cuDNN/FlashAttention-3 attention, the vocabulary-parallel fused cross entropy);
// torch-compile and torch-eager, PyTorch FSDP2 stacks such as torchtitan: attention
// through SDPA, the cross entropy on fp32 logits (torchtitan compiles the blocks, not the
// loss), and in eager mode every op's own saved tensors (SiLU keeps its output beside the
// gate and up projections).
enum class Stack { megatron_te, torch_compile, torch_eager };

std::string_view stack_name(Stack stack);
Stack parse_stack(std::string_view text, const std::string& file, const std::string& field);
std::vector<std::string> stack_names();

// How the PyTorch stacks run the cross entropy: upcast, eager on an fp32 copy of the
// logits (torchtitan's cross_entropy(pred.float()), uncompiled before April 2025); native,
// eager F.cross_entropy on the logits as the output layer leaves them (KempnerForge);
// compiled, torch.compile of the loss (torchtitan with compile on since April 2025): one
// fused kernel each way that keeps only the activation-dtype logits.
enum class LossKernel { upcast, native, compiled };

std::string_view loss_kernel_name(LossKernel k);
std::optional<LossKernel> parse_loss_kernel(std::string_view text);
std::vector<std::string> loss_kernel_names();

// The parts of each step a Megatron job captures in CUDA graphs, in Megatron's names
// (--cuda-graph-impl, --cuda-graph-modules: cuda_graph_config.py, transformer_config.py at
// Megatron-LM d98e8a6): layer, each layer whole (the per-layer implementations with no
// module list; a dropless MoE block stays eager, its dispatch syncs with the host);
// attn, the input norm and attention; mlp, the pre-MLP norm and a dense MLP; moe, the
// pre-MLP norm and a drop-and-pad MoE block; moe_router, the pre-MLP norm and the router;
// moe_preprocess, the dispatch's preprocessing (with moe_router); full_iteration, every
// micro-batch's forward and backward (--cuda-graph-impl full_iteration; no host syncs).
// A captured part costs the host one graph replay instead of its ops (docs/model.md
// "Host time").
enum class CudaGraphScope : uint8_t {
  layer,
  attn,
  mlp,
  moe,
  moe_router,
  moe_preprocess,
  full_iteration
};

struct CudaGraphScopes {
  uint8_t bits = 0;  // eager

  bool has(CudaGraphScope s) const { return (bits >> static_cast<int>(s)) & 1U; }
  void add(CudaGraphScope s) { bits = static_cast<uint8_t>(bits | (1U << static_cast<int>(s))); }
  bool any() const { return bits != 0; }
  bool operator==(const CudaGraphScopes&) const = default;
};

std::vector<std::string> cuda_graph_scope_names();
// A list of names as a set; an unknown name is refused at file/field.
CudaGraphScopes parse_cuda_graph_scopes(const std::vector<std::string>& names,
                                        const std::string& file, const std::string& field);
// The set's names in the order above.
std::vector<std::string> cuda_graph_scope_list(CudaGraphScopes scopes);

// The shape of one micro-batch on one rank. Context parallelism splits each sequence over
// `context_parallel` ranks: a rank holds seq_len / cp of its tokens, whose queries still
// attend over all seq_len positions.
struct BatchShape {
  int64_t micro_batch = 1;       // sequences
  int64_t seq_len = 2048;        // tokens per sequence, whole
  int64_t activation_bytes = 2;  // bytes per activation element (bf16)
  int64_t context_parallel = 1;  // ranks each sequence is split over
  bool fp8 = false;              // FP8 GEMMs: their inputs cross the tp ranks as 1-byte elements
  Stack stack = Stack::megatron_te;
  // Eager PyTorch runs RMSNorm as one fused kernel (since pytorch/pytorch#153666), not the
  // composite.
  bool fused_rms_norm = true;
  LossKernel loss_kernel = LossKernel::upcast;  // the PyTorch stacks' cross entropy
  // What selective recompute re-runs (Megatron's recompute_modules; core_attn alone is
  // the selective recompute of Korthikanti et al.).
  RecomputeModules recompute_modules;
  CudaGraphScopes cuda_graphs;  // what Megatron captures in CUDA graphs

  // Tokens this rank holds.
  int64_t tokens() const { return micro_batch * seq_len / context_parallel; }
};

// FLOPs the forward of `module` (and its subtree) executes on one micro-batch; causal
// attention counts half of its score and value matmuls, as flash attention skips them.
double forward_flops(const Module& module, const BatchShape& shape);
// FLOPs the backward executes (per-module factor: 2× for matmuls, 2.5× for flash attention).
double backward_flops(const Module& module, const BatchShape& shape);
// The parts of forward_flops / backward_flops that modules of `kind` execute.
double forward_flops_of_kind(const Module& module, const BatchShape& shape, ComputeKind kind);
double backward_flops_of_kind(const Module& module, const BatchShape& shape, ComputeKind kind);
// The GEMM FLOPs of modules that stay in BF16 under FP8 (the output layer), forward and
// backward.
double forward_bf16_gemm_flops(const Module& module, const BatchShape& shape);
double backward_bf16_gemm_flops(const Module& module, const BatchShape& shape);
// Activation bytes `module`'s forward reads and writes on one micro-batch as memory-bound
// work (every module's fwd_io_elements_per_token, the eager stack's unfused extras), each
// module at its token share (an MoE expert's children at the routed copies).
double forward_io_bytes(const Module& module, const BatchShape& shape);
// The HBM bytes FP8 GEMMs add on one micro-batch (0 unless shape.fp8): each FP8 matmul's
// input is cast in forward and its output gradient in backward, at 4 bytes per element —
// read bf16 (2), write the FP8 copy and, on Hopper, its transpose (1 + 1) in one pass
// (Transformer Engine's cast_transpose; torchao's compiled tensorwise cast moves the same 4
// with the amax fused, docs/research/fp8.md). Under sequence parallelism the casts run on
// the rank's shard before the FP8 all-gather. Output-layer matmuls stay BF16.
struct Fp8CastBytes {
  double forward = 0;
  double backward = 0;
};
Fp8CastBytes fp8_cast_bytes(const Module& module, const BatchShape& shape);
// One matmul of a forward pass: (m × k) · (k × n), m the tokens it sees. A grouped GEMM
// (an MoE layer's local experts in one launch) splits its tokens over `groups` matmuls
// with the same n and k: the token dimension is m, or k for a weight gradient.
struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  int64_t groups = 1;
  bool weight_gradient = false;  // tokens in k (backward's dW = dYᵀ · X)
};
// The matmuls of `module`'s forward on one micro-batch: every GEMM-kind module's 2-D
// weight [out, in] (PyTorch layout) as (tokens × its token share, out, in).
std::vector<GemmShape> forward_gemms(const Module& module, const BatchShape& shape);

// Forward FLOPs of the modules re-run inside backward under selective or sac_op
// recompute (0 under the others: whole modules re-run as their own forward); with `kind`,
// only those of modules of that kind.
double recompute_flops(const Module& module, const BatchShape& shape, Recompute recompute,
                       std::optional<ComputeKind> kind = std::nullopt);
// Whether `m` re-runs its own forward inside backward under selective recompute with the
// shape's recompute_modules (its collectives too).
bool reruns_selectively(const Module& m, const BatchShape& shape);
// Activation bytes the selective re-run's memory-bound work reads and writes (norms,
// activations re-run by recompute_modules), on one micro-batch; 0 under other modes.
double recompute_io_bytes(const Module& module, const BatchShape& shape, Recompute recompute);
// Bytes selective recompute stops saving in `module`'s subtree through recompute_modules
// other than core_attn: its backward re-creates them (one layer's at a time).
double recompute_dropped_bytes(const Module& module, const BatchShape& shape, Recompute recompute);
// Model FLOPs of one training pass in the PaLM/Megatron convention used for MFU: 3× the
// forward, no causal discount, no recompute (PaLM, Chowdhery et al. 2022, App. B).
double model_training_flops(const Module& module, const BatchShape& shape);

// Bytes of activations `module` keeps from its forward until its backward, for one
// micro-batch. With Recompute::full the module is one checkpointed region and keeps only
// its input; with selective, modules marked `selective_recompute` keep only their inputs
// (with core_attn among the shape's recompute_modules) and the other listed modules take
// their recompute_drops;
// with sac_op every module keeps its `sac_op_kept_per_token` (a region the builder marked:
// a decoder layer). sac_layer is decided per module by the caller (full or none).
double saved_activation_bytes(const Module& module, const BatchShape& shape, Recompute recompute);

// Bytes the largest module of `module`'s subtree holds while it runs, beyond what it saves
// (the cross entropy's logits copies), on one micro-batch; modules run one at a time.
double workspace_bytes(const Module& module, const BatchShape& shape);

// Bytes one of `module`'s collectives moves on one micro-batch (nccl-tests' convention,
// ModuleComm): GEMM inputs cross in 1-byte elements under FP8, the rest in the activation
// dtype; scaled by the module's token share.
double comm_bytes(const Module& module, const ModuleComm& comm, const BatchShape& shape);

}  // namespace shardplan
