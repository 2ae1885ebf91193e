#include "planner/sharding.h"

namespace shardplan {

ShardingTraits sharding_traits(const FsdpConfig& config) {
  const ShardingStrategy s = config.sharding_strategy;
  ShardingTraits t;
  t.shard_params = s == ShardingStrategy::optim_grads_params;
  t.shard_grads = t.shard_params || s == ShardingStrategy::optim_grads;
  t.shard_optimizer = s != ShardingStrategy::no_shard;
  t.all_reduce_grads = s == ShardingStrategy::no_shard;
  t.post_step_gather = s == ShardingStrategy::optim || s == ShardingStrategy::optim_grads;
  t.hsdp = config.dp_outer > 1;
  t.outer_optimizer = config.outer_strategy == OuterStrategy::optim;
  t.param_ranks = config.dp_shard * config.cp;
  t.optimizer_ranks = t.param_ranks * (t.outer_optimizer ? config.dp_outer : 1);
  return t;
}

std::vector<ProcessGroup> mesh_process_groups(const FsdpConfig& config) {
  const int64_t tp = config.tp;
  const int64_t cp = config.cp;
  const int64_t shard = config.dp_shard * cp;
  std::vector<ProcessGroup> groups = {
      {.name = "tp", .size = tp, .stride = 1},
      {.name = "cp", .size = cp, .stride = tp},
      {.name = "dp_shard_cp", .size = shard, .stride = tp},
      {.name = "dp_outer", .size = config.dp_outer, .stride = tp * shard},
  };
  if (sharding_traits(config).outer_optimizer) {
    groups.push_back({.name = "dp", .size = shard * config.dp_outer, .stride = tp});
  }
  return groups;
}

}  // namespace shardplan
