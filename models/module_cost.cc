#include "models/module_cost.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <vector>

#include "models/error.h"
#include "models/name_table.h"
#include "models/suggest.h"

namespace shardplan {
namespace {

constexpr NameTable<Recompute, 5> kRecomputeNames = {{{Recompute::none, "none"},
                                                      {Recompute::selective, "selective"},
                                                      {Recompute::full, "full"},
                                                      {Recompute::sac_op, "sac_op"},
                                                      {Recompute::sac_layer, "sac_layer"}}};

constexpr NameTable<RecomputeModule, 7> kRecomputeModuleNames = {
    {{RecomputeModule::core_attn, "core_attn"},
     {RecomputeModule::layernorm, "layernorm"},
     {RecomputeModule::moe_act, "moe_act"},
     {RecomputeModule::mla_up_proj, "mla_up_proj"},
     {RecomputeModule::mlp, "mlp"},
     {RecomputeModule::moe, "moe"},
     {RecomputeModule::shared_experts, "shared_experts"}}};

constexpr NameTable<CudaGraphScope, 7> kCudaGraphScopeNames = {
    {{CudaGraphScope::layer, "layer"},
     {CudaGraphScope::attn, "attn"},
     {CudaGraphScope::mlp, "mlp"},
     {CudaGraphScope::moe, "moe"},
     {CudaGraphScope::moe_router, "moe_router"},
     {CudaGraphScope::moe_preprocess, "moe_preprocess"},
     {CudaGraphScope::full_iteration, "full_iteration"}}};

constexpr NameTable<LossKernel, 3> kLossKernels = {{{LossKernel::upcast, "upcast"},
                                                    {LossKernel::native, "native"},
                                                    {LossKernel::compiled, "compiled"}}};

constexpr NameTable<Stack, 3> kStackNames = {{{Stack::megatron_te, "megatron-te"},
                                              {Stack::torch_compile, "torch-compile"},
                                              {Stack::torch_eager, "torch-eager"}}};

// The PyTorch stacks' cross entropy on logits left in the activation dtype (eager or
// compiled), rather than on an fp32 copy.
bool native_loss(const Module& m, const BatchShape& shape) {
  return m.cost.logits_loss && shape.stack != Stack::megatron_te &&
         shape.loss_kernel != LossKernel::upcast;
}

// A module's effective token share: its own when it states one, else its parent's.
double share(const Module& module, double parent_share) {
  return module.cost.token_fraction != 1.0 ? module.cost.token_fraction : parent_share;
}

template <typename PerModule>
double sum_tree(const Module& module, double parent_share, const PerModule& per_module) {
  const double s = share(module, parent_share);
  double total = per_module(module, s);
  for (const Module& child : module.children) total += sum_tree(child, s, per_module);
  return total;
}

double tokens_of(const BatchShape& shape) {
  return static_cast<double>(shape.tokens());
}

double own_forward_flops(const Module& m, const BatchShape& shape, bool causal_discount) {
  const double ctx_factor = (causal_discount && m.cost.causal) ? 0.5 : 1.0;
  return m.cost.fwd_flops_per_token +
         m.cost.fwd_flops_per_token_ctx * static_cast<double>(shape.seq_len) * ctx_factor;
}

}  // namespace

std::string_view recompute_name(Recompute recompute) {
  return name_of(kRecomputeNames, recompute);
}

std::string_view loss_kernel_name(LossKernel k) {
  return name_of(kLossKernels, k);
}
std::optional<LossKernel> parse_loss_kernel(std::string_view text) {
  return value_of(kLossKernels, text);
}
std::vector<std::string> loss_kernel_names() {
  return names_of(kLossKernels);
}

std::string_view stack_name(Stack stack) {
  return name_of(kStackNames, stack);
}

Stack parse_stack(std::string_view text, const std::string& file, const std::string& field) {
  if (auto stack = value_of(kStackNames, text)) return *stack;
  throw InputError(file, field, unknown_name_message("stack", text, names_of(kStackNames)));
}

std::vector<std::string> stack_names() {
  return names_of(kStackNames);
}

std::vector<std::string> recompute_module_names() {
  return names_of(kRecomputeModuleNames);
}

RecomputeModules parse_recompute_modules(const std::vector<std::string>& names,
                                         const std::string& file, const std::string& field) {
  RecomputeModules out{.bits = 0};
  for (const std::string& name : names) {
    if (auto m = value_of(kRecomputeModuleNames, name)) {
      out.add(*m);
      continue;
    }
    // Megatron's modules for Gated DeltaNet and hyper-connections, architectures
    // shardplan's models do not have (transformer_config.py:1943-1962).
    for (std::string_view other : {"gdn_norm_out", "gdp_in_proj", "gdp_qkv", "mhc"}) {
      if (name == other) {
        throw InputError(file, field,
                         fmt::format("'{}' recomputes part of an architecture shardplan does not "
                                     "model; known: {}",
                                     name, fmt::join(recompute_module_names(), ", ")));
      }
    }
    throw InputError(file, field,
                     unknown_name_message("recompute module", name, recompute_module_names()));
  }
  return out;
}

std::vector<std::string> recompute_module_list(RecomputeModules modules) {
  std::vector<std::string> out;
  for (const auto& [m, name] : kRecomputeModuleNames) {
    if (modules.has(m)) out.emplace_back(name);
  }
  return out;
}

std::vector<std::string> cuda_graph_scope_names() {
  return names_of(kCudaGraphScopeNames);
}

CudaGraphScopes parse_cuda_graph_scopes(const std::vector<std::string>& names,
                                        const std::string& file, const std::string& field) {
  CudaGraphScopes out;
  for (const std::string& name : names) {
    const auto scope = value_of(kCudaGraphScopeNames, name);
    if (!scope) {
      throw InputError(file, field,
                       unknown_name_message("CUDA graph scope", name, cuda_graph_scope_names()));
    }
    out.add(*scope);
  }
  return out;
}

std::vector<std::string> cuda_graph_scope_list(CudaGraphScopes scopes) {
  std::vector<std::string> out;
  for (const auto& [s, name] : kCudaGraphScopeNames) {
    if (scopes.has(s)) out.emplace_back(name);
  }
  return out;
}

bool recomputes_whole_modules(Recompute recompute) {
  return recompute == Recompute::full || recompute == Recompute::sac_layer;
}

Recompute parse_recompute(std::string_view text, const std::string& file,
                          const std::string& field) {
  if (auto recompute = value_of(kRecomputeNames, text)) return *recompute;
  throw InputError(file, field,
                   unknown_name_message("recompute mode", text, names_of(kRecomputeNames)));
}

double forward_flops(const Module& module, const BatchShape& shape) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return own_forward_flops(m, shape, true) * tokens_of(shape) * s;
  });
}

double backward_flops(const Module& module, const BatchShape& shape) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return own_forward_flops(m, shape, true) * m.cost.bwd_flops_factor * tokens_of(shape) * s;
  });
}

double forward_flops_of_kind(const Module& module, const BatchShape& shape, ComputeKind kind) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return m.cost.kind == kind ? own_forward_flops(m, shape, true) * tokens_of(shape) * s : 0.0;
  });
}

double backward_flops_of_kind(const Module& module, const BatchShape& shape, ComputeKind kind) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return m.cost.kind == kind
               ? own_forward_flops(m, shape, true) * m.cost.bwd_flops_factor * tokens_of(shape) * s
               : 0.0;
  });
}

double forward_bf16_gemm_flops(const Module& module, const BatchShape& shape) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return m.cost.bf16_under_fp8 ? own_forward_flops(m, shape, true) * tokens_of(shape) * s : 0.0;
  });
}

double backward_bf16_gemm_flops(const Module& module, const BatchShape& shape) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return m.cost.bf16_under_fp8
               ? own_forward_flops(m, shape, true) * m.cost.bwd_flops_factor * tokens_of(shape) * s
               : 0.0;
  });
}

double forward_io_bytes(const Module& module, const BatchShape& shape) {
  const bool eager = shape.stack == Stack::torch_eager;
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    const double extra =
        eager ? m.cost.eager_extra_io_elements_per_token -
                    (shape.fused_rms_norm ? m.cost.eager_composite_norm_io_elements_per_token : 0.0)
              : 0.0;
    return (m.cost.fwd_io_elements_per_token + extra) * tokens_of(shape) * s *
           static_cast<double>(shape.activation_bytes);
  });
}

Fp8CastBytes fp8_cast_bytes(const Module& module, const BatchShape& shape) {
  Fp8CastBytes out;
  if (!shape.fp8) return out;
  constexpr double kCastBytesPerElement = 4.0;
  const double tokens = tokens_of(shape);
  sum_tree(module, 1.0, [&](const Module& m, double s) {
    if (m.cost.kind != ComputeKind::gemm || m.cost.bf16_under_fp8 || m.parameters.empty())
      return 0.0;
    // Under sequence parallelism both stacks cast the shard and gather it in FP8, so the
    // casts see a column-parallel input and a row-parallel output gradient once per rank's
    // share of the tokens.
    out.forward += kCastBytesPerElement * m.cost.input_per_token.elements * tokens * s;
    out.backward += kCastBytesPerElement * m.cost.grad_output_per_token.elements * tokens * s;
    return 0.0;
  });
  return out;
}

std::vector<GemmShape> forward_gemms(const Module& module, const BatchShape& shape) {
  std::vector<GemmShape> out;
  std::function<void(const Module&, double)> walk = [&](const Module& m, double parent_share) {
    const double s = share(m, parent_share);
    // A grouped GEMM ([experts, out, in]) runs as one of its experts' shape over every
    // routed token: the same FLOPs.
    const std::vector<int64_t>* w = m.cost.kind == ComputeKind::gemm && !m.parameters.empty()
                                        ? &m.parameters.front().shape
                                        : nullptr;
    const bool grouped = w != nullptr && w->size() == 3 && w->front() == m.stacked_experts;
    if (w != nullptr && (w->size() == 2 || grouped)) {
      out.push_back(
          {.m = std::max<int64_t>(1, static_cast<int64_t>(std::llround(tokens_of(shape) * s))),
           .n = (*w)[w->size() - 2],
           .k = (*w)[w->size() - 1],
           .groups = grouped ? std::max<int64_t>(1, m.stacked_experts) : 1});
    }
    for (const Module& c : m.children) walk(c, s);
  };
  walk(module, 1.0);
  return out;
}

namespace {

// Calls `f` on each of the module's parts in the recompute modules the job lists.
template <typename F>
void for_each_listed_drop(const Module& m, const BatchShape& shape, F&& f) {
  for (const RecomputeDrop& d : m.cost.recompute_drops) {
    if (shape.recompute_modules.has(d.module)) f(d);
  }
}

}  // namespace

bool reruns_selectively(const Module& m, const BatchShape& shape) {
  if (m.cost.selective_recompute && shape.recompute_modules.has(RecomputeModule::core_attn))
    return true;
  bool reruns = false;
  for_each_listed_drop(m, shape, [&](const RecomputeDrop& d) { reruns = reruns || d.reruns; });
  return reruns;
}

double recompute_flops(const Module& module, const BatchShape& shape, Recompute recompute,
                       std::optional<ComputeKind> kind) {
  if (recompute != Recompute::selective && recompute != Recompute::sac_op) return 0.0;
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    if (kind && m.cost.kind != *kind) return 0.0;
    const bool rerun =
        recompute == Recompute::selective ? reruns_selectively(m, shape) : m.cost.sac_op_recompute;
    return rerun ? own_forward_flops(m, shape, true) * tokens_of(shape) * s : 0.0;
  });
}

double recompute_io_bytes(const Module& module, const BatchShape& shape, Recompute recompute) {
  if (recompute != Recompute::selective) return 0.0;
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    double elements = 0;
    for_each_listed_drop(
        m, shape, [&](const RecomputeDrop& d) { elements += d.rerun_io_elements_per_token; });
    // Core attention's re-run is timed as attention FLOPs, as its forward is.
    if (m.cost.kind != ComputeKind::attention && reruns_selectively(m, shape)) {
      elements += m.cost.fwd_io_elements_per_token;
    }
    return elements * tokens_of(shape) * s * static_cast<double>(shape.activation_bytes);
  });
}

namespace {

// Bytes per element of a GEMM input Transformer Engine saves quantized under FP8: the
// 1-byte data in the layout the weight gradient reads, and its scales, at most one byte
// per 32 elements (MXFP8; a per-tensor scale is one float). docs/model.md "FP8".
constexpr double kFp8SavedBytesPerElement = 1.0 + 1.0 / 32.0;

// `saved` (a module's kept footprint) in bytes, its GEMM input quantized where
// Transformer Engine runs the GEMM in FP8. Recompute modules that drop the input drop it
// first (Megatron then saves the bf16 original and discards it: the FP8 copy is never made).
double saved_bytes(const Module& m, const BatchShape& shape, const Footprint& saved,
                   bool selective) {
  double bytes = saved.bytes(shape.activation_bytes);
  if (shape.fp8 && shape.stack == Stack::megatron_te && !m.cost.bf16_under_fp8) {
    const double quantized = std::min(m.cost.saved_gemm_input_per_token.elements, saved.elements);
    bytes -= quantized * (static_cast<double>(shape.activation_bytes) - kFp8SavedBytesPerElement);
    bool copy_dropped = false;
    if (selective) {
      for_each_listed_drop(m, shape, [&](const RecomputeDrop& d) {
        copy_dropped = copy_dropped || d.drops_fp8_copy;
      });
    }
    if (!copy_dropped) bytes += m.cost.fp8_own_copy_per_token.elements * kFp8SavedBytesPerElement;
  }
  return bytes;
}

// What `m` saves without recompute, per token (without the per-position attention terms).
Footprint own_saved(const Module& m, const BatchShape& shape) {
  Footprint saved =
      native_loss(m, shape) ? m.cost.native_loss_saved_per_token : m.cost.saved_per_token;
  if (shape.stack == Stack::torch_eager) saved += m.cost.eager_extra_saved_per_token;
  return saved;
}

// ... and under selective recompute before the listed modules other than core_attn take
// their part.
Footprint selective_base(const Module& m, const BatchShape& shape) {
  if (m.cost.selective_recompute && shape.recompute_modules.has(RecomputeModule::core_attn)) {
    return m.cost.selective_kept_per_token;
  }
  return own_saved(m, shape);
}

// What the listed recompute_modules other than core_attn take from `base`: several may
// name the same bytes (moe and moe_act both drop the experts' fc2 input), so the union is
// capped at what there is.
Footprint dropped_by_modules(const Module& m, const BatchShape& shape, const Footprint& base) {
  Footprint out;
  for_each_listed_drop(m, shape, [&](const RecomputeDrop& d) { out += d.dropped; });
  out.elements = std::min(out.elements, base.elements);
  out.fixed_bytes = std::min(out.fixed_bytes, base.fixed_bytes);
  return out;
}

}  // namespace

double recompute_dropped_bytes(const Module& module, const BatchShape& shape, Recompute recompute) {
  if (recompute != Recompute::selective) return 0.0;
  const double tokens = tokens_of(shape);
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return dropped_by_modules(m, shape, selective_base(m, shape)).bytes(shape.activation_bytes) *
           tokens * s;
  });
}

double model_training_flops(const Module& module, const BatchShape& shape) {
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    return 3.0 * own_forward_flops(m, shape, false) * tokens_of(shape) * s;
  });
}

double saved_activation_bytes(const Module& module, const BatchShape& shape, Recompute recompute) {
  if (recompute == Recompute::sac_layer) {
    throw std::logic_error("saved_activation_bytes: sac_layer is full or none per layer");
  }
  const double tokens = tokens_of(shape);
  if (recompute == Recompute::full) {
    return module.cost.input_per_token.bytes(shape.activation_bytes) * tokens *
           module.cost.token_fraction;
  }
  return sum_tree(module, 1.0, [&](const Module& m, double s) {
    if (recompute == Recompute::sac_op) {
      return m.cost.sac_op_kept_per_token.bytes(shape.activation_bytes) * tokens * s;
    }
    const bool selective = recompute == Recompute::selective;
    const Footprint base = selective ? selective_base(m, shape) : own_saved(m, shape);
    Footprint kept = base;
    if (selective) {
      const Footprint dropped = dropped_by_modules(m, shape, base);
      kept.elements -= dropped.elements;
      kept.fixed_bytes -= dropped.fixed_bytes;
    }
    const bool core_rerun = selective && m.cost.selective_recompute &&
                            shape.recompute_modules.has(RecomputeModule::core_attn);
    const double ctx = core_rerun ? 0.0
                                  : m.cost.saved_per_token_ctx.bytes(shape.activation_bytes) *
                                        static_cast<double>(shape.seq_len);
    return (saved_bytes(m, shape, kept, selective) + ctx) * tokens * s;
  });
}

double workspace_bytes(const Module& module, const BatchShape& shape) {
  const bool pytorch = shape.stack != Stack::megatron_te;
  double largest = 0;
  std::function<void(const Module&, double)> visit = [&](const Module& m, double parent) {
    const double s = share(m, parent);
    const Footprint& w = native_loss(m, shape) ? (shape.loss_kernel == LossKernel::compiled
                                                      ? m.cost.compiled_loss_workspace_per_token
                                                      : m.cost.native_loss_workspace_per_token)
                         : pytorch             ? m.cost.pytorch_workspace_per_token
                                               : m.cost.workspace_per_token;
    largest = std::max(largest, w.bytes(shape.activation_bytes) * tokens_of(shape) * s);
    for (const Module& child : m.children) visit(child, s);
  };
  visit(module, 1.0);
  return largest;
}

double comm_bytes(const Module& module, const ModuleComm& comm, const BatchShape& shape) {
  const int64_t element_bytes = comm.fp8_gemm_input && shape.fp8 ? 1 : shape.activation_bytes;
  return comm.per_token.bytes(element_bytes) * static_cast<double>(shape.tokens()) *
         module.cost.token_fraction;
}

}  // namespace shardplan
