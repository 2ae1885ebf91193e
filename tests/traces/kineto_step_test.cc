// Step choice on hand-built event lists (times in µs).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "tests/expect_input_error.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

KinetoEvent range(std::string_view name, std::string_view cat, int64_t tid, double ts, double dur) {
  return {.name = name, .cat = cat, .tid = tid, .ts = ts, .dur = dur};
}

// Two steps, the later one first in the file, and the GPU's copy of a step range.
std::vector<KinetoEvent> two_steps() {
  return {range("ProfilerStep#5", "user_annotation", 1, 200, 100),
          range("ProfilerStep#4", "user_annotation", 1, 0, 150),
          range("ProfilerStep#5", "gpu_user_annotation", 7, 500, 100)};
}

TEST(KinetoStep, TheLastStepInTimeByDefault) {
  const StepChoice choice = choose_step(two_steps(), "", "t.json");
  EXPECT_THAT(choice.steps, ElementsAre("ProfilerStep#4", "ProfilerStep#5"));
  EXPECT_EQ(choice.step.name, "ProfilerStep#5");
  EXPECT_EQ(choice.step.begin, 200);
  EXPECT_EQ(choice.step.end, 300);  // the CPU range, not the GPU annotation
  EXPECT_EQ(choice.step.tid, 1);
  EXPECT_TRUE(choice.warnings.empty());
}

TEST(KinetoStep, ANamedStepByNumberOrFullName) {
  for (const std::string wanted : {"4", "ProfilerStep#4"}) {
    const StepChoice choice = choose_step(two_steps(), wanted, "t.json");
    EXPECT_EQ(choice.step.name, "ProfilerStep#4") << wanted;
    EXPECT_EQ(choice.step.end, 150) << wanted;
  }
}

TEST(KinetoStep, AnUnknownStepNamesThoseThere) {
  testing::expect_input_error([] { choose_step(two_steps(), "6", "t.json"); }, "--step",
                              "no step 'ProfilerStep#6' in the trace (it has 'ProfilerStep#4', "
                              "'ProfilerStep#5')",
                              "t.json");
}

TEST(KinetoStep, WithoutStepsTheWholeTraceOnTheBusiestThreadThatIsNotAutograd) {
  const std::vector<KinetoEvent> events = {
      range("aten::mm", "cpu_op", 1, 10, 5),
      range("aten::add", "cpu_op", 1, 20, 5),
      range("autograd::engine::evaluate_function: MmBackward0", "cpu_op", 2, 40, 10),
      range("aten::mm", "cpu_op", 2, 41, 2),
      range("aten::mm", "cpu_op", 2, 44, 2),
      range("cudaLaunchKernel", "cuda_runtime", 1, 2, 1),  // not a CPU op: no bound
      range("gemm", "kernel", 7, 60, 40),                  // GPU: no bound either
  };
  const StepChoice choice = choose_step(events, "", "t.json");
  EXPECT_TRUE(choice.steps.empty());
  EXPECT_EQ(choice.step.name, "whole trace");
  EXPECT_EQ(choice.step.tid, 1);  // thread 2 runs more ops, but it is autograd's
  EXPECT_EQ(choice.step.begin, 10);
  EXPECT_EQ(choice.step.end, 50);
  ASSERT_EQ(choice.warnings.size(), 1u);
  EXPECT_THAT(choice.warnings[0], HasSubstr("no ProfilerStep# ranges"));
}

TEST(KinetoStep, WithoutStepsOrCpuOpsItIsAnError) {
  const std::vector<KinetoEvent> events = {range("gemm", "kernel", 7, 60, 40)};
  testing::expect_input_error([&] { choose_step(events, "", "t.json"); }, "traceEvents",
                              "no CPU ops", "t.json");
}

}  // namespace
}  // namespace shardplan::kineto
