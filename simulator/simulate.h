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
// share its bandwidth. Memory: the plan's buffers replayed in program order through the
// config's allocator (planner/memory_replay.h: the peaks and verdict `plan` reports),
// each op's sample at the latest start among the ops issued so far. The critical path is
// walked back from the last op through whichever predecessor finished last.
Timeline simulate(const Plan& plan, const ClusterSpec& cluster);

// Model FLOPs utilization of one step of `plan` that took `step_seconds` on `cluster`'s
// GPUs, predicted or measured: the plan's model FLOPs per GPU (PaLM's convention) over the
// step time × the GPU's dense BF16 peak; 0 for a step of no time.
double model_flops_utilization(const Plan& plan, double step_seconds, const ClusterSpec& cluster);

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
