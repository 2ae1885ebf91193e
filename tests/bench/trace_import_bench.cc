// Importing the real profiler traces in ../shared/traces-real: read (gunzip + streaming
// JSON) alone, and the whole import kept in one read or forced into two (the path of a
// trace over kKeepAllEvents, which keeps one step), with the decompressed size per second
// and the peak resident memory of each import. A large trace of your own joins them with
//   python3 tests/bench/make_repeated_trace.py ../shared/traces-real/df_index_resolver.json.gz 22
//   /tmp/dhen22.json SHARDPLAN_BENCH_TRACE=/tmp/dhen22.json ./build/tests/bench/shardplan_bench
//   --benchmark_filter=Kineto
// Prints figures; never fails on time.
//
// Measured on the 2-core development machine (one import each, peak RSS of the process):
//
//   trace                          JSON      before (one read,     after
//                                            a JSON value/event)
//   nccl_data                      9.8 MB    0.19 s,  13.6 MB     0.13 s,  13.8 MB
//   resnet_act_checkpoint         16.8 MB    0.23 s,  10.9 MB     0.20 s,  11.0 MB
//   df_index_resolver (DHEN)      53.7 MB    0.72 s,  55.9 MB     0.50 s,  56.8 MB
//   DHEN x 22 (this script)       1.06 GB   19.8 s,  776 MB      16.1 s,   86 MB
//
// Before: every event of the file kept, so memory grew with the file (and a trace over
// about 4 GB ended in bad_alloc). After: the events are filled straight from the parser,
// and the DHEN x 22 trace, over the one-read limit, is read twice and keeps one step.
#include <benchmark/benchmark.h>
#include <malloc.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "traces/kineto_passes.h"
#include "traces/kineto_reader.h"
#include "traces/trace_import.h"

#ifndef SHARDPLAN_SHARED_DIR
#define SHARDPLAN_SHARED_DIR "../shared"
#endif

namespace {

// The decompressed size of a trace, gzipped or not.
double json_bytes(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) return 0;
  std::vector<char> buffer(1 << 20);
  double total = 0;
  for (int n; (n = gzread(file, buffer.data(), static_cast<unsigned>(buffer.size()))) > 0;)
    total += n;
  gzclose(file);
  return total;
}

// A line of /proc/self/status in MB ("VmHWM:   12345 kB"), or -1.
double status_mb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(key + ":", 0) == 0)
      return std::strtod(line.c_str() + key.size() + 1, nullptr) / 1024;
  }
  return -1;
}

struct Resident {
  double before_mb = -1;  // the process before the import (the benchmark itself)
  double peak_mb = -1;    // its peak during the import
};

// Resident memory of `work` run in a child process: the child returns the heap the
// benchmark freed to the system and resets its peak (/proc/self/clear_refs "5", Linux
// 4.0+), so the peak is the import's, above what the child starts with.
Resident resident_memory(const std::function<void()>& work) {
  int fds[2];
  if (::pipe(fds) != 0) return {};
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    Resident r;
    // As in a fresh process: large blocks mmapped again (glibc raises the threshold after
    // the benchmark frees large blocks, and the import's vectors would then grow on the
    // heap beside holes they cannot reuse), and the heap the benchmark freed returned.
    ::mallopt(M_MMAP_THRESHOLD, 128 * 1024);
    ::malloc_trim(0);
    std::ofstream("/proc/self/clear_refs") << "5";
    r.before_mb = status_mb("VmRSS");
    try {
      work();
      r.peak_mb = status_mb("VmHWM");
    } catch (...) {
    }
    [[maybe_unused]] const ssize_t written = ::write(fds[1], &r, sizeof r);
    ::_exit(0);
  }
  ::close(fds[1]);
  Resident r;
  if (::read(fds[0], &r, sizeof r) != static_cast<ssize_t>(sizeof r)) r = {};
  ::close(fds[0]);
  ::waitpid(child, nullptr, 0);
  return r;
}

void read_kineto(benchmark::State& state, const std::string& path) {
  std::size_t events = 0;
  for (auto _ : state) events = shardplan::read_kineto_trace(path).events.size();
  state.counters["kept_events"] = static_cast<double>(events);
  state.counters["json_MB_per_s"] =
      benchmark::Counter(json_bytes(path) * 1e-6 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
}

// keep_all_events: kKeepAllEvents (what trace import does), or 0 to force two reads.
void import_kineto(benchmark::State& state, const std::string& path, std::size_t keep_all_events) {
  const auto import = [&] {
    return shardplan::kineto::import_kineto(
        path, shardplan::kineto::read_step_events(path, "", keep_all_events), {});
  };
  std::size_t ops = 0;
  for (auto _ : state) ops = import().timeline.ops.size();
  state.counters["gpu_ops_in_step"] = static_cast<double>(ops);
  state.counters["json_MB_per_s"] =
      benchmark::Counter(json_bytes(path) * 1e-6 * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  const Resident memory = resident_memory([&] { import(); });
  state.counters["peak_RSS_MB"] = memory.peak_mb;
  state.counters["RSS_before_MB"] = memory.before_mb;
}

int register_all() {
  std::vector<std::string> paths;
  for (const char* name :
       {"nccl_data.json.gz", "resnet_act_checkpoint.json.gz", "df_index_resolver.json.gz"}) {
    const std::string path = std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/" + name;
    if (std::filesystem::exists(path)) paths.push_back(path);
  }
  if (const char* large = std::getenv("SHARDPLAN_BENCH_TRACE"); large != nullptr)
    paths.emplace_back(large);
  for (const std::string& path : paths) {
    const std::string name = std::filesystem::path(path).filename().string();
    benchmark::RegisterBenchmark(("ReadKineto/" + name).c_str(), read_kineto, path)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("ImportKineto/" + name + "/as-imported").c_str(), import_kineto,
                                 path, shardplan::kineto::kKeepAllEvents)
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark(("ImportKineto/" + name + "/two-reads").c_str(), import_kineto,
                                 path, std::size_t{0})
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  return 0;
}

[[maybe_unused]] const int registered = register_all();

}  // namespace
