// Offset assignment on MiniMalloc's benchmark inputs (../shared/benchmarks/minimalloc,
// lower bounds and best-known heights in its SOURCE.md), on synthetic training-step traces
// of 10 000 to 100 000 buffers and on FSDP plans from the planner: height, % over the
// lower bound (gap_pct), proven optimal, seconds. One run each, 10 s limit. Prints
// figures; never fails on time.
#include <benchmark/benchmark.h>

#include <chrono>
#include <filesystem>

#include "models/cluster_spec.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "pool/csv.h"
#include "pool/placement.h"
#include "pool/pool.h"
#include "pool/synthetic.h"

#ifndef SHARDPLAN_SHARED_DIR
#define SHARDPLAN_SHARED_DIR "../shared"
#endif

namespace {

void report(benchmark::State& state, const std::vector<shardplan::PoolRequest>& requests,
            const shardplan::PoolAssignment& result) {
  const auto lower_bound = static_cast<double>(shardplan::live_bytes_lower_bound(requests));
  state.counters["height"] = static_cast<double>(result.size_bytes);
  state.counters["lower_bound"] = lower_bound;
  state.counters["gap_pct"] = 100.0 * (static_cast<double>(result.size_bytes) / lower_bound - 1.0);
  state.counters["proven"] = result.proven_optimal ? 1 : 0;
  state.counters["buffers"] = static_cast<double>(requests.size());
}

void pack_file(benchmark::State& state, const std::string& path, const std::string& algorithm) {
  const shardplan::PoolTable table = shardplan::read_pool_csv(path);
  const auto assigner = shardplan::make_offset_assigner(algorithm);
  shardplan::PoolAssignment result;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    result = assigner->assign(table.requests, {.alignment = 1, .time_limit_seconds = 10});
  }
  state.counters["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report(state, table.requests, result);
}

void pack_plan(benchmark::State& state, const char* model, int64_t nodes,
               const std::string& algorithm) {
  const auto spec = shardplan::load_model(model);
  const auto cluster = shardplan::load_cluster("dgx-h100", nodes, std::nullopt);
  const auto config = shardplan::resolve_fsdp_config(
      shardplan::fsdp_config_from_json({{"grad_accum", 4}, {"seq_len", 4096}}, "bench"), spec,
      cluster, "bench");
  const auto assigner = shardplan::make_offset_assigner(algorithm);
  // Only the plan's live intervals matter here; its own pool is packed by the cheap rule.
  const auto slots = shardplan::make_slots_assigner();
  const shardplan::Plan plan = shardplan::build_plan(spec, cluster, config, slots.get());
  const std::vector<shardplan::PoolRequest> requests = shardplan::transient_pool_requests(plan);
  shardplan::PoolAssignment result;
  for (auto _ : state)
    result = assigner->assign(requests, {.alignment = 256, .time_limit_seconds = 10});
  report(state, requests, result);
}

// Synthetic training-step traces (pool/synthetic.h) from 10 000 to 100 000 buffers: how
// time and height scale. "time-order" is the O(n log n) placement every phase falls back
// to. The compiled shapes have one time window, long-lived large buffers under many short
// ones (as the SOMAS traces and the compiler traces the 10 s target is set on).
void pack_synthetic(benchmark::State& state, shardplan::SyntheticTraceOptions trace,
                    const std::string& algorithm) {
  const std::vector<shardplan::PoolRequest> requests = shardplan::synthetic_training_trace(trace);
  shardplan::PoolAssignment result;
  const auto start = std::chrono::steady_clock::now();
  for (auto _ : state) {
    result = algorithm == "time-order" ? shardplan::pool::place_online(requests, 1)
                                       : shardplan::make_offset_assigner(algorithm)->assign(
                                             requests, {.alignment = 1, .time_limit_seconds = 10});
  }
  state.counters["seconds"] =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  report(state, requests, result);
}

struct TraceShape {
  const char* name;
  shardplan::SyntheticTraceOptions options;  // all but the buffer count
};

int register_all() {
  const std::vector<TraceShape> shapes = {
      {"dense-seq", {.seed = 2}},
      {"dense-1f1b", {.seed = 4, .pipelined = true}},
      {"moe-seq", {.seed = 2, .experts = 64}},
      {"moe-1f1b", {.seed = 2, .experts = 64, .pipelined = true}},
      {"compiled-dense", {.seed = 3, .compiled_step = true}},
      {"compiled-dense-1f1b", {.seed = 4, .pipelined = true, .compiled_step = true}},
      {"compiled-moe-1f1b", {.seed = 2, .experts = 8, .pipelined = true, .compiled_step = true}}};
  for (const TraceShape& shape : shapes) {
    for (const int64_t buffers : {10000, 30000, 60000, 100000}) {
      for (const char* algorithm : {"time-order", "best-fit", "auto"}) {
        shardplan::SyntheticTraceOptions options = shape.options;
        options.buffers = buffers;
        const std::string name = std::string("Pack/synthetic/") + shape.name + "/" +
                                 std::to_string(buffers) + "/" + algorithm;
        benchmark::RegisterBenchmark(name.c_str(), pack_synthetic, options, std::string(algorithm))
            ->Iterations(1)
            ->Unit(benchmark::kMillisecond);
      }
    }
  }
  const std::string root = std::string(SHARDPLAN_SHARED_DIR) + "/benchmarks/minimalloc";
  std::vector<std::string> files;
  for (const char* folder : {"challenging", "examples", "idealloc/somas_tensors"}) {
    if (!std::filesystem::exists(root + "/" + folder)) continue;
    for (const auto& entry : std::filesystem::directory_iterator(root + "/" + folder)) {
      if (entry.path().extension() == ".csv") files.push_back(entry.path().string());
    }
  }
  std::sort(files.begin(), files.end());
  for (const std::string& file : files) {
    const std::string name = std::filesystem::path(file).parent_path().filename().string() + "/" +
                             std::filesystem::path(file).stem().string();
    for (const char* algorithm : {"slots", "best-fit", "exact", "auto"}) {
      benchmark::RegisterBenchmark(("Pack/" + name + "/" + algorithm).c_str(), pack_file, file,
                                   std::string(algorithm))
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
  }
  for (const auto& [model, nodes] : {std::pair{"llama3-70b", 8}, std::pair{"llama3.1-405b", 128},
                                     std::pair{"mixtral-8x7b", 4}}) {
    for (const char* algorithm : {"slots", "best-fit", "auto"}) {
      benchmark::RegisterBenchmark((std::string("PackPlan/") + model + "/" + algorithm).c_str(),
                                   pack_plan, model, static_cast<int64_t>(nodes),
                                   std::string(algorithm))
          ->Iterations(1)
          ->Unit(benchmark::kMillisecond);
    }
  }
  return 0;
}

const int registered = register_all();

}  // namespace
