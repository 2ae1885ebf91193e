// The closed-form memory picture against the ZeRO formulas (Rajbhandari et al. 2020) and
// DeepSpeed's published estimators, computed independently here.
#include "planner/memory_estimate.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/internal/fsdp_units.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

struct Job {
  ModelSpec model;
  ClusterSpec cluster;
};

Job llama8b_on(int64_t nodes) {
  return {load_model("llama3-8b"), load_cluster("dgx-h100", nodes, std::nullopt)};
}

MemoryEstimate estimate(const Job& job, const nlohmann::json& config) {
  const FsdpConfig c =
      resolve_fsdp_config(fsdp_config_from_json(config, "cfg"), job.model, job.cluster, "cfg");
  return estimate_memory(job.model, job.cluster, c);
}

// Llama 3 8B units, from the architecture: 32 decoder layers and the root unit.
constexpr double kLayer = 4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336 + 2 * 4096;
constexpr double kRoot = 2.0 * 128256 * 4096 + 4096;
constexpr double kTotal = 32 * kLayer + kRoot;

double sharded(double n) {
  return 32 * std::ceil(kLayer / n) + std::ceil(kRoot / n);
}

TEST(MemoryEstimate, PersistentBytesFollowTheStrategyTable) {
  const Job job = llama8b_on(1);
  const double n = 8;
  // DESIGN.md: weights bf16, main weights fp32, main grads bf16, Adam 2 × fp32.
  struct Row {
    const char* strategy;
    double weights, main_weights, grads, optimizer;
  };
  const Row rows[] = {
      {"no_shard", 2 * kTotal, 4 * kTotal, 2 * kTotal, 8 * kTotal},
      {"optim", 2 * kTotal, 4 * sharded(n), 2 * kTotal, 8 * sharded(n)},
      {"optim_grads", 2 * kTotal, 4 * sharded(n), 2 * sharded(n), 8 * sharded(n)},
      {"optim_grads_params", 2 * sharded(n), 4 * sharded(n), 2 * sharded(n), 8 * sharded(n)},
  };
  for (const Row& row : rows) {
    const MemoryEstimate e = estimate(job, {{"sharding_strategy", row.strategy}});
    EXPECT_DOUBLE_EQ(e.model_weights, row.weights) << row.strategy;
    EXPECT_DOUBLE_EQ(e.main_weights, row.main_weights) << row.strategy;
    EXPECT_DOUBLE_EQ(e.main_grads, row.grads) << row.strategy;
    EXPECT_DOUBLE_EQ(e.optimizer_states, row.optimizer) << row.strategy;
  }
}

TEST(MemoryEstimate, MatchesDeepSpeedZero3ModelStates) {
  // DeepSpeed's ZeRO-3 estimator: 18·P/N bytes of model states with fp32 gradients
  // (2 fp16 weights + 4 fp32 grads + 4 fp32 master + 8 Adam) — matched to padding.
  const Job job = llama8b_on(4);
  const MemoryEstimate e = estimate(job, {{"main_grad_dtype", "fp32"}});
  const double model_states = e.model_weights + e.main_grads + e.main_weights + e.optimizer_states;
  EXPECT_NEAR(model_states / (18.0 * kTotal / 32), 1.0, 1e-6);
  // Its 4·largest_layer term (fp16 weights and grads of one gathered layer) is below our
  // transient terms, which add the root unit and prefetch (docs/model.md).
  EXPECT_GT(e.unsharded_weights + e.unsharded_grads, 4.0 * kLayer);
}

TEST(MemoryEstimate, HsdpOuterOptimShardsOptimizerOverAllRanks) {
  const Job job = llama8b_on(2);
  const MemoryEstimate e = estimate(job, {{"dp_outer", 2}, {"outer_strategy", "optim"}});
  EXPECT_EQ(e.dp_shard, 8);
  EXPECT_DOUBLE_EQ(e.optimizer_states, 8 * sharded(16));
  EXPECT_DOUBLE_EQ(e.main_weights, 4 * sharded(16));
  EXPECT_DOUBLE_EQ(e.model_weights, 2 * sharded(8)) << "weights shard over dp_shard only";
  const MemoryEstimate replicated = estimate(job, {{"dp_outer", 2}});
  EXPECT_DOUBLE_EQ(replicated.optimizer_states, 8 * sharded(8));
}

TEST(MemoryEstimate, TransientBuffersFollowPrefetchAndDrain) {
  const Job job = llama8b_on(1);
  const MemoryEstimate p0 = estimate(job, {{"forward_prefetch", 0}, {"backward_prefetch", 0}});
  const MemoryEstimate p2 = estimate(job, {{"forward_prefetch", 2}});
  // The root unit stays gathered; 1 + prefetch layers gathered beside it (bf16).
  EXPECT_DOUBLE_EQ(p0.unsharded_weights, 2 * (kRoot + 1 * kLayer));
  EXPECT_DOUBLE_EQ(p2.unsharded_weights, 2 * (kRoot + 3 * kLayer));
  EXPECT_DOUBLE_EQ(p0.unsharded_grads, 2 * (kRoot + 2 * kLayer));  // drain keeps 2
  const MemoryEstimate sync = estimate(job, {{"async_reduce", false}});
  EXPECT_DOUBLE_EQ(sync.unsharded_grads, 2 * (kRoot + 1 * kLayer));
  const MemoryEstimate zero2 = estimate(job, {{"sharding_strategy", "optim_grads"}});
  EXPECT_EQ(zero2.unsharded_weights, 0) << "ZeRO-2 keeps full weights";
  EXPECT_GT(zero2.unsharded_grads, 0);
  const MemoryEstimate zero1 = estimate(job, {{"sharding_strategy", "optim"}});
  EXPECT_EQ(zero1.unsharded_grads, 0) << "ZeRO-1 accumulates into full main grads";
}

TEST(MemoryEstimate, DoubleBufferReplacesTransientBuffers) {
  const Job job = llama8b_on(1);
  const MemoryEstimate e = estimate(job, {{"double_buffer", true}});
  EXPECT_EQ(e.unsharded_weights, 0);
  EXPECT_EQ(e.unsharded_grads, 0);
  // Two buffers of the largest unit (the root here), for weights and for grads.
  EXPECT_DOUBLE_EQ(e.double_buffers, 2 * kRoot * (2 + 2));
}

TEST(MemoryEstimate, Fp8GatherStoresOneBytePerWeight) {
  const Job job = llama8b_on(1);
  const MemoryEstimate e = estimate(job, {{"fp8_param_gather", true}});
  EXPECT_DOUBLE_EQ(e.model_weights, sharded(8));
  EXPECT_DOUBLE_EQ(e.unsharded_weights, 1 * (kRoot + 2 * kLayer));
  const MemoryEstimate mx = estimate(job, {{"fp8_param_gather", true}, {"fp8_recipe", "mxfp8"}});
  EXPECT_DOUBLE_EQ(mx.model_weights, 2 * sharded(8)) << "row- and column-wise copies";
}

TEST(MemoryEstimate, RecomputeLowersActivations) {
  const Job job = llama8b_on(1);
  const double none = estimate(job, {{"recompute", "none"}}).activations;
  const double selective = estimate(job, {{"recompute", "selective"}}).activations;
  const double full = estimate(job, {{"recompute", "full"}}).activations;
  EXPECT_LE(selective, none);
  EXPECT_LT(full, selective);
  // Full: 32 layer inputs of h bf16 per token, one layer re-created, the rest unchanged.
  const double tokens = 8192;
  const Module* layer = find_module(job.model.root, "layers.0");
  const BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  const double one_layer = saved_activation_bytes(*layer, shape, Recompute::none);
  EXPECT_DOUBLE_EQ(none - full, 32 * one_layer - 32 * 2 * 4096 * tokens - one_layer);
}

// torchtitan's policies by hand. sac_layer with recompute_every 4 checkpoints layers 4, 8,
// ..., 32 (1-based): 8 keep only their input, 24 keep everything, and one is re-created
// in its backward. sac_op keeps 8h + 2kv + 2f + 4·heads bytes per token in each layer.
// The plan's segments agree with the estimate: the same checkpointed layers, the same
// saved bytes.
TEST(MemoryEstimate, TorchtitanRecomputePoliciesByHand) {
  const Job job = llama8b_on(1);
  const double tokens = 8192, h = 4096, kv = 1024, f = 14336, heads = 32;
  const Module* layer = find_module(job.model.root, "layers.0");
  const BatchShape shape{.micro_batch = 1, .seq_len = 8192};
  const double one_layer = saved_activation_bytes(*layer, shape, Recompute::none);
  const double none = estimate(job, {{"recompute", "none"}}).activations;
  const MemoryEstimate every4 = estimate(job, {{"recompute", "sac_layer"}, {"recompute_every", 4}});
  EXPECT_DOUBLE_EQ(none - every4.activations, 8 * one_layer - 8 * 2 * h * tokens - one_layer);
  const MemoryEstimate per_op = estimate(job, {{"recompute", "sac_op"}});
  EXPECT_DOUBLE_EQ(none - per_op.activations,
                   32 * one_layer - 32 * (8 * h + 2 * kv + 2 * f + 4 * heads) * tokens);

  for (const nlohmann::json& config :
       {nlohmann::json{{"recompute", "sac_layer"}, {"recompute_every", 4}},
        nlohmann::json{{"recompute", "sac_op"}}}) {
    const FsdpConfig c =
        resolve_fsdp_config(fsdp_config_from_json(config, "cfg"), job.model, job.cluster, "cfg");
    const Plan plan = build_plan(job.model, job.cluster, c);
    double saved = 0;
    std::vector<int64_t> checkpointed_layers;
    for (const PlanSegment& seg : plan.segments) {
      saved += seg.activation_bytes;
      if (seg.checkpointed) checkpointed_layers.push_back(seg.unit);
    }
    EXPECT_DOUBLE_EQ(saved, estimate_memory(job.model, job.cluster, c).saved_activations)
        << config.dump();
    if (c.recompute == Recompute::sac_layer) {
      EXPECT_EQ(checkpointed_layers, (std::vector<int64_t>{4, 8, 12, 16, 20, 24, 28, 32}));
      int64_t recomputes = 0;
      for (const PlanOp& op : plan.ops) recomputes += op.kind == OpKind::recompute ? 1 : 0;
      EXPECT_EQ(recomputes, 8);
    }
  }
}

// Megatron's recompute modules on a MoE model: the plan's segments keep what the estimate
// says, each layer's backward holds the dropped bytes as its own recompute_activations
// buffer (the estimate adds the largest), moves the re-run's memory-bound bytes, and under
// moe re-runs the layer's forward dispatch collectives before its backward ones.
TEST(MemoryEstimate, RecomputeModulesInThePlanAgreeWithTheEstimate) {
  const Job job{load_model("tiny-moe"), load_cluster("dgx-h100", 1, std::nullopt)};
  const nlohmann::json base = {{"ep", 2}, {"moe_dispatcher", "alltoall"}, {"seq_len", 1024}};
  auto with = [&](nlohmann::json extra) {
    nlohmann::json j = base;
    j.update(extra);
    return resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), job.model, job.cluster, "cfg");
  };
  const FsdpConfig core = with({{"recompute", "selective"}});
  const FsdpConfig modules =
      with({{"recompute", "selective"},
            {"recompute_modules", {"core_attn", "layernorm", "moe_act", "moe"}}});
  const Plan core_plan = build_plan(job.model, job.cluster, core);
  const Plan plan = build_plan(job.model, job.cluster, modules);
  double saved = 0, largest_dropped = 0, core_saved = 0;
  for (const PlanSegment& seg : plan.segments) {
    saved += seg.activation_bytes;
    largest_dropped = std::max(largest_dropped, seg.recompute_bytes);
  }
  for (const PlanSegment& seg : core_plan.segments) core_saved += seg.activation_bytes;
  const MemoryEstimate e = estimate_memory(job.model, job.cluster, modules);
  EXPECT_DOUBLE_EQ(saved, e.saved_activations);
  EXPECT_GT(largest_dropped, 0.0);
  // What the estimate adds for the backward's re-created bytes is one layer's.
  const MemoryEstimate e_core = estimate_memory(job.model, job.cluster, core);
  EXPECT_DOUBLE_EQ(e.activations - e.saved_activations,
                   e_core.activations - e_core.saved_activations + largest_dropped);
  EXPECT_LT(saved, core_saved);
  int64_t buffers = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.role != BufferRole::recompute_activations) continue;
    ++buffers;
    EXPECT_GT(b.bytes, 0);
  }
  EXPECT_EQ(buffers, 2 * modules.grad_accum);  // one per layer and micro-batch
  for (std::size_t i = 0; i < plan.segments.size(); ++i) {
    const PlanSegment& seg = plan.segments[i];
    const PlanSegment& plain = core_plan.segments[i];
    if (seg.unit == 0) continue;
    EXPECT_GT(seg.recompute_io_bytes, 0.0) << seg.label;
    EXPECT_GT(seg.backward_flops, plain.backward_flops) << seg.label;  // the MoE forward again
    // Two all-to-alls (dispatch, combine) more in backward: the forward's, re-run.
    EXPECT_EQ(seg.backward_comms.size(), plain.backward_comms.size() + 2) << seg.label;
  }
  for (const PlanOp& op : plan.ops) {
    if (op.kind != OpKind::backward || op.segment < 0) continue;
    const PlanSegment& seg = plan.segments[static_cast<std::size_t>(op.segment)];
    EXPECT_GE(op.bytes, 2 * seg.io_bytes + seg.recompute_io_bytes) << op.name;
  }
  EXPECT_FALSE(validate_plan(plan).has_value());
}

// The loss's workspace is a buffer of the root segment's forward and backward ops, live
// only while they run; the estimate counts the largest one beside every saved activation.
// torch stacks: 8 bytes per token and vocabulary entry; megatron-te: the bf16 logits.
TEST(MemoryEstimate, LossWorkspaceIsAPlanBufferOfItsComputeOps) {
  const Job job = llama8b_on(1);
  const double tokens = 8192, vocab = 128256;
  // torch-compile compiles the loss by default (the bf16 gradient only); torch-eager runs
  // it on fp32 logits.
  for (const auto& [stack, bytes] : {std::pair{"megatron-te", 2.0 * vocab * tokens},
                                     std::pair{"torch-eager", 8.0 * vocab * tokens},
                                     std::pair{"torch-compile", 2.0 * vocab * tokens}}) {
    const FsdpConfig c = resolve_fsdp_config(fsdp_config_from_json({{"stack", stack}}, "cfg"),
                                             job.model, job.cluster, "cfg");
    const Plan plan = build_plan(job.model, job.cluster, c);
    int64_t workspaces = 0;
    for (const PlanBuffer& b : plan.buffers) {
      if (b.role != BufferRole::workspace) continue;
      workspaces += 1;
      EXPECT_EQ(b.bytes, static_cast<int64_t>(bytes)) << stack << " " << b.name;
      EXPECT_EQ(b.live_end - b.live_begin, 1) << "one op: " << b.name;
      EXPECT_EQ(plan.ops[static_cast<std::size_t>(b.live_begin)].stream, Stream::compute);
    }
    EXPECT_EQ(workspaces, 2) << "the loss segment's forward and backward";
    const MemoryEstimate e = estimate_memory(job.model, job.cluster, c);
    EXPECT_DOUBLE_EQ(e.activations - e.saved_activations, bytes) << stack;
  }
}

// recompute_every belongs to sac_layer; sac_op needs a model shardplan builds.
TEST(MemoryEstimate, RecomputePolicyErrorsNameTheField) {
  try {
    fsdp_config_from_json({{"recompute", "full"}, {"recompute_every", 2}}, "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute_every");
    EXPECT_NE(e.reason().find("sac_layer"), std::string::npos);
  }
  try {
    fsdp_config_from_json({{"recompute", "sac_layer"}, {"recompute_every", 0}}, "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute_every");
  }
  try {
    fsdp_config_from_json({{"vocab_parallel_loss", false}}, "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/vocab_parallel_loss");
    EXPECT_NE(e.reason().find("tp > 1"), std::string::npos);
  }
  const ModelSpec captured =
      load_model(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/captured_llama_small.json");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 2);
  try {
    resolve_fsdp_config(fsdp_config_from_json({{"recompute", "sac_op"}}, "cfg"), captured, cluster,
                        "cfg");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/recompute");
    EXPECT_NE(e.reason().find("explicit"), std::string::npos);
  }
}

TEST(MemoryEstimate, TotalIsTheSumAndFitsIsTheSign) {
  const Job job = llama8b_on(1);
  for (int64_t micro_batch : {1, 4}) {
    const MemoryEstimate e = estimate(job, {{"micro_batch", micro_batch}});
    const double sum = e.model_weights + e.main_weights + e.main_grads + e.optimizer_states +
                       e.double_buffers + e.unsharded_weights + e.unsharded_grads + e.activations +
                       e.non_tensor;
    EXPECT_DOUBLE_EQ(e.total, sum);
    EXPECT_DOUBLE_EQ(e.headroom, e.capacity - e.total);
    EXPECT_EQ(e.fits, e.headroom >= 0);
  }
  const MemoryEstimate big = estimate(job, {{"micro_batch", 4}});
  EXPECT_FALSE(big.fits);
  EXPECT_EQ(big.largest_term, "activations");
}

// Property: more sharding never raises persistent memory, across models and sizes.
TEST(MemoryEstimate, MoreShardingNeverRaisesPersistentMemory) {
  for (const char* name : {"tiny", "llama3-70b", "mixtral-8x7b"}) {
    for (int64_t nodes : {1, 2, 8}) {
      const Job job{load_model(name), load_cluster("dgx-h100", nodes, std::nullopt)};
      double previous = INFINITY;
      for (const char* strategy : {"no_shard", "optim", "optim_grads", "optim_grads_params"}) {
        const MemoryEstimate e =
            estimate(job, {{"sharding_strategy", strategy}, {"seq_len", 2048}});
        const double persistent =
            e.model_weights + e.main_weights + e.main_grads + e.optimizer_states;
        EXPECT_LE(persistent, previous) << name << " " << strategy << " on " << nodes;
        previous = persistent;
      }
    }
  }
}

TEST(FsdpUnits, DefaultUnitsAreTheLayersAndTheRoot) {
  const ModelSpec model = load_model("llama3-8b");
  const auto units = find_fsdp_units(model, {}, "cfg");
  ASSERT_EQ(units.size(), 33u);
  EXPECT_EQ(units[0].name, "");
  EXPECT_EQ(units[0].parameters, static_cast<int64_t>(kRoot));
  EXPECT_EQ(units[1].name, "layers.0");
  EXPECT_EQ(units[32].name, "layers.31");
  int64_t sum = 0;
  for (const auto& u : units) sum += u.parameters;
  EXPECT_EQ(sum, parameter_count(model.root));
}

TEST(FsdpUnits, PatternThatMatchesNothingIsAnError) {
  const ModelSpec model = load_model("tiny");
  try {
    find_fsdp_units(model, {"layers.*", "blocks.*"}, "cfg.json");
    FAIL();
  } catch (const InputError& e) {
    EXPECT_EQ(e.field(), "/unit_modules/1");
    EXPECT_NE(e.reason().find("'blocks.*' matches no module"), std::string::npos);
  }
}

TEST(FsdpUnits, FinerUnitsSplitTheLayers) {
  const ModelSpec model = load_model("tiny");
  const auto units = find_fsdp_units(model, {"layers.*.self_attn", "layers.*.mlp"}, "cfg");
  EXPECT_EQ(units.size(), 1u + 8u);
  EXPECT_EQ(units[1].name, "layers.0.self_attn");
  EXPECT_EQ(units[2].name, "layers.0.mlp");
  // The layer norms stay in the root unit.
  EXPECT_EQ(units[0].parameters, 2 * 512 * 64 + 64 + 4 * 2 * 64);
}

}  // namespace
}  // namespace shardplan
