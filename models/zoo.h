#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "models/model_spec.h"

namespace shardplan {

// The model used when a command is given none.
inline constexpr const char* kDefaultModel = "llama3-8b";

// Names of the built-in models (models/zoo/*.json), sorted.
std::vector<std::string> model_zoo_names();

// Builds a model from its JSON form; "family" picks transformer, moe or explicit.
// `label` names the file in errors.
ModelSpec model_from_json(const nlohmann::json& json, const std::string& label);

// A zoo name ("llama3-70b") or a path to a model JSON file. An unknown name lists the
// zoo and suggests the nearest.
ModelSpec load_model(const std::string& name_or_file);

}  // namespace shardplan
