// The communicators a job creates: every collective a plan schedules runs on one of them
// with the buffers its algorithm needs, each stack's extra groups are there, and the plan,
// the closed-form estimate and the cluster agree on the non-tensor bytes.
#include "planner/communicators.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "models/zoo.h"
#include "planner/memory_estimate.h"
#include "planner/plan_builder.h"

namespace shardplan {
namespace {

FsdpConfig resolved(const ModelSpec& model, const ClusterSpec& cluster, const nlohmann::json& j) {
  return resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
}

const Communicator* find(const std::vector<Communicator>& ks, const std::string& group) {
  for (const Communicator& k : ks)
    if (k.group == group) return &k;
  return nullptr;
}

// Each collective of the plan on a listed communicator whose use connects its algorithm.
void expect_covered(const Plan& plan, const ClusterSpec& cluster, const std::string& what) {
  const std::vector<Communicator> ks = job_communicators(plan.config, cluster);
  for (const PlanOp& op : plan.ops) {
    if (!is_collective(op.kind) || op.group < 0) continue;
    const ProcessGroup& g = plan.process_groups[static_cast<std::size_t>(op.group)];
    if (g.size <= 1) continue;
    const Communicator* k = find(ks, g.name);
    ASSERT_NE(k, nullptr) << what << ": " << op.name << " on " << g.name;
    EXPECT_EQ(k->use.layout.ranks, g.size) << what << " " << g.name;
    const CommunicatorUse& u = k->use;
    switch (op.kind) {
      case OpKind::all_gather:
      case OpKind::reduce_scatter:
        EXPECT_TRUE(u.ring) << what << ": " << op.name;
        break;
      case OpKind::all_reduce:
        EXPECT_TRUE(u.ring || u.bulk_all_reduce || u.small_all_reduce) << what << ": " << op.name;
        break;
      case OpKind::send_recv:
      case OpKind::all_to_all:
        EXPECT_GT(u.p2p_intra_peers + u.p2p_inter_peers, 0) << what << ": " << op.name;
        break;
      default:
        break;
    }
  }
}

TEST(Communicators, EveryCollectiveOfAPlanRunsOnAListedCommunicator) {
  const ClusterSpec two_nodes = load_cluster("dgx-h100", 2, std::nullopt);
  const ModelSpec dense = load_model("tiny");
  const ModelSpec moe = load_model("tiny-moe");
  const std::vector<std::pair<const ModelSpec*, nlohmann::json>> cases = {
      {&dense, {}},
      {&dense, {{"sharding_strategy", "optim"}}},
      {&dense, {{"sharding_strategy", "no_shard"}}},
      {&dense, {{"tp", 2}}},
      {&dense, {{"tp", 2}, {"sequence_parallel", false}}},
      {&dense, {{"cp", 2}}},
      {&dense, {{"cp", 2}, {"cp_comm", "a2a"}}},
      {&dense, {{"cp", 2}, {"cp_comm", "all_gather"}}},
      {&dense, {{"dp_outer", 2}}},
      {&dense, {{"dp_outer", 2}, {"outer_strategy", "optim"}}},
      {&moe, {{"ep", 4}, {"moe_dispatcher", "alltoall"}}},
      {&moe, {{"ep", 2}, {"etp", 2}, {"tp", 2}, {"moe_dispatcher", "alltoall"}}},
      {&moe, {{"ep", 2}, {"etp", 2}, {"tp", 2}}},
      {&moe, {{"ep", 4}, {"moe_dispatcher", "hybridep"}}},
  };
  for (const auto& [model, j] : cases) {
    for (const char* stack : {"megatron-te", "torch-compile"}) {
      nlohmann::json c = j;
      c["stack"] = stack;
      c["seq_len"] = 64;
      const FsdpConfig config = resolved(*model, two_nodes, c);
      expect_covered(build_plan(*model, two_nodes, config), two_nodes, c.dump());
    }
  }
}

TEST(Communicators, EachStackKeepsItsOwnGroups) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  const auto groups = [&](const nlohmann::json& j) {
    std::set<std::string> out;
    for (const Communicator& k : job_communicators(resolved(model, cluster, j), cluster))
      out.insert(k.group);
    return out;
  };
  // Megatron: the world (barriers), the gradient norm's own world group, FP8's amax group.
  EXPECT_EQ(groups({{"tp", 2}, {"fp8", true}, {"sharding_strategy", "optim"}}),
            (std::set<std::string>{"tp", "dp_shard_cp", "world", "grad_stats", "amax"}));
  EXPECT_EQ(groups({{"tp", 2}}),
            (std::set<std::string>{"tp", "dp_shard_cp", "world", "grad_stats"}));
  // torchtitan: the loss over the data ranks.
  EXPECT_EQ(groups({{"tp", 2}, {"stack", "torch-compile"}}),
            (std::set<std::string>{"tp", "dp_shard_cp", "world", "loss"}));
}

TEST(Communicators, OneGpuHasNone) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec one = load_cluster("dgx-h100", std::nullopt, 1);
  const FsdpConfig c = resolved(model, one, {{"seq_len", 1024}});
  const DeviceOverhead d = device_overhead(c, one);
  EXPECT_TRUE(d.communicators.empty());
  EXPECT_EQ(d.total(), one.non_tensor_bytes);
}

TEST(Communicators, ThePlanTheEstimateAndTheSumAgree) {
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  const FsdpConfig c =
      resolved(model, cluster, {{"seq_len", 1024}, {"ep", 8}, {"moe_dispatcher", "alltoall"}});
  const DeviceOverhead d = device_overhead(c, cluster);
  int64_t sum = cluster.non_tensor_bytes;
  for (const Communicator& k : d.communicators) sum += k.bytes.total();
  EXPECT_EQ(d.total(), sum);
  EXPECT_EQ(build_plan(model, cluster, c).non_tensor_bytes, d.total());
  EXPECT_EQ(estimate_memory(model, cluster, c).non_tensor, static_cast<double>(d.total()));
  // The expert all-to-all over 8 GPUs of one node is the largest: 7 peers × 32 channels.
  ASSERT_FALSE(d.communicators.empty());
  EXPECT_EQ(d.communicators.front().group, "ep");
  EXPECT_GE(d.communicators.front().bytes.p2p, 7 * 32 * 12 * (int64_t{1} << 20));
}

}  // namespace
}  // namespace shardplan
