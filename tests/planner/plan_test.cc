// Plan helpers every consumer shares: process-group layout and each op's matmuls.
#include "planner/plan.h"

#include <gtest/gtest.h>

#include <tuple>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "tests/planner/tiny_plan.h"

namespace shardplan {
namespace {

using testing::tiny_plan;

// Worked by hand for 8 ranks as dp_outer 2 × dp_shard 4: dp_shard instances are
// {0,1,2,3} and {4,5,6,7}; dp_outer instances {0,4}, {1,5}, {2,6}, {3,7}.
TEST(ProcessGroup, PositionsAndInstancesOfAnHsdpMesh) {
  const ProcessGroup shard{.name = "dp_shard", .size = 4, .stride = 1};
  const ProcessGroup outer{.name = "dp_outer", .size = 2, .stride = 4};
  const int64_t shard_rank[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  const int64_t shard_instance[8] = {0, 0, 0, 0, 4, 4, 4, 4};
  const int64_t outer_rank[8] = {0, 0, 0, 0, 1, 1, 1, 1};
  const int64_t outer_instance[8] = {0, 1, 2, 3, 0, 1, 2, 3};
  for (int64_t r = 0; r < 8; ++r) {
    EXPECT_EQ(group_rank(shard, r), shard_rank[r]) << r;
    EXPECT_EQ(group_instance(shard, r), shard_instance[r]) << r;
    EXPECT_EQ(group_rank(outer, r), outer_rank[r]) << r;
    EXPECT_EQ(group_instance(outer, r), outer_instance[r]) << r;
  }
}

TEST(ProcessGroup, ThePlanNamesItsGroupsAndEveryCollectiveUsesOne) {
  const Plan plan = tiny_plan({{"dp_outer", 2}, {"outer_strategy", "optim"}});
  // tp, cp, dp_shard_cp, dp_outer, dp; tp = cp = 1 here.
  ASSERT_EQ(plan.process_groups.size(), 5u);
  const std::vector<std::tuple<std::string, int64_t, int64_t>> expected = {
      {"tp", 1, 1}, {"cp", 1, 1}, {"dp_shard_cp", 2, 1}, {"dp_outer", 2, 2}, {"dp", 4, 1}};
  for (std::size_t g = 0; g < expected.size(); ++g) {
    EXPECT_EQ(plan.process_groups[g].name, std::get<0>(expected[g]));
    EXPECT_EQ(plan.process_groups[g].size, std::get<1>(expected[g])) << g;
    EXPECT_EQ(plan.process_groups[g].stride, std::get<2>(expected[g])) << g;
  }
  int outer_ops = 0;
  for (const PlanOp& op : plan.ops) {
    ASSERT_EQ(op.group >= 0, is_collective(op.kind)) << op.name;
    if (op.name.rfind("outer_", 0) == 0) {
      EXPECT_EQ(op.group, 3) << op.name;
      ++outer_ops;
    }
  }
  EXPECT_GT(outer_ops, 0);
  // Optimizer state is split over both dimensions; weights and gradients over dp_shard.
  for (const PlanBuffer& b : plan.buffers) {
    if (b.role == BufferRole::optimizer_state) {
      EXPECT_EQ(b.shard_group, 4) << b.name;
    }
    if (b.role == BufferRole::model_weight) {
      EXPECT_EQ(b.shard_group, 2) << b.name;
    }
  }
}

// A matmul of m × n × k in forward is, in backward, the input gradient (m × k ← n) and
// the weight gradient (n × k ← m): the same FLOPs twice, whatever the shape.
TEST(OpGemms, BackwardRunsTheInputAndWeightGradientOfEveryForwardMatmul) {
  const Plan plan = tiny_plan({{"recompute", "full"}});
  int checked = 0;
  for (const PlanOp& op : plan.ops) {
    const std::vector<GemmShape> gemms = op_gemms(plan, op);
    if (op.segment < 0) {
      EXPECT_TRUE(gemms.empty()) << op.name;
      continue;
    }
    const std::vector<GemmShape>& forward =
        plan.segments[static_cast<std::size_t>(op.segment)].gemms;
    if (op.kind != OpKind::backward) {
      ASSERT_EQ(gemms.size(), forward.size()) << op.name;
      continue;
    }
    ASSERT_EQ(gemms.size(), 2 * forward.size()) << op.name;
    for (std::size_t i = 0; i < forward.size(); ++i) {
      const GemmShape& f = forward[i];
      const GemmShape& input_grad = gemms[2 * i];
      const GemmShape& weight_grad = gemms[2 * i + 1];
      EXPECT_EQ(input_grad.m, f.m);  // tokens
      EXPECT_EQ(input_grad.n, f.k);  // in features
      EXPECT_EQ(input_grad.k, f.n);  // reduced over out features
      EXPECT_EQ(weight_grad.m, f.n);
      EXPECT_EQ(weight_grad.n, f.k);
      EXPECT_EQ(weight_grad.k, f.m);           // reduced over tokens
      EXPECT_EQ(input_grad.groups, f.groups);  // a grouped GEMM stays grouped
      EXPECT_EQ(weight_grad.groups, f.groups);
      EXPECT_FALSE(input_grad.weight_gradient);
      EXPECT_TRUE(weight_grad.weight_gradient);  // its tokens are in k
      EXPECT_EQ(input_grad.m * input_grad.n * input_grad.k, f.m * f.n * f.k);
      EXPECT_EQ(weight_grad.m * weight_grad.n * weight_grad.k, f.m * f.n * f.k);
    }
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace shardplan
