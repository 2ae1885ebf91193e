// Root shapes a captured model can take: a root that owns nothing outside its units
// (nn.TransformerEncoder), a root that is the whole model (nn.Linear), and a root with a
// parameter and work of its own beside its units. Every plan validates under every
// strategy, and the root unit is gathered only when it has something to gather.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

ModelSpec model(const char* root, bool units = true) {
  return model_from_json(nlohmann::json::parse(std::string(R"({"name": "m", "family": "explicit",
        "default_unit_modules": )") + (units ? R"(["blocks.*"])" : "[]") +
                                               R"(, "root": )" + root + "}"),
                         "test model");
}

const char* kNoRootParameters = R"({"type": "Net", "children": [
  {"name": "blocks", "type": "ModuleList", "children": [
    {"name": "0", "type": "Linear", "parameters": [{"name": "weight", "shape": [16, 8]}]},
    {"name": "1", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 16]}]}]}]})";

const char* kRootOnly = R"({"type": "Linear", "parameters": [{"name": "weight", "shape": [16, 8]}],
  "cost": {"kind": "gemm", "fwd_flops_per_token": 256}})";

const char* kRootOwnsAParameter = R"({"type": "Net",
  "parameters": [{"name": "pos", "shape": [64, 8]}],
  "cost": {"kind": "elementwise", "fwd_io_elements_per_token": 24},
  "children": [
  {"name": "blocks", "type": "ModuleList", "children": [
    {"name": "0", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 8]}]},
    {"name": "1", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 8]}]}]}]})";

Plan plan_for(const ModelSpec& m, const std::string& strategy) {
  const nlohmann::json j = {{"sharding_strategy", strategy}, {"seq_len", 64}};
  const ClusterSpec cluster = load_cluster("dgx-h100", 1, std::nullopt);
  return build_plan(m, cluster,
                    resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), m, cluster, "cfg"));
}

bool has_op(const Plan& plan, const std::string& name) {
  return std::any_of(plan.ops.begin(), plan.ops.end(),
                     [&](const PlanOp& op) { return op.name == name; });
}

class RootShapes : public ::testing::TestWithParam<std::string> {};

TEST_P(RootShapes, RootWithoutParametersIsNotGathered) {
  const Plan plan = plan_for(model(kNoRootParameters), GetParam());
  const auto error = validate_plan(plan);
  ASSERT_FALSE(error.has_value()) << error->message;
  EXPECT_FALSE(has_op(plan, "ag_fwd <root> mb0"));
  EXPECT_FALSE(has_op(plan, "rs <root> mb0"));
  EXPECT_EQ(plan.segments.size(), 2u);  // the two blocks, nothing for the root
}

TEST_P(RootShapes, RootThatIsTheWholeModel) {
  const Plan plan = plan_for(model(kRootOnly, false), GetParam());
  const auto error = validate_plan(plan);
  ASSERT_FALSE(error.has_value()) << error->message;
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_EQ(plan.segments[0].unit, 0);
  // 256 FLOPs per token over a micro-batch of 1 × 64 tokens.
  EXPECT_DOUBLE_EQ(plan.segments[0].forward_flops, 256.0 * 64);
  EXPECT_EQ(has_op(plan, "ag_fwd <root> mb0"), GetParam() == "optim_grads_params");
}

TEST_P(RootShapes, RootOwnWorkIsItsOwnSegmentBeforeTheUnits) {
  const Plan plan = plan_for(model(kRootOwnsAParameter), GetParam());
  const auto error = validate_plan(plan);
  ASSERT_FALSE(error.has_value()) << error->message;
  ASSERT_EQ(plan.segments.size(), 3u);
  EXPECT_EQ(plan.segments[0].unit, 0);
  EXPECT_EQ(plan.segments[0].label, "<root>");
  // Only the root's own work: its 24 io elements per token, not the blocks' matmuls.
  EXPECT_DOUBLE_EQ(plan.segments[0].forward_flops, 0.0);
  EXPECT_DOUBLE_EQ(plan.segments[0].io_bytes, 24.0 * 64 * 2);
  EXPECT_DOUBLE_EQ(plan.segments[1].forward_flops, 2.0 * 8 * 8 * 64);
}

INSTANTIATE_TEST_SUITE_P(EveryStrategy, RootShapes,
                         ::testing::Values("no_shard", "optim", "optim_grads",
                                           "optim_grads_params"));

TEST(RootShapes, NoUnitsMakesTheWholeModelTheRootUnit) {
  const Plan plan = plan_for(model(kNoRootParameters, false), "optim_grads_params");
  const auto error = validate_plan(plan);
  ASSERT_FALSE(error.has_value()) << error->message;
  ASSERT_EQ(plan.segments.size(), 1u);
  EXPECT_DOUBLE_EQ(plan.segments[0].forward_flops, 2.0 * (16 * 8 + 8 * 16) * 64);
}

}  // namespace
}  // namespace shardplan
