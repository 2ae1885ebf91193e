// Compute calibration from a measured timeline: a timeline made by the simulator with
// known efficiencies stands in for the executor's, so the right answer is known.
#include <gtest/gtest.h>

#include <cmath>

#include "calibrate/calibrate.h"
#include "models/zoo.h"
#include "planner/fsdp_config.h"
#include "planner/plan_builder.h"
#include "simulator/simulate.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

struct Job {
  ClusterSpec cluster;
  Plan plan;
};

Job llama_job() {
  const ModelSpec model = load_model("llama3-8b");
  ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 8);
  // The constants' fit, on work at efficiency 1: without the file's GEMM tables, under
  // which GEMMs run at their shapes' rates (calibrate leaves them out of what it fits).
  cluster.compute.gemm_tables.clear();
  Plan plan = build_plan(model, cluster, resolve_fsdp_config(FsdpConfig{}, model, cluster, "t"));
  return {cluster, plan};
}

TEST(ComputeFit, MeasuredTimelineMovesTheStepWithinTwoPercent) {
  const Job job = llama_job();
  ClusterSpec truth = job.cluster;
  truth.compute.gemm_efficiency = 0.55;
  truth.compute.attention_efficiency = 0.35;
  truth.compute.elementwise_efficiency = 0.6;
  truth.compute.optimizer_efficiency = 0.7;
  truth.compute.overlap_slowdown = 0.3;
  Timeline measured = simulate(job.plan, truth);
  measured.source = "measured";
  ClusterSpec fitted = job.cluster;
  CalibrationReport report;
  fit_compute(fitted, job.plan, measured, "measured.json", report);
  const double step = measured.summary.step_seconds;
  const double before = simulate(job.plan, job.cluster).summary.step_seconds;
  const double after = simulate(job.plan, fitted).summary.step_seconds;
  EXPECT_GT(std::abs(before / step - 1), 0.10);  // the defaults are far off
  EXPECT_NEAR(after / step, 1.0, 0.02);
  // The GEMMs carry most of the time: their efficiency comes back closely.
  EXPECT_NEAR(fitted.compute.gemm_efficiency, 0.55, 0.55 * 0.05);
  EXPECT_NEAR(fitted.compute.optimizer_efficiency, 0.7, 0.7 * 0.05);
  ASSERT_GE(report.checks.size(), 2u);
  EXPECT_EQ(report.checks.back().what, "step time (measured.json)");
  EXPECT_LT(report.checks.back().rms_after, 0.02);
  bool reported_gemm = false;
  for (const FittedConstant& c : report.constants) {
    if (c.name == "compute.gemm_efficiency") {
      reported_gemm = true;
      EXPECT_DOUBLE_EQ(c.before, 0.70);
      EXPECT_DOUBLE_EQ(c.after, fitted.compute.gemm_efficiency);
    }
  }
  EXPECT_TRUE(reported_gemm);
}

TEST(ComputeFit, TimelineOfAnotherPlanOrPredictedIsAnError) {
  const Job job = llama_job();
  Timeline t = simulate(job.plan, job.cluster);
  ClusterSpec c = job.cluster;
  CalibrationReport report;
  testing::expect_input_error([&] { fit_compute(c, job.plan, t, "p.json", report); }, "source",
                              "needs a timeline `shardplan execute` measured");
  t.source = "measured";
  t.ops[3].name = "other";
  testing::expect_input_error([&] { fit_compute(c, job.plan, t, "p.json", report); }, "ops/3",
                              "measured for another plan");
}

// A measured op of 1e308 s, and ops a thousand times slower (or a hundred times faster)
// than the plan's work at the peak: errors naming the timeline and the constant, before
// the fitted cluster is simulated (at efficiencies near 1e-300 that never ended).
TEST(ComputeFit, FitsOutsidePhysicalRangesNameTheTimeline) {
  const Job job = llama_job();
  Timeline measured = simulate(job.plan, job.cluster);
  measured.source = "measured";
  std::size_t compute = 0;
  while (job.plan.ops[static_cast<std::size_t>(measured.ops[compute].op)].kind != OpKind::forward)
    ++compute;
  Timeline huge = measured;
  huge.ops[compute].end = huge.ops[compute].start + 1e308;
  ClusterSpec c = job.cluster;
  CalibrationReport report;
  testing::expect_input_error([&] { fit_compute(c, job.plan, huge, "m.json", report); },
                              "ops/" + std::to_string(compute),
                              "no op of a training step lasts an hour", "m.json");
  for (const double factor : {1000.0, 0.01}) {
    SCOPED_TRACE(factor);
    Timeline scaled = measured;
    for (TimelineOp& op : scaled.ops) {
      op.start *= factor;
      op.end *= factor;
    }
    c = job.cluster;
    testing::expect_input_error(
        [&] { fit_compute(c, job.plan, scaled, "m.json", report); }, "compute.gemm_efficiency",
        factor > 1 ? "below the 0.01 of its peak" : "faster than the GPU's datasheet peak",
        "m.json");
  }
}

// A probe's copies faster than the measured HBM bandwidth allows by 3x: an error; by 5 %,
// held at 1 and said so.
TEST(ComputeFit, ProbeKernelsAboveThePeak) {
  ClusterSpec c = load_cluster("dgx-h100", std::nullopt, std::nullopt);
  const double bandwidth = c.gpu.hbm_measured_bandwidth_bytes_per_s;
  auto copies = [&](double efficiency) {
    return std::vector<ProbeKernel>{
        {.gemm = false, .bytes = 1e9, .seconds = 1e9 / (efficiency * bandwidth)},
        {.gemm = false, .bytes = 4e9, .seconds = 4e9 / (efficiency * bandwidth)}};
  };
  CalibrationReport report;
  testing::expect_input_error([&] { fit_probe_kernels(c, copies(3.0), "p.json", report); },
                              "compute.elementwise_efficiency", "ran 3 times faster", "p.json");
  testing::expect_input_error([&] { fit_probe_kernels(c, copies(0.002), "p.json", report); },
                              "compute.elementwise_efficiency", "ran 500 times slower", "p.json");
  fit_probe_kernels(c, copies(1.05), "p.json", report);
  EXPECT_EQ(c.compute.elementwise_efficiency, 1.0);
  EXPECT_EQ(report.constants.back().note, "measured above the peak: held at 1");
}

}  // namespace
}  // namespace shardplan
