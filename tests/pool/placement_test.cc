// The building blocks of pool/placement.cc: the offsets taken over time (TakenOffsets,
// the best-fit gap query) against brute force, and the gap choice (fit_offset).
#include "pool/placement.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <random>

#include "pool/pool.h"

namespace shardplan {
namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// The union of `ranges`, sorted, touching ones joined.
Ranges union_of(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end());
  Ranges out;
  for (const auto& range : ranges) {
    if (!out.empty() && range.first <= out.back().second) {
      out.back().second = std::max(out.back().second, range.second);
    } else {
      out.push_back(range);
    }
  }
  return out;
}

TEST(TakenOffsets, GivesTheOffsetsOfEveryPlacedBufferLiveAtOnce) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 100; ++trial) {
    std::vector<PoolRequest> requests;
    const int n = std::uniform_int_distribution<int>(1, 80)(rng);
    for (int i = 0; i < n; ++i) {
      const int64_t begin = std::uniform_int_distribution<int>(0, 50)(rng);
      requests.push_back({.bytes = std::uniform_int_distribution<int>(1, 100)(rng),
                          .begin = begin,
                          .end = begin + std::uniform_int_distribution<int>(1, 30)(rng)});
    }
    // Any offsets do (the index does not check them): a valid placement and a random one.
    std::vector<int64_t> offsets =
        make_best_fit_assigner()->assign(requests, {.alignment = 1}).offsets;
    if (trial % 2 == 1) {
      for (int64_t& offset : offsets) offset = std::uniform_int_distribution<int>(0, 500)(rng);
    }
    pool::TakenOffsets index(requests);
    std::vector<bool> placed(requests.size(), false);
    Ranges taken;
    for (std::size_t k = 0; k < requests.size(); ++k) {
      // Query every request, then place the next one, in a shuffled order.
      for (std::size_t q = 0; q < requests.size(); ++q) {
        Ranges expected;
        for (std::size_t j = 0; j < requests.size(); ++j) {
          if (placed[j] && requests[j].begin < requests[q].end &&
              requests[q].begin < requests[j].end)
            expected.emplace_back(offsets[j], offsets[j] + requests[j].bytes);
        }
        index.taken(q, taken);
        ASSERT_TRUE(std::is_sorted(taken.begin(), taken.end())) << "trial " << trial;
        EXPECT_EQ(union_of(taken), union_of(expected)) << "trial " << trial << ", query " << q;
      }
      const std::size_t next = (k * 7919) % requests.size();
      if (!placed[next]) {
        index.place(next, offsets[next]);
        placed[next] = true;
      }
    }
  }
}

TEST(FitOffset, SmallestGapThatHoldsItElseOnTop) {
  // Taken [0,10) [14,20) [30,40) [45,50): gaps of 4, 10 and 5 bytes below 50.
  const Ranges taken = {{0, 10}, {14, 20}, {30, 40}, {45, 50}};
  EXPECT_EQ(pool::fit_offset(taken, 4, 1, INT64_MAX, false), 10);
  EXPECT_EQ(pool::fit_offset(taken, 5, 1, INT64_MAX, false), 40);
  EXPECT_EQ(pool::fit_offset(taken, 5, 1, INT64_MAX, true), 20);  // lowest
  EXPECT_EQ(pool::fit_offset(taken, 11, 1, INT64_MAX, false), 50);
  // Aligned to 8: [10,14) holds no aligned 4 bytes; of [20,30) (from 24) and [40,45) the
  // smaller gap wins.
  EXPECT_EQ(pool::fit_offset(taken, 4, 8, INT64_MAX, false), 40);
  EXPECT_EQ(pool::fit_offset(taken, 11, 1, 60, false), -1);  // past the limit
}

}  // namespace
}  // namespace shardplan
