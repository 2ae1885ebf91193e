#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "models/model_spec.h"

namespace shardplan {

// Matches a fully-qualified module name against a pattern: '*' matches within one
// dot-separated segment ("layers.*" matches "layers.3" but not "layers.3.mlp"), '**'
// matches across segments, anything else matches itself.
bool module_name_matches(std::string_view pattern, std::string_view name);

// The outermost modules matching any pattern, in forward order. A module nested inside
// a match is part of that match, not a separate one.
std::vector<const Module*> match_modules(const Module& root,
                                         const std::vector<std::string>& patterns);

}  // namespace shardplan
