// Local improvement after best fit: ruin and recreate (Schrimpf, Schneider, Stamm-Wilbrandt
// & Dueck, J. Comp. Physics 2000) on the buffers that set the pool's height.
//
//   offset ▲ H ─ ─ ─ ┌──v──┐─ ─ ─ ─   v reaches the height H; the 4 to 128 highest
//          │  ┌──────┴┐  ┌┴───┐      buffers over v's lifetime (down to L) are taken
//          │L ┼ ─ ─ ─ ┼ ─┼─ ─ ┼ ─    out and placed again under H in another order.
//          │  └───────┘  └────┘      Kept when fewer buffers reach H.
//          └──────────────────────▶ time
#include <algorithm>
#include <numeric>

#include "pool/placement.h"

namespace shardplan::pool {

PoolAssignment repair(const std::vector<PoolRequest>& requests, PoolAssignment start,
                      int64_t lower_bound, int64_t default_alignment, Clock::time_point deadline,
                      int64_t iterations, uint64_t seed) {
  PoolAssignment best = std::move(start);
  std::vector<int64_t>& offset = best.offsets;
  const auto top = [&](std::size_t i) { return offset[i] + requests[i].bytes; };
  // Requests that take no space set the height alone; they never move.
  int64_t floor_height = 0;
  PlacedIndex index(requests);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    if (occupies(requests[i])) {
      index.place(i);
    } else {
      floor_height = std::max(floor_height, top(i));
    }
  }
  const int64_t target = std::max(lower_bound, floor_height);
  int64_t height = 0;
  // The buffers reaching the height; entries go stale when they move down and are
  // dropped when drawn.
  std::vector<std::size_t> at_height;
  std::vector<char> listed(requests.size(), 0);
  int64_t count_at_height = 0;
  auto collect_at_height = [&] {
    height = floor_height;
    for (std::size_t i = 0; i < requests.size(); ++i) height = std::max(height, top(i));
    at_height.clear();
    std::fill(listed.begin(), listed.end(), 0);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (occupies(requests[i]) && top(i) == height) {
        at_height.push_back(i);
        listed[i] = 1;
      }
    }
    count_at_height = static_cast<int64_t>(at_height.size());
  };
  collect_at_height();
  SplitMix64 rng{seed};
  std::vector<std::size_t> ruined, neighbours;
  std::vector<int64_t> saved;
  std::vector<std::pair<int64_t, int64_t>> taken;
  for (int64_t round = 0; height > target && count_at_height > 0; ++round) {
    if (iterations > 0 ? round >= iterations : false) break;
    // A round costs up to tens of milliseconds where thousands of buffers are live at once
    // (128 placements among them); the clock costs nanoseconds.
    if (Clock::now() > deadline) break;
    const std::size_t draw = rng.below(at_height.size());
    const std::size_t victim = at_height[draw];
    if (top(victim) != height) {  // stale
      listed[victim] = 0;
      at_height[draw] = at_height.back();
      at_height.pop_back();
      continue;
    }
    const PoolRequest& v = requests[victim];
    // The band: the 4 to 128 highest buffers over the victim's lifetime, down to the
    // lowest top among them.
    index.overlapping(v.begin, v.end, neighbours);
    const std::size_t wanted = std::min(neighbours.size(), std::size_t{4} << rng.below(6));
    std::partial_sort(neighbours.begin(), neighbours.begin() + static_cast<std::ptrdiff_t>(wanted),
                      neighbours.end(), [&](std::size_t a, std::size_t b) {
                        return top(a) != top(b) ? top(a) > top(b) : a < b;
                      });
    ruined.assign(neighbours.begin(), neighbours.begin() + static_cast<std::ptrdiff_t>(wanted));
    const int64_t band_low = wanted == 0 ? 0 : offset[ruined.back()];
    // The order: by size, by lifetime, or shuffled; each placed by best or lowest fit.
    switch (rng.below(3)) {
      case 0:
        std::sort(ruined.begin(), ruined.end(), [&](std::size_t a, std::size_t b) {
          return requests[a].bytes != requests[b].bytes ? requests[a].bytes > requests[b].bytes
                                                        : a < b;
        });
        break;
      case 1:
        std::sort(ruined.begin(), ruined.end(), [&](std::size_t a, std::size_t b) {
          const int64_t la = requests[a].end - requests[a].begin;
          const int64_t lb = requests[b].end - requests[b].begin;
          return la != lb ? la > lb : a < b;
        });
        break;
      default:
        for (std::size_t k = ruined.size(); k > 1; --k)
          std::swap(ruined[k - 1], ruined[rng.below(k)]);
    }
    int64_t before_at_height = 0, before_tops = 0;
    saved.clear();
    for (std::size_t j : ruined) {
      before_at_height += top(j) == height;
      before_tops += top(j) - band_low;
      saved.push_back(offset[j]);
      index.remove(j);
    }
    const bool lowest = rng.below(2) == 0;
    std::size_t placed = 0;
    int64_t after_at_height = 0, after_tops = 0;
    for (std::size_t j : ruined) {
      const PoolRequest& r = requests[j];
      index.overlapping(r.begin, r.end, neighbours);
      taken.clear();
      for (std::size_t n : neighbours) taken.emplace_back(offset[n], top(n));
      std::sort(taken.begin(), taken.end());
      const int64_t at =
          fit_offset(taken, r.bytes, alignment_of(r, default_alignment), height, lowest);
      if (at < 0) break;
      offset[j] = at;
      index.place(j);
      ++placed;
      after_at_height += top(j) == height;
      after_tops += std::max<int64_t>(0, top(j) - band_low);
    }
    const bool better = placed == ruined.size() &&
                        (after_at_height < before_at_height ||
                         (after_at_height == before_at_height && after_tops <= before_tops));
    if (!better) {
      for (std::size_t k = 0; k < placed; ++k) index.remove(ruined[k]);
      for (std::size_t k = 0; k < ruined.size(); ++k) {
        offset[ruined[k]] = saved[k];
        index.place(ruined[k]);
      }
      continue;
    }
    count_at_height += after_at_height - before_at_height;
    for (std::size_t j : ruined) {
      if (top(j) == height && !listed[j]) {
        listed[j] = 1;
        at_height.push_back(j);
      }
    }
    if (count_at_height == 0) collect_at_height();
  }
  best.size_bytes = height;
  best.proven_optimal = height == lower_bound;
  return best;
}

}  // namespace shardplan::pool
