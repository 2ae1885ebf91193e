// The window search (pool/window_search.cc) and the exact search around fixed buffers it
// rests on (pool::place_around_fixed): hand-worked holes, brute force on small random
// instances, validity, never worse, reproducible with a round limit. Quality on larger
// inputs is measured in tests/bench/pack_bench.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "pool/exact.h"
#include "pool/placement.h"
#include "pool/pool.h"
#include "pool/synthetic.h"

namespace shardplan {
namespace {

using Ranges = pool::Instance::Ranges;

// An instance of `movable` around `fixed` (placed at `fixed_offsets`), built as the window
// search builds it: per section the ranges the fixed buffers take, per buffer the free
// ranges it fits in.
pool::Instance around(const std::vector<PoolRequest>& movable,
                      const std::vector<PoolRequest>& fixed,
                      const std::vector<int64_t>& fixed_offsets) {
  pool::Instance in = pool::prepare(movable, 1);
  const std::vector<int64_t> times = pool::distinct_times(movable);
  const std::size_t sections = in.in_section.size();
  in.section_blocked.assign(sections, {});
  in.section_blocked_before.assign(sections, {});
  for (std::size_t s = 0; s < sections; ++s) {
    Ranges& ranges = in.section_blocked[s];
    for (std::size_t j = 0; j < fixed.size(); ++j) {
      if (fixed[j].begin < times[s + 1] && fixed[j].end > times[s])
        ranges.emplace_back(fixed_offsets[j], fixed_offsets[j] + fixed[j].bytes);
    }
    // Merged: two fixed buffers in one section may take the same bytes at different times.
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
    in.section_blocked_before[s] = {0};
    for (const auto& [from, to] : ranges)
      in.section_blocked_before[s].push_back(in.section_blocked_before[s].back() + to - from);
  }
  in.fits.assign(movable.size(), {});
  for (std::size_t k = 0; k < movable.size(); ++k) {
    Ranges blocked;
    for (std::size_t j = 0; j < fixed.size(); ++j) {
      if (fixed[j].begin < movable[k].end && movable[k].begin < fixed[j].end)
        blocked.emplace_back(fixed_offsets[j], fixed_offsets[j] + fixed[j].bytes);
    }
    std::sort(blocked.begin(), blocked.end());
    int64_t free_from = 0;
    for (const auto& [from, to] : blocked) {
      if (from - free_from >= movable[k].bytes) in.fits[k].emplace_back(free_from, from);
      free_from = std::max(free_from, to);
    }
    in.fits[k].emplace_back(free_from, INT64_MAX);
  }
  return in;
}

// Every placement of `movable` in `order`, each at the lowest offset where it fits above
// the movable buffers placed before it that it meets in time and between the fixed ones:
// the lowest height any of them reaches (every placement pushed down is one of these).
int64_t brute_force_around(const std::vector<PoolRequest>& movable,
                           const std::vector<PoolRequest>& fixed,
                           const std::vector<int64_t>& fixed_offsets) {
  std::vector<std::size_t> order(movable.size());
  std::iota(order.begin(), order.end(), 0);
  int64_t best = INT64_MAX;
  do {
    std::vector<int64_t> offset(movable.size(), 0);
    int64_t height = 0;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const PoolRequest& r = movable[order[k]];
      int64_t at = 0;
      for (std::size_t m = 0; m < k; ++m) {
        const PoolRequest& o = movable[order[m]];
        if (r.begin < o.end && o.begin < r.end) at = std::max(at, offset[order[m]] + o.bytes);
      }
      for (bool moved = true; moved;) {
        moved = false;
        for (std::size_t j = 0; j < fixed.size(); ++j) {
          const bool in_time = r.begin < fixed[j].end && fixed[j].begin < r.end;
          if (in_time && at < fixed_offsets[j] + fixed[j].bytes &&
              fixed_offsets[j] < at + r.bytes) {
            at = fixed_offsets[j] + fixed[j].bytes;
            moved = true;
          }
        }
      }
      offset[order[k]] = at;
      height = std::max(height, at + r.bytes);
    }
    best = std::min(best, height);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(PlaceAroundFixed, UsesAHoleUnderAFixedBuffer) {
  // Fixed: x [0,10) at 0 and y [0,10) at 4, 2 bytes each; z [0,3) and w [7,10) at 2 fill
  // the hole between them except during [3,7). Movable: a [3,7) and v [4,6), 2 bytes
  // each: a goes into the hole, v on y, so nothing passes 8.
  const std::vector<PoolRequest> fixed = {{.bytes = 2, .begin = 0, .end = 10},
                                          {.bytes = 2, .begin = 0, .end = 10},
                                          {.bytes = 2, .begin = 0, .end = 3},
                                          {.bytes = 2, .begin = 7, .end = 10}};
  const std::vector<int64_t> fixed_offsets = {0, 4, 2, 2};
  const std::vector<PoolRequest> movable = {{.bytes = 2, .begin = 3, .end = 7},
                                            {.bytes = 2, .begin = 4, .end = 6}};
  const pool::Instance in = around(movable, fixed, fixed_offsets);
  const auto forever = pool::Clock::time_point::max();
  const std::vector<int64_t> offsets = pool::place_around_fixed(in, 8, 1000, 0, forever);
  ASSERT_EQ(offsets.size(), 2u);
  EXPECT_EQ(offsets[0], 2);
  EXPECT_EQ(offsets[1], 6);
  // One byte less does not fit: proven, not out of nodes (the same answer at any limit).
  EXPECT_TRUE(pool::place_around_fixed(in, 7, 1000, 0, forever).empty());
}

TEST(PlaceAroundFixed, MatchesBruteForceOnSmallInstances) {
  std::mt19937 rng(11);
  const auto forever = pool::Clock::time_point::max();
  for (int trial = 0; trial < 300; ++trial) {
    // A valid placement of fixed buffers (best fit), then 1 to 5 movable ones.
    std::vector<PoolRequest> fixed;
    for (int i = 0, n = std::uniform_int_distribution<int>(0, 6)(rng); i < n; ++i) {
      const int64_t begin = std::uniform_int_distribution<int>(0, 8)(rng);
      fixed.push_back({.bytes = std::uniform_int_distribution<int>(1, 6)(rng),
                       .begin = begin,
                       .end = begin + std::uniform_int_distribution<int>(1, 8)(rng)});
    }
    std::vector<int64_t> fixed_offsets(fixed.size(), 0);
    if (!fixed.empty()) {
      fixed_offsets = make_best_fit_assigner()->assign(fixed, {.alignment = 1}).offsets;
      // Spread out (still valid) to leave holes.
      const int64_t spread = std::uniform_int_distribution<int>(1, 3)(rng);
      for (int64_t& offset : fixed_offsets) offset *= spread;
      ASSERT_FALSE(find_overlap(fixed, fixed_offsets).has_value());
    }
    std::vector<PoolRequest> movable;
    for (int i = 0, n = std::uniform_int_distribution<int>(1, 5)(rng); i < n; ++i) {
      const int64_t begin = std::uniform_int_distribution<int>(0, 8)(rng);
      movable.push_back({.bytes = std::uniform_int_distribution<int>(1, 6)(rng),
                         .begin = begin,
                         .end = begin + std::uniform_int_distribution<int>(1, 5)(rng)});
    }
    const int64_t optimum = brute_force_around(movable, fixed, fixed_offsets);
    const pool::Instance in = around(movable, fixed, fixed_offsets);
    const std::vector<int64_t> at_optimum =
        pool::place_around_fixed(in, optimum, 1'000'000, 0, forever);
    ASSERT_EQ(at_optimum.size(), movable.size()) << "trial " << trial;
    std::vector<PoolRequest> all = fixed;
    all.insert(all.end(), movable.begin(), movable.end());
    std::vector<int64_t> offsets = fixed_offsets;
    offsets.insert(offsets.end(), at_optimum.begin(), at_optimum.end());
    EXPECT_FALSE(find_overlap(all, offsets).has_value()) << "trial " << trial;
    for (std::size_t k = 0; k < movable.size(); ++k)
      EXPECT_LE(at_optimum[k] + movable[k].bytes, optimum) << "trial " << trial;
    EXPECT_TRUE(pool::place_around_fixed(in, optimum - 1, 1'000'000, 0, forever).empty())
        << "trial " << trial;
  }
}

TEST(WindowSearch, LowersTheHeightThroughAHole) {
  // The instance above as one placement: x, y, z, w as fixed there, a [3,7) on y at 6 and
  // v [4,6) on a at 8 (height 10). The lower bound, 8 at time 4, is reached only with a
  // in the hole [2,4), which only moves of a window's buffers together find.
  const std::vector<PoolRequest> requests = {
      {.bytes = 2, .begin = 0, .end = 10}, {.bytes = 2, .begin = 0, .end = 10},
      {.bytes = 2, .begin = 0, .end = 3},  {.bytes = 2, .begin = 7, .end = 10},
      {.bytes = 2, .begin = 3, .end = 7},  {.bytes = 2, .begin = 4, .end = 6}};
  PoolAssignment start;
  start.offsets = {0, 4, 2, 2, 6, 8};
  start.size_bytes = 10;
  ASSERT_FALSE(check_packing(requests, start.offsets, 10, 1).has_value());
  const int64_t bound = live_bytes_lower_bound(requests);
  ASSERT_EQ(bound, 8);
  const PoolAssignment result =
      pool::window_search(requests, start, bound, 1, pool::Clock::time_point::max(), 100, 1);
  EXPECT_FALSE(check_packing(requests, result.offsets, result.size_bytes, 1).has_value());
  EXPECT_EQ(result.size_bytes, 8);
  EXPECT_TRUE(result.proven_optimal);
}

TEST(WindowSearch, NeverWorseValidAndReproducible) {
  // A pipeline stage's interleaved micro-batches: best fit ends above the bound.
  const auto requests = synthetic_training_trace({.buffers = 3000, .seed = 4, .pipelined = true});
  const int64_t bound = live_bytes_lower_bound(requests);
  const PoolAssignment start =
      make_best_fit_assigner()->assign(requests, {.alignment = 1, .node_limit = 1});
  ASSERT_GT(start.size_bytes, bound);
  const auto forever = pool::Clock::time_point::max();
  const PoolAssignment once = pool::window_search(requests, start, bound, 1, forever, 200, 1);
  const PoolAssignment again = pool::window_search(requests, start, bound, 1, forever, 200, 1);
  EXPECT_FALSE(check_packing(requests, once.offsets, once.size_bytes, 1).has_value());
  EXPECT_LT(once.size_bytes, start.size_bytes);
  EXPECT_GE(once.size_bytes, bound);
  EXPECT_EQ(once.offsets, again.offsets);
}

TEST(WindowSearch, RespectsEachBuffersAlignment) {
  const auto requests = synthetic_training_trace({.buffers = 2500, .seed = 2, .pipelined = true});
  std::vector<PoolRequest> aligned = requests;
  for (std::size_t i = 0; i < aligned.size(); i += 3) aligned[i].alignment = 4096;
  const int64_t bound = live_bytes_lower_bound(aligned, 512);
  const PoolAssignment start =
      make_best_fit_assigner()->assign(aligned, {.alignment = 512, .node_limit = 1});
  const PoolAssignment result =
      pool::window_search(aligned, start, bound, 512, pool::Clock::time_point::max(), 100, 3);
  const auto error = check_packing(aligned, result.offsets, result.size_bytes, 512);
  EXPECT_FALSE(error.has_value()) << error->message;
  EXPECT_LE(result.size_bytes, start.size_bytes);
}

}  // namespace
}  // namespace shardplan
