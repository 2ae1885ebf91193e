// Module order from FSDP2's record_function ranges, which name each unit
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, _with_fqn:
// "FSDP::pre_forward (layers.3)"; the root has no FQN).
//
// A forward window runs from FSDP::pre_forward to the end of FSDP::post_forward. A
// backward window opens at FSDP::pre_backward and closes at the last post-backward
// range of the unit before its next pre_backward: FSDP2 records
// post_backward_accumulate, post_backward_reshard and post_backward_reduce (the last
// is absent without gradient sync); "FSDP::post_backward" itself is only a debug log.
#include <fmt/format.h>

#include <algorithm>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

// "FSDP::pre_forward (layers.3)" -> {"pre_forward", "layers.3"}; the root unit has no name.
std::optional<std::pair<std::string, std::string>> fsdp_range(std::string_view name) {
  if (!starts_with(name, "FSDP::")) return std::nullopt;
  std::string_view rest = name.substr(6);
  std::string fqn;
  if (const std::size_t open = rest.find(" (");
      open != std::string_view::npos && !rest.empty() && rest.back() == ')') {
    fqn = std::string(rest.substr(open + 2, rest.size() - open - 3));
    rest = rest.substr(0, open);
  }
  return std::pair{std::string(rest), fqn};
}

struct FsdpRange {
  std::string what, fqn;
  double begin, end;
  int64_t tid;
};

std::vector<FsdpRange> fsdp_ranges(const std::vector<KinetoEvent>& events, const KinetoStep& step) {
  std::vector<FsdpRange> ranges;
  for (const KinetoEvent& e : events) {
    if (e.ph != 'X' || !step.contains(e.ts) || !starts_with(e.name, "FSDP::")) continue;
    if (auto r = fsdp_range(e.name))
      ranges.push_back({r->first, r->second, e.ts, end_of(e), e.tid});
  }
  std::stable_sort(ranges.begin(), ranges.end(),
                   [](const FsdpRange& a, const FsdpRange& b) { return a.begin < b.begin; });
  return ranges;
}

// Pairs each unit's pre_forward with its next post_forward (first in, first out). Units
// are numbered in forward order, the root (no FQN in FSDP2) first.
void pair_forward_ranges(const std::vector<FsdpRange>& ranges, int64_t step_tid, ModuleNames& names,
                         ModuleOrder& order) {
  std::map<std::string, std::vector<FsdpRange>> open_forward;
  for (const FsdpRange& r : ranges) {
    if (r.what == "pre_forward") {
      if (r.tid == step_tid) names.id_of(r.fqn);
      open_forward[r.fqn].push_back(r);
    } else if (r.what == "post_forward") {
      auto& pending = open_forward[r.fqn];
      if (pending.empty()) continue;
      const FsdpRange pre = pending.front();
      pending.erase(pending.begin());
      const int64_t m = names.id_of(r.fqn);
      // A unit's forward off the step's thread is re-run inside backward: activation
      // checkpointing.
      (pre.tid == step_tid ? order.forward_calls : order.recompute_calls)
          .push_back({m, 0, pre.begin, r.end, pre.tid});
    }
  }
}

// The end of the backward window that `open` opens: the last post-backward range of the
// unit that starts before its next pre_backward (at `next_open`), or -1 if none does.
double backward_window_end(const FsdpRange& open, double next_open,
                           const std::vector<FsdpRange>& closers) {
  double end = -1;
  for (const FsdpRange& c : closers)
    if (c.begin >= open.begin && c.begin < next_open) end = std::max(end, c.end);
  return end;
}

void close_backward_windows(const std::vector<FsdpRange>& ranges, ModuleNames& names,
                            ModuleOrder& order) {
  std::map<std::string, std::vector<FsdpRange>> pre_backward, post_backward;
  for (const FsdpRange& r : ranges) {
    if (r.what == "pre_backward") {
      pre_backward[r.fqn].push_back(r);
    } else if (starts_with(r.what, "post_backward")) {
      post_backward[r.fqn].push_back(r);
    } else if (r.what == "root_post_backward_callback" || r.what == "root_post_backward") {
      order.final_callbacks.push_back(r.begin);
    }
  }
  int64_t unclosed = 0;
  for (const auto& [fqn, opens] : pre_backward) {
    const int64_t m = names.id_of(fqn);
    for (std::size_t i = 0; i < opens.size(); ++i) {
      const double next = i + 1 < opens.size() ? opens[i + 1].begin : 1e300;
      double end = backward_window_end(opens[i], next, post_backward[fqn]);
      if (end < 0) {
        ++unclosed;
        end = opens[i].end;
      }
      order.backward_windows.push_back({m, 0, opens[i].begin, end, opens[i].tid});
    }
  }
  if (unclosed > 0) {
    order.warnings.push_back(
        fmt::format("{} FSDP::pre_backward range(s) have no post-backward range after them: "
                    "their backward windows end with pre_backward",
                    unclosed));
  }
  // Each backward pass opens with the root unit's pre_backward (its hook sits on the
  // model's outputs).
  order.backward_windows = number_passes(std::move(order.backward_windows));
}

class Fsdp2Ranges : public ModuleSource {
 public:
  ModuleOrder find_order(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                         int64_t /*depth*/) const override {
    const std::vector<FsdpRange> ranges = fsdp_ranges(events, step);
    ModuleOrder order;
    order.source =
        "FSDP2 record_function ranges (FSDP::pre_forward/post_forward, "
        "FSDP::pre_backward/post_backward_*)";
    ModuleNames names;
    pair_forward_ranges(ranges, step.tid, names, order);
    close_backward_windows(ranges, names, order);
    const bool any_fqn = std::any_of(ranges.begin(), ranges.end(), [](const FsdpRange& r) {
      return r.what == "pre_forward" && !r.fqn.empty();
    });
    if (!any_fqn && order.forward_calls.size() > 1) {
      order.warnings.push_back(
          "FSDP ranges carry no module names (older PyTorch writes bare 'FSDP::pre_forward'): "
          "every unit reads as the root unit \"\"");
    }
    order.modules = std::move(names.names);
    return order;
  }

  // Module ranges on the autograd thread inside a unit's backward window are that unit's
  // forward re-run (activation checkpointing around an FSDP unit runs no FSDP hooks).
  std::vector<ModuleCall> recomputes_in_backward(const std::vector<KinetoEvent>& events,
                                                 const KinetoStep& step,
                                                 const CallIndex& backward) const override {
    std::vector<ModuleCall> recomputes;
    std::map<int64_t, std::vector<RangeNode>> by_thread = module_ranges(events, step);
    for (auto& [tid, nodes] : by_thread) {
      if (tid == step.tid) continue;
      for (std::size_t i : nest(nodes)) {
        const auto call = backward.at(nodes[i].begin);
        if (!call) continue;
        recomputes.push_back({call->module, 0, nodes[i].begin, nodes[i].end, tid});
      }
    }
    return recomputes;
  }
};

}  // namespace

bool has_fsdp2_units(const std::vector<KinetoEvent>& events, const KinetoStep& step) {
  return std::any_of(events.begin(), events.end(), [&](const KinetoEvent& e) {
    if (e.ph != 'X' || !step.contains(e.ts)) return false;
    const auto r = fsdp_range(e.name);
    return r && (r->first == "pre_forward" || r->first == "pre_backward");
  });
}

std::unique_ptr<ModuleSource> make_fsdp2_source() {
  return std::make_unique<Fsdp2Ranges>();
}

}  // namespace shardplan::kineto
