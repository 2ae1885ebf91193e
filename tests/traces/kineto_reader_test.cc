// The streaming Chrome-trace reader: real gzipped files, plain JSON, and broken input.
#include "traces/kineto_reader.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "tests/expect_input_error.h"
#include "tests/run_command.h"
#include "tests/shared_data.h"

namespace shardplan::testing {
namespace {

const std::string kReal = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/";

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(KinetoReader, ReadsTheDhenTraceMemoryEvents) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  // SOURCE.md: 28,010 [memory] instant events, 14,005 allocations and 14,005 frees.
  const KinetoTrace trace = read_kineto_trace(kReal + "df_index_resolver.json.gz");
  int64_t memory = 0, allocations = 0, frees = 0;
  for (const KinetoEvent& e : trace.events) {
    if (e.name != "[memory]") continue;
    ++memory;
    if (e.bytes > 0) ++allocations;
    if (e.bytes < 0) ++frees;
  }
  EXPECT_EQ(memory, 28010);
  EXPECT_EQ(allocations, 14005);
  EXPECT_EQ(frees, 14005);
  EXPECT_EQ(trace.metadata["distributedInfo"]["world_size"], 2);
}

TEST(KinetoReader, KeepsKernelsAndCollectiveArgs) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  // SOURCE.md: 2,700 GPU kernels, 21 of them NCCL (15 all-reduce, 6 broadcast).
  const KinetoTrace trace = read_kineto_trace(kReal + "nccl_data.json.gz");
  int64_t kernels = 0, allreduce = 0, broadcast = 0;
  for (const KinetoEvent& e : trace.events) {
    if (e.cat != "kernel") continue;
    ++kernels;
    if (e.collective == "allreduce") ++allreduce;
    if (e.collective == "broadcast") ++broadcast;
  }
  EXPECT_EQ(kernels, 2700);
  EXPECT_EQ(allreduce, 15);
  EXPECT_EQ(broadcast, 6);
  EXPECT_EQ(trace.metadata["distributedInfo"]["nccl_version"], "2.17.1");
}

TEST(KinetoReader, ReadsPlainJsonAsWellAsGzip) {
  const std::string path = write_temp_file(
      "plain.json",
      R"({"schemaVersion": 1, "traceEvents": [{"ph": "X", "cat": "kernel", "name": "k",
          "pid": 0, "tid": "stream 7", "ts": 5.5, "dur": 2, "args": {"correlation": 9}}]})");
  const KinetoTrace trace = read_kineto_trace(path);
  ASSERT_EQ(trace.events.size(), 1u);
  EXPECT_EQ(trace.events[0].correlation, 9);
  EXPECT_DOUBLE_EQ(trace.events[0].ts, 5.5);
  EXPECT_LT(trace.events[0].tid, -1);  // a named track gets a negative id
  EXPECT_EQ(trace.metadata["schemaVersion"], 1);
}

TEST(KinetoReader, TruncatedGzipIsAnError) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string whole = read_bytes(kReal + "nccl_data.json.gz");
  const std::string path = write_temp_file("cut.json.gz", whole.substr(0, whole.size() / 2));
  expect_input_error([&] { read_kineto_trace(path); }, "", "truncated or corrupt gzip", path);
}

TEST(KinetoReader, NotJsonIsAnError) {
  const std::string path = write_temp_file("notjson.json", "this is not json\n");
  expect_input_error([&] { read_kineto_trace(path); }, "", "not valid JSON at byte", path);
}

TEST(KinetoReader, TruncatedJsonIsAnError) {
  const std::string path =
      write_temp_file("cut.json", R"({"traceEvents": [{"ph": "X", "name": "a"}, {"ph": )");
  expect_input_error([&] { read_kineto_trace(path); }, "", "not valid JSON", path);
}

TEST(KinetoReader, JsonWithoutTraceEventsIsAnError) {
  const std::string path = write_temp_file("noevents.json", R"({"name": "llama", "layers": 3})");
  expect_input_error([&] { read_kineto_trace(path); }, "traceEvents", "not a Chrome trace", path);
  const std::string array = write_temp_file("array.json", "[1, 2]");
  expect_input_error([&] { read_kineto_trace(array); }, "", "top level is not a JSON object",
                     array);
  const std::string events =
      write_temp_file("events_object.json", R"({"traceEvents": {"ph": "X"}})");
  expect_input_error([&] { read_kineto_trace(events); }, "", "\"traceEvents\" is not an array",
                     events);
}

}  // namespace
}  // namespace shardplan::testing
