#include "planner/internal/param_groups.h"

#include <unordered_set>
#include <utility>

#include "models/integer_math.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

struct NamedParameter {
  std::string name;
  const Parameter* parameter;
  bool expert;  // a routed expert's
};

void collect(const Module& m, const std::unordered_set<const Module*>& skip, bool expert,
             std::vector<NamedParameter>& out) {
  if (skip.contains(&m)) return;
  expert = expert || m.type == "Expert";
  for (const Parameter& p : m.parameters) {
    out.push_back({m.name.empty() ? p.name : m.name + "." + p.name, &p, expert});
  }
  for (const Module& child : m.children) collect(child, skip, expert, out);
}

}  // namespace

std::vector<ParamGroup> build_param_groups(const ModelSpec& model,
                                           const std::vector<FsdpUnit>& fsdp_units,
                                           const FsdpConfig& config, std::vector<PlanUnit>& units) {
  std::unordered_set<const Module*> other_units;
  for (std::size_t u = 1; u < fsdp_units.size(); ++u) other_units.insert(fsdp_units[u].module);

  const ShardingTraits traits = sharding_traits(config);
  // Routed experts on an expert mesh are grouped apart: they shard over other ranks.
  const bool expert_groups = expert_mesh(config);
  const int64_t element_bytes = dtype_bytes(config.param_dtype);
  std::vector<ParamGroup> groups;
  units.clear();
  for (std::size_t u = 0; u < fsdp_units.size(); ++u) {
    const FsdpUnit& fu = fsdp_units[u];
    PlanUnit unit{.id = static_cast<int64_t>(u), .name = fu.name, .parameters = fu.parameters};
    std::vector<NamedParameter> params;
    if (fu.module == nullptr) {
      collect(model.root, other_units, false, params);
    } else {
      collect(*fu.module, {}, false, params);
    }
    for (const auto& [expert, requires_grad] : {std::pair{false, true}, std::pair{false, false},
                                                std::pair{true, true}, std::pair{true, false}}) {
      ParamGroup* open = nullptr;
      for (const NamedParameter& np : params) {
        if (np.parameter->requires_grad != requires_grad) continue;
        if ((np.expert && expert_groups) != expert) continue;
        const int64_t n = np.parameter->numel();
        const bool full = open != nullptr && config.bucket_bytes &&
                          (open->elements + n) * element_bytes > *config.bucket_bytes;
        if (open == nullptr || full) {
          groups.push_back(ParamGroup{.id = static_cast<int64_t>(groups.size()),
                                      .unit = unit.id,
                                      .dtype = config.param_dtype,
                                      .requires_grad = requires_grad,
                                      .expert = expert});
          unit.groups.push_back(groups.back().id);
          open = &groups.back();
        }
        open->elements += n;
        open->parameters.push_back(np.name);
      }
    }
    units.push_back(std::move(unit));
  }
  // Padding to the optimizer's ranks makes every shard of every level whole.
  for (ParamGroup& g : groups) {
    g.padded_elements = round_up(g.elements, kShardAlignElements * optimizer_ranks_of(traits, g));
    g.shard_elements = g.padded_elements / param_ranks_of(traits, g);
  }
  return groups;
}

}  // namespace shardplan
