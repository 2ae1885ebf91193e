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

}  // namespace
}  // namespace shardplan
