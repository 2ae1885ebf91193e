// End-to-end tests of `shardplan plan`: the summary, plan.json, and bad input.
#include "planner/plan.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json plan_json(std::vector<std::string> args) {
  args.insert(args.begin(), "plan");
  args.push_back("--json");
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return stdout_json(r);
}

TEST(PlanCommand, DefaultJobSummary) {
  const nlohmann::json j = plan_json({});
  EXPECT_EQ(j["model"], "llama3-8b");
  EXPECT_EQ(j["num_gpus"], 8);
  EXPECT_EQ(j["units"], 33);  // 32 decoder layers and the root unit
  const nlohmann::json& m = j["memory"];
  EXPECT_GE(m["pool_bytes"].get<double>(), m["pool_lower_bound_bytes"].get<double>());
  const double total = m["model_weights_bytes"].get<double>() +
                       m["main_weights_bytes"].get<double>() + m["main_grads_bytes"].get<double>() +
                       m["optimizer_states_bytes"].get<double>() +
                       m["double_buffers_bytes"].get<double>() +
                       m["transient_bytes"].get<double>() + m["non_tensor_bytes"].get<double>();
  EXPECT_DOUBLE_EQ(m["total_bytes"].get<double>(), total);
  EXPECT_EQ(m["fits"].get<bool>(), m["headroom_bytes"].get<double>() >= 0);
  // With the default caching allocator the total is the allocator's peak reserved, at
  // least the live peak, and the very figure simulate reports for the same job.
  EXPECT_GE(m["transient_bytes"].get<double>(), m["pool_lower_bound_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(m["total_bytes"].get<double>(), m["peak_reserved_bytes"].get<double>());
  EXPECT_GE(m["peak_reserved_bytes"].get<double>(), m["peak_allocated_bytes"].get<double>());
  const CommandResult sim = run_shardplan({"simulate", "--json"});
  ASSERT_EQ(sim.exit_code, 0) << sim.err;
  const nlohmann::json s = stdout_json(sim)["summary"];
  EXPECT_DOUBLE_EQ(s["peak_reserved_bytes"].get<double>(), m["total_bytes"].get<double>());
  EXPECT_DOUBLE_EQ(s["peak_allocated_bytes"].get<double>(),
                   m["peak_allocated_bytes"].get<double>());
  EXPECT_EQ(s["fits"].get<bool>(), m["fits"].get<bool>());
  const nlohmann::json pooled = plan_json({"--set", "allocator=pool"});
  EXPECT_DOUBLE_EQ(pooled["memory"]["transient_bytes"].get<double>(),
                   pooled["memory"]["pool_bytes"].get<double>());
}

TEST(PlanCommand, WritesAValidPlanFile) {
  const std::string path = write_temp_file("plan.json", "");
  std::filesystem::remove(path);
  const nlohmann::json j =
      plan_json({"--model", "tiny", "--gpus", "2", "--set", "grad_accum=2", "-o", path});
  std::ifstream in(path);
  ASSERT_TRUE(in.good());
  const nlohmann::json plan = nlohmann::json::parse(in);
  EXPECT_EQ(plan["version"], kPlanVersion);
  EXPECT_EQ(plan["ops"].size(), j["ops"].get<std::size_t>());
  EXPECT_EQ(plan["config"]["dp_shard"], 2);
  EXPECT_EQ(plan["ops"].back()["name"], "optimizer_step");
  // Every transient buffer has its live interval and pool offset.
  for (const auto& b : plan["buffers"]) {
    if (!b["persistent"].get<bool>()) {
      EXPECT_TRUE(b.contains("live") && b.contains("offset")) << b.dump();
    }
  }
}

TEST(PlanCommand, DoesNotFitNamesTheLargestTerm) {
  const CommandResult r =
      run_shardplan({"plan", "--model", "llama3-70b", "--set", "micro_batch=4"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("does not fit by"));
  EXPECT_THAT(r.out, HasSubstr("(largest term: activations)"));
}

struct BadPlan {
  const char* name;
  std::vector<std::string> args;
  const char* where;
  const char* reason;
};

class PlanRejects : public ::testing::TestWithParam<BadPlan> {};

TEST_P(PlanRejects, NamesTheField) {
  const BadPlan& bad = GetParam();
  std::vector<std::string> args = {"plan"};
  args.insert(args.end(), bad.args.begin(), bad.args.end());
  const CommandResult r = run_shardplan(args);
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_THAT(r.err, HasSubstr(bad.where));
  EXPECT_THAT(r.err, HasSubstr(bad.reason));
}

INSTANTIATE_TEST_SUITE_P(
    Plan, PlanRejects,
    ::testing::Values(
        BadPlan{
            "dp_shard", {"--set", "dp_shard=3"}, "config (with flags): /dp_shard", "must equal"},
        BadPlan{"units",
                {"--set", "unit_modules=[\"blocks.*\"]"},
                "/unit_modules/0",
                "matches no module"},
        BadPlan{"double_buffer_prefetch",
                {"--set", "double_buffer=true", "--set", "forward_prefetch=2"},
                "/forward_prefetch",
                "double_buffer holds two units"},
        BadPlan{"unknown_key", {"--set", "prefetch=2"}, "--set: prefetch", "unknown config key"},
        BadPlan{"unwritable_output",
                {"-o", "/nonexistent-dir/plan.json"},
                "/nonexistent-dir/plan.json",
                "cannot write"}),
    [](const auto& test_info) { return std::string(test_info.param.name); });

}  // namespace
}  // namespace shardplan::testing

namespace shardplan::testing {
namespace {

// An FSDP2 profile of a two-layer model, imported, drives the plan of that model.
nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(PlanCommand, FollowsAnImportedStepTrace) {
  nlohmann::json model = read_json(SHARDPLAN_SOURCE_DIR "/models/zoo/tiny.json");
  model["name"] = "tiny2";
  model["num_layers"] = 2;
  const std::string model_file = write_temp_file("tiny2.json", model.dump());
  const std::string step = write_temp_file("fsdp2_step.json", "");
  const CommandResult imported =
      run_shardplan({"trace", "import",
                     SHARDPLAN_SOURCE_DIR "/tests/data/fsdp2_two_layers_trace.json", "-o", step});
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const std::string out = write_temp_file("traced_plan.json", "");
  const CommandResult r = run_shardplan(
      {"plan", "--model", model_file, "--gpus", "4", "--step-trace", step, "-o", out, "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json plan = read_json(out);
  std::vector<std::string> labels;
  for (const auto& s : plan["segments"]) labels.push_back(s["label"]);
  EXPECT_EQ(labels, (std::vector<std::string>{"embed_tokens", "layers.0", "layers.1",
                                              "norm+lm_head+loss"}));
  // The same trace for the four-layer model is refused with the reason.
  const CommandResult wrong =
      run_shardplan({"plan", "--model", "tiny", "--gpus", "4", "--step-trace", step});
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_THAT(wrong.err, HasSubstr("/modules: the step trace's 3 modules match neither"));
}

}  // namespace
}  // namespace shardplan::testing
