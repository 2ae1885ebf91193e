#include "planner/plan_builder.h"

#include <fmt/format.h>

#include <algorithm>

#include "models/error.h"
#include "planner/communicators.h"
#include "planner/internal/fsdp_units.h"
#include "planner/internal/param_groups.h"
#include "planner/internal/schedule.h"
#include "planner/internal/segments.h"
#include "planner/plan_pool.h"
#include "planner/rank_model.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

void add_persistent(Plan& plan, BufferRole role, int64_t unit, int64_t group, DType dtype,
                    int64_t bytes, int64_t shard_group, std::string name) {
  plan.buffers.push_back(PlanBuffer{.id = static_cast<int64_t>(plan.buffers.size()),
                                    .role = role,
                                    .unit = unit,
                                    .group = group,
                                    .dtype = dtype,
                                    .bytes = bytes,
                                    .persistent = true,
                                    .shard_group = shard_group,
                                    .name = std::move(name)});
}

// Persistent buffers per group, by the strategy table (DESIGN.md, docs/model.md).
void add_persistent_buffers(Plan& plan) {
  const FsdpConfig& c = plan.config;
  const ShardingTraits t = sharding_traits(c);
  const bool shard_params = t.shard_params;
  const bool shard_grads = t.shard_grads;
  const bool shard_optimizer = t.shard_optimizer;
  // PyTorch FSDP: the shard is the main weight, and no separate main copy exists.
  const bool torch_layout = torch_fsdp_layout(c);
  const bool main_copy =
      !torch_layout && (c.main_param_dtype != c.param_dtype || c.fp8_param_gather);
  // FP8 GEMMs on bf16 weights that stay unsharded (ZeRO-0/1/2): Transformer Engine casts
  // each layer's weights once per step and caches the FP8 copy and its transpose (MXFP8:
  // row- and column-wise copies) across micro-batches (Megatron passes
  // is_first_microbatch; TE's get_weight_workspace cache "weight"): 2 bytes per layer
  // parameter, kept. The embedding and output layer stay bf16 (root unit).
  const bool fp8_cache = fp8_compute(c) && !c.fp8_param_gather;
  for (const ParamGroup& g : plan.groups) {
    const std::string where = fmt::format("{} g{}",
                                          plan.units[static_cast<std::size_t>(g.unit)].name.empty()
                                              ? "<root>"
                                              : plan.units[static_cast<std::size_t>(g.unit)].name,
                                          g.id);
    const int64_t param_group = find_process_group(plan, param_group_name(g));
    const int64_t optimizer_ranks = optimizer_ranks_of(t, g);
    const int64_t weight_shards = shard_params ? param_group : -1;
    const int64_t optimizer_shards =
        shard_optimizer ? find_process_group(plan, optimizer_group_name(t, g)) : -1;
    const int64_t weight_elements = shard_params ? g.shard_elements : g.padded_elements;
    const DType weight_dtype = torch_layout         ? c.main_param_dtype
                               : c.fp8_param_gather ? DType::fp8_e4m3
                                                    : g.dtype;
    add_persistent(plan, BufferRole::model_weight, g.unit, g.id, weight_dtype,
                   weight_elements * dtype_bytes(weight_dtype), weight_shards,
                   "model_weight " + where);
    if (c.fp8_param_gather && c.fp8_recipe == Fp8Recipe::mxfp8) {
      add_persistent(plan, BufferRole::fp8_columnwise_weight, g.unit, g.id, DType::fp8_e4m3,
                     weight_elements, weight_shards, "fp8_columnwise_weight " + where);
    }
    if (fp8_cache && g.unit != 0) {
      add_persistent(plan, BufferRole::fp8_weight_cache, g.unit, g.id, DType::fp8_e4m3,
                     2 * g.elements, -1, "fp8_weight_cache " + where);
    }
    if (!g.requires_grad) continue;
    const int64_t optimizer_elements =
        shard_optimizer ? g.padded_elements / optimizer_ranks : g.padded_elements;
    if (main_copy) {
      add_persistent(plan, BufferRole::main_weight, g.unit, g.id, c.main_param_dtype,
                     optimizer_elements * dtype_bytes(c.main_param_dtype), optimizer_shards,
                     "main_weight " + where);
    }
    add_persistent(
        plan, BufferRole::main_grad, g.unit, g.id, c.main_grad_dtype,
        (shard_grads ? g.shard_elements : g.padded_elements) * dtype_bytes(c.main_grad_dtype),
        shard_grads ? param_group : -1, "main_grad " + where);
    // zero_grad(set_to_none=True) frees them after the step; the first reduction of the
    // next step allocates them again: their life is the ops that touch them (schedule).
    if (torch_layout) {
      PlanBuffer& grad = plan.buffers.back();
      grad.persistent = false;
      grad.live_begin = grad.live_end = -1;
    }
    const int states = c.optimizer == Optimizer::adam ? 2 : 1;
    const DType state_dtype = optimizer_state_dtype(c);
    for (int state = 0; state < states; ++state) {
      add_persistent(plan, BufferRole::optimizer_state, g.unit, g.id, state_dtype,
                     optimizer_elements * dtype_bytes(state_dtype), optimizer_shards,
                     fmt::format("optimizer_state{} {}", state, where));
    }
  }
  if (c.double_buffer) {
    // Two persistent buffers for unsharded weights and two for gradients, sized for the
    // largest layer unit (Megatron-FSDP v1's MaxPoolAllocator).
    int64_t largest_weight = 0;
    int64_t largest_grad = 0;
    const int64_t gather_bytes = c.fp8_param_gather ? 1 : dtype_bytes(c.param_dtype);
    for (const PlanUnit& unit : plan.units) {
      if (unit.id == 0) continue;
      int64_t weight = 0;
      int64_t grad = 0;
      for (int64_t gid : unit.groups) {
        const ParamGroup& g = plan.groups[static_cast<std::size_t>(gid)];
        weight += g.padded_elements * gather_bytes;
        if (g.requires_grad) grad += g.padded_elements * dtype_bytes(c.grad_reduce_dtype);
      }
      largest_weight = std::max(largest_weight, weight);
      largest_grad = std::max(largest_grad, grad);
    }
    if (!shard_params) largest_weight = 0;
    for (int i = 0; i < 2; ++i) {
      add_persistent(plan, BufferRole::double_buffer, -1, -1,
                     c.fp8_param_gather ? DType::fp8_e4m3 : c.param_dtype, largest_weight, -1,
                     fmt::format("double_buffer weight{}", i));
    }
    for (int i = 0; i < 2; ++i) {
      add_persistent(plan, BufferRole::double_buffer, -1, -1, c.grad_reduce_dtype, largest_grad, -1,
                     fmt::format("double_buffer grad{}", i));
    }
  }
}

// Buffers hold int64 byte counts: a micro-batch whose activations pass 2^58 bytes per GPU
// (256 PiB; the largest GPU has 288 GB) is refused before any of them is made. Only an
// explicit model with very large per-token footprints can get there within the token limit.
void check_activation_bytes(const std::vector<PlanSegment>& segments, const BatchShape& shape) {
  constexpr double kMaxActivationBytes = 0x1p58;
  double total = 0;
  for (const PlanSegment& s : segments) total += s.full_activation_bytes + s.io_bytes;
  if (total > kMaxActivationBytes) {
    throw InputError(
        "config", "/micro_batch",
        fmt::format("one micro-batch of {} × {} tokens saves {:.3g} bytes of activations per GPU, "
                    "more than 2^58; the model's per-token footprints or the micro-batch are "
                    "beyond any real job",
                    shape.micro_batch, shape.seq_len, total));
  }
}

}  // namespace

StepTrace plan_step_trace(const ModelSpec& model, const FsdpConfig& c) {
  const std::vector<FsdpUnit> units = find_fsdp_units(model, c.unit_modules, "config");
  std::vector<std::string> names;
  std::vector<bool> checkpointed;
  // sac_layer checkpoints the layers whose 1-based position is a multiple of
  // recompute_every (torchtitan's _apply_layer_sac counter), the others not at all.
  int64_t layer_units = 0;
  for (const TracedModule& t : traced_modules(model, units)) {
    names.push_back(t.module->name);
    bool layer = t.unit != 0;
    if (layer && c.recompute == Recompute::sac_layer) {
      layer_units += 1;
      layer = layer_units % c.recompute_every == 0;
    }
    checkpointed.push_back(layer);
  }
  return generate_step_trace(model, std::move(names), std::move(checkpointed), c.grad_accum,
                             c.recompute == Recompute::sac_layer ? Recompute::full : c.recompute);
}

Plan build_plan(const ModelSpec& model, const ClusterSpec& cluster, const FsdpConfig& c,
                const OffsetAssigner* assigner) {
  return build_plan(model, cluster, c, plan_step_trace(model, c), "step trace", assigner);
}

Plan build_plan(const ModelSpec& model, const ClusterSpec& cluster, const FsdpConfig& c,
                const StepTrace& trace, const std::string& label, const OffsetAssigner* assigner) {
  Plan plan;
  plan.model = model.name;
  plan.cluster = cluster.name;
  plan.num_gpus = cluster.num_gpus;
  plan.gpus_per_node = cluster.gpus_per_node;
  plan.config = c;
  plan.process_groups = mesh_process_groups(c);
  plan.non_tensor_bytes = device_overhead(c, cluster).total();
  plan.capacity_bytes = cluster.gpu.hbm_bytes;

  const RankModel rank_model(model, c);
  const ModelSpec& local = rank_model.get();
  const std::vector<FsdpUnit> units = find_fsdp_units(local, c.unit_modules, "config");
  plan.groups = build_param_groups(local, units, c, plan.units);
  const BatchShape shape = rank_batch_shape(c);
  plan.segments = build_segments(traced_modules(local, units, trace, c, label), shape, c.recompute);
  check_activation_bytes(plan.segments, shape);
  // MFU counts the whole model's FLOPs (its real vocabulary, not the padded one) shared by
  // the tp × cp ranks of a model replica.
  const double model_ranks = static_cast<double>(c.tp * c.cp);
  const BatchShape whole_shape{.micro_batch = c.micro_batch,
                               .seq_len = c.seq_len,
                               .activation_bytes = shape.activation_bytes};
  plan.model_flops = model_training_flops(model.root, whole_shape) *
                     static_cast<double>(c.grad_accum) / model_ranks;
  plan.tokens_per_gpu = static_cast<double>(whole_shape.tokens() * c.grad_accum) / model_ranks;
  add_persistent_buffers(plan);
  build_schedule(plan);
  if (assigner != nullptr) {
    pack_pool(plan, *assigner);
  } else {
    pack_pool(plan, *make_auto_assigner());
  }
  return plan;
}

}  // namespace shardplan
