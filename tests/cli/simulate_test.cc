// End-to-end tests of `shardplan simulate`: the summary, the Chrome trace, the timeline
// file, simulating a saved plan, and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/run_command.h"

namespace shardplan::testing {
namespace {

using ::testing::HasSubstr;

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

std::string fresh_path(const std::string& name) {
  const std::string path = write_temp_file(name, "");
  std::filesystem::remove(path);
  return path;
}

TEST(SimulateCommand, DefaultJobPredictsAPlausibleStep) {
  const CommandResult r = run_shardplan({"simulate", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = stdout_json(r);
  const nlohmann::json& s = j["summary"];
  EXPECT_EQ(j["model"], "llama3-8b");
  EXPECT_EQ(j["source"], "predicted");
  const double step = s["step_seconds"].get<double>();
  EXPECT_GT(step, 0);
  // tokens/s/GPU is the 8192 tokens of the default micro-batch over the step.
  EXPECT_NEAR(s["tokens_per_second_per_gpu"].get<double>() * step, 8192.0, 1e-6);
  EXPECT_GT(s["mfu"].get<double>(), 0.1);
  EXPECT_LT(s["mfu"].get<double>(), 1.0);
  EXPECT_GE(s["peak_reserved_bytes"].get<int64_t>(), s["peak_allocated_bytes"].get<int64_t>());
  EXPECT_LE(s["compute_seconds"].get<double>(), step * (1 + 1e-12));
  const nlohmann::json& p = s["critical_path"];
  EXPECT_NEAR(p["compute"].get<double>() + p["all_gather"].get<double>() +
                  p["reduce_scatter"].get<double>() + p["outer"].get<double>() +
                  p["optimizer"].get<double>(),
              step, 1e-9 * step);
  const CommandResult text = run_shardplan({"simulate"});
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("step time"));
  EXPECT_THAT(text.out, HasSubstr("critical path"));
}

TEST(SimulateCommand, ChromeTraceHasWhatPerfettoReads) {
  const std::string trace = fresh_path("trace.json");
  const CommandResult r =
      run_shardplan({"simulate", "--model", "tiny", "--gpus", "2", "--trace-out", trace});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = read_json(trace);
  ASSERT_TRUE(j["traceEvents"].is_array());
  std::set<std::string> threads;
  int slices = 0, counters = 0;
  for (const auto& e : j["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("name")) << e.dump();
    const std::string ph = e["ph"];
    if (ph == "M" && e["name"] == "thread_name") threads.insert(e["args"]["name"]);
    if (ph == "X") {
      ++slices;
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e.contains("tid")) << e.dump();
      EXPECT_GE(e["dur"].get<double>(), 0);
      EXPECT_TRUE(e["args"].contains("bytes") && e["args"].contains("flops"));
    }
    if (ph == "C") {
      ++counters;
      EXPECT_TRUE(e["args"]["allocated"].is_number() && e["args"]["reserved"].is_number());
    }
  }
  EXPECT_TRUE(threads.contains("compute") && threads.contains("ag") && threads.contains("rs"));
  EXPECT_GT(slices, 10);
  EXPECT_GT(counters, 2);
}

TEST(SimulateCommand, SavedPlanSimulatesLikeTheJob) {
  const std::string plan = fresh_path("sim_plan.json");
  const std::string timeline = fresh_path("timeline.json");
  ASSERT_EQ(run_shardplan({"plan", "--model", "tiny", "--gpus", "4", "-o", plan}).exit_code, 0);
  const CommandResult direct =
      run_shardplan({"simulate", "--model", "tiny", "--gpus", "4", "--json"});
  const CommandResult saved =
      run_shardplan({"simulate", "--plan", plan, "--timeline-out", timeline, "--json"});
  ASSERT_EQ(saved.exit_code, 0) << saved.err;
  EXPECT_EQ(stdout_json(direct)["summary"], stdout_json(saved)["summary"]);
  const nlohmann::json t = read_json(timeline);
  EXPECT_EQ(t["version"], 1);
  EXPECT_EQ(t["ops"].size(), read_json(plan)["ops"].size());
  EXPECT_FALSE(t["memory"].empty());
}

TEST(SimulateCommand, BadInputIsAClearError) {
  const std::string plan = fresh_path("bad_plan.json");
  ASSERT_EQ(run_shardplan({"plan", "--model", "tiny", "--gpus", "2", "-o", plan}).exit_code, 0);
  // --plan fixes the model and the GPUs.
  CommandResult r = run_shardplan({"simulate", "--plan", plan, "--model", "llama3-8b"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("--model: cannot be combined with --plan"));
  // A plan made for a cluster that is not built in needs its file.
  nlohmann::json j = read_json(plan);
  j["cluster"] = "my-cluster";
  const std::string other = write_temp_file("other_cluster_plan.json", j.dump());
  r = run_shardplan({"simulate", "--plan", other});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("cluster 'my-cluster', which is not built in"));
  // An inconsistent plan is refused, naming the file.
  j = read_json(plan);
  j["ops"][2]["deps"] = {5};
  const std::string broken = write_temp_file("broken_plan.json", j.dump());
  r = run_shardplan({"simulate", "--plan", broken});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("broken_plan.json"));
  EXPECT_THAT(r.err, HasSubstr("bad_dependency"));
  // An unwritable trace path fails before anything is written.
  const std::string timeline = fresh_path("never.json");
  r = run_shardplan({"simulate", "--model", "tiny", "--gpus", "2", "--trace-out",
                     "/nonexistent/dir/trace.json", "--timeline-out", timeline});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, HasSubstr("/nonexistent/dir/trace.json"));
  EXPECT_FALSE(std::filesystem::exists(timeline));
}

}  // namespace
}  // namespace shardplan::testing
