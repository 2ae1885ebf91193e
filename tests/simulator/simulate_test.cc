// The discrete-event simulation on plans small enough to work out by hand: two units
// with given compute and collective times, prefetch 0 vs 1, async reduce on and off, the
// overlap slowdown and link sharing; then properties over real plans of random configs.
#include "simulator/simulate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/plan_builder.h"
#include "simulator/compute_model.h"
#include "tests/simulator/toy_cluster.h"

namespace shardplan {
namespace {

using testing::toy_cluster;

// An all-gather over 2 ranks in a node: NCCL's ring Simple, 8.4 µs base + 1 NVLink hop of
// 3.4 µs, then half the gathered bytes at the bus bandwidth (the Simple protocol wins for
// megabytes: LL pays half the bandwidth, LL128 0.92 of it plus 15.9 µs).
double ag_seconds(double bytes) {
  return (8.4 + 3.4) * 1e-6 + bytes * 0.5 / 1e9;
}

struct PlanMaker {
  Plan plan;
  PlanMaker() {
    plan.model = "hand";
    plan.cluster = "toy";
    plan.num_gpus = 2;
    plan.gpus_per_node = 8;
    plan.config.dp_shard = 2;
    plan.process_groups = {{.name = "dp_shard", .size = 2, .stride = 1}};
    plan.tokens_per_gpu = 1000;
    plan.capacity_bytes = int64_t{1} << 40;
  }
  int64_t compute(OpKind kind, double seconds, std::vector<int64_t> deps) {
    return add({.stream = Stream::compute, .kind = kind, .flops = seconds * 1e12}, deps);
  }
  int64_t collective(Stream stream, OpKind kind, double bytes, std::vector<int64_t> deps) {
    return add({.stream = stream, .kind = kind, .bytes = bytes, .group = 0}, deps);
  }
  int64_t add(PlanOp op, std::vector<int64_t> deps) {
    op.id = static_cast<int64_t>(plan.ops.size());
    op.name = "op" + std::to_string(op.id);
    op.deps = std::move(deps);
    plan.ops.push_back(op);
    return op.id;
  }
};

constexpr double kF = 5e-3;     // one unit's forward
constexpr double kBytes = 4e6;  // one unit's gathered weights: 2.0118 ms

// A power limit slows the tensor-core work of a compute op by the cluster's share and
// leaves its memory-bound part alone.
TEST(Simulate, PowerLimitSlowsTensorCoreWorkOnly) {
  PlanMaker m;
  m.add({.stream = Stream::compute, .kind = OpKind::forward, .bytes = 1e9, .flops = 1e12}, {});
  ClusterSpec c = toy_cluster();
  const double full = op_cost(m.plan, m.plan.ops[0], c).seconds;
  const double memory =
      1e9 / (c.gpu.hbm_measured_bandwidth_bytes_per_s * c.compute.elementwise_efficiency);
  c.gpu.tdp_watts = 700;
  c.gpu.power_limit_watts = 350;
  const double share = power_limited_compute_share(c.gpu);
  EXPECT_NEAR(share, std::pow(0.5, 0.48), 1e-12);
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, (full - memory) / share + memory, 1e-15);
}

// Attention runs at the cluster's SDPA (FlashAttention-2) efficiency on the PyTorch stacks
// with sdpa_backend flash, and at its fused attention efficiency under megatron-te and
// with cuDNN's SDPA; GEMMs are unchanged.
TEST(Simulate, AttentionEfficiencyFollowsTheStack) {
  PlanMaker m;
  m.add(
      {.stream = Stream::compute, .kind = OpKind::forward, .flops = 3e12, .attention_flops = 1e12},
      {});
  ClusterSpec c = toy_cluster();
  c.compute.attention_efficiency = 0.5;
  c.compute.sdpa_attention_efficiency = 0.25;
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, 2.0 + 1.0 / 0.5, 1e-12);
  m.plan.config.stack = Stack::torch_compile;
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, 2.0 + 1.0 / 0.5, 1e-12);
  m.plan.config.sdpa_backend = SdpaBackend::flash;
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, 2.0 + 1.0 / 0.25, 1e-12);
}

// Under FP8 the output layer's GEMMs stay in BF16 (Megatron builds it outside Transformer
// Engine; torchtitan filters it out of the Float8 conversion): its FLOPs run at the BF16
// rate, the rest of the GEMMs at the FP8 rate. The plan marks them on the loss segment's
// forward and backward ops: 2·h·V per token forward, twice that backward.
TEST(Simulate, OutputLayerStaysBf16UnderFp8) {
  PlanMaker m;
  m.add({.stream = Stream::compute,
         .kind = OpKind::forward,
         .flops = 3e12,
         .attention_flops = 1e12,
         .bf16_gemm_flops = 1e12},
        {});
  ClusterSpec c = toy_cluster();
  c.gpu.fp8_dense_flops = 2e12;
  c.compute.fp8_gemm_efficiency = 1;
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, 3.0, 1e-12);  // all BF16
  m.plan.config.fp8 = true;
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, 1.0 / 2.0 + 1.0 + 1.0, 1e-12);

  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  FsdpConfig config;
  config.fp8_param_gather = true;
  const Plan plan = build_plan(model, cluster, resolve_fsdp_config(config, model, cluster, "t"));
  const double head = 2.0 * 4096 * 128256 * 8192;
  double forward = 0, backward = 0;
  for (const PlanOp& op : plan.ops) {
    if (op.kind == OpKind::forward) forward += op.bf16_gemm_flops;
    if (op.kind == OpKind::backward) backward += op.bf16_gemm_flops;
  }
  EXPECT_DOUBLE_EQ(forward, head);
  EXPECT_DOUBLE_EQ(backward, 2.0 * head);
}

TEST(Simulate, CostsAreTheHandWorkedOnes) {
  PlanMaker m;
  m.compute(OpKind::forward, kF, {});
  m.collective(Stream::ag, OpKind::all_gather, kBytes, {});
  const ClusterSpec c = toy_cluster();
  EXPECT_NEAR(op_cost(m.plan, m.plan.ops[0], c).seconds, kF, 1e-15);
  const OpCost ag = op_cost(m.plan, m.plan.ops[1], c);
  EXPECT_NEAR(ag.seconds, ag_seconds(kBytes), 1e-15);
  EXPECT_NEAR(ag.latency_seconds, 11.8e-6, 1e-15);
  EXPECT_EQ(ag.tier, Tier::intra_node);
}

// Two units: gather u0, forward u0, gather u1 (prefetched, or after forward u0), forward u1.
Plan two_units(bool prefetch) {
  PlanMaker m;
  const int64_t ag0 = m.collective(Stream::ag, OpKind::all_gather, kBytes, {});
  const int64_t f0 = m.compute(OpKind::forward, kF, {ag0});
  const int64_t ag1 = m.collective(Stream::ag, OpKind::all_gather, kBytes,
                                   prefetch ? std::vector<int64_t>{} : std::vector<int64_t>{f0});
  m.compute(OpKind::forward, kF, {ag1, f0});
  return m.plan;
}

TEST(Simulate, PrefetchHidesTheSecondGather) {
  const double a = ag_seconds(kBytes);
  const Timeline with = simulate(two_units(true), toy_cluster());
  // ag1 runs beside forward u0 (a < kF), so forward u1 follows forward u0 directly.
  EXPECT_NEAR(with.summary.step_seconds, a + 2 * kF, 1e-12);
  EXPECT_NEAR(with.summary.exposed_all_gather_seconds, a, 1e-12);
  EXPECT_NEAR(with.ops[2].start, a, 1e-12);
  const Timeline without = simulate(two_units(false), toy_cluster());
  EXPECT_NEAR(without.summary.step_seconds, 2 * a + 2 * kF, 1e-12);
  EXPECT_NEAR(without.summary.exposed_all_gather_seconds, 2 * a, 1e-12);
  EXPECT_NEAR(without.summary.compute_seconds, 2 * kF, 1e-12);
  // Critical path: ag0, f0, ag1, f1 without prefetch; ag0, f0, f1 with it.
  EXPECT_EQ(without.critical_path, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(with.critical_path, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_NEAR(without.summary.critical_path.all_gather, 2 * a, 1e-12);
  EXPECT_NEAR(without.summary.critical_path.compute, 2 * kF, 1e-12);
}

// Backward of u1 then u0, each followed by its reduce-scatter; with async reduce off the
// backward of u0 waits for the reduce-scatter of u1. Then the optimizer step.
Plan backward_pass(bool async_reduce) {
  PlanMaker m;
  const int64_t b1 = m.compute(OpKind::backward, 2 * kF, {});
  const int64_t rs1 = m.collective(Stream::rs, OpKind::reduce_scatter, kBytes, {b1});
  const int64_t b0 = m.compute(OpKind::backward, 2 * kF,
                               async_reduce ? std::vector<int64_t>{b1} : std::vector<int64_t>{rs1});
  const int64_t rs0 = m.collective(Stream::rs, OpKind::reduce_scatter, kBytes, {b0});
  m.add({.stream = Stream::compute, .kind = OpKind::optimizer_step, .bytes = 1e9}, {rs0, rs1});
  return m.plan;
}

TEST(Simulate, AsyncReduceOverlapsTheReduceScatter) {
  // Reduce-scatter over 2 ranks: the same ring cost as the all-gather of the same bytes.
  const double r = ag_seconds(kBytes);
  const double opt = 1e9 / 1e12;  // memory-bound: bytes ÷ HBM bandwidth
  const Timeline async = simulate(backward_pass(true), toy_cluster());
  EXPECT_NEAR(async.summary.step_seconds, 4 * kF + r + opt, 1e-12);
  EXPECT_NEAR(async.summary.exposed_reduce_scatter_seconds, r, 1e-12);
  const Timeline sync = simulate(backward_pass(false), toy_cluster());
  EXPECT_NEAR(sync.summary.step_seconds, 4 * kF + 2 * r + opt, 1e-12);
  EXPECT_NEAR(sync.summary.exposed_reduce_scatter_seconds, 2 * r, 1e-12);
  EXPECT_NEAR(sync.summary.critical_path.optimizer, opt, 1e-12);
}

// Blocking collectives on the compute stream are communication, charged by their group:
// an FSDP reduction (no async_reduce) as reduce-scatter, a tensor-parallel gather as tp/cp.
TEST(Simulate, BlockingCollectivesAreChargedToTheirGroup) {
  const double r = ag_seconds(kBytes);
  PlanMaker m;
  m.plan.process_groups = {{.name = "dp_shard_cp", .size = 2, .stride = 1},
                           {.name = "tp", .size = 2, .stride = 1}};
  const int64_t b = m.compute(OpKind::backward, kF, {});
  const int64_t rs = m.collective(Stream::compute, OpKind::reduce_scatter, kBytes, {b});
  PlanOp tp{.stream = Stream::compute, .kind = OpKind::all_gather, .bytes = kBytes, .group = 1};
  m.add(tp, {rs});
  const Timeline t = simulate(m.plan, toy_cluster());
  const PathBreakdown& p = t.summary.critical_path;
  EXPECT_NEAR(p.compute, kF, 1e-12);
  EXPECT_NEAR(p.reduce_scatter, r, 1e-12);
  EXPECT_NEAR(p.model_parallel, r, 1e-12);
  // Neither counts as compute time; the tp gather is exposed model-parallel time.
  EXPECT_NEAR(t.summary.compute_seconds, kF, 1e-12);
  EXPECT_NEAR(t.summary.exposed_model_parallel_seconds, r, 1e-12);
}

TEST(Simulate, ComputeOverlappingACollectiveSlowsDown) {
  ClusterSpec c = toy_cluster();
  c.compute.overlap_slowdown = 0.5;
  PlanMaker m;
  m.compute(OpKind::forward, kF, {});
  m.collective(Stream::ag, OpKind::all_gather, kBytes, {});
  const Timeline t = simulate(m.plan, c);
  // While the gather runs (a seconds) the forward moves at 1/1.5; the rest at full speed.
  const double a = ag_seconds(kBytes);
  EXPECT_NEAR(t.ops[1].end, a, 1e-12);
  EXPECT_NEAR(t.ops[0].end, a + (kF - a / 1.5), 1e-12);
}

TEST(Simulate, CollectivesOnOneTierShareItsBandwidth) {
  PlanMaker m;
  m.collective(Stream::ag, OpKind::all_gather, kBytes, {});
  m.collective(Stream::rs, OpKind::reduce_scatter, 2 * kBytes, {});
  const Timeline t = simulate(m.plan, toy_cluster());
  // Both pay their 11.8 µs latency alone, then split the bus until the smaller is done.
  const double l = 11.8e-6;
  const double a = ag_seconds(kBytes), r = ag_seconds(2 * kBytes);
  EXPECT_NEAR(t.ops[0].end, l + 2 * (a - l), 1e-12);
  EXPECT_NEAR(t.ops[1].end, a + r - l, 1e-12);
}

// ---- properties over plans the planner builds

FsdpConfig random_config(std::mt19937& rng) {
  FsdpConfig c;
  const std::vector<ShardingStrategy> strategies = {
      ShardingStrategy::no_shard, ShardingStrategy::optim, ShardingStrategy::optim_grads,
      ShardingStrategy::optim_grads_params};
  c.sharding_strategy = strategies[rng() % strategies.size()];
  c.forward_prefetch = static_cast<int64_t>(rng() % 3);
  c.backward_prefetch = static_cast<int64_t>(rng() % 3);
  c.grad_accum = 1 + static_cast<int64_t>(rng() % 3);
  c.micro_batch = 1 + static_cast<int64_t>(rng() % 2);
  c.seq_len = 512;
  c.async_reduce = rng() % 2 == 0;
  c.recompute = static_cast<Recompute>(rng() % 3);
  c.allocator = rng() % 2 == 0 ? Allocator::pool : Allocator::caching;
  if (rng() % 3 == 0) c.dp_outer = 2;
  return c;
}

struct Case {
  ModelSpec model = load_model("tiny");
  ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  FsdpConfig config;
};

TEST(SimulateProperties, FasterHardwareNeverSlowsAStep) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    Case k;
    k.config = resolve_fsdp_config(random_config(rng), k.model, k.cluster, "test");
    const Plan plan = build_plan(k.model, k.cluster, k.config);
    const double base = simulate(plan, k.cluster).summary.step_seconds;
    for (int change = 0; change < 3; ++change) {
      ClusterSpec faster = k.cluster;
      if (change == 0) faster.gpu.bf16_dense_flops *= 2;
      if (change == 1) faster.intra_node.measured_bus_bandwidth_bytes_per_s *= 2;
      if (change == 2) faster.inter_node.measured_bus_bandwidth_bytes_per_s *= 2;
      EXPECT_LE(simulate(plan, faster).summary.step_seconds, base * (1 + 1e-12))
          << "trial " << trial << " change " << change;
    }
  }
}

TEST(SimulateProperties, PrefetchNeverExposesMoreCommunication) {
  std::mt19937 rng(12);
  for (int trial = 0; trial < 30; ++trial) {
    Case k;
    FsdpConfig c = random_config(rng);
    c.sharding_strategy = ShardingStrategy::optim_grads_params;
    c.forward_prefetch = c.backward_prefetch = 0;
    const FsdpConfig none = resolve_fsdp_config(c, k.model, k.cluster, "test");
    c.forward_prefetch = c.backward_prefetch = 1;
    const FsdpConfig one = resolve_fsdp_config(c, k.model, k.cluster, "test");
    const Timeline a = simulate(build_plan(k.model, k.cluster, none), k.cluster);
    const Timeline b = simulate(build_plan(k.model, k.cluster, one), k.cluster);
    EXPECT_LE(b.summary.exposed_all_gather_seconds,
              a.summary.exposed_all_gather_seconds * (1 + 1e-9) + 1e-15)
        << "trial " << trial;
    auto exposed = [](const TimelineSummary& s) {
      return s.exposed_all_gather_seconds + s.exposed_reduce_scatter_seconds +
             s.exposed_outer_seconds;
    };
    EXPECT_LE(exposed(b.summary), exposed(a.summary) * (1 + 1e-9) + 1e-15) << "trial " << trial;
  }
}

TEST(SimulateProperties, MemoryCurveAgreesWithItsSummary) {
  std::mt19937 rng(13);
  for (int trial = 0; trial < 30; ++trial) {
    Case k;
    k.config = resolve_fsdp_config(random_config(rng), k.model, k.cluster, "test");
    const Plan plan = build_plan(k.model, k.cluster, k.config);
    const Timeline t = simulate(plan, k.cluster);
    ASSERT_FALSE(t.memory.empty());
    int64_t peak_allocated = 0, peak_reserved = 0;
    for (const MemorySample& s : t.memory) {
      EXPECT_GE(s.reserved, s.allocated) << "trial " << trial << " at " << s.time;
      peak_allocated = std::max(peak_allocated, s.allocated);
      peak_reserved = std::max(peak_reserved, s.reserved);
    }
    EXPECT_EQ(t.summary.peak_allocated_bytes, peak_allocated);
    EXPECT_EQ(t.summary.peak_reserved_bytes, peak_reserved);
    EXPECT_EQ(t.summary.fits, peak_reserved <= plan.capacity_bytes);
    // Ops respect their dependencies and their streams run one op at a time.
    for (const PlanOp& op : plan.ops) {
      for (int64_t d : op.deps)
        EXPECT_GE(t.ops[static_cast<std::size_t>(op.id)].start,
                  t.ops[static_cast<std::size_t>(d)].end - 1e-15);
    }
    // The critical path spans the step: its op times add up to the step time.
    const PathBreakdown& p = t.summary.critical_path;
    EXPECT_NEAR(p.compute + p.all_gather + p.reduce_scatter + p.outer + p.optimizer +
                    p.model_parallel + p.offload + p.host,
                t.summary.step_seconds, 1e-9 * t.summary.step_seconds);
  }
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// Published measurements the whole model (FLOPs, kernel efficiencies, NCCL, overlap) is
// held against: torchtitan's docs/performance.md, Llama 3 with FSDP2 on 64 A100 80GB
// (8 nodes), local batch 1, sequence 8192 (torchtitan's default): 8B with selective op
// checkpointing 2973 tokens/s per GPU (MFU 58.2 %); 70B with full checkpointing 331
// tokens/s per GPU (MFU 51.7 %).
TEST(SimulatePublished, TorchtitanLlama3OnA100WithinFifteenPercent) {
  const ClusterSpec cluster = load_cluster("dgx-a100", 8, std::nullopt);
  struct Anchor {
    const char* model;
    Recompute recompute;
    double tokens_per_second;
  };
  for (const Anchor& a :
       {Anchor{"llama3-8b", Recompute::sac_op, 2973}, Anchor{"llama3-70b", Recompute::full, 331}}) {
    const ModelSpec model = load_model(a.model);
    FsdpConfig c;
    c.micro_batch = 1;
    c.seq_len = 8192;
    c.recompute = a.recompute;
    c.stack = Stack::torch_eager;  // torchtitan of 2024, without torch.compile
    const Plan plan = build_plan(model, cluster, resolve_fsdp_config(c, model, cluster, "test"));
    const Timeline t = simulate(plan, cluster);
    EXPECT_NEAR(t.summary.tokens_per_second_per_gpu / a.tokens_per_second, 1.0, 0.15) << a.model;
    EXPECT_TRUE(t.summary.fits) << a.model;
  }
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// torchtitan's context-parallel sweep (benchmarks/llama3_h100_202412_torchtitan.md,
// Table 2): Llama 3.1 8B on 8 H100 96 GB, Float8, full checkpointing, local batch 1; the
// sequence and cp double together (FSDP 8 × CP 1 at 32k ... FSDP 1 × CP 8 at 256k):
// 3890, 2540, 1071, 548 tokens/s per GPU. Absolute levels belong to the software stack
// (docs/model.md); the relative fall from the first doubling (attention's quadratic
// FLOPs) is held within 10 %, and every doubling must cost throughput.
TEST(SimulatePublished, TorchtitanCpSweep) {
  const ClusterSpec cluster = load_cluster("h100-96gb", 1, std::nullopt);
  const ModelSpec model = load_model("llama3-8b");
  std::vector<double> tokens;
  for (int64_t cp = 1; cp <= 8; cp *= 2) {
    FsdpConfig c;
    c.cp = cp;
    c.seq_len = 32768 * cp;
    c.recompute = Recompute::full;
    c.fp8_param_gather = true;
    c.stack = Stack::torch_compile;
    const Plan plan = build_plan(model, cluster, resolve_fsdp_config(c, model, cluster, "test"));
    tokens.push_back(simulate(plan, cluster).summary.tokens_per_second_per_gpu);
  }
  EXPECT_NEAR(tokens[1] / tokens[0], 2540.0 / 3890.0, 0.1 * 2540.0 / 3890.0);
  for (std::size_t k = 1; k < tokens.size(); ++k) EXPECT_LT(tokens[k], tokens[k - 1]) << k;
}

// NeMo's long-sequence table (NVIDIA/NeMo docs/source/performance/
// performance_long_sequence.md, LLAMA2-7B FP8 on DGX-H100, NeMo 24.03): Megatron-Core with
// Transformer Engine, tp × cp × dp with the distributed optimizer (ZeRO-1: `optim`),
// ring-attention CP, 4M tokens per step, the GPUs and the sequence doubling together.
// The table gives Megatron's model TFLOP/s per GPU; tokens/s per GPU is that ÷ Megatron's
// FLOPs per token (training.py num_floating_point_operations: 12·L·h²·(2 + s/h + 1.5·f/h
// + V/(2·L·h)) for this MHA model, non-causal attention). Each doubling's fall in tokens/s
// per GPU is held within 10 % of the measured one; nothing in the model was set from it
// (docs/model.md "Against published runs with tensor and context parallelism").
TEST(SimulatePublished, NemoLongSequenceCpSweepFallsAsMeasured) {
  struct Row {
    int64_t seq_k, gpus, batch, tp, dp, cp;
    double megatron_tflops;
  };
  const std::vector<Row> rows = {{16, 16, 256, 2, 8, 1, 660},   {32, 32, 128, 2, 8, 2, 610},
                                 {64, 64, 64, 4, 8, 2, 574},    {128, 128, 32, 4, 8, 4, 555},
                                 {256, 256, 16, 4, 8, 8, 549},  {512, 512, 8, 8, 4, 16, 549},
                                 {1024, 1024, 4, 8, 4, 32, 536}};
  const ModelSpec model = load_model("llama2-7b");
  std::vector<double> measured, predicted;
  for (const Row& row : rows) {
    const double s = static_cast<double>(row.seq_k) * 1024.0;
    const double h = 4096, layers = 32, ffn = 11008, vocab = 32000;
    const double flops_per_token =
        12.0 * layers * h * h * (2.0 + s / h + 1.5 * ffn / h + vocab / (2.0 * layers * h));
    measured.push_back(row.megatron_tflops * 1e12 / flops_per_token);
    const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, row.gpus);
    FsdpConfig c;
    c.sharding_strategy = ShardingStrategy::optim;
    c.tp = row.tp;
    c.cp = row.cp;
    c.seq_len = row.seq_k * 1024;
    c.grad_accum = row.batch / row.dp;
    c.fp8 = true;
    const FsdpConfig resolved = resolve_fsdp_config(c, model, cluster, "test");
    ASSERT_EQ(resolved.dp_shard, row.dp);
    const Timeline t = simulate(build_plan(model, cluster, resolved), cluster);
    EXPECT_TRUE(t.summary.fits) << row.seq_k;
    predicted.push_back(t.summary.tokens_per_second_per_gpu);
  }
  for (std::size_t k = 1; k < rows.size(); ++k) {
    const double want = measured[k] / measured[k - 1];
    EXPECT_NEAR(predicted[k] / predicted[k - 1], want, 0.1 * want) << rows[k].seq_k << "k";
  }
}

// Decoder layers timed on an H100 SXM (700 W, PyTorch 2.11, eager, bf16, causal SDPA;
// tools/measure/h100_probe.py, tests/data/h100_layer_times.json): Llama 3 8B at 1 × 8192
// and 2 × 4096 tokens, Llama 3 70B at 1 × 8192; medians of 10. The simulator's layer ops
// on one GPU (no collectives, so no overlap slowdown) must be within 15 %.
TEST(SimulatePublished, DecoderLayersOnH100WithinFifteenPercentOfMeasured) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h100_layer_times.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json runs = nlohmann::json::parse(in);
  ASSERT_EQ(runs.size(), 3u);
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 1);
  for (const auto& measured : runs) {
    const ModelSpec model = load_model(measured["model"].get<std::string>());
    FsdpConfig c;
    c.micro_batch = measured["micro_batch"];
    c.seq_len = measured["seq_len"];
    const Plan plan = build_plan(model, cluster, resolve_fsdp_config(c, model, cluster, "test"));
    const Timeline t = simulate(plan, cluster);
    double forward = 0, backward = 0;
    for (const TimelineOp& op : t.ops) {
      if (op.name == "fwd layers.0 mb0") forward = op.end - op.start;
      if (op.name == "bwd layers.0 mb0") backward = op.end - op.start;
    }
    EXPECT_NEAR(forward / measured["forward_seconds_median"].get<double>(), 1.0, 0.15)
        << measured.dump();
    EXPECT_NEAR(backward / measured["backward_seconds_median"].get<double>(), 1.0, 0.15)
        << measured.dump();
  }
}

// The same layer timed on an H200 (PyTorch 2.11, tools/measure/fsdp2_probe.py,
// tests/data/h200/fsdp2_probe.json) with each layer under torch.compile: 6.64 / 13.99 ms.
// PyTorch 2.11 runs SDPA on cuDNN there (sdpa_probe.json: 0.56 / 0.52 of the BF16 peak):
// the torch-compile stack with sdpa_backend cudnn is within 10 %; with FlashAttention-2
// (the SDPA of the published torchtitan runs) it is slower by the attention alone.
TEST(SimulatePublished, LayersOnH200WithPyTorch211Kernels) {
  std::ifstream in(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/h200/fsdp2_probe.json");
  ASSERT_TRUE(in.good());
  const nlohmann::json probe = nlohmann::json::parse(in);
  auto measured = [&](bool compiled) -> const nlohmann::json* {
    for (const auto& t : probe.at("layer_times")) {
      if (t.at("compiled").get<bool>() == compiled) return &t;
    }
    return nullptr;
  };
  const nlohmann::json* compiled = measured(true);
  const nlohmann::json* eager = measured(false);
  ASSERT_NE(compiled, nullptr);
  ASSERT_NE(eager, nullptr);
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h200", std::nullopt, 1);
  // The first layer's forward and backward op times for a stack and SDPA backend.
  auto layer = [&](const char* stack, const char* backend) {
    const nlohmann::json j = {{"seq_len", 8192}, {"stack", stack}, {"sdpa_backend", backend}};
    const Plan plan = build_plan(
        model, cluster, resolve_fsdp_config(fsdp_config_from_json(j, "t"), model, cluster, "t"));
    const Timeline t = simulate(plan, cluster);
    std::pair<double, double> out;
    for (const TimelineOp& op : t.ops) {
      if (op.name == "fwd layers.0 mb0") out.first = op.end - op.start;
      if (op.name == "bwd layers.0 mb0") out.second = op.end - op.start;
    }
    return out;
  };
  // With the H200's measured GEMM table (dgx-h200: GEMMs by shape) −1.4 % / −2.8 %; one
  // gemm_efficiency (0.70) gave +5.9 % / +4.4 %.
  const auto [forward, backward] = layer("torch-compile", "cudnn");
  EXPECT_NEAR(forward / compiled->at("forward_seconds_median").get<double>(), 1.0, 0.05);
  EXPECT_NEAR(backward / compiled->at("backward_seconds_median").get<double>(), 1.0, 0.05);
  const auto [fa2_forward, fa2_backward] = layer("torch-compile", "flash");
  EXPECT_GT(fa2_forward, forward * 1.05);
  EXPECT_GT(fa2_backward, backward * 1.05);
  // Eager, 6.75 / 14.47 ms measured: the torch-eager stack with PyTorch 2.11's fused
  // RMSNorm within 8 % (+4.0 % / +0.5 %: it also prices torchtitan's complex-fp32 RoPE,
  // which the probe's layer does not run).
  const auto [eager_forward, eager_backward] = layer("torch-eager", "cudnn");
  EXPECT_NEAR(eager_forward / eager->at("forward_seconds_median").get<double>(), 1.0, 0.08);
  EXPECT_NEAR(eager_backward / eager->at("backward_seconds_median").get<double>(), 1.0, 0.08);
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// Eager PyTorch's unfused elementwise kernels, worked by hand for one Llama 3 8B layer
// (h 4096, 8 KV heads of 128 = 1024, FFN 14336): two RMSNorms in fp32 pieces plus their
// residual adds 2 × 19h, RoPE on q and k through complex fp32 8·(h + kv), SiLU and its
// product apart 2·F = 225 280 more bf16 elements per token than a fused stack moves; a
// LayerNorm model (MPT) pays only the residual adds (aten's layer_norm is one kernel), as
// does an RMSNorm model on recent PyTorch (fused_rms_norm).
TEST(EagerTraffic, LlamaLayerMovesWhatItsKernelsReadAndWrite) {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  auto layer_io = [&](const ModelSpec& m, Stack stack, bool fused_rms_norm = false) {
    FsdpConfig config;
    config.stack = stack;
    config.seq_len = 2048;
    config.fused_rms_norm = fused_rms_norm;
    const Plan plan = build_plan(m, cluster, resolve_fsdp_config(config, m, cluster, "t"));
    for (const PlanSegment& s : plan.segments) {
      if (s.label == "layers.3") return s.io_bytes;
    }
    ADD_FAILURE() << "no layers.3 segment";
    return 0.0;
  };
  const double tokens = 2048;  // micro-batch 1
  const double extra = 2 * 19 * 4096.0 + 8 * (4096.0 + 1024.0) + 2 * 14336.0;
  EXPECT_DOUBLE_EQ(layer_io(model, Stack::torch_eager) - layer_io(model, Stack::torch_compile),
                   extra * tokens * 2);
  EXPECT_DOUBLE_EQ(layer_io(model, Stack::torch_compile), layer_io(model, Stack::megatron_te));
  // Recent PyTorch fuses F.rms_norm: the norms' 16 h go, their residual adds' 3 h stay.
  const double fused_extra = 2 * 3 * 4096.0 + 8 * (4096.0 + 1024.0) + 2 * 14336.0;
  EXPECT_DOUBLE_EQ(
      layer_io(model, Stack::torch_eager, true) - layer_io(model, Stack::torch_compile),
      fused_extra * tokens * 2);
  const ModelSpec mpt = load_model("mpt-7b");
  EXPECT_DOUBLE_EQ(layer_io(mpt, Stack::torch_eager) - layer_io(mpt, Stack::torch_compile),
                   2 * 3 * 4096.0 * tokens * 2);
}

}  // namespace
}  // namespace shardplan
