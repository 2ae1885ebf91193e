// Offset assignment on large inputs: the synthetic training traces (determinism and
// shape), the time-order placement that stands in when nothing else finishes, local
// repair (valid, never worse, reproducible), independent time windows, and the time limit
// reached in every phase (validity only: speed is measured in tests/bench/pack_bench.cc).
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <tuple>

#include "pool/placement.h"
#include "pool/pool.h"
#include "pool/synthetic.h"

namespace shardplan {
namespace {

void expect_valid(const std::vector<PoolRequest>& requests, const PoolAssignment& result,
                  int64_t alignment = 1) {
  ASSERT_EQ(result.status, PackStatus::solved);
  const auto error = check_packing(requests, result.offsets, result.size_bytes, alignment);
  EXPECT_FALSE(error.has_value()) << error->message;
  int64_t height = 0;
  for (std::size_t i = 0; i < requests.size(); ++i)
    height = std::max(height, result.offsets[i] + requests[i].bytes);
  EXPECT_EQ(result.size_bytes, height);
  EXPECT_GE(result.size_bytes, live_bytes_lower_bound(requests, alignment));
}

int64_t peak_live_buffers(const std::vector<PoolRequest>& requests) {
  std::vector<std::pair<int64_t, int>> events;
  for (const PoolRequest& r : requests) {
    events.emplace_back(r.begin, 1);
    events.emplace_back(r.end, -1);
  }
  std::sort(events.begin(), events.end());
  int64_t live = 0, peak = 0;
  for (const auto& [time, delta] : events) peak = std::max(peak, live += delta);
  return peak;
}

TEST(SyntheticTrace, SameSeedSameTraceOtherSeedOtherTrace) {
  const auto a = synthetic_training_trace({.buffers = 5000, .seed = 7});
  const auto b = synthetic_training_trace({.buffers = 5000, .seed = 7});
  const auto c = synthetic_training_trace({.buffers = 5000, .seed = 8});
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].bytes, b[i].bytes);
    EXPECT_EQ(a[i].begin, b[i].begin);
    EXPECT_EQ(a[i].end, b[i].end);
  }
  bool differs = a.size() != c.size();
  for (std::size_t i = 0; !differs && i < a.size(); ++i) differs = a[i].bytes != c[i].bytes;
  EXPECT_TRUE(differs);
}

TEST(SyntheticTrace, HasTheSizeAndShapeOfATrainingStep) {
  for (const int experts : {0, 8, 64}) {
    for (const int64_t wanted : {2000, 20000, 100000}) {
      const auto trace =
          synthetic_training_trace({.buffers = wanted, .seed = 3, .experts = experts});
      SCOPED_TRACE(testing::Message() << "experts " << experts << ", " << wanted << " buffers");
      // Whole layers and micro-batches: within a layer's worth of the request (a layer of
      // 64 experts is about 1 100 buffers, one micro-batch of the model several thousand).
      EXPECT_LT(std::abs(static_cast<int64_t>(trace.size()) - wanted),
                std::max<int64_t>(wanted * 3 / 10, 1200));
      int64_t long_lived = 0;
      for (const PoolRequest& r : trace) {
        ASSERT_GT(r.bytes, 0);
        ASSERT_LT(r.begin, r.end);
        long_lived += r.end - r.begin > 20;
      }
      // Saved activations (live until the backward) are a minority; most buffers are
      // temporaries, workspaces and gradients that live a few ops.
      EXPECT_GT(long_lived, static_cast<int64_t>(trace.size()) / 20);
      EXPECT_LT(long_lived, static_cast<int64_t>(trace.size()) / 2);
    }
  }
}

TEST(SyntheticTrace, PipelinedMicroBatchesOverlapInTime) {
  const auto sequential = synthetic_training_trace({.buffers = 20000, .seed = 2});
  const auto pipelined = synthetic_training_trace({.buffers = 20000, .seed = 2, .pipelined = true});
  ASSERT_EQ(sequential.size(), pipelined.size());
  // Two micro-batches' saved activations live at once in 1F1B.
  EXPECT_GT(peak_live_buffers(pipelined), peak_live_buffers(sequential));
  EXPECT_GE(live_bytes_lower_bound(pipelined), live_bytes_lower_bound(sequential));
}

// The independent time windows of a trace: no buffer is live across their ends.
int time_windows(const std::vector<PoolRequest>& requests) {
  std::vector<std::pair<int64_t, int64_t>> lifetimes;
  for (const PoolRequest& r : requests) lifetimes.emplace_back(r.begin, r.end);
  std::sort(lifetimes.begin(), lifetimes.end());
  int windows = 0;
  int64_t reach = INT64_MIN;
  for (const auto& [begin, end] : lifetimes) {
    windows += begin >= reach;
    reach = std::max(reach, end);
  }
  return windows;
}

TEST(SyntheticTrace, CompiledStepIsOneWindowOfLongLivedBuffersUnderManyShortOnes) {
  for (const int experts : {0, 8}) {
    for (const bool pipelined : {false, true}) {
      SCOPED_TRACE(testing::Message() << "experts " << experts << ", pipelined " << pipelined);
      const SyntheticTraceOptions options{
          .buffers = 20000, .seed = 3, .experts = experts, .pipelined = pipelined};
      SyntheticTraceOptions compiled = options;
      compiled.compiled_step = true;
      const auto trace = synthetic_training_trace(compiled);
      EXPECT_LT(std::abs(static_cast<int64_t>(trace.size()) - 20000), 6000);
      // Micro-batches one after the other are windows of their own (this dense model
      // gives several); compiled, the gradient accumulators (and the step's inputs) live
      // across them all.
      if (experts == 0 && !pipelined) {
        EXPECT_GT(time_windows(synthetic_training_trace(options)), 1);
      }
      EXPECT_EQ(time_windows(trace), 1);
      int64_t step_end = 0;
      for (const PoolRequest& r : trace) {
        ASSERT_GT(r.bytes, 0);
        ASSERT_LT(r.begin, r.end);
        step_end = std::max(step_end, r.end);
      }
      // At the peak, buffers living over a tenth of the step or more hold most of the
      // bytes (SOMAS traces: half to two thirds); most buffers live a few ops.
      std::vector<std::tuple<int64_t, int, std::size_t>> events;  // frees first
      for (std::size_t i = 0; i < trace.size(); ++i) {
        events.emplace_back(trace[i].begin, 1, i);
        events.emplace_back(trace[i].end, 0, i);
      }
      std::sort(events.begin(), events.end());
      int64_t live = 0, long_lived = 0, peak = 0, long_lived_at_peak = 0;
      for (const auto& [time, allocate, i] : events) {
        const int64_t bytes = allocate ? trace[i].bytes : -trace[i].bytes;
        live += bytes;
        if (trace[i].end - trace[i].begin >= step_end / 10) long_lived += bytes;
        if (live > peak) {
          peak = live;
          long_lived_at_peak = long_lived;
        }
      }
      EXPECT_EQ(peak, live_bytes_lower_bound(trace));
      EXPECT_GT(long_lived_at_peak, peak / 2);
      const auto short_lived = std::count_if(
          trace.begin(), trace.end(), [](const PoolRequest& r) { return r.end - r.begin <= 4; });
      EXPECT_GT(short_lived, static_cast<int64_t>(trace.size()) * 2 / 3);
      const auto whole_step = std::count_if(trace.begin(), trace.end(), [&](const PoolRequest& r) {
        return r.begin == 0 && r.end == step_end;
      });
      EXPECT_GE(whole_step, 1);
    }
  }
}

TEST(PlaceOnline, HandWorkedExampleReusesTheFreedBlock) {
  // A [0,2) 10 bytes at 0; B [1,3) 5 bytes on top at 10; at 2 A is freed and C [2,4),
  // 10 bytes, takes its block: height 15, the lower bound.
  const std::vector<PoolRequest> requests = {{.bytes = 10, .begin = 0, .end = 2},
                                             {.bytes = 5, .begin = 1, .end = 3},
                                             {.bytes = 10, .begin = 2, .end = 4}};
  const PoolAssignment result = pool::place_online(requests, 1);
  EXPECT_EQ(result.offsets, (std::vector<int64_t>{0, 10, 0}));
  EXPECT_EQ(result.size_bytes, 15);
}

TEST(PlaceOnline, ValidOnRandomAlignedInputs) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<PoolRequest> requests;
    const int n = std::uniform_int_distribution<int>(1, 60)(rng);
    for (int i = 0; i < n; ++i) {
      const int64_t begin = std::uniform_int_distribution<int>(0, 40)(rng);
      requests.push_back({.bytes = std::uniform_int_distribution<int>(0, 5000)(rng),
                          .begin = begin,
                          .end = begin + std::uniform_int_distribution<int>(0, 12)(rng),
                          .alignment = trial % 3 == 0 ? 512 : 0});
    }
    const PoolAssignment result = pool::place_online(requests, 64);
    ASSERT_FALSE(check_packing(requests, result.offsets, result.size_bytes, 64).has_value())
        << "trial " << trial;
  }
}

TEST(Repair, NeverWorseValidAndReproducible) {
  // Pipelined micro-batches: best fit ends above the bound, the case repair is for.
  const auto requests =
      synthetic_training_trace({.buffers = 3000, .seed = 2, .experts = 8, .pipelined = true});
  const int64_t bound = live_bytes_lower_bound(requests);
  const PoolAssignment start =
      make_best_fit_assigner()->assign(requests, {.alignment = 1, .node_limit = 1});
  ASSERT_GT(start.size_bytes, bound);
  const auto forever = pool::Clock::time_point::max();
  const PoolAssignment once = pool::repair(requests, start, bound, 1, forever, 3000, 1);
  const PoolAssignment again = pool::repair(requests, start, bound, 1, forever, 3000, 1);
  expect_valid(requests, once);
  EXPECT_LE(once.size_bytes, start.size_bytes);
  EXPECT_EQ(once.offsets, again.offsets);
}

TEST(Repair, LowersAHeightSetByOneMisplacedBuffer) {
  // Times 0..4: x [0,2) 4 B, y [2,4) 4 B, z [0,4) 4 B. Optimal 8 (x and y stacked in time
  // at one offset, z beside them). Start: z at 0, x at 4, y at 8 (height 12).
  const std::vector<PoolRequest> requests = {{.bytes = 4, .begin = 0, .end = 2},
                                             {.bytes = 4, .begin = 2, .end = 4},
                                             {.bytes = 4, .begin = 0, .end = 4}};
  PoolAssignment start;
  start.offsets = {4, 8, 0};
  start.size_bytes = 12;
  ASSERT_FALSE(check_packing(requests, start.offsets, 12, 1).has_value());
  const PoolAssignment result = pool::repair(requests, start, live_bytes_lower_bound(requests), 1,
                                             pool::Clock::time_point::max(), 50, 1);
  expect_valid(requests, result);
  EXPECT_EQ(result.size_bytes, 8);
  EXPECT_TRUE(result.proven_optimal);
}

TEST(AutoPack, IndependentTimeWindowsEachPackedToTheirOptimum) {
  // Two windows, [0,10) and [10,20), that no buffer crosses; the pool is as high as the
  // higher window's optimum (worked by hand: 7 and 9).
  const std::vector<PoolRequest> requests = {
      {.bytes = 4, .begin = 0, .end = 5},   {.bytes = 3, .begin = 0, .end = 10},
      {.bytes = 4, .begin = 5, .end = 10},  {.bytes = 5, .begin = 10, .end = 20},
      {.bytes = 4, .begin = 10, .end = 15}, {.bytes = 4, .begin = 15, .end = 20},
      {.bytes = 0, .begin = 3, .end = 4}};
  const PoolAssignment result =
      make_auto_assigner()->assign(requests, {.alignment = 1, .node_limit = 10000});
  expect_valid(requests, result);
  EXPECT_EQ(result.size_bytes, 9);
}

TEST(AutoPack, FsdpShapedTracesReachTheBound) {
  // Micro-batches one after the other are independent time windows; each packs to the
  // bound (measured, docs/user-guide.md: pack on large inputs).
  const auto requests = synthetic_training_trace({.buffers = 10000, .seed = 2});
  const PoolAssignment result =
      make_auto_assigner()->assign(requests, {.alignment = 1, .node_limit = 300});
  expect_valid(requests, result);
  EXPECT_EQ(result.size_bytes, live_bytes_lower_bound(requests));
}

TEST(AutoPack, NeverAboveBestFit) {
  const auto requests =
      synthetic_training_trace({.buffers = 3000, .seed = 2, .experts = 8, .pipelined = true});
  const PackOptions options{.alignment = 1, .node_limit = 5000};
  const PoolAssignment greedy = make_best_fit_assigner()->assign(requests, options);
  const PoolAssignment result = make_auto_assigner()->assign(requests, options);
  expect_valid(requests, result);
  EXPECT_LE(result.size_bytes, greedy.size_bytes);
}

TEST(AutoPack, MoreOrdersPastTwoThousandBuffers) {
#ifdef SHARDPLAN_SANITIZED
  GTEST_SKIP() << "quality within a time limit: the sanitizers slow best fit several-fold";
#endif
  // A compiled MoE step in a pipeline stage: the three classic orders end 0.35 % over the
  // bound; taking each lifetime octave by start (one of the eight auto's best fit tries
  // past 2 000 buffers) ends 0.016 % over. The limit is a safety net: the eight orders take
  // a fraction of a second here.
  const auto requests =
      synthetic_training_trace({.buffers = 3000, .seed = 2, .experts = 8, .pipelined = true});
  ASSERT_GT(requests.size(), 2000u);
  const int64_t bound = live_bytes_lower_bound(requests);
  const PackOptions options{.alignment = 1, .time_limit_seconds = 60};
  const PoolAssignment three = make_best_fit_assigner()->assign(requests, options);
  const PoolAssignment eight = make_best_fit_assigner(/*refine=*/true)->assign(requests, options);
  expect_valid(requests, eight);
  EXPECT_GT(static_cast<double>(three.size_bytes), 1.003 * static_cast<double>(bound));
  EXPECT_LT(static_cast<double>(eight.size_bytes), 1.001 * static_cast<double>(bound));
}

TEST(PackTimeLimit, EveryAlgorithmReturnsAValidPlacementWhenTimeRunsOut) {
  // 30 000 buffers with thousands live at once: best fit needs seconds, so a millisecond
  // limit stops every phase early; what comes back must still be a valid placement.
  const auto requests = synthetic_training_trace({.buffers = 30000, .seed = 2, .experts = 64});
  for (const std::string& algorithm : offset_assigner_names()) {
    SCOPED_TRACE(algorithm);
    const PoolAssignment result = make_offset_assigner(algorithm)->assign(
        requests, {.alignment = 256, .time_limit_seconds = 0.001});
    expect_valid(requests, result, 256);
  }
}

}  // namespace
}  // namespace shardplan
