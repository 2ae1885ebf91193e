#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "planner/plan.h"

namespace shardplan {

// plan.json (docs/formats.md#plan): the contract between planning and execution.
nlohmann::json plan_to_json(const Plan& plan);

// Reads a plan; every field is checked and errors name `label` and the JSON path. A
// plan of another schema version is refused. Does not validate the plan's consistency:
// call validate_plan for that.
Plan plan_from_json(const nlohmann::json& json, const std::string& label);

// Reads plan.json from `path` and validates it (validate_plan): an unreadable, malformed
// or inconsistent plan is an InputError naming the file.
Plan read_plan_file(const std::string& path);

}  // namespace shardplan
