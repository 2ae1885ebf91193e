#pragma once

#include <string>
#include <vector>

#include "cli/commands.h"
#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// A model on a cluster under a resolved FSDP config: what every planning command starts
// from. `extra_overrides` are flag values (--micro-batch ...) applied after --set.
struct Job {
  ModelSpec model;
  ClusterSpec cluster;
  FsdpConfig config;
};

Job load_job(const JobParams& params, const std::vector<std::string>& extra_overrides = {});

}  // namespace shardplan
