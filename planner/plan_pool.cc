#include "planner/plan_pool.h"

namespace shardplan {

std::vector<PoolRequest> transient_pool_requests(const Plan& plan) {
  std::vector<PoolRequest> requests;
  for (const PlanBuffer& b : plan.buffers) {
    if (!b.persistent)
      requests.push_back({.bytes = b.bytes, .begin = b.live_begin, .end = b.live_end});
  }
  return requests;
}

void apply_pool_assignment(Plan& plan, const PoolAssignment& assignment, std::string_view algorithm,
                           int64_t alignment_bytes) {
  std::size_t k = 0;
  for (PlanBuffer& b : plan.buffers) {
    if (!b.persistent) b.offset = assignment.offsets[k++];
  }
  plan.pool.algorithm = std::string(algorithm);
  plan.pool.alignment_bytes = alignment_bytes;
  plan.pool.size_bytes = assignment.size_bytes;
  plan.pool.lower_bound_bytes = live_bytes_lower_bound(transient_pool_requests(plan));
}

void pack_pool(Plan& plan, const OffsetAssigner& assigner) {
  // The planner sits inside search loops: a deterministic node budget (same plan on every
  // machine; 20 000 nodes is a tenth of a second at worst), the wall clock only a safety net.
  const PoolAssignment assignment = assigner.assign(
      transient_pool_requests(plan),
      PackOptions{
          .alignment = plan.pool.alignment_bytes, .time_limit_seconds = 30.0, .node_limit = 20000});
  apply_pool_assignment(plan, assignment, assigner.name(), plan.pool.alignment_bytes);
}

}  // namespace shardplan
