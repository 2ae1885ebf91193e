#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/memory_breakdown.h"
#include "planner/plan.h"

namespace shardplan {

// The memory a plan needs per GPU: persistent buffers by role, the peaks of the
// transient ones by role, the pool that holds them and its lower bound, and the step
// replayed through the config's allocator (memory_replay.h), whose peak reserved is the
// total: the figure and verdict `simulate` reports too.
struct PlanMemory : MemoryBreakdown {
  // The pool holding every transient buffer.
  double pool_bytes = 0;
  double pool_lower_bound_bytes = 0;
  // The total less the persistent terms and the non-tensor bytes: with allocator: pool the
  // pool; with caching or expandable what the caching allocator reserves for the transient
  // buffers beyond the persistent ones (their live peak, rounding and fragmentation).
  double transient = 0;
  // The replay's peaks (non-tensor bytes included); peak_reserved is `total`.
  double peak_allocated = 0;
  double peak_reserved = 0;
  // Times the caching allocator reached the GPU's memory and returned its cached segments
  // to fit a request (PyTorch's num_alloc_retries; each synchronizes the device).
  int64_t cache_releases = 0;
};

PlanMemory plan_memory(const Plan& plan);
nlohmann::json plan_memory_to_json(const PlanMemory& memory);

}  // namespace shardplan
