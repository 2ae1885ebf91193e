#include <fmt/format.h>

#include <algorithm>
#include <iterator>
#include <map>

#include "models/name_table.h"
#include "pool/pool.h"

namespace shardplan {

std::string_view packing_error_name(PackingError error) {
  static constexpr NameTable<PackingError, 4> kNames = {
      {{PackingError::wrong_count, "wrong_count"},
       {PackingError::misaligned, "misaligned"},
       {PackingError::outside_pool, "outside_pool"},
       {PackingError::overlap, "overlap"}}};
  return name_of(kNames, error);
}

std::optional<std::pair<std::size_t, std::size_t>> find_overlap(
    const std::vector<PoolRequest>& requests, const std::vector<int64_t>& offsets) {
  std::vector<std::size_t> order;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].bytes > 0 && requests[i].begin < requests[i].end) order.push_back(i);
  }
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    return requests[a].begin != requests[b].begin ? requests[a].begin < requests[b].begin : a < b;
  });
  // Sweep over time keeping the live buffers by offset: when the placement is valid the
  // live buffers are disjoint, so a newcomer meets at most its neighbours.
  std::multimap<int64_t, std::size_t> live_by_offset;
  std::multimap<int64_t, std::size_t> live_by_end;
  auto overlaps = [&](std::size_t a, std::size_t b) {
    return offsets[a] < offsets[b] + requests[b].bytes &&
           offsets[b] < offsets[a] + requests[a].bytes;
  };
  for (std::size_t i : order) {
    while (!live_by_end.empty() && live_by_end.begin()->first <= requests[i].begin) {
      const std::size_t done = live_by_end.begin()->second;
      live_by_end.erase(live_by_end.begin());
      for (auto [it, last] = live_by_offset.equal_range(offsets[done]); it != last; ++it) {
        if (it->second == done) {
          live_by_offset.erase(it);
          break;
        }
      }
    }
    auto next = live_by_offset.lower_bound(offsets[i]);
    for (auto it = next; it != live_by_offset.end() && it->first < offsets[i] + requests[i].bytes;
         ++it) {
      if (overlaps(it->second, i)) return std::pair{it->second, i};
    }
    if (next != live_by_offset.begin() && overlaps(std::prev(next)->second, i)) {
      return std::pair{std::prev(next)->second, i};
    }
    live_by_offset.emplace(offsets[i], i);
    live_by_end.emplace(requests[i].end, i);
  }
  return std::nullopt;
}

std::optional<PackingProblem> check_packing(const std::vector<PoolRequest>& requests,
                                            const std::vector<int64_t>& offsets, int64_t size_bytes,
                                            int64_t default_alignment) {
  if (offsets.size() != requests.size()) {
    return PackingProblem{PackingError::wrong_count, fmt::format("{} offsets for {} buffers",
                                                                 offsets.size(), requests.size())};
  }
  for (std::size_t i = 0; i < requests.size(); ++i) {
    const PoolRequest& r = requests[i];
    const int64_t alignment = r.alignment > 0 ? r.alignment : default_alignment;
    if (offsets[i] < 0 || (alignment > 0 && offsets[i] % alignment != 0)) {
      return PackingProblem{
          PackingError::misaligned,
          fmt::format("buffer {} at offset {} is not aligned to {}", i, offsets[i], alignment)};
    }
    if (offsets[i] + r.bytes > size_bytes) {
      return PackingProblem{PackingError::outside_pool,
                            fmt::format("buffer {} ends at {}, past the pool of {}", i,
                                        offsets[i] + r.bytes, size_bytes)};
    }
  }
  if (auto pair = find_overlap(requests, offsets)) {
    const auto [a, b] = *pair;
    return PackingProblem{PackingError::overlap,
                          fmt::format("buffers {} [{}, {}) and {} [{}, {}) share bytes while both "
                                      "are live (times [{}, {}) and "
                                      "[{}, {}))",
                                      a, offsets[a], offsets[a] + requests[a].bytes, b, offsets[b],
                                      offsets[b] + requests[b].bytes, requests[a].begin,
                                      requests[a].end, requests[b].begin, requests[b].end)};
  }
  return std::nullopt;
}

}  // namespace shardplan
