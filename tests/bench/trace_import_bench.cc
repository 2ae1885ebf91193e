// Importing the real profiler traces in ../shared/traces-real: read (gunzip + streaming
// JSON) alone, and read + analysis, with the decompressed size per second. Prints figures;
// never fails on time.
#include <benchmark/benchmark.h>

#include "traces/kineto_reader.h"
#include "traces/trace_import.h"

#ifndef SHARDPLAN_SHARED_DIR
#define SHARDPLAN_SHARED_DIR "../shared"
#endif

namespace {

// Decompressed sizes from traces-real/SOURCE.md.
struct TraceFile {
  const char* name;
  double json_bytes;
};
constexpr TraceFile kFiles[] = {{"nccl_data.json.gz", 9778890},
                                {"resnet_act_checkpoint.json.gz", 16810209},
                                {"df_index_resolver.json.gz", 53733385}};

std::string path_of(const TraceFile& f) {
  return std::string(SHARDPLAN_SHARED_DIR) + "/traces-real/" + f.name;
}

void BM_ReadKineto(benchmark::State& state) {
  const TraceFile& f = kFiles[state.range(0)];
  std::size_t events = 0;
  for (auto _ : state) events = shardplan::read_kineto_trace(path_of(f)).events.size();
  state.SetLabel(f.name);
  state.counters["kept_events"] = static_cast<double>(events);
  state.counters["json_MB_per_s"] = benchmark::Counter(
      f.json_bytes * 1e-6 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

void BM_ImportKineto(benchmark::State& state) {
  const TraceFile& f = kFiles[state.range(0)];
  const auto importer = shardplan::make_kineto_importer();
  std::size_t ops = 0;
  for (auto _ : state) ops = importer->import(path_of(f), {}).timeline.ops.size();
  state.SetLabel(f.name);
  state.counters["gpu_ops_in_step"] = static_cast<double>(ops);
  state.counters["json_MB_per_s"] = benchmark::Counter(
      f.json_bytes * 1e-6 * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_ReadKineto)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->Iterations(2);
BENCHMARK(BM_ImportKineto)->DenseRange(0, 2)->Unit(benchmark::kMillisecond)->Iterations(2);
