#pragma once

#include <memory>

#include "models/cluster_spec.h"
#include "models/model_spec.h"
#include "planner/fsdp_config.h"
#include "planner/plan.h"
#include "planner/plan_pool.h"
#include "traces/step_trace.h"

namespace shardplan {

// Turns (model, cluster, resolved config) into a Plan: FSDP units and their parameter
// groups, persistent buffers by the strategy table, the op schedule with every transient
// buffer's live interval, and the pool those buffers are packed into by `assigner`
// (default: auto, with a deterministic search budget). The result passes validate_plan.
// The module order and recompute placement come from plan_step_trace.
Plan build_plan(const ModelSpec& model, const ClusterSpec& cluster,
                const FsdpConfig& resolved_config, const OffsetAssigner* assigner = nullptr);

// The same, following `trace` (an imported profile, a capture, or plan_step_trace's): its
// module order and which modules re-run under full recompute (traced_modules with a
// trace, planner/segments.h). `label` names the trace in errors.
Plan build_plan(const ModelSpec& model, const ClusterSpec& cluster,
                const FsdpConfig& resolved_config, const StepTrace& trace, const std::string& label,
                const OffsetAssigner* assigner = nullptr);

// The step trace the plan follows: the traced modules (units and the root's other
// modules) through grad_accum micro-batches.
StepTrace plan_step_trace(const ModelSpec& model, const FsdpConfig& resolved_config);

}  // namespace shardplan
