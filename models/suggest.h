#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace shardplan {

// Edit distance (insertions, deletions, substitutions) between two names.
std::size_t edit_distance(std::string_view a, std::string_view b);

// The candidate nearest to `name`, if one is close enough to be a plausible typo
// (distance at most a third of the longer name, and at least 1 allowed); none for a name
// over 100 bytes, which no name is and no typo of one either.
std::optional<std::string> closest_name(std::string_view name,
                                        std::span<const std::string> candidates);

// "unknown X 'name'; did you mean 'y'? valid: a, b, c" — the message every lookup uses.
std::string unknown_name_message(std::string_view what, std::string_view name,
                                 std::span<const std::string> candidates);

}  // namespace shardplan
