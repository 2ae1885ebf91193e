// Offset assignment: every algorithm against brute force on small instances, MiniMalloc's
// README example and challenging instances, boundaries, alignment, capacity, time limits,
// and the CSV format's error paths.
#include "pool/pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>
#include <random>

#include "models/error.h"
#include "pool/csv.h"
#include "tests/expect_input_error.h"
#include "tests/shared_data.h"

namespace shardplan {
namespace {

const std::vector<std::string> kAlgorithms = {"slots", "best-fit", "exact", "auto"};

PoolAssignment pack(const std::string& algorithm, const std::vector<PoolRequest>& requests,
                    PackOptions options = {.alignment = 1}) {
  return make_offset_assigner(algorithm)->assign(requests, options);
}

// The true optimum by brute force: every order of placement, each buffer on top of the
// already placed buffers it overlaps in time. Every optimal placement pushed down as far
// as it goes is one of these (sort it by offset).
int64_t brute_force_height(const std::vector<PoolRequest>& r) {
  std::vector<std::size_t> order(r.size());
  std::iota(order.begin(), order.end(), 0);
  int64_t best = INT64_MAX;
  do {
    std::vector<int64_t> offset(r.size(), 0);
    int64_t height = 0;
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      for (std::size_t m = 0; m < k; ++m) {
        const std::size_t j = order[m];
        if (r[i].begin < r[j].end && r[j].begin < r[i].end)
          offset[i] = std::max(offset[i], offset[j] + r[j].bytes);
      }
      height = std::max(height, offset[i] + r[i].bytes);
    }
    best = std::min(best, height);
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

TEST(Pool, ExactMatchesBruteForceOnSmallInstances) {
  std::mt19937 rng(42);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 7)(rng);
    std::vector<PoolRequest> requests;
    for (int i = 0; i < n; ++i) {
      const int64_t begin = std::uniform_int_distribution<int>(0, 8)(rng);
      const int64_t length = std::uniform_int_distribution<int>(1, 6)(rng);
      requests.push_back({.bytes = std::uniform_int_distribution<int>(1, 9)(rng),
                          .begin = begin,
                          .end = begin + length});
    }
    const int64_t optimum = brute_force_height(requests);
    const int64_t lower_bound = live_bytes_lower_bound(requests);
    ASSERT_LE(lower_bound, optimum);
    for (const std::string& algorithm : kAlgorithms) {
      const PoolAssignment result = pack(algorithm, requests);
      ASSERT_EQ(result.status, PackStatus::solved);
      const auto error = check_packing(requests, result.offsets, result.size_bytes, 1);
      ASSERT_FALSE(error.has_value()) << algorithm << ": " << error->message;
      EXPECT_GE(result.size_bytes, optimum) << algorithm;
      if (result.proven_optimal) {
        EXPECT_EQ(result.size_bytes, optimum) << algorithm << " claims a proof";
      }
      if (algorithm == "exact" || algorithm == "auto") {
        EXPECT_EQ(result.size_bytes, optimum) << algorithm << " trial " << trial;
        EXPECT_TRUE(result.proven_optimal) << algorithm;
      }
    }
  }
}

TEST(Pool, MiniMallocReadmeExample) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const PoolTable table = read_pool_csv(std::string(SHARDPLAN_SHARED_DIR) +
                                        "/benchmarks/minimalloc/examples/input.12.csv");
  ASSERT_EQ(table.requests.size(), 5u);
  for (const char* algorithm : {"best-fit", "exact", "auto"}) {
    const PoolAssignment result = pack(algorithm, table.requests);
    EXPECT_EQ(result.size_bytes, 12) << algorithm;
    EXPECT_FALSE(check_packing(table.requests, result.offsets, 12, 1).has_value());
  }
}

// Each reaches its optimum within 11 000 nodes (C 609, G 5 382, K 10 126); a hundredfold margin.
constexpr int64_t kChallengingNodeLimit = 1'000'000;

TEST(Pool, ChallengingInstancesReachTheirOptimum) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  // MiniMalloc's challenging suite: these reach their lower bound (SOURCE.md) in well
  // under a second here. Bounded by search nodes, not the clock: a clock-bound search runs
  // two trajectories whose course depends on the machine's speed (under a sanitizer, or on
  // a loaded host, G and K stalled at their 60 s limit), where a node-bound one is one
  // deterministic trajectory, the same on every machine.
  for (const char* name : {"C", "G", "K"}) {
    const PoolTable table =
        read_pool_csv(std::string(SHARDPLAN_SHARED_DIR) + "/benchmarks/minimalloc/challenging/" +
                      name + ".1048576.csv");
    const PoolAssignment result =
        pack("exact", table.requests,
             {.alignment = 1, .time_limit_seconds = 600, .node_limit = kChallengingNodeLimit});
    EXPECT_EQ(result.size_bytes, live_bytes_lower_bound(table.requests)) << name;
    EXPECT_TRUE(result.proven_optimal) << name;
    EXPECT_FALSE(check_packing(table.requests, result.offsets, result.size_bytes, 1).has_value())
        << name;
  }
}

TEST(Pool, HalfOpenLifetimesShareBytes) {
  const std::vector<PoolRequest> requests = {{.bytes = 4, .begin = 0, .end = 3},
                                             {.bytes = 4, .begin = 3, .end = 6}};
  for (const std::string& algorithm : kAlgorithms) {
    const PoolAssignment result = pack(algorithm, requests);
    EXPECT_EQ(result.size_bytes, 4) << algorithm;
  }
  // One step of overlap and they cannot.
  const std::vector<PoolRequest> touching = {{.bytes = 4, .begin = 0, .end = 4},
                                             {.bytes = 4, .begin = 3, .end = 6}};
  for (const std::string& algorithm : kAlgorithms)
    EXPECT_EQ(pack(algorithm, touching).size_bytes, 8) << algorithm;
}

TEST(Pool, AlignmentPerBufferAndGlobal) {
  const std::vector<PoolRequest> requests = {{.bytes = 100, .begin = 0, .end = 10},
                                             {.bytes = 50, .begin = 0, .end = 10, .alignment = 64},
                                             {.bytes = 30, .begin = 0, .end = 10}};
  for (const std::string& algorithm : kAlgorithms) {
    const PoolAssignment result = pack(algorithm, requests, {.alignment = 8});
    EXPECT_FALSE(check_packing(requests, result.offsets, result.size_bytes, 8).has_value())
        << algorithm;
    EXPECT_EQ(result.offsets[1] % 64, 0) << algorithm;
    EXPECT_EQ(result.offsets[0] % 8, 0) << algorithm;
  }
  // A buffer's own alignment overrides the global one: with 256 globally, buffers 0 and 2
  // sit on multiples of 256 and buffer 1 on a multiple of 64.
  const PoolAssignment aligned = pack("exact", requests, {.alignment = 256});
  EXPECT_FALSE(check_packing(requests, aligned.offsets, aligned.size_bytes, 256).has_value());
  EXPECT_EQ(aligned.offsets[0] % 256, 0);
  EXPECT_EQ(aligned.offsets[2] % 256, 0);
  EXPECT_EQ(aligned.offsets[1] % 64, 0);
  // Worked by hand: 100 at 0, 50 at 128, 30 at 256.
  EXPECT_EQ(aligned.size_bytes, 286);
}

TEST(Pool, CapacityThatCannotBeMetIsAnOutcome) {
  const std::vector<PoolRequest> requests = {{.bytes = 4, .begin = 0, .end = 3},
                                             {.bytes = 4, .begin = 1, .end = 6}};
  for (const std::string& algorithm : kAlgorithms) {
    const PoolAssignment result = pack(algorithm, requests, {.alignment = 1, .capacity = 7});
    EXPECT_EQ(result.status, PackStatus::infeasible) << algorithm;
    const PoolAssignment fits = pack(algorithm, requests, {.alignment = 1, .capacity = 8});
    EXPECT_EQ(fits.status, PackStatus::solved) << algorithm;
  }
  // Infeasible above the live-bytes bound: only the exact search can prove it. Three
  // buffers that pairwise overlap at different times need 3 units where at most 2 are
  // ever live at once? Here: a [0,2) b [1,3) c [2,4), sizes 2,1,2 -> LB 3, optimum 3.
  const std::vector<PoolRequest> chain = {{.bytes = 2, .begin = 0, .end = 2},
                                          {.bytes = 1, .begin = 1, .end = 3},
                                          {.bytes = 2, .begin = 2, .end = 4}};
  EXPECT_EQ(pack("exact", chain).size_bytes, 3);
}

TEST(Pool, TimeLimitReturnsTheBestFoundUnproven) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const PoolTable table = read_pool_csv(std::string(SHARDPLAN_SHARED_DIR) +
                                        "/benchmarks/minimalloc/challenging/D.1048576.csv");
  const PoolAssignment greedy = pack("best-fit", table.requests);
  const PoolAssignment result =
      pack("exact", table.requests, {.alignment = 1, .time_limit_seconds = 0.05});
  EXPECT_EQ(result.status, PackStatus::solved);
  EXPECT_FALSE(result.proven_optimal) << "D's optimum is not known to be reachable in 50 ms";
  EXPECT_LE(result.size_bytes, greedy.size_bytes);
  EXPECT_FALSE(check_packing(table.requests, result.offsets, result.size_bytes, 1).has_value());
  // A node limit makes the search deterministic.
  const PoolAssignment a =
      pack("exact", table.requests, {.alignment = 1, .time_limit_seconds = 60, .node_limit = 2000});
  const PoolAssignment b =
      pack("exact", table.requests, {.alignment = 1, .time_limit_seconds = 60, .node_limit = 2000});
  EXPECT_EQ(a.offsets, b.offsets);
}

TEST(Pool, TimeLimitHoldsOnALargeRealTrace) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  // PanGu 2.6B: 18 692 buffers, some live over the whole step. A single search node once
  // cost seconds here (the floor refinement walked every section of every moved buffer)
  // and a 2 s limit ran for 80 s. The bound below is loose so a slow machine passes.
  const PoolTable table = read_pool_csv(std::string(SHARDPLAN_SHARED_DIR) +
                                        "/benchmarks/minimalloc/idealloc/somas_tensors/"
                                        "pangu_2.6B.csv");
  const auto start = std::chrono::steady_clock::now();
  const PoolAssignment result =
      pack("exact", table.requests, {.alignment = 256, .time_limit_seconds = 1});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 15.0);
  EXPECT_EQ(result.status, PackStatus::solved);
  EXPECT_FALSE(check_packing(table.requests, result.offsets, result.size_bytes, 256).has_value());
}

TEST(Pool, BestFitByBreadthPacksRealTracesNearTheirBound) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  // Greedy by size alone is 3.34 % over the bound on PanGu 2.6B (SOURCE.md); taking the
  // buffers of the fullest times first gets within 1 %. TinyBERT reaches the bound but
  // for alignment padding.
  const std::string dir =
      std::string(SHARDPLAN_SHARED_DIR) + "/benchmarks/minimalloc/idealloc/somas_tensors/";
  for (const auto& [file, percent] : std::vector<std::pair<std::string, double>>{
           {"pangu_2.6B.csv", 1.0}, {"tiny_bert.csv", 0.01}}) {
    const PoolTable table = read_pool_csv(dir + file);
    // A node limit takes the clock out: best fit's own quality, however slow the machine
    // (under the sanitizers best fit takes longer than the default limit here).
    const PoolAssignment result =
        pack("best-fit", table.requests, {.alignment = 1, .node_limit = 1});
    const int64_t bound = live_bytes_lower_bound(table.requests);
    EXPECT_LE(static_cast<double>(result.size_bytes - bound),
              percent / 100 * static_cast<double>(bound))
        << file;
    EXPECT_FALSE(check_packing(table.requests, result.offsets, result.size_bytes, 1).has_value())
        << file;
  }
}

TEST(Pool, AlignmentRaisesTheLowerBound) {
  // 100, 100 and 300 bytes live together at 256-byte offsets. Each buffer but the top one
  // takes its size rounded up: rounded sizes 256 + 256 + 512 = 1024, less the largest
  // rounding (300 → 512: 212) gives 812, which the 300-byte buffer on top reaches
  // (offsets 0, 256, 512).
  const std::vector<PoolRequest> r = {{.bytes = 100, .begin = 0, .end = 2},
                                      {.bytes = 100, .begin = 0, .end = 2},
                                      {.bytes = 300, .begin = 1, .end = 3}};
  EXPECT_EQ(live_bytes_lower_bound(r), 500);
  EXPECT_EQ(live_bytes_lower_bound(r, 256), 812);
  const PoolAssignment exact = pack("exact", r, {.alignment = 256});
  EXPECT_EQ(exact.size_bytes, 812);
  EXPECT_TRUE(exact.proven_optimal);
  // Random small instances: the aligned bound never exceeds the brute-force optimum.
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<PoolRequest> q;
    for (int i = 0; i < 5; ++i) {
      const int64_t b = static_cast<int64_t>(rng() % 6);
      q.push_back({.bytes = 1 + static_cast<int64_t>(rng() % 700),
                   .begin = b,
                   .end = b + 1 + static_cast<int64_t>(rng() % 4)});
    }
    const PoolAssignment best = pack("exact", q, {.alignment = 256, .time_limit_seconds = 5});
    ASSERT_TRUE(best.proven_optimal);
    EXPECT_LE(live_bytes_lower_bound(q, 256), best.size_bytes) << "trial " << trial;
  }
}

TEST(Pool, AutoReachesTheBoundOnPanGu) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
#ifdef SHARDPLAN_SANITIZED
  GTEST_SKIP() << "quality within a time limit: the sanitizers slow the search several-fold";
#endif
  // Best fit stops 0.76 % over the bound; squeaky-wheel rounds reach it (SOURCE.md: plain
  // greedy by size is 3.34 % over).
  const PoolTable table = read_pool_csv(std::string(SHARDPLAN_SHARED_DIR) +
                                        "/benchmarks/minimalloc/idealloc/somas_tensors/"
                                        "pangu_2.6B.csv");
  const PoolAssignment result =
      pack("auto", table.requests, {.alignment = 1, .time_limit_seconds = 10});
  const int64_t bound = live_bytes_lower_bound(table.requests);
  EXPECT_LE(static_cast<double>(result.size_bytes), 1.005 * static_cast<double>(bound));
  EXPECT_FALSE(check_packing(table.requests, result.offsets, result.size_bytes, 1).has_value());
}

TEST(PoolCsv, ReadsAliasesAndWritesOffsets) {
  const PoolTable t =
      parse_pool_csv("buffer,start,end,size,alignment\nx,0,2,4,2\ny,3,3,8,4\n", "t.csv");
  ASSERT_EQ(t.requests.size(), 2u);
  EXPECT_EQ(t.requests[0].end, 3) << "end is inclusive";
  EXPECT_EQ(t.requests[1].alignment, 4);
  EXPECT_EQ(format_pool_csv(t, {0, 4}),
            "buffer,start,end,size,alignment,offset\nx,0,2,4,2,0\ny,3,3,8,4,4\n");
  const PoolTable with_offsets =
      parse_pool_csv("id,lower,upper,size,offset\na,0,1,4,16\n", "t.csv");
  EXPECT_EQ(format_pool_csv(with_offsets, {0}), "id,lower,upper,size,offset\na,0,1,4,0\n");
}

TEST(PoolCsv, BlankLinesAtTheEndAreHarmless) {
  // As MiniMalloc reads them: an empty line ends the table (with CRLF, spaces or tabs).
  for (const char* tail : {"\n", "\n\n", "\n\n\n", "\r\n\r\n", "\n  \n\t\n", "\n\n \r\n"}) {
    const PoolTable t =
        parse_pool_csv(std::string("id,lower,upper,size\na,0,1,4\nb,1,2,8") + tail, "t.csv");
    EXPECT_EQ(t.requests.size(), 2u) << ::testing::PrintToString(tail);
  }
}

struct BadCsv {
  const char* name;
  const char* text;
  const char* where;
  const char* reason;
};

class RejectsBadCsv : public ::testing::TestWithParam<BadCsv> {};

TEST_P(RejectsBadCsv, NamesTheLine) {
  const BadCsv& bad = GetParam();
  testing::expect_input_error([&] { parse_pool_csv(bad.text, "in.csv"); }, bad.where, bad.reason,
                              "in.csv");
}

INSTANTIATE_TEST_SUITE_P(
    PoolCsv, RejectsBadCsv,
    ::testing::Values(
        BadCsv{"missing_column", "id,lower,size\n0,1,2\n", "line 1", "missing column 'upper'"},
        BadCsv{"unknown_column", "id,lower,upper,size,colour\n", "line 1, column colour",
               "unknown column"},
        BadCsv{"not_a_number", "id,lower,upper,size\n0,0,2,4\n1,0,2,4k\n", "line 3, column size",
               "expected an integer, got '4k'"},
        BadCsv{"zero_size", "id,lower,upper,size\n0,0,2,0\n", "line 2, column size",
               "must be positive"},
        BadCsv{"negative_size", "id,lower,upper,size\n0,0,2,-3\n", "line 2, column size",
               "must be positive"},
        BadCsv{"empty_lifetime", "id,lower,upper,size\n0,5,5,1\n", "line 2, column lower",
               "lower 5 is not below upper 5"},
        BadCsv{"duplicate_id", "id,lower,upper,size\n7,0,1,1\n7,1,2,1\n", "line 3, column id",
               "duplicate id '7'"},
        BadCsv{"field_count", "id,lower,upper,size\n0,0,1\n", "line 2",
               "3 fields, the header has 4"},
        BadCsv{"bad_alignment", "id,lower,upper,size,alignment\n0,0,1,1,0\n",
               "line 2, column alignment", "must be positive"},
        BadCsv{"empty_file", "", "line 1", "empty file"},
        // MiniMalloc would drop every row after an empty line without a word.
        BadCsv{"rows_after_blank_line", "id,lower,upper,size\n0,0,1,1\n\n1,0,1,1\n\n2,0,1,1\n\n",
               "line 3",
               "empty line before 2 more rows (lines 4-6): MiniMalloc stops reading "
               "at the first empty line, so they would be ignored"},
        BadCsv{"row_after_blank_crlf_line", "id,lower,upper,size\r\n0,0,1,1\r\n \r\n1,0,1,1",
               "line 3", "empty line before 1 more row (line 4)"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

}  // namespace
}  // namespace shardplan
