#include "planner/internal/fsdp_units.h"

#include <fmt/format.h>

#include "models/error.h"
#include "models/module_pattern.h"

namespace shardplan {

std::vector<FsdpUnit> find_fsdp_units(const ModelSpec& model,
                                      const std::vector<std::string>& patterns,
                                      const std::string& label) {
  const std::vector<std::string>& used = patterns.empty() ? model.default_unit_modules : patterns;
  for (std::size_t i = 0; i < used.size(); ++i) {
    if (match_modules(model.root, {used[i]}).empty()) {
      throw InputError(label, fmt::format("/unit_modules/{}", i),
                       fmt::format("pattern '{}' matches no module of {}", used[i], model.name));
    }
  }
  const std::vector<const Module*> wrapped = match_modules(model.root, used);
  std::vector<FsdpUnit> units;
  units.push_back(FsdpUnit{.name = "",
                           .module = nullptr,
                           .parameters = parameter_count(model.root),
                           .trainable_parameters = trainable_parameter_count(model.root)});
  for (const Module* m : wrapped) {
    FsdpUnit unit{.name = m->name,
                  .module = m,
                  .parameters = parameter_count(*m),
                  .trainable_parameters = trainable_parameter_count(*m)};
    units.front().parameters -= unit.parameters;
    units.front().trainable_parameters -= unit.trainable_parameters;
    units.push_back(std::move(unit));
  }
  return units;
}

}  // namespace shardplan
