// Reading timeline.json: every time is a time within a step of at most a day, so no
// reader (compare, calibrate) works on 1e308-second ops.
#include "traces/timeline.h"

#include <gtest/gtest.h>

#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

nlohmann::json two_op_timeline() {
  Timeline t{.source = "measured",
             .model = "tiny",
             .cluster = "dgx-h100",
             .num_gpus = 2,
             .allocator = "caching"};
  t.ops.push_back({.op = 0, .name = "fwd", .stream = "compute", .kind = "forward", .end = 0.5});
  t.ops.push_back({.op = 1, .name = "ag", .stream = "ag", .kind = "all_gather", .end = 0.25});
  t.summary.step_seconds = 0.5;
  t.memory.push_back({0.1, 100, 200});
  return timeline_to_json(t);
}

TEST(TimelineFile, ReadsBackWhatItWrites) {
  const Timeline t = timeline_from_json(two_op_timeline(), "t.json");
  ASSERT_EQ(t.ops.size(), 2u);
  EXPECT_EQ(t.ops[0].end, 0.5);
  EXPECT_EQ(t.summary.step_seconds, 0.5);
}

TEST(TimelineFile, OpTimesAreTimesWithinADay) {
  for (const auto& [field, value] : std::vector<std::pair<std::string, double>>{
           {"end", 1e308}, {"end", 86400.5}, {"start", -1}}) {
    nlohmann::json j = two_op_timeline();
    j["ops"][1][field] = value;
    testing::expect_input_error([&] { timeline_from_json(j, "t.json"); }, "/ops/1/" + field,
                                "is not a time within a step: must be in [0, 86400] (a day; no "
                                "training step is longer)",
                                "t.json");
  }
  nlohmann::json reversed = two_op_timeline();
  reversed["ops"][0]["start"] = 0.75;
  testing::expect_input_error([&] { timeline_from_json(reversed, "t.json"); }, "/ops/0/end",
                              "ends before it starts", "t.json");
  // A day exactly is still a step.
  nlohmann::json day = two_op_timeline();
  day["ops"][0]["end"] = kMaxStepSeconds;
  day["summary"]["step_seconds"] = kMaxStepSeconds;
  EXPECT_NO_THROW(timeline_from_json(day, "t.json"));
}

TEST(TimelineFile, SummaryTimesAndSizesAreBounded) {
  for (const std::string field : {"step_seconds", "compute_seconds", "exposed_all_gather_seconds",
                                  "exposed_model_parallel_seconds"}) {
    nlohmann::json j = two_op_timeline();
    j["summary"][field] = 1e296;
    testing::expect_input_error([&] { timeline_from_json(j, "t.json"); }, "/summary/" + field,
                                "is not a time within a step", "t.json");
  }
  nlohmann::json path = two_op_timeline();
  path["summary"]["critical_path"]["offload"] = 2e5;
  testing::expect_input_error([&] { timeline_from_json(path, "t.json"); },
                              "/summary/critical_path/offload", "is not a time within a step",
                              "t.json");
  nlohmann::json capacity = two_op_timeline();
  capacity["summary"]["capacity_bytes"] = -1;
  testing::expect_input_error([&] { timeline_from_json(capacity, "t.json"); },
                              "/summary/capacity_bytes", "must not be negative", "t.json");
  nlohmann::json memory = two_op_timeline();
  memory["memory"][0][0] = 1e300;
  testing::expect_input_error([&] { timeline_from_json(memory, "t.json"); }, "/memory/0",
                              "time 1e+300 s is not within a step", "t.json");
  nlohmann::json gpus = two_op_timeline();
  gpus["num_gpus"] = int64_t{1} << 40;
  testing::expect_input_error([&] { timeline_from_json(gpus, "t.json"); }, "/num_gpus", "must be",
                              "t.json");
}

}  // namespace
}  // namespace shardplan
