// The caching allocator model against PyTorch's rules worked by hand.
#include "pool/caching_allocator.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

namespace shardplan {
namespace {

constexpr int64_t kMiB = 1048576;

TEST(CachingAllocator, RoundsAndSizesSegmentsAsPyTorch) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512);
  EXPECT_EQ(CachingAllocator::round_size(512), 512);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024);
  EXPECT_EQ(CachingAllocator::segment_size(kMiB), 2 * kMiB);         // small pool
  EXPECT_EQ(CachingAllocator::segment_size(kMiB + 512), 20 * kMiB);  // large, < 10 MiB
  EXPECT_EQ(CachingAllocator::segment_size(10 * kMiB), 10 * kMiB);   // rounded to 2 MiB
  EXPECT_EQ(CachingAllocator::segment_size(11 * kMiB), 12 * kMiB);
}

TEST(CachingAllocator, SplitsSegmentsAndReusesFreedBlocks) {
  CachingAllocator a;
  // 5 MiB: a new 20 MiB segment, split (15 MiB left > 1 MiB).
  const int64_t x = a.allocate(5 * kMiB);
  EXPECT_EQ(a.reserved(), 20 * kMiB);
  EXPECT_EQ(a.allocated(), 5 * kMiB);
  // 8 MiB fits the 15 MiB remainder: no new segment.
  const int64_t y = a.allocate(8 * kMiB);
  EXPECT_EQ(a.reserved(), 20 * kMiB);
  EXPECT_EQ(a.allocated(), 13 * kMiB);
  // 12 MiB does not fit the 7 MiB left: a 12 MiB segment.
  const int64_t z = a.allocate(12 * kMiB);
  EXPECT_EQ(a.reserved(), 32 * kMiB);
  a.free(x);
  a.free(y);
  EXPECT_EQ(a.allocated(), 12 * kMiB);
  // The freed 5 + 8 MiB merged with the 7 MiB tail: a 20 MiB request fits without growth.
  a.allocate(20 * kMiB);
  EXPECT_EQ(a.reserved(), 32 * kMiB);
  a.free(z);
  // Small requests come from their own 2 MiB segments, never from the large pool.
  a.allocate(1000);
  EXPECT_EQ(a.reserved(), 34 * kMiB);
  EXPECT_EQ(a.allocated(), 20 * kMiB + 1024);
}

TEST(CachingAllocator, FragmentationGrowsReservedAboveAllocated) {
  CachingAllocator a;
  // Two 12 MiB segments; freeing one and asking 14 MiB cannot reuse it.
  const int64_t x = a.allocate(12 * kMiB);
  a.allocate(12 * kMiB);
  a.free(x);
  a.allocate(14 * kMiB);
  EXPECT_EQ(a.allocated(), 26 * kMiB);
  EXPECT_EQ(a.reserved(), 38 * kMiB);
}

TEST(CachingAllocator, RandomSequencesKeepReservedAboveAllocated) {
  std::mt19937 rng(5);
  CachingAllocator a;
  std::vector<int64_t> live;
  int64_t expected = 0;
  std::vector<int64_t> sizes;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      const int64_t bytes = 1 + static_cast<int64_t>(rng() % (64 * kMiB));
      live.push_back(a.allocate(bytes));
      sizes.push_back(CachingAllocator::round_size(bytes));
      expected += sizes.back();
    } else {
      const std::size_t k = rng() % live.size();
      a.free(live[k]);
      expected -= sizes[k];
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      sizes.erase(sizes.begin() + static_cast<std::ptrdiff_t>(k));
    }
    // A block is not split when the rest is under 512 B (small) or at most 1 MiB (large),
    // and PyTorch counts the whole block as allocated.
    ASSERT_GE(a.allocated(), expected);
    ASSERT_LE(a.allocated(), expected + static_cast<int64_t>(live.size()) * kMiB);
    ASSERT_GE(a.reserved(), a.allocated());
  }
  for (int64_t h : live) a.free(h);
  EXPECT_EQ(a.allocated(), 0);
  EXPECT_THROW(a.free(live.front()), std::logic_error);  // already free
  EXPECT_THROW(a.free(-1), std::logic_error);
}

// Expandable segments by hand. 50 MiB maps 60 (three 20 MiB pages), 10 left free at the
// end; freed, the 60 merge; 30 and 30 then fit inside: 60 reserved where the classic
// allocator needs 50 + 30 = 80 (the second 30 does not fit the 20 left of the 50 segment).
TEST(CachingAllocator, ExpandableSegmentsReuseTheSegmentEnd) {
  CachingAllocator classic;
  CachingAllocator expandable(true);
  for (CachingAllocator* a : {&classic, &expandable}) {
    a->free(a->allocate(50 * kMiB));
    a->allocate(30 * kMiB);
    a->allocate(30 * kMiB);
  }
  EXPECT_EQ(classic.reserved(), 80 * kMiB);
  EXPECT_EQ(expandable.reserved(), 60 * kMiB);
  EXPECT_EQ(expandable.allocated(), 60 * kMiB);
  // With the last block in use, 25 MiB maps two more pages (40 MiB) at the end, leaving
  // 15 free there, which the next 15 takes.
  expandable.allocate(25 * kMiB);
  EXPECT_EQ(expandable.reserved(), 100 * kMiB);
  expandable.allocate(15 * kMiB);
  EXPECT_EQ(expandable.reserved(), 100 * kMiB);
  // A free block at the end grows in place: free 15 (the end), ask 35: map 20 more.
  CachingAllocator grow(true);
  const int64_t first = grow.allocate(30 * kMiB);  // maps 40, 10 free at the end
  EXPECT_EQ(grow.reserved(), 40 * kMiB);
  grow.allocate(35 * kMiB);  // the 10 MiB end grows by 40 (ceil(25 / 20) pages) to 50
  EXPECT_EQ(grow.reserved(), 80 * kMiB);
  grow.free(first);  // a 30 MiB hole at the front is reused, never unmapped
  grow.allocate(30 * kMiB);
  EXPECT_EQ(grow.reserved(), 80 * kMiB);
  // Small requests use their own pool of 2 MiB pages.
  grow.allocate(512 * 1024);
  EXPECT_EQ(grow.reserved(), 82 * kMiB);
}

// Expandable segments never reserve less than what is allocated, over random sequences.
TEST(CachingAllocator, ExpandableRandomSequencesKeepReservedAboveAllocated) {
  std::mt19937 rng(7);
  CachingAllocator a(true);
  std::vector<int64_t> live;
  for (int step = 0; step < 5000; ++step) {
    if (live.empty() || rng() % 3 != 0) {
      live.push_back(a.allocate(1 + static_cast<int64_t>(rng() % (64 * kMiB))));
    } else {
      const std::size_t k = rng() % live.size();
      a.free(live[k]);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
    ASSERT_GE(a.reserved(), a.allocated());
  }
  for (int64_t h : live) a.free(h);
  EXPECT_EQ(a.allocated(), 0);
}

// Each stream has its own pools: a block freed on the reduce-scatter stream is not reused
// by the compute stream (PyTorch keys free blocks by stream).
TEST(CachingAllocator, StreamsDoNotShareFreedBlocks) {
  for (const bool expandable : {false, true}) {
    CachingAllocator a(expandable);
    a.free(a.allocate(40 * kMiB, 1));
    EXPECT_EQ(a.reserved(), 40 * kMiB) << expandable;
    a.allocate(40 * kMiB, 0);
    EXPECT_EQ(a.reserved(), 80 * kMiB) << expandable;
    a.allocate(40 * kMiB, 1);  // the stream's own free block
    EXPECT_EQ(a.reserved(), 80 * kMiB) << expandable;
  }
}

// At the limit PyTorch returns every stream's wholly free segments (release_cached_blocks)
// and tries again; a free block that shares a segment with a live one stays, and when
// the request still does not fit the allocation fails.
TEST(CachingAllocator, LimitReleasesFreeSegmentsThenFails) {
  CachingAllocator a(false, 60 * kMiB);
  const int64_t x = a.allocate(30 * kMiB, 1);  // a 30 MiB segment on stream 1
  a.free(x);
  const int64_t y = a.allocate(40 * kMiB);  // 30 + 40 > 60: stream 1's segment goes back
  ASSERT_NE(y, CachingAllocator::kOutOfMemory);
  EXPECT_EQ(a.reserved(), 40 * kMiB);
  EXPECT_EQ(a.cache_releases(), 1);
  // 40 MiB split: 10 live, 30 free in a live segment. 25 MiB fits the 30 free.
  a.free(y);
  const int64_t small = a.allocate(10 * kMiB);
  a.allocate(25 * kMiB);
  EXPECT_EQ(a.reserved(), 40 * kMiB);
  // 22 MiB: 40 + 22 > 60 and nothing wholly free to return (5 MiB of the split segment is).
  EXPECT_EQ(a.allocate(22 * kMiB), CachingAllocator::kOutOfMemory);
  EXPECT_EQ(a.reserved(), 40 * kMiB);
  // 20 MiB fits under the limit without a release.
  EXPECT_NE(a.allocate(20 * kMiB), CachingAllocator::kOutOfMemory);
  EXPECT_EQ(a.reserved(), 60 * kMiB);
  EXPECT_EQ(a.cache_releases(), 2);
  a.free(small);
  EXPECT_EQ(a.allocated(), 45 * kMiB);
}

// Expandable segments at the limit: the pages wholly inside free blocks are unmapped
// (of any stream) and mapped again where a request needs them.
TEST(CachingAllocator, ExpandableLimitUnmapsFreePages) {
  constexpr int64_t kOom = CachingAllocator::kOutOfMemory;
  CachingAllocator a(true, 120 * kMiB);
  const int64_t x = a.allocate(50 * kMiB);  // maps 60: [x 50][free 10]
  const int64_t y = a.allocate(10 * kMiB);
  EXPECT_EQ(a.reserved(), 60 * kMiB);
  a.free(x);  // pages 0-20 and 20-40 wholly free; 40-60 holds the end of the 50 and y
  // Stream 1: 70 MiB maps 80; 60 + 80 > 120, so stream 0's two free pages go first.
  ASSERT_NE(a.allocate(70 * kMiB, 1), kOom);
  EXPECT_EQ(a.reserved(), 100 * kMiB);
  EXPECT_EQ(a.cache_releases(), 1);
  // Stream 0: 15 MiB maps the lowest unmapped page again (0-20).
  ASSERT_NE(a.allocate(15 * kMiB), kOom);
  EXPECT_EQ(a.reserved(), 120 * kMiB);
  EXPECT_EQ(a.allocated(), 95 * kMiB);
  // 21 MiB: the 5 free at 15-20 and the unmapped 20-40 would hold it, but no page is left
  // and none is wholly free.
  EXPECT_EQ(a.allocate(21 * kMiB), kOom);
  EXPECT_EQ(a.reserved(), 120 * kMiB);
  EXPECT_EQ(a.cache_releases(), 2);
  a.free(y);
  EXPECT_EQ(a.allocated(), 85 * kMiB);
}

// Best fit under expandable segments counts a free block followed by unmapped space as
// that much larger (get_free_block's expandable_size), so it takes a block inside the
// segment before the one at its end.
TEST(CachingAllocator, ExpandableBestFitKeepsTheSegmentEnd) {
  CachingAllocator a(true);
  const int64_t x = a.allocate(30 * kMiB);  // maps 40: [x 30][free 10 | unmapped]
  a.allocate(4 * kMiB);                     // [x 30][4][free 6 | unmapped]
  a.free(x);                                // free 30 inside, free 6 at the end
  // 5 MiB: the 6 at the end is the smallest that fits, but counts as 6 + the unmapped
  // rest, so the 30 inside is split (plain best fit would split the 6).
  a.allocate(5 * kMiB);
  EXPECT_EQ(a.reserved(), 40 * kMiB);
  // 26 MiB: the 25 left inside is too small; the end block grows by a page. (Had the 5
  // come from the end, the 30 inside would hold it within 40 MiB.)
  a.allocate(26 * kMiB);
  EXPECT_EQ(a.reserved(), 60 * kMiB);
  EXPECT_EQ(a.allocated(), 35 * kMiB);
}

// Random sequences on two streams under a limit: reserved never passes it nor falls below
// allocated, a failed request changes nothing live, and once everything is freed the
// whole limit can be had again in one block (every segment or page is returned).
TEST(CachingAllocator, RandomSequencesUnderALimit) {
  constexpr int64_t kLimit = 500 * kMiB;  // whole 20 MiB pages
  for (const bool expandable : {false, true}) {
    std::mt19937 rng(11);
    CachingAllocator a(expandable, kLimit);
    std::vector<int64_t> live;
    int64_t failures = 0;
    for (int step = 0; step < 5000; ++step) {
      if (live.empty() || rng() % 3 != 0) {
        const int64_t before = a.allocated();
        const int64_t bytes = 1 + static_cast<int64_t>(rng() % (48 * kMiB));
        const int64_t h = a.allocate(bytes, static_cast<int>(rng() % 2));
        if (h == CachingAllocator::kOutOfMemory) {
          ++failures;
          ASSERT_EQ(a.allocated(), before);
          ASSERT_GT(before + CachingAllocator::round_size(bytes), kLimit / 2) << "failed early";
        } else {
          live.push_back(h);
        }
      } else {
        const std::size_t k = rng() % live.size();
        a.free(live[k]);
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
      }
      ASSERT_LE(a.reserved(), kLimit) << expandable;
      ASSERT_GE(a.reserved(), a.allocated()) << expandable;
    }
    EXPECT_GT(failures, 0) << expandable;  // the limit was reached
    EXPECT_GT(a.cache_releases(), 0) << expandable;
    for (int64_t h : live) a.free(h);
    EXPECT_EQ(a.allocated(), 0);
    EXPECT_NE(a.allocate(kLimit, 1), CachingAllocator::kOutOfMemory) << expandable;
    EXPECT_EQ(a.reserved(), kLimit) << expandable;
  }
}

// PyTorch 2.11 (CUDA 13.0) on an H100 SXM replayed a seeded sequence of 3000 allocations
// and frees (tools/measure/h100_probe.py; a second run gave a byte-identical trace) and recorded
// memory_allocated and memory_reserved after each. The model matches exactly until two free blocks
// of one size tie, which PyTorch breaks by device address (unknown here); from there it stays
// close.
TEST(CachingAllocator, MatchesPyTorchMeasuredOnAnH100) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/caching_allocator_trace.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json trace = nlohmann::json::parse(in);
  ASSERT_EQ(trace["ops"].size(), 3000u);
  CachingAllocator a;
  std::map<int64_t, int64_t> handles;
  int64_t step = 0, peak_model = 0, peak_torch = 0;
  for (const auto& op : trace["ops"]) {
    if (op["op"] == "alloc") {
      handles[op["id"]] = a.allocate(op["bytes"]);
    } else {
      a.free(handles.at(op["id"]));
    }
    ++step;
    const auto allocated = op["allocated"].get<int64_t>();
    const auto reserved = op["reserved"].get<int64_t>();
    if (step <= 1000) {
      ASSERT_EQ(a.allocated(), allocated) << "step " << step;
      ASSERT_EQ(a.reserved(), reserved) << "step " << step;
    }
    EXPECT_NEAR(static_cast<double>(a.reserved()), static_cast<double>(reserved),
                0.02 * static_cast<double>(reserved))
        << "step " << step;
    EXPECT_NEAR(static_cast<double>(a.allocated()), static_cast<double>(allocated),
                0.002 * static_cast<double>(allocated) + 1e6)
        << "step " << step;
    peak_model = std::max(peak_model, a.reserved());
    peak_torch = std::max(peak_torch, reserved);
  }
  EXPECT_NEAR(static_cast<double>(peak_model) / static_cast<double>(peak_torch), 1.0, 0.005);
}

}  // namespace
}  // namespace shardplan
