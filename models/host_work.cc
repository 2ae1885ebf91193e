#include "models/host_work.h"

namespace shardplan {
namespace {

// Ops a module's own forward and backward issue from Python, and launches from C++ loops.
struct Ops {
  double forward = 0;
  double backward = 0;
  double forward_launches = 0;
  double backward_launches = 0;
};

// Counts read off each stack's code path (docs/research/host_overhead.md §4 and
// docs/model.md "Host time"); no public profile counts kernels per layer, so these are
// estimates of medium-low confidence, rounded up where the path branches.
Ops gemm_ops(const Module& m, const BatchShape& shape) {
  const bool te = shape.stack == Stack::megatron_te;
  // Megatron's TE layers fuse q, k and v into linear_qkv and gate and up into linear_fc1:
  // one call for each pair or triple (gpt_layer_specs.py at Megatron-LM d98e8a6).
  if (te && (m.name.ends_with(".k_proj") || m.name.ends_with(".v_proj") ||
             m.name.ends_with(".up_proj"))) {
    return {};
  }
  Ops o;
  const bool fp8 = shape.fp8 && !m.cost.bf16_under_fp8;
  if (m.stacked_experts > 1 && te) {
    // Transformer Engine's GroupedLinear: one cuBLAS GEMM per local expert from its C++
    // loop, and per GEMM two torch.empty calls besides torch.split
    // (NVIDIA/TransformerEngine#1499); backward the input and weight gradients.
    const double e = static_cast<double>(m.stacked_experts);
    o = {.forward = 2, .backward = 2, .forward_launches = 3 * e, .backward_launches = 4 * e};
  } else {
    // One GEMM forward (torch._grouped_mm for a torch stack's experts); two backward.
    o = {.forward = 1, .backward = 2};
  }
  if (fp8) {
    // Transformer Engine quantizes the input (the weights' cast is cached after the first
    // micro-batch) and the output gradient; torchao's eager Float8Linear computes each
    // operand's amax, scale and cast as separate ops; compiled, they fuse.
    const bool eager_torch = shape.stack == Stack::torch_eager;
    o.forward += eager_torch ? 6 : 1;
    o.backward += eager_torch ? 3 : 1;
  }
  if (m.type == "Router") {
    // Score function, top-k, the routing map and the auxiliary loss.
    const bool compiled = shape.stack == Stack::torch_compile;
    o.forward += compiled ? 2 : 8;
    o.backward += compiled ? 2 : 6;
  }
  return o;
}

Ops own_ops(const Module& m, const BatchShape& shape) {
  const bool te = shape.stack == Stack::megatron_te;
  const bool eager = shape.stack == Stack::torch_eager;
  const bool compiled = shape.stack == Stack::torch_compile;
  switch (m.cost.kind) {
    case ComputeKind::gemm:
      return gemm_ops(m, shape);
    case ComputeKind::attention: {
      // TE: the fused attention kernel and its fused RoPE on q and k. Eager torchtitan:
      // RoPE through complex fp32 (a cast, a product and a cast back for each of q and k),
      // the transposes SDPA wants contiguous, and the kernel. Compiled: RoPE fuses.
      if (te) return {.forward = 3, .backward = 3};
      if (compiled) return {.forward = 2, .backward = 2};
      return {.forward = 9, .backward = 9};
    }
    case ComputeKind::embedding:
      return {.forward = 1, .backward = 3};
    default:
      break;
  }
  if (m.type == "RMSNorm" || m.type == "LayerNorm") {
    // One normalisation kernel; backward the input gradient and the weight's reduction.
    // PyTorch's composite RMSNorm (before the fused kernel) runs pow, mean, add, rsqrt and
    // two products.
    if (eager && m.type == "RMSNorm" && !shape.fused_rms_norm) return {.forward = 6, .backward = 8};
    return {.forward = 1, .backward = 2};
  }
  if (m.type == "SwiGLU") return eager ? Ops{.forward = 2, .backward = 3} : Ops{1, 1};
  if (m.type == "GELU") return {.forward = 1, .backward = 1};
  if (m.type == "DecoderLayer" || m.type == "MoEDecoderLayer") {
    // The two residual adds (Megatron's bias-dropout-add) and their gradients' sums.
    return compiled ? Ops{.forward = 1, .backward = 1} : Ops{.forward = 2, .backward = 2};
  }
  if (m.type == "MoE") {
    // Dispatch and combine around the experts: the permutation, the per-expert counts and
    // their exchange, the chunk sort and unsort, the unpermutation (the all-to-alls are
    // plan ops of their own).
    return {.forward = 12, .backward = 10};
  }
  if (m.type == "CrossEntropy") {
    if (te) return {.forward = 12, .backward = 6};  // vocabulary-parallel, unfused
    if (shape.loss_kernel == LossKernel::compiled) return {.forward = 1, .backward = 1};
    return {.forward = 4, .backward = 3};
  }
  return {};
}

// A dropless dispatch needs its split sizes on the host (Megatron: every dispatcher but
// drop-and-pad; torchtitan's all-to-all when experts span ranks).
int64_t own_syncs(const Module& m, const BatchShape& shape) {
  if (m.type != "MoE") return 0;
  if (shape.stack == Stack::megatron_te) return m.cost.host_syncs;
  for (const ModuleComm& c : m.cost.comms) {
    if (c.phase == CommPhase::forward && (c.axis == MeshAxis::ep || c.axis == MeshAxis::ep_etp))
      return 1;
  }
  return 0;
}

}  // namespace

HostWork host_work(const Module& module, const BatchShape& shape) {
  HostWork w;
  for_each_module(module, [&](const Module& m) {
    const Ops o = own_ops(m, shape);
    w.forward_seconds += o.forward * kHostOpSeconds + o.forward_launches * kHostLaunchSeconds;
    w.backward_seconds += o.backward * kHostOpSeconds + o.backward_launches * kHostLaunchSeconds;
    w.forward_syncs += own_syncs(m, shape);
  });
  return w;
}

}  // namespace shardplan
