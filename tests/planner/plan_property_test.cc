// Properties every plan must have, over random small models × strategies × prefetch ×
// recompute × micro-batches: it validates, more sharding never raises persistent memory,
// the pool is at least its lower bound, and at most k + 1 layer units are gathered.
#include <gtest/gtest.h>

#include <random>

#include "models/transformer_builder.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_validator.h"

namespace shardplan {
namespace {

ModelSpec random_model(std::mt19937& rng) {
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  TransformerArch a;
  a.num_heads = 2 * pick(1, 4);
  a.num_kv_heads = a.num_heads / (pick(0, 1) == 0 ? 1 : 2);
  a.head_dim = 8 * pick(1, 4);
  a.hidden_size = a.num_heads * a.head_dim;
  a.num_layers = pick(1, 6);
  a.vocab_size = 64 * pick(1, 16);
  a.ffn_hidden_size = 16 * pick(1, 20);
  a.mlp = pick(0, 1) == 0 ? MlpKind::swiglu : MlpKind::gelu;
  a.tie_embeddings = pick(0, 1) == 1;
  a.bias = pick(0, 1) == 1;
  if (pick(0, 2) == 0) {
    a.num_experts = pick(2, 4);
    a.experts_per_token = 1;
    a.moe_ffn_hidden_size = 16 * pick(1, 8);
    a.moe_layers.assign(static_cast<std::size_t>(a.num_layers), true);
  }
  return build_transformer(a, "random", "test");
}

double persistent_bytes(const Plan& plan) {
  double total = 0;
  for (const PlanBuffer& b : plan.buffers)
    total += b.persistent ? static_cast<double>(b.bytes) : 0.0;
  return total;
}

// Layer units whose unsharded weights are live at each op.
int64_t max_gathered_layers(const Plan& plan) {
  std::vector<int64_t> live(plan.ops.size() + 1, 0);
  for (const PlanBuffer& b : plan.buffers) {
    if (b.persistent || b.role != BufferRole::unsharded_weight || b.unit == 0) continue;
    for (int64_t t = b.live_begin; t < b.live_end; ++t) ++live[static_cast<std::size_t>(t)];
  }
  return *std::max_element(live.begin(), live.end());
}

TEST(PlanProperties, RandomModelsAllStrategies) {
  std::mt19937 rng(20261122);
  const char* strategies[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
  const char* recomputes[] = {"none", "selective", "full"};
  for (int trial = 0; trial < 12; ++trial) {
    const ModelSpec model = random_model(rng);
    const int64_t gpus = 1 << std::uniform_int_distribution<int>(0, 3)(rng);
    const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, gpus);
    for (int64_t prefetch = 0; prefetch <= 3; ++prefetch) {
      for (const char* recompute : recomputes) {
        double previous = INFINITY;
        for (const char* strategy : strategies) {
          FsdpConfig config = fsdp_config_from_json({{"sharding_strategy", strategy},
                                                     {"forward_prefetch", prefetch},
                                                     {"backward_prefetch", prefetch},
                                                     {"recompute", recompute},
                                                     {"grad_accum", 1 + trial % 3},
                                                     {"seq_len", 64}},
                                                    "cfg");
          config = resolve_fsdp_config(config, model, cluster, "cfg");
          const Plan plan = build_plan(model, cluster, config);
          const auto error = validate_plan(plan);
          ASSERT_FALSE(error.has_value())
              << strategy << " prefetch " << prefetch << " " << recompute << ": " << error->message;
          EXPECT_GE(plan.pool.size_bytes, plan.pool.lower_bound_bytes);
          const double persistent = persistent_bytes(plan);
          EXPECT_LE(persistent, previous) << strategy;
          previous = persistent;
          if (config.sharding_strategy == ShardingStrategy::optim_grads_params) {
            EXPECT_LE(max_gathered_layers(plan), prefetch + 1) << "prefetch " << prefetch;
          }
        }
      }
    }
  }
}

TEST(PlanProperties, ZooModelsValidate) {
  for (const char* name : {"tiny", "llama3-8b", "mixtral-8x7b"}) {
    const ModelSpec model = load_model(name);
    const ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
    for (const nlohmann::json& extra :
         {nlohmann::json::object(), nlohmann::json{{"dp_outer", 2}, {"outer_strategy", "optim"}},
          nlohmann::json{{"double_buffer", true}},
          nlohmann::json{{"fp8_param_gather", true},
                         {"fp8_recipe", "mxfp8"},
                         {"keep_fp8_transpose_cache", true}},
          nlohmann::json{{"bucket_bytes", 1 << 20}, {"grad_accum", 2}}}) {
      nlohmann::json j = extra;
      j["seq_len"] = 4096;
      const FsdpConfig config =
          resolve_fsdp_config(fsdp_config_from_json(j, "cfg"), model, cluster, "cfg");
      const Plan plan = build_plan(model, cluster, config);
      const auto error = validate_plan(plan);
      EXPECT_FALSE(error.has_value()) << name << " " << extra.dump() << ": " << error->message;
    }
  }
}

}  // namespace
}  // namespace shardplan
