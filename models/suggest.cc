#include "models/suggest.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <vector>

#include "models/error.h"

namespace shardplan {

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      const std::size_t substitute = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({above + 1, row[j - 1] + 1, substitute});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::optional<std::string> closest_name(std::string_view name,
                                        std::span<const std::string> candidates) {
  // No flag, field, key or name is this long, and no typo of one is either; the edit
  // distance costs name × candidate, so a key of megabytes took seconds per candidate.
  constexpr std::size_t kLongestName = 100;
  if (name.size() > kLongestName) return std::nullopt;
  std::optional<std::string> best;
  std::size_t best_distance = 0;
  for (const std::string& candidate : candidates) {
    const std::size_t distance = edit_distance(name, candidate);
    if (!best || distance < best_distance) {
      best = candidate;
      best_distance = distance;
    }
  }
  if (!best) return std::nullopt;
  const std::size_t longer = std::max(name.size(), best->size());
  const std::size_t allowed = std::max<std::size_t>(1, longer / 3);
  if (best_distance > allowed) return std::nullopt;
  return best;
}

std::string unknown_name_message(std::string_view what, std::string_view name,
                                 std::span<const std::string> candidates) {
  std::string message = fmt::format("unknown {} {}", what, quote_input(name));
  if (auto nearest = closest_name(name, candidates)) {
    message += fmt::format("; did you mean '{}'?", *nearest);
  }
  message += fmt::format(" (valid: {})", fmt::join(candidates, ", "));
  return message;
}

}  // namespace shardplan
