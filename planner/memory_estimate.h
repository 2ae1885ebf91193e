#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"

namespace shardplan {

// Closed-form memory per GPU of one FSDP run (DESIGN.md memory table), before any op
// schedule exists: persistent state by strategy, the transient unsharded buffers at
// their prefetch/drain limits for the largest unit, and one micro-batch of activations.
// It is what `shardplan describe` prints and the cheap bound a sweep can prune with;
// the planner's pooled plan refines the transient terms.
struct MemoryEstimate {
  int64_t num_gpus = 0;
  int64_t dp_shard = 0;
  int64_t dp_outer = 0;
  int64_t units = 0;  // FSDP units, the root unit included
  int64_t largest_unit_parameters = 0;
  // Persistent, bytes per GPU.
  double model_weights = 0;  // compute-dtype weights (FP8 copies with fp8_param_gather)
  double main_weights = 0;   // fp32 master weights
  double main_grads = 0;
  double optimizer_states = 0;  // Adam: two fp32 states; SGD: fp32 momentum
  double double_buffers = 0;    // double_buffer: two persistent unsharded-unit buffers
  // Transient peaks, bytes per GPU.
  double unsharded_weights = 0;  // (1 + prefetch) gathered units
  double unsharded_grads = 0;    // at most max_live_grad_buffers unreduced units
  double activations = 0;        // one micro-batch, plus a layer's recompute at full
  double non_tensor = 0;         // CUDA context, NCCL, cuBLAS (cluster constant)
  double total = 0;
  double capacity = 0;  // HBM as CUDA reports it
  double headroom = 0;  // capacity − total; negative: does not fit
  bool fits = false;
  std::string largest_term;  // name of the biggest term above
};

MemoryEstimate estimate_memory(const ModelSpec& model, const ClusterSpec& cluster,
                               const FsdpConfig& resolved_config);

nlohmann::json memory_estimate_to_json(const MemoryEstimate& estimate);

}  // namespace shardplan
