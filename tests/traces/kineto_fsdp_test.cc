// Module order from FSDP2's record_function ranges, on hand-built event lists (times in
// µs; thread 1 runs the step, thread 2 is autograd's).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KinetoEvent range(std::string_view name, int64_t tid, double ts, double dur) {
  return {.name = name, .cat = "user_annotation", .tid = tid, .ts = ts, .dur = dur};
}

const KinetoStep kStep{"ProfilerStep#1", 0, 1000, 1};

// A root unit "" and layers.0. Thread 1 runs both forwards; thread 2 runs two backward
// passes, each opened by the root's pre_backward. In the first, layers.0's forward is
// re-run (checkpointed) and the root's window gets no post-backward range.
std::vector<KinetoEvent> two_backward_passes() {
  return {range("FSDP::pre_forward", 1, 0, 2),
          range("FSDP::pre_forward (layers.0)", 1, 10, 2),
          range("FSDP::post_forward (layers.0)", 1, 30, 2),
          range("FSDP::post_forward", 1, 40, 2),
          range("FSDP::pre_backward", 2, 90, 2),
          range("FSDP::pre_backward (layers.0)", 2, 95, 2),
          range("FSDP::pre_forward (layers.0)", 2, 100, 2),
          range("FSDP::post_forward (layers.0)", 2, 120, 2),
          range("FSDP::post_backward_reshard (layers.0)", 2, 130, 5),
          range("FSDP::post_backward_reduce (layers.0)", 2, 140, 10),
          range("FSDP::root_post_backward_callback", 2, 200, 5),
          range("FSDP::pre_backward", 2, 290, 2),
          range("FSDP::pre_backward (layers.0)", 2, 300, 2),
          range("FSDP::post_backward_reduce (layers.0)", 2, 320, 5),
          range("FSDP::post_backward_reshard", 2, 330, 5)};
}

TEST(KinetoFsdp, UnitsInForwardOrderRootFirst) {
  const ModuleOrder order = make_fsdp2_source()->find_order(two_backward_passes(), kStep, 0);
  EXPECT_THAT(order.source, HasSubstr("FSDP2 record_function ranges"));
  EXPECT_THAT(order.modules, ElementsAre("", "layers.0"));
  ASSERT_EQ(order.forward_calls.size(), 2u);  // as their post_forward closed them
  EXPECT_EQ(order.forward_calls[0].module, 1);
  EXPECT_EQ(order.forward_calls[0].begin, 10);
  EXPECT_EQ(order.forward_calls[0].end, 32);
  EXPECT_EQ(order.forward_calls[1].module, 0);
  EXPECT_EQ(order.forward_calls[1].end, 42);
  EXPECT_THAT(order.final_callbacks, ElementsAre(200));
}

TEST(KinetoFsdp, AForwardOffTheStepsThreadIsARecompute) {
  const ModuleOrder order = make_fsdp2_source()->find_order(two_backward_passes(), kStep, 0);
  ASSERT_EQ(order.recompute_calls.size(), 1u);
  EXPECT_EQ(order.recompute_calls[0].module, 1);
  EXPECT_EQ(order.recompute_calls[0].begin, 100);
  EXPECT_EQ(order.recompute_calls[0].end, 122);
  EXPECT_EQ(order.recompute_calls[0].tid, 2);
}

TEST(KinetoFsdp, BackwardWindowsCloseAtTheLastPostBackwardBeforeTheNextPreBackward) {
  const ModuleOrder order = make_fsdp2_source()->find_order(two_backward_passes(), kStep, 0);
  struct Window {
    int64_t module, micro_batch;
    double begin, end;
  };
  const std::vector<Window> expected = {
      {0, 0, 90, 92},    // the root's first: no post-backward before its next pre_backward
      {1, 0, 95, 150},   // reshard and reduce; not the next pass's reduce at 320
      {0, 1, 290, 335},  // the root's pre_backward opens each pass
      {1, 1, 300, 325}};
  ASSERT_EQ(order.backward_windows.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const ModuleCall& w = order.backward_windows[i];
    EXPECT_EQ(w.module, expected[i].module) << i;
    EXPECT_EQ(w.micro_batch, expected[i].micro_batch) << i;
    EXPECT_EQ(w.begin, expected[i].begin) << i;
    EXPECT_EQ(w.end, expected[i].end) << i;
  }
  ASSERT_EQ(order.warnings.size(), 1u);
  EXPECT_THAT(order.warnings[0], HasSubstr("1 FSDP::pre_backward range(s) have no post-backward"));
}

TEST(KinetoFsdp, BareRangeNamesReadAsTheRootAndSaySo) {
  const std::vector<KinetoEvent> events = {
      range("FSDP::pre_forward", 1, 0, 2), range("FSDP::post_forward", 1, 10, 2),
      range("FSDP::pre_forward", 1, 20, 2), range("FSDP::post_forward", 1, 30, 2)};
  const ModuleOrder order = make_fsdp2_source()->find_order(events, kStep, 0);
  EXPECT_THAT(order.modules, ElementsAre(""));
  EXPECT_EQ(order.forward_calls.size(), 2u);
  ASSERT_EQ(order.warnings.size(), 1u);
  EXPECT_THAT(order.warnings[0], HasSubstr("carry no module names"));
}

TEST(KinetoFsdp, ModuleRangesInABackwardWindowOffTheStepsThreadAreRecomputes) {
  const std::vector<KinetoEvent> events = {
      {.name = "nn.Module: Block_0", .cat = "python_function", .tid = 2, .ts = 100, .dur = 20},
      {.name = "nn.Module: Block_0", .cat = "python_function", .tid = 1, .ts = 110, .dur = 5},
      {.name = "nn.Module: Block_0", .cat = "python_function", .tid = 2, .ts = 400, .dur = 5}};
  const CallIndex backward = index_calls({{.module = 1, .begin = 95, .end = 150}});
  const std::vector<ModuleCall> recomputes =
      make_fsdp2_source()->recomputes_in_backward(events, kStep, backward);
  ASSERT_EQ(recomputes.size(), 1u);  // not the step's thread, not outside every window
  EXPECT_EQ(recomputes[0].module, 1);
  EXPECT_EQ(recomputes[0].begin, 100);
  EXPECT_EQ(recomputes[0].end, 120);
  EXPECT_EQ(recomputes[0].tid, 2);
  EXPECT_TRUE(make_nn_module_source()->recomputes_in_backward(events, kStep, backward).empty());
}

}  // namespace
}  // namespace shardplan::kineto
