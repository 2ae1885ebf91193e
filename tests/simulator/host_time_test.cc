// The host's clock in the simulation, on plans worked out by hand: a host slower than the
// GPU sets the pace, a faster one hides behind it, a sync drains the GPU first, and the
// cluster's CPU scales it.
#include <gtest/gtest.h>

#include "models/cluster_spec.h"
#include "planner/plan.h"
#include "simulator/simulate.h"
#include "tests/simulator/toy_cluster.h"

namespace shardplan {
namespace {

// The toy cluster (an op of x·1e12 FLOPs takes x seconds on the GPU) on a host
// `time_scale` times the reference.
ClusterSpec toy_cluster(double time_scale = 1.0) {
  ClusterSpec c = testing::toy_cluster();
  c.host_cpu.time_scale = time_scale;
  return c;
}

// A chain of compute ops on the compute stream, each `gpu` seconds of GPU work and `host`
// seconds to issue; `syncs` marks ops whose issue waits for the one before to end.
Plan chain(std::vector<double> gpu, std::vector<double> host, std::vector<bool> syncs = {}) {
  Plan p;
  p.model = "hand";
  p.cluster = "toy";
  p.num_gpus = 1;
  p.gpus_per_node = 8;
  p.tokens_per_gpu = 1000;
  p.capacity_bytes = int64_t{1} << 40;
  for (std::size_t i = 0; i < gpu.size(); ++i) {
    PlanOp op{.id = static_cast<int64_t>(i),
              .stream = Stream::compute,
              .kind = OpKind::forward,
              .name = "op" + std::to_string(i),
              .flops = gpu[i] * 1e12,
              .host_seconds = host[i],
              .host_sync = i < syncs.size() && syncs[i]};
    if (i > 0) op.deps = {static_cast<int64_t>(i - 1)};
    p.ops.push_back(op);
  }
  return p;
}

TEST(HostTime, WithoutHostWorkTheStepIsTheGpusAlone) {
  const Timeline t = simulate(chain({1, 2, 3}, {0, 0, 0}), toy_cluster());
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 6.0);
  EXPECT_DOUBLE_EQ(t.summary.host_wait_seconds, 0.0);
}

TEST(HostTime, AFasterHostHidesBehindTheGpu) {
  // The host issues op i over [i, i + 1); the GPU, 2 s per op, is always behind it.
  const Timeline t = simulate(chain({2, 2, 2}, {1, 1, 1}), toy_cluster());
  // Op 0 cannot end before the host has issued all of it (1 s): its 2 s of work decide.
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 6.0);
  EXPECT_DOUBLE_EQ(t.summary.host_wait_seconds, 0.0);
}

TEST(HostTime, ASlowerHostSetsThePace) {
  // Issue ends at 2, 4, 6: each op ends when its last kernel is issued (+0: its kernels run
  // as they arrive, 1 s of GPU work within 2 s of issuing).
  const Timeline t = simulate(chain({1, 1, 1}, {2, 2, 2}), toy_cluster());
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 6.0);
  ASSERT_EQ(t.ops.size(), 3u);
  EXPECT_DOUBLE_EQ(t.ops[1].start, 2.0);  // the host starts issuing op 1 at 2
  EXPECT_DOUBLE_EQ(t.ops[2].end, 6.0);
  // Each op ran 1 s and waited 1 s for the rest of its kernels: 3 s in all, on the
  // critical path as the host's.
  EXPECT_DOUBLE_EQ(t.summary.host_wait_seconds, 3.0);
  EXPECT_DOUBLE_EQ(t.summary.critical_path.host, 3.0);
  EXPECT_DOUBLE_EQ(t.summary.critical_path.compute, 3.0);
}

TEST(HostTime, AGraceHostTakesItsTimeScale) {
  const Timeline t = simulate(chain({1, 1, 1}, {2, 2, 2}), toy_cluster(2.5));
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 15.0);
}

TEST(HostTime, ASyncDrainsTheGpuBeforeTheHostGoesOn) {
  // Without the sync: the host issues ops 0-2 by 0.3 s and the GPU takes 3 s.
  EXPECT_DOUBLE_EQ(simulate(chain({1, 1, 1}, {0.1, 0.1, 0.1}), toy_cluster()).summary.step_seconds,
                   3.0);
  // Op 2's issue waits for op 1 to end (at 2 s), then takes 0.1 s: the GPU idles while the
  // host issues it, and op 2 ends at 2 + max(1, 0.1) = 3 (its kernels start as they come).
  const Timeline t =
      simulate(chain({1, 1, 1}, {0.1, 0.1, 0.1}, {false, false, true}), toy_cluster());
  EXPECT_DOUBLE_EQ(t.ops[2].start, 2.0);
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 3.0);
  // With a host slower than the GPU after the sync: op 2 is issued over [2, 4).
  const Timeline slow =
      simulate(chain({1, 1, 1}, {0.1, 0.1, 2.0}, {false, false, true}), toy_cluster());
  EXPECT_DOUBLE_EQ(slow.summary.step_seconds, 4.0);
  EXPECT_DOUBLE_EQ(slow.summary.host_wait_seconds, 1.0);
}

TEST(HostTime, SyncsTurnTheMaxOfSumsIntoASumOfMaxes) {
  // GPU 2, 0.5, 2, 0.5 s; host 0.5, 2, 0.5, 2 s. Free to run ahead, the host's and the
  // GPU's 5 s overlap: the step is 5 s.
  const std::vector<double> gpu = {2, 0.5, 2, 0.5}, host = {0.5, 2, 0.5, 2};
  EXPECT_DOUBLE_EQ(simulate(chain(gpu, host), toy_cluster()).summary.step_seconds, 5.0);
  // A sync before every op after the first: each waits for the one before to end, so the
  // step is the sum of max(host, GPU) per op, 2 + 2 + 2 + 2.
  const Timeline t = simulate(chain(gpu, host, {false, true, true, true}), toy_cluster());
  EXPECT_DOUBLE_EQ(t.summary.step_seconds, 8.0);
  EXPECT_DOUBLE_EQ(t.ops[3].start, 6.0);
  // Ops 1 and 3 ran 0.5 s and waited 1.5 s each for the rest of their kernels.
  EXPECT_DOUBLE_EQ(t.summary.host_wait_seconds, 3.0);
}

}  // namespace
}  // namespace shardplan
