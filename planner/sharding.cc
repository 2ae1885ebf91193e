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
  t.expert_ranks = expert_mesh(config) ? expert_dp(config) : t.param_ranks;
  return t;
}

int64_t param_ranks_of(const ShardingTraits& t, const ParamGroup& g) {
  return g.expert ? t.expert_ranks : t.param_ranks;
}

int64_t optimizer_ranks_of(const ShardingTraits& t, const ParamGroup& g) {
  return g.expert ? t.expert_ranks : t.optimizer_ranks;
}

std::string_view param_group_name(const ParamGroup& g) {
  return g.expert ? "edp" : "dp_shard_cp";
}

std::string_view optimizer_group_name(const ShardingTraits& t, const ParamGroup& g) {
  return g.expert ? "edp" : t.outer_optimizer ? "dp" : "dp_shard_cp";
}

int64_t routed_expert_parameters(const Module& module) {
  if (module.type == "Expert") return parameter_count(module);
  int64_t total = 0;
  for (const Module& child : module.children) total += routed_expert_parameters(child);
  return total;
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
  if (expert_mesh(config)) {
    const int64_t etp = expert_tp(config);
    groups.push_back({.name = "etp", .size = etp, .stride = 1});
    groups.push_back({.name = "ep", .size = config.ep, .stride = etp});
    groups.push_back({.name = "ep_etp", .size = config.ep * etp, .stride = 1});
    groups.push_back({.name = "edp", .size = expert_dp(config), .stride = config.ep * etp});
  }
  return groups;
}

}  // namespace shardplan
