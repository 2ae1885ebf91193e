// How the replay engine lays collectives onto a plan's buffers (both backends use it).
#include <gtest/gtest.h>

#include "executor/replay.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "simulator/compute_model.h"

namespace shardplan {
namespace {

struct Placed {
  Plan plan;
  std::vector<std::vector<std::byte>> memory;
  std::vector<BufferSpan> spans;

  ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);

  explicit Placed(const std::string& strategy,
                  const nlohmann::json& extra = nlohmann::json::object()) {
    const ModelSpec model = load_model("tiny");
    nlohmann::json j = extra;
    j["sharding_strategy"] = strategy;
    FsdpConfig c = fsdp_config_from_json(j, "test");
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

// PyTorch FSDP with bf16 master weights reducing in fp32 (KempnerForge): each reduce-scatter
// widens the bf16 gradients into an fp32 input it writes, reduces 4-byte elements and lands
// half as many bytes per element in the bf16 shard; the input regions follow one another
// in fp32. Under no_sync the input is copied from the fp32 accumulator as it is.
TEST(CollectiveParts, Fp32ReductionIntoBf16Gradients) {
  for (const bool no_sync : {false, true}) {
    nlohmann::json config = {{"stack", "torch-compile"},
                             {"main_param_dtype", "bf16"},
                             {"grad_reduce_dtype", "fp32"},
                             {"grad_accum", 2}};
    if (no_sync) config["no_sync"] = true;
    const Placed p("optim_grads_params", config);
    int checked = 0;
    for (const PlanOp& op : p.plan.ops) {
      if (op.kind != OpKind::reduce_scatter) continue;
      const std::vector<CollectivePart> parts = p.parts(op);
      ASSERT_FALSE(parts.empty()) << op.name;
      const int64_t ranks = op_group_size(p.plan, op);
      std::byte* next = parts.front().input;
      for (const CollectivePart& part : parts) {
        EXPECT_FALSE(part.in_place) << op.name;
        EXPECT_EQ(part.target.buffer->dtype, DType::bf16) << op.name;
        EXPECT_EQ(part.input_element_bytes, 4) << op.name;
        EXPECT_EQ(part.input_bytes, part.output_bytes / 2 * 4 * ranks) << op.name;
        EXPECT_EQ(part.input, next) << op.name;
        next += part.input_bytes;
        ASSERT_NE(part.cast_source, nullptr) << op.name;
        EXPECT_EQ(part.cast_from, no_sync ? 4 : 2) << op.name;
        EXPECT_EQ(part.cast_to, 4) << op.name;
      }
      ++checked;
    }
    EXPECT_GT(checked, 4) << no_sync;
  }
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

// bucket_bytes splits a unit's parameters into several groups. Megatron-FSDP gathers and
// reduces a unit's buckets as one coalesced NCCL call (_coalescing_manager): the executor
// issues one part per group (the CUDA plugin inside one ncclGroupStart/End), and the
// simulator charges the op the time of one collective of all its bytes.
TEST(CollectiveParts, BucketsAreThePartsOfOneCoalescedCollective) {
  const Placed p("optim_grads_params", {{"bucket_bytes", 20000}});
  int split = 0;
  for (const PlanOp& op : p.plan.ops) {
    if (op.kind != OpKind::all_gather && op.kind != OpKind::reduce_scatter) continue;
    const std::vector<CollectivePart> parts = p.parts(op);
    std::size_t groups = 0;
    for (int64_t g : p.plan.units[static_cast<std::size_t>(op.unit)].groups) {
      const ParamGroup& group = p.plan.groups[static_cast<std::size_t>(g)];
      if (op.kind == OpKind::all_gather || group.requires_grad) ++groups;
    }
    EXPECT_EQ(parts.size(), groups) << op.name;  // one part per bucket
    double part_bytes = 0;  // as nccl-tests counts it: gathered output, reduced input
    for (const CollectivePart& part : parts)
      part_bytes +=
          static_cast<double>(op.kind == OpKind::all_gather ? part.output_bytes : part.input_bytes);
    EXPECT_DOUBLE_EQ(part_bytes, op.bytes) << op.name;
    const CollectiveEstimate one = estimate_collective(
        p.cluster,
        op.kind == OpKind::all_gather ? Collective::all_gather : Collective::reduce_scatter,
        op.bytes, group_layout(p.plan, p.plan.process_groups[static_cast<std::size_t>(op.group)]));
    EXPECT_DOUBLE_EQ(op_cost(p.plan, op, p.cluster).seconds, one.seconds) << op.name;
    if (parts.size() > 1) ++split;
  }
  EXPECT_GT(split, 2) << "bucket_bytes should split some units into several groups";
}

}  // namespace
}  // namespace shardplan
