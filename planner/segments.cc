#include "planner/internal/segments.h"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <unordered_map>

#include "models/error.h"
#include "models/host_work.h"

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
    out.push_back({&m, found->second, false, true});
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

SegmentComm segment_comm(const Module& m, const ModuleComm& c, const BatchShape& shape) {
  return SegmentComm{.kind = c.kind,
                     .axis = c.axis,
                     .module = m.name,
                     .bytes = comm_bytes(m, c, shape),
                     .count = c.count};
}

// The collectives of `module`'s subtree: forward ones in module order; backward ones in
// reverse module order, each module's selective re-run (its forward collectives) before
// its own backward ones.
void add_comms(const Module& module, const BatchShape& shape, Recompute recompute, PlanSegment& s) {
  std::vector<const Module*> order;
  for_each_module(module, [&](const Module& m) { order.push_back(&m); });
  for (const Module* m : order) {
    for (const ModuleComm& c : m->cost.comms) {
      if (c.phase == CommPhase::forward) s.forward_comms.push_back(segment_comm(*m, c, shape));
    }
  }
  std::vector<SegmentComm> backward;
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const Module& m = **it;
    const bool rerun = recompute == Recompute::selective && reruns_selectively(m, shape);
    // sac_op's re-run matmuls take their inputs from saved tensors; the tensor-parallel
    // gathers torchtitan re-runs with them are not modelled (docs/model.md).
    for (const ModuleComm& c : m.cost.comms) {
      if (c.phase == CommPhase::forward && rerun) backward.push_back(segment_comm(m, c, shape));
    }
    for (const ModuleComm& c : m.cost.comms) {
      if (c.phase == CommPhase::backward) backward.push_back(segment_comm(m, c, shape));
    }
  }
  // Segments run backward last module first: this module's collectives go before those
  // of the modules already in the segment.
  s.backward_comms.insert(s.backward_comms.begin(), backward.begin(), backward.end());
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

std::vector<TracedModule> traced_modules(const ModelSpec& model, const std::vector<FsdpUnit>& units,
                                         const StepTrace& trace, const FsdpConfig& config,
                                         const std::string& label) {
  if (trace.grad_accum != config.grad_accum) {
    throw InputError(label, "/grad_accum",
                     fmt::format("the step trace runs {} micro-batches, the config's grad_accum "
                                 "is {}",
                                 trace.grad_accum, config.grad_accum));
  }
  const bool any_checkpointed = std::find(trace.checkpointed.begin(), trace.checkpointed.end(),
                                          true) != trace.checkpointed.end();
  if (recomputes_whole_modules(config.recompute) && !any_checkpointed) {
    throw InputError(label, "/checkpointed",
                     fmt::format("the config asks for {} recompute but no module of the step trace "
                                 "re-runs in backward; set recompute to none or selective, or "
                                 "trace a step that recomputes",
                                 recompute_name(config.recompute)));
  }
  const std::vector<TracedModule> derived = traced_modules(model, units);
  std::unordered_map<std::string, std::size_t> position;  // derived entry by name
  for (std::size_t i = 0; i < derived.size(); ++i) position[derived[i].module->name] = i;
  std::unordered_map<std::string, std::size_t> unit_of;  // unit by name ("" the root)
  for (std::size_t u = 0; u < units.size(); ++u) unit_of[units[u].name] = u;

  auto all_in = [&](const auto& names) {
    return std::all_of(trace.modules.begin(), trace.modules.end(),
                       [&](const std::string& m) { return names.contains(m); });
  };
  std::vector<TracedModule> out;
  if (trace.modules.size() == derived.size() && all_in(position)) {
    for (std::size_t i = 0; i < trace.modules.size(); ++i) {
      TracedModule t = derived[position[trace.modules[i]]];
      t.checkpointed = t.unit != 0 && trace.checkpointed[i];
      out.push_back(t);
    }
    return out;
  }
  if (trace.modules.size() == units.size() && all_in(unit_of)) {
    // The layer units in the trace's order fill the places the model's order gives them.
    std::vector<std::size_t> layer_order;
    std::vector<bool> layer_checkpointed(units.size(), false);
    for (std::size_t i = 0; i < trace.modules.size(); ++i) {
      const std::size_t u = unit_of[trace.modules[i]];
      layer_checkpointed[u] = trace.checkpointed[i];
      if (u != 0) layer_order.push_back(u);
    }
    std::size_t next = 0;
    for (TracedModule t : derived) {
      if (t.unit != 0) {
        const std::size_t u = layer_order[next++];
        t = TracedModule{.module = units[u].module, .unit = static_cast<int64_t>(u)};
        t.checkpointed = layer_checkpointed[u];
      }
      out.push_back(t);
    }
    return out;
  }
  std::string unknown;
  for (const std::string& m : trace.modules) {
    if (!position.contains(m) && !unit_of.contains(m)) {
      unknown = m;
      break;
    }
  }
  throw InputError(label, "/modules",
                   fmt::format("the step trace's {} modules match neither {}'s {} traced modules "
                               "nor its {} FSDP units{}",
                               trace.modules.size(), model.name, derived.size(), units.size(),
                               unknown.empty() ? "" : fmt::format(" ('{}' is neither)", unknown)));
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
          .id = static_cast<int64_t>(segments.size()), .unit = t.unit, .checkpointed = false});
    }
    PlanSegment& s = segments.back();
    s.checkpointed = s.checkpointed || (!root && t.checkpointed);
    s.label += (s.label.empty() ? "" : "+") + (t.module->name.empty() ? "<root>" : t.module->name);
    s.modules.push_back(t.module->name);
    s.forward_flops += forward_flops(*t.module, shape);
    s.backward_flops += backward_flops(*t.module, shape);
    s.forward_attention_flops += forward_flops_of_kind(*t.module, shape, ComputeKind::attention);
    for (const GemmShape& g : forward_gemms(*t.module, shape)) s.gemms.push_back(g);
    s.backward_attention_flops += backward_flops_of_kind(*t.module, shape, ComputeKind::attention);
    s.forward_bf16_gemm_flops += forward_bf16_gemm_flops(*t.module, shape);
    s.backward_bf16_gemm_flops += backward_bf16_gemm_flops(*t.module, shape);
    // Selective recompute re-runs the marked modules (core attention, and Megatron's other
    // recompute_modules) inside backward, sac_op the even-numbered matmuls of each
    // checkpointed layer.
    if (recompute == Recompute::selective || (recompute == Recompute::sac_op && s.checkpointed)) {
      s.backward_flops += recompute_flops(*t.module, shape, recompute);
      if (recompute == Recompute::selective) {
        s.backward_attention_flops +=
            recompute_flops(*t.module, shape, recompute, ComputeKind::attention);
      }
    }
    s.recompute_io_bytes += recompute_io_bytes(*t.module, shape, recompute);
    s.recompute_bytes += recompute_dropped_bytes(*t.module, shape, recompute);
    // Each module at its token share: an MoE expert's linears and activation see the
    // routed copies (until 2026-11-29 they were counted once per token, k times too few).
    s.io_bytes += forward_io_bytes(*t.module, shape);
    const Fp8CastBytes casts = fp8_cast_bytes(*t.module, shape);
    s.fp8_cast_forward_bytes += casts.forward;
    s.fp8_cast_backward_bytes += casts.backward;
    const double none = saved_activation_bytes(*t.module, shape, Recompute::none);
    s.full_activation_bytes += none;
    // Modules that are not checkpointed keep their activations under full, sac_layer and
    // sac_op recompute (torchtitan checkpoints the layers only); selective applies
    // everywhere. A checkpointed module under sac_layer is recomputed whole.
    Recompute mode = recompute == Recompute::sac_layer ? Recompute::full : recompute;
    if (!s.checkpointed && mode != Recompute::selective) mode = Recompute::none;
    s.activation_bytes += saved_activation_bytes(*t.module, shape, mode);
    s.workspace_bytes = std::max(s.workspace_bytes, workspace_bytes(*t.module, shape));
    add_comms(*t.module, shape, recompute, s);
    const HostWork host = host_work(*t.module, shape);
    s.forward_host_seconds += host.forward_seconds;
    s.backward_host_seconds += host.backward_seconds;
    s.host_sync = s.host_sync || host.forward_syncs > 0;
  }
  return segments;
}

}  // namespace shardplan
