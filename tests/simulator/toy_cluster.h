#pragma once

#include "models/cluster_spec.h"

namespace shardplan::testing {

// A cluster where times are easy: 1 TFLOP/s at efficiency 1, 1 TB/s of HBM, a 1 GB/s
// NVLink bus, no overlap slowdown unless a test sets one, the reference host.
inline ClusterSpec toy_cluster() {
  ClusterSpec c = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  c.gpu.bf16_dense_flops = 1e12;
  c.gpu.hbm_measured_bandwidth_bytes_per_s = 1e12;
  c.intra_node.measured_bus_bandwidth_bytes_per_s = 1e9;
  c.compute = {.gemm_efficiency = 1,
               .attention_efficiency = 1,
               .elementwise_efficiency = 1,
               .optimizer_efficiency = 1,
               .overlap_slowdown = 0};
  return c;
}

}  // namespace shardplan::testing
