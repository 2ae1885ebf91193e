#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/memory_breakdown.h"
#include "planner/plan.h"

namespace shardplan {

// The memory a plan needs per GPU: persistent buffers by role, the peaks of the
// transient ones by role, the pool that holds them and its lower bound.
struct PlanMemory : MemoryBreakdown {
  // The pool holding every transient buffer.
  double pool_bytes = 0;
  double pool_lower_bound_bytes = 0;
  // With allocator: pool the transient part is the pool; with caching it is the live peak
  // (the simulator adds the caching allocator's rounding and fragmentation).
  double transient = 0;
};

PlanMemory plan_memory(const Plan& plan);
nlohmann::json plan_memory_to_json(const PlanMemory& memory);

}  // namespace shardplan
