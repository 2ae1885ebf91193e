// `calibrate --nccl-tests` on long logs: an nccl-tests sweep with a fixed increment
// (`-b 1M -e 2G -i 1M` prints 2,048 rows) read and fitted, at 1k, 2k and 10k rows. Prints
// figures; never fails on time.
#include <benchmark/benchmark.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "calibrate/calibrate.h"
#include "calibrate/nccl_tests_log.h"
#include "models/cluster_spec.h"

namespace {

// An all_reduce_perf log of 8 ranks on one host, one process per GPU, sizes 1 MiB apart:
// 25 µs plus the bus bytes at 360 GB/s, with ±2 % of deterministic jitter, the columns as
// nccl-tests prints them.
std::string all_reduce_log(int64_t rows) {
  std::string text =
      "# Collective test starting: all_reduce_perf\n"
      "# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2147483648 step: 1048576(bytes) warmup "
      "iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0\n";
  for (int rank = 0; rank < 8; ++rank) {
    text += "#  Rank  " + std::to_string(rank) + " Group  0 Pid " + std::to_string(1000 + rank) +
            " on node-a device  " + std::to_string(rank) + " [0000:18:00] NVIDIA H100 80GB HBM3\n";
  }
  text +=
      "#       size         count      type   redop    root     time   algbw   busbw #wrong     "
      "time   algbw   busbw #wrong\n";
  char line[256];
  for (int64_t i = 1; i <= rows; ++i) {
    const double bytes = static_cast<double>(i) * 1048576.0;
    std::string columns;
    for (int pass = 0; pass < 2; ++pass) {
      const double jitter = 1.0 + 0.02 * std::sin(static_cast<double>(i) * 12.9898 + pass * 78.233);
      const double us = (25.0 + 1.75 * bytes / 360e3) * jitter;
      const double algbw = bytes / (us * 1e3);
      std::snprintf(line, sizeof line, "  %.2f  %.2f  %.2f  0", us, algbw, 1.75 * algbw);
      columns += line;
    }
    std::snprintf(line, sizeof line, "%12.0f  %12.0f  float  sum  -1", bytes, bytes / 4);
    text += line + columns + "\n";
  }
  return text;
}

void BM_CalibrateNcclTestsLog(benchmark::State& state) {
  const std::string text = all_reduce_log(state.range(0));
  const shardplan::ClusterSpec base = shardplan::load_cluster("dgx-h100", std::nullopt, 8);
  std::size_t regimes = 0;
  for (auto _ : state) {
    const shardplan::NcclTestsLog log = shardplan::parse_nccl_tests_log(text, "all_reduce.log");
    shardplan::ClusterSpec cluster = base;
    shardplan::CalibrationReport report;
    shardplan::fit_collectives(cluster, log.samples, report);
    regimes = cluster.collective_calibration.size();
  }
  state.counters["rows"] = static_cast<double>(state.range(0));
  state.counters["regimes"] = static_cast<double>(regimes);
}

void BM_ParseNcclTestsLog(benchmark::State& state) {
  const std::string text = all_reduce_log(state.range(0));
  std::size_t samples = 0;
  for (auto _ : state) {
    samples = shardplan::parse_nccl_tests_log(text, "all_reduce.log").samples.size();
  }
  state.counters["samples"] = static_cast<double>(samples);
  state.counters["MB_per_s"] = benchmark::Counter(
      static_cast<double>(text.size()) * 1e-6 * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

}  // namespace

BENCHMARK(BM_CalibrateNcclTestsLog)
    ->Arg(1000)
    ->Arg(2000)
    ->Arg(10000)
    ->Unit(benchmark::kMillisecond)
    ->Iterations(1);
BENCHMARK(BM_ParseNcclTestsLog)->Arg(10000)->Unit(benchmark::kMillisecond);
