// A config JSON object and --set overrides -> resolve against the tiny model on one
// DGX H100 node -> plan -> simulate. The input is `key=value` override lines, a line
// "---", then the JSON config (no "---": the whole input is the JSON). A first line "moe"
// picks tiny-moe instead (4 experts, top 2), for the expert-parallel fields.
#include <string>
#include <vector>

#include "fuzz_support.h"
#include "models/cluster_spec.h"
#include "models/json_reader.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"
#include "simulator/simulate.h"

using namespace shardplan;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const ModelSpec dense = load_model("tiny");
  static const ModelSpec moe = load_model("tiny-moe");
  static const ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  static const auto assigner = make_best_fit_assigner();
  return fuzz::guarded([&] {
    std::string_view input = fuzz::text(data, size);
    const bool experts = input.starts_with("moe\n");
    if (experts) input.remove_prefix(4);
    const ModelSpec& model = experts ? moe : dense;
    std::vector<std::string> overrides;
    if (const size_t split = input.find("---\n"); split != std::string_view::npos) {
      std::string_view head = input.substr(0, split);
      input.remove_prefix(split + 4);
      while (!head.empty()) {
        const size_t end = head.find('\n');
        overrides.emplace_back(head.substr(0, end));
        head.remove_prefix(end == std::string_view::npos ? head.size() : end + 1);
      }
    }
    nlohmann::json json = input.empty() ? nlohmann::json::object() : parse_json_text(input, "fuzz");
    apply_overrides(json, overrides);
    const FsdpConfig config =
        resolve_fsdp_config(fsdp_config_from_json(json, "fuzz"), model, cluster, "fuzz");
    const Plan plan = build_plan(model, cluster, config, assigner.get());
    fuzz::require(!validate_plan(plan), "a plan from an accepted config is valid");
    const Timeline timeline = simulate(plan, cluster);
    fuzz::require(fuzz::finite_non_negative(timeline.summary.step_seconds), "step time is finite");
  });
}
