#pragma once

#include <cstdint>

#include "planner/fsdp_config.h"
#include "planner/plan.h"

// Internal to the planner (build_plan calls it); tests reach the policy functions.
namespace shardplan {

// Emits the ops of one optimizer step on the compute, ag, rs and outer streams in the
// Megatron-FSDP lifecycle, and the transient buffers with their live intervals. Needs
// plan.config, process_groups, units, groups, segments and the persistent buffers already
// in `plan`.
//
//   forward, per micro-batch:  ag_fwd(u) ──▶ fwd(u) ──▶ (reshard: unsharded weight freed)
//   backward, reversed:        ag_bwd(u) ──▶ [recompute(u)] ──▶ bwd(u) ──▶ rs(u) [──▶ outer(u)]
//   then:                      optimizer_step ──▶ [ag_post(u) for optim / optim_grads]
//
// The driver runs one emitter per part: emit_forward(mb) and emit_backward(mb) for each
// micro-batch, emit_optimizer_step(), then emit_post_step_gathers(). The policies they
// share are the functions below.
void build_schedule(Plan& plan);

// Prefetch k: the gather of the layer at `position` (0-based, in the pass's execution
// order) is issued when the layer at the returned position finishes its compute, so at
// most k + 1 layer units are gathered at once; -1: issued when the pass starts (the first
// k + 1 layers). The same rule serves forward and backward, each with its own depth.
int64_t gather_trigger(int64_t position, int64_t prefetch);

// The sliding drain d: the backward at `position` (in backward order) waits for the
// reduction of the layer `d` positions back, so at most d unreduced gradient buffers are
// live; -1: nothing to wait for yet.
int64_t drain_dependency(int64_t position, int64_t drain);

// The drain depth of a config: max_live_grad_buffers with async reduction; 1 when
// reductions run on the compute stream (each finishes before the next backward).
int64_t drain_depth(const FsdpConfig& config);

}  // namespace shardplan
