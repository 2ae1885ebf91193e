// How the replay engine lays collectives onto a plan's buffers (both backends use it).
#include <gtest/gtest.h>

#include "executor/replay.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"

namespace shardplan {
namespace {

struct Placed {
  Plan plan;
  std::vector<std::vector<std::byte>> memory;
  std::vector<BufferSpan> spans;

  explicit Placed(const std::string& strategy) {
    const ModelSpec model = load_model("tiny");
    const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
    FsdpConfig c = fsdp_config_from_json({{"sharding_strategy", strategy}}, "test");
    plan = build_plan(model, cluster, resolve_fsdp_config(c, model, cluster, "test"));
    memory.resize(plan.buffers.size());
    for (const PlanBuffer& b : plan.buffers) {
      memory[static_cast<std::size_t>(b.id)].resize(static_cast<std::size_t>(b.bytes));
      spans.push_back({memory[static_cast<std::size_t>(b.id)].data(), b.bytes, &b});
    }
  }
  std::vector<CollectivePart> parts(const PlanOp& op) const {
    std::vector<BufferSpan> reads, writes;
    for (int64_t b : op.reads) reads.push_back(spans[static_cast<std::size_t>(b)]);
    for (int64_t b : op.writes) writes.push_back(spans[static_cast<std::size_t>(b)]);
    return collective_parts(plan, op, reads, writes);
  }
};

TEST(CollectiveParts, Zero3GathersEachGroupShardIntoItsRegion) {
  const Placed p("optim_grads_params");
  int checked = 0;
  for (const PlanOp& op : p.plan.ops) {
    if (op.kind == OpKind::all_gather) {
      const std::vector<CollectivePart> parts = p.parts(op);
      ASSERT_FALSE(parts.empty()) << op.name;
      std::byte* next = parts.front().target.data;
      for (const CollectivePart& part : parts) {
        EXPECT_FALSE(part.in_place);
        EXPECT_EQ(part.output, next) << op.name;  // group regions follow one another
        EXPECT_EQ(part.output_bytes, part.input_bytes * op_group_size(p.plan, op));
        next += part.output_bytes;
      }
      EXPECT_EQ(next, parts.front().target.data + parts.front().target.bytes) << op.name;
      ++checked;
    }
    if (op.kind == OpKind::reduce_scatter) {
      for (const CollectivePart& part : p.parts(op)) {
        EXPECT_FALSE(part.in_place);
        EXPECT_EQ(part.input_bytes, part.output_bytes * op_group_size(p.plan, op));
        EXPECT_EQ(part.output, part.target.data);
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 4);
}

TEST(CollectiveParts, Zero1ReducesAndGathersInPlace) {
  const Placed p("optim");
  int checked = 0;
  for (const PlanOp& op : p.plan.ops) {
    if (op.kind != OpKind::all_gather && op.kind != OpKind::reduce_scatter) continue;
    for (const CollectivePart& part : p.parts(op)) {
      EXPECT_TRUE(part.in_place) << op.name;
      EXPECT_EQ(part.input, part.target.data);
      EXPECT_EQ(part.output_bytes, part.target.bytes);
    }
    ++checked;
  }
  EXPECT_GT(checked, 4);
}

}  // namespace
}  // namespace shardplan
