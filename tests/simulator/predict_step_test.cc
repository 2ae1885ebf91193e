// predict_step's extension of the step past a few micro-batches, held against whole
// simulations of every micro-batch.
#include "simulator/predict_step.h"

#include <gtest/gtest.h>

#include <string>

#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "simulator/simulate.h"

namespace shardplan {
namespace {

struct Case {
  const char* model;
  int64_t nodes;
  nlohmann::json config;
};

TEST(PredictStep, ExtendedStepMatchesTheWholeSimulation) {
  const Case cases[] = {
      {"tiny", 2, {{"sharding_strategy", "optim_grads_params"}, {"forward_prefetch", 1}}},
      {"tiny", 2, {{"sharding_strategy", "optim"}, {"recompute", "full"}}},
      {"tiny", 2, {{"sharding_strategy", "optim_grads"}, {"dp_outer", 2}}},
      {"tiny", 4, {{"dp_outer", 4}, {"outer_strategy", "optim"}, {"backward_prefetch", 2}}},
      {"tiny", 2, {{"tp", 2}, {"cp", 2}, {"recompute", "selective"}}},
      {"tiny", 2, {{"tp", 2}, {"tp_comm_overlap", true}, {"allocator", "pool"}}},
      {"llama3-8b", 4, {{"tp", 2}, {"recompute", "full"}, {"fp8_param_gather", true}}},
      {"llama3-8b", 8, {{"cp", 2}, {"dp_outer", 2}, {"async_reduce", false}}},
      {"llama3-8b", 2, {{"double_buffer", true}, {"sharding_strategy", "optim_grads"}}},
      {"llama3-8b", 2, {{"cp", 4}, {"cp_comm", "a2a"}, {"recompute", "full"}}},
      {"llama3-70b", 16, {{"tp", 8}, {"cp", 2}, {"dp_outer", 4}, {"outer_strategy", "optim"}}},
  };
  for (const Case& c : cases) {
    for (const int64_t g : {7, 12, 32}) {
      const ModelSpec model = load_model(c.model);
      const ClusterSpec cluster = load_cluster("dgx-h100", c.nodes, std::nullopt);
      nlohmann::json json = c.config;
      json["grad_accum"] = g;
      const FsdpConfig config =
          resolve_fsdp_config(fsdp_config_from_json(json, "t"), model, cluster, "t");
      const std::string label = json.dump();
      const TimelineSummary whole = simulate(build_plan(model, cluster, config), cluster).summary;
      const TimelineSummary fast = predict_step(model, cluster, config);
      EXPECT_NEAR(fast.step_seconds, whole.step_seconds, 1e-6 * whole.step_seconds) << label;
      EXPECT_NEAR(fast.compute_seconds, whole.compute_seconds, 1e-6 * whole.step_seconds) << label;
      EXPECT_NEAR(fast.tokens_per_second_per_gpu, whole.tokens_per_second_per_gpu,
                  1e-6 * whole.tokens_per_second_per_gpu)
          << label;
      EXPECT_NEAR(fast.mfu, whole.mfu, 1e-6 * whole.mfu) << label;
      EXPECT_NEAR(fast.tflops_per_gpu, whole.tflops_per_gpu, 1e-6 * whole.tflops_per_gpu) << label;
      EXPECT_NEAR(fast.exposed_all_gather_seconds, whole.exposed_all_gather_seconds,
                  1e-6 * whole.step_seconds)
          << label;
      EXPECT_NEAR(fast.exposed_reduce_scatter_seconds, whole.exposed_reduce_scatter_seconds,
                  1e-6 * whole.step_seconds)
          << label;
      EXPECT_NEAR(fast.exposed_model_parallel_seconds, whole.exposed_model_parallel_seconds,
                  1e-6 * whole.step_seconds)
          << label;
      EXPECT_NEAR(fast.critical_path.all_gather, whole.critical_path.all_gather,
                  1e-6 * whole.step_seconds)
          << label;
      EXPECT_EQ(fast.peak_allocated_bytes, whole.peak_allocated_bytes) << label;
      EXPECT_EQ(fast.peak_reserved_bytes, whole.peak_reserved_bytes) << label;
    }
  }
}

// On a Grace host (2.75 times the reference's CPU time per op) the host and the GPU are
// close, and the host may run ahead over two or three micro-batches and fall behind over
// more: the extension keeps to the whole simulation and never under the host's own time.
TEST(PredictStep, AHostBoundStepIsNotExtendedBelowTheHostsTime) {
  const Case cases[] = {
      {"llama3-8b", 1, {{"tp", 4}, {"micro_batch", 1}, {"seq_len", 2048}}},
      {"llama3-8b", 1, {{"tp", 2}, {"micro_batch", 1}, {"seq_len", 4096}}},
      {"llama3-8b", 1, {{"tp", 8}, {"micro_batch", 2}, {"seq_len", 8192}}},
      {"qwen3-30b-a3b",
       1,
       {{"ep", 8}, {"moe_dispatcher", "alltoall"}, {"micro_batch", 1}, {"seq_len", 4096}}},
  };
  for (const Case& c : cases) {
    for (const int64_t g : {7, 16, 48}) {
      const ModelSpec model = load_model(c.model);
      const ClusterSpec cluster = load_cluster("gb200-nvl72", std::nullopt, 8);
      nlohmann::json json = c.config;
      json["grad_accum"] = g;
      json["sharding_strategy"] = "optim";
      const FsdpConfig config =
          resolve_fsdp_config(fsdp_config_from_json(json, "t"), model, cluster, "t");
      const std::string label = json.dump();
      const Plan one = build_plan(model, cluster, [&] {
        FsdpConfig single = config;
        single.grad_accum = 1;
        return single;
      }());
      double host = 0;
      for (const PlanOp& op : one.ops) {
        if (op.kind == OpKind::forward || op.kind == OpKind::backward) host += op.host_seconds;
      }
      host *= cluster.host_cpu.time_scale;
      const TimelineSummary whole = simulate(build_plan(model, cluster, config), cluster).summary;
      const TimelineSummary fast = predict_step(model, cluster, config);
      EXPECT_GE(whole.step_seconds, static_cast<double>(g) * host * (1 - 1e-12)) << label;
      EXPECT_GE(fast.step_seconds, static_cast<double>(g) * host * (1 - 1e-12)) << label;
      EXPECT_NEAR(fast.step_seconds, whole.step_seconds, 0.01 * whole.step_seconds) << label;
    }
  }
}

}  // namespace
}  // namespace shardplan
