#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "models/model_spec.h"
#include "models/module_cost.h"

namespace shardplan {

// What happens to a traced module at one point of the step.
enum class StepEventKind {
  pre_forward,
  post_forward,
  pre_backward,
  recompute_forward,  // full recompute: the forward re-run inside the module's backward
  post_backward,
  final_callback,  // the root's end-of-backward callback (drains pending reductions)
  optimizer_step,
};

std::string_view step_event_kind_name(StepEventKind kind);

struct StepEvent {
  StepEventKind kind = StepEventKind::pre_forward;
  int64_t micro_batch = 0;  // -1 for the optimizer step
  int64_t module = -1;      // index into StepTrace::modules; -1 for callback and step
};

// The ordered module events of one optimizer step.
struct StepTrace {
  std::vector<std::string> modules;  // traced modules, in forward execution order
  std::vector<bool> checkpointed;    // re-run in backward under full recompute
  int64_t grad_accum = 1;
  Recompute recompute = Recompute::none;
  std::vector<StepEvent> events;
};

// Generates the step: for each of `grad_accum` micro-batches, pre/post forward of every
// traced module in order, then backward in reverse (with `recompute: full`, the
// recompute-forward of a checkpointed module sits inside its backward), then the root's
// final callback; the optimizer step closes the step. `modules` must name modules of
// `model`, in forward order.
StepTrace generate_step_trace(const ModelSpec& model, std::vector<std::string> modules,
                              std::vector<bool> checkpointed, int64_t grad_accum,
                              Recompute recompute);

nlohmann::json step_trace_to_json(const StepTrace& trace);

// Reads a step trace: what step_trace_to_json writes, or a `trace import -o` file (its
// measured fields are ignored here). Checks that every event names a traced module, a
// micro-batch below grad_accum, and that each micro-batch runs every module forward and
// backward once. Errors name `label` and the field.
StepTrace step_trace_from_json(const nlohmann::json& json, const std::string& label);

}  // namespace shardplan
