#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "planner/memory_breakdown.h"

namespace shardplan {

// Closed-form memory per GPU of one FSDP run (DESIGN.md memory table), before any op
// schedule exists: persistent state by strategy, the transient unsharded buffers at
// their prefetch/drain limits for the largest unit, and one micro-batch of activations.
// It is what `shardplan describe` prints and the cheap bound a sweep can prune with;
// the planner's pooled plan refines the transient terms.
struct MemoryEstimate : MemoryBreakdown {
  int64_t num_gpus = 0;
  int64_t dp_shard = 0;
  int64_t dp_outer = 0;
  int64_t units = 0;  // FSDP units, the root unit included
  int64_t largest_unit_parameters = 0;
  int64_t root_unit_parameters = 0;  // the parameters outside every layer unit
  // The activations every unit and the root keep for backward, all live when the last
  // forward ends (activations less what full recompute re-creates in a backward).
  double saved_activations = 0;
  // The least any layer unit gathers: what the first backward holds at least,
  // whichever layer comes last. 0 without layer units.
  int64_t smallest_layer_parameters = 0;
};

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const FsdpConfig& resolved_config);

nlohmann::json memory_estimate_to_json(const MemoryEstimate& estimate);

}  // namespace shardplan
