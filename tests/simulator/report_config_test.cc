// The step report's config line names the whole mesh: dp_outer × dp_shard × cp × tp and,
// on an expert mesh, ep × etp (it named dp_shard and dp_outer only).
#include <gtest/gtest.h>

#include <string>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "simulator/report.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

std::string report_of(const std::string& model_name, int64_t gpus, const nlohmann::json& settings) {
  const ModelSpec model = load_model(model_name);
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, gpus);
  const FsdpConfig c =
      resolve_fsdp_config(fsdp_config_from_json(settings, "cfg"), model, cluster, "cfg");
  const Plan plan = build_plan(model, cluster, c);
  return html_report(plan, simulate(plan, cluster));
}

TEST(ReportConfigLine, NamesTheWholeMesh) {
  const std::string dense = report_of("tiny", 8, {{"tp", 2}, {"cp", 2}, {"seq_len", 512}});
  EXPECT_NE(dense.find("dp_outer 1 × dp_shard 2 × cp 2 × tp 2, prefetch"), std::string::npos);
  const std::string moe = report_of("tiny-moe", 4, {{"ep", 2}, {"seq_len", 128}});
  EXPECT_NE(moe.find("dp_outer 1 × dp_shard 4 × cp 1 × tp 1, experts ep 2 × etp 1, prefetch"),
            std::string::npos);
}

}  // namespace
}  // namespace shardplan
