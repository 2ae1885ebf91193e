// The configuration search against configurations simulated one by one: its best is the
// true minimum, what it calls fitting fits, pruning drops nothing that would fit, and the
// thread count changes nothing.
#include "planner/sweep.h"

#include <gtest/gtest.h>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
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
  s.recompute = {Recompute::full};
  s.prefetch = {1};
  s.fp8_param_gather = {false};
  const auto configs = enumerate_configs(s, f.base, f.cluster.num_gpus);
  const int64_t cap = 40LL << 30;  // tight: ZeRO-1/2 state of 8B on 8 GPUs does not fit
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
  s.fp8_param_gather = {false};
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
    if (p.state == PointState::pruned)
      EXPECT_GE(p.memory_lower_bound, r.points[*advice.lowest_bound].memory_lower_bound);
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
