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

// Names come from the trace: one with a terminal escape sequence is printed escaped, and
// the JSON keeps it as it is.
TEST(TraceImportCommand, NamesWithControlBytesArePrintedEscaped) {
  const std::string module = "nn.Module: Evil\x1b[31m_0";
  const nlohmann::json trace = {{"traceEvents",
                                 {{{"ph", "X"},
                                   {"cat", "user_annotation"},
                                   {"name", "ProfilerStep#1"},
                                   {"pid", 1},
                                   {"tid", 1},
                                   {"ts", 0},
                                   {"dur", 100}},
                                  {{"ph", "X"},
                                   {"cat", "python_function"},
                                   {"name", module},
                                   {"pid", 1},
                                   {"tid", 1},
                                   {"ts", 5},
                                   {"dur", 20}},
                                  {{"ph", "X"},
                                   {"cat", "cuda_runtime"},
                                   {"name", "cudaLaunchKernel"},
                                   {"pid", 1},
                                   {"tid", 1},
                                   {"ts", 10},
                                   {"dur", 1},
                                   {"args", {{"correlation", 1}}}},
                                  {{"ph", "X"},
                                   {"cat", "kernel"},
                                   {"name", "gemm"},
                                   {"pid", 0},
                                   {"tid", 7},
                                   {"ts", 12},
                                   {"dur", 5},
                                   {"args", {{"correlation", 1}}}}}}};
  const std::string path = write_temp_file("escape.json", trace.dump());
  const CommandResult r = run_shardplan({"trace", "import", path});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("Evil\\x1B[31m_0"));
  EXPECT_EQ(r.out.find('\x1b'), std::string::npos);
  const CommandResult j = run_shardplan({"trace", "import", path, "--json"});
  EXPECT_EQ(stdout_json(j)["modules"][0], "Evil\x1b[31m_0");
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
                      "not a valid gzip stream (zlib: unexpected end of file)");
}

// A gzip header and then no deflate data was "the file is empty".
TEST(TraceImportCommand, CorruptGzip) {
  expect_import_fails(write_temp_file("corrupt.json.gz",
                                      std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) +
                                          "garbage, not deflate"),
                      "not a valid gzip stream (zlib: invalid block type)");
}

TEST(TraceImportCommand, TruncatedJsonSaysWhere) {
  expect_import_fails(write_temp_file("cut.json", R"({"traceEvents": [{"ph": "X", "name": "a",)"),
                      "the file ends inside the event /traceEvents/0 (line 1, after 41 bytes): "
                      "truncated?");
}

// Devices end at once with a reason, not in bad_alloc: /dev/zero is binary from its first
// byte, whatever format is asked for.
TEST(TraceImportCommand, DevZero) {
  expect_import_fails("/dev/zero", "not JSON (a Chrome trace starts with '{' or '['");
  const CommandResult r = run_shardplan({"trace", "import", "--format", "kineto", "/dev/zero"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/dev/zero: a NUL byte at line 1, column 1"));
}

// The Trace Event Format's other form: a bare array of events, its ']' optional.
TEST(TraceImportCommand, ReadsTheJsonArrayForm) {
  const std::string fsdp2 =
      std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/fsdp2_two_layers_trace.json";
  const nlohmann::json events = read_json(fsdp2)["traceEvents"];
  std::string array = events.dump();
  array.pop_back();  // as a killed tracer leaves it: no closing bracket
  const CommandResult r =
      run_shardplan({"trace", "import", write_temp_file("array.json", array), "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json object = stdout_json(run_shardplan({"trace", "import", fsdp2, "--json"}));
  const nlohmann::json bare = stdout_json(r);
  EXPECT_EQ(bare["measured"], object["measured"]);
  EXPECT_EQ(bare["events"], object["events"]);
  EXPECT_NEAR(bare["measured"]["step_seconds"].get<double>(), 410e-6, 1e-12);
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
