// Which events the import keeps: a trace over the one-read limit is read twice and only
// its step kept, with the same import as from every event.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "tests/expect_input_error.h"
#include "tests/run_command.h"
#include "tests/shared_data.h"
#include "traces/kineto_passes.h"

namespace shardplan::kineto {
namespace {

using nlohmann::json;

json range(const std::string& name, const std::string& cat, int tid, double ts, double dur,
           json args = nullptr) {
  json e = {{"ph", "X"},  {"cat", cat}, {"name", name}, {"pid", 100},
            {"tid", tid}, {"ts", ts},   {"dur", dur}};
  if (!args.is_null()) e["args"] = std::move(args);
  return e;
}

json kernel(const std::string& name, int correlation, double start, double end) {
  json k = range(name, "kernel", 7, start, end - start, {{"correlation", correlation}});
  k["pid"] = 0;
  return k;
}

json launch(int correlation, double ts) {
  return range("cudaLaunchKernel", "cuda_runtime", 1, ts, 1, {{"correlation", correlation}});
}

// Three steps of 1000 µs (ProfilerStep#0 from 1000, #1 from 2000, #2 from 3000); the file
// lists GPU activities before their launches, and every case of what belongs to a step:
//  - a kernel launched at the end of step #0 that runs inside step #1 (belongs to #0),
//  - a kernel without a launch starting inside step #1 (belongs to #1 by its time),
//  - a correlation launched twice, in steps #1 and #2 (the last launch counts, as in
//    index_cpu_events),
//  - a fwdbwd flow and a [memory] event per step.
json three_steps() {
  json ev = json::array();
  ev.push_back(kernel("late_gemm", 1, 2005, 2050));    // launched at 1990, in step #0
  ev.push_back(kernel("unlaunched", 99, 2100, 2110));  // no launch anywhere
  ev.push_back(kernel("relaunched", 5, 3600, 3610));   // correlation 5: last launch in #2
  for (int s = 0; s < 3; ++s) {
    const double t0 = 1000.0 * (s + 1);
    ev.push_back(range("ProfilerStep#" + std::to_string(s), "user_annotation", 1, t0, 999));
    ev.push_back(range("aten::mm", "cpu_op", 1, t0 + 10, 5, {{"Sequence number", s}}));
    ev.push_back({{"ph", "s"},
                  {"cat", "fwdbwd"},
                  {"name", "fwdbwd"},
                  {"id", s},
                  {"pid", 100},
                  {"tid", 1},
                  {"ts", t0 + 10}});
    ev.push_back({{"ph", "i"},
                  {"name", "[memory]"},
                  {"pid", 100},
                  {"tid", 1},
                  {"ts", t0 + 20},
                  {"args",
                   {{"Device Type", 1},
                    {"Bytes", 512},
                    {"Total Allocated", 512 * (s + 1)},
                    {"Total Reserved", 4096}}}});
    const int c = 100 + s;
    ev.push_back(kernel("gemm", c, t0 + 40, t0 + 60));
    ev.push_back(launch(c, t0 + 30));
  }
  ev.push_back(launch(1, 1990));  // step #0's last launch (the late kernel above)
  ev.push_back(launch(5, 2500));  // correlation 5, in step #1 ...
  ev.push_back(launch(5, 3500));  // ... and again in step #2: this one counts
  return {{"traceEvents", ev}, {"distributedInfo", {{"world_size", 2}}}};
}

std::string import_json(const KinetoTrace& trace, const std::string& path,
                        const std::string& step) {
  return imported_trace_to_json(import_kineto(path, trace, {.step = step})).dump();
}

TEST(KinetoWindow, TwoReadsImportWhatOneReadImports) {
  const std::string path = testing::write_temp_file("three_steps.json", three_steps().dump());
  for (const std::string step : {"0", "1", "2", ""}) {
    const std::string whole = import_json(read_kineto_trace(path), path, step);
    const KinetoTrace kept = read_step_events(path, step, /*keep_all_events=*/0);
    EXPECT_EQ(import_json(kept, path, step), whole) << step;
    // Far fewer events than the file: the step's, and the three step ranges.
    EXPECT_LT(kept.events.size(), 12u) << step;
  }
  // Step #0 has its late kernel (run in step #1), step #1 the unlaunched one, and the
  // relaunched kernel is step #2's.
  const auto names_of = [&](const std::string& step) {
    std::vector<std::string> names;
    for (const TimelineOp& op :
         import_kineto(path, read_step_events(path, step, 0), {.step = step}).timeline.ops)
      names.push_back(op.name);
    return names;
  };
  EXPECT_THAT(names_of("0"), ::testing::ElementsAre("gemm", "late_gemm"));
  EXPECT_THAT(names_of("1"), ::testing::ElementsAre("gemm", "unlaunched"));
  EXPECT_THAT(names_of("2"), ::testing::ElementsAre("gemm", "relaunched"));
}

TEST(KinetoWindow, UnderTheLimitOneReadKeepsEverything) {
  const std::string path = testing::write_temp_file("three_steps.json", three_steps().dump());
  EXPECT_EQ(read_step_events(path, "").events.size(), read_kineto_trace(path).events.size());
  // An unknown step is the usual error after the first read.
  testing::expect_input_error([&] { read_step_events(path, "7", 0); }, "--step",
                              "no step 'ProfilerStep#7'", path);
}

TEST(KinetoWindow, WithoutStepsTheSecondReadKeepsEverything) {
  json doc = three_steps();
  json& ev = doc["traceEvents"];
  for (auto it = ev.begin(); it != ev.end();)
    it = (*it)["name"].get<std::string>().rfind("ProfilerStep#", 0) == 0 ? ev.erase(it) : it + 1;
  const std::string path = testing::write_temp_file("no_steps.json", doc.dump());
  EXPECT_EQ(read_step_events(path, "", 0).events.size(), read_kineto_trace(path).events.size());
}

TEST(KinetoWindow, RealTracesImportTheSameInTwoReads) {
  SHARDPLAN_SKIP_WITHOUT_SHARED();
  const std::string path = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/nccl_data.json.gz";
  const KinetoTrace whole = read_kineto_trace(path);
  // The middle of three steps: events of steps on both sides are left out.
  const KinetoTrace kept = read_step_events(path, "5", 0);
  EXPECT_EQ(import_json(kept, path, "5"), import_json(whole, path, "5"));
  EXPECT_LT(kept.events.size(), whole.events.size() / 2);
}

// A pipe can be read only once: past the one-read limit that is an error saying what to
// do, not a second read that would wait for a writer forever.
TEST(KinetoWindow, APipeOverTheLimitIsRefused) {
  const std::string dir =
      std::filesystem::path(testing::write_temp_file("probe", "")).parent_path();
  const std::string fifo = dir + "/trace.fifo";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string text = three_steps().dump();
  std::thread writer([&] {
    const int fd = ::open(fifo.c_str(), O_WRONLY);
    if (fd < 0) return;
    for (std::size_t at = 0; at < text.size();) {
      const ssize_t n = ::write(fd, text.data() + at, text.size() - at);
      if (n <= 0) break;
      at += static_cast<std::size_t>(n);
    }
    ::close(fd);
  });
  testing::expect_input_error([&] { read_step_events(fifo, "", 0); }, "",
                              "can be read only once: save the trace to a file", fifo);
  writer.join();
  std::filesystem::remove(fifo);
}

}  // namespace
}  // namespace shardplan::kineto
