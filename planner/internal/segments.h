#pragma once

#include <vector>

#include "models/model_spec.h"
#include "models/module_cost.h"
#include "planner/fsdp_config.h"
#include "planner/internal/fsdp_units.h"
#include "planner/plan.h"
#include "traces/step_trace.h"

namespace shardplan {

// A module the step trace follows, and the unit that owns it.
struct TracedModule {
  const Module* module = nullptr;
  int64_t unit = 0;           // index into the units of find_fsdp_units (0 = root)
  bool own_only = false;      // only the module's own work and parameters, not its children's
  bool checkpointed = false;  // re-run in backward under full recompute (layer units)
};

// The traced modules in forward order: every unit module, and every maximal subtree
// outside the units (the root's embedding, final norm, head, loss). The root itself is
// traced when no unit lies inside it (the whole model is the root unit), and for its own
// work (own_only, first) when it owns parameters or a cost of its own beside its
// children, as a captured model's root may.
std::vector<TracedModule> traced_modules(const ModelSpec& model,
                                         const std::vector<FsdpUnit>& units);

// The traced modules in the order, and with the recompute placement, of `trace`. A trace
// at module level (what plan_step_trace writes, or a capture of the same model) reorders
// traced_modules; one at unit level (an FSDP2 profile: the root "" and each unit) orders
// the layer units, the root's modules keeping their places around them. Refused, naming
// `label`: a trace whose modules are neither, a different grad_accum, or full recompute
// in the config for a trace that re-ran nothing.
std::vector<TracedModule> traced_modules(const ModelSpec& model, const std::vector<FsdpUnit>& units,
                                         const StepTrace& trace, const FsdpConfig& config,
                                         const std::string& label);

// Groups consecutive traced modules of one unit into segments and costs them for one
// micro-batch of `shape` under `recompute` (checkpointed: the unit segments).
std::vector<PlanSegment> build_segments(const std::vector<TracedModule>& traced,
                                        const BatchShape& shape, Recompute recompute);

}  // namespace shardplan
