// Persistent memory of a plan against the strategy table computed independently here,
// DeepSpeed's published estimators, and Megatron-FSDP's own peak-memory bound.
#include "planner/plan_memory.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <random>

#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "planner/memory_estimate.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

// Llama 3 8B units from the architecture: 32 decoder layers and the root unit.
constexpr int64_t kLayer = 4096LL * (4096 + 1024 + 1024 + 4096) + 3LL * 4096 * 14336 + 2 * 4096;
constexpr int64_t kRoot = 2LL * 128256 * 4096 + 4096;

int64_t padded(int64_t elements, int64_t ranks) {
  const int64_t multiple = 256 * ranks;  // shards are multiples of 256 elements
  return (elements + multiple - 1) / multiple * multiple;
}

Plan llama8b_plan(const nlohmann::json& config, int64_t nodes = 1) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", nodes, std::nullopt);
  nlohmann::json j = config;
  j["seq_len"] = 2048;
  const FsdpConfig c = resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
  Plan plan = build_plan(model, cluster, c);
  const auto error = validate_plan(plan);
  EXPECT_FALSE(error.has_value()) << error->message;
  return plan;
}

TEST(PlanMemory, PersistentBytesFollowTheStrategyTable) {
  const int64_t n = 8;
  // Σ over units of the padded group, and of its shard.
  const double full =
      32.0 * static_cast<double>(padded(kLayer, n)) + static_cast<double>(padded(kRoot, n));
  const double shard = full / n;
  struct Row {
    const char* strategy;
    double weights, main_weights, grads, optimizer;
  };
  const Row rows[] = {
      {"no_shard", 2 * full, 4 * full, 2 * full, 8 * full},
      {"optim", 2 * full, 4 * shard, 2 * full, 8 * shard},
      {"optim_grads", 2 * full, 4 * shard, 2 * shard, 8 * shard},
      {"optim_grads_params", 2 * shard, 4 * shard, 2 * shard, 8 * shard},
  };
  for (const Row& row : rows) {
    const PlanMemory m = plan_memory(llama8b_plan({{"sharding_strategy", row.strategy}}));
    EXPECT_DOUBLE_EQ(m.model_weights, row.weights) << row.strategy;
    EXPECT_DOUBLE_EQ(m.main_weights, row.main_weights) << row.strategy;
    EXPECT_DOUBLE_EQ(m.main_grads, row.grads) << row.strategy;
    EXPECT_DOUBLE_EQ(m.optimizer_states, row.optimizer) << row.strategy;
  }
}

// PyTorch FSDP (FSDP2's fully_shard under torchtitan's MixedPrecisionPolicy): the fp32
// shard is the weight, no bf16 shard or main copy; gradients fp32 shards that exist from
// the step's first reduce-scatter to zero_grad (transient buffers, in the pool); the
// reduce-scatter moves fp32. 16 bytes per parameter at the end of backward, 12 across the
// forward; the Megatron layout keeps bf16 weights beside the fp32 main copy and bf16
// grads all step. The closed-form estimate says the same of the persistent terms.
TEST(PlanMemory, TorchStacksKeepPyTorchFsdpLayout) {
  const int64_t n = 8;
  const double full =
      32.0 * static_cast<double>(padded(kLayer, n)) + static_cast<double>(padded(kRoot, n));
  const double shard = full / n;
  for (const char* stack : {"torch-eager", "torch-compile"}) {
    const Plan plan = llama8b_plan({{"stack", stack}});
    const PlanMemory m = plan_memory(plan);
    EXPECT_DOUBLE_EQ(m.model_weights, 4 * shard) << stack;
    EXPECT_DOUBLE_EQ(m.main_weights, 0) << stack;
    EXPECT_DOUBLE_EQ(m.main_grads, 4 * shard) << stack;
    EXPECT_TRUE(m.main_grads_transient);
    EXPECT_DOUBLE_EQ(m.optimizer_states, 8 * shard) << stack;
    // The grads are in the pool, not added twice.
    EXPECT_DOUBLE_EQ(m.total, m.model_weights + m.optimizer_states + m.transient + m.non_tensor);
    bool saw_first_reduction = false;
    for (const PlanBuffer& b : plan.buffers) {
      if (b.role != BufferRole::main_grad) continue;
      EXPECT_FALSE(b.persistent) << b.name;
      const PlanOp& first = plan.ops[static_cast<std::size_t>(b.live_begin)];
      EXPECT_EQ(first.kind, OpKind::reduce_scatter) << b.name;
      EXPECT_EQ(first.micro_batch, 0) << b.name;
      EXPECT_EQ(plan.ops[static_cast<std::size_t>(b.live_end - 1)].kind, OpKind::optimizer_step)
          << b.name;
      saw_first_reduction = true;
    }
    EXPECT_TRUE(saw_first_reduction);
    for (const PlanOp& op : plan.ops) {
      if (op.kind == OpKind::all_gather && op.unit == 1) {
        EXPECT_DOUBLE_EQ(op.bytes, 2.0 * static_cast<double>(padded(kLayer, n))) << op.name;
      }
      if (op.kind == OpKind::reduce_scatter && op.unit == 1) {
        EXPECT_DOUBLE_EQ(op.bytes, 4.0 * static_cast<double>(padded(kLayer, n))) << op.name;
      }
    }
    const ModelSpec model = load_model("llama3-8b");
    const MemoryEstimate e =
        estimate_memory(model, load_cluster("dgx-h100", 1, std::nullopt), plan.config);
    EXPECT_NEAR(e.model_weights, m.model_weights, 1e-6 * m.model_weights);
    EXPECT_DOUBLE_EQ(e.main_weights, 0);
    EXPECT_NEAR(e.main_grads, m.main_grads, 1e-6 * m.main_grads);
  }
  // Megatron-FSDP's layout is unchanged.
  const PlanMemory megatron = plan_memory(llama8b_plan({}));
  EXPECT_DOUBLE_EQ(megatron.model_weights, 2 * shard);
  EXPECT_DOUBLE_EQ(megatron.main_weights, 4 * shard);
  EXPECT_FALSE(megatron.main_grads_transient);
}

// no_sync (FSDP2's set_requires_gradient_sync(False) on all but the last micro-batch):
// no reduce-scatter before the last micro-batch; each unit's fp32 accumulator (reduce_dtype
// fp32 against bf16 params: FSDP2 upcasts) lives from micro-batch 0's backward to the
// last one's reduce-scatter, which moves it once. With 3 micro-batches of Llama 3 8B on 8
// GPUs, every unit's accumulator is live at once: 4 bytes × every padded parameter.
// KempnerForge's bf16 master weights keep AdamW's states in bf16 (zeros_like(p)).
TEST(PlanMemory, NoSyncAccumulatesUnshardedGradientsUntilTheLastMicroBatch) {
  const int64_t n = 8;
  const double full =
      32.0 * static_cast<double>(padded(kLayer, n)) + static_cast<double>(padded(kRoot, n));
  const double shard = full / n;
  const Plan plan = llama8b_plan({{"stack", "torch-compile"},
                                  {"grad_accum", 3},
                                  {"no_sync", true},
                                  {"main_param_dtype", "bf16"},
                                  {"grad_reduce_dtype", "fp32"}});
  int accumulators = 0;
  double accumulator_bytes = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.role != BufferRole::accumulated_grad) continue;
    ++accumulators;
    accumulator_bytes += static_cast<double>(b.bytes);
    EXPECT_EQ(b.dtype, DType::fp32) << b.name;
    const PlanOp& first = plan.ops[static_cast<std::size_t>(b.live_begin)];
    EXPECT_EQ(first.kind, OpKind::backward) << b.name;
    EXPECT_EQ(first.micro_batch, 0) << b.name;
    bool reduced = false;
    for (const PlanOp& op : plan.ops) {
      const bool reads = std::find(op.reads.begin(), op.reads.end(), b.id) != op.reads.end();
      if (op.kind == OpKind::reduce_scatter && reads) {
        EXPECT_EQ(op.micro_batch, 2) << op.name;
        EXPECT_LE(op.id, b.live_end) << b.name;
        reduced = true;
      }
    }
    EXPECT_TRUE(reduced) << b.name;
  }
  EXPECT_EQ(accumulators, 33);
  EXPECT_DOUBLE_EQ(accumulator_bytes, 4 * full);
  for (const PlanOp& op : plan.ops) {
    if (op.kind != OpKind::reduce_scatter) continue;
    EXPECT_EQ(op.micro_batch, 2) << op.name;
    if (op.unit == 1) EXPECT_DOUBLE_EQ(op.bytes, 4.0 * static_cast<double>(padded(kLayer, n)));
  }
  const PlanMemory m = plan_memory(plan);
  EXPECT_DOUBLE_EQ(m.model_weights, 2 * shard);
  EXPECT_DOUBLE_EQ(m.optimizer_states, 2 * 2 * shard);
  EXPECT_DOUBLE_EQ(m.main_grads, 2 * shard);
  EXPECT_GE(m.unsharded_grads, 4 * full);
  EXPECT_LT(m.unsharded_grads, 4 * full + 4.0 * static_cast<double>(padded(kRoot, n)));
  // The closed form adds the whole model's accumulators to its unsharded-gradient term.
  const MemoryEstimate e = estimate_memory(load_model("llama3-8b"),
                                           load_cluster("dgx-h100", 1, std::nullopt), plan.config);
  EXPECT_NEAR(e.optimizer_states, m.optimizer_states, 1e-3 * m.optimizer_states);
  EXPECT_NEAR(e.unsharded_grads, m.unsharded_grads, 0.05 * m.unsharded_grads);
  // Without no_sync every micro-batch reduces.
  const Plan synced =
      llama8b_plan({{"stack", "torch-compile"}, {"grad_accum", 3}, {"main_param_dtype", "bf16"}});
  int reductions_before_last = 0;
  for (const PlanOp& op : synced.ops)
    reductions_before_last += op.kind == OpKind::reduce_scatter && op.micro_batch < 2;
  EXPECT_EQ(reductions_before_last, 2 * 33);
  EXPECT_LT(plan_memory(synced).unsharded_grads, 0.2 * m.unsharded_grads);
}

// FP8 GEMMs on unsharded bf16 weights: Transformer Engine's cached FP8 copy and transpose,
// 2 bytes per layer parameter, on top of the strategy table's weights; the embedding and
// output layer (root unit) stay bf16. The closed-form estimate says the same.
TEST(PlanMemory, Fp8GemmsOnBf16WeightsCacheTwoBytesPerLayerParameter) {
  const int64_t n = 8;
  const double full =
      32.0 * static_cast<double>(padded(kLayer, n)) + static_cast<double>(padded(kRoot, n));
  const Plan plan = llama8b_plan({{"sharding_strategy", "optim"}, {"fp8", true}});
  const PlanMemory m = plan_memory(plan);
  EXPECT_DOUBLE_EQ(m.model_weights, 2 * full + 2.0 * 32.0 * static_cast<double>(kLayer));
  int64_t caches = 0;
  for (const PlanBuffer& b : plan.buffers) {
    if (b.role != BufferRole::fp8_weight_cache) continue;
    ++caches;
    EXPECT_TRUE(b.persistent);
    EXPECT_NE(b.unit, 0) << b.name;
  }
  EXPECT_GE(caches, 32);
  const MemoryEstimate e = estimate_memory(load_model("llama3-8b"),
                                           load_cluster("dgx-h100", 1, std::nullopt), plan.config);
  EXPECT_NEAR(e.model_weights, m.model_weights, 1e-4 * m.model_weights);  // padding
}

TEST(PlanMemory, HsdpOptimizerShardsOverBothDimensions) {
  // 2 nodes: dp_shard 8 × dp_outer 2; groups pad to 256 × 16 so the optimizer's shard of
  // the padded group divides by 16.
  const PlanMemory m = plan_memory(llama8b_plan({{"dp_outer", 2}, {"outer_strategy", "optim"}}, 2));
  const double full =
      32.0 * static_cast<double>(padded(kLayer, 16)) + static_cast<double>(padded(kRoot, 16));
  EXPECT_DOUBLE_EQ(m.optimizer_states, 8 * full / 16);
  EXPECT_DOUBLE_EQ(m.main_weights, 4 * full / 16);
  EXPECT_DOUBLE_EQ(m.model_weights, 2 * full / 8);
}

TEST(PlanMemory, DeepSpeedModelStateEstimates) {
  const double p = 32.0 * kLayer + kRoot;
  // ZeRO-3 with fp32 gradients: 18·P/N (2 + 4 + 4 + 8), to padding.
  const PlanMemory z3 = plan_memory(llama8b_plan({{"main_grad_dtype", "fp32"}}, 4));
  EXPECT_NEAR(
      (z3.model_weights + z3.main_grads + z3.main_weights + z3.optimizer_states) / (18 * p / 32),
      1.0, 1e-4);
  // ZeRO-2: ours is 2P + 16P/N; DeepSpeed's estimator says 2P + 18P/N, counting the fp16
  // gradient partition it keeps beside the fp32 one (docs/model.md).
  const PlanMemory z2 = plan_memory(
      llama8b_plan({{"sharding_strategy", "optim_grads"}, {"main_grad_dtype", "fp32"}}, 4));
  const double ours = z2.model_weights + z2.main_grads + z2.main_weights + z2.optimizer_states;
  EXPECT_NEAR(ours / (2 * p + 16 * p / 32), 1.0, 1e-4);
  EXPECT_NEAR((2 * p + 18 * p / 32 - ours) / (2 * p / 32), 1.0, 1e-3);
}

TEST(PlanMemory, PoolIsAtLeastItsLowerBoundAndTotalAddsUp) {
  for (const char* allocator : {"pool", "caching"}) {
    const Plan plan = llama8b_plan({{"allocator", allocator}, {"grad_accum", 2}});
    const PlanMemory m = plan_memory(plan);
    EXPECT_GE(m.pool_bytes, m.pool_lower_bound_bytes);
    const double persistent =
        m.model_weights + m.main_weights + m.main_grads + m.optimizer_states + m.double_buffers;
    // The pool holds the transient buffers; the caching allocator allocates their live
    // peak in whole blocks (each request rounded up to 512 B, and a large block whose rest
    // is 1 MiB or less is not split) and reserves at least that.
    if (std::string(allocator) == "pool") {
      EXPECT_DOUBLE_EQ(m.transient, m.pool_bytes);
      EXPECT_DOUBLE_EQ(m.peak_allocated, persistent + m.pool_lower_bound_bytes + m.non_tensor);
    } else {
      const double exact = persistent + m.pool_lower_bound_bytes + m.non_tensor;
      EXPECT_GE(m.transient, m.pool_lower_bound_bytes);
      EXPECT_GE(m.peak_allocated, exact);
      EXPECT_LE(m.peak_allocated, exact + 1048576.0 * static_cast<double>(plan.buffers.size()));
    }
    EXPECT_DOUBLE_EQ(m.total, persistent + m.transient + m.non_tensor);
    EXPECT_DOUBLE_EQ(m.total, m.peak_reserved);
    EXPECT_GE(m.peak_reserved, m.peak_allocated);
    EXPECT_EQ(m.fits, m.headroom >= 0);
    // Each role's peak is at most the peak of everything.
    EXPECT_LE(m.activations, m.pool_lower_bound_bytes);
    EXPECT_LE(m.unsharded_weights + m.unsharded_grads, m.pool_lower_bound_bytes + 1);
  }
}

TEST(PlanMemory, MatchesTheClosedFormEstimateOfTransientPeaks) {
  // Root unit gathered throughout, plus 1 + prefetch layers; root grads plus two drained.
  const PlanMemory m = plan_memory(llama8b_plan({}));
  const auto expected = static_cast<double>(2 * (padded(kRoot, 8) + 2 * padded(kLayer, 8)));
  EXPECT_DOUBLE_EQ(m.unsharded_weights, expected);
  EXPECT_DOUBLE_EQ(m.unsharded_grads, expected);
}

// Megatron-FSDP's memory test: with separate streams, prefetch 1 and the drain at 2, the
// FSDP transient buffers (gathered weights and unreduced gradients of the wrapped units)
// stay below 5 unit-sized buffers.
TEST(PlanMemory, TransientFsdpBuffersStayBelowFiveUnits) {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    TransformerArch a;
    a.num_heads = 4;
    a.head_dim = 16;
    a.hidden_size = 64;
    a.num_kv_heads = 2;
    a.num_layers = std::uniform_int_distribution<int>(2, 12)(rng);
    a.vocab_size = 256;
    a.ffn_hidden_size = 32 * std::uniform_int_distribution<int>(1, 8)(rng);
    const ModelSpec model = build_transformer(a, "t", "test");
    const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
    const FsdpConfig c = resolve_fsdp_config(
        fsdp_config_from_json({{"seq_len", 64}, {"grad_accum", 1 + trial % 3}}, "cfg"), model,
        cluster, "cfg");
    const Plan plan = build_plan(model, cluster, c);
    ASSERT_FALSE(validate_plan(plan).has_value());
    int64_t unit_bytes = 0;
    std::vector<int64_t> live(plan.ops.size() + 1, 0);
    for (const PlanBuffer& b : plan.buffers) {
      if (b.persistent || b.unit <= 0) continue;
      if (b.role != BufferRole::unsharded_weight && b.role != BufferRole::unsharded_grad) continue;
      unit_bytes = std::max(unit_bytes, b.bytes);
      for (int64_t t = b.live_begin; t < b.live_end; ++t)
        live[static_cast<std::size_t>(t)] += b.bytes;
    }
    const int64_t peak = *std::max_element(live.begin(), live.end());
    EXPECT_LE(peak, 5 * unit_bytes) << a.num_layers << " layers";
    EXPECT_GE(peak, 2 * unit_bytes) << "prefetch 1 gathers two units at once";
  }
}

TEST(PlanMemory, FrozenParametersHaveNoOptimizerState) {
  ModelSpec model = load_model("tiny");
  for (Module& layer : model.root.children) {
    if (layer.name != "layers.0") continue;
    std::function<void(Module&)> freeze = [&](Module& m) {
      for (Parameter& p : m.parameters) p.requires_grad = false;
      for (Module& child : m.children) freeze(child);
    };
    freeze(layer);
  }
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 2);
  const FsdpConfig c =
      resolve_fsdp_config(fsdp_config_from_json({{"seq_len", 16}}, "cfg"), model, cluster, "cfg");
  const Plan plan = build_plan(model, cluster, c);
  ASSERT_FALSE(validate_plan(plan).has_value());
  const PlanUnit& frozen = plan.units[1];
  ASSERT_EQ(frozen.name, "layers.0");
  ASSERT_EQ(frozen.groups.size(), 1u);
  EXPECT_FALSE(plan.groups[static_cast<std::size_t>(frozen.groups[0])].requires_grad);
  for (const PlanBuffer& b : plan.buffers) {
    if (b.unit != 1) continue;
    EXPECT_TRUE(b.role == BufferRole::model_weight || b.role == BufferRole::unsharded_weight ||
                b.role == BufferRole::activations)
        << b.name;
  }
}

TEST(PlanMemory, BucketBytesSplitsLargeGroups) {
  const Plan whole = llama8b_plan({});
  const Plan split = llama8b_plan({{"bucket_bytes", 64 << 20}});
  EXPECT_EQ(whole.groups.size(), 33u);
  EXPECT_GT(split.groups.size(), whole.groups.size());
  for (const ParamGroup& g : split.groups) {
    // A bucket closes before the parameter that would overflow it; a single larger
    // parameter (the embedding) keeps a bucket of its own.
    EXPECT_TRUE(g.elements * 2 <= (64 << 20) || g.parameters.size() == 1) << g.id;
  }
}

// FSDP2 measured on one H200 (PyTorch 2.11, tests/data/h200/fsdp2_probe.json): a 4-layer
// Llama 3 8B (1 923 125 248 parameters) under fully_shard with torchtitan's mixed
// precision, AdamW, one micro-batch of 8192 tokens, no recompute. The layout is exact:
// 4 bytes per parameter after sharding, 12 after zero_grad (weights and Adam states), 16
// at the end of backward. The peak allocated (in the loss's backward) within 6 %: +4.7 %,
// the root's gradients, which the plan makes in the loss-and-output-layer backward op where
// the loss's workspace is, and FSDP2 just after it (the layout before this model, bf16
// shard + fp32 main copy + bf16 grads all step, gathers at the end of forward, was +24 %).
// fsdp2_memory_curve.json, the same step module by module: each layer's forward keeps
// exactly the plan's saved activations for the torch-eager stack.
TEST(PlanMemoryMeasured, Fsdp2LayoutOnH200) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h200/fsdp2_probe.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json measured = nlohmann::json::parse(in).at("fsdp2_memory");
  const ModelSpec model =
      load_model(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h200/llama3-8b-4layers.json");
  const ClusterSpec cluster = load_cluster("dgx-h200", std::nullopt, 1);
  const nlohmann::json j = {{"stack", "torch-eager"}, {"seq_len", 8192}, {"recompute", "none"}};
  const FsdpConfig c = resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
  const Plan plan = build_plan(model, cluster, c);
  const PlanMemory m = plan_memory(plan);
  const auto parameters = measured.at("parameters").get<double>();
  ASSERT_EQ(parameters, 1923125248.0);
  const nlohmann::json& step = measured.at("steps").at(2);  // steady state
  EXPECT_DOUBLE_EQ(m.model_weights, measured.at("after_shard").get<double>());
  const double after_zero_grad = step.at("after_zero_grad").get<double>();
  EXPECT_NEAR(m.model_weights + m.optimizer_states, after_zero_grad, 0.005 * after_zero_grad);
  EXPECT_NEAR(step.at("after_backward").get<double>() - after_zero_grad, m.main_grads,
              0.005 * m.main_grads);
  // memory_allocated excludes the CUDA context; the plan's peaks include it.
  const double peak =
      std::max(step.at("peak_forward").get<double>(), step.at("peak_loss_backward").get<double>());
  EXPECT_NEAR((m.peak_allocated - m.non_tensor) / peak, 1.0, 0.06)
      << m.peak_allocated - m.non_tensor;

  std::ifstream curve_in(std::string(SHARDPLAN_SOURCE_DIR) +
                         "/tests/data/h200/fsdp2_memory_curve.json");
  ASSERT_TRUE(curve_in.good());
  const nlohmann::json curve = nlohmann::json::parse(curve_in).at("steps").at(2);
  std::map<std::string, double> at;
  for (const auto& point : curve) at[point.at("at")] = point.at("allocated").get<double>();
  // FSDP2 reshards a layer after its forward: what stays is its saved activations.
  const double layer_params = 4096.0 * (4096 + 1024 + 1024 + 4096) + 3.0 * 4096 * 14336 + 2 * 4096;
  for (int i = 0; i < 4; ++i) {
    const std::string layer = "layers." + std::to_string(i);
    const double kept = at.at("fwd " + layer + " end") - at.at("fwd " + layer + " start") +
                        2.0 * layer_params;  // its bf16 unsharded weights, freed at the end
    for (const PlanBuffer& b : plan.buffers) {
      if (b.name == "activations " + layer + " mb0") {
        EXPECT_NEAR(static_cast<double>(b.bytes) / kept, 1.0, 0.005) << layer;
      }
    }
  }
}

}  // namespace
}  // namespace shardplan
