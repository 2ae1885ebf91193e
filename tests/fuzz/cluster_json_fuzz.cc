// Cluster JSON -> NCCL cost predictions of every collective at a few sizes and layouts,
// and a compute op's time: whatever the reader accepts stays inside the physical ranges
// (cluster_bounds; measured rates at most their peaks; at least one SM per collective),
// so no prediction is infinite or endless.
#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "simulator/collective_model.h"
#include "simulator/compute_model.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const ClusterSpec cluster =
        cluster_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    const ComputeSpec& e = cluster.compute;
    for (const double efficiency :
         {e.gemm_efficiency, e.fp8_gemm_efficiency, e.attention_efficiency,
          e.sdpa_attention_efficiency, e.elementwise_efficiency, e.optimizer_efficiency}) {
      fuzz::require(efficiency >= cluster_bounds::kMinEfficiency &&
                        efficiency <= cluster_bounds::kMaxEfficiency,
                    "efficiencies stay in their physical range");
    }
    fuzz::require(
        e.overlap_slowdown >= 0 && e.overlap_slowdown <= cluster_bounds::kMaxOverlapSlowdown,
        "the overlap slowdown stays in its range");
    fuzz::require(
        cluster.gpu.hbm_measured_bandwidth_bytes_per_s <= cluster.gpu.hbm_bandwidth_bytes_per_s,
        "measured HBM bandwidth is at most the peak");
    fuzz::require(cluster.nccl.collective_sms >= 1, "a collective runs on at least one SM");
    // A second of work per class at efficiency 1 takes at most 100 s per class.
    const ComputeWork work{
        .bf16_gemm = 1, .fp8_gemm = 1, .attention = 1, .memory = 1, .optimizer = 1};
    const double seconds = compute_seconds(work, e);
    fuzz::require(
        fuzz::finite_non_negative(seconds) && seconds <= 5.0 / cluster_bounds::kMinEfficiency,
        "compute time is bounded");
    for (const Collective op :
         {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
      for (const int64_t ranks : {int64_t{2}, cluster.gpus_per_node, 4 * cluster.gpus_per_node}) {
        for (const double bytes : {0.0, 1.0, 1e6, 1e12}) {
          const CollectiveEstimate c = estimate_collective(
              cluster, op, bytes, {.ranks = ranks, .ranks_per_node = cluster.gpus_per_node});
          fuzz::require(fuzz::finite_non_negative(c.seconds), "collective time is finite");
        }
      }
    }
  });
}
