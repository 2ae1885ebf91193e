// plan.json -> read, validate, and (when consistent) simulate on its cluster.
#include <algorithm>

#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "simulator/simulate.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<std::string> clusters = cluster_zoo_names();
  return fuzz::guarded([&] {
    const Plan plan = plan_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    if (validate_plan(plan)) return;
    if (std::find(clusters.begin(), clusters.end(), plan.cluster) == clusters.end()) return;
    const ClusterSpec cluster = load_cluster(plan.cluster, std::nullopt, plan.num_gpus);
    if (cluster.gpus_per_node != plan.gpus_per_node) return;
    const Timeline timeline = simulate(plan, cluster);
    fuzz::require(fuzz::finite_non_negative(timeline.summary.step_seconds), "step time is finite");
  });
}
