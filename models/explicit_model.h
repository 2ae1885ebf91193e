#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "models/json_reader.h"
#include "models/model_spec.h"

namespace shardplan {

// Reads the "explicit" family: a module tree written out in JSON (docs/formats.md). Child
// names are local ("q_proj"); the tree gets fully-qualified names. A Linear leaf with a
// [out, in] weight and no "cost" gets 2·in·out FLOPs per token and saves its input;
// an Embedding leaf saves its int64 ids.
ModelSpec parse_explicit_model(const JsonReader& reader);

// Writes any ModelSpec in the explicit form, so it reads back to the same tree.
nlohmann::json model_to_explicit_json(const ModelSpec& spec);

}  // namespace shardplan
