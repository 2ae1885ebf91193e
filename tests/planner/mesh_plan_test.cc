// Plans on the full mesh dp_outer × dp_shard × cp × tp: the groups worked out by hand, a
// 2-layer model with tp 2 and cp 2 whose ops are written out, ZeRO-3's persistent bytes
// against 16·P/(tp·dp_shard·cp), and the throughput bookkeeping per GPU.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <tuple>

#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "planner/memory_estimate.h"
#include "planner/plan_builder.h"
#include "planner/plan_memory.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

FsdpConfig resolved(const ModelSpec& model, const ClusterSpec& cluster, const nlohmann::json& j) {
  return resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
}

// 16 ranks as dp_outer 2 × dp_shard 2 × cp 2 × tp 2, tp innermost: rank r has tp index
// r % 2, cp index r / 2 % 2, dp_shard index r / 4 % 2, dp_outer index r / 8.
TEST(MeshPlan, GroupsFollowMegatronsRankOrder) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  const Plan plan = build_plan(
      model, cluster,
      resolved(model, cluster, {{"tp", 2}, {"cp", 2}, {"dp_outer", 2}, {"seq_len", 64}}));
  EXPECT_EQ(plan.config.dp_shard, 2);
  const std::vector<std::tuple<std::string, int64_t, int64_t>> expected = {
      {"tp", 2, 1}, {"cp", 2, 2}, {"dp_shard_cp", 4, 2}, {"dp_outer", 2, 8}};
  ASSERT_EQ(plan.process_groups.size(), expected.size());
  for (std::size_t g = 0; g < expected.size(); ++g) {
    EXPECT_EQ(plan.process_groups[g].name, std::get<0>(expected[g]));
    EXPECT_EQ(plan.process_groups[g].size, std::get<1>(expected[g]));
    EXPECT_EQ(plan.process_groups[g].stride, std::get<2>(expected[g]));
  }
  const ProcessGroup& tp = plan.process_groups[0];
  const ProcessGroup& cp = plan.process_groups[1];
  const ProcessGroup& shard = plan.process_groups[2];
  const ProcessGroup& outer = plan.process_groups[3];
  // Rank 13 = 1 + 2·0 + 4·1 + 8·1: tp 1, cp 0, dp_shard 1, dp_outer 1.
  EXPECT_EQ(group_rank(tp, 13), 1);
  EXPECT_EQ(group_rank(cp, 13), 0);
  EXPECT_EQ(group_rank(outer, 13), 1);
  // FSDP shards over dp_shard × cp: ranks 9, 11, 13, 15 (same tp index and dp_outer);
  // 13 is third of them.
  EXPECT_EQ(group_rank(shard, 13), 2);
  for (const int64_t r : {9, 11, 15})
    EXPECT_EQ(group_instance(shard, r), group_instance(shard, 13));
  EXPECT_NE(group_instance(shard, 12), group_instance(shard, 13));
  // The tensor-parallel pair and the cp ring stay inside one 8-GPU node.
  EXPECT_EQ(group_instance(tp, 12), group_instance(tp, 13));
  EXPECT_EQ(group_instance(cp, 13), group_instance(cp, 15));
  EXPECT_FALSE(validate_plan(plan).has_value());
}

// A 2-layer Llama-style model (vocabulary 256, hidden 64, 4 heads of 16, 2 KV heads, FFN
// 128) on 8 GPUs as tp 2 × cp 2 × dp_shard 2, one micro-batch of 64 tokens.
TEST(MeshPlan, TwoLayersWithTp2Cp2HandWorked) {
  TransformerArch a;
  a.vocab_size = 256;
  a.hidden_size = 64;
  a.num_layers = 2;
  a.num_heads = 4;
  a.num_kv_heads = 2;
  a.head_dim = 16;
  a.ffn_hidden_size = 128;
  const ModelSpec model = build_transformer(a, "two", "test");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  const Plan plan =
      build_plan(model, cluster, resolved(model, cluster, {{"tp", 2}, {"cp", 2}, {"seq_len", 64}}));
  ASSERT_FALSE(validate_plan(plan).has_value());
  // Each rank holds 64 / cp = 32 tokens. Sequence-parallel gathers and scatters move
  // 32 × 64 bf16 = 4096 bytes; a ring step sends this rank's K and V, 32 tokens × 2 × (2
  // heads × 16) / tp × 2 bytes = 2048 (backward, with dK and dV, 4096); the loss
  // all-reduces 3 fp32 values per token (128 bytes each).
  // FSDP gathers a layer's weights on one TP rank: q 64×32, k and v 64×16, o 32×64, gate and
  // up 64×64, down 64×64, 2 norms of 64 = 18560, padded to a multiple of 256 × 4 ranks
  // (dp_shard × cp) = 19456 elements, 38912 bytes; the root: embedding and output layer of
  // 256 / 2 rows each, 8192 + 8192 + the final norm 64 = 16448 → 17408 elements, 34816 bytes.
  struct Op {
    std::string name, stream, kind, group;
    double bytes;
    std::vector<int64_t> deps;
  };
  const std::vector<Op> expected = {
      {"ag_fwd <root> mb0", "ag", "all_gather", "dp_shard_cp", 34816, {}},
      {"ag_fwd layers.0 mb0", "ag", "all_gather", "dp_shard_cp", 38912, {}},
      {"ag_fwd layers.1 mb0", "ag", "all_gather", "dp_shard_cp", 38912, {}},
      // The vocabulary-parallel embedding's partial sums, reduce-scattered into sequence
      // shards on the compute stream before the embedding's op ends.
      {"tp_rs fwd embed_tokens mb0", "compute", "reduce_scatter", "tp", 4096, {0}},
      {"fwd embed_tokens mb0", "compute", "forward", "-", 4096, {0, 3}},
      // Layer 0: attention block (gather in, scatter out) with its ring step beside it on
      // the cp stream, then the MLP block.
      {"tp_ag fwd layers.0.self_attn mb0", "compute", "all_gather", "tp", 4096, {1, 4}},
      {"tp_rs fwd layers.0.self_attn mb0", "compute", "reduce_scatter", "tp", 4096, {1, 4}},
      {"cp_p2p fwd layers.0.self_attn.core_attention mb0", "cp", "send_recv", "cp", 2048, {1, 4}},
      {"tp_ag fwd layers.0.mlp mb0", "compute", "all_gather", "tp", 4096, {1, 4}},
      {"tp_rs fwd layers.0.mlp mb0", "compute", "reduce_scatter", "tp", 4096, {1, 4}},
      {"fwd layers.0 mb0", "compute", "forward", "-", -1, {1, 4, 5, 6, 8, 9}},
      // Layer 1 waits for layer 0's ring step as well.
      {"tp_ag fwd layers.1.self_attn mb0", "compute", "all_gather", "tp", 4096, {2, 7, 10}},
  };
  ASSERT_GE(plan.ops.size(), expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const PlanOp& op = plan.ops[i];
    const Op& e = expected[i];
    EXPECT_EQ(op.name, e.name) << i;
    EXPECT_EQ(stream_name(op.stream), e.stream) << op.name;
    EXPECT_EQ(op_kind_name(op.kind), e.kind) << op.name;
    EXPECT_EQ(op.group < 0 ? "-" : plan.process_groups[static_cast<std::size_t>(op.group)].name,
              e.group)
        << op.name;
    if (e.bytes >= 0) {
      EXPECT_EQ(op.bytes, e.bytes) << op.name;
    }
    EXPECT_EQ(op.deps, e.deps) << op.name;
  }
  // Backward of layer 0, in execution order: the MLP block's collectives (gather the output
  // gradient, re-gather the input, scatter the input gradient), the ring step with dK, dV,
  // then the attention block's, and the backward itself.
  std::vector<std::tuple<std::string, std::string, double>> backward;
  for (const PlanOp& op : plan.ops) {
    if (op.name.find(" bwd layers.0") != std::string::npos || op.name == "bwd layers.0 mb0")
      backward.emplace_back(op.name, std::string(stream_name(op.stream)), op.bytes);
  }
  const std::vector<std::tuple<std::string, std::string, double>> expected_backward = {
      {"tp_ag bwd layers.0.mlp mb0", "compute", 4096},
      {"tp_ag bwd layers.0.mlp mb0", "compute", 4096},
      {"tp_rs bwd layers.0.mlp mb0", "compute", 4096},
      {"cp_p2p bwd layers.0.self_attn.core_attention mb0", "cp", 4096},
      {"tp_ag bwd layers.0.self_attn mb0", "compute", 4096},
      {"tp_ag bwd layers.0.self_attn mb0", "compute", 4096},
      {"tp_rs bwd layers.0.self_attn mb0", "compute", 4096},
      {"bwd layers.0 mb0", "compute", std::get<2>(backward.back())},
  };
  EXPECT_EQ(backward, expected_backward);
  // The transient buffers of the collectives: one per axis and pass, the ring's holding
  // two chunks.
  int64_t tp_buffers = 0, cp_buffers = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.role == BufferRole::tp_buffer) {
      ++tp_buffers;
      EXPECT_EQ(b.bytes, 4096) << b.name;
    }
    if (b.role == BufferRole::cp_buffer) {
      ++cp_buffers;
      EXPECT_EQ(b.bytes, b.name.starts_with("cp_buffer fwd") ? 4096 : 8192) << b.name;
    }
  }
  EXPECT_EQ(tp_buffers, 8);  // forward and backward of embed, both layers, the head
  EXPECT_EQ(cp_buffers, 4);  // forward and backward of both layers
  // At most one pass's buffers live at once: a layer's backward, 4096 + 8192; the
  // closed-form estimate finds the same.
  EXPECT_EQ(plan_memory(plan).comm_buffers, 4096 + 8192);
  EXPECT_EQ(estimate_memory(model, cluster, plan.config).comm_buffers, 4096 + 8192);
  // Tokens and model FLOPs per GPU: the job's, shared by its 8 GPUs (64 tokens per
  // tp × cp = 4 ranks).
  EXPECT_EQ(plan.tokens_per_gpu, 64.0 / 4);
}

TEST(MeshPlan, OverlapMovesTensorParallelCollectivesOffTheComputeStream) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  const Plan plan =
      build_plan(model, cluster,
                 resolved(model, cluster, {{"tp", 2}, {"tp_comm_overlap", true}, {"seq_len", 64}}));
  int64_t on_tp = 0;
  for (const PlanOp& op : plan.ops) {
    if (op.name.starts_with("tp_")) {
      EXPECT_EQ(op.stream, Stream::tp) << op.name;
      ++on_tp;
    }
  }
  EXPECT_GT(on_tp, 0);
  // Each compute op after the first waits for the overlapped collectives of the one before.
  for (std::size_t i = 1; i < plan.ops.size(); ++i) {
    const PlanOp& op = plan.ops[i];
    if (op.kind != OpKind::forward || op.name.find("layers.1 ") == std::string::npos) continue;
    bool waits = false;
    for (int64_t d : op.deps)
      waits = waits || plan.ops[static_cast<std::size_t>(d)].stream == Stream::tp;
    EXPECT_TRUE(waits) << op.name;
  }
}

// Under FP8, Transformer Engine quantizes a GEMM input before its sequence-parallel
// all-gather: the blocks' gathers move T·h bytes instead of 2·T·h; reduce-scatters and the
// embedding's and output layer's collectives stay bf16.
TEST(MeshPlan, Fp8HalvesTheSequenceParallelGathersOfGemmInputs) {
  const ModelSpec model = load_model("tiny");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  const nlohmann::json base = {{"tp", 2}, {"seq_len", 64}};
  nlohmann::json fp8 = base;
  fp8["fp8_param_gather"] = true;
  const Plan bf16_plan = build_plan(model, cluster, resolved(model, cluster, base));
  const Plan fp8_plan = build_plan(model, cluster, resolved(model, cluster, fp8));
  std::map<std::string, const PlanOp*> bf16_ops;
  for (const PlanOp& op : bf16_plan.ops) bf16_ops[op.name] = &op;
  const double tokens = 64, hidden = static_cast<double>(model.arch->hidden_size);
  int64_t halved = 0, kept = 0;
  for (const PlanOp& op : fp8_plan.ops) {
    if (!op.name.starts_with("tp_")) continue;
    ASSERT_TRUE(bf16_ops.contains(op.name)) << op.name;
    const double bf16_bytes = bf16_ops.at(op.name)->bytes;
    const bool block = op.name.find(".self_attn ") != std::string::npos ||
                       op.name.find(".mlp ") != std::string::npos;
    if (block && op.kind == OpKind::all_gather) {
      EXPECT_DOUBLE_EQ(op.bytes, tokens * hidden) << op.name;
      EXPECT_DOUBLE_EQ(bf16_bytes, 2 * tokens * hidden) << op.name;
      ++halved;
    } else {
      EXPECT_DOUBLE_EQ(op.bytes, bf16_bytes) << op.name;
      ++kept;
    }
  }
  EXPECT_GT(halved, 0);
  EXPECT_GT(kept, 0);
}

// ZeRO-3 with the default dtypes keeps 16 bytes per parameter of its shard: bf16 weights
// and gradients, fp32 main weights and Adam's two states. Per GPU that is 16·P/(tp ·
// dp_shard · cp), P/tp being one tensor-parallel rank's parameters, plus the padding of
// each flat buffer to 256 × (dp_shard × cp) elements.
TEST(MeshPlan, Zero3PersistentBytesAreSixteenPerParameterOverTheMesh) {
  const ModelSpec model = load_model("llama3-70b");
  const ClusterSpec cluster = load_cluster("dgx-h100", 8, std::nullopt);  // 64 GPUs
  const double h = 8192, q = 8192, kv = 1024, f = 28672, layers = 80;
  for (const auto& [tp, cp] : {std::pair{8, 1}, {4, 2}, {2, 4}, {8, 2}}) {
    const FsdpConfig c = resolved(model, cluster, {{"tp", tp}, {"cp", cp}});
    const Plan plan = build_plan(model, cluster, c);
    const auto t = static_cast<double>(tp);
    const auto vocab = static_cast<double>(padded_vocab_size(128256, tp));
    const double per_tp_rank =
        2 * vocab * h / t + layers * ((2 * h * q + 2 * h * kv + 3 * h * f) / t + 2 * h) + h;
    const double ranks = static_cast<double>(c.dp_shard * cp);
    EXPECT_EQ(c.dp_shard * cp * tp, 64);
    double persistent = 0;
    for (const PlanBuffer& b : plan.buffers)
      if (b.persistent) persistent += static_cast<double>(b.bytes);
    const double closed_form = 16.0 * per_tp_rank / ranks;
    // Padding: at most one 256 × ranks block per flat buffer (81 units, one group each).
    const double padding = 16.0 * 81 * 256;
    EXPECT_GE(persistent, closed_form) << tp << " × " << cp;
    EXPECT_LE(persistent, closed_form + padding) << tp << " × " << cp;
    // The closed-form estimate agrees, padding aside.
    const MemoryEstimate e = estimate_memory(model, cluster, c);
    const double estimated = e.model_weights + e.main_weights + e.main_grads + e.optimizer_states;
    EXPECT_NEAR(estimated, persistent, padding) << tp << " × " << cp;
  }
}

}  // namespace
}  // namespace shardplan
