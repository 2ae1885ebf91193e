#pragma once

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "traces/timeline.h"

namespace shardplan {

// Up to this many micro-batches predict_step simulates the whole step.
inline constexpr int64_t kDirectMicroBatches = 5;

// The summary simulate(build_plan(model, cluster, resolved)) gives, at a cost that does
// not grow with grad_accum, for search loops. Under the caching allocator the pool's
// layout does not enter the prediction (the simulator replays the allocator), so the
// plan's pool is placed by make_online_assigner, not searched. Past kDirectMicroBatches it
// simulates 2 and 3 micro-batches and extends the step by the difference, one middle
// micro-batch with its boundaries: the first micro-batch (cold prefetch) and the last
// (final reductions, optimizer) are in both, and every further middle one repeats the
// same work on the same streams. Times extend linearly, peaks are those of the
// 3-micro-batch step (the middle pattern repeats), rates follow from the tokens and FLOPs
// of the whole step. Held equal to whole simulations (10⁻⁶, peaks to the byte) on every
// strategy, HSDP, recompute, double buffering, tp/cp and both allocators in
// tests/simulator/predict_step_test.cc.
TimelineSummary predict_step(const ModelSpec& model, const ClusterSpec& cluster,
                             const FsdpConfig& resolved);

// Seconds per micro-batch that the compute stream of every configuration sharing
// `resolved`'s compute_class (planner/sweep.h) is busy at least: one micro-batch's
// forward, backward and recompute ops, and the tensor/context-parallel collectives that
// block the compute stream, each at its cost alone (the stream runs them one after
// another; shared links and overlap only slow them) — or, when longer, the CPU time the
// host takes to issue those compute ops (it issues them one after another too).
// grad_accum times it bounds the step time from below: the sweep's step_lower_bound.
double compute_stream_seconds_per_micro_batch(const ModelSpec& model, const ClusterSpec& cluster,
                                              const FsdpConfig& resolved);

}  // namespace shardplan
