// `shardplan trace import` end to end, and compare against an imported step.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

const std::string kReal = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(TraceImportCommand, WritesTheStepAndTheMeasuredTimeline) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string step = write_temp_file("resnet_step.json", "");
  const std::string timeline = write_temp_file("resnet_timeline.json", "");
  const CommandResult r = run_shardplan({"trace", "import", kReal + "resnet_act_checkpoint.json.gz",
                                         "-o", step, "--timeline", timeline, "--step", "16"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("ProfilerStep#16"));
  EXPECT_THAT(r.out, HasSubstr("CheckpointWrapper_3"));
  EXPECT_THAT(r.out, HasSubstr("warning: no [memory] events"));
  const nlohmann::json s = read_json(step);
  EXPECT_EQ(s["source"]["step"], "ProfilerStep#16");
  EXPECT_EQ(s["recompute"], "full");
  EXPECT_EQ(s["modules"].size(), 10u);
  EXPECT_EQ(s["events"].front()["kind"], "pre_forward");
  EXPECT_EQ(s["events"].back()["kind"], "optimizer_step");
  int64_t elements = 0;
  for (const auto& c : s["collectives"])
    if (c["kind"] == "all_reduce") elements += c["in_elements"].get<int64_t>();
  EXPECT_EQ(elements, 11689512);  // ResNet-18's parameters (SOURCE.md)
  const nlohmann::json t = read_json(timeline);
  EXPECT_EQ(t["source"], "profiled");
  EXPECT_GT(t["summary"]["step_seconds"].get<double>(), 0);
}

TEST(TraceImportCommand, JsonOutput) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const CommandResult r = run_shardplan({"trace", "import", kReal + "nccl_data.json.gz", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_EQ(j["source"]["steps"].size(), 3u);
  EXPECT_EQ(j["collectives"].size(), 7u);  // 5 all-reduce buckets, 2 broadcasts
  EXPECT_FALSE(j["warnings"].empty());
}

TEST(TraceImportCommand, CompareSetsAProfiledStepBesideASimulatedOne) {
  const std::string timeline = write_temp_file("fsdp2_timeline.json", "");
  ASSERT_EQ(
      run_shardplan({"trace", "import",
                     std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/fsdp2_two_layers_trace.json",
                     "--timeline", timeline})
          .exit_code,
      0);
  const std::string predicted = write_temp_file("tiny_predicted.json", "");
  ASSERT_EQ(
      run_shardplan({"simulate", "--model", "tiny", "--gpus", "4", "--timeline-out", predicted})
          .exit_code,
      0);
  const CommandResult r = run_shardplan({"compare", predicted, timeline, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  EXPECT_FALSE(j["matched_ops"].get<bool>());
  EXPECT_NEAR(j["step"]["measured_seconds"].get<double>(), 410e-6, 1e-12);
  EXPECT_NEAR(j["by_kind"]["all_gather"]["measured_seconds"].get<double>(), 120e-6, 1e-12);
  EXPECT_NEAR(j["summary"]["exposed all-gather"]["measured_seconds"].get<double>(), 70e-6, 1e-12);
  EXPECT_GT(j["by_kind"]["all_gather"]["predicted_seconds"].get<double>(), 0);
  const CommandResult text = run_shardplan({"compare", predicted, timeline});
  EXPECT_THAT(text.out, HasSubstr("not op by op"));
}

// Bad input: one clear error, exit 1, and neither output file written.
void expect_import_fails(const std::string& input, const std::string& message) {
  const std::string dir = std::filesystem::path(write_temp_file("probe", "")).parent_path();
  const std::string step = dir + "/never_step.json";
  const std::string timeline = dir + "/never_timeline.json";
  std::filesystem::remove(step);
  std::filesystem::remove(timeline);
  const CommandResult r =
      run_shardplan({"trace", "import", input, "-o", step, "--timeline", timeline});
  EXPECT_EQ(r.exit_code, 1) << r.out;
  EXPECT_THAT(r.err, HasSubstr(input));
  EXPECT_THAT(r.err, HasSubstr(message));
  EXPECT_FALSE(std::filesystem::exists(step));
  EXPECT_FALSE(std::filesystem::exists(timeline));
}

TEST(TraceImportCommand, NotJson) {
  expect_import_fails(write_temp_file("words.json", "profiler output\n"), "not JSON");
}

TEST(TraceImportCommand, TruncatedGzip) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  std::ifstream in(kReal + "resnet_act_checkpoint.json.gz", std::ios::binary);
  const std::string whole{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  expect_import_fails(write_temp_file("cut.json.gz", whole.substr(0, whole.size() / 3)),
                      "truncated or corrupt gzip");
}

TEST(TraceImportCommand, NoGpuEvents) {
  expect_import_fails(write_temp_file("cpu.json", R"({"traceEvents": [{"ph": "X", "cat": "cpu_op",
          "name": "aten::add", "pid": 1, "tid": 1, "ts": 0, "dur": 3}]})"),
                      "no GPU kernels");
}

TEST(TraceImportCommand, MissingFileAndBadFlags) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const CommandResult missing = run_shardplan({"trace", "import", "/nonexistent/trace.json"});
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_THAT(missing.err, HasSubstr("/nonexistent/trace.json"));
  const CommandResult depth =
      run_shardplan({"trace", "import", kReal + "nccl_data.json.gz", "--depth", "-1"});
  EXPECT_NE(depth.exit_code, 0);
  EXPECT_THAT(depth.err, HasSubstr("--depth"));
  const CommandResult bare = run_shardplan({"trace"});
  EXPECT_NE(bare.exit_code, 0);
}

}  // namespace
}  // namespace shardplan::testing
