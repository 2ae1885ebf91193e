// nccl-tests output -> parse_nccl_tests_log; every sample it returns must be usable by
// the fit (positive size and time, at most an hour, a layout of at least one rank), and
// the fit on it must leave finite, in-range scales or refuse by name (InputError).
#include <cmath>

#include "calibrate/calibrate.h"
#include "calibrate/fit_stats.h"
#include "calibrate/nccl_tests_log.h"
#include "fuzz_support.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const NcclTestsLog log = parse_nccl_tests_log(fuzz::text(data, size), "all_reduce.log");
    for (const CollectiveSample& s : log.samples) {
      fuzz::require(s.bytes > 0 && s.bytes <= kMaxCollectiveBytes && s.seconds > 0 &&
                        s.seconds <= kMaxMeasuredSeconds,
                    "samples are positive and bounded");
      fuzz::require(s.layout.ranks >= 1 && s.layout.ranks_per_node >= 1, "layouts are real");
    }
    fuzz::require(log.gpus_per_process >= 1, "a process drives at least one GPU");
    // The fit is near-linear in the samples (the cut search runs on a grid): a few
    // thousand keep each input well inside libFuzzer's timeout.
    if (log.samples.size() > 4000 || log.ranks > 4096) return;
    ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
    CalibrationReport report;
    fit_collectives(cluster, log.samples, report);
    for (const CollectiveCalibration& k : cluster.collective_calibration) {
      fuzz::require(k.latency_scale >= cluster_bounds::kMinCalibrationScale &&
                        k.latency_scale <= cluster_bounds::kMaxCalibrationScale &&
                        k.bandwidth_scale >= cluster_bounds::kMinCalibrationScale &&
                        k.bandwidth_scale <= cluster_bounds::kMaxCalibrationScale,
                    "scales stay in the range cluster files accept");
    }
  });
}
