// Mixture of experts on an expert mesh: the expert groups in Megatron's expert rank order,
// a 2-layer MoE (tiny-moe: 4 experts of width 128, top 2) on 4 GPUs with ep 2 whose
// groups, ops and buffers are worked out by hand, Mixtral 8x7B with ep 8 on 64 GPUs
// against closed forms, the busiest rank's load, and the config's errors.
#include <gtest/gtest.h>

#include <string>
#include <tuple>
#include <vector>

#include "models/zoo.h"
#include "planner/memory_estimate.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "planner/rank_model.h"
#include "planner/sharding.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

using testing::expect_input_error;

FsdpConfig resolved(const ModelSpec& model, const ClusterSpec& cluster, const nlohmann::json& j) {
  return resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
}

const PlanOp& op_named(const Plan& plan, const std::string& name) {
  for (const PlanOp& op : plan.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + name);
}

const PlanBuffer& buffer_named(const Plan& plan, const std::string& name) {
  for (const PlanBuffer& b : plan.buffers)
    if (b.name == name) return b;
  throw std::runtime_error("no buffer " + name);
}

const ProcessGroup& group(const Plan& plan, const std::string& name) {
  const int64_t g = find_process_group(plan, name);
  if (g < 0) throw std::runtime_error("no group " + name);
  return plan.process_groups[static_cast<std::size_t>(g)];
}

// 16 ranks as tp 2 × dp_shard 8 (dense), and etp 1 × ep 4 × edp 4 (experts): an expert
// group is 4 consecutive ranks (Megatron's expert order "tp-ep-dp-pp", etp innermost),
// the expert-data-parallel group the ranks 4 apart.
TEST(MoePlan, ExpertGroupsFollowMegatronsExpertOrder) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  const Plan plan =
      build_plan(model, cluster,
                 resolved(model, cluster, {{"tp", 2}, {"ep", 4}, {"etp", 1}, {"seq_len", 64}}));
  ASSERT_FALSE(validate_plan(plan).has_value());
  const std::vector<std::tuple<std::string, int64_t, int64_t>> expected = {
      {"etp", 1, 1}, {"ep", 4, 1}, {"ep_etp", 4, 1}, {"edp", 4, 4}};
  for (const auto& [name, size, stride] : expected) {
    EXPECT_EQ(group(plan, name).size, size) << name;
    EXPECT_EQ(group(plan, name).stride, stride) << name;
  }
  const ProcessGroup& ep = group(plan, "ep");
  const ProcessGroup& edp = group(plan, "edp");
  // Rank 13: ep position 1 of ranks 12..15, expert-data-parallel position 3 of 1, 5, 9, 13.
  EXPECT_EQ(group_rank(ep, 13), 1);
  EXPECT_EQ(group_instance(ep, 12), group_instance(ep, 15));
  EXPECT_NE(group_instance(ep, 11), group_instance(ep, 12));
  EXPECT_EQ(group_rank(edp, 13), 3);
  EXPECT_EQ(group_instance(edp, 1), group_instance(edp, 13));
  // Each rank holds 4 / ep = 1 expert per layer, sharded over the 4 ranks of edp.
  int expert_groups = 0;
  for (const ParamGroup& g : plan.groups) {
    if (!g.expert) continue;
    ++expert_groups;
    EXPECT_EQ(g.elements, 3 * 64 * 128);
    EXPECT_EQ(g.shard_elements * 4, g.padded_elements);
  }
  EXPECT_EQ(expert_groups, 2);
}

// tiny-moe (hidden 64, 4 heads of 16, 2 KV heads, 4 experts of width 128, top 2, vocab
// 512) on 4 GPUs with ep 2, etp 1, the alltoall dispatcher, one micro-batch of 128
// tokens per rank, perfectly balanced routing (moe_imbalance 1).
TEST(MoePlan, TwoLayersFourExpertsEp2HandWorked) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  const Plan plan = build_plan(
      model, cluster,
      resolved(
          model, cluster,
          {{"ep", 2}, {"moe_dispatcher", "alltoall"}, {"moe_imbalance", 1.0}, {"seq_len", 128}}));
  ASSERT_FALSE(validate_plan(plan).has_value());
  // Groups per layer: the dense parameters (2 norms 2·64, q 64·64, k and v 64·32 each, o
  // 64·64, router 64·4 = 12,672) padded to a multiple of 256 × 4 ranks = 13,312, shards of
  // 3,328; the 2 local experts (2 × 3 × 64 × 128 = 49,152) over edp = 4 / ep = 2: already
  // a multiple of 512, shards of 24,576. Root: embedding and head 2 × 512 · 64 + final norm
  // 64 = 65,600, padded to 66,560, shards of 16,640.
  ASSERT_EQ(plan.groups.size(), 5u);
  const std::vector<std::tuple<int64_t, bool, int64_t, int64_t, int64_t>> groups = {
      {0, false, 65600, 66560, 16640},
      {1, false, 12672, 13312, 3328},
      {1, true, 49152, 49152, 24576},
      {2, false, 12672, 13312, 3328},
      {2, true, 49152, 49152, 24576}};
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& [unit, expert, elements, padded, shard] = groups[i];
    EXPECT_EQ(plan.groups[i].unit, unit) << i;
    EXPECT_EQ(plan.groups[i].expert, expert) << i;
    EXPECT_EQ(plan.groups[i].elements, elements) << i;
    EXPECT_EQ(plan.groups[i].padded_elements, padded) << i;
    EXPECT_EQ(plan.groups[i].shard_elements, shard) << i;
  }
  // The rank's two experts as grouped GEMM weights [2, out, in].
  EXPECT_EQ(plan.groups[2].parameters,
            (std::vector<std::string>{"layers.0.mlp.experts.gate_proj.weight",
                                      "layers.0.mlp.experts.up_proj.weight",
                                      "layers.0.mlp.experts.down_proj.weight"}));

  // Persistent bytes per GPU: 16 bytes per element of every shard (bf16 weight, fp32 main
  // weight, bf16 grad, 2 fp32 Adam states): (16,640 + 2 × (3,328 + 24,576)) × 16.
  int64_t persistent = 0;
  for (const PlanBuffer& b : plan.buffers)
    if (b.persistent) persistent += b.bytes;
  EXPECT_EQ(persistent, (16640 + 2 * (3328 + 24576)) * 16);
  // The expert shards live on the edp group, the dense ones on dp_shard_cp.
  EXPECT_EQ(buffer_named(plan, "model_weight layers.0 g2").shard_group,
            find_process_group(plan, "edp"));
  EXPECT_EQ(buffer_named(plan, "model_weight layers.0 g1").shard_group,
            find_process_group(plan, "dp_shard_cp"));

  // Layer 0 is gathered in two all-gathers, dense then experts (bf16: 26,624 and 98,304
  // bytes), and reduced in two reduce-scatters.
  const PlanOp& ag_dense = op_named(plan, "ag_fwd layers.0 mb0");
  const PlanOp& ag_experts = op_named(plan, "ag_fwd layers.0 experts mb0");
  EXPECT_EQ(ag_dense.bytes, 26624);
  EXPECT_EQ(ag_dense.group, find_process_group(plan, "dp_shard_cp"));
  EXPECT_EQ(ag_experts.bytes, 98304);
  EXPECT_EQ(ag_experts.group, find_process_group(plan, "edp"));
  EXPECT_EQ(op_named(plan, "rs layers.0 experts mb0").bytes, 98304);
  EXPECT_EQ(op_named(plan, "rs layers.0 experts mb0").group, find_process_group(plan, "edp"));
  EXPECT_EQ(buffer_named(plan, "unsharded_weight layers.0 experts mb0").bytes, 98304);

  // Dispatch: each rank routes its 128 tokens to 2 experts and sends the 256 copies of
  // 64 bf16 elements (32,768 bytes) in one all-to-all over ep, and receives as many back
  // in the combine; backward mirrors both. One ep buffer holds send and receive.
  int dispatches = 0;
  for (const PlanOp& op : plan.ops) {
    if (op.kind != OpKind::all_to_all) continue;
    ++dispatches;
    EXPECT_EQ(op.bytes, 32768) << op.name;
    EXPECT_EQ(op.group, find_process_group(plan, "ep")) << op.name;
    EXPECT_EQ(op.stream, Stream::compute) << op.name;
  }
  EXPECT_EQ(dispatches, 2 * 2 * 2);  // 2 layers × (dispatch, combine) × (forward, backward)
  EXPECT_EQ(buffer_named(plan, "ep_buffer fwd layers.0 mb0").bytes, 2 * 32768);

  // The rank's experts run 128 × 2 = 256 routed tokens (each expert 128 of them) at
  // 2 · 3 · 64 · 128 FLOPs each: one grouped GEMM per projection over all 256.
  const PlanSegment& layer0 = plan.segments[1];
  ASSERT_EQ(layer0.label, "layers.0");
  double expert_gemm = 0;
  for (const GemmShape& g : layer0.gemms) {
    if (g.k == 64 && g.n == 128) {
      EXPECT_EQ(g.m, 256);     // gate and up, grouped
      EXPECT_EQ(g.groups, 2);  // over the rank's 2 experts, 128 tokens each
    }
    if (g.n == 64 && g.k == 128) EXPECT_EQ(g.groups, 2);                   // down, grouped
    if (g.n != 128 && !(g.n == 64 && g.k == 128)) EXPECT_EQ(g.groups, 1);  // dense
    if (g.n == 128 || (g.n == 64 && g.k == 128)) expert_gemm += 2.0 * g.m * g.n * g.k;
  }
  EXPECT_DOUBLE_EQ(expert_gemm, 2 * 2.0 * 3 * 64 * 128 * 128);
  // Saved per routed copy (256 on this rank): the permuted token (64), SwiGLU's gate and
  // up outputs (256) and the down projection's input (128) in bf16, and its fp32 weight.
  const RankModel rank(model, plan.config);
  const Module* local_experts = find_module(rank.get().root, "layers.0.mlp.experts");
  ASSERT_NE(local_experts, nullptr);
  EXPECT_EQ(local_experts->children.front().parameters.front().shape,
            (std::vector<int64_t>{2, 128, 64}));
  EXPECT_DOUBLE_EQ(saved_activation_bytes(*local_experts, {.seq_len = 128}, Recompute::none),
                   (2.0 * (64 + 256 + 128) + 4.0) * 256);
  // The whole model's layer (all 4 experts on one rank) saves the same 256 routed copies.
  const Module* layer = find_module(model.root, "layers.0");
  const double saved_whole = saved_activation_bytes(*layer, {.seq_len = 128}, Recompute::none);
  EXPECT_DOUBLE_EQ(layer0.activation_bytes, saved_whole);
}

// DeepEP and HybridEP send a token once to each rank holding any of its experts: with 4
// experts on 2 ranks and top 2, a token misses a given rank with probability
// C(2, 2) / C(4, 2) = 1/6, so it reaches 2 · 5/6 ranks on average instead of its 2 routed
// copies: 5/6 of the all-to-all's 32,768 bytes. Under torchtitan's per-op checkpointing the
// dispatch and combine outputs are kept.
TEST(MoePlan, FlexDispatchersSendOneCopyPerRank) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  for (const char* dispatcher : {"deepep", "hybridep"}) {
    const Plan plan = build_plan(
        model, cluster,
        resolved(
            model, cluster,
            {{"ep", 2}, {"moe_dispatcher", dispatcher}, {"moe_imbalance", 1.0}, {"seq_len", 128}}));
    ASSERT_FALSE(validate_plan(plan).has_value());
    int a2a = 0;
    for (const PlanOp& op : plan.ops) {
      if (op.kind != OpKind::all_to_all) continue;
      ++a2a;
      EXPECT_NEAR(op.bytes, 32768.0 * 5 / 6, 1e-6) << dispatcher;
      EXPECT_EQ(op.group, find_process_group(plan, "ep"));
    }
    EXPECT_EQ(a2a, 8) << dispatcher;
  }
  const FsdpConfig sac = resolved(model, cluster,
                                  {{"ep", 2},
                                   {"moe_dispatcher", "deepep"},
                                   {"moe_imbalance", 1.0},
                                   {"seq_len", 128},
                                   {"stack", "torch-compile"},
                                   {"recompute", "sac_op"}});
  const RankModel rank(model, sac);
  const Module* moe = find_module(rank.get().root, "layers.0.mlp");
  ASSERT_NE(moe, nullptr);
  EXPECT_NEAR(moe->cost.sac_op_kept_per_token.elements, 2.0 * 64 * 2 * 5 / 6, 1e-9);
}

// Mixtral 8x7B on 64 H100s with ep 8: each rank holds 1 of the 8 experts of every layer,
// sharded over the 8 ranks of its expert-data-parallel group, so under ZeRO-3 a GPU keeps
// the same 16 bytes per parameter ÷ 64 as with ep 1, but gathers one expert per layer
// instead of eight.
TEST(MoePlan, MixtralEp8On64GpusAgainstClosedForms) {
  const ModelSpec model = load_model("mixtral-8x7b");
  const ClusterSpec cluster = load_cluster("dgx-h100", 8, std::nullopt);
  const double dense_layer = 2.0 * 4096 * 4096 + 2.0 * 4096 * 1024 + 2 * 4096 + 4096 * 8;
  const double expert = 3.0 * 4096 * 14336;
  const double root = 2.0 * 32000 * 4096 + 4096;
  for (const int64_t ep : {1, 8}) {
    const Plan plan =
        build_plan(model, cluster, resolved(model, cluster, {{"ep", ep}, {"seq_len", 4096}}));
    ASSERT_FALSE(validate_plan(plan).has_value());
    double persistent = 0;
    for (const PlanBuffer& b : plan.buffers)
      if (b.persistent) persistent += static_cast<double>(b.bytes);
    const double per_gpu = 16.0 * ((32 * (dense_layer + 8 * expert) + root) / 64.0);
    // Padding adds at most 256 × 64 elements per group.
    EXPECT_NEAR(persistent, per_gpu, 16.0 * 256 * 64 * plan.groups.size()) << "ep " << ep;
    // describe's closed form agrees within the same padding.
    const MemoryEstimate e = estimate_memory(model, cluster, plan.config);
    EXPECT_NEAR(e.model_weights + e.main_weights + e.main_grads + e.optimizer_states, per_gpu,
                16.0 * 256 * 64 * plan.groups.size())
        << "ep " << ep;
    // One layer gathered: the dense part and the rank's experts (8 / ep of them), bf16.
    double gathered = 0;
    for (const PlanOp& op : plan.ops) {
      if (op.kind == OpKind::all_gather && op.unit == 5 && op.micro_batch == 0 &&
          op.name.starts_with("ag_fwd"))
        gathered += op.bytes;
    }
    EXPECT_NEAR(gathered, 2.0 * (dense_layer + 8.0 / static_cast<double>(ep) * expert),
                2.0 * 256 * 64 * 2)
        << "ep " << ep;
  }
}

// DeepSeek-V3 on 1024 H100s with ep 64 (tp 1; MLA refuses tensor parallelism): each rank
// holds 256 / 64 = 4 routed experts of each of the 58 MoE layers, sharded over the 16
// ranks of its expert-data-parallel group, and 1/1024 of everything else.
TEST(MoePlan, DeepSeekV3Ep64On1024GpusAgainstClosedForms) {
  const ModelSpec model = load_model("deepseek-v3");
  const ClusterSpec cluster = load_cluster("dgx-h100", 128, std::nullopt);
  const Plan plan =
      build_plan(model, cluster, resolved(model, cluster, {{"ep", 64}, {"seq_len", 4096}}));
  ASSERT_FALSE(validate_plan(plan).has_value());
  EXPECT_EQ(group(plan, "edp").size, 16);
  const double expert = 3.0 * 7168 * 2048;
  const double routed = 58.0 * 256 * expert;
  const double dense = static_cast<double>(parameter_count(model.root)) - routed;
  const double elements = dense / 1024 + 58.0 * 4 * expert / 16;
  double persistent = 0;
  for (const PlanBuffer& b : plan.buffers)
    if (b.persistent) persistent += static_cast<double>(b.bytes);
  // 16 bytes per element (bf16 weight, fp32 main weight, bf16 grad, two fp32 Adam states);
  // padding adds at most 256 × 1024 elements per group.
  EXPECT_NEAR(persistent, 16.0 * elements, 16.0 * 256 * 1024 * plan.groups.size());
  EXPECT_NEAR(persistent / 1e9, 10.48, 0.05);  // 655.3 M elements
  const MemoryEstimate e = estimate_memory(model, cluster, plan.config);
  EXPECT_NEAR(e.model_weights + e.main_weights + e.main_grads + e.optimizer_states, persistent,
              16.0 * 256 * 1024 * plan.groups.size());
  expect_input_error(
      [&] {
        resolved(model, cluster, {{"tp", 2}, {"ep", 64}});
      },
      "/tp", "multi-head latent attention");
}

// The busiest rank's routed tokens ÷ the mean: one expert per rank carries the imbalance
// itself; every expert on one rank (ep 1) carries exactly its own tokens; a capacity
// factor caps the busiest expert.
TEST(MoePlan, BusiestRankLoad) {
  const ModelSpec model = load_model("tiny-moe");  // 4 experts, top 2: imbalance ≤ 2
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  auto expert_tokens = [&](const nlohmann::json& j) {
    const Plan plan = build_plan(model, cluster, resolved(model, cluster, j));
    double m = 0;
    for (const GemmShape& g : plan.segments[1].gemms)
      if (g.n == 128 && g.k == 64) m += static_cast<double>(g.m);
    return m / 2.0;  // gate and up, each over every routed token
  };
  const double balanced = 128 * 2;  // 128 tokens × top 2 per rank
  EXPECT_DOUBLE_EQ(expert_tokens({{"seq_len", 128}, {"moe_imbalance", 1.8}}), balanced);
  // ep 4: one expert per rank, the busiest at 1.8 × the mean.
  EXPECT_NEAR(expert_tokens({{"seq_len", 128}, {"ep", 4}, {"moe_imbalance", 1.8}}), 1.8 * balanced,
              1.0);
  // ep 2: the busiest expert (1.8) beside one at the others' mean, (4 − 1.8) / 3.
  EXPECT_NEAR(expert_tokens({{"seq_len", 128}, {"ep", 2}, {"moe_imbalance", 1.8}}),
              (1.8 + 2.2 / 3.0) / 2.0 * balanced, 1.0);
  // A capacity of 1.25 × the mean drops the busiest expert's excess.
  EXPECT_NEAR(
      expert_tokens(
          {{"seq_len", 128}, {"ep", 4}, {"moe_imbalance", 1.8}, {"moe_capacity_factor", 1.25}}),
      1.25 * balanced, 1.0);
}

TEST(MoePlan, ConfigErrorsNameTheField) {
  const ModelSpec moe = load_model("tiny-moe");
  const ModelSpec dense = load_model("tiny");
  const ClusterSpec four = load_cluster("dgx-h100", std::nullopt, 4);
  const ClusterSpec sixteen = load_cluster("dgx-h100", 2, std::nullopt);
  expect_input_error([&] { resolved(dense, four, {{"ep", 2}}); }, "/ep", "has no experts");
  expect_input_error(
      [&] {
        resolved(moe, four, {{"ep", 3}, {"seq_len", 48}});
      },
      "/ep", "does not divide tiny-moe's 4 experts");
  expect_input_error(
      [&] {
        resolved(moe, four, {{"ep", 4}, {"etp", 2}});
      },
      "/ep", "does not divide the 4 GPUs");
  expect_input_error(
      [&] {
        resolved(moe, sixteen, {{"etp", 16}});
      },
      "/etp", "spans more than one NVLink domain");
  const ClusterSpec six = load_cluster("dgx-h100", std::nullopt, 6);
  expect_input_error(
      [&] {
        resolved(moe, six, {{"etp", 3}, {"seq_len", 96}});
      },
      "/etp", "does not divide tiny-moe's moe_ffn_hidden_size 128");
  expect_input_error(
      [&] {
        resolved(moe, four, {{"ep", 2}, {"moe_imbalance", 2.5}});
      },
      "/moe_imbalance", "cannot see more than every token");
  expect_input_error(
      [&] {
        resolved(moe, four, {{"tp", 2}, {"sequence_parallel", false}});
      },
      "/sequence_parallel", "MoE layer refuses tensor parallelism");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"ep", 2}, {"dp_outer", 2}}, "cfg");
      },
      "/dp_outer", "HSDP with an expert mesh");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"ep", 2}, {"double_buffer", true}}, "cfg");
      },
      "/double_buffer", "expert mesh");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"moe_dispatcher", "flex"}}, "cfg");
      },
      "/moe_dispatcher", "flex dispatcher runs deepep or hybridep");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"moe_dispatcher", "deepep"}, {"etp", 2}}, "cfg");
      },
      "/etp", "deepep dispatcher with expert tensor parallelism");
  // etp unset follows tp.
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"moe_dispatcher", "hybridep"}, {"tp", 2}}, "cfg");
      },
      "/etp", "hybridep dispatcher with expert tensor parallelism");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"moe_capacity_factor", 0}}, "cfg");
      },
      "/moe_capacity_factor", "must be in (0, 1e6]");
  expect_input_error(
      [&] {
        fsdp_config_from_json({{"moe_imbalance", 0.5}}, "cfg");
      },
      "/moe_imbalance", "at least 1");
}

// A unit without parameters of its own still gets its (empty) gather to wait for, and an
// imbalance above E / k is refused only where it is used (ep > 1 or a capacity).
TEST(MoePlan, EdgeCasesStayValid) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  const Plan plan =
      build_plan(model, cluster,
                 resolved(model, cluster,
                          {{"ep", 2},
                           {"seq_len", 128},
                           {"unit_modules", {"layers.*", "layers.*.self_attn.core_attention"}}}));
  EXPECT_FALSE(validate_plan(plan).has_value());
  // Experts left in the root unit (only attention wrapped) are still sharded over edp,
  // and describe's estimate agrees with the plan's persistent bytes.
  const FsdpConfig attention_units = resolved(
      model, cluster, {{"ep", 2}, {"seq_len", 128}, {"unit_modules", {"layers.*.self_attn"}}});
  const Plan root_experts = build_plan(model, cluster, attention_units);
  ASSERT_FALSE(validate_plan(root_experts).has_value());
  double persistent = 0;
  for (const PlanBuffer& b : root_experts.buffers)
    if (b.persistent) persistent += static_cast<double>(b.bytes);
  const MemoryEstimate e = estimate_memory(model, cluster, attention_units);
  EXPECT_NEAR(e.model_weights + e.main_weights + e.main_grads + e.optimizer_states, persistent,
              16.0 * 256 * 4 * static_cast<double>(root_experts.groups.size()));
  EXPECT_NO_THROW(resolved(model, cluster, {{"seq_len", 128}, {"moe_imbalance", 3.0}}));
}

TEST(MoePlan, ExpertFieldsRoundTripThroughJson) {
  const FsdpConfig c = fsdp_config_from_json({{"ep", 8},
                                              {"etp", 2},
                                              {"moe_dispatcher", "alltoall"},
                                              {"moe_capacity_factor", 1.25},
                                              {"moe_imbalance", 1.04}},
                                             "cfg");
  const FsdpConfig back = fsdp_config_from_json(fsdp_config_to_json(c), "back");
  EXPECT_EQ(back.ep, 8);
  EXPECT_EQ(back.etp, 2);
  EXPECT_EQ(back.moe_dispatcher, MoeDispatcher::alltoall);
  EXPECT_EQ(back.moe_capacity_factor, 1.25);
  EXPECT_EQ(back.moe_imbalance, 1.04);
  // A dense job's config says nothing about experts.
  const nlohmann::json plain = fsdp_config_to_json(FsdpConfig{});
  for (const char* key : {"ep", "etp", "moe_dispatcher", "moe_capacity_factor", "moe_imbalance"})
    EXPECT_FALSE(plain.contains(key)) << key;
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// At a few tokens an expert's share of them is under one row: its matmul runs a whole row,
// a little more than its share of the forward FLOPs, and the plan still validates (the
// campaign found tiny-moe at seq_len 2 and 8 refused as "an invalid plan").
TEST(MoePlan, FewTokensRoundAnExpertsMatmulUpToARowAndStillValidate) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 2);
  for (const int64_t seq_len : {2, 8}) {
    const Plan plan =
        build_plan(model, cluster, resolved(model, cluster, {{"ep", 2}, {"seq_len", seq_len}}));
    EXPECT_FALSE(validate_plan(plan).has_value()) << "seq_len " << seq_len;
  }
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// The host's side of an MoE plan (docs/model.md "Host time"): each layer's forward starts
// with a host sync (the dispatch's split sizes) on the first op it emits — with ep 2 its
// dispatch all-to-all — unless a capacity factor pads the experts; compute ops carry
// their segment's host seconds; both survive plan.json; a negative figure is refused.
TEST(MoePlan, DroplessLayersSyncTheHostBeforeTheirDispatch) {
  const ModelSpec model = load_model("tiny-moe");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  const nlohmann::json base = {{"ep", 2}, {"moe_dispatcher", "alltoall"}, {"seq_len", 128}};
  const Plan plan = build_plan(model, cluster, resolved(model, cluster, base));
  ASSERT_FALSE(validate_plan(plan).has_value());
  int64_t syncs = 0;
  for (const PlanOp& op : plan.ops) {
    if (!op.host_sync) continue;
    ++syncs;
    EXPECT_EQ(op.kind, OpKind::all_to_all) << op.name;
    EXPECT_NE(op.name.find("fwd"), std::string::npos) << op.name;
  }
  EXPECT_EQ(syncs, 2);  // two MoE layers, one micro-batch
  const PlanOp& fwd = op_named(plan, "fwd layers.0 mb0");
  EXPECT_GT(fwd.host_seconds, 0);
  EXPECT_DOUBLE_EQ(fwd.host_seconds,
                   plan.segments[static_cast<std::size_t>(fwd.segment)].forward_host_seconds);

  const Plan back = plan_from_json(plan_to_json(plan), "plan.json");
  ASSERT_EQ(back.ops.size(), plan.ops.size());
  for (std::size_t i = 0; i < plan.ops.size(); ++i) {
    EXPECT_EQ(back.ops[i].host_seconds, plan.ops[i].host_seconds) << i;
    EXPECT_EQ(back.ops[i].host_sync, plan.ops[i].host_sync) << i;
  }
  EXPECT_EQ(back.segments[1].host_sync, true);

  nlohmann::json padded = base;
  padded["moe_capacity_factor"] = 1.0;
  const Plan dropping = build_plan(model, cluster, resolved(model, cluster, padded));
  for (const PlanOp& op : dropping.ops) EXPECT_FALSE(op.host_sync) << op.name;

  // The validator holds each compute op's host figures to its segment's.
  Plan tampered = plan;
  tampered.ops[static_cast<std::size_t>(fwd.id)].host_seconds *= 2;
  const auto doubled = validate_plan(tampered);
  ASSERT_TRUE(doubled.has_value());
  EXPECT_NE(doubled->message.find("takes the host"), std::string::npos) << doubled->message;
  Plan backward_sync = plan;
  for (PlanOp& op : backward_sync.ops) {
    if (op.kind == OpKind::backward) {
      op.host_sync = true;
      break;
    }
  }
  const auto synced = validate_plan(backward_sync);
  ASSERT_TRUE(synced.has_value());
  EXPECT_NE(synced->message.find("syncs in forward only"), std::string::npos) << synced->message;

  nlohmann::json bad = plan_to_json(plan);
  bad["ops"][0]["host_seconds"] = -1.0;
  testing::expect_input_error([&] { plan_from_json(bad, "plan.json"); }, "/ops/0/host_seconds", "",
                              "plan.json");
}

}  // namespace
}  // namespace shardplan
