#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// torchrun's --nproc-per-node and --nnodes for the cluster's GPUs.
std::pair<int64_t, int64_t> launch_shape(const ClusterSpec& cluster);

// Each format's text after `header` (the comment lines naming the job); the model has an
// architecture (transformer or MoE).
std::string emit_megatron_args(const ModelSpec& model, const ClusterSpec& cluster,
                               const FsdpConfig& config, const std::string& header);
std::string emit_megatron_bridge(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& config, const std::string& header);
std::string emit_torchtitan(const ModelSpec& model, const ClusterSpec& cluster,
                            const FsdpConfig& config, const std::string& header);

}  // namespace shardplan
