// The call passes (micro-batches, recomputes, StepTrace events) on hand-built calls
// (times in µs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using ::testing::ElementsAre;

ModuleCall call(int64_t module, double begin, double end, int64_t tid = 1) {
  return {.module = module, .begin = begin, .end = end, .tid = tid};
}

TEST(KinetoCalls, EachCallOfTheFirstModuleStartsAMicroBatch) {
  // Module 1 is called twice in the first pass (a shared layer); the calls come unsorted.
  const std::vector<ModuleCall> numbered =
      number_passes({call(1, 40, 45), call(0, 30, 50), call(1, 10, 15), call(0, 0, 25),
                     call(1, 20, 25), call(1, -5, -1)});
  std::vector<double> begins;
  std::vector<int64_t> micro_batches;
  for (const ModuleCall& c : numbered) {
    begins.push_back(c.begin);
    micro_batches.push_back(c.micro_batch);
  }
  EXPECT_THAT(begins, ElementsAre(-5, 0, 10, 20, 30, 40));
  EXPECT_THAT(micro_batches, ElementsAre(0, 0, 0, 0, 1, 1));
}

TEST(KinetoCalls, RecomputesTakeTheMicroBatchOfTheBackwardAroundThem) {
  std::vector<ModuleCall> backward = {call(1, 100, 200), call(0, 210, 250), call(1, 300, 400)};
  backward[2].micro_batch = 1;
  const Recomputes recomputes = number_recomputes(
      {call(1, 310, 320, 2),   // inside module 1's second backward
       call(1, 325, 330, 2),   // the same region, re-run further: merged
       call(1, 335, 340, 3),   // another thread: its own region
       call(2, 305, 308, 2)},  // no backward of its own: the last one opened before it
      backward);
  ASSERT_EQ(recomputes.calls.size(), 3u);
  EXPECT_EQ(recomputes.calls[0].micro_batch, 1);
  EXPECT_EQ(recomputes.calls[0].begin, 310);
  EXPECT_EQ(recomputes.calls[0].end, 330);
  EXPECT_EQ(recomputes.calls[1].tid, 3);
  EXPECT_EQ(recomputes.calls[2].module, 2);
  EXPECT_EQ(recomputes.calls[2].micro_batch, 1);
  EXPECT_EQ(recomputes.by_thread.innermost(2, 328), 0);
  EXPECT_EQ(recomputes.by_thread.innermost(3, 336), 1);
  EXPECT_EQ(recomputes.by_thread.innermost(3, 328), std::nullopt);
}

TEST(KinetoCalls, StepEventsInTimeOrderWithTiesBrokenByKind) {
  ModuleCalls calls;
  calls.forward = number_forward_calls({call(1, 10, 20), call(0, 0, 50)});
  calls.backward.calls = index_calls({call(1, 60, 80), call(0, 80, 100)});
  calls.recompute = number_recomputes({call(1, 60, 65, 2)}, calls.backward.calls.calls);
  const StepEvents step = build_step_events({"Embed_0", "Block_0"}, calls, {}, 100.0);

  using K = StepEventKind;
  std::vector<std::pair<K, int64_t>> events;
  for (const StepEvent& e : step.trace.events) events.emplace_back(e.kind, e.module);
  EXPECT_THAT(events,
              ElementsAre(std::pair{K::pre_forward, 0}, std::pair{K::pre_forward, 1},
                          std::pair{K::post_forward, 1}, std::pair{K::post_forward, 0},
                          std::pair{K::pre_backward, 1},  // before its recompute
                          std::pair{K::recompute_forward, 1},
                          std::pair{K::pre_backward, 0},  // before the post at 80
                          std::pair{K::post_backward, 1}, std::pair{K::post_backward, 0},
                          // without callback ranges, the backward's end stands in
                          std::pair{K::final_callback, -1}, std::pair{K::optimizer_step, -1}));
  EXPECT_THAT(step.host_times, ElementsAre(0, 10, 20, 50, 60, 60, 80, 80, 100, 100, 100));
  EXPECT_THAT(step.trace.modules, ElementsAre("Embed_0", "Block_0"));
  EXPECT_THAT(step.trace.checkpointed, ElementsAre(false, true));
  EXPECT_EQ(step.trace.recompute, Recompute::full);
  EXPECT_EQ(step.trace.grad_accum, 1);
}

}  // namespace
}  // namespace shardplan::kineto
