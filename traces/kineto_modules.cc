// Module order from nn.Module ranges (profiles taken with with_stack=True), and the choice
// between that source and FSDP2's ranges (kineto_fsdp.cc).
#include <algorithm>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

// The traced level: below wrappers that hold one module (DistributedDataParallel ->
// ResNet), to where the model branches, then `depth` levels further.
std::vector<std::size_t> traced_level(const std::vector<RangeNode>& nodes,
                                      const std::vector<std::size_t>& roots, int64_t depth) {
  std::vector<std::size_t> level = roots;
  auto one_name = [&](const std::vector<std::size_t>& l) {
    for (std::size_t i : l) {
      if (nodes[i].name != nodes[l.front()].name || nodes[i].children.empty()) return false;
    }
    return !l.empty();
  };
  auto descend = [&](const std::vector<std::size_t>& l, bool all) {
    std::vector<std::size_t> next;
    for (std::size_t i : l) {
      if (nodes[i].children.empty() && !all) {
        next.push_back(i);
      } else {
        next.insert(next.end(), nodes[i].children.begin(), nodes[i].children.end());
      }
    }
    return next;
  };
  while (one_name(level)) level = descend(level, true);
  for (int64_t d = 0; d < depth; ++d) level = descend(level, false);
  return level;
}

void mark_subtree(const std::vector<RangeNode>& nodes, std::size_t i, int64_t module,
                  std::map<std::string, int64_t>& traced_of_name) {
  traced_of_name.emplace(nodes[i].name, module);
  for (std::size_t c : nodes[i].children) mark_subtree(nodes, c, module, traced_of_name);
}

// Module ranges on other threads inside the step are forwards re-run in backward
// (activation checkpointing); the outermost range that names a traced module's subtree
// is that module's recompute.
std::vector<ModuleCall> find_recompute(
    const std::map<int64_t, std::vector<RangeNode>>& by_thread,
    const std::map<int64_t, std::vector<std::size_t>>& roots_by_thread,
    const std::map<std::string, int64_t>& traced_of_name, int64_t step_tid) {
  std::vector<ModuleCall> recomputes;
  for (const auto& [tid, roots] : roots_by_thread) {
    if (tid == step_tid) continue;
    const std::vector<RangeNode>& nodes = by_thread.at(tid);
    std::vector<std::size_t> todo(roots.rbegin(), roots.rend());
    while (!todo.empty()) {
      const std::size_t i = todo.back();
      todo.pop_back();
      const auto it = traced_of_name.find(nodes[i].name);
      if (it == traced_of_name.end()) {
        todo.insert(todo.end(), nodes[i].children.rbegin(), nodes[i].children.rend());
        continue;
      }
      recomputes.push_back({it->second, 0, nodes[i].begin, nodes[i].end, tid});
    }
  }
  return recomputes;
}

// Module order from the nn.Module ranges on the step's thread; ranges on other threads
// are recomputes.
class NnModuleRanges : public ModuleSource {
 public:
  ModuleOrder find_order(const std::vector<KinetoEvent>& events, const KinetoStep& step,
                         int64_t depth) const override {
    ModuleOrder order;
    std::map<int64_t, std::vector<RangeNode>> by_thread = module_ranges(events, step);
    if (by_thread.empty()) {
      order.warnings.push_back(
          "no module ranges (nn.Module ranges need the profiler's with_stack=True; FSDP2 "
          "writes FSDP:: ranges): the module order is unknown, GPU time is split by phase only");
      order.source = "none";
      return order;
    }
    order.source = "nn.Module ranges (with_stack)";
    std::map<int64_t, std::vector<std::size_t>> roots;
    for (auto& [tid, nodes] : by_thread) roots[tid] = nest(nodes);
    ModuleNames names;
    std::map<std::string, int64_t> traced_of_name;  // any module range name -> traced module
    if (const auto main = by_thread.find(step.tid); main != by_thread.end()) {
      const std::vector<RangeNode>& nodes = main->second;
      for (std::size_t i : traced_level(nodes, roots[step.tid], depth)) {
        const int64_t m = names.id_of(nodes[i].name);
        order.forward_calls.push_back({m, 0, nodes[i].begin, nodes[i].end, step.tid});
        mark_subtree(nodes, i, m, traced_of_name);
      }
    }
    order.recompute_calls = find_recompute(by_thread, roots, traced_of_name, step.tid);
    order.modules = std::move(names.names);
    return order;
  }
};

}  // namespace

int64_t ModuleNames::id_of(const std::string& name) {
  const auto [it, inserted] = ids.try_emplace(name, static_cast<int64_t>(names.size()));
  if (inserted) names.push_back(name);
  return it->second;
}

std::map<int64_t, std::vector<RangeNode>> module_ranges(const std::vector<KinetoEvent>& events,
                                                        const KinetoStep& step) {
  constexpr std::string_view kPrefix = "nn.Module: ";
  std::map<int64_t, std::vector<RangeNode>> by_thread;
  for (const KinetoEvent& e : events) {
    if (e.ph == 'X' && e.cat == "python_function" && step.contains(e.ts))
      by_thread[e.tid].push_back({std::string(e.name.substr(kPrefix.size())), e.ts, end_of(e), {}});
  }
  return by_thread;
}

std::vector<std::size_t> nest(std::vector<RangeNode>& nodes) {
  std::sort(nodes.begin(), nodes.end(), [](const RangeNode& a, const RangeNode& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end > b.end;
  });
  std::vector<std::size_t> roots, stack;
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    while (!stack.empty() && nodes[stack.back()].end < nodes[i].end) stack.pop_back();
    (stack.empty() ? roots : nodes[stack.back()].children).push_back(i);
    stack.push_back(i);
  }
  return roots;
}

std::unique_ptr<ModuleSource> make_nn_module_source() {
  return std::make_unique<NnModuleRanges>();
}

std::unique_ptr<ModuleSource> choose_module_source(const std::vector<KinetoEvent>& events,
                                                   const KinetoStep& step) {
  return has_fsdp2_units(events, step) ? make_fsdp2_source() : make_nn_module_source();
}

}  // namespace shardplan::kineto
