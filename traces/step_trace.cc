#include "traces/step_trace.h"

#include <fmt/format.h>

#include <unordered_map>

#include "models/error.h"
#include "models/json_reader.h"
#include "models/limits.h"
#include "models/name_table.h"
#include "models/suggest.h"

namespace shardplan {

namespace {

constexpr NameTable<StepEventKind, 7> kEventKinds = {
    {{StepEventKind::pre_forward, "pre_forward"},
     {StepEventKind::post_forward, "post_forward"},
     {StepEventKind::pre_backward, "pre_backward"},
     {StepEventKind::recompute_forward, "recompute_forward"},
     {StepEventKind::post_backward, "post_backward"},
     {StepEventKind::final_callback, "final_callback"},
     {StepEventKind::optimizer_step, "optimizer_step"}}};

}  // namespace

std::string_view step_event_kind_name(StepEventKind kind) {
  return name_of(kEventKinds, kind);
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

StepTrace step_trace_from_json(const nlohmann::json& json, const std::string& label) {
  const JsonReader r(json, label);
  // A trace import's file carries what it measured beside the step; only the step is read.
  r.expect_only({"modules", "checkpointed", "grad_accum", "recompute", "events", "version",
                 "source", "module_times", "collectives", "measured", "kernel_seconds",
                 "warnings"});
  StepTrace trace;
  trace.modules = r.strings("modules");
  if (trace.modules.empty()) r.fail("modules", "a step traces at least one module");
  const nlohmann::json& flags = r.value("checkpointed");
  if (!flags.is_array() || flags.size() != trace.modules.size()) {
    r.fail("checkpointed", "expected one true/false per module");
  }
  for (std::size_t i = 0; i < flags.size(); ++i) {
    if (!flags[i].is_boolean()) r.fail(fmt::format("checkpointed/{}", i), "expected true or false");
    trace.checkpointed.push_back(flags[i].get<bool>());
  }
  trace.grad_accum = r.integer_in("grad_accum", 1, limits::kMaxGradAccum);
  // Traced modules are FSDP units: a plan's bound on units × micro-batches holds here too,
  // and keeps the counts below (one per module and micro-batch) small.
  if (static_cast<int64_t>(trace.modules.size()) * trace.grad_accum >
      limits::kMaxUnitMicroBatches) {
    r.fail("grad_accum",
           fmt::format("{} modules × {} micro-batches is more than the {} units × micro-batches "
                       "a plan may have (docs/formats.md, Limits)",
                       trace.modules.size(), trace.grad_accum, limits::kMaxUnitMicroBatches));
  }
  trace.recompute = parse_recompute(r.string("recompute"), r.file(), r.path_of("recompute"));
  std::unordered_map<std::string, int64_t> index;
  for (std::size_t m = 0; m < trace.modules.size(); ++m) {
    if (!index.emplace(trace.modules[m], static_cast<int64_t>(m)).second) {
      r.fail(fmt::format("modules/{}", m),
             fmt::format("{} is listed twice", quote_input(trace.modules[m])));
    }
  }
  // Forward and backward of every module once per micro-batch.
  std::vector<int64_t> forwards(trace.modules.size() * static_cast<std::size_t>(trace.grad_accum));
  std::vector<int64_t> backwards(forwards.size());
  const std::vector<JsonReader> events = r.objects("events");
  for (std::size_t i = 0; i < events.size(); ++i) {
    const JsonReader& e = events[i];
    e.expect_only({"kind", "micro_batch", "module", "time_seconds"});  // time: imports
    const std::string kind_text = e.string("kind");
    const auto kind = value_of(kEventKinds, kind_text);
    if (!kind) {
      e.fail("kind", unknown_name_message("step event kind", kind_text, names_of(kEventKinds)));
    }
    StepEvent event{.kind = *kind, .micro_batch = -1, .module = -1};
    if (*kind != StepEventKind::optimizer_step) {
      event.micro_batch = e.integer_in("micro_batch", 0, trace.grad_accum - 1);
    }
    if (*kind != StepEventKind::optimizer_step && *kind != StepEventKind::final_callback) {
      const std::string name = e.string("module");
      const auto found = index.find(name);
      if (found == index.end())
        e.fail("module", fmt::format("{} is not in /modules", quote_input(name)));
      event.module = found->second;
      const auto slot = static_cast<std::size_t>(event.micro_batch) * trace.modules.size() +
                        static_cast<std::size_t>(event.module);
      if (*kind == StepEventKind::pre_forward) ++forwards[slot];
      if (*kind == StepEventKind::post_backward) ++backwards[slot];
    }
    trace.events.push_back(event);
  }
  for (std::size_t slot = 0; slot < forwards.size(); ++slot) {
    if (forwards[slot] != 1 || backwards[slot] != 1) {
      r.fail("events",
             fmt::format("micro-batch {} runs module {} forward {} and backward {} times, not "
                         "once each",
                         slot / trace.modules.size(),
                         quote_input(trace.modules[slot % trace.modules.size()]), forwards[slot],
                         backwards[slot]));
    }
  }
  return trace;
}

}  // namespace shardplan
