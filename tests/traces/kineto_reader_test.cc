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
  expect_input_error([&] { read_kineto_trace(path); }, "",
                     "not a valid gzip stream (zlib: unexpected end of file)", path);
}

// A gzip header followed by bytes that are not deflate data: zlib's own reason, from the
// format sniffing of `trace import` (which read it as "the file is empty") and the reader.
TEST(KinetoReader, CorruptGzipSaysSo) {
  const std::string path = write_temp_file(
      "corrupt.json.gz",
      std::string("\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\x03", 10) + std::string(4000, '\xff'));
  expect_input_error([&] { read_kineto_trace(path); }, "", "not a valid gzip stream (zlib: ", path);
  expect_input_error([&] { read_file_prefix(path, 1 << 16); }, "",
                     "not a valid gzip stream (zlib: ", path);
}

TEST(KinetoReader, NotJsonGivesTheLineAndByte) {
  const std::string path = write_temp_file("notjson.json", "{\n \"traceEvents\": [\n  oops\n]}");
  expect_input_error([&] { read_kineto_trace(path); }, "",
                     "not valid JSON at line 3, column 3 (byte 23, in the traceEvents array after "
                     "0 events): invalid literal (in a JSON value)",
                     path);
}

// nlohmann's message ends with the token it last read, which is the input's own bytes: a
// multi-megabyte name with a raw control byte must not come back in the error.
TEST(KinetoReader, ErrorsDoNotEchoTheInput) {
  const std::string huge(2'000'000, 'A');
  const std::string path =
      write_temp_file("control.json", "{\"traceEvents\": [{\"name\": \"" + huge + "\x01\"}]}");
  try {
    read_kineto_trace(path);
    ADD_FAILURE() << "no error";
  } catch (const InputError& e) {
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    EXPECT_EQ(std::string(e.what()).find("AAAA"), std::string::npos) << e.what();
    EXPECT_NE(e.reason().find("the event /traceEvents/0"), std::string::npos) << e.what();
  }
}

// Args nested millions deep cost a frame each while they are skipped: refused past the
// depth every reader allows (a 35 MB trace of them took 4 GiB before).
TEST(KinetoReader, NestingPastTheDepthLimitIsRefused) {
  const std::string deep = write_temp_file(
      "deep_args.json", R"({"traceEvents": [{"ph": "X", "ts": 1, "args": {"x": )" +
                            std::string(100'000, '[') + std::string(100'000, ']') + "}}]}");
  try {
    read_kineto_trace(deep);
    FAIL() << "a trace nested 100 000 deep was read";
  } catch (const InputError& e) {
    EXPECT_NE(e.reason().find("values nested more than 1000 levels deep"), std::string::npos)
        << e.what();
    EXPECT_TRUE(e.field().starts_with("/traceEvents/0/args/x/0/0")) << e.field();
  }
}

// Every shardplan reader refuses a key given twice (a profiler never writes one; keeping
// the last silently reads a value the file may not mean), naming the object.
TEST(KinetoReader, AKeyGivenTwiceIsRefused) {
  const std::string top =
      write_temp_file("dup_top.json", R"({"baseTimeNanoseconds": 1, "traceEvents": [],
                                          "baseTimeNanoseconds": 2})");
  expect_input_error([&] { read_kineto_trace(top); }, "",
                     "the key 'baseTimeNanoseconds' appears twice in this object", top);
  const std::string args = write_temp_file(
      "dup_args.json", R"({"traceEvents": [{"ph": "X", "ts": 1}, {"ph": "X", "ts": 2,
                           "args": {"Bytes": 1, "Input Dims": [[{"a": 1, "a": 2}]]}}]})");
  expect_input_error([&] { read_kineto_trace(args); }, "/traceEvents/1/args/Input Dims/0/0",
                     "the key 'a' appears twice in this object", args);
  const std::string event = write_temp_file(
      "dup_event.json", R"({"traceEvents": [{"ph": "X", "ts": 1, "name": "a", "ts": 2}]})");
  expect_input_error([&] { read_kineto_trace(event); }, "/traceEvents/0",
                     "the key 'ts' appears twice in this object", event);
  // Many keys (past the scan), the repeat found all the same.
  std::string wide = R"({"traceEvents": [], "x": {)";
  for (int i = 0; i < 100; ++i) wide += "\"k" + std::to_string(i) + "\": 1, ";
  const std::string many = write_temp_file("dup_wide.json", wide + R"("k77": 2}})");
  expect_input_error([&] { read_kineto_trace(many); }, "/x", "the key 'k77' appears twice", many);
}

// A number past a double is nlohmann's out_of_range error, which quoted the number.
TEST(KinetoReader, ANumberPastADoubleIsNamedNotEchoed) {
  const std::string path =
      write_temp_file("overflow.json",
                      R"({"traceEvents": [{"ph": "X", "ts": 1e999)" + std::string(50, '9') + "}]}");
  expect_input_error([&] { read_kineto_trace(path); }, "",
                     "not valid JSON (byte 90, in the event /traceEvents/0): a number beyond the "
                     "range of a double",
                     path);
}

TEST(KinetoReader, TruncatedJsonSaysWhereTheFileEnds) {
  const std::string cut =
      write_temp_file("cut.json", R"({"traceEvents": [{"ph": "X", "name": "a"}, {"ph": )");
  expect_input_error([&] { read_kineto_trace(cut); }, "",
                     "the file ends inside the event /traceEvents/1 (line 1, after 50 bytes): "
                     "truncated?",
                     cut);
  const std::string after = write_temp_file("cut_after.json", R"({"traceEvents": [], "x": )");
  expect_input_error([&] { read_kineto_trace(after); }, "",
                     "the file ends inside the top-level object", after);
  const std::string empty = write_temp_file("empty_trace.json", "");
  expect_input_error([&] { read_kineto_trace(empty); }, "", "the file ends before any JSON value",
                     empty);
}

TEST(KinetoReader, JsonWithoutTraceEventsIsAnError) {
  const std::string path = write_temp_file("noevents.json", R"({"name": "llama", "layers": 3})");
  expect_input_error([&] { read_kineto_trace(path); }, "traceEvents", "not a Chrome trace", path);
  const std::string number = write_temp_file("number.json", "3");
  expect_input_error([&] { read_kineto_trace(number); }, "",
                     "the top level is neither a JSON object", number);
  const std::string events =
      write_temp_file("events_object.json", R"({"traceEvents": {"ph": "X"}})");
  expect_input_error([&] { read_kineto_trace(events); }, "", "\"traceEvents\" is not an array",
                     events);
}

// The Trace Event Format's JSON Array Format: a bare array of events, whose closing ']'
// is optional (a tracer killed mid-run never writes it), with or without a last comma.
TEST(KinetoReader, ReadsTheJsonArrayForm) {
  const std::string events =
      R"([{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 1, "dur": 2},
          {"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 5, "dur": 1})";
  for (const std::string& ending : {std::string("]"), std::string("\n"), std::string(",\n  ")}) {
    const std::string path = write_temp_file("array.json", events + ending);
    const KinetoTrace trace = read_kineto_trace(path);
    ASSERT_EQ(trace.events.size(), 2u) << ending;
    EXPECT_EQ(trace.events[1].name, "k");
    EXPECT_DOUBLE_EQ(trace.events[1].ts, 5);
  }
  // Cut inside an event, it is truncated all the same.
  const std::string cut = write_temp_file("array_cut.json", events.substr(0, events.size() - 9));
  expect_input_error([&] { read_kineto_trace(cut); }, "", "the file ends inside the event /1", cut);
}

TEST(KinetoReader, ADirectoryIsRefused) {
  const std::string dir = std::filesystem::path(write_temp_file("probe", "")).parent_path();
  expect_input_error([&] { read_kineto_trace(dir); }, "", "is a directory, not a trace file", dir);
}

// /dev/zero is not JSON at its first byte; an endless stream of valid JSON stops at the
// decompressed-size limit (made small here) rather than in bad_alloc.
TEST(KinetoReader, EndlessInputEndsWithAClearError) {
  expect_input_error([] { read_kineto_trace("/dev/zero"); }, "",
                     "a NUL byte at line 1, column 1 (byte 1): binary data, not JSON text",
                     "/dev/zero");
  std::string many = R"({"traceEvents": [)";
  for (int i = 0; i < 1000; ++i) many += R"({"ph": "X", "name": "a", "ts": 1},)";
  many.back() = ']';
  const std::string path = write_temp_file("many.json", many + "}");
  expect_input_error([&] { read_kineto_trace(path, {.max_bytes = 4096}); }, "",
                     "more than 4096 bytes of JSON (decompressed), the limit on one trace", path);
  EXPECT_EQ(read_kineto_trace(path).events.size(), 1000u);
  EXPECT_EQ(kMaxTraceBytes, int64_t{8} << 30);
}

std::string trace_of(const std::string& event) {
  return R"({"traceEvents": [)" + event + "]}";
}

// Times no profiler writes leave the event out, as a missing one does; the first case is
// described with its index and name.
TEST(KinetoReader, EventsWithImpossibleTimesAreLeftOut) {
  for (const auto& [fields, why] : std::vector<std::pair<std::string, std::string>>{
           {R"("ts": 10, "dur": -5)", "dur -5 µs is negative"},
           {R"("ts": 10, "dur": 1e302)", "dur 1e+302 µs is longer than a day"},
           {R"("ts": 10, "dur": 86400000001)", "dur 86400000001 µs is longer than a day"},
           {R"("ts": 10, "dur": "nan")", "dur 'nan' is not a number"},
           {R"("ts": 1e300, "dur": 1)", "ts 1e+300 µs is not a finite time within ±2^53 µs"},
           {R"("ts": "soon", "dur": 1)", "ts 'soon' is not a number"},
           {R"("dur": 1)", "no ts"}}) {
    const std::string path = write_temp_file(
        "times.json", trace_of(R"({"ph": "X", "cat": "cpu_op", "name": "ok", "ts": 1, "dur": 1},
                                  {"ph": "X", "cat": "kernel", "name": "gemm", )" +
                               fields + "}"));
    const KinetoTrace trace = read_kineto_trace(path);
    ASSERT_EQ(trace.events.size(), 1u) << fields;
    EXPECT_EQ(trace.events_without_time.count, 1) << fields;
    EXPECT_EQ(trace.events_without_time.first, "/traceEvents/1 'gemm': " + why) << fields;
  }
  // A day exactly is still a duration.
  const std::string day =
      write_temp_file("day.json", trace_of(R"({"ph": "X", "name": "a", "ts": 0, "dur": 86400e6})"));
  EXPECT_EQ(read_kineto_trace(day).events.size(), 1u);
}

// Sizes, counts and totals outside their physical range read as absent (the importer
// then warns that the size is unknown), and no product of them overflows.
TEST(KinetoReader, ValuesOutsideTheirPhysicalRangeReadAsAbsent) {
  const auto read_args = [](const std::string& args) {
    const std::string path = write_temp_file(
        "args.json",
        trace_of(R"({"ph": "X", "cat": "kernel", "name": "ncclKernel_AllReduce", "ts": 1,
                     "dur": 1, "args": {)" +
                 args + "}}"));
    return read_kineto_trace(path);
  };
  {
    const KinetoTrace t = read_args(
        R"("In msg nelems": 9223372036854775807, "Out msg nelems": -2, "Group size": 0,
           "dtype": "Float")");
    ASSERT_EQ(t.events.size(), 1u);
    EXPECT_EQ(t.events[0].in_elements, -1);
    EXPECT_EQ(t.events[0].out_elements, -1);
    EXPECT_EQ(t.events[0].group_size, -1);
    EXPECT_EQ(t.values_out_of_range.count, 3);
    EXPECT_EQ(t.values_out_of_range.first,
              "/traceEvents/0 'ncclKernel_AllReduce': 'In msg nelems' 9223372036854775807 is "
              "outside [0, 2^44] (16 TiB, the largest GPU memory)");
  }
  EXPECT_EQ(read_args(R"("Group size": -3)").events[0].group_size, -1);
  EXPECT_EQ(read_args(R"("Group size": 1048577)").events[0].group_size, -1);
  EXPECT_EQ(read_args(R"("Group size": 8)").events[0].group_size, 8);
  EXPECT_EQ(read_args(R"("Group size": "8")").events[0].group_size, 8);
  EXPECT_EQ(read_args(R"("Group size": 2.5)").values_out_of_range.first,
            "/traceEvents/0 'ncclKernel_AllReduce': 'Group size' 2.5 is not a whole number");
  // In range one by one, 2^42 doubles are 32 TiB: more than a GPU holds.
  {
    const KinetoTrace t = read_args(R"("In msg nelems": 4398046511104, "dtype": "Double")");
    EXPECT_EQ(t.events[0].in_elements, -1);
    EXPECT_EQ(t.values_out_of_range.count, 1);
  }
  EXPECT_EQ(read_args(R"("In msg nelems": 4398046511104, "dtype": "Byte")").events[0].in_elements,
            4398046511104);
  {
    const KinetoTrace t = read_args(R"("Total Allocated": -1, "Total Reserved": 1e30,
                                       "Bytes": 1e30)");
    EXPECT_EQ(t.events[0].total_allocated, -1);
    EXPECT_EQ(t.events[0].total_reserved, -1);
    EXPECT_EQ(t.events[0].bytes, 0);
    EXPECT_EQ(t.values_out_of_range.count, 3);
  }
  EXPECT_EQ(read_args(R"("Bytes": -512)").events[0].bytes, -512);  // a free
}

TEST(KinetoReader, OnlyTheEventsTheFilterKeeps) {
  const std::string path = write_temp_file(
      "filter.json", trace_of(R"({"ph": "X", "name": "a", "ts": 1}, {"ph": "X", "name": "b",
                                 "ts": 2}, {"ph": "X", "name": "a", "ts": 3})"));
  const KinetoTrace trace =
      read_kineto_trace(path, {.keep = [](const KinetoEvent& e) { return e.name == "a"; }});
  ASSERT_EQ(trace.events.size(), 2u);
  EXPECT_DOUBLE_EQ(trace.events[1].ts, 3);
  EXPECT_EQ(trace.strings.count("b"), 0u);  // strings of events not kept are not pooled
}

}  // namespace
}  // namespace shardplan::testing
