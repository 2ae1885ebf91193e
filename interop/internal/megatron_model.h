#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "interop/internal/arg_reader.h"

namespace shardplan {

// The model file (family transformer or moe) Megatron's arguments build; `tp` is the
// tensor-parallel size the vocabulary is padded for. `bridge`: the defaults of Megatron-Core's
// dataclasses (a Bridge config) where they differ from the command line's.
nlohmann::json megatron_model_json(ArgReader& r, const std::string& name, int64_t tp, bool bridge);

}  // namespace shardplan
