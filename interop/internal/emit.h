#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// torchrun's --nproc-per-node and --nnodes for the cluster's GPUs.
std::pair<int64_t, int64_t> launch_shape(const ClusterSpec& cluster);

// Where a Megatron argument (dest) lives in a Bridge ConfigContainer ("model.num_layers");
// none for what Bridge keeps elsewhere (the tokenizer's type).
std::vector<std::string> bridge_paths(const std::string& dest);

// Each format's text after `header` (the comment lines naming the job); the model has an
// architecture (transformer or MoE).
std::string emit_megatron_args(const ModelSpec& model, const ClusterSpec& cluster,
                               const FsdpConfig& config, const std::string& header);
std::string emit_megatron_bridge(const ModelSpec& model, const ClusterSpec& cluster,
                                 const FsdpConfig& config, const std::string& header);
std::string emit_torchtitan(const ModelSpec& model, const ClusterSpec& cluster,
                            const FsdpConfig& config, const std::string& header);

}  // namespace shardplan
