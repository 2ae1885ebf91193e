#pragma once

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "pool/pool.h"
#include "traces/timeline.h"

namespace shardplan {

// Up to this many micro-batches predict_step simulates the whole step.
inline constexpr int64_t kDirectMicroBatches = 6;

// The summary simulate(build_plan(model, cluster, resolved, assigner)) gives, at a cost
// that does not grow with grad_accum, for search loops. Past kDirectMicroBatches it
// simulates 3 and 4 micro-batches and extends the step by the difference: the first
// micro-batch (cold prefetch), the last (final reductions, optimizer) and the boundary
// between two middle ones all appear in the 4-micro-batch step, and every further middle
// micro-batch repeats that boundary and body. Times extend linearly, peaks are those of
// the 4-micro-batch step (the middle pattern repeats), rates follow from the tokens and
// FLOPs of the whole step. Held against whole simulations in
// tests/simulator/predict_step_test.cc.
TimelineSummary predict_step(const ModelSpec& model, const ClusterSpec& cluster,
                             const FsdpConfig& resolved, const OffsetAssigner* assigner = nullptr);

// Seconds per micro-batch that the compute stream of every configuration sharing
// `resolved`'s compute_class (planner/sweep.h) is busy at least: one micro-batch's
// forward, backward and recompute ops, and the tensor/context-parallel collectives that
// block the compute stream, each at its cost alone (the stream runs them one after
// another; shared links and overlap only slow them). grad_accum times it bounds the step
// time from below: the sweep's step_lower_bound.
double compute_stream_seconds_per_micro_batch(const ModelSpec& model, const ClusterSpec& cluster,
                                              const FsdpConfig& resolved);

}  // namespace shardplan
