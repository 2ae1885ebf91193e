// Cluster JSON -> NCCL cost predictions of every collective at a few sizes and layouts.
#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "simulator/collective_model.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return fuzz::guarded([&] {
    const ClusterSpec cluster =
        cluster_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    for (const Collective op :
         {Collective::all_gather, Collective::reduce_scatter, Collective::all_reduce}) {
      for (const int64_t ranks : {int64_t{2}, cluster.gpus_per_node, 4 * cluster.gpus_per_node}) {
        for (const double bytes : {0.0, 1.0, 1e6, 1e12}) {
          const CollectiveEstimate e = estimate_collective(
              cluster, op, bytes, {.ranks = ranks, .ranks_per_node = cluster.gpus_per_node});
          fuzz::require(fuzz::finite_non_negative(e.seconds), "collective time is finite");
        }
      }
    }
  });
}
