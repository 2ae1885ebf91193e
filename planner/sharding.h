#pragma once

#include <cstdint>

#include "planner/fsdp_config.h"
#include "planner/plan.h"

namespace shardplan {

// What a config shards, as one table (Megatron-FSDP's zero_dp_strategy and
// outer_dp_sharding_strategy, seeds/002 README; docs/model.md):
//
//   strategy             params  grads  optimizer  after the step
//   no_shard (DDP)         -       -        -      grads all-reduced
//   optim (ZeRO-1)         -       -        ✓      ag_post gathers the weights back
//   optim_grads (ZeRO-2)   -       ✓        ✓      ag_post gathers the weights back
//   optim_grads_params     ✓       ✓        ✓      weights stay sharded (gathered per unit)
//
// HSDP: outer_strategy optim also shards the optimizer over dp_outer (ZeRO-3 only).
struct ShardingTraits {
  bool shard_params = false;      // weights live as shards, gathered per unit (ZeRO-3)
  bool shard_grads = false;       // gradients are reduce-scattered into shards (ZeRO-2/3)
  bool shard_optimizer = false;   // main weights and optimizer states are shards (ZeRO-1/2/3)
  bool all_reduce_grads = false;  // nothing sharded: gradients all-reduced, as DDP does
  bool post_step_gather = false;  // full weights kept: updated shards gathered after the step
  bool hsdp = false;              // dp_outer > 1: replicas reduce across dp_outer
  bool outer_optimizer = false;   // the optimizer is also sharded over dp_outer
  int64_t param_ranks = 1;        // ranks a weight (and gradient) is split over: dp_shard × cp
  int64_t optimizer_ranks = 1;    // ranks the optimizer state is split over
  // Routed experts on an expert mesh (expert_mesh): weights, gradients and optimizer state
  // split over the expert-data-parallel ranks; param_ranks otherwise.
  int64_t expert_ranks = 1;
};

// The traits of a resolved config (dp_shard set).
ShardingTraits sharding_traits(const FsdpConfig& config);

// The ranks a parameter group's weights and gradients are split over, and its optimizer
// state; the names of the process groups that hold those shards.
int64_t param_ranks_of(const ShardingTraits& t, const ParamGroup& g);
int64_t optimizer_ranks_of(const ShardingTraits& t, const ParamGroup& g);
std::string_view param_group_name(const ParamGroup& g);
std::string_view optimizer_group_name(const ShardingTraits& t, const ParamGroup& g);

// Parameters of the routed experts under `module` (modules of type "Expert", as the
// transformer builder names them; Megatron-FSDP tells them by ".experts." in the name).
int64_t routed_expert_parameters(const Module& module);

// The process groups of a resolved config's mesh dp_outer × dp_shard × cp × tp, ranks laid
// out tp innermost (Megatron's order): "tp" (tp consecutive ranks, inside one NVLink
// domain), "cp" (cp ranks, tp apart), "dp_shard_cp" (dp_shard × cp flattened, tp apart:
// the ranks FSDP shards each tensor-parallel shard over), "dp_outer" (dp_outer ranks,
// tp·cp·dp_shard apart), and "dp" (dp_shard_cp and dp_outer flattened) when the optimizer
// is sharded over both (outer_strategy optim). Every group is listed, of size 1 too. On an
// expert mesh (expert_mesh), laid out etp innermost (Megatron's expert order
// "tp-ep-dp-pp"): "etp" (etp consecutive ranks), "ep" (ep ranks, etp apart), "ep_etp" (the
// two flattened) and "edp" (GPUs ÷ (ep·etp) ranks, ep·etp apart).
std::vector<ProcessGroup> mesh_process_groups(const FsdpConfig& config);

}  // namespace shardplan
