#include "planner/memory_estimate.h"

#include <algorithm>
#include <map>
#include <utility>
#include <vector>

#include "planner/communicators.h"
#include "planner/internal/fsdp_units.h"
#include "planner/rank_model.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

double ceil_div(int64_t a, int64_t b) {
  return static_cast<double>((a + b - 1) / b);
}
double bytes_of(DType dtype) {
  return static_cast<double>(dtype_bytes(dtype));
}

}  // namespace

MemoryEstimate estimate_memory(const ModelSpec& whole, const ClusterSpec& cluster,
                               const FsdpConfig& c) {
  const RankModel rank_model(whole, c);
  const ModelSpec& model = rank_model.get();
  // resolve_fsdp_config has already checked the patterns against the model.
  const std::vector<FsdpUnit> units = find_fsdp_units(model, c.unit_modules, "config");
  const ShardingTraits t = sharding_traits(c);
  const int64_t n = t.param_ranks;
  const int64_t optimizer_ranks = t.optimizer_ranks;
  const bool shard_optimizer = t.shard_optimizer;
  const bool shard_grads = t.shard_grads;
  const bool shard_params = t.shard_params;

  // Each unit keeps one flat buffer per requires_grad group (Megatron-FSDP groups by
  // dtype and requires_grad), padded to split evenly; ceil per group stands in for the
  // planner's exact alignment. Frozen parameters have weights only.
  double total = 0;      // all parameters
  double trainable = 0;  // with requires_grad
  double per_rank = 0;   // Σ ceil(P_u / dp_shard) over both groups
  double trainable_per_rank = 0;
  double trainable_per_opt_rank = 0;  // Σ ceil(P_u / optimizer ranks), trainable only
  int64_t largest_layer = 0;
  int64_t largest_trainable_layer = 0;
  int64_t smallest_layer = INT64_MAX;
  int64_t layer_units = 0;
  // Routed experts on an expert mesh shard over the expert-data-parallel ranks instead.
  const bool expert_groups = expert_mesh(c);
  const int64_t ne = t.expert_ranks;
  // The root unit holds the experts of MoE layers no pattern wrapped.
  int64_t root_experts = expert_groups ? routed_expert_parameters(model.root) : 0;
  for (const FsdpUnit& u : units) {
    if (u.module != nullptr && expert_groups) root_experts -= routed_expert_parameters(*u.module);
  }
  for (const FsdpUnit& u : units) {
    const int64_t frozen = u.parameters - u.trainable_parameters;
    const int64_t experts = !expert_groups        ? 0
                            : u.module == nullptr ? root_experts
                                                  : routed_expert_parameters(*u.module);
    const int64_t dense = u.trainable_parameters - experts;
    total += static_cast<double>(u.parameters);
    trainable += static_cast<double>(u.trainable_parameters);
    trainable_per_rank += ceil_div(dense, n) + ceil_div(experts, ne);
    per_rank += ceil_div(dense, n) + ceil_div(experts, ne) + ceil_div(frozen, n);
    trainable_per_opt_rank += ceil_div(dense, optimizer_ranks) + ceil_div(experts, ne);
    if (u.module != nullptr) {
      largest_layer = std::max(largest_layer, u.parameters);
      largest_trainable_layer = std::max(largest_trainable_layer, u.trainable_parameters);
      smallest_layer = std::min(smallest_layer, u.parameters);
      ++layer_units;
    }
  }
  const int64_t root = units.front().parameters;
  const int64_t trainable_root = units.front().trainable_parameters;

  MemoryEstimate e;
  e.num_gpus = cluster.num_gpus;
  e.dp_shard = c.dp_shard;
  e.dp_outer = c.dp_outer;
  e.units = static_cast<int64_t>(units.size());
  e.largest_unit_parameters = std::max(root, largest_layer);
  e.root_unit_parameters = root;
  if (layer_units > 0) e.smallest_layer_parameters = smallest_layer;

  // FP8 gather keeps the weights as 1-byte FP8 (MXFP8: row- and column-wise copies);
  // PyTorch FSDP keeps the main weights as the shard (plan_builder.cc).
  const bool torch_layout = torch_fsdp_layout(c);
  const double weight_bytes = torch_layout         ? bytes_of(c.main_param_dtype)
                              : c.fp8_param_gather ? (c.fp8_recipe == Fp8Recipe::mxfp8 ? 2.0 : 1.0)
                                                   : bytes_of(c.param_dtype);
  const double gathered_bytes = c.fp8_param_gather ? 1.0 : bytes_of(c.param_dtype);
  e.model_weights = weight_bytes * (shard_params ? per_rank : total);
  if (c.keep_fp8_transpose_cache) e.model_weights += total;
  // FP8 GEMMs on unsharded bf16 weights: the cached FP8 copy and transpose of every layer
  // (plan_builder.cc).
  if (fp8_compute(c) && !c.fp8_param_gather)
    e.model_weights += 2.0 * (total - static_cast<double>(root));
  // preserve_fp32_weights=False: no separate main copy.
  if (!torch_layout && (c.main_param_dtype != c.param_dtype || c.fp8_param_gather)) {
    e.main_weights =
        bytes_of(c.main_param_dtype) * (shard_optimizer ? trainable_per_opt_rank : trainable);
  }
  e.main_grads = bytes_of(c.main_grad_dtype) * (shard_grads ? trainable_per_rank : trainable);
  // Counted whole, as every transient peak here is: they are all there when backward ends.
  e.main_grads_transient = torch_layout;
  const double states = c.optimizer == Optimizer::adam ? 2.0 : 1.0;
  e.optimizer_states = states * bytes_of(optimizer_state_dtype(c)) *
                       (shard_optimizer ? trainable_per_opt_rank : trainable);

  // The root unit stays gathered across the step (its parameters open the forward and
  // close the backward); up to 1 + prefetch layer units are gathered at once.
  const int64_t prefetch = std::max(c.forward_prefetch, c.backward_prefetch);
  const double live_layers = static_cast<double>(std::min<int64_t>(prefetch + 1, layer_units));
  const double live_grads = static_cast<double>(
      std::min<int64_t>(c.async_reduce ? c.max_live_grad_buffers : 1, layer_units));
  const double grad_bytes = bytes_of(c.grad_reduce_dtype);
  if (c.double_buffer) {
    const double largest = static_cast<double>(e.largest_unit_parameters);
    const double largest_trainable =
        static_cast<double>(std::max(trainable_root, largest_trainable_layer));
    e.double_buffers =
        2.0 * ((shard_params ? gathered_bytes * largest : 0.0) + grad_bytes * largest_trainable);
  } else {
    if (shard_params) {
      e.unsharded_weights = gathered_bytes * (static_cast<double>(root) +
                                              live_layers * static_cast<double>(largest_layer));
    }
    if (shard_grads) {
      e.unsharded_grads = grad_bytes * (static_cast<double>(trainable_root) +
                                        live_grads * static_cast<double>(largest_trainable_layer));
    }
  }
  // no_sync: every unit's gradients stay unsharded, summed across micro-batches, from the
  // first micro-batch's backward until the last one reduces them; beside them, the
  // backward's own param_dtype gradients of the largest unit when they are upcast into
  // the accumulators (the peak is at the root's backward before the last micro-batch).
  if (c.no_sync) {
    const DType accumulated = accumulated_grad_dtype(c);
    const double largest_trainable =
        static_cast<double>(std::max(trainable_root, largest_trainable_layer));
    e.unsharded_grads =
        bytes_of(accumulated) * trainable +
        (accumulated != c.param_dtype ? bytes_of(c.param_dtype) * largest_trainable : 0.0);
  }

  const BatchShape shape = rank_batch_shape(c);
  double in_units_none = 0;
  double in_units_kept = 0;
  double largest_recompute = 0;
  int64_t layer_units_seen = 0;
  int64_t offloaded_units = 0;
  double offloaded = 0, largest_offloaded = 0;
  for (const FsdpUnit& u : units) {
    if (u.module == nullptr) continue;
    const double none = saved_activation_bytes(*u.module, shape, Recompute::none);
    in_units_none += none;
    Recompute mode = c.recompute;
    if (mode == Recompute::sac_layer) {
      layer_units_seen += 1;
      mode = layer_units_seen % c.recompute_every == 0 ? Recompute::full : Recompute::none;
    }
    const double kept = saved_activation_bytes(*u.module, shape, mode);
    in_units_kept += kept;
    if (mode == Recompute::full) largest_recompute = std::max(largest_recompute, none);
    // Selective recompute's re-created outputs, within one unit's backward (schedule.cc).
    if (mode == Recompute::selective) {
      largest_recompute =
          std::max(largest_recompute, recompute_dropped_bytes(*u.module, shape, mode));
    }
    // Activation offload: the first N layer units' saved bytes leave the GPU; by the end
    // of the forward (the activation peak) all are gone, and backward holds at most two
    // layers' at once (the current one and the one reloaded ahead; schedule.cc).
    if (offloaded_units < c.offload_activations) {
      ++offloaded_units;
      offloaded += kept;
      largest_offloaded = std::max(largest_offloaded, kept);
    }
  }
  if (offloaded_units > 0) {
    in_units_kept = std::max(in_units_kept - offloaded, 2.0 * largest_offloaded);
  }

  const double outside = saved_activation_bytes(model.root, shape, Recompute::none) - in_units_none;
  e.activations = in_units_kept + outside;
  e.saved_activations = e.activations;
  // Full recompute re-creates one unit's activations inside its backward; selective the
  // bytes its recompute modules dropped.
  e.activations += largest_recompute;
  // The largest compute op's workspace (the loss's, at the end of the forward, beside
  // every saved activation).
  e.activations += workspace_bytes(model.root, shape);

  // The model-parallel collectives' buffers: the largest of each buffer role, one pass at
  // a time (the schedule's one buffer per role and pass).
  std::map<BufferRole, double> largest;
  for_each_module(model.root, [&](const Module& m) {
    for (const ModuleComm& comm : m.cost.comms) {
      double& role = largest[comm_buffer_role(comm.axis)];
      role = std::max(role, comm_buffer_bytes(comm.kind, comm_bytes(m, comm, shape)));
    }
  });
  e.comm_buffers = 0;
  for (const auto& [role, bytes] : largest) e.comm_buffers += bytes;
  e.non_tensor = static_cast<double>(device_overhead(c, cluster).total());
  settle_memory_totals(e, std::nullopt, static_cast<double>(cluster.gpu.hbm_bytes));
  return e;
}

nlohmann::json memory_estimate_to_json(const MemoryEstimate& e) {
  return {{"num_gpus", e.num_gpus},
          {"dp_shard", e.dp_shard},
          {"dp_outer", e.dp_outer},
          {"units", e.units},
          {"largest_unit_parameters", e.largest_unit_parameters},
          {"model_weights_bytes", e.model_weights},
          {"main_weights_bytes", e.main_weights},
          {"main_grads_bytes", e.main_grads},
          {"optimizer_states_bytes", e.optimizer_states},
          {"double_buffers_bytes", e.double_buffers},
          {"unsharded_weights_bytes", e.unsharded_weights},
          {"unsharded_grads_bytes", e.unsharded_grads},
          {"activations_bytes", e.activations},
          {"comm_buffers_bytes", e.comm_buffers},
          {"non_tensor_bytes", e.non_tensor},
          {"total_bytes", e.total},
          {"capacity_bytes", e.capacity},
          {"headroom_bytes", e.headroom},
          {"fits", e.fits},
          {"largest_term", e.largest_term}};
}

}  // namespace shardplan
