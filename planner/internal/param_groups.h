#pragma once

#include <vector>

#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "planner/internal/fsdp_units.h"
#include "planner/plan.h"

namespace shardplan {

// Lays out each unit's parameters in flat buffers: one group per requires_grad (every
// parameter is held in config.param_dtype, as Megatron-FSDP casts the model), split where
// a group exceeds bucket_bytes (between parameters; a single larger parameter keeps a
// bucket of its own), padded to a multiple of kShardAlignElements × the ranks that shard
// it (dp_shard, or dp_shard × dp_outer when the optimizer shards over both; a routed
// expert's group on an expert mesh, grouped apart from the dense parameters, over the
// expert-data-parallel ranks).
// Parameters may straddle shard boundaries. Fills `units` (with their group ids) too.
std::vector<ParamGroup> build_param_groups(const ModelSpec& model,
                                           const std::vector<FsdpUnit>& fsdp_units,
                                           const FsdpConfig& config, std::vector<PlanUnit>& units);

}  // namespace shardplan
