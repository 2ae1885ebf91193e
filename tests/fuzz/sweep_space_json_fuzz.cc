// Sweep search-space JSON -> the configurations it enumerates for the tiny model on one
// DGX H100 node.
#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/sweep.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelSpec model = load_model("tiny");
  static const ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  static const FsdpConfig base{};
  static const SearchSpace defaults = default_search_space(model, cluster, base);
  return fuzz::guarded([&] {
    const SearchSpace space =
        search_space_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz", defaults);
    enumerate_configs(space, base, cluster.num_gpus);
  });
}
