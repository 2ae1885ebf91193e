// nccl-tests output -> parse_nccl_tests_log; every sample it returns must be usable by
// the fit (positive size and time, a layout of at least one rank), and the fit on it
// must leave finite, in-range scales.
#include <cmath>

#include "calibrate/calibrate.h"
#include "calibrate/nccl_tests_log.h"
#include "fuzz_support.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const NcclTestsLog log = parse_nccl_tests_log(fuzz::text(data, size), "all_reduce.log");
    for (const CollectiveSample& s : log.samples) {
      fuzz::require(s.bytes > 0 && s.seconds > 0 && std::isfinite(s.seconds),
                    "samples are positive and finite");
      fuzz::require(s.layout.ranks >= 1 && s.layout.ranks_per_node >= 1, "layouts are real");
    }
    if (log.samples.size() > 200 || log.ranks > 4096) return;
    ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, std::nullopt);
    CalibrationReport report;
    fit_collectives(cluster, log.samples, report);
    for (const CollectiveCalibration& k : cluster.collective_calibration) {
      fuzz::require(k.latency_scale >= 1e-3 && k.latency_scale <= 1e3 &&
                        k.bandwidth_scale >= 1e-3 && k.bandwidth_scale <= 1e3,
                    "scales stay in the range cluster files accept");
    }
  });
}
