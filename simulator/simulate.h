#pragma once

#include "models/cluster_spec.h"
#include "planner/plan.h"
#include "traces/timeline.h"

namespace shardplan {

// Predicts one optimizer step of `plan` on `cluster` (the one it was planned for):
// a discrete-event simulation over the plan's op DAG (dependencies plus stream order, a
// Boost.Graph), each op starting when its stream is free and its dependencies are done,
// ties broken by op id. Costs from compute_model.h; while a collective is in flight
// compute runs 1 + overlap_slowdown times slower, and collectives on the same tier
// share its bandwidth. Memory: transient buffers allocated when their first op starts
// and freed when their last use is done (a use on a communication stream: when the
// compute stream waits for it); allocator "pool" holds the plan's pool, "caching"
// follows PyTorch's caching allocator (caching_allocator.h). The critical path is
// walked back from the last op through whichever predecessor finished last.
Timeline simulate(const Plan& plan, const ClusterSpec& cluster);

// When each buffer holds memory in `timeline` (the plan's ops with their times): a
// transient buffer from the start of its first op to the end of its last use (a use on a
// communication stream ends when the compute stream waits for it); persistent buffers
// the whole step. `used` is false for a buffer no op touches.
struct BufferLifetime {
  double alloc = 0;
  double free = 0;
  bool used = false;
};
std::vector<BufferLifetime> buffer_lifetimes(const Plan& plan, const Timeline& timeline);

}  // namespace shardplan
