#pragma once

// The planner's adapters to the pool library: a plan's transient buffers as pool
// requests, and a placement written back into the plan.
#include <string_view>
#include <vector>

#include "planner/plan.h"
#include "pool/pool.h"

namespace shardplan {

// The plan's transient buffers as pool requests, in buffer order.
std::vector<PoolRequest> transient_pool_requests(const Plan& plan);

// Writes a solved placement of transient_pool_requests(plan) into the plan: each buffer's
// offset, and the pool's algorithm, alignment, size and lower bound.
void apply_pool_assignment(Plan& plan, const PoolAssignment& assignment, std::string_view algorithm,
                           int64_t alignment_bytes);

// Places the plan's transient buffers with `assigner` under the planner's deterministic
// budget and fills plan.pool.
void pack_pool(Plan& plan, const OffsetAssigner& assigner);

}  // namespace shardplan
