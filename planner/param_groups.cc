#include "planner/internal/param_groups.h"

#include <unordered_set>

#include "models/integer_math.h"
#include "planner/sharding.h"

namespace shardplan {
namespace {

struct NamedParameter {
  std::string name;
  const Parameter* parameter;
};

void collect(const Module& m, const std::unordered_set<const Module*>& skip,
             std::vector<NamedParameter>& out) {
  if (skip.contains(&m)) return;
  for (const Parameter& p : m.parameters) {
    out.push_back({m.name.empty() ? p.name : m.name + "." + p.name, &p});
  }
  for (const Module& child : m.children) collect(child, skip, out);
}

}  // namespace

std::vector<ParamGroup> build_param_groups(const ModelSpec& model,
                                           const std::vector<FsdpUnit>& fsdp_units,
                                           const FsdpConfig& config, std::vector<PlanUnit>& units) {
  std::unordered_set<const Module*> other_units;
  for (std::size_t u = 1; u < fsdp_units.size(); ++u) other_units.insert(fsdp_units[u].module);

  const ShardingTraits traits = sharding_traits(config);
  // Padding to the optimizer's ranks makes every shard of every level whole.
  const int64_t sharding_ranks = traits.optimizer_ranks;
  const int64_t element_bytes = dtype_bytes(config.param_dtype);
  std::vector<ParamGroup> groups;
  units.clear();
  for (std::size_t u = 0; u < fsdp_units.size(); ++u) {
    const FsdpUnit& fu = fsdp_units[u];
    PlanUnit unit{.id = static_cast<int64_t>(u), .name = fu.name, .parameters = fu.parameters};
    std::vector<NamedParameter> params;
    if (fu.module == nullptr) {
      collect(model.root, other_units, params);
    } else {
      collect(*fu.module, {}, params);
    }
    for (bool requires_grad : {true, false}) {
      ParamGroup* open = nullptr;
      for (const NamedParameter& np : params) {
        if (np.parameter->requires_grad != requires_grad) continue;
        const int64_t n = np.parameter->numel();
        const bool full = open != nullptr && config.bucket_bytes &&
                          (open->elements + n) * element_bytes > *config.bucket_bytes;
        if (open == nullptr || full) {
          groups.push_back(ParamGroup{.id = static_cast<int64_t>(groups.size()),
                                      .unit = unit.id,
                                      .dtype = config.param_dtype,
                                      .requires_grad = requires_grad});
          unit.groups.push_back(groups.back().id);
          open = &groups.back();
        }
        open->elements += n;
        open->parameters.push_back(np.name);
      }
    }
    units.push_back(std::move(unit));
  }
  for (ParamGroup& g : groups) {
    g.padded_elements = round_up(g.elements, kShardAlignElements * sharding_ranks);
    g.shard_elements = g.padded_elements / traits.param_ranks;
  }
  return groups;
}

}  // namespace shardplan
