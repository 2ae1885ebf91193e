// The plan follows a StepTrace: the model's own order written as a trace gives the same
// plan byte for byte; another order or recompute placement changes exactly that.
#include <gtest/gtest.h>

#include "models/error.h"
#include "models/zoo.h"
#include "planner/plan_builder.h"
#include "planner/plan_json.h"
#include "planner/plan_validator.h"
#include "tests/expect_input_error.h"

namespace shardplan {
namespace {

struct Job {
  ModelSpec model = load_model("tiny");
  ClusterSpec cluster = load_cluster("dgx-h100", std::nullopt, 4);
  FsdpConfig config(const nlohmann::json& j) const {
    nlohmann::json c = j;
    c["seq_len"] = 64;
    return resolve_fsdp_config(fsdp_config_from_json(c, "cfg"), model, cluster, "cfg");
  }
};

TEST(StepTracePlan, TheModelsOwnOrderAsATraceGivesTheSamePlanByteForByte) {
  const Job job;
  for (const nlohmann::json& extra :
       {nlohmann::json::object(), nlohmann::json{{"recompute", "full"}, {"grad_accum", 2}},
        nlohmann::json{{"dp_outer", 2}, {"outer_strategy", "optim"}},
        nlohmann::json{{"sharding_strategy", "optim_grads"}, {"recompute", "selective"}}}) {
    const FsdpConfig c = job.config(extra);
    // Through JSON, as `plan --step-trace` reads it.
    const StepTrace trace =
        step_trace_from_json(step_trace_to_json(plan_step_trace(job.model, c)), "step.json");
    EXPECT_EQ(plan_to_json(build_plan(job.model, job.cluster, c, trace, "step.json")).dump(),
              plan_to_json(build_plan(job.model, job.cluster, c)).dump())
        << extra.dump();
  }
}

std::vector<std::string> segment_labels(const Plan& plan) {
  std::vector<std::string> labels;
  for (const PlanSegment& s : plan.segments) labels.push_back(s.label);
  return labels;
}

// An FSDP2 profile names units ("" the root); the layers run in its order, the root's
// modules keep their places around them.
TEST(StepTracePlan, AUnitLevelTraceOrdersTheLayers) {
  const Job job;
  const FsdpConfig c = job.config({});
  const StepTrace trace =
      generate_step_trace(job.model, {"", "layers.1", "layers.0", "layers.3", "layers.2"},
                          {false, false, false, false, false}, 1, Recompute::none);
  const Plan plan = build_plan(job.model, job.cluster, c, trace, "step.json");
  EXPECT_FALSE(validate_plan(plan).has_value());
  EXPECT_EQ(segment_labels(plan),
            (std::vector<std::string>{"embed_tokens", "layers.1", "layers.0", "layers.3",
                                      "layers.2", "norm+lm_head+loss"}));
  std::vector<std::string> gathers;
  for (const PlanOp& op : plan.ops) {
    if (op.kind == OpKind::all_gather && op.name.starts_with("ag_fwd layers."))
      gathers.push_back(op.name);
  }
  EXPECT_EQ(gathers, (std::vector<std::string>{"ag_fwd layers.1 mb0", "ag_fwd layers.0 mb0",
                                               "ag_fwd layers.3 mb0", "ag_fwd layers.2 mb0"}));
}

// Full recompute re-runs only the modules the trace re-ran, and keeps the others'
// activations.
TEST(StepTracePlan, FullRecomputeFollowsTheTracesPlacement) {
  const Job job;
  const FsdpConfig c = job.config({{"recompute", "full"}});
  StepTrace trace = plan_step_trace(job.model, c);
  std::vector<bool> checkpointed;
  for (const std::string& m : trace.modules)
    checkpointed.push_back(m == "layers.0" || m == "layers.2");
  trace = generate_step_trace(job.model, trace.modules, checkpointed, 1, Recompute::full);
  const Plan plan = build_plan(job.model, job.cluster, c, trace, "step.json");
  const Plan all = build_plan(job.model, job.cluster, c);
  std::vector<std::string> recomputed;
  for (const PlanOp& op : plan.ops) {
    if (op.kind == OpKind::recompute) recomputed.push_back(op.name);
  }
  EXPECT_EQ(recomputed,
            (std::vector<std::string>{"recompute layers.2 mb0", "recompute layers.0 mb0"}));
  for (std::size_t s = 0; s < plan.segments.size(); ++s) {
    const PlanSegment& kept = plan.segments[s];
    if (kept.label == "layers.1" || kept.label == "layers.3") {
      EXPECT_FALSE(kept.checkpointed);
      EXPECT_EQ(kept.activation_bytes, kept.full_activation_bytes) << kept.label;
      EXPECT_GT(kept.activation_bytes, all.segments[s].activation_bytes) << kept.label;
    }
  }
}

TEST(StepTracePlan, ATraceThatDoesNotFitTheJobIsRefused) {
  const Job job;
  const FsdpConfig c = job.config({});
  StepTrace other = plan_step_trace(job.model, job.config({{"grad_accum", 2}}));
  testing::expect_input_error([&] { build_plan(job.model, job.cluster, c, other, "step.json"); },
                              "/grad_accum",
                              "the step trace runs 2 micro-batches, the config's grad_accum is 1");
  StepTrace unknown = generate_step_trace(job.model, {"", "layers.0", "layers.1"},
                                          {false, false, false}, 1, Recompute::none);
  testing::expect_input_error([&] { build_plan(job.model, job.cluster, c, unknown, "step.json"); },
                              "/modules",
                              "match neither tiny's 8 traced modules nor its 5 FSDP units");
  const StepTrace none = plan_step_trace(job.model, c);
  StepTrace not_rerun = generate_step_trace(
      job.model, none.modules, std::vector<bool>(none.modules.size(), false), 1, Recompute::none);
  testing::expect_input_error(
      [&] {
        build_plan(job.model, job.cluster, job.config({{"recompute", "full"}}), not_rerun,
                   "step.json");
      },
      "/checkpointed", "no module of the step trace re-runs in backward");
}

TEST(StepTraceJson, BrokenTracesNameTheField) {
  const Job job;
  const nlohmann::json good = step_trace_to_json(plan_step_trace(job.model, job.config({})));
  nlohmann::json j = good;
  j["events"][0]["module"] = "layers.9";
  testing::expect_input_error([&] { step_trace_from_json(j, "step.json"); }, "/events/0/module",
                              "'layers.9' is not in /modules");
  j = good;
  j["events"].erase(1);  // layers' order loses nothing, but one post_forward is gone
  j["events"].erase(0);  // and the first pre_forward
  testing::expect_input_error([&] { step_trace_from_json(j, "step.json"); }, "/events",
                              "forward 0 and backward 1 times");
  j = good;
  j["events"][0]["kind"] = "pre_forwards";
  testing::expect_input_error([&] { step_trace_from_json(j, "step.json"); }, "/events/0/kind",
                              "unknown step event kind");
  j = good;
  j["checkpointed"].erase(0);
  testing::expect_input_error([&] { step_trace_from_json(j, "step.json"); }, "/checkpointed",
                              "one true/false per module");
}

}  // namespace
}  // namespace shardplan
