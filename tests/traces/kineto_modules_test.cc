// Module order from nn.Module ranges, and the choice of module source, on hand-built
// event lists (times in µs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KinetoEvent range(std::string_view name, std::string_view cat, int64_t tid, double ts, double dur) {
  return {.name = name, .cat = cat, .tid = tid, .ts = ts, .dur = dur};
}

KinetoEvent module(std::string_view name, int64_t tid, double ts, double dur) {
  return range(name, "python_function", tid, ts, dur);
}

const KinetoStep kStep{"ProfilerStep#1", 0, 1000, 1};

//   thread 1  |DDP_0 ..........................................|
//              |Net_0 ........................................|
//                |A_0 .............|   |B_0 ..........|
//                  |Lin_0 ..|
//   thread 2 (autograd)                                 |Lin_0|  |Wrap_0 .....|
//                                                                  |B_0 ..|
std::vector<KinetoEvent> wrapped_net() {
  return {module("nn.Module: DDP_0", 1, 0, 100),   module("nn.Module: Net_0", 1, 1, 98),
          module("nn.Module: A_0", 1, 10, 30),     module("nn.Module: Lin_0", 1, 12, 8),
          module("nn.Module: B_0", 1, 50, 40),     module("nn.Module: Lin_0", 2, 200, 10),
          module("nn.Module: Wrap_0", 2, 300, 50), module("nn.Module: B_0", 2, 310, 20)};
}

TEST(KinetoModules, TracedLevelIsWhereTheModelBranchesBelowItsWrappers) {
  const ModuleOrder order = make_nn_module_source()->find_order(wrapped_net(), kStep, 0);
  EXPECT_EQ(order.source, "nn.Module ranges (with_stack)");
  EXPECT_THAT(order.modules, ElementsAre("A_0", "B_0"));
  ASSERT_EQ(order.forward_calls.size(), 2u);
  EXPECT_EQ(order.forward_calls[0].module, 0);
  EXPECT_EQ(order.forward_calls[0].begin, 10);
  EXPECT_EQ(order.forward_calls[0].end, 40);
  EXPECT_EQ(order.forward_calls[1].module, 1);
  EXPECT_TRUE(order.backward_windows.empty());  // spanned by autograd ops later
  EXPECT_TRUE(order.warnings.empty());
}

TEST(KinetoModules, DepthDescendsIntoModulesThatHaveChildren) {
  const ModuleOrder order = make_nn_module_source()->find_order(wrapped_net(), kStep, 1);
  EXPECT_THAT(order.modules, ElementsAre("Lin_0", "B_0"));  // B_0 has no children: kept
}

TEST(KinetoModules, RangesOnOtherThreadsAreRecomputesOfTheTracedModuleAbove) {
  const ModuleOrder order = make_nn_module_source()->find_order(wrapped_net(), kStep, 0);
  ASSERT_EQ(order.recompute_calls.size(), 2u);
  // Lin_0 is inside A_0's subtree; Wrap_0 is no traced module, B_0 inside it is.
  EXPECT_EQ(order.recompute_calls[0].module, 0);
  EXPECT_EQ(order.recompute_calls[0].begin, 200);
  EXPECT_EQ(order.recompute_calls[0].tid, 2);
  EXPECT_EQ(order.recompute_calls[1].module, 1);
  EXPECT_EQ(order.recompute_calls[1].begin, 310);
}

TEST(KinetoModules, RangesOutsideTheStepAreLeftOut) {
  const KinetoStep later{"ProfilerStep#2", 45, 1000, 1};
  const ModuleOrder order = make_nn_module_source()->find_order(wrapped_net(), later, 0);
  EXPECT_THAT(order.modules, ElementsAre("B_0"));
}

TEST(KinetoModules, WithoutModuleRangesTheSourceIsNoneAndSaysWhy) {
  const std::vector<KinetoEvent> events = {range("aten::mm", "cpu_op", 1, 10, 5)};
  const ModuleOrder order = make_nn_module_source()->find_order(events, kStep, 0);
  EXPECT_EQ(order.source, "none");
  EXPECT_TRUE(order.modules.empty());
  ASSERT_EQ(order.warnings.size(), 1u);
  EXPECT_THAT(order.warnings[0], HasSubstr("with_stack=True"));
}

TEST(KinetoModules, Fsdp2UnitsNeedAPreForwardOrPreBackwardInTheStep) {
  const auto fsdp = [](std::string_view name, double ts) {
    return std::vector<KinetoEvent>{range(name, "user_annotation", 1, ts, 5)};
  };
  EXPECT_TRUE(has_fsdp2_units(fsdp("FSDP::pre_forward (layers.0)", 10), kStep));
  EXPECT_TRUE(has_fsdp2_units(fsdp("FSDP::pre_backward", 10), kStep));
  EXPECT_FALSE(has_fsdp2_units(fsdp("FSDP::post_forward (layers.0)", 10), kStep));
  EXPECT_FALSE(has_fsdp2_units(fsdp("FSDP::pre_forward (layers.0)", 2000), kStep));
  EXPECT_FALSE(has_fsdp2_units(wrapped_net(), kStep));
}

}  // namespace
}  // namespace shardplan::kineto
