// Cost of building models and estimating memory, the steps a sweep repeats per
// configuration. Prints figures; does not pass or fail on time.
#include <benchmark/benchmark.h>

#include "models/cluster_spec.h"
#include "models/model_summary.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/memory_estimate.h"

namespace {

void BM_LoadModel(benchmark::State& state, const char* name) {
  for (auto _ : state) benchmark::DoNotOptimize(shardplan::load_model(name));
}
BENCHMARK_CAPTURE(BM_LoadModel, llama3_8b, "llama3-8b");
BENCHMARK_CAPTURE(BM_LoadModel, llama3_1_405b, "llama3.1-405b");
BENCHMARK_CAPTURE(BM_LoadModel, mixtral_8x7b, "mixtral-8x7b");

void BM_SummarizeModel(benchmark::State& state) {
  const auto model = shardplan::load_model("llama3.1-405b");
  for (auto _ : state) {
    benchmark::DoNotOptimize(
        shardplan::summarize_model(model, {.micro_batch = 1, .seq_len = 8192}));
  }
}
BENCHMARK(BM_SummarizeModel);

void BM_EstimateMemory(benchmark::State& state) {
  const auto model = shardplan::load_model("llama3.1-405b");
  const auto cluster = shardplan::load_cluster("dgx-h100", 128, std::nullopt);
  const auto config =
      shardplan::resolve_fsdp_config(shardplan::FsdpConfig{}, model, cluster, "bench");
  for (auto _ : state) {
    benchmark::DoNotOptimize(shardplan::estimate_memory(model, cluster, config));
  }
}
BENCHMARK(BM_EstimateMemory);

}  // namespace

BENCHMARK_MAIN();
