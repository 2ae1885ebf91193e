// The configuration search against configurations simulated one by one: its best is the
// true minimum, what it calls fitting fits, pruning drops nothing that would fit, and the
// thread count changes nothing.
#include "planner/sweep.h"

#include <gtest/gtest.h>

#include <map>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "simulator/predict_step.h"
#include "simulator/simulate.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

struct Fixture {
  ModelSpec model = load_model("tiny");
  ClusterSpec cluster = load_cluster("dgx-h100", 2, std::nullopt);
  FsdpConfig base;
  Evaluator evaluate = [this](const FsdpConfig& c, const ClusterSpec& k) {
    return simulate(build_plan(model, k, c), k).summary;
  };
  SearchSpace space() const {
    SearchSpace s = default_search_space(model, cluster, base);
    s.tp = {1};
    s.cp = {1};
    s.dp_outer = {1, 2, 4};
    s.micro_batches = {1, 2};
    return s;
  }
};

TEST(Sweep, BestIsTheMinimumOverConfigurationsSimulatedOneByOne) {
  Fixture f;
  const auto configs = enumerate_configs(f.space(), f.base, f.cluster.num_gpus);
  ASSERT_GT(configs.size(), 100u);
  // The cap sits between the smallest and the largest peak, so some fit and some do not.
  const SweepResult all = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                        {.memory_cap = INT64_MAX, .threads = 2, .prune = false});
  std::vector<int64_t> peaks;
  for (const SweepPoint& p : all.points)
    if (p.state == PointState::evaluated) peaks.push_back(p.summary.peak_reserved_bytes);
  std::sort(peaks.begin(), peaks.end());
  const int64_t cap = peaks[peaks.size() / 2];
  const SweepResult r =
      sweep_configs(f.model, f.cluster, configs, f.evaluate, {.memory_cap = cap, .threads = 2});
  ASSERT_FALSE(r.ranking.empty());
  double best = INFINITY;
  for (const FsdpConfig& c : configs) {
    FsdpConfig resolved;
    try {
      if (c.grad_accum <= 0) continue;
      resolved = resolve_fsdp_config(fsdp_config_from_json(fsdp_config_to_json(c), "t"), f.model,
                                     f.cluster, "t");
    } catch (const InputError&) {
      continue;
    }
    const TimelineSummary s = f.evaluate(resolved, f.cluster);
    if (s.peak_reserved_bytes <= cap) best = std::min(best, s.step_seconds);
  }
  EXPECT_EQ(r.points[r.ranking.front()].summary.step_seconds, best);
  for (std::size_t i : r.ranking) {
    EXPECT_LE(r.points[i].summary.peak_reserved_bytes, cap);
    EXPECT_TRUE(r.points[i].fits);
  }
  for (std::size_t k = 1; k < r.ranking.size(); ++k) {
    EXPECT_LE(r.points[r.ranking[k - 1]].summary.step_seconds,
              r.points[r.ranking[k]].summary.step_seconds);
  }
  EXPECT_EQ(r.evaluated + r.pruned + r.invalid, static_cast<int64_t>(configs.size()));
}

TEST(Sweep, PruningNeverDropsAConfigurationThatFits) {
  Fixture f;
  f.model = load_model("llama3-8b");
  f.cluster = load_cluster("dgx-h100", 1, std::nullopt);
  SearchSpace s = default_search_space(f.model, f.cluster, f.base);
  s.tp = {1, 2};
  s.cp = {1, 2};
  s.dp_outer = {1, 2};
  s.micro_batches = {1, 2};
  s.prefetch = {1};
  s.fp8 = {false};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  // Tight: ZeRO-1/2 state of 8B on 8 GPUs does not fit, nor do saved activations of
  // 8192-token sequences without recompute.
  const int64_t cap = 40LL << 30;
  const SweepResult pruned =
      sweep_configs(f.model, f.cluster, configs, f.evaluate, {.memory_cap = cap, .threads = 2});
  const SweepResult full = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                         {.memory_cap = cap, .threads = 2, .prune = false});
  EXPECT_GT(pruned.pruned, 0);
  EXPECT_EQ(full.pruned, 0);
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (full.points[i].state != PointState::evaluated) continue;
    // The bound never exceeds what the simulation finds.
    EXPECT_LE(pruned.points[i].memory_lower_bound,
              static_cast<double>(full.points[i].summary.peak_allocated_bytes))
        << describe_config(full.points[i].config);
    if (full.points[i].fits) {
      EXPECT_EQ(pruned.points[i].state, PointState::evaluated)
          << describe_config(full.points[i].config);
    }
  }
  EXPECT_EQ(pruned.ranking, full.ranking);
}

// The space's fp8 runs FP8 GEMMs under every strategy: on FP8 weights (fp8_param_gather)
// under ZeRO-3, on bf16 weights with Transformer Engine's cached casts elsewhere. Every such
// point is valid, and the memory bound still holds (the cache is persistent in both).
TEST(Sweep, Fp8RunsUnderEveryStrategy) {
  Fixture f;
  SearchSpace s = f.space();
  s.strategies = {ShardingStrategy::no_shard, ShardingStrategy::optim,
                  ShardingStrategy::optim_grads, ShardingStrategy::optim_grads_params};
  s.fp8 = {true};
  s.dp_outer = {1};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const SweepResult r = sweep_configs(f.model, f.cluster, configs, f.evaluate, {.prune = false});
  ASSERT_EQ(r.points.size(), configs.size());
  EXPECT_EQ(r.invalid, 0);
  for (const SweepPoint& p : r.points) {
    EXPECT_TRUE(fp8_compute(p.config)) << describe_config(p.config);
    EXPECT_EQ(p.config.fp8_param_gather,
              p.config.sharding_strategy == ShardingStrategy::optim_grads_params)
        << describe_config(p.config);
    EXPECT_NE(describe_config(p.config).find(" fp8"), std::string::npos);
    ASSERT_EQ(p.state, PointState::evaluated) << p.reason;
    EXPECT_GT(p.memory_lower_bound, 0);
    EXPECT_LE(p.memory_lower_bound, static_cast<double>(p.summary.peak_allocated_bytes))
        << describe_config(p.config);
  }
}

// PyTorch FSDP's layout (main grads made by the first reduction) and activation offload
// (saved bytes leave the GPU): the pruning bound stays below every simulated peak.
TEST(Sweep, BoundHoldsForTorchLayoutAndActivationOffload) {
  Fixture f;
  f.base.stack = Stack::torch_eager;
  f.base.main_grad_dtype = DType::fp32;
  f.base.grad_reduce_dtype = DType::fp32;
  f.base.offload_activations = 2;
  SearchSpace s = f.space();
  s.dp_outer = {1};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const SweepResult r = sweep_configs(f.model, f.cluster, configs, f.evaluate, {.prune = false});
  int torch_layout = 0;
  for (const SweepPoint& p : r.points) {
    if (p.state != PointState::evaluated) continue;
    torch_layout += torch_fsdp_layout(p.config) ? 1 : 0;
    EXPECT_NE(describe_config(p.config).find(" offload2"), std::string::npos);
    EXPECT_LE(p.memory_lower_bound, static_cast<double>(p.summary.peak_allocated_bytes))
        << describe_config(p.config);
  }
  EXPECT_GT(torch_layout, 0);
}

// no_sync in the space (torch stacks): valid only under ZeRO-3 with more than one
// micro-batch; there it holds the unsharded accumulators (a higher peak than the same
// point reducing every micro-batch) and runs fewer reduce-scatters (no slower); the
// pruning bound stays below every simulated peak.
TEST(Sweep, NoSyncIsAnAxisOfTheSpace) {
  Fixture f;
  f.base.stack = Stack::torch_compile;
  f.base.main_grad_dtype = DType::fp32;
  f.base.grad_reduce_dtype = DType::fp32;
  SearchSpace s = f.space();
  s.dp_outer = {1};
  s.no_sync = {false, true};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const SweepResult r = sweep_configs(f.model, f.cluster, configs, f.evaluate, {.prune = false});
  std::map<std::string, const SweepPoint*> synced;
  for (const SweepPoint& p : r.points) {
    if (!p.config.no_sync && p.state == PointState::evaluated)
      synced[describe_config(p.config)] = &p;
  }
  int compared = 0, refused = 0;
  for (const SweepPoint& p : r.points) {
    if (!p.config.no_sync) continue;
    const bool applies = torch_fsdp_layout(p.config) && p.config.grad_accum > 1;
    if (!applies) {
      EXPECT_NE(p.state, PointState::evaluated) << describe_config(p.config);
      refused += p.state == PointState::invalid;
      continue;
    }
    ASSERT_EQ(p.state, PointState::evaluated) << describe_config(p.config) << p.reason;
    EXPECT_LE(p.memory_lower_bound, static_cast<double>(p.summary.peak_allocated_bytes))
        << describe_config(p.config);
    std::string label = describe_config(p.config);
    label.erase(label.find(" no_sync"), 8);
    const auto twin = synced.find(label);
    ASSERT_NE(twin, synced.end()) << label;
    EXPECT_GT(p.summary.peak_allocated_bytes, twin->second->summary.peak_allocated_bytes) << label;
    EXPECT_LE(p.summary.step_seconds, twin->second->summary.step_seconds * (1 + 1e-9)) << label;
    ++compared;
  }
  EXPECT_GT(compared, 0);
  EXPECT_GT(refused, 0);
}

// MoE models: ep and the dispatcher are axes of the default space; the best of a small
// space is the minimum over its points simulated one by one, and an expert mesh with HSDP
// (not modelled) is left out rather than listed.
TEST(Sweep, ExpertParallelismIsAnAxisForMoeModels) {
  Fixture f;
  f.model = load_model("tiny-moe");
  const SearchSpace defaults = default_search_space(f.model, f.cluster, f.base);
  EXPECT_EQ(defaults.ep, (std::vector<int64_t>{1}));  // 4 experts: no power of two from 8
  EXPECT_EQ(defaults.moe_dispatchers,
            (std::vector<MoeDispatcher>{MoeDispatcher::allgather, MoeDispatcher::alltoall}));
  const SearchSpace mixtral = default_search_space(
      load_model("mixtral-8x7b"), load_cluster("dgx-h100", 8, std::nullopt), f.base);
  EXPECT_EQ(mixtral.ep, (std::vector<int64_t>{1, 8}));
  EXPECT_EQ(default_search_space(load_model("tiny"), f.cluster, f.base).ep,
            (std::vector<int64_t>{1}));

  SearchSpace s = f.space();
  s.ep = {1, 2, 4};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  for (const FsdpConfig& c : configs) EXPECT_FALSE(c.ep > 1 && c.dp_outer > 1);
  const SweepResult r =
      sweep_configs(f.model, f.cluster, configs, f.evaluate,
                    {.memory_cap = default_memory_cap(f.cluster), .prune = false});
  double best = 1e30;
  int with_ep = 0;
  for (const SweepPoint& p : r.points) {
    if (p.state != PointState::evaluated) continue;
    with_ep += p.config.ep > 1;
    const TimelineSummary one = f.evaluate(p.config, f.cluster);
    EXPECT_DOUBLE_EQ(one.step_seconds, p.summary.step_seconds) << describe_config(p.config);
    if (p.fits) best = std::min(best, one.step_seconds);
  }
  EXPECT_GT(with_ep, 0);
  ASSERT_FALSE(r.ranking.empty());
  EXPECT_DOUBLE_EQ(r.points[r.ranking.front()].summary.step_seconds, best);
}

TEST(Sweep, ThreadCountChangesNothing) {
  Fixture f;
  const auto configs = enumerate_configs(f.space(), f.base, f.cluster.num_gpus);
  const SweepResult one =
      sweep_configs(f.model, f.cluster, configs, f.evaluate,
                    {.memory_cap = default_memory_cap(f.cluster), .threads = 1});
  const SweepResult four =
      sweep_configs(f.model, f.cluster, configs, f.evaluate,
                    {.memory_cap = default_memory_cap(f.cluster), .threads = 4});
  EXPECT_EQ(one.ranking, four.ranking);
  ASSERT_EQ(one.points.size(), four.points.size());
  for (std::size_t i = 0; i < one.points.size(); ++i) {
    EXPECT_EQ(one.points[i].summary.step_seconds, four.points[i].summary.step_seconds);
    EXPECT_EQ(one.points[i].pareto, four.points[i].pareto);
  }
}

TEST(Sweep, ParetoFrontHasNoDominatedPoint) {
  Fixture f;
  const auto configs = enumerate_configs(f.space(), f.base, f.cluster.num_gpus);
  const SweepResult r = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                      {.memory_cap = INT64_MAX, .threads = 2});
  int front = 0;
  for (const SweepPoint& p : r.points) {
    if (p.state != PointState::evaluated) continue;
    bool dominated = false;
    for (const SweepPoint& q : r.points) {
      if (q.state != PointState::evaluated) continue;
      if (q.summary.step_seconds <= p.summary.step_seconds &&
          q.summary.peak_reserved_bytes <= p.summary.peak_reserved_bytes &&
          (q.summary.step_seconds < p.summary.step_seconds ||
           q.summary.peak_reserved_bytes < p.summary.peak_reserved_bytes))
        dominated = true;
    }
    // On the front exactly when nothing is better in one and no worse in the other
    // (among equal points, the first in rank order).
    if (p.pareto) {
      ++front;
      EXPECT_FALSE(dominated) << describe_config(p.config);
    }
  }
  EXPECT_GE(front, 1);
}

// A mesh space on tiny: tp and cp 1 and 2 with every strategy, dp_outer, prefetch,
// recompute and micro-batch (hundreds of configurations, each simulated in well under a
// millisecond).
struct MeshFixture : Fixture {
  SearchSpace mesh_space() const {
    SearchSpace s = default_search_space(model, cluster, base);
    s.tp = {1, 2};
    s.cp = {1, 2};
    s.dp_outer = {1, 2};
    s.recompute = {Recompute::none, Recompute::full};
    s.micro_batches = {1, 2};
    return s;
  }
  std::function<double(const FsdpConfig&)> bound = [this](const FsdpConfig& c) {
    return compute_stream_seconds_per_micro_batch(model, cluster, c);
  };
};

// The step bound holds on every configuration simulated alone, is shared by each compute
// class, and is not vacuous.
TEST(Sweep, StepBoundNeverExceedsTheSimulatedStepAndIsSharedByItsClass) {
  MeshFixture f;
  const auto configs = enumerate_configs(f.mesh_space(), f.base, f.cluster.num_gpus);
  const SweepResult all = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                        {.memory_cap = INT64_MAX, .threads = 2, .prune = false});
  std::map<std::string, double> class_bound;
  double tightest = 0;
  int64_t checked = 0, meshes = 0;
  for (const SweepPoint& p : all.points) {
    if (p.state != PointState::evaluated) continue;
    const double per_micro_batch = f.bound(p.config);
    const double bound = static_cast<double>(p.config.grad_accum) * per_micro_batch;
    EXPECT_LE(bound, p.summary.step_seconds * (1 + 1e-12)) << describe_config(p.config);
    const auto [it, first] = class_bound.try_emplace(
        fsdp_config_to_json(compute_class(p.config)).dump(), per_micro_batch);
    if (!first) {
      EXPECT_DOUBLE_EQ(per_micro_batch, it->second) << describe_config(p.config);
    }
    tightest = std::max(tightest, bound / p.summary.step_seconds);
    ++checked;
    meshes += p.config.tp * p.config.cp > 1 ? 1 : 0;
  }
  EXPECT_GT(checked, 200);
  EXPECT_GT(meshes, 100);
  EXPECT_GT(tightest, 0.5);  // compute dominates some steps
  EXPECT_LT(class_bound.size(), static_cast<std::size_t>(checked) / 10);
}

// Pruning with the step bound simulates fewer configurations and keeps the fastest `keep`
// and the Pareto front of the sweep that simulates everything that fits in memory.
TEST(Sweep, StepBoundPruningKeepsTheTopAndTheFront) {
  MeshFixture f;
  const auto configs = enumerate_configs(f.mesh_space(), f.base, f.cluster.num_gpus);
  const SweepResult full = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                         {.memory_cap = INT64_MAX, .threads = 2});
  const SweepResult fast = sweep_configs(
      f.model, f.cluster, configs, f.evaluate,
      {.memory_cap = INT64_MAX, .threads = 2, .step_lower_bound = f.bound, .keep = 5});
  EXPECT_EQ(full.pruned_by_time, 0);
  EXPECT_GT(fast.pruned_by_time, 0);
  EXPECT_EQ(fast.evaluated + fast.pruned_by_time, full.evaluated);
  ASSERT_GE(fast.ranking.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(fast.ranking[k], full.ranking[k]) << k;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    EXPECT_EQ(fast.points[i].pareto, full.points[i].pareto) << describe_config(configs[i]);
    if (fast.points[i].state == PointState::evaluated) {
      EXPECT_EQ(fast.points[i].summary.step_seconds, full.points[i].summary.step_seconds);
    }
  }
}

// Without the front, the step bound prunes once the fastest `keep` are found: fewer
// simulations, the same top `keep`, and no point claims to be on a front nobody computed.
TEST(Sweep, WithoutTheFrontTheTopIsKeptWithFewerSimulations) {
  MeshFixture f;
  const auto configs = enumerate_configs(f.mesh_space(), f.base, f.cluster.num_gpus);
  const SweepResult front = sweep_configs(
      f.model, f.cluster, configs, f.evaluate,
      {.memory_cap = INT64_MAX, .threads = 2, .step_lower_bound = f.bound, .keep = 5});
  const SweepResult top = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                        {.memory_cap = INT64_MAX,
                                         .threads = 2,
                                         .step_lower_bound = f.bound,
                                         .keep = 5,
                                         .pareto = false});
  EXPECT_TRUE(front.pareto);
  EXPECT_FALSE(top.pareto);
  EXPECT_LT(top.evaluated, front.evaluated);
  ASSERT_GE(top.ranking.size(), 5u);
  for (std::size_t k = 0; k < 5; ++k) EXPECT_EQ(top.ranking[k], front.ranking[k]) << k;
  for (const SweepPoint& p : top.points) EXPECT_FALSE(p.pareto);
}

// Neither the thread count nor how a batch is spread (here: simulated last to first, as
// another process would) changes which configurations are simulated or the result.
TEST(Sweep, StepBoundPruningDependsOnNeitherThreadsNorBatchSpreading) {
  MeshFixture f;
  const auto configs = enumerate_configs(f.mesh_space(), f.base, f.cluster.num_gpus);
  SweepOptions options{
      .memory_cap = INT64_MAX, .threads = 1, .step_lower_bound = f.bound, .keep = 3};
  const SweepResult one = sweep_configs(f.model, f.cluster, configs, f.evaluate, options);
  options.threads = 3;
  const SweepResult three = sweep_configs(f.model, f.cluster, configs, f.evaluate, options);
  options.batch_evaluator =
      [](const std::vector<std::size_t>& batch,
         const std::function<std::vector<TimelineSummary>(const std::vector<std::size_t>&)>& here) {
        std::vector<TimelineSummary> out(batch.size());
        for (std::size_t k = batch.size(); k-- > 0;) out[k] = here({batch[k]}).at(0);
        return out;
      };
  const SweepResult reversed = sweep_configs(f.model, f.cluster, configs, f.evaluate, options);
  for (const SweepResult* r : {&three, &reversed}) {
    EXPECT_EQ(r->ranking, one.ranking);
    EXPECT_EQ(r->pruned_by_time, one.pruned_by_time);
    for (std::size_t i = 0; i < configs.size(); ++i) {
      EXPECT_EQ(r->points[i].state, one.points[i].state);
      EXPECT_EQ(r->points[i].summary.step_seconds, one.points[i].summary.step_seconds);
    }
  }
}

// The default space grows tp (to 8 inside a node) and cp (to 4) for transformers, keeps
// an explicit model's, and holds the global batch per data-parallel replica.
TEST(Sweep, DefaultSpaceSpansTheMeshAndHoldsTheGlobalBatch) {
  const ModelSpec big = load_model("llama3.1-405b");
  const ClusterSpec cluster = load_cluster("dgx-h100", 128, std::nullopt);
  const FsdpConfig base;
  const SearchSpace s = default_search_space(big, cluster, base);
  EXPECT_EQ(s.tp, (std::vector<int64_t>{1, 2, 4, 8}));
  EXPECT_EQ(s.cp, (std::vector<int64_t>{1, 2, 4}));
  SearchSpace one = s;
  one.tp = {8};
  one.cp = {2};
  one.strategies = {ShardingStrategy::optim_grads_params};
  one.dp_outer = {2};
  one.outer_strategies = {OuterStrategy::optim};
  one.prefetch = {1};
  one.recompute = {Recompute::full};
  one.micro_batches = {2};
  one.fp8 = {false};
  const std::vector<FsdpConfig> configs = enumerate_configs(one, base, cluster.num_gpus);
  ASSERT_EQ(configs.size(), 1u);
  // 4 sequences per GPU over 1024 GPUs; 1024 / (8 × 2) = 64 replicas hold 64 each.
  EXPECT_EQ(configs[0].grad_accum, 32);
  const FsdpConfig c = resolve_fsdp_config(configs[0], big, cluster, "t");
  EXPECT_EQ(c.dp_shard, 32);
  EXPECT_EQ(describe_config(c), "zero3 32×2(optim) tp8 cp2 pf1 full mb2×ga32");

  // FP8 changes the numerics: only a base that asks for it brings it into the space.
  EXPECT_EQ(s.fp8, (std::vector<bool>{false}));
  FsdpConfig fp8_base;
  fp8_base.fp8 = true;
  EXPECT_EQ(default_search_space(big, cluster, fp8_base).fp8, (std::vector<bool>{true}));
  // The allocator is the job's, not a choice the sweep makes.
  EXPECT_EQ(s.allocators, (std::vector<Allocator>{Allocator::caching}));
  FsdpConfig expandable_base;
  expandable_base.allocator = Allocator::expandable;
  EXPECT_EQ(default_search_space(big, cluster, expandable_base).allocators,
            (std::vector<Allocator>{Allocator::expandable}));

  const ModelSpec explicit_model =
      load_model(std::string(SHARDPLAN_SOURCE_DIR) + "/tests/data/captured_llama_small.json");
  const SearchSpace e = default_search_space(explicit_model, cluster, base);
  EXPECT_EQ(e.tp, (std::vector<int64_t>{1}));
  EXPECT_EQ(e.cp, (std::vector<int64_t>{1}));
}

TEST(Sweep, GlobalBatchFixesMicroBatchTimesAccumulation) {
  Fixture f;
  SearchSpace s = f.space();
  s.global_batch_sequences = 8 * f.cluster.num_gpus;
  s.micro_batches = {1, 2, 4, 3};
  for (const FsdpConfig& c : enumerate_configs(s, f.base, f.cluster.num_gpus)) {
    if (c.micro_batch == 3) {
      EXPECT_EQ(c.grad_accum, 0) << "3 does not divide 8 sequences per GPU";
    } else {
      EXPECT_EQ(c.micro_batch * c.grad_accum, 8);
    }
  }
  // In tokens: 16 × 512-token sequences per GPU.
  s = search_space_from_json({{"global_batch_tokens", 16 * 512 * f.cluster.num_gpus}}, "space.json",
                             s);
  FsdpConfig base;
  base.seq_len = 512;
  for (const FsdpConfig& c : enumerate_configs(s, base, f.cluster.num_gpus)) {
    if (c.grad_accum > 0) {
      EXPECT_EQ(c.micro_batch * c.grad_accum, 16);
    }
  }
}

TEST(Sweep, SpaceFileErrorsNameTheField) {
  const SearchSpace d;
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"sharding_strategy", {"zero3"}}}, "space.json", d);
      },
      "/sharding_strategy/0", "unknown sharding strategy 'zero3'");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"prefetch", {-1}}}, "space.json", d);
      },
      "/prefetch/0", "expected an integer ≥ 0");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"micro_batch", nlohmann::json::array()}}, "space.json", d);
      },
      "/micro_batch", "expected a non-empty list");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"recompute", {"most"}}}, "space.json", d);
      },
      "/recompute/0", "unknown recompute mode 'most'");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"micro_batches", {1}}}, "space.json", d);
      },
      "/micro_batches", "did you mean 'micro_batch'");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"global_batch_sequences", 8}, {"global_batch_tokens", 8}},
                               "space.json", d);
      },
      "/global_batch_tokens", "not both");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"tp", {0}}}, "space.json", d);
      },
      "/tp/0", "expected a positive integer");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"cp", 2}}, "space.json", d);
      },
      "/cp", "expected a non-empty list");
  testing::expect_input_error(
      [&] {
        search_space_from_json({{"moe_dispatcher", {"flex"}}}, "space.json", d);
      },
      "/moe_dispatcher/0", "unknown moe_dispatcher");
  EXPECT_EQ(search_space_from_json({{"ep", {1, 8}}}, "space.json", d).ep,
            (std::vector<int64_t>{1, 8}));
}

}  // namespace
}  // namespace shardplan

namespace shardplan {
namespace {

// Nothing fits on one node under a cap set at what the least-memory configuration needs
// on two (simulated here directly): the advice names that configuration and two nodes.
TEST(NoFitAdvice, GrowsTheLeastMemoryConfigurationToTheFirstNodeCountThatFits) {
  Fixture f;
  f.model = load_model("llama3-8b");  // big enough that sharding over more GPUs shows
  f.cluster = load_cluster("dgx-h100", 1, std::nullopt);
  SearchSpace s = f.space();
  s.strategies = {ShardingStrategy::optim_grads, ShardingStrategy::optim_grads_params};
  s.dp_outer = {1};
  s.prefetch = {1};
  s.recompute = {Recompute::none, Recompute::selective};
  s.micro_batches = {2};
  s.fp8 = {false};
  s.bucket_bytes = {std::nullopt};
  const std::vector<FsdpConfig> configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const SweepResult uncapped = sweep_configs(f.model, f.cluster, configs, f.evaluate,
                                             {.memory_cap = INT64_MAX, .threads = 2});
  std::size_t lowest = 0;
  for (std::size_t i = 1; i < uncapped.points.size(); ++i) {
    if (uncapped.points[i].summary.peak_reserved_bytes <
        uncapped.points[lowest].summary.peak_reserved_bytes)
      lowest = i;
  }
  const ClusterSpec two = load_cluster("dgx-h100", 2, std::nullopt);
  FsdpConfig grown = uncapped.points[lowest].config;
  grown.dp_shard = 0;
  grown = resolve_fsdp_config(grown, f.model, two, "test");
  const int64_t peak_on_two = f.evaluate(grown, two).peak_reserved_bytes;
  ASSERT_LT(peak_on_two, uncapped.points[lowest].summary.peak_reserved_bytes);

  const SweepResult capped =
      sweep_configs(f.model, f.cluster, configs, f.evaluate,
                    {.memory_cap = peak_on_two, .threads = 2, .prune = false});
  ASSERT_TRUE(capped.ranking.empty());
  const NoFitAdvice advice = advise_no_fit(capped, s, f.model, f.cluster, f.evaluate);
  ASSERT_TRUE(advice.lowest.has_value());
  EXPECT_EQ(*advice.lowest, lowest);
  EXPECT_EQ(advice.grown, advice.lowest);
  EXPECT_FALSE(advice.lowest_bound.has_value());
  EXPECT_TRUE(advice.try_full_recompute);   // the space left full recompute out
  EXPECT_TRUE(advice.try_micro_batch_one);  // and micro-batch 1
  EXPECT_EQ(advice.fits_on_nodes, 2);
  EXPECT_EQ(advice.fits_on_gpus, two.num_gpus);
  EXPECT_EQ(advice.fits_peak_reserved_bytes, peak_on_two);
}

// A cap of one byte prunes everything: the advice grows the pruned point with full
// recompute and the smallest micro-batch, and finds no node count where it fits.
TEST(NoFitAdvice, EverythingPrunedGrowsTheLeanestPointAndNeverFits) {
  Fixture f;
  SearchSpace s = f.space();
  s.dp_outer = {1};
  const std::vector<FsdpConfig> configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const SweepResult r =
      sweep_configs(f.model, f.cluster, configs, f.evaluate, {.memory_cap = 1, .threads = 2});
  ASSERT_EQ(r.pruned + r.invalid, static_cast<int64_t>(r.points.size()));
  const NoFitAdvice advice = advise_no_fit(r, s, f.model, f.cluster, f.evaluate);
  EXPECT_FALSE(advice.lowest.has_value());
  ASSERT_TRUE(advice.lowest_bound.has_value());
  for (const SweepPoint& p : r.points) {
    if (p.state == PointState::pruned) {
      EXPECT_GE(p.memory_lower_bound, r.points[*advice.lowest_bound].memory_lower_bound);
    }
  }
  ASSERT_TRUE(advice.grown.has_value());
  EXPECT_EQ(r.points[*advice.grown].config.recompute, Recompute::full);
  EXPECT_EQ(r.points[*advice.grown].config.micro_batch, 1);
  EXPECT_FALSE(advice.try_full_recompute);
  EXPECT_FALSE(advice.try_micro_batch_one);
  EXPECT_EQ(advice.fits_on_nodes, 0);
}

}  // namespace
}  // namespace shardplan
