#pragma once

// The exact search's instance (pool/exact_sections.cc) and the search over it
// (pool/exact_search.cc); internal to the pool library.
// Exact offset assignment by branch and bound, in the spirit of MiniMalloc (Moffitt,
// ASPLOS 2023; the ideas, not the code). Time is cut into sections at every start and
// end; each buffer spans a run of sections.
//
//   offset ▲        ┌────┐
//          │  ┌─────┤ b3 │     floor[s] = top of the buffers placed in section s
//          │  │ b2  └────┘     total[s] = bytes of the unplaced buffers in s
//          │ ┌┴──────┐         prune when max(floor, offset) + total > capacity
//          │ │  b1   │
//          └─┴───────┴────▶ time (sections)
//
// A canonical solution places buffers in non-decreasing (offset, order) and each at its
// lowest possible offset (the top of the placed buffers it overlaps in time), so the
// search branches only over which buffer comes next. Dominance: a buffer is never placed
// at or above the lowest top an unplaced buffer could reach, which would leave a gap
// that buffer fits into.
//
// Around fixed buffers (the window search's: Instance::fits) the same holds with "lowest
// possible offset" the lowest at or above that top where the buffer fits between them:
// pushed down, a buffer stops on a placed buffer or on a fixed one, and had it a lower
// place between the fixed ones above the placed ones, it could move there. The pruning
// counts what the fixed buffers take between a section's floor and the capacity.
#include <array>
#include <chrono>
#include <cstdint>
#include <utility>
#include <vector>

#include "pool/pool.h"

namespace shardplan::pool {

struct Instance {
  std::vector<int64_t> size, alignment, length;  // length: end − begin, in time
  std::vector<int64_t> section_lo, section_hi;   // sections [lo, hi) of each buffer
  std::vector<std::vector<int32_t>> overlaps;    // buffers live at a common time
  std::vector<std::vector<int32_t>> in_section;
  std::vector<std::vector<int32_t>> partitions;  // buffers of each independent time range
  std::vector<std::pair<int32_t, int32_t>> partition_sections;
  // Buffers that keep their offsets, which the search places around (window_search.cc);
  // all empty for a whole instance. Per buffer, the [from, to) offset ranges free of them
  // all its lifetime that are large enough for it (the last one open: to = INT64_MAX);
  // per section the ranges they take in it, sorted and merged, and the bytes of the
  // ranges before each (one more entry than ranges).
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  std::vector<Ranges> fits;
  std::vector<Ranges> section_blocked;
  std::vector<std::vector<int64_t>> section_blocked_before;
};

// Pairs of buffers live at once plus (buffer, section) memberships: what prepare()
// stores as 4-byte entries (so at most 160 MB), counted in O(n log n) before it is built.
inline constexpr int64_t kMaxInstanceEntries = 40'000'000;
int64_t instance_entries(const std::vector<PoolRequest>& requests);

// Cuts time into sections at every start and end and lists, per buffer, its sections and
// the buffers it meets; splits the buffers into independent time partitions.
Instance prepare(const std::vector<PoolRequest>& requests, int64_t default_alignment);

// Static orders tried in turn (MiniMalloc's preordering heuristics "WAT", "TAW",
// "TWA"), each a priority of keys, largest first: W the lifetime, A the area (bytes ×
// lifetime), T the largest unplaced total of the sections the buffer spans.
enum class Key { width, area, total };
using Heuristic = std::array<Key, 3>;
inline constexpr std::array<Heuristic, 3> kHeuristics = {{{Key::width, Key::area, Key::total},
                                                          {Key::total, Key::area, Key::width},
                                                          {Key::total, Key::width, Key::area}}};

// `buffers` in the heuristic's order; `section_total` holds the unplaced bytes per section.
std::vector<int32_t> preorder(const Instance& in, const std::vector<int32_t>& buffers,
                              const std::vector<int64_t>& section_total,
                              const Heuristic& heuristic);

// Offsets for every buffer of `in` with no top above `capacity`, around its fixed buffers
// (Instance::fits), found by the search within `node_limit` nodes (restarts over the
// static orders, starting `rotation` places on); empty when none was found (none exists,
// or the nodes or the time ran out).
std::vector<int64_t> place_around_fixed(const Instance& in, int64_t capacity, int64_t node_limit,
                                        std::size_t rotation,
                                        std::chrono::steady_clock::time_point deadline);

}  // namespace shardplan::pool
