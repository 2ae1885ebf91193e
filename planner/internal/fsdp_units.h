#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/model_spec.h"

namespace shardplan {

// A module wrapped by fully_shard, or the root unit that holds every parameter outside
// the others (embedding, final norm, output head).
struct FsdpUnit {
  std::string name;                // the wrapped module's name; "" for the root unit
  const Module* module = nullptr;  // nullptr for the root unit
  int64_t parameters = 0;
  int64_t trainable_parameters = 0;  // with requires_grad: gradients and optimizer state
};

// Units in forward order, the root unit first (its all-gather opens the forward). Each
// pattern must match at least one module (InputError naming `label` and the pattern
// otherwise); an empty list means the model's default_unit_modules.
std::vector<FsdpUnit> find_fsdp_units(const ModelSpec& model,
                                      const std::vector<std::string>& patterns,
                                      const std::string& label);

}  // namespace shardplan
