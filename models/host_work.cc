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

// Host seconds of ops issued eagerly.
HostWork eager(const Ops& o, int64_t syncs) {
  return {
      .forward_seconds = o.forward * kHostOpSeconds + o.forward_launches * kHostLaunchSeconds,
      .backward_seconds = o.backward * kHostOpSeconds + o.backward_launches * kHostLaunchSeconds,
      .forward_syncs = syncs};
}

// ... and captured in a CUDA graph: one call of the graphed callable, one graph launch
// and each kernel node in it, forward and backward alike (Transformer Engine's
// make_graphed_callables captures both).
HostWork graphed(const Ops& o) {
  auto replay = [](double kernels) {
    return kHostOpSeconds + kGraphLaunchSeconds + kernels * kGraphNodeSeconds;
  };
  return {.forward_seconds = replay(o.forward + o.forward_launches),
          .backward_seconds = replay(o.backward + o.backward_launches)};
}

HostWork& operator+=(HostWork& a, const HostWork& b) {
  a.forward_seconds += b.forward_seconds;
  a.backward_seconds += b.backward_seconds;
  a.forward_syncs += b.forward_syncs;
  return a;
}

Ops& operator+=(Ops& a, const Ops& b) {
  a.forward += b.forward;
  a.backward += b.backward;
  a.forward_launches += b.forward_launches;
  a.backward_launches += b.backward_launches;
  return a;
}

// A subtree's ops and syncs, issued eagerly.
struct Tally {
  Ops ops;
  int64_t syncs = 0;
};

Tally tally(const Module& module, const BatchShape& shape) {
  Tally t;
  for_each_module(module, [&](const Module& m) {
    t.ops += own_ops(m, shape);
    t.syncs += own_syncs(m, shape);
  });
  return t;
}

// The share of the dispatch's own ops that its preprocessing runs in forward (the routing
// map's counts and the permutation's indices, of the MoE block's 12): what moe_preprocess
// captures.
constexpr double kPreprocessOps = 4;

// A decoder layer under per-layer CUDA graphs (Megatron's local or transformer_engine
// implementation): children input norm, attention, pre-MLP norm, MLP or MoE block; the
// layer's two residual adds go with the attention and MLP parts.
HostWork layer_host_work(const Module& layer, const BatchShape& shape) {
  const CudaGraphScopes g = shape.cuda_graphs;
  const Ops own = own_ops(layer, shape);
  const Ops half = {.forward = own.forward / 2, .backward = own.backward / 2};
  Ops attn = half;
  attn += tally(layer.children[0], shape).ops;
  attn += tally(layer.children[1], shape).ops;
  const Module& block = layer.children[3];
  const Tally mlp_norm = tally(layer.children[2], shape);
  const Tally whole_block = tally(block, shape);
  HostWork w =
      g.has(CudaGraphScope::layer) || g.has(CudaGraphScope::attn) ? graphed(attn) : eager(attn, 0);
  const bool moe = block.type == "MoE";
  // The layer scope takes an MoE block whole only when its dispatch does not sync.
  const bool whole =
      moe ? (g.has(CudaGraphScope::moe) || (g.has(CudaGraphScope::layer) && whole_block.syncs == 0))
          : (g.has(CudaGraphScope::mlp) || g.has(CudaGraphScope::layer));
  Ops mlp = half;
  mlp += mlp_norm.ops;
  if (whole) {
    mlp += whole_block.ops;
    w += graphed(mlp);
    return w;
  }
  if (!moe || !(g.has(CudaGraphScope::moe_router) || g.has(CudaGraphScope::layer))) {
    mlp += whole_block.ops;
    w += eager(mlp, whole_block.syncs);
    return w;
  }
  // moe_router (and a dropless block under layer, which Megatron graphs up to its
  // dispatch): the pre-MLP norm, the router and the shared experts captured, with the
  // preprocessing if asked; the dispatch's sync, the routed experts and the combine eager.
  // Megatron runs the shared experts inside the router's graph when they are not
  // overlapped with the dispatch (moe_shared_expert_overlap, not modelled).
  Ops router;
  for (const Module& child : block.children) {
    if (child.type == "Router" || child.type == "SharedExpert") router += tally(child, shape).ops;
  }
  mlp += router;
  Ops rest = whole_block.ops;
  rest.forward -= router.forward;
  rest.backward -= router.backward;
  rest.forward_launches -= router.forward_launches;
  rest.backward_launches -= router.backward_launches;
  if (g.has(CudaGraphScope::moe_preprocess) || g.has(CudaGraphScope::layer)) {
    mlp.forward += kPreprocessOps;
    rest.forward -= kPreprocessOps;
  }
  w += graphed(mlp);
  w += eager(rest, whole_block.syncs);
  return w;
}

void add_host_work(const Module& m, const BatchShape& shape, HostWork& w) {
  if ((m.type == "DecoderLayer" || m.type == "MoEDecoderLayer") && m.children.size() == 4) {
    w += layer_host_work(m, shape);
    return;
  }
  w += eager(own_ops(m, shape), own_syncs(m, shape));
  for (const Module& child : m.children) add_host_work(child, shape, w);
}

}  // namespace

HostWork host_work(const Module& module, const BatchShape& shape) {
  const CudaGraphScopes g = shape.cuda_graphs;
  if (g.has(CudaGraphScope::full_iteration)) {
    // One graph for every micro-batch's forward and backward: its launch is paid once a
    // step, its nodes each; a captured step makes no host syncs.
    const Ops o = tally(module, shape).ops;
    return {.forward_seconds = (o.forward + o.forward_launches) * kGraphNodeSeconds,
            .backward_seconds = (o.backward + o.backward_launches) * kGraphNodeSeconds};
  }
  HostWork w;
  if (!g.any()) {
    const Tally t = tally(module, shape);
    return eager(t.ops, t.syncs);
  }
  add_host_work(module, shape, w);
  return w;
}

}  // namespace shardplan
