// Reading a step trace: sizes bounded before anything is allocated for them.
#include "traces/step_trace.h"

#include <gtest/gtest.h>

#include "models/limits.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

// 100 000 modules at grad_accum 2^20 asked for 10^11 counters (bad_alloc) before any
// event was checked; traced modules are FSDP units, so the plan's bound on units ×
// micro-batches applies.
TEST(StepTraceFile, ModulesTimesMicroBatchesIsBounded) {
  nlohmann::json modules = nlohmann::json::array();
  for (int m = 0; m < 100'000; ++m) modules.push_back("m" + std::to_string(m));
  const nlohmann::json j = {{"modules", modules},
                            {"checkpointed", std::vector<bool>(100'000, false)},
                            {"grad_accum", limits::kMaxGradAccum},
                            {"recompute", "none"},
                            {"events", nlohmann::json::array()}};
  testing::expect_input_error([&] { step_trace_from_json(j, "step.json"); }, "/grad_accum",
                              "100000 modules × 1048576 micro-batches is more than the 200000 "
                              "units × micro-batches a plan may have",
                              "step.json");
}

}  // namespace
}  // namespace shardplan
