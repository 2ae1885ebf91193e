#pragma once

#include "planner/plan.h"

namespace shardplan {

// Emits the ops of one optimizer step on the compute, ag, rs and outer streams in the
// Megatron-FSDP lifecycle, and the transient buffers with their live intervals. Needs
// plan.config, units, groups, segments and the persistent buffers already in `plan`.
//
//   forward, per micro-batch:  ag_fwd(u) ──▶ fwd(u) ──▶ (reshard: unsharded weight freed)
//   backward, reversed:        ag_bwd(u) ──▶ [recompute(u)] ──▶ bwd(u) ──▶ rs(u) [──▶ outer(u)]
//   then:                      optimizer_step ──▶ [ag_post(u) for optim / optim_grads]
//
// Prefetch k: ag(i) waits for the op that frees unit i−k−1's unsharded weights, so at
// most k + 1 layer units are gathered at once (the root unit stays gathered from its
// first forward to its last backward of a micro-batch). Drain d: bwd(i) waits for rs(i−d)
// in backward order, so at most d unreduced gradient buffers are live.
void build_schedule(Plan& plan);

}  // namespace shardplan
