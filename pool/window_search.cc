// Large-neighbourhood search after best fit: the exact search (pool/exact.h) places again
// the buffers of a time window while every buffer that crosses its edges keeps its offset.
//
//   offset ▲ H ─ ─ ─ ─ ┌─v─┐─ ─ ─ ─ ─   v reaches the height H. Window W around v's
//          │ ══════╪═══╧═══╧═══╪════   lifetime: the buffers inside it (and the highest
//          │  ┌──┐ │ ┌─┐ ┌──┐  │       ones over v's lifetime) are taken out; the
//          │ ══════╪══ ═══════ ╪════   buffers crossing its edges (═) stay where they
//          │       │   hole    │       are and the search places the others around
//          │ ══════╪═══════════╪════   them, holes included, under H.
//          └───────W───────────W───▶ time
//
// Greedy recreation (repair.cc) finds what one pass of best fit in one order finds; the
// search tries every arrangement of the window's buffers in the holes the fixed ones
// leave, which is what is left to gain on traces where many times are near the peak.
#include <algorithm>

#include "pool/exact.h"
#include "pool/placement.h"

namespace shardplan::pool {
namespace {

using Ranges = Instance::Ranges;

// Sorts and merges [from, to) ranges in place.
void merge(Ranges& ranges) {
  std::sort(ranges.begin(), ranges.end());
  std::size_t kept = 0;
  for (const auto& range : ranges) {
    if (kept > 0 && range.first <= ranges[kept - 1].second) {
      ranges[kept - 1].second = std::max(ranges[kept - 1].second, range.second);
    } else {
      ranges[kept++] = range;
    }
  }
  ranges.resize(kept);
}

// The lowest height the buffers live in a section can reach: the least h whose free bytes
// below it (outside the fixed ranges) hold `bytes`.
int64_t lowest_height(const Ranges& fixed, int64_t bytes) {
  int64_t h = bytes;
  for (const auto& [from, to] : fixed) {
    if (from >= h) break;
    h += to - from;
  }
  return h;
}

}  // namespace

PoolAssignment window_search(const std::vector<PoolRequest>& requests, PoolAssignment start,
                             int64_t lower_bound, int64_t default_alignment,
                             Clock::time_point deadline, int64_t iterations, uint64_t seed) {
  PoolAssignment best = std::move(start);
  std::vector<int64_t>& offset = best.offsets;
  const auto top = [&](std::size_t i) { return offset[i] + requests[i].bytes; };
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
  std::vector<std::size_t> at_height;
  int64_t count_at_height = 0;
  auto collect_at_height = [&] {
    height = floor_height;
    for (std::size_t i = 0; i < requests.size(); ++i) height = std::max(height, top(i));
    at_height.clear();
    for (std::size_t i = 0; i < requests.size(); ++i) {
      if (occupies(requests[i]) && top(i) == height) at_height.push_back(i);
    }
    count_at_height = static_cast<int64_t>(at_height.size());
  };
  collect_at_height();
  SplitMix64 rng{seed};
  std::vector<std::size_t> neighbours, layer;
  std::vector<char> in_layer(requests.size(), 0);
  std::vector<PoolRequest> sub;
  for (int64_t round = 0; height > target && count_at_height > 0; ++round) {
    if (iterations > 0 ? round >= iterations : false) break;
    if (Clock::now() > deadline) break;
    const std::size_t draw = rng.below(at_height.size());
    const std::size_t victim = at_height[draw];
    if (top(victim) != height) {  // stale: it moved down
      at_height[draw] = at_height.back();
      at_height.pop_back();
      continue;
    }
    const PoolRequest& v = requests[victim];
    // The window: the victim's lifetime widened on each side by up to 4 times its length
    // (times may reach 2^62: the widening stays below that, the window inside int64).
    const auto span = static_cast<uint64_t>(std::min(v.end - v.begin, int64_t{1} << 59));
    const int64_t w_begin =
        std::max(INT64_MIN / 2, v.begin - static_cast<int64_t>(rng.below(4 * span + 1)));
    const int64_t w_end =
        std::min(INT64_MAX / 2, v.end + static_cast<int64_t>(rng.below(4 * span + 1)));
    const auto highest_first = [&](std::size_t a, std::size_t b) {
      return top(a) != top(b) ? top(a) > top(b) : a < b;
    };
    // The buffers inside the window, at most the 8 to 128 highest of them.
    index.overlapping(w_begin, w_end, neighbours);
    layer.clear();
    for (std::size_t j : neighbours) {
      if (requests[j].begin >= w_begin && requests[j].end <= w_end) layer.push_back(j);
    }
    const std::size_t inside = std::min(layer.size(), std::size_t{8} << rng.below(5));
    std::partial_sort(layer.begin(), layer.begin() + static_cast<std::ptrdiff_t>(inside),
                      layer.end(), highest_first);
    layer.resize(inside);
    // And the 2 to 32 highest over the victim's lifetime, whatever their lifetimes.
    index.overlapping(v.begin, v.end, neighbours);
    // (Not those living more than 4 times as long as the window: each spans thousands of
    // sections, which makes every search node slow, and is pinned by the buffers above
    // it outside the window anyway.)
    std::erase_if(neighbours, [&](std::size_t j) {
      return (requests[j].end - requests[j].begin) / 4 > w_end - w_begin;
    });
    const std::size_t wanted = std::min(neighbours.size(), std::size_t{2} << rng.below(5));
    std::partial_sort(neighbours.begin(), neighbours.begin() + static_cast<std::ptrdiff_t>(wanted),
                      neighbours.end(), highest_first);
    layer.insert(layer.end(), neighbours.begin(),
                 neighbours.begin() + static_cast<std::ptrdiff_t>(wanted));
    std::sort(layer.begin(), layer.end());
    layer.erase(std::unique(layer.begin(), layer.end()), layer.end());
    for (std::size_t j : layer) in_layer[j] = 1;
    // The window's buffers as an instance of their own, with the offsets the others take
    // in each of its time sections and the free ranges each of them fits in.
    sub.clear();
    for (std::size_t i : layer) {
      sub.push_back(requests[i]);
      sub.back().alignment = alignment_of(requests[i], default_alignment);
    }
    Instance in = prepare(sub, default_alignment);
    const std::vector<int64_t> times = distinct_times(sub);
    const std::size_t sections = in.in_section.size();
    index.overlapping(times.front(), times.back(), neighbours);
    std::erase_if(neighbours, [&](std::size_t j) { return in_layer[j] != 0; });
    std::sort(neighbours.begin(), neighbours.end(),
              [&](std::size_t a, std::size_t b) { return offset[a] < offset[b]; });
    in.section_blocked.assign(sections, {});
    for (std::size_t j : neighbours) {
      // The sections [lo, hi) that j overlaps; by offset, so each list comes out sorted.
      const auto lo = static_cast<std::size_t>(
          std::upper_bound(times.begin(), times.end(), requests[j].begin) - times.begin());
      const auto hi = static_cast<std::size_t>(
          std::lower_bound(times.begin(), times.end(), requests[j].end) - times.begin());
      for (std::size_t s = lo == 0 ? 0 : lo - 1; s < std::min(hi, sections); ++s) {
        Ranges& ranges = in.section_blocked[s];
        if (!ranges.empty() && offset[j] <= ranges.back().second) {
          ranges.back().second = std::max(ranges.back().second, top(j));
        } else {
          ranges.emplace_back(offset[j], top(j));
        }
      }
    }
    in.section_blocked_before.assign(sections, {});
    int64_t layer_bound = 0;
    for (std::size_t s = 0; s < sections; ++s) {
      std::vector<int64_t>& before = in.section_blocked_before[s];
      before.assign(1, 0);
      for (const auto& [from, to] : in.section_blocked[s])
        before.push_back(before.back() + to - from);
      int64_t bytes = 0;
      for (int32_t b : in.in_section[s]) bytes += in.size[static_cast<std::size_t>(b)];
      if (bytes > 0)
        layer_bound = std::max(layer_bound, lowest_height(in.section_blocked[s], bytes));
    }
    in.fits.assign(layer.size(), {});
    Ranges blocked;
    for (std::size_t k = 0; k < layer.size(); ++k) {
      blocked.clear();
      for (int64_t s = in.section_lo[k]; s < in.section_hi[k]; ++s) {
        const Ranges& more = in.section_blocked[static_cast<std::size_t>(s)];
        blocked.insert(blocked.end(), more.begin(), more.end());
      }
      merge(blocked);
      int64_t free_from = 0;
      for (const auto& [from, to] : blocked) {
        if (from - free_from >= in.size[k]) in.fits[k].emplace_back(free_from, from);
        free_from = to;
      }
      in.fits[k].emplace_back(free_from, INT64_MAX);
    }
    for (std::size_t j : layer) in_layer[j] = 0;
    std::vector<int64_t> placed;
    if (layer_bound < height) {
      const int64_t node_limit = 64 * static_cast<int64_t>(layer.size());
      const std::size_t rotation = rng.below(kHeuristics.size());
      // As low as the fixed buffers allow first (room for the next victims), else just
      // under the height.
      const int64_t low = std::max(layer_bound, target);
      placed = place_around_fixed(in, low, node_limit, rotation, deadline);
      if (placed.empty() && low < height - 1)
        placed = place_around_fixed(in, height - 1, node_limit, rotation, deadline);
    }
    if (placed.empty()) continue;
    for (std::size_t k = 0; k < layer.size(); ++k) {
      const std::size_t i = layer[k];
      count_at_height -= top(i) == height;
      index.remove(i);
      offset[i] = placed[k];
      index.place(i);
    }
    if (count_at_height == 0) collect_at_height();
  }
  best.size_bytes = height;
  best.proven_optimal = height == lower_bound;
  return best;
}

}  // namespace shardplan::pool
