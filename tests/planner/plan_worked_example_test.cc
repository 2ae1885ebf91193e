// A three-unit model on two ranks, worked out by hand: the exact op list with its
// dependencies, and live intervals, for prefetch 1 / recompute none and prefetch 0 /
// recompute full, over two micro-batches (ZeRO-3, drain 2, async reduce).
//
//   root unit: embed (Embedding 16×8) ... head (Linear 8→16)
//   unit 1:    blocks.0 (Linear 8→8)
//   unit 2:    blocks.1 (Linear 8→8)
#include <gtest/gtest.h>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

ModelSpec three_units() {
  return model_from_json(nlohmann::json::parse(R"({
    "name": "three", "family": "explicit", "default_unit_modules": ["blocks.*"],
    "root": {"type": "Net", "children": [
      {"name": "embed", "type": "Embedding", "parameters": [{"name": "weight", "shape": [16, 8]}]},
      {"name": "blocks", "type": "ModuleList", "children": [
        {"name": "0", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 8]}]},
        {"name": "1", "type": "Linear", "parameters": [{"name": "weight", "shape": [8, 8]}]}]},
      {"name": "head", "type": "Linear", "parameters": [{"name": "weight", "shape": [16, 8]}]}]}})"),
                         "three.json");
}

Plan plan_for(int64_t prefetch, const char* recompute) {
  const ModelSpec model = three_units();
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 2);
  const FsdpConfig config =
      resolve_fsdp_config(fsdp_config_from_json({{"forward_prefetch", prefetch},
                                                 {"backward_prefetch", prefetch},
                                                 {"recompute", recompute},
                                                 {"grad_accum", 2},
                                                 {"seq_len", 4}},
                                                "cfg"),
                          model, cluster, "cfg");
  Plan plan = build_plan(model, cluster, config);
  const auto error = validate_plan(plan);
  EXPECT_FALSE(error.has_value()) << error->message;
  return plan;
}

struct ExpectedOp {
  const char* name;
  std::vector<int64_t> deps;
};

void expect_ops(const Plan& plan, const std::vector<ExpectedOp>& expected) {
  ASSERT_EQ(plan.ops.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(plan.ops[i].name, expected[i].name) << "op " << i;
    EXPECT_EQ(plan.ops[i].deps, expected[i].deps) << "op " << i << " " << expected[i].name;
  }
}

const PlanBuffer& buffer(const Plan& plan, const std::string& name) {
  for (const PlanBuffer& b : plan.buffers) {
    if (b.name == name) return b;
  }
  ADD_FAILURE() << "no buffer " << name;
  return plan.buffers.front();
}

std::pair<int64_t, int64_t> live(const Plan& plan, const std::string& name) {
  const PlanBuffer& b = buffer(plan, name);
  return {b.live_begin, b.live_end};
}

using Interval = std::pair<int64_t, int64_t>;

TEST(WorkedExample, PrefetchOneRecomputeNone) {
  const Plan plan = plan_for(1, "none");
  // Prefetch 1: both layers fit the window (2 units), so every forward all-gather is
  // issued up front; in backward both are gathered as soon as the forward ends. Drain 2
  // never makes a backward wait (only two layers), so the final callback waits for all.
  const std::vector<int64_t> end0 = {11, 13, 14, 15};
  expect_ops(plan, {
                       {"ag_fwd <root> mb0", {}},        {"ag_fwd blocks.0 mb0", {}},
                       {"ag_fwd blocks.1 mb0", {}},      {"fwd embed mb0", {0}},
                       {"fwd blocks.0 mb0", {1, 3}},     {"fwd blocks.1 mb0", {2, 4}},
                       {"fwd head mb0", {0, 5}},         {"ag_bwd blocks.1 mb0", {6}},
                       {"ag_bwd blocks.0 mb0", {6}},     {"bwd head mb0", {6}},
                       {"bwd blocks.1 mb0", {7, 9}},     {"rs blocks.1 mb0", {10}},
                       {"bwd blocks.0 mb0", {8, 10}},    {"rs blocks.0 mb0", {12}},
                       {"bwd embed mb0", {12}},          {"rs <root> mb0", {14}},
                       {"ag_fwd <root> mb1", end0},      {"ag_fwd blocks.0 mb1", end0},
                       {"ag_fwd blocks.1 mb1", end0},    {"fwd embed mb1", {11, 13, 14, 15, 16}},
                       {"fwd blocks.0 mb1", {17, 19}},   {"fwd blocks.1 mb1", {18, 20}},
                       {"fwd head mb1", {16, 21}},       {"ag_bwd blocks.1 mb1", {22}},
                       {"ag_bwd blocks.0 mb1", {22}},    {"bwd head mb1", {22}},
                       {"bwd blocks.1 mb1", {23, 25}},   {"rs blocks.1 mb1", {26}},
                       {"bwd blocks.0 mb1", {24, 26}},   {"rs blocks.0 mb1", {28}},
                       {"bwd embed mb1", {28}},          {"rs <root> mb1", {30}},
                       {"optimizer_step", {27, 29, 31}},
                   });
  // Live intervals [first op, end) in op order.
  EXPECT_EQ(live(plan, "unsharded_weight <root> mb0"), Interval(0, 15));   // through backward
  EXPECT_EQ(live(plan, "unsharded_weight blocks.0 mb0"), Interval(1, 5));  // resharded after fwd
  EXPECT_EQ(live(plan, "unsharded_weight.bwd blocks.1 mb0"), Interval(7, 11));
  EXPECT_EQ(live(plan, "activations embed mb0"), Interval(3, 15));
  EXPECT_EQ(live(plan, "activations blocks.1 mb0"), Interval(5, 11));
  // Gradients read by the reduce-scatter on the rs stream are freed where the compute
  // stream waits: the next micro-batch's first forward.
  EXPECT_EQ(live(plan, "unsharded_grad blocks.1 mb0"), Interval(10, 19));
  EXPECT_EQ(live(plan, "unsharded_grad <root> mb0"), Interval(9, 19));
  // ... and in the last micro-batch, at the optimizer step.
  EXPECT_EQ(live(plan, "unsharded_grad blocks.0 mb1"), Interval(28, 32));
  // Streams: collectives off the compute stream.
  EXPECT_EQ(plan.ops[11].stream, Stream::rs);
  EXPECT_EQ(plan.ops[7].stream, Stream::ag);
  EXPECT_EQ(plan.ops[32].stream, Stream::compute);
}

TEST(WorkedExample, PrefetchZeroRecomputeFull) {
  const Plan plan = plan_for(0, "full");
  // Prefetch 0: each layer is gathered only after the previous one's compute; full
  // recompute re-runs each layer's forward right before its backward.
  const std::vector<int64_t> end0 = {12, 15, 16, 17};
  expect_ops(plan, {
                       {"ag_fwd <root> mb0", {}},
                       {"ag_fwd blocks.0 mb0", {}},
                       {"fwd embed mb0", {0}},
                       {"fwd blocks.0 mb0", {1, 2}},
                       {"ag_fwd blocks.1 mb0", {3}},
                       {"fwd blocks.1 mb0", {3, 4}},
                       {"fwd head mb0", {0, 5}},
                       {"ag_bwd blocks.1 mb0", {6}},
                       {"bwd head mb0", {6}},
                       {"recompute blocks.1 mb0", {7, 8}},
                       {"bwd blocks.1 mb0", {7, 8, 9}},
                       {"ag_bwd blocks.0 mb0", {10}},
                       {"rs blocks.1 mb0", {10}},
                       {"recompute blocks.0 mb0", {10, 11}},
                       {"bwd blocks.0 mb0", {10, 11, 13}},
                       {"rs blocks.0 mb0", {14}},
                       {"bwd embed mb0", {14}},
                       {"rs <root> mb0", {16}},
                       {"ag_fwd <root> mb1", end0},
                       {"ag_fwd blocks.0 mb1", end0},
                       {"fwd embed mb1", {12, 15, 16, 17, 18}},
                       {"fwd blocks.0 mb1", {19, 20}},
                       {"ag_fwd blocks.1 mb1", {21}},
                       {"fwd blocks.1 mb1", {21, 22}},
                       {"fwd head mb1", {18, 23}},
                       {"ag_bwd blocks.1 mb1", {24}},
                       {"bwd head mb1", {24}},
                       {"recompute blocks.1 mb1", {25, 26}},
                       {"bwd blocks.1 mb1", {25, 26, 27}},
                       {"ag_bwd blocks.0 mb1", {28}},
                       {"rs blocks.1 mb1", {28}},
                       {"recompute blocks.0 mb1", {28, 29}},
                       {"bwd blocks.0 mb1", {28, 29, 31}},
                       {"rs blocks.0 mb1", {32}},
                       {"bwd embed mb1", {32}},
                       {"rs <root> mb1", {34}},
                       {"optimizer_step", {30, 33, 35}},
                   });
  EXPECT_EQ(live(plan, "recompute_activations blocks.1 mb0"), Interval(9, 11));
  EXPECT_EQ(live(plan, "unsharded_weight.bwd blocks.1 mb0"), Interval(7, 11));
  EXPECT_EQ(live(plan, "unsharded_weight blocks.1 mb0"), Interval(4, 6));
  EXPECT_EQ(live(plan, "unsharded_grad blocks.1 mb0"), Interval(10, 20));
  EXPECT_EQ(live(plan, "activations blocks.0 mb0"), Interval(3, 15));
  // Full recompute keeps only the layer input: 8 bf16 elements per token × 4 tokens.
  EXPECT_EQ(buffer(plan, "activations blocks.0 mb0").bytes, 8 * 2 * 4);
  EXPECT_EQ(buffer(plan, "recompute_activations blocks.0 mb0").bytes, 8 * 2 * 4);
}

TEST(WorkedExample, GroupsArePaddedToEvenShards) {
  const Plan plan = plan_for(1, "none");
  ASSERT_EQ(plan.units.size(), 3u);
  // Root: embed 128 + head 128 = 256 elements; padded to 256 × 2 ranks.
  const ParamGroup& root = plan.groups[static_cast<std::size_t>(plan.units[0].groups[0])];
  EXPECT_EQ(root.elements, 256);
  EXPECT_EQ(root.padded_elements, 512);
  EXPECT_EQ(root.shard_elements, 256);
  EXPECT_EQ(root.parameters, (std::vector<std::string>{"embed.weight", "head.weight"}));
  const ParamGroup& layer = plan.groups[static_cast<std::size_t>(plan.units[1].groups[0])];
  EXPECT_EQ(layer.elements, 64);
  EXPECT_EQ(layer.padded_elements, 512);
  // The bf16 model-weight shard is the padded group over 2 ranks.
  EXPECT_EQ(buffer(plan, "model_weight blocks.0 g1").bytes, 256 * 2);
  EXPECT_EQ(buffer(plan, "unsharded_weight blocks.0 mb0").bytes, 512 * 2);
}

}  // namespace
}  // namespace shardplan
