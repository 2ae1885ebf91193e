// Activation CPU offload (offload_activations = N), as Transformer Engine's offload handler
// runs it under Megatron's cpu_offloading_num_layers: the first N layers' saved tensors go
// to host after their forward (the compute stream waits for the copy at the end of the
// next layer's forward), and come back one layer ahead of their backward.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>

#include "models/zoo.h"
#include "planner/memory_estimate.h"
#include "planner/plan_builder.h"
#include "planner/plan_memory.h"
#include "planner/plan_validator.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

Plan llama8b(int64_t offload, const std::string& cluster = "dgx-h100") {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec c = load_cluster(cluster, std::nullopt, 8);
  const nlohmann::json j = {{"seq_len", 2048}, {"offload_activations", offload}};
  Plan plan =
      build_plan(model, c, resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, c, "cfg"));
  const auto error = validate_plan(plan);
  EXPECT_FALSE(error.has_value()) << error->message;
  return plan;
}

const PlanOp& op_named(const Plan& plan, const std::string& name) {
  for (const PlanOp& op : plan.ops) {
    if (op.name == name) return op;
  }
  ADD_FAILURE() << "no op " << name;
  return plan.ops.front();
}

TEST(ActivationOffload, TheFirstNLayersGoToHostAndComeBackAheadOfTheirBackward) {
  const Plan plan = llama8b(20);
  std::map<OpKind, int> kinds;
  for (const PlanOp& op : plan.ops) ++kinds[op.kind];
  EXPECT_EQ(kinds[OpKind::offload], 20);
  EXPECT_EQ(kinds[OpKind::reload], 20);
  for (int i = 0; i < 20; ++i) {
    const std::string layer = "layers." + std::to_string(i) + " mb0";
    const PlanOp& fwd = op_named(plan, "fwd " + layer);
    const PlanOp& out = op_named(plan, "offload " + layer);
    const PlanOp& back = op_named(plan, "reload " + layer);
    const PlanOp& bwd = op_named(plan, "bwd " + layer);
    EXPECT_EQ(out.stream, Stream::d2h);
    EXPECT_EQ(back.stream, Stream::h2d);
    EXPECT_EQ(out.deps, std::vector<int64_t>{fwd.id});
    // The saved activations: written by the forward, read by the copy out only, and free
    // when the forward two layers on starts (the compute stream waited for the copy at
    // the end of the next layer's forward).
    const PlanBuffer& saved = plan.buffers[static_cast<std::size_t>(out.reads.at(0))];
    EXPECT_EQ(saved.role, BufferRole::activations);
    EXPECT_EQ(out.bytes, static_cast<double>(saved.bytes));
    const PlanOp& two_on = op_named(plan, "fwd layers." + std::to_string(i + 2) + " mb0");
    EXPECT_NE(std::find(two_on.deps.begin(), two_on.deps.end(), out.id), two_on.deps.end());
    EXPECT_EQ(saved.live_end, two_on.id);
    // Back into a new buffer as the next layer's backward starts; this layer's backward
    // reads it and waits for the copy.
    const PlanBuffer& reloaded = plan.buffers[static_cast<std::size_t>(back.writes.at(0))];
    EXPECT_EQ(reloaded.role, BufferRole::reloaded_activations);
    EXPECT_EQ(reloaded.bytes, saved.bytes);
    EXPECT_NE(std::find(bwd.reads.begin(), bwd.reads.end(), reloaded.id), bwd.reads.end());
    EXPECT_EQ(std::find(bwd.reads.begin(), bwd.reads.end(), saved.id), bwd.reads.end());
    EXPECT_NE(std::find(bwd.deps.begin(), bwd.deps.end(), back.id), bwd.deps.end());
    const PlanOp& next_bwd = op_named(plan, "bwd layers." + std::to_string(i + 1) + " mb0");
    EXPECT_LT(back.id, next_bwd.id);
    EXPECT_NE(std::find(back.deps.begin(), back.deps.end(), out.id), back.deps.end());
    EXPECT_EQ(reloaded.live_begin, back.id);
    EXPECT_EQ(reloaded.live_end, bwd.id + 1);
  }
  // Layers 20..31 keep theirs.
  EXPECT_EQ(std::count_if(plan.ops.begin(), plan.ops.end(),
                          [](const PlanOp& op) { return op.name == "offload layers.20 mb0"; }),
            0);
}

// Worked by hand: every Llama layer saves the same A bytes and the activation peak is at the
// end of the forward (the loss). Offloading 20 of 32, the last of them left the GPU when
// layer 21's forward started and none is back yet, so the peak falls by 20 A (the
// closed-form estimate says the same).
TEST(ActivationOffload, ActivationPeakFallsByEveryOffloadedLayer) {
  const Plan none = llama8b(0);
  const Plan off = llama8b(20);
  double a = 0;
  for (const PlanBuffer& b : none.buffers) {
    if (b.role == BufferRole::activations && b.name == "activations layers.0 mb0")
      a = static_cast<double>(b.bytes);
  }
  ASSERT_GT(a, 0);
  const double fall = plan_memory(none).activations - plan_memory(off).activations;
  EXPECT_NEAR(fall / a, 20.0, 0.05);
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  const double estimate_fall = estimate_memory(model, cluster, none.config).activations -
                               estimate_memory(model, cluster, off.config).activations;
  EXPECT_NEAR(estimate_fall / a, 20.0, 0.05);
}

TEST(ActivationOffload, BadSettingsAreRefusedByName) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  auto resolve = [&](const nlohmann::json& j, const ClusterSpec& c) {
    return resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, c, "cfg");
  };
  // 32 layers: at most 31 offloaded (Megatron takes 0 to num_layers - 1).
  EXPECT_NO_THROW(resolve({{"offload_activations", 31}}, cluster));
  testing::expect_input_error(
      [&] {
        resolve({{"offload_activations", 32}}, cluster);
      },
      "/offload_activations", "offload at most 31", "cfg");
  testing::expect_input_error(
      [&] {
        resolve({{"offload_activations", -1}}, cluster);
      },
      "/offload_activations", "", "cfg");
  nlohmann::json no_link = cluster_json("dgx-h100").first;
  no_link.erase("host_link");
  const ClusterSpec bare = cluster_from_json(no_link, "bare.json");
  testing::expect_input_error(
      [&] {
        resolve({{"offload_activations", 4}}, bare);
      },
      "/offload_activations", "no host_link", "cfg");
  EXPECT_NO_THROW(resolve({{"offload_activations", 0}}, bare));
}

}  // namespace
}  // namespace shardplan
