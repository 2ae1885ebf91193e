#include "planner/segments.h"

#include <optional>
#include <unordered_map>

namespace shardplan {
namespace {

bool contains_unit(const Module& m, const std::unordered_map<const Module*, int64_t>& unit_of) {
  if (unit_of.contains(&m)) return true;
  for (const Module& child : m.children) {
    if (contains_unit(child, unit_of)) return true;
  }
  return false;
}

void collect(const Module& m, const std::unordered_map<const Module*, int64_t>& unit_of,
             std::vector<TracedModule>& out) {
  if (auto found = unit_of.find(&m); found != unit_of.end()) {
    out.push_back({&m, found->second});
    return;
  }
  if (!m.name.empty() && !contains_unit(m, unit_of)) {
    out.push_back({&m, 0});
    return;
  }
  for (const Module& child : m.children) collect(child, unit_of, out);
}

bool has_own_work(const Module& m) {
  const ModuleCost& c = m.cost;
  const Footprint& saved = c.saved_per_token;
  const Footprint& saved_ctx = c.saved_per_token_ctx;
  return !m.parameters.empty() || c.fwd_flops_per_token > 0 || c.fwd_flops_per_token_ctx > 0 ||
         c.fwd_io_elements_per_token > 0 || saved.elements > 0 || saved.fixed_bytes > 0 ||
         saved_ctx.elements > 0 || saved_ctx.fixed_bytes > 0;
}

}  // namespace

std::vector<TracedModule> traced_modules(const ModelSpec& model,
                                         const std::vector<FsdpUnit>& units) {
  std::unordered_map<const Module*, int64_t> unit_of;
  for (std::size_t u = 1; u < units.size(); ++u) unit_of[units[u].module] = static_cast<int64_t>(u);
  std::vector<TracedModule> out;
  if (!contains_unit(model.root, unit_of)) {
    out.push_back({&model.root, 0});
    return out;
  }
  if (has_own_work(model.root)) out.push_back({&model.root, 0, true});
  collect(model.root, unit_of, out);
  return out;
}

std::vector<PlanSegment> build_segments(const std::vector<TracedModule>& traced,
                                        const BatchShape& shape, Recompute recompute) {
  std::vector<PlanSegment> segments;
  std::optional<Module>
      own;  // the root's own work: a childless copy, so subtree sums count only it
  for (TracedModule t : traced) {
    if (t.own_only) {
      own = Module{.name = t.module->name,
                   .type = t.module->type,
                   .parameters = t.module->parameters,
                   .cost = t.module->cost};
      t.module = &*own;
    }
    const bool root = t.unit == 0;
    if (segments.empty() || !root || segments.back().unit != 0) {
      segments.push_back(PlanSegment{
          .id = static_cast<int64_t>(segments.size()), .unit = t.unit, .checkpointed = !root});
    }
    PlanSegment& s = segments.back();
    s.label += (s.label.empty() ? "" : "+") + (t.module->name.empty() ? "<root>" : t.module->name);
    s.modules.push_back(t.module->name);
    s.forward_flops += forward_flops(*t.module, shape);
    s.backward_flops += backward_flops(*t.module, shape);
    s.forward_attention_flops += forward_flops_of_kind(*t.module, shape, ComputeKind::attention);
    for (const GemmShape& g : forward_gemms(*t.module, shape)) s.gemms.push_back(g);
    s.backward_attention_flops += backward_flops_of_kind(*t.module, shape, ComputeKind::attention);
    // Selective recompute re-runs the marked modules (core attention) inside backward.
    if (recompute == Recompute::selective) {
      const double rerun = selective_recompute_flops(*t.module, shape);
      s.backward_flops += rerun;
      s.backward_attention_flops += rerun;
    }
    double io_elements = 0;
    for_each_module(*t.module, [&](const Module& m) {
      io_elements += m.cost.fwd_io_elements_per_token * m.cost.token_fraction;
    });
    s.io_bytes += io_elements * static_cast<double>(shape.tokens() * shape.activation_bytes);
    const double none = saved_activation_bytes(*t.module, shape, Recompute::none);
    s.full_activation_bytes += none;
    // The root's modules are never checkpointed; selective applies everywhere.
    const Recompute mode = root && recompute == Recompute::full ? Recompute::none : recompute;
    s.activation_bytes += saved_activation_bytes(*t.module, shape, mode);
  }
  return segments;
}

}  // namespace shardplan
