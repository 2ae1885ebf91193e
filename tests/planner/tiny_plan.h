#pragma once

// The planner tests' small job: the `tiny` model on 4 H100s, 32-token sequences, and
// any config fields on top.
#include <nlohmann/json.hpp>

#include "models/zoo.h"
#include "planner/plan_builder.h"

namespace shardplan::testing {

inline Plan tiny_plan(const nlohmann::json& extra = nlohmann::json::object()) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  nlohmann::json j = extra;
  if (!j.contains("seq_len")) j["seq_len"] = 32;
  const FsdpConfig c = resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
  return build_plan(model, cluster, c);
}

}  // namespace shardplan::testing
