#include "traces/step_trace.h"

#include <fmt/format.h>

#include "models/error.h"
#include "models/name_table.h"

namespace shardplan {

std::string_view step_event_kind_name(StepEventKind kind) {
  static constexpr NameTable<StepEventKind, 7> kNames = {
      {{StepEventKind::pre_forward, "pre_forward"},
       {StepEventKind::post_forward, "post_forward"},
       {StepEventKind::pre_backward, "pre_backward"},
       {StepEventKind::recompute_forward, "recompute_forward"},
       {StepEventKind::post_backward, "post_backward"},
       {StepEventKind::final_callback, "final_callback"},
       {StepEventKind::optimizer_step, "optimizer_step"}}};
  return name_of(kNames, kind);
}

StepTrace generate_step_trace(const ModelSpec& model, std::vector<std::string> modules,
                              std::vector<bool> checkpointed, int64_t grad_accum,
                              Recompute recompute) {
  if (checkpointed.size() != modules.size()) {
    throw InputError("", "step trace", "one checkpointed flag per traced module is required");
  }
  for (const std::string& name : modules) {
    if (find_module(model.root, name) == nullptr) {
      throw InputError("", "step trace", fmt::format("{} has no module '{}'", model.name, name));
    }
  }
  StepTrace trace{.modules = std::move(modules),
                  .checkpointed = std::move(checkpointed),
                  .grad_accum = grad_accum,
                  .recompute = recompute};
  const auto n = static_cast<int64_t>(trace.modules.size());
  trace.events.reserve(static_cast<std::size_t>(grad_accum * (5 * n + 1) + 1));
  for (int64_t mb = 0; mb < grad_accum; ++mb) {
    for (int64_t m = 0; m < n; ++m) {
      trace.events.push_back({StepEventKind::pre_forward, mb, m});
      trace.events.push_back({StepEventKind::post_forward, mb, m});
    }
    for (int64_t m = n - 1; m >= 0; --m) {
      trace.events.push_back({StepEventKind::pre_backward, mb, m});
      if (recompute == Recompute::full && trace.checkpointed[static_cast<std::size_t>(m)]) {
        trace.events.push_back({StepEventKind::recompute_forward, mb, m});
      }
      trace.events.push_back({StepEventKind::post_backward, mb, m});
    }
    trace.events.push_back({StepEventKind::final_callback, mb, -1});
  }
  trace.events.push_back({StepEventKind::optimizer_step, -1, -1});
  return trace;
}

nlohmann::json step_trace_to_json(const StepTrace& trace) {
  nlohmann::json events = nlohmann::json::array();
  for (const StepEvent& e : trace.events) {
    nlohmann::json event = {{"kind", step_event_kind_name(e.kind)}};
    if (e.micro_batch >= 0) event["micro_batch"] = e.micro_batch;
    if (e.module >= 0) event["module"] = trace.modules[static_cast<std::size_t>(e.module)];
    events.push_back(std::move(event));
  }
  return {{"modules", trace.modules},
          {"checkpointed", trace.checkpointed},
          {"grad_accum", trace.grad_accum},
          {"recompute", recompute_name(trace.recompute)},
          {"events", std::move(events)}};
}

}  // namespace shardplan
