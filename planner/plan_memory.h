#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/plan.h"

namespace shardplan {

// The memory a plan needs per GPU: persistent buffers by role, the peaks of the
// transient ones by role, the pool that holds them and its lower bound.
struct PlanMemory {
  // Persistent, bytes.
  double model_weights = 0;  // with FP8 copies
  double main_weights = 0;
  double main_grads = 0;
  double optimizer_states = 0;
  double double_buffers = 0;
  // Transient peaks, bytes (each the largest total of that role live at one op).
  double unsharded_weights_peak = 0;
  double unsharded_grads_peak = 0;
  double activations_peak = 0;  // saved and recomputed activations
  double fp8_transpose_cache_peak = 0;
  // The pool holding every transient buffer.
  double pool_bytes = 0;
  double pool_lower_bound_bytes = 0;
  double non_tensor = 0;
  // With allocator: pool the transient part is the pool; with caching it is the live peak
  // (the simulator adds the caching allocator's rounding and fragmentation).
  double transient = 0;
  double total = 0;
  double capacity = 0;
  double headroom = 0;
  bool fits = false;
  std::string largest_term;
};

PlanMemory plan_memory(const Plan& plan);
nlohmann::json plan_memory_to_json(const PlanMemory& memory);

}  // namespace shardplan
