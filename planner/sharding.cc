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
  t.param_ranks = config.dp_shard;
  t.optimizer_ranks = config.dp_shard * (t.outer_optimizer ? config.dp_outer : 1);
  return t;
}

std::vector<ProcessGroup> fsdp_process_groups(const FsdpConfig& config) {
  std::vector<ProcessGroup> groups = {
      {.name = "dp_shard", .size = config.dp_shard, .stride = 1},
      {.name = "dp_outer", .size = config.dp_outer, .stride = config.dp_shard},
  };
  if (sharding_traits(config).outer_optimizer) {
    groups.push_back({.name = "dp", .size = config.dp_shard * config.dp_outer, .stride = 1});
  }
  return groups;
}

}  // namespace shardplan
