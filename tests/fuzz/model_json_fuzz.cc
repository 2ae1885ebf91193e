// Model JSON (zoo families and explicit module trees) -> the closed-form memory estimate,
// and the explicit form of whatever was accepted reads back to the same parameter count.
#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/explicit_model.h"
#include "models/json_reader.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/memory_estimate.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  return fuzz::guarded([&] {
    const ModelSpec model =
        model_from_json(parse_json_text(fuzz::text(data, size), "fuzz"), "fuzz");
    const ModelSpec again = model_from_json(model_to_explicit_json(model), "explicit");
    fuzz::require(parameter_count(again.root) == parameter_count(model.root),
                  "the explicit form keeps the parameter count");
    const FsdpConfig config = resolve_fsdp_config(FsdpConfig{}, model, cluster, "config");
    const MemoryEstimate m = estimate_memory(model, cluster, config);
    fuzz::require(fuzz::finite_non_negative(m.total), "memory total is finite");
  });
}
