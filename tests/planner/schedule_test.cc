// The schedule's policies, tested directly, and the rule they produce in a built plan.
#include "planner/internal/schedule.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "tests/planner/tiny_plan.h"

namespace shardplan {
namespace {

// Prefetch 1 over four layers: layers 0 and 1 are gathered when the pass starts, layer 2
// once layer 0 has run, layer 3 once layer 1 has.
TEST(GatherTrigger, PrefetchOneWorkedByHand) {
  EXPECT_EQ(gather_trigger(0, 1), -1);
  EXPECT_EQ(gather_trigger(1, 1), -1);
  EXPECT_EQ(gather_trigger(2, 1), 0);
  EXPECT_EQ(gather_trigger(3, 1), 1);
}

TEST(GatherTrigger, AtMostPrefetchPlusOneLayersAreGatheredAhead) {
  for (int64_t k = 0; k <= 4; ++k) {
    for (int64_t position = 0; position < 12; ++position) {
      const int64_t trigger = gather_trigger(position, k);
      // Gathered at the start, or once the layer k + 1 positions back has run.
      EXPECT_EQ(trigger, position <= k ? -1 : position - k - 1) << k << " " << position;
    }
  }
}

TEST(DrainDependency, WaitsForTheReductionDrainLayersBack) {
  EXPECT_EQ(drain_dependency(0, 2), -1);
  EXPECT_EQ(drain_dependency(1, 2), -1);
  EXPECT_EQ(drain_dependency(2, 2), 0);
  EXPECT_EQ(drain_dependency(5, 2), 3);
  EXPECT_EQ(drain_dependency(3, 1), 2);  // synchronous: every backward waits for the last
}

TEST(DrainDepth, SynchronousReductionDrainsEveryLayer) {
  FsdpConfig c;
  c.max_live_grad_buffers = 3;
  EXPECT_EQ(drain_depth(c), 3);
  c.async_reduce = false;
  EXPECT_EQ(drain_depth(c), 1);
}

using testing::tiny_plan;

// In a built plan, each layer's forward gather depends on exactly the forward its
// trigger names (or on nothing of this micro-batch's compute, when the trigger is -1).
TEST(GatherTrigger, ThePlanIssuesEachForwardGatherAfterItsTrigger) {
  for (int64_t k : {0, 1, 2}) {
    const Plan plan = tiny_plan({{"forward_prefetch", k}});
    std::map<std::string, int64_t> forward_of;  // "layers.i" -> fwd op id
    std::vector<std::string> layer_order;
    for (const PlanOp& op : plan.ops) {
      if (op.kind == OpKind::forward && op.unit != 0) {
        const std::string unit = plan.units[static_cast<std::size_t>(op.unit)].name;
        forward_of[unit] = op.id;
        layer_order.push_back(unit);
      }
    }
    ASSERT_GE(layer_order.size(), 2u);
    int checked = 0;
    for (const PlanOp& op : plan.ops) {
      if (op.name.rfind("ag_fwd layers.", 0) != 0) continue;
      const std::string unit = plan.units[static_cast<std::size_t>(op.unit)].name;
      const auto position = static_cast<int64_t>(
          std::find(layer_order.begin(), layer_order.end(), unit) - layer_order.begin());
      const int64_t trigger = gather_trigger(position, k);
      if (trigger < 0) {
        EXPECT_TRUE(op.deps.empty()) << op.name;
      } else {
        ASSERT_EQ(op.deps.size(), 1u) << op.name;
        EXPECT_EQ(op.deps[0], forward_of[layer_order[static_cast<std::size_t>(trigger)]])
            << op.name;
      }
      ++checked;
    }
    EXPECT_EQ(checked, static_cast<int>(layer_order.size()));
  }
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// tp_comm_overlap: Transformer Engine pipelines the sequence-parallel collectives of both
// passes (on the tp stream); PyTorch's AsyncTP those of the forward only, the backward's
// stay on the compute stream.
TEST(TpOverlap, TheStackSaysWhichPassesOverlap) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  for (const Stack stack : {Stack::megatron_te, Stack::torch_compile}) {
    FsdpConfig c;
    c.tp = 2;
    c.tp_comm_overlap = true;
    c.stack = stack;
    const Plan plan = build_plan(model, cluster, resolve_fsdp_config(c, model, cluster, "t"));
    std::map<std::string, std::map<Stream, int64_t>> streams;  // pass -> stream -> ops
    for (const PlanOp& op : plan.ops) {
      if (op.name.rfind("tp_", 0) != 0) continue;
      const std::string pass = op.name.find(" fwd ") != std::string::npos ? "fwd" : "bwd";
      streams[pass][op.stream] += 1;
    }
    ASSERT_GT(streams["fwd"][Stream::tp], 0) << stack_name(stack);
    EXPECT_EQ(streams["fwd"][Stream::compute], 0) << stack_name(stack);
    if (stack == Stack::megatron_te) {
      EXPECT_GT(streams["bwd"][Stream::tp], 0);
      EXPECT_EQ(streams["bwd"][Stream::compute], 0);
    } else {
      EXPECT_EQ(streams["bwd"][Stream::tp], 0);
      EXPECT_GT(streams["bwd"][Stream::compute], 0);
    }
  }
}

}  // namespace
}  // namespace shardplan
